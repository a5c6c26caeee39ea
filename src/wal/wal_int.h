/*
 * wal_int.h -- the segment log's state, shared by its files (internal: the
 * wal*.c files, ingress_off.c for wal_dir_sync(), and the tests include
 * it; wal.h is the contract, wlog.h the engine's view).
 *
 *   wal.c         the segment files: creating and rolling them, append and
 *                 group commit, read, the checkpoint file's life
 *   wal_open.c    recovery: the directory locked, segments checked, the
 *                 checkpoint loaded, records replayed, a torn tail cut
 *   wal_space.c   space: live accounting, deleting dead head segments,
 *                 compaction, the horizon, figures
 *   wal_reserve.c the space reserve (dir/RESERVE) and the intake gate
 *   wal_dir.c     the directory: its files, modes, lock, segment swaps
 *   wal_log.c     the operations table, the object's life (wal_new, the
 *                 close), and the sync thread behind the commit
 *
 * struct wal is a struct wlog (wlog.h) the libuv way: the interface is its
 * first member, and each operation in the table is the function that does
 * the work, taking the struct wlog and finding its struct wal with WAL()
 * (container_of). No function here forwards to another: the operations
 * have no struct wal twin (wal_append() is the append, wal_stats() fills
 * the interface's figures), and what is not an operation (wal_commit(),
 * the horizon, the tap) takes struct wal.
 *
 * struct wal owns every fd, buffer and segment entry in it; wal_release()
 * frees them and wal_close() the object. Functions that fail return 0 or a
 * negative code (-errno or WLOG_E*); a write or fsync error goes through
 * wal_fail() and sticks. Every system call on the directory is spelled
 * walfs_NAME (walfs.h: the plain call, or the simulator's file layer under
 * -DDB_SIM).
 */
#ifndef DELAY_BRIDGE_WAL_INT_H
#define DELAY_BRIDGE_WAL_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "delay-bridge/wal.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walckpt.h"
#include "walfs.h"

#define SEGHDR WALREC_SEGHDR_SIZE
#define RECHDR WALREC_HDR_SIZE
#define REPLAY_CHUNK (4u << 20)
#define READAHEAD_SEGS 1 /* segments read ahead during replay; more did not help */
#define COMPACT_CHUNK (1u << 20)
#define WBUF_KEEP (16u << 20) /* shrink the write buffer back after a bigger batch */
#define MIN_SEGMENT_BYTES WAL_MIN_SEGMENT_BYTES
#define MAX_SEGMENT_BYTES WAL_MAX_SEGMENT_BYTES

struct seg {
    uint64_t segno;
    uint64_t base_lsn;
    uint64_t last_lsn;   /* last record's LSN; base_lsn - 1 while empty */
    uint32_t salt;
    int fd;              /* -1: rolled to, file not created yet */
    uint64_t disk;       /* bytes in the file (header included once created) */
    uint64_t written;    /* the file's bytes: disk, then prewritten zeros (wal.c) */
    int unsynced;        /* written ahead since its last fdatasync (wal_write_ahead) */
    uint64_t ahead;      /* ... by the wal.ahead-th write ahead, the last */
    uint64_t size;       /* disk + bytes still in the write buffer */
    size_t pend_off;     /* where its buffered bytes start in wbuf */
    uint64_t live_count;
    uint64_t live_bytes;
    uint64_t copy_lsn;   /* LSN of the last compaction copy taken from it */
    uint64_t dead_lsn;   /* next LSN when an ADD in it last died: the DONE or CANCEL
                            that ended it is appended at or after it */
    int scanned;         /* compaction walked all of it */
};

/*
 * A group commit in two halves, so that the second may run on a thread:
 * wal_write_batch() writes every buffered byte (pwrite, into the page cache) and
 * names the files to sync; after their fdatasync, wal_batch_durable() moves the
 * durable LSN. Between the two the bytes are readable from the files, new
 * appends go to an empty buffer, and nothing counts as durable.
 */
struct wal_batch {
    int fds[8];          /* files to fdatasync, oldest first */
    uint64_t segnos[8];
    int n;
    uint64_t lsn;        /* durable once they are synced */
    uint64_t ahead;      /* wal.ahead when written: later writes ahead are not its to sync */
};

/*
 * The sync thread (opts.sync_thread, wal_log.c): the loop thread writes a
 * batch (wal_write_batch) and hands the files to this thread; it
 * fdatasyncs them and says so through notify (the owner wakes its loop,
 * which calls wlog_poll: wal_batch_durable and the completion run there).
 * One batch at a time; reclaim waits while one is out, so no file it syncs
 * is closed under it.
 */
struct wal_sync {
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv, finished_cv;
    int posted, finished, quit; /* under mu */
    int result;                 /* under mu: 0 or -errno of the first failed sync */
    double seconds;             /* under mu: time of the syncs */
    struct wal_batch batch;
    int busy;                   /* loop thread: a batch is out */
    wlog_commit_fn *done;
    void *done_arg;
    void (*notify)(void *arg);
    void *notify_arg;
};

struct wal {
    struct wlog log;      /* what the engine holds; WAL() gets back here */
    struct wal_opts opts; /* wal_new()'s, dir copied (owned) */
    struct wal_sync sync; /* the commit's thread (wal_log.c) */

    /* The open log, from here on: wal_recover() fills it, wal_release() empties it. */
    int open;
    char *dir;
    int dirfd;
    int lockfd;
    uint64_t segment_bytes;
    int no_sync;
    uint64_t prewrite; /* opts.prewrite_bytes: zeros kept ahead of the active segment's records */
    int unsynced;      /* segments with unsynced (written ahead) bytes */
    uint64_t ahead;    /* writes ahead so far */
    uint64_t id;

    struct seg *segs; /* oldest first; the last one is active */
    size_t nsegs, segcap;
    uint64_t total_size; /* sum of segs[].size */

    uint8_t *wbuf; /* appended, not yet written; spans the segments with size > disk */
    size_t wlen, wcap;

    uint64_t next_lsn;
    uint64_t durable_lsn;
    int failed; /* first write/fsync error, 0 if none */

    uint64_t live_bytes, live_records;
    uint64_t commits, appended_bytes, compacted_bytes, deleted_segments, truncated_bytes;
    struct db_hist fsync;                /* fdatasync durations */
    struct db_progress *progress;        /* replay progress for /stats, or NULL */
    uint8_t *ra;                         /* read-ahead window for wal_read() */
    uint64_t ra_segno, ra_off;           /* what it holds: segment, file offset, bytes */
    size_t ra_len;
    size_t ra_size, ra_served;           /* the window's size now (0: not set yet), and
                                            the bytes the current one has served */
    uint64_t last_segno, last_off;       /* the previous read: is this one sequential? */
    int no_space;                        /* the last commit found the disk full */

    /* the space reserve and the intake gate (wal_space.c) */
    uint64_t reserve_bytes;  /* dir/RESERVE when whole; 0: no reserve, no gate */
    int reserve_fd;          /* dir/RESERVE, -1 if none */
    uint64_t reserve_held;   /* bytes allocated in it now */
    uint64_t reserve_spent;  /* times it was given back to a commit */
    uint64_t free_bytes;     /* the volume's free space at the last look */
    uint64_t volume_bytes;   /* and its size */
    int intake_paused;       /* space low: no new messages (hysteresis) */
    uint64_t appended_at_look; /* appended_bytes less the unwritten buffer when free_bytes was read */
    uint64_t intake_pauses;  /* times intake paused (tests; /stats counts the bridge's) */

    uint64_t force_lsn; /* wal_force_horizon(): compact every segment below it */
    wal_tap_fn *tap;    /* wal_set_tap(): sees every record appended */
    void *tap_arg;

    uint64_t cpt_segno; /* compaction cursor: segment and offset */
    uint64_t cpt_off;
    uint8_t *cbuf;
    size_t ccap;

    /* checkpoint being written or installed (walckpt.h) */
    struct walckpt *ck;
    int ck_state;          /* WLOG_CKPT_* */
    int ck_installing;     /* its install thread runs */
    uint64_t ck_start_lsn; /* of the one being written */
    uint64_t ck_end_lsn;   /* installable once durable_lsn + 1 >= this */
    uint64_t ck_began_mono_ms, ck_began_ms; /* clock_mono_ms(), clock_now_ms() */
    uint64_t ck_installed, ck_failed, ck_lsn, ck_bytes, ck_lsn_ms, ck_loaded_lsn;
    double ck_seconds;
};

#define WAL(l) ((struct wal *)((char *)(l) - offsetof(struct wal, log)))
#define WAL_C(l) ((const struct wal *)((const char *)(l) - offsetof(struct wal, log)))

/*
 * ---- the wlog operations (wlog.h has their contracts), by file ----
 *
 * wal_log.c holds the table; these are the functions in it.
 */
/* wal_open.c: recover opens the log (wal_open() for the tests: wal_new + recover) */
int wal_recover(struct wlog *l, wlog_replay_fn *fn, wlog_ckpt_fn *ckpt, void *arg,
                struct db_progress *progress);
uint64_t wal_id(const struct wlog *l);
uint64_t wal_next_lsn(const struct wlog *l);
/* wal.c */
int wal_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
               uint64_t *lsn, struct wlog_loc *loc);
size_t wal_pending(const struct wlog *l);
int wal_write_ahead(struct wlog *l);
int wal_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
             const uint8_t **payload);
int wal_ckpt_begin(struct wlog *l);
int wal_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n);
int wal_ckpt_end(struct wlog *l);
void wal_ckpt_poll(struct wlog *l);
int wal_has(const struct wlog *l, struct wlog_loc loc);
/* wal_space.c */
void wal_live(struct wlog *l, struct wlog_loc loc, int live);
int wal_maintain(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops);
void wal_stats(const struct wlog *l, struct wlog_stats *s);
/* wal_reserve.c */
int wal_intake(const struct wlog *l, uint64_t bytes);
/* wal_log.c: the commit with its completion, on the sync thread or inline */
int wal_log_commit(struct wlog *l, wlog_commit_fn *done, void *arg);
void wal_poll(struct wlog *l);
void wal_flush(struct wlog *l);
void wal_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg);
void wal_close(struct wlog *l);

/*
 * Open a log with options o and replay it through replay (the tests' and
 * benchmarks' way; the program's is wlog_recover()). *out is set while
 * replay runs, so the callback may reach the log through it; NULL when it
 * fails. Close it with wlog_close(wal_log(w)).
 */
int wal_open(struct wal **out, const struct wal_opts *o, wlog_replay_fn *replay, void *arg);
/* wal_open.c: free what the open log holds; the object stays (unopened). */
void wal_release(struct wal *w);

/* wal_dir.c: fsync dir itself, so the names created in it are durable (also ingress_off.c's). */
int wal_dir_sync(const char *dir);

/* ---- wal.c ---- */

int wal_sync_dir(struct wal *w);
/* fdatasync fd (unless no_sync), timed into the fsync histogram. 0 or -errno. */
int wal_sync_fd(struct wal *w, int fd);
struct seg *wal_seg_find(struct wal *w, uint64_t segno);
struct seg *wal_seg_push(struct wal *w);
struct seg *wal_active(struct wal *w);
/* Enter the failed state (the first error sticks) and log it. Returns that error. */
int wal_fail(struct wal *w, int err, const char *what, uint64_t segno);
/* Create segment s's file: header, fdatasync, directory fsync. */
int wal_seg_create(struct wal *w, struct seg *s);
/* A new in-memory active segment at the next LSN; created on disk by the next commit. */
void wal_roll(struct wal *w);
/* Group commit, first half: write every buffered byte, name the files to sync. */
int wal_write_batch(struct wal *w, struct wal_batch *b);
/* Second half, after the batch's files are synced: move the durable LSN. */
void wal_batch_durable(struct wal *w, const struct wal_batch *b);
/* pread n bytes of segment s at off (or out of the write buffer). */
int wal_seg_read(struct wal *w, struct seg *s, uint64_t off, uint8_t *dst, size_t n);

/* ---- wal_reserve.c (the floor under wal.c and wal_space.c: calls neither) ---- */

/* Open dir/RESERVE and fill it to bytes (wal_open; 0: none). 0 or negative. */
int wal_reserve_open(struct wal *w, uint64_t bytes);
/* A commit met a full disk: give the reserve back. 1 if it held bytes (write again). */
int wal_reserve_spend(struct wal *w);
/* Look at the volume's free space, refill the reserve, move the intake gate. */
void wal_space_poll(struct wal *w);
/* Free space (the reserve apart) at which paused intake resumes: two segments. */
uint64_t wal_resume_mark(const struct wal *w);

#endif
