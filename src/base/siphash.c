/*
 * siphash.c -- SipHash-2-4, written from the paper's description (section 2).
 *
 * The key k is two little-endian 64-bit words k0, k1. The state is four
 * 64-bit words:
 *
 *   v0 = k0 ^ 0x736f6d6570736575   ("somepseu")
 *   v1 = k1 ^ 0x646f72616e646f6d   ("dorandom")
 *   v2 = k0 ^ 0x6c7967656e657261   ("lygenera")
 *   v3 = k1 ^ 0x7465646279746573   ("tedbytes")
 *
 * The message is cut into 8-byte little-endian words m; the last word
 * holds the remaining 0..7 bytes, zeros, and the message length mod 256 in
 * its top byte (so a message of 8k bytes ends with a word of its length
 * alone). Each word is taken as
 *
 *   v3 ^= m;  c SipRounds;  v0 ^= m
 *
 * and then v2 ^= 0xff; d SipRounds; the hash is v0 ^ v1 ^ v2 ^ v3. Here
 * c = 2 and d = 4. A SipRound is four add-rotate-xor half-rounds:
 *
 *   v0 += v1; v1 <<<= 13; v1 ^= v0; v0 <<<= 32;
 *   v2 += v3; v3 <<<= 16; v3 ^= v2;
 *   v0 += v3; v3 <<<= 21; v3 ^= v0;
 *   v2 += v1; v1 <<<= 17; v1 ^= v2; v2 <<<= 32
 *
 * Why 2-4 and not 1-3 (what Rust's and Python's tables use): 2-4 is the
 * variant the paper analyses and gives test vectors for, and the key index
 * hashes one short key per keyed publish or cancel, which also costs a
 * WAL append or a record read -- the two rounds more are a few ns there
 * (tests/bench/README.md, bench_keyflood). The pieces API lets a caller
 * hash a prefix (the route) and the key without copying them together.
 */
#include "siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static inline uint64_t le64(const uint8_t *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

static inline void sipround(uint64_t *v0, uint64_t *v1, uint64_t *v2, uint64_t *v3)
{
    *v0 += *v1;
    *v1 = ROTL(*v1, 13);
    *v1 ^= *v0;
    *v0 = ROTL(*v0, 32);
    *v2 += *v3;
    *v3 = ROTL(*v3, 16);
    *v3 ^= *v2;
    *v0 += *v3;
    *v3 = ROTL(*v3, 21);
    *v3 ^= *v0;
    *v2 += *v1;
    *v1 = ROTL(*v1, 17);
    *v1 ^= *v2;
    *v2 = ROTL(*v2, 32);
}

/* One message word through the compression: c = 2 rounds. */
static inline void compress(struct siphash *s, uint64_t m)
{
    s->v3 ^= m;
    sipround(&s->v0, &s->v1, &s->v2, &s->v3);
    sipround(&s->v0, &s->v1, &s->v2, &s->v3);
    s->v0 ^= m;
}

void siphash_init(struct siphash *s, const uint8_t key[SIPHASH_KEY_LEN])
{
    uint64_t k0 = le64(key), k1 = le64(key + 8);

    s->v0 = k0 ^ 0x736f6d6570736575ull;
    s->v1 = k1 ^ 0x646f72616e646f6dull;
    s->v2 = k0 ^ 0x6c7967656e657261ull;
    s->v3 = k1 ^ 0x7465646279746573ull;
    s->tail = 0;
    s->len = 0;
}

void siphash_update(struct siphash *s, const void *p, size_t n)
{
    const uint8_t *b = p;
    unsigned have = (unsigned)(s->len & 7);

    s->len += n;
    /* Fill the pending word first. */
    while (have && n) {
        s->tail |= (uint64_t)*b++ << (8 * have);
        n--;
        if (++have == 8) {
            compress(s, s->tail);
            s->tail = 0;
            have = 0;
        }
    }
    for (; n >= 8; n -= 8, b += 8)
        compress(s, le64(b));
    for (unsigned i = 0; i < n; i++)
        s->tail |= (uint64_t)b[i] << (8 * i);
}

uint64_t siphash_final(const struct siphash *s)
{
    struct siphash t = *s;
    uint64_t last = t.tail | (t.len & 0xff) << 56;

    compress(&t, last);
    t.v2 ^= 0xff;
    for (int i = 0; i < 4; i++)
        sipround(&t.v0, &t.v1, &t.v2, &t.v3);
    return t.v0 ^ t.v1 ^ t.v2 ^ t.v3;
}

uint64_t siphash24(const uint8_t key[SIPHASH_KEY_LEN], const void *p, size_t n)
{
    struct siphash s;

    siphash_init(&s, key);
    siphash_update(&s, p, n);
    return siphash_final(&s);
}
