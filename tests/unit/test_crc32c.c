/*
 * test_crc32c.c -- CRC-32C: published check values, hardware and table
 * paths agreeing on every length and alignment, and chaining.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"

#include "check.h"
#include "testkit.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static uint8_t rnd8(void)
{
    return (uint8_t)(tk_rand(&rng) >> 24);
}

/* Bit-at-a-time reference, straight from the definition. */
static uint32_t crc_ref(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
    }
    return ~crc;
}

typedef uint32_t crc_fn(uint32_t, const void *, size_t);

static void vectors(const char *name, crc_fn *f)
{
    uint8_t buf[48];

    CHECK(f(0, "123456789", 9) == 0xE3069283u, "%s: \"123456789\" -> %08x", name,
          f(0, "123456789", 9));
    CHECK(f(0, "", 0) == 0, "%s: empty", name);
    CHECK(f(0, "a", 1) == 0xC1D04330u, "%s: \"a\" -> %08x", name, f(0, "a", 1));
    /* RFC 3720 (iSCSI) B.4 test vectors. */
    memset(buf, 0, 32);
    CHECK(f(0, buf, 32) == 0x8A9136AAu, "%s: 32 x 00 -> %08x", name, f(0, buf, 32));
    memset(buf, 0xff, 32);
    CHECK(f(0, buf, 32) == 0x62A8AB43u, "%s: 32 x ff -> %08x", name, f(0, buf, 32));
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CHECK(f(0, buf, 32) == 0x46DD794Eu, "%s: 00..1f -> %08x", name, f(0, buf, 32));
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CHECK(f(0, buf, 32) == 0x113FDB5Cu, "%s: 1f..00 -> %08x", name, f(0, buf, 32));
    static const uint8_t iscsi_read[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    CHECK(f(0, iscsi_read, 48) == 0xD9963A56u, "%s: iSCSI read -> %08x", name,
          f(0, iscsi_read, 48));
}

enum { MAXLEN = 1100 };
static uint8_t big[MAXLEN + 64];

/* The same pseudo-random bytes in big[] for every case. */
static void fill_big(void)
{
    rng = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = rnd8();
}

static void test_vectors(void)
{
    int hw = crc32c_hw_available();

    printf("  hardware path %s\n", hw ? "available (SSE4.2)" : "not available");
    vectors("crc32c", crc32c);
    vectors("sw", crc32c_sw);
    if (hw)
        vectors("hw", crc32c_hw);
}

/* Every length and alignment: sw == reference, hw == sw. */
static void test_lengths(void)
{
    int hw = crc32c_hw_available();
    int before = check_failures;

    fill_big();
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len <= MAXLEN; len++) {
            uint32_t ref = crc_ref(0x12345678u, big + off, len);
            uint32_t sw = crc32c_sw(0x12345678u, big + off, len);
            CHECK(sw == ref, "sw off=%zu len=%zu: %08x != %08x", off, len, sw, ref);
            if (hw) {
                uint32_t h = crc32c_hw(0x12345678u, big + off, len);
                CHECK(h == sw, "hw off=%zu len=%zu: %08x != %08x", off, len, h, sw);
            }
            if (check_failures - before > 20)
                return;
        }
    }
}

/* Chaining: crc(a ++ b) == crc(crc(a), b), at every split point. */
static void test_chaining(void)
{
    fill_big();
    uint32_t whole = crc32c(0, big, 300);
    for (size_t k = 0; k <= 300; k++) {
        uint32_t c = crc32c(crc32c(0, big, k), big + k, 300 - k);
        CHECK(c == whole, "chain split %zu: %08x != %08x", k, c, whole);
        c = crc32c_sw(crc32c(0, big, k), big + k, 300 - k);
        CHECK(c == whole, "mixed chain split %zu", k);
    }
}

/* A single flipped bit always changes the CRC. */
static void test_bit_flips(void)
{
    fill_big();
    for (size_t bit = 0; bit < 64 * 8; bit++) {
        big[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        uint32_t c = crc32c(0, big, 64);
        big[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK(c != crc32c(0, big, 64), "bit %zu flip undetected", bit);
    }
}

static const struct check_case cases[] = {
    {"vectors", test_vectors},
    {"lengths", test_lengths},
    {"chaining", test_chaining},
    {"bit_flips", test_bit_flips},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
