/*
 * consumer_declare.c -- what the consumer declares and consumes when it
 * connects, route by route.
 *
 * Every (re)connection declares again everything a route reads from, so a
 * broker that lost its definitions (a new node, a reset) is set up again
 * without an operator: the ingress exchange (fanout, durable), the ingress
 * queue bound to it (a delayed_exchanges route without ingress_exchange:
 * the queue alone), the target exchange when routes[].declare_target asks
 * for it, the prefetch (basic.qos), then basic.consume of the ingress
 * queue with the consumer tag "delay-bridge:<route>" -- the tag is how a
 * delivery names its route (consumer.c reads it back). All of it runs on
 * CONSUMER_CHANNEL, synchronously, bounded by broker.connect_timeout_ms.
 *
 * The ingress queue's arguments: its type (quorum, stream, classic), a
 * stream's retention (x-max-age, x-max-length-bytes), and
 * x-single-active-consumer when one bridge at a time is to get the route's
 * messages. Some arguments an existing queue may refuse (406: it was
 * declared without them, and a queue's arguments cannot change): on a
 * quorum queue x-delivery-limit -1 from 4.0 (4.0 made 20 returns the
 * default limit) and x-consumer-disconnected-timeout from 4.3, and
 * x-queue-type "classic" on a classic queue. Those go last and are dropped
 * one by one, on a scratch channel (DECLARE_CHANNEL), until the declare is
 * accepted (broker_conn_declare_queue): README "Supported brokers".
 *
 * A stream ingress is consumed from the place the owner gave
 * (x-stream-offset: the next offset, or "first" when it has none).
 *
 * A route with share_keys also gets its key events: the exchange
 * "<ingress exchange>.keys" (fanout) and this bridge's queue
 * "<ingress queue>.keys.<holder>" bound to it, consumed with the tag
 * "delay-bridge-keys:<route>" (bridge.c, "Keys across bridges").
 *
 * It does not open or close connections, nor send anything after set-up:
 * the ack path, key events and the disk-full hold are consumer.c's.
 */
#include "consumer_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "delay-bridge/consumer.h"
#include "base/log.h"

amqp_bytes_t cons_ingress_tag(const struct config_route *rc, char *buf, size_t n)
{
    snprintf(buf, n, TAG_PREFIX "%s", rc->name);
    return amqp_cstring_bytes(buf);
}

/* One entry added to a table of arguments (its entries array has room). */
static void arg_str(amqp_table_t *t, const char *k, const char *v)
{
    amqp_table_entry_t *e = &t->entries[t->num_entries++];
    e->key = amqp_cstring_bytes(k);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(v);
}

static void arg_i64(amqp_table_t *t, const char *k, int64_t v)
{
    amqp_table_entry_t *e = &t->entries[t->num_entries++];
    e->key = amqp_cstring_bytes(k);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = v;
}

int cons_consume_ingress(struct broker_conn *conn, const struct config_route *rc, int64_t next,
                         char *err, size_t len)
{
    char tag[300];
    amqp_table_entry_t arg;
    amqp_table_t args = {0, &arg};

    if (rc->queue_type == QUEUE_STREAM) {
        if (next < 0) {
            arg_str(&args, "x-stream-offset", "first");
            log_info("consume", "reading the stream ingress from its first message",
                     "route=%s queue=\"%s\"", rc->name, rc->ingress_queue);
        } else {
            arg_i64(&args, "x-stream-offset", next);
            log_info("consume", "reading the stream ingress", "route=%s queue=\"%s\" from=%" PRId64,
                     rc->name, rc->ingress_queue, next);
        }
    }
    /* The prefetch is the channel's for the consumers that follow (global false). */
    amqp_basic_qos(conn->st, CONSUMER_CHANNEL, 0, rc->prefetch, 0);
    if (broker_conn_check(conn, "basic.qos", err, len) < 0)
        return -1;
    amqp_basic_consume(conn->st, CONSUMER_CHANNEL, amqp_cstring_bytes(rc->ingress_queue),
                       cons_ingress_tag(rc, tag, sizeof(tag)), 0, 0, 0, args);
    return broker_conn_check(conn, "basic.consume", err, len);
}

/*
 * The ingress exchange, the ingress queue with its arguments, and its
 * binding. A delayed_exchanges route without an ingress_exchange declares
 * only the queue, with the arguments of any classic ingress (x-queue-type
 * "classic"): the x-delayed-message exchanges (deploy/plugin) declare it
 * with exactly those, and route to it themselves.
 */
static int declare_ingress(struct broker_conn *conn, amqp_channel_t ch,
                           const struct config_route *rc, char *err, size_t len)
{
    amqp_table_entry_t qarg[4];
    amqp_table_t qargs = {0, qarg};
    int bind = rc->ingress_exchange[0] != '\0';

    if (bind) {
        amqp_exchange_declare(conn->st, ch, amqp_cstring_bytes(rc->ingress_exchange),
                              amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
        if (broker_conn_check(conn, "declare ingress exchange", err, len) < 0)
            return -1;
    }
    if (rc->queue_type == QUEUE_QUORUM)
        arg_str(&qargs, "x-queue-type", "quorum");
    if (rc->queue_type == QUEUE_STREAM) {
        arg_str(&qargs, "x-queue-type", "stream");
        arg_str(&qargs, "x-max-age", rc->stream_max_age);
        if (rc->stream_max_bytes)
            arg_i64(&qargs, "x-max-length-bytes", (int64_t)rc->stream_max_bytes);
    }
    if (rc->single_active_consumer) {
        /* One bridge at a time gets the route's messages; the others wait their turn. */
        qarg[qargs.num_entries].key = amqp_cstring_bytes("x-single-active-consumer");
        qarg[qargs.num_entries].value.kind = AMQP_FIELD_KIND_BOOLEAN;
        qarg[qargs.num_entries++].value.value.boolean = 1;
    }
    /* Arguments an old queue may refuse (406), dropped last first: README "Supported brokers" */
    int v = rc->queue_type == QUEUE_QUORUM ? broker_conn_server_version(conn) : 0;
    int extra = (v >= 400) + (v >= 403) + (rc->queue_type == QUEUE_CLASSIC);
    if (rc->queue_type == QUEUE_CLASSIC)
        arg_str(&qargs, "x-queue-type", "classic");
    if (v >= 400)
        arg_i64(&qargs, "x-delivery-limit", -1);
    if (v >= 403)
        arg_i64(&qargs, "x-consumer-disconnected-timeout", 1000);
    int r = broker_conn_declare_queue(conn, ch == CONSUMER_CHANNEL ? DECLARE_CHANNEL
                                                                 : CHECK_DECLARE_CHANNEL,
                                    amqp_cstring_bytes(rc->ingress_queue), &qargs, extra, err,
                                    len);
    if (r < 0)
        return r; /* -3: refused on the scratch channel; ch is still open */
    if (!bind)
        return 0;
    amqp_queue_bind(conn->st, ch, amqp_cstring_bytes(rc->ingress_queue),
                    amqp_cstring_bytes(rc->ingress_exchange), amqp_empty_bytes, amqp_empty_table);
    return broker_conn_check(conn, "bind ingress queue", err, len);
}

/* Key events of the other bridges on this route (bridge.c, "Keys across bridges"). */
static int declare_key_events(struct broker_conn *conn, const struct config_route *rc,
                              const char *holder, char *err, size_t len)
{
    amqp_connection_state_t st = conn->st;
    char ex[CONFIG_NAME_MAX + 8], q[2 * CONFIG_NAME_MAX + 8], tag[300];
    amqp_table_entry_t qarg[1];
    amqp_table_t qargs = {0, qarg};

    consumer_key_names(rc, holder, ex, sizeof(ex), q, sizeof(q));
    amqp_exchange_declare(st, CONSUMER_CHANNEL, amqp_cstring_bytes(ex),
                          amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
    if (broker_conn_check(conn, "declare the key-event exchange", err, len) < 0)
        return -1;
    if (rc->queue_type == QUEUE_QUORUM)
        arg_str(&qargs, "x-queue-type", "quorum");
    amqp_queue_declare(st, CONSUMER_CHANNEL, amqp_cstring_bytes(q), 0, 1, 0, 0, qargs);
    if (broker_conn_check(conn, "declare the key-event queue", err, len) < 0)
        return -1;
    amqp_queue_bind(st, CONSUMER_CHANNEL, amqp_cstring_bytes(q), amqp_cstring_bytes(ex),
                    amqp_empty_bytes, amqp_empty_table);
    if (broker_conn_check(conn, "bind the key-event queue", err, len) < 0)
        return -1;
    snprintf(tag, sizeof(tag), KEYS_TAG_PREFIX "%s", rc->name);
    amqp_basic_consume(st, CONSUMER_CHANNEL, amqp_cstring_bytes(q), amqp_cstring_bytes(tag), 0,
                       0, 0, amqp_empty_table);
    return broker_conn_check(conn, "consume the key-event queue", err, len);
}

/*
 * A retry route's parking (retry.parking_queue set): the parking exchange,
 * topic, so that an operator can bind per queue (a parked message's routing
 * key is the queue it failed in), and the parking queue bound with "#", of
 * the ingress queue's type (a stream ingress is refused for retry routes).
 */
static int declare_parking(struct broker_conn *conn, amqp_channel_t ch,
                           const struct config_route *rc, char *err, size_t len)
{
    const struct config_retry *rt = rc->retry;
    amqp_table_entry_t qarg[1];
    amqp_table_t qargs = {0, qarg};

    amqp_exchange_declare(conn->st, ch, amqp_cstring_bytes(rt->parking_exchange),
                          amqp_cstring_bytes("topic"), 0, 1, 0, 0, amqp_empty_table);
    if (broker_conn_check(conn, "declare the parking exchange", err, len) < 0)
        return -1;
    if (rc->queue_type == QUEUE_QUORUM)
        arg_str(&qargs, "x-queue-type", "quorum");
    amqp_queue_declare(conn->st, ch, amqp_cstring_bytes(rt->parking_queue), 0, 1,
                       0, 0, qargs);
    if (broker_conn_check(conn, "declare the parking queue", err, len) < 0)
        return -1;
    amqp_queue_bind(conn->st, ch, amqp_cstring_bytes(rt->parking_queue),
                    amqp_cstring_bytes(rt->parking_exchange), amqp_cstring_bytes("#"),
                    amqp_empty_table);
    return broker_conn_check(conn, "bind the parking queue", err, len);
}

/* The exchanges and queues route rc reads from and parks or publishes to, on channel ch. */
static int declare_all(struct broker_conn *conn, amqp_channel_t ch, const struct config_route *rc,
                       char *err, size_t len)
{
    int r = declare_ingress(conn, ch, rc, err, len);

    if (r < 0)
        return r;
    if (rc->retry && rc->retry->parking_queue[0] && declare_parking(conn, ch, rc, err, len) < 0)
        return -1;
    if (rc->declare_target && rc->target_exchange[0]) {
        amqp_exchange_declare(conn->st, ch, amqp_cstring_bytes(rc->target_exchange),
                              amqp_cstring_bytes(rc->target_type), 0, 1, 0, 0, amqp_empty_table);
        if (broker_conn_check(conn, "declare target exchange", err, len) < 0)
            return -1;
    }
    return 0;
}

int cons_check_route(struct broker_conn *conn, const struct config_route *rc, char *err, size_t len)
{
    amqp_rpc_reply_t r;

    amqp_channel_open(conn->st, CHECK_CHANNEL);
    if (broker_conn_check(conn, "channel.open (route check)", err, len) < 0)
        return -2;
    int d = declare_all(conn, CHECK_CHANNEL, rc, err, len);
    if (d == 0 || d == -3) { /* accepted, or refused on the queue's own scratch channel */
        char e2[256];
        amqp_channel_close(conn->st, CHECK_CHANNEL, AMQP_REPLY_SUCCESS);
        if (broker_conn_check(conn, "channel.close (route check)", e2, sizeof(e2)) < 0)
            return -2;
        return d == 0 ? 0 : -1;
    }
    /* Refused: the broker closed the scratch channel (answer it), or the connection. */
    r = amqp_get_rpc_reply(conn->st);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_ok_t ok;
        if (amqp_send_method(conn->st, CHECK_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) ==
            AMQP_STATUS_OK)
            return -1;
    }
    return -2;
}

int cons_declare_route(struct broker_conn *conn, const struct config_route *rc, const char *holder,
                       int ingress_held, int64_t stream_next, char *err, size_t len)
{
    if (declare_all(conn, CONSUMER_CHANNEL, rc, err, len) < 0)
        return -1;
    if (!ingress_held && cons_consume_ingress(conn, rc, stream_next, err, len) < 0)
        return -1;
    if (rc->share_keys && declare_key_events(conn, rc, holder, err, len) < 0)
        return -1;
    return 0;
}

void consumer_key_names(const struct config_route *rc, const char *holder, char *ex,
                        size_t exlen, char *q, size_t qlen)
{
    snprintf(ex, exlen, "%s.keys", rc->ingress_exchange);
    snprintf(q, qlen, "%s.keys.%s", rc->ingress_queue, holder);
}
