/*
 * engine_state.c -- the held set's moves: the floor every other engine file
 * stands on.
 *
 * A held message is in at most one of three structures -- the wheel
 * (WAITING), its route's due list (DUE, in (due, id) order) or its route's
 * in-flight list (INFLIGHT, in take order) -- and the two lists reuse the
 * wheel node's next/prev links, so being DUE or INFLIGHT costs no RAM
 * beyond the 40 bytes of struct held. This file holds the moves between
 * them and out of the held set, and the per-route counters each move keeps
 * right (so every figure eng_stats() reports stays O(1) to read):
 *
 *   route lists      link, unlink, and the (due, id) insert into a due list
 *   state            engine_set_state(): the state byte and the counters
 *   release          engine_forget(): out of the counters, the log's live
 *                    set, the recovery index and the pool
 *   redelivery rings a fresh ADD's fingerprint onto its route's ring
 *   records          read a held message's ADD record back and check it
 *   cancel           a PENDING, WAITING or DUE message out for good
 *   end records      the DONE and CANCEL records of the ids queued since
 *                    the last commit
 *
 * Layering. engine.c (the message path), engine_recover.c (replay),
 * engine_ckpt.c (the checkpoint) and engine_admin.c (browse, purge) all
 * call down into this file; it calls none of them, only the structures
 * below it (pool, wheel, key map, idmap) and the log. engine.c in turn
 * calls engine_recover.c and engine_ckpt.c, never the reverse.
 */
#include "engine_int.h"

#include <string.h>

#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/pool.h"
#include "base/xalloc.h"
#include "keymap.h"
#include "wheel.h"

/* ---- the route lists ----------------------------------------------------- */

/* (due, id) order: does a come before b? */
static int before(const struct held *a, const struct held *b)
{
    return a->node.due < b->node.due || (a->node.due == b->node.due && a->node.seq < b->node.seq);
}

void engine_list_link(struct engine *e, struct hlist *l, pool_handle prev, pool_handle h)
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

void engine_list_unlink(struct engine *e, struct hlist *l, pool_handle h)
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
void engine_due_insert(struct engine *e, struct hlist *l, pool_handle h, int from_head)
{
    struct held *m = H(e, h);
    pool_handle p;

    if (from_head) {
        for (p = l->head; p && !before(m, H(e, p)); p = H(e, p)->node.next)
            ;
        engine_list_link(e, l, p ? H(e, p)->node.prev : l->tail, h);
    } else {
        for (p = l->tail; p && before(m, H(e, p)); p = H(e, p)->node.prev)
            ;
        engine_list_link(e, l, p, h);
    }
}

/* Move m to state s, keeping the per-route counters right. */
void engine_set_state(struct engine *e, struct held *m, enum eng_state s)
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
void engine_forget(struct engine *e, pool_handle h)
{
    struct held *m = H(e, h);

    if (m->route != ENG_ROUTE_UNKNOWN && m->state)
        e->routes[m->route].n[m->state]--;
    else if (m->state == ENG_ORPHAN)
        e->orphaned--;
    wlog_live(e->log, m->loc, 0);
    if (e->ids.cap)
        idmap_del(&e->ids, m->node.seq); /* recovering */
    e->held--;
    m->state = 0;
    m->flags = 0;
    pool_release(&e->pool, h);
}

/* ---- recent fingerprints (redeliveries) ------------------------------------- */

/*
 * Remember fingerprint fp (first taken at `at` ms, 0 = unknown) as route's
 * newest; the oldest goes when the ring is full.
 */
void engine_ring_push(struct engine *e, uint16_t route, uint64_t fp, uint64_t at)
{
    struct recent_ring *r;
    uint32_t slot;

    if (!e->recent || route >= e->nroutes)
        return;
    r = &e->routes[route].recent;
    if (!r->fp) {
        r->fp = xcalloc(e->recent, sizeof(*r->fp));
        r->at = xcalloc(e->recent, sizeof(*r->at));
        r->used = xcalloc(e->recent, sizeof(*r->used));
    }
    slot = (r->head + r->n) % e->recent;
    r->fp[slot] = fp;
    r->at[slot] = at;
    r->used[slot] = 0;
    if (r->n < e->recent)
        r->n++;
    else
        r->head = (r->head + 1) % e->recent;
}

void engine_recent_push(struct engine *e, uint16_t route, const struct walrec_add *a)
{
    if (e->recent && route < e->nroutes)
        engine_ring_push(e, route, e->fingerprint(a), a->enqueue_ms);
}

/* ---- reading a message's record ----------------------------------------- */

/* Read m's record into b and decode it. 0 or a negative code. */
int engine_read_record(struct engine *e, const struct held *m, struct wlog_buf *b,
                       struct walrec_add *a)
{
    struct walrec_hdr hdr;
    const uint8_t *payload;
    int r = wlog_read(e->log, m->loc, b, &hdr, &payload);

    if (r < 0)
        return r;
    if (hdr.type != WALREC_ADD || walrec_add_decode(payload, hdr.len, a) < 0 ||
        a->msg_id != m->node.seq)
        return WLOG_ECORRUPT;
    return 0;
}

/* ---- leaving for good: cancel, and the end records ------------------------------ */

/* Take a PENDING, WAITING or DUE message out for good: a CANCEL record follows. */
void engine_cancel_msg(struct engine *e, pool_handle h, uint64_t kh)
{
    struct held *m = H(e, h);
    struct route_state *r = &e->routes[m->route];
    size_t i;

    switch (m->state) {
    case ENG_PENDING:
        for (i = e->pending.n; i-- > 0;)
            if (e->pending.v[i] == h)
                break;
        memmove(e->pending.v + i, e->pending.v + i + 1, (e->pending.n - i - 1) * sizeof(h));
        e->pending.n--;
        if (i < e->committing)
            e->committing--; /* its ADD is being written; the CANCEL follows next time */
        break;
    case ENG_WAITING:
        wheel_del(e->wheel, h);
        break;
    case ENG_DUE:
        engine_list_unlink(e, &r->due, h);
        break;
    default:
        return; /* in flight or orphaned: not ours to cancel */
    }
    if (m->flags & HELD_KEYED) {
        keymap_del(&e->keys, kh, h);
        r->keyed--;
    }
    idvec_push(&e->cancel, m->node.seq);
    engine_forget(e, h);
}

/* Append DONE (or CANCEL) records for the ids in v, and empty it. */
static int append_ids(struct engine *e, struct idvec *v, uint8_t type)
{
    /* One record per 64k ids keeps records small enough to read back whole. */
    const size_t batch = 65536;
    size_t i = 0;
    int r;

    while (i < v->n) {
        uint32_t n = (uint32_t)(v->n - i < batch ? v->n - i : batch);
        size_t sz = walrec_done_size(n);
        struct walrec_piece p;

        if (sz > e->done_cap) {
            e->done_cap = sz;
            e->done_buf = xrealloc(e->done_buf, sz);
        }
        walrec_done_encode(e->done_buf, v->v + i, n);
        p.p = e->done_buf;
        p.n = sz;
        r = wlog_append(e->log, type, &p, 1, NULL, NULL);
        if (r < 0)
            return r;
        i += n;
    }
    v->n = 0;
    return 0;
}

int engine_append_ends(struct engine *e)
{
    int r;

    if (e->done.n && (r = append_ids(e, &e->done, WALREC_DONE)) < 0)
        return r;
    if (e->cancel.n && (r = append_ids(e, &e->cancel, WALREC_CANCEL)) < 0)
        return r;
    return 0;
}
