/*
 * cli_wal.c -- "delay-bridge wal check|dump DIR": look inside a WAL directory.
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
 *   1. List dir/NNNNNNNNNNNNNNNNNNNN.wal (20 digits) and open every segment
 *      at once. A live daemon may delete the oldest segment between the
 *      listing and the open (compaction): on ENOENT the listing is simply
 *      taken again. Once a segment is open, a later unlink cannot hurt.
 *   2. Per segment: a valid header (magic, version, CRC, reserved word),
 *      segno equal to the name, the same wal_id as the first segment,
 *      segment numbers contiguous, base_lsn continuing the previous segment.
 *   3. Per record: walrec_decode() with the segment's salt (header sanity,
 *      CRC, payload layout), then LSN = previous + 1.
 *   4. The first record that fails is a TORN TAIL if it lies in the newest
 *      segment and no valid record (CRC good under the salt, LSN beyond the
 *      last good one) follows anywhere in that file -- exactly the daemon's
 *      rule. A live daemon may be writing there right now, and a daemon
 *      starting up would cut it off; it is reported and the exit code is 0.
 *      A newest segment no longer than a header whose header is not valid
 *      is a segment being created (or a crash during that): also a torn tail.
 *      Anything else is corruption: "corrupt: segment N (file) offset X:
 *      reason", exit 4, the daemon's exit code for a corrupt WAL.
 *
 * LIVE MESSAGES
 *
 * Replayed like the engine does: an ADD whose msg_id is new creates a
 * pending message; an ADD whose msg_id is already pending is a compaction
 * copy and supersedes the earlier one; a DONE forgets its ids (ids it names
 * whose ADD is in a segment already deleted are normal and only counted).
 * CANCEL (type 3) is reserved: counted, its content ignored. Pending
 * messages are kept as small fixed-size items in a pool indexed by msg_id
 * (pool.h, idmap.h), about 60 bytes each; "dump" reads the few records it
 * prints back from the still-open segment files and decodes their AMQP
 * properties with rabbitmq-c.
 *
 * Exit codes: 0 ok, 1 directory unreadable or an I/O error, 2 usage, 4
 * corrupt (also: a file name or segment header the daemon would refuse).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <json-c/json.h>

#include "delay-bridge/cli.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/pool.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/xalloc.h"

#define CLI_OK 0
#define CLI_EIO 1
#define CLI_USAGE 2
#define CLI_CORRUPT 4

#define CHUNK (4u << 20)
#define LIST_RETRIES 20
#define MAX_ROUTES 65535

/* ---- state ------------------------------------------------------------- */

struct seg {
    uint64_t segno;
    char name[32];
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
    uint64_t n_add, n_copy, n_done, n_done_ids, n_done_unknown, n_cancel;
    uint64_t b_add, b_done, b_cancel;

    /* torn tail of the newest segment */
    int torn;
    uint64_t torn_off, torn_bytes;
    char torn_why[200];

    /* corruption: the message after "corrupt: " */
    char corrupt[512];

    struct pool pool;
    struct idmap ids;
    struct route_stat *routes;
    size_t nroutes;

    uint8_t *buf;
    size_t cap;
};

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

static ssize_t pread_full(int fd, void *p, size_t n, uint64_t off)
{
    size_t done = 0;

    while (done < n) {
        ssize_t r = pread(fd, (uint8_t *)p + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
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

static int cmp_seg(const void *a, const void *b)
{
    uint64_t x = ((const struct seg *)a)->segno, y = ((const struct seg *)b)->segno;
    return x < y ? -1 : x > y;
}

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
    DIR *d;
    struct dirent *e;
    size_t cap = 0;
    int fd, r = 0;

    fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d = fdopendir(fd))) {
        r = -errno;
        if (fd >= 0)
            close(fd);
        fprintf(stderr, "delay-bridge wal: cannot list %s: %s\n", s->dir, strerror(-r));
        return r;
    }
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        uint64_t segno = 0;
        int ok = len == 24 && strcmp(e->d_name + 20, ".wal") == 0;

        if (len < 4 || strcmp(e->d_name + len - 4, ".wal") != 0)
            continue; /* LOCK and anything else that is not a segment */
        for (size_t i = 0; ok && i < 20; i++) {
            if (!isdigit((unsigned char)e->d_name[i]) || segno > (UINT64_MAX - 9) / 10)
                ok = 0;
            else
                segno = segno * 10 + (uint64_t)(e->d_name[i] - '0');
        }
        if (!ok || segno == 0 || segno > UINT32_MAX) {
            snprintf(s->corrupt, sizeof(s->corrupt),
                     "unexpected file %s/%s in the log directory (the daemon refuses to open the "
                     "log; move it away)", s->dir, e->d_name);
            r = CLI_CORRUPT;
            goto cleanup;
        }
        if (s->nsegs == cap) {
            cap = cap ? cap * 2 : 64;
            s->segs = xrealloc(s->segs, cap * sizeof(*s->segs));
        }
        struct seg *g = &s->segs[s->nsegs++];
        memset(g, 0, sizeof(*g));
        g->segno = segno;
        g->fd = -1;
        memcpy(g->name, e->d_name, 25);
    }
    if (s->nsegs)
        qsort(s->segs, s->nsegs, sizeof(*s->segs), cmp_seg);
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
    closedir(d);
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

/* Why the record at p (avail bytes to the end of the file) is not valid. */
static void bad_reason(const uint8_t *p, uint64_t avail, uint32_t salt, char *out, size_t n)
{
    struct walrec_hdr h;
    const uint8_t *pl;
    uint32_t len;

    if (avail < WALREC_HDR_SIZE) {
        snprintf(out, n, "record header runs past the end of the file (%" PRIu64 " of %d bytes)",
                 avail, WALREC_HDR_SIZE);
        return;
    }
    len = walrec_get32(p);
    if (p[4] < WALREC_ADD || p[4] > WALREC_CANCEL)
        snprintf(out, n, "unknown record type %u", p[4]);
    else if ((p[6] | p[7]) != 0 || walrec_get32(p + 20) != 0)
        snprintf(out, n, "reserved header bytes are not zero");
    else if (len > WALREC_MAX_PAYLOAD)
        snprintf(out, n, "record length %" PRIu32 " exceeds the 1 GiB limit", len);
    else if (avail - WALREC_HDR_SIZE < len)
        snprintf(out, n, "record runs past the end of the file (payload %" PRIu32
                 " bytes, %" PRIu64 " left)", len, avail - WALREC_HDR_SIZE);
    else if (walrec_decode(p, (size_t)avail, salt, &h, &pl) == WALREC_INVALID) {
        /* CRC or payload layout: recompute to tell which. */
        struct walrec_piece piece = {p + WALREC_HDR_SIZE, len};
        uint8_t tmp[WALREC_HDR_SIZE];
        struct walrec_hdr hh = {len, p[4], p[5], walrec_get64(p + 8), 0};

        walrec_hdr_encode(tmp, &hh, salt, &piece, 1);
        if (hh.crc != walrec_get32(p + 16))
            snprintf(out, n, "checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
                     ", lsn field %" PRIu64 ")", walrec_get32(p + 16), hh.crc, hh.lsn);
        else
            snprintf(out, n, "%s payload layout does not add up to its length %" PRIu32,
                     p[4] == WALREC_ADD ? "ADD" : "DONE", len);
    } else {
        snprintf(out, n, "invalid record");
    }
}

/*
 * The record at off in the newest segment (idx) is not valid: is there a
 * valid record after it? Returns its offset, 0 if none, or -errno.
 */
static int64_t valid_after(struct scan *s, size_t idx, uint64_t off, uint64_t last_good)
{
    struct seg *g = &s->segs[idx];
    uint64_t end = g->size;
    size_t n = (size_t)(end - off);
    uint8_t *m = xrealloc(NULL, n);
    ssize_t got = pread_full(g->fd, m, n, off);
    int64_t found = 0;

    if (got < 0) {
        free(m);
        return got;
    }
    for (uint64_t pos = 1; pos + WALREC_HDR_SIZE <= (uint64_t)got; pos++) {
        const uint8_t *p = m + pos;
        struct walrec_hdr h;
        const uint8_t *pl;

        if (p[4] < WALREC_ADD || p[4] > WALREC_CANCEL || (p[6] | p[7]) != 0 ||
            walrec_get32(p + 20) != 0 ||
            walrec_get32(p) > (uint64_t)got - pos - WALREC_HDR_SIZE ||
            walrec_get64(p + 8) <= last_good)
            continue;
        if (walrec_decode(p, (size_t)((uint64_t)got - pos), g->salt, &h, &pl) > 0) {
            found = (int64_t)(off + pos);
            break;
        }
    }
    free(m);
    return found;
}

static void on_add(struct scan *s, size_t idx, uint64_t off, const struct walrec_hdr *h,
                   const uint8_t *pl)
{
    struct walrec_add a;
    pool_handle ph;
    struct live *m;

    walrec_add_decode(pl, h->len, &a); /* walrec_decode() checked the layout */
    s->n_add++;
    s->b_add += WALREC_HDR_SIZE + (uint64_t)h->len;
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
    m->lsn = h->lsn;
    m->seg = (uint32_t)idx;
    m->off = (uint32_t)off;
    m->len = WALREC_HDR_SIZE + h->len;
    m->body_len = a.body_len;
    m->route = route_id(s, a.route, a.route_len);
    m->flags = a.flags;
    m->error = a.error;
}

static void on_done(struct scan *s, const struct walrec_hdr *h, const uint8_t *pl)
{
    uint32_t count;

    walrec_done_decode(pl, h->len, &count);
    s->n_done++;
    s->b_done += WALREC_HDR_SIZE + (uint64_t)h->len;
    s->n_done_ids += count;
    for (uint32_t i = 0; i < count; i++) {
        pool_handle ph = idmap_del(&s->ids, walrec_done_id(pl, i));
        if (ph != POOL_NIL)
            pool_release(&s->pool, ph);
        else
            s->n_done_unknown++;
    }
}

/*
 * The record at off of segs[idx] is bad: decide torn tail or corruption.
 * Returns 0 (torn tail, recorded), CLI_CORRUPT or -errno.
 */
static int bad_record(struct scan *s, size_t idx, uint64_t off, const uint8_t *p, uint64_t avail)
{
    struct seg *g = &s->segs[idx];
    char why[200];
    int64_t next;

    bad_reason(p, avail, g->salt, why, sizeof(why));
    if (idx + 1 < s->nsegs) {
        set_corrupt(s, idx, off, "%s (in a segment that is not the newest)", why);
        return CLI_CORRUPT;
    }
    next = valid_after(s, idx, off, s->next_lsn - 1);
    if (next < 0) {
        fprintf(stderr, "delay-bridge wal: cannot read %s/%s: %s\n", s->dir, g->name,
                strerror((int)-next));
        return (int)next;
    }
    if (next > 0) {
        set_corrupt(s, idx, off, "%s; a valid record follows at offset %" PRId64, why, next);
        return CLI_CORRUPT;
    }
    s->torn = 1;
    s->torn_off = off;
    s->torn_bytes = g->size - off;
    snprintf(s->torn_why, sizeof(s->torn_why), "%s", why);
    return 0;
}

/* Read one segment's records. 0, CLI_CORRUPT or -errno. */
static int scan_segment(struct scan *s, size_t idx)
{
    struct seg *g = &s->segs[idx];
    uint64_t end = g->size;
    uint64_t boff = WALREC_SEGHDR_SIZE; /* file offset of s->buf[0] */
    size_t have = 0, pos = 0;

    if (g->base_lsn != s->next_lsn && idx > 0) {
        set_corrupt(s, idx, 0,
                    "base_lsn %" PRIu64 " does not continue the previous segment (expected %" PRIu64
                    ")", g->base_lsn, s->next_lsn);
        return CLI_CORRUPT;
    }
    s->next_lsn = g->base_lsn;
    for (;;) {
        while (pos < have) {
            struct walrec_hdr h;
            const uint8_t *pl;
            uint64_t off = boff + pos;
            int r = walrec_decode(s->buf + pos, have - pos, g->salt, &h, &pl);

            if (r > 0) {
                if (h.lsn != s->next_lsn) {
                    set_corrupt(s, idx, off, "record out of sequence: lsn %" PRIu64
                                ", expected %" PRIu64, h.lsn, s->next_lsn);
                    return CLI_CORRUPT;
                }
                switch (h.type) {
                case WALREC_ADD:
                    on_add(s, idx, off, &h, pl);
                    break;
                case WALREC_DONE:
                    on_done(s, &h, pl);
                    break;
                default:
                    s->n_cancel++;
                    s->b_cancel += (uint64_t)r;
                    break;
                }
                g->records++;
                s->next_lsn++;
                pos += (size_t)r;
                continue;
            }
            if (r == WALREC_PARTIAL && boff + have < end) {
                if (have - pos >= 4) { /* a record bigger than the buffer: grow */
                    size_t need = WALREC_HDR_SIZE + (size_t)walrec_get32(s->buf + pos);
                    if (need > s->cap) {
                        memmove(s->buf, s->buf + pos, have - pos);
                        boff += pos;
                        have -= pos;
                        pos = 0;
                        s->cap = need;
                        s->buf = xrealloc(s->buf, s->cap);
                    }
                }
                break;
            }
            return bad_record(s, idx, off, s->buf + pos, end - off);
        }
        if (pos == have && boff + have >= end)
            break;
        if (pos) {
            memmove(s->buf, s->buf + pos, have - pos);
            boff += pos;
            have -= pos;
            pos = 0;
        }
        size_t want = s->cap - have;
        if (want > end - boff - have)
            want = (size_t)(end - boff - have);
        ssize_t got = pread_full(g->fd, s->buf + have, want, boff + have);
        if (got < 0) {
            fprintf(stderr, "delay-bridge wal: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror((int)-got));
            return (int)got;
        }
        if ((size_t)got < want) /* shrank since fstat (a starting daemon cut a torn tail) */
            end = g->size = boff + have + (uint64_t)got;
        have += (size_t)got;
    }
    return 0;
}

/* The whole scan. 0, CLI_CORRUPT (s->corrupt set) or -errno (reported). */
static int scan_run(struct scan *s)
{
    int r;

    if ((r = open_segs(s)) != 0)
        return r;
    s->buf = xrealloc(NULL, CHUNK);
    s->cap = CHUNK;
    for (size_t i = 0; i < s->nsegs; i++) {
        struct seg *g = &s->segs[i];
        struct walrec_seghdr h;
        uint8_t hb[WALREC_SEGHDR_SIZE];
        ssize_t got = pread_full(g->fd, hb, sizeof(hb), 0);
        int newest = i + 1 == s->nsegs;

        s->file_bytes += g->size;
        if (got < 0) {
            fprintf(stderr, "delay-bridge wal: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror((int)-got));
            return (int)got;
        }
        r = walrec_seghdr_decode(hb, (size_t)got, &h);
        if (r < 0 && newest && g->size <= WALREC_SEGHDR_SIZE) {
            s->torn = 1;
            s->torn_off = 0;
            s->torn_bytes = g->size;
            snprintf(s->torn_why, sizeof(s->torn_why),
                     "incomplete segment header (%" PRIu64 " bytes): the segment is being "
                     "created, or a crash cut its creation short", g->size);
            break;
        }
        if (r < 0) {
            set_corrupt(s, i, 0, "%s", (size_t)got < sizeof(hb)
                                           ? "segment header runs past the end of the file"
                                           : "bad segment header (magic, version, reserved word or "
                                             "checksum)");
            return CLI_CORRUPT;
        }
        g->salt = h.salt;
        g->base_lsn = h.base_lsn;
        if (h.segno != g->segno) {
            set_corrupt(s, i, 16, "header says segment %" PRIu64 ", the file name %" PRIu64,
                        h.segno, g->segno);
            return CLI_CORRUPT;
        }
        if (h.base_lsn == 0) {
            set_corrupt(s, i, 24, "base_lsn is 0");
            return CLI_CORRUPT;
        }
        if (g->size > UINT32_MAX) {
            set_corrupt(s, i, 0, "segment larger than 4 GiB (%" PRIu64 " bytes)", g->size);
            return CLI_CORRUPT;
        }
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

static void scan_init(struct scan *s, const char *dir)
{
    memset(s, 0, sizeof(*s));
    s->dir = dir;
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
}

/* Open dir and scan it; returns an exit code (CLI_OK when the scan is usable). */
static int scan_dir(struct scan *s, const char *dir)
{
    int r;

    scan_init(s, dir);
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
            "segments, records by type, bytes, pending messages per route, the oldest\n"
            "enqueue time and the next due time.\n"
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
static void print_summary(struct scan *s, int corrupt)
{
    size_t n;
    pool_handle *v = live_handles(s, &n);
    uint64_t live_bytes = 0, body_bytes = 0, oldest = UINT64_MAX, next = UINT64_MAX;
    uint64_t next_id = 0;
    uint64_t dead_letter = 0;
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
    printf("  cancel:       %" PRIu64 " records, %" PRIu64 " bytes (reserved type, ignored)\n",
           s->n_cancel, s->b_cancel);
    printf("live messages:  %zu, %" PRIu64 " bytes of records (%" PRIu64 " bytes of bodies)",
           n, live_bytes, body_bytes);
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
    rc = scan_dir(&s, argv[optind]);
    if (rc == CLI_OK) {
        print_summary(&s, 0);
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
            "usage: delay-bridge wal dump DIR [--route R] [--due-before T] [--limit N]\n"
            "                             [--headers] [--json]\n"
            "\n"
            "List the pending messages of the WAL directory DIR in due order (due time,\n"
            "then msg id): due time (ISO-8601 UTC and ms since the epoch), route, exchange\n"
            "and routing key it was published with, body size, message-id property, msg id.\n"
            "Strings are printed with spaces and non-printable bytes as \\xNN.\n"
            "\n"
            "  --route R        only messages of route R\n"
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

/* A header value as JSON: numbers and strings as themselves, others named. */
static json_object *field_json(const amqp_field_value_t *v)
{
    json_object *o;

    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: return json_object_new_boolean(v->value.boolean != 0);
    case AMQP_FIELD_KIND_I8: return json_object_new_int64(v->value.i8);
    case AMQP_FIELD_KIND_U8: return json_object_new_int64(v->value.u8);
    case AMQP_FIELD_KIND_I16: return json_object_new_int64(v->value.i16);
    case AMQP_FIELD_KIND_U16: return json_object_new_int64(v->value.u16);
    case AMQP_FIELD_KIND_I32: return json_object_new_int64(v->value.i32);
    case AMQP_FIELD_KIND_U32: return json_object_new_int64(v->value.u32);
    case AMQP_FIELD_KIND_I64: return json_object_new_int64(v->value.i64);
    case AMQP_FIELD_KIND_U64: return json_object_new_uint64(v->value.u64);
    case AMQP_FIELD_KIND_F32: return json_object_new_double(v->value.f32);
    case AMQP_FIELD_KIND_F64: return json_object_new_double(v->value.f64);
    case AMQP_FIELD_KIND_UTF8:
        return json_object_new_string_len(v->value.bytes.bytes, (int)v->value.bytes.len);
    default:
        o = json_object_new_object();
        json_object_object_add(o, "type", json_object_new_string(kind_name(v->kind)));
        if (v->kind == AMQP_FIELD_KIND_BYTES)
            json_object_object_add(o, "length", json_object_new_int64((int64_t)v->value.bytes.len));
        if (v->kind == AMQP_FIELD_KIND_TIMESTAMP)
            json_object_object_add(o, "value", json_object_new_uint64(v->value.u64));
        return o;
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
    return json_object_new_string_len(n ? p : "", (int)n);
}

/* Basic properties worth showing next to the headers, as JSON. */
static json_object *props_json(const amqp_basic_properties_t *p)
{
    json_object *o = json_object_new_object();

#define PROP_STR(flag, field, key)                                                          \
    if (p->_flags & (flag))                                                                \
        json_object_object_add(o, key, str_json(p->field.bytes, p->field.len));
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
        json_object_object_add(o, "delivery_mode", json_object_new_int64(p->delivery_mode));
    if (p->_flags & AMQP_BASIC_PRIORITY_FLAG)
        json_object_object_add(o, "priority", json_object_new_int64(p->priority));
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        json_object_object_add(o, "timestamp", json_object_new_uint64(p->timestamp));
    return o;
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
    got = pread_full(g->fd, s->buf, m->len, m->off);
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
        json_object_object_add(j, "bridge_id", json_object_new_string(bid));
        json_object_object_add(j, "lsn", json_object_new_uint64(m->lsn));
        json_object_object_add(j, "segment", json_object_new_uint64(g->segno));
        json_object_object_add(j, "offset", json_object_new_int64(m->off));
        json_object_object_add(j, "dead_letter",
                               json_object_new_boolean((a.flags & WALREC_ADD_DEADLETTER) != 0));
        if (a.flags & WALREC_ADD_DEADLETTER)
            json_object_object_add(j, "error", json_object_new_int64(a.error));
        if (o->headers) {
            json_object *hj = json_object_new_object();
            if (has_hdr)
                for (int i = 0; i < props->headers.num_entries; i++) {
                    const amqp_table_entry_t *e = &props->headers.entries[i];
                    char key[256];
                    snprintf(key, sizeof(key), "%.*s", (int)e->key.len, (char *)e->key.bytes);
                    json_object_object_add(hj, key, field_json(&e->value));
                }
            json_object_object_add(j, "headers", hj);
            json_object_object_add(j, "properties",
                                   props ? props_json(props) : json_object_new_object());
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
    printf(" %" PRIu64 "%s\n", m->msg_id, (a.flags & WALREC_ADD_DEADLETTER) ? " dead-letter" : "");
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
        {"due-before", required_argument, NULL, 'b'},
        {"limit", required_argument, NULL, 'n'},
        {"headers", no_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct dump_opts o = {NULL, 0, 0, 0, 0};
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
    rc = scan_dir(&s, argv[optind]);
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
        printf("# DUE DUE_MS ROUTE EXCHANGE ROUTING_KEY SIZE MESSAGE_ID MSG_ID\n");
    for (size_t i = 0; i < n && rc == CLI_OK; i++) {
        const struct live *m = pool_at(&s.pool, v[i]);
        const struct route_stat *r = &s.routes[m->route];

        if (o.route && (strlen(o.route) != r->len || memcmp(o.route, r->name, r->len) != 0))
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

/* ---- entry ------------------------------------------------------------- */

static void wal_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal check DIR\n"
            "       delay-bridge wal dump DIR [--route R] [--due-before T] [--limit N]\n"
            "                                 [--headers] [--json]\n"
            "\n"
            "Inspect a WAL directory, read-only and without taking its lock (safe while\n"
            "the daemon runs). \"delay-bridge wal check --help\" and \"delay-bridge wal dump\n"
            "--help\" describe each command.\n"
            "\n"
            "Exit codes: 0 ok, 1 directory unreadable or I/O error, 2 usage, 4 WAL corrupt.\n");
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
    fprintf(stderr, "delay-bridge wal: unknown command \"%s\"\n", argv[1]);
    wal_usage(stderr);
    return CLI_USAGE;
}
