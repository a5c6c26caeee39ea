/*
 * keymap.h -- x-delay-key -> held message, in 8 bytes a slot.
 *
 * A keyed message is found by the 64-bit hash of (route, key), of which
 * the table keeps a 32-bit fingerprint; the key itself stays in the
 * message's WAL record, where the caller confirms every hit. So the table
 * never decides alone that two keys are equal, and a fingerprint shared by
 * two keys (about n / 2^32 per lookup: 0.0002 with a million keys) costs
 * one extra record read, never a wrong answer. Open addressing with linear
 * probing over two parallel arrays (fingerprint, handle); a fingerprint may
 * occur several times, so a lookup hands back every handle stored under
 * it. Deletion by (hash, handle) with backward shift: no tombstones. Load
 * factor at most 0.75, so a keyed message costs 10.7 to 21.3 bytes here.
 *
 * Keys are a publisher's choice, so the hash is SipHash-2-4 under a
 * 128-bit secret (keymap_hash): without the secret nobody can choose keys
 * that pile up in one run of the table (keymap.c says where the secret
 * lives and why).
 *
 * Pure but for keymap_secret_new() (the kernel's random bytes); not
 * thread-safe. Handle 0 (POOL_NIL) marks an empty slot.
 */
#ifndef DB_KEYMAP_H
#define DB_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

struct keymap {
    uint32_t *fp;     /* 32-bit fingerprint of the 64-bit hash */
    uint32_t *handle; /* 0 = empty */
    size_t cap;       /* power of two, or 0 */
    size_t count;
};

void keymap_init(struct keymap *m);
void keymap_destroy(struct keymap *m);

/* Store (hash, handle); handle != 0. Duplicates of hash are allowed. */
void keymap_put(struct keymap *m, uint64_t hash, uint32_t handle);

/* Up to max handles stored under hash (its fingerprint) into out; returns how many in all. */
size_t keymap_find(const struct keymap *m, uint64_t hash, uint32_t *out, size_t max);

/* Remove (hash, handle); 1 if it was there, 0 if not. */
int keymap_del(struct keymap *m, uint64_t hash, uint32_t handle);

size_t keymap_memory(const struct keymap *m);

/*
 * The longest probe sequence of any stored entry: 1 + how far past its
 * home slot it sits (0 when empty). A lookup or insert of a hash that lands
 * in that run walks as far. O(capacity): for tests and benchmarks.
 */
size_t keymap_max_probe(const struct keymap *m);

/* The 32-bit fingerprint the table keeps of a 64-bit hash. */
static inline uint32_t keymap_fingerprint(uint64_t hash)
{
    return (uint32_t)(hash ^ (hash >> 32));
}

#define KEYMAP_SECRET_LEN 16

/*
 * A fresh secret for keymap_hash from the kernel (getrandom, or
 * /dev/urandom on a kernel without it); under the simulator (DB_SIM), from
 * its seeded clock_rand64() so a seed replays. 0 or -errno.
 */
int keymap_secret_new(uint8_t secret[KEYMAP_SECRET_LEN]);

/*
 * SipHash-2-4 under secret of the route (2 bytes, little-endian) then the
 * key: the hash the engine uses unless told otherwise (eng_opts.key_hash).
 */
uint64_t keymap_hash(const uint8_t secret[KEYMAP_SECRET_LEN], uint16_t route, const char *key,
                     size_t len);

#endif
