/*
 * simrepl.h -- the simulator's replication stream (tests/sim/simrepl.c has
 * the essay): records tapped from the log, published per commit, lost or
 * duplicated on demand, and imported into an emptied WAL directory.
 */
#ifndef DB_SIM_SIMREPL_H
#define DB_SIM_SIMREPL_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/walrec.h"

/* An empty stream; owner: the writer's term token; seg_bytes: the rebuilt log's segments. */
void simrepl_reset(uint64_t owner, uint64_t seg_bytes);
/* The wal tap (wal_set_tap): every record appended. */
void simrepl_tap(void *arg, const struct walrec_hdr *h, const uint8_t *payload);
/* A commit succeeded: its records become one RECORDS message. */
void simrepl_commit(uint64_t wal_id);
/* The process died or stopped: records not committed are never published. */
void simrepl_drop_pending(void);
size_t simrepl_messages(void);
/* Faults: message i lost; message i published again, the copy at index at. */
void simrepl_lose(size_t i);
void simrepl_duplicate(size_t i, size_t at);
/*
 * Disk lost: rebuild the log in SIMFS_DIR from the stream, up to the fence
 * of mine. 0 (then *complete says whether the stream held the whole log),
 * or negative with why (the import refused a message, or the log failed).
 */
int simrepl_import(uint64_t mine, int *complete, char *why, size_t whylen);

#endif
