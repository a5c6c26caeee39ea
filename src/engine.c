/*
 * engine.c -- held messages: log + timing wheel + due lists.
 *
 * One pool of struct held (40 bytes each) carries every message the engine
 * holds, and three structures point into it:
 *
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
 *
 * No id index outside recovery. Only recovery looks messages up by id (a
 * DONE names ids); it builds an idmap (id -> handle, 4 to 8 bytes per
 * message) and frees it once the wheel is built. At run time every message
 * is reached by handle, and compaction -- which walks a segment's records
 * and must know which are live -- asks by location instead: for the
 * segment it is compacting, one pass over the pool in memory order collects
 * the (offset, handle) of the messages stored there, sorted by offset, and
 * each record is looked up in that list and checked against the message
 * (still held, same id, same place). Messages only ever leave a segment
 * being compacted (new records go to the newest segment), so the list
 * stays a superset of the truth for the whole segment. This keeps a held
 * message at 40 bytes plus its wheel share, about 42 B at 10^7.
 */
#include "delay-bridge/engine.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/clock.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/keymap.h"
#include "delay-bridge/log.h"
#include "delay-bridge/pool.h"
#include "delay-bridge/walrec.h"
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
    uint8_t state;          /* enum eng_state; 0 once released */
    uint8_t flags;          /* HELD_KEYED */
};

#define HELD_KEYED 0x01    /* in the key map while PENDING, WAITING or DUE */
#define HELD_DIVERTED 0x02 /* its publish was returned: next one to the unroutable exchange */
#define HELD_RECOVERED 0x04 /* recovery created it; build_wheel() places it */

_Static_assert(sizeof(struct held) == 40, "a held message is 40 bytes of RAM");

/* A doubly linked list of held messages through node.next/prev. */
struct hlist {
    pool_handle head, tail;
};

/* The fingerprints of a route's last fresh ADDs (a ring; 0 = used up). */
struct recent_ring {
    uint64_t *fp;
    uint32_t head, n;
};

struct route_state {
    struct hlist due, inflight;
    struct recent_ring recent;
    uint64_t n[ENG_ORPHAN + 1]; /* messages per state */
    uint64_t confirmed, cancelled, replaced, cancel_missed, keyed;
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

/* Compaction's view of one segment: the messages stored there, by offset. */
struct cix_ent {
    uint32_t off;
    pool_handle h;
};

struct engine {
    struct pool pool;
    struct idmap ids;      /* during recovery only: id -> handle */
    uint64_t held;         /* messages held (every state, orphans included) */
    struct {
        uint32_t seg;      /* the segment listed, 0 = none */
        struct cix_ent *v;
        size_t n, cap;
        pool_handle last;  /* the handle is_live() found, for moved() */
    } cix;
    struct wheel *wheel;
    struct wlog *log;
    struct wlog_buf rbuf;  /* eng_take() and eng_read() read records here */
    struct wlog_buf kbuf;  /* key checks read records here */
    struct route_state *routes;
    int nroutes;
    struct hvec pending;   /* PENDING handles, in append order */
    size_t committing;     /* the first `committing` of them are in the commit running */
    int commit_busy;
    eng_commit_fn *commit_done;
    void *commit_arg;
    int failed;            /* first commit error */
    struct idvec done;     /* ids for the next DONE record */
    struct idvec cancel;   /* ids for the next CANCEL record */
    struct keymap keys;    /* hash(route, key) -> handle, keyed pending messages */
    uint64_t (*key_hash)(uint16_t, const char *, size_t);
    uint32_t recent;                           /* ring size per route, 0 = off */
    uint64_t (*fingerprint)(const struct walrec_add *);
    uint8_t *done_buf;     /* encoded DONE payload */
    size_t done_cap;
    uint8_t *add_buf;      /* encoded ADD head (everything but the body) */
    size_t add_cap;
    int (*route_index)(void *, const char *, size_t);
    const char *(*route_name)(void *, int);
    void *route_arg;
    uint64_t orphaned, added, confirmed;
    double recovery_seconds;

    /* checkpoints: the walk in progress, the policy, and what recovery took from one */
    uint64_t ck_interval_ms, ck_min_bytes;
    uint32_t ck_step;
    int ck_active;
    uint32_t ck_cursor, ck_end;   /* handles still to walk: [cursor, end) */
    uint8_t *ck_buf;              /* a chunk being filled */
    size_t ck_n, ck_cap;
    uint64_t ck_last_begin_ms, ck_appended_at_begin;
    uint64_t ck_ring_lsn;         /* recovery: fresh ADDs from here on go on the rings */
    uint64_t ck_end_lsn;          /* recovery: an ADD below it may be held already */
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
    if (e->ids.cap)
        idmap_del(&e->ids, m->node.seq); /* recovering */
    e->held--;
    m->state = 0;
    m->flags = 0;
    pool_release(&e->pool, h);
}

/* ---- recent fingerprints (redeliveries) ------------------------------------- */

/* Remember fingerprint fp as route's newest; the oldest goes when the ring is full. */
static void ring_push(struct engine *e, uint16_t route, uint64_t fp)
{
    struct recent_ring *r;

    if (!e->recent || route >= e->nroutes)
        return;
    r = &e->routes[route].recent;
    if (!r->fp)
        r->fp = xcalloc(e->recent, sizeof(*r->fp));
    r->fp[(r->head + r->n) % e->recent] = fp;
    if (r->n < e->recent)
        r->n++;
    else
        r->head = (r->head + 1) % e->recent;
}

static void recent_push(struct engine *e, uint16_t route, const struct walrec_add *a)
{
    if (e->recent && route < e->nroutes)
        ring_push(e, route, e->fingerprint(a));
}

int eng_seen(struct engine *e, uint16_t route, uint64_t fp)
{
    struct recent_ring *r;
    uint32_t i;

    if (!e->recent || route >= e->nroutes)
        return 0;
    r = &e->routes[route].recent;
    for (i = 0; i < r->n; i++) {
        uint64_t *slot = &r->fp[(r->head + i) % e->recent];
        if (*slot == fp) {
            *slot = 0; /* consumed: a second identical redelivery is a second message */
            return 1;
        }
    }
    return 0;
}

/* ---- recovery -------------------------------------------------------------- */

static int replay_add(struct engine *e, const uint8_t *payload, uint32_t len, uint64_t lsn,
                      struct wlog_loc loc)
{
    struct walrec_add a;
    pool_handle h;
    struct held *m;
    int r;

    if ((e->recent ? walrec_add_decode(payload, len, &a) : walrec_add_peek(payload, len, &a)) < 0)
        return ENG_ECORRUPT; /* the CRC passed, so this is a bug, not bit rot */
    if (e->recent && lsn == a.msg_id && lsn >= e->ck_ring_lsn) {
        /* a fresh ADD (not a compaction copy): it may be redelivered after this crash */
        r = e->route_index ? e->route_index(e->route_arg, a.route, a.route_len) : -1;
        if (r >= 0 && r < e->nroutes)
            recent_push(e, (uint16_t)r, &a);
    }

    /*
     * A fresh ADD (its LSN is its id) is new to the index unless a
     * checkpoint taken after it was loaded: skip the lookup, a cache miss
     * per record at 10^7 records.
     */
    h = lsn == a.msg_id && lsn >= e->ck_end_lsn ? POOL_NIL : idmap_get(&e->ids, a.msg_id);
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
        uint64_t kh = e->key_hash(m->route, a.key, a.key_len);
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

static int replay_done(struct engine *e, const uint8_t *payload, uint32_t len)
{
    uint32_t count, i;

    if (walrec_done_decode(payload, len, &count) < 0)
        return ENG_ECORRUPT;
    for (i = 0; i < count; i++) {
        pool_handle h = idmap_get(&e->ids, walrec_done_id(payload, i));
        if (h == POOL_NIL)
            continue;
        if (H(e, h)->flags & HELD_KEYED)
            keymap_del(&e->keys, replay_key_hash(H(e, h)), h);
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
        return replay_add(e, payload, hdr->len, hdr->lsn, loc);
    case WALREC_DONE:
    case WALREC_CANCEL: /* the same layout; a cancelled message is gone like a done one */
        return replay_done(e, payload, hdr->len);
    default:
        return 0;
    }
}

/* ---- checkpoints ------------------------------------------------------------ */

#define CK_META 1
#define CK_HELD 2
#define CK_KEYS 3
#define CK_END 4
#define CK_HELD_SIZE 32
#define CK_KEY_SIZE 12
#define CK_CHUNK (1u << 20)  /* bytes per chunk */
#define CK_STEP 65536        /* handles walked per eng_maintain() */
#define CK_ORPHAN 0xFFFFu

/* The meta chunk: routes must be the configured ones, in order; restores the rings. */
static int ck_load_meta(struct engine *e, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    uint32_t nroutes, ring;

    if (n < 32 || walrec_get32(p) != 1)
        return ENG_ECORRUPT;
    nroutes = walrec_get32(p + 4);
    ring = walrec_get32(p + 24);
    if ((int)nroutes != e->nroutes) {
        log_info("engine", "checkpoint taken with other routes; replaying the whole log",
                 "checkpoint_routes=%u configured_routes=%d", nroutes, e->nroutes);
        return 1;
    }
    const uint8_t *q = p + 32;
    for (uint32_t i = 0; i < nroutes; i++) {
        if (end - q < 2 || end - q - 2 < walrec_get16(q))
            return ENG_ECORRUPT;
        uint16_t len = walrec_get16(q);
        int r = e->route_index ? e->route_index(e->route_arg, (const char *)q + 2, len) : -1;
        if (r != (int)i) {
            log_info("engine", "routes renamed or reordered since the checkpoint; replaying the "
                     "whole log", "route=%.*s index=%u", (int)len, (const char *)q + 2, i);
            return 1;
        }
        q += 2 + len;
        if (end - q < 4 || (uint64_t)(end - q - 4) / 8 < walrec_get32(q))
            return ENG_ECORRUPT;
        uint32_t k = walrec_get32(q);
        q += 4;
        /* The newest min(k, ring size) fingerprints, oldest first. */
        uint32_t skip = e->recent && k > e->recent ? k - e->recent : 0;
        for (uint32_t j = skip; j < k && e->recent && ring; j++)
            ring_push(e, (uint16_t)i, walrec_get64(q + 8 * j));
        q += 8 * (size_t)k;
    }
    e->ck_ring_lsn = walrec_get64(p + 16);
    idmap_reserve(&e->ids, (size_t)walrec_get64(p + 8));
    return 0;
}

static int ck_load_held(struct engine *e, const uint8_t *p, size_t n)
{
    if (n % CK_HELD_SIZE)
        return ENG_ECORRUPT;
    for (size_t i = 0; i < n; i += CK_HELD_SIZE) {
        const uint8_t *q = p + i;
        struct wlog_loc loc = {walrec_get32(q + 16), walrec_get32(q + 20), walrec_get32(q + 24)};
        uint16_t route = walrec_get16(q + 28);
        uint64_t id = walrec_get64(q);

        /*
         * Its segment is gone: reclamation deletes only segments with
         * nothing live, so it was done since (or a later copy of it is
         * among the records replayed next). The walk writes each handle
         * once, so no id comes twice and the index needs no lookup first.
         */
        if (!wlog_has(e->log, loc))
            continue;
        pool_handle h = pool_alloc(&e->pool);
        struct held *m = H(e, h);
        m->node.seq = id;
        m->node.due = walrec_get64(q + 8);
        m->loc = loc;
        m->route = route == CK_ORPHAN || route >= e->nroutes ? ENG_ROUTE_UNKNOWN : route;
        m->state = 0;
        m->flags = HELD_RECOVERED;
        idmap_put(&e->ids, h);
        e->held++;
        wlog_live(e->log, loc, 1);
    }
    return 0;
}

static int ck_load_keys(struct engine *e, const uint8_t *p, size_t n)
{
    if (n % CK_KEY_SIZE)
        return ENG_ECORRUPT;
    for (size_t i = 0; i < n; i += CK_KEY_SIZE) {
        pool_handle h = idmap_get(&e->ids, walrec_get64(p + i));
        uint32_t fp = walrec_get32(p + i + 8);
        struct held *m;

        if (h == POOL_NIL || (m = H(e, h))->route == ENG_ROUTE_UNKNOWN || (m->flags & HELD_KEYED))
            continue;
        /*
         * The key map stores 32-bit fingerprints; the 64-bit value fp has
         * fingerprint fp, so it stands in for the key hash (kept in the
         * wheel links until build_wheel, like a replayed ADD's).
         */
        m->node.next = fp;
        m->node.prev = 0;
        m->flags |= HELD_KEYED;
        keymap_put(&e->keys, fp, h);
    }
    return 0;
}

static int ck_load(void *arg, uint8_t kind, const uint8_t *p, size_t n)
{
    struct engine *e = arg;

    switch (kind) {
    case CK_META:
        return ck_load_meta(e, p, n);
    case CK_HELD:
        return ck_load_held(e, p, n);
    case CK_KEYS:
        return ck_load_keys(e, p, n);
    case CK_END:
        if (n != 8)
            return ENG_ECORRUPT;
        e->ck_end_lsn = walrec_get64(p);
        return 0;
    default:
        return ENG_ECORRUPT;
    }
}

static int ck_flush(struct engine *e, uint8_t kind)
{
    int r = 0;

    if (e->ck_n)
        r = wlog_ckpt_write(e->log, kind, e->ck_buf, e->ck_n);
    e->ck_n = 0;
    return r;
}

static uint8_t *ck_room(struct engine *e, size_t n)
{
    if (e->ck_n + n > e->ck_cap) {
        e->ck_cap = e->ck_n + n > CK_CHUNK ? e->ck_n + n : CK_CHUNK;
        e->ck_buf = xrealloc(e->ck_buf, e->ck_cap);
    }
    e->ck_n += n;
    return e->ck_buf + e->ck_n - n;
}

int eng_checkpoint(struct engine *e)
{
    struct wlog_stats ls;
    int r;

    if (!wlog_has_ckpt(e->log) || !e->route_name)
        return -ENOTSUP;
    if (e->ck_active)
        return ENG_EBUSY;
    if ((r = wlog_ckpt_begin(e->log)) < 0)
        return r;
    wlog_stats(e->log, &ls);
    e->ck_active = 1;
    e->ck_cursor = 1;
    e->ck_end = e->pool.next_fresh; /* later handles hold ADDs the replay will see */
    e->ck_last_begin_ms = clock_mono_ns() / 1000000;
    e->ck_appended_at_begin = ls.appended_bytes;

    /* meta: the routes and their recent rings as of now */
    uint8_t *q = ck_room(e, 32);
    memset(q, 0, 32);
    walrec_put32(q, 1);
    walrec_put32(q + 4, (uint32_t)e->nroutes);
    walrec_put64(q + 8, e->held);
    walrec_put64(q + 16, wlog_next_lsn(e->log));
    walrec_put32(q + 24, e->recent);
    for (int i = 0; i < e->nroutes; i++) {
        const char *name = e->route_name ? e->route_name(e->route_arg, i) : "";
        size_t len = strlen(name);
        struct recent_ring *rr = &e->routes[i].recent;
        q = ck_room(e, 2 + len + 4 + 8 * (size_t)rr->n);
        walrec_put16(q, (uint16_t)len);
        memcpy(q + 2, name, len);
        walrec_put32(q + 2 + len, rr->n);
        for (uint32_t j = 0; j < rr->n; j++)
            walrec_put64(q + 6 + len + 8 * j, rr->fp[(rr->head + j) % e->recent]);
    }
    if ((r = ck_flush(e, CK_META)) < 0)
        e->ck_active = 0; /* the log dropped it and said why */
    return r;
}

/*
 * One step of the walk: by handle, as the purge does, so the held set may
 * change under it. A message seen is written as it is now; one added after
 * the walk passed its handle has its ADD replayed on top; one released
 * before the walk reached it is not written, and its DONE is replayed.
 */
static void ck_step(struct engine *e)
{
    size_t budget = e->ck_step;
    int r = 0;

    while (budget-- > 0 && e->ck_cursor < e->ck_end) {
        pool_handle h = e->ck_cursor++;
        const struct held *m = H(e, h);
        if (!m->state)
            continue;
        if (e->ck_n + CK_HELD_SIZE > CK_CHUNK && (r = ck_flush(e, CK_HELD)) < 0)
            goto failed;
        uint8_t *q = ck_room(e, CK_HELD_SIZE);
        walrec_put64(q, m->node.seq);
        walrec_put64(q + 8, m->node.due);
        walrec_put32(q + 16, m->loc.seg);
        walrec_put32(q + 20, m->loc.off);
        walrec_put32(q + 24, m->loc.len);
        walrec_put16(q + 28, m->route == ENG_ROUTE_UNKNOWN ? CK_ORPHAN : m->route);
        walrec_put16(q + 30, 0);
    }
    if (e->ck_cursor < e->ck_end)
        return;
    if ((r = ck_flush(e, CK_HELD)) < 0)
        goto failed;
    /* The keys in one go, as the key map is now: it may rehash between steps. */
    for (size_t i = 0; i < e->keys.cap; i++) {
        if (!e->keys.handle[i])
            continue;
        if (e->ck_n + CK_KEY_SIZE > CK_CHUNK && (r = ck_flush(e, CK_KEYS)) < 0)
            goto failed;
        uint8_t *q = ck_room(e, CK_KEY_SIZE);
        walrec_put64(q, H(e, e->keys.handle[i])->node.seq);
        walrec_put32(q + 8, e->keys.fp[i]);
    }
    if ((r = ck_flush(e, CK_KEYS)) < 0)
        goto failed;
    walrec_put64(ck_room(e, 8), wlog_next_lsn(e->log));
    if ((r = ck_flush(e, CK_END)) < 0 || (r = wlog_ckpt_end(e->log)) < 0)
        goto failed;
    e->ck_active = 0;
    if (e->ck_cap > CK_CHUNK) {
        free(e->ck_buf);
        e->ck_buf = NULL;
        e->ck_cap = 0;
    }
    return;
failed:
    e->ck_active = 0; /* the log dropped the checkpoint and logged why; next interval retries */
    e->ck_n = 0;
}

static void ck_policy(struct engine *e)
{
    struct wlog_stats ls;
    uint64_t now = clock_mono_ns() / 1000000;

    if (!e->ck_interval_ms || e->ck_active || !wlog_has_ckpt(e->log) ||
        now - e->ck_last_begin_ms < e->ck_interval_ms)
        return;
    wlog_stats(e->log, &ls);
    uint64_t want = ls.ckpt_bytes / 2 > e->ck_min_bytes ? ls.ckpt_bytes / 2 : e->ck_min_bytes;
    if (ls.ckpt_state != WLOG_CKPT_IDLE || ls.appended_bytes - e->ck_appended_at_begin < want)
        return;
    eng_checkpoint(e);
}

/*
 * Put every recovered message into a wheel whose clock starts before them
 * all. The walk is by handle, in memory order (the index would visit the
 * pool at random: a cache miss per message, over a second at 10^7).
 */
static void build_wheel(struct engine *e, uint64_t now)
{
    uint64_t start = now;
    pool_handle h;

    for (h = 1; h < e->pool.next_fresh; h++) {
        const struct held *m = H(e, h);
        if ((m->flags & HELD_RECOVERED) && m->node.due < start)
            start = m->node.due;
    }
    e->wheel = wheel_new(&e->pool, start ? start - 1 : 0);
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
    e->key_hash = o->key_hash ? o->key_hash : keymap_hash;
    e->recent = o->fingerprint ? o->recent : 0;
    e->fingerprint = o->fingerprint;
    e->route_name = o->route_name;
    e->ck_interval_ms = o->checkpoint_interval_ms;
    e->ck_min_bytes = o->checkpoint_min_bytes;
    e->ck_step = o->checkpoint_step ? o->checkpoint_step : CK_STEP;
    e->ck_last_begin_ms = clock_mono_ns() / 1000000;
    keymap_init(&e->keys);

    wlog_set_ckpt_fn(e->log, ck_load, e);
    r = wlog_recover(e->log, replay, e, o->progress);
    if (r < 0) {
        eng_close(e);
        return r;
    }
    e->ck_ring_lsn = e->ck_end_lsn = 0;
    build_wheel(e, now);
    /* The id index was for replay only: give its memory back. */
    idmap_destroy(&e->ids);
    malloc_trim(0);
    e->recovery_seconds = (double)(clock_mono_ns() - t0) / 1e9;
    if (e->orphaned)
        log_warn("engine", "messages held for routes missing from the configuration",
                 "count=%llu action=\"kept in the log, not published; restore the route\"",
                 (unsigned long long)e->orphaned);
    log_info("engine", "recovered", "held=%llu overdue_from_ms=%llu seconds=%.3f",
             (unsigned long long)e->held,
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
    free(e->cix.v);
    keymap_destroy(&e->keys);
    pool_destroy(&e->pool);
    for (int i = 0; i < e->nroutes; i++)
        free(e->routes[i].recent.fp);
    free(e->routes);
    free(e->rbuf.p);
    free(e->kbuf.p);
    free(e->pending.v);
    free(e->done.v);
    free(e->cancel.v);
    free(e->done_buf);
    free(e->add_buf);
    free(e->ck_buf);
    free(e);
}

/* ---- keys ------------------------------------------------------------------- */

/* Read m's record into b and decode it. 0 or a negative code. */
static int read_record(struct engine *e, const struct held *m, struct wlog_buf *b,
                       struct walrec_add *a)
{
    struct walrec_hdr hdr;
    const uint8_t *payload;
    int r = wlog_read(e->log, m->loc, b, &hdr, &payload);

    if (r < 0)
        return r;
    if (hdr.type != WALREC_ADD || walrec_add_decode(payload, hdr.len, a) < 0 ||
        a->msg_id != m->node.seq)
        return ENG_ECORRUPT;
    return 0;
}

/*
 * The route's keyed pending message with this key: every handle stored
 * under the hash is a candidate, confirmed against the key in its record.
 * POOL_NIL if none; a log read error in *err.
 */
static pool_handle key_lookup(struct engine *e, uint16_t route, const char *key, size_t len,
                              uint64_t kh, int *err)
{
    uint32_t few[8], *cand = few;
    size_t n = keymap_find(&e->keys, kh, few, 8), i;
    pool_handle found = POOL_NIL;

    *err = 0;
    if (n > 8) { /* a pile-up of equal hashes: only with forced collisions */
        cand = xmalloc(n * sizeof(*cand));
        keymap_find(&e->keys, kh, cand, n);
    }
    for (i = 0; i < n && found == POOL_NIL; i++) {
        struct held *m = H(e, cand[i]);
        struct walrec_add a;
        if (m->route != route)
            continue;
        if ((*err = read_record(e, m, &e->kbuf, &a)) < 0)
            break;
        if (a.key_len == len && (len == 0 || memcmp(a.key, key, len) == 0))
            found = cand[i];
    }
    if (cand != few)
        free(cand);
    return found;
}

/* Take a PENDING, WAITING or DUE message out for good: a CANCEL record follows. */
static void cancel_msg(struct engine *e, pool_handle h, uint64_t kh)
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
        list_unlink(e, &r->due, h);
        break;
    default:
        return; /* in flight or orphaned: not ours to cancel */
    }
    if (m->flags & HELD_KEYED) {
        keymap_del(&e->keys, kh, h);
        r->keyed--;
    }
    idvec_push(&e->cancel, m->node.seq);
    forget(e, h);
}

int eng_cancel(struct engine *e, uint16_t route, const char *key, size_t len)
{
    uint64_t kh;
    pool_handle h;
    int err;

    if (route >= e->nroutes)
        return 0;
    kh = e->key_hash(route, key, len);
    h = key_lookup(e, route, key, len, kh, &err);
    if (err < 0)
        return err;
    if (h == POOL_NIL) {
        e->routes[route].cancel_missed++;
        return 0;
    }
    cancel_msg(e, h, kh);
    e->routes[route].cancelled++;
    return 1;
}

eng_msg eng_find(struct engine *e, uint16_t route, const char *key, size_t len)
{
    int err;

    if (route >= e->nroutes)
        return 0;
    return key_lookup(e, route, key, len, e->key_hash(route, key, len), &err);
}

int eng_read(struct engine *e, eng_msg m, struct walrec_add *a)
{
    return read_record(e, H(e, m), &e->rbuf, a);
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

    uint64_t kh = 0;

    if (e->failed)
        return e->failed;
    if (route >= e->nroutes)
        return -EINVAL;
    if (a->flags & WALREC_ADD_KEYED) {
        /* Reschedule: the newest message with a key replaces the pending one. */
        int err;
        kh = e->key_hash(route, a->key, a->key_len);
        pool_handle old = key_lookup(e, route, a->key, a->key_len, kh, &err);
        if (err < 0)
            return err;
        if (old != POOL_NIL) {
            cancel_msg(e, old, kh);
            e->routes[route].replaced++;
        }
    }
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
    if (a->flags & WALREC_ADD_KEYED) {
        m->flags |= HELD_KEYED;
        keymap_put(&e->keys, kh, h);
        e->routes[route].keyed++;
    }
    e->held++;
    wlog_live(e->log, loc, 1);
    hvec_push(&e->pending, h);
    recent_push(e, route, a);
    e->added++;
    if (mp)
        *mp = h;
    return 0;
}

int eng_dirty(const struct engine *e)
{
    return e->pending.n > e->committing || e->done.n > 0 || e->cancel.n > 0 ||
           wlog_pending(e->log) > 0;
}

int eng_committing(const struct engine *e)
{
    return e->commit_busy;
}

void eng_set_notify(struct engine *e, void (*notify)(void *arg), void *arg)
{
    wlog_set_notify(e->log, notify, arg);
}

void eng_poll(struct engine *e)
{
    wlog_poll(e->log);
}

void eng_flush(struct engine *e)
{
    wlog_flush(e->log);
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
        if (k && e->pending.n > k)
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
    if (e->done.n && (r = append_ids(e, &e->done, WALREC_DONE)) < 0)
        return e->failed = r;
    if (e->cancel.n && (r = append_ids(e, &e->cancel, WALREC_CANCEL)) < 0)
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
        if (r == -ENOSPC || r == -EDQUOT)
            return r; /* nothing written: the batch stays and is tried again */
        return e->failed = r;
    }
    return 0;
}

/* ---- firing and publishing --------------------------------------------------- */

void eng_due_view(const struct engine *e, uint64_t now, struct duecount_view *out)
{
    wheel_due_view(e->wheel, now, out);
}

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
    pool_handle h;
    struct held *m;
    int res;

    if (route >= e->nroutes)
        return 0;
    r = &e->routes[route];
    if (!(h = r->due.head))
        return 0;
    m = H(e, h);
    res = read_record(e, m, &e->rbuf, a);
    if (res < 0)
        return res;
    if (m->flags & HELD_KEYED) {
        /* From now on a cancel of its key is missed: it is on its way. */
        keymap_del(&e->keys, e->key_hash(route, a->key, a->key_len), h);
        m->flags &= (uint8_t)~HELD_KEYED;
        r->keyed--;
    }
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

void eng_divert(struct engine *e, eng_msg h)
{
    if (H(e, h)->state != ENG_INFLIGHT)
        return;
    eng_unsent(e, h);
    H(e, h)->flags |= HELD_DIVERTED;
}

int eng_diverted(const struct engine *e, eng_msg h)
{
    return (H(e, h)->flags & HELD_DIVERTED) != 0;
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

size_t eng_list(struct engine *e, uint16_t route, uint64_t after_due, uint64_t after_id,
                struct eng_item *out, size_t limit, int *more, uint64_t *next_due,
                uint64_t *next_id)
{
    struct list_ctx w = {e, route, NULL, 0, limit + 1};
    struct eng_item *due;
    size_t nd = 0, i = 0, j = 0, n = 0, budget = ENG_LIST_BUDGET;
    uint64_t stop_due = 0, stop_id = 0;
    int stopped;
    pool_handle h;

    *more = 0;
    *next_due = *next_id = 0;
    if (route >= e->nroutes || limit == 0)
        return 0;
    /* The DUE list is in (due, id) order: from its head, past the cursor. */
    due = xmalloc((limit + 1) * sizeof(*due));
    for (h = e->routes[route].due.head; h && nd <= limit; h = H(e, h)->node.next) {
        struct held *m = H(e, h);
        if (m->node.due < after_due || (m->node.due == after_due && m->node.seq <= after_id))
            continue;
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
        if (m->flags & HELD_KEYED) {
            struct walrec_add a;
            int r = read_record(e, m, &e->kbuf, &a);
            if (r < 0)
                return r;
            kh = e->key_hash(m->route, a.key, a.key_len);
        }
        cancel_msg(e, h, kh);
        e->routes[p->route].cancelled++;
        p->removed++;
    }
    return p->cursor < p->end;
}

/* ---- space ----------------------------------------------------------------- */

static int cix_cmp(const void *a, const void *b)
{
    uint32_t x = ((const struct cix_ent *)a)->off, y = ((const struct cix_ent *)b)->off;
    return x < y ? -1 : x > y;
}

/* List the messages stored in segment seg, by offset: one pass over the pool. */
static void cix_build(struct engine *e, uint32_t seg)
{
    e->cix.n = 0;
    for (pool_handle h = 1; h < e->pool.next_fresh; h++) {
        const struct held *m = H(e, h);
        if (!m->state || m->loc.seg != seg)
            continue;
        if (e->cix.n == e->cix.cap) {
            e->cix.cap = e->cix.cap ? e->cix.cap * 2 : 4096;
            e->cix.v = xrealloc(e->cix.v, e->cix.cap * sizeof(*e->cix.v));
        }
        e->cix.v[e->cix.n++] = (struct cix_ent){m->loc.off, h};
    }
    qsort(e->cix.v, e->cix.n, sizeof(*e->cix.v), cix_cmp);
    e->cix.seg = seg;
}

static void cix_drop(struct engine *e)
{
    free(e->cix.v);
    memset(&e->cix, 0, sizeof(e->cix));
}

static int compact_is_live(void *arg, uint64_t msg_id, struct wlog_loc loc)
{
    struct engine *e = arg;
    size_t lo = 0, hi;

    if (e->cix.seg != loc.seg)
        cix_build(e, loc.seg);
    e->cix.last = POOL_NIL;
    hi = e->cix.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->cix.v[mid].off < loc.off)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == e->cix.n || e->cix.v[lo].off != loc.off)
        return 0;
    pool_handle h = e->cix.v[lo].h;
    const struct held *m = H(e, h);
    /* Listed when the segment's compaction began: is it still that message, there? */
    if (!m->state || m->node.seq != msg_id || m->loc.seg != loc.seg || m->loc.off != loc.off)
        return 0;
    e->cix.last = h;
    return 1;
}

static void compact_moved(void *arg, uint64_t msg_id, struct wlog_loc to)
{
    struct engine *e = arg;
    pool_handle h = e->cix.last;

    if (h != POOL_NIL && H(e, h)->node.seq == msg_id)
        H(e, h)->loc = to;
    e->cix.last = POOL_NIL;
}

uint64_t eng_due_ms(const struct engine *e, eng_msg m)
{
    return H(e, m)->node.due;
}

int eng_maintain(struct engine *e, size_t budget)
{
    struct wlog_compact_ops ops = {compact_is_live, compact_moved, e};
    int r = wlog_reclaim(e->log, budget, &ops);

    if (r < 0)
        return r;
    if (e->cix.seg) {
        /* Done with that segment? (the log compacts the oldest one; it is gone when done) */
        struct wlog_stats ls;
        wlog_stats(e->log, &ls);
        if (ls.compact_segment != e->cix.seg)
            cix_drop(e);
    }
    wlog_ckpt_poll(e->log);
    if (e->ck_active)
        ck_step(e);
    else
        ck_policy(e);
    return r || e->ck_active;
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

uint64_t eng_log_id(const struct engine *e)
{
    return wlog_id(e->log);
}
