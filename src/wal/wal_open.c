/*
 * wal_open.c -- opening a segment log: lock, check, load, replay.
 *
 * RECOVERY
 *
 * wal_recover() checks every segment header (WLOG_EFORMAT if one is bad; only a
 * newest segment that is no longer than a header and holds no valid header
 * is taken for a crash during its creation and deleted), then reads the
 * records in big chunks (4 MiB, with the partial record at the end of a
 * chunk carried over) and hands each to the caller's replay function. There
 * is no per-record system call or copy, and the next segment is read ahead
 * with POSIX_FADV_WILLNEED while the current one is parsed. LSNs must run
 * +1 per record, across segments too. The reading -- segment names and
 * headers, chunks, record checks, and telling a torn tail from corruption
 * by the rule below -- is walscan.h's, the same code "delay-bridge wal
 * check" runs; this file decides what follows: cut the tail or refuse.
 *
 * Zeros from a record's place to the end of the file are the prewritten
 * tail (wal.c, "PREWRITTEN ZEROS"), in any segment: the segment ends
 * there, and the zeros are cut with an info line, not counted as torn (a
 * record lost under them would show as the next segment's LSN gap).
 *
 * The first record that fails its checks ends the log if it is a torn tail:
 * it lies in the newest segment and no valid record (correct CRC under the
 * segment's salt, LSN beyond the last good one) follows it anywhere in that
 * segment. The file is then cut there (ftruncate + fsync) and a warning says
 * how much was cut. Anything else -- a bad record in an older segment, or
 * one followed by good data -- is corruption: wal_recover() fails with
 * WLOG_ECORRUPT and the error names the file and offset; an operator must
 * look (salvage tool) rather than have the daemon silently drop committed
 * messages. A limit of the rule: if the disk persisted the blocks of an
 * unfinished commit out of order, so that a later record of that batch
 * survived and an earlier one did not, this is reported as corruption
 * although no committed record was lost.
 *
 * Before any of it the directory is created if need be and dir/LOCK is
 * taken (flock LOCK_EX|LOCK_NB) for the life of the struct wal: a second
 * daemon on the same directory gets WLOG_ELOCKED.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "base/failpoint.h"
#include "delay-bridge/walscan.h"


/* ---- open and replay --------------------------------------------------- */

/*
 * Open and check every segment header. A newest segment no longer than a
 * header whose header is not valid was being created when the process died:
 * delete it.
 */
static int wal_load_segments(struct wal *w)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    char bad[256];
    int r;

    r = walscan_list(w->dirfd, &nos, &n, bad, sizeof(bad));
    if (r == WLOG_EFORMAT)
        log_error("wal", "unexpected file name in the log directory; move it away",
                  "file=%s/%s", w->dir, bad);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        struct walrec_seghdr h;
        char name[WALSCAN_NAME_SIZE];
        struct stat st;
        int newest = i == n - 1;
        int fd;

        walscan_seg_name(name, nos[i]);
        fd = walfs_openat(w->dirfd, name, (newest ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd < 0 || walfs_fstat(fd, &st) < 0) {
            r = -errno;
            log_error("wal", "cannot open segment", "file=%s/%s err=\"%s\"", w->dir, name,
                      strerror(-r));
            if (fd >= 0)
                walfs_close(fd);
            goto cleanup;
        }
        r = walscan_seghdr(fd, nos[i], (uint64_t)st.st_size, newest, &h);
        if (r < 0) {
            walfs_close(fd);
            log_error("wal", "cannot read segment header", "file=%s/%s err=\"%s\"", w->dir,
                      name, strerror(-r));
            goto cleanup;
        }
        if (r == WALSCAN_HDR_CREATING) {
            walfs_close(fd);
            log_warn("wal", "deleting newest segment with a torn header (crash while creating it)",
                     "file=%s/%s bytes=%lld", w->dir, name, (long long)st.st_size);
            if (walfs_unlinkat(w->dirfd, name, 0) < 0 || walfs_fsync(w->dirfd) < 0) {
                r = -errno;
                goto cleanup;
            }
            /* The one before it is the newest now and must be writable. */
            if (w->nsegs) {
                struct seg *s = wal_active(w);
                walscan_seg_name(name, s->segno);
                walfs_close(s->fd);
                s->fd = walfs_openat(w->dirfd, name, O_RDWR | O_CLOEXEC);
                if (s->fd < 0) {
                    r = -errno;
                    goto cleanup;
                }
            }
            r = 0;
            break;
        }
        if (r != WALSCAN_HDR_OK || (w->nsegs && h.wal_id != w->id)) {
            walfs_close(fd);
            log_error("wal",
                      "bad segment header (not a segment of this log, or damaged); the log "
                      "needs operator attention",
                      "file=%s/%s size=%lld", w->dir, name, (long long)st.st_size);
            r = WLOG_EFORMAT;
            goto cleanup;
        }
        w->id = h.wal_id;
        struct seg *s = wal_seg_push(w);
        s->segno = h.segno;
        s->salt = h.salt;
        s->base_lsn = h.base_lsn;
        s->last_lsn = h.base_lsn - 1;
        s->fd = fd;
        s->disk = s->size = s->written = (uint64_t)st.st_size;
        w->total_size += s->size;
        r = 0;
    }
cleanup:
    free(nos);
    return r;
}

/* The newest segment s ends in a torn tail from off: cut the file there. */
static int cut_torn_tail(struct wal *w, struct seg *s, uint64_t off, uint64_t last_good)
{
    uint64_t end = s->disk;
    char name[WALSCAN_NAME_SIZE];
    int r;

    walscan_seg_name(name, s->segno);
    if (walfs_ftruncate(s->fd, (off_t)off) < 0 || (!w->no_sync && walfs_fsync(s->fd) < 0)) {
        r = -errno;
        log_error("wal", "cannot truncate torn tail", "file=%s/%s err=\"%s\"", w->dir, name,
                  strerror(-r));
        return r;
    }
    log_warn("wal", "torn tail truncated (a write cut short by a crash)",
             "file=%s/%s offset=%llu bytes_cut=%llu last_lsn=%llu", w->dir, name,
             (unsigned long long)off, (unsigned long long)(end - off),
             (unsigned long long)last_good);
    w->truncated_bytes += end - off;
    w->total_size -= end - off;
    s->disk = s->size = off;
    return 0;
}

/* Log how the scan of s found the log corrupt; WLOG_ECORRUPT. */
static int corrupt(struct wal *w, const struct seg *s, const struct walscan *sc)
{
    const char *why = sc->why == WALSCAN_WHY_SHORT_HEADER || sc->why == WALSCAN_WHY_SHORT_PAYLOAD
                          ? "record runs past end of file"
                          : "bad header, checksum or payload";
    uint64_t last_good = sc->next_lsn - 1;
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, s->segno);
    if (sc->end == WALSCAN_BAD_LSN)
        log_error("wal", "record out of sequence; the log needs the salvage tool or operator attention",
                  "file=%s/%s offset=%llu lsn=%llu expected_lsn=%llu", w->dir, name,
                  (unsigned long long)sc->bad_off, (unsigned long long)sc->bad_lsn,
                  (unsigned long long)sc->next_lsn);
    else if (sc->next_valid)
        log_error("wal",
                  "corrupt record followed by valid records; the log needs the salvage tool or "
                  "operator attention",
                  "file=%s/%s offset=%llu reason=\"%s\" next_valid_offset=%llu last_lsn=%llu",
                  w->dir, name, (unsigned long long)sc->bad_off, why,
                  (unsigned long long)sc->next_valid, (unsigned long long)last_good);
    else
        log_error("wal",
                  "corrupt record in a segment that is not the newest; the log needs the salvage "
                  "tool or operator attention",
                  "file=%s/%s offset=%llu reason=\"%s\" last_lsn=%llu", w->dir, name,
                  (unsigned long long)sc->bad_off, why, (unsigned long long)last_good);
    return WLOG_ECORRUPT;
}

struct replay_state {
    wlog_replay_fn *fn;
    void *arg;
    uint64_t from_lsn;   /* records before it are checked, not handed out (checkpoint) */
    struct walscan scan;
    uint64_t segno;      /* segment being read */
    uint64_t records;
    uint64_t done_bytes; /* segments finished */
    uint64_t total_bytes;
    uint64_t start_ms, last_log_ms;
    struct db_progress *progress;
};

/* After each read of a segment (walscan's on_read): progress for /stats and the log. */
static void replay_progress(void *arg, uint64_t read_to)
{
    struct replay_state *st = arg;
    uint64_t now = clock_mono_ms(), done = st->done_bytes + read_to;

    if (st->progress)
        atomic_store_explicit(&st->progress->done, done, memory_order_relaxed);
    if (now - st->last_log_ms >= 1000) {
        st->last_log_ms = now;
        log_info("wal", "replaying",
                 "percent=%.1f bytes_done=%llu bytes_total=%llu records=%llu seg=%llu",
                 st->total_bytes ? 100.0 * (double)done / (double)st->total_bytes : 100.0,
                 (unsigned long long)done, (unsigned long long)st->total_bytes,
                 (unsigned long long)st->records, (unsigned long long)st->segno);
    }
}

static int replay_segment(struct wal *w, size_t idx, struct replay_state *st, uint64_t *expect)
{
    struct seg *s = &w->segs[idx];
    struct walscan_rec rec;
    int r;

    walfs_posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (idx == 0)
        walfs_posix_fadvise(s->fd, 0, 0, POSIX_FADV_WILLNEED);
    for (size_t k = idx + 1; k < w->nsegs && k <= idx + READAHEAD_SEGS; k++)
        walfs_posix_fadvise(w->segs[k].fd, 0, 0, POSIX_FADV_WILLNEED);

    st->segno = s->segno;
    walscan_start(&st->scan, s->fd, s->disk, s->salt, *expect, idx == w->nsegs - 1);
    while ((r = walscan_next(&st->scan, &rec)) > 0) {
        struct wlog_loc loc = {(uint32_t)s->segno, (uint32_t)rec.off, rec.len};

        if (st->fn && rec.hdr.lsn >= st->from_lsn &&
            (r = st->fn(st->arg, &rec.hdr, rec.payload, loc)) != 0)
            return r;
        s->last_lsn = rec.hdr.lsn;
        st->records++;
    }
    *expect = st->scan.next_lsn;
    if (r < 0) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, s->segno);
        log_error("wal", "cannot read segment", "file=%s/%s err=\"%s\"", w->dir, name,
                  strerror(-r));
        return r;
    }
    if (st->scan.zero_tail) {
        /*
         * The prewritten zeros after its last record (wal.c): no crash
         * damage. The newest segment's are cut (prewrite refills them); an
         * older one's file is open read-only and its zeros are never read.
         */
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, s->segno);
        if (idx != w->nsegs - 1)
            log_info("wal", "prewritten zeros after the last record of an older segment, left",
                     "file=%s/%s bytes=%llu", w->dir, name,
                     (unsigned long long)st->scan.zero_tail);
        else if (walfs_ftruncate(s->fd, (off_t)st->scan.size) < 0)
            log_warn("wal", "cannot cut the prewritten zeros after the last record (harmless)",
                     "file=%s/%s err=\"%s\"", w->dir, name, strerror(errno));
        else
            log_info("wal", "prewritten zeros after the last record cut", "file=%s/%s bytes=%llu",
                     w->dir, name, (unsigned long long)st->scan.zero_tail);
        s->written = st->scan.size;
    }
    if (st->scan.size < s->disk) { /* shorter than fstat said: what is there is the end */
        w->total_size -= s->disk - st->scan.size;
        s->disk = s->size = st->scan.size;
    }
    switch (st->scan.end) {
    case WALSCAN_CLEAN:
        st->done_bytes += s->disk;
        return 0;
    case WALSCAN_TORN:
        return cut_torn_tail(w, s, st->scan.bad_off, *expect - 1);
    default:
        return corrupt(w, s, &st->scan);
    }
}

/*
 * Replay records from from_lsn on (1: all). A segment wholly before it (its
 * successor starts at or before from_lsn) is not read at all; base: bytes
 * already counted as done in the progress (a checkpoint's).
 */
static int wal_replay_all(struct wal *w, wlog_replay_fn *fn, void *arg, uint64_t from_lsn,
                      uint64_t base)
{
    struct replay_state st;
    uint64_t expect = w->segs[0].base_lsn, skipped = 0;
    size_t read = 0;
    int r = 0;

    memset(&st, 0, sizeof(st));
    st.fn = fn;
    st.arg = arg;
    st.from_lsn = from_lsn;
    st.done_bytes = base;
    st.total_bytes = base + w->total_size;
    st.start_ms = st.last_log_ms = clock_mono_ms();
    st.progress = w->progress;
    if (st.progress) {
        atomic_store_explicit(&st.progress->total, st.total_bytes, memory_order_relaxed);
        atomic_store_explicit(&st.progress->done, base, memory_order_relaxed);
    }
    walscan_init(&st.scan, REPLAY_CHUNK, replay_progress, &st);
    for (size_t i = 0; i < w->nsegs; i++) {
        struct seg *s = &w->segs[i];
        if (i + 1 < w->nsegs && w->segs[i + 1].base_lsn <= from_lsn &&
            s->base_lsn == expect && w->segs[i + 1].base_lsn >= s->base_lsn) {
            /* Wholly before the checkpoint's start: what it held is in the checkpoint. */
            s->last_lsn = w->segs[i + 1].base_lsn - 1;
            expect = w->segs[i + 1].base_lsn;
            st.done_bytes += s->disk;
            skipped += s->disk;
            continue;
        }
        read++;
        if (s->base_lsn != expect) {
            char name[WALSCAN_NAME_SIZE];
            walscan_seg_name(name, s->segno);
            log_error("wal",
                      "segment does not continue the previous one (a segment is missing?); the "
                      "log needs operator attention",
                      "file=%s/%s base_lsn=%llu expected_lsn=%llu", w->dir, name,
                      (unsigned long long)s->base_lsn, (unsigned long long)expect);
            r = WLOG_ECORRUPT;
            goto cleanup;
        }
        if ((r = replay_segment(w, i, &st, &expect)) != 0)
            goto cleanup;
    }
    w->next_lsn = expect;
    if (st.progress)
        atomic_store_explicit(&st.progress->done, w->total_size, memory_order_relaxed);
    uint64_t ms = clock_mono_ms() - st.start_ms;
    log_info("wal", "log replayed",
             "dir=%s segments=%zu segments_read=%zu records=%llu bytes=%llu bytes_skipped=%llu "
             "from_lsn=%llu ms=%llu next_lsn=%llu",
             w->dir, w->nsegs, read, (unsigned long long)st.records,
             (unsigned long long)w->total_size, (unsigned long long)skipped,
             (unsigned long long)from_lsn, (unsigned long long)ms, (unsigned long long)expect);
cleanup:
    walscan_free(&st.scan);
    return r;
}

/*
 * Hand the owner dir/CHECKPOINT, if there is a usable one, and say where
 * replay starts. A damaged or foreign checkpoint is not fatal: the log
 * holds everything, so recovery falls back to a full replay (and says so).
 * A failure after chunks were handed out is: the owner's state is partial.
 */
static int wal_load_ckpt(struct wal *w, const struct wal_opts *o, uint64_t *from_lsn, uint64_t *base)
{
    struct walckpt_info info;
    struct stat st;
    char why[256];
    int r;

    if (walfs_fstatat(w->dirfd, WALCKPT_NAME, &st, 0) < 0)
        return 0;
    if (w->progress) {
        atomic_store_explicit(&w->progress->total, 2 * (uint64_t)st.st_size + w->total_size,
                              memory_order_relaxed);
        atomic_store_explicit(&w->progress->done, 0, memory_order_relaxed);
    }
    uint64_t t0 = clock_mono_ms();
    r = walckpt_read(w->dirfd, w->id, o->ckpt_fn, o->ckpt_arg, &info, why, sizeof(why),
                     w->progress);
    if (r == 1) {
        log_info("wal", "checkpoint not used (the owner's choice); replaying the whole log",
                 "dir=%s", w->dir);
        return 0;
    }
    if (r < 0 && info.handed == 0) {
        /* nothing was handed out: the owner's state is untouched */
        log_warn("wal", "checkpoint unusable, replaying the whole log instead",
                 "file=%s/%s reason=\"%s\"", w->dir, WALCKPT_NAME, why);
        return 0;
    }
    if (r < 0) {
        log_error("wal", "cannot read the checkpoint", "file=%s/%s err=\"%s\" reason=\"%s\"",
                  w->dir, WALCKPT_NAME, wlog_strerror(r), why);
        return r;
    }
    *from_lsn = info.start_lsn;
    *base = 2 * info.bytes;
    w->ck_loaded_lsn = w->ck_lsn = info.start_lsn;
    w->ck_end_lsn = info.end_lsn;
    w->ck_bytes = info.bytes;
    w->ck_lsn_ms = info.created_ms;
    log_info("wal", "checkpoint loaded",
             "file=%s/%s bytes=%llu chunks=%llu start_lsn=%llu ms=%llu", w->dir, WALCKPT_NAME,
             (unsigned long long)info.bytes, (unsigned long long)info.chunks,
             (unsigned long long)info.start_lsn, (unsigned long long)(clock_mono_ms() - t0));
    return 0;
}

int wal_recover(struct wlog *l, wlog_replay_fn *replay, wlog_ckpt_fn *ckpt, void *arg,
                struct db_progress *progress)
{
    struct wal *w = WAL(l);
    const struct wal_opts *o = &w->opts;
    int r;

    if (w->open)
        return -EALREADY;
    if (ckpt) {
        w->opts.ckpt_fn = ckpt;
        w->opts.ckpt_arg = arg;
    }
    if (progress)
        w->opts.progress = progress;
    if (!o->dir || !*o->dir)
        return -EINVAL;
    if (o->segment_bytes &&
        (o->segment_bytes < MIN_SEGMENT_BYTES || o->segment_bytes > MAX_SEGMENT_BYTES))
        return -EINVAL;

    w->open = 1;
    w->dir = xstrdup(o->dir);
    w->segment_bytes = o->segment_bytes ? o->segment_bytes : WAL_DEFAULT_SEGMENT_BYTES;
    w->no_sync = o->no_sync;
    w->prewrite = o->prewrite_bytes;
    w->progress = o->progress;

    if ((r = wal_dir_make(o->dir)) < 0) {
        log_error("wal", "cannot create the log directory", "dir=%s err=\"%s\"", o->dir,
                  strerror(-r));
        goto fail;
    }
    w->dirfd = wal_dir_open(o->dir);
    if (w->dirfd < 0) {
        r = w->dirfd;
        log_error("wal", "cannot open the log directory", "dir=%s err=\"%s\"", o->dir,
                  strerror(-r));
        goto fail;
    }
    if ((r = wal_lock_dir(o->dir, &w->lockfd)) < 0)
        goto fail; /* logged */

    if ((r = wal_load_segments(w)) < 0)
        goto fail;
    if (w->nsegs == 0) {
        struct seg *s = wal_seg_push(w);
        w->id = o->create_id ? o->create_id : clock_rand64();
        if (!w->id)
            w->id = 1;
        s->segno = 1;
        s->salt = (uint32_t)clock_rand64();
        s->base_lsn = o->create_base_lsn ? o->create_base_lsn : 1;
        s->last_lsn = s->base_lsn - 1;
        s->disk = s->size = SEGHDR;
        w->total_size = SEGHDR;
        if ((r = wal_seg_create(w, s)) < 0) {
            log_error("wal", "cannot create the first segment", "dir=%s err=\"%s\"", o->dir,
                      wlog_strerror(r));
            goto fail;
        }
        log_info("wal", "new log created", "dir=%s wal_id=%016llx", o->dir,
                 (unsigned long long)w->id);
    }

    uint64_t from_lsn = 1, base = 0;
    if (o->ckpt_fn && (r = wal_load_ckpt(w, o, &from_lsn, &base)) < 0) {
        goto fail;
    }
    if ((r = wal_replay_all(w, replay, arg, from_lsn, base)) != 0) {
        goto fail;
    }
    if (w->ck_loaded_lsn && w->next_lsn < w->ck_end_lsn) {
        log_error("wal",
                  "the checkpoint describes records the log does not have (segments restored "
                  "from an older backup?); restore the matching segments, or move CHECKPOINT "
                  "away to recover from the segments alone",
                  "dir=%s checkpoint_end_lsn=%llu log_next_lsn=%llu", w->dir,
                  (unsigned long long)w->ck_end_lsn, (unsigned long long)w->next_lsn);
        r = WLOG_ECORRUPT;
        goto fail;
    }
    w->ck_end_lsn = 0;
    w->durable_lsn = w->next_lsn - 1;
    if ((r = wal_reserve_open(w, o->reserve_bytes)) < 0) {
        goto fail;
    }
    return 0;

fail:
    wal_release(w);
    return r;
}

void wal_release(struct wal *w)
{
    walckpt_free(w->ck);
    for (size_t i = 0; i < w->nsegs; i++)
        if (w->segs[i].fd >= 0)
            walfs_close(w->segs[i].fd);
    if (w->reserve_fd >= 0)
        walfs_close(w->reserve_fd);
    if (w->lockfd >= 0)
        walfs_close(w->lockfd); /* releases the flock */
    if (w->dirfd >= 0)
        walfs_close(w->dirfd);
    free(w->segs);
    free(w->wbuf);
    free(w->cbuf);
    free(w->ra);
    free(w->dir);
    memset((char *)w + offsetof(struct wal, open), 0, sizeof(*w) - offsetof(struct wal, open));
    w->dirfd = w->lockfd = w->reserve_fd = -1;
}

uint64_t wal_next_lsn(const struct wlog *l)
{
    return WAL_C(l)->next_lsn;
}

uint64_t wal_id(const struct wlog *l)
{
    return WAL_C(l)->id;
}
