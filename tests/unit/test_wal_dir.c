/*
 * test_wal_dir.c -- the WAL directory's owner (src/wal/wal_dir.c, wal.h).
 *
 * The mode policy: the directory the log makes is 0700 (its parents 0755,
 * an existing one kept as it is), and every file in it 0600 -- the
 * segments, LOCK, RESERVE, CHECKPOINT.tmp, an ingress offset, a replaced
 * small file. wal_dir_replace_file() leaves the old file or the new one
 * after a failure at any step it can be made to fail at here (the tmp
 * cannot be created; the rename is refused), never a mix and never a tmp
 * of its own behind; wal_dir_read_file() reads what is there;
 * wal_dir_open_sub()/wal_dir_remove_sub() make and remove a log's
 * subdirectory, leaving files that are not the log's for people.
 *
 * The umask is set to 022 first, so the modes checked are the ones asked.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/wal.h"
#include "wal/wal_int.h" /* wal_open(), and the log's own functions the tests reach */
#include "delay-bridge/ingress_off.h"
#include "delay-bridge/walckpt.h"

#include "check.h"

static char root[] = "/tmp/test_wal_dir.XXXXXX";

/* The permission bits of path, or -1 if it is not there. */
static int mode_of(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* What path holds, NUL-ended in out (empty if there is no file). */
static void get_file(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(out, 1, n - 1, f) : 0;

    out[k] = '\0';
    if (f)
        fclose(f);
}

static void make(void)
{
    char p[512], q[512];

    snprintf(p, sizeof(p), "%s/a/b/wal", root);
    CHECK(wal_dir_make(p) == 0);
    CHECK(mode_of(p) == 0700, "the WAL directory: %o", mode_of(p));
    snprintf(q, sizeof(q), "%s/a/b", root);
    CHECK(mode_of(q) == 0755, "a parent made on the way: %o", mode_of(q));
    CHECK(wal_dir_make(p) == 0, "an existing one is fine");

    /* an existing directory keeps its mode (the docker image's 0750 volume) */
    snprintf(q, sizeof(q), "%s/kept", root);
    CHECK(mkdir(q, 0750) == 0);
    CHECK(chmod(q, 0750) == 0);
    CHECK(wal_dir_make(q) == 0);
    CHECK(mode_of(q) == 0750, "%o", mode_of(q));

    int fd = wal_dir_open(p);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(wal_dir_open("/nonexistent/test_wal_dir") == -ENOENT);
    CHECK(wal_dir_sync(p) == 0);
}

/* A log's own files: segments, LOCK, RESERVE, CHECKPOINT.tmp, all 0600. */
static void log_files(void)
{
    char p[512], f[600];
    struct wal_opts o;
    struct wal *w = NULL;
    struct walrec_piece pc = {"hello", 5};

    snprintf(p, sizeof(p), "%s/log", root);
    memset(&o, 0, sizeof(o));
    o.dir = p;
    o.no_sync = 1;
    o.segment_bytes = 64 << 10;
    o.reserve_bytes = 8 << 10;
    CHECK(wal_open(&w, &o, NULL, NULL) == 0);
    if (!w)
        return;
    CHECK(wlog_append(wal_log(w), WALREC_ADD, &pc, 1, NULL, NULL) == 0);
    CHECK(wal_commit(w) == 0);
    CHECK(mode_of(p) == 0700, "the directory wal_open made: %o", mode_of(p));
    snprintf(f, sizeof(f), "%s/00000000000000000001.wal", p);
    CHECK(mode_of(f) == 0600, "a segment: %o", mode_of(f));
    snprintf(f, sizeof(f), "%s/LOCK", p);
    CHECK(mode_of(f) == 0600, "LOCK: %o", mode_of(f));
    snprintf(f, sizeof(f), "%s/RESERVE", p);
    CHECK(mode_of(f) == 0600, "RESERVE: %o", mode_of(f));
    wlog_close(wal_log(w));

    struct walckpt *c = NULL;
    int dfd = wal_dir_open(p);
    CHECK(dfd >= 0 && walckpt_create(&c, dfd, p, 1, 1) == 0);
    snprintf(f, sizeof(f), "%s/%s", p, WALCKPT_TMP_NAME);
    CHECK(mode_of(f) == 0600, "CHECKPOINT.tmp: %o", mode_of(f));
    walckpt_free(c);
    if (dfd >= 0)
        close(dfd);

    /* the ingress offsets live here too */
    struct ingress_off io;
    int64_t next, upto;
    char err[256];
    CHECK(ingress_off_open(&io, p, "orders", &next, &upto, err, sizeof(err)) == 0, "%s", err);
    ingress_off_close(&io);
    snprintf(f, sizeof(f), "%s/ingress-orders.offset", p);
    CHECK(mode_of(f) == 0600, "an ingress offset: %o", mode_of(f));
}

static void replace_file(void)
{
    char p[512], f[600], t[600], got[64];

    snprintf(p, sizeof(p), "%s/small", root);
    CHECK(wal_dir_make(p) == 0);
    snprintf(f, sizeof(f), "%s/NOTE", p);
    snprintf(t, sizeof(t), "%s/NOTE.tmp", p);

    CHECK(wal_dir_read_file(p, "NOTE", got, sizeof(got)) == -ENOENT);
    CHECK(wal_dir_replace_file(p, "NOTE", "old", 3) == 0);
    get_file(f, got, sizeof(got));
    CHECK(strcmp(got, "old") == 0, "%s", got);
    CHECK(mode_of(f) == 0600, "%o", mode_of(f));
    CHECK(mode_of(t) == -1, "no tmp left behind");
    CHECK(wal_dir_replace_file(p, "NOTE", "newer", 5) == 0);
    memset(got, 0, sizeof(got));
    CHECK(wal_dir_read_file(p, "NOTE", got, sizeof(got)) == 5 && strcmp(got, "newer") == 0);
    CHECK(wal_dir_read_file(p, "NOTE", got, 2) == 2 && memcmp(got, "ne", 2) == 0, "at most n");

    /* the tmp cannot be made (a directory is in its way): the old file stays */
    CHECK(mkdir(t, 0700) == 0);
    CHECK(wal_dir_replace_file(p, "NOTE", "lost", 4) == -EISDIR);
    get_file(f, got, sizeof(got));
    CHECK(strcmp(got, "newer") == 0, "after a failed create: %s", got);
    CHECK(rmdir(t) == 0);

    /* the rename is refused (NAME is a directory that is not empty): it stays, no tmp */
    char d[700];
    snprintf(f, sizeof(f), "%s/DIRNOTE", p);
    snprintf(t, sizeof(t), "%s/DIRNOTE.tmp", p);
    snprintf(d, sizeof(d), "%s/inside", f);
    CHECK(mkdir(f, 0700) == 0);
    put_file(d, "x");
    int r = wal_dir_replace_file(p, "DIRNOTE", "lost", 4);
    CHECK(r == -EISDIR || r == -ENOTEMPTY || r == -EEXIST, "%d", r);
    CHECK(mode_of(d) != -1, "the old one is untouched");
    CHECK(mode_of(t) == -1, "the tmp is removed after a failure");

    char name[WAL_DIR_NAME_MAX + 8];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    CHECK(wal_dir_replace_file(p, name, "x", 1) == -ENAMETOOLONG);
}

static void subdir(void)
{
    char p[512], s[600], f[700];
    struct wal_opts o;
    struct wal *w = NULL;
    struct walrec_piece pc = {"hello", 5};

    snprintf(p, sizeof(p), "%s/parent", root);
    snprintf(s, sizeof(s), "%s/import", p);
    CHECK(wal_dir_make(p) == 0);
    CHECK(wal_dir_open_sub(p, "import", 0) == -ENOENT);
    CHECK(wal_dir_remove_sub(p, "import") == 0, "nothing to remove");
    int fd = wal_dir_open_sub(p, "import", 1);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    CHECK(mode_of(s) == 0700, "%o", mode_of(s));

    /* a whole log in it, a leftover checkpoint tmp: all of it goes */
    memset(&o, 0, sizeof(o));
    o.dir = s;
    o.no_sync = 1;
    o.segment_bytes = 64 << 10;
    o.reserve_bytes = 8 << 10;
    CHECK(wal_open(&w, &o, NULL, NULL) == 0);
    if (w) {
        CHECK(wlog_append(wal_log(w), WALREC_ADD, &pc, 1, NULL, NULL) == 0);
        CHECK(wal_commit(w) == 0);
        wlog_close(wal_log(w));
    }
    snprintf(f, sizeof(f), "%s/%s", s, WALCKPT_TMP_NAME);
    put_file(f, "partial");
    CHECK(wal_dir_remove_sub(p, "import") == 0);
    CHECK(mode_of(s) == -1, "the import is gone");

    /* a file that is not the log's stays, and so does the directory */
    fd = wal_dir_open_sub(p, "import", 1);
    CHECK(fd >= 0);
    if (fd >= 0)
        close(fd);
    snprintf(f, sizeof(f), "%s/notes.txt", s);
    put_file(f, "mine");
    CHECK(wal_dir_remove_sub(p, "import") == -ENOTEMPTY);
    CHECK(mode_of(f) != -1);
    unlink(f);
    CHECK(wal_dir_remove_sub(p, "import") == 0);
}

/*
 * The tmp a crash left, or one planted: the routes file and REPLICA are
 * written through NAME.tmp, in a directory others may write to (routes_file
 * can be anywhere). What is at NAME.tmp is removed, never written through:
 * a symlink to a file outside stays a symlink's problem, the file outside
 * is untouched, NAME is a regular file of the bridge's with the new text.
 */
static void stale_tmp(void)
{
    char p[512], f[600], t[600], out[600], gone[600], got[64];
    struct stat st;

    snprintf(p, sizeof(p), "%s/stale", root);
    snprintf(f, sizeof(f), "%s/routes.json", p);
    snprintf(t, sizeof(t), "%s/routes.json.tmp", p);
    snprintf(out, sizeof(out), "%s/outside", root);
    snprintf(gone, sizeof(gone), "%s/not-there", root);
    CHECK(wal_dir_make(p) == 0);

    /* a crash's leftover, longer than the new text and of another mode */
    put_file(t, "a much longer leftover text");
    CHECK(chmod(t, 0644) == 0);
    CHECK(wal_dir_replace_file(p, "routes.json", "{}", 2) == 0);
    get_file(f, got, sizeof(got));
    CHECK(strcmp(got, "{}") == 0, "after a leftover tmp: %s", got);
    CHECK(mode_of(f) == 0600, "%o", mode_of(f));

    /* a symlink to a file outside */
    put_file(out, "keep");
    CHECK(chmod(out, 0644) == 0);
    CHECK(symlink(out, t) == 0);
    CHECK(wal_dir_replace_file(p, "routes.json", "{\"routes\":[]}", 13) == 0);
    get_file(out, got, sizeof(got));
    CHECK(strcmp(got, "keep") == 0, "the file a planted symlink points to was written: %s", got);
    CHECK(mode_of(out) == 0644, "and its mode changed: %o", mode_of(out));
    CHECK(lstat(f, &st) == 0 && S_ISREG(st.st_mode), "routes.json is a regular file");
    get_file(f, got, sizeof(got));
    CHECK(strcmp(got, "{\"routes\":[]}") == 0, "%s", got);
    CHECK(lstat(t, &st) < 0 && errno == ENOENT, "no tmp left");

    /* a symlink to a name that does not exist: nothing is created there */
    CHECK(symlink(gone, t) == 0);
    CHECK(wal_dir_replace_file(p, "routes.json", "{}", 2) == 0);
    CHECK(lstat(gone, &st) < 0 && errno == ENOENT, "a file was created through a dangling symlink");
    CHECK(lstat(f, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 2);
}

static const struct check_case cases[] = {
    {"make", make},
    {"log_files", log_files},
    {"replace_file", replace_file},
    {"stale_tmp", stale_tmp},
    {"subdir", subdir},
};

int main(int argc, char **argv)
{
    umask(022);
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = CHECK_MAIN(argc, argv, cases);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", root);
    return rc;
}
