/*
 * wal_dir.c -- the WAL directory's one owner: its files, their modes, the
 * lock, and every small file other layers keep in it.
 *
 * THE FILES
 *
 * Every file that lives in the WAL directory, who writes it, its mode, when
 * it is fsynced, and what a crash at each step leaves (and how the next
 * open cleans it up or trusts it). Every create, write, rename, unlink,
 * mkdir and fsync below goes through walfs.h (so the simulator sees the
 * log's own), whether made by the log's files or by the functions of this
 * file that the replicated log (src/repl/) and the WAL tools (src/cli/:
 * "wal check|dump" read, "wal salvage" writes its repaired segment) call.
 *
 * file           writer, how                mode  fsync              crash: what it leaves; open
 * -------------  -------------------------  ----  -----------------  -----------------------------
 * NNN...N.wal    wal.c wal_seg_create():    0600  header: fdatasync  newest with a torn header:
 * (20 digits,    O_CREAT|O_EXCL, header;          + dir fsync        being created, deleted
 * walscan.h)     records by pwrite;               before a record;   (wal_open.c); torn tail of the
 *                wal_space.c deletes              records: one       newest cut (logged); damage
 *                (unlinkat + dir fsync);          fdatasync per      elsewhere: WLOG_ECORRUPT, the
 *                wal_replace_segments()           group commit       operator runs "wal salvage";
 *                swaps in (below); zeros                             zeros after the last record:
 *                prewritten past the                                 the end (the newest's cut)
 *                newest's records (wal.c)
 * LOCK           wal_lock_dir(): created    0600  never (empty)      the flock dies with the
 *                if missing, flock'ed                                process; the file is reused
 * CHECKPOINT     walckpt.c: .tmp written    0600  .tmp fdatasync,    old or new CHECKPOINT; one
 * CHECKPOINT.tmp (O_TRUNC), renamed over          rename, dir fsync  failing its CRCs or of another
 *                CHECKPOINT by the install                           log is ignored (full replay);
 *                thread                                              a leftover .tmp is truncated
 *                                                                    by the next one, or deleted
 *                                                                    at open with a reserve
 * RESERVE        wal_reserve.c: fallocate   0600  fdatasync after    the blocks it holds count at
 *                (or zeros); cut to 0 on          each fill          open (a hole: nothing);
 *                a full disk                                         refilled when there is room
 * import/        wrepl_import.c through     0700  its log's own      never trusted: emptied before
 * (directory)    wal_dir_open_sub(): a log        rules; the swap:   an import is written
 *                built from the stream            SWAPPING below     (imp_reset) or removed
 *                (segments, LOCK), swapped                           (wal_dir_remove_sub)
 *                in by wal_replace_segments()
 * REPLICA        wrepl_resume.c through     0600  .tmp fsync,        old or new REPLICA; a leftover
 * REPLICA.tmp    wal_dir_replace_file()           rename, dir fsync  .tmp is removed next time;
 *                                                                    a note failing its CRC is
 *                                                                    ignored (whole stream read)
 * ingress-<route> ingress_off.c: created    0600  created: dir       one 32-byte pwrite in one
 * .offset        O_EXCL; rewritten in             fsync (the name);  sector: old or new bytes, and
 *                place (pwrite at 0)              writes: fdatasync  a CRC; 0 bytes is new; else
 *                                                 at a clean stop    corrupt: the daemon refuses to
 *                                                 only (ingress_     start and says to delete it
 *                                                 off.h)
 * NAME.salvage-  "wal salvage" through      the   fdatasync, then    not a segment (walscan_list
 * tmp            wal_dir_create_file()      seg-  the swap's dir     skips it): delete it by hand
 *                                           ment's fsync
 * NAME.damaged-  "wal salvage": the damaged the   the swap's dir     kept for people, never read
 * <time>         segment, linked aside      seg-  fsync
 *                                           ment's
 *
 * MODES
 *
 * One policy: the directory is made 0700 and every file in it 0600 (less
 * the umask), because the files hold message payloads and broker offsets
 * that are nobody else's business (WAL_DIR_MODE, WAL_FILE_MODE in wal.h).
 * It matches the packaging: Debian's postinst makes /var/lib/delay-bridge
 * 0700, the systemd unit has StateDirectoryMode=0700 and UMask=0077, and
 * the Kubernetes pod runs as one uid (fsGroup only makes the volume
 * writable for it). Nothing reads the files as another user. Existing
 * directories and files keep their modes (the docker image's 0750 volume,
 * a log written by an older version): this code only decides what it
 * creates. Parents that wal_dir_make() creates on the way are 0755: they
 * hold nothing of the log and may be shared. Salvage keeps the damaged
 * segment's own mode for its replacement.
 *
 * The lock is advisory: "wal check" and "wal dump" read without it (safe:
 * they only read, and open every segment before reading any).
 *
 * SWAPPING SEGMENTS IN
 *
 * Outside the running log two things put segments into a directory: the
 * salvage (one repaired segment over a damaged one, the damaged one kept
 * aside) and the replicated log's import (a whole log from dir/import,
 * replacing everything). Both go through wal_replace_segments(), whose
 * steps are ordered so that a crash at any point leaves each name either
 * the old or the new file (rename(2) over it), and so that what was kept
 * aside exists before the name changes (link first). The directory is
 * synced last; a deletion of the old log (WAL_REPLACE_ALL) is synced before
 * any new segment appears, so a crash never leaves old and new segments
 * side by side.
 *
 * SMALL FILES OF OTHER LAYERS
 *
 * wal_dir_replace_file() is the one way a small file is replaced: a NAME.tmp
 * left over is unlinked (a symlink there is removed, never followed), a new
 * one created (O_CREAT|O_EXCL|O_NOFOLLOW, 0600: it writes into no file it
 * did not make), written, fsync'ed, renamed over NAME, the directory
 * fsync'ed. A failure before the rename leaves NAME as it was
 * (and removes the tmp); one after it leaves the new NAME, durable or not:
 * a crash between the rename and the directory's fsync may bring back the
 * old one, never a mix. A reader checks its own format (REPLICA has a CRC).
 *
 * THE TOOLS' FILES
 *
 * "wal check" and "wal dump" open the directory and its segments read-only
 * (wal_dir_open, wal_dir_open_file); "wal salvage" writes a repaired
 * segment beside the damaged one with wal_dir_create_file,
 * wal_dir_write_at and wal_dir_seal_file (the damaged one's owner and mode,
 * then fdatasync) and swaps it in with wal_replace_segments(); on a failure
 * wal_dir_discard_file deletes the tmp.
 *
 * WHO CALLS WHOM: wal_open.c (make, open, lock), the replicated log and the
 * tools call this file; it calls walscan.c (the segment names) and nothing
 * else of the log.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/xalloc.h"
#include "delay-bridge/walckpt.h"
#include "delay-bridge/walscan.h"

#define LOCK_NAME "LOCK"
#define RESERVE_NAME "RESERVE" /* wal_reserve.c's */
#define TMP_SUFFIX ".tmp"

/* ---- the directory ------------------------------------------------------ */

int wal_dir_make(const char *dir)
{
    char *p = xstrdup(dir);
    int r = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (walfs_mkdir(p, 0755) < 0 && errno != EEXIST) { /* a parent: may be shared */
            r = -errno;
            goto cleanup;
        }
        *s = '/';
    }
    if (walfs_mkdir(p, WAL_DIR_MODE) < 0 && errno != EEXIST)
        r = -errno;
cleanup:
    free(p);
    return r;
}

int wal_dir_open(const char *dir)
{
    int fd = walfs_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    return fd >= 0 ? fd : -errno;
}

int wal_dir_sync(const char *dir)
{
    int fd = wal_dir_open(dir), r = 0;

    if (fd < 0)
        return fd;
    if (walfs_fsync(fd) < 0)
        r = -errno;
    walfs_close(fd);
    return r;
}

int wal_dir_open_sub(const char *dir, const char *name, int create)
{
    int dfd = wal_dir_open(dir), fd, r;

    if (dfd < 0)
        return dfd;
    if (create && walfs_mkdirat(dfd, name, WAL_DIR_MODE) < 0 && errno != EEXIST) {
        r = -errno;
        walfs_close(dfd);
        return r;
    }
    fd = walfs_openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r = fd >= 0 ? fd : -errno;
    walfs_close(dfd);
    return r;
}

/* Delete dirfd/name if it is there: 0 or -errno. */
static int unlink_quiet(int dirfd, const char *name)
{
    return walfs_unlinkat(dirfd, name, 0) < 0 && errno != ENOENT ? -errno : 0;
}

static int drop_all(int dirfd);

int wal_dir_remove_sub(const char *dir, const char *name)
{
    int dfd = wal_dir_open(dir), fd = -1, r;

    if (dfd < 0)
        return dfd;
    fd = walfs_openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        r = errno == ENOENT ? 0 : -errno;
        goto cleanup;
    }
    /* The log's files, the segments first (and synced): never a log without its head. */
    if ((r = drop_all(fd)) < 0 || (r = unlink_quiet(fd, WALCKPT_TMP_NAME)) < 0 ||
        (r = unlink_quiet(fd, RESERVE_NAME)) < 0 || (r = unlink_quiet(fd, LOCK_NAME)) < 0)
        goto cleanup;
    if (walfs_unlinkat(dfd, name, AT_REMOVEDIR) < 0)
        r = -errno; /* ENOTEMPTY: something not the log's is in it; left for people */
cleanup:
    if (fd >= 0)
        walfs_close(fd);
    walfs_close(dfd);
    return r;
}

/* ---- small files ---------------------------------------------------------- */

int wal_dir_replace_file(const char *dir, const char *name, const void *p, size_t n)
{
    char tmp[WAL_DIR_NAME_MAX + sizeof(TMP_SUFFIX)];
    const uint8_t *b = p;
    size_t done = 0;
    int dfd, fd = -1, r = 0;

    if (strlen(name) >= WAL_DIR_NAME_MAX)
        return -ENAMETOOLONG;
    snprintf(tmp, sizeof(tmp), "%s%s", name, TMP_SUFFIX);
    if ((dfd = wal_dir_open(dir)) < 0)
        return dfd;
    /* A tmp left by a crash is removed, not opened: whatever is at the name
     * (a symlink planted there, say) goes, and what is created is new. */
    if (walfs_unlinkat(dfd, tmp, 0) < 0 && errno != ENOENT) {
        r = -errno;
        walfs_close(dfd);
        return r;
    }
    fd = walfs_openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      WAL_FILE_MODE);
    if (fd < 0) {
        r = -errno;
        goto cleanup;
    }
    while (done < n && r == 0) {
        ssize_t k = walfs_pwrite(fd, b + done, n - done, (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            r = k < 0 ? -errno : -EIO;
        else
            done += (size_t)k;
    }
    if (r == 0 && walfs_fsync(fd) < 0)
        r = -errno;
    if (r == 0 && walfs_renameat(dfd, tmp, dfd, name) < 0)
        r = -errno;
    if (r == 0 && walfs_fsync(dfd) < 0)
        r = -errno; /* renamed: NAME is the new file, maybe not durably */
cleanup:
    if (fd >= 0)
        walfs_close(fd);
    if (r < 0)
        walfs_unlinkat(dfd, tmp, 0); /* best effort; the next write removes it anyway */
    walfs_close(dfd);
    return r;
}

ssize_t wal_dir_read_file(const char *dir, const char *name, void *p, size_t n)
{
    char path[4200];
    size_t done = 0;
    int fd, r = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fd = walfs_open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -errno;
    while (done < n) {
        ssize_t k = walfs_pread(fd, (uint8_t *)p + done, n - done, (off_t)done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            r = -errno;
        if (k <= 0)
            break;
        done += (size_t)k;
    }
    walfs_close(fd);
    return r < 0 ? r : (ssize_t)done;
}

/* ---- the tools' files --------------------------------------------------- */

int wal_dir_open_file(int dirfd, const char *name)
{
    int fd = walfs_openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);

    return fd >= 0 ? fd : -errno;
}

int wal_dir_create_file(int dirfd, const char *name, mode_t mode)
{
    int fd = walfs_openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

    return fd >= 0 ? fd : -errno;
}

int wal_dir_write_at(int fd, const void *p, size_t n, uint64_t off)
{
    size_t done = 0;

    while (done < n) {
        ssize_t w = walfs_pwrite(fd, (const uint8_t *)p + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        done += (size_t)w;
    }
    return 0;
}

int wal_dir_seal_file(int fd, const struct stat *like)
{
    if (like) {
        if (walfs_fchown(fd, like->st_uid, like->st_gid) < 0) {
            /* not root: the file is ours already */
        }
        if (walfs_fchmod(fd, like->st_mode & 0777) < 0)
            return -errno;
    }
    return walfs_fdatasync(fd) < 0 ? -errno : 0;
}

void wal_dir_discard_file(int dirfd, const char *name, int fd)
{
    if (fd >= 0)
        walfs_close(fd);
    (void)walfs_unlinkat(dirfd, name, 0);
}

/* ---- the lock ------------------------------------------------------------- */

int wal_lock_dir_flags(const char *dir, int flags, int *lockfd, const char **op)
{
    char path[4200];
    int fd, e;

    *lockfd = -1;
    snprintf(path, sizeof(path), "%s/%s", dir, LOCK_NAME);
    fd = walfs_open(path, (flags & WAL_LOCK_NO_CREATE ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC,
                    WAL_FILE_MODE);
    if (fd < 0) {
        e = -errno;
        if ((flags & WAL_LOCK_NO_CREATE) && e == -ENOENT)
            return 0; /* no lock file: nobody holds it */
        if (op)
            *op = "open";
        if (!(flags & WAL_LOCK_QUIET))
            log_error("wal", "cannot create the lock file", "file=%s err=\"%s\"", path,
                      strerror(-e));
        return e;
    }
    if (walfs_flock(fd, LOCK_EX | LOCK_NB) < 0) {
        e = errno == EWOULDBLOCK ? WLOG_ELOCKED : -errno;
        if (op)
            *op = "lock";
        if (!(flags & WAL_LOCK_QUIET))
            log_error("wal", "the log directory is locked by another process (is a daemon "
                      "already running on it?)", "file=%s", path);
        walfs_close(fd);
        return e;
    }
    *lockfd = fd;
    return 0;
}

int wal_lock_dir(const char *dir, int *lockfd)
{
    return wal_lock_dir_flags(dir, 0, lockfd, NULL);
}

/* ---- swapping segments in -------------------------------------------------- */

/* Delete every segment and the checkpoint of dirfd, durably. 0 or -errno. */
static int drop_all(int dirfd)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    int r = walscan_list(dirfd, &nos, &n, NULL, 0);

    for (size_t i = 0; r == 0 && i < n; i++) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, nos[i]);
        if (walfs_unlinkat(dirfd, name, 0) < 0)
            r = -errno;
    }
    free(nos);
    if (r == 0 && walfs_unlinkat(dirfd, WALCKPT_NAME, 0) < 0 && errno != ENOENT)
        r = -errno;
    if (r == 0 && walfs_fsync(dirfd) < 0)
        r = -errno;
    return r;
}

int wal_replace_segments(int dirfd, const struct wal_replacement *v, size_t n, int flags,
                         const char **failed)
{
    const char *step = "delete";
    int r = 0;

    if ((flags & WAL_REPLACE_ALL) && (r = drop_all(dirfd)) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct wal_replacement *p = &v[i];

        /* The old file stays, under another name; name never goes missing. */
        if (p->aside && walfs_linkat(dirfd, p->name, dirfd, p->aside, 0) < 0 &&
            (errno == EEXIST || walfs_renameat(dirfd, p->name, dirfd, p->aside) < 0)) {
            r = -errno;
            step = "keep aside";
            goto out;
        }
        if (walfs_renameat(p->srcfd, p->src_name, dirfd, p->name) < 0) {
            r = -errno;
            step = "rename";
            goto out;
        }
    }
    if (walfs_fsync(dirfd) < 0) {
        r = -errno;
        step = "sync the directory";
    }
out:
    if (r < 0 && failed)
        *failed = step;
    return r;
}
