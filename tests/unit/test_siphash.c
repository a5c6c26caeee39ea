/*
 * test_siphash.c -- SipHash-2-4 against the paper's worked example and the
 * reference implementation's 64 vectors; the pieces API equal to one call
 * at every split; and the key mattering.
 */
#include "base/siphash.h"

#include "check.h"

/*
 * Key 00 01 .. 0f, message 00 01 .. (i-1) for i = 0..63: the vectors of the
 * reference implementation (github.com/veorq/SipHash, vectors.h), as
 * SipHash-2-4 64-bit outputs read little-endian.
 */
static const uint64_t vectors[64] = {
    0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
    0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
    0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
    0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    0x3f2acc7f57c29bdbull, 0x699ae9f52cbe4794ull, 0x4bc1b3f0968dd39cull, 0xbb6dc91da77961bdull,
    0xbed65cf21aa2ee98ull, 0xd0f2cbb02e3b67c7ull, 0x93536795e3a33e88ull, 0xa80c038ccd5ccec8ull,
    0xb8ad50c6f649af94ull, 0xbce192de8a85b8eaull, 0x17d835b85bbb15f3ull, 0x2f2e6163076bcfadull,
    0xde4daaaca71dc9a5ull, 0xa6a2506687956571ull, 0xad87a3535c49ef28ull, 0x32d892fad841c342ull,
    0x7127512f72f27cceull, 0xa7f32346f95978e3ull, 0x12e0b01abb051238ull, 0x15e034d40fa197aeull,
    0x314dffbe0815a3b4ull, 0x027990f029623981ull, 0xcadcd4e59ef40c4dull, 0x9abfd8766a33735cull,
    0x0e3ea96b5304a7d0ull, 0xad0c42d6fc585992ull, 0x187306c89bc215a9ull, 0xd4a60abcf3792b95ull,
    0xf935451de4f21df2ull, 0xa9538f0419755787ull, 0xdb9acddff56ca510ull, 0xd06c98cd5c0975ebull,
    0xe612a3cb9ecba951ull, 0xc766e62cfcadaf96ull, 0xee64435a9752fe72ull, 0xa192d576b245165aull,
    0x0a8787bf8ecb74b2ull, 0x81b3e73d20b49b6full, 0x7fa8220ba3b2eceaull, 0x245731c13ca42499ull,
    0xb78dbfaf3a8d83bdull, 0xea1ad565322a1a0bull, 0x60e61c23a3795013ull, 0x6606d7e446282b93ull,
    0x6ca4ecb15c5f91e1ull, 0x9f626da15c9625f3ull, 0xe51b38608ef25f57ull, 0x958a324ceb064572ull,
};

static uint8_t key[16], msg[64];

static void setup(void)
{
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
}

/* The paper's appendix A: 15 bytes 00..0e under key 00..0f -> a129ca6149be45e5. */
static void test_paper(void)
{
    setup();
    CHECK_U64(siphash24(key, msg, 15), 0xa129ca6149be45e5ull);
}

static void test_vectors(void)
{
    setup();
    for (size_t n = 0; n < 64; n++)
        CHECK(siphash24(key, msg, n) == vectors[n], "length %zu: %016llx", n,
              (unsigned long long)siphash24(key, msg, n));
}

/* Any cut into three pieces hashes as the whole; final() leaves the state usable. */
static void test_pieces(void)
{
    setup();
    for (size_t n = 0; n < 64; n++)
        for (size_t a = 0; a <= n; a++)
            for (size_t b = a; b <= n; b++) {
                struct siphash s;
                siphash_init(&s, key);
                siphash_update(&s, msg, a);
                (void)siphash_final(&s);
                siphash_update(&s, msg + a, b - a);
                siphash_update(&s, msg + b, n - b);
                if (siphash_final(&s) != vectors[n]) {
                    CHECK(0, "length %zu cut at %zu and %zu", n, a, b);
                    return;
                }
            }
    /* unaligned input */
    uint8_t buf[72];
    for (size_t off = 1; off < 8; off++) {
        memcpy(buf + off, msg, 63);
        CHECK(siphash24(key, buf + off, 63) == vectors[63], "offset %zu", off);
    }
}

/* Every key bit and every message bit changes the output. */
static void test_key_matters(void)
{
    setup();
    uint64_t base = siphash24(key, msg, 24);
    for (int bit = 0; bit < 128; bit++) {
        key[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK(siphash24(key, msg, 24) != base, "key bit %d", bit);
        key[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    for (int bit = 0; bit < 24 * 8; bit++) {
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        CHECK(siphash24(key, msg, 24) != base, "message bit %d", bit);
        msg[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

static const struct check_case cases[] = {
    {"paper", test_paper},
    {"vectors", test_vectors},
    {"pieces", test_pieces},
    {"key_matters", test_key_matters},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
