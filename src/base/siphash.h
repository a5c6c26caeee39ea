/*
 * siphash.h -- SipHash-2-4 (Aumasson and Bernstein, "SipHash: a fast
 * short-input PRF", 2012): a 64-bit hash under a 128-bit secret key.
 *
 * Without the key, nobody can predict an output or make two inputs share
 * one beyond chance, so a table hashed with it cannot be flooded by inputs
 * a stranger chose (the key index, src/engine/keymap.c). Pure: no state
 * but what the caller holds, no allocation, any alignment, any byte order.
 *
 *   siphash24(key, p, n)                  one call
 *   siphash_init / _update ... / _final   the same value over pieces: the
 *                                         concatenation is what is hashed
 */
#ifndef DB_SIPHASH_H
#define DB_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

#define SIPHASH_KEY_LEN 16

/* State of one hash over pieces; the caller owns it (plain value, no cleanup). */
struct siphash {
    uint64_t v0, v1, v2, v3;
    uint64_t tail; /* the last len % 8 bytes, little-endian */
    uint64_t len;  /* bytes taken so far */
};

void siphash_init(struct siphash *s, const uint8_t key[SIPHASH_KEY_LEN]);
void siphash_update(struct siphash *s, const void *p, size_t n);
/* The hash of everything taken; s is left as it was (more may follow). */
uint64_t siphash_final(const struct siphash *s);

uint64_t siphash24(const uint8_t key[SIPHASH_KEY_LEN], const void *p, size_t n);

#endif
