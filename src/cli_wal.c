/*
 * cli_wal.c -- "delay-bridge wal check|dump DIR": look inside a WAL directory;
 * "delay-bridge wal salvage DIR": repair one the daemon refuses (SALVAGE below).
 *
 * An operator's questions about a log are "is it sound?" and "what is in
 * it?". Both are answered by one read-only scan that follows the same rules
 * as the daemon's recovery (src/wal.c, format in src/walrec.c), but never
 * changes anything: files are opened O_RDONLY, no flock is taken on
 * dir/LOCK, nothing is truncated or deleted. That makes it safe to run
 * against the directory of a live daemon; what it sees is then a prefix of
 * the log as of the moment the segment files were opened.
 *
 * THE SCAN
 *
 * The reading itself -- which names are segments, when a header is good,
 * records read in chunks and checked, torn tail or corruption -- is the
 * daemon's own code (walscan.h), so the tool cannot drift from recovery.
 * What this file adds:
 *
 *   1. List the segments (walscan_list) and open every one at once. A live
 *      daemon may delete the oldest segment between the listing and the
 *      open (compaction): on ENOENT the listing is simply taken again. Once
 *      a segment is open, a later unlink cannot hurt.
 *   2. Per segment: a good header (walscan_seghdr: magic, version, CRC,
 *      reserved word, segno equal to the name, base_lsn not 0), the same
 *      wal_id as the first segment, segment numbers contiguous, base_lsn
 *      continuing the previous segment.
 *   3. Per record (walscan_next): walrec_decode() with the segment's salt,
 *      then LSN = previous + 1.
 *   4. The first record that fails is a TORN TAIL if it lies in the newest
 *      segment and no valid record follows anywhere in that file (the
 *      daemon's rule, walscan.h). A live daemon may be writing there right
 *      now, and a daemon starting up would cut it off; it is reported and
 *      the exit code is 0. A newest segment no longer than a header whose
 *      header is not valid is a segment being created (or a crash during
 *      that): also a torn tail. Anything else is corruption: "corrupt:
 *      segment N (file) offset X: reason", exit 4, the daemon's exit code
 *      for a corrupt WAL.
 *
 * LIVE MESSAGES
 *
 * Replayed like the engine does: an ADD whose msg_id is new creates a
 * pending message; an ADD whose msg_id is already pending is a compaction
 * copy and supersedes the earlier one; a DONE (published) or a CANCEL
 * (x-delay-cancel, replaced by a newer message with the same x-delay-key,
 * purged) forgets its ids. Ids that a DONE or CANCEL names whose ADD is in a
 * segment already deleted are normal and only counted. Pending messages are
 * kept as small fixed-size items in a pool indexed by msg_id (pool.h,
 * idmap.h), about 60 bytes each, with one bit for "the key equals dump
 * --key" rather than the key itself; "dump" reads the few records it prints
 * back from the still-open segment files (key included) and decodes their
 * AMQP properties with rabbitmq-c.
 *
 * Exit codes: 0 ok, 1 directory unreadable or an I/O error, 2 usage, 4
 * corrupt (also: a file name or segment header the daemon would refuse).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <json-c/json.h>

#include "delay-bridge/amqp_msg.h"
#include "delay-bridge/api.h"
#include "delay-bridge/cli.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/pool.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walckpt.h"
#include "delay-bridge/walscan.h"
#include "delay-bridge/xalloc.h"

#define CLI_OK 0
#define CLI_EIO 1
#define CLI_USAGE 2
#define CLI_CORRUPT 4
#define CLI_LOCKED 5

#define CHUNK (4u << 20)
#define LIST_RETRIES 20
#define MAX_ROUTES 65535

/* ---- state ------------------------------------------------------------- */

struct seg {
    uint64_t segno;
    char name[WALSCAN_NAME_SIZE];
    int fd;
    uint64_t size;   /* bytes, as fstat said at open (what we read up to) */
    uint32_t salt;
    uint64_t base_lsn;
    uint64_t records;
};

/* One pending message (pool item; the idmap key msg_id is its first field). */
struct live {
    uint64_t msg_id;
    uint64_t due_ms;
    uint64_t enqueue_ms;
    uint64_t lsn;      /* LSN of the live copy */
    uint32_t seg;      /* index into scan.segs */
    uint32_t off;      /* record offset in that file */
    uint32_t len;      /* record bytes, header included */
    uint32_t body_len;
    uint16_t route;    /* index into scan.routes */
    uint16_t flags;    /* WALREC_ADD_* */
    uint16_t error;
    uint8_t key_match; /* keyed, and the key is scan.key (dump --key) */
};

struct route_stat {
    char *name;
    uint8_t len;
    uint64_t count, bytes;
};

struct scan {
    const char *dir;
    int dirfd;
    struct seg *segs;
    size_t nsegs;
    uint64_t wal_id;

    uint64_t file_bytes;
    uint64_t first_lsn, next_lsn; /* next_lsn = last good LSN + 1 */
    uint64_t n_add, n_copy, n_done, n_done_ids, n_done_unknown;
    uint64_t n_cancel, n_cancel_ids, n_cancel_unknown;
    uint64_t b_add, b_done, b_cancel;

    const char *key; /* dump --key, or NULL */

    /* torn tail of the newest segment */
    int torn;
    uint64_t torn_off, torn_bytes;
    char torn_why[200];

    struct walscan sc;

    /* corruption: the message after "corrupt: " */
    char corrupt[512];

    struct pool pool;
    struct idmap ids;
    struct route_stat *routes;
    size_t nroutes;

    uint8_t *buf; /* dump: one record read back */
    size_t cap;

    struct salv *salv; /* wal salvage: told of every record replayed, or NULL */
};

struct salv;
static void salv_note(struct salv *v, const struct walscan_rec *rec);

/* ---- small helpers ----------------------------------------------------- */

static void fmt_iso(uint64_t ms, char *out, size_t n)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    char s[40];

    if (!gmtime_r(&t, &tm) || strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S", &tm) == 0) {
        snprintf(out, n, "?");
        return;
    }
    snprintf(out, n, "%s.%03uZ", s, (unsigned)(ms % 1000));
}

/* ms since the epoch, or ISO-8601 "2026-11-23T10:00:00[.123][Z|+hh:mm]". 0 or -1. */
static int parse_time(const char *s, uint64_t *out)
{
    struct tm tm;
    const char *p;
    char *end;
    int64_t ms = 0, off_s = 0;
    time_t t;

    if (*s && strspn(s, "0123456789") == strlen(s)) {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end)
            return -1;
        *out = v;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    p = strptime(s, "%Y-%m-%d", &tm);
    if (!p)
        return -1;
    if (*p == 'T' || *p == 't' || *p == ' ') {
        p = strptime(p + 1, "%H:%M:%S", &tm);
        if (!p)
            return -1;
        if (*p == '.' || *p == ',') {
            int digits = 0;
            p++;
            while (isdigit((unsigned char)*p)) {
                if (digits < 3)
                    ms = ms * 10 + (*p - '0');
                digits++;
                p++;
            }
            if (digits == 0)
                return -1;
            for (; digits < 3; digits++)
                ms *= 10;
        }
    }
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm, n = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &hh, &mm, &n) != 2 || n != 5 || hh > 23 || mm > 59)
            return -1;
        off_s = (hh * 3600 + mm * 60) * (*p == '+' ? 1 : -1);
        p += 1 + n;
    }
    if (*p)
        return -1;
    t = timegm(&tm);
    if (t == (time_t)-1 || t - off_s < 0)
        return -1;
    *out = (uint64_t)(t - off_s) * 1000 + (uint64_t)ms;
    return 0;
}

/* A string for a space-separated column: printable ASCII kept, the rest \xNN. */
static void put_field(FILE *f, const void *p, size_t n)
{
    const unsigned char *s = p;

    if (n == 0) {
        fputs("\"\"", f);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\')
            fputs("\\\\", f);
        else if (s[i] <= ' ' || s[i] >= 0x7f || s[i] == '"')
            fprintf(f, "\\x%02x", s[i]);
        else
            fputc(s[i], f);
    }
}

static void set_corrupt(struct scan *s, size_t idx, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_corrupt(struct scan *s, size_t idx, uint64_t off, const char *fmt, ...)
{
    char why[300];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(s->corrupt, sizeof(s->corrupt), "segment %" PRIu64 " (%s/%s) offset %" PRIu64 ": %s",
             s->segs[idx].segno, s->dir, s->segs[idx].name, off, why);
}

static uint16_t route_id(struct scan *s, const char *name, uint8_t len)
{
    for (size_t i = 0; i < s->nroutes; i++)
        if (s->routes[i].len == len && memcmp(s->routes[i].name, name, len) == 0)
            return (uint16_t)i;
    if (s->nroutes == MAX_ROUTES) /* more names than a config can hold: lump the rest */
        return MAX_ROUTES - 1;
    s->routes = xrealloc(s->routes, (s->nroutes + 1) * sizeof(*s->routes));
    struct route_stat *r = &s->routes[s->nroutes];
    r->name = xrealloc(NULL, (size_t)len + 1);
    memcpy(r->name, name, len);
    r->name[len] = '\0';
    r->len = len;
    r->count = r->bytes = 0;
    return (uint16_t)s->nroutes++;
}

/* ---- listing and opening ----------------------------------------------- */

static void close_segs(struct scan *s)
{
    for (size_t i = 0; i < s->nsegs; i++)
        if (s->segs[i].fd >= 0)
            close(s->segs[i].fd);
    free(s->segs);
    s->segs = NULL;
    s->nsegs = 0;
}

/*
 * List and open the segments. Returns 0, 1 (ENOENT race: list again),
 * -errno (reported), or CLI_CORRUPT (s->corrupt set).
 */
static int open_segs_once(struct scan *s)
{
    uint64_t *nos;
    size_t n;
    char bad[256];
    int r;

    r = walscan_list(s->dirfd, &nos, &n, bad, sizeof(bad));
    if (r == WLOG_EFORMAT) {
        snprintf(s->corrupt, sizeof(s->corrupt),
                 "unexpected file %s/%s in the log directory (the daemon refuses to open the "
                 "log; move it away)", s->dir, bad);
        return CLI_CORRUPT;
    }
    if (r < 0) {
        fprintf(stderr, "delay-bridge wal: cannot list %s: %s\n", s->dir, strerror(-r));
        return r;
    }
    s->segs = xcalloc(n, sizeof(*s->segs));
    s->nsegs = n;
    for (size_t i = 0; i < n; i++) {
        s->segs[i].segno = nos[i];
        s->segs[i].fd = -1;
        walscan_seg_name(s->segs[i].name, nos[i]);
    }
    free(nos);
    for (size_t i = 0; i < s->nsegs; i++) {
        struct seg *g = &s->segs[i];
        struct stat st;

        g->fd = openat(s->dirfd, g->name, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (g->fd < 0 || fstat(g->fd, &st) < 0) {
            r = -errno;
            if (r == -ENOENT) {
                r = 1; /* deleted by a running daemon since the listing */
                goto cleanup;
            }
            fprintf(stderr, "delay-bridge wal: cannot open %s/%s: %s%s\n", s->dir, g->name,
                    strerror(-r),
                    r == -EMFILE ? " (too many segments open at once: raise ulimit -n)" : "");
            goto cleanup;
        }
        g->size = (uint64_t)st.st_size;
    }
cleanup:
    if (r != 0)
        close_segs(s);
    return r;
}

static int open_segs(struct scan *s)
{
    struct rlimit rl;
    int r = 1;

    /* One fd per segment: lift the soft limit to the hard one. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    for (int i = 0; i < LIST_RETRIES && r == 1; i++)
        r = open_segs_once(s);
    if (r == 1) {
        fprintf(stderr, "delay-bridge wal: segments of %s keep disappearing while listed\n",
                s->dir);
        r = -EAGAIN;
    }
    return r;
}

/* ---- records ----------------------------------------------------------- */

static void on_add(struct scan *s, size_t idx, const struct walscan_rec *rec)
{
    struct walrec_add a;
    pool_handle ph;
    struct live *m;

    walrec_add_decode(rec->payload, rec->hdr.len, &a); /* walrec_decode() checked the layout */
    s->n_add++;
    s->b_add += rec->len;
    ph = idmap_get(&s->ids, a.msg_id);
    if (ph != POOL_NIL) {
        s->n_copy++; /* a compaction copy: the newer record is the live one */
        m = pool_at(&s->pool, ph);
    } else {
        ph = pool_alloc(&s->pool);
        m = pool_at(&s->pool, ph);
        m->msg_id = a.msg_id;
        idmap_put(&s->ids, ph);
    }
    m->due_ms = a.due_ms;
    m->enqueue_ms = a.enqueue_ms;
    m->lsn = rec->hdr.lsn;
    m->seg = (uint32_t)idx;
    m->off = (uint32_t)rec->off;
    m->len = rec->len;
    m->body_len = a.body_len;
    m->route = route_id(s, a.route, a.route_len);
    m->flags = a.flags;
    m->error = a.error;
    m->key_match = s->key && (a.flags & WALREC_ADD_KEYED) && strlen(s->key) == a.key_len &&
                   memcmp(s->key, a.key, a.key_len) == 0;
}

/* DONE or CANCEL: the messages named are gone. Returns the ids named whose ADD was not seen. */
static uint64_t forget_ids(struct scan *s, const struct walscan_rec *rec, uint64_t *ids)
{
    uint64_t unknown = 0;
    uint32_t count;

    walrec_done_decode(rec->payload, rec->hdr.len, &count); /* layout checked */
    *ids += count;
    for (uint32_t i = 0; i < count; i++) {
        pool_handle ph = idmap_del(&s->ids, walrec_done_id(rec->payload, i));
        if (ph != POOL_NIL)
            pool_release(&s->pool, ph);
        else
            unknown++;
    }
    return unknown;
}

static void on_record(struct scan *s, size_t idx, const struct walscan_rec *rec)
{
    if (s->salv)
        salv_note(s->salv, rec);
    switch (rec->hdr.type) {
    case WALREC_ADD:
        on_add(s, idx, rec);
        break;
    case WALREC_DONE:
        s->n_done++;
        s->b_done += rec->len;
        s->n_done_unknown += forget_ids(s, rec, &s->n_done_ids);
        break;
    case WALREC_CANCEL:
        s->n_cancel++;
        s->b_cancel += rec->len;
        s->n_cancel_unknown += forget_ids(s, rec, &s->n_cancel_ids);
        break;
    }
}

/* Read one segment's records. 0 (clean or torn tail), CLI_CORRUPT or -errno. */
static int scan_segment(struct scan *s, size_t idx)
{
    struct seg *g = &s->segs[idx];
    struct walscan *sc = &s->sc;
    struct walscan_rec rec;
    int r;

    if (g->base_lsn != s->next_lsn && idx > 0) {
        set_corrupt(s, idx, 0,
                    "base_lsn %" PRIu64 " does not continue the previous segment (expected %" PRIu64
                    ")", g->base_lsn, s->next_lsn);
        return CLI_CORRUPT;
    }
    walscan_start(sc, g->fd, g->size, g->salt, g->base_lsn, idx + 1 == s->nsegs);
    while ((r = walscan_next(sc, &rec)) > 0) {
        on_record(s, idx, &rec);
        g->records++;
    }
    s->next_lsn = sc->next_lsn;
    if (r < 0) {
        fprintf(stderr, "delay-bridge wal: cannot read %s/%s: %s\n", s->dir, g->name,
                strerror(-r));
        return r;
    }
    g->size = sc->size; /* less if it shrank since fstat (a starting daemon cut a torn tail) */
    switch (sc->end) {
    case WALSCAN_CLEAN:
        return 0;
    case WALSCAN_TORN:
        s->torn = 1;
        s->torn_off = sc->bad_off;
        s->torn_bytes = g->size - sc->bad_off;
        snprintf(s->torn_why, sizeof(s->torn_why), "%s", sc->reason);
        return 0;
    case WALSCAN_BAD_LSN:
        set_corrupt(s, idx, sc->bad_off, "record out of sequence: lsn %" PRIu64 ", expected %" PRIu64,
                    sc->bad_lsn, sc->next_lsn);
        return CLI_CORRUPT;
    default:
        if (sc->next_valid)
            set_corrupt(s, idx, sc->bad_off, "%s; a valid record follows at offset %" PRIu64,
                        sc->reason, sc->next_valid);
        else
            set_corrupt(s, idx, sc->bad_off, "%s (in a segment that is not the newest)",
                        sc->reason);
        return CLI_CORRUPT;
    }
}

/* The whole scan. 0, CLI_CORRUPT (s->corrupt set) or -errno (reported). */
static int scan_run(struct scan *s)
{
    int r;

    if ((r = open_segs(s)) != 0)
        return r;
    walscan_init(&s->sc, CHUNK, NULL, NULL);
    for (size_t i = 0; i < s->nsegs; i++) {
        struct seg *g = &s->segs[i];
        struct walrec_seghdr h;

        s->file_bytes += g->size;
        r = walscan_seghdr(g->fd, g->segno, g->size, i + 1 == s->nsegs, &h);
        switch (r) {
        case WALSCAN_HDR_OK:
            break;
        case WALSCAN_HDR_CREATING:
            s->torn = 1;
            s->torn_off = 0;
            s->torn_bytes = g->size;
            snprintf(s->torn_why, sizeof(s->torn_why),
                     "incomplete segment header (%" PRIu64 " bytes): the segment is being "
                     "created, or a crash cut its creation short", g->size);
            return 0;
        case WALSCAN_HDR_SHORT:
            set_corrupt(s, i, 0, "segment header runs past the end of the file");
            return CLI_CORRUPT;
        case WALSCAN_HDR_BAD:
            set_corrupt(s, i, 0, "bad segment header (magic, version, reserved word or checksum)");
            return CLI_CORRUPT;
        case WALSCAN_HDR_SEGNO:
            set_corrupt(s, i, 16, "header says segment %" PRIu64 ", the file name %" PRIu64,
                        h.segno, g->segno);
            return CLI_CORRUPT;
        case WALSCAN_HDR_BASE_LSN:
            set_corrupt(s, i, 24, "base_lsn is 0");
            return CLI_CORRUPT;
        case WALSCAN_HDR_TOO_BIG:
            set_corrupt(s, i, 0, "segment larger than 4 GiB (%" PRIu64 " bytes)", g->size);
            return CLI_CORRUPT;
        default:
            fprintf(stderr, "delay-bridge wal: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror(-r));
            return r;
        }
        g->salt = h.salt;
        g->base_lsn = h.base_lsn;
        if (i == 0) {
            s->wal_id = h.wal_id;
            s->first_lsn = h.base_lsn;
        } else if (h.wal_id != s->wal_id) {
            set_corrupt(s, i, 32, "wal_id %016" PRIx64 " differs from %016" PRIx64
                        " of the first segment (a segment of another log?)", h.wal_id, s->wal_id);
            return CLI_CORRUPT;
        } else if (g->segno != s->segs[i - 1].segno + 1) {
            set_corrupt(s, i, 0, "segment numbers not contiguous: %" PRIu64 " follows %" PRIu64
                        " (a segment is missing)", g->segno, s->segs[i - 1].segno);
            return CLI_CORRUPT;
        }
        if ((r = scan_segment(s, i)) != 0)
            return r;
        if (s->torn)
            break;
    }
    return 0;
}

static void scan_init(struct scan *s, const char *dir, const char *key)
{
    memset(s, 0, sizeof(*s));
    s->dir = dir;
    s->key = key;
    s->dirfd = -1;
    pool_init(&s->pool, sizeof(struct live));
    idmap_init(&s->ids, &s->pool, offsetof(struct live, msg_id));
}

static void scan_free(struct scan *s)
{
    close_segs(s);
    if (s->dirfd >= 0)
        close(s->dirfd);
    idmap_destroy(&s->ids);
    pool_destroy(&s->pool);
    for (size_t i = 0; i < s->nroutes; i++)
        free(s->routes[i].name);
    free(s->routes);
    free(s->buf);
    walscan_free(&s->sc);
}

/*
 * Open dir and scan it; returns an exit code (CLI_OK when the scan is
 * usable). key: mark the pending messages with that x-delay-key, or NULL.
 */
static int scan_dir(struct scan *s, const char *dir, const char *key)
{
    int r;

    scan_init(s, dir, key);
    s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dirfd < 0) {
        fprintf(stderr, "delay-bridge wal: cannot open WAL directory %s: %s\n", dir,
                strerror(errno));
        return CLI_EIO;
    }
    r = scan_run(s);
    if (r == CLI_CORRUPT) {
        fprintf(stderr, "corrupt: %s\n", s->corrupt);
        return CLI_CORRUPT;
    }
    return r < 0 ? CLI_EIO : CLI_OK;
}

/* ---- pending messages in due order ------------------------------------- */

static const struct pool *sort_pool;

static int cmp_due(const void *a, const void *b)
{
    const struct live *x = pool_at(sort_pool, *(const pool_handle *)a);
    const struct live *y = pool_at(sort_pool, *(const pool_handle *)b);

    if (x->due_ms != y->due_ms)
        return x->due_ms < y->due_ms ? -1 : 1;
    return x->msg_id < y->msg_id ? -1 : x->msg_id > y->msg_id;
}

/* Handles of every pending message (in no order); *n set. Caller frees. */
static pool_handle *live_handles(const struct scan *s, size_t *n)
{
    pool_handle *v = xrealloc(NULL, (s->ids.count ? s->ids.count : 1) * sizeof(*v));
    size_t k = 0;

    for (size_t i = 0; i < s->ids.cap; i++)
        if (s->ids.slots[i] != POOL_NIL)
            v[k++] = s->ids.slots[i];
    *n = k;
    return v;
}

/* ---- wal check --------------------------------------------------------- */

static void check_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal check DIR\n"
            "\n"
            "Verify every record of every segment of the WAL directory DIR: segment headers,\n"
            "one wal_id, contiguous segment numbers, record checksums (seeded by each\n"
            "segment's salt), LSNs +1 across records and segments. Prints a summary:\n"
            "segments, records by type (ADD, DONE: published, CANCEL: cancelled, replaced\n"
            "or purged) with the ids they remove, bytes, pending messages per route, the\n"
            "oldest enqueue time and the next due time; and whether the CHECKPOINT file\n"
            "checks out (a restart reads it instead of every segment; an unusable one is\n"
            "reported, not an error: recovery then replays every segment).\n"
            "\n"
            "Read-only and lock-free: safe on the directory of a running daemon.\n"
            "An incomplete record at the end of the newest segment is reported as a torn\n"
            "tail, not corruption (a running daemon may be writing it; a starting daemon\n"
            "cuts it off).\n"
            "\n"
            "  -h, --help   print this help and exit\n"
            "\n"
            "Exit codes: 0 sound (torn tail included), 1 directory unreadable or I/O error,\n"
            "2 usage, 4 corrupt: \"corrupt: segment N (file) offset X: reason\" on stderr.\n");
}

/* corrupt: the scan stopped at corruption; the figures cover what came before it. */
/*
 * The checkpoint is a shortcut for recovery, not part of the log: a damaged
 * one is reported, and recovery replays every segment instead.
 */
static void print_checkpoint(struct scan *s)
{
    struct walckpt_info ci;
    char why[256];
    int r = walckpt_read(s->dirfd, s->wal_id, NULL, NULL, &ci, why, sizeof(why), NULL);

    if (r == 1)
        printf("checkpoint:     none (a restart replays every segment)\n");
    else if (r == 0)
        printf("checkpoint:     ok, %" PRIu64 " bytes, replay from lsn %" PRIu64 "\n", ci.bytes,
               ci.start_lsn);
    else
        printf("checkpoint:     UNUSABLE (%s): a restart replays every segment instead\n",
               why[0] ? why : strerror(-r));
}

static void print_summary(struct scan *s, int corrupt)
{
    size_t n;
    pool_handle *v = live_handles(s, &n);
    uint64_t live_bytes = 0, body_bytes = 0, oldest = UINT64_MAX, next = UINT64_MAX;
    uint64_t next_id = 0;
    uint64_t dead_letter = 0, keyed = 0;
    char t[48];

    for (size_t i = 0; i < s->nroutes; i++)
        s->routes[i].count = s->routes[i].bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct live *m = pool_at(&s->pool, v[i]);
        live_bytes += m->len;
        body_bytes += m->body_len;
        s->routes[m->route].count++;
        s->routes[m->route].bytes += m->len;
        if (m->enqueue_ms < oldest)
            oldest = m->enqueue_ms;
        if (m->due_ms < next || (m->due_ms == next && m->msg_id < next_id)) {
            next = m->due_ms;
            next_id = m->msg_id;
        }
        if (m->flags & WALREC_ADD_DEADLETTER)
            dead_letter++;
        if (m->flags & WALREC_ADD_KEYED)
            keyed++;
    }
    free(v);

    printf("wal:            %s\n", s->dir);
    if (s->nsegs == 0) {
        printf("segments:       0 (empty log)\n");
    } else {
        printf("segments:       %zu (%s .. %s), %" PRIu64 " bytes\n", s->nsegs, s->segs[0].name,
               s->segs[s->nsegs - 1].name, s->file_bytes);
        printf("wal_id:         %016" PRIx64 "\n", s->wal_id);
        if (s->next_lsn > s->first_lsn)
            printf("lsn:            %" PRIu64 " .. %" PRIu64 "\n", s->first_lsn, s->next_lsn - 1);
        else
            printf("lsn:            none (next %" PRIu64 ")\n", s->first_lsn);
    }
    printf("records:        %" PRIu64 " (add %" PRIu64 ", done %" PRIu64 ", cancel %" PRIu64 ")\n",
           s->n_add + s->n_done + s->n_cancel, s->n_add, s->n_done, s->n_cancel);
    printf("  add:          %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64
           " of them compaction copies\n", s->n_add, s->b_add, s->n_copy);
    printf("  done:         %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64 " ids (%" PRIu64
           " of messages whose ADD is in a deleted segment)\n",
           s->n_done, s->b_done, s->n_done_ids, s->n_done_unknown);
    printf("  cancel:       %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64 " ids (%" PRIu64
           " of messages whose ADD is in a deleted segment)\n",
           s->n_cancel, s->b_cancel, s->n_cancel_ids, s->n_cancel_unknown);
    printf("live messages:  %zu, %" PRIu64 " bytes of records (%" PRIu64 " bytes of bodies)",
           n, live_bytes, body_bytes);
    if (keyed)
        printf(", %" PRIu64 " with an x-delay-key", keyed);
    if (dead_letter)
        printf(", %" PRIu64 " to be dead-lettered", dead_letter);
    printf("\n");
    for (size_t i = 0; i < s->nroutes; i++)
        if (s->routes[i].count) {
            printf("  route ");
            put_field(stdout, s->routes[i].name, s->routes[i].len);
            printf(": %" PRIu64 " messages, %" PRIu64 " bytes\n", s->routes[i].count,
                   s->routes[i].bytes);
        }
    if (n) {
        fmt_iso(oldest, t, sizeof(t));
        printf("oldest enqueue: %s (%" PRIu64 " ms)\n", t, oldest);
        fmt_iso(next, t, sizeof(t));
        printf("next due:       %s (%" PRIu64 " ms), msg_id %" PRIu64 "\n", t, next, next_id);
    } else {
        printf("oldest enqueue: -\n");
        printf("next due:       -\n");
    }
    if (corrupt)
        printf("tail:           not reached: the figures above cover the records before the "
               "corruption\n");
    else if (s->torn)
        printf("tail:           TORN TAIL in the newest segment %s offset %" PRIu64 ": %" PRIu64
               " bytes after the last valid record (%s). Not corruption: a running daemon may "
               "be writing it, a starting daemon cuts it off.\n",
               s->segs[s->nsegs - 1].name, s->torn_off, s->torn_bytes, s->torn_why);
    else
        printf("tail:           clean\n");
}

static int wal_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct scan s;
    int c, rc;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            check_usage(stdout);
            return CLI_OK;
        default:
            check_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal check: expected one directory\n");
        check_usage(stderr);
        return CLI_USAGE;
    }
    rc = scan_dir(&s, argv[optind], NULL);
    if (rc == CLI_OK) {
        print_summary(&s, 0);
        print_checkpoint(&s);
        printf("result:         ok%s\n", s.torn ? " (torn tail)" : "");
    } else if (rc == CLI_CORRUPT) {
        if (s.nsegs)
            print_summary(&s, 1);
        printf("result:         CORRUPT: %s\n", s.corrupt);
    }
    scan_free(&s);
    fflush(stdout);
    return rc;
}

/* ---- wal dump ---------------------------------------------------------- */

static void dump_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal dump DIR [--route R] [--key K] [--due-before T]\n"
            "                             [--limit N] [--headers] [--json]\n"
            "\n"
            "List the pending messages of the WAL directory DIR in due order (due time,\n"
            "then msg id): due time (ISO-8601 UTC and ms since the epoch), route, exchange\n"
            "and routing key it was published with, body size, message-id property, msg id,\n"
            "x-delay-key (- when none; JSON: \"key\", null when none).\n"
            "Strings are printed with spaces and non-printable bytes as \\xNN.\n"
            "\n"
            "  --route R        only messages of route R\n"
            "  --key K          only messages held with x-delay-key K\n"
            "  --due-before T   only messages due before T: ms since the epoch or ISO-8601\n"
            "                   (2026-11-23T10:00:00Z, 2026-11-23T10:00:00.250+01:00)\n"
            "  --limit N        at most N messages (the first N in due order)\n"
            "  --headers        decode the stored AMQP properties and show the header table\n"
            "                   (strings and numbers; other types by name)\n"
            "  --json           a JSON array of objects instead of text\n"
            "  -h, --help       print this help and exit\n"
            "\n"
            "Read-only and lock-free: safe on the directory of a running daemon.\n"
            "Exit codes: 0 ok (a torn tail of the newest segment included), 1 directory\n"
            "unreadable or I/O error, 2 usage, 4 corrupt (nothing is listed).\n");
}

struct dump_opts {
    const char *route;
    const char *key;     /* NULL: any */
    uint64_t due_before; /* 0: no limit */
    uint64_t limit;      /* 0: all */
    int headers, json;
};

static const char *kind_name(uint8_t k)
{
    switch (k) {
    case AMQP_FIELD_KIND_BOOLEAN: return "bool";
    case AMQP_FIELD_KIND_I8: return "int8";
    case AMQP_FIELD_KIND_U8: return "uint8";
    case AMQP_FIELD_KIND_I16: return "int16";
    case AMQP_FIELD_KIND_U16: return "uint16";
    case AMQP_FIELD_KIND_I32: return "int32";
    case AMQP_FIELD_KIND_U32: return "uint32";
    case AMQP_FIELD_KIND_I64: return "int64";
    case AMQP_FIELD_KIND_U64: return "uint64";
    case AMQP_FIELD_KIND_F32: return "float";
    case AMQP_FIELD_KIND_F64: return "double";
    case AMQP_FIELD_KIND_DECIMAL: return "decimal";
    case AMQP_FIELD_KIND_UTF8: return "string";
    case AMQP_FIELD_KIND_ARRAY: return "array";
    case AMQP_FIELD_KIND_TIMESTAMP: return "timestamp";
    case AMQP_FIELD_KIND_TABLE: return "table";
    case AMQP_FIELD_KIND_VOID: return "void";
    case AMQP_FIELD_KIND_BYTES: return "bytes";
    default: return "unknown";
    }
}

static void field_text(FILE *f, const amqp_field_value_t *v)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: fputs(v->value.boolean ? "true" : "false", f); break;
    case AMQP_FIELD_KIND_I8: fprintf(f, "%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: fprintf(f, "%u", v->value.u8); break;
    case AMQP_FIELD_KIND_I16: fprintf(f, "%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: fprintf(f, "%u", v->value.u16); break;
    case AMQP_FIELD_KIND_I32: fprintf(f, "%" PRId32, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: fprintf(f, "%" PRIu32, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: fprintf(f, "%" PRId64, v->value.i64); break;
    case AMQP_FIELD_KIND_U64: fprintf(f, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_TIMESTAMP: fprintf(f, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: fprintf(f, "%.9g", v->value.f32); break;
    case AMQP_FIELD_KIND_F64: fprintf(f, "%.17g", v->value.f64); break;
    case AMQP_FIELD_KIND_UTF8:
        put_field(f, v->value.bytes.bytes, v->value.bytes.len);
        break;
    case AMQP_FIELD_KIND_BYTES:
        fprintf(f, "(bytes, %zu)", v->value.bytes.len);
        return;
    default:
        fprintf(f, "(%s)", kind_name(v->kind));
        return;
    }
    fprintf(f, " (%s)", kind_name(v->kind));
}

static json_object *str_json(const void *p, size_t n)
{
    return api_json_str(p, n); /* AMQP strings are bytes: keep the JSON valid */
}

static void props_text(FILE *f, const amqp_basic_properties_t *p)
{
#define PROP_STR(flag, field, key)                                                          \
    if (p->_flags & (flag)) {                                                              \
        fputs("    " key " ", f);                                                          \
        put_field(f, p->field.bytes, p->field.len);                                        \
        fputc('\n', f);                                                                    \
    }
    PROP_STR(AMQP_BASIC_CONTENT_TYPE_FLAG, content_type, "content_type")
    PROP_STR(AMQP_BASIC_CONTENT_ENCODING_FLAG, content_encoding, "content_encoding")
    PROP_STR(AMQP_BASIC_CORRELATION_ID_FLAG, correlation_id, "correlation_id")
    PROP_STR(AMQP_BASIC_REPLY_TO_FLAG, reply_to, "reply_to")
    PROP_STR(AMQP_BASIC_EXPIRATION_FLAG, expiration, "expiration")
    PROP_STR(AMQP_BASIC_TYPE_FLAG, type, "type")
    PROP_STR(AMQP_BASIC_USER_ID_FLAG, user_id, "user_id")
    PROP_STR(AMQP_BASIC_APP_ID_FLAG, app_id, "app_id")
#undef PROP_STR
    if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG)
        fprintf(f, "    delivery_mode %u\n", p->delivery_mode);
    if (p->_flags & AMQP_BASIC_PRIORITY_FLAG)
        fprintf(f, "    priority %u\n", p->priority);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        fprintf(f, "    timestamp %" PRIu64 "\n", p->timestamp);
}

/*
 * Print one pending message. Reads its record back from the open segment
 * and checks it again. 0, or CLI_EIO (reported).
 */
static int dump_one(struct scan *s, const struct dump_opts *o, const struct live *m,
                    amqp_pool_t *pool, int first)
{
    struct seg *g = &s->segs[m->seg];
    struct walrec_hdr h;
    struct walrec_add a;
    const uint8_t *pl;
    amqp_basic_properties_t *props = NULL;
    char due[48], enq[48], bid[48];
    ssize_t got;

    if (m->len > s->cap) {
        s->buf = xrealloc(s->buf, m->len);
        s->cap = m->len;
    }
    got = walscan_pread(g->fd, s->buf, m->len, m->off);
    if (got < 0 || (size_t)got != m->len ||
        walrec_decode(s->buf, m->len, g->salt, &h, &pl) != (int)m->len ||
        walrec_add_decode(pl, h.len, &a) != (int)h.len) {
        fprintf(stderr, "delay-bridge wal dump: cannot read back the record at %s/%s offset %"
                PRIu32 ": %s\n", s->dir, g->name, m->off,
                got < 0 ? strerror((int)-got) : "it changed since the scan");
        return CLI_EIO;
    }
    recycle_amqp_pool(pool);
    if (a.props_len &&
        amqp_decode_properties(AMQP_BASIC_CLASS, pool, (amqp_bytes_t){a.props_len, (void *)a.props},
                               (void **)&props) < 0) {
        props = NULL;
        fprintf(stderr, "delay-bridge wal dump: msg_id %" PRIu64 ": stored AMQP properties do "
                "not decode\n", m->msg_id);
    }
    fmt_iso(m->due_ms, due, sizeof(due));
    fmt_iso(m->enqueue_ms, enq, sizeof(enq));
    snprintf(bid, sizeof(bid), "%016" PRIx64 "-%" PRIu64, s->wal_id, m->msg_id);
    int has_mid = props && (props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG);
    int has_hdr = props && (props->_flags & AMQP_BASIC_HEADERS_FLAG);

    if (o->json) {
        json_object *j = json_object_new_object();
        json_object_object_add(j, "due", json_object_new_string(due));
        json_object_object_add(j, "due_ms", json_object_new_uint64(m->due_ms));
        json_object_object_add(j, "enqueue", json_object_new_string(enq));
        json_object_object_add(j, "enqueue_ms", json_object_new_uint64(m->enqueue_ms));
        json_object_object_add(j, "route", str_json(a.route, a.route_len));
        json_object_object_add(j, "exchange", str_json(a.exchange, a.exchange_len));
        json_object_object_add(j, "routing_key", str_json(a.routing_key, a.routing_key_len));
        json_object_object_add(j, "size", json_object_new_int64(a.body_len));
        json_object_object_add(j, "message_id",
                               has_mid ? str_json(props->message_id.bytes, props->message_id.len)
                                       : NULL);
        json_object_object_add(j, "msg_id", json_object_new_uint64(m->msg_id));
        json_object_object_add(j, "key", (a.flags & WALREC_ADD_KEYED) ? str_json(a.key, a.key_len)
                                                                       : NULL);
        json_object_object_add(j, "bridge_id", json_object_new_string(bid));
        json_object_object_add(j, "lsn", json_object_new_uint64(m->lsn));
        json_object_object_add(j, "segment", json_object_new_uint64(g->segno));
        json_object_object_add(j, "offset", json_object_new_int64(m->off));
        json_object_object_add(j, "dead_letter",
                               json_object_new_boolean((a.flags & WALREC_ADD_DEADLETTER) != 0));
        if (a.flags & WALREC_ADD_DEADLETTER)
            json_object_object_add(j, "error", json_object_new_int64(a.error));
        if (o->headers) {
            /* the daemon's own rendering (amqp_msg.c), headers lifted beside the rest */
            json_object *pj = amqp_msg_props_json(a.props, a.props_len), *hj = NULL;
            if (!pj)
                pj = json_object_new_object();
            if (json_object_object_get_ex(pj, "headers", &hj)) {
                json_object_get(hj);
                json_object_object_del(pj, "headers");
            }
            json_object_object_add(j, "headers", hj ? hj : json_object_new_object());
            json_object_object_add(j, "properties", pj);
        }
        printf("%s  %s", first ? "" : ",\n",
               json_object_to_json_string_ext(j, JSON_C_TO_STRING_SPACED |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(j);
        return 0;
    }
    printf("%s %" PRIu64 " ", due, m->due_ms);
    put_field(stdout, a.route, a.route_len);
    putchar(' ');
    put_field(stdout, a.exchange, a.exchange_len);
    putchar(' ');
    put_field(stdout, a.routing_key, a.routing_key_len);
    printf(" %" PRIu32 " ", a.body_len);
    if (has_mid)
        put_field(stdout, props->message_id.bytes, props->message_id.len);
    else
        putchar('-');
    printf(" %" PRIu64 " ", m->msg_id);
    if (a.flags & WALREC_ADD_KEYED)
        put_field(stdout, a.key, a.key_len);
    else
        putchar('-');
    printf("%s\n", (a.flags & WALREC_ADD_DEADLETTER) ? " dead-letter" : "");
    if (o->headers) {
        if (has_hdr)
            for (int i = 0; i < props->headers.num_entries; i++) {
                const amqp_table_entry_t *e = &props->headers.entries[i];
                fputs("    header ", stdout);
                put_field(stdout, e->key.bytes, e->key.len);
                fputs(" = ", stdout);
                field_text(stdout, &e->value);
                putchar('\n');
            }
        if (props)
            props_text(stdout, props);
    }
    return 0;
}

static int wal_dump(int argc, char **argv)
{
    static const struct option opts[] = {
        {"route", required_argument, NULL, 'r'},
        {"key", required_argument, NULL, 'k'},
        {"due-before", required_argument, NULL, 'b'},
        {"limit", required_argument, NULL, 'n'},
        {"headers", no_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct dump_opts o = {NULL, NULL, 0, 0, 0, 0};
    struct scan s;
    pool_handle *v;
    amqp_pool_t pool;
    size_t n, shown = 0, matched = 0;
    int c, rc;
    char *end;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            o.route = optarg;
            break;
        case 'k':
            o.key = optarg;
            break;
        case 'b':
            if (parse_time(optarg, &o.due_before) < 0) {
                fprintf(stderr, "delay-bridge wal dump: --due-before %s: expected ms since the "
                        "epoch or ISO-8601 like 2026-11-23T10:00:00Z\n", optarg);
                return CLI_USAGE;
            }
            break;
        case 'n':
            errno = 0;
            o.limit = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || optarg[0] == '-' || o.limit == 0) {
                fprintf(stderr, "delay-bridge wal dump: --limit %s: expected a positive count\n",
                        optarg);
                return CLI_USAGE;
            }
            break;
        case 'H':
            o.headers = 1;
            break;
        case 'j':
            o.json = 1;
            break;
        case 'h':
            dump_usage(stdout);
            return CLI_OK;
        default:
            dump_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal dump: expected one directory\n");
        dump_usage(stderr);
        return CLI_USAGE;
    }
    rc = scan_dir(&s, argv[optind], o.key);
    if (rc != CLI_OK) {
        scan_free(&s);
        return rc;
    }
    v = live_handles(&s, &n);
    sort_pool = &s.pool;
    qsort(v, n, sizeof(*v), cmp_due);
    init_amqp_pool(&pool, 4096);
    if (o.json)
        printf("[\n");
    else
        printf("# DUE DUE_MS ROUTE EXCHANGE ROUTING_KEY SIZE MESSAGE_ID MSG_ID KEY\n");
    for (size_t i = 0; i < n && rc == CLI_OK; i++) {
        const struct live *m = pool_at(&s.pool, v[i]);
        const struct route_stat *r = &s.routes[m->route];

        if (o.route && (strlen(o.route) != r->len || memcmp(o.route, r->name, r->len) != 0))
            continue;
        if (o.key && !m->key_match)
            continue;
        if (o.due_before && m->due_ms >= o.due_before)
            break; /* sorted by due time: nothing later matches */
        matched++;
        if (o.limit && shown >= o.limit)
            continue;
        rc = dump_one(&s, &o, m, &pool, shown == 0);
        shown++;
    }
    if (o.json)
        printf("%s]\n", shown ? "\n" : "");
    else
        printf("# %zu shown, %zu matching, %zu pending in all%s\n", shown, matched, n,
               s.torn ? "; the newest segment ends in a torn tail" : "");
    if (s.torn)
        fprintf(stderr, "delay-bridge wal dump: note: torn tail in the newest segment %s at "
                "offset %" PRIu64 " (%s); not corruption\n", s.segs[s.nsegs - 1].name,
                s.torn_off, s.torn_why);
    empty_amqp_pool(&pool);
    free(v);
    scan_free(&s);
    if (fflush(stdout) != 0 && rc == CLI_OK) {
        fprintf(stderr, "delay-bridge wal dump: cannot write output: %s\n", strerror(errno));
        rc = CLI_EIO;
    }
    return rc;
}

/* ---- wal salvage ------------------------------------------------------- */

/*
 * SALVAGE
 *
 * "wal salvage DIR --yes" turns a log the daemon refuses (exit 4, WAL
 * corrupt) into one it accepts, keeping every record that is still valid
 * and deleting nothing. What the daemon requires at open (src/wal.c,
 * walscan.h): every segment header valid with one wal_id, segment numbers
 * contiguous, and LSNs +1 per record from each segment's base_lsn, across
 * segments too.
 *
 * Why the LSNs are kept, not renumbered. A message's id is the LSN of its
 * first ADD; DONE and CANCEL records name ids, and every republished message
 * carries "<wal_id>-<msg_id>" in x-delay-bridge-id for consumers to
 * deduplicate on. New messages take the next LSN as their id. Renumbering
 * records down to close a gap would make the daemon hand out ids again that
 * were already used (a consumer that deduplicates would drop the new
 * message); renumbering the surviving ADDs would change ids already seen.
 * So every surviving record keeps its bytes, LSN and segment, and each LSN
 * whose record is lost is taken by a FILLER: an empty DONE record (count 0,
 * 28 bytes, the smallest record there is), which replay ignores. Lost
 * records were at least 28 bytes each, so a repaired segment is never
 * larger than the damaged one.
 *
 * Per damaged segment (mapped read-only): records are decoded from the
 * header on; a record that is valid with the next LSN is kept; one that is
 * not starts a damaged region, and the rest of the file is searched byte by
 * byte for the next record that is valid under the segment's salt with an
 * LSN at or beyond the expected one and below the next segment's base_lsn
 * (walscan's torn-tail search, with an upper bound). The bytes skipped are
 * dropped; the LSNs skipped (known exactly, from the record found, or from
 * the next segment's base_lsn when nothing valid follows) get fillers. In
 * the newest segment, what follows the last valid record is a torn tail and
 * is dropped like the daemon would cut it (no record after it: its LSNs
 * are unknown and are not reserved).
 *
 * A damaged segment's file is kept as NAME.damaged-<UTC time> (a hard link,
 * or a rename where links are not possible); the repaired file is written
 * as NAME.salvage-tmp, synced, given the old file's owner and mode, and
 * renamed over NAME, then the directory is synced: at every moment NAME is
 * either the old or the new file. Names not ending in ".wal" are ignored by
 * the daemon. Then the directory is checked again like "wal check" does.
 *
 * What cannot be salvaged (exit 4): a bad segment header that is not the
 * newest segment's half-written one (the salt that seeds every CRC is in
 * it), a segment of another log, a missing segment, LSNs that overlap.
 *
 * Which messages may be lost: a lost LSN L could have been the first ADD of
 * message L. If a surviving ADD carries msg id L (a compaction copy) the
 * message survives; if a surviving DONE or CANCEL names L it was already
 * published or cancelled. The rest are reported as possibly lost. A lost
 * DONE or CANCEL cannot be told: a published message may go out again, a
 * cancelled or replaced one may go out after all; that is said too.
 *
 * The directory's LOCK is taken with flock(LOCK_EX|LOCK_NB) first (the
 * daemon's lock): a running daemon makes it exit 5 before anything is read.
 */

#define FILLER_SIZE (WALREC_HDR_SIZE + 4)
#define MAX_FILL (1ull << 26) /* LSNs one gap may fill (1.8 GB of fillers) */
#define OUTBUF (1u << 20)

struct piece {
    int fill;   /* 0: copy bytes [a, a + b) of the old file; 1: b fillers from LSN a */
    uint64_t a, b;
};

struct repair {
    size_t idx;             /* index into scan.segs */
    struct walrec_seghdr h; /* its header: written again as it was */
    struct piece *p;
    size_t np;
    uint64_t kept, kept_bytes, fills;
    char aside[WALSCAN_NAME_SIZE + 48];
};

struct drop {
    size_t idx;
    uint64_t off, bytes; /* the bytes dropped */
    uint64_t lsn, nrec;  /* the LSNs they held; unknown: from lsn on, count unknown */
    int unknown;
    char why[220];
};

struct lost {
    uint64_t lsn, count;
    uint8_t *st; /* per LSN: 0 unknown, 1 an ADD with that msg id survives, 2 named by DONE/CANCEL */
};

struct salv {
    struct repair *rep;
    size_t nrep;
    struct drop *drops;
    size_t ndrops;
    struct lost *lost;
    size_t nlost;
    int torn; /* the newest segment ends in a torn tail the daemon will cut */
};

static void salv_mark(struct salv *v, uint64_t id, uint8_t how)
{
    for (size_t i = 0; i < v->nlost; i++) {
        struct lost *l = &v->lost[i];
        if (id >= l->lsn && id - l->lsn < l->count && l->st[id - l->lsn] < how)
            l->st[id - l->lsn] = how;
    }
}

static void salv_note(struct salv *v, const struct walscan_rec *rec)
{
    uint32_t count;

    if (!v->nlost)
        return;
    if (rec->hdr.type == WALREC_ADD) {
        salv_mark(v, walrec_get64(rec->payload), 1);
        return;
    }
    walrec_done_decode(rec->payload, rec->hdr.len, &count); /* layout checked */
    for (uint32_t i = 0; i < count; i++)
        salv_mark(v, walrec_done_id(rec->payload, i), 2);
}

static void salv_free(struct salv *v)
{
    for (size_t i = 0; i < v->nrep; i++)
        free(v->rep[i].p);
    free(v->rep);
    free(v->drops);
    for (size_t i = 0; i < v->nlost; i++)
        free(v->lost[i].st);
    free(v->lost);
}

static void plan_keep(struct repair *rp, uint64_t from, uint64_t to)
{
    struct piece *last = rp->np ? &rp->p[rp->np - 1] : NULL;

    if (to <= from)
        return;
    rp->kept_bytes += to - from;
    if (last && !last->fill && last->a + last->b == from) {
        last->b += to - from;
        return;
    }
    rp->p = xrealloc(rp->p, (rp->np + 1) * sizeof(*rp->p));
    rp->p[rp->np++] = (struct piece){0, from, to - from};
}

/* Bytes [off, off + bytes) dropped, LSNs [lsn, lsn + nrec) lost (fillers), or from lsn on. */
static void plan_drop(struct salv *v, struct repair *rp, uint64_t off, uint64_t bytes,
                      uint64_t lsn, uint64_t nrec, int unknown, const char *why)
{
    struct drop *d;

    v->drops = xrealloc(v->drops, (v->ndrops + 1) * sizeof(*v->drops));
    d = &v->drops[v->ndrops++];
    d->idx = rp->idx;
    d->off = off;
    d->bytes = bytes;
    d->lsn = lsn;
    d->nrec = nrec;
    d->unknown = unknown;
    snprintf(d->why, sizeof(d->why), "%s", why);
    if (!nrec)
        return;
    rp->p = xrealloc(rp->p, (rp->np + 1) * sizeof(*rp->p));
    rp->p[rp->np++] = (struct piece){1, lsn, nrec};
    rp->fills += nrec;
    v->lost = xrealloc(v->lost, (v->nlost + 1) * sizeof(*v->lost));
    v->lost[v->nlost].lsn = lsn;
    v->lost[v->nlost].count = nrec;
    v->lost[v->nlost].st = xcalloc(nrec, 1);
    v->nlost++;
}

/*
 * The next offset at or after from where a record valid under salt starts
 * whose LSN is >= expect and < limit (limit 0: no bound); 0 if none. Its
 * LSN in *lsn.
 */
static uint64_t resync(const uint8_t *b, uint64_t n, uint64_t from, uint32_t salt,
                       uint64_t expect, uint64_t limit, uint64_t *lsn)
{
    for (uint64_t p = from; p + WALREC_HDR_SIZE <= n; p++) {
        const uint8_t *q = b + p;
        struct walrec_hdr h;
        const uint8_t *pl;
        uint64_t l;
        uint32_t len;

        if (q[4] < WALREC_ADD || q[4] > WALREC_CANCEL || q[6] || q[7] ||
            walrec_get32(q + 20) != 0)
            continue;
        len = walrec_get32(q);
        if (len > WALREC_MAX_PAYLOAD || len > n - p - WALREC_HDR_SIZE)
            continue;
        l = walrec_get64(q + 8);
        if (l < expect || (limit && l >= limit))
            continue;
        if (walrec_decode(q, (size_t)(n - p), salt, &h, &pl) > 0) {
            *lsn = l;
            return p;
        }
    }
    return 0;
}

/*
 * Plan the repair of segment idx (header h): what to keep, where fillers
 * go. limit: the next segment's base_lsn (0 for the newest). Records before
 * note_from were replayed already (walscan's valid prefix); bad0/why0:
 * walscan's offset and words for the first bad record. 0, CLI_CORRUPT
 * (s->corrupt set) or -errno (reported).
 */
static int plan_segment(struct scan *s, struct salv *v, size_t idx, const struct walrec_seghdr *h,
                        uint64_t limit, uint64_t note_from, uint64_t bad0, const char *why0)
{
    struct seg *g = &s->segs[idx];
    struct repair *rp;
    const uint8_t *b;
    uint64_t n = g->size, pos = WALREC_SEGHDR_SIZE, run = pos, expect = g->base_lsn;
    void *map;
    int r = 0;

    map = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, g->fd, 0);
    if (map == MAP_FAILED) {
        r = -errno;
        fprintf(stderr, "delay-bridge wal salvage: cannot map %s/%s: %s\n", s->dir, g->name,
                strerror(-r));
        return r;
    }
    b = map;
    v->rep = xrealloc(v->rep, (v->nrep + 1) * sizeof(*v->rep));
    rp = &v->rep[v->nrep++];
    memset(rp, 0, sizeof(*rp));
    rp->idx = idx;
    rp->h = *h;
    while (pos < n) {
        struct walrec_hdr rh;
        const uint8_t *pl;
        uint64_t q, found = 0;
        char why[220];
        int d = walrec_decode(b + pos, (size_t)(n - pos), g->salt, &rh, &pl);

        if (d > 0 && rh.lsn >= expect && (!limit || rh.lsn < limit)) {
            if (rh.lsn > expect) { /* LSNs skipped, no bytes missing */
                plan_keep(rp, run, pos);
                run = pos;
                plan_drop(v, rp, pos, 0, expect, rh.lsn - expect, 0,
                          "LSNs skipped between two valid records");
            }
            if (pos >= note_from) {
                struct walscan_rec rec = {rh, pl, pos, (uint32_t)d};
                on_record(s, idx, &rec);
            }
            rp->kept++;
            expect = rh.lsn + 1;
            pos += (uint64_t)d;
            continue;
        }
        if (d > 0)
            snprintf(why, sizeof(why), "a valid record with lsn %" PRIu64 " where %" PRIu64
                     " was expected", rh.lsn, expect);
        else if (pos == bad0 && why0 && *why0)
            snprintf(why, sizeof(why), "%s", why0);
        else if (d == WALREC_PARTIAL)
            snprintf(why, sizeof(why), "record runs past the end of the file");
        else
            snprintf(why, sizeof(why), "bad record header, checksum or payload layout");
        plan_keep(rp, run, pos);
        q = resync(b, n, pos + 1, g->salt, expect, limit, &found);
        if (q) {
            if (found - expect > MAX_FILL)
                goto too_many;
            plan_drop(v, rp, pos, q - pos, expect, found - expect, 0, why);
            expect = found;
            pos = run = q;
        } else if (limit) {
            if (limit - expect > MAX_FILL)
                goto too_many;
            plan_drop(v, rp, pos, n - pos, expect, limit - expect, 0, why);
            expect = limit;
            pos = run = n;
        } else {
            plan_drop(v, rp, pos, n - pos, expect, 0, 1, why);
            pos = run = n;
        }
    }
    plan_keep(rp, run, pos);
    if (limit && expect < limit) {
        if (limit - expect > MAX_FILL)
            goto too_many;
        plan_drop(v, rp, n, 0, expect, limit - expect, 0,
                  "the next segment starts at a later LSN than this one ends");
    }
    goto cleanup;
too_many:
    set_corrupt(s, idx, pos, "cannot salvage: more than %llu LSNs missing in one place",
                (unsigned long long)MAX_FILL);
    r = CLI_CORRUPT;
cleanup:
    munmap(map, (size_t)n);
    return r;
}

/*
 * Scan every segment; plan a repair for each one the daemon would refuse.
 * 0 (v->nrep repairs planned, maybe none), CLI_CORRUPT (cannot salvage,
 * s->corrupt set) or -errno (reported).
 */
static int salv_plan(struct scan *s, struct salv *v)
{
    struct walrec_seghdr *hs = NULL;
    size_t n;
    int r;

    if ((r = open_segs(s)) != 0)
        return r;
    walscan_init(&s->sc, CHUNK, NULL, NULL);
    n = s->nsegs;
    hs = xcalloc(n ? n : 1, sizeof(*hs));
    for (size_t i = 0; i < n; i++) {
        struct seg *g = &s->segs[i];

        r = walscan_seghdr(g->fd, g->segno, g->size, i + 1 == n, &hs[i]);
        if (r == WALSCAN_HDR_CREATING) { /* the daemon deletes it */
            v->torn = 1;
            n = i;
            break;
        }
        if (r < 0) {
            fprintf(stderr, "delay-bridge wal salvage: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror(-r));
            goto cleanup;
        }
        if (r != WALSCAN_HDR_OK) {
            set_corrupt(s, i, 0, "cannot salvage: bad segment header (its salt seeds every "
                        "record checksum); move the segment aside by hand");
            r = CLI_CORRUPT;
            goto cleanup;
        }
        g->salt = hs[i].salt;
        g->base_lsn = hs[i].base_lsn;
        if (i == 0) {
            s->wal_id = hs[i].wal_id;
            s->first_lsn = hs[i].base_lsn;
        } else if (hs[i].wal_id != s->wal_id) {
            set_corrupt(s, i, 32, "cannot salvage: wal_id %016" PRIx64 " differs from %016" PRIx64
                        " of the first segment (a segment of another log?)", hs[i].wal_id,
                        s->wal_id);
            r = CLI_CORRUPT;
            goto cleanup;
        } else if (g->segno != s->segs[i - 1].segno + 1) {
            set_corrupt(s, i, 0, "cannot salvage: segment numbers not contiguous: %" PRIu64
                        " follows %" PRIu64 " (a segment is missing)", g->segno,
                        s->segs[i - 1].segno);
            r = CLI_CORRUPT;
            goto cleanup;
        } else if (hs[i].base_lsn <= hs[i - 1].base_lsn) {
            set_corrupt(s, i, 24, "cannot salvage: base_lsn %" PRIu64 " not above the previous "
                        "segment's %" PRIu64, hs[i].base_lsn, hs[i - 1].base_lsn);
            r = CLI_CORRUPT;
            goto cleanup;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct seg *g = &s->segs[i];
        struct walscan *sc = &s->sc;
        struct walscan_rec rec;
        int newest = i + 1 == n;
        uint64_t limit = newest ? 0 : hs[i + 1].base_lsn;

        walscan_start(sc, g->fd, g->size, g->salt, g->base_lsn, newest);
        while ((r = walscan_next(sc, &rec)) > 0) {
            if (limit && rec.hdr.lsn >= limit)
                break; /* runs into the next segment's LSNs */
            on_record(s, i, &rec);
            g->records++;
        }
        if (r < 0) {
            fprintf(stderr, "delay-bridge wal salvage: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror(-r));
            goto cleanup;
        }
        if (r > 0) { /* stopped at a record whose LSN belongs to the next segment */
            r = plan_segment(s, v, i, &hs[i], limit, rec.off, rec.off,
                             "LSN overlaps the next segment");
        } else if (sc->end == WALSCAN_BAD_RECORD || sc->end == WALSCAN_BAD_LSN) {
            r = plan_segment(s, v, i, &hs[i], limit, sc->bad_off, sc->bad_off,
                             sc->end == WALSCAN_BAD_RECORD ? sc->reason : NULL);
        } else {
            if (sc->end == WALSCAN_TORN)
                v->torn = 1;
            r = 0;
            if (limit && sc->next_lsn != limit) /* a gap to the next segment: fillers */
                r = plan_segment(s, v, i, &hs[i], limit, g->size, 0, NULL);
        }
        if (r != 0)
            goto cleanup;
    }
    r = 0;
cleanup:
    free(hs);
    return r;
}

/* buffered writes of the repaired segment */
struct outf {
    int fd;
    uint64_t off;
    uint8_t *buf;
    size_t n;
};

static int out_flush(struct outf *o)
{
    int r = 0;
    size_t done = 0;

    while (done < o->n) {
        ssize_t w = pwrite(o->fd, o->buf + done, o->n - done, (off_t)(o->off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            r = w < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)w;
    }
    o->off += done;
    o->n = 0;
    return r;
}

static int out_put(struct outf *o, const uint8_t *p, uint64_t len)
{
    int r;

    while (len) {
        size_t k = OUTBUF - o->n < len ? OUTBUF - o->n : (size_t)len;
        memcpy(o->buf + o->n, p, k);
        o->n += k;
        p += k;
        len -= k;
        if (o->n == OUTBUF && (r = out_flush(o)) < 0)
            return r;
    }
    return 0;
}

/* Write the repaired segment, keep the damaged one aside, swap them in. 0 or -errno (reported). */
static int salv_write(struct scan *s, struct repair *rp, const char *stamp)
{
    struct seg *g = &s->segs[rp->idx];
    struct outf o = {-1, 0, NULL, 0};
    char tmp[WALSCAN_NAME_SIZE + 16];
    const char *what = "write", *file = g->name; /* what failed, on which file */
    uint8_t zero4[4] = {0, 0, 0, 0};
    struct stat st;
    void *map = MAP_FAILED;
    int r = 0;

    snprintf(tmp, sizeof(tmp), "%s.salvage-tmp", g->name);
    if (fstat(g->fd, &st) < 0) {
        r = -errno;
        what = "stat";
        goto cleanup;
    }
    map = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, g->fd, 0);
    if (map == MAP_FAILED) {
        r = -errno;
        what = "map";
        goto cleanup;
    }
    o.buf = xrealloc(NULL, OUTBUF);
    file = tmp;
    o.fd = openat(s->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
    if (o.fd < 0) {
        r = -errno;
        what = "create";
        goto cleanup;
    }
    walrec_seghdr_encode(o.buf, &rp->h);
    o.n = WALREC_SEGHDR_SIZE;
    for (size_t i = 0; i < rp->np && r == 0; i++) {
        const struct piece *p = &rp->p[i];
        if (!p->fill) {
            r = out_put(&o, (const uint8_t *)map + p->a, p->b);
            continue;
        }
        for (uint64_t k = 0; k < p->b && r == 0; k++) {
            struct walrec_hdr fh = {4, WALREC_DONE, 0, p->a + k, 0};
            struct walrec_piece pc = {zero4, 4};
            uint8_t rec[FILLER_SIZE];

            walrec_hdr_encode(rec, &fh, rp->h.salt, &pc, 1);
            memcpy(rec + WALREC_HDR_SIZE, zero4, 4);
            r = out_put(&o, rec, FILLER_SIZE);
        }
    }
    if (r == 0)
        r = out_flush(&o);
    if (r < 0)
        goto cleanup;
    if (fchown(o.fd, st.st_uid, st.st_gid) < 0) {
        /* not root: the file is ours already */
    }
    if (fchmod(o.fd, st.st_mode & 0777) < 0 || fdatasync(o.fd) < 0) {
        r = -errno;
        what = "sync";
        goto cleanup;
    }
    file = g->name;
    /* The damaged file stays, under another name; NAME never goes missing. */
    if (linkat(s->dirfd, g->name, s->dirfd, rp->aside, 0) < 0) {
        if (errno == EEXIST || renameat(s->dirfd, g->name, s->dirfd, rp->aside) < 0) {
            r = -errno;
            what = "keep aside";
            goto cleanup;
        }
    }
    if (renameat(s->dirfd, tmp, s->dirfd, g->name) < 0) {
        r = -errno;
        what = "rename";
        goto cleanup;
    }
    if (fsync(s->dirfd) < 0) {
        r = -errno;
        what = "sync the directory";
    }
cleanup:
    if (r < 0)
        fprintf(stderr, "delay-bridge wal salvage: cannot %s %s/%s: %s\n", what, s->dir, file,
                strerror(-r));
    if (o.fd >= 0)
        close(o.fd);
    if (r < 0 && o.fd >= 0)
        unlinkat(s->dirfd, tmp, 0);
    if (map != MAP_FAILED)
        munmap(map, (size_t)g->size);
    free(o.buf);
    return r;
}

/* Print the ids of v's lost LSNs that nothing surviving accounts for, as ranges. */
static uint64_t print_lost_ids(const struct salv *v, uint64_t *finished, uint64_t *survived)
{
    uint64_t n = 0, ranges = 0;

    *finished = *survived = 0;
    for (size_t i = 0; i < v->nlost; i++) {
        const struct lost *l = &v->lost[i];
        for (uint64_t k = 0; k < l->count; k++) {
            if (l->st[k] == 1) {
                (*survived)++;
                continue;
            }
            if (l->st[k] == 2) {
                (*finished)++;
                continue;
            }
            uint64_t e = k;
            while (e + 1 < l->count && l->st[e + 1] == 0)
                e++;
            n += e - k + 1;
            if (ranges++ < 50) {
                if (e == k)
                    printf("%s%" PRIu64, ranges > 1 ? ", " : " ", l->lsn + k);
                else
                    printf("%s%" PRIu64 "..%" PRIu64, ranges > 1 ? ", " : " ", l->lsn + k,
                           l->lsn + e);
            }
            k = e;
        }
    }
    if (ranges > 50)
        printf(", ... (%" PRIu64 " ranges in all)", ranges);
    return n;
}

static void salvage_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal salvage DIR [--yes]\n"
            "\n"
            "Repair a WAL directory that the daemon refuses as corrupt (exit 4): keep every\n"
            "record that is still valid, drop the damaged bytes, and report what was lost.\n"
            "Each damaged segment file is kept as NAME.damaged-<UTC time> in DIR (nothing is\n"
            "deleted) and replaced by a repaired NAME: the valid records, unchanged (same\n"
            "LSNs, so every message keeps its id), with each LSN whose record was lost taken\n"
            "by an empty DONE record, so LSNs stay contiguous and no message id is ever\n"
            "handed out twice. A torn tail of the newest segment is left for the daemon to\n"
            "cut, as it always does.\n"
            "\n"
            "Reports the bytes and records dropped and the msg ids whose message may have\n"
            "been lost (an ADD among the dropped records: not accounted for by a surviving\n"
            "copy, DONE or CANCEL). A dropped DONE or CANCEL cannot be known: a published\n"
            "message may be published again, a cancelled one published after all.\n"
            "\n"
            "Takes the directory's LOCK (the daemon's lock): refuses while a daemon runs.\n"
            "Without --yes it only prints what it would do and changes nothing.\n"
            "\n"
            "  --yes        do it\n"
            "  -h, --help   print this help and exit\n"
            "\n"
            "Exit codes: 0 salvaged, or nothing to do (the log is sound); 1 I/O error;\n"
            "2 usage; 4 still corrupt: cannot be salvaged (bad header of an older segment,\n"
            "a missing segment, a segment of another log), or without --yes a corrupt log\n"
            "left as it was; 5 locked by a running daemon.\n");
}

static int wal_salvage(int argc, char **argv)
{
    static const struct option opts[] = {
        {"yes", no_argument, NULL, 'y'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct scan s;
    struct salv v;
    const char *dir;
    char stamp[32];
    uint64_t drop_bytes = 0, drop_recs = 0, pending, finished, survived, maybe;
    int c, rc, r, yes = 0, lockfd = -1, unknown = 0;
    time_t now = time(NULL);
    struct tm tm;

    optind = 1;
    while ((c = getopt_long(argc, argv, "hy", opts, NULL)) != -1) {
        switch (c) {
        case 'y':
            yes = 1;
            break;
        case 'h':
            salvage_usage(stdout);
            return CLI_OK;
        default:
            salvage_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal salvage: expected one directory\n");
        salvage_usage(stderr);
        return CLI_USAGE;
    }
    dir = argv[optind];
    memset(&v, 0, sizeof(v));
    scan_init(&s, dir, NULL);
    s.salv = &v;
    s.dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s.dirfd < 0) {
        fprintf(stderr, "delay-bridge wal salvage: cannot open WAL directory %s: %s\n", dir,
                strerror(errno));
        rc = CLI_EIO;
        goto cleanup;
    }
    /* The daemon's lock: held until we exit, so no daemon starts meanwhile. */
    lockfd = openat(s.dirfd, "LOCK", (yes ? O_RDWR | O_CREAT : O_RDONLY) | O_CLOEXEC, 0644);
    if (lockfd < 0 && errno != ENOENT) {
        fprintf(stderr, "delay-bridge wal salvage: cannot open %s/LOCK: %s\n", dir,
                strerror(errno));
        rc = CLI_EIO;
        goto cleanup;
    }
    if (lockfd >= 0 && flock(lockfd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK) {
            fprintf(stderr, "delay-bridge wal salvage: %s is locked by a running daemon "
                    "(%s/LOCK); stop it first\n", dir, dir);
            rc = CLI_LOCKED;
        } else {
            fprintf(stderr, "delay-bridge wal salvage: cannot lock %s/LOCK: %s\n", dir,
                    strerror(errno));
            rc = CLI_EIO;
        }
        goto cleanup;
    }

    r = salv_plan(&s, &v);
    if (r == CLI_CORRUPT) {
        printf("wal:            %s\n", dir);
        printf("result:         CANNOT SALVAGE: %s\n", s.corrupt);
        fprintf(stderr, "corrupt: %s\n", s.corrupt);
        rc = CLI_CORRUPT;
        goto cleanup;
    }
    if (r < 0) {
        rc = CLI_EIO;
        goto cleanup;
    }
    printf("wal:            %s\n", dir);
    if (v.nrep == 0) {
        printf("result:         nothing to do: the log is sound%s\n",
               v.torn ? " (the newest segment ends in a torn tail, which the daemon cuts off "
                        "at start)" : "");
        rc = CLI_OK;
        goto cleanup;
    }
    if (!gmtime_r(&now, &tm) || strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
        snprintf(stamp, sizeof(stamp), "%lld", (long long)now);
    for (size_t i = 0; i < v.nrep; i++) {
        struct repair *rp = &v.rep[i];
        const struct seg *g = &s.segs[rp->idx];

        snprintf(rp->aside, sizeof(rp->aside), "%s.damaged-%s", g->name, stamp);
        printf("segment %" PRIu64 " (%s/%s): damaged\n", g->segno, dir, g->name);
        for (size_t k = 0; k < v.ndrops; k++) {
            const struct drop *d = &v.drops[k];
            if (d->idx != rp->idx)
                continue;
            drop_bytes += d->bytes;
            drop_recs += d->nrec;
            printf("  dropped:      offset %" PRIu64 ", %" PRIu64 " bytes: ", d->off, d->bytes);
            if (d->unknown) {
                unknown = 1;
                printf("a torn tail (records from lsn %" PRIu64 " on, count unknown)", d->lsn);
            } else if (d->nrec == 0) {
                printf("no record lost (no LSN missing)");
            } else if (d->nrec == 1) {
                printf("1 record, lsn %" PRIu64, d->lsn);
            } else {
                printf("%" PRIu64 " records, lsn %" PRIu64 "..%" PRIu64, d->nrec, d->lsn,
                       d->lsn + d->nrec - 1);
            }
            printf(": %s\n", d->why);
        }
        printf("  kept:         %" PRIu64 " records, %" PRIu64 " bytes, unchanged\n", rp->kept,
               rp->kept_bytes);
        if (rp->fills)
            printf("  fillers:      %" PRIu64 " empty DONE record(s) hold the lost LSNs (ids are "
                   "never handed out twice)\n", rp->fills);
        printf("  %s%s/%s\n", yes ? "moved aside:  " : "would keep:   ", dir, rp->aside);
        printf("  %s%s/%s, %" PRIu64 " bytes\n", yes ? "replaced by:  " : "would write:  ",
               dir, g->name, (uint64_t)WALREC_SEGHDR_SIZE + rp->kept_bytes +
               rp->fills * FILLER_SIZE);
        if (yes && (r = salv_write(&s, rp, stamp)) < 0) {
            rc = CLI_EIO;
            goto cleanup;
        }
    }
    printf("dropped:        %" PRIu64 " record(s)%s, %" PRIu64 " bytes\n", drop_recs,
           unknown ? " (and a torn tail of unknown count)" : "", drop_bytes);
    printf("possibly lost:  msg ids");
    maybe = print_lost_ids(&v, &finished, &survived);
    if (!maybe)
        printf(" none");
    printf("\n");
    printf("                (a message is lost if its ADD was among the dropped records; %"
           PRIu64 " of the lost LSNs are ids a surviving DONE/CANCEL names, %" PRIu64
           " ids a surviving copy keeps)\n", finished, survived);
    if (drop_recs > finished + survived || unknown)
        printf("warning:        a dropped DONE or CANCEL cannot be identified: a message "
               "published before may be published again, a cancelled or replaced one may be "
               "published after all (consumers deduplicate on x-delay-bridge-id)\n");
    pending = s.ids.count;
    if (!yes) {
        printf("result:         CORRUPT, nothing changed: would keep %" PRIu64 " pending "
               "messages; run again with --yes to salvage\n", pending);
        rc = CLI_CORRUPT;
        goto cleanup;
    }
    /* Check the result the way the daemon will read it. */
    {
        struct scan t;
        rc = scan_dir(&t, dir, NULL);
        if (rc == CLI_OK)
            printf("result:         salvaged: the log checks out, %zu pending messages\n",
                   t.ids.count);
        else
            printf("result:         STILL CORRUPT after the salvage%s%s\n",
                   rc == CLI_CORRUPT ? ": " : "", rc == CLI_CORRUPT ? t.corrupt : "");
        scan_free(&t);
    }
cleanup:
    fflush(stdout);
    if (lockfd >= 0)
        close(lockfd);
    salv_free(&v);
    scan_free(&s);
    return rc;
}

/* ---- entry ------------------------------------------------------------- */

static void wal_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal check DIR\n"
            "       delay-bridge wal dump DIR [--route R] [--key K] [--due-before T]\n"
            "                                 [--limit N] [--headers] [--json]\n"
            "       delay-bridge wal salvage DIR [--yes]\n"
            "\n"
            "check and dump inspect a WAL directory, read-only and without taking its lock\n"
            "(safe while the daemon runs). salvage repairs a log the daemon refuses as\n"
            "corrupt: it keeps every valid record (and every message's id), moves each\n"
            "damaged segment aside as NAME.damaged-<time> (nothing is deleted), writes a\n"
            "repaired NAME and reports the records, bytes and msg ids that may be lost;\n"
            "it takes the directory's lock and, without --yes, only says what it would do.\n"
            "\"delay-bridge wal COMMAND --help\" describes each command.\n"
            "\n"
            "Exit codes: 0 ok (salvage: salvaged or nothing to do), 1 directory unreadable\n"
            "or I/O error, 2 usage, 4 WAL corrupt (salvage: still corrupt, cannot salvage,\n"
            "or a dry run), 5 (salvage) locked by a running daemon.\n");
}

int cli_wal_main(int argc, char **argv)
{
    if (argc < 2) {
        wal_usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        wal_usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "check") == 0)
        return wal_check(argc - 1, argv + 1);
    if (strcmp(argv[1], "dump") == 0)
        return wal_dump(argc - 1, argv + 1);
    if (strcmp(argv[1], "salvage") == 0)
        return wal_salvage(argc - 1, argv + 1);
    fprintf(stderr, "delay-bridge wal: unknown command \"%s\"\n", argv[1]);
    wal_usage(stderr);
    return CLI_USAGE;
}
