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
 * ONE WRITER: THE LEASE
 *
 * Before it touches the stream, recover takes the lease: it consumes the
 * lease queue (a quorum queue with x-single-active-consumer, prefetch 1),
 * puts a token message in it when none is there, and waits until the
 * broker delivers a token to it. Only the single active consumer gets a
 * delivery, and it keeps the token unacked for as long as it owns the log.
 * When its connection goes (a crash, kill -9, a partition noticed by
 * heartbeats), the broker requeues the token and hands it, and the lease,
 * to the next consumer: a standby bridge waiting in recover. The lease
 * lives on the same connection as the stream publishing, so a bridge that
 * lost it can no longer write the stream either; its thread notices, fails
 * the log, and the bridge stops at its next commit or maintenance tick
 * (within 100 ms). A message already being published to its target in that
 * window may be published again by the new owner: at least once.
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
 */
#define _GNU_SOURCE
#include "delay-bridge/wrepl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "delay-bridge/clock.h"
#include "delay-bridge/log.h"
#include "delay-bridge/xalloc.h"
#include "amqp_conn.h"
#include "replrec.h"
#include "walckpt.h"
#include "walscan.h"

#define CH_PUB 1   /* stream and lease-token publishes, with confirms */
#define CH_LEASE 2 /* the lease consumer */
#define CH_READ 3  /* the import's stream consumer */
#define IMPORT_DIR "import"
#define IMPORT_PREFETCH 1000 /* messages; TCP flow control bounds the bytes */
#define IMPORT_ACK_EVERY 250
#define IMPORT_COMMIT_BYTES (64u << 20)
#define IMPORT_IDLE_MS 60000 /* the stream sends nothing for this long: give up */
#define RETRY_MS 2000

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct wrepl {
    struct wlog base;
    struct wlog *inner;
    struct wal_opts wo;
    const struct config *cfg;
    const struct config_replicate *rc;
    char dir[4096];

    /* The broker connection: recover's, then the replication thread's. */
    struct amqp_conn conn;
    uint64_t next_tag;  /* delivery tag of the last publish on CH_PUB */
    int have_lease;
    uint64_t token;     /* this term's */
    int efd;            /* wakes the thread */

    /* Loop thread: records being gathered into stream messages. */
    struct buf build;   /* [u32 body length][body] ... */
    size_t cur;         /* offset of the open message's length word, or SIZE_MAX */
    uint32_t cur_count;
    uint64_t cur_first;
    uint64_t wal_id;
    uint64_t tapped;    /* record bytes handed to the stream, ever */

    /* Loop thread: the commit in progress. */
    int busy, local_pending, stream_pending, local_err, stream_err;
    wlog_commit_fn *done;
    void *done_arg;

    /* Loop thread: stream checkpoints (horizons). */
    uint64_t horizon_target;   /* running: the LSN asked for (0: none) */
    uint64_t horizon_began_at; /* tapped when it began */
    uint64_t last_began_at;    /* tapped when the newest completed one began */
    uint64_t last_ended_at;    /* tapped when it completed: the next one counts from here */
    uint64_t last_horizon_ms;
    int need_horizon;
    uint64_t warned_ms;
    uint64_t horizon_unsent;   /* reached, its HORIZON message waits in build */
    uint64_t horizon_in_job;   /* ... in the job out on the thread */
    uint64_t horizon_copied;   /* bytes copied for it, for the log line */

    /* Shared with the thread, under mu. */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct buf job;
    int job_posted, job_done, job_err, quit;
    int failed;
    void (*notify)(void *arg);
    void *notify_arg;
    struct wlog_repl_stats st; /* state and cancel are the atomics below */
    _Atomic int state;
    _Atomic int cancel;

    /* The import (recover's thread). */
    struct wal *imp;
    int impfd;
    uint64_t imp_pending;
};

#define R(l) ((struct wrepl *)(l))

static uint64_t now_ms(void)
{
    return clock_mono_ns() / 1000000u;
}

static uint64_t rand64(void)
{
    uint64_t v = 0;

    while (v == 0)
        if (getrandom(&v, sizeof(v), 0) != sizeof(v))
            v = clock_mono_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

static void buf_reserve(struct buf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1u << 20;
    while (cap < b->len + n)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

static void set_state(struct wrepl *r, int s)
{
    atomic_store(&r->state, s);
}

/* ---- frames ------------------------------------------------------------------------ */

enum { EV_NONE, EV_DELIVER, EV_ACK, EV_NACK, EV_CANCEL };

struct event {
    int kind;
    amqp_channel_t ch;
    uint64_t tag;
    int multiple;
    amqp_message_t msg; /* EV_DELIVER: amqp_destroy_message() it */
};

/*
 * The next event within timeout_ms (0: only what has arrived); ev->kind is
 * EV_NONE when there is none. -1 with why set when the connection or a
 * channel is gone (a broker close is answered).
 */
static int next_event(struct wrepl *r, int timeout_ms, struct event *ev, char *why, size_t n)
{
    amqp_connection_state_t st = r->conn.st;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_frame_t f;

    ev->kind = EV_NONE;
    for (;;) {
        int s = amqp_simple_wait_frame_noblock(st, &f, &tv);

        if (s == AMQP_STATUS_TIMEOUT)
            return 0;
        if (s != AMQP_STATUS_OK) {
            snprintf(why, n, "connection lost: %s", amqp_error_string2(s));
            return -1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            ev->kind = EV_ACK;
            ev->ch = f.channel;
            ev->tag = a->delivery_tag;
            ev->multiple = a->multiple;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_NACK_METHOD: {
            amqp_basic_nack_t *a = f.payload.method.decoded;
            ev->kind = EV_NACK;
            ev->ch = f.channel;
            ev->tag = a->delivery_tag;
            ev->multiple = a->multiple;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_DELIVER_METHOD: {
            amqp_basic_deliver_t *d = f.payload.method.decoded;
            amqp_rpc_reply_t rr;
            char text[512];

            ev->ch = f.channel;
            ev->tag = d->delivery_tag;
            rr = amqp_read_message(st, f.channel, &ev->msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                snprintf(why, n, "reading a delivery: %s",
                         amqp_conn_reply_text(rr, text, sizeof(text)));
                return -1;
            }
            ev->kind = EV_DELIVER;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_CANCEL_METHOD:
            ev->kind = EV_CANCEL;
            ev->ch = f.channel;
            amqp_maybe_release_buffers(st);
            return 0;
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
            amqp_conn_answer_close(&r->conn, &f, why, n);
            return -1;
        default:
            amqp_maybe_release_buffers(st);
            continue;
        }
    }
}

static int publish(struct wrepl *r, const char *queue, const void *body, size_t n, char *why,
                   size_t wn)
{
    amqp_basic_properties_t p;
    int s;

    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.delivery_mode = 2;
    s = amqp_basic_publish(r->conn.st, CH_PUB, amqp_empty_bytes, amqp_cstring_bytes(queue), 0, 0,
                           &p, (amqp_bytes_t){n, (void *)body});
    if (s != AMQP_STATUS_OK) {
        snprintf(why, wn, "publish to %s: %s", queue, amqp_error_string2(s));
        return -1;
    }
    r->next_tag++;
    return 0;
}

/* Wait for the confirm of the last publish (recover only; a lease token may arrive meanwhile). */
static int wait_confirm(struct wrepl *r, char *why, size_t n)
{
    uint64_t tag = r->next_tag, deadline = now_ms() + r->rc->confirm_timeout_ms;
    struct event ev;

    while (now_ms() < deadline) {
        if (next_event(r, 200, &ev, why, n) < 0)
            return -1;
        if (ev.kind == EV_DELIVER) {
            if (ev.ch == CH_LEASE && !r->have_lease)
                r->have_lease = 1;
            amqp_destroy_message(&ev.msg);
        } else if (ev.kind == EV_ACK && ev.ch == CH_PUB && ev.tag >= tag) {
            return 0;
        } else if (ev.kind == EV_NACK && ev.ch == CH_PUB) {
            snprintf(why, n, "the broker refused (nack) a publish");
            return -1;
        }
    }
    snprintf(why, n, "no publisher confirm within %u ms", r->rc->confirm_timeout_ms);
    return -1;
}

/* ---- lease and stream: connect, declare, wait ------------------------------------- */

static void arg_str(amqp_table_entry_t *e, const char *key, const char *v)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(v);
}

static void arg_i64(amqp_table_entry_t *e, const char *key, int64_t v)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = v;
}

/*
 * Connect (trying every broker URI), declare the stream and the lease
 * queue, consume the lease, put a token in it if it has none. 0; -EAGAIN
 * when no broker could be reached (worth retrying); WLOG_EREPLICA when the
 * broker refused a declaration (it will again: the operator must look).
 */
static int connect_lease(struct wrepl *r)
{
    const struct config *cfg = r->cfg;
    struct amqp_conn_tls tls = {cfg->tls.ca_file, cfg->tls.cert_file, cfg->tls.key_file,
                                cfg->tls.verify_hostname};
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};
    amqp_connection_state_t st;
    amqp_queue_declare_ok_t *ok;
    char name[300], err[1024] = "";
    int i;

    snprintf(name, sizeof(name), "delay-bridge wal-replica%s%s", cfg->instance[0] ? " " : "",
             cfg->instance);
    for (i = 0; i < cfg->nuris; i++)
        if (amqp_conn_open(&r->conn, cfg->uris[i], name, &tls, cfg->heartbeat_s,
                           cfg->connect_timeout_ms, err, sizeof(err)) == 0)
            break;
    if (i == cfg->nuris) {
        log_warn("wal-replica", "cannot reach the broker; retrying", "error=\"%s\" retry_ms=%d",
                 err, RETRY_MS);
        return -EAGAIN;
    }
    st = r->conn.st;
    r->next_tag = 0;
    r->have_lease = 0;
    amqp_channel_open(st, CH_PUB);
    if (amqp_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    amqp_confirm_select(st, CH_PUB);
    if (amqp_conn_check(&r->conn, "confirm.select", err, sizeof(err)) < 0)
        goto transient;

    arg_str(&e[args.num_entries++], "x-queue-type", "stream");
    if (r->rc->max_bytes)
        arg_i64(&e[args.num_entries++], "x-max-length-bytes", (int64_t)r->rc->max_bytes);
    if (r->rc->max_age[0])
        arg_str(&e[args.num_entries++], "x-max-age", r->rc->max_age);
    arg_i64(&e[args.num_entries++], "x-stream-max-segment-size-bytes",
            (int64_t)r->rc->segment_bytes);
    amqp_queue_declare(st, CH_PUB, amqp_cstring_bytes(r->rc->stream), 0, 1, 0, 0, args);
    if (amqp_conn_check(&r->conn, "declare the stream", err, sizeof(err)) < 0)
        goto refused;

    args.num_entries = 0;
    amqp_channel_open(st, CH_LEASE);
    if (amqp_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    arg_str(&e[args.num_entries++], "x-queue-type", "quorum");
    e[args.num_entries].key = amqp_cstring_bytes("x-single-active-consumer");
    e[args.num_entries].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e[args.num_entries++].value.value.boolean = 1;
    ok = amqp_queue_declare(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue), 0, 1, 0, 0,
                            args);
    if (amqp_conn_check(&r->conn, "declare the lease queue", err, sizeof(err)) < 0)
        goto refused;
    uint32_t tokens = ok->message_count;
    amqp_basic_qos(st, CH_LEASE, 0, 1, 0);
    if (amqp_conn_check(&r->conn, "basic.qos", err, sizeof(err)) < 0)
        goto transient;
    amqp_basic_consume(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue),
                       amqp_cstring_bytes("wal-lease"), 0, 0, 0, amqp_empty_table);
    if (amqp_conn_check(&r->conn, "consume the lease queue", err, sizeof(err)) < 0)
        goto refused;
    if (tokens == 0) {
        static const char token[] = "delay-bridge WAL lease token";
        if (publish(r, r->rc->lease_queue, token, sizeof(token) - 1, err, sizeof(err)) < 0 ||
            wait_confirm(r, err, sizeof(err)) < 0)
            goto transient;
    }
    return 0;

transient:
    log_warn("wal-replica", "broker connection failed; retrying", "error=\"%s\"", err);
    amqp_conn_close(&r->conn, 0);
    return -EAGAIN;
refused:
    log_error("wal-replica", "the broker refused the replication stream or lease queue",
              "stream=%s lease_queue=%s error=\"%s\"", r->rc->stream, r->rc->lease_queue, err);
    amqp_conn_close(&r->conn, 0);
    return WLOG_EREPLICA;
}

/* 0 once the broker delivered us a lease token; -EAGAIN: connection lost; -ECANCELED. */
static int wait_lease(struct wrepl *r)
{
    uint64_t since = now_ms(), said = 0;
    struct event ev;
    char why[512];

    while (!r->have_lease) {
        if (atomic_load(&r->cancel))
            return -ECANCELED;
        if (next_event(r, 250, &ev, why, sizeof(why)) < 0) {
            log_warn("wal-replica", "lost the broker while standing by; reconnecting",
                     "error=\"%s\"", why);
            amqp_conn_close(&r->conn, 0);
            return -EAGAIN;
        }
        if (ev.kind == EV_DELIVER) {
            if (ev.ch == CH_LEASE)
                r->have_lease = 1;
            amqp_destroy_message(&ev.msg);
        } else if (ev.kind == EV_CANCEL) {
            log_warn("wal-replica", "the broker cancelled the lease consumer (queue deleted?); "
                     "reconnecting", "lease_queue=%s", r->rc->lease_queue);
            amqp_conn_close(&r->conn, 0);
            return -EAGAIN;
        }
        if (!r->have_lease && now_ms() - since >= 1000 && (said == 0 || now_ms() - said >= 60000)) {
            said = now_ms();
            log_info("wal-replica", "standing by: another bridge holds the lease of this log",
                     "stream=%s lease_queue=%s waited_s=%llu", r->rc->stream, r->rc->lease_queue,
                     (unsigned long long)((now_ms() - since) / 1000));
        }
    }
    return 0;
}

/* ---- the import ------------------------------------------------------------------ */

/* Delete the segments (and checkpoint) in dirfd. 0 or -errno. */
static int drop_segments(int dirfd)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    int r = walscan_list(dirfd, &nos, &n, NULL, 0);

    for (size_t i = 0; r == 0 && i < n; i++) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, nos[i]);
        if (unlinkat(dirfd, name, 0) < 0)
            r = -errno;
    }
    free(nos);
    if (r == 0 && unlinkat(dirfd, WALCKPT_NAME, 0) < 0 && errno != ENOENT)
        r = -errno;
    if (r == 0 && fsync(dirfd) < 0)
        r = -errno;
    return r;
}

static int imp_dirfd(struct wrepl *r, int create)
{
    char path[4200];

    if (r->impfd >= 0)
        return r->impfd;
    snprintf(path, sizeof(path), "%s/%s", r->dir, IMPORT_DIR);
    if (create && mkdir(path, 0700) < 0 && errno != EEXIST)
        return -errno;
    r->impfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return r->impfd >= 0 ? r->impfd : -errno;
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
        wal_close(r->imp);
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
    return wal_open(&r->imp, &o, NULL, NULL);
}

static int imp_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct wrepl *r = arg;
    struct walrec_piece pc = {payload, h->len};
    uint64_t lsn = 0;
    int e = wal_append(r->imp, h->type, &pc, 1, &lsn, NULL);

    if (e < 0)
        return e;
    if (lsn != h->lsn)
        return WLOG_ECORRUPT;
    r->imp_pending += WALREC_HDR_SIZE + h->len;
    if (r->imp_pending >= IMPORT_COMMIT_BYTES) {
        r->imp_pending = 0;
        return wal_commit(r->imp);
    }
    return 0;
}

/* Replace the segments of dir by the imported ones (their names do not collide: dir's go first). */
static int imp_install(struct wrepl *r, int dirfd)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    int e;

    if ((e = wal_commit(r->imp)) < 0)
        return e;
    wal_close(r->imp);
    r->imp = NULL;
    if ((e = drop_segments(dirfd)) < 0)
        return e;
    if ((e = walscan_list(r->impfd, &nos, &n, NULL, 0)) < 0)
        return e;
    for (size_t i = 0; e == 0 && i < n; i++) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, nos[i]);
        if (renameat(r->impfd, name, dirfd, name) < 0)
            e = -errno;
    }
    free(nos);
    if (e == 0 && fsync(dirfd) < 0)
        e = -errno;
    return e;
}

/* Remove dir/import (what a crashed or unneeded import left). */
static void imp_remove(struct wrepl *r)
{
    char path[4200];
    int fd = imp_dirfd(r, 0);

    if (r->imp) {
        wal_close(r->imp);
        r->imp = NULL;
    }
    if (fd >= 0) {
        drop_segments(fd);
        unlinkat(fd, "LOCK", 0);
        close(fd);
        r->impfd = -1;
    }
    snprintf(path, sizeof(path), "%s/%s", r->dir, IMPORT_DIR);
    rmdir(path);
}

/*
 * Holding the lease: fence, read the stream back to the fence, and make the
 * local log the stream's log. 0, or a negative code (logged).
 */
static int import(struct wrepl *r, int dirfd)
{
    amqp_connection_state_t st = r->conn.st;
    struct replrec_sink sink = {imp_reset, imp_record, r};
    struct replrec_import im;
    struct replrec_hdr fh = {REPLREC_FENCE, 0, 0, 0, 0};
    uint8_t fence[REPLREC_HDR_SIZE];
    amqp_table_entry_t e[1];
    amqp_table_t args = {1, e};
    uint64_t t0 = now_ms(), last = t0, unacked = 0, tag = 0;
    char why[1024] = "";
    int res = 0;

    r->token = rand64();
    fh.owner = r->token;
    replrec_hdr_encode(fence, &fh);
    if (publish(r, r->rc->stream, fence, sizeof(fence), why, sizeof(why)) < 0 ||
        wait_confirm(r, why, sizeof(why)) < 0)
        goto lost;

    amqp_channel_open(st, CH_READ);
    if (amqp_conn_check(&r->conn, "channel.open", why, sizeof(why)) < 0)
        goto lost;
    amqp_basic_qos(st, CH_READ, 0, IMPORT_PREFETCH, 0);
    if (amqp_conn_check(&r->conn, "basic.qos", why, sizeof(why)) < 0)
        goto lost;
    arg_str(&e[0], "x-stream-offset", "first");
    amqp_basic_consume(st, CH_READ, amqp_cstring_bytes(r->rc->stream),
                       amqp_cstring_bytes("wal-import"), 0, 0, 0, args);
    if (amqp_conn_check(&r->conn, "consume the stream", why, sizeof(why)) < 0)
        goto lost;

    replrec_import_init(&im, r->token);
    while (res == 0) {
        struct event ev;

        if (atomic_load(&r->cancel)) {
            imp_remove(r);
            return -ECANCELED;
        }
        if (next_event(r, 500, &ev, why, sizeof(why)) < 0)
            goto lost;
        if (ev.kind == EV_NONE && now_ms() - last > IMPORT_IDLE_MS) {
            snprintf(why, sizeof(why), "the stream sent nothing for %d s before our fence",
                     IMPORT_IDLE_MS / 1000);
            goto lost;
        }
        if (ev.kind != EV_DELIVER)
            continue;
        last = now_ms();
        if (ev.ch != CH_READ) {
            amqp_destroy_message(&ev.msg);
            continue;
        }
        res = replrec_import_msg(&im, ev.msg.body.bytes, ev.msg.body.len, &sink, why,
                                 sizeof(why));
        amqp_destroy_message(&ev.msg);
        tag = ev.tag;
        if (++unacked >= IMPORT_ACK_EVERY) {
            amqp_basic_ack(st, CH_READ, tag, 1);
            unacked = 0;
        }
        pthread_mutex_lock(&r->mu);
        r->st.imported_records = im.records;
        r->st.imported_bytes = im.bytes;
        pthread_mutex_unlock(&r->mu);
    }
    if (unacked)
        amqp_basic_ack(st, CH_READ, tag, 1);
    amqp_channel_close(st, CH_READ, AMQP_REPLY_SUCCESS);
    if (res < 0) {
        log_error("wal-replica", "cannot read the stream back", "stream=%s error=\"%s\"",
                  r->rc->stream, res == -1 ? why : wlog_strerror(res));
        imp_remove(r);
        return res == -1 ? WLOG_EREPLICA : res;
    }

    double secs = (double)(now_ms() - t0) / 1000.0;
    if (im.next_lsn == 0) {
        imp_remove(r);
        log_info("wal-replica", "the stream holds no records: the local log is the log",
                 "stream=%s messages=%llu ms=%llu", r->rc->stream,
                 (unsigned long long)im.messages, (unsigned long long)(now_ms() - t0));
        r->need_horizon = -1; /* decided once the local log is open */
        return 0;
    }
    if (!replrec_import_complete(&im)) {
        log_error("wal-replica",
                  "the stream no longer holds the whole log: its first records start at an LSN "
                  "no completed stream checkpoint covers (retention cut too early, or the "
                  "stream was started for a log that already had records); messages may be "
                  "lost. The local log is left as it is; to run from it, remove wal.replicate, "
                  "or delete the stream to start replicating afresh",
                  "stream=%s first_lsn=%llu next_lsn=%llu gaps=%llu", r->rc->stream,
                  (unsigned long long)im.first_lsn, (unsigned long long)im.next_lsn,
                  (unsigned long long)im.gaps);
        imp_remove(r);
        return WLOG_EREPLICA;
    }
    int ie = imp_install(r, dirfd);
    imp_remove(r);
    if (ie < 0) {
        log_error("wal-replica", "cannot install the log read back from the stream",
                  "dir=%s error=\"%s\"", r->dir, wlog_strerror(ie));
        return ie;
    }
    log_info("wal-replica", "local log rebuilt from the stream",
             "stream=%s wal_id=%016llx first_lsn=%llu next_lsn=%llu records=%llu bytes=%llu "
             "messages=%llu strays=%llu horizons=%llu seconds=%.3f",
             r->rc->stream, (unsigned long long)im.wal_id, (unsigned long long)im.first_lsn,
             (unsigned long long)im.next_lsn, (unsigned long long)im.records,
             (unsigned long long)im.bytes, (unsigned long long)im.messages,
             (unsigned long long)im.strays, (unsigned long long)im.horizons, secs);
    return 0;

lost:
    /* Nothing local changed: let go of the lease and try again (a stream electing a leader). */
    log_warn("wal-replica", "cannot read the stream back; retrying", "stream=%s error=\"%s\"",
             r->rc->stream, why);
    imp_remove(r);
    amqp_conn_close(&r->conn, 0);
    return -EAGAIN;
}

/* ---- writing: the tap, commits, the thread ---------------------------------------- */

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
    buf_reserve(&r->build, 4 + REPLREC_HDR_SIZE);
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
        buf_reserve(&r->build, 4 + REPLREC_HDR_SIZE);
        r->cur = r->build.len;
        r->build.len += 4 + REPLREC_HDR_SIZE;
        r->cur_count = 0;
        r->cur_first = h->lsn;
    }
    buf_reserve(&r->build, need);
    walrec_hdr_encode(r->build.p + r->build.len, &hh, REPLREC_SALT, &pc, 1);
    memcpy(r->build.p + r->build.len + WALREC_HDR_SIZE, payload, h->len);
    r->build.len += need;
    r->cur_count++;
    r->tapped += need;
}

static void thread_fail(struct wrepl *r, const char *why)
{
    void (*fn)(void *);
    void *arg;

    pthread_mutex_lock(&r->mu);
    if (!r->failed) {
        r->failed = WLOG_EREPLICA;
        log_error("wal-replica", "replication failed: the log stops (the lease goes with the "
                  "connection)", "stream=%s error=\"%s\"", r->rc->stream, why);
    }
    r->job_err = WLOG_EREPLICA;
    r->job_done = 1;
    fn = r->notify;
    arg = r->notify_arg;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    set_state(r, WLOG_REPL_FAILED);
    if (fn)
        fn(arg);
}

static void *repl_main(void *arg)
{
    struct wrepl *r = arg;
    struct buf job = {0};
    uint8_t *acked = NULL;
    size_t nmsg = 0, nacked = 0;
    uint64_t first_tag = 0, deadline = 0, t0 = 0, bytes = 0;
    int inflight = 0, dead = 0;
    char why[1024];

    for (;;) {
        int take = 0;

        pthread_mutex_lock(&r->mu);
        if (r->quit) {
            pthread_mutex_unlock(&r->mu);
            break;
        }
        if (!inflight && r->job_posted && !dead) {
            struct buf t = job;
            job = r->job;
            r->job = t;
            r->job.len = 0;
            r->job_posted = 0;
            take = 1;
        }
        pthread_mutex_unlock(&r->mu);

        if (take) {
            nmsg = 0;
            bytes = 0;
            first_tag = r->next_tag + 1;
            for (size_t off = 0; off < job.len;) {
                uint32_t n = walrec_get32(job.p + off);
                if (publish(r, r->rc->stream, job.p + off + 4, n, why, sizeof(why)) < 0)
                    goto fail;
                off += 4 + (size_t)n;
                nmsg++;
                bytes += n;
            }
            acked = xrealloc(acked, nmsg ? nmsg : 1);
            memset(acked, 0, nmsg ? nmsg : 1);
            nacked = 0;
            inflight = 1;
            t0 = clock_mono_ns();
            deadline = now_ms() + r->rc->confirm_timeout_ms;
        }
        if (!dead && !amqp_conn_buffered(&r->conn)) {
            struct pollfd p[2] = {{r->efd, POLLIN, 0}, {r->conn.fd, POLLIN, 0}};
            int timeout = 1000;
            if (inflight) {
                uint64_t now = now_ms();
                timeout = now >= deadline ? 0 : (int)(deadline - now < 1000 ? deadline - now : 1000);
                if (r->conn.tls && timeout > 20)
                    timeout = 20; /* TLS may hold a record rabbitmq-c has not seen yet */
            }
            poll(p, 2, timeout);
        } else if (dead) {
            struct pollfd p = {r->efd, POLLIN, 0};
            poll(&p, 1, 1000);
        }
        uint64_t v;
        if (read(r->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            continue;
        if (dead)
            continue;
        for (;;) {
            struct event ev;
            if (next_event(r, 0, &ev, why, sizeof(why)) < 0)
                goto fail;
            if (ev.kind == EV_NONE)
                break;
            if (ev.kind == EV_DELIVER) {
                amqp_destroy_message(&ev.msg);
            } else if (ev.kind == EV_NACK && ev.ch == CH_PUB) {
                snprintf(why, sizeof(why), "the stream refused (nack) a batch");
                goto fail;
            } else if (ev.kind == EV_CANCEL) {
                snprintf(why, sizeof(why), "the broker cancelled the lease consumer");
                goto fail;
            } else if (ev.kind == EV_ACK && ev.ch == CH_PUB && inflight) {
                uint64_t lo = ev.multiple ? first_tag : ev.tag;
                for (uint64_t t = lo; t <= ev.tag; t++)
                    if (t >= first_tag && t < first_tag + nmsg && !acked[t - first_tag]) {
                        acked[t - first_tag] = 1;
                        nacked++;
                    }
            }
        }
        if (inflight && nacked == nmsg) {
            void (*fn)(void *);
            void *narg;

            inflight = 0;
            job.len = 0;
            pthread_mutex_lock(&r->mu);
            r->job_done = 1;
            r->job_err = 0;
            r->st.published_messages += nmsg;
            r->st.confirmed_messages += nmsg;
            r->st.published_bytes += bytes;
            db_hist_observe(&r->st.confirm, (double)(clock_mono_ns() - t0) / 1e9);
            fn = r->notify;
            narg = r->notify_arg;
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            if (fn)
                fn(narg);
        } else if (inflight && now_ms() >= deadline) {
            snprintf(why, sizeof(why), "no confirm from the stream within %u ms",
                     r->rc->confirm_timeout_ms);
            goto fail;
        }
        continue;
fail:
        /* Drop the connection at once: the lease goes back to the broker. */
        amqp_conn_close(&r->conn, 0);
        dead = 1;
        inflight = 0;
        thread_fail(r, why);
    }
    if (!dead)
        amqp_conn_close(&r->conn, 1);
    free(job.p);
    free(acked);
    return NULL;
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

static int lock_dir(const char *dir, int *lockfd)
{
    char path[4200];
    int fd;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    snprintf(path, sizeof(path), "%s/LOCK", dir);
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno == EWOULDBLOCK ? WLOG_ELOCKED : -errno;
        log_error("wal", "the log directory is locked by another process (is a daemon already "
                  "running on it?)", "file=%s", path);
        close(fd);
        return e;
    }
    *lockfd = fd;
    return 0;
}

static int wr_recover(struct wlog *l, wlog_replay_fn *fn, void *arg, struct db_progress *progress)
{
    struct wrepl *r = R(l);
    uint64_t t0 = now_ms();
    int lockfd = -1, dirfd = -1, e;

    uint64_t t1 = t0;

    if ((e = lock_dir(r->dir, &lockfd)) < 0)
        return e;
    dirfd = open(r->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        e = -errno;
        goto out;
    }
    for (;;) {
        if (atomic_load(&r->cancel)) {
            e = -ECANCELED;
            goto out;
        }
        set_state(r, WLOG_REPL_CONNECTING);
        e = connect_lease(r);
        if (e == 0) {
            set_state(r, WLOG_REPL_STANDBY);
            e = wait_lease(r);
        }
        if (e == 0) {
            pthread_mutex_lock(&r->mu);
            r->st.standby_seconds = (double)(now_ms() - t0) / 1000.0;
            pthread_mutex_unlock(&r->mu);
            log_info("wal-replica", "lease granted: this bridge owns the log",
                     "stream=%s waited_ms=%llu", r->rc->stream,
                     (unsigned long long)(now_ms() - t0));
            set_state(r, WLOG_REPL_IMPORTING);
            t1 = now_ms();
            e = import(r, dirfd);
            if (e == 0)
                break;
        }
        if (e != -EAGAIN)
            goto out;
        for (int i = 0; i < RETRY_MS / 100 && !atomic_load(&r->cancel); i++)
            usleep(100000);
    }
    close(lockfd); /* wal_open takes it again */
    lockfd = -1;
    if ((e = wlog_recover(r->inner, fn, arg, progress)) < 0)
        goto out;
    struct wal *w = wal_file_log_wal(r->inner);
    r->wal_id = wal_id(w);
    if (r->need_horizon < 0)
        r->need_horizon = wal_next_lsn(w) > wal_first_lsn(w) || wal_first_lsn(w) > 1;
    if (r->need_horizon)
        log_info("wal-replica", "the local log has records the stream does not: a stream "
                 "checkpoint starts at once, and until it completes the stream alone does not "
                 "hold the whole log", "stream=%s next_lsn=%llu", r->rc->stream,
                 (unsigned long long)wal_next_lsn(w));
    wal_set_tap(w, tap, r);
    r->last_horizon_ms = now_ms();
    pthread_mutex_lock(&r->mu);
    r->st.import_seconds = (double)(now_ms() - t1) / 1000.0;
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
        amqp_conn_close(&r->conn, 0);
    if (lockfd >= 0)
        close(lockfd);
    if (dirfd >= 0)
        close(dirfd);
    return e;
}

static int wr_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
                     uint64_t *lsn, struct wlog_loc *loc)
{
    return wlog_append(R(l)->inner, type, pieces, npieces, lsn, loc);
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
        }
        r->horizon_in_job = 0;
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
    r->done = done;
    r->done_arg = arg;
    r->local_err = r->stream_err = 0;
    r->stream_pending = r->build.len > 0;
    if (r->stream_pending) {
        struct buf t;
        uint64_t one = 1;

        pthread_mutex_lock(&r->mu);
        r->horizon_in_job = r->horizon_unsent; /* confirmed with this job */
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

static int wr_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
                   const uint8_t **payload)
{
    return wlog_read(R(l)->inner, loc, b, h, payload);
}

static void wr_live(struct wlog *l, struct wlog_loc loc, int live)
{
    wlog_live(R(l)->inner, loc, live);
}

/* Reclaim, and drive stream checkpoints: a horizon asked for, reached, then announced. */
static int wr_reclaim(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    struct wrepl *r = R(l);
    struct wal *w = wal_file_log_wal(r->inner);
    uint64_t now = now_ms();
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

static uint64_t wr_id(const struct wlog *l)
{
    return wlog_id(R(l)->inner);
}

static uint64_t wr_next_lsn(const struct wlog *l)
{
    return wlog_next_lsn(R(l)->inner);
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
    } else if (r->conn.st) {
        amqp_conn_close(&r->conn, 1);
    }
    wlog_close(r->inner);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    close(r->efd);
    if (r->impfd >= 0)
        close(r->impfd);
    free(r->build.p);
    free(r->job.p);
    free(r);
}

static void wr_set_ckpt_fn(struct wlog *l, wlog_ckpt_fn *fn, void *arg)
{
    wlog_set_ckpt_fn(R(l)->inner, fn, arg);
}

static int wr_ckpt_begin(struct wlog *l)
{
    return wlog_ckpt_begin(R(l)->inner);
}

static int wr_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n)
{
    return wlog_ckpt_write(R(l)->inner, kind, p, n);
}

static int wr_ckpt_end(struct wlog *l)
{
    return wlog_ckpt_end(R(l)->inner);
}

static void wr_ckpt_abort(struct wlog *l)
{
    wlog_ckpt_abort(R(l)->inner);
}

static void wr_ckpt_poll(struct wlog *l)
{
    wlog_ckpt_poll(R(l)->inner);
}

static int wr_has(const struct wlog *l, struct wlog_loc loc)
{
    return wlog_has(R(l)->inner, loc);
}

static const struct wlog_ops wrepl_ops = {
    .name = "segment files replicated to a RabbitMQ stream",
    .recover = wr_recover,
    .append = wr_append,
    .pending = wr_pending,
    .commit = wr_commit,
    .read = wr_read,
    .live = wr_live,
    .reclaim = wr_reclaim,
    .stats = wr_stats,
    .id = wr_id,
    .next_lsn = wr_next_lsn,
    .close = wr_close,
    .poll = wr_poll,
    .set_notify = wr_set_notify,
    .flush = wr_flush,
    .set_ckpt_fn = wr_set_ckpt_fn,
    .ckpt_begin = wr_ckpt_begin,
    .ckpt_write = wr_ckpt_write,
    .ckpt_end = wr_ckpt_end,
    .ckpt_abort = wr_ckpt_abort,
    .ckpt_poll = wr_ckpt_poll,
    .has = wr_has,
    .repl_stats = wr_repl_stats,
    .cancel = wr_cancel,
};

struct wlog *wrepl_log(const struct wal_opts *wo, const struct config *cfg)
{
    struct wrepl *r = xcalloc(1, sizeof(*r));

    r->base.ops = &wrepl_ops;
    r->inner = wal_file_log(wo);
    r->wo = *wo;
    r->cfg = cfg;
    r->rc = &cfg->repl;
    snprintf(r->dir, sizeof(r->dir), "%s", wo->dir);
    r->wo.dir = r->dir;
    r->cur = SIZE_MAX;
    r->impfd = -1;
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return &r->base;
}
