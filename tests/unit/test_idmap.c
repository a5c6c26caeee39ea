/*
 * test_idmap.c -- idmap against a plain array over random put/get/del, with
 * keys that collide in their low bits, through growth and shrink.
 *
 * Usage: test_idmap [case...]       (--list names the cases)
 *
 * The random cases draw from a generator seeded with $TEST_SEED (default
 * 20240601, decimal or 0x hex); each case restarts it from the seed, so a
 * failing case reruns the same alone: TEST_SEED=n test_idmap random_dense.
 * The seed in use is printed before the first random case.
 */
#include "delay-bridge/idmap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testkit.h"

struct item {
    uint32_t tag;   /* universe index, to check the right item came back */
    uint32_t pad;
    uint64_t key;
};

static uint64_t rng_state;

static uint64_t rnd(void)
{
    return tk_rand(&rng_state);
}

/* Key of universe index i under key family f. */
static uint64_t make_key(int f, uint32_t i)
{
    switch (f) {
    case 0: return i;                                  /* dense */
    case 1: return (uint64_t)i << 32;                  /* low 32 bits all zero */
    case 2: return (uint64_t)i << 44 | 0xFFF;          /* same low 44 bits */
    case 3: return UINT64_MAX - i;                     /* top of range, incl. ~0 */
    default: return ((uint64_t)i * UINT64_C(0x9e3779b97f4a7c15)) ^ 0x5555; /* spread */
    }
}

static void check_load(const struct idmap *m)
{
    if (m->cap > 16) {
        /* Load factor within [1/4, 3/4]. */
        CHECK(m->count * 4 >= m->cap);
        CHECK(m->count * 4 <= m->cap * 3);
    }
    if (m->cap)
        CHECK((m->cap & (m->cap - 1)) == 0);
    CHECK(idmap_memory(m) == m->cap * sizeof(pool_handle));
}

/*
 * Random operations over a universe of U keys; ref[i] is the handle indexed
 * under key i or POOL_NIL. Phases of 3U operations bias towards put (to about
 * 85% of U live) or del (to about 20%), so the table grows and shrinks.
 */
static void run(int family, uint32_t U)
{
    rng_state = tk_seed("test_idmap", 20240601);
    long phase = 3L * U, ops = 6 * phase;
    struct pool pool;
    struct idmap m;
    pool_init(&pool, sizeof(struct item));
    idmap_init(&m, &pool, offsetof(struct item, key));

    pool_handle *ref = calloc(U, sizeof(*ref));
    if (ref == NULL)
        abort();
    size_t live = 0, max_cap = 0, grown_back = 0;
    unsigned put_at = 80; /* r in [30, put_at): put if absent; [put_at, 100): del */

    for (long op = 0; op < ops; op++) {
        if (op % phase == 0)
            put_at = (op / phase) % 2 ? 44 : 90; /* grow, drain, grow, ... */
        uint32_t i = (uint32_t)(rnd() % U);
        uint64_t key = make_key(family, i);
        unsigned r = (unsigned)(rnd() % 100);

        if (r < 30) {
            pool_handle h = idmap_get(&m, key);
            CHECK(h == ref[i]);
        } else if (ref[i] == POOL_NIL && r < put_at) {
            pool_handle h = pool_alloc(&pool);
            struct item *it = pool_at(&pool, h);
            it->tag = i;
            it->key = key;
            idmap_put(&m, h);
            ref[i] = h;
            live++;
        } else if (ref[i] != POOL_NIL && r >= put_at) {
            pool_handle h = idmap_del(&m, key);
            CHECK(h == ref[i]);
            CHECK(idmap_get(&m, key) == POOL_NIL);
            pool_release(&pool, h);
            ref[i] = POOL_NIL;
            live--;
        } else if (ref[i] == POOL_NIL) {
            CHECK(idmap_del(&m, key) == POOL_NIL);
        }
        CHECK(m.count == live);
        check_load(&m);
        if (m.cap > max_cap)
            max_cap = m.cap;
        else if (m.cap < max_cap)
            grown_back = 1;

        if (op % 100000 == 99999) {
            /* Full sweep: every key, present or not. */
            for (uint32_t j = 0; j < U; j++) {
                pool_handle h = idmap_get(&m, make_key(family, j));
                CHECK(h == ref[j]);
                if (h != POOL_NIL)
                    CHECK(((struct item *)pool_at(&pool, h))->tag == j);
            }
        }
    }
    CHECK(max_cap >= 2 * 16);
    printf("  family %d U %u: max cap %zu, shrank %zu\n", family, U, max_cap, grown_back);
    CHECK(grown_back); /* it did shrink at some point */

    /* Drain completely: the table shrinks back to its minimum. */
    for (uint32_t j = 0; j < U; j++) {
        if (ref[j] != POOL_NIL) {
            CHECK(idmap_del(&m, make_key(family, j)) == ref[j]);
            check_load(&m);
        }
    }
    CHECK(m.count == 0 && m.cap <= 16);

    idmap_destroy(&m);
    pool_destroy(&pool);
    free(ref);
}

static void test_reserve(void)
{
    struct pool pool;
    struct idmap m;
    pool_init(&pool, sizeof(struct item));
    idmap_init(&m, &pool, offsetof(struct item, key));
    CHECK(idmap_get(&m, 42) == POOL_NIL);
    CHECK(idmap_del(&m, 42) == POOL_NIL);
    CHECK(idmap_memory(&m) == 0);

    idmap_reserve(&m, 100000);
    size_t cap = m.cap;
    CHECK(cap * 3 / 4 >= 100000);
    for (uint32_t i = 0; i < 100000; i++) {
        pool_handle h = pool_alloc(&pool);
        struct item *it = pool_at(&pool, h);
        it->key = (uint64_t)i << 40;
        it->tag = i;
        idmap_put(&m, h);
    }
    CHECK(m.cap == cap); /* no resize during the bulk load */
    for (uint32_t i = 0; i < 100000; i++) {
        pool_handle h = idmap_get(&m, (uint64_t)i << 40);
        CHECK(h != POOL_NIL && ((struct item *)pool_at(&pool, h))->tag == i);
    }
    idmap_destroy(&m);
    pool_destroy(&pool);
}

/* Put/del churn right at the growth threshold must not rehash every time. */
static void test_no_thrash(void)
{
    struct pool pool;
    struct idmap m;
    pool_init(&pool, sizeof(struct item));
    idmap_init(&m, &pool, offsetof(struct item, key));
    uint64_t key = 0;
    while (m.count < 3 * 1024) { /* exactly 3/4 of 4096 */
        pool_handle h = pool_alloc(&pool);
        ((struct item *)pool_at(&pool, h))->key = key++;
        idmap_put(&m, h);
    }
    CHECK(m.cap == 4096);
    int resizes = 0;
    size_t cap = m.cap;
    for (int i = 0; i < 10000; i++) {
        pool_handle h = pool_alloc(&pool);
        ((struct item *)pool_at(&pool, h))->key = key;
        idmap_put(&m, h);
        resizes += m.cap != cap;
        cap = m.cap;
        CHECK(idmap_del(&m, key) == h);
        resizes += m.cap != cap;
        cap = m.cap;
        pool_release(&pool, h);
        key++;
    }
    CHECK(resizes <= 1);
    idmap_destroy(&m);
    pool_destroy(&pool);
}

static void test_random_dense(void)
{
    run(0, 50000);
}

static void test_random_low32_zero(void)
{
    run(1, 50000);
}

static void test_random_low44_same(void)
{
    run(2, 20000);
}

static void test_random_top(void)
{
    run(3, 5000);
}

static void test_random_spread(void)
{
    run(4, 100000);
}

static const struct check_case cases[] = {
    {"reserve", test_reserve},
    {"no_thrash", test_no_thrash},
    {"random_dense", test_random_dense},
    {"random_low32_zero", test_random_low32_zero},
    {"random_low44_same", test_random_low44_same},
    {"random_top", test_random_top},
    {"random_spread", test_random_spread},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
