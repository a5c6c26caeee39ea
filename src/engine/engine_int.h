/*
 * engine_int.h -- the engine's state, shared by its files (internal: only
 * engine*.c include it; engine.h is the contract).
 *
 *   engine.c        the message path: keys, ingest and group commit,
 *                   firing and publishing, reclamation, open and close
 *   engine_recover.c  recovery: the log replayed, the wheel built
 *   engine_ckpt.c   the checkpoint: its chunk format, the walk that writes
 *                   it, the policy that starts one, and loading it
 *   engine_admin.c  what operators ask outside the message path: browse,
 *                   purge, and the figures
 *   engine_state.c  the held set's moves they all use: route lists, state
 *                   and counters, release, redelivery rings, reading a
 *                   record back, cancel, the DONE and CANCEL records
 *
 * Calls point down only: engine_admin.c and engine.c on top; engine.c
 * calls engine_recover.c and engine_ckpt.c (eng_open, eng_maintain,
 * eng_take); all four call engine_state.c, which calls none of them. No
 * file split out of engine.c calls back into it.
 *
 * Every struct held lives in e->pool and is reached by handle (H()); the
 * engine owns every pointer in struct engine.
 */
#ifndef DELAY_BRIDGE_ENGINE_INT_H
#define DELAY_BRIDGE_ENGINE_INT_H

#include "delay-bridge/engine.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"
#include "base/xalloc.h"
#include "delay-bridge/idmap.h"
#include "keymap.h"
#include "delay-bridge/pool.h"
#include "wheel.h"

#define CK_STEP 65536 /* checkpoint: handles walked per eng_maintain() */
#define ENG_DUE_HINTS 8 /* browsers whose place in a DUE list is kept */

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
#define HELD_TAKEN_KEYED 0x08 /* keyed, out of the key map since eng_take (until a restart) */

_Static_assert(sizeof(struct held) == 40, "a held message is 40 bytes of RAM");

/* A doubly linked list of held messages through node.next/prev. */
struct hlist {
    pool_handle head, tail;
};

/*
 * The fingerprints of a route's last fresh ADDs (a ring). A match uses its
 * entry up (used[i] = 1) until eng_seen_reset(): only while the matched
 * delivery's ack may still reach the broker (eng_seen in engine.h).
 */
struct recent_ring {
    uint64_t *fp;
    uint64_t *at;   /* enqueue_ms of each, 0 when unknown (loaded from a checkpoint) */
    uint8_t *used;  /* matched since the last eng_seen_reset() */
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
    struct route_state *routes; /* room for max_routes */
    int nroutes, max_routes;
    struct hvec pending;   /* PENDING handles, in append order */
    size_t committing;     /* the first `committing` of them are in the commit running */
    int commit_busy;
    eng_commit_fn *commit_done;
    void *commit_arg;
    int failed;            /* first commit error */
    struct idvec done;     /* ids for the next DONE record */
    struct idvec cancel;   /* ids for the next CANCEL record */
    struct keymap keys;    /* hash(route, key) -> handle, keyed pending messages */
    uint64_t (*key_hash)(uint16_t, const char *, size_t); /* NULL: keymap_hash */
    uint8_t key_secret[KEYMAP_SECRET_LEN]; /* keymap_hash's; a checkpoint's when one was loaded */
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
    /*
     * Browse: where recent pages stopped in routes' DUE lists, so that the
     * next page of a browser resumes there instead of skipping the list
     * from its head (eng_list); a hint is good while its message is still
     * DUE with the same id. A few browsers at once; the oldest is replaced.
     */
    struct due_hint {
        uint64_t after_due, after_id; /* the cursor the next page will bring */
        uint64_t due, id;             /* h's own key */
        pool_handle h;                /* the last DUE message at or before the cursor */
        uint16_t route;
    } due_hint[ENG_DUE_HINTS];
    unsigned due_hint_next;

    /* checkpoints: the walk in progress, the policy, and what recovery took from one */
    uint64_t ck_interval_ms, ck_min_bytes;
    uint32_t ck_step;
    uint32_t wheel_split;         /* eng_opts.wheel_split */
    int ck_active;
    uint32_t ck_cursor, ck_end;   /* handles still to walk: [cursor, end) */
    uint8_t *ck_buf;              /* a chunk being filled */
    size_t ck_n, ck_cap;
    /*
     * Key entries (msg id, fingerprint) of keyed messages taken out of the
     * key map (eng_take) while they are still held: a restart keys them
     * again (a replayed ADD is keyed), so the checkpoint must too.
     */
    uint8_t *ck_tk;
    size_t ck_tk_n, ck_tk_cap;
    uint64_t ck_last_begin_ms, ck_appended_at_begin;
    uint64_t ck_ring_lsn;         /* recovery: fresh ADDs from here on go on the rings */
    uint64_t ck_end_lsn;          /* recovery: an ADD below it may be held already */
};

static inline void hvec_push(struct hvec *a, pool_handle h)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
    }
    a->v[a->n++] = h;
}

static inline void idvec_push(struct idvec *a, uint64_t id)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
    }
    a->v[a->n++] = id;
}

/* The hash of (route, key) the key map is kept under. */
static inline uint64_t engine_key_hash(const struct engine *e, uint16_t route, const char *key,
                                       size_t len)
{
    return e->key_hash ? e->key_hash(route, key, len) : keymap_hash(e->key_secret, route, key, len);
}

static inline struct held *H(const struct engine *e, pool_handle h)
{
    return (struct held *)pool_at(&e->pool, h);
}

/*
 * engine_state.c: the held set's moves, which every other engine file uses
 * (it calls none of them back).
 */
void engine_list_link(struct engine *e, struct hlist *l, pool_handle prev, pool_handle h);
void engine_list_unlink(struct engine *e, struct hlist *l, pool_handle h);
/* Insert h into due list l in (due, id) order, searching from the head or the tail. */
void engine_due_insert(struct engine *e, struct hlist *l, pool_handle h, int from_head);
/* Move m to state s, keeping the per-route counters right. */
void engine_set_state(struct engine *e, struct held *m, enum eng_state s);
/* Release h: out of the pool, the counters and the log's live set. */
void engine_forget(struct engine *e, pool_handle h);
/* Fingerprint fp (first taken at `at` ms, 0 = unknown) onto route's redelivery ring. */
void engine_ring_push(struct engine *e, uint16_t route, uint64_t fp, uint64_t at);
/* A fresh ADD's fingerprint onto its route's redelivery ring. */
void engine_recent_push(struct engine *e, uint16_t route, const struct walrec_add *a);
/* Read m's record into b and decode it. 0 or a negative code. */
int engine_read_record(struct engine *e, const struct held *m, struct wlog_buf *b,
                       struct walrec_add *a);
/* Cancel h (key hash kh): out of its structure and the key map, id queued for CANCEL. */
void engine_cancel_msg(struct engine *e, pool_handle h, uint64_t kh);
/*
 * Append the DONE and CANCEL records of the messages confirmed or cancelled
 * since the last commit (eng_commit does, first; so does a checkpoint before
 * it is sealed). 0 or the log's error.
 */
int engine_append_ends(struct engine *e);

/* engine_recover.c */
/* wlog_replay_fn: one record of the log replayed into the held set. */
int engine_replay(void *arg, const struct walrec_hdr *hdr, const uint8_t *payload,
                  struct wlog_loc loc);
/* Every recovered message into a new wheel whose clock starts before them all. */
void engine_build_wheel(struct engine *e, uint64_t now);

/* engine_ckpt.c */
/* A checkpoint in progress gets a key entry for taken keyed message id with key hash kh. */
void engine_ck_key(struct engine *e, uint64_t id, uint64_t kh);
/* wlog_ckpt_fn: one chunk of a checkpoint being loaded. 0, 1 (not usable: replay all) or ENG_E*. */
int engine_ck_load(void *arg, uint8_t kind, const uint8_t *p, size_t n);
/* One step of the checkpoint walk in progress (eng_maintain). */
void engine_ck_step(struct engine *e);
/* Start a checkpoint when the interval has passed and enough was appended. */
void engine_ck_policy(struct engine *e);

#endif
