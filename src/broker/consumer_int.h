/*
 * consumer_int.h -- what the consumer's files share (internal: only
 * consumer*.c include it; consumer.h is the contract).
 *
 *   consumer.c          the connection, deliveries and their hand-over,
 *                       acks, key events, the owner's calls
 *   consumer_declare.c  what a new connection declares and consumes, route
 *                       by route: exchanges, queues, bindings, qos and
 *                       basic.consume
 *
 * consumer_declare.c works on the connection and the route it is given; it
 * knows nothing of struct consumer and calls nothing in consumer.c.
 */
#ifndef DB_CONSUMER_INT_H
#define DB_CONSUMER_INT_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "delay-bridge/config.h"
#include "amqp_conn.h"

#define CONSUMER_CHANNEL 1 /* declares, the routes' consumers, acks */
#define EVENTS_CHANNEL 2   /* key events, confirm mode */
#define DECLARE_CHANNEL 3  /* ingress declares an old queue may refuse (amqp_conn.h) */
#define CHECK_CHANNEL 4    /* a route added at run time, declared here first (cons_check_route) */
#define CHECK_DECLARE_CHANNEL 5 /* ... and its queue's refusable arguments */
#define TAG_PREFIX "delay-bridge:"           /* + route: a route's ingress consumer */
#define KEYS_TAG_PREFIX "delay-bridge-keys:" /* + route: its key-event consumer */

/* The consumer tag of the route's ingress consumer: "delay-bridge:<route>"; in buf. */
amqp_bytes_t cons_ingress_tag(const struct config_route *rc, char *buf, size_t n);

/*
 * basic.consume of rc's ingress queue on CONSUMER_CHANNEL; a stream from
 * offset next (-1: its first message). 0, or -1 with the reason in err.
 */
int cons_consume_ingress(struct amqp_conn *conn, const struct config_route *rc, int64_t next,
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
int cons_check_route(struct amqp_conn *conn, const struct config_route *rc, char *err, size_t len);

/*
 * Everything route rc needs on a new connection (consumer_declare.c's
 * essay), consuming its ingress queue from stream_next unless
 * ingress_held. holder: config_key_holder(), for the key-event queue.
 * 0, or -1 with the reason in err.
 */
int cons_declare_route(struct amqp_conn *conn, const struct config_route *rc, const char *holder,
                       int ingress_held, int64_t stream_next, char *err, size_t len);

#endif
