/*
 * wal_log.c -- the segment log as a struct wlog (the interface the engine
 * holds): its operations table, the object's life, and the thread that
 * runs its fdatasyncs.
 *
 * THE TABLE
 *
 * struct wal embeds its struct wlog (libuv's way: the interface is a member
 * of the object, and each operation gets back to the object with WAL(),
 * container_of). The table below names, for every operation, the function
 * that does the work, in the file that owns it (wal_int.h lists them):
 * none is a shell that only passes the call on. The functions of this file
 * are the ones that exist because of the interface: the commit with a
 * completion, its poll and flush, the notify, and the object's life (new,
 * open, close; recovery itself is wal_open.c's, which calls nothing here).
 *
 * THE SYNC THREAD
 *
 * In the daemon the fdatasync runs on a thread of its own (opts.sync_thread,
 * the wlog interface's poll/notify): the loop writes the batch into the page
 * cache (wal_write_batch) and goes on; the thread syncs and wakes it; the
 * commit completes on the loop thread (wal_batch_durable). Only the sync
 * before a roll stays inline. One batch is out at a time, and reclamation
 * waits while one is (wal_maintain), so no file the thread syncs is closed
 * under it.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "delay-bridge/wlog.h"
#include "base/xalloc.h"
#include "base/failpoint.h"

static void *sync_main(void *arg)
{
    struct wal *w = arg;
    struct wal_sync *y = &w->sync;

    pthread_mutex_lock(&y->mu);
    for (;;) {
        while (!y->posted && !y->quit)
            pthread_cond_wait(&y->cv, &y->mu);
        if (y->quit)
            break;
        y->posted = 0;
        pthread_mutex_unlock(&y->mu);

        uint64_t t0 = clock_mono_ns(); /* ns: the fsync histogram's buckets go below 1 ms */
        int r = 0;
        for (int i = 0; i < y->batch.n && r == 0; i++) {
            if (FAILPOINT_ERR("wal.fsync_error"))
                r = -EIO;
            else if (walfs_fdatasync(y->batch.fds[i]) < 0)
                r = -errno;
        }
        double secs = (double)(clock_mono_ns() - t0) / 1e9;

        pthread_mutex_lock(&y->mu);
        y->result = r;
        y->seconds = secs;
        y->finished = 1;
        pthread_cond_broadcast(&y->finished_cv);
        if (y->notify)
            y->notify(y->notify_arg);
    }
    pthread_mutex_unlock(&y->mu);
    return NULL;
}

/* The commit operation: wal_commit() inline, or the batch handed to the sync thread. */
int wal_log_commit(struct wlog *l, wlog_commit_fn *done, void *arg)
{
    struct wal *w = WAL(l);
    struct wal_sync *y = &w->sync;
    int r;

    if (!w->opts.sync_thread || w->no_sync) {
        if ((r = wal_commit(w)) < 0)
            return r;
        if (done)
            done(arg, 0);
        return 0;
    }
    if (y->busy)
        return WLOG_EBUSY;
    if (w->failed)
        return w->failed;
    if (!y->started) {
        pthread_mutex_init(&y->mu, NULL);
        pthread_cond_init(&y->cv, NULL);
        pthread_cond_init(&y->finished_cv, NULL);
        if ((r = pthread_create(&y->thread, NULL, sync_main, w)) != 0)
            return wal_fail(w, -r, "start the sync thread", wal_active(w)->segno);
        y->started = 1;
    }
    if ((r = wal_write_batch(w, &y->batch)) < 0)
        return r;
    y->busy = 1;
    y->done = done;
    y->done_arg = arg;
    pthread_mutex_lock(&y->mu);
    y->finished = 0;
    y->posted = 1;
    pthread_cond_signal(&y->cv);
    pthread_mutex_unlock(&y->mu);
    return 0;
}

/* On the loop thread: finish the batch the sync thread is done with, if any. */
void wal_poll(struct wlog *l)
{
    struct wal *w = WAL(l);
    struct wal_sync *y = &w->sync;
    wlog_commit_fn *done;
    int finished, r = 0;
    double secs = 0;

    if (!y->busy)
        return;
    pthread_mutex_lock(&y->mu);
    finished = y->finished;
    if (finished) {
        r = y->result;
        secs = y->seconds;
        y->finished = 0;
    }
    pthread_mutex_unlock(&y->mu);
    if (!finished)
        return;
    y->busy = 0;
    done = y->done;
    y->done = NULL;
    db_hist_observe(&w->fsync, secs);
    if (r < 0) {
        r = wal_fail(w, r, "fdatasync", y->batch.segnos[0]);
    } else {
        wal_batch_durable(w, &y->batch);
    }
    if (done)
        done(y->done_arg, r);
}

/* Wait for the batch out on the sync thread, if any, and complete it here. */
void wal_flush(struct wlog *l)
{
    struct wal_sync *y = &WAL(l)->sync;

    if (!y->busy)
        return;
    pthread_mutex_lock(&y->mu);
    while (!y->finished)
        pthread_cond_wait(&y->finished_cv, &y->mu);
    pthread_mutex_unlock(&y->mu);
    wal_poll(l);
}

void wal_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg)
{
    struct wal_sync *y = &WAL(l)->sync;

    if (y->started)
        pthread_mutex_lock(&y->mu);
    y->notify = fn;
    y->notify_arg = arg;
    if (y->started)
        pthread_mutex_unlock(&y->mu);
}

/* Stop the sync thread, release the open log (if it was opened), free the object. */
void wal_close(struct wlog *l)
{
    struct wal *w = WAL(l);
    struct wal_sync *y = &w->sync;

    if (y->started) {
        pthread_mutex_lock(&y->mu);
        y->quit = 1;
        pthread_cond_signal(&y->cv);
        pthread_mutex_unlock(&y->mu);
        pthread_join(y->thread, NULL);
        pthread_mutex_destroy(&y->mu);
        pthread_cond_destroy(&y->cv);
        pthread_cond_destroy(&y->finished_cv);
    }
    wal_release(w);
    free((char *)w->opts.dir);
    free(w);
}

static const struct wlog_ops wal_log_ops = {
    .name = "segment files",
    .recover = wal_recover,       /* wal_open.c */
    .append = wal_append,         /* wal.c */
    .pending = wal_pending,       /* wal.c */
    .commit = wal_log_commit,     /* here */
    .read = wal_read,             /* wal.c */
    .live = wal_live,             /* wal_space.c */
    .reclaim = wal_maintain,      /* wal_space.c */
    .stats = wal_stats,           /* wal_space.c */
    .id = wal_id,                 /* wal_open.c */
    .next_lsn = wal_next_lsn,     /* wal_open.c */
    .close = wal_close,           /* here */
    .poll = wal_poll,             /* here */
    .set_notify = wal_set_notify, /* here */
    .flush = wal_flush,           /* here */
    .ckpt_begin = wal_ckpt_begin, /* wal.c */
    .ckpt_write = wal_ckpt_write,
    .ckpt_end = wal_ckpt_end,
    .ckpt_poll = wal_ckpt_poll,
    .has = wal_has,               /* wal.c */
    .intake = wal_intake,         /* wal_reserve.c */
    .write = wal_write_ahead,     /* wal.c */
    /* repl_stats, cancel: NULL, not a replicated log */
};

struct wal *wal_new(const struct wal_opts *o)
{
    struct wal *w = xcalloc(1, sizeof(*w));

    w->log.ops = &wal_log_ops;
    w->opts = *o;
    w->opts.dir = o->dir ? xstrdup(o->dir) : NULL;
    w->dirfd = w->lockfd = w->reserve_fd = -1;
    return w;
}

/* wal_new, then wal_recover; closed again when that fails (the tools' and the tests' way in). */
int wal_open(struct wal **out, const struct wal_opts *o, wlog_replay_fn *replay, void *arg)
{
    struct wal *w = wal_new(o);
    int r;

    *out = w; /* the replay function may reach w through its own pointer to *out */
    if ((r = wal_recover(&w->log, replay, NULL, arg, NULL)) != 0) {
        *out = NULL;
        wal_close(&w->log);
    }
    return r;
}

struct wlog *wal_log(struct wal *w)
{
    return w ? &w->log : NULL;
}
