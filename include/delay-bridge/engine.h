/*
 * engine.h -- held messages: WAL + timing wheel + id index, no broker.
 *
 * The engine is the part of the daemon that can be tested without a
 * RabbitMQ: it takes messages in (eng_add), makes them durable in one group
 * commit (eng_commit), hands them back when due (eng_advance) and forgets
 * them once the owner says they were published and confirmed (eng_done).
 *
 * What RAM holds per message is struct held below, 40 bytes, plus its slot
 * in the id index (about 6-11 bytes): route, due time, id and where the
 * record sits in the WAL. Routing key, properties and body stay on disk and
 * are read back by eng_load() when the message falls due.
 *
 * Life of a message:
 *   eng_add()      -> PENDING: appended to the WAL buffer, not yet durable
 *   eng_commit()   -> WAITING: durable, in the wheel (the owner may ack now)
 *   eng_advance()  -> FIRED: handed to the owner's fire callback
 *   eng_done()     -> gone: a DONE record goes out with the next commit
 *   eng_retry()    -> WAITING again (publish failed; due time given)
 * A crash between FIRED and a durable DONE replays the message: delivery is
 * at least once, and msg_id lets consumers deduplicate.
 */
#ifndef DB_ENGINE_H
#define DB_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/pool.h"
#include "delay-bridge/wal.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/wheel.h"

#define ENG_ROUTE_UNKNOWN 0xFFFFu

enum held_state { HELD_PENDING = 1, HELD_WAITING = 2, HELD_FIRED = 3, HELD_ORPHAN = 4 };

struct held {
    struct wheel_node node; /* node.seq is the message id; node.due its due time */
    struct wal_loc loc;     /* the ADD record */
    uint16_t route;         /* index into the owner's routes, or ENG_ROUTE_UNKNOWN */
    uint8_t state;          /* enum held_state */
    uint8_t flags;          /* reserved */
};

struct eng_opts {
    struct wal_opts wal;
    /* Map a route name from the WAL to the owner's route index, or -1. */
    int (*route_index)(void *arg, const char *name, size_t len);
    void *route_arg;
    uint64_t now_ms; /* wall clock at open; 0 = read it */
};

struct engine;

/*
 * Open the WAL in o->wal.dir and rebuild the held set from it. Messages
 * whose route is unknown stay held (ORPHAN: never fired, logged). Returns 0
 * or a negative wal code.
 */
int eng_open(struct engine **out, const struct eng_opts *o);
void eng_close(struct engine *e);

/*
 * Append a message (a->msg_id is assigned here). Not durable until
 * eng_commit(). *hp (may be NULL) gets its handle.
 */
int eng_add(struct engine *e, uint16_t route, struct walrec_add *a, pool_handle *hp);

/* Append pending DONEs, write and fdatasync, then schedule committed adds. */
int eng_commit(struct engine *e);
/* Anything waiting for eng_commit()? */
int eng_dirty(const struct engine *e);

typedef void eng_fire_fn(void *arg, pool_handle h, uint16_t route);

/* Earliest time something may fall due (ms), UINT64_MAX if nothing waits. */
uint64_t eng_next_event(const struct engine *e);
/* Fire everything due at or before now, in (due, id) order. */
size_t eng_advance(struct engine *e, uint64_t now, eng_fire_fn *fire, void *arg);

/* Read a FIRED message back from the WAL; pointers in *a stay valid until the next eng_load. */
int eng_load(struct engine *e, pool_handle h, struct walrec_add *a);

/* The message was published and confirmed: forget it. */
void eng_done(struct engine *e, pool_handle h);
/* Publishing failed: wait again until due. */
void eng_retry(struct engine *e, pool_handle h, uint64_t due);

static inline struct held *eng_held(struct engine *e, pool_handle h);

/* Reclaim WAL space, a bounded amount of work; 1 if more remains. */
int eng_maintain(struct engine *e, size_t budget);

struct eng_stats {
    uint64_t held;     /* every message the engine holds */
    uint64_t waiting;  /* in the wheel */
    uint64_t fired;    /* handed out, not yet done */
    uint64_t orphaned; /* route unknown */
    uint64_t added, done, retried;
    uint64_t ram_bytes; /* pool + index + wheel */
    struct wal_stats wal;
};
void eng_get_stats(const struct engine *e, struct eng_stats *s);
uint64_t eng_wal_id(const struct engine *e);

/* Implementation detail exposed for the inline accessor. */
struct pool *eng_pool(struct engine *e);
static inline struct held *eng_held(struct engine *e, pool_handle h)
{
    return (struct held *)pool_at(eng_pool(e), h);
}

#endif
