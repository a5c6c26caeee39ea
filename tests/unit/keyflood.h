/*
 * keyflood.h -- the key index's old hash, and keys chosen to flood it, for
 * test_keymap ("flood") and bench_keyflood only: the daemon no longer has it.
 *
 * The old hash (keymap.c before issue 39) was FNV-1a 64 over the route's
 * two bytes (little-endian) then the key, with MurmurHash3's fmix64 as a
 * finaliser; the table keeps the fingerprint fp = low 32 bits ^ high 32
 * bits, and puts it home at slot (fp * 2654435769 mod 2^32) >> (32 - b) in
 * a table of 2^b slots. Everything is public, so a publisher computes it
 * offline: a key whose x = fp * 2654435769 mod 2^32 has its top T bits zero
 * goes home in slot 0 of any table up to 2^T slots and in the first
 * 2^(b-T) slots of a bigger one. One key in 2^T qualifies; counting over
 * the last byte of an 8-byte key costs one FNV step and the finaliser a
 * try, so 100,000 such keys at T = 10 take about 10^8 tries (a fraction of
 * a second). Under the old hash they form one run as long as their number;
 * the keyed hash scatters them like any other keys.
 */
#ifndef DB_TEST_KEYFLOOD_H
#define DB_TEST_KEYFLOOD_H

#include <stddef.h>
#include <stdint.h>

#define KEYFLOOD_KEY_LEN 8

static inline uint64_t keyflood_fmix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* The FNV-1a 64 state after the route's two bytes and key[0..len). */
static inline uint64_t keyflood_fnv(uint64_t h, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static inline uint64_t keyflood_fnv_route(uint16_t route)
{
    uint8_t r[2] = {(uint8_t)route, (uint8_t)(route >> 8)};
    return keyflood_fnv(0xcbf29ce484222325ull, r, 2);
}

/* The old keymap_hash, exactly (its signature fits eng_opts.key_hash). */
static inline uint64_t keyflood_old_hash(uint16_t route, const char *key, size_t len)
{
    return keyflood_fmix64(keyflood_fnv(keyflood_fnv_route(route), (const uint8_t *)key, len));
}

/* Does the old hash h send its key home to slot 0 of any table up to 2^top slots? */
static inline int keyflood_hits(uint64_t h, unsigned top)
{
    uint32_t fp = (uint32_t)(h ^ (h >> 32));
    return (uint32_t)(fp * 2654435769u) >> (32 - top) == 0;
}

/*
 * n keys of KEYFLOOD_KEY_LEN printable bytes into keys (n * 8 bytes, not
 * NUL-terminated) that all go home to slot 0 under the old hash on route,
 * for tables up to 2^top slots. Deterministic: "fl" then 6 characters of a
 * 64-letter alphabet counted upward, the last one fastest.
 */
static inline void keyflood_keys(uint16_t route, unsigned top, char *keys, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint64_t base = keyflood_fnv_route(route), ctr = 0;
    size_t got = 0;
    uint8_t k[KEYFLOOD_KEY_LEN] = {'f', 'l'};

    while (got < n) {
        uint64_t c = ctr++;
        for (int i = 6; i >= 2; i--, c >>= 6)
            k[i] = (uint8_t)abc[c & 63];
        uint64_t h7 = keyflood_fnv(base, k, 7);
        for (unsigned last = 0; last < 64 && got < n; last++) {
            uint64_t h = keyflood_fmix64((h7 ^ (uint8_t)abc[last]) * 0x100000001b3ull);
            if (keyflood_hits(h, top)) {
                k[7] = (uint8_t)abc[last];
                for (int i = 0; i < KEYFLOOD_KEY_LEN; i++)
                    keys[got * KEYFLOOD_KEY_LEN + i] = (char)k[i];
                got++;
            }
        }
    }
}

#endif
