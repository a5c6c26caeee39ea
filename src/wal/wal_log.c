/*
 * wal_log.c -- the segment log as a struct wlog (the interface the engine
 * holds), with the thread that runs its fdatasyncs.
 *
 * In the daemon the fdatasync runs on a thread of its own (opts.sync_thread,
 * the wlog interface's poll/notify): the loop writes the batch into the page
 * cache (wal_write_batch) and goes on; the thread syncs and wakes it; the
 * commit completes on the loop thread (wal_batch_durable). Only the sync
 * before a roll stays inline. One batch is out at a time, and reclamation
 * waits while one is, so no file the thread syncs is closed under it.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/clock.h"
#include "delay-bridge/wlog.h"
#include "base/xalloc.h"
#include "base/failpoint.h"
#include "walscan.h"

/* ---- the wlog interface ------------------------------------------------ */

/*
 * struct wal as a struct wlog: a thin shell (wal.h speaks the interface's
 * own location, buffer and callback types, so nothing is converted) that
 * turns the synchronous wal_commit() into a commit with a completion.
 */
struct wal_log {
    struct wlog base;
    struct wal_opts opts;
    struct wal *w;

    /*
     * The sync thread (opts.sync_thread): the loop thread writes a batch
     * (write_batch) and hands the files to this thread; it fdatasyncs them
     * and says so through notify (the owner wakes its loop, which calls
     * wlog_poll: batch_durable and the completion run there). One batch at
     * a time; reclaim waits while one is out, so no file it syncs is closed
     * under it.
     */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv, finished_cv;
    int posted, finished, quit; /* under mu */
    int result;                 /* under mu: 0 or -errno of the first failed sync */
    double seconds;             /* under mu: time of the syncs */
    struct wal_batch batch;
    int busy;                   /* loop thread: a batch is out */
    wlog_commit_fn *done;
    void *done_arg;
    void (*notify)(void *arg);
    void *notify_arg;
};

#define WAL_LOG(l) ((struct wal_log *)(l))

static int wl_ckpt_begin(struct wlog *l)
{
    return wal_ckpt_begin(WAL_LOG(l)->w);
}

static int wl_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n)
{
    return wal_ckpt_write(WAL_LOG(l)->w, kind, p, n);
}

static int wl_ckpt_end(struct wlog *l)
{
    return wal_ckpt_end(WAL_LOG(l)->w);
}

static void wl_ckpt_poll(struct wlog *l)
{
    wal_ckpt_poll(WAL_LOG(l)->w);
}

static int wl_has(const struct wlog *l, struct wlog_loc loc)
{
    return wal_has_segment(WAL_LOG(l)->w, loc.seg);
}

static int wl_recover(struct wlog *l, wlog_replay_fn *fn, wlog_ckpt_fn *ckpt, void *arg,
                      struct db_progress *progress)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->w)
        return -EALREADY;
    if (ckpt) {
        wl->opts.ckpt_fn = ckpt;
        wl->opts.ckpt_arg = arg;
    }
    if (progress)
        wl->opts.progress = progress;
    return wal_open(&wl->w, &wl->opts, fn, arg);
}

static int wl_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
                     uint64_t *lsn, struct wlog_loc *loc)
{
    struct wlog_loc wloc;
    int r = wal_append(WAL_LOG(l)->w, type, pieces, npieces, lsn, &wloc);

    if (r == 0 && loc)
        *loc = wloc; /* only on success, as the interface promises */
    return r;
}

static size_t wl_pending(const struct wlog *l)
{
    return wal_pending(WAL_LOG(l)->w);
}

static void *sync_main(void *arg)
{
    struct wal_log *wl = arg;

    pthread_mutex_lock(&wl->mu);
    for (;;) {
        while (!wl->posted && !wl->quit)
            pthread_cond_wait(&wl->cv, &wl->mu);
        if (wl->quit)
            break;
        wl->posted = 0;
        pthread_mutex_unlock(&wl->mu);

        uint64_t t0 = clock_mono_ns(); /* ns: the fsync histogram's buckets go below 1 ms */
        int r = 0;
        for (int i = 0; i < wl->batch.n && r == 0; i++) {
            if (FAILPOINT_ERR("wal.fsync_error"))
                r = -EIO;
            else if (walfs_fdatasync(wl->batch.fds[i]) < 0)
                r = -errno;
        }
        double secs = (double)(clock_mono_ns() - t0) / 1e9;

        pthread_mutex_lock(&wl->mu);
        wl->result = r;
        wl->seconds = secs;
        wl->finished = 1;
        pthread_cond_broadcast(&wl->finished_cv);
        if (wl->notify)
            wl->notify(wl->notify_arg);
    }
    pthread_mutex_unlock(&wl->mu);
    return NULL;
}

static int wl_commit(struct wlog *l, wlog_commit_fn *done, void *arg)
{
    struct wal_log *wl = WAL_LOG(l);
    struct wal *w = wl->w;
    int r;

    if (!wl->opts.sync_thread || w->no_sync) {
        if ((r = wal_commit(w)) < 0)
            return r;
        if (done)
            done(arg, 0);
        return 0;
    }
    if (wl->busy)
        return WLOG_EBUSY;
    if (w->failed)
        return w->failed;
    if (!wl->started) {
        pthread_mutex_init(&wl->mu, NULL);
        pthread_cond_init(&wl->cv, NULL);
        pthread_cond_init(&wl->finished_cv, NULL);
        if ((r = pthread_create(&wl->thread, NULL, sync_main, wl)) != 0)
            return wal_fail(w, -r, "start the sync thread", wal_active(w)->segno);
        wl->started = 1;
    }
    if ((r = wal_write_batch(w, &wl->batch)) < 0)
        return r;
    wl->busy = 1;
    wl->done = done;
    wl->done_arg = arg;
    pthread_mutex_lock(&wl->mu);
    wl->finished = 0;
    wl->posted = 1;
    pthread_cond_signal(&wl->cv);
    pthread_mutex_unlock(&wl->mu);
    return 0;
}

/* On the loop thread: finish the batch the sync thread is done with, if any. */
static void wl_poll(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);
    wlog_commit_fn *done;
    int finished, r = 0;
    double secs = 0;

    if (!wl->busy)
        return;
    pthread_mutex_lock(&wl->mu);
    finished = wl->finished;
    if (finished) {
        r = wl->result;
        secs = wl->seconds;
        wl->finished = 0;
    }
    pthread_mutex_unlock(&wl->mu);
    if (!finished)
        return;
    wl->busy = 0;
    done = wl->done;
    wl->done = NULL;
    db_hist_observe(&wl->w->fsync, secs);
    if (r < 0) {
        r = wal_fail(wl->w, r, "fdatasync", wl->batch.segnos[0]);
    } else {
        wal_batch_durable(wl->w, &wl->batch);
    }
    if (done)
        done(wl->done_arg, r);
}

/* Wait for the batch out on the sync thread, if any, and complete it here. */
static void wl_flush(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);

    if (!wl->busy)
        return;
    pthread_mutex_lock(&wl->mu);
    while (!wl->finished)
        pthread_cond_wait(&wl->finished_cv, &wl->mu);
    pthread_mutex_unlock(&wl->mu);
    wl_poll(l);
}

static void wl_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->started)
        pthread_mutex_lock(&wl->mu);
    wl->notify = fn;
    wl->notify_arg = arg;
    if (wl->started)
        pthread_mutex_unlock(&wl->mu);
}

static int wl_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
                   const uint8_t **payload)
{
    return wal_read(WAL_LOG(l)->w, loc, b, h, payload);
}

static void wl_live(struct wlog *l, struct wlog_loc loc, int live)
{
    if (live)
        wal_live_add(WAL_LOG(l)->w, loc);
    else
        wal_live_del(WAL_LOG(l)->w, loc);
}

static int wl_reclaim(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    if (WAL_LOG(l)->busy)
        return 1; /* not while the sync thread holds files: it could close one under it */
    return wal_maintain(WAL_LOG(l)->w, budget, ops);
}

static void wl_stats(const struct wlog *l, struct wlog_stats *s)
{
    struct wal_stats ws;

    memset(s, 0, sizeof(*s));
    if (!WAL_LOG(l)->w)
        return;
    wal_get_stats(WAL_LOG(l)->w, &ws);
    s->segments = ws.segments;
    s->disk_bytes = ws.disk_bytes;
    s->live_bytes = ws.live_bytes;
    s->live_records = ws.live_records;
    s->durable_lsn = ws.durable_lsn;
    s->commits = ws.commits;
    s->appended_bytes = ws.appended_bytes;
    s->compacted_bytes = ws.compacted_bytes;
    s->deleted_segments = ws.deleted_segments;
    s->truncated_bytes = ws.truncated_bytes;
    s->failed = ws.failed;
    s->no_space = ws.no_space;
    s->intake_paused = ws.intake_paused;
    s->free_bytes = ws.free_bytes;
    s->reserve_bytes = ws.reserve_bytes;
    s->reserve_held = ws.reserve_held;
    s->reserve_spent = ws.reserve_spent;
    s->fsync = ws.fsync;
    s->compact_segment = ws.compact_segment;
    s->compact_done = ws.compact_done;
    s->compact_total = ws.compact_total;
    s->ckpt_state = ws.ckpt_state;
    s->ckpt_installed = ws.ckpt_installed;
    s->ckpt_failed = ws.ckpt_failed;
    s->ckpt_lsn = ws.ckpt_lsn;
    s->ckpt_bytes = ws.ckpt_bytes;
    s->ckpt_age_ms = ws.ckpt_age_ms;
    s->ckpt_seconds = ws.ckpt_seconds;
    s->ckpt_loaded_lsn = ws.ckpt_loaded_lsn;
}

static uint64_t wl_id(const struct wlog *l)
{
    return wal_id(WAL_LOG(l)->w);
}

static uint64_t wl_next_lsn(const struct wlog *l)
{
    return wal_next_lsn(WAL_LOG(l)->w);
}

static void wl_close(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->started) {
        pthread_mutex_lock(&wl->mu);
        wl->quit = 1;
        pthread_cond_signal(&wl->cv);
        pthread_mutex_unlock(&wl->mu);
        pthread_join(wl->thread, NULL);
        pthread_mutex_destroy(&wl->mu);
        pthread_cond_destroy(&wl->cv);
        pthread_cond_destroy(&wl->finished_cv);
    }
    wal_close(wl->w);
    free((char *)wl->opts.dir);
    free(wl);
}

static int wl_intake(const struct wlog *l, uint64_t bytes)
{
    return wal_intake(WAL_LOG(l)->w, bytes);
}

/* Also while a batch is out: its completion leaves these bytes unsynced (wal.c). */
static int wl_write(struct wlog *l)
{
    return wal_write_ahead(WAL_LOG(l)->w);
}

static const struct wlog_ops wal_log_ops = {
    "segment files", wl_recover, wl_append, wl_pending, wl_commit, wl_read,
    wl_live, wl_reclaim, wl_stats, wl_id, wl_next_lsn, wl_close, wl_poll, wl_set_notify,
    wl_flush, wl_ckpt_begin, wl_ckpt_write, wl_ckpt_end, wl_ckpt_poll, wl_has, NULL, NULL,
    wl_intake, wl_write,
};

struct wal *wal_file_log_wal(struct wlog *l)
{
    return WAL_LOG(l)->w;
}

struct wlog *wal_file_log(const struct wal_opts *o)
{
    struct wal_log *wl = xcalloc(1, sizeof(*wl));

    wl->base.ops = &wal_log_ops;
    wl->opts = *o;
    wl->opts.dir = xstrdup(o->dir);
    return &wl->base;
}
