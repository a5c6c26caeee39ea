/*
 * dstash.h -- deliveries taken off the wire but not yet into the log.
 *
 * While the WAL's volume is short of space (wal_space.c's intake gate) the
 * bridge appends no new message: the deliveries the broker had already
 * sent when the ingress consumers were cancelled -- up to the routes'
 * prefetch -- wait here, copied, unacked, in arrival order, and go into the
 * log when intake resumes. Nothing in the stash is durable or acked: a
 * crash or a lost connection gives every one back to the broker (a stream
 * ingress reads it again from its place, which never passes the stash).
 *
 * A plain FIFO with two questions for the owner's acks and places: the
 * lowest delivery tag of a connection still waiting (a multiple ack must
 * stay below it), and a stream route's lowest offset still waiting (its
 * place file must stay at or below it). No I/O, no broker.
 */
#ifndef DB_DSTASH_H
#define DB_DSTASH_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/consumer.h"

struct dstash_item;

struct dstash {
    struct dstash_item *head, *tail;
    size_t n;          /* deliveries waiting */
    uint64_t bytes;    /* their bodies and strings */
    uint64_t stashed;  /* ever put in (counter) */
};

/* Copy d (everything it points to) to the tail. */
void dstash_put(struct dstash *s, const struct delivery *d);
/* The oldest waiting, or NULL. Valid until dstash_pop() or dstash_clear(). */
const struct delivery *dstash_peek(const struct dstash *s);
void dstash_pop(struct dstash *s);
/* Drop everything (a lost connection: the broker has them again; a stop). */
void dstash_clear(struct dstash *s);
/* Lowest tag waiting from connection gen; UINT64_MAX if none. */
uint64_t dstash_min_tag(const struct dstash *s, uint32_t gen);
/* Lowest stream offset waiting for route; INT64_MAX if none. */
int64_t dstash_min_offset(const struct dstash *s, int route);

#endif
