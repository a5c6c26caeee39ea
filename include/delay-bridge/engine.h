/*
 * engine.h -- held messages: the one owner of every state a message is in.
 *
 * The engine takes messages in, makes them durable in group commits, hands
 * them out when due and forgets them once the broker confirmed their
 * publish. It knows nothing of RabbitMQ or of the event loop: the publisher
 * is a client that takes due messages and reports what the broker said,
 * through the bridge. RAM per message is 40 bytes plus its slot in the id
 * index; routing key, properties and body stay in the log and are read back
 * by eng_take() when the message is published.
 *
 * The state machine. Every held message is in exactly one state; every
 * arrow is one function, and nothing else moves a message:
 *
 *            eng_add            eng_commit done        eng_advance(now >= due)
 *   (new) ----------> PENDING ------------------> WAITING ---------------> DUE
 *                                                                          | ^
 *                                                               eng_take   | | eng_unsent (nack)
 *                                                                          v | eng_unsent_route
 *                                                                     INFLIGHT   (channel or
 *                                                                          |      connection lost)
 *                                                              eng_confirm |
 *                                                                          v
 *                                                       (gone: DONE record queued for the
 *                                                        next commit; its RAM is freed now)
 *
 *   A publish the broker returned (no queue bound) goes INFLIGHT -> DUE
 *   through eng_divert(): marked to be published to the route's unroutable
 *   exchange next time (eng_diverted()); the mark is not durable.
 *
 *   ORPHAN   recovered for a route missing from the configuration: kept in
 *            the log, never fired, counted in eng_stats().orphaned.
 *
 *   PENDING   appended to the log buffer, not durable: never fires, is not
 *             acked to the broker.
 *   WAITING   durable, in the timing wheel.
 *   DUE       due, waiting for its route's publish channel, in (due, id)
 *             order in the route's due list; a message put back from
 *             INFLIGHT takes its place in that order again.
 *   INFLIGHT  handed to the publisher, in take order in the route's
 *             in-flight list; eng_unsent_route() puts them all back.
 *
 * Shutdown in any state needs nothing: every message not confirmed keeps
 * its ADD record, and after a restart it is WAITING again (or DUE at once
 * if overdue), under the same id. A confirmed message whose DONE record was
 * not committed before the stop comes back too: delivery is at least once.
 *
 * Keys. A message added with an x-delay-key (WALREC_ADD_KEYED) can be
 * found by (route, key) while it is PENDING, WAITING or DUE: a newer message
 * with the same key on the route replaces it (reschedule, debounce), and
 * eng_cancel() removes it. Both write a CANCEL record with the next commit;
 * a cancelled message leaves the held set at once and never fires, even
 * after a crash (replay applies CANCEL like DONE) or a compaction (only
 * live records are copied). Once taken (INFLIGHT) a message can no longer
 * be cancelled or replaced: the cancel counts as missed. RAM: a keyed
 * message costs one keymap slot (16-24 bytes: the 64-bit hash of route and
 * key, and the handle); a hash hit is confirmed against the key stored in
 * the WAL record.
 *
 * Handles (eng_msg) stay valid from eng_add until eng_confirm; a DUE or
 * INFLIGHT message's handle is stable, so the publisher may keep it with its
 * confirm tag. Not thread-safe: one event loop owns the engine.
 */
#ifndef DB_ENGINE_H
#define DB_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/stats.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"

struct engine;

/* A held message. 0 is never a message. */
typedef uint32_t eng_msg;

/*
 * Errors: 0, -errno, or a code of the log's one table (wlog.h's WLOG_E*,
 * text from wlog_strerror()), passed through unchanged: the engine has no
 * codes of its own.
 */

#define ENG_ROUTE_UNKNOWN 0xFFFFu

enum eng_state {
    ENG_PENDING = 1,
    ENG_WAITING = 2,
    ENG_DUE = 3,
    ENG_INFLIGHT = 4,
    ENG_ORPHAN = 5,
};

struct eng_opts {
    struct wlog *log; /* the engine owns it from here on, even when eng_open fails */
    int nroutes;      /* routes 0..nroutes-1, at most ENG_ROUTE_UNKNOWN */
    int max_routes;   /* room for eng_route_added() up to this many; 0 = nroutes */
    /* Map a route name found in the log to a route index, or -1 (orphan). */
    int (*route_index)(void *arg, const char *name, size_t len);
    /* The name of route i (for checkpoints; NULL: no checkpoints are written). */
    const char *(*route_name)(void *arg, int i);
    void *route_arg;
    uint64_t now_ms; /* wall clock at open; 0 = read it */
    struct db_progress *progress; /* optional: recovery progress (eng_open may run on a thread) */
    /*
     * Redeliveries: how many of each route's most recent fresh ADDs to
     * remember by fingerprint (eng_seen). At least the largest prefetch (no
     * more deliveries than that can be unacked on a route); the bridge keeps
     * max(prefetch, 4096), since an ack lost on a connection the broker had
     * closed lets a delivery come back later (bridge.c). 0 = none.
     */
    uint32_t recent;
    /* Fingerprint of a record (msgrec_fingerprint); required when recent > 0. */
    uint64_t (*fingerprint)(const struct walrec_add *a);
    /*
     * Hash of (route, key); NULL = keymap_hash, SipHash under a secret of
     * the engine's (a fresh one, or the loaded checkpoint's). Tests force
     * collisions with it, and the benchmark puts the old unkeyed hash back.
     */
    uint64_t (*key_hash)(uint16_t route, const char *key, size_t len);
    /*
     * Checkpoints (when the log has them): eng_maintain() begins one when
     * checkpoint_interval_ms passed since the last began and the log grew by
     * at least max(checkpoint_min_bytes, half the last checkpoint's size)
     * since, so checkpoints never write more than half as much as the log.
     * 0 = never. eng_checkpoint() begins one now.
     */
    uint64_t checkpoint_interval_ms;
    uint64_t checkpoint_min_bytes;
    uint32_t checkpoint_step; /* held messages written per eng_maintain(); 0 = 65536 */
    /* Tests: the timing wheel's split size (wheel_set_split), so that small held
     * sets split too; 0 = the wheel's own (32768). */
    uint32_t wheel_split;
};

/*
 * Recover the held set from the log (wlog_recover) and build the wheel, its
 * clock just before the earliest due time, so that the first eng_advance()
 * to the present fires every overdue message in (due, id) order. It touches
 * nothing but the engine and its log, so it may run on a thread of its own
 * while the caller's loop serves /stats from o->progress.
 */
int eng_open(struct engine **out, const struct eng_opts *o);
/* Close the log (without committing) and free everything. NULL is fine. */
void eng_close(struct engine *e);

/*
 * Append a message for route (a->msg_id is assigned here): PENDING. Not
 * durable until a commit completes. *m (may be NULL) gets its handle. A
 * keyed message first cancels the route's pending message with the same
 * key, if any (counted in eng_route_stats().replaced).
 */
int eng_add(struct engine *e, uint16_t route, struct walrec_add *a, eng_msg *m);

/* Anything for eng_commit() to do? */
int eng_dirty(const struct engine *e);

/*
 * While the commit waits (its pacing): append the DONE records of the
 * confirms so far and write everything appended into the log's files
 * without waiting for the disk (wlog.h, write). A kill -9 before the
 * commit then does not publish those messages again; a crash of the
 * machine may (at least once). Nothing is acked or counted durable by it.
 * 1 written, 0 nothing to do (no confirm waiting, a commit running, or a
 * log that does not offer it), or a negative code (the log failed;
 * -ENOSPC/-EDQUOT: the commit meets the full disk as before).
 */
int eng_write_ahead(struct engine *e);

/*
 * Make every add and every confirm so far durable (one group commit).
 * Returns 0 and calls done(arg, err) exactly once -- before returning or
 * later -- after the committed adds became WAITING; or returns WLOG_EBUSY
 * (a commit is in progress: try again after its done), -ENOSPC or -EDQUOT
 * (the disk is full: nothing was written, everything stays PENDING, try
 * again later), or another negative code, and never calls done. After any
 * other failure every later call fails.
 */
typedef void eng_commit_fn(void *arg, int err);
int eng_commit(struct engine *e, eng_commit_fn *done, void *arg);
int eng_committing(const struct engine *e);

/*
 * A log that syncs on a thread of its own completes commits later: it calls
 * notify (from that thread) when a completion is ready, and the owner's loop
 * then calls eng_poll(), which runs it (the commit's done) on the loop thread.
 */
void eng_set_notify(struct engine *e, void (*notify)(void *arg), void *arg);
void eng_poll(struct engine *e);
/*
 * Block until the commit in progress, if any, has completed (its done has
 * run). For an operator's request that must answer "durable": it costs the
 * loop one fsync's time.
 */
void eng_flush(struct engine *e);

/* Earliest time the wheel may have something to do (ms), UINT64_MAX if nothing waits. */
uint64_t eng_next_event(const struct engine *e);

/* What falls due ahead of now (ms), from the wheel's counters (wheel_due_view). */
struct duecount_view;
void eng_due_view(const struct engine *e, uint64_t now, struct duecount_view *out);

/* WAITING -> DUE for everything due at or before now. Returns how many. */
size_t eng_advance(struct engine *e, uint64_t now);

/*
 * A route added at run time: route must be the next index (the engine's
 * route count, below max_routes), or one it already has (a route removed
 * and added back keeps its index: nothing to do). Orphans -- messages
 * recovered for a route the configuration did not have -- whose record
 * names route_name(route) are adopted: WAITING on the wheel, keyed again,
 * fired when due. Reads each orphan's record once. Returns the number
 * adopted, or a negative code (-EINVAL: no room; a log read failed).
 */
int eng_route_added(struct engine *e, int route);

/* Routes the engine knows (eng_opts.nroutes plus those added). */
int eng_routes(const struct engine *e);

/* Messages of route in the DUE state. */
size_t eng_due(const struct engine *e, uint16_t route);

/*
 * DUE -> INFLIGHT for the first due message of route, read back from the
 * log into *a (pointers valid until the next eng_take). Returns 1 and sets
 * *m, 0 if route has nothing due, or a negative code (log read failed).
 */
int eng_take(struct engine *e, uint16_t route, eng_msg *m, struct walrec_add *a);

/* INFLIGHT -> gone: the broker confirmed it at now_ms (lateness is recorded). */
void eng_confirm(struct engine *e, eng_msg m, uint64_t now_ms);

/* INFLIGHT -> DUE: not published after all (nack). */
void eng_unsent(struct engine *e, eng_msg m);

/* INFLIGHT -> DUE, marked for the unroutable exchange (its publish was returned). */
void eng_divert(struct engine *e, eng_msg m);
/* Was m diverted (eng_divert) since it was last taken? */
int eng_diverted(const struct engine *e, eng_msg m);

/* INFLIGHT -> DUE for every in-flight message of route (channel or connection lost). */
size_t eng_unsent_route(struct engine *e, uint16_t route);

/*
 * A redelivered delivery (redelivered flag set) with fingerprint fp: was it
 * already logged? The engine remembers the fingerprints of each route's
 * last `recent` fresh ADD records -- at run time as they are added, and at
 * recovery from the tail of the log, so the memory survives a crash. A hit
 * uses its entry up (two identical messages, both stored, are two hits)
 * until eng_seen_reset() -- or a restart, which rebuilds every entry. 1
 * seen: ack it and store nothing; 0 not seen. *first_ms (may be NULL) gets
 * the enqueue time of the logged copy -- when it was first taken, the time
 * its key event carries -- or 0 when not known (a ring loaded from a
 * checkpoint keeps fingerprints only).
 */
int eng_seen(struct engine *e, uint16_t route, uint64_t fp, uint64_t *first_ms);
/*
 * Every entry eng_seen() used up may match again: the connection that
 * brought those deliveries was lost, and an ack not processed by then is
 * lost with it, so the broker may deliver them once more (a consumer
 * timeout of a 4.3 quorum queue redelivers a stashed delivery on the same
 * connection, which its cancel then drops: integration.broker4 stored 918
 * messages twice). A restart gives the same answers: the rings come back
 * from the log and the checkpoint whole, uses forgotten.
 */
void eng_seen_reset(struct engine *e);

/* The state of m (enum eng_state). */
int eng_state(const struct engine *e, eng_msg m);

/*
 * Cancel route's pending message with this key: 1 (cancelled; a CANCEL
 * record goes out with the next commit), 0 (no such key pending: unknown,
 * already published, or in flight), or a negative code (log read failed).
 */
int eng_cancel(struct engine *e, uint16_t route, const char *key, size_t len);

/* route's pending (PENDING, WAITING or DUE) message with this key, or 0. */
eng_msg eng_find(struct engine *e, uint16_t route, const char *key, size_t len);

/* Due time of a held message, ms since the epoch. */
uint64_t eng_due_ms(const struct engine *e, eng_msg m);

/* Read any held message's record back (pointers valid until the next read or take). */
int eng_read(struct engine *e, eng_msg m, struct walrec_add *a);

/*
 * Browse: up to limit WAITING or DUE messages of route in (due, id) order,
 * after the cursor (after_due, after_id) -- (0, 0) from the start. Returns
 * how many were put in out; when more may follow, *more is 1 and
 * (*next_due, *next_id) is the cursor to continue from. The cost is bounded
 * whatever the held set's size and shape:
 *  - the route's DUE list (due, not yet published) is read from where the
 *    previous page with this cursor stopped (the engine keeps the place of
 *    the last 8 pages), else from its head, skipping at most
 *    ENG_LIST_BUDGET messages at or before the cursor: then the page is
 *    empty, its cursor the one given, and the next page with it goes on
 *    skipping from there (a cursor from long ago, deep in a long list);
 *  - the wheel is walked from the cursor (wheel_walk: split slots take it
 *    straight there) over at most ENG_LIST_BUDGET entries of any route plus
 *    one leaf (32768), then the page is short and the cursor goes on from
 *    where the walk stopped.
 * Measured at 10M held (tests/bench/bench_browse): at most 23 ms a page of
 * 100, for any due-time distribution.
 */
#define ENG_LIST_BUDGET 65536
struct eng_item {
    eng_msg m;
    uint64_t id, due_ms;
    int state;
};
size_t eng_list(struct engine *e, uint16_t route, uint64_t after_due, uint64_t after_id,
                struct eng_item *out, size_t limit, int *more, uint64_t *next_due,
                uint64_t *next_id);

/*
 * Purge, as a bounded job: cancel every PENDING, WAITING or DUE message of
 * route due before due_before (UINT64_MAX: all), walking the message table
 * budget entries per call, so the loop stays responsive however many are
 * held. Messages added after the job started may or may not be seen.
 */
struct eng_purge {
    uint16_t route;
    uint64_t due_before;
    int by_key;               /* set after eng_purge_begin: only messages whose routing */
    uint8_t routing_key_len;  /* key is routing_key (a retry route's queue); each one */
    char routing_key[256];    /* looked at is then read back from the log */
    int by_exchange;          /* likewise: only messages published to exchange (a */
    uint8_t exchange_len;     /* delayed_exchanges route's own exchanges) */
    char exchange[256];
    uint32_t cursor;  /* next handle to look at */
    uint32_t end;     /* handles at the start of the job */
    uint64_t removed; /* cancelled so far */
};
void eng_purge_begin(struct engine *e, struct eng_purge *p, uint16_t route, uint64_t due_before);
/* 1 if more remains, 0 when done, negative on a log error. */
int eng_purge_step(struct engine *e, struct eng_purge *p, size_t budget);

/*
 * Reclaim log space, a bounded amount of work, and advance a checkpoint:
 * begin one when the policy in eng_opts says so, snapshot a bounded number
 * of held messages into it, install it once the log is durable. 1 if more
 * remains, 0, or negative (a log error; a failed checkpoint is not one: it
 * is logged, counted and tried again at the next interval).
 *
 * Checkpoint layout, the engine's chunks (little-endian):
 *   kind 1, meta, once, first:
 *     0 4 version 1 | 4 4 nroutes | 8 8 held at begin (index size hint)
 *     16 8 ring_lsn: fresh ADDs replayed from here on go on the recent rings
 *     24 4 ring size | 28 4 zero
 *     then per route: 2 name length, name, 4 n, n x 8 fingerprints (oldest first)
 *   kind 2, held messages, 32 bytes each:
 *     0 8 msg_id | 8 8 due_ms | 16 4 loc.seg | 20 4 loc.off | 24 4 loc.len
 *     28 2 route (0xFFFF: orphan) | 30 2 zero
 *   kind 3, keys, 12 bytes each: 0 8 msg_id | 8 4 key fingerprint (keymap)
 *   kind 4, end, once, last: 0 8 the log's next LSN when the walk ended
 * Recovery uses a checkpoint only if its routes are the configured ones, in
 * the same order (orphans and key fingerprints depend on route indexes);
 * otherwise it replays the whole log.
 */
int eng_maintain(struct engine *e, size_t budget);

/* Begin a checkpoint now (0), or WLOG_EBUSY if one is running, or -ENOTSUP. */
int eng_checkpoint(struct engine *e);

struct eng_route_stats {
    uint64_t pending, waiting, due, inflight; /* by state */
    uint64_t held;                            /* all four */
    uint64_t confirmed;                       /* eng_confirm() calls */
    uint64_t cancelled;                       /* eng_cancel() hits and purged messages */
    uint64_t replaced;                        /* keyed messages replaced by a newer one */
    uint64_t cancel_missed;                   /* eng_cancel() for a key not pending */
    uint64_t keyed;                           /* pending messages with a key */
    uint64_t oldest_due_ms;                   /* first DUE message's due time, 0 = none */
    struct db_hist lateness;                  /* confirm time - due time, seconds */
};

struct eng_stats {
    uint64_t held;     /* every message held, orphans included */
    uint64_t pending, waiting, due, inflight;
    uint64_t orphaned; /* route unknown */
    uint64_t added, confirmed;
    uint64_t next_due_ms;   /* earliest due time of a WAITING message, 0 = none (see
                               wheel_min_due: exact unless 65536 share one wheel slot) */
    uint64_t ram_bytes;     /* pool + index + wheel + key map */
    double recovery_seconds;
    /* the log's own figures */
    uint64_t log_segments, log_disk_bytes, log_live_bytes, log_live_records;
    uint64_t log_commits, log_appended_bytes, log_compacted_bytes;
    int log_failed;
    int log_no_space; /* the last commit found the disk full */
    int log_intake_paused; /* space low: take no new messages (wal_space.c) */
    uint64_t log_free_bytes, log_reserve_bytes, log_reserve_held, log_reserve_spent;
    struct db_hist fsync;
    uint64_t compact_segment, compact_done, compact_total; /* reclaim in progress */
    /* checkpoints (wlog_stats) */
    int ckpt_state;
    uint64_t ckpt_installed, ckpt_failed, ckpt_lsn, ckpt_bytes, ckpt_age_ms, ckpt_loaded_lsn;
    double ckpt_seconds;
    uint64_t ckpt_walked, ckpt_total; /* the walk in progress: handles looked at, of */
};
void eng_stats(const struct engine *e, struct eng_stats *s);
/*
 * The log's intake gate (wlog.h: WLOG_INTAKE_OK, _WAIT, _NEVER): may a new
 * message whose record is about bytes long (0: any) be added now? WAIT
 * while the log's volume is short of space, its space reserve is not
 * whole, or a commit found the disk full; held messages keep firing
 * meanwhile (that is what gives space back), and the answer moves with the
 * log's looks at its volume, with hysteresis. NEVER: the volume can never
 * hold a record that large beside the log's reserve.
 */
int eng_intake(const struct engine *e, uint64_t bytes);
void eng_route_stats(const struct engine *e, uint16_t route, struct eng_route_stats *s);
/*
 * Messages held, O(1): route's (PENDING, WAITING, DUE and INFLIGHT; 0 for a
 * route the engine does not know), or with route < 0 every message held,
 * orphans included -- what the bridge's max_held bounds weigh (config.h).
 */
uint64_t eng_held(const struct engine *e, int route);

/* The log's random id, stable across restarts (prefix of message id headers). */
uint64_t eng_log_id(const struct engine *e);

#endif
