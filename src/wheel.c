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
 * Lanes. Each slot is WHEEL_LANES doubly linked lists ("lanes"), appended
 * at the tail; entry h always lives in lane h % WHEEL_LANES, so wheel_del()
 * finds its list from (h, due, now) alone. One list per slot would do for
 * correctness, but a cascade walks its slot's entries, and with tens of
 * millions of entries every step of the walk is a cache miss that depends on
 * the previous one (170-370 ns each on the 2-core VM we measured on, which
 * made a 10M-timer run cost ~500 ns per timer). The lanes are walked in step,
 * each with its next node prefetched (both cache lines: a 40-byte item's
 * node may straddle two), so sixteen misses are in flight instead of one
 * (~90 ns per timer on the same machine). A 16-bit mask per slot says which
 * lanes are in use, so a sparse slot costs no more than with one list.
 *
 * Order. Equal-due entries may reach their level-0 slot by different paths
 * (added near, or cascaded from far) and sit in different lanes, so a level-0
 * slot is not necessarily in seq order. When it fires, each lane is checked
 * in one pass (usually already in order: one path, increasing seq) and
 * merge-sorted if not, then the lanes are merged pairwise, in place on the
 * lists: the wheel never allocates per entry.
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
 * time of the batch being fired (or the old now, for entries that were
 * already due when wheel_advance() was called). wheel_advance() must not be
 * called from a callback.
 *
 * Memory is 8 x 256 slots x 16 lanes of two 32-bit handles (256 KiB) plus
 * the bitmaps, fixed; per entry only the links inside the item, struct
 * wheel_node.
 */
#include "wheel.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "duecount.h"
#include "xalloc.h"

#define WHEEL_LEVELS 8
#define WHEEL_BITS 8
#define WHEEL_SLOTS (1u << WHEEL_BITS)
#define WHEEL_MASK (WHEEL_SLOTS - 1)
#define WHEEL_LANES 16 /* lists per slot; entry h is in lane h % WHEEL_LANES */

struct wheel_list {
    pool_handle head, tail;
};

struct wheel_slot {
    struct wheel_list lane[WHEEL_LANES];
};

struct wheel {
    struct pool *pool;
    uint64_t now;
    size_t count;                 /* entries in slots and on pending */
    struct wheel_list pending;    /* due <= now, FIFO */
    uint64_t occupied[WHEEL_LEVELS][WHEEL_SLOTS / 64]; /* slot has entries */
    uint16_t lanes[WHEEL_LEVELS][WHEEL_SLOTS];         /* bit i: lane i has entries */
    struct wheel_slot slots[WHEEL_LEVELS][WHEEL_SLOTS];
    struct duecount *due;         /* entries per UTC minute and day ahead (duecount.h) */
};

static inline struct wheel_node *node(const struct wheel *w, pool_handle h)
{
    return pool_at(w->pool, h);
}

/*
 * Start loading node h; a node may straddle two cache lines. A macro: gcc
 * finds a function holding only prefetches side-effect free and drops calls.
 */
#define PREFETCH_NODE(w, h)                                                     \
    do {                                                                        \
        const char *p_ = pool_at((w)->pool, (h));                               \
        __builtin_prefetch(p_);                                                 \
        __builtin_prefetch(p_ + sizeof(struct wheel_node) - 1);                 \
    } while (0)

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

static inline unsigned lane_of(pool_handle h)
{
    return h & (WHEEL_LANES - 1);
}

/* Put entry h (due >= now) into its slot. */
static inline void place(struct wheel *w, pool_handle h, struct wheel_node *n)
{
    unsigned level = level_of(n->due, w->now);
    unsigned idx = slot_of(n->due, level);
    unsigned lane = lane_of(h);
    list_append(w, &w->slots[level][idx].lane[lane], h, n);
    w->lanes[level][idx] |= (uint16_t)(1u << lane);
    bit_set(w, level, idx);
}

struct wheel *wheel_new(struct pool *p, uint64_t now)
{
    struct wheel *w = xcalloc(1, sizeof(*w)); /* all lists POOL_NIL, bitmaps 0 */
    w->pool = p;
    w->now = now;
    w->due = duecount_new();
    return w;
}

void wheel_free(struct wheel *w)
{
    if (w)
        duecount_free(w->due);
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
    return sizeof(*w) + duecount_memory(w->due);
}

void wheel_due_view(const struct wheel *w, uint64_t now, struct duecount_view *out)
{
    duecount_view(w->due, now, out);
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
    duecount_add(w->due, due, +1);
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
        unsigned lane = lane_of(h);
        struct wheel_list *l = &w->slots[level][idx].lane[lane];
        assert(bit_test(w, level, idx) && (w->lanes[level][idx] >> lane & 1));
        list_unlink(w, l, n);
        if (l->head == POOL_NIL) {
            w->lanes[level][idx] &= (uint16_t)~(1u << lane);
            if (w->lanes[level][idx] == 0)
                bit_clear(w, level, idx);
        }
    }
    w->count--;
    duecount_add(w->due, n->due, -1);
}

/* Time of the next cascade or level-0 firing, UINT64_MAX if no slot is used. */
static uint64_t slots_next_event_at(const struct wheel *w, unsigned *lp, unsigned *ip)
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
        uint64_t high = 0; /* now's digits above level */
        if (level < WHEEL_LEVELS - 1)
            high = w->now & (~UINT64_C(0) << (shift + WHEEL_BITS));
        *lp = level;
        *ip = (unsigned)idx;
        return high | idx << shift;
    }
    return UINT64_MAX;
}

static uint64_t slots_next_event(const struct wheel *w)
{
    unsigned level, idx;

    return slots_next_event_at(w, &level, &idx);
}

/*
 * The earliest due time. If the pending list holds anything, that is its
 * minimum. Otherwise it is the minimum of the one slot slots_next_event()
 * names: an entry of a lower level would be an earlier event, an entry of a
 * later slot or a higher level a later one, so no other slot needs a look.
 */
uint64_t wheel_min_due(const struct wheel *w, size_t budget, int *exact)
{
    uint64_t min = UINT64_MAX, t;
    size_t seen = 0;
    unsigned level, idx, lane;
    pool_handle h;

    *exact = 1;
    if (w->pending.head != POOL_NIL) {
        for (h = w->pending.head; h != POOL_NIL && seen < budget; h = node(w, h)->next, seen++)
            if (node(w, h)->due < min)
                min = node(w, h)->due;
        *exact = h == POOL_NIL;
        return *exact ? min : w->now;
    }
    if (w->count == 0)
        return UINT64_MAX;
    t = slots_next_event_at(w, &level, &idx);
    if (t == UINT64_MAX)
        return UINT64_MAX;
    for (lane = 0; lane < WHEEL_LANES; lane++) {
        for (h = w->slots[level][idx].lane[lane].head; h != POOL_NIL; h = node(w, h)->next) {
            if (++seen > budget) {
                *exact = 0;
                return t; /* a lower bound: nothing is due before the slot's time */
            }
            if (node(w, h)->due < min)
                min = node(w, h)->due;
        }
    }
    return min;
}

/* ---- ordered walk (browsing) --------------------------------------------- */

struct walk_item {
    uint64_t due, seq;
    pool_handle h;
};

static int walk_cmp(const void *a, const void *b)
{
    const struct walk_item *x = a, *y = b;

    if (x->due != y->due)
        return x->due < y->due ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * Sort the entries of one list set (a slot's lanes, or pending) that come
 * after the cursor, and visit them. Returns non-zero when visit said stop.
 */
static int walk_lists(const struct wheel *w, const struct wheel_list *lists, int n,
                      uint64_t after_due, uint64_t after_seq, wheel_keep_fn *keep,
                      wheel_visit_fn *visit, void *arg, size_t *budget)
{
    struct walk_item *v = NULL;
    size_t cnt = 0, cap = 0, i;
    int stop = 0;

    for (int l = 0; l < n; l++)
        for (pool_handle h = lists[l].head; h != POOL_NIL; h = node(w, h)->next) {
            const struct wheel_node *nd = node(w, h);
            if (*budget)
                (*budget)--;
            if (nd->due < after_due || (nd->due == after_due && nd->seq <= after_seq))
                continue;
            if (keep && !keep(arg, h))
                continue;
            if (cnt == cap) {
                cap = cap ? cap * 2 : 64;
                v = xrealloc(v, cap * sizeof(*v));
            }
            v[cnt++] = (struct walk_item){nd->due, nd->seq, h};
        }
    if (cnt > 1)
        qsort(v, cnt, sizeof(*v), walk_cmp);
    for (i = 0; i < cnt && !stop; i++)
        stop = visit(arg, v[i].h);
    free(v);
    return stop;
}

/*
 * Time order of the slots: pending (due <= now) first; then level 0 slots
 * above now's digit 0, then level 1 slots above now's digit 1, and so on:
 * any entry of level L is due before any entry of level L+1 (it keeps now's
 * digit L+1, which the other raises). Slot idx of level L holds exactly the
 * dues in [base + idx * 256^L, base + (idx + 1) * 256^L).
 */
int wheel_walk(const struct wheel *w, uint64_t after_due, uint64_t after_seq,
               wheel_keep_fn *keep, wheel_visit_fn *visit, void *arg, size_t *budget,
               uint64_t *stop_due, uint64_t *stop_seq)
{
    if (walk_lists(w, &w->pending, 1, after_due, after_seq, keep, visit, arg, budget))
        return 0;
    for (unsigned level = 0; level < WHEEL_LEVELS; level++) {
        unsigned shift = WHEEL_BITS * level;
        uint64_t base = level < WHEEL_LEVELS - 1 ? w->now & (~UINT64_C(0) << (shift + WHEEL_BITS))
                                                 : 0;
        for (unsigned idx = slot_of(w->now, level) + 1; idx < WHEEL_SLOTS; idx++) {
            if (!bit_test(w, level, idx))
                continue;
            uint64_t end = base + ((uint64_t)(idx + 1) << shift) - 1; /* last due in the slot */
            if (level < WHEEL_LEVELS - 1 || idx + 1 < WHEEL_SLOTS)
                if (end < after_due)
                    continue; /* wholly before the cursor */
            if (*budget == 0) {
                /* everything before this slot was looked at */
                uint64_t start = base + ((uint64_t)idx << shift);
                if (start - 1 > after_due || (start - 1 == after_due && after_seq != UINT64_MAX)) {
                    *stop_due = start - 1;
                    *stop_seq = UINT64_MAX;
                    return 1;
                }
            }
            if (walk_lists(w, w->slots[level][idx].lane, WHEEL_LANES, after_due, after_seq,
                           keep, visit, arg, budget))
                return 0;
        }
    }
    return 0;
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

/* Merge two NIL-terminated lists sorted by seq (a first on ties). */
static pool_handle merge_by_seq(struct wheel *w, pool_handle a, pool_handle b)
{
    pool_handle head = POOL_NIL, tail = POOL_NIL;
    while (a != POOL_NIL && b != POOL_NIL) {
        pool_handle e;
        if (node(w, a)->seq <= node(w, b)->seq) {
            e = a;
            a = node(w, a)->next;
        } else {
            e = b;
            b = node(w, b)->next;
        }
        if (tail != POOL_NIL)
            node(w, tail)->next = e;
        else
            head = e;
        tail = e;
    }
    pool_handle rest = a != POOL_NIL ? a : b;
    if (tail == POOL_NIL)
        return rest;
    node(w, tail)->next = rest;
    return head;
}

/*
 * Take level-0 slot idx, whose entries are all due == now, and append it to
 * pending in seq order. Each lane is usually in seq order already (one path,
 * increasing seq); a lane that is not gets sorted, then the lanes are merged
 * pairwise.
 */
static void take_slot0(struct wheel *w, unsigned idx)
{
    struct wheel_slot *s = &w->slots[0][idx];
    pool_handle run[WHEEL_LANES];
    unsigned nrun = 0;

    bit_clear(w, 0, idx);
    for (unsigned used = w->lanes[0][idx]; used != 0; used &= used - 1) {
        unsigned i = (unsigned)__builtin_ctz(used);
        pool_handle h = s->lane[i].head;
        s->lane[i].head = s->lane[i].tail = POOL_NIL;
        struct wheel_node *n = node(w, h);
        for (pool_handle next = n->next; next != POOL_NIL; next = n->next) {
            struct wheel_node *nn = node(w, next);
            if (nn->seq < n->seq) {
                h = sort_by_seq(w, h);
                break;
            }
            n = nn;
        }
        run[nrun++] = h;
    }
    w->lanes[0][idx] = 0;
    while (nrun > 1) {
        unsigned k = 0;
        for (unsigned i = 0; i + 1 < nrun; i += 2)
            run[k++] = merge_by_seq(w, run[i], run[i + 1]);
        if (nrun & 1)
            run[k++] = run[nrun - 1];
        nrun = k;
    }

    /* Append to pending, rebuilding prev links (sort and merge keep next). */
    pool_handle h = run[0];
    struct wheel_list *p = &w->pending;
    struct wheel_node *n = node(w, h);
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

/*
 * Place again every entry of slot idx at level (now's digit there is idx).
 * The lanes are walked in step, so that up to WHEEL_LANES cache misses are
 * in flight instead of one. An entry stays in its lane at the new level, so
 * each lane keeps its order.
 */
static void cascade(struct wheel *w, unsigned level, unsigned idx)
{
    struct wheel_slot *s = &w->slots[level][idx];
    pool_handle cur[WHEEL_LANES];
    unsigned live = w->lanes[level][idx]; /* lanes still being walked */

    bit_clear(w, level, idx);
    w->lanes[level][idx] = 0;
    for (unsigned used = live; used != 0; used &= used - 1) {
        unsigned i = (unsigned)__builtin_ctz(used);
        cur[i] = s->lane[i].head;
        s->lane[i].head = s->lane[i].tail = POOL_NIL;
        PREFETCH_NODE(w, cur[i]);
    }
    while (live != 0) {
        for (unsigned used = live; used != 0; used &= used - 1) {
            unsigned i = (unsigned)__builtin_ctz(used);
            pool_handle h = cur[i];
            struct wheel_node *n = node(w, h);
            cur[i] = n->next;
            if (cur[i] != POOL_NIL)
                PREFETCH_NODE(w, cur[i]);
            else
                live &= ~(1u << i);
            place(w, h, n); /* lands below level: n->due agrees with now above */
        }
    }
}

/* Move the clock to event time t: cascade, then take the level-0 slot. */
static void step(struct wheel *w, uint64_t t)
{
    w->now = t;
    unsigned top = (unsigned)__builtin_ctzll(t) / WHEEL_BITS; /* t > 0 */
    if (top > WHEEL_LEVELS - 1)
        top = WHEEL_LEVELS - 1;
    for (unsigned level = top; level >= 1; level--)
        if (bit_test(w, level, slot_of(t, level)))
            cascade(w, level, slot_of(t, level));
    if (bit_test(w, 0, slot_of(t, 0)))
        take_slot0(w, slot_of(t, 0));
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
            duecount_add(w->due, node(w, h)->due, -1);
            fired++;
            fire(arg, h);
        }
        if (w->now == now)
            break; /* every event in the slots is after now */
        /* UINT64_MAX: no slot in use (every due time is below it). */
        uint64_t t = w->count ? slots_next_event(w) : UINT64_MAX;
        if (t > now || t == UINT64_MAX)
            break;
        step(w, t);
    }
    /* Nothing is due in (w->now, now], so every entry keeps its slot. */
    w->now = now;
    return fired;
}
