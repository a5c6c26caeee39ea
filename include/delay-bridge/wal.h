/*
 * wal.h -- the segmented write-ahead log that holds every pending message.
 *
 * A directory of append-only segment files (format: src/wal/walrec.c). The
 * engine appends ADD and DONE records, commits them with one write and one
 * fdatasync for the whole batch (group commit), reads a held message's
 * payload back by location when it falls due, and reports which ADD records
 * are still live so that space can be reclaimed.
 *
 * Promises:
 *  - once a commit completes without error, every record appended before it
 *    survives a crash or power loss;
 *  - a failed write or fsync is never retried: the log enters a failed state
 *    and every later call returns the first error (the caller stops and
 *    lets recovery start from what is on disk) -- except a write refused
 *    for lack of space (ENOSPC, EDQUOT) before any fsync: its bytes are cut
 *    off again, the batch stays buffered, the commit returns the error and
 *    the next one writes the batch again;
 *  - recovery replays every valid record in LSN order, truncates a torn
 *    tail of the newest segment (logged), and fails with WLOG_ECORRUPT,
 *    naming segment and offset in the log, for damage anywhere else;
 *  - the directory is locked (flock on dir/LOCK): a second process gets
 *    WLOG_ELOCKED instead of corrupting the log;
 *  - space: a segment is deleted once it is the oldest and holds no live
 *    ADD; when the log is larger than 2 x live bytes + one segment, the
 *    oldest segment's live ADDs are copied forward (reclaim, a bounded
 *    amount per call), so disk use stays near 2 x live data + one segment.
 *
 * The log itself is reached through the engine's interface (wlog.h):
 * wal_new() makes one, wal_log() is its struct wlog, and every record
 * operation -- recover, append, commit, read, live, reclaim, stats,
 * checkpoints, close -- is a wlog_*() call. What this header adds is what
 * its users call beside that interface, by user:
 *
 *   main.c, the tests           wal_new(), wal_log()
 *   the replicated log (repl/)  wal_commit() (a synchronous commit at
 *                               resume), the tap and the horizon
 *   the replicated log, the     the directory: wal_dir_*(), the lock, the
 *   tools (cli/), the daemon    segment swap (wal_dir.c)
 *
 * Not thread-safe: one event loop owns it.
 */
#ifndef DB_WAL_H
#define DB_WAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "delay-bridge/stats.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"

/* Errors: -errno or the log interface's WLOG_E* (wlog.h), text from wlog_strerror(). */

#define WAL_DEFAULT_SEGMENT_BYTES (64ull << 20)
#define WAL_MIN_SEGMENT_BYTES 1024
#define WAL_MAX_SEGMENT_BYTES (2ull << 30) /* offsets are u32: segment + 1 GiB record must fit */

struct wal;

struct wal_opts {
    const char *dir;        /* created if missing */
    uint64_t segment_bytes; /* roll to a new segment past this; 0 = default */
    int no_sync;            /* benchmarks and unit tests only: skip fdatasync */
    struct db_progress *progress; /* optional: replay progress, updated as it reads */
    int sync_thread;        /* the commit op: fdatasync on a thread of its own; the
                               commit completes through wlog_poll() after notify */
    /*
     * Optional: recover from dir/CHECKPOINT (walckpt.h) when there is a
     * valid one. recovery hands its chunks to ckpt_fn (wlog.h's contract)
     * and then replays only the records from its start LSN on; without a
     * usable checkpoint it replays everything.
     */
    wlog_ckpt_fn *ckpt_fn;
    void *ckpt_arg;
    /*
     * For an empty directory only (a log being rebuilt from a replica): the
     * new log's id and first LSN instead of a random id and 1.
     */
    uint64_t create_id;
    uint64_t create_base_lsn;
    /*
     * The space reserve (wal_space.c): dir/RESERVE is kept at this many
     * bytes, which intake never uses, and given back to a commit that meets
     * a full disk, so that the records ending messages always find room.
     * 0: no reserve and no intake gate (tools, unit tests, an import). The
     * daemon passes WAL_RESERVE_SEGMENTS x segment_bytes.
     */
    uint64_t reserve_bytes;
    /*
     * Zeros kept written ahead of the active segment's records, so that a
     * commit's fdatasync changes no file size and writes no metadata (no
     * inode block, no journal commit: wal.c, "PREWRITTEN ZEROS"); recovery reads zeros
     * after the last record as the segment's end. 0: none (an import, the
     * tools). The daemon passes wal.prewrite_bytes (WAL_DEFAULT_PREWRITE).
     */
    uint64_t prewrite_bytes;
};

#define WAL_DEFAULT_PREWRITE (1ull << 20)

/* The daemon's reserve, in segments: one for compaction's copies of the
 * head segment, one for the records that end messages before a deleted
 * segment gives space back. */
#define WAL_RESERVE_SEGMENTS 2
/* The smallest volume the daemon accepts, in segments: the reserve (2), the
 * free space intake resumes at (2: one of headroom, one of hysteresis) and
 * the active segment (1). With 4 an empty log on a volume of exactly 4
 * segments (xfs of 320 MiB at segment_mb 64: df counts 256 MiB) paused at
 * start and could never resume. (config_check_wal_dir) */
#define WAL_MIN_VOLUME_SEGMENTS 5

/*
 * A log with options o (o->dir is copied), not opened yet: wlog_recover()
 * on wal_log() opens it (locks the directory, loads the checkpoint in
 * dir/CHECKPOINT when it is given a checkpoint callback, replays,
 * cuts a torn tail) and wlog_close() frees it. The commit is synchronous
 * (write + fdatasync, then the completion) unless o->sync_thread.
 */
struct wal *wal_new(const struct wal_opts *o);
/* The log as the engine holds it (NULL for NULL). */
struct wlog *wal_log(struct wal *w);

/*
 * Write and fdatasync everything appended, here and now (group commit),
 * whatever o->sync_thread says. 0 or the log's error. No batch of the
 * sync thread may be out (the replicated log's resume: before any commit).
 */
int wal_commit(struct wal *w);

/*
 * Replication (src/repl/wrepl.c). A tap sees every record as it is appended --
 * the caller's and compaction's copies alike -- header and payload, valid
 * during the call only. wal_force_horizon() asks for every record still
 * live to end up at an LSN >= *lsn: it rolls to a new segment and makes
 * reclaim (wlog_reclaim) copy the live records of every older segment forward
 * whatever their use, and delete them. The horizon is reached once
 * wal_horizon_reached() says so.
 */
typedef void wal_tap_fn(void *arg, const struct walrec_hdr *h, const uint8_t *payload);
void wal_set_tap(struct wal *w, wal_tap_fn *fn, void *arg);
int wal_force_horizon(struct wal *w, uint64_t *lsn);
uint64_t wal_first_lsn(const struct wal *w);
/*
 * Is every record below lsn dead, or copied forward with its copy durable?
 * (The segments that held them may still wait for deletion.)
 */
int wal_horizon_reached(const struct wal *w, uint64_t lsn);

/* ---- the directory: one owner of its files (src/wal/wal_dir.c) ----
 *
 * Every process or tool that takes a WAL directory, or puts segment files
 * into one, goes through the lock and the swap below: the daemon's log
 * (its recover), "delay-bridge wal salvage", and the replicated log's import
 * (wrepl.c). Every other layer that keeps a file in the directory (the
 * replicated log's REPLICA note and import/) makes, writes, renames and
 * deletes it with the wal_dir_* functions, never with system calls of its
 * own: wal_dir.c's essay lists every file, its writer, mode, fsync and
 * crash rule. All return 0 (or what they say) or -errno, and log nothing.
 */

/* What the log creates: the directory (its parents 0755), and every file in it. */
#define WAL_DIR_MODE 0700
#define WAL_FILE_MODE 0600
/* The longest name wal_dir_replace_file() takes (its tmp adds ".tmp"). */
#define WAL_DIR_NAME_MAX 200

/* mkdir -p dir: missing parents 0755, dir itself WAL_DIR_MODE; an existing one is kept. */
int wal_dir_make(const char *dir);
/* Open dir (O_RDONLY | O_DIRECTORY) for *at calls. The fd (caller closes) or -errno. */
int wal_dir_open(const char *dir);
/*
 * Open dir/name, a directory the log layer keeps inside the WAL directory
 * (import/); with create it is made (WAL_DIR_MODE) if missing. The fd
 * (caller closes) or -errno (-ENOENT: none, and create was 0).
 */
int wal_dir_open_sub(const char *dir, const char *name, int create);
/*
 * Remove dir/name made by wal_dir_open_sub() and the log in it: its
 * segments and CHECKPOINT (deleted and synced first, as WAL_REPLACE_ALL
 * does), CHECKPOINT.tmp, RESERVE, LOCK, then the directory. 0 when it is
 * gone or was not there; -ENOTEMPTY when it holds files that are not the
 * log's (they are left for people). Nobody may hold it open as a log.
 */
int wal_dir_remove_sub(const char *dir, const char *name);
/*
 * Replace dir/name atomically with the n bytes at p: dir/name.tmp is
 * created (O_TRUNC, WAL_FILE_MODE), written, fsync'ed and renamed over
 * dir/name, then dir is fsync'ed. On a failure before the rename dir/name
 * is untouched and the tmp removed; after it (the directory's fsync)
 * dir/name is the new file, not yet durable. name is shorter than
 * WAL_DIR_NAME_MAX (else -ENAMETOOLONG).
 */
int wal_dir_replace_file(const char *dir, const char *name, const void *p, size_t n);
/* Read up to n bytes of dir/name from its start: the bytes read, or -errno (-ENOENT: none). */
ssize_t wal_dir_read_file(const char *dir, const char *name, void *p, size_t n);

/*
 * The WAL tools' files (src/cli/). wal_dir_open_file: name in the
 * directory dirfd, read-only; the fd or -errno. wal_dir_create_file: name
 * created or truncated for writing with mode (less the umask); the fd or
 * -errno. wal_dir_write_at: all n bytes at off, EINTR retried; 0 or -errno
 * (-EIO: the device took none). wal_dir_seal_file: with like, the file
 * takes its owner (where allowed) and mode; then fdatasync; 0 or -errno.
 * wal_dir_discard_file: closes fd (if >= 0) and deletes name.
 */
int wal_dir_open_file(int dirfd, const char *name);
int wal_dir_create_file(int dirfd, const char *name, mode_t mode);
int wal_dir_write_at(int fd, const void *p, size_t n, uint64_t off);
int wal_dir_seal_file(int fd, const struct stat *like);
void wal_dir_discard_file(int dirfd, const char *name, int fd);

/*
 * Lock the WAL directory dir (it must exist) against every other owner:
 * dir/LOCK is created if missing (WAL_FILE_MODE) and flock(LOCK_EX|LOCK_NB)'ed.
 * The lock lasts as long as *lockfd stays open; close it to release.
 * Returns 0 with *lockfd set, WLOG_ELOCKED when another process holds it (a
 * daemon running on dir), or -errno. Every failure is logged (module "wal",
 * with file=dir/LOCK), so callers only pass the code on.
 */
int wal_lock_dir(const char *dir, int *lockfd);

/*
 * wal_lock_dir() for a tool that reports by itself and must not create
 * anything unasked. flags:
 *   WAL_LOCK_QUIET      log nothing; on failure *op says which step failed,
 *                       "open" (dir/LOCK) or "lock" (the flock)
 *   WAL_LOCK_NO_CREATE  open dir/LOCK read-only and never create it; when
 *                       there is none nobody can hold it: 0, *lockfd = -1
 * op may be NULL. Same returns as wal_lock_dir().
 */
#define WAL_LOCK_QUIET 1
#define WAL_LOCK_NO_CREATE 2
int wal_lock_dir_flags(const char *dir, int flags, int *lockfd, const char **op);

/* One file wal_replace_segments() puts into the directory. */
struct wal_replacement {
    const char *name;     /* its segment name in the WAL directory (walscan_seg_name) */
    int srcfd;            /* the directory the new file is in (may be the WAL directory) */
    const char *src_name; /* its name there: a complete segment, already fdatasync'ed */
    const char *aside;    /* non-NULL: first keep the file now called name as this name */
};

/*
 * Swap segment files into a WAL directory from outside the struct wal that
 * owns it. The caller holds the directory's lock (wal_lock_dir) and has no
 * struct wal open on it; it wrote and synced every new file beforehand.
 *
 * dirfd: the WAL directory. For each of the n replacements, in order:
 *   1. with aside set, the file now called name is kept as aside: a hard
 *      link, or a rename where links are not possible (it must not exist
 *      yet): the old bytes are never deleted;
 *   2. src_name in srcfd is renamed to name, atomically replacing the file
 *      of that name if there is one (so at every moment name is either the
 *      old or the new file).
 * flags WAL_REPLACE_ALL: before any of that, every segment file in dirfd
 * and the CHECKPOINT file are deleted and the deletion synced: the
 * directory then holds the new segments only (a whole log imported).
 * Finally the directory is fsync'ed, so the swap is durable on return.
 *
 * Returns 0, or -errno of the first failure; then nothing after it was
 * done, and *failed (when not NULL) names the step for the caller's
 * message: "delete", "keep aside", "rename" or "sync the directory".
 * Nothing is logged. Segment names are not checked against the contents:
 * recovery checks every header at the next start.
 */
#define WAL_REPLACE_ALL 1
int wal_replace_segments(int dirfd, const struct wal_replacement *v, size_t n, int flags,
                         const char **failed);

#endif
