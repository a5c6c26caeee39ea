/*
 * walscan.c -- read-only walk over WAL segment files: the one reader that
 * the daemon's recovery (src/wal/wal.c) and "delay-bridge wal check|dump"
 * (src/cli/cli_wal.c) share. The design and the contract are in
 * include/delay-bridge/walscan.h; the byte format in src/wal/walrec.c.
 */
#include "delay-bridge/walscan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/wlog.h"
#include "walfs.h"
#include "base/xalloc.h"

#define SEGHDR WALREC_SEGHDR_SIZE
#define RECHDR WALREC_HDR_SIZE
#define MIN_CHUNK 64 /* room for a record header after the carried-over bytes */

/* ---- directory ------------------------------------------------------------ */

void walscan_seg_name(char out[WALSCAN_NAME_SIZE], uint64_t segno)
{
    snprintf(out, WALSCAN_NAME_SIZE, "%020llu.wal", (unsigned long long)segno);
}

/* 1 and *segno: a segment's name; 0: not a ".wal" file; -1: a ".wal" file misnamed. */
static int parse_name(const char *name, uint64_t *segno)
{
    size_t len = strlen(name);
    uint64_t v = 0;

    if (len < 4 || strcmp(name + len - 4, ".wal") != 0)
        return 0;
    if (len != 24)
        return -1;
    for (size_t i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9' || v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(name[i] - '0');
    }
    if (v == 0 || v > UINT32_MAX)
        return -1;
    *segno = v;
    return 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int walscan_list(int dirfd, uint64_t **segnos, size_t *n, char *bad, size_t bad_size)
{
    walfs_dir *d;
    struct dirent *e;
    uint64_t *v = NULL;
    size_t k = 0, cap = 0;
    int fd, r = 0;

    *segnos = NULL;
    *n = 0;
    fd = walfs_openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    d = walfs_fdopendir(fd);
    if (!d) {
        r = -errno;
        walfs_close(fd);
        return r;
    }
    while ((e = walfs_readdir(d)) != NULL) {
        uint64_t segno = 0;
        int p = parse_name(e->d_name, &segno);

        if (p == 0)
            continue; /* LOCK and anything else that is not a segment */
        if (p < 0) {
            if (bad && bad_size)
                snprintf(bad, bad_size, "%s", e->d_name);
            r = WLOG_EFORMAT;
            goto cleanup;
        }
        if (k == cap) {
            cap = cap ? cap * 2 : 64;
            v = xrealloc(v, cap * sizeof(*v));
        }
        v[k++] = segno;
    }
    if (k)
        qsort(v, k, sizeof(*v), cmp_u64);
cleanup:
    walfs_closedir(d);
    if (r < 0) {
        free(v);
        return r;
    }
    *segnos = v;
    *n = k;
    return 0;
}

ssize_t walscan_pread(int fd, void *p, size_t n, uint64_t off)
{
    size_t got = 0;

    while (got < n) {
        ssize_t r = walfs_pread(fd, (uint8_t *)p + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* ---- segment header ------------------------------------------------------- */

int walscan_seghdr(int fd, uint64_t segno, uint64_t size, int newest, struct walrec_seghdr *h)
{
    uint8_t buf[SEGHDR];
    ssize_t got = walscan_pread(fd, buf, SEGHDR, 0);

    if (got < 0)
        return (int)got;
    if (walrec_seghdr_decode(buf, (size_t)got, h) < 0) {
        if (newest && size <= SEGHDR)
            return WALSCAN_HDR_CREATING;
        return (size_t)got < SEGHDR ? WALSCAN_HDR_SHORT : WALSCAN_HDR_BAD;
    }
    if (h->segno != segno)
        return WALSCAN_HDR_SEGNO;
    if (h->base_lsn == 0)
        return WALSCAN_HDR_BASE_LSN;
    if (size > UINT32_MAX)
        return WALSCAN_HDR_TOO_BIG;
    return WALSCAN_HDR_OK;
}

/* ---- records -------------------------------------------------------------- */

void walscan_init(struct walscan *sc, size_t chunk, walscan_read_fn *on_read, void *arg)
{
    memset(sc, 0, sizeof(*sc));
    sc->fd = -1;
    sc->chunk = chunk < MIN_CHUNK ? MIN_CHUNK : chunk;
    sc->on_read = on_read;
    sc->read_arg = arg;
}

void walscan_free(struct walscan *sc)
{
    free(sc->buf);
    sc->buf = NULL;
    sc->cap = 0;
}

void walscan_start(struct walscan *sc, int fd, uint64_t size, uint32_t salt, uint64_t first_lsn,
                   int newest)
{
    if (!sc->buf) {
        sc->cap = sc->chunk;
        sc->buf = xmalloc(sc->cap);
    }
    sc->fd = fd;
    sc->size = size;
    sc->salt = salt;
    sc->next_lsn = first_lsn;
    sc->newest = newest;
    sc->done = 0;
    sc->boff = SEGHDR;
    sc->have = sc->pos = 0;
    sc->end = WALSCAN_CLEAN;
    sc->bad_off = sc->next_valid = sc->bad_lsn = sc->zero_tail = 0;
    sc->why = WALSCAN_WHY_NONE;
    sc->reason[0] = '\0';
}

static void grow(struct walscan *sc, size_t need)
{
    if (need > sc->cap) {
        sc->cap = need;
        sc->buf = xrealloc(sc->buf, sc->cap);
    }
}

/*
 * Read into the buffer after the bytes kept (the unparsed rest moved to the
 * front). A short read means the file is shorter than it was said to be:
 * what is there is the end. 0 or -errno.
 */
static int refill(struct walscan *sc)
{
    size_t want;
    ssize_t got;

    if (sc->pos) {
        memmove(sc->buf, sc->buf + sc->pos, sc->have - sc->pos);
        sc->boff += sc->pos;
        sc->have -= sc->pos;
        sc->pos = 0;
    }
    want = sc->cap - sc->have;
    if (want > sc->size - sc->boff - sc->have)
        want = (size_t)(sc->size - sc->boff - sc->have);
    got = walscan_pread(sc->fd, sc->buf + sc->have, want, sc->boff + sc->have);
    if (got < 0)
        return (int)got;
    if ((size_t)got < want)
        sc->size = sc->boff + sc->have + (uint64_t)got;
    sc->have += (size_t)got;
    if (sc->on_read)
        sc->on_read(sc->read_arg, sc->boff + sc->have);
    return 0;
}

/*
 * Why the record at p is not valid. avail: bytes from p to the end of the
 * file. The buffer holds at least min(avail, RECHDR) of them, and the whole
 * record when its header is sound and it fits in the file (walrec_decode()
 * said PARTIAL otherwise, and the scan read on).
 */
static void classify(struct walscan *sc, const uint8_t *p, uint64_t avail)
{
    size_t inbuf = sc->have - sc->pos;
    uint32_t len = inbuf >= 4 ? walrec_get32(p) : 0;
    char *out = sc->reason;
    size_t n = sizeof(sc->reason);

    if (inbuf >= 5 && (p[4] < WALREC_ADD || p[4] > WALREC_CANCEL)) {
        sc->why = WALSCAN_WHY_TYPE;
        snprintf(out, n, "unknown record type %u", p[4]);
    } else if (inbuf >= 8 && (p[6] | p[7]) != 0) {
        sc->why = WALSCAN_WHY_RESERVED;
        snprintf(out, n, "reserved header bytes are not zero");
    } else if (inbuf >= 4 && len > WALREC_MAX_PAYLOAD) {
        sc->why = WALSCAN_WHY_TOO_LONG;
        snprintf(out, n, "record length %" PRIu32 " exceeds the 1 GiB limit", len);
    } else if (avail < RECHDR) {
        sc->why = WALSCAN_WHY_SHORT_HEADER;
        snprintf(out, n, "record header runs past the end of the file (%" PRIu64 " of %d bytes)",
                 avail, RECHDR);
    } else if (walrec_get32(p + 20) != 0) {
        sc->why = WALSCAN_WHY_RESERVED;
        snprintf(out, n, "reserved header bytes are not zero");
    } else if (avail - RECHDR < len) {
        sc->why = WALSCAN_WHY_SHORT_PAYLOAD;
        snprintf(out, n, "record runs past the end of the file (payload %" PRIu32 " bytes, %" PRIu64
                 " left)", len, avail - RECHDR);
    } else {
        /* The whole record is here: recompute the CRC to tell checksum from layout. */
        struct walrec_piece piece = {p + RECHDR, len};
        struct walrec_hdr hh = {len, p[4], p[5], walrec_get64(p + 8), 0};
        uint8_t tmp[RECHDR];

        walrec_hdr_encode(tmp, &hh, sc->salt, &piece, 1);
        if (hh.crc != walrec_get32(p + 16)) {
            sc->why = WALSCAN_WHY_CRC;
            snprintf(out, n, "checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
                     ", lsn field %" PRIu64 ")", walrec_get32(p + 16), hh.crc, hh.lsn);
        } else {
            sc->why = WALSCAN_WHY_LAYOUT;
            snprintf(out, n, "%s payload layout does not add up to its length %" PRIu32,
                     p[4] == WALREC_ADD ? "ADD" : p[4] == WALREC_DONE ? "DONE" : "CANCEL", len);
        }
    }
}

/*
 * Read a window of the file at off into the buffer (as much as fits, at
 * least need bytes if the file has them). *wlen: bytes in the window.
 */
static int window(struct walscan *sc, uint64_t off, size_t need, size_t *wlen)
{
    size_t want;
    ssize_t got;

    grow(sc, need);
    want = sc->cap;
    if (want > sc->size - off)
        want = (size_t)(sc->size - off);
    got = walscan_pread(sc->fd, sc->buf, want, off);
    if (got < 0)
        return (int)got;
    if ((size_t)got < want)
        sc->size = off + (uint64_t)got; /* shrank under us: that is the end */
    *wlen = (size_t)got;
    return 0;
}

int walscan_plausible(const uint8_t *p, uint64_t avail, uint64_t lsn_min, uint64_t lsn_end)
{
    uint32_t len = walrec_get32(p);
    uint64_t lsn = walrec_get64(p + 8);

    return p[4] >= WALREC_ADD && p[4] <= WALREC_CANCEL && (p[6] | p[7]) == 0 &&
           walrec_get32(p + 20) == 0 && len <= WALREC_MAX_PAYLOAD && len <= avail - RECHDR &&
           lsn >= lsn_min && (!lsn_end || lsn < lsn_end);
}

/*
 * The record at off is not valid: the offset of a valid record after it
 * (CRC good under the salt, LSN beyond the last good one), 0 if there is
 * none, or -errno. Uses the buffer as a window that slides over the file.
 */
static int64_t valid_after(struct walscan *sc, uint64_t off)
{
    uint64_t last_good = sc->next_lsn - 1, wbase = off + 1;
    size_t wlen = 0;
    int r;

    for (uint64_t pos = off + 1; pos + RECHDR <= sc->size; pos++) {
        const uint8_t *p;
        struct walrec_hdr h;
        const uint8_t *pl;
        size_t need;

        if (pos + RECHDR > wbase + wlen) {
            wbase = pos;
            if ((r = window(sc, wbase, RECHDR, &wlen)) < 0)
                return r;
            if (wlen < RECHDR)
                break;
        }
        p = sc->buf + (pos - wbase);
        if (!walscan_plausible(p, sc->size - pos, last_good + 1, 0))
            continue;
        need = RECHDR + (size_t)walrec_get32(p);
        if (pos + need > wbase + wlen) {
            /* A candidate larger than what the window holds of it: read it whole. */
            wbase = pos;
            if ((r = window(sc, wbase, need, &wlen)) < 0)
                return r;
            if (wlen < need)
                break; /* the file shrank: it cannot be valid */
            p = sc->buf;
        }
        if (walrec_decode(p, need, sc->salt, &h, &pl) > 0)
            return (int64_t)pos;
    }
    return 0;
}

static int finish(struct walscan *sc, int end)
{
    sc->end = end;
    sc->done = 1;
    return 0;
}

/*
 * 1 if the file holds nothing but zero bytes from off to its end, 0 if not,
 * negative on a read error. A log's segment ends so when the zeros written
 * ahead of its records (wal.h, prewrite_bytes) were not all overwritten.
 */
static int zeros_to_end(struct walscan *sc, uint64_t off)
{
    static const uint8_t zero[4096];
    uint8_t buf[4096];

    while (off < sc->size) {
        size_t n = sc->size - off < sizeof(buf) ? (size_t)(sc->size - off) : sizeof(buf);
        ssize_t got = walscan_pread(sc->fd, buf, n, off);
        if (got < 0)
            return (int)got;
        if (got == 0)
            return 1; /* the file shrank: what there was is zeros */
        if (memcmp(buf, zero, (size_t)got) != 0)
            return 0;
        off += (uint64_t)got;
    }
    return 1;
}

/*
 * The record at the buffer's pos fails walrec_decode(): zeros to the end of
 * the file are the prewritten tail, where the records end, in any segment
 * (a lost record would show as an LSN gap: the next segment's base LSN);
 * anything else is classified, then torn or corrupt.
 */
static int bad_record(struct walscan *sc)
{
    uint64_t off = sc->boff + sc->pos;
    int64_t next;
    int z = zeros_to_end(sc, off);

    if (z < 0)
        return z;
    if (z) {
        sc->zero_tail = sc->size - off;
        sc->size = off;
        return finish(sc, WALSCAN_CLEAN);
    }
    sc->bad_off = off;
    classify(sc, sc->buf + sc->pos, sc->size - off);
    if (!sc->newest)
        return finish(sc, WALSCAN_BAD_RECORD);
    next = valid_after(sc, off);
    if (next < 0)
        return (int)next;
    if (next > 0) {
        sc->next_valid = (uint64_t)next;
        return finish(sc, WALSCAN_BAD_RECORD);
    }
    return finish(sc, WALSCAN_TORN);
}

int walscan_next(struct walscan *sc, struct walscan_rec *rec)
{
    int r;

    if (sc->done)
        return 0;
    for (;;) {
        if (sc->pos < sc->have) {
            const uint8_t *p = sc->buf + sc->pos;
            size_t avail = sc->have - sc->pos;
            uint64_t off = sc->boff + sc->pos;

            r = walrec_decode(p, avail, sc->salt, &rec->hdr, &rec->payload);
            if (r > 0) {
                if (rec->hdr.lsn != sc->next_lsn) {
                    sc->bad_off = off;
                    sc->bad_lsn = rec->hdr.lsn;
                    return finish(sc, WALSCAN_BAD_LSN);
                }
                rec->off = off;
                rec->len = (uint32_t)r;
                sc->next_lsn++;
                sc->pos += (size_t)r;
                return 1;
            }
            if (off + avail >= sc->size)
                return bad_record(sc); /* all of the file is in the buffer */
            if (r == WALREC_INVALID && avail >= RECHDR)
                return bad_record(sc); /* bad whatever follows */
            /*
             * More of the file to read: the record may go on, or (INVALID
             * from a partial header) the reason needs the whole header.
             * Grow for a record larger than the buffer, never past the end.
             */
            if (r == WALREC_PARTIAL && avail >= 4) {
                uint64_t need = RECHDR + (uint64_t)walrec_get32(p);
                if (need > sc->size - off)
                    need = sc->size - off;
                if (need > sc->cap) {
                    memmove(sc->buf, p, avail);
                    sc->boff = off;
                    sc->have = avail;
                    sc->pos = 0;
                    grow(sc, (size_t)need);
                }
            }
        } else if (sc->boff + sc->have >= sc->size) {
            return finish(sc, WALSCAN_CLEAN);
        }
        if ((r = refill(sc)) < 0)
            return r;
    }
}

/* ---- the whole log ---------------------------------------------------------- */

int walscan_log_end(int dirfd, uint64_t *wal_id, uint64_t *next)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    int res = -1;

    if (walscan_list(dirfd, &nos, &n, NULL, 0) < 0 || n == 0) {
        free(nos);
        return -1;
    }
    for (size_t k = n; k-- > 0 && res < 0;) {
        char name[WALSCAN_NAME_SIZE];
        struct walrec_seghdr h;
        struct walscan sc;
        struct walscan_rec rec;
        struct stat st;
        int fd, e;

        walscan_seg_name(name, nos[k]);
        if ((fd = walfs_openat(dirfd, name, O_RDONLY | O_CLOEXEC)) < 0)
            break;
        if (walfs_fstat(fd, &st) < 0 ||
            (e = walscan_seghdr(fd, nos[k], (uint64_t)st.st_size, k == n - 1, &h)) < 0) {
            walfs_close(fd);
            break;
        }
        if (e == WALSCAN_HDR_CREATING) { /* a segment being created: the one before ends it */
            walfs_close(fd);
            continue;
        }
        if (e != WALSCAN_HDR_OK) {
            walfs_close(fd);
            break;
        }
        walscan_init(&sc, 4u << 20, NULL, NULL);
        walscan_start(&sc, fd, (uint64_t)st.st_size, h.salt, h.base_lsn, k == n - 1);
        while ((e = walscan_next(&sc, &rec)) > 0)
            ;
        if (e == 0 && (sc.end == WALSCAN_CLEAN || sc.end == WALSCAN_TORN)) {
            *wal_id = h.wal_id;
            *next = sc.next_lsn;
            res = 0;
        }
        walscan_free(&sc);
        walfs_close(fd);
        break;
    }
    free(nos);
    return res;
}
