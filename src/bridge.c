/*
 * bridge.c -- the daemon: the engine wired to RabbitMQ on one libev loop.
 *
 * Two AMQP connections, one event loop, no threads:
 *
 *   consumer   channel 1, one consumer per route on its ingress queue,
 *              manual acks, bounded prefetch. Each delivery is assembled
 *              from its frames, its x-delay parsed, and appended to the WAL
 *              (eng_add). Nothing is acked yet.
 *   publisher  channel N+1 for route N, in confirm mode. A channel error
 *              (404 on a missing target exchange) closes only that route's
 *              channel; the others keep publishing.
 *
 * Once per loop turn, before the loop sleeps (ev_prepare, like Redis's
 * beforeSleep), on_prepare() does the work that batches well:
 *
 *   1. eng_commit(): one write + fdatasync for every message appended and
 *      every DONE queued since the last turn (group commit);
 *   2. basic.ack(multiple) up to the last delivery now durable;
 *   3. eng_advance(now): due messages move to their route's backlog;
 *   4. publish from the backlogs, at most max_inflight unconfirmed per route;
 *   5. arm one timer for the earliest of: next wheel event, channel retry,
 *      reconnect, or one second (heartbeats, clock steps).
 *
 * A message is marked DONE only when the broker confirmed its publish. A
 * nack, a closed channel or a lost connection puts every unconfirmed message
 * back at the head of its route's backlog, in due order, and it is
 * published again once the channel is back: at least once, never lost.
 *
 * A failed WAL write, fsync or read is fatal: the bridge stops without
 * acking anything more, and recovery starts from what is on disk.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ev.h>

#include "delay-bridge/amqp_conn.h"
#include "delay-bridge/bridge.h"
#include "delay-bridge/engine.h"
#include "delay-bridge/log.h"
#include "delay-bridge/xalloc.h"
#include "delay-bridge/xdelay.h"

#define CONSUMER_CHANNEL 1
#define FRAMES_PER_TURN 4096  /* frames read per wakeup before yielding */
#define MAINTAIN_BUDGET (8u << 20)
#define MAX_SLEEP_MS 1000

/* A FIFO of handles: a route's messages that are due and not yet published. */
struct hq {
    pool_handle *v;
    size_t head, n, cap;
};

struct inflight {
    uint64_t tag;
    pool_handle h;
    uint8_t state; /* 0 waiting, 1 acked, 2 nacked */
};

struct route {
    const struct config_route *cfg;
    amqp_channel_t ch;
    int ch_open;
    uint64_t next_tag;
    struct inflight *fl; /* ring in tag order */
    size_t fl_head, fl_n, fl_cap;
    struct hq backlog;
    uint64_t retry_at;   /* reopen the channel at this time (ms), 0 = none */
    uint32_t backoff_ms;
    struct log_ratelimit rl_pub, rl_delay;
    uint64_t ingested, published, confirmed, nacked, invalid_delay, dead_lettered;
};

/* A delivery being assembled from method, header and body frames. */
struct delivery {
    int active;
    int route;
    uint64_t tag;
    char exchange[256], rk[256];
    uint8_t exchange_len, rk_len;
    amqp_basic_properties_t *props; /* in the connection's decoding pool */
    uint64_t body_size, got;
    int too_big;
    uint8_t *body;
    size_t body_cap;
};

struct side {
    struct amqp_conn c;
    ev_io io;
    int up;
    int uri_next;
    uint64_t reconnect_at;
    uint32_t backoff_ms;
    struct log_ratelimit rl;
};

struct bridge {
    struct ev_loop *loop;
    const struct config *cfg;
    struct engine *eng;
    struct route *routes;
    int nroutes;
    struct side cons, pub;
    struct delivery dv;
    uint64_t last_tag, acked_tag; /* consumer delivery tags, this connection */
    uint8_t *props_buf;           /* encoded properties of the current delivery */
    size_t props_cap;
    amqp_pool_t pub_pool;         /* per publish: decoded and rewritten properties */
    char id_prefix[24];
    ev_prepare prepare;
    ev_timer wake;
    ev_signal sigterm, sigint;
    int ready_logged;
    int stopping, stopped;
    uint64_t stop_deadline;
    int exit_code;
    uint64_t last_maintain;
};

/* ---- small helpers ------------------------------------------------------ */

static void hq_grow(struct hq *q)
{
    size_t ncap = q->cap ? q->cap * 2 : 256, i;
    pool_handle *v = xrealloc(NULL, ncap * sizeof(*v));

    for (i = 0; i < q->n; i++)
        v[i] = q->v[(q->head + i) % q->cap];
    free(q->v);
    q->v = v;
    q->cap = ncap;
    q->head = 0;
}

static void hq_push_back(struct hq *q, pool_handle h)
{
    if (q->n == q->cap)
        hq_grow(q);
    q->v[(q->head + q->n++) % q->cap] = h;
}

static void hq_push_front(struct hq *q, pool_handle h)
{
    if (q->n == q->cap)
        hq_grow(q);
    q->head = (q->head + q->cap - 1) % q->cap;
    q->v[q->head] = h;
    q->n++;
}

static pool_handle hq_pop_front(struct hq *q)
{
    pool_handle h = q->v[q->head];

    q->head = (q->head + 1) % q->cap;
    q->n--;
    return h;
}

static struct inflight *fl_at(struct route *r, size_t i)
{
    return &r->fl[(r->fl_head + i) % r->fl_cap];
}

static void fl_push(struct route *r, uint64_t tag, pool_handle h)
{
    if (r->fl_n == r->fl_cap) {
        size_t ncap = r->fl_cap ? r->fl_cap * 2 : 64, i;
        struct inflight *v = xrealloc(NULL, ncap * sizeof(*v));
        for (i = 0; i < r->fl_n; i++)
            v[i] = *fl_at(r, i);
        free(r->fl);
        r->fl = v;
        r->fl_cap = ncap;
        r->fl_head = 0;
    }
    struct inflight *f = &r->fl[(r->fl_head + r->fl_n++) % r->fl_cap];
    f->tag = tag;
    f->h = h;
    f->state = 0;
}

static uint32_t backoff_next(uint32_t cur, uint32_t min, uint32_t max)
{
    uint64_t n = cur ? (uint64_t)cur * 2 : min;
    return (uint32_t)(n > max ? max : n);
}

/* Backoff with +-20% jitter, so that many bridges do not retry in step. */
static uint64_t jitter(uint32_t ms)
{
    uint32_t span = ms / 5;
    return span ? ms - span + (uint64_t)(random() % (2 * span + 1)) : ms;
}

static void fatal(struct bridge *b, const char *what, int err)
{
    log_error("bridge", "fatal error, stopping without acking more", "what=\"%s\" error=\"%s\"",
              what, wal_strerror(err));
    b->exit_code = EXIT_FATAL;
    /* Abrupt close: unacked deliveries go back to their queue. */
    amqp_conn_close(&b->cons.c, 0);
    amqp_conn_close(&b->pub.c, 0);
    b->cons.up = b->pub.up = 0;
    ev_break(b->loop, EVBREAK_ALL);
}

/* ---- publisher side ---------------------------------------------------- */

/* Everything unconfirmed on r goes back to the head of its backlog, in order. */
static void requeue_inflight(struct route *r)
{
    while (r->fl_n) {
        struct inflight *f = fl_at(r, r->fl_n - 1);
        hq_push_front(&r->backlog, f->h);
        r->fl_n--;
    }
    r->fl_head = 0;
}

static void route_channel_failed(struct bridge *b, struct route *r, const char *why)
{
    uint64_t now = log_now_ms(), n;

    r->ch_open = 0;
    requeue_inflight(r);
    r->backoff_ms =
        backoff_next(r->backoff_ms, b->cfg->publish_retry_min_ms, b->cfg->publish_retry_max_ms);
    r->retry_at = now + jitter(r->backoff_ms);
    if ((n = log_ratelimit(&r->rl_pub, now, 30000)))
        log_error("publish", "cannot publish to target, messages kept and retried",
                  "route=%s target=\"%s\" reason=\"%s\" retry_in_ms=%" PRIu64
                  " waiting=%zu events=%" PRIu64,
                  r->cfg->name, r->cfg->target_exchange, why, r->retry_at - now, r->backlog.n, n);
}

static void pub_down(struct bridge *b, const char *why)
{
    uint64_t now = log_now_ms();
    int i;

    if (!b->pub.up && !b->pub.c.st)
        return;
    log_warn("publish", "publisher connection lost", "reason=\"%s\"", why);
    ev_io_stop(b->loop, &b->pub.io);
    amqp_conn_close(&b->pub.c, 0);
    b->pub.up = 0;
    for (i = 0; i < b->nroutes; i++) {
        b->routes[i].ch_open = 0;
        b->routes[i].retry_at = 0;
        requeue_inflight(&b->routes[i]);
    }
    b->pub.backoff_ms =
        backoff_next(b->pub.backoff_ms, b->cfg->reconnect_min_ms, b->cfg->reconnect_max_ms);
    b->pub.reconnect_at = now + jitter(b->pub.backoff_ms);
}

/* Open route r's channel in confirm mode and check its exchanges exist. */
static int route_channel_open(struct bridge *b, struct route *r)
{
    amqp_connection_state_t st = b->pub.c.st;
    const struct config_route *rc = r->cfg;
    amqp_rpc_reply_t rep;
    char err[600];

    amqp_channel_open(st, r->ch);
    if (amqp_conn_check(&b->pub.c, "channel.open", err, sizeof(err)) < 0)
        goto fail;
    amqp_confirm_select(st, r->ch);
    if (amqp_conn_check(&b->pub.c, "confirm.select", err, sizeof(err)) < 0)
        goto fail;
    /* Passive declare: learn that the target is missing without bouncing messages. */
    const char *ex[2] = {rc->target_exchange,
                         rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? rc->dead_letter_exchange
                                                                        : ""};
    for (int i = 0; i < 2; i++) {
        if (!ex[i][0])
            continue;
        amqp_exchange_declare(st, r->ch, amqp_cstring_bytes(ex[i]),
                              amqp_cstring_bytes(rc->target_type), 1, 0, 0, 0, amqp_empty_table);
        if (amqp_conn_check(&b->pub.c, "exchange.declare passive", err, sizeof(err)) < 0)
            goto fail;
    }
    r->ch_open = 1;
    r->next_tag = 1;
    r->retry_at = 0;
    log_info("publish", "route channel open", "route=%s target=\"%s\" waiting=%zu", rc->name,
             rc->target_exchange, r->backlog.n);
    return 0;

fail:
    rep = amqp_get_rpc_reply(st);
    if (rep.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        rep.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_ok_t ok;
        amqp_send_method(st, r->ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    } else if (rep.reply_type != AMQP_RESPONSE_SERVER_EXCEPTION) {
        pub_down(b, err);
        return -1;
    } else {
        /* connection.close from the broker */
        amqp_connection_close_ok_t ok;
        amqp_send_method(st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        pub_down(b, err);
        return -1;
    }
    route_channel_failed(b, r, err);
    return -1;
}

static void on_pub_io(struct ev_loop *loop, ev_io *w, int revents);

static void pub_connect(struct bridge *b)
{
    const struct config *cfg = b->cfg;
    char err[600];
    int i;

    const char *uri = cfg->uris[b->pub.uri_next % cfg->nuris];
    b->pub.uri_next++;
    if (amqp_conn_open(&b->pub.c, uri, "delay-bridge publisher", cfg->heartbeat_s,
                       cfg->connect_timeout_ms, err, sizeof(err)) < 0) {
        uint64_t now = log_now_ms(), n;
        b->pub.backoff_ms =
            backoff_next(b->pub.backoff_ms, cfg->reconnect_min_ms, cfg->reconnect_max_ms);
        b->pub.reconnect_at = now + jitter(b->pub.backoff_ms);
        if ((n = log_ratelimit(&b->pub.rl, now, 30000)))
            log_warn("publish", "cannot connect", "error=\"%s\" retry_in_ms=%" PRIu64
                     " attempts=%" PRIu64, err, b->pub.reconnect_at - now, n);
        return;
    }
    b->pub.up = 1;
    b->pub.reconnect_at = 0;
    ev_io_init(&b->pub.io, on_pub_io, b->pub.c.fd, EV_READ);
    b->pub.io.data = b;
    ev_io_start(b->loop, &b->pub.io);
    log_info("publish", "connected", "broker=\"%s\"", b->pub.c.uri_masked);
    for (i = 0; i < b->nroutes && b->pub.up; i++)
        route_channel_open(b, &b->routes[i]);
    if (b->pub.up)
        b->pub.backoff_ms = 0;
}

/* A confirm (ok) or nack for tag on route r. */
static void on_confirm(struct bridge *b, struct route *r, uint64_t tag, int multiple, int ok)
{
    size_t i;
    struct hq nacked = {0};

    for (i = 0; i < r->fl_n; i++) {
        struct inflight *f = fl_at(r, i);
        if (f->tag > tag)
            break;
        if (f->tag == tag || multiple)
            if (f->state == 0)
                f->state = ok ? 1 : 2;
    }
    while (r->fl_n && fl_at(r, 0)->state) {
        struct inflight *f = fl_at(r, 0);
        if (f->state == 1) {
            eng_done(b->eng, f->h);
            r->confirmed++;
            r->backoff_ms = 0;
        } else {
            r->nacked++;
            hq_push_back(&nacked, f->h);
        }
        r->fl_head = (r->fl_head + 1) % r->fl_cap;
        r->fl_n--;
    }
    if (nacked.n) {
        log_warn("publish", "broker nacked publishes, publishing again", "route=%s count=%zu",
                 r->cfg->name, nacked.n);
        while (nacked.n) {
            /* pop from the back to keep order when pushing to the front */
            pool_handle h = nacked.v[(nacked.head + nacked.n - 1) % nacked.cap];
            nacked.n--;
            hq_push_front(&r->backlog, h);
        }
        free(nacked.v);
    }
}

static struct route *route_of_channel(struct bridge *b, amqp_channel_t ch)
{
    return ch >= 2 && ch < 2 + b->nroutes ? &b->routes[ch - 2] : NULL;
}

static void pub_handle_frame(struct bridge *b, amqp_frame_t *f)
{
    struct route *r = route_of_channel(b, f->channel);
    char why[512];

    if (f->frame_type != AMQP_FRAME_METHOD)
        return;
    switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *m = f->payload.method.decoded;
        if (r)
            on_confirm(b, r, m->delivery_tag, m->multiple, 1);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *m = f->payload.method.decoded;
        if (r)
            on_confirm(b, r, m->delivery_tag, m->multiple, 0);
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD:
        amqp_conn_answer_close(&b->pub.c, f, why, sizeof(why));
        if (r)
            route_channel_failed(b, r, why);
        break;
    case AMQP_CONNECTION_CLOSE_METHOD:
        amqp_conn_answer_close(&b->pub.c, f, why, sizeof(why));
        pub_down(b, why);
        break;
    case AMQP_CONNECTION_BLOCKED_METHOD:
        log_warn("publish", "broker blocked the publisher (resource alarm)", NULL);
        break;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        log_info("publish", "broker unblocked the publisher", NULL);
        break;
    default:
        break;
    }
}

/* Read every frame the publisher connection has, without blocking. */
static void pub_drain(struct bridge *b)
{
    struct timeval zero = {0, 0};
    amqp_frame_t f;
    int i, r;

    for (i = 0; i < FRAMES_PER_TURN && b->pub.up; i++) {
        r = amqp_simple_wait_frame_noblock(b->pub.c.st, &f, &zero);
        if (r == AMQP_STATUS_TIMEOUT)
            break;
        if (r != AMQP_STATUS_OK) {
            pub_down(b, amqp_error_string2(r));
            return;
        }
        pub_handle_frame(b, &f);
    }
    if (b->pub.up)
        amqp_maybe_release_buffers(b->pub.c.st);
}

static void on_pub_io(struct ev_loop *loop, ev_io *w, int revents)
{
    pub_drain(w->data);
}

static void format_id(struct bridge *b, uint64_t msg_id, char *out, size_t len)
{
    snprintf(out, len, "%s-%" PRIu64, b->id_prefix, msg_id);
}

/* Publish one due message of route r. Returns 0, or -1 if the connection went down. */
static int publish_one(struct bridge *b, struct route *r, pool_handle h)
{
    const struct config_route *rc = r->cfg;
    struct walrec_add a;
    amqp_basic_properties_t *in, out;
    amqp_bytes_t body;
    char id[64];
    const char *exchange, *error = NULL;
    int res;

    res = eng_load(b->eng, h, &a);
    if (res < 0) {
        fatal(b, "read a held message back from the WAL", res);
        return -1;
    }
    recycle_amqp_pool(&b->pub_pool);
    res = amqp_decode_properties(AMQP_BASIC_CLASS, &b->pub_pool,
                                 (amqp_bytes_t){a.props_len, (void *)a.props}, (void **)&in);
    if (res < 0) {
        fatal(b, "decode stored properties", WAL_ECORRUPT);
        return -1;
    }
    exchange = rc->target_exchange;
    if (a.flags & WALREC_ADD_DEADLETTER) {
        exchange = rc->dead_letter_exchange;
        error = xdelay_strerror((enum xdelay_status)a.error);
    }
    format_id(b, a.msg_id, id, sizeof(id));
    xdelay_outgoing(in, &out, &b->pub_pool, a.due_ms > a.enqueue_ms ? a.due_ms - a.enqueue_ms : 0,
                    b->pub.c.user, id, error);
    body.bytes = (void *)a.body;
    body.len = a.body_len;
    res = amqp_basic_publish(b->pub.c.st, r->ch, amqp_cstring_bytes(exchange),
                             (amqp_bytes_t){a.routing_key_len, (void *)a.routing_key}, 0, 0, &out,
                             body);
    if (res != AMQP_STATUS_OK) {
        hq_push_front(&r->backlog, h);
        pub_down(b, amqp_error_string2(res));
        return -1;
    }
    fl_push(r, r->next_tag++, h);
    r->published++;
    return 0;
}

/* Publish what is due, up to max_inflight unconfirmed per route. */
static void pump(struct bridge *b)
{
    int progress = 1, rounds = 0, i;

    while (progress && b->pub.up && rounds++ < 64) {
        progress = 0;
        for (i = 0; i < b->nroutes && b->pub.up; i++) {
            struct route *r = &b->routes[i];
            int n = 0;
            while (b->pub.up && r->ch_open && r->backlog.n && r->fl_n < r->cfg->max_inflight &&
                   n < 1024) {
                if (publish_one(b, r, hq_pop_front(&r->backlog)) < 0)
                    return;
                n++;
            }
            progress |= n > 0;
        }
        /* Publishing may have pulled confirms into rabbitmq-c's buffer. */
        if (b->pub.up && (progress || amqp_conn_buffered(&b->pub.c)))
            pub_drain(b);
    }
}

/* ---- consumer side ----------------------------------------------------- */

static void on_cons_io(struct ev_loop *loop, ev_io *w, int revents);

static void cons_down(struct bridge *b, const char *why)
{
    uint64_t now = log_now_ms();

    if (!b->cons.c.st)
        return;
    log_warn("consume", "consumer connection lost", "reason=\"%s\"", why);
    ev_io_stop(b->loop, &b->cons.io);
    amqp_conn_close(&b->cons.c, 0);
    b->cons.up = 0;
    b->dv.active = 0;
    /* Unacked deliveries go back to the queue; tags restart on a new connection. */
    b->last_tag = b->acked_tag = 0;
    b->cons.backoff_ms =
        backoff_next(b->cons.backoff_ms, b->cfg->reconnect_min_ms, b->cfg->reconnect_max_ms);
    b->cons.reconnect_at = now + jitter(b->cons.backoff_ms);
}

static int declare_route(struct bridge *b, const struct config_route *rc, char *err, size_t len)
{
    amqp_connection_state_t st = b->cons.c.st;
    amqp_table_entry_t qarg;
    amqp_table_t qargs = amqp_empty_table;
    char tag[300];

    amqp_exchange_declare(st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->ingress_exchange),
                          amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
    if (amqp_conn_check(&b->cons.c, "declare ingress exchange", err, len) < 0)
        return -1;
    if (rc->queue_type == QUEUE_QUORUM) {
        qarg.key = amqp_cstring_bytes("x-queue-type");
        qarg.value.kind = AMQP_FIELD_KIND_UTF8;
        qarg.value.value.bytes = amqp_cstring_bytes("quorum");
        qargs.num_entries = 1;
        qargs.entries = &qarg;
    }
    amqp_queue_declare(st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->ingress_queue), 0, 1, 0, 0,
                       qargs);
    if (amqp_conn_check(&b->cons.c, "declare ingress queue", err, len) < 0)
        return -1;
    amqp_queue_bind(st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->ingress_queue),
                    amqp_cstring_bytes(rc->ingress_exchange), amqp_empty_bytes, amqp_empty_table);
    if (amqp_conn_check(&b->cons.c, "bind ingress queue", err, len) < 0)
        return -1;
    if (rc->declare_target && rc->target_exchange[0]) {
        amqp_exchange_declare(st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->target_exchange),
                              amqp_cstring_bytes(rc->target_type), 0, 1, 0, 0, amqp_empty_table);
        if (amqp_conn_check(&b->cons.c, "declare target exchange", err, len) < 0)
            return -1;
    }
    amqp_basic_qos(st, CONSUMER_CHANNEL, 0, rc->prefetch, 0);
    if (amqp_conn_check(&b->cons.c, "basic.qos", err, len) < 0)
        return -1;
    snprintf(tag, sizeof(tag), "delay-bridge:%s", rc->name);
    amqp_basic_consume(st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->ingress_queue),
                       amqp_cstring_bytes(tag), 0, 0, 0, amqp_empty_table);
    if (amqp_conn_check(&b->cons.c, "basic.consume", err, len) < 0)
        return -1;
    return 0;
}

static void cons_connect(struct bridge *b)
{
    const struct config *cfg = b->cfg;
    char err[1024];
    uint64_t now, n;
    int i;

    const char *uri = cfg->uris[b->cons.uri_next % cfg->nuris];
    b->cons.uri_next++;
    if (amqp_conn_open(&b->cons.c, uri, "delay-bridge consumer", cfg->heartbeat_s,
                       cfg->connect_timeout_ms, err, sizeof(err)) < 0)
        goto fail;
    amqp_channel_open(b->cons.c.st, CONSUMER_CHANNEL);
    if (amqp_conn_check(&b->cons.c, "channel.open", err, sizeof(err)) < 0)
        goto fail_close;
    for (i = 0; i < b->nroutes; i++) {
        char e2[600];
        if (declare_route(b, b->routes[i].cfg, e2, sizeof(e2)) < 0) {
            snprintf(err, sizeof(err), "route %s: %s", b->routes[i].cfg->name, e2);
            goto fail_close;
        }
    }
    b->cons.up = 1;
    b->cons.reconnect_at = 0;
    b->cons.backoff_ms = 0;
    b->last_tag = b->acked_tag = 0;
    ev_io_init(&b->cons.io, on_cons_io, b->cons.c.fd, EV_READ);
    b->cons.io.data = b;
    ev_io_start(b->loop, &b->cons.io);
    log_info("consume", "consuming", "broker=\"%s\" routes=%d", b->cons.c.uri_masked, b->nroutes);
    return;

fail_close:
    amqp_conn_close(&b->cons.c, 0);
fail:
    now = log_now_ms();
    b->cons.backoff_ms = backoff_next(b->cons.backoff_ms, cfg->reconnect_min_ms,
                                      cfg->reconnect_max_ms);
    b->cons.reconnect_at = now + jitter(b->cons.backoff_ms);
    if ((n = log_ratelimit(&b->cons.rl, now, 30000)))
        log_warn("consume", "cannot start consuming", "error=\"%s\" retry_in_ms=%" PRIu64
                 " attempts=%" PRIu64, err, b->cons.reconnect_at - now, n);
}

static int route_of_consumer_tag(struct bridge *b, amqp_bytes_t tag)
{
    static const char prefix[] = "delay-bridge:";
    size_t pl = sizeof(prefix) - 1;
    int i;

    if (tag.len <= pl || memcmp(tag.bytes, prefix, pl) != 0)
        return -1;
    for (i = 0; i < b->nroutes; i++) {
        const char *name = b->routes[i].cfg->name;
        if (strlen(name) == tag.len - pl && memcmp(name, (char *)tag.bytes + pl, tag.len - pl) == 0)
            return i;
    }
    return -1;
}

/* Ack everything up to and including the last durable delivery. */
static void ack_durable(struct bridge *b)
{
    if (!b->cons.up || b->last_tag == b->acked_tag)
        return;
    int r = amqp_basic_ack(b->cons.c.st, CONSUMER_CHANNEL, b->last_tag, 1);
    if (r != AMQP_STATUS_OK) {
        cons_down(b, amqp_error_string2(r));
        return;
    }
    b->acked_tag = b->last_tag;
}

/* A delivery is complete: log it in the WAL. Acked after the next commit. */
static void ingest(struct bridge *b)
{
    struct delivery *d = &b->dv;
    struct route *r = &b->routes[d->route];
    const struct config_route *rc = r->cfg;
    const amqp_table_t *headers = NULL;
    struct walrec_add a;
    uint64_t now = log_now_ms(), delay = 0, n;
    enum xdelay_status xs;
    int res;

    if (d->too_big) {
        /* Commit and ack what came before, then reject this one alone. */
        if (eng_dirty(b->eng) && (res = eng_commit(b->eng)) < 0) {
            fatal(b, "WAL commit", res);
            return;
        }
        ack_durable(b);
        log_error("consume", "message larger than wal.max_message_bytes rejected",
                  "route=%s bytes=%" PRIu64 " limit=%u action=\"basic.reject, requeue=false: "
                  "dead-lettered if the ingress queue has a dead-letter exchange\"",
                  rc->name, d->body_size, b->cfg->max_message_bytes);
        amqp_basic_reject(b->cons.c.st, CONSUMER_CHANNEL, d->tag, 0);
        b->last_tag = b->acked_tag = d->tag;
        return;
    }

    if (d->props && (d->props->_flags & AMQP_BASIC_HEADERS_FLAG))
        headers = &d->props->headers;
    xs = xdelay_parse(headers, rc->max_delay_ms, &delay);

    memset(&a, 0, sizeof(a));
    a.enqueue_ms = now;
    a.due_ms = now + delay;
    if (xs == XDELAY_EINVALID || xs == XDELAY_ETOOBIG) {
        r->invalid_delay++;
        if (rc->invalid_delay == INVALID_DELAY_DEAD_LETTER) {
            a.flags = WALREC_ADD_DEADLETTER;
            a.error = (uint16_t)xs;
            r->dead_lettered++;
        }
        if ((n = log_ratelimit(&r->rl_delay, now, 10000)))
            log_warn("consume", xdelay_strerror(xs),
                     "route=%s action=%s events=%" PRIu64, rc->name,
                     rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? "dead-letter" : "publish-now",
                     n);
    }

    /* Keep the properties exactly as received, in AMQP encoding. */
    for (;;) {
        amqp_bytes_t enc = {b->props_cap, b->props_buf};
        res = d->props ? amqp_encode_properties(AMQP_BASIC_CLASS, d->props, enc) : 0;
        if (res >= 0)
            break;
        b->props_cap = b->props_cap ? b->props_cap * 2 : 65536;
        if (b->props_cap > (64u << 20)) {
            fatal(b, "encode message properties", -EOVERFLOW);
            return;
        }
        b->props_buf = xrealloc(b->props_buf, b->props_cap);
    }
    a.route = rc->name;
    a.route_len = (uint8_t)strlen(rc->name);
    a.exchange = d->exchange;
    a.exchange_len = d->exchange_len;
    a.routing_key = d->rk;
    a.routing_key_len = d->rk_len;
    a.props = b->props_buf;
    a.props_len = (uint32_t)res;
    a.body = d->body;
    a.body_len = (uint32_t)d->body_size;
    res = eng_add(b->eng, (uint16_t)d->route, &a, NULL);
    if (res < 0) {
        fatal(b, "WAL append", res);
        return;
    }
    r->ingested++;
    b->last_tag = d->tag;
}

static void cons_handle_frame(struct bridge *b, amqp_frame_t *f)
{
    struct delivery *d = &b->dv;
    char why[512];

    if (f->frame_type == AMQP_FRAME_METHOD) {
        switch (f->payload.method.id) {
        case AMQP_BASIC_DELIVER_METHOD: {
            amqp_basic_deliver_t *m = f->payload.method.decoded;
            int route = route_of_consumer_tag(b, m->consumer_tag);
            if (route < 0) {
                cons_down(b, "delivery for an unknown consumer tag");
                return;
            }
            memset(d, 0, offsetof(struct delivery, body));
            d->active = 1;
            d->route = route;
            d->tag = m->delivery_tag;
            d->exchange_len = (uint8_t)(m->exchange.len > 255 ? 255 : m->exchange.len);
            memcpy(d->exchange, m->exchange.bytes, d->exchange_len);
            d->rk_len = (uint8_t)(m->routing_key.len > 255 ? 255 : m->routing_key.len);
            memcpy(d->rk, m->routing_key.bytes, d->rk_len);
            return;
        }
        case AMQP_BASIC_CANCEL_METHOD:
            cons_down(b, "broker cancelled the consumer (ingress queue deleted?)");
            return;
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
            amqp_conn_answer_close(&b->cons.c, f, why, sizeof(why));
            cons_down(b, why);
            return;
        default:
            return;
        }
    }
    if (!d->active)
        return;
    if (f->frame_type == AMQP_FRAME_HEADER) {
        d->props = f->payload.properties.decoded;
        d->body_size = f->payload.properties.body_size;
        d->got = 0;
        d->too_big = d->body_size > b->cfg->max_message_bytes;
        if (!d->too_big && d->body_size > d->body_cap) {
            d->body_cap = d->body_size;
            d->body = xrealloc(d->body, d->body_cap);
        }
    } else if (f->frame_type == AMQP_FRAME_BODY) {
        amqp_bytes_t part = f->payload.body_fragment;
        if (d->got + part.len > d->body_size) {
            cons_down(b, "body longer than announced");
            return;
        }
        if (!d->too_big)
            memcpy(d->body + d->got, part.bytes, part.len);
        d->got += part.len;
    } else {
        return;
    }
    if (d->got == d->body_size) {
        ingest(b);
        d->active = 0;
    }
}

static void cons_drain(struct bridge *b)
{
    struct timeval zero = {0, 0};
    amqp_frame_t f;
    int i, r;

    for (i = 0; i < FRAMES_PER_TURN && b->cons.up; i++) {
        r = amqp_simple_wait_frame_noblock(b->cons.c.st, &f, &zero);
        if (r == AMQP_STATUS_TIMEOUT)
            break;
        if (r != AMQP_STATUS_OK) {
            cons_down(b, amqp_error_string2(r));
            return;
        }
        cons_handle_frame(b, &f);
        if (b->exit_code)
            return;
        if (b->cons.up && !b->dv.active)
            amqp_maybe_release_buffers(b->cons.c.st);
    }
}

static void on_cons_io(struct ev_loop *loop, ev_io *w, int revents)
{
    struct bridge *b = w->data;

    if (!b->stopping)
        cons_drain(b);
}

/* ---- the loop turn ----------------------------------------------------- */

static void on_fire(void *arg, pool_handle h, uint16_t route)
{
    struct bridge *b = arg;

    hq_push_back(&b->routes[route].backlog, h);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static void shutdown_step(struct bridge *b, uint64_t now)
{
    size_t inflight = 0;
    int i, res;

    for (i = 0; i < b->nroutes; i++)
        inflight += b->routes[i].fl_n;
    if (inflight && b->pub.up && now < b->stop_deadline)
        return;
    if (inflight)
        log_warn("bridge", "shutdown timeout: unconfirmed publishes stay held and will be "
                 "published again on restart", "unconfirmed=%zu", inflight);
    if (eng_dirty(b->eng) && (res = eng_commit(b->eng)) < 0) {
        fatal(b, "WAL commit at shutdown", res);
        return;
    }
    amqp_conn_close(&b->pub.c, b->pub.up);
    b->pub.up = 0;
    b->stopped = 1;
    ev_break(b->loop, EVBREAK_ALL);
}

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct bridge *b = w->data;
    uint64_t now = log_now_ms(), next;
    int i, res;

    if (b->exit_code)
        return;
    if (!b->stopping && !b->cons.c.st && now >= b->cons.reconnect_at)
        cons_connect(b);
    if (!b->pub.c.st && now >= b->pub.reconnect_at)
        pub_connect(b);
    if (!b->ready_logged && b->cons.up && b->pub.up) {
        b->ready_logged = 1;
        log_info("bridge", "ready", "routes=%d", b->nroutes);
    }
    for (i = 0; i < b->nroutes && b->pub.up; i++) {
        struct route *r = &b->routes[i];
        if (!r->ch_open && r->retry_at && now >= r->retry_at)
            route_channel_open(b, r);
    }

    /* Group commit, then ack what it made durable. */
    if (b->cons.up && amqp_conn_buffered(&b->cons.c) && !b->stopping)
        cons_drain(b);
    if (b->exit_code)
        return;
    if (eng_dirty(b->eng)) {
        res = eng_commit(b->eng);
        if (res < 0) {
            fatal(b, "WAL commit", res);
            return;
        }
    }
    ack_durable(b);

    if (!b->stopping) {
        eng_advance(b->eng, now, on_fire, b);
        pump(b);
    } else if (b->pub.up && amqp_conn_buffered(&b->pub.c)) {
        pub_drain(b);
    }
    if (b->exit_code)
        return;

    if (now - b->last_maintain >= 100) {
        b->last_maintain = now;
        res = eng_maintain(b->eng, MAINTAIN_BUDGET);
        if (res < 0) {
            fatal(b, "WAL maintenance", res);
            return;
        }
    }
    if (b->stopping) {
        shutdown_step(b, now);
        if (b->exit_code || b->stopped)
            return;
    }

    /* Sleep until the next thing to do. */
    next = now + MAX_SLEEP_MS;
    if (!b->stopping)
        next = min_u64(next, eng_next_event(b->eng));
    if (!b->cons.c.st && !b->stopping)
        next = min_u64(next, b->cons.reconnect_at);
    if (!b->pub.c.st)
        next = min_u64(next, b->pub.reconnect_at);
    for (i = 0; i < b->nroutes; i++)
        if (b->pub.up && !b->routes[i].ch_open && b->routes[i].retry_at)
            next = min_u64(next, b->routes[i].retry_at);
    if ((b->cons.up && amqp_conn_buffered(&b->cons.c)) ||
        (b->pub.up && amqp_conn_buffered(&b->pub.c)) || eng_dirty(b->eng))
        next = now;
    if (b->stopping)
        next = min_u64(next, now + 10);
    ev_timer_stop(loop, &b->wake);
    ev_timer_set(&b->wake, next > now ? (double)(next - now) / 1000.0 : 0.0, 0.0);
    ev_timer_start(loop, &b->wake);
}

static void on_wake(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct bridge *b = w->data;
    struct timeval zero = {0, 0};
    amqp_frame_t f;

    /*
     * Give rabbitmq-c a chance to send heartbeats on quiet connections: a
     * zero-timeout wait does that. A frame it returns is handled as usual.
     */
    if (b->pub.up && !amqp_conn_buffered(&b->pub.c)) {
        int r = amqp_simple_wait_frame_noblock(b->pub.c.st, &f, &zero);
        if (r == AMQP_STATUS_OK)
            pub_handle_frame(b, &f);
        else if (r != AMQP_STATUS_TIMEOUT)
            pub_down(b, amqp_error_string2(r));
    }
    if (b->cons.up && !b->dv.active && !amqp_conn_buffered(&b->cons.c) && !b->stopping) {
        int r = amqp_simple_wait_frame_noblock(b->cons.c.st, &f, &zero);
        if (r == AMQP_STATUS_OK)
            cons_handle_frame(b, &f);
        else if (r != AMQP_STATUS_TIMEOUT)
            cons_down(b, amqp_error_string2(r));
    }
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct bridge *b = w->data;
    int res;

    if (b->stopping) {
        log_warn("bridge", "second signal: stopping now", NULL);
        b->stop_deadline = 0;
        return;
    }
    log_info("bridge", "stopping", "signal=%d timeout_ms=%u", w->signum,
             b->cfg->shutdown_timeout_ms);
    b->stopping = 1;
    b->stop_deadline = log_now_ms() + b->cfg->shutdown_timeout_ms;
    /* Make what was received durable, ack it, and stop consuming. */
    if (eng_dirty(b->eng) && (res = eng_commit(b->eng)) < 0) {
        fatal(b, "WAL commit", res);
        return;
    }
    ack_durable(b);
    if (b->cons.c.st) {
        ev_io_stop(loop, &b->cons.io);
        amqp_conn_close(&b->cons.c, b->cons.up);
        b->cons.up = 0;
    }
}

/* ---- life -------------------------------------------------------------- */

static int route_index(void *arg, const char *name, size_t len)
{
    struct bridge *b = arg;
    int i;

    for (i = 0; i < b->nroutes; i++)
        if (strlen(b->routes[i].cfg->name) == len && memcmp(b->routes[i].cfg->name, name, len) == 0)
            return i;
    return -1;
}

static void log_summary(struct bridge *b)
{
    struct eng_stats s;
    int i;

    eng_get_stats(b->eng, &s);
    for (i = 0; i < b->nroutes; i++) {
        struct route *r = &b->routes[i];
        log_info("bridge", "route totals",
                 "route=%s ingested=%" PRIu64 " published=%" PRIu64 " confirmed=%" PRIu64
                 " nacked=%" PRIu64 " invalid_delay=%" PRIu64 " dead_lettered=%" PRIu64,
                 r->cfg->name, r->ingested, r->published, r->confirmed, r->nacked,
                 r->invalid_delay, r->dead_lettered);
    }
    log_info("bridge", "stopped", "held=%" PRIu64 " wal_segments=%" PRIu64 " wal_bytes=%" PRIu64,
             s.held, s.wal.segments, s.wal.disk_bytes);
}

int bridge_run(const struct config *cfg)
{
    struct bridge b;
    struct eng_opts eo;
    int i, res;

    memset(&b, 0, sizeof(b));
    b.cfg = cfg;
    b.nroutes = cfg->nroutes;
    b.routes = calloc((size_t)b.nroutes, sizeof(*b.routes));
    if (!b.routes)
        return EXIT_FATAL;
    for (i = 0; i < b.nroutes; i++) {
        b.routes[i].cfg = &cfg->routes[i];
        b.routes[i].ch = (amqp_channel_t)(i + 2);
    }
    srandom((unsigned)log_now_ms());
    signal(SIGPIPE, SIG_IGN);

    memset(&eo, 0, sizeof(eo));
    eo.wal.dir = cfg->wal_dir;
    eo.wal.segment_bytes = cfg->segment_bytes;
    eo.wal.no_sync = !cfg->fsync;
    eo.route_index = route_index;
    eo.route_arg = &b;
    log_info("bridge", "starting", "version=%s wal_dir=\"%s\" routes=%d", DB_VERSION,
             cfg->wal_dir, b.nroutes);
    res = eng_open(&b.eng, &eo);
    if (res < 0) {
        log_error("bridge", "cannot open the WAL", "dir=\"%s\" error=\"%s\"", cfg->wal_dir,
                  wal_strerror(res));
        free(b.routes);
        return res == WAL_ECORRUPT || res == WAL_ELOCKED || res == WAL_EFORMAT ? EXIT_WAL
                                                                              : EXIT_FATAL;
    }
    snprintf(b.id_prefix, sizeof(b.id_prefix), "%016" PRIx64, eng_wal_id(b.eng));
    init_amqp_pool(&b.pub_pool, 65536);

    b.loop = ev_default_loop(EVFLAG_AUTO);
    ev_prepare_init(&b.prepare, on_prepare);
    b.prepare.data = &b;
    ev_prepare_start(b.loop, &b.prepare);
    ev_timer_init(&b.wake, on_wake, 0.0, 0.0);
    b.wake.data = &b;
    ev_signal_init(&b.sigterm, on_signal, SIGTERM);
    b.sigterm.data = &b;
    ev_signal_start(b.loop, &b.sigterm);
    ev_signal_init(&b.sigint, on_signal, SIGINT);
    b.sigint.data = &b;
    ev_signal_start(b.loop, &b.sigint);
    b.pub.io.data = &b;
    b.cons.io.data = &b;

    ev_run(b.loop, 0);

    if (!b.exit_code)
        log_summary(&b);
    amqp_conn_close(&b.cons.c, 0);
    amqp_conn_close(&b.pub.c, 0);
    eng_close(b.eng);
    empty_amqp_pool(&b.pub_pool);
    for (i = 0; i < b.nroutes; i++) {
        free(b.routes[i].fl);
        free(b.routes[i].backlog.v);
    }
    free(b.routes);
    free(b.dv.body);
    free(b.props_buf);
    ev_loop_destroy(b.loop);
    return b.exit_code;
}
