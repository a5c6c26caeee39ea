/*
 * walckpt.c -- the checkpoint file of a segment-file log.
 *
 * Why a checkpoint
 * ----------------
 * Without one, a restart replays every record of every segment: the whole
 * payload of every held message is read to rebuild 40 bytes of index per
 * message, about 390 bytes read per held 256-byte message. A checkpoint
 * keeps those 40 bytes (the owner writes ~32) in one sequential file, so a
 * restart reads a tenth of the bytes and then only the records appended
 * since the checkpoint began.
 *
 * Format (all integers little-endian)
 * -----------------------------------
 *
 *   header, 40 bytes
 *     0   8  magic "DBCKPT\r\n"
 *     8   4  version, 1
 *    12   4  zero
 *    16   8  wal_id: the log this checkpoint belongs to
 *    24   8  start_lsn: recovery replays records from this LSN on
 *    32   4  created: wall-clock seconds when it began (low 32 bits;
 *            for people, recovery does not use it)
 *    36   4  CRC-32C of bytes 0..35
 *
 *   chunks, each:
 *     0   4  n: payload bytes (at most WALCKPT_MAX_CHUNK)
 *     4   1  kind: the owner's 0..254; 255 = end
 *     5   3  zero
 *     8   4  CRC-32C of bytes 0..7 of this chunk header, then of the payload,
 *            seeded with the previous chunk's CRC (the header's for the
 *            first): a chunk moved, dropped or repeated fails
 *    12   n  payload
 *
 *   the end chunk, kind 255, 16-byte payload:
 *     0   8  end_lsn: the log's next LSN when the checkpoint was sealed
 *     8   8  number of owner chunks before it
 *
 * A file without its end chunk is incomplete, never installed by a correct
 * writer (the rename comes after the end chunk is synced), and rejected.
 *
 * Reading is two passes over the file: check everything, then hand out the
 * chunks, so the owner never applies half of a damaged checkpoint. The
 * second pass reads from the page cache.
 *
 * Installing runs on a thread: fdatasync of a file of hundreds of
 * megabytes takes long enough to hold up the event loop.
 */
#define _GNU_SOURCE
#include "delay-bridge/walckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "delay-bridge/wal.h" /* WAL_FILE_MODE */
#include "delay-bridge/walrec.h"
#include "base/xalloc.h"
#include "base/crc32c.h"
#include "walfs.h"

#define MAGIC "DBCKPT\r\n"
#define VERSION 1
#define HDR 40
#define CHDR 12
#define READ_BUF (4u << 20)

/* ---- writing ---------------------------------------------------------------- */

struct walckpt {
    int dirfd;
    const char *dir;
    int fd;
    uint64_t size;
    uint32_t crc; /* the chain */
    uint64_t chunks;
    int no_sync;
    pthread_t thread;
    int started;
    _Atomic int result; /* 0 running, 1 installed, <0 failed */
    int installed;
};

static int write_all(int fd, const struct iovec *iov, int n)
{
    struct iovec v[2];
    size_t left = 0;

    for (int i = 0; i < n; i++) {
        v[i] = iov[i];
        left += iov[i].iov_len;
    }
    while (left) {
        ssize_t w = walfs_writev(fd, v, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        left -= (size_t)w;
        for (int i = 0; i < n && w > 0; i++) {
            size_t k = (size_t)w < v[i].iov_len ? (size_t)w : v[i].iov_len;
            v[i].iov_base = (char *)v[i].iov_base + k;
            v[i].iov_len -= k;
            w -= (ssize_t)k;
        }
    }
    return 0;
}

int walckpt_create(struct walckpt **out, int dirfd, const char *dir, uint64_t wal_id,
                   uint64_t start_lsn)
{
    struct walckpt *c;
    uint8_t h[HDR];
    struct iovec v = {h, HDR};
    int r;

    *out = NULL;
    c = xcalloc(1, sizeof(*c));
    c->dirfd = dirfd;
    c->dir = dir;
    c->fd = walfs_openat(dirfd, WALCKPT_TMP_NAME, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                         WAL_FILE_MODE);
    if (c->fd < 0) {
        r = -errno;
        free(c);
        return r;
    }
    memset(h, 0, sizeof(h));
    memcpy(h, MAGIC, 8);
    walrec_put32(h + 8, VERSION);
    walrec_put64(h + 16, wal_id);
    walrec_put64(h + 24, start_lsn);
    walrec_put32(h + 32, (uint32_t)(clock_now_ms() / 1000));
    c->crc = crc32c(0, h, 36);
    walrec_put32(h + 36, c->crc);
    if ((r = write_all(c->fd, &v, 1)) < 0) {
        walckpt_free(c);
        return r;
    }
    c->size = HDR;
    *out = c;
    return 0;
}

static int chunk(struct walckpt *c, uint8_t kind, const void *p, size_t n)
{
    uint8_t h[CHDR];
    struct iovec v[2] = {{h, CHDR}, {(void *)p, n}};
    int r;

    if (n > WALCKPT_MAX_CHUNK)
        return -EINVAL;
    memset(h, 0, sizeof(h));
    walrec_put32(h, (uint32_t)n);
    h[4] = kind;
    c->crc = crc32c(crc32c(c->crc, h, 8), p, n);
    walrec_put32(h + 8, c->crc);
    if ((r = write_all(c->fd, v, 2)) < 0)
        return r;
    c->size += CHDR + n;
    return 0;
}

int walckpt_chunk(struct walckpt *c, uint8_t kind, const void *p, size_t n)
{
    int r;

    if (kind == WALCKPT_KIND_END)
        return -EINVAL;
    if ((r = chunk(c, kind, p, n)) == 0)
        c->chunks++;
    return r;
}

int walckpt_finish(struct walckpt *c, uint64_t end_lsn)
{
    uint8_t e[16];

    walrec_put64(e, end_lsn);
    walrec_put64(e + 8, c->chunks);
    return chunk(c, WALCKPT_KIND_END, e, sizeof(e));
}

static void *install_main(void *arg)
{
    struct walckpt *c = arg;
    int r = 0;

    if (!c->no_sync && walfs_fdatasync(c->fd) < 0)
        r = -errno;
    if (r == 0 && walfs_renameat(c->dirfd, WALCKPT_TMP_NAME, c->dirfd, WALCKPT_NAME) < 0)
        r = -errno;
    if (r == 0 && !c->no_sync && walfs_fsync(c->dirfd) < 0)
        r = -errno;
    atomic_store(&c->result, r == 0 ? 1 : r);
    return NULL;
}

int walckpt_install(struct walckpt *c, int no_sync)
{
    int r;

    c->no_sync = no_sync;
    atomic_store(&c->result, 0);
    r = walfs_thread_create(&c->thread, NULL, install_main, c);
    if (r != 0)
        return -r;
    c->started = 1;
    return 0;
}

int walckpt_installed(struct walckpt *c)
{
    int r = atomic_load(&c->result);

    if (r != 0 && c->started) {
        walfs_thread_join(c->thread, NULL);
        c->started = 0;
    }
    if (r == 1)
        c->installed = 1;
    return r;
}

uint64_t walckpt_size(const struct walckpt *c)
{
    return c->size;
}

void walckpt_free(struct walckpt *c)
{
    if (!c)
        return;
    if (c->started) {
        walfs_thread_join(c->thread, NULL);
        c->started = 0;
        if (atomic_load(&c->result) == 1)
            c->installed = 1;
    }
    if (c->fd >= 0)
        walfs_close(c->fd);
    if (!c->installed)
        walfs_unlinkat(c->dirfd, WALCKPT_TMP_NAME, 0); /* best effort; a leftover is replaced next time */
    free(c);
}

/* ---- reading ------------------------------------------------------------------ */

struct reader {
    int fd;
    uint8_t *buf;
    size_t cap, len, pos; /* buffered bytes [pos, len) */
    uint64_t off;         /* file offset of buf[len] */
    struct db_progress *progress;
    uint64_t progress_base;
};

/* Make n bytes available at r->buf + r->pos; 1 ok, 0 end of file first, -errno. */
static int need(struct reader *r, size_t n)
{
    if (r->len - r->pos >= n)
        return 1;
    if (r->pos) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    if (n > r->cap) {
        r->cap = n;
        r->buf = xrealloc(r->buf, r->cap);
    }
    while (r->len < n) {
        ssize_t k = walfs_pread(r->fd, r->buf + r->len, r->cap - r->len, (off_t)r->off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            return 0;
        r->len += (size_t)k;
        r->off += (uint64_t)k;
        if (r->progress)
            atomic_store_explicit(&r->progress->done, r->progress_base + r->off,
                                  memory_order_relaxed);
    }
    return 1;
}

/*
 * One pass over the file. fn NULL: check only. Returns 0, WLOG_ECORRUPT or
 * WLOG_EFORMAT (why filled), -errno, or fn's non-zero return.
 */
static int pass(int fd, wlog_ckpt_fn *fn, void *arg, struct walckpt_info *info, char *why,
                size_t whylen, struct db_progress *progress, uint64_t progress_base)
{
    struct reader rd = {fd, NULL, 0, 0, 0, 0, progress, progress_base};
    uint32_t crc;
    uint64_t chunks = 0;
    int r, first = 1;

    rd.cap = READ_BUF;
    rd.buf = xmalloc(rd.cap);
    if ((r = need(&rd, HDR)) <= 0) {
        if (r == 0) {
            snprintf(why, whylen, "shorter than its header");
            r = WLOG_EFORMAT;
        }
        goto out;
    }
    const uint8_t *h = rd.buf;
    if (memcmp(h, MAGIC, 8) != 0 || walrec_get32(h + 8) != VERSION) {
        snprintf(why, whylen, "not a checkpoint file of version %d", VERSION);
        r = WLOG_EFORMAT;
        goto out;
    }
    crc = crc32c(0, h, 36);
    if (walrec_get32(h + 36) != crc) {
        snprintf(why, whylen, "header checksum mismatch");
        r = WLOG_ECORRUPT;
        goto out;
    }
    info->wal_id = walrec_get64(h + 16);
    info->start_lsn = walrec_get64(h + 24);
    info->created_ms = (uint64_t)walrec_get32(h + 32) * 1000;
    rd.pos += HDR;

    for (;;) {
        uint64_t at = rd.off - (rd.len - rd.pos);
        if ((r = need(&rd, CHDR)) <= 0) {
            if (r == 0) {
                snprintf(why, whylen, "ends at offset %llu without its end chunk",
                         (unsigned long long)at);
                r = WLOG_ECORRUPT;
            }
            goto out;
        }
        uint32_t n = walrec_get32(rd.buf + rd.pos);
        uint8_t kind = rd.buf[rd.pos + 4];
        uint32_t want = walrec_get32(rd.buf + rd.pos + 8);
        if (n > WALCKPT_MAX_CHUNK) {
            snprintf(why, whylen, "chunk at offset %llu claims %u bytes", (unsigned long long)at,
                     n);
            r = WLOG_ECORRUPT;
            goto out;
        }
        if ((r = need(&rd, CHDR + (size_t)n)) <= 0) {
            if (r == 0) {
                snprintf(why, whylen, "chunk at offset %llu runs past the end of the file",
                         (unsigned long long)at);
                r = WLOG_ECORRUPT;
            }
            goto out;
        }
        const uint8_t *p = rd.buf + rd.pos + CHDR;
        crc = crc32c(crc32c(crc, rd.buf + rd.pos, 8), p, n);
        if (crc != want) {
            snprintf(why, whylen, "chunk at offset %llu fails its checksum",
                     (unsigned long long)at);
            r = WLOG_ECORRUPT;
            goto out;
        }
        rd.pos += CHDR + (size_t)n;
        if (kind == WALCKPT_KIND_END) {
            if (n != 16 || walrec_get64(p + 8) != chunks) {
                snprintf(why, whylen, "end chunk does not match the %llu chunks before it",
                         (unsigned long long)chunks);
                r = WLOG_ECORRUPT;
                goto out;
            }
            info->end_lsn = walrec_get64(p);
            info->chunks = chunks;
            info->bytes = at + CHDR + n;
            r = 0;
            if (rd.len > rd.pos || need(&rd, 1) == 1) {
                snprintf(why, whylen, "bytes after the end chunk");
                r = WLOG_ECORRUPT;
            }
            goto out;
        }
        chunks++;
        if (fn)
            info->handed++;
        if (fn && (r = fn(arg, kind, p, n)) != 0) {
            if (first && r == 1)
                info->handed = 0; /* refused before taking anything */
            else if (r == 1)
                r = WLOG_ECORRUPT; /* "not usable" is for the first chunk only */
            goto out;
        }
        first = 0;
    }
out:
    free(rd.buf);
    return r;
}

int walckpt_read(int dirfd, uint64_t wal_id, wlog_ckpt_fn *fn, void *arg,
                 struct walckpt_info *info, char *why, size_t whylen, struct db_progress *progress)
{
    struct stat st;
    int fd, r;

    memset(info, 0, sizeof(*info));
    if (whylen)
        why[0] = 0;
    fd = walfs_openat(dirfd, WALCKPT_NAME, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 1 : -errno;
    if (walfs_fstat(fd, &st) < 0) {
        r = -errno;
        walfs_close(fd);
        return r;
    }
    walfs_posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    r = pass(fd, NULL, NULL, info, why, whylen, progress, 0);
    if (r == 0 && wal_id && info->wal_id != wal_id) {
        snprintf(why, whylen, "belongs to log %016llx, not %016llx",
                 (unsigned long long)info->wal_id, (unsigned long long)wal_id);
        r = WLOG_EFORMAT;
    }
    if (r == 0 && fn)
        r = pass(fd, fn, arg, info, why, whylen, progress, (uint64_t)st.st_size);
    walfs_close(fd);
    return r;
}
