/*
 * idmap.c -- index from a 64-bit id to a pool handle.
 *
 * Design
 * ------
 * The table is a power-of-two array of pool handles, POOL_NIL meaning empty.
 * Keys are not stored: a slot's key is read from its item, at key_off. That
 * keeps the index at 4 bytes per slot, at the price of one item access per
 * probe. Linear probing keeps probes on consecutive slots (one cache line
 * holds 16), and the hash is the MurmurHash3 fmix64 finaliser, which spreads
 * every input bit over the low bits used as the index: ids that differ only
 * in high bits (2^32, 2*2^32, ...) do not pile up in one run.
 *
 * Load factor: the table doubles when an insertion would take it above 3/4
 * and halves when a deletion takes it below 1/4 (never below IDMAP_MIN_CAP
 * slots). Each resize leaves it between 3/8 and 1/2, so at least cap/8
 * operations separate two resizes: add/del churn at a threshold cannot make
 * every operation rehash. Between resizes an entry costs 5.3 to 16 bytes.
 *
 * Deletion is by backward shift (Knuth 6.4, algorithm R): after emptying slot
 * i, walk the run that follows; an entry at j whose home slot k does not lie
 * cyclically in (i, j] may move back to i, which becomes the new hole. The
 * table never holds tombstones, so an unsuccessful lookup stops at the first
 * empty slot, however many deletions happened.
 */
#include "delay-bridge/idmap.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

#define IDMAP_MIN_CAP 16

static inline uint64_t fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= UINT64_C(0xff51afd7ed558ccd);
    k ^= k >> 33;
    k *= UINT64_C(0xc4ceb9fe1a85ec53);
    k ^= k >> 33;
    return k;
}

static inline uint64_t key_of(const struct idmap *m, pool_handle h)
{
    uint64_t key;
    memcpy(&key, (const char *)pool_at(m->pool, h) + m->key_off, sizeof(key));
    return key;
}

static inline size_t home_of(const struct idmap *m, uint64_t key)
{
    return (size_t)fmix64(key) & (m->cap - 1);
}

void idmap_init(struct idmap *m, struct pool *pool, size_t key_off)
{
    assert(key_off + sizeof(uint64_t) <= pool->item_size);
    m->pool = pool;
    m->key_off = key_off;
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

void idmap_destroy(struct idmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = 0;
    m->count = 0;
}

/* Rebuild the table with cap slots (a power of two above count/0.75). */
static void idmap_rehash(struct idmap *m, size_t cap)
{
    pool_handle *old = m->slots;
    size_t old_cap = m->cap;

    m->slots = xcalloc(cap, sizeof(*m->slots));
    m->cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        pool_handle h = old[i];
        if (h == POOL_NIL)
            continue;
        size_t j = home_of(m, key_of(m, h));
        while (m->slots[j] != POOL_NIL)
            j = (j + 1) & (cap - 1);
        m->slots[j] = h;
    }
    free(old);
}

/* Smallest allowed capacity holding n entries at load <= 3/4. */
static size_t cap_for(size_t n)
{
    size_t cap = IDMAP_MIN_CAP;
    while (n > cap / 4 * 3)
        cap *= 2;
    return cap;
}

void idmap_reserve(struct idmap *m, size_t n)
{
    size_t cap = cap_for(n);
    if (cap > m->cap)
        idmap_rehash(m, cap);
}

void idmap_put(struct idmap *m, pool_handle h)
{
    assert(h != POOL_NIL);
    assert(idmap_get(m, key_of(m, h)) == POOL_NIL);
    if (m->count + 1 > m->cap / 4 * 3)
        idmap_rehash(m, m->cap ? m->cap * 2 : IDMAP_MIN_CAP);

    size_t mask = m->cap - 1;
    size_t i = home_of(m, key_of(m, h));
    while (m->slots[i] != POOL_NIL)
        i = (i + 1) & mask;
    m->slots[i] = h;
    m->count++;
}

/* Slot holding key, or m->cap if absent. */
static size_t idmap_find(const struct idmap *m, uint64_t key)
{
    if (m->count == 0)
        return m->cap;

    size_t mask = m->cap - 1;
    for (size_t i = home_of(m, key);; i = (i + 1) & mask) {
        pool_handle h = m->slots[i];
        if (h == POOL_NIL)
            return m->cap;
        if (key_of(m, h) == key)
            return i;
    }
}

pool_handle idmap_get(const struct idmap *m, uint64_t key)
{
    size_t i = idmap_find(m, key);
    return i == m->cap ? POOL_NIL : m->slots[i];
}

pool_handle idmap_del(struct idmap *m, uint64_t key)
{
    size_t i = idmap_find(m, key);
    if (i == m->cap)
        return POOL_NIL;

    pool_handle found = m->slots[i];
    size_t mask = m->cap - 1;
    /* Backward shift: i is the hole; pull back every entry that may move. */
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        pool_handle h = m->slots[j];
        if (h == POOL_NIL)
            break;
        size_t k = home_of(m, key_of(m, h));
        /* h may fill the hole unless its home lies cyclically in (i, j]. */
        if (((j - k) & mask) >= ((j - i) & mask)) {
            m->slots[i] = h;
            i = j;
        }
    }
    m->slots[i] = POOL_NIL;
    m->count--;

    if (m->cap > IDMAP_MIN_CAP && m->count < m->cap / 4)
        idmap_rehash(m, m->cap / 2);
    return found;
}

size_t idmap_memory(const struct idmap *m)
{
    return m->cap * sizeof(*m->slots);
}
