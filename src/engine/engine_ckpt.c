/*
 * engine_ckpt.c -- the engine's checkpoint: what it writes into the log's
 * CHECKPOINT file (walckpt.c frames, checksums and installs the chunks; this
 * file decides what they say) and how it reads them back.
 *
 * A checkpoint is a walk over the held set by handle, a few ten thousand
 * handles per eng_maintain() (checkpoint_step), so the held set changes
 * under it: a message seen is written as it is then; one added after the
 * walk passed its handle has its ADD replayed on top (its LSN is at or
 * after the META chunk's ring_lsn); one released before the walk reached it
 * is not written, and its DONE is replayed. Recovery loads the chunks, then
 * the log replays from the checkpoint's start_lsn, which the log took when
 * the checkpoint began.
 *
 * CHUNKS (payloads of walckpt chunks; all integers little-endian)
 *
 *   kind 1  META, once, first
 *     0   4  version, 2 (a version 1 META, from before the key hash had a
 *            secret, is refused: its KEYS fingerprints are of the old
 *            unkeyed hash, so the whole log is replayed, once)
 *     4   4  nroutes: the configured routes when it was taken
 *     8   8  held: messages held at the start (sizes the id index)
 *    16   8  ring_lsn: the log's next LSN at the start; a fresh ADD replayed
 *            from here on goes on its route's redelivery ring
 *    24   4  ring: the ring size per route (routes[].recent)
 *    28   4  zero
 *    32  16  the key hash's secret (keymap_hash): the KEYS fingerprints
 *            are under it, so the engine that loads this checkpoint keys
 *            its map with it from then on (keymap.c: why it is kept here)
 *    48      per route, in configuration order:
 *              0    2  len: the route's name length
 *              2  len  the name (must match the configuration, or the
 *                      checkpoint is not used: the whole log is replayed)
 *              +0   4  k: fingerprints on the ring
 *              +4 8*k  the fingerprints, oldest first, those eng_seen()
 *                      used up too: a restart drops the connection their
 *                      acks went out on, so each may be redelivered again
 *                      (a checkpoint before this rule wrote them as 0,
 *                      which matches nothing)
 *
 *   kind 2  HELD, any number, each a whole number of 32-byte entries:
 *     0   8  msg id
 *     8   8  due time, ms since the epoch
 *    16   4  the ADD record's segment
 *    20   4  its offset in the segment
 *    24   4  its length, header included
 *    28   2  route index; 0xFFFF: an orphan (route not configured)
 *    30   2  zero
 *
 *   kind 3  KEYS, any number, each a whole number of 12-byte entries,
 *           written after every HELD chunk (the key map as it is then,
 *           and every keyed message taken out of it but still held, in
 *           flight or nacked: a restart keys those again, as a replay does):
 *     0   8  msg id of a keyed message
 *     8   4  its key fingerprint (the key map's 32 bits; stands in for
 *            the key hash until the wheel is built)
 *
 *   kind 4  END, once, last: 8 bytes
 *     0   8  the log's next LSN when the walk finished; a fresh ADD below
 *            it may already be held from the HELD chunks (looked up by id)
 *
 * Chunks are at most CK_CHUNK (1 MiB) bytes, one bigger only if a single
 * META entry needs it. An entry whose segment is gone is skipped at load:
 * reclamation deletes only segments with nothing live, so the message was
 * done since or a later copy of it is replayed. Any other inconsistency is
 * WLOG_ECORRUPT; routes renamed, added or reordered return 1 and the log is
 * replayed whole.
 *
 * Layering: engine.c calls this file (eng_open loads, eng_maintain walks,
 * eng_take records a taken key); what it needs of the held set -- reading
 * a record back, the pending DONE and CANCEL records, the redelivery
 * rings -- comes from engine_state.c, never back from engine.c.
 */
#include "engine_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

#define CK_META 1
#define CK_HELD 2
#define CK_KEYS 3
#define CK_END 4
#define CK_HELD_SIZE 32
#define CK_KEY_SIZE 12
#define CK_META_HEAD 48 /* the META chunk's fixed part, version 2 */
#define CK_CHUNK (1u << 20)  /* bytes per chunk */
#define CK_ORPHAN 0xFFFFu


/* The meta chunk: routes must be the configured ones, in order; restores the rings. */
static int ck_load_meta(struct engine *e, const uint8_t *p, size_t n)
{
    const uint8_t *end = p + n;
    uint32_t nroutes, ring;

    if (n >= 4 && walrec_get32(p) == 1) {
        log_info("engine", "checkpoint from before the key hash had a secret; replaying the "
                 "whole log, once", "version=1");
        return 1;
    }
    if (n < CK_META_HEAD || walrec_get32(p) != 2)
        return WLOG_ECORRUPT;
    nroutes = walrec_get32(p + 4);
    ring = walrec_get32(p + 24);
    if ((int)nroutes != e->nroutes) {
        log_info("engine", "checkpoint taken with other routes; replaying the whole log",
                 "checkpoint_routes=%u configured_routes=%d", nroutes, e->nroutes);
        return 1;
    }
    const uint8_t *q = p + CK_META_HEAD;
    for (uint32_t i = 0; i < nroutes; i++) {
        if (end - q < 2 || end - q - 2 < walrec_get16(q))
            return WLOG_ECORRUPT;
        uint16_t len = walrec_get16(q);
        int r = e->route_index ? e->route_index(e->route_arg, (const char *)q + 2, len) : -1;
        if (r != (int)i) {
            log_info("engine", "routes renamed or reordered since the checkpoint; replaying the "
                     "whole log", "route=%.*s index=%u", (int)len, (const char *)q + 2, i);
            return 1;
        }
        q += 2 + len;
        if (end - q < 4 || (uint64_t)(end - q - 4) / 8 < walrec_get32(q))
            return WLOG_ECORRUPT;
        uint32_t k = walrec_get32(q);
        q += 4;
        /* The newest min(k, ring size) fingerprints, oldest first. */
        uint32_t skip = e->recent && k > e->recent ? k - e->recent : 0;
        for (uint32_t j = skip; j < k && e->recent && ring; j++)
            engine_ring_push(e, (uint16_t)i, walrec_get64(q + 8 * j), 0); /* time unknown */
        q += 8 * (size_t)k;
    }
    memcpy(e->key_secret, p + 32, KEYMAP_SECRET_LEN); /* nothing is hashed before this chunk */
    e->ck_ring_lsn = walrec_get64(p + 16);
    idmap_reserve(&e->ids, (size_t)walrec_get64(p + 8));
    return 0;
}

static int ck_load_held(struct engine *e, const uint8_t *p, size_t n)
{
    if (n % CK_HELD_SIZE)
        return WLOG_ECORRUPT;
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
        return WLOG_ECORRUPT;
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

int engine_ck_load(void *arg, uint8_t kind, const uint8_t *p, size_t n)
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
            return WLOG_ECORRUPT;
        e->ck_end_lsn = walrec_get64(p);
        return 0;
    default:
        return WLOG_ECORRUPT;
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
        return WLOG_EBUSY;
    if ((r = wlog_ckpt_begin(e->log)) < 0)
        return r;
    wlog_stats(e->log, &ls);
    e->ck_active = 1;
    e->ck_cursor = 1;
    e->ck_tk_n = 0;
    e->ck_end = e->pool.next_fresh; /* later handles hold ADDs the replay will see */
    e->ck_last_begin_ms = clock_mono_ms();
    e->ck_appended_at_begin = ls.appended_bytes;

    /* meta: the routes and their recent rings as of now */
    uint8_t *q = ck_room(e, CK_META_HEAD);
    memset(q, 0, CK_META_HEAD);
    walrec_put32(q, 2);
    walrec_put32(q + 4, (uint32_t)e->nroutes);
    walrec_put64(q + 8, e->held);
    walrec_put64(q + 16, wlog_next_lsn(e->log));
    walrec_put32(q + 24, e->recent);
    memcpy(q + 32, e->key_secret, KEYMAP_SECRET_LEN);
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
void engine_ck_step(struct engine *e)
{
    size_t budget = e->ck_step;
    int r = 0;

    while (budget-- > 0 && e->ck_cursor < e->ck_end) {
        pool_handle h = e->ck_cursor++;
        const struct held *m = H(e, h);
        if (!m->state)
            continue;
        if (m->flags & HELD_TAKEN_KEYED) {
            /* taken since it was keyed: its key entry needs its record (rare: in flight or nacked) */
            struct walrec_add a;
            if ((r = engine_read_record(e, m, &e->kbuf, &a)) < 0)
                goto failed;
            engine_ck_key(e, m->node.seq, engine_key_hash(e, m->route, a.key, a.key_len));
        }
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
    for (size_t i = 0; i < e->ck_tk_n; i += CK_KEY_SIZE) {
        if (e->ck_n + CK_KEY_SIZE > CK_CHUNK && (r = ck_flush(e, CK_KEYS)) < 0)
            goto failed;
        memcpy(ck_room(e, CK_KEY_SIZE), e->ck_tk + i, CK_KEY_SIZE);
    }
    e->ck_tk_n = 0;
    if ((r = ck_flush(e, CK_KEYS)) < 0)
        goto failed;
    /*
     * The walk skipped every message that died before it got there, but
     * their DONE and CANCEL records wait for the next commit. Appended now,
     * they come before the end LSN, so the log installs the checkpoint only
     * once they are durable: otherwise a crash before that commit would
     * recover from a checkpoint without a message whose end the log never
     * got (found by the simulator, tests/sim).
     */
    if ((r = engine_append_ends(e)) < 0) {
        e->failed = r;
        goto failed;
    }
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
    e->ck_tk_n = 0;
}

void engine_ck_key(struct engine *e, uint64_t id, uint64_t kh)
{
    if (e->ck_tk_n + CK_KEY_SIZE > e->ck_tk_cap) {
        e->ck_tk_cap = e->ck_tk_cap ? 2 * e->ck_tk_cap : 64 * CK_KEY_SIZE;
        e->ck_tk = xrealloc(e->ck_tk, e->ck_tk_cap);
    }
    walrec_put64(e->ck_tk + e->ck_tk_n, id);
    walrec_put32(e->ck_tk + e->ck_tk_n + 8, keymap_fingerprint(kh));
    e->ck_tk_n += CK_KEY_SIZE;
}

void engine_ck_policy(struct engine *e)
{
    struct wlog_stats ls;
    uint64_t now = clock_mono_ms();

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
