/*
 * consumer_core.c -- the consumer's floor: the moves consumer.c and
 * consumer_routes.c both make, so that neither calls the other.
 *
 * The connection lost (cons_conn_down: closed, the owner told, a reconnect
 * after the backoff), the key-event channel opened in confirm mode and its
 * counts reset for a new connection, and a route started on the open
 * connection: its declares tried on a scratch channel first
 * (cons_check_route), refused (tried again alone, with backoff) or
 * accepted (declared and consumed). consumer.c calls these from its
 * connect, its frames and its turn; consumer_routes.c from the routes
 * added, removed and held at run time. It calls consumer_declare.c and
 * nothing of either file.
 */
#include "consumer_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "delay-bridge/consumer.h"
#include "base/backoff.h"
#include "base/clock.h"
#include "base/log.h"

/* A new connection: nothing sent, nothing waiting (unacked deliveries come back). */
void cons_events_reset(struct consumer *c)
{
    c->events_on = 0;
    c->ev_sent = c->ev_confirmed = c->ev_lost = 0;
    memset(c->ev_done, 0, sizeof(c->ev_done));
    memset(c->held, 0, sizeof(c->held));
}

void cons_conn_down(struct consumer *c, const char *why)
{
    if (!c->conn.st)
        return;
    if (!c->stopped)
        log_warn("consume", "consumer connection lost", "reason=%s", LOG_QUOTE_STR(why));
    ev_io_stop(c->loop, &c->io);
    broker_conn_close(&c->conn, 0);
    c->as.active = 0;
    c->acked_tag = 0;
    cons_events_reset(c);
    backoff_fail(&c->bo, clock_mono_ms()); /* reconnect after a pause; "lost" was logged */
    if (c->up) {
        c->up = 0;
        c->ops.state(c->ops.arg, 0);
    }
}

/* The key-event channel, in confirm mode: before any delivery can cause an event. */
int cons_events_open(struct consumer *c, char *err, size_t len)
{
    if (c->events_on)
        return 0;
    amqp_channel_open(c->conn.st, EVENTS_CHANNEL);
    if (broker_conn_check(&c->conn, "channel.open (key events)", err, len) < 0)
        return -1;
    amqp_confirm_select(c->conn.st, EVENTS_CHANNEL);
    if (broker_conn_check(&c->conn, "confirm.select (key events)", err, len) < 0)
        return -1;
    c->events_on = 1;
    return 0;
}

void cons_route_refused(struct consumer *c, int i, const char *why)
{
    struct mine *m = &c->mine[i];
    struct backoff_step st = backoff_fail(&m->bo, clock_mono_ms());

    m->failed = 1;
    m->retry_at = clock_mono_ms() + st.retry_in_ms;
    if (st.log_events)
        log_error("consume", "the broker refused a route's exchanges or queues: the route does "
                  "not consume; the others do; tried again",
                  "route=%s error=%s retry_in_ms=%" PRIu64 " attempts=%" PRIu64,
                  c->cfg->routes[i].name, LOG_QUOTE_STR(why), st.retry_in_ms, st.log_events);
}

void cons_route_accepted(struct consumer *c, int i)
{
    if (c->mine[i].failed)
        log_info("consume", "a refused route's declares were accepted: consuming",
                 "route=%s", c->cfg->routes[i].name);
    c->mine[i].failed = 0;
    backoff_reset(&c->mine[i].bo);
}

/*
 * A route this consumer reads from now on. Connected: its declares are
 * tried on a scratch channel first (cons_check_route), then made on the
 * consumer channel and its ingress consumed (unless the ingress is held);
 * refused, it is tried again with backoff, alone. Not connected: with the
 * next connection.
 */
void cons_route_start(struct consumer *c, int i)
{
    const struct config_route *rc = &c->cfg->routes[i];
    char err[600];
    int r;

    if (rc->share_keys && cons_events_open(c, err, sizeof(err)) < 0) {
        cons_conn_down(c, err);
        return;
    }
    r = cons_check_route(&c->conn, rc, err, sizeof(err));
    if (r == -2) {
        cons_conn_down(c, err);
        return;
    }
    if (r < 0) {
        cons_route_refused(c, i, err);
        return;
    }
    cons_route_accepted(c, i);
    if (cons_declare_route(&c->conn, rc, config_key_holder(c->cfg), cons_ingress_off(c, i),
                           c->stream_next[i], err, sizeof(err)) < 0) {
        cons_conn_down(c, err);
        return;
    }
    log_info("consume", "route consuming", "route=%s queue=\"%s\"", rc->name, rc->ingress_queue);
}
