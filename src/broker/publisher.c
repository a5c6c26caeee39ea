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
 * The stored properties are decoded into a pool that is recycled per
 * publish and rewritten (broker_msg_outgoing; on a retry route also
 * broker_retry_out: the attempt, the history, a park's reason). A retry
 * route's record carries the queue it goes back to as its routing key, and
 * its target is the default exchange, so it is published like any other.
 *
 * Gone exchanges (publisher_gone.c): a delayed_exchanges route's message
 * for an exchange that a publish found deleted or refused is reported
 * returned without a publish for a while, rather than close the channel
 * every other exchange's messages share.
 *
 * Writing (publisher_out.c): publishes are encoded into one output buffer
 * and written once per burst without blocking; after login rabbitmq-c
 * writes on the socket only for the polite close, and on TLS. The why is
 * at the top of that file.
 *
 * Time: every deadline, heartbeat and backoff here is in monotonic ms
 * (clock_mono_ms()), the clock publisher_turn() is given too, so a step of
 * the wall clock neither drops a connection nor stalls a reconnect.
 */
#include "publisher_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "delay-bridge/broker_msg.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "base/failpoint.h"
#include "broker_retry.h"

/* A delayed_exchanges route's hand-back names itself so (msgrec.h, unmarked). */
#define H_DRAINED "x-delay-bridge-drained"

static void on_io(struct ev_loop *loop, ev_io *w, int revents);
static void on_wio(struct ev_loop *loop, ev_io *w, int revents);

static const uint8_t heartbeat_frame[8] = {AMQP_FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, AMQP_FRAME_END};

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
    *win_at(r, r->n++) = (struct unconfirmed){tag, msg_id, ref, UNSETTLED, 0, 0, 0};
    r->unwritten++;
}

static double secs_between(uint64_t from_us, uint64_t to_us)
{
    return to_us > from_us ? (double)(to_us - from_us) / 1e6 : 0.0;
}

/*
 * Everything encoded so far is in the kernel since at_us (monotonic): the
 * entries pushed since the buffer was last empty are written, and their
 * write stage ends (stats.h). They are the last entries of each window:
 * entries leave from the head only once settled, and none is settled
 * before it is written but a gone exchange's, which has no stage.
 */
static void win_written(struct publisher *p, uint64_t at_us)
{
    for (int i = 0; i < p->nroutes; i++) {
        struct route_pub *r = &p->routes[i];
        size_t k = r->unwritten < r->n ? r->unwritten : r->n;
        for (size_t j = r->n - k; j < r->n; j++) {
            struct unconfirmed *u = win_at(r, j);
            if (u->handed_us && !u->written_us) {
                u->written_us = at_us;
                db_hist_observe(&r->st_write, secs_between(u->handed_us, at_us));
            }
        }
        r->unwritten = 0;
    }
}

/* After a write of the output buffer: if it emptied, the write stage of what it held ends. */
static void took_writes(struct publisher *p)
{
    if (p->out.emptied_us) {
        win_written(p, p->out.emptied_us);
        p->out.emptied_us = 0;
    }
}

/* The route's channel is gone: forget its window and tell the owner. */
static void route_lost(struct publisher *p, struct route_pub *r)
{
    r->open = 0;
    r->opening = 0;
    r->n = 0;
    r->head = 0;
    r->unwritten = 0;
    p->ops.route_lost(p->ops.arg, (int)(r - p->routes));
}

/* ---- connection and channels -------------------------------------------------- */

/* The connection is lost (why: for the log); what is unconfirmed is due again. */
static void conn_down(struct publisher *p, const char *why)
{
    int i;

    if (!p->conn.st)
        return;
    log_warn("publish", "publisher connection lost", "reason=%s", LOG_QUOTE_STR(why));
    ev_io_stop(p->loop, &p->io);
    ev_io_stop(p->loop, &p->wio);
    pub_out_reset(p);
    broker_conn_close(&p->conn, 0);
    p->up = 0;
    p->blocked = 0;
    p->hb_ms = 0;
    p->ret.active = 0;
    for (i = 0; i < p->nroutes; i++) {
        if (!p->routes[i].on)
            continue;
        backoff_reset(&p->routes[i].bo);
        route_lost(p, &p->routes[i]);
    }
    backoff_fail(&p->bo, clock_mono_ms()); /* reconnect after a pause; "lost" was logged */
}

/* A write or send in publisher_out.c failed: the connection is lost, for the reason it kept. */
static void out_lost(struct publisher *p)
{
    conn_down(p, p->out.why);
}

static void channel_failed(struct publisher *p, struct route_pub *r, const char *why)
{
    struct backoff_step st = backoff_fail(&r->bo, clock_mono_ms());
    size_t was = r->n;

    route_lost(p, r);
    if (st.log_events)
        log_error("publish", "cannot publish to target, messages kept and retried",
                  "route=%s target=\"%s\" reason=%s retry_in_ms=%" PRIu64
                  " unconfirmed=%zu events=%" PRIu64,
                  r->cfg->name, r->cfg->target_exchange, LOG_QUOTE_STR(why), st.retry_in_ms, was,
                  st.log_events);
}

/*
 * Channel set-up runs on the loop like everything else: channel.open,
 * confirm.select, then a passive exchange.declare of each exchange the
 * route publishes to (learn that the target is missing without bouncing
 * messages). Each request goes out when the answer to the previous one
 * arrives (handle_frame -> setup_next); a channel.close instead (404: no
 * such exchange) fails the route like any channel error. No answer within
 * connect_timeout_ms of the request being written drops the connection.
 *
 * The check is a courtesy, not a condition: RabbitMQ 4.2.6 and 4.3.0 ask
 * for *configure* permission on a passive exchange.declare (4.2.7 and
 * 4.3.1 relaxed it again), which a least-privilege user does not have. A
 * 403 to a passive declare therefore means "unknown": the route logs it
 * once, opens its channel again without the checks, and publishes; a
 * missing exchange then shows as a 404 channel error on the publish, and
 * an unrouted message as a mandatory basic.return, both handled as usual.
 */

/* The exchanges route r checks, i = 0..2 ("" when the route has none). */
static const char *setup_exchange(const struct route_pub *r, int i)
{
    const struct config_route *rc = r->cfg;

    if (i == 0)
        return rc->target_exchange;
    if (i == 1)
        return rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? rc->dead_letter_exchange : "";
    return rc->unroutable_exchange;
}

/* What route r waits for, for a log line. Returns buf. */
static const char *setup_what(const struct route_pub *r, char *buf, size_t len)
{
    if (r->await == AMQP_CHANNEL_OPEN_OK_METHOD)
        snprintf(buf, len, "channel.open");
    else if (r->await == AMQP_CONFIRM_SELECT_OK_METHOD)
        snprintf(buf, len, "confirm.select");
    else
        snprintf(buf, len, "exchange.declare passive \"%s\"", setup_exchange(r, r->ex_next - 1));
    return buf;
}

static void setup_send(struct publisher *p, struct route_pub *r, amqp_method_number_t id,
                       void *decoded, amqp_method_number_t await)
{
    r->await = await;
    r->setup_deadline = clock_mono_ms() + p->cfg->connect_timeout_ms;
    if (pub_send_method(p, r->ch, id, decoded) < 0)
        out_lost(p);
}

/* The answer route r waited for came: send the next request, or the channel is open. */
static void setup_next(struct publisher *p, struct route_pub *r)
{
    if (r->await == AMQP_CHANNEL_OPEN_OK_METHOD) {
        amqp_confirm_select_t cs = {.nowait = 0};
        setup_send(p, r, AMQP_CONFIRM_SELECT_METHOD, &cs, AMQP_CONFIRM_SELECT_OK_METHOD);
        return;
    }
    while (r->ex_next < 3 && (r->unchecked || !setup_exchange(r, r->ex_next)[0]))
        r->ex_next++;
    if (r->ex_next < 3) {
        amqp_exchange_declare_t d = {.exchange = amqp_cstring_bytes(setup_exchange(r, r->ex_next)),
                                     .type = amqp_cstring_bytes(r->cfg->target_type),
                                     .passive = 1,
                                     .arguments = amqp_empty_table};
        if (FAILPOINT_ERR("publish.passive_403")) { /* the 404 that follows reads as a 403 */
            d.exchange = amqp_cstring_bytes("delay-bridge.failpoint.no-such-exchange");
            r->fp_403 = 1;
        }
        r->ex_next++;
        setup_send(p, r, AMQP_EXCHANGE_DECLARE_METHOD, &d, AMQP_EXCHANGE_DECLARE_OK_METHOD);
        return;
    }
    r->opening = 0;
    r->open = 1;
    r->next_tag = 1;
    backoff_reset(&r->bo);
    log_info("publish", "route channel open", "route=%s target=\"%s\"", r->cfg->name,
             r->cfg->target_exchange);
}

/* Start opening route r's channel in confirm mode. */
static void channel_open(struct publisher *p, struct route_pub *r)
{
    amqp_channel_open_t o = {.out_of_band = amqp_empty_bytes};

    r->opening = 1;
    r->ex_next = 0;
    setup_send(p, r, AMQP_CHANNEL_OPEN_METHOD, &o, AMQP_CHANNEL_OPEN_OK_METHOD);
}

/*
 * A set-up request unanswered for connect_timeout_ms drops the connection.
 * The clock runs only while the request is written and the broker reads
 * (not blocked): a broker that reads slowly is not a dead one.
 */
static void setup_timeouts(struct publisher *p)
{
    uint64_t now = clock_mono_ms();
    /* why holds what (300) and a route name (up to 255) with the words around them */
    char what[300], why[300 + 256 + 64];
    int i;

    for (i = 0; i < p->nroutes && p->up; i++) {
        struct route_pub *r = &p->routes[i];
        if (!r->opening)
            continue;
        if (p->blocked || pub_out_pending(p)) {
            r->setup_deadline = now + p->cfg->connect_timeout_ms;
        } else if (now > r->setup_deadline) {
            snprintf(why, sizeof(why), "%s: no answer within connect_timeout_ms (route %s)",
                     setup_what(r, what, sizeof(what)), r->cfg->name);
            conn_down(p, why);
        }
    }
}

static void open_connection(struct publisher *p)
{
    const struct config *cfg = p->cfg;
    char err[600];
    int i, r;

    r = broker_conn_open_vhost(&p->conn, cfg, "publisher", p->vhost[0] ? p->vhost : NULL,
                               &p->uri_next, err, sizeof(err));
    if (r < 0) {
        uint64_t now = clock_mono_ms();
        struct backoff_step st = r == BROKER_CONN_NOBODY
                                     ? backoff_fail_within(&p->bo, now, BROKER_NOBODY_RETRY_MS)
                                     : backoff_fail(&p->bo, now);
        if (st.log_events)
            log_warn("publish", "cannot connect",
                     "error=%s retry_in_ms=%" PRIu64 " attempts=%" PRIu64, LOG_QUOTE_STR(err),
                     st.retry_in_ms, st.log_events);
        return;
    }
    p->frame_max = (uint32_t)amqp_get_frame_max(p->conn.st);
    p->hb_ms = 0;
    if (!p->conn.tls) {
        int hb = broker_conn_own_heartbeats(&p->conn);
        if (hb < 0) {
            log_warn("publish", "cannot take over heartbeats, dropping the connection",
                     "broker=\"%s\" error=\"%s\"", p->conn.uri_masked, amqp_error_string2(hb));
            broker_conn_close(&p->conn, 0);
            backoff_fail(&p->bo, clock_mono_ms());
            return;
        }
        p->hb_ms = (uint64_t)hb * 1000;
    }
    p->last_read_ms = p->last_write_ms = clock_mono_ms();
    p->up = 1;
    ev_io_init(&p->io, on_io, p->conn.fd, EV_READ);
    p->io.data = p;
    ev_io_start(p->loop, &p->io);
    ev_io_init(&p->wio, on_wio, p->conn.fd, EV_WRITE);
    p->wio.data = p;
    log_info("publish", "connected", "broker=\"%s\" writes=%s heartbeat_s=%" PRIu64,
             p->conn.uri_masked, p->conn.tls ? "rabbitmq-c" : "batched",
             p->conn.tls ? (uint64_t)amqp_get_heartbeat(p->conn.st) : p->hb_ms / 1000);
    for (i = 0; i < p->nroutes && p->up; i++)
        if (p->routes[i].on)
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
    pub_win_report(p, r);
}

/* Report from the head, in tag order; the callback may not touch this window. */
void pub_win_report(struct publisher *p, struct route_pub *r)
{
    uint64_t now_us = 0;

    while (r->n && win_at(r, 0)->settle != UNSETTLED) {
        struct unconfirmed u = *win_at(r, 0);
        r->head = (r->head + 1) % r->cap;
        r->n--;
        if (u.settle == NACKED)
            r->nacked++;
        else
            backoff_reset(&r->bo);
        if (u.settle == ACKED && u.handed_us) {
            /* its last stage (stats.h); a confirm before the buffer emptied ends the write too */
            now_us = now_us ? now_us : clock_mono_ns() / 1000u;
            if (!u.written_us) {
                u.written_us = now_us;
                db_hist_observe(&r->st_write, secs_between(u.handed_us, now_us));
            }
            db_hist_observe(&r->st_confirm, secs_between(u.written_us, now_us));
        }
        p->ops.confirmed(p->ops.arg, (int)(r - p->routes), u.ref, u.settle == ACKED, u.returned);
    }
}

static struct route_pub *route_of_channel(struct publisher *p, amqp_channel_t ch)
{
    return ch >= 2 && ch < 2 + p->nroutes ? &p->routes[ch - 2] : NULL;
}

/* The properties of a returned message: mark its publish by x-delay-bridge-id (or -drained). */
static void mark_returned(struct route_pub *r, const amqp_basic_properties_t *props)
{
    const char *v;
    size_t len, i;
    char buf[64];

    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG) ||
        (broker_msg_header_str(&props->headers, "x-delay-bridge-id", &v, &len) != 1 &&
         broker_msg_header_str(&props->headers, H_DRAINED, &v, &len) != 1) ||
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

/* Close-ok for a close from the broker (behind our unwritten frames); why: the broker's reason. */
static void answer_close(struct publisher *p, const amqp_frame_t *f, char *why, size_t len)
{
    amqp_channel_close_ok_t ok; /* both close-ok methods have no arguments */

    if (pub_send_method(p, f->channel, broker_conn_describe_close(f, why, len), &ok) < 0)
        out_lost(p);
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
    if (r && r->opening && f->payload.method.id == r->await) {
        setup_next(p, r);
        return;
    }
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
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *cm = f->payload.method.decoded;
        int unknown = r && r->opening && r->await == AMQP_EXCHANGE_DECLARE_OK_METHOD &&
                      (cm->reply_code == AMQP_ACCESS_REFUSED ||
                       (r->fp_403 && cm->reply_code == AMQP_NOT_FOUND)) && !r->unchecked;
        answer_close(p, f, why, sizeof(why));
        if (unknown && p->up) {
            char what[300];
            log_warn("publish", "the broker refuses to check an exchange (403 to a passive "
                     "declare: RabbitMQ 4.2.6/4.3.0 ask for configure permission): publishing "
                     "without the check; a missing exchange shows as a publish error",
                     "route=%s check=\"%s\" reason=%s", r->cfg->name,
                     setup_what(r, what, sizeof(what)), LOG_QUOTE_STR(why));
            r->unchecked = 1;
            channel_open(p, r);
            break;
        }
        if (r && p->up) {
            char what[300], full[900];
            int gone = pub_note_gone(r, cm, why);
            if (r->opening)
                snprintf(full, sizeof(full), "%s: %s", setup_what(r, what, sizeof(what)), why);
            else
                snprintf(full, sizeof(full), "%s", why);
            r->retries++;
            channel_failed(p, r, full);
            if (gone) /* the cause is known and met: at once, not after a backoff */
                backoff_reset(&r->bo);
        }
        break;
    }
    case AMQP_CONNECTION_CLOSE_METHOD:
        answer_close(p, f, why, sizeof(why));
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

    /*
     * rabbitmq-c reads heartbeat frames without returning them: once the
     * broker has been quiet for half the interval, look before it reads.
     */
    if (p->hb_ms) {
        uint64_t now = clock_mono_ms();
        if (now - p->last_read_ms >= p->hb_ms / 2 && pub_broker_spoke(p))
            p->last_read_ms = now;
    }
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
    if (i && p->hb_ms)
        p->last_read_ms = clock_mono_ms();
    if (p->up)
        amqp_maybe_release_buffers(p->conn.st);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    drain(w->data);
}

static void on_wio(struct ev_loop *loop, ev_io *w, int revents)
{
    if (pub_out_write(w->data) < 0)
        out_lost(w->data);
    else
        took_writes(w->data);
}

/*
 * Heartbeats we keep on plain TCP: one when nothing was written for half
 * the interval (nothing unwritten either: then we are writing already), and
 * the connection dropped when nothing came for twice the interval.
 */
static void heartbeats(struct publisher *p)
{
    uint64_t now = clock_mono_ms();

    if (!p->hb_ms || !p->up)
        return;
    if (now - p->last_read_ms > 2 * p->hb_ms) {
        if (!pub_broker_spoke(p)) {
            char why[128];
            snprintf(why, sizeof(why), "missed heartbeats: nothing from the broker for %" PRIu64
                     " ms (heartbeat_s %" PRIu64 ")", now - p->last_read_ms, p->hb_ms / 1000);
            conn_down(p, why);
            return;
        }
        p->last_read_ms = now;
    }
    if (!pub_out_pending(p) && now - p->last_write_ms >= p->hb_ms / 2) {
        memcpy(pub_out_reserve(p, sizeof(heartbeat_frame)), heartbeat_frame, sizeof(heartbeat_frame));
        p->out.len += sizeof(heartbeat_frame);
        if (pub_out_write(p) < 0)
            out_lost(p);
    }
}

/* ---- the owner's calls ------------------------------------------------------------ */

struct publisher *publisher_new(struct ev_loop *loop, const struct config *cfg, const char *vhost,
                                const struct publisher_ops *ops)
{
    struct publisher *p = xcalloc(1, sizeof(*p));
    int i;

    p->loop = loop;
    p->cfg = cfg;
    p->ops = *ops;
    p->conn.fd = -1;
    snprintf(p->vhost, sizeof(p->vhost), "%s", vhost ? vhost : "");
    p->nroutes = CONFIG_MAX_ROUTES; /* room for every route; those served are on */
    p->routes = xcalloc((size_t)p->nroutes, sizeof(*p->routes));
    for (i = 0; i < p->nroutes; i++) {
        p->routes[i].cfg = &cfg->routes[i];
        p->routes[i].ch = (amqp_channel_t)(i + 2);
        backoff_init(&p->routes[i].bo, cfg->publish_retry_min_ms, cfg->publish_retry_max_ms,
                     30000);
    }
    backoff_init(&p->bo, cfg->reconnect_min_ms, cfg->reconnect_max_ms, 30000);
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
        ev_io_stop(p->loop, &p->wio);
        broker_conn_close(&p->conn, 0);
    }
    free(p->out.b);
    for (i = 0; i < p->nroutes; i++) {
        free(p->routes[i].win);
        free(p->routes[i].gone);
    }
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
    heartbeats(p);
    setup_timeouts(p);
    if (pub_out_kick(p) < 0) {
        out_lost(p);
        return;
    }
    took_writes(p);
    for (i = 0; i < p->nroutes && p->up; i++) {
        struct route_pub *r = &p->routes[i];
        if (r->on && !r->open && !r->opening && !p->blocked && backoff_ready(&r->bo, now))
            channel_open(p, r);
    }
    if (!p->up)
        return;
    if (broker_conn_buffered(&p->conn) || now - p->last_poll_ms >= HEARTBEAT_POLL_MS) {
        p->last_poll_ms = now;
        drain(p);
    }
}

int publisher_ready(const struct publisher *p, int route)
{
    const struct route_pub *r = &p->routes[route];

    return p->up && !p->blocked && r->open && r->n < r->cfg->max_inflight &&
           pub_out_pending(p) < OUT_HIGH_WATER;
}

/*
 * A retry route's message (broker_retry.h): sent back to its queue (the
 * record's routing key), parked (dead-lettered: retry.h's reason; or
 * diverted, its queue gone), or handed back by a drain.
 */
static void retry_headers(struct publisher *p, amqp_basic_properties_t *out,
                          const struct walrec_add *a, const struct msgrec_out *o)
{
    int parked = (a->flags & WALREC_ADD_DEADLETTER) != 0;
    int gone = o->original_exchange && !parked;
    char q[256];

    snprintf(q, sizeof(q), "%.*s", (int)a->routing_key_len, a->routing_key);
    if (o->handback)
        broker_retry_out(out, &p->pool, BROKER_RETRY_HANDBACK, a->enqueue_ms, NULL, NULL);
    else if (parked || gone)
        broker_retry_out(out, &p->pool, BROKER_RETRY_PARK, a->enqueue_ms,
                       a->error == XDELAY_RETRY_NOQUEUE ? NULL : q,
                       retry_park_reason(a->error, gone));
    else
        broker_retry_out(out, &p->pool, BROKER_RETRY_BACK, a->enqueue_ms, q, NULL);
}

int publisher_send(struct publisher *p, int route, uint32_t ref, const struct walrec_add *a,
                   const struct msgrec_out *o)
{
    struct route_pub *r = &p->routes[route];
    amqp_basic_properties_t *in, out;
    uint64_t handed_us = clock_mono_ns() / 1000u;
    int res;

    if (r->gone && o->exchange == o->exchange_buf && pub_is_gone(r, o->exchange)) {
        /* returned without a publish, reported in its turn (publisher_gone.c) */
        win_push(r, r->next_tag - 1, a->msg_id, ref);
        win_at(r, r->n - 1)->settle = ACKED;
        win_at(r, r->n - 1)->returned = 1;
        r->returned++;
        pub_win_report(p, r);
        return 1;
    }
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
    broker_msg_outgoing(in, &out, &p->pool, o->delay_ms, p->conn.user, o->unmarked ? NULL : o->id,
                      o->error);
    if (o->unmarked) /* msgrec.h: its exchange must hold it again, not route it */
        broker_msg_set_header(&out, &p->pool, H_DRAINED, o->id);
    if (o->handback) { /* a drain: back to the ingress for the rest of its delay */
        broker_msg_set_delay(&out, &p->pool, (int64_t)o->remaining_ms);
        if (r->cfg->retry && p->conn.user[0]) {
            /* the proof it is a bridge's hand-back: the broker checks user-id (broker_msg.h) */
            out._flags |= AMQP_BASIC_USER_ID_FLAG;
            out.user_id = amqp_cstring_bytes(p->conn.user);
        }
    }
    else if (o->drop_stamp)
        broker_msg_drop_stamp(&out);
    if (o->original_exchange) {
        char rk[256];
        snprintf(rk, sizeof(rk), "%.*s", (int)a->routing_key_len, a->routing_key);
        broker_msg_set_header(&out, &p->pool, "x-delay-unroutable",
                            "no queue was bound for it at the target (basic.return)");
        broker_msg_set_header(&out, &p->pool, "x-original-exchange", o->original_exchange);
        broker_msg_set_header(&out, &p->pool, "x-original-routing-key", rk);
    }
    if (r->cfg->retry)
        retry_headers(p, &out, a, o);
    amqp_bytes_t body = {a->body_len, (void *)a->body};
    amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes(o->exchange),
                              .routing_key = {a->routing_key_len, (void *)a->routing_key},
                              .mandatory = 1};
    if (pub_own_writes(p)) {
        size_t need = broker_conn_publish_bound(m.exchange.len, m.routing_key.len, body.len,
                                              p->frame_max);
        long n = broker_conn_encode_publish(pub_out_reserve(p, need), need, r->ch, &m, &out, body,
                                          p->frame_max);
        res = n < 0 ? (int)n : AMQP_STATUS_OK;
        if (n > 0)
            p->out.len += (size_t)n;
    } else {
        res = amqp_basic_publish(p->conn.st, r->ch, m.exchange, m.routing_key, 1, 0, &out, body);
    }
    win_push(r, r->next_tag++, a->msg_id, ref);
    win_at(r, r->n - 1)->handed_us = handed_us;
    if (!pub_own_writes(p)) /* TLS: amqp_basic_publish() has written it, blocking */
        win_written(p, clock_mono_ns() / 1000u);
    if (res != AMQP_STATUS_OK) {
        conn_down(p, amqp_error_string2(res));
        return -1;
    }
    r->published++;
    return 0;
}

void publisher_flush(struct publisher *p)
{
    if (!p->up)
        return;
    if (pub_out_kick(p) < 0) {
        out_lost(p);
        return;
    }
    took_writes(p);
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
    int graceful = 0;

    if (!p->conn.st)
        return;
    if (p->up && (graceful = pub_sync_write_ok(p)) < 0)
        out_lost(p); /* the connection is gone: nothing left to close */
    if (!p->conn.st)
        return;
    ev_io_stop(p->loop, &p->io);
    ev_io_stop(p->loop, &p->wio);
    pub_out_reset(p);
    broker_conn_close(&p->conn, graceful);
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
    return p->up && broker_conn_buffered(&p->conn);
}

uint64_t publisher_wait_ms(const struct publisher *p, uint64_t now)
{
    uint64_t next = p->last_poll_ms + HEARTBEAT_POLL_MS;
    int i;

    if (!p->conn.st)
        next = p->bo.retry_at;
    /* Channels reopen once unblocked: reading connection.unblocked wakes us then. */
    for (i = 0; p->conn.st && i < p->nroutes && !p->blocked; i++)
        if (p->routes[i].on && !p->routes[i].open && !p->routes[i].opening &&
            p->routes[i].bo.retry_at < next)
            next = p->routes[i].bo.retry_at;
    return next > now ? next - now : 0;
}

void publisher_route_stats(const struct publisher *p, int route, struct db_route_stats *s)
{
    const struct route_pub *r = &p->routes[route];

    s->published = r->published;
    s->nacked = r->nacked;
    s->publish_retries = r->retries;
    s->returned = r->returned;
    s->channel_open = p->up && r->open;
    s->stage[DB_STAGE_WRITE] = r->st_write;
    s->stage[DB_STAGE_CONFIRM] = r->st_confirm;
}

/*
 * A route this publisher serves from now on: its confirm channel is opened
 * (and its exchanges checked) on the next turn when connected, else with
 * the connection. A route is never taken off: one removed at run time
 * keeps its channel to publish what it holds, and an idle channel costs
 * the broker next to nothing.
 */
void publisher_route_add(struct publisher *p, int route)
{
    struct route_pub *r = &p->routes[route];

    if (r->on)
        return;
    r->on = 1;
    backoff_reset(&r->bo);
}
