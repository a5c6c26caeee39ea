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
 * Split slots. A slot holding more than split_at entries (32768) becomes a
 * radix tree over (due, seq), so that a browse page never has to sort a
 * whole slot (wheel_tree.c says how, and what it costs). Firing is the
 * same: a split slot's children are in key order, a cascade hands split
 * children's children down whole as the lower slots they name, and a split
 * level-0 slot is taken leaf by leaf in seq order. Every other function sees a slot through
 * the same few calls (tree_add, tree_del, tree_cascade, tree_take).
 *
 * Memory is 8 x 256 slots of 16 lanes of two 32-bit handles plus a count
 * and a child pointer (288 KiB), plus the bitmaps, fixed; per entry only the
 * links inside the item, struct wheel_node; split slots' children on top.
 */
#include "wheel_int.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

#include "delay-bridge/duecount.h"
#include "base/xalloc.h"

/* Put entry h (due > now) into its slot, or the slot's split tree. */
static inline void place(struct wheel *w, pool_handle h, struct wheel_node *n)
{
    unsigned level = level_of(n->due, w->now);
    unsigned idx = slot_of(n->due, level);
    struct bucket *b = &w->slots[level][idx];

    if (b->count++ == 0)
        bit_set(w, level, idx);
    if (b->child) {
        tree_add(w, b, h, n);
        return;
    }
    bucket_append(w, b, h, n);
    if (b->count > w->split_at)
        tree_split(w, b, slot_digit(level));
}

struct wheel *wheel_new(struct pool *p, uint64_t now)
{
    struct wheel *w = xcalloc(1, sizeof(*w)); /* all lists POOL_NIL, bitmaps 0 */
    w->pool = p;
    w->now = now;
    w->due = duecount_new();
    w->split_at = WHEEL_SPLIT_AT;
    return w;
}

void wheel_set_split(struct wheel *w, uint32_t split_at)
{
    assert(w->count == 0 && split_at >= 1);
    w->split_at = split_at;
}

void wheel_free(struct wheel *w)
{
    if (!w)
        return;
    for (unsigned level = 0; level < WHEEL_LEVELS; level++)
        for (unsigned idx = 0; idx < WHEEL_SLOTS; idx++)
            tree_free(w, &w->slots[level][idx]);
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
    return sizeof(*w) + w->tree_bytes + duecount_memory(w->due);
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
        struct bucket *b = &w->slots[level][idx];
        assert(bit_test(w, level, idx) && b->count > 0);
        if (b->child)
            tree_del(w, b, h, n);
        else
            bucket_unlink(w, b, h, n);
        if (b->count == 0)
            bit_clear(w, level, idx);
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
 * Of a split slot, only its first leaf in key order: one due time if it sits
 * at due's last digit or below, at most split_at entries otherwise.
 */
uint64_t wheel_min_due(const struct wheel *w, size_t budget, int *exact)
{
    uint64_t min = UINT64_MAX, t;
    size_t seen = 0;
    unsigned level, idx, lane, pos;
    const struct bucket *leaf;
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
    leaf = &w->slots[level][idx];
    pos = slot_digit(level);
    if (leaf->child)
        leaf = tree_first_leaf(leaf, &pos);
    for (lane = 0; lane < WHEEL_LANES; lane++) {
        h = leaf->lane[lane].head;
        if (h != POOL_NIL && pos <= WHEEL_DUE0)
            return node(w, h)->due; /* the leaf holds one due time */
        for (; h != POOL_NIL; h = node(w, h)->next) {
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
 * Append leaf b, whose entries are all due == now, to pending in seq order,
 * emptying it. Each lane is usually in seq order already (one path,
 * increasing seq); a lane that is not gets sorted, then the lanes are merged
 * pairwise.
 */
static void take_leaf(struct wheel *w, struct bucket *b)
{
    pool_handle run[WHEEL_LANES];
    unsigned nrun = 0;

    for (unsigned used = b->lanes; used != 0; used &= used - 1) {
        unsigned i = (unsigned)__builtin_ctz(used);
        pool_handle h = b->lane[i].head;
        b->lane[i].head = b->lane[i].tail = POOL_NIL;
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
    b->lanes = 0;
    b->count = 0;
    if (nrun == 0)
        return;
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
 * Take level-0 slot idx: its entries are all due == now. A split one is
 * split by seq, and its leaves come in seq order, each taken as a leaf.
 */
static void take_slot0(struct wheel *w, unsigned idx)
{
    struct bucket *b = &w->slots[0][idx];

    bit_clear(w, 0, idx);
    if (b->child)
        tree_take(w, b, take_leaf);
    else
        take_leaf(w, b);
}

static void place_again(struct wheel *w, void *arg, pool_handle h, struct wheel_node *n)
{
    (void)arg;
    place(w, h, n); /* lands below the level: n->due agrees with now above */
}

/*
 * Place again every entry of slot idx at level (now's digit there is idx).
 * An entry stays in its lane at the new level, so each lane keeps its
 * order. A split slot hands its children down whole instead.
 */
static void cascade(struct wheel *w, unsigned level, unsigned idx)
{
    struct bucket *b = &w->slots[level][idx];

    bit_clear(w, level, idx);
    if (b->child)
        tree_cascade(w, level, idx, place_again);
    else
        bucket_drain(w, b, place_again, NULL);
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
