/*
 * idmap.h -- index from a 64-bit id to a pool handle.
 *
 * Open addressing with linear probing over an array of pool handles; the
 * key is not stored in the table but read from the item itself, at byte
 * offset key_off, so the index costs 4 bytes per slot (about 5-16 bytes per
 * entry: the load factor is kept in [0.25, 0.75] and a resize leaves it in
 * [0.375, 0.5], so put/del churn at a threshold cannot rehash every time).
 * Deletion uses backward shift, so there are no tombstones and lookups stay
 * short.
 *
 * The pool and the items' keys must not change while an item is indexed.
 */
#ifndef DB_IDMAP_H
#define DB_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/pool.h"

struct idmap {
    struct pool *pool;
    size_t key_off;       /* offset of the uint64_t key inside an item */
    pool_handle *slots;   /* POOL_NIL = empty */
    size_t cap;           /* power of two, or 0 */
    size_t count;
};

void idmap_init(struct idmap *m, struct pool *pool, size_t key_off);
void idmap_destroy(struct idmap *m);

/* Make room for n entries without resizing (optional, speeds up bulk load). */
void idmap_reserve(struct idmap *m, size_t n);

/* Index item h under the key stored in it. The key must not be present. */
void idmap_put(struct idmap *m, pool_handle h);

/* The handle indexed under key, or POOL_NIL. */
pool_handle idmap_get(const struct idmap *m, uint64_t key);

/* Remove key; returns its handle or POOL_NIL if absent. */
pool_handle idmap_del(struct idmap *m, uint64_t key);

size_t idmap_memory(const struct idmap *m);

#endif
