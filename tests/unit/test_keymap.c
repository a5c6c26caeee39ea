/*
 * test_keymap.c -- the key index: every stored (hash, handle) is found,
 * deletes keep the others findable (backward shift), duplicate hashes (real
 * collisions, forced here with a handful of hash values) hand back every
 * handle, and memory stays within 24 bytes per entry at any load.
 */
#include "check.h"
#include "engine/keymap.h"

static uint64_t rng = 0x1234567;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A model: handle i is in the map under hashes[i] when in[i]. */
enum { N = 60000 };
static uint64_t hashes[N];
static int in[N];

static void check_all(const struct keymap *m, size_t expect)
{
    uint32_t out[64];
    size_t i, k, n, found = 0;

    CHECK_U64(m->count, expect);
    for (i = 1; i < N; i++) {
        n = keymap_find(m, hashes[i], out, 64);
        int seen = 0;
        for (k = 0; k < n && k < 64; k++)
            seen |= out[k] == i;
        CHECK(seen == in[i], "handle %zu: in=%d seen=%d (%zu under its hash)", i, in[i], seen, n);
        found += in[i];
        if (check_failures > 5)
            return;
    }
    CHECK_U64(found, expect);
}

static void run(int distinct_hashes)
{
    struct keymap m;
    size_t count = 0, i, round;

    keymap_init(&m);
    for (i = 1; i < N; i++) {
        hashes[i] = distinct_hashes ? rnd() : rnd() % 7 * 0x9e3779b97f4a7c15ull;
        in[i] = 0;
    }
    for (round = 0; round < 4; round++) {
        for (i = 1; i < N; i++) {
            if (!in[i] && rnd() % 3) {
                keymap_put(&m, hashes[i], (uint32_t)i);
                in[i] = 1;
                count++;
            } else if (in[i] && rnd() % 2) {
                CHECK(keymap_del(&m, hashes[i], (uint32_t)i) == 1);
                in[i] = 0;
                count--;
            }
        }
        if (distinct_hashes || round == 3)
            check_all(&m, count);
        CHECK(m.count == 0 || keymap_memory(&m) <= 22 * m.count + 8 * 1024,
              "%zu bytes for %zu entries", keymap_memory(&m), m.count);
    }
    /* deleting what is not there */
    CHECK(keymap_del(&m, 12345, 999999) == 0);
    for (i = 1; i < N; i++)
        if (in[i])
            CHECK(keymap_del(&m, hashes[i], (uint32_t)i) == 1);
    CHECK_U64(m.count, 0);
    keymap_destroy(&m);
}

static void test_random(void)
{
    run(1);
}

/* Every handle under one of 7 hash values, found back through the full list. */
static void test_seven_hashes(void)
{
    struct keymap m;
    static uint32_t out[N];
    size_t i, k, total = 0;

    keymap_init(&m);
    for (i = 1; i < N; i++) {
        hashes[i] = rnd() % 7 * 0x9e3779b97f4a7c15ull;
        in[i] = rnd() % 2;
        if (in[i]) {
            keymap_put(&m, hashes[i], (uint32_t)i);
            total++;
        }
    }
    for (i = 1; i < N; i += 97)
        if (in[i] && rnd() % 2) {
            CHECK(keymap_del(&m, hashes[i], (uint32_t)i) == 1);
            in[i] = 0;
            total--;
        }
    size_t sum = 0;
    for (uint64_t v = 0; v < 7; v++) {
        size_t n = keymap_find(&m, v * 0x9e3779b97f4a7c15ull, out, N);
        sum += n;
        for (k = 0; k < n; k++)
            CHECK(in[out[k]] && hashes[out[k]] == v * 0x9e3779b97f4a7c15ull);
    }
    CHECK_U64(sum, total);
    keymap_destroy(&m);
}

static void test_forced_collisions(void)
{
    /* 500 handles under one hash value: a long run, shifts across the table wrap */
    struct keymap m;
    uint32_t out[8];
    size_t i;

    keymap_init(&m);
    for (i = 1; i <= 500; i++)
        keymap_put(&m, 42, (uint32_t)i);
    CHECK(keymap_find(&m, 42, out, 8) == 500);
    for (i = 1; i <= 500; i += 2)
        CHECK(keymap_del(&m, 42, (uint32_t)i) == 1);
    CHECK(keymap_find(&m, 42, out, 8) == 250);
    CHECK(keymap_find(&m, 43, out, 8) == 0);
    keymap_destroy(&m);
}

static void test_hash(void)
{
    /* the same key on two routes names two messages */
    CHECK(keymap_hash(0, "order-1", 7) != keymap_hash(1, "order-1", 7));
    CHECK(keymap_hash(0, "order-1", 7) == keymap_hash(0, "order-1", 7));
    CHECK(keymap_hash(0, "order-1", 7) != keymap_hash(0, "order-2", 7));
    CHECK(keymap_hash(0, "", 0) != keymap_hash(256, "", 0));
}

static const struct check_case cases[] = {
    {"random", test_random},
    {"forced_collisions", test_forced_collisions},
    {"seven_hashes", test_seven_hashes},
    {"hash", test_hash},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
