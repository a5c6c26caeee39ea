/*
 * bridge_dx.c -- what the daemon refuses, counts and says of
 * delayed_exchanges routes (config_delayed.c).
 *
 * Such a route publishes each message to the exchange it was published
 * to. Three deliveries have no such exchange to go back to, and are
 * refused on intake -- rejected with requeue false, so the broker drops
 * them, or dead-letters them when the queue has a dead-letter policy --
 * counted (refused_total) and logged (a warning, at most one line per
 * route and reason every 10 s with the count since the last):
 *
 *   default_exchange   published straight into the ingress queue through
 *                      the default exchange "". Relayed, it would go to
 *                      the default exchange with its routing key (and its
 *                      CC header), that is into any queue the bridge may
 *                      write: a publisher allowed only this queue would
 *                      reach all of them (issue 39).
 *   ingress_exchange   published to the route's own ingress exchange (when
 *                      it names one): relayed, it would come straight back.
 *   looped             carries x-delay-bridge-id: a bridge's republish that
 *                      an exchange routed into the ingress queue again (an
 *                      exchange that is not an x-delayed-message one, bound
 *                      to the queue). Taken, it would go round for ever.
 *
 * A cancel (x-delay-cancel) appends nothing and relays nothing: it is
 * taken from any exchange, before these rules.
 *
 * Publishes are counted per (route, exchange) for /metrics and /stats. The
 * rows live in one array for all routes, in the order first seen, found by
 * a linear walk from the last one hit: a vhost has a few delayed
 * exchanges, and a route at most DB_EXCHANGES_MAX rows, past which they
 * share the row "_other". The names are exchanges that exist (a publish
 * to one that does not fails), and the metric writer escapes them.
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "delay-bridge/consumer.h"

struct dx_row {
    struct db_exchange_stats s;
    int route;
    char exchange[CONFIG_NAME_MAX + 1];
};

struct bridge_dx {
    struct dx_row *rows;
    int n, cap, last;
    int *per_route; /* rows so far, per route */
    struct db_exchange_stats *flat;
    int flat_cap;
};

/* s (n bytes) for a log field: '"', '\' and controls as '?' (the log escapes only controls). */
static void field(char *out, size_t outlen, const char *s, size_t n)
{
    size_t i;

    for (i = 0; i < n && i + 1 < outlen; i++)
        out[i] = s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20 ? '?' : s[i];
    out[i] = '\0';
}

int bridge_dx_refuse(struct bridge *b, const struct delivery *d)
{
    const struct config_route *rc = &b->cfg->routes[d->route];
    struct route_counts *n = &b->counts[d->route];
    static const char *const reasons[] = {"looped", "default_exchange", "ingress_exchange"};
    char ex[CONFIG_NAME_MAX + 1];
    uint64_t ev;
    int k;

    if (!rc->delayed_exchanges || d->key_event || d->cancel != 0)
        return 0;
    if (d->bridge_marked)
        k = 0;
    else if (d->exchange_len == 0)
        k = 1;
    else if (rc->ingress_exchange[0] && d->exchange_len == strlen(rc->ingress_exchange) &&
             memcmp(d->exchange, rc->ingress_exchange, d->exchange_len) == 0)
        k = 2;
    else
        return 0;
    n->refused++;
    if ((ev = log_ratelimit(&n->rl_refused[k], clock_mono_ms(), 10000))) {
        field(ex, sizeof(ex), d->exchange, d->exchange_len);
        log_warn("consume", "delayed_exchanges: a message with no exchange of its own to go "
                 "back to is not relayed: rejected (dropped, or dead-lettered by the queue's "
                 "policy)", "route=%s reason=%s exchange=\"%s\" events=%" PRIu64
                 " hint=\"publish delayed messages to an x-delayed-message exchange\"",
                 rc->name, reasons[k], ex, ev);
    }
    consumer_reject(bridge_cons(b, d->route), d->route, d->gen, d->tag);
    return 1;
}

void bridge_dx_refused_record(struct bridge *b, int route, const struct walrec_add *a)
{
    struct route_counts *n = &b->counts[route];
    char ex[CONFIG_NAME_MAX + 1];
    uint64_t ev;

    n->refused++;
    if ((ev = log_ratelimit(&n->rl_refused[3], clock_mono_ms(), 10000))) {
        field(ex, sizeof(ex), a->exchange, a->exchange_len);
        log_warn("publish", "delayed_exchanges: a held message whose exchange is the default "
                 "or the route's ingress exchange is not published: dropped",
                 "route=%s exchange=\"%s\" events=%" PRIu64, b->cfg->routes[route].name, ex, ev);
    }
}

static struct dx_row *row(struct bridge *b, int route, const char *exchange)
{
    struct bridge_dx *t = b->dx;
    const char *name = exchange;

    if (!t) {
        t = b->dx = xmalloc(sizeof(*t));
        memset(t, 0, sizeof(*t));
        t->per_route = xcalloc(CONFIG_MAX_ROUTES, sizeof(int)); /* routes added later too */
    }
    if (t->last < t->n && t->rows[t->last].route == route &&
        !strcmp(t->rows[t->last].exchange, name))
        return &t->rows[t->last];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < t->n; i++)
            if (t->rows[i].route == route && !strcmp(t->rows[i].exchange, name)) {
                t->last = i;
                return &t->rows[i];
            }
        if (t->per_route[route] < DB_EXCHANGES_MAX || pass)
            break;
        name = "_other"; /* full: look for it, or add it */
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->rows = xrealloc(t->rows, (size_t)t->cap * sizeof(*t->rows));
        for (int i = 0; i < t->n; i++) /* the strings moved with their rows */
            t->rows[i].s.exchange = t->rows[i].exchange;
    }
    struct dx_row *r = &t->rows[t->n];
    memset(r, 0, sizeof(*r));
    r->route = route;
    snprintf(r->exchange, sizeof(r->exchange), "%s", name);
    r->s.route = b->cfg->routes[route].name;
    r->s.exchange = r->exchange;
    t->per_route[route]++;
    t->last = t->n++;
    return r;
}

void bridge_dx_published(struct bridge *b, int route, const char *exchange)
{
    row(b, route, exchange)->s.published++;
}

const struct db_exchange_stats *bridge_dx_rows(struct bridge *b, int *n)
{
    struct bridge_dx *t = b->dx;

    *n = 0;
    if (!t)
        return NULL;
    if (t->flat_cap < t->n) {
        t->flat_cap = t->n;
        t->flat = xrealloc(t->flat, (size_t)t->flat_cap * sizeof(*t->flat));
    }
    for (int i = 0; i < t->n; i++)
        t->flat[i] = t->rows[i].s;
    *n = t->n;
    return t->flat;
}

void bridge_dx_free(struct bridge *b)
{
    if (!b->dx)
        return;
    free(b->dx->rows);
    free(b->dx->per_route);
    free(b->dx->flat);
    free(b->dx);
    b->dx = NULL;
}
