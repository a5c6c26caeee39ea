/*
 * publisher.c -- the egress side: one connection, a confirm channel per route.
 *
 * Route i publishes on channel i + 2 (channel 1 is the consumer's number on
 * its own connection; keeping them apart makes logs unambiguous). A channel
 * error closes only its route's channel: the other routes keep publishing
 * while that one retries with backoff. Every channel open re-checks the
 * route's exchanges with a passive declare, so a missing target is noticed
 * without a publish bouncing off it.
 *
 * Every publish is mandatory: a message no queue receives comes back as
 * basic.return (method, header and body frames) before its confirm. The
 * return carries no delivery tag, so the publisher finds the publish by the
 * x-delay-bridge-id header it set (log id and message id) and marks it
 * returned; the confirm that follows reports it with returned = 1.
 *
 * The in-flight window of a route is a ring of (tag, ref, settled) in tag
 * order. Confirms may settle any entry (one tag, or every tag up to one
 * with `multiple`), but they are reported in tag order, from the head of
 * the ring, so the owner sees a route's confirms in the order it published.
 * Delivery tags restart at 1 on every channel open.
 *
 * Publishing copies nothing of the body: the record read back from the log
 * is published as it is. The stored properties are decoded into a pool that
 * is recycled per publish, rewritten (amqp_msg_outgoing), and encoded by
 * rabbitmq-c onto the socket.
 */
#include "delay-bridge/publisher.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/amqp_conn.h"
#include "delay-bridge/amqp_msg.h"
#include "delay-bridge/backoff.h"
#include "delay-bridge/clock.h"
#include "delay-bridge/log.h"
#include "delay-bridge/xalloc.h"

#define FRAMES_PER_TURN 4096
#define HEARTBEAT_POLL_MS 500

enum settle { UNSETTLED = 0, ACKED = 1, NACKED = 2 };

struct unconfirmed {
    uint64_t tag;
    uint64_t msg_id; /* to match a basic.return by its x-delay-bridge-id */
    uint32_t ref;
    uint8_t settle;   /* enum settle */
    uint8_t returned; /* basic.return came for it */
};

struct route_pub {
    const struct config_route *cfg;
    amqp_channel_t ch;
    int open;
    uint64_t next_tag;
    struct unconfirmed *win; /* ring in tag order */
    size_t head, n, cap;
    struct backoff bo;       /* reopening the channel after an error */
    uint64_t published, nacked, retries, returned;
};

/* A basic.return being read: its properties name the publish; the body is skipped. */
struct returning {
    int active;
    struct route_pub *r;
    uint64_t body_size, got;
};

struct publisher {
    struct ev_loop *loop;
    const struct config *cfg;
    struct publisher_ops ops;
    struct amqp_conn conn;
    ev_io io;
    int up, blocked;
    int uri_next;
    struct backoff bo;
    uint64_t last_poll_ms;
    struct route_pub *routes;
    int nroutes;
    struct returning ret;
    amqp_pool_t pool; /* per publish: decoded and rewritten properties */
};

static void on_io(struct ev_loop *loop, ev_io *w, int revents);

/* ---- the in-flight window ---------------------------------------------------- */

static struct unconfirmed *win_at(struct route_pub *r, size_t i)
{
    return &r->win[(r->head + i) % r->cap];
}

static void win_push(struct route_pub *r, uint64_t tag, uint64_t msg_id, uint32_t ref)
{
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 64, i;
        struct unconfirmed *v = xmalloc(ncap * sizeof(*v));
        for (i = 0; i < r->n; i++)
            v[i] = *win_at(r, i);
        free(r->win);
        r->win = v;
        r->cap = ncap;
        r->head = 0;
    }
    *win_at(r, r->n++) = (struct unconfirmed){tag, msg_id, ref, UNSETTLED, 0};
}

/* The route's channel is gone: forget its window and tell the owner. */
static void route_lost(struct publisher *p, struct route_pub *r)
{
    r->open = 0;
    r->n = 0;
    r->head = 0;
    p->ops.route_lost(p->ops.arg, (int)(r - p->routes));
}

/* ---- connection and channels -------------------------------------------------- */

static void conn_down(struct publisher *p, const char *why)
{
    int i;

    if (!p->conn.st)
        return;
    log_warn("publish", "publisher connection lost", "reason=\"%s\"", why);
    ev_io_stop(p->loop, &p->io);
    amqp_conn_close(&p->conn, 0);
    p->up = 0;
    p->blocked = 0;
    p->ret.active = 0;
    for (i = 0; i < p->nroutes; i++) {
        backoff_reset(&p->routes[i].bo);
        route_lost(p, &p->routes[i]);
    }
    backoff_fail(&p->bo, clock_now_ms()); /* reconnect after a pause; "lost" was logged */
}

static void channel_failed(struct publisher *p, struct route_pub *r, const char *why)
{
    struct backoff_step st = backoff_fail(&r->bo, clock_now_ms());
    size_t was = r->n;

    route_lost(p, r);
    if (st.log_events)
        log_error("publish", "cannot publish to target, messages kept and retried",
                  "route=%s target=\"%s\" reason=\"%s\" retry_in_ms=%" PRIu64
                  " unconfirmed=%zu events=%" PRIu64,
                  r->cfg->name, r->cfg->target_exchange, why, st.retry_in_ms, was,
                  st.log_events);
}

/* Open route r's channel in confirm mode and check its exchanges exist. */
static int channel_open(struct publisher *p, struct route_pub *r)
{
    amqp_connection_state_t st = p->conn.st;
    const struct config_route *rc = r->cfg;
    amqp_rpc_reply_t rep;
    char err[600];

    amqp_channel_open(st, r->ch);
    if (amqp_conn_check(&p->conn, "channel.open", err, sizeof(err)) < 0)
        goto fail;
    amqp_confirm_select(st, r->ch);
    if (amqp_conn_check(&p->conn, "confirm.select", err, sizeof(err)) < 0)
        goto fail;
    /* Passive declare: learn that the target is missing without bouncing messages. */
    const char *ex[3] = {rc->target_exchange,
                         rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? rc->dead_letter_exchange
                                                                        : "",
                         rc->unroutable_exchange};
    for (int i = 0; i < 3; i++) {
        if (!ex[i][0])
            continue;
        amqp_exchange_declare(st, r->ch, amqp_cstring_bytes(ex[i]),
                              amqp_cstring_bytes(rc->target_type), 1, 0, 0, 0, amqp_empty_table);
        if (amqp_conn_check(&p->conn, "exchange.declare passive", err, sizeof(err)) < 0)
            goto fail;
    }
    r->open = 1;
    r->next_tag = 1;
    backoff_reset(&r->bo);
    log_info("publish", "route channel open", "route=%s target=\"%s\"", rc->name,
             rc->target_exchange);
    return 0;

fail:
    rep = amqp_get_rpc_reply(st);
    if (rep.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        rep.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_ok_t ok;
        amqp_send_method(st, r->ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        r->retries++;
        channel_failed(p, r, err);
        return -1;
    }
    if (rep.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) {
        /* connection.close from the broker */
        amqp_connection_close_ok_t ok;
        amqp_send_method(st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    }
    conn_down(p, err);
    return -1;
}

static void open_connection(struct publisher *p)
{
    const struct config *cfg = p->cfg;
    char err[600];
    int i;

    const char *uri = cfg->uris[p->uri_next % cfg->nuris];
    char name[128];

    p->uri_next++;
    snprintf(name, sizeof(name), "delay-bridge publisher%s%s", cfg->instance[0] ? " " : "",
             cfg->instance);
    struct amqp_conn_tls tls = {cfg->tls.ca_file, cfg->tls.cert_file, cfg->tls.key_file,
                                cfg->tls.verify_hostname};
    if (amqp_conn_open(&p->conn, uri, name, &tls, cfg->heartbeat_s,
                       cfg->connect_timeout_ms, err, sizeof(err)) < 0) {
        struct backoff_step st = backoff_fail(&p->bo, clock_now_ms());
        if (st.log_events)
            log_warn("publish", "cannot connect",
                     "error=\"%s\" retry_in_ms=%" PRIu64 " attempts=%" PRIu64, err,
                     st.retry_in_ms, st.log_events);
        return;
    }
    p->up = 1;
    ev_io_init(&p->io, on_io, p->conn.fd, EV_READ);
    p->io.data = p;
    ev_io_start(p->loop, &p->io);
    log_info("publish", "connected", "broker=\"%s\"", p->conn.uri_masked);
    for (i = 0; i < p->nroutes && p->up; i++)
        channel_open(p, &p->routes[i]);
    if (p->up)
        backoff_reset(&p->bo);
}

/* ---- confirms ------------------------------------------------------------------- */

static void on_confirm(struct publisher *p, struct route_pub *r, uint64_t tag, int multiple,
                       int ok)
{
    size_t i;

    for (i = 0; i < r->n; i++) {
        struct unconfirmed *u = win_at(r, i);
        if (u->tag > tag)
            break;
        if ((u->tag == tag || multiple) && u->settle == UNSETTLED)
            u->settle = ok ? ACKED : NACKED;
    }
    /* Report from the head, in tag order; the callback may not touch this window. */
    while (r->n && win_at(r, 0)->settle != UNSETTLED) {
        struct unconfirmed u = *win_at(r, 0);
        r->head = (r->head + 1) % r->cap;
        r->n--;
        if (u.settle == NACKED)
            r->nacked++;
        else
            backoff_reset(&r->bo);
        p->ops.confirmed(p->ops.arg, (int)(r - p->routes), u.ref, u.settle == ACKED, u.returned);
    }
}

static struct route_pub *route_of_channel(struct publisher *p, amqp_channel_t ch)
{
    return ch >= 2 && ch < 2 + p->nroutes ? &p->routes[ch - 2] : NULL;
}

/* The properties of a returned message: mark its publish by x-delay-bridge-id. */
static void mark_returned(struct route_pub *r, const amqp_basic_properties_t *props)
{
    const char *v;
    size_t len, i;
    char buf[64];

    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG) ||
        amqp_msg_header_str(&props->headers, "x-delay-bridge-id", &v, &len) != 1 ||
        len >= sizeof(buf))
        return;
    memcpy(buf, v, len);
    buf[len] = '\0';
    const char *dash = strrchr(buf, '-');
    if (!dash)
        return;
    uint64_t id = strtoull(dash + 1, NULL, 10);
    for (i = 0; i < r->n; i++)
        if (win_at(r, i)->msg_id == id && win_at(r, i)->settle == UNSETTLED) {
            win_at(r, i)->returned = 1;
            r->returned++;
            return;
        }
}

static void handle_frame(struct publisher *p, amqp_frame_t *f)
{
    struct route_pub *r = route_of_channel(p, f->channel);
    char why[512];

    if (p->ret.active && f->frame_type == AMQP_FRAME_HEADER) {
        p->ret.body_size = f->payload.properties.body_size;
        p->ret.got = 0;
        mark_returned(p->ret.r, f->payload.properties.decoded);
        p->ret.active = p->ret.body_size > 0;
        return;
    }
    if (p->ret.active && f->frame_type == AMQP_FRAME_BODY) {
        p->ret.got += f->payload.body_fragment.len;
        p->ret.active = p->ret.got < p->ret.body_size;
        return;
    }
    if (f->frame_type != AMQP_FRAME_METHOD)
        return;
    if (f->payload.method.id == AMQP_BASIC_RETURN_METHOD) {
        p->ret.active = r != NULL;
        p->ret.r = r;
        return;
    }
    switch (f->payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *m = f->payload.method.decoded;
        if (r)
            on_confirm(p, r, m->delivery_tag, m->multiple, 1);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *m = f->payload.method.decoded;
        if (r) {
            log_warn("publish", "broker nacked a publish, publishing again", "route=%s tag=%" PRIu64,
                     r->cfg->name, (uint64_t)m->delivery_tag);
            on_confirm(p, r, m->delivery_tag, m->multiple, 0);
        }
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD:
        amqp_conn_answer_close(&p->conn, f, why, sizeof(why));
        if (r) {
            r->retries++;
            channel_failed(p, r, why);
        }
        break;
    case AMQP_CONNECTION_CLOSE_METHOD:
        amqp_conn_answer_close(&p->conn, f, why, sizeof(why));
        conn_down(p, why);
        break;
    case AMQP_CONNECTION_BLOCKED_METHOD:
        p->blocked = 1;
        log_warn("publish", "broker blocked the publisher (resource alarm): publishing paused",
                 NULL);
        break;
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        p->blocked = 0;
        log_info("publish", "broker unblocked the publisher: publishing resumes", NULL);
        break;
    default:
        break;
    }
}

static void drain(struct publisher *p)
{
    struct timeval zero = {0, 0};
    amqp_frame_t f;
    int i, r;

    for (i = 0; i < FRAMES_PER_TURN && p->up; i++) {
        r = amqp_simple_wait_frame_noblock(p->conn.st, &f, &zero);
        if (r == AMQP_STATUS_TIMEOUT)
            break;
        if (r != AMQP_STATUS_OK) {
            conn_down(p, amqp_error_string2(r));
            return;
        }
        handle_frame(p, &f);
    }
    if (p->up)
        amqp_maybe_release_buffers(p->conn.st);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    drain(w->data);
}

/* ---- the owner's calls ------------------------------------------------------------ */

struct publisher *publisher_new(struct ev_loop *loop, const struct config *cfg,
                                const struct publisher_ops *ops)
{
    struct publisher *p = xcalloc(1, sizeof(*p));
    uint64_t seed = clock_mono_ns() | 1;
    int i;

    p->loop = loop;
    p->cfg = cfg;
    p->ops = *ops;
    p->conn.fd = -1;
    p->nroutes = cfg->nroutes;
    p->routes = xcalloc((size_t)cfg->nroutes, sizeof(*p->routes));
    for (i = 0; i < cfg->nroutes; i++) {
        p->routes[i].cfg = &cfg->routes[i];
        p->routes[i].ch = (amqp_channel_t)(i + 2);
        backoff_init(&p->routes[i].bo, cfg->publish_retry_min_ms, cfg->publish_retry_max_ms,
                     30000, seed + (uint64_t)i * 2);
    }
    backoff_init(&p->bo, cfg->reconnect_min_ms, cfg->reconnect_max_ms, 30000, seed ^ 0x5a5a);
    init_amqp_pool(&p->pool, 65536);
    return p;
}

void publisher_free(struct publisher *p)
{
    int i;

    if (!p)
        return;
    if (p->conn.st) {
        ev_io_stop(p->loop, &p->io);
        amqp_conn_close(&p->conn, 0);
    }
    for (i = 0; i < p->nroutes; i++)
        free(p->routes[i].win);
    free(p->routes);
    empty_amqp_pool(&p->pool);
    free(p);
}

void publisher_turn(struct publisher *p, uint64_t now)
{
    int i;

    if (!p->conn.st) {
        if (backoff_ready(&p->bo, now))
            open_connection(p);
        return;
    }
    for (i = 0; i < p->nroutes && p->up; i++) {
        struct route_pub *r = &p->routes[i];
        if (!r->open && backoff_ready(&r->bo, now))
            channel_open(p, r);
    }
    if (!p->up)
        return;
    if (amqp_conn_buffered(&p->conn) || now - p->last_poll_ms >= HEARTBEAT_POLL_MS) {
        p->last_poll_ms = now;
        drain(p);
    }
}

int publisher_ready(const struct publisher *p, int route)
{
    const struct route_pub *r = &p->routes[route];

    return p->up && !p->blocked && r->open && r->n < r->cfg->max_inflight;
}

int publisher_send(struct publisher *p, int route, uint32_t ref, const struct walrec_add *a,
                   const struct msgrec_out *o)
{
    struct route_pub *r = &p->routes[route];
    amqp_basic_properties_t *in, out;
    int res;

    recycle_amqp_pool(&p->pool);
    res = amqp_decode_properties(AMQP_BASIC_CLASS, &p->pool,
                                 (amqp_bytes_t){a->props_len, (void *)a->props}, (void **)&in);
    if (res < 0) {
        /* The record passed its CRC, so it was stored this way: publish it bare. */
        static amqp_basic_properties_t none;
        log_error("publish", "stored properties do not decode, publishing without them",
                  "route=%s id=%s", r->cfg->name, o->id);
        in = &none;
    }
    amqp_msg_outgoing(in, &out, &p->pool, o->delay_ms, p->conn.user, o->id, o->error);
    if (o->original_exchange) {
        char rk[256];
        snprintf(rk, sizeof(rk), "%.*s", (int)a->routing_key_len, a->routing_key);
        amqp_msg_set_header(&out, &p->pool, "x-delay-unroutable",
                            "no queue was bound for it at the target (basic.return)");
        amqp_msg_set_header(&out, &p->pool, "x-original-exchange", o->original_exchange);
        amqp_msg_set_header(&out, &p->pool, "x-original-routing-key", rk);
    }
    res = amqp_basic_publish(p->conn.st, r->ch, amqp_cstring_bytes(o->exchange),
                             (amqp_bytes_t){a->routing_key_len, (void *)a->routing_key}, 1, 0,
                             &out, (amqp_bytes_t){a->body_len, (void *)a->body});
    win_push(r, r->next_tag++, a->msg_id, ref);
    if (res != AMQP_STATUS_OK) {
        conn_down(p, amqp_error_string2(res));
        return -1;
    }
    r->published++;
    return 0;
}

void publisher_flush(struct publisher *p)
{
    if (p->up)
        drain(p);
}

size_t publisher_inflight(const struct publisher *p)
{
    size_t n = 0;
    int i;

    for (i = 0; i < p->nroutes; i++)
        n += p->routes[i].n;
    return n;
}

void publisher_close(struct publisher *p)
{
    if (!p->conn.st)
        return;
    ev_io_stop(p->loop, &p->io);
    amqp_conn_close(&p->conn, p->up);
    p->up = 0;
}

int publisher_up(const struct publisher *p)
{
    return p->up;
}

int publisher_blocked(const struct publisher *p)
{
    return p->up && p->blocked;
}

int publisher_busy(const struct publisher *p)
{
    return p->up && amqp_conn_buffered(&p->conn);
}

uint64_t publisher_next_wakeup(const struct publisher *p)
{
    uint64_t next = UINT64_MAX;
    int i;

    if (!p->conn.st)
        return p->bo.retry_at;
    for (i = 0; i < p->nroutes; i++)
        if (!p->routes[i].open && p->routes[i].bo.retry_at < next)
            next = p->routes[i].bo.retry_at;
    if (p->last_poll_ms + HEARTBEAT_POLL_MS < next)
        next = p->last_poll_ms + HEARTBEAT_POLL_MS;
    return next;
}

void publisher_route_stats(const struct publisher *p, int route, struct db_route_stats *s)
{
    const struct route_pub *r = &p->routes[route];

    s->published = r->published;
    s->nacked = r->nacked;
    s->publish_retries = r->retries;
    s->returned = r->returned;
    s->channel_open = p->up && r->open;
}
