/*
 * bridge_retry.c -- what the daemon counts and says of retry routes.
 *
 * Every delivery a retry route takes is either held for another attempt
 * or parked (retry.h decided, in the consumer); a send back that the
 * broker returns (the queue is gone) is parked later, at its next publish.
 * Each is counted per (route, queue it failed in) -- retries, parks by
 * reason, the failed attempt's number in a histogram -- for /metrics,
 * /stats and the status page, and each park is logged (a warning, at most
 * one line per route every 10 s with the count since the last).
 *
 * The rows live in one array for all routes, in the order first seen, and
 * are found by a linear walk: a route meets a few queues, and at most
 * DB_RETRY_QUEUES_MAX, past which they share the row "_other" (a client
 * naming queues freely cannot grow the table without bound). Only queues
 * the route admits (retry_admits) get a row of their own: every other name
 * x-death claims is counted under "_not_admitted", so a label is always a
 * name the operator's configuration allowed, never a publisher's bytes.
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"
#include "delay-bridge/retry.h"

#define NOT_ADMITTED "_not_admitted"

struct retry_row {
    struct db_retry_stats s;
    int route;
    char queue[CONFIG_NAME_MAX + 1];
};

struct bridge_retry {
    struct retry_row *rows;
    int n, cap;
    int *per_route; /* queues counted so far, per route */
    struct log_ratelimit *rl;
    struct db_retry_stats *flat; /* the snapshot's copy (bridge_retry_rows) */
    int flat_cap;
};

static struct retry_row *row(struct bridge *b, int route, const char *q, size_t qlen)
{
    struct bridge_retry *t = b->retry;
    const char *name = q ? q : "";
    size_t len = q ? qlen : 0;

    if (!t) {
        t = b->retry = xmalloc(sizeof(*t));
        memset(t, 0, sizeof(*t));
        t->per_route = xcalloc(CONFIG_MAX_ROUTES, sizeof(int)); /* routes added later too */
        t->rl = xcalloc(CONFIG_MAX_ROUTES, sizeof(*t->rl));
    }
    if (t->per_route[route] >= DB_RETRY_QUEUES_MAX)
        name = "_other", len = 6;
    for (int i = 0; i < t->n; i++)
        if (t->rows[i].route == route && strlen(t->rows[i].queue) == len &&
            memcmp(t->rows[i].queue, name, len) == 0)
            return &t->rows[i];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->rows = xrealloc(t->rows, (size_t)t->cap * sizeof(*t->rows));
        for (int i = 0; i < t->n; i++) /* the strings moved with their rows */
            t->rows[i].s.queue = t->rows[i].queue;
    }
    struct retry_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof(*r));
    r->route = route;
    memcpy(r->queue, name, len);
    r->s.route = b->cfg->routes[route].name;
    r->s.queue = r->queue;
    t->per_route[route]++;
    return r;
}

static void observe(struct retry_row *r, uint32_t n)
{
    int i = 0;

    while (i < DB_RETRY_BUCKETS - 1 && n > db_retry_le[i])
        i++;
    r->s.attempts[i]++;
    r->s.attempts_sum += n;
    r->s.attempts_n++;
}

static void note_park(struct bridge *b, int route, const char *queue, size_t qlen,
                      const char *reason, uint32_t failed, uint64_t mono)
{
    uint64_t ev;

    if ((ev = log_ratelimit(&b->retry->rl[route], mono, 10000)))
        log_warn("retry", "message parked", "route=%s queue=%s reason=%s attempts=%" PRIu32
                 " parking_exchange=\"%s\" events=%" PRIu64, b->cfg->routes[route].name,
                 LOG_QUOTE(queue, qlen), reason, failed,
                 b->cfg->routes[route].retry->parking_exchange, ev);
}

void bridge_retry_taken(struct bridge *b, const struct delivery *d, const struct walrec_add *a,
                        uint64_t mono)
{
    struct retry_row *r;

    if (d->retry_handback) /* counted where it failed */
        return;
    /* a queue the route does not admit is a publisher's word: one fixed label for all */
    if (d->retry_admitted || !d->retry_queue) /* admitted, or none named (label "") */
        r = row(b, d->route, d->retry_queue, d->retry_queue_len);
    else
        r = row(b, d->route, NOT_ADMITTED, strlen(NOT_ADMITTED));
    observe(r, d->retry_failed);
    if (a->flags & WALREC_ADD_DEADLETTER) {
        const char *why = retry_park_reason(a->error, 0);
        r->s.parked[retry_park_index(why)]++;
        note_park(b, d->route, d->retry_queue, d->retry_queue_len, why, d->retry_failed, mono);
    } else {
        r->s.retries++;
    }
}

void bridge_retry_gone(struct bridge *b, int route, const struct walrec_add *a)
{
    struct retry_row *r = row(b, route, a->routing_key, a->routing_key_len);

    r->s.parked[retry_park_index("queue_gone")]++;
    note_park(b, route, a->routing_key, a->routing_key_len, "queue_gone (returned unroutable)",
              0, clock_mono_ms());
}

const struct db_retry_stats *bridge_retry_rows(struct bridge *b, int *n)
{
    struct bridge_retry *t = b->retry;

    *n = t ? t->n : 0;
    if (!t)
        return NULL;
    if (t->flat_cap < t->n) {
        t->flat_cap = t->cap;
        t->flat = xrealloc(t->flat, (size_t)t->flat_cap * sizeof(*t->flat));
    }
    for (int i = 0; i < t->n; i++)
        t->flat[i] = t->rows[i].s;
    return t->flat;
}

void bridge_retry_free(struct bridge *b)
{
    if (!b->retry)
        return;
    free(b->retry->rows);
    free(b->retry->per_route);
    free(b->retry->rl);
    free(b->retry->flat);
    free(b->retry);
    b->retry = NULL;
}
