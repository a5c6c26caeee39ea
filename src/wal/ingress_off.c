/*
 * ingress_off.c -- a stream ingress's place, one 32-byte file per route.
 *
 * The format and the rules are in ingress_off.h. The file is rewritten in
 * place with one pwrite(2) of 32 bytes at offset 0: within one sector, so
 * a crash leaves the old bytes or the new ones, and the CRC tells a torn
 * or foreign file from a good one.
 *
 * The file lives in the WAL directory, so its system calls are the log
 * layer's (walfs.h) and its mode the directory's policy (WAL_FILE_MODE,
 * wal_dir.c's table).
 */
#define _GNU_SOURCE
#include "delay-bridge/ingress_off.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "delay-bridge/wal.h" /* WAL_FILE_MODE: the directory's owner */
#include "wal_int.h"          /* wal_dir_sync() */
#include "walfs.h"

static const uint8_t MAGIC[8] = {'D', 'B', 'S', 'T', 'R', 'O', 'F', 'F'};
#define VERSION 1

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static uint64_t get64(const uint8_t *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void ingress_off_encode(uint8_t out[INGRESS_OFF_SIZE], uint64_t next, uint64_t upto)
{
    memcpy(out, MAGIC, 8);
    put32(out + 8, VERSION);
    put64(out + 12, next);
    put64(out + 20, upto);
    put32(out + 28, crc32c(0, out, 28));
}

int ingress_off_decode(const uint8_t in[INGRESS_OFF_SIZE], uint64_t *next, uint64_t *upto)
{
    if (memcmp(in, MAGIC, 8) != 0 || get32(in + 8) != VERSION ||
        get32(in + 28) != crc32c(0, in, 28))
        return -1;
    *next = get64(in + 12);
    *upto = get64(in + 20);
    return *next > INT64_MAX || *upto > INT64_MAX || *upto < *next ? -1 : 0;
}

int ingress_off_open(struct ingress_off *o, const char *dir, const char *route, int64_t *next,
                     int64_t *upto, char *err, size_t errlen)
{
    uint8_t buf[INGRESS_OFF_SIZE];
    struct stat st;
    uint64_t v, u;
    ssize_t n;
    int e, created = 0;

    memset(o, 0, sizeof(*o));
    o->fd = -1;
    o->stored = o->upto = *next = *upto = INGRESS_OFF_NONE;
    snprintf(o->path, sizeof(o->path), "%s/ingress-%s.offset", dir, route);
    o->fd = walfs_open(o->path, O_RDWR | O_CLOEXEC);
    if (o->fd < 0 && errno == ENOENT) {
        o->fd = walfs_open(o->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, WAL_FILE_MODE);
        created = 1;
    }
    if (o->fd < 0) {
        e = -errno;
        snprintf(err, errlen, "cannot open %s: %s", o->path, strerror(-e));
        return e;
    }
    if (created) {
        /* The name itself durable: without it a machine crash reads from the first again. */
        (void)wal_dir_sync(dir);
        return 0;
    }
    if (walfs_fstat(o->fd, &st) < 0) {
        e = -errno;
        snprintf(err, errlen, "cannot stat %s: %s", o->path, strerror(-e));
        goto fail;
    }
    if (st.st_size == 0)
        return 0; /* created, never written: from the first */
    n = st.st_size == INGRESS_OFF_SIZE ? walfs_pread(o->fd, buf, sizeof(buf), 0) : 0;
    if (n < 0) {
        e = -errno;
        snprintf(err, errlen, "cannot read %s: %s", o->path, strerror(-e));
        goto fail;
    }
    if (n != INGRESS_OFF_SIZE || ingress_off_decode(buf, &v, &u) < 0) {
        e = -EBADMSG;
        snprintf(err, errlen, "%s is corrupt (%lld bytes, not a valid place in the stream): "
                 "delete it to read the stream from its first retained message again "
                 "(messages already held are then logged a second time), or restore it",
                 o->path, (long long)st.st_size);
        goto fail;
    }
    o->stored = *next = (int64_t)v;
    o->upto = *upto = (int64_t)u;
    return 0;
fail:
    walfs_close(o->fd);
    o->fd = -1;
    return e;
}

static int put(struct ingress_off *o, int64_t next, int64_t upto)
{
    uint8_t buf[INGRESS_OFF_SIZE];

    ingress_off_encode(buf, (uint64_t)next, (uint64_t)upto);
    errno = 0;
    if (walfs_pwrite(o->fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf))
        return errno ? -errno : -EIO;
    o->stored = next;
    o->upto = upto;
    o->dirty = 1;
    return 0;
}

int ingress_off_begin(struct ingress_off *o, int64_t upto)
{
    int64_t next = o->stored < 0 ? 0 : o->stored;

    if (o->fd < 0 || upto < 0 || upto == o->upto || upto < next)
        return 0;
    return put(o, next, upto);
}

int ingress_off_store(struct ingress_off *o, int64_t next)
{
    if (o->fd < 0 || next < 0 || (next == o->stored && next == o->upto))
        return 0;
    return put(o, next, next);
}

int ingress_off_sync(struct ingress_off *o)
{
    if (o->fd < 0 || !o->dirty)
        return 0;
    if (walfs_fdatasync(o->fd) < 0)
        return -errno;
    o->dirty = 0;
    return 0;
}

void ingress_off_close(struct ingress_off *o)
{
    if (o->fd >= 0) {
        (void)ingress_off_sync(o);
        walfs_close(o->fd);
    }
    o->fd = -1;
}
