/*
 * publisher.h -- the egress side: one connection, a confirm channel per route.
 *
 * The publisher connects (the configured URIs in turn, with backoff), opens
 * one channel per route in confirm mode and checks the route's exchanges
 * exist (passive declare), publishes what the owner hands it, and reports
 * what the broker said about each publish. It keeps the in-flight window:
 * per route, the confirm tags of unconfirmed publishes with the owner's
 * reference for each, at most the route's max_inflight.
 *
 * It decides nothing about a message's life; the owner (the bridge, for the
 * engine) is told through callbacks:
 *   confirmed(route, ref, ok, returned)
 *                              the broker acked (ok = 1) or nacked (0) it,
 *                              in tag order within a route; returned: it came
 *                              back first as basic.return (published with
 *                              mandatory, no queue was bound at the exchange);
 *   route_lost(route)          the route's channel closed (a broker error such
 *                              as 404 on a missing target exchange, or the
 *                              connection was lost): every publish on it that
 *                              was not confirmed is forgotten here and must be
 *                              published again. The channel is reopened with
 *                              backoff (publish_retry_*_ms), or with the
 *                              connection (reconnect_*_ms).
 * A broker close is answered only through amqp_conn_answer_close().
 *
 * connection.blocked (a broker resource alarm) stops publishing until
 * connection.unblocked; the consumer side and the loop keep running.
 * Not thread-safe; it runs on the owner's libev loop and owns one ev_io.
 */
#ifndef DB_PUBLISHER_H
#define DB_PUBLISHER_H

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "delay-bridge/config.h"
#include "delay-bridge/msgrec.h"
#include "delay-bridge/stats.h"
#include "delay-bridge/walrec.h"

struct publisher;

struct publisher_ops {
    void (*confirmed)(void *arg, int route, uint32_t ref, int ok, int returned);
    void (*route_lost)(void *arg, int route);
    void *arg;
};

struct publisher *publisher_new(struct ev_loop *loop, const struct config *cfg,
                                const struct publisher_ops *ops);
/* Abrupt close and free; unconfirmed publishes are simply forgotten. NULL is fine. */
void publisher_free(struct publisher *p);

/*
 * Once per loop turn: connect when the backoff allows, reopen route
 * channels whose retry time has come, read buffered confirms.
 */
void publisher_turn(struct publisher *p, uint64_t now);

/* May route publish now? (connected, not blocked, channel open, window not full) */
int publisher_ready(const struct publisher *p, int route);

/*
 * Publish message a of route as o says (msgrec_to_publish), mandatory, with
 * ref reported back in its confirm. A message diverted to the unroutable
 * exchange gets headers x-delay-unroutable (why), x-original-exchange and
 * x-original-routing-key. Returns 0, or -1 when the connection went down
 * while writing (route_lost has then been reported for every route, this
 * publish included).
 */
int publisher_send(struct publisher *p, int route, uint32_t ref, const struct walrec_add *a,
                   const struct msgrec_out *o);

/* Read confirms the broker has sent (after a burst of sends). */
void publisher_flush(struct publisher *p);

/* Unconfirmed publishes, all routes. */
size_t publisher_inflight(const struct publisher *p);

/* Close the connection politely (at the end of a shutdown). */
void publisher_close(struct publisher *p);

int publisher_up(const struct publisher *p);
int publisher_blocked(const struct publisher *p);
int publisher_busy(const struct publisher *p);
uint64_t publisher_next_wakeup(const struct publisher *p);

/* Fill the publisher's part of a route's figures. */
void publisher_route_stats(const struct publisher *p, int route, struct db_route_stats *s);

#endif
