/*
 * wal_reserve.c -- the segment log's space reserve and intake gate: what a
 * full disk leaves the records that end messages.
 *
 * WHO CALLS WHOM
 *
 * This file is the floor under the log's writing (wal.c) and its space
 * keeping (wal_space.c): wal.c gives the reserve back when a commit meets a
 * full disk (wal_reserve_spend) and looks at the volume after every durable
 * commit (wal_space_poll); wal_space.c does both around maintenance and asks
 * wal_resume_mark(); wal_open.c opens the reserve (wal_reserve_open). It
 * calls none of them back: it reads and sets struct wal's reserve and gate
 * fields, logs, and makes its own system calls through walfs.h.
 *
 * A FULL DISK: THE RESERVE AND THE INTAKE GATE
 *
 * Firing gives space back only through records: a segment goes once every
 * ADD in it has ended durably (the DONE or CANCEL committed, head_deletable
 * in wal_space.c), or once compaction's copies of its last live ADDs are committed.
 * So those records must always find room. Without a reserve they did not:
 * the commit that met ENOSPC kept its batch -- intake's ADDs, not yet
 * acked -- in the write buffer, the DONEs of the messages fired afterwards
 * queued behind it in LSN order, no segment could be deleted, and a disk
 * filled by intake alone stayed full for good (issue 26).
 *
 *   dir/RESERVE   reserve_bytes (the daemon: WAL_RESERVE_SEGMENTS = 2 x
 *                 segment_bytes: one segment for compaction's copies of the
 *                 head, one for the records that end messages before the
 *                 first deleted segment gives space back), allocated with
 *                 fallocate, or zeros written where the file system has
 *                 none, and synced. Mode 0600; nothing reads it. At open
 *                 the blocks it holds count (a hole counts for nothing).
 *
 * A commit that meets ENOSPC or EDQUOT truncates RESERVE to 0 -- the blocks
 * go back to the volume at once -- and writes again (wal.c,
 * wal_write_batch). wal_space_poll() refills it once the volume has room
 * for it and a segment more.
 *
 * Intake must not eat that room. wal_space_poll() -- after every durable
 * commit and every wal_maintain() -- reads the volume's free space
 * (fstatvfs; RESERVE is allocated, so it is not counted free) and sets
 * intake_paused when free space < one segment, the reserve is not whole,
 * or the last commit found no space; it lifts it only when the reserve is
 * whole and two segments are free (hysteresis). wal_intake(bytes), which
 * the owner asks before each new message (eng_intake()), also counts what
 * was appended since the last look and the message's own size, so a burst
 * within one loop turn cannot run past the mark; and it answers NEVER for
 * a record the volume cannot hold beside the reserve and two segments (the
 * daemon rejects it, as an oversized one). What the broker had already
 * sent when the daemon paused waits in its memory (dstash.h), not here.
 * While paused, compaction starts as soon as a segment's worth of the log
 * is dead (over_budget) and no checkpoint is begun (wal.c,
 * wal_ckpt_begin): both would otherwise spend what firing needs. Costs:
 * reserve_bytes of disk, always; intake stops a segment before the volume
 * is full; one fstatvfs per commit.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- the reserve and the intake gate ----------------------------------- */

#define RESERVE_NAME "RESERVE"
#define ZERO_CHUNK (64u << 10)

/*
 * Free space (the reserve apart) under which intake pauses: one segment.
 * What the broker had already sent when it paused waits in the owner's
 * memory (dstash.h), not in the log. It resumes one segment above that
 * (hysteresis), with the reserve whole.
 */
static uint64_t pause_mark(const struct wal *w)
{
    return w->segment_bytes;
}

uint64_t wal_resume_mark(const struct wal *w)
{
    return 2 * w->segment_bytes;
}

int wal_intake(const struct wlog *l, uint64_t bytes)
{
    const struct wal *w = WAL_C(l);
    uint64_t since, fixed = w->reserve_bytes + 2 * w->segment_bytes;

    if (w->reserve_fd < 0)
        return WLOG_INTAKE_OK;
    if (w->volume_bytes && (w->volume_bytes <= fixed || bytes > w->volume_bytes - fixed))
        return WLOG_INTAKE_NEVER;
    if (w->intake_paused || w->no_space)
        return WLOG_INTAKE_WAIT;
    /* Bytes appended since the last look may have eaten the headroom already. */
    since = w->appended_bytes - w->appended_at_look;
    if (w->free_bytes < since || w->free_bytes - since < bytes + pause_mark(w))
        return WLOG_INTAKE_WAIT;
    return WLOG_INTAKE_OK;
}

static void look_at_volume(struct wal *w)
{
    struct statvfs v;

    if (walfs_fstatvfs(w->dirfd, &v) == 0) {
        const struct seg *a = &w->segs[w->nsegs - 1];
        w->free_bytes = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
        /* the prewritten zeros (wal.c) are room for the active segment's next records */
        if (a->fd >= 0 && a->written > a->disk)
            w->free_bytes += a->written - a->disk;
        w->volume_bytes = (uint64_t)v.f_blocks * (uint64_t)v.f_frsize;
        w->appended_at_look = w->appended_bytes - w->wlen; /* the buffer is not on the volume yet */
    }
}

/*
 * Grow RESERVE to reserve_bytes: fallocate, or zeros where the file
 * system has no fallocate (the bytes must really be taken, not a hole).
 * A full disk is not an error: what could not be taken is cut off again
 * and the next look tries once more. The file is synced, so that a
 * crash does not leave the reserve a hole that the next start counts.
 */
static void reserve_fill(struct wal *w)
{
    uint64_t want = w->reserve_bytes, at = w->reserve_held;
    int r = 0;

    if (w->reserve_fd < 0 || at >= want)
        return;
    if (walfs_fallocate(w->reserve_fd, 0, (off_t)at, (off_t)(want - at)) < 0) {
        r = -errno;
        if (r == -EOPNOTSUPP || r == -ENOSYS) {
            static const uint8_t zero[ZERO_CHUNK];
            r = 0;
            while (at < want && r == 0) {
                size_t n = want - at < ZERO_CHUNK ? (size_t)(want - at) : ZERO_CHUNK;
                ssize_t k = walfs_pwrite(w->reserve_fd, zero, n, (off_t)at);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0)
                    r = k < 0 ? -errno : -EIO;
                else
                    at += (uint64_t)k;
            }
        }
    }
    if (r == 0 && !w->no_sync && walfs_fdatasync(w->reserve_fd) < 0)
        r = -errno;
    if (r < 0) {
        if (walfs_ftruncate(w->reserve_fd, (off_t)w->reserve_held) < 0)
            log_warn("wal", "cannot cut the space reserve back after a failed fill",
                     "file=%s/%s err=\"%s\"", w->dir, RESERVE_NAME, strerror(errno));
        if (r != -ENOSPC && r != -EDQUOT)
            log_warn("wal", "cannot fill the space reserve; tried again later",
                     "file=%s/%s err=\"%s\"", w->dir, RESERVE_NAME, strerror(-r));
        return;
    }
    w->reserve_held = want;
    log_info("wal", "space reserve whole", "file=%s/%s bytes=%llu", w->dir, RESERVE_NAME,
             (unsigned long long)want);
}

/* Pause intake and say so, with the mark that decided (free space under it). */
static void pause_intake(struct wal *w, const char *why, uint64_t mark)
{
    w->intake_paused = 1;
    w->intake_pauses++;
    log_warn("wal", why, "dir=%s free_bytes=%llu mark=%llu reserve_held=%llu reserve_bytes=%llu",
             w->dir, (unsigned long long)w->free_bytes, (unsigned long long)mark,
             (unsigned long long)w->reserve_held, (unsigned long long)w->reserve_bytes);
}

int wal_reserve_open(struct wal *w, uint64_t bytes)
{
    struct stat st;
    int fd;

    w->reserve_fd = -1;
    w->reserve_bytes = bytes;
    if (!bytes)
        return 0;
    fd = walfs_openat(w->dirfd, RESERVE_NAME, O_RDWR | O_CREAT | O_CLOEXEC, WAL_FILE_MODE);
    if (fd < 0 || walfs_fstat(fd, &st) < 0) {
        int r = -errno;
        log_error("wal", "cannot open the space reserve", "file=%s/%s err=\"%s\"", w->dir,
                  RESERVE_NAME, strerror(-r));
        if (fd >= 0)
            walfs_close(fd);
        return r;
    }
    w->reserve_fd = fd;
    /* A checkpoint a crash cut short holds space no one reads; under pressure no
     * checkpoint starts that would replace it (the simulator's liveness seeds). */
    if (walfs_unlinkat(w->dirfd, WALCKPT_TMP_NAME, 0) == 0)
        log_info("wal", "a checkpoint left unfinished by a crash deleted", "file=%s/%s", w->dir,
                 WALCKPT_TMP_NAME);
    /* What an earlier run left: the blocks it holds (a hole counts for nothing). */
    w->reserve_held = (uint64_t)st.st_blocks * 512u;
    if (w->reserve_held > (uint64_t)st.st_size)
        w->reserve_held = (uint64_t)st.st_size;
    if ((uint64_t)st.st_size > bytes || w->reserve_held < (uint64_t)st.st_size) {
        /* segment_mb lowered, or a sparse file: start again from what is really there */
        uint64_t keep = w->reserve_held < bytes ? w->reserve_held : bytes;
        if (walfs_ftruncate(fd, (off_t)keep) == 0)
            w->reserve_held = keep;
    }
    reserve_fill(w);
    look_at_volume(w);
    /* At start the resume mark decides: a restart on a short volume begins paused. */
    if (w->reserve_held < w->reserve_bytes || w->free_bytes < wal_resume_mark(w))
        pause_intake(w, "space low at start: intake paused; held messages fire and free it",
                     wal_resume_mark(w));
    return 0;
}

int wal_reserve_spend(struct wal *w)
{
    uint64_t had = w->reserve_held;

    if (w->reserve_fd < 0 || had == 0)
        return 0;
    if (walfs_ftruncate(w->reserve_fd, 0) < 0) {
        log_error("wal", "cannot give the space reserve back", "file=%s/%s err=\"%s\"", w->dir,
                  RESERVE_NAME, strerror(errno));
        return 0;
    }
    w->reserve_held = 0;
    w->reserve_spent++;
    if (!w->intake_paused) {
        w->intake_paused = 1;
        w->intake_pauses++;
    }
    log_warn("wal", "disk full: the space reserve is given back to the log; intake stays "
             "paused until it is whole again", "file=%s/%s bytes=%llu", w->dir, RESERVE_NAME,
             (unsigned long long)had);
    return 1;
}

void wal_space_poll(struct wal *w)
{
    uint64_t missing;

    if (w->reserve_fd < 0)
        return;
    look_at_volume(w);
    missing = w->reserve_bytes - w->reserve_held;
    if (missing && !w->no_space && w->free_bytes >= missing + wal_resume_mark(w)) {
        reserve_fill(w);
        look_at_volume(w);
    }
    if (!w->intake_paused &&
        (w->no_space || w->reserve_held < w->reserve_bytes || w->free_bytes < pause_mark(w))) {
        pause_intake(w, "space low: intake pauses; held messages keep firing and free it",
                     pause_mark(w));
    } else if (w->intake_paused && !w->no_space && w->reserve_held == w->reserve_bytes &&
               w->free_bytes >= wal_resume_mark(w)) {
        w->intake_paused = 0;
        log_info("wal", "space again: intake may resume",
                 "dir=%s free_bytes=%llu resume_from=%llu reserve_bytes=%llu", w->dir,
                 (unsigned long long)w->free_bytes, (unsigned long long)wal_resume_mark(w),
                 (unsigned long long)w->reserve_bytes);
    }
}
