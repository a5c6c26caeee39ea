/*
 * engine.c -- held messages: log + timing wheel + id index + due lists.
 *
 * One pool of struct held (40 bytes each) carries every message the engine
 * holds, and four structures point into it:
 *
 *   idmap      message id -> handle: DONE records at recovery, compaction
 *              (which must find the message a record belongs to);
 *   wheel      the WAITING messages, by due time;
 *   due list   per route, the DUE messages in (due, id) order;
 *   in flight  per route, the INFLIGHT messages in take order.
 *
 * A message is in at most one of the wheel and the two lists, so the lists
 * reuse the wheel node's next/prev links: being DUE or INFLIGHT costs no RAM
 * beyond the 40 bytes. The state byte says which structure holds it (the
 * state machine is drawn in engine.h), and per-route counters per state are
 * kept on every move, so every figure eng_stats() reports is O(1) to read.
 *
 * Group commit. eng_add() appends the ADD record to the log's buffer and
 * parks the handle on the pending vector; eng_commit() appends one DONE
 * record for the confirms since the last commit, and asks the log to make
 * everything durable. The log says when through a completion (at once for
 * the segment files; later for a log that syncs elsewhere): only then do
 * the first `committing` pending messages enter the wheel. A message thus
 * never fires before it is durable, and its record can always be read back.
 * Adds that arrive while a commit is in progress wait for the next one.
 *
 * Confirms are batched the same way: eng_confirm() forgets the message at
 * once (the broker has it; losing its ADD in a crash loses nothing) and
 * queues its id for the next DONE record.
 *
 * Recovery replays the log: an ADD creates a held message, or, when its id
 * is already known, is a compaction copy that supersedes the older one; a
 * DONE forgets its ids. Then the wheel is created with its clock just before
 * the earliest due time and every message goes in, so the first
 * eng_advance() to the present fires the overdue ones in due order.
 */
#include "delay-bridge/engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/clock.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/log.h"
#include "delay-bridge/pool.h"
#include "delay-bridge/wheel.h"
#include "delay-bridge/wlog.h"
#include "delay-bridge/xalloc.h"

_Static_assert(ENG_ECORRUPT == WLOG_ECORRUPT && ENG_ELOCKED == WLOG_ELOCKED &&
                   ENG_EFORMAT == WLOG_EFORMAT && ENG_ETOOBIG == WLOG_ETOOBIG &&
                   ENG_EBUSY == WLOG_EBUSY,
               "engine codes pass the log's through unchanged");

struct held {
    struct wheel_node node; /* node.seq: message id; node.due: due time; links: see above */
    struct wlog_loc loc;    /* the ADD record */
    uint16_t route;         /* route index, or ENG_ROUTE_UNKNOWN */
    uint8_t state;          /* enum eng_state */
    uint8_t flags;          /* reserved */
};

_Static_assert(sizeof(struct held) == 40, "a held message is 40 bytes of RAM");

/* A doubly linked list of held messages through node.next/prev. */
struct hlist {
    pool_handle head, tail;
};

struct route_state {
    struct hlist due, inflight;
    uint64_t n[ENG_ORPHAN + 1]; /* messages per state */
    uint64_t confirmed;
    struct db_hist lateness;
};

struct hvec {
    pool_handle *v;
    size_t n, cap;
};

struct idvec {
    uint64_t *v;
    size_t n, cap;
};

struct engine {
    struct pool pool;
    struct idmap ids;
    struct wheel *wheel;
    struct wlog *log;
    struct wlog_buf rbuf;  /* eng_take() reads records here */
    struct route_state *routes;
    int nroutes;
    struct hvec pending;   /* PENDING handles, in append order */
    size_t committing;     /* the first `committing` of them are in the commit running */
    int commit_busy;
    eng_commit_fn *commit_done;
    void *commit_arg;
    int failed;            /* first commit error */
    struct idvec done;     /* ids for the next DONE record */
    uint8_t *done_buf;     /* encoded DONE payload */
    size_t done_cap;
    uint8_t *add_buf;      /* encoded ADD head (everything but the body) */
    size_t add_cap;
    int (*route_index)(void *, const char *, size_t);
    void *route_arg;
    uint64_t orphaned, added, confirmed;
    double recovery_seconds;
};

static void hvec_push(struct hvec *a, pool_handle h)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
    }
    a->v[a->n++] = h;
}

static void idvec_push(struct idvec *a, uint64_t id)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
    }
    a->v[a->n++] = id;
}

static inline struct held *H(const struct engine *e, pool_handle h)
{
    return (struct held *)pool_at(&e->pool, h);
}

const char *eng_strerror(int err)
{
    return wlog_strerror(err);
}

/* ---- the route lists ----------------------------------------------------- */

/* (due, id) order: does a come before b? */
static int before(const struct held *a, const struct held *b)
{
    return a->node.due < b->node.due || (a->node.due == b->node.due && a->node.seq < b->node.seq);
}

static void list_link(struct engine *e, struct hlist *l, pool_handle prev, pool_handle h)
{
    struct held *m = H(e, h);
    pool_handle next = prev ? H(e, prev)->node.next : l->head;

    m->node.prev = prev;
    m->node.next = next;
    if (prev)
        H(e, prev)->node.next = h;
    else
        l->head = h;
    if (next)
        H(e, next)->node.prev = h;
    else
        l->tail = h;
}

static void list_unlink(struct engine *e, struct hlist *l, pool_handle h)
{
    struct held *m = H(e, h);

    if (m->node.prev)
        H(e, m->node.prev)->node.next = m->node.next;
    else
        l->head = m->node.next;
    if (m->node.next)
        H(e, m->node.next)->node.prev = m->node.prev;
    else
        l->tail = m->node.prev;
    m->node.next = m->node.prev = POOL_NIL;
}

/*
 * Insert into a due list in (due, id) order. Messages firing from the wheel
 * come in order and belong at the tail; messages put back from INFLIGHT are
 * the oldest and belong near the head: search from the end that is likely
 * closer, so both cases are O(1) in practice.
 */
static void due_insert(struct engine *e, struct hlist *l, pool_handle h, int from_head)
{
    struct held *m = H(e, h);
    pool_handle p;

    if (from_head) {
        for (p = l->head; p && !before(m, H(e, p)); p = H(e, p)->node.next)
            ;
        list_link(e, l, p ? H(e, p)->node.prev : l->tail, h);
    } else {
        for (p = l->tail; p && before(m, H(e, p)); p = H(e, p)->node.prev)
            ;
        list_link(e, l, p, h);
    }
}

/* Move m to state s, keeping the per-route counters right. */
static void set_state(struct engine *e, struct held *m, enum eng_state s)
{
    if (m->route != ENG_ROUTE_UNKNOWN) {
        struct route_state *r = &e->routes[m->route];
        if (m->state)
            r->n[m->state]--;
        r->n[s]++;
    }
    m->state = (uint8_t)s;
}

/* Release a message: out of the index, the log's live set and the pool. */
static void forget(struct engine *e, pool_handle h)
{
    struct held *m = H(e, h);

    if (m->route != ENG_ROUTE_UNKNOWN && m->state)
        e->routes[m->route].n[m->state]--;
    else if (m->state == ENG_ORPHAN)
        e->orphaned--;
    wlog_live(e->log, m->loc, 0);
    idmap_del(&e->ids, m->node.seq);
    pool_release(&e->pool, h);
}

/* ---- recovery -------------------------------------------------------------- */

static int replay_add(struct engine *e, const uint8_t *payload, uint32_t len,
                      struct wlog_loc loc)
{
    struct walrec_add a;
    pool_handle h;
    struct held *m;
    int r;

    if (walrec_add_peek(payload, len, &a) < 0)
        return ENG_ECORRUPT; /* the CRC passed, so this is a bug, not bit rot */

    h = idmap_get(&e->ids, a.msg_id);
    if (h != POOL_NIL) {
        /* A compaction copy: the newer record is the live one. */
        m = H(e, h);
        wlog_live(e->log, m->loc, 0);
        m->loc = loc;
        wlog_live(e->log, loc, 1);
        return 0;
    }
    h = pool_alloc(&e->pool);
    m = H(e, h);
    m->node.seq = a.msg_id;
    m->node.due = a.due_ms;
    m->loc = loc;
    r = e->route_index ? e->route_index(e->route_arg, a.route, a.route_len) : -1;
    m->route = r < 0 || r >= e->nroutes ? ENG_ROUTE_UNKNOWN : (uint16_t)r;
    m->state = 0;
    idmap_put(&e->ids, h);
    wlog_live(e->log, loc, 1);
    return 0;
}

static int replay_done(struct engine *e, const uint8_t *payload, uint32_t len)
{
    uint32_t count, i;

    if (walrec_done_decode(payload, len, &count) < 0)
        return ENG_ECORRUPT;
    for (i = 0; i < count; i++) {
        pool_handle h = idmap_get(&e->ids, walrec_done_id(payload, i));
        if (h != POOL_NIL)
            forget(e, h);
    }
    return 0;
}

static int replay(void *arg, const struct walrec_hdr *hdr, const uint8_t *payload,
                  struct wlog_loc loc)
{
    struct engine *e = arg;

    switch (hdr->type) {
    case WALREC_ADD:
        return replay_add(e, payload, hdr->len, loc);
    case WALREC_DONE:
        return replay_done(e, payload, hdr->len);
    default:
        return 0; /* CANCEL: reserved, nothing writes it yet */
    }
}

/* Put every recovered message into a wheel whose clock starts before them all. */
static void build_wheel(struct engine *e, uint64_t now)
{
    uint64_t start = now;
    size_t i;

    for (i = 0; i < e->ids.cap; i++) {
        pool_handle h = e->ids.slots[i];
        if (h != POOL_NIL && H(e, h)->node.due < start)
            start = H(e, h)->node.due;
    }
    e->wheel = wheel_new(&e->pool, start ? start - 1 : 0);
    for (i = 0; i < e->ids.cap; i++) {
        pool_handle h = e->ids.slots[i];
        struct held *m;
        if (h == POOL_NIL)
            continue;
        m = H(e, h);
        if (m->route == ENG_ROUTE_UNKNOWN) {
            m->state = ENG_ORPHAN;
            e->orphaned++;
            continue;
        }
        set_state(e, m, ENG_WAITING);
        wheel_add(e->wheel, h, m->node.due, m->node.seq);
    }
}

int eng_open(struct engine **out, const struct eng_opts *o)
{
    struct engine *e;
    uint64_t now = o->now_ms ? o->now_ms : clock_now_ms(), t0 = clock_mono_ns();
    int r;

    *out = NULL;
    if (o->nroutes < 0 || o->nroutes >= (int)ENG_ROUTE_UNKNOWN) {
        wlog_close(o->log);
        return -EINVAL;
    }
    e = xcalloc(1, sizeof(*e));
    pool_init(&e->pool, sizeof(struct held));
    idmap_init(&e->ids, &e->pool, offsetof(struct held, node.seq));
    e->log = o->log;
    e->nroutes = o->nroutes;
    e->routes = xcalloc((size_t)(o->nroutes ? o->nroutes : 1), sizeof(*e->routes));
    e->route_index = o->route_index;
    e->route_arg = o->route_arg;

    r = wlog_recover(e->log, replay, e, o->progress);
    if (r < 0) {
        eng_close(e);
        return r;
    }
    build_wheel(e, now);
    e->recovery_seconds = (double)(clock_mono_ns() - t0) / 1e9;
    if (e->orphaned)
        log_warn("engine", "messages held for routes missing from the configuration",
                 "count=%llu action=\"kept in the log, not published; restore the route\"",
                 (unsigned long long)e->orphaned);
    log_info("engine", "recovered", "held=%zu overdue_from_ms=%llu seconds=%.3f", e->ids.count,
             (unsigned long long)wheel_now(e->wheel), e->recovery_seconds);
    *out = e;
    return 0;
}

void eng_close(struct engine *e)
{
    if (!e)
        return;
    wlog_close(e->log);
    wheel_free(e->wheel);
    idmap_destroy(&e->ids);
    pool_destroy(&e->pool);
    free(e->routes);
    free(e->rbuf.p);
    free(e->pending.v);
    free(e->done.v);
    free(e->done_buf);
    free(e->add_buf);
    free(e);
}

/* ---- ingest and commit ----------------------------------------------------- */

int eng_add(struct engine *e, uint16_t route, struct walrec_add *a, eng_msg *mp)
{
    struct walrec_piece pieces[2];
    struct wlog_loc loc;
    size_t head;
    pool_handle h;
    struct held *m;
    int r;

    if (e->failed)
        return e->failed;
    if (route >= e->nroutes)
        return -EINVAL;
    a->msg_id = wlog_next_lsn(e->log);
    head = walrec_add_size(a) - a->body_len;
    if (head > e->add_cap) {
        e->add_cap = head;
        e->add_buf = xrealloc(e->add_buf, head);
    }
    walrec_add_encode_head(e->add_buf, a);
    pieces[0].p = e->add_buf;
    pieces[0].n = head;
    pieces[1].p = a->body;
    pieces[1].n = a->body_len;
    r = wlog_append(e->log, WALREC_ADD, pieces, 2, NULL, &loc);
    if (r < 0)
        return r;

    h = pool_alloc(&e->pool);
    m = H(e, h);
    m->node.seq = a->msg_id;
    m->node.due = a->due_ms;
    m->loc = loc;
    m->route = route;
    set_state(e, m, ENG_PENDING);
    idmap_put(&e->ids, h);
    wlog_live(e->log, loc, 1);
    hvec_push(&e->pending, h);
    e->added++;
    if (mp)
        *mp = h;
    return 0;
}

int eng_dirty(const struct engine *e)
{
    return e->pending.n > e->committing || e->done.n > 0 || wlog_pending(e->log) > 0;
}

int eng_committing(const struct engine *e)
{
    return e->commit_busy;
}

static int append_done(struct engine *e)
{
    /* One record per 64k ids keeps records small enough to read back whole. */
    const size_t batch = 65536;
    size_t i = 0;
    int r;

    while (i < e->done.n) {
        uint32_t n = (uint32_t)(e->done.n - i < batch ? e->done.n - i : batch);
        size_t sz = walrec_done_size(n);
        struct walrec_piece p;

        if (sz > e->done_cap) {
            e->done_cap = sz;
            e->done_buf = xrealloc(e->done_buf, sz);
        }
        walrec_done_encode(e->done_buf, e->done.v + i, n);
        p.p = e->done_buf;
        p.n = sz;
        r = wlog_append(e->log, WALREC_DONE, &p, 1, NULL, NULL);
        if (r < 0)
            return r;
        i += n;
    }
    e->done.n = 0;
    return 0;
}

static void on_log_committed(void *arg, int err)
{
    struct engine *e = arg;
    eng_commit_fn *done = e->commit_done;
    size_t i, k = e->committing;

    e->commit_busy = 0;
    e->committing = 0;
    e->commit_done = NULL;
    if (err < 0) {
        e->failed = err;
    } else {
        for (i = 0; i < k; i++) {
            pool_handle h = e->pending.v[i];
            struct held *m = H(e, h);
            set_state(e, m, ENG_WAITING);
            wheel_add(e->wheel, h, m->node.due, m->node.seq);
        }
        memmove(e->pending.v, e->pending.v + k, (e->pending.n - k) * sizeof(*e->pending.v));
        e->pending.n -= k;
    }
    if (done)
        done(e->commit_arg, err);
}

int eng_commit(struct engine *e, eng_commit_fn *done, void *arg)
{
    int r;

    if (e->failed)
        return e->failed;
    if (e->commit_busy)
        return ENG_EBUSY;
    if (e->done.n && (r = append_done(e)) < 0)
        return e->failed = r;
    e->commit_busy = 1;
    e->committing = e->pending.n;
    e->commit_done = done;
    e->commit_arg = arg;
    r = wlog_commit(e->log, on_log_committed, e);
    if (r < 0) {
        e->commit_busy = 0;
        e->committing = 0;
        e->commit_done = NULL;
        return e->failed = r;
    }
    return 0;
}

/* ---- firing and publishing --------------------------------------------------- */

uint64_t eng_next_event(const struct engine *e)
{
    return wheel_next_event(e->wheel);
}

static void on_fire(void *arg, pool_handle h)
{
    struct engine *e = arg;
    struct held *m = H(e, h);

    set_state(e, m, ENG_DUE);
    due_insert(e, &e->routes[m->route].due, h, 0);
}

size_t eng_advance(struct engine *e, uint64_t now)
{
    return wheel_advance(e->wheel, now, on_fire, e);
}

size_t eng_due(const struct engine *e, uint16_t route)
{
    return route < e->nroutes ? (size_t)e->routes[route].n[ENG_DUE] : 0;
}

int eng_take(struct engine *e, uint16_t route, eng_msg *mp, struct walrec_add *a)
{
    struct route_state *r;
    struct walrec_hdr hdr;
    const uint8_t *payload;
    pool_handle h;
    struct held *m;
    int res;

    if (route >= e->nroutes)
        return 0;
    r = &e->routes[route];
    if (!(h = r->due.head))
        return 0;
    m = H(e, h);
    res = wlog_read(e->log, m->loc, &e->rbuf, &hdr, &payload);
    if (res < 0)
        return res;
    if (hdr.type != WALREC_ADD || walrec_add_decode(payload, hdr.len, a) < 0 ||
        a->msg_id != m->node.seq)
        return ENG_ECORRUPT;
    list_unlink(e, &r->due, h);
    list_link(e, &r->inflight, r->inflight.tail, h);
    set_state(e, m, ENG_INFLIGHT);
    *mp = h;
    return 1;
}

void eng_confirm(struct engine *e, eng_msg h, uint64_t now_ms)
{
    struct held *m = H(e, h);
    struct route_state *r = &e->routes[m->route];

    if (m->state != ENG_INFLIGHT)
        return;
    list_unlink(e, &r->inflight, h);
    db_hist_observe(&r->lateness,
                    now_ms > m->node.due ? (double)(now_ms - m->node.due) / 1000.0 : 0.0);
    r->confirmed++;
    e->confirmed++;
    idvec_push(&e->done, m->node.seq);
    forget(e, h);
}

void eng_unsent(struct engine *e, eng_msg h)
{
    struct held *m = H(e, h);
    struct route_state *r = &e->routes[m->route];

    if (m->state != ENG_INFLIGHT)
        return;
    list_unlink(e, &r->inflight, h);
    set_state(e, m, ENG_DUE);
    due_insert(e, &r->due, h, 1);
}

size_t eng_unsent_route(struct engine *e, uint16_t route)
{
    struct route_state *r;
    size_t n = 0;

    if (route >= e->nroutes)
        return 0;
    r = &e->routes[route];
    /* From the newest, each to the head side of the due list: order is kept. */
    while (r->inflight.tail) {
        eng_unsent(e, r->inflight.tail);
        n++;
    }
    return n;
}

int eng_state(const struct engine *e, eng_msg h)
{
    return H(e, h)->state;
}

/* ---- space ----------------------------------------------------------------- */

static int compact_is_live(void *arg, uint64_t msg_id, struct wlog_loc loc)
{
    struct engine *e = arg;
    pool_handle h = idmap_get(&e->ids, msg_id);

    if (h == POOL_NIL)
        return 0;
    return H(e, h)->loc.seg == loc.seg && H(e, h)->loc.off == loc.off;
}

static void compact_moved(void *arg, uint64_t msg_id, struct wlog_loc to)
{
    struct engine *e = arg;
    pool_handle h = idmap_get(&e->ids, msg_id);

    if (h != POOL_NIL)
        H(e, h)->loc = to;
}

int eng_maintain(struct engine *e, size_t budget)
{
    struct wlog_compact_ops ops = {compact_is_live, compact_moved, e};

    return wlog_reclaim(e->log, budget, &ops);
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
    s->held = e->ids.count;
    s->orphaned = e->orphaned;
    s->added = e->added;
    s->confirmed = e->confirmed;
    int exact;
    s->next_due_ms = wheel_min_due(e->wheel, 65536, &exact);
    if (s->next_due_ms == UINT64_MAX)
        s->next_due_ms = 0;
    s->ram_bytes = pool_memory(&e->pool) + idmap_memory(&e->ids) + wheel_memory(e->wheel);
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
    s->fsync = ls.fsync;
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
    s->oldest_due_ms = r->due.head ? H(e, r->due.head)->node.due : 0;
    s->lateness = r->lateness;
}

uint64_t eng_log_id(const struct engine *e)
{
    return wlog_id(e->log);
}
