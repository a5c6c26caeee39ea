/*
 * test_wheel.c -- the timing wheel's contract, case by case and against a
 * reference model over millions of random operations.
 *
 * Usage: test_wheel [case...]       (--list names the cases)
 *
 * Environment: TEST_SEED (default 0x5eed2024) seeds the generator, TEST_OPS
 * (default 12000000) is the number of operations of the "random" case;
 * TEST_SPLIT (default: the wheel's own, 32768) is the split size of every
 * wheel a case makes, so that a small one runs every case on split slots
 * (ctest unit.test_wheel_split); all decimal or 0x hex. Every case restarts the generator from the seed, so a
 * failing case reruns the same alone: TEST_SEED=n TEST_OPS=m test_wheel random.
 * Both values are printed before the first case runs.
 *
 * The reference model is the contract written as plainly as possible: a
 * binary heap ordered by (due, seq) for entries due later, and a FIFO for
 * entries already due. Advancing pops the FIFO first; when it is empty the
 * whole group of heap entries with the smallest due time <= target moves to
 * the FIFO in seq order, and the model's clock becomes that due time. The
 * random test checks every firing against the model at the moment it
 * happens, so callbacks can mutate both the wheel and the model in step.
 */
#include "engine/wheel.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "testkit.h"

struct item {
    struct wheel_node node; /* first member, as wheel.h requires */
    uint32_t tag;
    uint32_t pad;
};

static struct pool pool;

static struct item *item(pool_handle h)
{
    return pool_at(&pool, h);
}

static uint32_t test_split; /* TEST_SPLIT, 0 = the wheel's default */

static struct wheel *new_wheel(uint64_t now)
{
    struct wheel *w = wheel_new(&pool, now);
    if (test_split)
        wheel_set_split(w, test_split);
    return w;
}

static pool_handle new_item(uint32_t tag)
{
    pool_handle h = pool_alloc(&pool);
    item(h)->tag = tag;
    return h;
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return tk_rand(&rng_state);
}

/* ---- Deterministic cases ------------------------------------------------ */

/* Records firings; optional hook runs inside the callback. */
struct rec {
    struct wheel *w;
    uint64_t target;
    pool_handle fired[4096];
    uint64_t fired_now[4096]; /* wheel_now() seen by the callback */
    size_t n;
    void (*hook)(struct rec *r, pool_handle h);
    void *ctx;
};

static void rec_fire(void *arg, pool_handle h)
{
    struct rec *r = arg;
    CHECK(item(h)->node.due <= r->target);
    CHECK(item(h)->node.due <= wheel_now(r->w));
    CHECK(r->n < 4096);
    if (r->n < 4096) {
        r->fired_now[r->n] = wheel_now(r->w);
        r->fired[r->n++] = h;
    }
    if (r->hook)
        r->hook(r, h);
}

static size_t advance(struct rec *r, uint64_t now)
{
    r->target = now;
    size_t before = r->n;
    size_t got = wheel_advance(r->w, now, rec_fire, r);
    CHECK(got == r->n - before);
    if (now >= wheel_now(r->w))
        CHECK(wheel_now(r->w) == now);
    return got;
}

static void rec_init(struct rec *r, uint64_t now)
{
    memset(r, 0, sizeof(*r));
    r->w = new_wheel(now);
}

static void rec_done(struct rec *r)
{
    wheel_free(r->w);
}

/* Never early, never late: due d fires at the advance that reaches d. */
static void test_boundaries(void)
{
    static const uint64_t starts[] = {
        0, 1, 255, 256, 65535, (UINT64_C(1) << 40) - 1, UINT64_C(0x123456789abc),
    };
    static const uint64_t offsets[] = {
        1, 2, 255, 256, 257, 65535, 65536, 65537,
        (UINT64_C(1) << 24) - 1, UINT64_C(1) << 24, (UINT64_C(1) << 24) + 1,
        UINT64_C(1) << 32, (UINT64_C(1) << 32) + 1, UINT64_C(1) << 40,
        UINT64_C(1) << 48, UINT64_C(1) << 56, UINT64_C(1) << 63,
    };
    static const uint64_t absolute[] = {
        256, 65536, UINT64_C(1) << 24, UINT64_C(1) << 32, UINT64_C(1) << 40,
        UINT64_C(1) << 48, UINT64_C(1) << 56, UINT64_MAX - 1,
    };

    for (size_t s = 0; s < sizeof(starts) / sizeof(starts[0]); s++) {
        uint64_t dues[64];
        size_t nd = 0;
        for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++)
            dues[nd++] = starts[s] + offsets[o];
        for (size_t a = 0; a < sizeof(absolute) / sizeof(absolute[0]); a++)
            if (absolute[a] > starts[s])
                dues[nd++] = absolute[a];

        for (size_t d = 0; d < nd; d++) {
            uint64_t due = dues[d];
            struct rec r;
            rec_init(&r, starts[s]);
            pool_handle h = new_item(1);
            wheel_add(r.w, h, due, 1);
            CHECK(wheel_count(r.w) == 1);

            /* Follow wheel_next_event() as the daemon would: never past due,
             * and one step per level at most. */
            int steps = 0;
            while (r.n == 0 && steps < 100) {
                uint64_t t = wheel_next_event(r.w);
                CHECK(t > wheel_now(r.w) && t <= due);
                if (t > due)
                    break;
                if (t == due) {
                    advance(&r, t - 1);
                    CHECK(r.n == 0);
                }
                advance(&r, t);
                steps++;
            }
            CHECK(r.n == 1 && r.fired[0] == h && r.fired_now[0] == due);
            CHECK(steps <= 9);
            CHECK(wheel_count(r.w) == 0 && wheel_next_event(r.w) == UINT64_MAX);
            pool_release(&pool, h);

            /* The same with one direct jump to due - 1, then due. */
            h = new_item(2);
            struct rec r2;
            rec_init(&r2, starts[s]);
            wheel_add(r2.w, h, due, 7);
            CHECK(advance(&r2, due - 1) == 0);
            CHECK(advance(&r2, due) == 1 && r2.fired[0] == h);
            pool_release(&pool, h);
            rec_done(&r2);
            rec_done(&r);
        }
    }
}

/* The firings so far are exactly want[0..n-1], in that order. */
#define check_order(r, want, n, what) check_order_at(__LINE__, r, want, n, what)
static void check_order_at(int line, struct rec *r, const pool_handle *want, size_t n,
                           const char *what)
{
    int ok = r->n == n;
    for (size_t i = 0; ok && i < n; i++)
        ok = r->fired[i] == want[i];
    if (!ok) {
        fprintf(stderr, "order wrong in %s: got", what);
        for (size_t i = 0; i < r->n; i++)
            fprintf(stderr, " %u", item(r->fired[i])->tag);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %u", item(want[i])->tag);
        fprintf(stderr, "\n");
        check_failed(__FILE__, line, "firing order", "%s", what);
    }
}

/* Equal due times fire in ascending seq whatever path the entries took. */
static void test_equal_due(void)
{
    const uint64_t D = 100000; /* level 2 from 0, level 0 from 99990 */

    /* Far entry has the smaller seq: added at now 0, the near one later. */
    {
        struct rec r;
        rec_init(&r, 0);
        pool_handle far = new_item(1), near = new_item(2);
        wheel_add(r.w, far, D, 1);
        advance(&r, D - 10);
        wheel_add(r.w, near, D, 2);
        advance(&r, D);
        pool_handle want[] = {far, near};
        check_order(&r, want, 2, "far seq1, near seq2");
        rec_done(&r);
    }
    /* Near entry has the smaller seq; the far one cascades down after it. */
    {
        struct rec r;
        rec_init(&r, 0);
        pool_handle far = new_item(1), near = new_item(2);
        wheel_add(r.w, far, D, 2);
        advance(&r, D - 10);
        wheel_add(r.w, near, D, 1);
        advance(&r, D);
        pool_handle want[] = {near, far};
        check_order(&r, want, 2, "far seq2, near seq1");
        rec_done(&r);
    }
    /* Near entry first, then a far-level one added later at the same due:
     * now just below a 256 boundary, due just above it is level 1. */
    {
        struct rec r;
        rec_init(&r, 250);
        pool_handle a = new_item(1), b = new_item(2), c = new_item(3);
        wheel_add(r.w, a, 258, 3); /* level 1 */
        advance(&r, 256);          /* a cascades to level 0 */
        wheel_add(r.w, b, 258, 1); /* level 0, appended after a */
        wheel_add(r.w, c, 258, 2);
        advance(&r, 300);
        pool_handle want[] = {b, c, a};
        check_order(&r, want, 3, "boundary crossing");
        rec_done(&r);
    }
    /* Many entries, added from several distances with shuffled seqs. */
    {
        enum { N = 1000 };
        struct rec r;
        rec_init(&r, 0);
        pool_handle h[N];
        uint64_t seq[N];
        for (int i = 0; i < N; i++)
            seq[i] = (uint64_t)i * 3 + 5;
        for (int i = N - 1; i > 0; i--) {
            int j = (int)(rnd() % (uint64_t)(i + 1));
            uint64_t t = seq[i];
            seq[i] = seq[j];
            seq[j] = t;
        }
        static const uint64_t from[] = {0, 1000, 70000, 99000, 99990, 99999};
        for (int i = 0; i < N; i++) {
            uint64_t at = from[i * 6 / N];
            if (at > wheel_now(r.w))
                advance(&r, at);
            h[i] = new_item((uint32_t)seq[i]);
            wheel_add(r.w, h[i], D, seq[i]);
        }
        CHECK(r.n == 0);
        advance(&r, D + 5);
        CHECK(r.n == N);
        for (size_t i = 1; i < r.n; i++)
            CHECK(item(r.fired[i - 1])->node.seq < item(r.fired[i])->node.seq);
        rec_done(&r);
    }
    /* seq = insertion counter: plain FIFO. */
    {
        struct rec r;
        rec_init(&r, 0);
        pool_handle want[300];
        for (int i = 0; i < 300; i++) {
            if (i == 100)
                advance(&r, D - 300);
            if (i == 200)
                advance(&r, D - 3);
            want[i] = new_item((uint32_t)i);
            wheel_add(r.w, want[i], D, (uint64_t)i);
        }
        advance(&r, UINT64_MAX);
        check_order(&r, want, 300, "insertion order");
        rec_done(&r);
    }
}

/* Entries added with due <= now: next advance, first, in add order. */
static void test_already_due(void)
{
    struct rec r;
    rec_init(&r, 1000);
    pool_handle e1 = new_item(1), e2 = new_item(2), e3 = new_item(3), e4 = new_item(4);
    pool_handle e5 = new_item(5), e6 = new_item(6);

    wheel_add(r.w, e4, 1001, 10);
    wheel_add(r.w, e1, 500, 50);
    wheel_add(r.w, e2, 1000, 40);
    wheel_add(r.w, e3, 0, 30);
    CHECK(wheel_next_event(r.w) == 1000);
    CHECK(advance(&r, 999) == 0); /* backwards: nothing, clock unchanged */
    CHECK(wheel_now(r.w) == 1000 && wheel_count(r.w) == 4);
    CHECK(advance(&r, 1000) == 3);
    pool_handle want1[] = {e1, e2, e3};
    check_order(&r, want1, 3, "already due");
    CHECK(wheel_next_event(r.w) == 1001);

    wheel_add(r.w, e5, 1001, 1);
    wheel_add(r.w, e6, 900, 99); /* added last, fires first */
    CHECK(wheel_next_event(r.w) == 1000);
    advance(&r, 5000);
    pool_handle want2[] = {e1, e2, e3, e6, e5, e4};
    check_order(&r, want2, 6, "already due before due later");
    rec_done(&r);
}

/* Delete entries from everywhere they can be. */
static void test_del(void)
{
    enum { N = 64 };
    struct rec r;
    rec_init(&r, 5000);
    pool_handle h[N];
    uint64_t due[N];
    for (int i = 0; i < N; i++) {
        switch (i % 8) {
        case 0: due[i] = 4000 + (uint64_t)i; break;            /* already due */
        case 1: due[i] = 5010; break;                          /* level 0, shared slot */
        case 2: due[i] = 5000 + 300 + (uint64_t)i; break;      /* level 1 */
        case 3: due[i] = 5000 + 100000; break;                 /* level 2, shared */
        case 4: due[i] = UINT64_C(1) << 33; break;             /* level 4 */
        case 5: due[i] = (UINT64_C(1) << 50) + (uint64_t)i; break; /* level 6 */
        case 6: due[i] = UINT64_MAX - 1; break;                /* level 7 */
        default: due[i] = 5000 + (rnd() % (UINT64_C(1) << 30)); break;
        }
        h[i] = new_item((uint32_t)i);
        wheel_add(r.w, h[i], due[i], (uint64_t)i);
    }
    /* Delete heads, middles and tails of shared lists, and every level. */
    int deleted[N] = {0};
    size_t left = N;
    for (int i = 0; i < N; i++) {
        if (i % 3 == 0 || i == 9 || i == 57) {
            wheel_del(r.w, h[i]);
            deleted[i] = 1;
            left--;
            CHECK(wheel_count(r.w) == left);
        }
    }
    /* Advance part way (cascading level 2), delete cascaded entries. */
    const uint64_t mid = 5000 + 65536 + 1;
    advance(&r, mid);
    size_t fired_early = r.n;
    for (size_t k = 0; k < r.n; k++) {
        uint32_t i = item(r.fired[k])->tag;
        CHECK(!deleted[i] && due[i] <= mid);
        deleted[i] = 2; /* fired */
    }
    for (int i = 0; i < N; i++) {
        CHECK(deleted[i] || due[i] > mid); /* nothing due left behind */
        if (!deleted[i] && (i % 8 == 3 || i % 8 == 7) && i % 5 < 2) {
            wheel_del(r.w, h[i]);
            deleted[i] = 1;
        }
    }
    advance(&r, UINT64_MAX);
    for (size_t k = fired_early; k < r.n; k++) {
        uint32_t i = item(r.fired[k])->tag;
        CHECK(!deleted[i]);
        deleted[i] = 2;
    }
    for (int i = 0; i < N; i++)
        CHECK(deleted[i] != 0);
    CHECK(fired_early > 0 && wheel_count(r.w) == 0);
    CHECK(wheel_next_event(r.w) == UINT64_MAX);
    rec_done(&r);

    /* Delete everything: bitmaps must be clean again. */
    rec_init(&r, 0);
    for (int i = 0; i < N; i++)
        wheel_add(r.w, h[i], 1 + (due[i] & ((UINT64_C(1) << 50) - 1)), 0);
    for (int i = N - 1; i >= 0; i--)
        wheel_del(r.w, h[i]);
    CHECK(wheel_count(r.w) == 0 && wheel_next_event(r.w) == UINT64_MAX);
    CHECK(advance(&r, UINT64_MAX) == 0);
    rec_done(&r);
}

/* Callback re-adds itself (periodic), adds already-due entries, deletes. */
static pool_handle hook_victims[8];

static void hook_periodic(struct rec *r, pool_handle h)
{
    if (item(h)->tag == 100 && wheel_now(r->w) < 200)
        wheel_add(r->w, h, wheel_now(r->w) + 10, wheel_now(r->w));
}

static void hook_again(struct rec *r, pool_handle h)
{
    /* Fires 3 times per advance: re-added with due <= now. */
    if (item(h)->tag == 200 && item(h)->node.seq < 2)
        wheel_add(r->w, h, wheel_now(r->w) - 5, item(h)->node.seq + 1);
}

static void hook_delete(struct rec *r, pool_handle h)
{
    if (item(h)->tag == 300) {
        wheel_del(r->w, hook_victims[0]); /* same batch, next in line */
        wheel_del(r->w, hook_victims[1]); /* later slot */
        wheel_del(r->w, hook_victims[2]); /* another level */
        wheel_add(r->w, hook_victims[3], wheel_now(r->w) + 1, 0); /* fires in this call */
        wheel_add(r->w, hook_victims[4], wheel_now(r->w), 0);     /* after this batch */
    }
    if (item(h)->tag == 310)
        wheel_del(r->w, hook_victims[5]); /* next on the already-due list */
}

static void test_callbacks(void)
{
    struct rec r;

    rec_init(&r, 0);
    r.hook = hook_periodic;
    pool_handle p = new_item(100);
    wheel_add(r.w, p, 10, 0);
    advance(&r, 105);
    CHECK(r.n == 10);
    for (size_t i = 0; i < r.n; i++)
        CHECK(r.fired[i] == p && r.fired_now[i] == 10 * (i + 1));
    CHECK(wheel_count(r.w) == 1 && wheel_next_event(r.w) == 110);
    advance(&r, 1000);
    CHECK(r.n == 20 && wheel_count(r.w) == 0);
    rec_done(&r);

    rec_init(&r, 50);
    r.hook = hook_again;
    pool_handle a = new_item(200), b = new_item(201), c = new_item(202);
    wheel_add(r.w, a, 60, 0);
    wheel_add(r.w, b, 60, 5);
    wheel_add(r.w, c, 61, 0);
    advance(&r, 70);
    pool_handle want[] = {a, b, a, a, c};
    check_order(&r, want, 5, "re-added with due <= now");
    rec_done(&r);

    rec_init(&r, 1000);
    r.hook = hook_delete;
    pool_handle t = new_item(300);
    for (int i = 0; i < 6; i++)
        hook_victims[i] = new_item(301 + (uint32_t)i);
    pool_handle x = new_item(400), y = new_item(401), p1 = new_item(310);
    wheel_add(r.w, x, 900, 0);                 /* already due */
    wheel_add(r.w, p1, 950, 0);                /* already due, deletes victim 5 */
    wheel_add(r.w, hook_victims[5], 999, 0);   /* already due, deleted */
    wheel_add(r.w, t, 1500, 1);
    wheel_add(r.w, hook_victims[0], 1500, 2);  /* same batch as t, deleted */
    wheel_add(r.w, y, 1500, 3);
    wheel_add(r.w, hook_victims[1], 1700, 0);  /* later slot, deleted */
    wheel_add(r.w, hook_victims[2], 1000 + 70000, 0); /* level 2, deleted */
    advance(&r, 1000);
    pool_handle want0[] = {x, p1};
    check_order(&r, want0, 2, "callback deletes next already-due entry");
    advance(&r, 100000);
    pool_handle want3[] = {x, p1, t, y, hook_victims[4], hook_victims[3]};
    check_order(&r, want3, 6, "callback deletes and adds");
    CHECK(wheel_count(r.w) == 0);
    rec_done(&r);
}

static void count_fire(void *arg, pool_handle h)
{
    (*(size_t *)arg)++;
}

/* A jump of years costs one step per occupied slot, not per millisecond. */
static void test_clock_jump(void)
{
    const uint64_t year = UINT64_C(31557600000);
    struct rec r;
    rec_init(&r, 1700000000000ull);

    enum { N = 2000 };
    uint64_t start = wheel_now(r.w);
    for (int i = 0; i < N; i++) {
        pool_handle h = new_item((uint32_t)i);
        uint64_t due = start + 1 + rnd() % (10 * year);
        wheel_add(r.w, h, due, rnd());
    }
    clock_t c0 = clock();
    advance(&r, start + 10 * year);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    CHECK(r.n == N && wheel_count(r.w) == 0);
    for (size_t i = 1; i < r.n; i++) {
        struct wheel_node *a = &item(r.fired[i - 1])->node, *b = &item(r.fired[i])->node;
        CHECK(a->due < b->due || (a->due == b->due && a->seq < b->seq));
    }
    CHECK(secs < 2.0); /* generous: it takes microseconds */

    /* Follow next_event: one entry ten years away is a handful of steps. */
    pool_handle h = r.fired[0];
    wheel_add(r.w, h, wheel_now(r.w) + 10 * year + 12345, 0);
    size_t fired = 0;
    int steps = 0;
    while (fired == 0 && steps < 1000) {
        wheel_advance(r.w, wheel_next_event(r.w), count_fire, &fired);
        steps++;
    }
    CHECK(fired == 1 && steps <= 8);

    /* N entries, followed event by event: at most levels+1 steps each. */
    for (int i = 0; i < N; i++)
        wheel_add(r.w, r.fired[i], wheel_now(r.w) + 1 + rnd() % (30 * year), (uint64_t)i);
    fired = 0;
    steps = 0;
    while (wheel_count(r.w) > 0 && steps < 100 * N) {
        wheel_advance(r.w, wheel_next_event(r.w), count_fire, &fired);
        steps++;
    }
    CHECK(fired == N && steps <= 9 * N);
    printf("  clock jump: %d entries over 30 years in %d steps\n", N, steps);
    rec_done(&r);
}

/* ---- Randomised test against the reference model ------------------------ */

enum { WHERE_NONE, WHERE_HEAP, WHERE_FIFO };

struct model {
    uint64_t now;
    uint64_t target;             /* of the advance in progress */
    pool_handle *heap;           /* by (due, seq) */
    size_t heap_n, heap_cap;
    pool_handle fifo_head, fifo_tail;
    /* per handle, grown on demand */
    size_t cap;
    uint8_t *where;
    uint32_t *pos;               /* heap position */
    pool_handle *fnext, *fprev;  /* FIFO links */
    uint32_t *live_idx;          /* position in live[] */
    pool_handle *live;           /* every handle in the wheel */
    size_t live_n;
};

static struct model M;
static struct wheel *W;

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n);
    if (p == NULL) {
        fprintf(stderr, "test_wheel: out of memory\n");
        abort();
    }
    return p;
}

static void model_reserve(pool_handle h)
{
    if (h < M.cap)
        return;
    size_t cap = M.cap ? M.cap : 1024;
    while (cap <= h)
        cap *= 2;
    M.where = xrealloc(M.where, cap);
    memset(M.where + M.cap, 0, cap - M.cap);
    M.pos = xrealloc(M.pos, cap * sizeof(*M.pos));
    M.fnext = xrealloc(M.fnext, cap * sizeof(*M.fnext));
    M.fprev = xrealloc(M.fprev, cap * sizeof(*M.fprev));
    M.live_idx = xrealloc(M.live_idx, cap * sizeof(*M.live_idx));
    M.live = xrealloc(M.live, cap * sizeof(*M.live));
    M.heap = xrealloc(M.heap, cap * sizeof(*M.heap));
    M.cap = cap;
}

static int heap_less(pool_handle a, pool_handle b)
{
    struct wheel_node *x = &item(a)->node, *y = &item(b)->node;
    return x->due < y->due || (x->due == y->due && x->seq < y->seq);
}

static void heap_set(size_t i, pool_handle h)
{
    M.heap[i] = h;
    M.pos[h] = (uint32_t)i;
}

static void heap_up(size_t i)
{
    pool_handle h = M.heap[i];
    while (i > 0 && heap_less(h, M.heap[(i - 1) / 2])) {
        heap_set(i, M.heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    heap_set(i, h);
}

static void heap_down(size_t i)
{
    pool_handle h = M.heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= M.heap_n)
            break;
        if (c + 1 < M.heap_n && heap_less(M.heap[c + 1], M.heap[c]))
            c++;
        if (!heap_less(M.heap[c], h))
            break;
        heap_set(i, M.heap[c]);
        i = c;
    }
    heap_set(i, h);
}

static void heap_remove(pool_handle h)
{
    size_t i = M.pos[h];
    pool_handle last = M.heap[--M.heap_n];
    if (i < M.heap_n) {
        heap_set(i, last);
        heap_down(i);
        heap_up(M.pos[last]);
    }
}

static void fifo_append(pool_handle h)
{
    M.fnext[h] = POOL_NIL;
    M.fprev[h] = M.fifo_tail;
    if (M.fifo_tail)
        M.fnext[M.fifo_tail] = h;
    else
        M.fifo_head = h;
    M.fifo_tail = h;
}

static void fifo_remove(pool_handle h)
{
    if (M.fprev[h])
        M.fnext[M.fprev[h]] = M.fnext[h];
    else
        M.fifo_head = M.fnext[h];
    if (M.fnext[h])
        M.fprev[M.fnext[h]] = M.fprev[h];
    else
        M.fifo_tail = M.fprev[h];
}

static void live_remove(pool_handle h)
{
    uint32_t i = M.live_idx[h];
    pool_handle last = M.live[--M.live_n];
    M.live[i] = last;
    M.live_idx[last] = i;
}

static void model_add(pool_handle h, uint64_t due, uint64_t seq)
{
    model_reserve(h);
    wheel_add(W, h, due, seq);
    if (due <= M.now) {
        M.where[h] = WHERE_FIFO;
        fifo_append(h);
    } else {
        M.where[h] = WHERE_HEAP;
        M.heap[M.heap_n] = h;
        M.pos[h] = (uint32_t)M.heap_n++;
        heap_up(M.heap_n - 1);
    }
    M.live_idx[h] = (uint32_t)M.live_n;
    M.live[M.live_n++] = h;
}

static void model_unlink(pool_handle h)
{
    if (M.where[h] == WHERE_FIFO)
        fifo_remove(h);
    else if (M.where[h] == WHERE_HEAP)
        heap_remove(h);
    else
        CHECK(!"unlink of an entry not in the model");
    M.where[h] = WHERE_NONE;
    live_remove(h);
}

static void model_del(pool_handle h)
{
    wheel_del(W, h);
    model_unlink(h);
}

/* The entry the contract says fires next in an advance to M.target. */
static pool_handle model_next(void)
{
    if (M.fifo_head == POOL_NIL && M.heap_n > 0 &&
        item(M.heap[0])->node.due <= M.target) {
        M.now = item(M.heap[0])->node.due;
        while (M.heap_n > 0 && item(M.heap[0])->node.due == M.now) {
            pool_handle h = M.heap[0];
            heap_remove(h);
            M.where[h] = WHERE_FIFO;
            fifo_append(h);
        }
    }
    return M.fifo_head;
}

static uint64_t seq_counter;
static uint64_t seq_salt;
static uint64_t recent_due[16];
static uint64_t round_limit; /* dues and the clock stay below */

static uint64_t pick_seq(void)
{
    seq_counter++;
    if (rnd() & 1)
        return seq_counter; /* insertion order, as the daemon does */
    /* A bijective scramble: unique but in no particular order. */
    return tk_mix(seq_counter + seq_salt);
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a || a + b > round_limit ? round_limit : a + b;
}

/* A due time relative to now: mostly near, some far, some at boundaries. */
static uint64_t pick_due(uint64_t now)
{
    unsigned r = (unsigned)(rnd() % 100);
    uint64_t due;
    if (r < 25)
        due = sat_add(now, rnd() % 256);
    else if (r < 42)
        due = sat_add(now, rnd() % 70000);
    else if (r < 52)
        due = sat_add(now, rnd() % (UINT64_C(1) << 24));
    else if (r < 58)
        due = sat_add(now, rnd() % (UINT64_C(1) << 34));
    else if (r < 62)
        due = sat_add(now, rnd() % (UINT64_C(1) << 44));
    else if (r < 64) {
        unsigned shift = (unsigned)(rnd() % 64);
        due = sat_add(now, rnd() >> shift);
    } else if (r < 74) {
        uint64_t back = rnd() % 1000;
        due = back > now ? 0 : now - back; /* already due */
    } else if (r < 88) {
        unsigned bits = 8 * (1 + (unsigned)(rnd() % 5));
        uint64_t unit = UINT64_C(1) << bits;
        uint64_t b = (now | (unit - 1)) + 1; /* next multiple of 2^bits */
        due = b == 0 ? round_limit : sat_add(b, rnd() % 3);
        if (due > 0 && rnd() % 3 == 0)
            due--;
    } else {
        due = recent_due[rnd() % 16]; /* equal due times */
        if (due <= now)
            due = sat_add(now, rnd() % 4);
    }
    recent_due[rnd() % 16] = due;
    return due;
}

static long stat_fired, stat_cb_ops;

static void model_fire(void *arg, pool_handle h)
{
    pool_handle want = model_next();
    if (h != want) {
        fprintf(stderr, "fired %u (due %" PRIu64 " seq %" PRIu64 ") but model says %u",
                h, item(h)->node.due, item(h)->node.seq, want);
        if (want)
            fprintf(stderr, " (due %" PRIu64 " seq %" PRIu64 ")", item(want)->node.due,
                    item(want)->node.seq);
        fprintf(stderr, ", target %" PRIu64 "\n", M.target);
        CHECK(h == want);
        if (want == POOL_NIL || M.where[h] == WHERE_NONE)
            exit(1); /* the model cannot follow */
    }
    CHECK(item(h)->node.due <= M.target);
    CHECK(item(h)->node.due <= wheel_now(W));
    CHECK(wheel_now(W) == M.now);
    model_unlink(h);
    stat_fired++;

    /* Sometimes mutate from inside the callback. */
    unsigned r = (unsigned)(rnd() % 100);
    if (r < 4) {
        uint64_t due = pick_due(wheel_now(W));
        model_add(h, due, pick_seq()); /* re-add itself */
        stat_cb_ops++;
        return;
    }
    if (r < 8 && M.live_n > 0) {
        pool_handle v = M.live[rnd() % M.live_n]; /* may be in this batch */
        model_del(v);
        pool_release(&pool, v);
        stat_cb_ops++;
    } else if (r >= 8 && r < 11) {
        uint64_t due = pick_due(wheel_now(W));
        model_add(pool_alloc(&pool), due, pick_seq());
        stat_cb_ops++;
    }
    pool_release(&pool, h);
}

static void model_check_idle(void)
{
    CHECK(wheel_count(W) == M.live_n);
    CHECK(wheel_now(W) == M.now);
    uint64_t ne = wheel_next_event(W);
    if (M.fifo_head != POOL_NIL)
        CHECK(ne == M.now);
    else if (M.heap_n == 0)
        CHECK(ne == UINT64_MAX);
    else
        CHECK(ne > M.now && ne <= item(M.heap[0])->node.due);
}

static void model_advance(uint64_t target)
{
    M.target = target;
    size_t before = (size_t)stat_fired;
    size_t n = wheel_advance(W, target, model_fire, NULL);
    if (target >= M.now) {
        CHECK(model_next() == POOL_NIL); /* nothing due was left behind */
        M.now = target;
        CHECK(n == (size_t)stat_fired - before);
    } else {
        CHECK(n == 0);
    }
}

static void random_round(uint64_t start, uint64_t limit, long ops)
{
    M.heap_n = 0;
    M.fifo_head = M.fifo_tail = POOL_NIL;
    M.live_n = 0;
    M.now = start;
    round_limit = limit;
    for (int i = 0; i < 16; i++)
        recent_due[i] = start + rnd() % 100000;
    W = new_wheel(start);
    size_t max_live = 0;

    for (long op = 0; op < ops; op++) {
        /* Three quiet phases (the clock creeps, entries pile up: thousands
         * live, many per slot), then a wild one (jumps of years). */
        int wild = (op / 25000) % 4 == 3;
        unsigned r = (unsigned)(rnd() % 100);
        uint64_t now = M.now;
        if (r < (wild ? 40u : 46u)) {
            uint64_t due = pick_due(now);
            model_add(pool_alloc(&pool), due, pick_seq());
        } else if (r < 54) {
            if (M.live_n > 0) {
                pool_handle h = M.live[rnd() % M.live_n];
                model_del(h);
                pool_release(&pool, h);
            }
        } else if (r < 76) {
            model_advance(sat_add(now, rnd() % 8));
        } else if (r < 86) {
            model_advance(sat_add(now, rnd() % 300));
        } else if (r < 92) {
            /* As the daemon does; capped at a few years so that a round
             * does not run its clock to the end of time. */
            uint64_t ne = wheel_next_event(W);
            model_advance(ne < sat_add(now, UINT64_C(1) << 36) ? ne : sat_add(now, 1));
        } else if (r < 96 || !wild) {
            if (M.heap_n > 0) {
                uint64_t due = item(M.heap[0])->node.due;
                if (due - now > (UINT64_C(1) << 36))
                    due = sat_add(now, 2);
                model_advance(rnd() & 1 ? due : due - 1); /* due - 1: nothing early */
            }
        } else if (r < 98) {
            model_advance(sat_add(now, rnd() % (UINT64_C(1) << 20)));
        } else if (r < 99) {
            model_advance(sat_add(now, rnd() % (UINT64_C(1) << 36))); /* years */
        } else if (rnd() % 4 == 0) {
            unsigned shift = 16 + (unsigned)(rnd() % 48);
            model_advance(sat_add(now, rnd() >> shift)); /* up to 2^48 */
        } else if (now >= 2) {
            model_advance(now - (rnd() % 3)); /* backwards or still */
        }
        model_check_idle();
        if (M.live_n > max_live)
            max_live = M.live_n;
    }
    uint64_t end = M.now;
    /* Drain: everything fires, in order. */
    model_advance(limit);
    CHECK(M.live_n == 0 || limit < UINT64_MAX);
    while (M.live_n > 0) {
        pool_handle h = M.live[M.live_n - 1];
        model_del(h);
        pool_release(&pool, h);
    }
    model_check_idle();
    wheel_free(W);
    printf("  round from %" PRIu64 " to %" PRIu64 ": %ld ops, max live %zu\n", start, end,
           ops, max_live);
}

static uint64_t test_seed; /* TEST_SEED */
static long test_ops;     /* TEST_OPS */

static void test_random(void)
{
    seq_salt = test_seed;
    uint32_t used = pool.used;
    long per = test_ops / 6;
    random_round(0, UINT64_MAX - 1, per);
    random_round(rnd() % (UINT64_C(1) << 40), UINT64_MAX - 1, per);
    random_round(UINT64_C(1700000000000), UINT64_MAX - 1, per);
    random_round((UINT64_C(1) << 56) - 100000, UINT64_MAX - 1, per);
    random_round(UINT64_MAX - (UINT64_C(1) << 41), UINT64_MAX - 1, per);
    random_round(UINT64_C(0xFFFFFFFFFF00) - 5000, UINT64_MAX - 1, test_ops - 5 * per);
    printf("  random: %ld ops, %ld firings, %ld callback mutations\n", test_ops, stat_fired,
           stat_cb_ops);
    CHECK(pool.used == used); /* the model released every item it took */
}

/* Every case: a fresh pool and the generator restarted from the seed. */
static void run_case(void (*fn)(void))
{
    static int printed;
    if (!printed) {
        test_seed = tk_env_u64("test_wheel", "TEST_SEED", 0x5eed2024);
        test_ops = (long)tk_env_u64("test_wheel", "TEST_OPS", 12000000);
        test_split = (uint32_t)tk_env_u64("test_wheel", "TEST_SPLIT", 0);
        printf("test_wheel: TEST_SEED=%" PRIu64 " TEST_OPS=%ld TEST_SPLIT=%u\n", test_seed,
               test_ops, test_split);
        fflush(stdout);
        printed = 1;
    }
    rng_state = test_seed;
    pool_init(&pool, sizeof(struct item));
    fn();
    pool_destroy(&pool);
}

/*
 * wheel_min_due against a brute-force minimum, as entries are added at
 * every distance, fired and deleted; a small budget gives a lower bound
 * that is never after the true minimum.
 */
static void test_min_due(void)
{
    enum { N = 3000 };
    static pool_handle hs[N];
    static int in[N];
    uint64_t now = 1700000000000ull;
    struct wheel *w = new_wheel(now);
    int exact, i, round;

    CHECK(wheel_min_due(w, 100, &exact) == UINT64_MAX && exact);
    for (i = 0; i < N; i++) {
        uint64_t dist = rnd() % 5 == 0 ? rnd() % 300 : rnd() % (1ull << (rnd() % 40));
        hs[i] = new_item((uint32_t)i);
        wheel_add(w, hs[i], now + 1 + dist, (uint64_t)i);
        in[i] = 1;
    }
    for (round = 0; round < 200; round++) {
        uint64_t want = UINT64_MAX, got, bound;
        for (i = 0; i < N; i++)
            if (in[i] && item(hs[i])->node.due < want)
                want = item(hs[i])->node.due;
        got = wheel_min_due(w, N, &exact);
        CHECK(exact && got == want, "round %d: got %llu want %llu", round,
              (unsigned long long)got, (unsigned long long)want);
        bound = wheel_min_due(w, 1, &exact);
        CHECK(bound <= want, "lower bound %llu after the minimum %llu", (unsigned long long)bound,
              (unsigned long long)want);
        /* delete a few at random, fire up to the minimum, add a few back */
        for (i = 0; i < 10; i++) {
            int k = (int)(rnd() % N);
            if (in[k] && item(hs[k])->node.due > wheel_now(w)) {
                wheel_del(w, hs[k]);
                in[k] = 0;
            }
        }
        if (want != UINT64_MAX) {
            size_t fired = 0;
            wheel_advance(w, want, count_fire, &fired);
            CHECK(fired >= 1);
            for (i = 0; i < N; i++)
                if (in[i] && item(hs[i])->node.due <= want)
                    in[i] = 0;
        }
        for (i = 0; i < N; i++)
            if (!in[i] && rnd() % 50 == 0) {
                wheel_add(w, hs[i], wheel_now(w) + 1 + rnd() % (1ull << (rnd() % 36)), (uint64_t)i);
                in[i] = 1;
            }
    }
    wheel_free(w);
}

/* wheel_walk: every entry after the cursor, in (due, seq) order, from any cursor. */
static int walk_collect(void *arg, pool_handle h)
{
    struct { pool_handle v[4096]; size_t n, stop_at; } *c = arg;

    c->v[c->n++] = h;
    return c->n == c->stop_at;
}

static int walk_in[8192]; /* by handle: in the wheel */

static void walk_fired(void *arg, pool_handle h)
{
    walk_in[h] = 0;
}

static void test_walk(void)
{
    enum { N = 2000 };
    static pool_handle hs[N];
    struct { pool_handle v[4096]; size_t n, stop_at; } c;
    uint64_t now = 1700000000000ull;
    struct wheel *w = new_wheel(now);
    size_t i;

    memset(walk_in, 0, sizeof(walk_in));
    for (i = 0; i < N; i++) {
        uint64_t dist = rnd() % 4 == 0 ? rnd() % 50 : rnd() % (1ull << (rnd() % 42));
        hs[i] = new_item((uint32_t)i);
        wheel_add(w, hs[i], now + dist, (uint64_t)(rnd() % 100000));
        walk_in[hs[i]] = 1;
    }
    wheel_advance(w, now + 20, walk_fired, NULL);
    for (i = 0; i < 30; i++) { /* already due: on the pending list */
        pool_handle h = new_item(9999);
        wheel_add(w, h, now + (rnd() % 20), 200000 + i);
        walk_in[h] = 1;
    }
    for (int round = 0; round < 50; round++) {
        uint64_t after_due = 0, after_seq = 0;
        if (round) {
            struct item *pick = item(hs[rnd() % N]);
            after_due = pick->node.due;
            after_seq = pick->node.seq;
        }
        memset(&c, 0, sizeof(c));
        c.stop_at = round % 2 ? 37 : SIZE_MAX;
        size_t budget = SIZE_MAX;
        uint64_t sd, ss;
        CHECK(wheel_walk(w, after_due, after_seq, NULL, walk_collect, &c, &budget, &sd, &ss) == 0);
        uint64_t pd = after_due, ps = after_seq;
        for (i = 0; i < c.n; i++) {
            struct item *it = item(c.v[i]);
            CHECK(walk_in[c.v[i]], "round %d: a fired entry was visited", round);
            CHECK(it->node.due > pd || (it->node.due == pd && it->node.seq > ps),
                  "round %d: entry %zu out of order", round, i);
            pd = it->node.due;
            ps = it->node.seq;
        }
        size_t want = 0;
        for (i = 1; i < pool.next_fresh; i++) {
            struct item *it = item((pool_handle)i);
            if (walk_in[i] &&
                (it->node.due > after_due || (it->node.due == after_due && it->node.seq > after_seq)))
                want++;
        }
        if (round % 2 == 0)
            CHECK(c.n == want, "round %d: visited %zu of %zu", round, c.n, want);
        else
            CHECK(c.n == (want < 37 ? want : 37), "round %d: stopped at %zu", round, c.n);
    }
    wheel_free(w);
}

/*
 * wheel_walk's bound: paging through big slots -- one due time shared by a
 * run of entries, and one level-2 slot of spread ones -- looks at no more
 * than budget + split size entries per call, whatever the cursor, and the
 * pages together are every entry once, in (due, seq) order.
 */
struct bound_walk {
    pool_handle v[64];
    size_t n, looked;
    uint32_t mod; /* keep the entries whose tag is a multiple */
};

static int bound_keep(void *arg, pool_handle h)
{
    struct bound_walk *c = arg;
    c->looked++;
    return item(h)->tag % c->mod == 0;
}

static int bound_visit(void *arg, pool_handle h)
{
    struct bound_walk *c = arg;
    c->v[c->n++] = h;
    return c->n == 64;
}

static int by_key(const void *a, const void *b)
{
    const struct wheel_node *x = &item(*(const pool_handle *)a)->node;
    const struct wheel_node *y = &item(*(const pool_handle *)b)->node;
    if (x->due != y->due)
        return x->due < y->due ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

struct bound_fire {
    const pool_handle *order;
    size_t n, bad;
};

static void bound_fired(void *arg, pool_handle h)
{
    struct bound_fire *f = arg;
    f->bad += f->order[f->n++] != h;
}

static void test_walk_bound(void)
{
    enum { RUN = 30000, SPREAD = 30000, OTHER = 3000, N = RUN + SPREAD + OTHER, SPLIT = 256 };
    static pool_handle all[N], seen[N];
    const uint64_t now = 1700000000000ull, budget0 = 2000;
    struct wheel *w = wheel_new(&pool, now);
    uint64_t slot2 = (now | 0xffffu) + 1 + (UINT64_C(5) << 16); /* a later level-2 slot */
    size_t i, nseen = 0, calls = 0, most = 0;

    wheel_set_split(w, SPLIT);
    for (i = 0; i < N; i++) {
        uint64_t due = i < RUN ? now + 777777
                     : i < RUN + SPREAD ? slot2 + rnd() % 65536
                                        : now + 1 + rnd() % (UINT64_C(1) << 36);
        all[i] = new_item((uint32_t)i);
        /* seqs: unique, not in insertion order, sharing high digits */
        wheel_add(w, all[i], due, (UINT64_C(7) << 40) + (uint64_t)(i * 7919 % N) * 3);
    }
    for (i = 0; i < N / 10; i++) { /* deletions make holes and merges */
        size_t k = (size_t)(rnd() % N);
        if (item(all[k])->tag != UINT32_MAX) {
            wheel_del(w, all[k]);
            item(all[k])->tag = UINT32_MAX;
        }
    }
    size_t live = 0;
    for (i = 0; i < N; i++)
        if (item(all[i])->tag != UINT32_MAX)
            all[live++] = all[i];
    CHECK(wheel_count(w) == live);
    qsort(all, live, sizeof(all[0]), by_key);

    for (uint32_t mod = 1; mod <= 97; mod += 96) { /* every entry; then a few, so budgets run out */
        size_t want = 0, stops = 0;
        uint64_t ad = 0, as = 0;
        nseen = calls = most = 0;
        for (;;) {
            struct bound_walk c = {.n = 0, .looked = 0, .mod = mod};
            size_t budget = budget0;
            uint64_t sd = 0, ss = 0;
            int stopped = wheel_walk(w, ad, as, bound_keep, bound_visit, &c, &budget, &sd, &ss);
            calls++;
            CHECK(c.looked <= budget0 + SPLIT, "call %zu looked at %zu", calls, c.looked);
            if (c.looked > most)
                most = c.looked;
            for (i = 0; i < c.n && nseen < live; i++)
                seen[nseen++] = c.v[i];
            if (c.n == 64) {
                ad = item(c.v[63])->node.due;
                as = item(c.v[63])->node.seq;
            } else if (stopped) {
                CHECK(sd > ad || (sd == ad && ss > as), "call %zu: the cursor went back", calls);
                ad = sd;
                as = ss;
                stops++;
            } else {
                break;
            }
            CHECK(calls < 100000);
            if (calls >= 100000)
                break;
        }
        for (i = 0; i < live; i++)
            if (item(all[i])->tag % mod == 0) {
                CHECK(want < nseen && seen[want] == all[i], "mod %u: entry %zu out of place",
                      mod, want);
                want++;
            }
        CHECK(nseen == want, "mod %u: saw %zu of %zu", mod, nseen, want);
        CHECK(mod == 1 || stops > 0, "the budget never ran out");
        printf("  walk_bound: 1 in %u of %zu entries in %zu calls (%zu budget stops), at most "
               "%zu looked at per call\n", mod, live, calls, stops, most);
    }

    /* and they fire in the same order, the split trees given back */
    struct bound_fire f = {all, 0, 0};
    for (i = 0; i < live; i += 4000)
        wheel_advance(w, item(all[(i + 4000 < live ? i + 4000 : live) - 1])->node.due,
                      bound_fired, &f);
    CHECK(f.n == live && f.bad == 0, "fired %zu of %zu, %zu out of order", f.n, live, f.bad);
    /* same as a wheel that never split (below 32768 a slot), with the same due counters */
    struct wheel *w0 = wheel_new(&pool, now);
    for (i = 0; i < live; i++)
        wheel_add(w0, all[i], item(all[i])->node.due, item(all[i])->node.seq);
    f.n = 0;
    wheel_advance(w0, item(all[live - 1])->node.due, bound_fired, &f);
    CHECK(f.n == live && f.bad == 0);
    CHECK(wheel_count(w) == 0 && wheel_memory(w) == wheel_memory(w0), "%zu left, %zd bytes over",
          wheel_count(w), (ssize_t)(wheel_memory(w) - wheel_memory(w0)));
    wheel_free(w0);
    wheel_free(w);
}

#define CASE(name)                                                                         \
    static void case_##name(void)                                                          \
    {                                                                                      \
        run_case(test_##name);                                                             \
    }
CASE(boundaries)
CASE(equal_due)
CASE(already_due)
CASE(del)
CASE(callbacks)
CASE(clock_jump)
CASE(random)
CASE(min_due)
CASE(walk)
CASE(walk_bound)

static const struct check_case cases[] = {
    {"boundaries", case_boundaries},
    {"equal_due", case_equal_due},
    {"already_due", case_already_due},
    {"del", case_del},
    {"callbacks", case_callbacks},
    {"clock_jump", case_clock_jump},
    {"random", case_random},
    {"min_due", case_min_due},
    {"walk", case_walk},
    {"walk_bound", case_walk_bound},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
