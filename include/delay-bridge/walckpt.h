/*
 * walckpt.h -- the checkpoint file of a segment-file log.
 *
 * A checkpoint is a snapshot of the owner's held set, in chunks whose
 * bytes only the owner understands, plus the LSN recovery replays from on
 * top of it. There is at most one installed checkpoint per log directory,
 * dir/CHECKPOINT; a new one is written to dir/CHECKPOINT.tmp and renamed
 * over it once complete and synced, so a crash at any moment leaves the
 * old one or the new one, never a mix. The byte format is in walckpt.c.
 *
 * This module knows files, not the log: when a checkpoint may be installed
 * (everything it describes durable in the log) is wal.c's decision.
 */
#ifndef DB_WALCKPT_H
#define DB_WALCKPT_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/wlog.h"

#define WALCKPT_NAME "CHECKPOINT"
#define WALCKPT_TMP_NAME "CHECKPOINT.tmp"
#define WALCKPT_MAX_CHUNK (64u << 20) /* payload bytes of one chunk */
#define WALCKPT_KIND_END 255          /* reserved: the end chunk */

struct walckpt_info {
    uint64_t wal_id;     /* the log it belongs to */
    uint64_t start_lsn;  /* replay from this LSN on top of it */
    uint64_t end_lsn;    /* the log's next LSN when it was sealed */
    uint64_t created_ms; /* wall clock at begin */
    uint64_t chunks;     /* owner chunks (the end chunk not counted) */
    uint64_t bytes;      /* file size */
    uint64_t handed;     /* chunks handed to the reader's fn (0: its state is untouched) */
};

/* ---- writing ---------------------------------------------------------------- */

struct walckpt;

/*
 * Start dir/CHECKPOINT.tmp (replacing any left over) with its header.
 * dirfd is borrowed and must outlive c; dir is for messages. Returns 0 or
 * -errno.
 */
int walckpt_create(struct walckpt **out, int dirfd, const char *dir, uint64_t wal_id,
                   uint64_t start_lsn);

/* Append one chunk (kind 0..254, n <= WALCKPT_MAX_CHUNK). 0 or -errno. */
int walckpt_chunk(struct walckpt *c, uint8_t kind, const void *p, size_t n);

/* Append the end chunk (end_lsn: the log's next LSN now). 0 or -errno. */
int walckpt_finish(struct walckpt *c, uint64_t end_lsn);

/*
 * Make the finished file durable and install it, on a thread of its own:
 * fdatasync, rename over dir/CHECKPOINT, fsync the directory (no_sync:
 * rename only, for tests). Poll walckpt_installed() for the outcome.
 */
int walckpt_install(struct walckpt *c, int no_sync);

/* 0: still installing; 1: installed; negative: it failed (-errno), nothing replaced. */
int walckpt_installed(struct walckpt *c);

/* Bytes written so far. */
uint64_t walckpt_size(const struct walckpt *c);

/*
 * Free c. A checkpoint not installed is abandoned and its temporary file
 * removed; waits for an install thread still running.
 */
void walckpt_free(struct walckpt *c);

/* ---- reading ------------------------------------------------------------------ */

/*
 * Read dir/CHECKPOINT: check the header (and that it belongs to log wal_id,
 * unless 0) and every chunk first, then, if fn is not NULL, hand fn each
 * owner chunk in order (fn as in wlog.h: its 1 on the first chunk, "not
 * usable", comes back as 1; any other non-zero return is passed back).
 * Returns 0 with *info filled, 1 when there is no checkpoint (or fn found
 * it not usable), or a negative code: -errno, or WLOG_ECORRUPT /
 * WLOG_EFORMAT with the reason in why. progress, if not NULL, gets
 * progress->done = bytes read, over both passes (the caller sets total).
 */
int walckpt_read(int dirfd, uint64_t wal_id, wlog_ckpt_fn *fn, void *arg,
                 struct walckpt_info *info, char *why, size_t whylen, struct db_progress *progress);

#endif
