/*
 * wrepl.c -- the write-ahead log replicated through a RabbitMQ stream.
 *
 * The segment-file log (wal.c) stays the fast local copy: appends, reads of
 * due messages, compaction and checkpoints all happen there. This file adds
 * a second copy in a RabbitMQ stream, which the broker cluster replicates,
 * and the rules that keep one bridge, and only one, the writer of a log.
 *
 * WRITING
 *
 * A tap in wal.c (wal_set_tap) hands over every record appended -- the
 * engine's and compaction's copies alike -- and this file re-encodes it for
 * the stream (replrec.c: a 40-byte header, then records in the WAL's own
 * format) into messages of at most wal.replicate.batch_kb. At commit the
 * messages of the batch go to a thread of their own, which publishes them
 * on its connection with publisher confirms, while the local log fsyncs on
 * its sync thread; the commit completes when both are done. The bridge
 * acks its ingress only then, so anything acked is on the local disk and
 * in the stream. A nack, a confirm that does not come within
 * confirm_timeout_ms, or a lost connection fails the log for good (the
 * bridge stops; wlog.h's rule for a failed fsync).
 *
 * KEEPING THE STREAM BOUNDED: HORIZONS
 *
 * Once checkpoint_mb of records were published since the last stream
 * checkpoint completed (or checkpoint_interval_s passed with some), the next
 * maintenance asks wal.c for a horizon: it rolls to a new segment at LSN
 * H, and compaction copies every live record of the older segments forward
 * and deletes them, whatever their use. When the oldest segment starts at
 * or after H, every live record has an LSN >= H and is in the stream after
 * H's position; a HORIZON(H) message says so. Replay from any position
 * before it, as long as its records run unbroken, gets the whole log, so
 * the stream's retention may drop anything older than the newest horizon's
 * start. What the stream must retain is therefore about
 *
 *     needed = checkpoint_mb + live bytes + bytes published while the live
 *              records were being copied,
 *
 * shown as wal.replication.needed_bytes and warned about when it comes
 * within one stream segment of wal.replicate.max_mb.
 *
 * COMPOSED OVER THE SEGMENT LOG
 *
 * wrepl_log() makes the segment log itself (wal_new) and keeps both views
 * of it: the struct wal, for what only a segment log has (the tap, the
 * horizon, a synchronous commit at resume), and its struct wlog as the
 * layer under this one (wlog.h: base.under). The table below lists the
 * operations this log changes; the ones it leaves NULL -- append, read,
 * live, id, next_lsn, the checkpoint file's steps, has, intake -- are the
 * segment log's, reached through wlog.h's wrappers, so there is no shell
 * here that only passes a call on, and nothing casts a struct wlog back to
 * a struct wal.
 *
 * The publishing thread is wrepl_thread.c's; the lease (one writer per
 * log) is wrepl_lease.c's; reading the stream back is wrepl_import.c's,
 * resuming on an intact local log wrepl_resume.c's; what they share is
 * wrepl_int.h.
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "delay-bridge/uri.h"
#include "delay-bridge/replrec.h"

static void close_msg(struct wrepl *r)
{
    struct replrec_hdr h = {REPLREC_RECORDS, r->wal_id, r->token, r->cur_first, r->cur_count};

    if (r->cur == SIZE_MAX)
        return;
    replrec_hdr_encode(r->build.p + r->cur + 4, &h);
    walrec_put32(r->build.p + r->cur, (uint32_t)(r->build.len - r->cur - 4));
    r->cur = SIZE_MAX;
}

static void add_control(struct wrepl *r, uint8_t kind, uint64_t lsn)
{
    struct replrec_hdr h = {kind, r->wal_id, r->token, lsn, 0};

    close_msg(r);
    wrepl_buf_reserve(&r->build, 4 + REPLREC_HDR_SIZE);
    walrec_put32(r->build.p + r->build.len, REPLREC_HDR_SIZE);
    replrec_hdr_encode(r->build.p + r->build.len + 4, &h);
    r->build.len += 4 + REPLREC_HDR_SIZE;
}

static void tap(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct wrepl *r = arg;
    size_t need = WALREC_HDR_SIZE + h->len;
    struct walrec_hdr hh = *h;
    struct walrec_piece pc = {payload, h->len};

    if (r->cur != SIZE_MAX && r->build.len - r->cur - 4 + need > r->rc->batch_bytes)
        close_msg(r);
    if (r->cur == SIZE_MAX) {
        wrepl_buf_reserve(&r->build, 4 + REPLREC_HDR_SIZE);
        r->cur = r->build.len;
        r->build.len += 4 + REPLREC_HDR_SIZE;
        r->cur_count = 0;
        r->cur_first = h->lsn;
    }
    wrepl_buf_reserve(&r->build, need);
    walrec_hdr_encode(r->build.p + r->build.len, &hh, REPLREC_SALT, &pc, 1);
    memcpy(r->build.p + r->build.len + WALREC_HDR_SIZE, payload, h->len);
    r->build.len += need;
    r->cur_count++;
    r->tapped += need;
    r->tap_next = h->lsn + 1;
}

/* ---- the wlog interface ---------------------------------------------------------- */

static int wr_failed(struct wrepl *r)
{
    int f;

    pthread_mutex_lock(&r->mu);
    f = r->failed;
    pthread_mutex_unlock(&r->mu);
    return f;
}

/* The directory must exist for the log layer's lock (a new bridge's first start). */
static int lock_dir(const char *dir, int *lockfd)
{
    int e = wal_dir_make(dir);

    return e < 0 ? e : wal_lock_dir(dir, lockfd);
}

/*
 * The stream's records carry the broker user they were published as, and
 * the import takes only this bridge's user's (wrepl_lease.c): a failover
 * to a URI of another user would make its records a stranger's. 0, or
 * WLOG_EREPLICA (logged) when broker.uri names two users.
 */
static int one_user(const struct config *cfg)
{
    struct uri first, u;
    char err[256];

    for (int i = 0; i < cfg->nuris; i++) {
        if (uri_parse(cfg->uris[i], i ? &u : &first, err, sizeof(err)) < 0)
            return 0; /* the config loader said so already; connecting will too */
        if (i && strcmp(u.user, first.user) != 0) {
            log_error("wal-replica", "with wal.replicate, every broker.uri must name the same "
                      "user: the stream takes only records of the user its owner connects as",
                      "key=broker.uri index=%d", i);
            return WLOG_EREPLICA;
        }
    }
    return 0;
}

static int wr_recover(struct wlog *l, wlog_replay_fn *fn, wlog_ckpt_fn *ckpt, void *arg,
                      struct db_progress *progress)
{
    struct wrepl *r = R(l);
    uint64_t t0 = clock_mono_ms();
    int lockfd = -1, dirfd = -1, e;

    r->recover_t0 = t0;

    if ((e = one_user(r->cfg)) < 0)
        goto out;
    if ((e = lock_dir(r->dir, &lockfd)) < 0)
        return e;
    dirfd = wal_dir_open(r->dir);
    if (dirfd < 0) {
        e = dirfd;
        goto out;
    }
    if ((e = wrepl_replica_take(r, dirfd)) < 0)
        goto out;
    for (int soon = 0;;) {
        if (atomic_load(&r->cancel)) {
            e = -ECANCELED;
            goto out;
        }
        set_state(r, WLOG_REPL_CONNECTING);
        r->retry_now = r->retry_soon = 0;
        e = wrepl_connect_lease(r);
        if (e == 0) {
            e = wrepl_import(r, dirfd);
            if (e == 0)
                break;
        }
        if (e != -EAGAIN)
            goto out;
        soon = r->retry_soon ? (soon ? 2 * soon : RETRY_SOON_MS) : 0;
        int pause = soon && soon < RETRY_MS ? soon : RETRY_MS;
        for (int i = 0; !r->retry_now && i < pause / 100 && !atomic_load(&r->cancel); i++)
            usleep(100000);
    }
    close(lockfd); /* wal_open takes it again */
    lockfd = -1;
    if ((e = wlog_recover(r->inner, fn, ckpt, arg, progress)) < 0)
        goto out;
    if (r->resume && (e = wrepl_resume_apply(r, fn, arg)) < 0)
        goto out;
    struct wal *w = r->wal;
    uint64_t next = wlog_next_lsn(r->inner);
    if (r->resume && wlog_pending(r->inner) && (e = wal_commit(w)) < 0)
        goto out; /* what the stream added, durable here too before the note says so */
    r->wal_id = wlog_id(r->inner);
    if (r->need_horizon < 0)
        r->need_horizon = next > wal_first_lsn(w) || wal_first_lsn(w) > 1;
    if (r->need_horizon)
        log_info("wal-replica", "the local log has records the stream does not: a stream "
                 "checkpoint starts at once, and until it completes the stream alone does not "
                 "hold the whole log", "stream=%s next_lsn=%llu", r->rc->stream,
                 (unsigned long long)next);
    wal_set_tap(w, tap, r);
    r->tap_next = r->commit_next = r->durable_next = next;
    /* Everything below next_lsn is the stream's; this term's records follow its fence. */
    if (r->fence_off >= 0)
        wrepl_replica_write(r, r->wal_id, next, r->fence_off, 1);
    r->note_from_prev = r->fence_off;
    r->note_ms = clock_mono_ms();
    r->last_horizon_ms = clock_mono_ms();
    pthread_mutex_lock(&r->mu);
    r->st.import_seconds = (double)(clock_mono_ms() - r->lease_at) / 1000.0;
    r->st.complete = !r->need_horizon;
    pthread_mutex_unlock(&r->mu);
    if ((e = pthread_create(&r->th, NULL, repl_main, r)) != 0) {
        e = -e;
        goto out;
    }
    r->started = 1;
    set_state(r, WLOG_REPL_OWNER);
    e = 0;
out:
    if (e < 0 && e != -ECANCELED)
        set_state(r, WLOG_REPL_FAILED);
    if (e < 0 && r->conn.st)
        broker_conn_close(&r->conn, 0);
    if (lockfd >= 0)
        close(lockfd);
    if (dirfd >= 0)
        close(dirfd);
    return e;
}

/* Stream messages not shipped yet count too: a horizon alone must still cause a commit. */
static size_t wr_pending(const struct wlog *l)
{
    return wlog_pending(R(l)->inner) + R(l)->build.len;
}

static void finish(struct wrepl *r)
{
    wlog_commit_fn *done;
    int err;

    if (!r->busy || r->local_pending || r->stream_pending)
        return;
    r->busy = 0;
    err = r->local_err ? r->local_err : r->stream_err;
    if (!err) {
        pthread_mutex_lock(&r->mu);
        r->durable_next = r->commit_next; /* for the running REPLICA note */
        pthread_mutex_unlock(&r->mu);
    }
    done = r->done;
    r->done = NULL;
    if (done)
        done(r->done_arg, err);
}

static void local_done(void *arg, int err)
{
    struct wrepl *r = arg;

    r->local_pending = 0;
    r->local_err = err;
    finish(r);
}

static void take_stream_result(struct wrepl *r)
{
    uint64_t horizon = 0;

    pthread_mutex_lock(&r->mu);
    if (r->stream_pending && r->job_done) {
        r->job_done = 0;
        r->stream_pending = 0;
        r->stream_err = r->job_err;
        if (r->horizon_in_job && !r->job_err) {
            horizon = r->horizon_in_job;
            r->st.horizons++;
            r->st.horizon_lsn = horizon;
            r->st.complete = 1;
            r->hint_lsn = horizon; /* the next fresh lease token carries it */
            r->hint_ms = r->horizon_in_job_ms;
        }
        r->horizon_in_job = 0;
    }
    if (r->stream_recreated) {
        /* The new stream starts mid-log: a fresh checkpoint makes it whole (see repl_main). */
        r->stream_recreated = 0;
        r->st.complete = 0;
        r->need_horizon = 1;
        r->horizon_target = 0; /* begun before: its copies partly went to the old stream */
        r->horizon_unsent = 0;
        horizon = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (horizon)
        log_info("wal-replica", "stream checkpoint complete: replay may start at the horizon",
                 "horizon_lsn=%llu copied_bytes=%llu", (unsigned long long)horizon,
                 (unsigned long long)r->horizon_copied);
}

static int wr_commit(struct wlog *l, wlog_commit_fn *done, void *arg)
{
    struct wrepl *r = R(l);
    int e;

    if (r->busy)
        return WLOG_EBUSY;
    if ((e = wr_failed(r)) < 0)
        return e;
    close_msg(r);
    r->busy = 1;
    r->commit_next = r->tap_next;
    r->done = done;
    r->done_arg = arg;
    r->local_err = r->stream_err = 0;
    r->stream_pending = r->build.len > 0;
    if (r->stream_pending) {
        struct buf t;
        uint64_t one = 1;

        pthread_mutex_lock(&r->mu);
        r->horizon_in_job = r->horizon_unsent; /* confirmed with this job */
        r->horizon_in_job_ms = r->horizon_unsent_ms;
        r->horizon_unsent = 0;
        t = r->job; /* empty: the last job was taken and finished */
        r->job = r->build;
        r->build = t;
        r->build.len = 0;
        r->job_posted = 1;
        r->job_done = 0;
        pthread_mutex_unlock(&r->mu);
        if (write(r->efd, &one, sizeof(one)) < 0) {
            /* cannot happen with an eventfd below its maximum; the thread also polls */
        }
    }
    r->local_pending = 1;
    e = wlog_commit(r->inner, local_done, r);
    if (e < 0) {
        /* Nothing completes: wait for the stream half so that the next commit starts clean. */
        r->local_pending = 0;
        pthread_mutex_lock(&r->mu);
        while (r->stream_pending && !r->job_done)
            pthread_cond_wait(&r->cv, &r->mu);
        r->job_done = 0;
        r->stream_pending = 0;
        pthread_mutex_unlock(&r->mu);
        r->busy = 0;
        r->done = NULL;
        return e;
    }
    return 0;
}

static void wr_poll(struct wlog *l)
{
    struct wrepl *r = R(l);

    wlog_poll(r->inner);
    take_stream_result(r);
    finish(r);
}

static void wr_flush(struct wlog *l)
{
    struct wrepl *r = R(l);

    wlog_flush(r->inner);
    pthread_mutex_lock(&r->mu);
    while (r->stream_pending && !r->job_done)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    wr_poll(l);
}

static void wr_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg)
{
    struct wrepl *r = R(l);

    wlog_set_notify(r->inner, fn, arg);
    pthread_mutex_lock(&r->mu);
    r->notify = fn;
    r->notify_arg = arg;
    pthread_mutex_unlock(&r->mu);
}

/* Reclaim, and drive stream checkpoints: a horizon asked for, reached, then announced. */
static int wr_reclaim(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    struct wrepl *r = R(l);
    struct wal *w = r->wal;
    uint64_t now = clock_mono_ms(); /* last_horizon_ms, warned_ms: monotonic too */
    int e;

    if ((e = wr_failed(r)) < 0)
        return e;
    if (!r->horizon_target && ops) {
        uint64_t since = r->tapped - r->last_ended_at; /* its own copies do not count */
        int by_time = r->rc->checkpoint_interval_s && since &&
                      now - r->last_horizon_ms >= (uint64_t)r->rc->checkpoint_interval_s * 1000;
        if (r->need_horizon || since >= r->rc->checkpoint_bytes || by_time) {
            if ((e = wal_force_horizon(w, &r->horizon_target)) < 0)
                return e;
            r->horizon_roll_ms = clock_now_ms(); /* wall clock: a stream timestamp */
            r->horizon_began_at = r->tapped;
            log_info("wal-replica", "stream checkpoint begins: live records are copied forward",
                     "horizon_lsn=%llu published_since_last=%llu", (unsigned long long)r->horizon_target,
                     (unsigned long long)since);
        }
    }
    if ((e = wlog_reclaim(r->inner, budget, ops)) < 0)
        return e;
    if (r->horizon_target && wal_horizon_reached(w, r->horizon_target)) {
        /* Published with the next commit; counted once the stream confirms it. */
        add_control(r, REPLREC_HORIZON, r->horizon_target);
        r->horizon_unsent = r->horizon_target;
        r->horizon_unsent_ms = r->horizon_roll_ms;
        r->horizon_copied = r->tapped - r->horizon_began_at;
        r->last_began_at = r->horizon_began_at;
        r->last_ended_at = r->tapped;
        r->horizon_target = 0;
        r->need_horizon = 0;
        r->last_horizon_ms = now;
    }
    uint64_t needed = r->tapped - r->last_began_at;
    if (r->rc->max_bytes && needed + r->rc->segment_bytes > r->rc->max_bytes &&
        now - r->warned_ms >= 60000) {
        r->warned_ms = now;
        log_warn("wal-replica", "the stream may soon drop records a rebuild needs: raise "
                 "wal.replicate.max_mb or lower checkpoint_mb",
                 "needed_bytes=%llu max_bytes=%llu", (unsigned long long)needed,
                 (unsigned long long)r->rc->max_bytes);
    }
    return e || r->horizon_target != 0;
}

static void wr_stats(const struct wlog *l, struct wlog_stats *s)
{
    wlog_stats(R(l)->inner, s);
    if (!s->failed)
        s->failed = wr_failed((struct wrepl *)l);
}

static void wr_repl_stats(struct wlog *l, struct wlog_repl_stats *s)
{
    struct wrepl *r = R(l);

    pthread_mutex_lock(&r->mu);
    *s = r->st;
    pthread_mutex_unlock(&r->mu);
    s->state = atomic_load(&r->state);
    s->stream = r->rc->stream;
    if (s->state == WLOG_REPL_OWNER) {
        /* loop-thread fields: read where the loop asks (bridge_stats runs on it) */
        s->horizon_running = r->horizon_target != 0;
        s->needed_bytes = r->tapped - r->last_began_at;
    }
}

static void wr_cancel(struct wlog *l)
{
    atomic_store(&R(l)->cancel, 1);
}

static void wr_close(struct wlog *l)
{
    struct wrepl *r = R(l);

    if (r->started) {
        uint64_t one = 1;
        pthread_mutex_lock(&r->mu);
        r->quit = 1;
        pthread_mutex_unlock(&r->mu);
        if (write(r->efd, &one, sizeof(one)) < 0) {
            /* the thread polls once a second anyway */
        }
        pthread_join(r->th, NULL);
        /* Everything appended is durable here and confirmed there: say where it ends. */
        if (!wr_failed(r) && !r->busy && r->build.len == 0 && r->close_from >= 0 &&
            wlog_pending(r->inner) == 0)
            wrepl_replica_write(r, wlog_id(r->inner), wlog_next_lsn(r->inner), r->close_from, 0);
    } else if (r->conn.st) {
        broker_conn_close(&r->conn, 1);
    }
    wlog_close(r->inner);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    close(r->efd);
    if (r->impfd >= 0)
        close(r->impfd);
    free(r->build.p);
    free(r->job.p);
    free(r->delta.p);
    free(r);
}

/* Not offered: its commit is the stream's, and a record written ahead here is not in it. */
static int wr_write(struct wlog *l)
{
    (void)l;
    return 0;
}

/*
 * What the replicated log changes; every operation left NULL is the
 * segment log's under it (append, read, live, id, next_lsn, the
 * checkpoint file's ckpt_*, has, intake: wlog.h's layers).
 */
static const struct wlog_ops wrepl_ops = {
    .name = "segment files replicated to a RabbitMQ stream",
    .recover = wr_recover,
    .pending = wr_pending,
    .commit = wr_commit,
    .reclaim = wr_reclaim,
    .stats = wr_stats,
    .close = wr_close,
    .poll = wr_poll,
    .set_notify = wr_set_notify,
    .flush = wr_flush,
    .repl_stats = wr_repl_stats,
    .cancel = wr_cancel,
    .write = wr_write,
};

struct wlog *wrepl_log(const struct wal_opts *wo, const struct config *cfg)
{
    struct wrepl *r = xcalloc(1, sizeof(*r));

    r->base.ops = &wrepl_ops;
    r->wal = wal_new(wo);
    r->inner = wal_log(r->wal);
    r->base.under = r->inner;
    r->wo = *wo;
    r->cfg = cfg;
    r->rc = &cfg->repl;
    snprintf(r->dir, sizeof(r->dir), "%s", wo->dir);
    r->wo.dir = r->dir;
    r->cur = SIZE_MAX;
    r->impfd = -1;
    r->tail_from = -1;
    r->close_from = -1;
    r->fence_off = -1;
    r->note_from_prev = -1;
    r->seen_lo = r->seen_hi = r->pass_lo = r->pass_hi = -1;
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return &r->base;
}

