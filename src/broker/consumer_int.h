/*
 * consumer_int.h -- what the consumer's files share (internal: only
 * consumer*.c include it; consumer.h is the contract).
 *
 *   consumer.c          the connection, deliveries and their hand-over,
 *                       acks, key events, the owner's calls
 *   consumer_declare.c  what a new connection declares and consumes, route
 *                       by route: exchanges, queues, bindings, qos and
 *                       basic.consume
 *   consumer_routes.c   routes added and removed at run time, and the
 *                       disk-full hold of every route's ingress
 *   consumer_core.c     the floor both of those call: the connection lost,
 *                       the key-event channel, a route started, refused or
 *                       accepted
 *
 * Calls go down this list and never back: consumer.c and
 * consumer_routes.c call consumer_core.c and consumer_declare.c, never each
 * other; consumer_core.c calls consumer_declare.c alone;
 * consumer_declare.c works on the connection and the route it is given,
 * knows nothing of struct consumer and calls nothing of the others.
 */
#ifndef DB_CONSUMER_INT_H
#define DB_CONSUMER_INT_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "delay-bridge/config.h"
#include "delay-bridge/broker_conn.h"

#include <ev.h>

#include "base/backoff.h"
#include "delay-bridge/consumer.h"

#define EVENT_WINDOW 4096     /* events in flight at most (then acks wait, and so do deliveries) */

/* A delivery being assembled from its frames. */
struct assembly {
    int active;
    struct delivery d;
    char exchange[256], routing_key[256];
    amqp_basic_properties_t *props; /* in the connection's decoding pool */
    uint64_t got;
    uint8_t *body;
    size_t body_cap;
};

struct consumer {
    struct ev_loop *loop;
    const struct config *cfg;
    struct consumer_ops ops;
    struct broker_conn conn;
    ev_io io;
    int up, stopped, paused;
    int ingress_held; /* consumer_hold_ingress(): the routes' ingress consumers cancelled */
    uint32_t gen;            /* bumped at every connect */
    uint64_t acked_tag;      /* highest tag acked on this connection */
    /* key events on EVENTS_CHANNEL: sent, confirmed (all up to), and acks waiting on them */
    int events_on;           /* the channel is open in confirm mode */
    uint64_t ev_sent, ev_confirmed;
    uint64_t ev_lost;        /* failpoint keys.event_unconfirmed: never confirmed; else 0 */
    uint64_t ev_progress_ms; /* last time ev_confirmed moved, or the first event went out
                                (monotonic ms) */
    uint8_t ev_done[EVENT_WINDOW]; /* confirmed out of order, above ev_confirmed */
    struct {
        uint64_t tag, need;  /* ack tag once ev_confirmed >= need; tag 0 = empty */
    } held[2];
    unsigned uri_next; /* broker_conn_open_next()'s place in broker.uris */
    struct backoff bo;
    uint64_t last_poll_ms; /* monotonic */
    struct assembly as;
    amqp_basic_properties_t no_props;
    uint8_t *props_buf; /* the current delivery's properties, AMQP-encoded */
    size_t props_cap;
    amqp_table_entry_t *hdr_scratch; /* the headers intake keeps (broker_msg_read) */
    size_t hdr_cap;
    int64_t *stream_next; /* per route: a stream ingress's next offset, -1 = first */
    int64_t *stream_upto; /* per route: below this, a delivery may be logged already */
    char vhost[CONFIG_NAME_MAX + 1]; /* logged in to this vhost; "" = the URI's */
    /*
     * Per route index: on = this consumer reads the route (consumer_route_add);
     * held = consumer_hold_route(), its ingress not consumed (the declares are made);
     * failed = added while connected and refused by the broker (its declare
     * tried on a scratch channel, cons_check_route): not consumed, tried
     * again at retry_at (monotonic) and at every connect, alone, so that it
     * never takes the other routes down with it.
     */
    struct mine {
        uint8_t on, failed;
        uint8_t held; /* consumer_hold_route(): its ingress not consumed */
        uint64_t retry_at;
        struct backoff bo;
    } *mine;
};


/* consumer_core.c: what consumer.c and consumer_routes.c both call (neither calls the other). */
/* The connection is lost (why: for the log); reconnect after a pause. */
void cons_conn_down(struct consumer *c, const char *why);
/* A new connection: no key event sent, none waiting (unacked deliveries come back). */
void cons_events_reset(struct consumer *c);
/* The key-event channel in confirm mode, if not open yet. 0, or -1 with err. */
int cons_events_open(struct consumer *c, char *err, size_t len);
/* Route i's declares were refused (why): not consumed, tried again with backoff. */
void cons_route_refused(struct consumer *c, int i, const char *why);
/* ... accepted: consumed from now on. */
void cons_route_accepted(struct consumer *c, int i);
/* Declare and consume route i on the open connection (checked on a scratch channel first). */
void cons_route_start(struct consumer *c, int i);

#define CONSUMER_CHANNEL 1 /* declares, the routes' consumers, acks */
#define EVENTS_CHANNEL 2   /* key events, confirm mode */
#define DECLARE_CHANNEL 3  /* ingress declares an old queue may refuse (broker_conn.h) */
#define CHECK_CHANNEL 4    /* a route added at run time, declared here first (cons_check_route) */
#define CHECK_DECLARE_CHANNEL 5 /* ... and its queue's refusable arguments */
#define TAG_PREFIX "delay-bridge:"           /* + route: a route's ingress consumer */
#define KEYS_TAG_PREFIX "delay-bridge-keys:" /* + route: its key-event consumer */

/* Route i's ingress is not consumed now: every route's (the disk gate) or its own is held. */
static inline int cons_ingress_off(const struct consumer *c, int i)
{
    return c->ingress_held || c->mine[i].held;
}

/* The consumer tag of the route's ingress consumer: "delay-bridge:<route>"; in buf. */
amqp_bytes_t cons_ingress_tag(const struct config_route *rc, char *buf, size_t n);

/*
 * basic.consume of rc's ingress queue on CONSUMER_CHANNEL; a stream from
 * offset next (-1: its first message). 0, or -1 with the reason in err.
 */
int cons_consume_ingress(struct broker_conn *conn, const struct config_route *rc, int64_t next,
                         char *err, size_t len);

/*
 * A route added while the connection is up: everything it declares, tried
 * first on a scratch channel (CHECK_CHANNEL), so that a refusal (406: its
 * queue exists with other arguments; 403; 404) closes that channel only,
 * never CONSUMER_CHANNEL and the other routes' consumers on it. Nothing is
 * consumed. 0: accepted (the real declare cannot be refused now); -1:
 * refused, the reason in err, the connection fine; -2: the connection is
 * lost.
 */
int cons_check_route(struct broker_conn *conn, const struct config_route *rc, char *err,
                     size_t len);

/*
 * Everything route rc needs on a new connection (consumer_declare.c's
 * essay), consuming its ingress queue from stream_next unless
 * ingress_held. holder: config_key_holder(), for the key-event queue.
 * 0, or -1 with the reason in err.
 */
int cons_declare_route(struct broker_conn *conn, const struct config_route *rc, const char *holder,
                       int ingress_held, int64_t stream_next, char *err, size_t len);

#endif
