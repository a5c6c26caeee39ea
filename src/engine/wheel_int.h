/*
 * wheel_int.h -- the timing wheel's insides, shared by wheel.c (placing,
 * cascading, firing) and wheel_tree.c (split buckets and the ordered walk).
 * Nothing outside the wheel includes this file; wheel.h is the contract.
 *
 * A bucket is a set of entries kept as WHEEL_LANES lists (entry h in lane
 * h % WHEEL_LANES), or, once it holds more than split_at entries, a "split"
 * bucket whose entries live in up to 16 child buckets chosen by one 4-bit
 * digit of the entry's key. The key is the pair (due, seq) read as 32
 * nibbles, most significant first:
 *
 *     digit 31 .. 16   due's nibbles 15 .. 0
 *     digit 15 ..  0   seq's nibbles 15 .. 0
 *
 * A wheel slot of level L holds keys whose due bytes from L up are fixed,
 * i.e. digits 31 .. 16+2L; as a bucket it "sits at" digit 16+2L
 * (slot_digit), and a split one picks its child by digit 15+2L, the high
 * nibble of due's byte L-1. A child chosen by digit g sits at g and, split,
 * picks by g-1. So a bucket at digit 0 holds one key and is never split,
 * and every leaf holds at most split_at entries (ties of both due and seq
 * aside). Children are in key order: walking them in index order walks the
 * bucket in (due, seq) order, which is what makes a browse page cost
 * O(depth + split_at) however many entries the slot holds (wheel_tree.c).
 */
#ifndef DB_WHEEL_INT_H
#define DB_WHEEL_INT_H

#include "wheel.h"

#include <stdint.h>

#define WHEEL_LEVELS 8
#define WHEEL_BITS 8
#define WHEEL_SLOTS (1u << WHEEL_BITS)
#define WHEEL_MASK (WHEEL_SLOTS - 1)
#define WHEEL_LANES 16      /* lists per bucket; entry h is in lane h % WHEEL_LANES */
#define WHEEL_FANOUT 16     /* children of a split bucket: one per 4-bit key digit */
#define WHEEL_DIGITS 32     /* key digits: due's 16 nibbles then seq's 16 */
#define WHEEL_DUE0 16       /* key digit of due's lowest nibble */
#ifndef WHEEL_SPLIT_AT /* -DWHEEL_SPLIT_AT=n builds another default, for measuring */
#define WHEEL_SPLIT_AT 32768 /* default split_at: a leaf holding more splits */
#endif

struct wheel_list {
    pool_handle head, tail;
};

struct bucket {
    struct wheel_list lane[WHEEL_LANES];
    uint32_t count;        /* entries in this bucket, its children included */
    uint16_t lanes;        /* bit i: lane[i] is not empty (leaves only) */
    uint8_t digit;         /* split: the key digit that picks the child */
    uint8_t unused;
    struct bucket **child; /* NULL: a leaf; else WHEEL_FANOUT children, NULL = empty */
};

struct wheel {
    struct pool *pool;
    uint64_t now;
    size_t count;              /* entries in slots and on pending */
    struct wheel_list pending; /* due <= now, FIFO */
    uint64_t occupied[WHEEL_LEVELS][WHEEL_SLOTS / 64]; /* slot's count > 0 */
    struct bucket slots[WHEEL_LEVELS][WHEEL_SLOTS];
    struct duecount *due; /* entries per UTC minute and day ahead (duecount.h) */
    uint32_t split_at;    /* a leaf holding more than this splits; merged back at a quarter */
    size_t tree_bytes;    /* heap bytes of child arrays and child buckets */
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

static inline unsigned lane_of(pool_handle h)
{
    return h & (WHEEL_LANES - 1);
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

/* Key digit g of an entry (see above). */
static inline unsigned key_digit(const struct wheel_node *n, unsigned g)
{
    return (unsigned)((g >= WHEEL_DUE0 ? n->due >> (4 * (g - WHEEL_DUE0)) : n->seq >> (4 * g)) &
                      (WHEEL_FANOUT - 1));
}

/* The key digit a slot of level L sits at: due's nibbles from 2L up are fixed. */
static inline unsigned slot_digit(unsigned level)
{
    return WHEEL_DUE0 + 2 * level;
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

/* Append h to leaf b's lane; the caller counts it. */
static inline void bucket_append(struct wheel *w, struct bucket *b, pool_handle h,
                                 struct wheel_node *n)
{
    unsigned lane = lane_of(h);
    list_append(w, &b->lane[lane], h, n);
    b->lanes |= (uint16_t)(1u << lane);
}

/* Take h out of leaf b, count included. */
static inline void bucket_unlink(struct wheel *w, struct bucket *b, pool_handle h,
                                 struct wheel_node *n)
{
    unsigned lane = lane_of(h);
    struct wheel_list *l = &b->lane[lane];
    list_unlink(w, l, n);
    if (l->head == POOL_NIL)
        b->lanes &= (uint16_t)~(1u << lane);
    b->count--;
}

/*
 * Empty leaf b, calling move(w, arg, h, n) on each of its entries. The lanes
 * are walked in step, each with its next node prefetched, so that up to
 * WHEEL_LANES cache misses are in flight instead of one; each lane's order
 * is kept (move sees a lane's entries in order). move may append h
 * anywhere but to b. Always inlined, so the call to move is direct.
 */
typedef void bucket_move_fn(struct wheel *w, void *arg, pool_handle h, struct wheel_node *n);
static inline __attribute__((always_inline)) void
bucket_drain(struct wheel *w, struct bucket *b, bucket_move_fn *move, void *arg)
{
    pool_handle cur[WHEEL_LANES];
    unsigned live = b->lanes; /* lanes still being walked */

    b->lanes = 0;
    b->count = 0;
    for (unsigned used = live; used != 0; used &= used - 1) {
        unsigned i = (unsigned)__builtin_ctz(used);
        cur[i] = b->lane[i].head;
        b->lane[i].head = b->lane[i].tail = POOL_NIL;
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
            move(w, arg, h, n);
        }
    }
}

/* ---- wheel_tree.c ---- */

/* Add h to split bucket b (its count already includes h). */
void tree_add(struct wheel *w, struct bucket *b, pool_handle h, struct wheel_node *n);

/* Split leaf b, which sits at digit pos >= 1 (see above). */
void tree_split(struct wheel *w, struct bucket *b, unsigned pos);

/* Take h out of split bucket b, counts included; merges what got small. */
void tree_del(struct wheel *w, struct bucket *b, pool_handle h, struct wheel_node *n);

/*
 * Slot (level, idx) is split and now's digit level is idx: hand its
 * entries down to level-1 slots -- a child split again moves whole, one
 * grandchild per slot; a leaf child's entries go through move, the
 * wheel's own placing function (see wheel_tree.c, "Firing").
 */
void tree_cascade(struct wheel *w, unsigned level, unsigned idx, bucket_move_fn *move);

/* Level-0 slot b is split: call take(w, leaf) on its leaves in key order, emptying it. */
typedef void tree_take_fn(struct wheel *w, struct bucket *leaf);
void tree_take(struct wheel *w, struct bucket *b, tree_take_fn *take);

/* The first leaf of bucket b in key order, and the digit it sits at (*pos). */
const struct bucket *tree_first_leaf(const struct bucket *b, unsigned *pos);

/* Free b's children (b itself is a slot or freed by the caller). */
void tree_free(struct wheel *w, struct bucket *b);

#endif
