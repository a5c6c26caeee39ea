/*
 * publisher.h -- the egress side: one connection per vhost, a confirm channel per route.
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
 * A broker close is answered only through broker_conn_answer_close().
 *
 * connection.blocked (a broker resource alarm) stops publishing until
 * connection.unblocked; the consumer side and the loop keep running.
 *
 * Writes never block the loop on a plain TCP connection (amqp://): sends
 * are encoded into the publisher's output buffer and written together,
 * without blocking, by publisher_flush() (an EV_WRITE watcher finishes what
 * the kernel did not take). publisher_ready() says no while more than about
 * 1 MiB is unwritten, so a broker that stops reading stops publishing only.
 * The publisher keeps the connection's heartbeats itself there (it sends
 * them, and drops a broker it has heard nothing from for twice the
 * interval: "missed heartbeats"). On TLS (amqps://) rabbitmq-c writes every
 * publish itself, with blocking writes, as it keeps the heartbeats: a
 * broker that stops reading without connection.blocked stalls the loop
 * there. Channel set-up (channel.open, confirm.select, the passive
 * declares) never waits on the loop: each answer is taken as it comes, and
 * one missing for connect_timeout_ms drops the connection. Connecting and
 * logging in block, bounded by connect_timeout_ms.
 *
 * Not thread-safe; it runs on the owner's libev loop and owns two ev_io
 * (readable, writable) on the connection's socket.
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

/*
 * A publisher for the routes of one vhost: it logs in to vhost (NULL or "":
 * the broker URI's) and serves no route until publisher_route_add(route)
 * (an index of cfg->routes; at run time too: its channel opens on the next
 * turn). A route is served until the publisher is freed.
 */
struct publisher *publisher_new(struct ev_loop *loop, const struct config *cfg, const char *vhost,
                                const struct publisher_ops *ops);
void publisher_route_add(struct publisher *p, int route);
/* Abrupt close and free; unconfirmed publishes are simply forgotten. NULL is fine. */
void publisher_free(struct publisher *p);

/*
 * Once per loop turn: connect when the backoff allows, reopen route
 * channels whose retry time has come, read buffered confirms.
 * now: clock_mono_ms() (its backoffs and timeouts are durations).
 */
void publisher_turn(struct publisher *p, uint64_t now);

/*
 * May route publish now? (connected, not blocked, channel open, window not
 * full, output buffer below its high-water mark)
 */
int publisher_ready(const struct publisher *p, int route);

/*
 * Publish message a of route as o says (msgrec_to_publish), mandatory, with
 * ref reported back in its confirm. A message diverted to the unroutable
 * exchange gets headers x-delay-unroutable (why), x-original-exchange and
 * x-original-routing-key. On plain TCP the publish is only encoded (its
 * body copied) into the output buffer: publisher_flush() writes it. Returns
 * 0, or -1 when the connection went down (a TLS write failed, or the
 * publish does not encode, such as properties larger than a frame):
 * route_lost has then been reported for every route, this publish included.
 * Returns 1 when nothing was sent: a delayed_exchanges route's message for
 * an exchange a publish lately found gone or refused, reported returned
 * (confirmed with returned = 1) at once (publisher_gone.c).
 */
int publisher_send(struct publisher *p, int route, uint32_t ref, const struct walrec_add *a,
                   const struct msgrec_out *o);

/*
 * After a burst of sends: write the output buffer (one nonblocking send;
 * what the kernel does not take, the EV_WRITE watcher writes later), then
 * read the confirms the broker has sent. A failed write loses the
 * connection: route_lost is reported for every route.
 */
void publisher_flush(struct publisher *p);

/* Unconfirmed publishes, all routes. */
size_t publisher_inflight(const struct publisher *p);

/*
 * Close the connection politely (at the end of a shutdown): connection.close
 * and its close-ok, bounded by connect_timeout_ms; abruptly when unwritten
 * bytes remain (the broker stopped reading).
 */
void publisher_close(struct publisher *p);

int publisher_up(const struct publisher *p);
int publisher_blocked(const struct publisher *p);
int publisher_busy(const struct publisher *p);
/*
 * How long from now (clock_mono_ms()) until publisher_turn() next has
 * something to do, in ms: 0 at once, UINT64_MAX if nothing.
 */
uint64_t publisher_wait_ms(const struct publisher *p, uint64_t now);

/* Fill the publisher's part of a route's figures. */
void publisher_route_stats(const struct publisher *p, int route, struct db_route_stats *s);

#endif
