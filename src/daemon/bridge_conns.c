/*
 * bridge_conns.c -- the bridge's connections to the broker: one consumer
 * and one publisher per vhost in use, and which routes each serves.
 *
 * A connection logs in to one vhost, so a bridge whose routes name
 * several (routes[].vhost) keeps a pair per vhost: struct vconn. A route
 * is attached to its vhost's pair once (bridge_route_attach: at start,
 * and when a reload or the route API adds it) and stays attached for the
 * life of the process -- a route removed at run time keeps its publisher
 * channel to publish what it holds, and its index (route_vc) never moves.
 *
 * Acks follow the consumer. Delivery tags belong to one connection, so
 * each pair keeps its own "last delivery appended" and "last one the
 * running commit covers" (bridge_commit.c acks each pair up to its own),
 * and each consumer numbers its connections in its own range of
 * generations (gen_base: the pair's index << 24), so that a delivery's
 * gen says which consumer, and which of its connections, it came from --
 * the stash and the ack path need nothing else to keep pairs apart.
 *
 * What the loop asks of "the consumer" or "the publisher" (turn, wait,
 * busy, up, hold, stop, ...) is asked of every pair here.
 *
 * Floor 0 of the bridge's files (bridge_int.h): it calls nothing of the
 * bridge; the callbacks the pairs report to are given in bridge.c.
 */
#include "bridge_int.h"

#include <string.h>

#include "base/log.h"
#include "base/xalloc.h"

#define GEN_SHIFT 24 /* a pair's generations: [k << 24, (k + 1) << 24) */

/* The vhost a route's pair logs in to: NULL for the URI's own. */
static const char *login_vhost(const struct bridge *b, const char *vhost)
{
    static const struct config_route none; /* vhost "": the URI's */

    return strcmp(vhost, config_route_vhost(b->cfg, &none)) ? vhost : NULL;
}

static struct vconn *pair_for(struct bridge *b, const char *vhost)
{
    struct consumer_ops co = b->cops;
    struct vconn *v;

    for (int k = 0; k < b->nvc; k++)
        if (!strcmp(b->vc[k].vhost, vhost))
            return &b->vc[k];
    if (b->nvc == BRIDGE_MAX_VHOSTS)
        return NULL;
    v = &b->vc[b->nvc];
    memset(v, 0, sizeof(*v));
    snprintf(v->vhost, sizeof(v->vhost), "%s", vhost);
    co.gen_base = (uint32_t)b->nvc << GEN_SHIFT;
    v->cons = consumer_new(b->loop, b->cfg, login_vhost(b, vhost), &co);
    v->pub = publisher_new(b->loop, b->cfg, login_vhost(b, vhost), &b->pops);
    v->logged_gen = v->commit_gen = co.gen_base;
    b->nvc++;
    if (b->nvc > 1)
        log_info("bridge", "a connection pair for another vhost", "vhost=\"%s\" pairs=%d", vhost,
                 b->nvc);
    return v;
}

int bridge_route_attach(struct bridge *b, int route, int consume)
{
    const struct config_route *rc = &b->cfg->routes[route];
    struct vconn *v = pair_for(b, config_route_vhost(b->cfg, rc));

    if (!v) {
        log_error("bridge", "too many vhosts: the route is not served", "route=%s max=%d",
                  rc->name, BRIDGE_MAX_VHOSTS);
        return -1;
    }
    b->route_vc[route] = (int16_t)(v - b->vc);
    if (consume)
        consumer_route_add(v->cons, route);
    publisher_route_add(v->pub, route);
    return 0;
}

void bridge_logged(struct bridge *b, const struct delivery *d)
{
    struct vconn *v = bridge_vc(b, d->route);

    v->logged_gen = d->gen;
    v->logged_tag = d->tag;
}

void bridge_conns_turn(struct bridge *b, uint64_t mono)
{
    for (int k = 0; k < b->nvc; k++) {
        consumer_turn(b->vc[k].cons, mono);
        publisher_turn(b->vc[k].pub, mono);
    }
}

/*
 * A pair whose routes were all removed (retired) still connects, to publish
 * what they hold, but no longer counts for "up": a route put in a vhost that
 * does not exist, then deleted, must not leave the bridge unready for good.
 */
static int counts(const struct bridge *b, int k)
{
    for (int i = 0; i < b->cfg->nroutes; i++)
        if (b->route_vc[i] == k && !b->cfg->routes[i].retired)
            return 1;
    return 0;
}

int bridge_conns_up(const struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++)
        if (counts(b, k) && (!consumer_up(b->vc[k].cons) || !publisher_up(b->vc[k].pub)))
            return 0;
    return b->nvc > 0;
}

int bridge_consumers_up(const struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++)
        if (counts(b, k) && !consumer_up(b->vc[k].cons))
            return 0;
    return b->nvc > 0;
}

uint64_t bridge_conns_wait_ms(const struct bridge *b, uint64_t mono)
{
    uint64_t w = UINT64_MAX, x;

    for (int k = 0; k < b->nvc; k++) {
        if ((x = consumer_wait_ms(b->vc[k].cons, mono)) < w)
            w = x;
        if ((x = publisher_wait_ms(b->vc[k].pub, mono)) < w)
            w = x;
    }
    return w;
}

int bridge_conns_busy(const struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++)
        if (consumer_busy(b->vc[k].cons) || publisher_busy(b->vc[k].pub))
            return 1;
    return 0;
}

void bridge_consumers(struct bridge *b, enum bridge_consumers_do what)
{
    for (int k = 0; k < b->nvc; k++) {
        struct consumer *c = b->vc[k].cons;
        switch (what) {
        case CONSUMERS_HOLD: consumer_hold_ingress(c); break;
        case CONSUMERS_RELEASE: consumer_release_ingress(c); break;
        case CONSUMERS_PAUSE: consumer_pause(c); break;
        case CONSUMERS_STOP: consumer_stop(c); break;
        case CONSUMERS_ABORT: consumer_abort(c); break;
        }
    }
}

size_t bridge_pubs_inflight(const struct bridge *b)
{
    size_t n = 0;

    for (int k = 0; k < b->nvc; k++)
        n += publisher_inflight(b->vc[k].pub);
    return n;
}

int bridge_pubs_up(const struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++)
        if (counts(b, k) && !publisher_up(b->vc[k].pub))
            return 0;
    return b->nvc > 0;
}

void bridge_pubs_flush(struct bridge *b, int force)
{
    for (int k = 0; k < b->nvc; k++)
        if (force || publisher_busy(b->vc[k].pub))
            publisher_flush(b->vc[k].pub);
}

void bridge_pubs_close(struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++)
        publisher_close(b->vc[k].pub);
}

void bridge_conns_free(struct bridge *b)
{
    for (int k = 0; k < b->nvc; k++) {
        consumer_free(b->vc[k].cons);
        publisher_free(b->vc[k].pub);
    }
    b->nvc = 0;
}

