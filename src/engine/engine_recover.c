/*
 * engine_recover.c -- recovery: the log's records replayed into the held set,
 * then every recovered message put into a new wheel.
 *
 * The rules are walreplay.h's (the WAL tools apply the same): an ADD
 * creates a held message, or, when its id is already known, is a
 * compaction copy that supersedes the older one; a DONE or CANCEL forgets
 * its ids. Only recovery looks messages up by id (a DONE names ids): the
 * idmap it fills is freed by eng_open() once the wheel is built. A keyed
 * message's key hash is parked in its unused wheel links until then, so a
 * later DONE or CANCEL can take it out of the key map without reading its
 * record again. A checkpoint, if the log has one, was loaded before the
 * replay (engine_ckpt.c) and the replay starts where it ends.
 *
 * The wheel's clock starts just before the earliest due time, so the first
 * eng_advance() to the present fires the overdue messages in due order.
 *
 * Layering: eng_open() (engine.c) calls this file; what it changes in the
 * held set goes through engine_state.c (states, release, redelivery
 * rings), never back through engine.c.
 */
#include "engine_int.h"
#include "delay-bridge/walreplay.h"

static int replay_add(struct engine *e, const uint8_t *payload, uint32_t len, uint64_t lsn,
                      struct wlog_loc loc)
{
    struct walrec_add a;
    pool_handle h;
    struct held *m;
    int r;

    if ((e->recent ? walrec_add_decode(payload, len, &a) : walrec_add_peek(payload, len, &a)) < 0)
        return WLOG_ECORRUPT; /* the CRC passed, so this is a bug, not bit rot */
    if (e->recent && lsn == a.msg_id && lsn >= e->ck_ring_lsn) {
        /* a fresh ADD (not a compaction copy): it may be redelivered after this crash */
        r = e->route_index ? e->route_index(e->route_arg, a.route, a.route_len) : -1;
        if (r >= 0 && r < e->nroutes)
            engine_recent_push(e, (uint16_t)r, &a);
    }

    /*
     * A fresh ADD (its LSN is its id) is new to the index unless a
     * checkpoint taken after it was loaded: skip the lookup, a cache miss
     * per record at 10^7 records.
     */
    h = walreplay_add(&e->ids, a.msg_id, lsn == a.msg_id && lsn >= e->ck_end_lsn);
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
    m->flags = HELD_RECOVERED;
    if ((a.flags & WALREC_ADD_KEYED) && m->route != ENG_ROUTE_UNKNOWN) {
        /*
         * The wheel links are unused until build_wheel(): they keep the key
         * hash meanwhile, so a DONE or CANCEL replayed later can take the
         * message out of the key map without reading its record again.
         */
        uint64_t kh = engine_key_hash(e, m->route, a.key, a.key_len);
        m->node.next = (uint32_t)kh;
        m->node.prev = (uint32_t)(kh >> 32);
        m->flags |= HELD_KEYED;
        keymap_put(&e->keys, kh, h);
    }
    idmap_put(&e->ids, h);
    e->held++;
    wlog_live(e->log, loc, 1);
    return 0;
}

static uint64_t replay_key_hash(const struct held *m)
{
    return (uint64_t)m->node.next | (uint64_t)m->node.prev << 32;
}

/* walreplay_forget()'s callback: out of the key map, the index and the pool. */
static void replay_forget(void *arg, pool_handle h)
{
    struct engine *e = arg;

    if (H(e, h)->flags & HELD_KEYED)
        keymap_del(&e->keys, replay_key_hash(H(e, h)), h);
    engine_forget(e, h); /* takes it out of e->ids too, while recovering */
}

int engine_replay(void *arg, const struct walrec_hdr *hdr, const uint8_t *payload,
                  struct wlog_loc loc)
{
    struct engine *e = arg;

    switch (hdr->type) {
    case WALREC_ADD:
        return replay_add(e, payload, hdr->len, hdr->lsn, loc);
    case WALREC_DONE:
    case WALREC_CANCEL: { /* the same layout; a cancelled message is gone like a done one */
        uint32_t named;

        return walreplay_forget(&e->ids, payload, hdr->len, &named, replay_forget, e) < 0
                   ? WLOG_ECORRUPT : 0;
    }
    default:
        return 0;
    }
}

void engine_build_wheel(struct engine *e, uint64_t now)
{
    uint64_t start = now;
    pool_handle h;

    for (h = 1; h < e->pool.next_fresh; h++) {
        const struct held *m = H(e, h);
        if ((m->flags & HELD_RECOVERED) && m->node.due < start)
            start = m->node.due;
    }
    e->wheel = wheel_new(&e->pool, start ? start - 1 : 0);
    if (e->wheel_split)
        wheel_set_split(e->wheel, e->wheel_split);
    for (h = 1; h < e->pool.next_fresh; h++) {
        struct held *m = H(e, h);
        if (!(m->flags & HELD_RECOVERED))
            continue;
        m->flags &= (uint8_t)~HELD_RECOVERED;
        if (m->route == ENG_ROUTE_UNKNOWN) {
            m->state = ENG_ORPHAN;
            e->orphaned++;
            continue;
        }
        if (m->flags & HELD_KEYED)
            e->routes[m->route].keyed++;
        engine_set_state(e, m, ENG_WAITING);
        wheel_add(e->wheel, h, m->node.due, m->node.seq);
    }
}

