/*
 * wheel.c -- hierarchical timing wheel with 1 ms ticks over pool items.
 *
 * Design
 * ------
 * Split a uint64_t millisecond time into eight 8-bit digits, digit L being
 * bits 8L..8L+7. The wheel keeps its clock `now`; an entry due after now
 * lives at the level of the highest digit where due and now differ,
 *
 *     L    = (63 - clz(due ^ now)) / 8,
 *     slot = (due >> 8L) & 255,
 *
 * so an entry at level L agrees with now in every digit above L and its
 * digit L is greater than now's. Nothing else is stored: wheel_del()
 * recomputes the slot from (due, now). A level-L slot must be looked at
 * again when now's digit L reaches the slot's index with all lower digits
 * zero; at that moment ("cascade") its entries are placed again relative to
 * the new now and land at lower levels. An entry is cascaded at most once per
 * level and fires from level 0 at exactly its due millisecond: there is no
 * rounding, so no entry ever fires early or late by a granule.
 *
 * Level  Digit bits  Granularity         Entries whose due is at most
 *  0        0- 7        1 ms             255 ms       away
 *  1        8-15      256 ms             65.5 s       away (2^16 ms)
 *  2       16-23     65.5 s              4.66 hours   away (2^24 ms)
 *  3       24-31     4.66 hours          49.7 days    away (2^32 ms)
 *  4       32-39     49.7 days           34.8 years   away (2^40 ms)
 *  5       40-47     34.8 years          8,919 years  away (2^48 ms)
 *  6       48-55     8,919 years         2.28 M years away (2^56 ms)
 *  7       56-63     2.28 M years        584 M years  away (2^64 ms)
 *
 * ("at most": the level depends on the highest differing bit, not on the
 * distance, so an entry 10 ms away sits at level 1 when a 256 ms boundary
 * lies between.)
 *
 * Finding the next event. Each level has a 256-bit occupancy bitmap. The
 * next event of level L is the first occupied slot with index above now's
 * digit L, at time (now with digits 0..L cleared) | (index << 8L). Any event
 * of level L comes before any event of level L+1 (it keeps now's digit L+1,
 * which the other increases), so the next event is that of the lowest level
 * with such a bit: a handful of word scans, whatever the distance.
 *
 * Advancing. wheel_advance() jumps from event to event, never millisecond by
 * millisecond. At event time t it sets now = t; for each level L from 7 down
 * to 1 whose lower digits of t are all zero, it cascades slot (t >> 8L) & 255
 * of level L; then it takes level-0 slot t & 255, whose entries are all due
 * exactly at t. A clock jump of years costs one step per occupied slot.
 *
 * Order. A slot list is appended at the tail, but equal-due entries may reach
 * their level-0 slot by different paths (added near, or cascaded from far),
 * so a level-0 slot is not necessarily in seq order. When it fires it is
 * checked in one pass and, if out of order, merge-sorted by seq (in place on
 * the list: the wheel never allocates per entry).
 *
 * Pending list. Entries due at or before now -- added that way, or the
 * level-0 slot just taken -- wait on the FIFO `pending` list, which
 * wheel_advance() drains one entry at a time, unlinking each before calling
 * fire(). Everything with due <= now is on `pending` and everything with
 * due > now is in a slot, so wheel_del() tells the two apart by due alone and
 * the callback may delete any entry, even one of the batch being fired, or
 * add entries: due <= now goes to the tail of `pending` and fires in this
 * call after the current batch; due > now goes into a slot and fires in this
 * call if due <= the advance target. During callbacks wheel_now() is the due
 * time of the batch being fired.
 *
 * Memory is 8 x 256 slots of two 32-bit handles (16 KiB) plus the bitmaps,
 * fixed; per entry only the links inside the item, struct wheel_node.
 */
#include "delay-bridge/wheel.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#define WHEEL_LEVELS 8
#define WHEEL_BITS 8
#define WHEEL_SLOTS (1u << WHEEL_BITS)
#define WHEEL_MASK (WHEEL_SLOTS - 1)

struct wheel_list {
    pool_handle head, tail;
};

struct wheel {
    struct pool *pool;
    uint64_t now;
    size_t count;                 /* entries in slots and on pending */
    struct wheel_list pending;    /* due <= now, FIFO */
    uint64_t occupied[WHEEL_LEVELS][WHEEL_SLOTS / 64];
    struct wheel_list slots[WHEEL_LEVELS][WHEEL_SLOTS];
};

static inline struct wheel_node *node(const struct wheel *w, pool_handle h)
{
    return pool_at(w->pool, h);
}

static inline void list_append(struct wheel *w, struct wheel_list *l, pool_handle h,
                               struct wheel_node *n)
{
    n->next = POOL_NIL;
    n->prev = l->tail;
    if (l->tail != POOL_NIL)
        node(w, l->tail)->next = h;
    else
        l->head = h;
    l->tail = h;
}

static inline void list_unlink(struct wheel *w, struct wheel_list *l, struct wheel_node *n)
{
    if (n->prev != POOL_NIL)
        node(w, n->prev)->next = n->next;
    else
        l->head = n->next;
    if (n->next != POOL_NIL)
        node(w, n->next)->prev = n->prev;
    else
        l->tail = n->prev;
    n->next = n->prev = POOL_NIL;
}

/* Level of an entry due at due > now (or due == now, level 0, mid-step). */
static inline unsigned level_of(uint64_t due, uint64_t now)
{
    uint64_t diff = due ^ now;
    return diff ? (unsigned)(63 - __builtin_clzll(diff)) / WHEEL_BITS : 0;
}

static inline unsigned slot_of(uint64_t due, unsigned level)
{
    return (unsigned)(due >> (WHEEL_BITS * level)) & WHEEL_MASK;
}

static inline void bit_set(struct wheel *w, unsigned level, unsigned idx)
{
    w->occupied[level][idx >> 6] |= UINT64_C(1) << (idx & 63);
}

static inline void bit_clear(struct wheel *w, unsigned level, unsigned idx)
{
    w->occupied[level][idx >> 6] &= ~(UINT64_C(1) << (idx & 63));
}

static inline int bit_test(const struct wheel *w, unsigned level, unsigned idx)
{
    return (w->occupied[level][idx >> 6] >> (idx & 63)) & 1;
}

/* Put entry h (due >= now) into its slot. */
static inline void place(struct wheel *w, pool_handle h, struct wheel_node *n)
{
    unsigned level = level_of(n->due, w->now);
    unsigned idx = slot_of(n->due, level);
    list_append(w, &w->slots[level][idx], h, n);
    bit_set(w, level, idx);
}

struct wheel *wheel_new(struct pool *p, uint64_t now)
{
    struct wheel *w = calloc(1, sizeof(*w)); /* all lists POOL_NIL, bitmaps 0 */
    if (w == NULL) {
        fprintf(stderr, "wheel: out of memory\n");
        abort();
    }
    w->pool = p;
    w->now = now;
    return w;
}

void wheel_free(struct wheel *w)
{
    free(w);
}

uint64_t wheel_now(const struct wheel *w)
{
    return w->now;
}

size_t wheel_count(const struct wheel *w)
{
    return w->count;
}

size_t wheel_memory(const struct wheel *w)
{
    return sizeof(*w);
}

void wheel_add(struct wheel *w, pool_handle h, uint64_t due, uint64_t seq)
{
    assert(h != POOL_NIL && due < UINT64_MAX);
    struct wheel_node *n = node(w, h);
    n->due = due;
    n->seq = seq;
    if (due <= w->now)
        list_append(w, &w->pending, h, n);
    else
        place(w, h, n);
    w->count++;
}

void wheel_del(struct wheel *w, pool_handle h)
{
    struct wheel_node *n = node(w, h);
    assert(w->count > 0);
    if (n->due <= w->now) {
        list_unlink(w, &w->pending, n);
    } else {
        unsigned level = level_of(n->due, w->now);
        unsigned idx = slot_of(n->due, level);
        struct wheel_list *l = &w->slots[level][idx];
        assert(bit_test(w, level, idx));
        list_unlink(w, l, n);
        if (l->head == POOL_NIL)
            bit_clear(w, level, idx);
    }
    w->count--;
}

/* Time of the next cascade or level-0 firing, UINT64_MAX if no slot is used. */
static uint64_t slots_next_event(const struct wheel *w)
{
    for (unsigned level = 0; level < WHEEL_LEVELS; level++) {
        unsigned shift = WHEEL_BITS * level;
        unsigned from = slot_of(w->now, level) + 1; /* first index > now's digit */
        if (from == WHEEL_SLOTS)
            continue;
        const uint64_t *bits = w->occupied[level];
        unsigned wi = from >> 6;
        uint64_t word = bits[wi] & (~UINT64_C(0) << (from & 63));
        while (word == 0 && ++wi < WHEEL_SLOTS / 64)
            word = bits[wi];
        if (word == 0)
            continue;
        uint64_t idx = wi * 64 + (unsigned)__builtin_ctzll(word);
        uint64_t high = level == WHEEL_LEVELS - 1 ? 0 : w->now & (~UINT64_C(0) << (shift + WHEEL_BITS));
        return high | idx << shift;
    }
    return UINT64_MAX;
}

uint64_t wheel_next_event(const struct wheel *w)
{
    if (w->pending.head != POOL_NIL)
        return w->now;
    if (w->count == 0)
        return UINT64_MAX;
    return slots_next_event(w);
}

/* Stable merge sort of a NIL-terminated list by seq, on next links only. */
static pool_handle sort_by_seq(struct wheel *w, pool_handle list)
{
    for (size_t run = 1;; run *= 2) {
        pool_handle a = list, head = POOL_NIL, tail = POOL_NIL;
        size_t merges = 0;

        while (a != POOL_NIL) {
            pool_handle b = a;
            size_t na = 0, nb = run;
            merges++;
            while (na < run && b != POOL_NIL) {
                na++;
                b = node(w, b)->next;
            }
            while (na > 0 || (nb > 0 && b != POOL_NIL)) {
                pool_handle e;
                if (na > 0 && (nb == 0 || b == POOL_NIL ||
                               node(w, a)->seq <= node(w, b)->seq)) {
                    e = a;
                    a = node(w, a)->next;
                    na--;
                } else {
                    e = b;
                    b = node(w, b)->next;
                    nb--;
                }
                if (tail != POOL_NIL)
                    node(w, tail)->next = e;
                else
                    head = e;
                tail = e;
            }
            a = b;
        }
        node(w, tail)->next = POOL_NIL;
        if (merges <= 1)
            return head;
        list = head;
    }
}

/* Take level-0 slot idx (all due == now): sort by seq, append to pending. */
static void take_slot0(struct wheel *w, unsigned idx)
{
    struct wheel_list *l = &w->slots[0][idx];
    pool_handle h = l->head;
    l->head = l->tail = POOL_NIL;
    bit_clear(w, 0, idx);

    /* Already in seq order? The common case: one path, increasing seq. */
    struct wheel_node *n = node(w, h);
    for (pool_handle next = n->next; next != POOL_NIL; next = n->next) {
        struct wheel_node *nn = node(w, next);
        if (nn->seq < n->seq) {
            h = sort_by_seq(w, h);
            break;
        }
        n = nn;
    }
    /* Append to pending, rebuilding prev links (the sort kept only next). */
    struct wheel_list *p = &w->pending;
    n = node(w, h);
    n->prev = p->tail;
    if (p->tail != POOL_NIL)
        node(w, p->tail)->next = h;
    else
        p->head = h;
    for (;;) {
        pool_handle next = n->next;
        if (next == POOL_NIL)
            break;
        struct wheel_node *nn = node(w, next);
        nn->prev = h;
        h = next;
        n = nn;
    }
    p->tail = h;
}

/* Move the clock to event time t: cascade, then take the level-0 slot. */
static void step(struct wheel *w, uint64_t t)
{
    w->now = t;
    unsigned top = (unsigned)__builtin_ctzll(t) / WHEEL_BITS; /* t > 0 */
    if (top > WHEEL_LEVELS - 1)
        top = WHEEL_LEVELS - 1;
    for (unsigned level = top; level >= 1; level--) {
        unsigned idx = slot_of(t, level);
        if (!bit_test(w, level, idx))
            continue;
        struct wheel_list *l = &w->slots[level][idx];
        pool_handle h = l->head;
        l->head = l->tail = POOL_NIL;
        bit_clear(w, level, idx);
        while (h != POOL_NIL) {
            struct wheel_node *n = node(w, h);
            pool_handle next = n->next;
            if (next != POOL_NIL)
                __builtin_prefetch(node(w, next));
            place(w, h, n); /* lands below level: n->due agrees with t above */
            h = next;
        }
    }
    unsigned idx = slot_of(t, 0);
    if (bit_test(w, 0, idx))
        take_slot0(w, idx);
}

size_t wheel_advance(struct wheel *w, uint64_t now, wheel_fire_fn *fire, void *arg)
{
    size_t fired = 0;

    if (now < w->now)
        return 0;
    for (;;) {
        while (w->pending.head != POOL_NIL) {
            pool_handle h = w->pending.head;
            list_unlink(w, &w->pending, node(w, h));
            w->count--;
            fired++;
            fire(arg, h);
        }
        uint64_t t = w->count ? slots_next_event(w) : UINT64_MAX;
        if (t > now)
            break;
        step(w, t);
    }
    /* Nothing is due in (w->now, now], so every entry keeps its slot. */
    w->now = now;
    return fired;
}
