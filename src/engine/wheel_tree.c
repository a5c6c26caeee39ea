/*
 * wheel_tree.c -- split buckets, and the timing wheel's ordered walk.
 *
 * Why split. A wheel slot of level L covers 256^L ms, and nothing bounds
 * how many entries one slot holds: ten million messages of "48 hours" sent
 * within four hours sit in one or two level-3 slots, and one million sent
 * with the same x-delay-until sit in one level-0 slot. Firing never minds
 * (a cascade walks a slot once), but a browse page does: the walk must show
 * entries in (due, seq) order from a cursor, and a slot's lists are in no
 * order, so the walk used to gather and sort a whole slot for every page
 * that reached it -- 0.47 s of the loop for one slot of 1.2 million.
 *
 * So a bucket (wheel_int.h) holding more than split_at entries becomes a
 * node of a 16-ary radix tree over the key (due, seq): its entries move to
 * children chosen by the next 4-bit key digit below the ones the bucket
 * fixes, and a child that still holds more splits again. Down to due's
 * last digit the children split time; below it, among entries of one due,
 * they split seq, so that a run of a million equal due times is as easy to
 * page through as a spread one. Children are walked in index order, which
 * is key order, so a walk from a cursor descends the one path that holds it
 * (children wholly at or before the cursor are skipped unlooked-at) and
 * sorts no more than one leaf of at most split_at entries at a time.
 *
 * Why 16 children, not 256. Adding an entry appends to a list, which
 * touches that list's last entry. A wheel slot's 16 lanes have their last
 * entries in cache; a split into 256 children of 16 lanes each made 4096
 * lists per slot, their tails cold, and doubled the cost of an add at 10M
 * held (bench_wheel: 21 -> 81 ns). With 16 children it is 256 lists
 * (40 ns), and a split costs 16 x 144 + 128 bytes instead of 37 KiB.
 *
 * What it costs. A child array is 16 pointers and a child bucket 144
 * bytes, held only by slots that grew past split_at (32768): 0.01-0.1 B per
 * entry as measured (bench_wheel, bench_browse), at most about 1.2 B per
 * entry of a split bucket's own count for keys chosen to leave every child
 * nearly empty (16 children per 8192 entries, a quarter of split_at, below
 * which a split bucket is merged back), and a tree is as deep as the 32
 * digits at worst. Adding to a split slot descends a few pointers;
 * deleting descends the same path, frees children left empty and merges
 * the highest bucket left small (a merge only joins lists: O(children), not
 * O(entries)). Splitting walks the bucket once, its lanes in step like a
 * cascade, once per split_at adds at most.
 *
 * Firing. A split slot of level L >= 1 is split by the high nibble of due's
 * byte L-1, the byte that picks the level-(L-1) slot. When it cascades,
 * every level below it is empty (a lower slot would have been an earlier
 * event), so a child split again by the low nibble hands each of its
 * children down as that slot, whole, in O(1); a child still a leaf (at most
 * split_at entries) has its entries placed one by one, as an unsplit slot
 * does. A level-0 slot is split by seq; taking it takes its leaves in key
 * order, each leaf sorted by seq as an unsplit slot is, so equal-due
 * entries still fire in seq order.
 */
#include "wheel_int.h"

#include <assert.h>
#include <stdlib.h>

#include "base/xalloc.h"

static struct bucket *bucket_new(struct wheel *w)
{
    w->tree_bytes += sizeof(struct bucket);
    return xcalloc(1, sizeof(struct bucket)); /* lists POOL_NIL, count 0 */
}

static void bucket_free(struct wheel *w, struct bucket *b)
{
    w->tree_bytes -= sizeof(*b);
    free(b);
}

static void children_new(struct wheel *w, struct bucket *b, unsigned digit)
{
    b->digit = (uint8_t)digit;
    b->child = xcalloc(WHEEL_FANOUT, sizeof(*b->child));
    w->tree_bytes += WHEEL_FANOUT * sizeof(*b->child);
}

static void children_free(struct wheel *w, struct bucket *b)
{
    free(b->child);
    b->child = NULL;
    w->tree_bytes -= WHEEL_FANOUT * sizeof(*b->child);
}

/* The child of split bucket b that n belongs to, created if absent. */
static struct bucket *child_for(struct wheel *w, struct bucket *b, const struct wheel_node *n)
{
    struct bucket **c = &b->child[key_digit(n, b->digit)];
    if (!*c)
        *c = bucket_new(w);
    return *c;
}

void tree_add(struct wheel *w, struct bucket *b, pool_handle h, struct wheel_node *n)
{
    for (;;) {
        unsigned pos = b->digit; /* where the child sits */
        b = child_for(w, b, n);
        b->count++;
        if (!b->child) {
            bucket_append(w, b, h, n);
            if (b->count > w->split_at && pos >= 1)
                tree_split(w, b, pos);
            return;
        }
    }
}

static void split_move(struct wheel *w, void *arg, pool_handle h, struct wheel_node *n)
{
    struct bucket *c = child_for(w, arg, n);
    bucket_append(w, c, h, n);
    c->count++;
}

void tree_split(struct wheel *w, struct bucket *b, unsigned pos)
{
    uint32_t count = b->count;

    assert(!b->child && pos >= 1);
    children_new(w, b, pos - 1);
    bucket_drain(w, b, split_move, b); /* each lane's order is kept in the child */
    b->count = count;
    if (pos - 1 >= 1)
        for (unsigned k = 0; k < WHEEL_FANOUT; k++)
            if (b->child[k] && b->child[k]->count > w->split_at)
                tree_split(w, b->child[k], pos - 1); /* every entry shared the digit */
}

/* Make split bucket b a leaf again: each child's lanes joined to b's, in key order. */
static void tree_merge(struct wheel *w, struct bucket *b)
{
    for (unsigned k = 0; k < WHEEL_FANOUT; k++) {
        struct bucket *c = b->child[k];
        if (!c)
            continue;
        if (c->child)
            tree_merge(w, c);
        for (unsigned used = c->lanes; used != 0; used &= used - 1) {
            unsigned i = (unsigned)__builtin_ctz(used);
            struct wheel_list *to = &b->lane[i], *from = &c->lane[i];
            if (to->tail != POOL_NIL) {
                node(w, to->tail)->next = from->head;
                node(w, from->head)->prev = to->tail;
            } else {
                to->head = from->head;
            }
            to->tail = from->tail;
        }
        b->lanes |= c->lanes;
        bucket_free(w, c);
    }
    children_free(w, b);
}

void tree_del(struct wheel *w, struct bucket *b, pool_handle h, struct wheel_node *n)
{
    struct bucket *path[WHEEL_DIGITS + 1];
    unsigned key[WHEEL_DIGITS + 1], depth = 0, alive;

    while (b->child) {
        assert(depth < WHEEL_DIGITS);
        path[depth] = b;
        key[depth] = key_digit(n, b->digit);
        b->count--;
        b = b->child[key[depth]];
        assert(b != NULL);
        depth++;
    }
    bucket_unlink(w, b, h, n);
    /* Children left empty go, bottom up; what is at depth alive stays. */
    for (alive = depth; alive > 0; alive--) {
        struct bucket **c = &path[alive - 1]->child[key[alive - 1]];
        if ((*c)->count)
            break;
        if ((*c)->child)
            children_free(w, *c); /* its children went first */
        bucket_free(w, *c);
        *c = NULL;
    }
    /* The highest split bucket left at a quarter of split_at becomes a leaf. */
    for (unsigned i = 0; i <= alive && i < depth; i++)
        if (path[i]->count <= w->split_at / 4) {
            tree_merge(w, path[i]);
            break;
        }
}

void tree_cascade(struct wheel *w, unsigned level, unsigned idx, bucket_move_fn *move)
{
    struct bucket *b = &w->slots[level][idx];

    assert(level >= 1 && b->digit == slot_digit(level) - 1);
    b->count = 0;
    for (unsigned hi = 0; hi < WHEEL_FANOUT; hi++) {
        struct bucket *c = b->child[hi];
        if (!c)
            continue;
        if (!c->child) {
            bucket_drain(w, c, move, NULL); /* at most split_at entries */
        } else {
            assert(c->digit == slot_digit(level) - 2);
            for (unsigned lo = 0; lo < WHEEL_FANOUT; lo++) {
                struct bucket *g = c->child[lo], *to = &w->slots[level - 1][hi << 4 | lo];
                if (!g)
                    continue;
                assert(to->count == 0 && !to->child);
                *to = *g; /* lists are head and tail: the bucket moves by copy */
                bit_set(w, level - 1, hi << 4 | lo);
                bucket_free(w, g);
            }
            children_free(w, c);
        }
        bucket_free(w, c);
    }
    children_free(w, b);
}

void tree_take(struct wheel *w, struct bucket *b, tree_take_fn *take)
{
    for (unsigned k = 0; k < WHEEL_FANOUT; k++) {
        struct bucket *c = b->child[k];
        if (!c)
            continue;
        if (c->child)
            tree_take(w, c, take);
        else
            take(w, c);
        bucket_free(w, c);
    }
    children_free(w, b);
    b->count = 0;
}

const struct bucket *tree_first_leaf(const struct bucket *b, unsigned *pos)
{
    while (b->child) {
        unsigned k = 0;
        while (!b->child[k])
            k++; /* a split bucket has a child: counts say so */
        *pos = b->digit;
        b = b->child[k];
    }
    return b;
}

void tree_free(struct wheel *w, struct bucket *b)
{
    if (!b->child)
        return;
    for (unsigned k = 0; k < WHEEL_FANOUT; k++)
        if (b->child[k]) {
            tree_free(w, b->child[k]);
            bucket_free(w, b->child[k]);
        }
    children_free(w, b);
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

struct walk {
    const struct wheel *w;
    uint64_t after_due, after_seq; /* the cursor */
    wheel_keep_fn *keep;
    wheel_visit_fn *visit;
    void *arg;
    size_t *budget;
    uint64_t *stop_due, *stop_seq;
};

static int at_or_before_cursor(const struct walk *k, uint64_t due, uint64_t seq)
{
    return due < k->after_due || (due == k->after_due && seq <= k->after_seq);
}

/*
 * Walk bucket b, which holds keys from (dlo, slo) to (dhi, shi). Returns 0
 * to go on, 1 when visit said stop, 2 when the budget stopped the walk at
 * b's first key (*stop_due, *stop_seq set just before it).
 */
static int walk_bucket(struct walk *k, const struct bucket *b, uint64_t dlo, uint64_t dhi,
                       uint64_t slo, uint64_t shi)
{
    if (at_or_before_cursor(k, dhi, shi))
        return 0; /* wholly at or before the cursor: not looked at */
    if (*k->budget == 0 && (dlo | slo) != 0) {
        /* everything before b was looked at: stop there, if that is progress */
        uint64_t pd = slo ? dlo : dlo - 1, ps = slo ? slo - 1 : UINT64_MAX;
        if (!at_or_before_cursor(k, pd, ps)) {
            *k->stop_due = pd;
            *k->stop_seq = ps;
            return 2;
        }
    }
    if (!b->child)
        return walk_lists(k->w, b->lane, WHEEL_LANES, k->after_due, k->after_seq, k->keep,
                          k->visit, k->arg, k->budget) != 0;
    for (unsigned c = 0; c < WHEEL_FANOUT; c++) {
        uint64_t cdlo = dlo, cdhi = dhi, cslo = slo, cshi = shi;
        unsigned g = b->digit, e;
        int r;

        if (!b->child[c])
            continue;
        if (g >= WHEEL_DUE0) { /* a nibble of due: b's dues are aligned to its children */
            e = 4 * (g - WHEEL_DUE0);
            cdlo = dlo + ((uint64_t)c << e);
            cdhi = cdlo + ((UINT64_C(1) << e) - 1);
        } else { /* one due; a nibble of seq */
            e = 4 * g;
            cslo = slo + ((uint64_t)c << e);
            cshi = cslo + ((UINT64_C(1) << e) - 1);
        }
        if ((r = walk_bucket(k, b->child[c], cdlo, cdhi, cslo, cshi)) != 0)
            return r;
    }
    return 0;
}

/*
 * Time order of the slots: pending (due <= now) first; then level 0 slots
 * above now's digit 0, then level 1 slots above now's digit 1, and so on:
 * any entry of level L is due before any entry of level L+1 (it keeps now's
 * digit L+1, which the other raises). Slot idx of level L holds exactly the
 * dues in [base + idx * 256^L, base + (idx + 1) * 256^L); within a split
 * slot, children come in key order (walk_bucket).
 */
int wheel_walk(const struct wheel *w, uint64_t after_due, uint64_t after_seq,
               wheel_keep_fn *keep, wheel_visit_fn *visit, void *arg, size_t *budget,
               uint64_t *stop_due, uint64_t *stop_seq)
{
    struct walk k = {w, after_due, after_seq, keep, visit, arg, budget, stop_due, stop_seq};

    if (walk_lists(w, &w->pending, 1, after_due, after_seq, keep, visit, arg, budget))
        return 0;
    for (unsigned level = 0; level < WHEEL_LEVELS; level++) {
        unsigned shift = WHEEL_BITS * level;
        uint64_t base = level < WHEEL_LEVELS - 1 ? w->now & (~UINT64_C(0) << (shift + WHEEL_BITS))
                                                 : 0;
        for (unsigned idx = slot_of(w->now, level) + 1; idx < WHEEL_SLOTS; idx++) {
            if (!bit_test(w, level, idx))
                continue;
            uint64_t start = base + ((uint64_t)idx << shift);
            uint64_t end = start + ((UINT64_C(1) << shift) - 1); /* last due in the slot */
            int r = walk_bucket(&k, &w->slots[level][idx], start, end, 0, UINT64_MAX);
            if (r)
                return r == 2;
        }
    }
    return 0;
}
