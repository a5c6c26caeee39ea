/*
 * consumer_routes.c -- which routes a consumer reads, and when: routes
 * added and removed at run time, and the disk-full hold of every route's
 * ingress.
 *
 * A route added while the connection is up is started as at a connect
 * (cons_route_start, consumer_core.c), declared on a scratch channel
 * first (cons_check_route, consumer_declare.c): a broker that
 * refuses it -- a queue of another type, a user without permission --
 * closes that channel only, never the one the other routes are consumed
 * on; the route is marked failed and tried again, alone, with backoff
 * (consumer_turn) and at every connect. Once accepted, the same declares
 * run on the consumer channel (they cannot be refused now) and the
 * ingress is consumed, unless the ingress is held. A route removed is a
 * basic.cancel of its consumers: deliveries already sent still arrive,
 * named by its consumer tag, and are the owner's like any other.
 *
 * The hold (consumer_hold_ingress) cancels every route's ingress consumer
 * and keeps the connection, so that deliveries already taken stay unacked
 * in the log's batch and key events still flow; the release consumes again.
 * A route's own hold (consumer_hold_route: its max_held) does the same for
 * that route alone; an ingress is consumed when neither holds it
 * (cons_ingress_off), so each cancels or consumes only what the other
 * does not already hold.
 *
 * It works on struct consumer (consumer_int.h) and calls consumer_core.c
 * (cons_conn_down() when the connection is lost, cons_route_start() for a
 * route added) and consumer_declare.c; nothing in consumer.c, which calls
 * nothing here either.
 */
#include "consumer_int.h"

#include <stdio.h>
#include <string.h>

#include "delay-bridge/consumer.h"
#include "base/backoff.h"

/*
 * The disk-full pause. basic.cancel of each route's ingress consumer, on
 * the open connection: the key-event consumers go on (a replacement or a
 * cancel another bridge takes meanwhile is applied here at once, and acked
 * with the next commit that gets space), and the deliveries already taken
 * stay unacked on this channel, waiting in the log's batch -- they are not
 * handed back to the broker, so no other bridge logs them a second time.
 * Deliveries the broker sent before its cancel-ok are taken like any other.
 * A connection lost meanwhile reconnects without the ingress consumers.
 * On a failed cancel the connection is closed: the old pause.
 */
void consumer_hold_ingress(struct consumer *c)
{
    char err[512], tag[300];

    if (c->ingress_held || c->stopped)
        return;
    c->ingress_held = 1;
    if (!c->up)
        return;
    for (int i = 0; i < c->cfg->nroutes; i++) {
        if (!c->mine[i].on || c->mine[i].failed || c->mine[i].held)
            continue;
        amqp_basic_cancel(c->conn.st, CONSUMER_CHANNEL,
                          cons_ingress_tag(&c->cfg->routes[i], tag, sizeof(tag)));
        if (broker_conn_check(&c->conn, "basic.cancel", err, sizeof(err)) < 0) {
            cons_conn_down(c, err);
            return;
        }
    }
}

/* Space again: consume the ingress queues again (on reconnect, if down). */
void consumer_release_ingress(struct consumer *c)
{
    char err[512];

    if (!c->ingress_held)
        return;
    c->ingress_held = 0;
    if (!c->up || c->stopped || c->paused)
        return;
    for (int i = 0; i < c->cfg->nroutes; i++)
        if (c->mine[i].on && !c->mine[i].failed && !c->mine[i].held &&
            cons_consume_ingress(&c->conn, &c->cfg->routes[i], c->stream_next[i], err,
                                 sizeof(err)) < 0) {
            cons_conn_down(c, err);
            return;
        }
}

/* One route's hold (its max_held): basic.cancel of its ingress consumer alone. */
void consumer_hold_route(struct consumer *c, int route)
{
    struct mine *m = &c->mine[route];
    char err[512], tag[300];

    if (m->held)
        return;
    m->held = 1;
    if (!c->up || c->stopped || c->paused || c->ingress_held || !m->on || m->failed)
        return;
    amqp_basic_cancel(c->conn.st, CONSUMER_CHANNEL,
                      cons_ingress_tag(&c->cfg->routes[route], tag, sizeof(tag)));
    if (broker_conn_check(&c->conn, "basic.cancel", err, sizeof(err)) < 0)
        cons_conn_down(c, err);
}

void consumer_release_route(struct consumer *c, int route)
{
    struct mine *m = &c->mine[route];
    char err[512];

    if (!m->held)
        return;
    m->held = 0;
    if (!c->up || c->stopped || c->paused || c->ingress_held || !m->on || m->failed)
        return;
    if (cons_consume_ingress(&c->conn, &c->cfg->routes[route], c->stream_next[route], err,
                             sizeof(err)) < 0)
        cons_conn_down(c, err);
}

void consumer_route_add(struct consumer *c, int route)
{
    struct mine *m = &c->mine[route];

    if (m->on)
        return;
    m->on = 1;
    m->failed = 0;
    backoff_reset(&m->bo);
    if (c->up && !c->stopped && !c->paused)
        cons_route_start(c, route);
}

/*
 * A route this consumer no longer reads: basic.cancel of its ingress (and
 * key-event) consumer. Deliveries the broker sent before its cancel-ok
 * still come, with the route's tag, and are the owner's like any other;
 * those not yet acked go back to the queue with the connection, as ever.
 */
void consumer_route_remove(struct consumer *c, int route)
{
    const struct config_route *rc = &c->cfg->routes[route];
    struct mine *m = &c->mine[route];
    char err[512], tag[300];

    if (!m->on)
        return;
    m->on = 0;
    if (!c->up || m->failed) {
        m->failed = 0;
        return;
    }
    if (!cons_ingress_off(c, route)) {
        amqp_basic_cancel(c->conn.st, CONSUMER_CHANNEL, cons_ingress_tag(rc, tag, sizeof(tag)));
        if (broker_conn_check(&c->conn, "basic.cancel", err, sizeof(err)) < 0) {
            cons_conn_down(c, err);
            return;
        }
    }
    if (rc->share_keys) {
        snprintf(tag, sizeof(tag), KEYS_TAG_PREFIX "%s", rc->name);
        amqp_basic_cancel(c->conn.st, CONSUMER_CHANNEL, amqp_cstring_bytes(tag));
        if (broker_conn_check(&c->conn, "basic.cancel (key events)", err, sizeof(err)) < 0)
            cons_conn_down(c, err);
    }
}

int consumer_route_failed(const struct consumer *c, int route)
{
    return c->mine[route].on && c->mine[route].failed;
}
