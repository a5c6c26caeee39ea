/*
 * walreplay.h -- the log's replay rules, written once.
 *
 * Which messages a log holds is decided by these rules alone; recovery
 * (engine_recover.c) and the WAL tools (`delay-bridge wal check|dump|
 * salvage`, cli_wal_scan.c) both apply them, over their own items in a
 * pool indexed by msg_id (pool.h, idmap.h):
 *
 *   ADD     its msg_id not live: a new live message.
 *           its msg_id live: a compaction copy (wal_space.c copies the
 *           live records of a segment it frees into the newest one); the
 *           newer record is the live one, and the older one is not.
 *   DONE    (published) and CANCEL (x-delay-cancel, replaced by a newer
 *           message with the same x-delay-key, purged): every id it names
 *           is no longer live. An id that is not live is normal -- its ADD
 *           was in a segment compaction has since deleted -- and only
 *           counted.
 *   other   (a checkpoint mark, a fence) changes nothing here.
 *
 * Records reach the rules in log order, after their CRC, length and LSN
 * were checked (walscan.h): a layout that does not decode behind a good
 * CRC is a bug, not bit rot, and is returned as -1 for the caller to call
 * corruption.
 *
 * Static inline: recovery applies them to 10^7 records at start, and the
 * forget callback, a constant at each call site, is inlined with them.
 */
#ifndef DELAY_BRIDGE_WALREPLAY_H
#define DELAY_BRIDGE_WALREPLAY_H

#include <stdint.h>

#include "delay-bridge/walrec.h"
#include "delay-bridge/idmap.h"
#include "delay-bridge/pool.h"

/*
 * An ADD of msg_id: the live item it is a compaction copy of, or POOL_NIL
 * when it is new. fresh: the caller knows no live message can have this id
 * (recovery: an ADD whose LSN is its id, past the checkpoint it loaded),
 * which skips the lookup -- a cache miss per record.
 */
static inline pool_handle walreplay_add(const struct idmap *live, uint64_t msg_id, int fresh)
{
    return fresh ? POOL_NIL : idmap_get(live, msg_id);
}

/*
 * A DONE or CANCEL (one layout): each id it names that is live is handed
 * to forget(arg, handle), which takes it out of the index and releases
 * it; *named gets the number of ids, and the return value is how many
 * were not live. -1 if the payload does not decode.
 */
static inline int64_t walreplay_forget(const struct idmap *live, const uint8_t *payload, uint32_t len,
                                       uint32_t *named, void (*forget)(void *, pool_handle),
                                       void *arg)
{
    uint32_t count;
    int64_t unknown = 0;

    if (walrec_done_decode(payload, len, &count) < 0)
        return -1;
    *named = count;
    for (uint32_t i = 0; i < count; i++) {
        pool_handle h = idmap_get(live, walrec_done_id(payload, i));
        if (h != POOL_NIL)
            forget(arg, h);
        else
            unknown++;
    }
    return unknown;
}

#endif
