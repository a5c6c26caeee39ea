/*
 * wlog.h -- the engine's contract with its write-ahead log.
 *
 * The engine needs six things from a log, and nothing else:
 *
 *   recover   replay every valid record in order, once, at start (may run
 *             on a thread of its own: it touches nothing but the log; its
 *             progress, in bytes, goes to an optional struct db_progress);
 *   append    buffer a record (ADD, DONE, CANCEL), get its sequence number
 *             and where it lives;
 *   commit    make everything appended so far durable, and say so through a
 *             completion: commit() returns 0 and calls done exactly once,
 *             before it returns or later from the event loop (a log that
 *             syncs on a thread or waits for a replica's confirm calls it
 *             when that is done); or it returns a negative code and never
 *             calls done. At most one commit is in progress at a time
 *             (WLOG_EBUSY otherwise);
 *   read      read one record back by location (a due message's payload);
 *   live      mark an ADD record live or dead (space accounting);
 *   reclaim   a bounded step of space reclamation, asking the owner which
 *             records are still live and telling it where they moved;
 *   checkpoint (optional) store a snapshot of the owner's held set, given
 *             as opaque chunks, so that the next recovery hands the owner
 *             those chunks and then only the records the snapshot may not
 *             reflect, instead of the whole history.
 *
 * struct wlog is the interface: an ops table, the object behind it, and
 * for a log composed over another, the log under it. Two logs fill one
 * in, and neither forwards by hand:
 *
 *  - the segment-file log (wal.h, src/wal/wal_log.c) embeds its struct
 *    wlog, libuv-style, and each entry of its table is the function that
 *    does the work, finding its struct wal by container_of;
 *  - the replicated log (src/repl/wrepl.c) is a layer over a segment log it
 *    makes itself (so it holds the struct wal, and never gets it back out
 *    of a struct wlog): its table lists only the operations it changes,
 *    and every one it leaves NULL is the segment log's, reached through
 *    under by the wrappers below (WLOG_LAYER).
 *
 * A location is 12 opaque bytes the implementation gives out and takes
 * back.
 *
 * Errors: 0 or a negative code: -errno, or one of WLOG_E* below. After a
 * failed append, commit or completion the log is failed for good (no silent
 * retry of a write or an fsync): every later call returns the first error.
 * One exception: a commit that fails with -ENOSPC or -EDQUOT left nothing
 * of the batch on disk and may be tried again (the batch stays appended).
 *
 * Who calls what, and why each is an operation. 23 operations, each with
 * a caller outside the tests. "wal" below is the segment log
 * (src/wal/wal_log.c's table), "repl" the replicated log's layer
 * (src/repl/wrepl.c), which changes 12 of them and leaves the other 11 to
 * the segment log under it ("repl: -"); those stay operations because a
 * log of another kind would differ on them. The engine reaches them
 * through its eng_* functions; the daemon (src/daemon) calls those, and
 * calls the log itself only where marked. The tools (src/cli) call none:
 * they read the directory through wal.h and walscan.h.
 *
 *   operation   caller (daemon via)             wal / repl
 *   ----------  ------------------------------  ----------------------------------
 *   recover     engine.c eng_open (bridge.c)    wal: opens the segments, hands the
 *                                               checkpoint then the records / repl:
 *                                               takes the lease, imports the stream
 *                                               into the segment log, then recovers it
 *   append      engine.c eng_add, engine_       wal: buffers the record / repl: -
 *               state.c (DONE, CANCEL)          (the stream copy is taken by a tap
 *                                               in wal.c, not here)
 *   pending     engine.c eng_dirty (bridge.c,   wal: bytes buffered / repl: those
 *               bridge_http.c)                  plus the stream batch not yet sent
 *   commit      engine.c eng_commit (bridge.c)  wal: write + fdatasync (inline or on
 *                                               its sync thread) / repl: that and the
 *                                               stream's publisher confirms
 *   read        engine_state.c (eng_take,       wal: reads the segment / repl: -
 *               keys, checkpoint walk, purge)
 *   live        engine.c eng_add, engine_       wal: space accounting / repl: -
 *               state.c, engine_recover.c,
 *               engine_ckpt.c
 *   reclaim     engine.c eng_maintain           wal: compacts and deletes segments
 *               (bridge.c)                      (skipped while a sync is out) / repl:
 *                                               also starts and ends horizons
 *   stats       engine_admin.c eng_stats,       wal: the segment log's figures /
 *               engine.c, engine_ckpt.c         repl: those, failed set by the
 *                                               stream too
 *   id          engine_admin.c eng_log_id       wal: its random id / repl: - (one id
 *               (bridge.c)                      per log directory)
 *   next_lsn    engine.c eng_add, engine_       wal: its counter / repl: - (a log
 *               ckpt.c                          numbering records elsewhere would
 *                                               differ)
 *   close       engine.c eng_close; bridge.c    wal: closes files, stops its thread
 *               (a log recovery never took)     / repl: also the connections
 *   poll        engine.c eng_poll (bridge.c)    wal: completes a synced batch / repl:
 *                                               that and the stream's confirms
 *   set_notify  engine.c eng_set_notify         wal: its sync thread wakes the loop /
 *               (bridge.c)                      repl: so does its publisher thread
 *   flush       engine.c eng_flush (bridge.c    wal: waits for its sync thread /
 *               bridge_commit_and_wait)         repl: and for the stream's confirms
 *   ckpt_begin  engine_ckpt.c eng_checkpoint    wal: fixes the LSN replay starts
 *   ckpt_write  engine_ckpt.c                   from, writes and installs the file
 *   ckpt_end    engine_ckpt.c                   / repl: - (the stream has horizons
 *   ckpt_poll   engine.c eng_maintain           instead); a log with no checkpoint
 *   has         engine_ckpt.c (loading)         file leaves them NULL
 *   repl_stats  bridge_stats.c (directly)       wal: NULL / repl: lease, stream,
 *                                               import figures
 *   cancel      bridge.c (directly, a stop      wal: NULL (its recover never waits)
 *               asked during recovery)          / repl: gives up waiting for the
 *                                               lease or the broker
 *   intake      engine_admin.c eng_intake       wal: the space gate (wal_reserve.c) /
 *               (bridge_intake.c)               repl: -
 *   write       engine.c eng_write_ahead        wal: pwrite into the page cache, the
 *               (bridge_commit.c)               fdatasync left to the next commit /
 *                                               repl: refuses (0: its commit is the
 *                                               stream's)
 *
 * Why these are separate. recover takes the checkpoint callback with the
 * record callback (they were two operations, always called one after the
 * other). ckpt_poll stays apart from reclaim although eng_maintain calls
 * both: reclaim is budgeted and skipped while a sync is out, a sealed
 * checkpoint's install is not. The checkpoint's three steps are separate
 * because the walk between begin and end spans many eng_maintain() calls.
 * (Removed: ckpt_abort, which no caller used: a log that fails a
 * checkpoint drops it itself.)
 *
 * A new log implements recover, append, pending, commit, read, live,
 * reclaim, stats, id, next_lsn and close; everything else may be NULL (the
 * inline wrappers below say what NULL means). A new layer over a log sets
 * under and implements close (closing the log under it) and what it
 * changes; a layer that must refuse an optional operation the log under
 * it offers says so in its own entry (as repl's write does).
 */
#ifndef DB_WLOG_H
#define DB_WLOG_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/stats.h"
#include "delay-bridge/walrec.h"

#define WLOG_ECORRUPT (-10001) /* a record that is not a torn tail fails its checks */
#define WLOG_ELOCKED (-10002)  /* another process holds the log */
#define WLOG_EFORMAT (-10003)  /* unknown version, bad segment header or name */
#define WLOG_ETOOBIG (-10004)  /* record larger than WALREC_MAX_PAYLOAD */
#define WLOG_EBUSY (-10005)    /* a commit is still in progress */
#define WLOG_EREPLICA (-10006) /* the replica (stream) lost records, refused them, or its lease is gone */

/* Where a record lives (meaning up to the implementation). */
struct wlog_loc {
    uint32_t seg;
    uint32_t off;
    uint32_t len;
};

/* A caller-owned buffer that read() grows as needed; free(b->p) when done. */
struct wlog_buf {
    uint8_t *p;
    size_t cap;
};

/* Called for each valid record in order; payload valid during the call. Non-zero aborts. */
typedef int wlog_replay_fn(void *arg, const struct walrec_hdr *h, const uint8_t *payload,
                           struct wlog_loc loc);

/*
 * Called at recovery, before any record, with each chunk of the newest
 * valid checkpoint in the order they were written (kind as given to
 * ckpt_write). The log has checked every chunk before the first call. For
 * the first chunk only, a return of 1 means "not usable" (for example, the
 * routes changed): the log then replays everything instead. Any other
 * non-zero return aborts recovery with it.
 */
typedef int wlog_ckpt_fn(void *arg, uint8_t kind, const uint8_t *p, size_t n);

/* Completion of a commit: err is 0 (durable) or the log's failure. */
typedef void wlog_commit_fn(void *arg, int err);

/* How reclaim asks the owner about records it moves. */
struct wlog_compact_ops {
    /* Is msg_id held, with its current copy at loc? */
    int (*is_live)(void *arg, uint64_t msg_id, struct wlog_loc loc);
    /* msg_id's live copy now lives at to (live accounting already adjusted). */
    void (*moved)(void *arg, uint64_t msg_id, struct wlog_loc to);
    void *arg;
};

struct wlog_stats {
    uint64_t segments;        /* files (or units) holding the log */
    uint64_t disk_bytes;      /* their total size */
    uint64_t live_bytes;      /* bytes of live ADD records */
    uint64_t live_records;
    uint64_t durable_lsn;     /* last durable sequence number */
    uint64_t commits;         /* commits that wrote something */
    uint64_t appended_bytes;
    uint64_t compacted_bytes;
    uint64_t deleted_segments;
    uint64_t truncated_bytes; /* torn tail cut at recovery */
    int failed;               /* the first error, 0 if none */
    int no_space;             /* the last commit found the disk full; it can be retried */
    int intake_paused;        /* space low: the owner should take no new messages (wal.h) */
    uint64_t free_bytes;      /* the volume's free space, reserve excluded */
    uint64_t reserve_bytes;   /* the space reserve when whole (0: none) */
    uint64_t reserve_held;    /* what it holds now */
    uint64_t reserve_spent;   /* times it was given back to a commit on a full disk */
    struct db_hist fsync;     /* sync durations, seconds */
    uint64_t compact_segment; /* unit being reclaimed, 0 if none */
    uint64_t compact_done, compact_total; /* its bytes looked at, of */
    /* checkpoints */
    int ckpt_state;            /* WLOG_CKPT_* */
    uint64_t ckpt_installed;   /* checkpoints installed since start */
    uint64_t ckpt_failed;      /* checkpoints abandoned on an I/O error */
    uint64_t ckpt_lsn;         /* the installed one: replay starts here (0: none) */
    uint64_t ckpt_bytes;       /* its size */
    uint64_t ckpt_age_ms;      /* since it was begun (0: none) */
    double ckpt_seconds;       /* begin to installed, the last one */
    uint64_t ckpt_loaded_lsn;  /* recovery started from this checkpoint (0: full replay) */
};

#define WLOG_CKPT_IDLE 0
#define WLOG_CKPT_WRITING 1 /* between ckpt_begin and ckpt_end */
#define WLOG_CKPT_SEALING 2 /* written; waiting for the log to be durable, then synced, renamed */

/*
 * A replicated log's state (src/repl/wrepl.c), for /stats and /readyz. Safe to
 * ask from any thread, also while recover runs.
 */
enum wlog_repl_state {
    WLOG_REPL_OFF = 0,        /* not a replicated log */
    WLOG_REPL_CONNECTING = 1, /* reaching the broker */
    WLOG_REPL_STANDBY = 2,    /* another bridge holds the lease; waiting for it */
    WLOG_REPL_IMPORTING = 3,  /* lease held; reading the stream back into the local log */
    WLOG_REPL_OWNER = 4,      /* lease held; every commit is replicated */
    WLOG_REPL_FAILED = 5,     /* lease or stream lost, or the stream refused: stopping */
};

struct wlog_repl_stats {
    int state;                  /* enum wlog_repl_state */
    const char *stream;         /* its name (static for the log's life) */
    uint64_t imported_records;  /* read back from the stream at start */
    uint64_t imported_bytes;
    double import_seconds;      /* lease granted -> local log rebuilt */
    double standby_seconds;     /* start -> lease granted */
    uint64_t published_messages, published_bytes, confirmed_messages;
    uint64_t horizons;          /* stream checkpoints completed */
    uint64_t horizon_lsn;       /* the newest: replay may start here (0: none) */
    int horizon_running;        /* one is copying live records forward */
    uint64_t needed_bytes;      /* published since the newest horizon began: what the
                                   stream must retain */
    int complete;               /* the stream holds the whole log */
    struct db_hist confirm;     /* stream confirm latency per commit, seconds */
    uint64_t lease_renewals;    /* lease tokens traded for fresh ones (wrepl_lease.c) */
    int resumed;                /* the start resumed on the local log (wrepl_resume.c) */
    uint64_t refused;           /* stream messages not of this log's broker user: not imported */
};

struct wlog;

struct wlog_ops {
    const char *name;
    /*
     * fn gets each record; ckpt, if not NULL, first gets the newest valid
     * checkpoint's chunks (wlog_ckpt_fn); both get arg.
     */
    int (*recover)(struct wlog *l, wlog_replay_fn *fn, wlog_ckpt_fn *ckpt, void *arg,
                   struct db_progress *progress);
    int (*append)(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
                  uint64_t *lsn, struct wlog_loc *loc);
    size_t (*pending)(const struct wlog *l);
    int (*commit)(struct wlog *l, wlog_commit_fn *done, void *arg);
    int (*read)(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
                const uint8_t **payload);
    void (*live)(struct wlog *l, struct wlog_loc loc, int live);
    int (*reclaim)(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops);
    void (*stats)(const struct wlog *l, struct wlog_stats *s);
    uint64_t (*id)(const struct wlog *l);       /* random id, stable across restarts */
    uint64_t (*next_lsn)(const struct wlog *l); /* what the next append gets */
    void (*close)(struct wlog *l);              /* releases everything; does not commit */
    /*
     * For a log whose commits complete later (NULL otherwise): notify is
     * called, from any thread, when a completion is ready; the owner's loop
     * then calls poll, which runs it on the loop thread.
     */
    void (*poll)(struct wlog *l);
    void (*set_notify)(struct wlog *l, void (*fn)(void *arg), void *arg);
    /* Block until the commit in progress, if any, completed (its done has run). */
    void (*flush)(struct wlog *l);

    /*
     * Checkpoints; a log without them leaves these NULL. recover's ckpt
     * callback is handed the newest checkpoint. A checkpoint is
     * fuzzy: ckpt_begin fixes the LSN replay will start from (the first one
     * not durable yet), the owner then writes its state in chunks while it
     * keeps changing, and ckpt_end seals it. Recovery replays every record
     * from that LSN on top of the chunks, so the owner must apply records
     * idempotently (an ADD it already holds, a DONE for a message it does
     * not). The log installs a sealed checkpoint only once everything
     * appended before ckpt_end is durable, so no chunk can describe a
     * record that a crash then loses; until it is installed the previous
     * checkpoint stays the one recovery uses. ckpt_poll drives that (call it
     * now and then). A checkpoint whose write fails is dropped by the log.
     * has(loc): does the unit holding loc still exist? (A snapshot may name
     * a record whose unit reclamation deleted since; such a message is gone,
     * or a later copy of it is among the replayed records.)
     */
    int (*ckpt_begin)(struct wlog *l);
    int (*ckpt_write)(struct wlog *l, uint8_t kind, const void *p, size_t n);
    int (*ckpt_end)(struct wlog *l);
    void (*ckpt_poll)(struct wlog *l);
    int (*has)(const struct wlog *l, struct wlog_loc loc);

    /*
     * Replicated logs only (NULL otherwise), both callable from any thread:
     * repl_stats fills *s; cancel makes a recover that waits (for the
     * lease, for the broker) give up with -ECANCELED.
     */
    void (*repl_stats)(struct wlog *l, struct wlog_repl_stats *s);
    void (*cancel)(struct wlog *l);

    /*
     * The intake gate (optional; NULL: always WLOG_INTAKE_OK). May the
     * owner append a new message whose record is about bytes long (0: any
     * message)? WLOG_INTAKE_WAIT while the log's volume is short of space
     * (wal.h, wal_space.c), WLOG_INTAKE_NEVER for a record the volume can
     * never hold beside the log's reserve. Cheap enough to ask per delivery.
     */
    int (*intake)(const struct wlog *l, uint64_t bytes);

    /*
     * Optional (NULL: not offered): put everything appended into the
     * log's files now, without waiting for the disk. Records so written
     * survive the process being killed, not the machine; they become
     * durable with the next commit, and pending() stays above 0 until
     * then. No completion: 1 written, 0 not offered (a layer refusing what
     * the log under it offers), or a negative code (-ENOSPC/-EDQUOT:
     * nothing lost, the next commit meets it too).
     */
    int (*write)(struct wlog *l);
};

#define WLOG_INTAKE_OK 0
#define WLOG_INTAKE_WAIT 1
#define WLOG_INTAKE_NEVER 2

/*
 * A log: its operations, and for a log composed over another (the
 * replicated log over the segment log), the log under it. An operation a
 * layer's table leaves NULL is the log under it's, called with that log:
 * a layer lists only what it changes, and forwards nothing by hand. At
 * the bottom (under NULL) a NULL operation means what the wrappers below
 * say.
 */
struct wlog {
    const struct wlog_ops *ops;
    struct wlog *under;
};

/* Moves l down to the nearest layer whose table has op (l stays put when none has it). */
#define WLOG_LAYER(l, op) while (!(l)->ops->op && (l)->under) (l) = (l)->under

static inline int wlog_recover(struct wlog *l, wlog_replay_fn *fn, wlog_ckpt_fn *ckpt, void *arg,
                               struct db_progress *progress)
{
    WLOG_LAYER(l, recover);
    return l->ops->recover(l, fn, ckpt, arg, progress);
}
static inline int wlog_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces,
                              int npieces, uint64_t *lsn, struct wlog_loc *loc)
{
    WLOG_LAYER(l, append);
    return l->ops->append(l, type, pieces, npieces, lsn, loc);
}
static inline size_t wlog_pending(const struct wlog *l)
{
    WLOG_LAYER(l, pending);
    return l->ops->pending(l);
}
static inline int wlog_commit(struct wlog *l, wlog_commit_fn *done, void *arg)
{
    WLOG_LAYER(l, commit);
    return l->ops->commit(l, done, arg);
}
/* 1 when written ahead, 0 when the log does not offer it, or a negative code. */
static inline int wlog_write(struct wlog *l)
{
    WLOG_LAYER(l, write);
    return l->ops->write ? l->ops->write(l) : 0;
}
static inline int wlog_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b,
                            struct walrec_hdr *h, const uint8_t **payload)
{
    WLOG_LAYER(l, read);
    return l->ops->read(l, loc, b, h, payload);
}
static inline void wlog_live(struct wlog *l, struct wlog_loc loc, int live)
{
    WLOG_LAYER(l, live);
    l->ops->live(l, loc, live);
}
static inline int wlog_reclaim(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    WLOG_LAYER(l, reclaim);
    return l->ops->reclaim(l, budget, ops);
}
static inline void wlog_stats(const struct wlog *l, struct wlog_stats *s)
{
    WLOG_LAYER(l, stats);
    l->ops->stats(l, s);
}
static inline int wlog_intake(const struct wlog *l, uint64_t bytes)
{
    WLOG_LAYER(l, intake);
    return l->ops->intake ? l->ops->intake(l, bytes) : WLOG_INTAKE_OK;
}
static inline uint64_t wlog_id(const struct wlog *l)
{
    WLOG_LAYER(l, id);
    return l->ops->id(l);
}
static inline uint64_t wlog_next_lsn(const struct wlog *l)
{
    WLOG_LAYER(l, next_lsn);
    return l->ops->next_lsn(l);
}
static inline void wlog_poll(struct wlog *l)
{
    WLOG_LAYER(l, poll);
    if (l->ops->poll)
        l->ops->poll(l);
}
static inline void wlog_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg)
{
    WLOG_LAYER(l, set_notify);
    if (l->ops->set_notify)
        l->ops->set_notify(l, fn, arg);
}
static inline void wlog_flush(struct wlog *l)
{
    WLOG_LAYER(l, flush);
    if (l->ops->flush)
        l->ops->flush(l);
}
static inline int wlog_has_ckpt(const struct wlog *l)
{
    WLOG_LAYER(l, ckpt_begin);
    return l->ops->ckpt_begin != NULL;
}
static inline int wlog_ckpt_begin(struct wlog *l)
{
    WLOG_LAYER(l, ckpt_begin);
    return l->ops->ckpt_begin ? l->ops->ckpt_begin(l) : -ENOTSUP;
}
static inline int wlog_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n)
{
    WLOG_LAYER(l, ckpt_write);
    return l->ops->ckpt_write(l, kind, p, n);
}
static inline int wlog_ckpt_end(struct wlog *l)
{
    WLOG_LAYER(l, ckpt_end);
    return l->ops->ckpt_end(l);
}
static inline void wlog_ckpt_poll(struct wlog *l)
{
    WLOG_LAYER(l, ckpt_poll);
    if (l->ops->ckpt_poll)
        l->ops->ckpt_poll(l);
}
static inline int wlog_has(const struct wlog *l, struct wlog_loc loc)
{
    WLOG_LAYER(l, has);
    return l->ops->has ? l->ops->has(l, loc) : 1;
}
static inline int wlog_repl_stats(struct wlog *l, struct wlog_repl_stats *s)
{
    WLOG_LAYER(l, repl_stats);
    if (!l->ops->repl_stats)
        return 0;
    l->ops->repl_stats(l, s);
    return 1;
}
static inline void wlog_cancel(struct wlog *l)
{
    WLOG_LAYER(l, cancel);
    if (l->ops->cancel)
        l->ops->cancel(l);
}
static inline void wlog_close(struct wlog *l)
{
    if (l)
        l->ops->close(l); /* every layer closes the log under it */
}

/* Text for a negative code (WLOG_E* or -errno). */
const char *wlog_strerror(int err);

#endif
