/*
 * wheel.h -- hierarchical timing wheel with 1 ms ticks over pool items.
 *
 * Eight levels of 256 slots cover the whole uint64_t millisecond range, so a
 * delay of years needs no special case and keeps full precision: an entry is
 * cascaded down level by level and fires from level 0 at exactly its due
 * millisecond. A 256-bit occupancy bitmap per level finds the next event
 * without scanning empty slots, so the owner can sleep until
 * wheel_next_event() and a clock jump of hours costs one step per occupied
 * slot, not one per millisecond.
 *
 * Contract:
 *  - never early: an entry fires only from a wheel_advance(now) with
 *    now >= its due time;
 *  - due order: one wheel_advance fires everything due, in (due, seq) order;
 *    entries with equal due time fire in ascending seq (the caller's
 *    insertion counter, e.g. the message id), whatever order they were added in;
 *  - entries added with due <= wheel_now() fire at the next wheel_advance,
 *    before anything else, in the order they were added;
 *  - O(1) add and del; amortised O(1) expiry (an entry is cascaded at most
 *    once per level).
 *
 * Entries are the pool's items: struct wheel_node must be the first member
 * of the item type. The wheel never allocates per entry. The caller owns the
 * items and tells the wheel which are in it; an item may be in at most one
 * wheel at a time.
 */
#ifndef DB_WHEEL_H
#define DB_WHEEL_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/pool.h"

struct wheel_node {
    pool_handle next, prev; /* slot list links, POOL_NIL terminated */
    uint64_t due;           /* ms, absolute */
    uint64_t seq;           /* tie-break among equal due times */
};

struct wheel;

/* A wheel over pool p whose clock starts at now (ms). p must outlive it. */
struct wheel *wheel_new(struct pool *p, uint64_t now);
void wheel_free(struct wheel *w);

/*
 * Split a slot (or part of one) once it holds more than split_at entries
 * (default 32768; see wheel_tree.c). Only for an empty wheel; tests use a
 * small value to split often. Firing order and every other contract are
 * the same whatever the value.
 */
void wheel_set_split(struct wheel *w, uint32_t split_at);

/* Add item h (not in any wheel) due at due ms (due < UINT64_MAX). */
void wheel_add(struct wheel *w, pool_handle h, uint64_t due, uint64_t seq);

/* Remove item h, which must be in w and not yet fired. */
void wheel_del(struct wheel *w, pool_handle h);

uint64_t wheel_now(const struct wheel *w);
size_t wheel_count(const struct wheel *w);

/*
 * Time (ms) of the next thing the wheel has to do: a firing or a cascade of
 * a higher-level slot. Never later than the earliest due time, so sleeping
 * until then never makes an entry late. wheel_now() if something is already
 * due; UINT64_MAX if the wheel is empty.
 */
uint64_t wheel_next_event(const struct wheel *w);

/*
 * The earliest due time of any entry (UINT64_MAX if empty). It looks at one
 * slot only (see wheel.c), at most budget entries of it; if that was not
 * enough, *exact is 0 and the result is a lower bound (the slot's time).
 */
uint64_t wheel_min_due(const struct wheel *w, size_t budget, int *exact);

/*
 * Visit entries in (due, seq) order, starting after (after_due, after_seq),
 * until visit returns non-zero, every entry was seen, or the budget ran out.
 * The walk descends to the cursor: slots, and parts of split slots, wholly
 * at or before it are skipped without a look. Of each leaf reached (at most
 * the split size of entries, 32768 unless wheel_set_split() said otherwise,
 * whatever the slot holds; the pending list is one leaf), the entries keep
 * says yes to (keep may be NULL: all) are gathered and sorted, then
 * visited. Every entry of a leaf reached counts against *budget; when it is
 * spent before the next leaf, the walk stops there and returns 1 with
 * (*stop_due, *stop_seq) a cursor from which a later walk continues
 * (everything up to it was looked at). Returns 0 otherwise. Cost: O(depth +
 * k + m log m) for the k entries of the leaves reached and the m kept, so a
 * budget of B bounds a call at B + one leaf. Nothing is changed; no callback
 * may change the wheel.
 */
typedef int wheel_visit_fn(void *arg, pool_handle h);
typedef int wheel_keep_fn(void *arg, pool_handle h);
int wheel_walk(const struct wheel *w, uint64_t after_due, uint64_t after_seq,
               wheel_keep_fn *keep, wheel_visit_fn *visit, void *arg, size_t *budget,
               uint64_t *stop_due, uint64_t *stop_seq);

typedef void wheel_fire_fn(void *arg, pool_handle h);

/*
 * Move the clock to now and call fire(arg, h) for every entry due at or
 * before now, in the order stated above. When fire is called, h is already
 * out of the wheel: the callback may re-add it, add others or delete others.
 * Entries the callback adds with due <= now fire in this same call, after
 * the ones already due. A now earlier than wheel_now() does nothing (time
 * never runs backwards for the wheel). Returns the number fired.
 */
size_t wheel_advance(struct wheel *w, uint64_t now, wheel_fire_fn *fire, void *arg);

/*
 * How many entries fall due in each UTC minute of the next hour, hour of the
 * next day and day of the next year from now (ms): counters the wheel keeps
 * on every add, delete and firing (duecount.h), so this reads no entry and
 * costs the same few microseconds however many are held.
 */
struct duecount_view;
void wheel_due_view(const struct wheel *w, uint64_t now, struct duecount_view *out);

/* Bytes of RAM held by the wheel itself (slots, bitmaps, due counters; not items). */
size_t wheel_memory(const struct wheel *w);

#endif
