/*
 * engine.c -- held messages: WAL + timing wheel + id index.
 *
 * The engine owns three structures over one pool of struct held:
 *
 *   pool    every held message, 40 bytes each, addressed by a 32-bit handle;
 *   idmap   message id -> handle, for DONE records at recovery and for
 *           compaction, which must find the message a record belongs to;
 *   wheel   the WAITING messages, by due time.
 *
 * Ingest is a two-step affair so that the daemon can group-commit: eng_add()
 * appends the ADD record to the WAL buffer and parks the handle on the
 * pending list; eng_commit() writes and fsyncs the whole batch once and only
 * then puts the pending messages into the wheel. A message therefore never
 * fires before it is durable, and wal_read() of a fired message always finds
 * its record on disk.
 *
 * DONE records are batched the same way: eng_done() forgets the message at
 * once (it was confirmed by the broker, so losing its ADD in a crash loses
 * nothing) and queues its id; the next eng_commit() writes one DONE record
 * for the batch ahead of the new ADDs.
 *
 * Recovery replays the WAL: an ADD creates a held message, or, when its id
 * is already known, is a compaction copy that supersedes the older one; a
 * DONE forgets its ids. Once the log is read, the wheel is created with its
 * clock just before the earliest due time, every message is added, and the
 * first eng_advance() to the present fires the overdue ones in due order.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/engine.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/log.h"
#include "delay-bridge/xalloc.h"

/* A growable array of handles. */
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
    struct wal *wal;
    struct wal_buf rbuf;   /* eng_load() reads records here */
    struct hvec pending;   /* PENDING handles, in append order */
    struct idvec done;     /* ids to write in the next DONE record */
    uint8_t *done_buf;     /* encoded DONE payload */
    size_t done_cap;
    uint8_t *add_buf;      /* encoded ADD head (everything but the body) */
    size_t add_cap;
    int (*route_index)(void *, const char *, size_t);
    void *route_arg;
    uint64_t fired, orphaned, added, ndone, retried;
    /* Recovery bookkeeping. */
    uint64_t min_due;
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

struct pool *eng_pool(struct engine *e)
{
    return &e->pool;
}

static void forget(struct engine *e, pool_handle h)
{
    struct held *m = eng_held(e, h);

    wal_live_del(e->wal, m->loc);
    idmap_del(&e->ids, m->node.seq);
    pool_release(&e->pool, h);
}

/* ---- recovery ---------------------------------------------------------- */

static int replay_add(struct engine *e, const uint8_t *payload, uint32_t len, struct wal_loc loc)
{
    struct walrec_add a;
    pool_handle h;
    struct held *m;
    int r;

    if (walrec_add_peek(payload, len, &a) < 0)
        return WAL_ECORRUPT; /* CRC passed, so this is a bug, not bit rot */

    h = idmap_get(&e->ids, a.msg_id);
    if (h != POOL_NIL) {
        /* A compaction copy: the newer record is the live one. */
        m = eng_held(e, h);
        wal_live_del(e->wal, m->loc);
        m->loc = loc;
        wal_live_add(e->wal, loc);
        return 0;
    }
    h = pool_alloc(&e->pool);
    m = eng_held(e, h);
    m->node.seq = a.msg_id;
    m->node.due = a.due_ms;
    m->loc = loc;
    r = e->route_index ? e->route_index(e->route_arg, a.route, a.route_len) : 0;
    m->route = r < 0 ? ENG_ROUTE_UNKNOWN : (uint16_t)r;
    m->state = m->route == ENG_ROUTE_UNKNOWN ? HELD_ORPHAN : HELD_WAITING;
    idmap_put(&e->ids, h);
    wal_live_add(e->wal, loc);
    return 0;
}

static int replay_done(struct engine *e, const uint8_t *payload, uint32_t len)
{
    uint32_t count, i;

    if (walrec_done_decode(payload, len, &count) < 0)
        return WAL_ECORRUPT;
    for (i = 0; i < count; i++) {
        pool_handle h = idmap_get(&e->ids, walrec_done_id(payload, i));
        if (h != POOL_NIL)
            forget(e, h);
    }
    return 0;
}

static int replay(void *arg, const struct walrec_hdr *hdr, const uint8_t *payload,
                  struct wal_loc loc)
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
        if (h != POOL_NIL && eng_held(e, h)->node.due < start)
            start = eng_held(e, h)->node.due;
    }
    e->wheel = wheel_new(&e->pool, start ? start - 1 : 0);
    for (i = 0; i < e->ids.cap; i++) {
        pool_handle h = e->ids.slots[i];
        struct held *m;
        if (h == POOL_NIL)
            continue;
        m = eng_held(e, h);
        if (m->state == HELD_ORPHAN) {
            e->orphaned++;
            continue;
        }
        wheel_add(e->wheel, h, m->node.due, m->node.seq);
    }
}

int eng_open(struct engine **out, const struct eng_opts *o)
{
    struct engine *e = calloc(1, sizeof(*e));
    uint64_t now = o->now_ms ? o->now_ms : log_now_ms();
    int r;

    if (!e)
        return -ENOMEM;
    pool_init(&e->pool, sizeof(struct held));
    idmap_init(&e->ids, &e->pool, offsetof(struct held, node.seq));
    e->route_index = o->route_index;
    e->route_arg = o->route_arg;

    r = wal_open(&e->wal, &o->wal, replay, e);
    if (r < 0) {
        idmap_destroy(&e->ids);
        pool_destroy(&e->pool);
        free(e);
        return r;
    }
    build_wheel(e, now);
    if (e->orphaned)
        log_warn("engine", "messages held for routes missing from the configuration",
                 "count=%llu action=\"kept in the WAL, not published; restore the route\"",
                 (unsigned long long)e->orphaned);
    log_info("engine", "recovered", "held=%zu overdue_from_ms=%llu", e->ids.count,
             (unsigned long long)wheel_now(e->wheel));
    *out = e;
    return 0;
}

void eng_close(struct engine *e)
{
    if (!e)
        return;
    wal_close(e->wal);
    wheel_free(e->wheel);
    idmap_destroy(&e->ids);
    pool_destroy(&e->pool);
    free(e->rbuf.p);
    free(e->pending.v);
    free(e->done.v);
    free(e->done_buf);
    free(e->add_buf);
    free(e);
}

/* ---- ingest ------------------------------------------------------------ */

int eng_add(struct engine *e, uint16_t route, struct walrec_add *a, pool_handle *hp)
{
    struct walrec_piece pieces[2];
    struct wal_loc loc;
    size_t head;
    pool_handle h;
    struct held *m;
    int r;

    a->msg_id = wal_next_lsn(e->wal);
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
    r = wal_append(e->wal, WALREC_ADD, pieces, 2, NULL, &loc);
    if (r < 0)
        return r;

    h = pool_alloc(&e->pool);
    m = eng_held(e, h);
    m->node.seq = a->msg_id;
    m->node.due = a->due_ms;
    m->loc = loc;
    m->route = route;
    m->state = HELD_PENDING;
    idmap_put(&e->ids, h);
    wal_live_add(e->wal, loc);
    hvec_push(&e->pending, h);
    e->added++;
    if (hp)
        *hp = h;
    return 0;
}

int eng_dirty(const struct engine *e)
{
    return e->pending.n > 0 || e->done.n > 0 || wal_pending(e->wal) > 0;
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
        r = wal_append(e->wal, WALREC_DONE, &p, 1, NULL, NULL);
        if (r < 0)
            return r;
        i += n;
    }
    e->done.n = 0;
    return 0;
}

int eng_commit(struct engine *e)
{
    size_t i;
    int r;

    if (e->done.n && (r = append_done(e)) < 0)
        return r;
    if ((r = wal_commit(e->wal)) < 0)
        return r;
    for (i = 0; i < e->pending.n; i++) {
        pool_handle h = e->pending.v[i];
        struct held *m = eng_held(e, h);
        m->state = HELD_WAITING;
        wheel_add(e->wheel, h, m->node.due, m->node.seq);
    }
    e->pending.n = 0;
    return 0;
}

/* ---- firing ------------------------------------------------------------ */

uint64_t eng_next_event(const struct engine *e)
{
    return wheel_next_event(e->wheel);
}

struct fire_ctx {
    struct engine *e;
    eng_fire_fn *fire;
    void *arg;
};

static void on_fire(void *arg, pool_handle h)
{
    struct fire_ctx *c = arg;
    struct held *m = eng_held(c->e, h);

    m->state = HELD_FIRED;
    c->e->fired++;
    c->fire(c->arg, h, m->route);
}

size_t eng_advance(struct engine *e, uint64_t now, eng_fire_fn *fire, void *arg)
{
    struct fire_ctx c = {e, fire, arg};

    return wheel_advance(e->wheel, now, on_fire, &c);
}

int eng_load(struct engine *e, pool_handle h, struct walrec_add *a)
{
    struct walrec_hdr hdr;
    const uint8_t *payload;
    int r;

    r = wal_read(e->wal, eng_held(e, h)->loc, &e->rbuf, &hdr, &payload);
    if (r < 0)
        return r;
    if (hdr.type != WALREC_ADD || walrec_add_decode(payload, hdr.len, a) < 0 ||
        a->msg_id != eng_held(e, h)->node.seq)
        return WAL_ECORRUPT;
    return 0;
}

void eng_done(struct engine *e, pool_handle h)
{
    struct held *m = eng_held(e, h);

    if (m->state == HELD_FIRED)
        e->fired--;
    idvec_push(&e->done, m->node.seq);
    forget(e, h);
    e->ndone++;
}

void eng_retry(struct engine *e, pool_handle h, uint64_t due)
{
    struct held *m = eng_held(e, h);

    if (m->state == HELD_FIRED)
        e->fired--;
    m->state = HELD_WAITING;
    e->retried++;
    wheel_add(e->wheel, h, due, m->node.seq);
}

/* ---- space ------------------------------------------------------------- */

static int compact_is_live(void *arg, uint64_t msg_id, struct wal_loc loc)
{
    struct engine *e = arg;
    pool_handle h = idmap_get(&e->ids, msg_id);

    if (h == POOL_NIL)
        return 0;
    struct held *m = eng_held(e, h);
    return m->loc.seg == loc.seg && m->loc.off == loc.off;
}

static void compact_moved(void *arg, uint64_t msg_id, struct wal_loc to)
{
    struct engine *e = arg;
    pool_handle h = idmap_get(&e->ids, msg_id);

    if (h != POOL_NIL)
        eng_held(e, h)->loc = to;
}

int eng_maintain(struct engine *e, size_t budget)
{
    struct wal_compact_ops ops = {compact_is_live, compact_moved, e};

    return wal_maintain(e->wal, budget, &ops);
}

void eng_get_stats(const struct engine *e, struct eng_stats *s)
{
    memset(s, 0, sizeof(*s));
    s->held = e->ids.count;
    s->waiting = wheel_count(e->wheel);
    s->fired = e->fired;
    s->orphaned = e->orphaned;
    s->added = e->added;
    s->done = e->ndone;
    s->retried = e->retried;
    s->ram_bytes = pool_memory(&e->pool) + idmap_memory(&e->ids) + wheel_memory(e->wheel);
    wal_get_stats(e->wal, &s->wal);
}

uint64_t eng_wal_id(const struct engine *e)
{
    return wal_id(e->wal);
}
