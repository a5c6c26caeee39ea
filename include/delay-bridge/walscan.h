/*
 * walscan.h -- read-only walk over the segment files of a WAL directory.
 *
 * The daemon's recovery (src/wal/wal.c) and the operator's "delay-bridge wal
 * check|dump" (src/cli/cli_wal.c) read a log with the same rules: which file
 * names are segments, when a segment header is acceptable, how records are
 * read in big chunks, what a valid record is, and when the first record
 * that is not valid is a torn tail rather than corruption. Those rules live
 * here, once; what each caller does with the answer (the daemon truncates a
 * torn tail and refuses a corrupt log, the tool reports both and changes
 * nothing) stays with the caller. This module never writes, never takes a
 * lock, never logs: it hands back facts, and the caller words them.
 *
 * Format and validity rules: src/wal/walrec.c.
 *
 * Directory:  walscan_list() the segment numbers, sorted; a file ending in
 *             ".wal" that is not named like a segment is WLOG_EFORMAT (the
 *             daemon refuses to open such a log).
 * Header:     walscan_seghdr() reads and judges one segment's header.
 * Log end:    walscan_log_end() where a directory's log ends (its newest
 *             segment scanned), for a reader that must not open the log.
 * Records:    struct walscan iterates over the records of one segment file
 *             descriptor; walscan_next() returns each valid record, and at
 *             the end says in sc->end how the file ended:
 *
 *     WALSCAN_CLEAN       every byte up to the end of the file was a record;
 *     WALSCAN_TORN        the record at bad_off is not valid, the segment is
 *                         the newest and no valid record (CRC good under the
 *                         salt, LSN beyond the last good one) follows it: a
 *                         write cut short by a crash (or one in progress);
 *     WALSCAN_BAD_RECORD  the record at bad_off is not valid and it is not a
 *                         torn tail: in an older segment, or a valid record
 *                         follows it at next_valid;
 *     WALSCAN_BAD_LSN     a valid record at bad_off carries LSN bad_lsn where
 *                         next_lsn was expected.
 *
 * For TORN and BAD_RECORD, why and reason say what was wrong with the
 * record (reason in words, with the numbers, for a person).
 *
 * DESIGN
 *
 * Reading. A segment is read with pread() in big chunks (the caller picks
 * the size; both callers use 4 MiB) into one buffer that the scanner owns
 * and keeps from segment to segment, and records are decoded in place:
 * there is no system call and no copy per record. A record cut by the end
 * of a chunk is carried over to the front of the buffer and the rest read
 * after it; a record larger than the buffer grows it to that record's size
 * (never beyond what is left of the file, so a garbage length in a torn
 * tail cannot make it allocate a gigabyte). The payload handed out points
 * into that buffer and is valid until the next call. The caller hears of
 * every read through on_read (the daemon reports replay progress with it).
 * pread and not mmap: the tool reads the directory of a live daemon, and a
 * daemon starting up may truncate a torn tail under it; a read then comes
 * back short (the scan takes that as the end of the file) where a mapping
 * would raise SIGBUS.
 *
 * Validity. A record is valid when walrec_decode() accepts it under the
 * segment's salt and its LSN is the one expected (+1 per record; the first
 * is the segment's base_lsn, which the caller has checked against the
 * previous segment). The first record that fails ends the scan; nothing
 * after it is returned. Its fault is classified with walrec_decode()'s own
 * checks in walrec_decode()'s order, so "the file ends inside it" (the two
 * SHORT reasons) is exactly what walrec_decode() calls WALREC_PARTIAL.
 *
 * Torn or corrupt. Only in the newest segment can a bad record be a torn
 * tail, and only if no valid record follows it anywhere in the file: the
 * rest of the file is searched byte by byte for a record that passes the
 * cheap header checks (known type, zero reserved fields, a length that fits
 * in the file, LSN beyond the last good one) and then the CRC. The search
 * reads windows of the same buffer, so it too needs no memory beyond one
 * chunk or the largest candidate record. (Rule and its limits: src/wal/wal.c.)
 *
 * Errors: 0 or a negative code, -errno or WLOG_EFORMAT (wlog.h). Out of
 * memory aborts (xalloc.h). Not thread-safe; one struct walscan per thread.
 * Ownership: file descriptors are the caller's; the scanner owns its buffer
 * (walscan_free); walscan_list's array is the caller's to free.
 */
#ifndef DB_WALSCAN_H
#define DB_WALSCAN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h" /* WLOG_EFORMAT */

/* ---- directory ------------------------------------------------------------ */

#define WALSCAN_NAME_SIZE 32 /* "%020llu.wal" and its NUL, with room to spare */

/* out = the file name of segment segno ("00000000000000000001.wal"). */
void walscan_seg_name(char out[WALSCAN_NAME_SIZE], uint64_t segno);

/*
 * The segment numbers of the segment files in directory dirfd, sorted
 * ascending, in *segnos (caller frees; NULL when there are none) and *n.
 * Files not ending in ".wal" (LOCK, notes) are ignored. A ".wal" file whose
 * name is not 20 digits, or whose number is 0 or above 2^32 - 1, makes it
 * WLOG_EFORMAT with the name copied into bad (bad_size bytes, NUL-ended).
 * Returns 0, WLOG_EFORMAT or -errno. dirfd is not closed or moved.
 */
int walscan_list(int dirfd, uint64_t **segnos, size_t *n, char *bad, size_t bad_size);

/* pread() until n bytes, end of file or an error: bytes read, or -errno. */
ssize_t walscan_pread(int fd, void *p, size_t n, uint64_t off);

/* ---- segment header ------------------------------------------------------- */

enum walscan_hdr {
    WALSCAN_HDR_OK = 0,
    WALSCAN_HDR_CREATING, /* newest, no longer than a header, header not valid: a
                             segment being created, or a crash cut that short */
    WALSCAN_HDR_SHORT,    /* the file ends inside the header */
    WALSCAN_HDR_BAD,      /* magic, version, reserved word or checksum */
    WALSCAN_HDR_SEGNO,    /* h->segno is not the number in the file name */
    WALSCAN_HDR_BASE_LSN, /* h->base_lsn is 0 */
    WALSCAN_HDR_TOO_BIG,  /* the file is larger than 4 GiB (offsets are u32) */
};

/*
 * Read the header of segment segno (file size bytes, newest: no segment
 * after it) from fd and judge it, in the order of the enum. Returns an enum
 * walscan_hdr (>= 0) or -errno. *h is filled from SEGNO on (and for OK).
 * The wal_id and the continuity with the previous segment are the caller's.
 */
int walscan_seghdr(int fd, uint64_t segno, uint64_t size, int newest, struct walrec_seghdr *h);

/* ---- records -------------------------------------------------------------- */

enum walscan_end {
    WALSCAN_CLEAN = 0,
    WALSCAN_TORN,
    WALSCAN_BAD_RECORD,
    WALSCAN_BAD_LSN,
};

/* What is wrong with the record at bad_off (the checks of walrec_decode, in its order). */
enum walscan_why {
    WALSCAN_WHY_NONE = 0,
    WALSCAN_WHY_TYPE,          /* unknown record type */
    WALSCAN_WHY_RESERVED,      /* a reserved header field is not 0 */
    WALSCAN_WHY_TOO_LONG,      /* len > WALREC_MAX_PAYLOAD */
    WALSCAN_WHY_SHORT_HEADER,  /* the file ends inside the 24-byte header */
    WALSCAN_WHY_SHORT_PAYLOAD, /* the file ends inside the payload */
    WALSCAN_WHY_CRC,           /* checksum mismatch under the segment's salt */
    WALSCAN_WHY_LAYOUT,        /* the payload's lengths do not add up to len */
};

/* One valid record. */
struct walscan_rec {
    struct walrec_hdr hdr;
    const uint8_t *payload; /* hdr.len bytes in the scanner's buffer, valid until the next call */
    uint64_t off;           /* file offset of the record */
    uint32_t len;           /* bytes, header included */
};

/* Called after each read from the file: bytes of the file read so far (offset). */
typedef void walscan_read_fn(void *arg, uint64_t read_to);

struct walscan {
    /* The outcome: read once walscan_next() has returned 0. */
    int end;                /* enum walscan_end */
    uint64_t size;          /* bytes in the file: as given to start, or less if it shrank */
    uint64_t next_lsn;      /* LSN after the last valid record (the first LSN if none);
                               also up to date while iterating */
    uint64_t bad_off;       /* TORN, BAD_*: offset of the first record that failed */
    int why;                /* TORN, BAD_RECORD: enum walscan_why */
    char reason[160];       /* TORN, BAD_RECORD: why in words ("checksum mismatch (...)") */
    uint64_t next_valid;    /* BAD_RECORD in the newest segment: offset of a valid record
                               after bad_off; 0 otherwise */
    uint64_t bad_lsn;       /* BAD_LSN: the LSN found (next_lsn was expected) */
    uint64_t zero_tail;     /* CLEAN: bytes of zeros after the last record, to the end of
                               the file (the log's prewritten tail, wal.h); size excludes
                               them */

    /* Private. */
    int fd;
    uint32_t salt;
    int newest, done;
    uint8_t *buf; /* owned; grows for a record larger than it, kept across segments */
    size_t cap, chunk;
    uint64_t boff; /* file offset of buf[0] */
    size_t have, pos;
    walscan_read_fn *on_read;
    void *read_arg;
};

/*
 * Set up a scanner that reads chunk bytes at a time (at least 64; 4 MiB is
 * a good size), calling on_read (may be NULL) with arg after each read.
 * Nothing is allocated until walscan_start().
 */
void walscan_init(struct walscan *sc, size_t chunk, walscan_read_fn *on_read, void *arg);
/* Free the buffer. The struct may be started again (it allocates anew). */
void walscan_free(struct walscan *sc);

/*
 * Begin on the segment open on fd (not owned), size bytes long (fstat),
 * whose header gave salt; its first record must carry first_lsn, each next
 * one +1. newest: no segment follows it, so a bad record may be a torn tail.
 * Records start after the header (WALREC_SEGHDR_SIZE). The buffer is reused.
 */
void walscan_start(struct walscan *sc, int fd, uint64_t size, uint32_t salt, uint64_t first_lsn,
                   int newest);

/*
 * The next valid record in *rec: returns 1. At the end of what can be
 * read returns 0 and sets the outcome fields above; later calls return 0
 * again. -errno on a read error (the scan cannot go on; start again).
 */
int walscan_next(struct walscan *sc, struct walscan_rec *rec);

/*
 * The torn-tail search's cheap test of a candidate record at p (at least a
 * record header; avail bytes from p to the end of the file), made before
 * the CRC: a known type, zero reserved fields, a length that fits in avail
 * and in WALREC_MAX_PAYLOAD, and an LSN >= lsn_min and, when lsn_end is
 * not 0, < lsn_end. 1 if it may be a record, else 0. The one rule the
 * daemon's scan and "wal salvage" both search with, past damage, for the
 * next record.
 */
int walscan_plausible(const uint8_t *p, uint64_t avail, uint64_t lsn_min, uint64_t lsn_end);

/* ---- the whole log -------------------------------------------------------- */

/*
 * Where the log in dirfd ends: its id and the LSN after its last durable
 * record, from a scan of the newest segment with a valid header (what
 * recovery will find, less the torn tail it truncates; a newest segment
 * still being created is passed over for the one before). 0, or -1 when it
 * cannot tell (no segment, a bad one, a read error). Reads only.
 */
int walscan_log_end(int dirfd, uint64_t *wal_id, uint64_t *next);

#endif
