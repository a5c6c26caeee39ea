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
 * A message is in at most one of the wheel and the two lists; the state
 * byte says which (the state machine is drawn in engine.h). The moves
 * between them, with the per-route counters each keeps right, are
 * engine_state.c's.
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
 *
 * Recovery's replay is in engine_recover.c; the checkpoint (format and walk)
 * in engine_ckpt.c; browse, purge and the figures in engine_admin.c; the
 * shared state in engine_int.h. Calls point down only: this file calls
 * engine_recover.c and engine_ckpt.c, and every one of them calls
 * engine_state.c (the held set's moves: lists, states, release, rings,
 * records, cancel, the DONE and CANCEL records), which calls none of them.
 * Nothing split out of this file calls back into it.
 */

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"
#include "base/xalloc.h"
#include "delay-bridge/idmap.h"
#include "keymap.h"
#include "delay-bridge/pool.h"
#include "wheel.h"

#include "engine_int.h"


int eng_seen(struct engine *e, uint16_t route, uint64_t fp, uint64_t *first_ms)
{
    struct recent_ring *r;
    uint32_t i;

    if (first_ms)
        *first_ms = 0;
    if (!e->recent || route >= e->nroutes)
        return 0;
    r = &e->routes[route].recent;
    for (i = 0; i < r->n; i++) {
        uint32_t slot = (r->head + i) % e->recent;
        if (r->fp[slot] == fp && !r->used[slot]) {
            r->used[slot] = 1; /* a second identical redelivery is a second message */
            if (first_ms)
                *first_ms = r->at[slot];
            return 1;
        }
    }
    return 0;
}

void eng_seen_reset(struct engine *e)
{
    for (int i = 0; e->recent && i < e->nroutes; i++)
        if (e->routes[i].recent.used)
            memset(e->routes[i].recent.used, 0, e->recent);
}

int eng_open(struct engine **out, const struct eng_opts *o)
{
    struct engine *e;
    uint64_t now = o->now_ms ? o->now_ms : clock_now_ms(), t0 = clock_mono_ms();
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
    e->max_routes = o->max_routes > o->nroutes ? o->max_routes : o->nroutes;
    if (e->max_routes >= (int)ENG_ROUTE_UNKNOWN)
        e->max_routes = (int)ENG_ROUTE_UNKNOWN - 1;
    e->routes = xcalloc((size_t)(e->max_routes ? e->max_routes : 1), sizeof(*e->routes));
    e->route_index = o->route_index;
    e->route_arg = o->route_arg;
    e->key_hash = o->key_hash;
    e->recent = o->fingerprint ? o->recent : 0;
    e->fingerprint = o->fingerprint;
    e->route_name = o->route_name;
    e->ck_interval_ms = o->checkpoint_interval_ms;
    e->ck_min_bytes = o->checkpoint_min_bytes;
    e->ck_step = o->checkpoint_step ? o->checkpoint_step : CK_STEP;
    e->wheel_split = o->wheel_split;
    e->ck_last_begin_ms = clock_mono_ms();
    keymap_init(&e->keys);
    /* A checkpoint's own replaces it as its META chunk is loaded (keymap.c says why). */
    if ((r = keymap_secret_new(e->key_secret)) < 0) {
        log_error("engine", "no random bytes for the key hash's secret", "err=\"%s\"",
                  strerror(-r));
        eng_close(e);
        return r;
    }

    r = wlog_recover(e->log, engine_replay, engine_ck_load, e, o->progress);
    if (r < 0) {
        eng_close(e);
        return r;
    }
    e->ck_ring_lsn = e->ck_end_lsn = 0;
    engine_build_wheel(e, now);
    /* The id index was for replay only: give its memory back. */
    idmap_destroy(&e->ids);
    malloc_trim(0);
    e->recovery_seconds = (double)(clock_mono_ms() - t0) / 1000.0;
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
    for (int i = 0; i < e->nroutes; i++) {
        free(e->routes[i].recent.fp);
        free(e->routes[i].recent.at);
        free(e->routes[i].recent.used);
    }
    free(e->routes);
    free(e->rbuf.p);
    free(e->kbuf.p);
    free(e->pending.v);
    free(e->done.v);
    free(e->cancel.v);
    free(e->done_buf);
    free(e->add_buf);
    free(e->ck_buf);
    free(e->ck_tk);
    free(e);
}

/* ---- keys ------------------------------------------------------------------- */

/*
 * The route's keyed pending message with this key: every handle stored
 * under the hash is a candidate, confirmed against the key in its record.
 * Two can hold one key after a restart (one was in flight when the other
 * came, so it was not replaced; the restart keyed both again): the newest
 * (highest id) answers, as it did before the restart (found by the
 * simulator, tests/sim). POOL_NIL if none; a log read error in *err.
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
    for (i = 0; i < n; i++) {
        struct held *m = H(e, cand[i]);
        struct walrec_add a;
        if (m->route != route || (found != POOL_NIL && m->node.seq < H(e, found)->node.seq))
            continue;
        if ((*err = engine_read_record(e, m, &e->kbuf, &a)) < 0)
            break;
        if (a.key_len == len && (len == 0 || memcmp(a.key, key, len) == 0))
            found = cand[i];
    }
    if (cand != few)
        free(cand);
    return found;
}

int eng_cancel(struct engine *e, uint16_t route, const char *key, size_t len)
{
    uint64_t kh;
    pool_handle h;
    int err;

    if (route >= e->nroutes)
        return 0;
    kh = engine_key_hash(e, route, key, len);
    h = key_lookup(e, route, key, len, kh, &err);
    if (err < 0)
        return err;
    if (h == POOL_NIL) {
        e->routes[route].cancel_missed++;
        return 0;
    }
    engine_cancel_msg(e, h, kh);
    e->routes[route].cancelled++;
    return 1;
}

eng_msg eng_find(struct engine *e, uint16_t route, const char *key, size_t len)
{
    int err;

    if (route >= e->nroutes)
        return 0;
    return key_lookup(e, route, key, len, engine_key_hash(e, route, key, len), &err);
}

int eng_read(struct engine *e, eng_msg m, struct walrec_add *a)
{
    return engine_read_record(e, H(e, m), &e->rbuf, a);
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
        kh = engine_key_hash(e, route, a->key, a->key_len);
        pool_handle old = key_lookup(e, route, a->key, a->key_len, kh, &err);
        if (err < 0)
            return err;
        if (old != POOL_NIL) {
            engine_cancel_msg(e, old, kh);
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
    engine_set_state(e, m, ENG_PENDING);
    if (a->flags & WALREC_ADD_KEYED) {
        m->flags |= HELD_KEYED;
        keymap_put(&e->keys, kh, h);
        e->routes[route].keyed++;
    }
    e->held++;
    wlog_live(e->log, loc, 1);
    hvec_push(&e->pending, h);
    engine_recent_push(e, route, a);
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

int eng_write_ahead(struct engine *e)
{
    int r;

    if (e->failed)
        return e->failed;
    if (!e->done.n)
        return 0;
    if ((r = engine_append_ends(e)) < 0)
        return e->failed = r;
    r = wlog_write(e->log);
    if (r == -ENOSPC || r == -EDQUOT)
        return r; /* appended all the same: the next commit writes them */
    if (r < 0)
        return e->failed = r;
    return r;
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
            engine_set_state(e, m, ENG_WAITING);
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
        return WLOG_EBUSY;
    if ((r = engine_append_ends(e)) < 0)
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

    engine_set_state(e, m, ENG_DUE);
    engine_due_insert(e, &e->routes[m->route].due, h, 0);
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
    res = engine_read_record(e, m, &e->rbuf, a);
    if (res < 0)
        return res;
    if (m->flags & HELD_KEYED) {
        /* From now on a cancel of its key is missed: it is on its way. */
        uint64_t kh = engine_key_hash(e, route, a->key, a->key_len);
        keymap_del(&e->keys, kh, h);
        m->flags = (uint8_t)((m->flags & ~HELD_KEYED) | HELD_TAKEN_KEYED);
        r->keyed--;
        if (e->ck_active && h < e->ck_cursor)
            engine_ck_key(e, m->node.seq, kh); /* the checkpoint's walk passed it keyed */
    }
    engine_list_unlink(e, &r->due, h);
    engine_list_link(e, &r->inflight, r->inflight.tail, h);
    engine_set_state(e, m, ENG_INFLIGHT);
    *mp = h;
    return 1;
}

void eng_confirm(struct engine *e, eng_msg h, uint64_t now_ms)
{
    struct held *m = H(e, h);
    struct route_state *r = &e->routes[m->route];

    if (m->state != ENG_INFLIGHT)
        return;
    engine_list_unlink(e, &r->inflight, h);
    db_hist_observe(&r->lateness,
                    now_ms > m->node.due ? (double)(now_ms - m->node.due) / 1000.0 : 0.0);
    r->confirmed++;
    e->confirmed++;
    idvec_push(&e->done, m->node.seq);
    engine_forget(e, h);
}

void eng_unsent(struct engine *e, eng_msg h)
{
    struct held *m = H(e, h);
    struct route_state *r = &e->routes[m->route];

    if (m->state != ENG_INFLIGHT)
        return;
    engine_list_unlink(e, &r->inflight, h);
    engine_set_state(e, m, ENG_DUE);
    engine_due_insert(e, &r->due, h, 1);
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
        engine_ck_step(e);
    else
        engine_ck_policy(e);
    return r || e->ck_active;
}
