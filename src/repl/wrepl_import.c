/*
 * wrepl_import.c -- reading the replicated log's stream back into the local log.
 *
 * READING BACK: THE IMPORT
 *
 * Holding the lease, recover publishes a FENCE with a fresh token (its
 * term), then reads the stream from its first retained message up to that
 * fence (x-stream-offset "first"). replrec.c decides what is the log:
 * one run of LSNs, strays of earlier terms skipped, and whether it is
 * whole. Then:
 *
 *   no records in the stream   the local log, whatever it holds, is the
 *                              log (a new log, or replication just turned
 *                              on: then a stream checkpoint starts at once,
 *                              and until it completes the stream alone is
 *                              not the whole log -- /stats says so);
 *   a whole log                the records were written into dir/import/
 *                              as a new log with the same id and LSNs; the
 *                              local segments (stale, lost, or the dead
 *                              owner's) are replaced by them;
 *   records missing            recover fails (WLOG_EREPLICA) and names
 *                              what is missing; the local log is left as
 *                              it is for the operator.
 *
 * Then the local log recovers as usual and this bridge is the owner. The
 * stream is always the truth when it has records: the local log may have
 * records it lacks only if they were never confirmed, so never acked.
 *
 * Only the writer's messages count: a message whose user-id is not this
 * bridge's broker user is read past before replrec.c sees it (wrepl_lease.c,
 * "ONE WRITER'S RECORDS"), so a stranger's FENCE ends no term, and a
 * stranger's RECORDS or HORIZON never enter the log or make it look whole.
 *
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "delay-bridge/replrec.h"
#include "delay-bridge/walckpt.h"
#include "delay-bridge/walscan.h"
#include "base/xalloc.h"

/* Delete the segments (and checkpoint) in dirfd (the log layer's rule for its files). */
static int drop_segments(int dirfd)
{
    return wal_replace_segments(dirfd, NULL, 0, WAL_REPLACE_ALL, NULL);
}

static int imp_dirfd(struct wrepl *r, int create)
{
    int fd;

    if (r->impfd >= 0)
        return r->impfd;
    fd = wal_dir_open_sub(r->dir, IMPORT_DIR, create); /* the log layer makes it, 0700 */
    if (fd >= 0)
        r->impfd = fd;
    return fd;
}

static int imp_reset(void *arg, uint64_t wal_id, uint64_t base_lsn)
{
    struct wrepl *r = arg;
    struct wal_opts o;
    char path[4200];
    int fd, e;

    if (r->imp) {
        log_warn("wal-replica", "the stream skips records (a gap): the log starts again after it",
                 "base_lsn=%llu", (unsigned long long)base_lsn);
        wlog_close(wal_log(r->imp));
        r->imp = NULL;
    }
    if ((fd = imp_dirfd(r, 1)) < 0 || (e = drop_segments(fd)) < 0)
        return fd < 0 ? fd : e;
    snprintf(path, sizeof(path), "%s/%s", r->dir, IMPORT_DIR);
    memset(&o, 0, sizeof(o));
    o.dir = path;
    o.segment_bytes = r->wo.segment_bytes;
    o.no_sync = r->wo.no_sync;
    o.create_id = wal_id;
    o.create_base_lsn = base_lsn;
    r->imp_pending = 0;
    r->imp = wal_new(&o);
    if ((e = wlog_recover(wal_log(r->imp), NULL, NULL, NULL, NULL)) < 0) {
        wlog_close(wal_log(r->imp));
        r->imp = NULL;
    }
    return e;
}

static int imp_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct wrepl *r = arg;
    struct walrec_piece pc = {payload, h->len};
    uint64_t lsn = 0;
    int e = wlog_append(wal_log(r->imp), h->type, &pc, 1, &lsn, NULL);

    if (e < 0)
        return e;
    if (lsn != h->lsn)
        return WLOG_ECORRUPT;
    r->imp_pending += WALREC_HDR_SIZE + h->len;
    if (r->imp_pending >= r->imp_commit_bytes) {
        r->imp_pending = 0;
        return wal_commit(r->imp);
    }
    return 0;
}

/* Replace the segments of dir by the imported ones (their names do not collide: dir's go first). */
static int imp_install(struct wrepl *r, int dirfd)
{
    struct wal_replacement *v;
    char (*names)[WALSCAN_NAME_SIZE];
    const char *step = NULL;
    uint64_t *nos = NULL;
    size_t n = 0;
    int e;

    if ((e = wal_commit(r->imp)) < 0)
        return e;
    wlog_close(wal_log(r->imp));
    r->imp = NULL;
    if ((e = walscan_list(r->impfd, &nos, &n, NULL, 0)) < 0)
        return e;
    v = xcalloc(n ? n : 1, sizeof(*v));
    names = xcalloc(n ? n : 1, sizeof(*names));
    for (size_t i = 0; i < n; i++) {
        walscan_seg_name(names[i], nos[i]);
        v[i] = (struct wal_replacement){names[i], r->impfd, names[i], NULL};
    }
    /* The log layer owns the directory's files: every old segment out, the imported in. */
    e = wal_replace_segments(dirfd, v, n, WAL_REPLACE_ALL, &step);
    if (e < 0)
        log_error("wal-replica", "cannot swap the imported log in", "dir=%s step=\"%s\"",
                  r->dir, step ? step : "?");
    free(nos);
    free(v);
    free(names);
    return e;
}

/* Remove dir/import (what a crashed or unneeded import left). */
static void imp_remove(struct wrepl *r)
{
    if (r->imp) {
        wlog_close(wal_log(r->imp));
        r->imp = NULL;
    }
    if (r->impfd >= 0) {
        close(r->impfd);
        r->impfd = -1;
    }
    (void)wal_dir_remove_sub(r->dir, IMPORT_DIR); /* the log's files, then the directory */
}

/*
 * Where each record batch since the last horizon starts in the stream: a
 * standby that passes a horizon finds the batch holding its LSN here, the
 * place a later read can start from.
 */
struct batch_pos {
    uint64_t first, count; /* LSNs first .. first + count - 1 */
    int64_t offset;        /* the stream offset of its message */
    uint64_t bytes_before; /* record bytes imported before it */
};

struct batch_index {
    struct batch_pos *v;
    size_t n, cap;
};

static void index_add(struct batch_index *x, const struct batch_pos *p)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 1024;
        x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
    }
    x->v[x->n++] = *p;
}

/* The batch that holds lsn, and drop the ones before it; NULL if none does. */
static const struct batch_pos *index_cut(struct batch_index *x, uint64_t lsn)
{
    for (size_t i = 0; i < x->n; i++)
        if (x->v[i].first <= lsn && lsn < x->v[i].first + x->v[i].count) {
            memmove(x->v, x->v + i, (x->n - i) * sizeof(*x->v));
            x->n -= i;
            return &x->v[0];
        }
    return NULL;
}

/*
 * Consume the stream on channel ch: from tail_from (a stream offset; -1:
 * "first"), or, when at_ms is not 0, from that wall-clock time.
 */
static int start_tail(struct wrepl *r, amqp_channel_t ch, uint64_t at_ms, char *why, size_t n)
{
    amqp_connection_state_t st = r->conn.st;
    amqp_table_entry_t e[1];
    amqp_table_t args = {1, e};

    amqp_channel_open(st, ch);
    if (broker_conn_check(&r->conn, "channel.open", why, n) < 0)
        return -1;
    amqp_basic_qos(st, ch, 0, IMPORT_PREFETCH, 0);
    if (broker_conn_check(&r->conn, "basic.qos", why, n) < 0)
        return -1;
    wrepl_read_begin(r);
    if (at_ms) {
        e[0].key = amqp_cstring_bytes("x-stream-offset");
        e[0].value.kind = AMQP_FIELD_KIND_TIMESTAMP;
        e[0].value.value.u64 = at_ms / 1000;
    } else if (r->tail_from < 0) {
        wrepl_arg_str(&e[0], "x-stream-offset", "first");
    } else {
        wrepl_arg_i64(&e[0], "x-stream-offset", r->tail_from);
    }
    amqp_basic_consume(st, ch, amqp_cstring_bytes(r->rc->stream),
                       amqp_cstring_bytes("wal-import"), 0, 0, 0, args);
    return broker_conn_check(&r->conn, "consume the stream", why, n);
}

/*
 * A standby passed a horizon: if what it imported is mostly older than the
 * horizon (records the owner has since copied forward or finished), it
 * reads again from the batch that holds the horizon, so its copy follows
 * the live data, not the stream's whole length. 1: start again from there.
 */
static int passed_horizon(struct wrepl *r, const struct replrec_import *im,
                          struct batch_index *x)
{
    const struct batch_pos *p = index_cut(x, im->horizon);

    if (!p || p->offset < 0)
        return 0;
    uint64_t since = im->bytes - p->bytes_before;
    if (im->bytes <= 2 * since + TAIL_SLACK_BYTES)
        return 0;
    log_info("wal-replica", "standby: the stream passed a horizon; reading it again from there "
             "to keep the local copy near the live data", "horizon_lsn=%llu offset=%lld "
             "imported_bytes=%llu since_horizon_bytes=%llu",
             (unsigned long long)im->horizon, (long long)p->offset,
             (unsigned long long)im->bytes, (unsigned long long)since);
    r->tail_from = p->offset;
    return 1;
}

/* Give up resuming on the local log: the next pass reads the whole stream. */
static void resume_off(struct wrepl *r, const char *why)
{
    log_warn("wal-replica", "not resuming on the local log; reading the whole stream",
             "stream=%s reason=\"%s\" next_lsn=%llu", r->rc->stream, why,
             (unsigned long long)r->resume_next);
    r->resume = 0;
    r->tail_from = -1;
    free(r->delta.p);
    memset(&r->delta, 0, sizeof(r->delta));
    r->delta_count = 0;
}

/*
 * THE TAKEOVER, STEP BY STEP
 *
 * wrepl_import() below is the list of its steps; what they share is one
 * struct import_run. A step inside the read returns STEP_ON (go on),
 * STEP_LOST (why is set: nothing local changed, let go of the connection
 * and connect again, import_let_go()) or a final negative code it has
 * cleaned up after itself.
 */
enum { STEP_ON = 0, STEP_LOST = 1, STEP_DELIVERY = 2 };

struct import_run {
    struct wrepl *r;
    struct replrec_sink sink;        /* into dir/import/ */
    struct replrec_sink resume_sink; /* resuming: into r->delta (wrepl_resume.c) */
    struct replrec_import im;        /* what replrec.c made of the stream so far */
    struct batch_index index;        /* where batches since the last horizon start */
    uint8_t fence[REPLREC_HDR_SIZE]; /* this term's FENCE, published once the lease comes */
    amqp_channel_t rch;              /* the read's channel: CH_READ, or CH_READ_HINT */
    uint64_t t0, last, said;         /* monotonic ms: began; last delivery; last "standing by" */
    uint64_t unacked, tag;           /* deliveries not acked yet; the last one's tag */
    uint64_t seen_horizons;          /* im.horizons when passed_horizon() last looked */
    uint64_t t_lease;                /* monotonic ms the lease came */
    uint64_t hint_from;              /* wall ms the read starts at (a horizon's time), 0: none */
    uint64_t fence_tag, fence_acked; /* the fence's publish tag; monotonic ms its confirm came */
    uint64_t refused_uncovered;      /* refused record batches the local log does not hold */
    int read_any, fenced, again, res;
    char why[1024];
};

/* Open the import: a fresh term token and its fence, the read's consumer from tail_from. */
static int import_open(struct import_run *ir, struct wrepl *r)
{
    struct replrec_hdr fh = {REPLREC_FENCE, 0, 0, 0, 0};

    memset(ir, 0, sizeof(*ir));
    ir->r = r;
    ir->sink = (struct replrec_sink){imp_reset, imp_record, r};
    ir->resume_sink = wrepl_resume_sink(r);
    ir->rch = CH_READ;
    ir->t0 = ir->last = clock_mono_ms();
    r->token = clock_rand64();
    fh.owner = r->token;
    replrec_hdr_encode(ir->fence, &fh);
    replrec_import_init(&ir->im, r->token);
    r->resume_bad = 0;
    r->resume_resets = 0;
    r->resume_read_next = 0;
    r->resume_hole_from = r->resume_hole_to = r->resume_hole_records = 0;
    r->delta.len = 0;
    r->delta_count = 0;
    r->imp_commit_bytes = STANDBY_COMMIT_BYTES;
    if (start_tail(r, ir->rch, 0, ir->why, sizeof(ir->why)) < 0)
        return STEP_LOST;
    set_state(r, WLOG_REPL_STANDBY);
    return STEP_ON;
}

/*
 * Granted the lease with a horizon named in the token that the read has
 * not passed yet (an empty disk, little standby time): read from the
 * horizon's time instead of going on from the stream's first message.
 * What the first read took is dropped; the fence follows.
 */
static int read_from_hint(struct import_run *ir)
{
    struct wrepl *r = ir->r;

    if (!(r->have_lease && !ir->fenced && r->grant_ms && !r->no_hint && !r->resume &&
          r->tail_from < 0 && r->grant_lsn > ir->im.horizon && r->grant_ms > HINT_MARGIN_MS))
        return STEP_ON;
    amqp_channel_close(r->conn.st, ir->rch, AMQP_REPLY_SUCCESS);
    if (broker_conn_check(&r->conn, "close the stream consumer", ir->why, sizeof(ir->why)) < 0)
        return STEP_LOST;
    imp_remove(r);
    replrec_import_init(&ir->im, r->token);
    ir->index.n = 0;
    ir->unacked = 0;
    ir->rch = CH_READ_HINT;
    ir->hint_from = r->grant_ms - HINT_MARGIN_MS; /* wall clock: the stream's timestamps */
    if (start_tail(r, ir->rch, ir->hint_from, ir->why, sizeof(ir->why)) < 0)
        return STEP_LOST;
    log_info("wal-replica", "reading the stream from its newest horizon",
             "horizon_lsn=%llu from_ms=%llu", (unsigned long long)r->grant_lsn,
             (unsigned long long)ir->hint_from);
    return STEP_ON;
}

/*
 * Fence: once the lease came, publish this term's FENCE; the read goes on
 * up to it, in large writes. Its confirm is not waited for: reading it
 * back from the stream says more.
 */
static int fence_on_lease(struct import_run *ir)
{
    struct wrepl *r = ir->r;

    if (!r->have_lease || ir->fenced)
        return STEP_ON;
    if (wrepl_publish(r, ir->fence, sizeof(ir->fence), ir->why, sizeof(ir->why)) < 0)
        return STEP_LOST;
    ir->fence_tag = r->next_tag;
    ir->fenced = 1;
    r->imp_commit_bytes = IMPORT_COMMIT_BYTES;
    ir->last = ir->t_lease = r->lease_at = clock_mono_ms();
    pthread_mutex_lock(&r->mu);
    r->st.standby_seconds = (double)(ir->t_lease - r->recover_t0) / 1000.0;
    pthread_mutex_unlock(&r->mu);
    log_info("wal-replica", "lease granted: this bridge owns the log",
             "stream=%s waited_ms=%llu read_ahead_records=%llu", r->rc->stream,
             (unsigned long long)(ir->t_lease - r->recover_t0),
             (unsigned long long)ir->im.records);
    set_state(r, WLOG_REPL_IMPORTING);
    return STEP_ON;
}

/* Standing by: say so after a second, then once a minute. */
static void say_standing_by(struct import_run *ir)
{
    struct wrepl *r = ir->r;

    if (ir->fenced || clock_mono_ms() - ir->t0 < 1000 ||
        (ir->said != 0 && clock_mono_ms() - ir->said < 60000))
        return;
    ir->said = clock_mono_ms();
    log_info("wal-replica", "standing by: another bridge holds the lease of this log",
             "stream=%s lease_queue=%s waited_s=%llu read_ahead_records=%llu", r->rc->stream,
             r->rc->lease_queue, (unsigned long long)((clock_mono_ms() - ir->t0) / 1000),
             (unsigned long long)ir->im.records);
}

/*
 * Every event but the read's own deliveries: the fence's confirm, a
 * resume that reads nothing, a cancelled consumer or the fence returned,
 * and what a quiet stream allows (ack, write what was read ahead, give up
 * when fenced and idle). STEP_DELIVERY leaves ev to read_delivery().
 */
static int take_event(struct import_run *ir, struct event *ev)
{
    struct wrepl *r = ir->r;

    if (ev->kind == EV_ACK && ev->ch == CH_PUB && ir->fence_tag && ev->tag >= ir->fence_tag &&
        !ir->fence_acked)
        ir->fence_acked = clock_mono_ms();
    if (r->resume && ir->fence_acked && !ir->read_any &&
        clock_mono_ms() - ir->fence_acked > RESUME_QUIET_MS) {
        /*
         * The fence is in the stream, yet a read from the note's offset
         * delivers nothing: the stream ends before that offset (deleted
         * and declared again) and the reader, put at its end, may have
         * started after the fence. Not the note's stream: read it all.
         */
        resume_off(r, "the stream holds nothing from the note's offset on: it is not the "
                   "stream the note speaks of (deleted and declared again?)");
        r->retry_now = 1;
        imp_remove(r);
        broker_conn_close(&r->conn, 0);
        return -EAGAIN;
    }
    if (ev->kind == EV_CANCEL) {
        snprintf(ir->why, sizeof(ir->why), "the broker cancelled a consumer (lease queue or "
                 "stream deleted?)");
        return STEP_LOST;
    }
    if (ev->kind == EV_RETURN) {
        snprintf(ir->why, sizeof(ir->why), "the fence came back unroutable: the stream was "
                 "deleted");
        return STEP_LOST;
    }
    if (ev->kind == EV_NONE && ir->unacked) {
        /* Quiet: settle what was read (a delivery held unacked meets consumer_timeout). */
        amqp_basic_ack(r->conn.st, ir->rch, ir->tag, 1);
        ir->unacked = 0;
    }
    if (!ir->fenced && ev->kind == EV_NONE && r->imp && r->imp_pending) {
        /* The stream is quiet: write what was read ahead, so it is not held in memory. */
        r->imp_pending = 0;
        ir->res = wal_commit(r->imp); /* < 0 ends the read */
        return STEP_ON;
    }
    if (ir->fenced && ev->kind == EV_NONE && clock_mono_ms() - ir->last > IMPORT_IDLE_MS) {
        snprintf(ir->why, sizeof(ir->why), "the stream sent nothing for %d s before our fence",
                 IMPORT_IDLE_MS / 1000);
        return STEP_LOST;
    }
    if (ev->kind != EV_DELIVER)
        return STEP_ON;
    if (ev->ch != ir->rch) { /* the lease's, or the first read's after it moved */
        amqp_destroy_message(&ev->msg);
        return STEP_ON;
    }
    return STEP_DELIVERY;
}

/*
 * One message of the stream: index its batch, hand it to replrec.c (which
 * sets res to 1 at this term's fence), ack every IMPORT_ACK_EVERY. Standing
 * by, it may decide to read again: a resume that cannot work, or a
 * horizon passed far from the start (STEP_LOST with again set).
 */
static int read_delivery(struct import_run *ir, struct event *ev)
{
    struct wrepl *r = ir->r;
    struct replrec_hdr bh;
    struct batch_pos pos = {0, 0, wrepl_delivery_offset(&ev->msg), ir->im.bytes};

    ir->last = clock_mono_ms();
    ir->read_any = 1;
    if (!wrepl_from_writer(r, &ev->msg, pos.offset)) {
        /* Not the writer's (wrepl_lease.c): read past it, as if the stream did not hold it. */
        if (replrec_hdr_decode(ev->msg.body.bytes, ev->msg.body.len, &bh) > 0 &&
            bh.kind == REPLREC_RECORDS && bh.count &&
            !(r->resume_next && bh.wal_id == r->resume_wal_id &&
              bh.lsn + bh.count <= r->resume_next))
            ir->refused_uncovered++; /* records the local log does not hold: import_swap_in */
        amqp_destroy_message(&ev->msg);
        ir->tag = ev->tag;
        if (++ir->unacked >= IMPORT_ACK_EVERY) {
            amqp_basic_ack(r->conn.st, ir->rch, ir->tag, 1);
            ir->unacked = 0;
        }
        return STEP_ON;
    }
    if (replrec_hdr_decode(ev->msg.body.bytes, ev->msg.body.len, &bh) > 0) {
        if (r->resume && bh.owner == r->resume_term)
            r->resume_seen = 1;
        if (bh.kind == REPLREC_RECORDS) {
            pos.first = bh.lsn;
            pos.count = bh.count;
            index_add(&ir->index, &pos);
        }
    }
    ir->res = replrec_import_msg(&ir->im, ev->msg.body.bytes, ev->msg.body.len,
                                 r->resume ? &ir->resume_sink : &ir->sink, ir->why,
                                 sizeof(ir->why));
    if (ir->res == 1)
        r->fence_off = pos.offset; /* this term's fence: the running note starts there */
    if (r->resume && ir->im.last_owner == r->resume_term && ir->im.next_lsn)
        r->term_max = ir->im.next_lsn - 1;
    amqp_destroy_message(&ev->msg);
    ir->tag = ev->tag;
    if (++ir->unacked >= IMPORT_ACK_EVERY) {
        amqp_basic_ack(r->conn.st, ir->rch, ir->tag, 1);
        ir->unacked = 0;
    }
    pthread_mutex_lock(&r->mu);
    r->st.imported_records = ir->im.records;
    r->st.imported_bytes = ir->im.bytes;
    pthread_mutex_unlock(&r->mu);
    if (r->resume && r->resume_bad && !ir->fenced) {
        /* Standing by while another owner writes more than a resume takes: read it all. */
        resume_off(r, "the stream past the local log is not its continuation, or too long");
        ir->again = 1;
        snprintf(ir->why, sizeof(ir->why), "reading the whole stream");
        return STEP_LOST;
    }
    if (ir->res == 0 && ir->im.horizons != ir->seen_horizons) {
        ir->seen_horizons = ir->im.horizons;
        if (!ir->fenced && !r->resume && passed_horizon(r, &ir->im, &ir->index)) {
            ir->again = 1;
            snprintf(ir->why, sizeof(ir->why), "reading again from the newest horizon");
            return STEP_LOST;
        }
    }
    return STEP_ON;
}

/*
 * Stand by, fence, drain to the fence: read the stream until replrec.c
 * meets this term's fence (res 1) or fails (res < 0). STEP_ON then, with
 * the read's channel still open; STEP_LOST; -ECANCELED; -EAGAIN (not
 * resuming after all: cleaned up, connect again at once).
 */
static int import_read(struct import_run *ir)
{
    struct wrepl *r = ir->r;
    int e;

    while (ir->res == 0) {
        struct event ev;
        int mine;

        if (atomic_load(&r->cancel)) {
            imp_remove(r);
            return -ECANCELED;
        }
        if ((e = read_from_hint(ir)) != STEP_ON || (e = fence_on_lease(ir)) != STEP_ON)
            return e;
        say_standing_by(ir);
        if (wrepl_renew_step(r, ir->why, sizeof(ir->why)) < 0 ||
            wrepl_next_event(r, 250, &ev, ir->why, sizeof(ir->why)) < 0)
            return STEP_LOST;
        if ((mine = wrepl_renew_event(r, &ev, ir->why, sizeof(ir->why))) < 0)
            return STEP_LOST;
        if (mine)
            continue;
        if ((e = take_event(ir, &ev)) == STEP_DELIVERY)
            e = read_delivery(ir, &ev);
        if (e != STEP_ON)
            return e;
    }
    return STEP_ON;
}

/* The read ended: settle its deliveries and close its channel. */
static void import_close_read(struct import_run *ir)
{
    amqp_connection_state_t st = ir->r->conn.st;

    if (ir->unacked)
        amqp_basic_ack(st, ir->rch, ir->tag, 1);
    amqp_channel_close(st, ir->rch, AMQP_REPLY_SUCCESS);
}

/* The read failed (res < 0): a full disk reads again in a while; anything else is final. */
static int import_failed(struct import_run *ir)
{
    struct wrepl *r = ir->r;

    if (ir->res == -ENOSPC || ir->res == -EDQUOT) {
        /*
         * dir/import/ filled the disk: nothing local changed (the import
         * is a copy beside the log), so this is not a reason to stop. Drop
         * the copy, which frees its space, let go of the lease if we had
         * it, and read again after RETRY_MS, as after a lost broker; a
         * standby that exited instead restarted into the same full disk.
         */
        log_warn("wal-replica", "the log's disk is full: the copy read from the stream is "
                 "dropped and read again in a while", "stream=%s dir=%s fenced=%d",
                 r->rc->stream, r->dir, ir->fenced);
        imp_remove(r);
        broker_conn_close(&r->conn, 0);
        return -EAGAIN;
    }
    log_error("wal-replica", "cannot read the stream back", "stream=%s error=\"%s\"",
              r->rc->stream, ir->res == -1 ? ir->why : wlog_strerror(ir->res));
    imp_remove(r);
    return ir->res == -1 ? WLOG_EREPLICA : ir->res;
}

/*
 * Resume: the read kept only what the local log lacks (r->delta). 0 when
 * the stream continues the local log (wrepl_resume.c's rules; the delta is
 * appended after recovery); else -EAGAIN to read the whole stream at once.
 */
static int import_resume(struct import_run *ir)
{
    struct wrepl *r = ir->r;
    const struct replrec_import *im = &ir->im;
    double secs = (double)(clock_mono_ms() - ir->t_lease) / 1000.0;
    /* A message of the stopped term was read: this is still its stream (wrepl_resume.c). */
    uint64_t L = r->resume_next - 1; /* the local log's last durable record */
    int confirmed = L < r->resume_note_next || L <= r->term_max;

    if (r->resume_seen && !r->resume_bad && !im->ambiguous && confirmed &&
        (im->next_lsn == 0 ? L + 1 == r->resume_note_next
                           : im->wal_id == r->resume_wal_id && im->first_lsn <= L + 1 &&
                                 im->next_lsn >= L + 1)) {
        imp_remove(r);
        r->need_horizon = r->resume_hole_to != 0;
        pthread_mutex_lock(&r->mu);
        r->st.resumed = 1;
        pthread_mutex_unlock(&r->mu);
        if (r->resume_hole_to)
            log_warn("wal-replica", "the stream lacks records of this log that the local log "
                     "holds (confirmed by the broker, yet not in the stream: a broker "
                     "before 4.0.x can do so across a stream leader change); resuming on "
                     "the local log, and a stream checkpoint starts at once to make the "
                     "stream whole again",
                     "stream=%s first_missing_lsn=%llu missing_records=%llu local_next_lsn=%llu",
                     r->rc->stream, (unsigned long long)r->resume_hole_from,
                     (unsigned long long)r->resume_hole_records,
                     (unsigned long long)r->resume_next);
        log_info("wal-replica", "the stream continues the local log: resuming on it",
                 "stream=%s read_from=%lld local_next_lsn=%llu new_records=%llu messages=%llu "
                 "seconds_after_lease=%.3f", r->rc->stream, (long long)r->tail_from,
                 (unsigned long long)r->resume_next, (unsigned long long)r->delta_count,
                 (unsigned long long)im->messages, secs);
        return 0;
    }
    resume_off(r, confirmed ? "the stream read from the note does not continue the local log"
                            : "the local log has records the stream never confirmed");
    r->retry_now = 1;
    broker_conn_close(&r->conn, 0);
    return -EAGAIN;
}

/* A read from a horizon was not whole: drop it and read again at once (how: the caller). */
static int read_again(struct import_run *ir)
{
    ir->r->retry_now = 1;
    imp_remove(ir->r);
    broker_conn_close(&ir->r->conn, 0);
    return -EAGAIN;
}

/*
 * Install: the stream's records, if whole, are swapped in for the local
 * log's; none at all leaves the local log the log; a read from a horizon
 * that was not whole reads again from the start. 0, -EAGAIN, or a code.
 */
static int import_swap_in(struct import_run *ir, int dirfd)
{
    struct wrepl *r = ir->r;
    const struct replrec_import *im = &ir->im;
    double secs = (double)(clock_mono_ms() - ir->t_lease) / 1000.0;
    int e;

    if (im->next_lsn == 0 && ir->refused_uncovered) {
        /*
         * Only records of other broker users, which the local log does not
         * hold: an older bridge's (no user-id: the README's upgrade order
         * puts the owner, whose own log holds them, first), or forged
         * ones. Starting from the local log could lose a real log.
         */
        log_error("wal-replica", "the stream holds only records of other broker users, which "
                  "the local log does not hold: not starting from the local log. Written by an "
                  "older bridge: start the old owner on the new version first (README, "
                  "\"Upgrade\"); forged: delete the stream",
                  "stream=%s refused_batches=%llu", r->rc->stream,
                  (unsigned long long)ir->refused_uncovered);
        imp_remove(r);
        return WLOG_EREPLICA;
    }
    if (im->next_lsn == 0) {
        imp_remove(r);
        log_info("wal-replica", "the stream holds no records: the local log is the log",
                 "stream=%s messages=%llu ms=%llu", r->rc->stream,
                 (unsigned long long)im->messages,
                 (unsigned long long)(clock_mono_ms() - ir->t_lease));
        r->need_horizon = -1; /* decided once the local log is open */
        return 0;
    }
    if (!replrec_import_complete(im) && ir->hint_from) {
        log_warn("wal-replica", "the stream read from its newest horizon's time is not whole "
                 "(clocks apart by more than the margin?); reading it from the start",
                 "stream=%s first_lsn=%llu next_lsn=%llu margin_ms=%d", r->rc->stream,
                 (unsigned long long)im->first_lsn, (unsigned long long)im->next_lsn,
                 HINT_MARGIN_MS);
        r->no_hint = 1;
        return read_again(ir);
    }
    if (!replrec_import_complete(im) && r->tail_from >= 0) {
        /* Read from a horizon's batch, the run was not whole after all: read everything. */
        log_warn("wal-replica", "the stream read from the newest horizon is not whole; reading "
                 "it from the start", "stream=%s first_lsn=%llu next_lsn=%llu", r->rc->stream,
                 (unsigned long long)im->first_lsn, (unsigned long long)im->next_lsn);
        r->tail_from = -1;
        return read_again(ir);
    }
    if (!replrec_import_complete(im)) {
        log_error("wal-replica",
                  "the stream no longer holds the whole log: its first records start at an LSN "
                  "no completed stream checkpoint covers (retention cut too early, or the "
                  "stream was started for a log that already had records); messages may be "
                  "lost. The local log is left as it is; to run from it, remove wal.replicate, "
                  "or delete the stream to start replicating afresh",
                  "stream=%s first_lsn=%llu next_lsn=%llu gaps=%llu", r->rc->stream,
                  (unsigned long long)im->first_lsn, (unsigned long long)im->next_lsn,
                  (unsigned long long)im->gaps);
        imp_remove(r);
        return WLOG_EREPLICA;
    }
    e = imp_install(r, dirfd);
    imp_remove(r);
    if (e < 0) {
        log_error("wal-replica", "cannot install the log read back from the stream",
                  "dir=%s error=\"%s\"", r->dir, wlog_strerror(e));
        return e;
    }
    log_info("wal-replica", "local log rebuilt from the stream",
             "stream=%s wal_id=%016llx first_lsn=%llu next_lsn=%llu records=%llu bytes=%llu "
             "messages=%llu strays=%llu refused=%llu horizons=%llu read_from=%lld from_ms=%llu "
             "seconds_after_lease=%.3f",
             r->rc->stream, (unsigned long long)im->wal_id, (unsigned long long)im->first_lsn,
             (unsigned long long)im->next_lsn, (unsigned long long)im->records,
             (unsigned long long)im->bytes, (unsigned long long)im->messages,
             (unsigned long long)im->strays, (unsigned long long)r->st.refused,
             (unsigned long long)im->horizons,
             (long long)r->tail_from, (unsigned long long)ir->hint_from, secs);
    return 0;
}

/* Nothing local changed: let go of the lease and try again (a stream electing a leader). */
static int import_let_go(struct import_run *ir)
{
    struct wrepl *r = ir->r;

    if (ir->again) {
        log_info("wal-replica", "standby: connecting again", "stream=%s reason=\"%s\"",
                 r->rc->stream, ir->why);
        r->retry_now = 1;
    } else {
        log_warn("wal-replica", ir->fenced ? "cannot read the stream back; retrying"
                                           : "lost the broker while standing by; reconnecting",
                 "stream=%s error=\"%s\"", r->rc->stream, ir->why);
        /*
         * The broker was there and the stream refused: while a lost node's
         * stream gets a new writer, 3.10 closes the connection (541) and
         * 4.3 refuses a consumer on a node whose replica is restarting (406
         * "does not have a running replica on the local node"). That takes
         * from 15 ms to 5.4 s (4.3.6: when the stream coordinator's leader
         * was on the lost node, it retries the stream's members after 5 s),
         * so connect again after 300 ms, doubling up to RETRY_MS: not 2 s
         * (3.10, 10,000 held: ready 2.6 s -> 0.6 s after the kill).
         */
        r->retry_soon = 1;
    }
    imp_remove(r);
    broker_conn_close(&r->conn, 0);
    return -EAGAIN;
}

/*
 * Standing by and taking over, on one connection. The stream is read from
 * the start (or from where an earlier pass found a horizon) into
 * dir/import/ while another bridge holds the lease: a hot standby. Once
 * the lease token comes, a FENCE with this term's token goes out, the read
 * goes on up to it, and the imported log replaces the local one. 0;
 * -EAGAIN (nothing local changed: connect again); or a negative code
 * (logged).
 */
int wrepl_import(struct wrepl *r, int dirfd)
{
    struct import_run ir;
    int e;

    if ((e = import_open(&ir, r)) == STEP_ON)
        e = import_read(&ir);
    free(ir.index.v);
    if (e == STEP_LOST)
        return import_let_go(&ir);
    if (e < 0)
        return e; /* cancelled, or not resuming after all: import_read cleaned up */
    import_close_read(&ir);
    if (ir.res < 0)
        return import_failed(&ir);
    if (r->resume)
        return import_resume(&ir);
    return import_swap_in(&ir, dirfd);
}
