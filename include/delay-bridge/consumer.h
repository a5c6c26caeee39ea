/*
 * consumer.h -- the ingress side: one connection per vhost, one consumer per route.
 *
 * The consumer connects (trying the configured URIs in turn, with backoff),
 * declares each route's ingress exchange and queue, consumes them on one
 * channel with manual acks and the route's prefetch, assembles each
 * delivery from its method, header and body frames, and hands the finished
 * delivery to the owner's callback. It acks only what the owner says is
 * durable; it never decides anything about a message.
 *
 * Delivery tags belong to one connection: every delivery carries the
 * connection's generation, and an ack or reject for an older generation is
 * dropped (those deliveries went back to their queue when it closed).
 *
 * A stream ingress (queue_type "stream") differs in three ways. It is
 * consumed from a place, not a queue's head: consumer_set_stream_next()
 * says where before the first connect, and every (re)consume starts at the
 * offset after the last delivery handed over (deliveries below it, which a
 * stream sends from the start of the chunk holding the place, are acked as
 * credit and never handed over; those below the end of a commit a crash
 * may have cut short come as redelivered). Acks are credit only: the stream keeps
 * its messages until retention removes them; where the bridge is, is its
 * own business (consumer_stream_next(), kept by the owner beside the log).
 * And nothing can be rejected: consumer_reject() of a stream delivery acks
 * it (it stays in the stream, skipped).
 *
 * Not thread-safe; it runs on the owner's libev loop and owns one ev_io.
 */
#ifndef DB_CONSUMER_H
#define DB_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "delay-bridge/config.h"
#include "delay-bridge/xdelay.h"

struct consumer;

/* A complete delivery. Everything it points to is valid during the callback only. */
struct delivery {
    int route;          /* index into cfg->routes */
    int key_event;      /* from the route's key-event queue (share_keys), not its ingress */
    uint32_t gen;       /* connection generation */
    uint64_t tag;       /* delivery tag on that connection */
    int redelivered;
    const char *exchange;
    size_t exchange_len;
    const char *routing_key;
    size_t routing_key_len;
    const uint8_t *body;                  /* NULL when too_big */
    uint64_t body_size;
    int too_big;                          /* body_size > wal.max_message_bytes: not kept */
    int64_t stream_offset;                /* a stream ingress: the message's offset (from the
                                             broker's x-stream-offset header); else -1 */

    /*
     * What the AMQP headers say, read here so that the owner sees no
     * rabbitmq-c type (not filled when too_big). A header is 0 when absent,
     * 1 when a string (pointer and length set), -1 when of another type.
     */
    int cancel;                           /* x-delay-cancel */
    const char *cancel_key;
    size_t cancel_key_len;
    int key;                              /* x-delay-key */
    const char *key_str;
    size_t key_len;
    enum xdelay_status xdelay;            /* x-delay, judged against the route's max_delay_ms */
    uint64_t delay_ms;                    /* from now_ms (delay_from "broker": what remains) */
    uint64_t now_ms;                      /* the clock delay_ms counts from: the due time is
                                             now_ms + delay_ms, exactly what x-delay-until
                                             or the stamp asked for */
    int unstamped;                        /* delay_from "broker", no timestamp_in_ms: from now */
    /*
     * A retry route (routes[].retry, retry.h): the queue the message was
     * dead-lettered from (NULL: none named; it becomes the record's routing
     * key), the attempt that failed, and whether a drain handed it over
     * mid-delay (xdelay and delay_ms are then its x-delay's, what remained).
 * A queue the route does not admit is parked, and counted under the label
 * "_not_admitted", never its claimed name (a publisher's choice).
     * Otherwise xdelay says what retry_judge() decided: a delay or a park.
     */
    const char *retry_queue;
    size_t retry_queue_len;
    uint32_t retry_failed;
    int retry_handback;  /* a drain's hand-back the broker's user-id check vouches for */
    int retry_admitted;  /* retry_queue is one the route sends back to (retry_admits) */
    int bridge_marked;   /* has x-delay-bridge-id: a bridge's republish (a delayed_exchanges
                            route refuses it: it came back, config_delayed.c) */
    const uint8_t *props;                 /* the properties AMQP-encoded, without the */
    int props_len;                        /* broker's x-delivery-count; < 0: cannot encode */
    /* key_event: the event's headers (bridge_keys.c); ok 0 when one is missing or mistyped */
    struct {
        int ok;
        const char *kind, *key, *origin;
        size_t kind_len, key_len, origin_len;
        int64_t at;
    } ev;
};

struct consumer_ops {
    /* A delivery is complete. The callback may ack, reject or stop the consumer. */
    void (*delivery)(void *arg, const struct delivery *d);
    /* The connection came up (up = 1) or went down (0). */
    void (*state)(void *arg, int up);
    void *arg;
    /*
     * Connection generations start after this one: an owner with several
     * consumers (one per vhost) gives each its own range, so that a
     * delivery's gen names its consumer as well as its connection.
     */
    uint32_t gen_base;
};

/*
 * A consumer for the routes of one vhost: it logs in to vhost (NULL or "":
 * the broker URI's) and reads no route until consumer_route_add().
 */
struct consumer *consumer_new(struct ev_loop *loop, const struct config *cfg, const char *vhost,
                              const struct consumer_ops *ops);

/*
 * Routes at run time. consumer_route_add(): read route i (an index of
 * cfg->routes) from now on -- declared and consumed at once when connected
 * (tried first on a scratch channel: a route the broker refuses does not
 * consume, is logged and tried again with backoff, and never closes the
 * channel the other routes are consumed on; consumer_route_failed() says
 * so), else with the next connection. consumer_route_remove(): basic.cancel
 * of its consumers; deliveries already sent still arrive, with its index.
 */
void consumer_route_add(struct consumer *c, int route);
void consumer_route_remove(struct consumer *c, int route);
int consumer_route_failed(const struct consumer *c, int route);
/* Abrupt close (unacked deliveries go back to their queues) and free. NULL is fine. */
void consumer_free(struct consumer *c);

/*
 * Once per loop turn: connect when the backoff allows, and hand over
 * deliveries rabbitmq-c has already buffered (the socket may be quiet).
 * now: clock_mono_ms() (its backoff and timeouts are durations).
 */
void consumer_turn(struct consumer *c, uint64_t now);

/* Ack every delivery of generation gen up to and including tag (basic.ack multiple). */
void consumer_ack(struct consumer *c, uint32_t gen, uint64_t tag);
/*
 * Settle one delivery of route alone (not multiple): ack it (ack 1: one
 * that needs nothing more, while deliveries below it wait), or reject it
 * without requeue (ack 0: dead-lettered by the queue's own policy, if any;
 * a stream cannot reject: the delivery is acked, credit, and stays in the
 * stream, skipped).
 */
void consumer_settle(struct consumer *c, int route, uint32_t gen, uint64_t tag, int ack);
static inline void consumer_reject(struct consumer *c, int route, uint32_t gen, uint64_t tag)
{
    consumer_settle(c, route, gen, tag, 0);
}

/*
 * A stream ingress's place: the offset the next consume of route starts at
 * (-1: the stream's first retained message). Set it before the first
 * connect; it moves past every delivery handed over. Deliveries below upto
 * (the end of a commit a crash may have cut short, ingress_off.h) are
 * handed over as redelivered, so that the owner recognises those it holds.
 */
void consumer_set_stream_next(struct consumer *c, int route, int64_t next, int64_t upto);
int64_t consumer_stream_next(const struct consumer *c, int route);

/*
 * Stop consuming (a drain): close the connection politely -- unacked
 * deliveries go back to their queues, safe in the broker, for the other
 * bridges -- and do not reconnect until consumer_resume().
 */
void consumer_pause(struct consumer *c);
void consumer_resume(struct consumer *c);

/*
 * Stop taking new messages for a while (the log's disk is full): cancel
 * the routes' ingress consumers but keep the connection, the deliveries
 * already taken (unacked, until a commit gets space) and the key-event
 * consumers (share_keys: other bridges' replacements and cancels are still
 * applied). consumer_release_ingress() consumes again.
 */
void consumer_hold_ingress(struct consumer *c);
void consumer_release_ingress(struct consumer *c);

/*
 * The same for one route (its max_held is reached, or the bridge's):
 * basic.cancel of route's ingress consumer, the connection and the rest
 * kept; consumer_release_route() consumes it again. Independent of the
 * hold above -- a route is consumed when neither holds it -- and kept
 * across reconnects and a route removed and added again. Before the first
 * connect it only marks the route: the connect then does not consume it.
 */
void consumer_hold_route(struct consumer *c, int route);
void consumer_release_route(struct consumer *c, int route);

/*
 * routes[].share_keys: the route's key-event exchange (INGRESS_EXCHANGE.keys,
 * fanout) and this bridge's queue on it (INGRESS_QUEUE.keys.HOLDER, HOLDER
 * being config_key_holder(): the instance, or a replicated log's stream),
 * declared with the route. consumer_publish_key_event() publishes an empty
 * persistent message to the exchange whose headers say kind ("replace" or
 * "cancel"), key, origin (the sender's holder name) and at (ms since the
 * epoch), on the consumer's channel: ahead of any ack the caller sends
 * after it, so a delivery that was acked had its event reach the broker.
 * -1 when not connected.
 */
void consumer_key_names(const struct config_route *rc, const char *holder, char *ex,
                        size_t exlen, char *q, size_t qlen);
int consumer_publish_key_event(struct consumer *c, int route, const char *kind, const char *key,
                               size_t key_len, const char *origin, uint64_t at);

/* Stop consuming for good: close the connection politely (shutdown). */
void consumer_stop(struct consumer *c);
/* Close abruptly now (fatal error): nothing more is acked. */
void consumer_abort(struct consumer *c);

int consumer_up(const struct consumer *c);
/* The connection's generation: what deliveries from it carry in d->gen. */
uint32_t consumer_gen(const struct consumer *c);
/* Frames are waiting in rabbitmq-c's buffer: the loop must not sleep. */
int consumer_busy(const struct consumer *c);
/*
 * How long from now (clock_mono_ms()) until consumer_turn() next has
 * something to do, in ms: 0 at once, UINT64_MAX if nothing.
 */
uint64_t consumer_wait_ms(const struct consumer *c, uint64_t now);

#endif
