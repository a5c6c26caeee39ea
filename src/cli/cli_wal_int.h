/*
 * cli_wal_int.h -- what the files of "delay-bridge wal" share (internal to
 * cli_wal*.c, not a contract of the daemon).
 *
 *   cli_wal.c          the entry point and "wal check" (summary of a scan)
 *   cli_wal_scan.c     the read-only scan every command starts from: the
 *                      segments listed and opened, every record checked by
 *                      walscan.h (the daemon's own reading rules), pending
 *                      messages replayed into a pool indexed by msg_id
 *   cli_wal_dump.c     "wal dump": pending messages in due order, text or JSON
 *   cli_wal_salvage.c  "wal salvage": repair a log the daemon refuses; the
 *                      repaired segment goes in through wal_replace_segments()
 *
 * Ownership: a struct scan owns its open segment fds, its pool and index
 * and its route names; cw_scan_free() releases them all. Exit codes are the
 * CLI_* values below (the command's exit status); functions that return
 * "0, CLI_CORRUPT or -errno" say so.
 */
#ifndef DELAY_BRIDGE_CLI_WAL_INT_H
#define DELAY_BRIDGE_CLI_WAL_INT_H

#include <stdint.h>
#include <stdio.h>

#include "delay-bridge/idmap.h"
#include "delay-bridge/pool.h"
#include "delay-bridge/walscan.h"

#define CLI_OK 0
#define CLI_EIO 1
#define CLI_USAGE 2
#define CLI_CORRUPT 4
#define CLI_LOCKED 5

#define CHUNK (4u << 20)

/* ---- state ------------------------------------------------------------- */

struct seg {
    uint64_t segno;
    char name[WALSCAN_NAME_SIZE];
    int fd;
    uint64_t size;   /* bytes, as fstat said at open (what we read up to) */
    uint32_t salt;
    uint64_t base_lsn;
    uint64_t records;
};

/* One pending message (pool item; the idmap key msg_id is its first field). */
struct live {
    uint64_t msg_id;
    uint64_t due_ms;
    uint64_t enqueue_ms;
    uint64_t lsn;      /* LSN of the live copy */
    uint32_t seg;      /* index into scan.segs */
    uint32_t off;      /* record offset in that file */
    uint32_t len;      /* record bytes, header included */
    uint32_t body_len;
    uint16_t route;    /* index into scan.routes */
    uint16_t flags;    /* WALREC_ADD_* */
    uint16_t error;
    uint8_t key_match; /* keyed, and the key is scan.key (dump --key) */
};

struct route_stat {
    char *name;
    uint8_t len;
    uint64_t count, bytes;
};

struct scan {
    const char *dir;
    int dirfd;
    struct seg *segs;
    size_t nsegs;
    uint64_t wal_id;

    uint64_t file_bytes;
    uint64_t first_lsn, next_lsn; /* next_lsn = last good LSN + 1 */
    uint64_t n_add, n_copy, n_done, n_done_ids, n_done_unknown;
    uint64_t n_cancel, n_cancel_ids, n_cancel_unknown;
    uint64_t b_add, b_done, b_cancel;

    const char *key; /* dump --key, or NULL */

    /* torn tail of the newest segment */
    int torn;
    uint64_t torn_off, torn_bytes;
    char torn_why[200];

    struct walscan sc;

    /* corruption: the message after "corrupt: " */
    char corrupt[512];

    struct pool pool;
    struct idmap ids;
    struct route_stat *routes;
    size_t nroutes;

    uint8_t *buf; /* dump: one record read back */
    size_t cap;

    /* wal salvage: told of every record replayed, or NULL */
    void (*on_rec)(void *arg, const struct walscan_rec *rec);
    void *on_rec_arg;
};


/* ---- cli_wal_scan.c ---- */

void cw_fmt_iso(uint64_t ms, char *out, size_t n);
/* ms since the epoch, or ISO-8601 "2026-11-23T10:00:00[.123][Z|+hh:mm]". 0 or -1. */
int cw_parse_time(const char *s, uint64_t *out);
/* A string for a space-separated column: printable ASCII kept, the rest \xNN. */
void cw_put_field(FILE *f, const void *p, size_t n);
void cw_set_corrupt(struct scan *s, size_t idx, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The whole scan of s->dirfd. 0, CLI_CORRUPT (s->corrupt set) or -errno (reported). */
int cw_scan_run(struct scan *s);
/* List and open every segment of s->dirfd (again after a race with a live daemon). 0 or -errno. */
int cw_open_segs(struct scan *s);
void cw_scan_init(struct scan *s, const char *dir, const char *key);
void cw_scan_free(struct scan *s);
/*
 * Open dir and scan it; returns an exit code (CLI_OK when the scan is
 * usable). key: mark the pending messages with that x-delay-key, or NULL.
 */
int cw_scan_dir(struct scan *s, const char *dir, const char *key);
/* Replay one checked record of segment idx into the pending messages (and s->on_rec). */
void cw_on_record(struct scan *s, size_t idx, const struct walscan_rec *rec);
/* Handles of every pending message (in no order); *n set. Caller frees. */
pool_handle *cw_live_handles(const struct scan *s, size_t *n);
/* Sort handles of s's pending messages in due order (due time, then msg id). */
void cw_sort_due(const struct scan *s, pool_handle *v, size_t n);

/* ---- the commands ---- */

int cw_check(int argc, char **argv);
int cw_dump(int argc, char **argv);
int cw_salvage(int argc, char **argv);

#endif
