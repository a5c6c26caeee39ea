/*
 * engine_admin.c -- what operators ask of the engine outside the message
 * path: browse (eng_list), purge, single-message lookups for the HTTP API,
 * and the figures for /stats and /metrics.
 *
 * Browse and purge walk the held set by handle (pool order), a budget of
 * handles per call, so a purge of ten million messages never holds up the
 * loop: the held set may change between steps, and the walk only ever
 * sees each handle once. Figures are O(1): every counter is kept on each
 * state move (engine_state.c), nothing is counted here. Purge's cancel
 * and record reads are engine_state.c's too: this file, on top, calls
 * down into the engine's files, and none of them calls it.
 */
#include "engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

/* ---- browse and purge ---------------------------------------------------------- */

struct list_ctx {
    struct engine *e;
    uint16_t route;
    struct eng_item *v;
    size_t n, cap;
};

static int list_keep(void *arg, pool_handle h)
{
    struct list_ctx *c = arg;

    return H(c->e, h)->route == c->route;
}

static int list_visit(void *arg, pool_handle h)
{
    struct list_ctx *c = arg;
    struct held *m = H(c->e, h);

    c->v[c->n++] = (struct eng_item){h, m->node.seq, m->node.due, m->state};
    return c->n == c->cap;
}

static int item_before(const struct eng_item *a, const struct eng_item *b)
{
    return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->id < b->id);
}

/* The DUE message of route a page with this cursor resumes after, or POOL_NIL. */
static pool_handle due_hint_find(const struct engine *e, uint16_t route, uint64_t after_due,
                                 uint64_t after_id)
{
    for (int i = 0; i < ENG_DUE_HINTS; i++) {
        const struct due_hint *t = &e->due_hint[i];
        const struct held *m;
        if (t->h == POOL_NIL || t->route != route || t->after_due != after_due ||
            t->after_id != after_id)
            continue;
        m = H(e, t->h);
        if (m->state == ENG_DUE && m->route == route && m->node.due == t->due &&
            m->node.seq == t->id)
            return t->h; /* still in the list, where it was in (due, id) order */
    }
    return POOL_NIL;
}

static void due_hint_keep(struct engine *e, uint16_t route, uint64_t after_due,
                          uint64_t after_id, pool_handle h)
{
    struct due_hint *t = NULL;

    for (int i = 0; i < ENG_DUE_HINTS && !t; i++) /* a hint for this cursor moves on */
        if (e->due_hint[i].h && e->due_hint[i].route == route &&
            e->due_hint[i].after_due == after_due && e->due_hint[i].after_id == after_id)
            t = &e->due_hint[i];
    if (!t)
        t = &e->due_hint[e->due_hint_next++ % ENG_DUE_HINTS];
    *t = (struct due_hint){after_due, after_id, H(e, h)->node.due, H(e, h)->node.seq, h, route};
}

size_t eng_list(struct engine *e, uint16_t route, uint64_t after_due, uint64_t after_id,
                struct eng_item *out, size_t limit, int *more, uint64_t *next_due,
                uint64_t *next_id)
{
    struct list_ctx w = {e, route, NULL, 0, limit + 1};
    struct eng_item *due;
    size_t nd = 0, i = 0, j = 0, n = 0, budget = ENG_LIST_BUDGET, skipped = 0;
    uint64_t stop_due = 0, stop_id = 0;
    int stopped;
    pool_handle h, before; /* before: the last DUE message at or before the cursor */

    *more = 0;
    *next_due = *next_id = 0;
    if (route >= e->nroutes || limit == 0)
        return 0;
    /* The DUE list is in (due, id) order: past the cursor, from a hint or its head. */
    before = due_hint_find(e, route, after_due, after_id);
    for (h = before ? H(e, before)->node.next : e->routes[route].due.head; h;
         h = H(e, h)->node.next) {
        struct held *m = H(e, h);
        if (!(m->node.due < after_due || (m->node.due == after_due && m->node.seq <= after_id)))
            break;
        before = h;
        if (++skipped == ENG_LIST_BUDGET && H(e, h)->node.next) {
            /* Not there yet: an empty page whose cursor is this one, and a
             * hint, so that the next page goes on skipping from here. */
            due_hint_keep(e, route, after_due, after_id, h);
            *more = 1;
            *next_due = after_due;
            *next_id = after_id;
            return 0;
        }
    }
    due = xmalloc((limit + 1) * sizeof(*due));
    for (; h && nd <= limit; h = H(e, h)->node.next) {
        struct held *m = H(e, h);
        due[nd++] = (struct eng_item){h, m->node.seq, m->node.due, m->state};
    }
    /* The wheel, in time order, until limit + 1 of this route. */
    w.v = xmalloc((limit + 1) * sizeof(*w.v));
    stopped = wheel_walk(e->wheel, after_due, after_id, list_keep, list_visit, &w, &budget,
                         &stop_due, &stop_id);
    while (n < limit && (i < nd || j < w.n)) {
        if (j == w.n || (i < nd && item_before(&due[i], &w.v[j])))
            out[n++] = due[i++];
        else
            out[n++] = w.v[j++];
    }
    if (i < nd || j < w.n) {
        *more = 1; /* a full page: go on after its last message */
        *next_due = out[n - 1].due_ms;
        *next_id = out[n - 1].id;
    } else if (stopped) {
        *more = 1; /* the walk's budget ran out: go on where it stopped */
        *next_due = stop_due;
        *next_id = stop_id;
    }
    if (i > 0)
        before = due[i - 1].m;
    if (*more && before)
        due_hint_keep(e, route, *next_due, *next_id, before);
    free(due);
    free(w.v);
    return n;
}

void eng_purge_begin(struct engine *e, struct eng_purge *p, uint16_t route, uint64_t due_before)
{
    memset(p, 0, sizeof(*p));
    p->route = route;
    p->due_before = due_before;
    p->cursor = 1;
    p->end = e->pool.next_fresh;
}

/*
 * Walk the message table by handle, not by an index that may be rebuilt
 * under the walk: handles below `end` keep their place however the held
 * set changes, and a released slot has state 0.
 */
int eng_purge_step(struct engine *e, struct eng_purge *p, size_t budget)
{
    while (budget-- > 0 && p->cursor < p->end) {
        pool_handle h = p->cursor++;
        struct held *m = H(e, h);
        uint64_t kh = 0;

        if (m->route != p->route || m->node.due >= p->due_before ||
            (m->state != ENG_PENDING && m->state != ENG_WAITING && m->state != ENG_DUE))
            continue;
        if ((m->flags & HELD_KEYED) || p->by_key || p->by_exchange) {
            struct walrec_add a;
            int r = engine_read_record(e, m, &e->kbuf, &a);
            if (r < 0)
                return r;
            if (p->by_key && (a.routing_key_len != p->routing_key_len ||
                              memcmp(a.routing_key, p->routing_key, a.routing_key_len)))
                continue;
            if (p->by_exchange && (a.exchange_len != p->exchange_len ||
                                   memcmp(a.exchange, p->exchange, a.exchange_len)))
                continue;
            if (m->flags & HELD_KEYED)
                kh = engine_key_hash(e, m->route, a.key, a.key_len);
        }
        engine_cancel_msg(e, h, kh);
        e->routes[p->route].cancelled++;
        p->removed++;
    }
    return p->cursor < p->end;
}


/* ---- figures ----------------------------------------------------------------- */

void eng_stats(const struct engine *e, struct eng_stats *s)
{
    struct wlog_stats ls;
    int i;

    memset(s, 0, sizeof(*s));
    for (i = 0; i < e->nroutes; i++) {
        const struct route_state *r = &e->routes[i];
        s->pending += r->n[ENG_PENDING];
        s->waiting += r->n[ENG_WAITING];
        s->due += r->n[ENG_DUE];
        s->inflight += r->n[ENG_INFLIGHT];
    }
    s->held = e->held;
    s->orphaned = e->orphaned;
    s->added = e->added;
    s->confirmed = e->confirmed;
    int exact;
    s->next_due_ms = wheel_min_due(e->wheel, 65536, &exact);
    if (s->next_due_ms == UINT64_MAX)
        s->next_due_ms = 0;
    s->ram_bytes = pool_memory(&e->pool) + idmap_memory(&e->ids) + wheel_memory(e->wheel) +
                   e->cix.cap * sizeof(*e->cix.v) +
                   keymap_memory(&e->keys);
    s->recovery_seconds = e->recovery_seconds;
    wlog_stats(e->log, &ls);
    s->log_segments = ls.segments;
    s->log_disk_bytes = ls.disk_bytes;
    s->log_live_bytes = ls.live_bytes;
    s->log_live_records = ls.live_records;
    s->log_commits = ls.commits;
    s->log_appended_bytes = ls.appended_bytes;
    s->log_compacted_bytes = ls.compacted_bytes;
    s->log_failed = ls.failed ? ls.failed : e->failed;
    s->log_no_space = ls.no_space;
    s->log_intake_paused = ls.intake_paused;
    s->log_free_bytes = ls.free_bytes;
    s->log_reserve_bytes = ls.reserve_bytes;
    s->log_reserve_held = ls.reserve_held;
    s->log_reserve_spent = ls.reserve_spent;
    s->fsync = ls.fsync;
    s->compact_segment = ls.compact_segment;
    s->compact_done = ls.compact_done;
    s->compact_total = ls.compact_total;
    s->ckpt_state = ls.ckpt_state;
    s->ckpt_installed = ls.ckpt_installed;
    s->ckpt_failed = ls.ckpt_failed;
    s->ckpt_lsn = ls.ckpt_lsn;
    s->ckpt_bytes = ls.ckpt_bytes;
    s->ckpt_age_ms = ls.ckpt_age_ms;
    s->ckpt_seconds = ls.ckpt_seconds;
    s->ckpt_loaded_lsn = ls.ckpt_loaded_lsn;
    if (e->ck_active) {
        s->ckpt_walked = e->ck_cursor;
        s->ckpt_total = e->ck_end;
    }
}

void eng_route_stats(const struct engine *e, uint16_t route, struct eng_route_stats *s)
{
    const struct route_state *r;

    memset(s, 0, sizeof(*s));
    if (route >= e->nroutes)
        return;
    r = &e->routes[route];
    s->pending = r->n[ENG_PENDING];
    s->waiting = r->n[ENG_WAITING];
    s->due = r->n[ENG_DUE];
    s->inflight = r->n[ENG_INFLIGHT];
    s->held = s->pending + s->waiting + s->due + s->inflight;
    s->confirmed = r->confirmed;
    s->cancelled = r->cancelled;
    s->replaced = r->replaced;
    s->cancel_missed = r->cancel_missed;
    s->keyed = r->keyed;
    s->oldest_due_ms = r->due.head ? H(e, r->due.head)->node.due : 0;
    s->lateness = r->lateness;
}

uint64_t eng_held(const struct engine *e, int route)
{
    const struct route_state *r;

    if (route < 0)
        return e->held;
    if (route >= e->nroutes)
        return 0;
    r = &e->routes[route];
    return r->n[ENG_PENDING] + r->n[ENG_WAITING] + r->n[ENG_DUE] + r->n[ENG_INFLIGHT];
}

uint64_t eng_log_id(const struct engine *e)
{
    return wlog_id(e->log);
}

int eng_intake(const struct engine *e, uint64_t bytes)
{
    return wlog_intake(e->log, bytes);
}

/* ---- routes added at run time -------------------------------------------------- */

int eng_routes(const struct engine *e)
{
    return e->nroutes;
}

/*
 * The orphans are found by a walk of the message table, the same walk a
 * purge makes, all at once: orphans exist only after a start without
 * their route, and adding the route is an operator's act, rare enough
 * that one pass over the table (about 10 ns a held message) does not
 * need to be spread over turns. Each orphan's record is read once, for
 * its route name and its key.
 */
int eng_route_added(struct engine *e, int route)
{
    const char *name;
    size_t nlen;
    int adopted = 0;

    if (route < 0 || route > e->nroutes || route >= e->max_routes)
        return -EINVAL;
    if (route < e->nroutes)
        return 0; /* known already: a route added back */
    memset(&e->routes[route], 0, sizeof(e->routes[route]));
    e->nroutes++;
    if (!e->orphaned || !e->route_name || !(name = e->route_name(e->route_arg, route)))
        return 0;
    nlen = strlen(name);
    for (pool_handle h = 1; h < e->pool.next_fresh && e->orphaned; h++) {
        struct held *m = H(e, h);
        struct walrec_add a;
        int r;

        if (m->state != ENG_ORPHAN)
            continue;
        r = engine_read_record(e, m, &e->kbuf, &a);
        if (r < 0)
            return r;
        if (a.route_len != nlen || memcmp(a.route, name, nlen) != 0)
            continue;
        e->orphaned--;
        m->state = 0;
        m->route = (uint16_t)route;
        if (a.flags & WALREC_ADD_KEYED) {
            keymap_put(&e->keys, engine_key_hash(e, m->route, a.key, a.key_len), h);
            m->flags |= HELD_KEYED;
            e->routes[route].keyed++;
        }
        engine_set_state(e, m, ENG_WAITING);
        wheel_add(e->wheel, h, m->node.due, m->node.seq);
        adopted++;
    }
    return adopted;
}
