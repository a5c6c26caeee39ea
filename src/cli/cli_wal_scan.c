/*
 * cli_wal_scan.c -- the read-only scan under "delay-bridge wal check|dump|salvage".
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
 * Replayed by the rules recovery applies (walreplay.h, one copy): an ADD
 * whose msg_id is new creates a pending message; an ADD whose msg_id is already pending is a compaction
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
 */
#define _GNU_SOURCE
#define _GNU_SOURCE
#include "cli_wal_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
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

#include "delay-bridge/wal.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walreplay.h"
#include "base/xalloc.h"

#define LIST_RETRIES 20
#define MAX_ROUTES 65535

/* ---- small helpers ----------------------------------------------------- */

void cw_fmt_iso(uint64_t ms, char *out, size_t n)
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
int cw_parse_time(const char *s, uint64_t *out)
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
void cw_put_field(FILE *f, const void *p, size_t n)
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

void cw_set_corrupt(struct scan *s, size_t idx, uint64_t off, const char *fmt, ...)
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

        g->fd = wal_dir_open_file(s->dirfd, g->name);
        if (g->fd < 0 || fstat(g->fd, &st) < 0) {
            r = g->fd < 0 ? g->fd : -errno;
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

int cw_open_segs(struct scan *s)
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
    ph = walreplay_add(&s->ids, a.msg_id, 0);
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

/* walreplay_forget()'s callback: out of the index and the pool. */
static void forget_live(void *arg, pool_handle ph)
{
    struct scan *s = arg;

    idmap_del(&s->ids, ((struct live *)pool_at(&s->pool, ph))->msg_id);
    pool_release(&s->pool, ph);
}

/* DONE or CANCEL: the messages named are gone. Returns the ids named whose ADD was not seen. */
static uint64_t forget_ids(struct scan *s, const struct walscan_rec *rec, uint64_t *ids)
{
    uint32_t named = 0;
    int64_t unknown = walreplay_forget(&s->ids, rec->payload, rec->hdr.len, &named, forget_live, s);

    *ids += named;
    return unknown < 0 ? 0 : (uint64_t)unknown; /* walrec_decode() checked the layout */
}

void cw_on_record(struct scan *s, size_t idx, const struct walscan_rec *rec)
{
    if (s->on_rec)
        s->on_rec(s->on_rec_arg, rec);
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
        cw_set_corrupt(s, idx, 0,
                    "base_lsn %" PRIu64 " does not continue the previous segment (expected %" PRIu64
                    ")", g->base_lsn, s->next_lsn);
        return CLI_CORRUPT;
    }
    walscan_start(sc, g->fd, g->size, g->salt, g->base_lsn, idx + 1 == s->nsegs);
    while ((r = walscan_next(sc, &rec)) > 0) {
        cw_on_record(s, idx, &rec);
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
        cw_set_corrupt(s, idx, sc->bad_off, "record out of sequence: lsn %" PRIu64 ", expected %" PRIu64,
                    sc->bad_lsn, sc->next_lsn);
        return CLI_CORRUPT;
    default:
        if (sc->next_valid)
            cw_set_corrupt(s, idx, sc->bad_off, "%s; a valid record follows at offset %" PRIu64,
                        sc->reason, sc->next_valid);
        else
            cw_set_corrupt(s, idx, sc->bad_off, "%s (in a segment that is not the newest)",
                        sc->reason);
        return CLI_CORRUPT;
    }
}

/* The whole scan. 0, CLI_CORRUPT (s->corrupt set) or -errno (reported). */
int cw_scan_run(struct scan *s)
{
    int r;

    if ((r = cw_open_segs(s)) != 0)
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
            cw_set_corrupt(s, i, 0, "segment header runs past the end of the file");
            return CLI_CORRUPT;
        case WALSCAN_HDR_BAD:
            cw_set_corrupt(s, i, 0, "bad segment header (magic, version, reserved word or checksum)");
            return CLI_CORRUPT;
        case WALSCAN_HDR_SEGNO:
            cw_set_corrupt(s, i, 16, "header says segment %" PRIu64 ", the file name %" PRIu64,
                        h.segno, g->segno);
            return CLI_CORRUPT;
        case WALSCAN_HDR_BASE_LSN:
            cw_set_corrupt(s, i, 24, "base_lsn is 0");
            return CLI_CORRUPT;
        case WALSCAN_HDR_TOO_BIG:
            cw_set_corrupt(s, i, 0, "segment larger than 4 GiB (%" PRIu64 " bytes)", g->size);
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
            cw_set_corrupt(s, i, 32, "wal_id %016" PRIx64 " differs from %016" PRIx64
                        " of the first segment (a segment of another log?)", h.wal_id, s->wal_id);
            return CLI_CORRUPT;
        } else if (g->segno != s->segs[i - 1].segno + 1) {
            cw_set_corrupt(s, i, 0, "segment numbers not contiguous: %" PRIu64 " follows %" PRIu64
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

void cw_scan_init(struct scan *s, const char *dir, const char *key)
{
    memset(s, 0, sizeof(*s));
    s->dir = dir;
    s->key = key;
    s->dirfd = -1;
    pool_init(&s->pool, sizeof(struct live));
    idmap_init(&s->ids, &s->pool, offsetof(struct live, msg_id));
}

void cw_scan_free(struct scan *s)
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
int cw_scan_dir(struct scan *s, const char *dir, const char *key)
{
    int r;

    cw_scan_init(s, dir, key);
    s->dirfd = wal_dir_open(dir);
    if (s->dirfd < 0) {
        fprintf(stderr, "delay-bridge wal: cannot open WAL directory %s: %s\n", dir,
                strerror(-s->dirfd));
        return CLI_EIO;
    }
    r = cw_scan_run(s);
    if (r == CLI_CORRUPT) {
        fprintf(stderr, "corrupt: %s\n", s->corrupt);
        return CLI_CORRUPT;
    }
    return r < 0 ? CLI_EIO : CLI_OK;
}

/* ---- pending messages in due order ------------------------------------- */

static const struct pool *sort_pool; /* qsort has no argument for it; the CLI is one thread */

static int cmp_due(const void *a, const void *b)
{
    const struct live *x = pool_at(sort_pool, *(const pool_handle *)a);
    const struct live *y = pool_at(sort_pool, *(const pool_handle *)b);

    if (x->due_ms != y->due_ms)
        return x->due_ms < y->due_ms ? -1 : 1;
    return x->msg_id < y->msg_id ? -1 : x->msg_id > y->msg_id;
}

/* Handles of every pending message (in no order); *n set. Caller frees. */
pool_handle *cw_live_handles(const struct scan *s, size_t *n)
{
    pool_handle *v = xrealloc(NULL, (s->ids.count ? s->ids.count : 1) * sizeof(*v));
    size_t k = 0;

    for (size_t i = 0; i < s->ids.cap; i++)
        if (s->ids.slots[i] != POOL_NIL)
            v[k++] = s->ids.slots[i];
    *n = k;
    return v;
}

void cw_sort_due(const struct scan *s, pool_handle *v, size_t n)
{
    sort_pool = &s->pool;
    qsort(v, n, sizeof(*v), cmp_due);
}
