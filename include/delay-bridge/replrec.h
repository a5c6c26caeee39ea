/*
 * replrec.h -- the replication stream's message format, and the rules for
 * reading a stream back into a log.
 *
 * With wal.replicate set, every record the write-ahead log appends is also
 * published to a RabbitMQ stream (src/repl/wrepl.c), a few hundred at a time in
 * one stream message. This module owns those bytes (written out at the top
 * of src/wal/replrec.c) and the import: which messages of a stream, read from
 * its first retained offset, make up the log, and whether what is left of
 * the stream is the whole log. Pure: no I/O, no allocation.
 */
#ifndef DB_REPLREC_H
#define DB_REPLREC_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/walrec.h"

#define REPLREC_HDR_SIZE 40
#define REPLREC_SALT 0x5245504cu /* records in a stream message are checked with this salt */

enum replrec_kind {
    REPLREC_RECORDS = 1, /* log records, LSNs running +1 from lsn */
    REPLREC_FENCE = 2,   /* an owner's term begins: records of earlier owners after it are strays */
    REPLREC_HORIZON = 3, /* every record still live has an LSN >= lsn */
};

struct replrec_hdr {
    uint8_t kind;    /* enum replrec_kind */
    uint64_t wal_id; /* the log's id (0 in a fence: the owner does not know it yet) */
    uint64_t owner;  /* random token of the owner's term (lease) */
    uint64_t lsn;    /* RECORDS: first record's LSN; HORIZON: the horizon; FENCE: 0 */
    uint32_t count;  /* RECORDS: records that follow; else 0 */
};

void replrec_hdr_encode(uint8_t out[REPLREC_HDR_SIZE], const struct replrec_hdr *h);
/* REPLREC_HDR_SIZE, WALREC_PARTIAL, or WALREC_INVALID (magic, version, kind or CRC). */
int replrec_hdr_decode(const uint8_t *buf, size_t len, struct replrec_hdr *h);

/*
 * Reading a stream back. Feed every message from the first retained
 * offset, in order; the import hands the log's records to the sink:
 *
 *   reset(wal_id, base_lsn)  start (again) a log whose first record has
 *                            base_lsn: drop whatever was handed so far (a
 *                            gap in the stream makes the records before it
 *                            useless);
 *   record(h, payload)       the next record; h->lsn runs +1 from base_lsn.
 *
 * replrec_import_msg() returns 1 once it saw the fence of `mine` (the end:
 * the importer published it before it began to read), 0 to go on, or -1
 * with a reason in why (a message that is not ours, records of two logs,
 * a record that fails its checks), or the sink's own negative code.
 */
struct replrec_sink {
    int (*reset)(void *arg, uint64_t wal_id, uint64_t base_lsn);
    int (*record)(void *arg, const struct walrec_hdr *h, const uint8_t *payload);
    void *arg;
};

struct replrec_import {
    uint64_t mine;       /* the importer's own fence token */
    uint64_t wal_id;     /* of the records seen, 0 while none */
    uint64_t owner;      /* current term: the last fence's token, or the first batch's */
    uint64_t first_lsn;  /* first record of the current contiguous run (0: none) */
    uint64_t next_lsn;   /* next record expected (0: none yet) */
    uint64_t horizon;    /* newest horizon within the run (0: none) */
    uint64_t last_owner; /* term that wrote the newest records taken */
    uint64_t messages, batches, records, bytes;
    uint64_t strays;     /* record batches of an earlier term after a newer fence: skipped */
    uint64_t gaps;       /* runs restarted because LSNs jumped */
    uint64_t fences, horizons;
    int fenced;              /* the owner comes from a fence read (else from the first batch) */
    int ambiguous;           /* two owners' batches before any fence: which is the stray? */
    uint64_t horizon_fenced; /* newest horizon of a term whose fence was read (0: none) */
};

void replrec_import_init(struct replrec_import *im, uint64_t mine);
int replrec_import_msg(struct replrec_import *im, const uint8_t *body, size_t len,
                       const struct replrec_sink *sink, char *why, size_t whylen);

/*
 * After the importer's fence: 1 if the records handed over are the whole
 * log (none at all; or a run from LSN 1; or a run with a horizon in it),
 * 0 if the stream lost records that may still be live (retention cut ahead
 * of the last completed stream checkpoint, or replication was turned on
 * for a log that had records and no stream checkpoint completed since).
 */
int replrec_import_complete(const struct replrec_import *im);

#endif
