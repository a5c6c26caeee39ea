/*
 * consumer.c -- the ingress side: one connection, one consumer per route.
 *
 * rabbitmq-c has no asynchronous API. The socket is an ev_io watcher; when
 * it is readable, or when rabbitmq-c already holds buffered frames (checked
 * every loop turn, since the socket may then be quiet), frames are read
 * with a zero timeout, at most FRAMES_PER_TURN per wakeup so that one busy
 * connection cannot starve the loop. Connection set-up (login, declares,
 * basic.consume) is synchronous, bounded by broker.connect_timeout_ms; it
 * runs only when (re)connecting: the login is broker_conn_open_next()'s
 * (broker_conn.c), what each route declares and consumes is
 * consumer_declare.c's, a route's start, refusal and the connection lost
 * are consumer_core.c's (shared with consumer_routes.c, which this file
 * never calls).
 *
 * A delivery arrives as a basic.deliver method frame, a header frame with
 * the properties and body size, and zero or more body frames. The method's
 * strings are copied (rabbitmq-c reuses its frame memory), the properties
 * stay in the connection's decoding pool until the delivery is handed over
 * (amqp_maybe_release_buffers() is held off meanwhile), the body is copied
 * into one buffer reused from delivery to delivery. A body larger than
 * wal.max_message_bytes is not kept: it is counted through and handed over
 * with too_big set, for the owner to reject.
 *
 * The consumer tag is "delay-bridge:<route>", so a delivery names its route.
 *
 * The owner never sees an AMQP type. Before the hand-over, finish() reads
 * the delivery's header table once (broker_msg_read: one pass into struct
 * broker_headers, broker_msg.h) and every step after asks that struct: a
 * stream's place, x-delay judged (broker_msg_due), x-delay-key,
 * x-delay-cancel, a key event's four headers, on a retry route x-death's
 * queue and reason and x-retry-attempt, judged by retry.h instead of
 * x-delay (read_retry, broker_retry_judge). The same pass sorts out the
 * headers the log gets: the properties are encoded without the
 * x-delivery-count and x-acquired-count a quorum queue adds when it
 * redelivers (the ingress queue's bookkeeping, not part of the message:
 * neither stored nor forwarded, so a redelivery looks like the original)
 * and without the provenance headers a publisher forged (broker_msg.h,
 * "Intake"). The key events the owner sends (routes[].share_keys,
 * bridge_keys.c) are encoded here too.
 *
 * A stream ingress (consumer.h) is consumed from stream_next[route]: the
 * broker's x-stream-offset header of each delivery is read in finish(),
 * deliveries below the place are acked one by one as credit and dropped
 * (a stream starts at the chunk that holds the place asked for), those
 * below stream_upto are marked redelivered (a crash may have cut their
 * commit short after its fsync: the owner's fingerprints tell), and the
 * header is neither stored nor forwarded, like x-delivery-count.
 *
 * Key events go out on a channel of their own in confirm mode
 * (EVENTS_CHANNEL), and no ingress ack leaves before every event sent
 * before it is confirmed: an event the broker did not store (a quorum
 * queue without a leader nacks, or drops what is not confirmed: seed 3 of
 * the fault schedule lost cross-bridge events 11-15 s after a node kill,
 * the moment the broker nacked the target publishes too) would otherwise
 * be gone while its delivery is acked, and both versions of the key would
 * fire. A nack, or an event unconfirmed for EVENT_CONFIRM_MS, drops the
 * connection instead: the unacked deliveries come back, are recognised as
 * logged (eng_seen), and their events go out again (bridge_key_event_again).
 * An ack waits for the events sent up to the moment it was asked for (two
 * slots: one ack waiting on a fixed event, the next merging the later
 * ones), so a steady stream of events cannot hold acks back for good.
 *
 * Every duration here (the reconnect backoff, the events' confirm clock,
 * the heartbeat poll) is in monotonic ms, clock_mono_ms(), as is the now
 * consumer_turn() is given; the one wall-clock time is a delivery's now_ms,
 * the base of its due time.
 */
#include "delay-bridge/consumer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>

#include "delay-bridge/broker_conn.h"
#include "delay-bridge/broker_msg.h"
#include "base/backoff.h"
#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "broker_retry.h"
#include "consumer_int.h"

#define EVENT_CONFIRM_MS 5000 /* an event unconfirmed this long drops the connection */
#define FRAMES_PER_TURN 4096 /* frames read per wakeup before yielding */
#define HEARTBEAT_POLL_MS 500

#define H_KEY "x-delay-key"
#define H_CANCEL "x-delay-cancel"
#define H_EVENT "x-delay-key-event" /* share_keys: "replace" or "cancel" */
#define H_ORIGIN "x-delay-key-origin"
#define H_AT "x-delay-key-at"

static void on_io(struct ev_loop *loop, ev_io *w, int revents);

/* basic.ack of every delivery up to tag. */
static void send_ack(struct consumer *c, uint64_t tag)
{
    int r;

    if (tag <= c->acked_tag)
        return;
    r = amqp_basic_ack(c->conn.st, CONSUMER_CHANNEL, tag, 1);
    if (r != AMQP_STATUS_OK) {
        cons_conn_down(c, amqp_error_string2(r));
        return;
    }
    c->acked_tag = tag;
}

/* The acks whose events are all confirmed now go out, oldest first. */
static void acks_release(struct consumer *c)
{
    while (c->up && c->held[0].tag && c->ev_confirmed >= c->held[0].need) {
        uint64_t tag = c->held[0].tag;
        c->held[0] = c->held[1];
        c->held[1].tag = c->held[1].need = 0;
        send_ack(c, tag);
    }
}

int consumer_publish_key_event(struct consumer *c, int route, const char *kind, const char *key,
                               size_t key_len, const char *origin, uint64_t at)
{
    const struct config_route *rc = &c->cfg->routes[route];
    char ex[CONFIG_NAME_MAX + 8];
    amqp_basic_properties_t p;
    amqp_table_entry_t e[4];
    amqp_table_t headers = {4, e};
    int r;

    if (!c->up || !c->events_on)
        return -1;
    if (c->ev_sent - c->ev_confirmed >= EVENT_WINDOW) {
        cons_conn_down(c, "too many key events unconfirmed");
        return -1;
    }
    e[0].key = amqp_cstring_bytes(H_EVENT);
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes(kind);
    e[1].key = amqp_cstring_bytes(H_KEY);
    e[1].value.kind = AMQP_FIELD_KIND_UTF8;
    e[1].value.value.bytes = (amqp_bytes_t){key_len, (void *)key};
    e[2].key = amqp_cstring_bytes(H_ORIGIN);
    e[2].value.kind = AMQP_FIELD_KIND_UTF8;
    e[2].value.value.bytes = amqp_cstring_bytes(origin);
    e[3].key = amqp_cstring_bytes(H_AT);
    e[3].value.kind = AMQP_FIELD_KIND_I64;
    e[3].value.value.i64 = (int64_t)at;
    snprintf(ex, sizeof(ex), "%s.keys", rc->ingress_exchange);
    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.delivery_mode = 2;
    p.headers = headers;
    if (++c->ev_sent == c->ev_confirmed + 1)
        c->ev_progress_ms = clock_mono_ms(); /* the confirm clock starts */
    if (FAILPOINT_ERR("keys.event_unconfirmed")) {
        /* Lost as the broker lost one: it takes its sequence number (sent
         * where nothing is bound), and its confirm is never counted. */
        c->ev_lost = c->ev_sent;
        snprintf(ex, sizeof(ex), "%s", "");
    }
    r = amqp_basic_publish(c->conn.st, EVENTS_CHANNEL, amqp_cstring_bytes(ex),
                           amqp_cstring_bytes(ex[0] ? "" : "delay-bridge.failpoint.nowhere"), 0,
                           0, &p, amqp_empty_bytes);
    if (r != AMQP_STATUS_OK) {
        cons_conn_down(c, amqp_error_string2(r));
        return -1;
    }
    return 0;
}

/* Events confirmed by the broker: up to tag, or tag alone. */
static void events_confirmed(struct consumer *c, uint64_t tag, int multiple)
{
    if (tag <= c->ev_confirmed || tag > c->ev_sent)
        return; /* old news, or not ours */
    for (uint64_t t = multiple ? c->ev_confirmed + 1 : tag; t <= tag; t++)
        c->ev_done[t % EVENT_WINDOW] = t != c->ev_lost; /* ev_lost: failpoint only */
    while (c->ev_confirmed < c->ev_sent && c->ev_done[(c->ev_confirmed + 1) % EVENT_WINDOW]) {
        c->ev_done[(c->ev_confirmed + 1) % EVENT_WINDOW] = 0;
        c->ev_confirmed++;
    }
    c->ev_progress_ms = clock_mono_ms();
    acks_release(c);
}

static void open_connection(struct consumer *c)
{
    const struct config *cfg = c->cfg;
    struct backoff_step st;
    char err[1024];
    int i, n, rc;

    if ((rc = broker_conn_open_vhost(&c->conn, cfg, "consumer", c->vhost[0] ? c->vhost : NULL,
                                     &c->uri_next, err, sizeof(err))) < 0) {
        if (rc != BROKER_CONN_NOBODY)
            goto fail;
        st = backoff_fail_within(&c->bo, clock_mono_ms(), BROKER_NOBODY_RETRY_MS);
        goto log;
    }
    amqp_channel_open(c->conn.st, CONSUMER_CHANNEL);
    if (broker_conn_check(&c->conn, "channel.open", err, sizeof(err)) < 0)
        goto fail_close;
    cons_events_reset(c);
    for (i = 0; i < cfg->nroutes; i++)
        if (c->mine[i].on && cfg->routes[i].share_keys && cons_events_open(c, err, sizeof(err)) < 0)
            goto fail_close;
    for (i = 0; i < cfg->nroutes; i++) {
        char e2[600];
        if (!c->mine[i].on)
            continue;
        if (c->mine[i].failed) { /* refused before: tried alone, first */
            int r = cons_check_route(&c->conn, &cfg->routes[i], e2, sizeof(e2));
            if (r == -2) {
                snprintf(err, sizeof(err), "route %s: %s", cfg->routes[i].name, e2);
                goto fail_close;
            }
            if (r < 0) {
                cons_route_refused(c, i, e2);
                continue;
            }
            cons_route_accepted(c, i);
        }
        if (cons_declare_route(&c->conn, &cfg->routes[i], config_key_holder(cfg),
                               cons_ingress_off(c, i), c->stream_next[i], e2, sizeof(e2)) < 0) {
            snprintf(err, sizeof(err), "route %s: %s", cfg->routes[i].name, e2);
            goto fail_close;
        }
    }
    c->up = 1;
    c->gen++;
    c->acked_tag = 0;
    backoff_reset(&c->bo);
    ev_io_init(&c->io, on_io, c->conn.fd, EV_READ);
    c->io.data = c;
    ev_io_start(c->loop, &c->io);
    for (i = 0, n = 0; i < cfg->nroutes; i++)
        n += c->mine[i].on;
    log_info("consume", "consuming", "broker=\"%s\" routes=%d", c->conn.uri_masked, n);
    c->ops.state(c->ops.arg, 1);
    return;

fail_close:
    broker_conn_close(&c->conn, 0);
fail:
    st = backoff_fail(&c->bo, clock_mono_ms());
log:
    if (st.log_events)
        log_warn("consume", "cannot start consuming",
                 "error=%s retry_in_ms=%" PRIu64 " attempts=%" PRIu64, LOG_QUOTE_STR(err),
                 st.retry_in_ms, st.log_events);
}

static int route_of_tag(struct consumer *c, amqp_bytes_t tag, int *keys)
{
    size_t pl = sizeof(TAG_PREFIX) - 1;
    int i;

    *keys = 0;
    if (tag.len > sizeof(KEYS_TAG_PREFIX) - 1 &&
        memcmp(tag.bytes, KEYS_TAG_PREFIX, sizeof(KEYS_TAG_PREFIX) - 1) == 0) {
        *keys = 1;
        pl = sizeof(KEYS_TAG_PREFIX) - 1;
    } else if (tag.len <= pl || memcmp(tag.bytes, TAG_PREFIX, pl) != 0) {
        return -1;
    }
    for (i = 0; i < c->cfg->nroutes; i++) {
        const char *name = c->cfg->routes[i].name;
        if (strlen(name) == tag.len - pl && memcmp(name, (char *)tag.bytes + pl, tag.len - pl) == 0)
            return i;
    }
    return -1;
}

static void begin(struct consumer *c, const amqp_basic_deliver_t *m, int route, int keys)
{
    struct assembly *a = &c->as;
    size_t el = m->exchange.len > 255 ? 255 : m->exchange.len;
    size_t rl = m->routing_key.len > 255 ? 255 : m->routing_key.len;

    memcpy(a->exchange, m->exchange.bytes, el);
    memcpy(a->routing_key, m->routing_key.bytes, rl);
    memset(&a->d, 0, sizeof(a->d));
    a->d.route = route;
    a->d.key_event = keys;
    a->d.gen = c->gen;
    a->d.tag = m->delivery_tag;
    a->d.redelivered = m->redelivered != 0;
    a->d.exchange = a->exchange;
    a->d.exchange_len = el;
    a->d.routing_key = a->routing_key;
    a->d.routing_key_len = rl;
    a->props = NULL;
    a->got = 0;
    a->active = 1;
}

/*
 * A retry route's delivery: where it failed and what the policy says
 * (retry.h). A drain's hand-back keeps what remained of its delay, in its
 * x-delay; it has failed no new attempt.
 */
static void read_retry(struct consumer *c, struct delivery *d, const struct broker_headers *h,
                       int from_bridge, const struct config_route *rc)
{
    struct retry_verdict v;

    broker_retry_judge(c->cfg, rc, h, from_bridge, d->now_ms, clock_rand64(), &v);
    d->retry_queue = v.queue;
    d->retry_queue_len = v.queue_len;
    d->retry_admitted = v.admitted;
    d->retry_handback = v.handback;
    d->retry_failed = v.failed;
    d->xdelay = v.st;
    d->delay_ms = v.delay_ms;
}

/*
 * What the owner needs of d's headers h, read once in finish(), and of its
 * properties (see the top of the file).
 */
static void read_headers(struct consumer *c, struct delivery *d,
                         const amqp_basic_properties_t *props, const struct broker_headers *h,
                         int from_bridge)
{
    if (d->key_event) {
        d->ev.ok = broker_msg_str(h->ev_kind, &d->ev.kind, &d->ev.kind_len) > 0 &&
                   broker_msg_str(h->key, &d->ev.key, &d->ev.key_len) > 0 &&
                   broker_msg_str(h->ev_origin, &d->ev.origin, &d->ev.origin_len) > 0 &&
                   broker_msg_i64(h->ev_at, &d->ev.at) > 0;
        return;
    }
    d->cancel = broker_msg_str(h->cancel, &d->cancel_key, &d->cancel_key_len);
    d->key = broker_msg_str(h->key, &d->key_str, &d->key_len);
    if (d->key <= 0)
        d->key_str = NULL;
    if (c->cfg->routes[d->route].delayed_exchanges)
        d->bridge_marked = h->bridge_id != NULL;
    /* x-delay-until, x-opt-delivery-time or x-delay (broker_msg_due): the delay from now */
    const struct config_route *rc = &c->cfg->routes[d->route];
    d->unstamped = 0;
    d->now_ms = clock_receipt_ms(); /* wall clock, rounded up: the base of a due time */
    if (rc->retry)
        read_retry(c, d, h, from_bridge, rc);
    else if (rc->delay_from == DELAY_FROM_BROKER)
        d->xdelay = broker_msg_due_stamped(h, d->now_ms, rc->max_delay_ms, &d->delay_ms,
                                           &d->unstamped);
    else
        d->xdelay = broker_msg_due(h, d->now_ms, rc->max_delay_ms, &d->delay_ms);

    /* The log's copy: the headers intake keeps (broker_msg.h, "Intake"; sorted out by the
     * read), so what only a bridge may say stays only when one said it ("Provenance") */
    amqp_basic_properties_t out = *props;
    if (d->retry_handback) { /* the user-id was the draining bridge's proof, not the message's */
        out._flags &= ~(amqp_flags_t)AMQP_BASIC_USER_ID_FLAG;
        out.user_id = amqp_empty_bytes;
    }
    if (props->_flags & AMQP_BASIC_HEADERS_FLAG) {
        out.headers.num_entries = h->nkeep;
        out.headers.entries = c->hdr_scratch;
    }
    d->props_len = broker_msg_encode_props(&out, &c->props_buf, &c->props_cap);
    d->props = c->props_buf;
}

/*
 * A whole delivery: its headers read in one pass (broker_msg_read: the
 * struct every step below reads, and the entries intake keeps), a stream's
 * place checked, then the hand-over.
 */
static void finish(struct consumer *c)
{
    struct assembly *a = &c->as;
    const amqp_basic_properties_t *p = a->props ? a->props : &c->no_props;
    const amqp_table_t *t = p->_flags & AMQP_BASIC_HEADERS_FLAG ? &p->headers : NULL;
    int stream = !a->d.key_event && c->cfg->routes[a->d.route].queue_type == QUEUE_STREAM;
    int from_bridge = !a->d.key_event && broker_msg_from_user(p, c->conn.user);
    int intake = !a->d.key_event && !a->d.too_big;
    struct broker_headers h;

    if (intake && t && (size_t)t->num_entries > c->hdr_cap) {
        c->hdr_cap = (size_t)t->num_entries;
        c->hdr_scratch = xrealloc(c->hdr_scratch, c->hdr_cap * sizeof(*c->hdr_scratch));
    }
    broker_msg_read(t, stream, from_bridge, intake ? c->hdr_scratch : NULL, &h);
    a->active = 0;
    a->d.stream_offset = -1;
    if (stream) {
        int64_t off;
        int64_t *next = &c->stream_next[a->d.route];
        if (broker_msg_i64(h.stream_offset, &off) > 0 && off >= 0) {
            if (*next >= 0 && off < *next) {
                /* Before the place (the chunk's start, or read again): credit, not a message. */
                int r = amqp_basic_ack(c->conn.st, CONSUMER_CHANNEL, a->d.tag, 0);
                if (r != AMQP_STATUS_OK)
                    cons_conn_down(c, amqp_error_string2(r));
                return;
            }
            a->d.stream_offset = off;
            a->d.redelivered = off < c->stream_upto[a->d.route];
            *next = off + 1;
        }
    }
    a->d.body = a->d.too_big ? NULL : a->body;
    if (!a->d.too_big)
        read_headers(c, &a->d, p, &h, from_bridge);
    c->ops.delivery(c->ops.arg, &a->d);
}

static void handle_frame(struct consumer *c, amqp_frame_t *f)
{
    struct assembly *a = &c->as;
    char why[512];

    if (f->frame_type == AMQP_FRAME_METHOD) {
        switch (f->payload.method.id) {
        case AMQP_BASIC_DELIVER_METHOD: {
            amqp_basic_deliver_t *m = f->payload.method.decoded;
            int keys;
            int route = route_of_tag(c, m->consumer_tag, &keys);
            if (route < 0) {
                cons_conn_down(c, "delivery for an unknown consumer tag");
                return;
            }
            begin(c, m, route, keys);
            return;
        }
        case AMQP_BASIC_CANCEL_METHOD:
            cons_conn_down(c, "broker cancelled the consumer (ingress queue deleted?)");
            return;
        case AMQP_BASIC_ACK_METHOD:
            if (f->channel == EVENTS_CHANNEL) {
                amqp_basic_ack_t *m = f->payload.method.decoded;
                events_confirmed(c, m->delivery_tag, m->multiple);
            }
            return;
        case AMQP_BASIC_NACK_METHOD:
            if (f->channel == EVENTS_CHANNEL)
                cons_conn_down(c, "the broker refused a key event (basic.nack): reconnecting, so "
                             "that its delivery comes back and the event goes out again");
            return;
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
            broker_conn_answer_close(&c->conn, f, why, sizeof(why));
            cons_conn_down(c, why);
            return;
        default:
            return;
        }
    }
    if (!a->active)
        return;
    if (f->frame_type == AMQP_FRAME_HEADER) {
        a->props = f->payload.properties.decoded;
        a->d.body_size = f->payload.properties.body_size;
        a->got = 0;
        a->d.too_big = a->d.body_size > c->cfg->max_message_bytes;
        if (!a->d.too_big && a->d.body_size > a->body_cap) {
            a->body_cap = a->d.body_size;
            a->body = xrealloc(a->body, a->body_cap);
        }
    } else if (f->frame_type == AMQP_FRAME_BODY) {
        amqp_bytes_t part = f->payload.body_fragment;
        if (a->got + part.len > a->d.body_size) {
            cons_conn_down(c, "body longer than announced");
            return;
        }
        if (!a->d.too_big)
            memcpy(a->body + a->got, part.bytes, part.len);
        a->got += part.len;
    } else {
        return;
    }
    if (a->got == a->d.body_size)
        finish(c);
}

/* Read what the connection has, without blocking, up to FRAMES_PER_TURN frames. */
static void drain(struct consumer *c)
{
    struct timeval zero = {0, 0};
    amqp_frame_t f;
    int i, r;

    for (i = 0; i < FRAMES_PER_TURN && c->up; i++) {
        r = amqp_simple_wait_frame_noblock(c->conn.st, &f, &zero);
        if (r == AMQP_STATUS_TIMEOUT)
            break;
        if (r != AMQP_STATUS_OK) {
            cons_conn_down(c, amqp_error_string2(r));
            return;
        }
        handle_frame(c, &f);
        if (c->up && !c->as.active)
            amqp_maybe_release_buffers(c->conn.st);
    }
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    drain(w->data);
}

struct consumer *consumer_new(struct ev_loop *loop, const struct config *cfg, const char *vhost,
                              const struct consumer_ops *ops)
{
    struct consumer *c = xcalloc(1, sizeof(*c));

    c->loop = loop;
    c->cfg = cfg;
    c->ops = *ops;
    c->conn.fd = -1;
    c->gen = ops->gen_base;
    snprintf(c->vhost, sizeof(c->vhost), "%s", vhost ? vhost : "");
    c->stream_next = xmalloc(CONFIG_MAX_ROUTES * sizeof(*c->stream_next));
    c->stream_upto = xmalloc(CONFIG_MAX_ROUTES * sizeof(*c->stream_upto));
    c->mine = xcalloc(CONFIG_MAX_ROUTES, sizeof(*c->mine));
    for (int i = 0; i < CONFIG_MAX_ROUTES; i++) {
        c->stream_next[i] = c->stream_upto[i] = -1;
        backoff_init(&c->mine[i].bo, cfg->reconnect_min_ms, cfg->reconnect_max_ms, 30000);
    }
    backoff_init(&c->bo, cfg->reconnect_min_ms, cfg->reconnect_max_ms, 30000);
    return c;
}

void consumer_free(struct consumer *c)
{
    if (!c)
        return;
    consumer_abort(c);
    free(c->as.body);
    free(c->props_buf);
    free(c->hdr_scratch);
    free(c->stream_next);
    free(c->stream_upto);
    free(c->mine);
    free(c);
}

void consumer_turn(struct consumer *c, uint64_t now)
{
    if (c->stopped || c->paused)
        return;
    if (!c->conn.st) {
        if (backoff_ready(&c->bo, now))
            open_connection(c);
        return;
    }
    for (int i = 0; c->up && i < c->cfg->nroutes; i++)
        if (c->mine[i].on && c->mine[i].failed && now >= c->mine[i].retry_at)
            cons_route_start(c, i);
    if (!c->conn.st)
        return;
    if (c->ev_sent > c->ev_confirmed && now - c->ev_progress_ms >= EVENT_CONFIRM_MS) {
        cons_conn_down(c, "a key event went unconfirmed for 5 s: reconnecting, so that its "
                     "delivery comes back and the event goes out again");
        return;
    }
    if (broker_conn_buffered(&c->conn)) {
        drain(c);
    } else if (!c->as.active && now - c->last_poll_ms >= HEARTBEAT_POLL_MS) {
        /* A zero-timeout wait lets rabbitmq-c send heartbeats on a quiet connection. */
        c->last_poll_ms = now;
        drain(c);
    }
}

void consumer_ack(struct consumer *c, uint32_t gen, uint64_t tag)
{
    int i;

    if (!c->up || gen != c->gen || tag <= c->acked_tag)
        return;
    if (c->ev_confirmed >= c->ev_sent && !c->held[0].tag) {
        send_ack(c, tag);
        return;
    }
    /* Wait for the events sent so far: a slot of its own, or merged into the second. */
    i = c->held[0].tag ? 1 : 0;
    if (tag > c->held[i].tag) {
        c->held[i].tag = tag;
        c->held[i].need = c->ev_sent;
    }
    acks_release(c);
}

void consumer_settle(struct consumer *c, int route, uint32_t gen, uint64_t tag, int ack)
{
    int r;

    if (!c->up || gen != c->gen)
        return;
    if (ack || c->cfg->routes[route].queue_type == QUEUE_STREAM) /* a stream: credit, skipped */
        r = amqp_basic_ack(c->conn.st, CONSUMER_CHANNEL, tag, 0);
    else
        r = amqp_basic_reject(c->conn.st, CONSUMER_CHANNEL, tag, 0);
    if (r != AMQP_STATUS_OK)
        cons_conn_down(c, amqp_error_string2(r));
}

/*
 * Close the connection on purpose: politely (unacked deliveries go back to
 * their queues either way) and telling the owner, or abruptly and silently
 * after a fatal error. Reconnecting is the caller's business (paused, stopped).
 */
static void close_connection(struct consumer *c, int graceful)
{
    if (c->conn.st) {
        ev_io_stop(c->loop, &c->io);
        broker_conn_close(&c->conn, graceful && c->up);
    }
    c->as.active = 0;
    if (c->up) {
        c->up = 0;
        if (graceful)
            c->ops.state(c->ops.arg, 0);
    }
}

void consumer_pause(struct consumer *c)
{
    if (c->paused || c->stopped)
        return;
    c->paused = 1;
    close_connection(c, 1);
}

void consumer_resume(struct consumer *c)
{
    if (!c->paused)
        return;
    c->paused = 0;
    backoff_reset(&c->bo);
}

void consumer_stop(struct consumer *c)
{
    c->stopped = 1;
    close_connection(c, 1);
}

void consumer_abort(struct consumer *c)
{
    c->stopped = 1;
    close_connection(c, 0);
}

void consumer_set_stream_next(struct consumer *c, int route, int64_t next, int64_t upto)
{
    c->stream_next[route] = next;
    c->stream_upto[route] = upto;
}

int64_t consumer_stream_next(const struct consumer *c, int route)
{
    return c->stream_next[route];
}

int consumer_up(const struct consumer *c)
{
    return c->up;
}

uint32_t consumer_gen(const struct consumer *c)
{
    return c->gen;
}

int consumer_busy(const struct consumer *c)
{
    return c->up && broker_conn_buffered(&c->conn);
}

uint64_t consumer_wait_ms(const struct consumer *c, uint64_t now)
{
    uint64_t at;

    if (c->stopped || c->paused)
        return UINT64_MAX;
    at = c->conn.st ? c->last_poll_ms + HEARTBEAT_POLL_MS : c->bo.retry_at;
    return at > now ? at - now : 0;
}

