/*
 * test_pool.c -- pool: handles, zero-filled items, reuse, stable pointers,
 * memory accounting.
 */
#include "delay-bridge/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

static void test_item_size(void)
{
    struct pool p;
    pool_init(&p, 1);
    CHECK(p.item_size == 4);
    pool_init(&p, 5);
    CHECK(p.item_size == 8);
    pool_init(&p, 40);
    CHECK(p.item_size == 40);
    CHECK(pool_memory(&p) == 0); /* allocates nothing */
    pool_destroy(&p);
}

/* Fill well past several chunks; pointers taken early must stay valid. */
static void test_growth_and_stability(void)
{
    enum { N = 5 * POOL_CHUNK_ITEMS + 123 };
    struct pool p;
    pool_init(&p, 24);

    pool_handle *h = malloc(N * sizeof(*h));
    void **ptr = malloc(N * sizeof(*ptr));
    if (h == NULL || ptr == NULL)
        abort();

    for (uint32_t i = 0; i < N; i++) {
        h[i] = pool_alloc(&p);
        CHECK(h[i] != POOL_NIL);
        ptr[i] = pool_at(&p, h[i]);
        CHECK(all_zero(ptr[i], p.item_size));
        memset(ptr[i], 0, p.item_size);
        memcpy(ptr[i], &i, sizeof(i));
        memcpy((char *)ptr[i] + 20, &i, sizeof(i));
    }
    CHECK(p.used == N);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t a, b;
        CHECK(pool_at(&p, h[i]) == ptr[i]);
        memcpy(&a, ptr[i], 4);
        memcpy(&b, (char *)ptr[i] + 20, 4);
        CHECK(a == i && b == i);
        for (uint32_t j = i + 1; j < N && j < i + 3; j++)
            CHECK(h[j] != h[i]);
    }
    /* Memory: whole chunks plus the chunk table, nothing per item. */
    size_t chunks = (N + 1 + POOL_CHUNK_ITEMS - 1) / POOL_CHUNK_ITEMS; /* +1: handle 0 */
    CHECK(p.nchunks == chunks);
    CHECK(pool_memory(&p) == chunks * POOL_CHUNK_ITEMS * 24 + p.cap_chunks * sizeof(char *));
    CHECK(pool_memory(&p) < (size_t)N * 24 + POOL_CHUNK_ITEMS * 24 + 4096);

    pool_destroy(&p);
    CHECK(pool_memory(&p) == 0 && p.used == 0);
    free(h);
    free(ptr);
}

/* Release and re-allocate: items come back zeroed, live items untouched. */
static void test_reuse(void)
{
    enum { N = 200000 };
    struct pool p;
    pool_init(&p, 40);
    pool_handle *h = calloc(N, sizeof(*h));
    unsigned char *live = calloc(N, 1);
    if (h == NULL || live == NULL)
        abort();

    uint64_t rng = 12345;
    size_t used = 0;
    uint32_t max_handle = 0;
    int before = check_failures;
    for (int op = 0; op < 2000000; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t i = (uint32_t)(rng >> 33) % N;
        if (live[i]) {
            /* Contents still what we wrote. */
            unsigned char *item = pool_at(&p, h[i]);
            uint32_t v;
            memcpy(&v, item + 36, 4);
            CHECK(v == i);
            CHECK(item[8] == 0xAB);
            pool_release(&p, h[i]);
            live[i] = 0;
            used--;
        } else {
            h[i] = pool_alloc(&p);
            CHECK(h[i] != POOL_NIL);
            unsigned char *item = pool_at(&p, h[i]);
            CHECK(all_zero(item, 40));
            memset(item, 0xAB, 40);
            memcpy(item + 36, &i, 4);
            live[i] = 1;
            used++;
            if (h[i] > max_handle)
                max_handle = h[i];
        }
        CHECK(p.used == used);
        if (check_failures - before > 10)
            break;
    }
    /* Reuse means the handle space stays close to the peak of live items. */
    CHECK(max_handle <= N);
    /* LIFO reuse: the last released handle comes back first. */
    pool_handle a = pool_alloc(&p);
    pool_release(&p, a);
    CHECK(pool_alloc(&p) == a);

    pool_destroy(&p);
    free(h);
    free(live);
}

static const struct check_case cases[] = {
    {"item_size", test_item_size},
    {"growth_and_stability", test_growth_and_stability},
    {"reuse", test_reuse},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
