/*
 * pool.h -- fixed-size items addressed by 32-bit handles.
 *
 * The held-message table keeps tens of millions of small records. A malloc
 * per record costs a 16-byte chunk header and 64-bit pointers double the size
 * of every link, so records live here instead: items of one fixed size in
 * chunks of POOL_CHUNK_ITEMS that never move once allocated. A handle is a
 * uint32_t; handle 0 is never handed out and serves as the nil link.
 *
 * Ownership: the pool owns all item memory. pool_at() pointers stay valid
 * until the item is released or the pool destroyed. Not thread-safe.
 */
#ifndef DB_POOL_H
#define DB_POOL_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t pool_handle;

#define POOL_NIL ((pool_handle)0)
#define POOL_CHUNK_BITS 16
#define POOL_CHUNK_ITEMS (1u << POOL_CHUNK_BITS)
#define POOL_CHUNK_MASK (POOL_CHUNK_ITEMS - 1)

struct pool {
    size_t item_size;     /* bytes per item, >= 4, rounded up to 4 */
    char **chunks;        /* chunks[i] holds POOL_CHUNK_ITEMS items */
    uint32_t nchunks;     /* chunks allocated */
    uint32_t cap_chunks;  /* slots in chunks[] */
    uint32_t next_fresh;  /* next never-used handle */
    pool_handle free_head;/* singly linked free list through item bytes 0..3 */
    uint32_t used;        /* live items */
};

/* Initialise an empty pool of items of item_size bytes. Allocates nothing. */
void pool_init(struct pool *p, size_t item_size);

/* Release every chunk. Handles and pointers become invalid. */
void pool_destroy(struct pool *p);

/* A zero-filled item. Aborts on out of memory or on more than 2^32-2 items. */
pool_handle pool_alloc(struct pool *p);

/* Give an item back. h must be live. */
void pool_release(struct pool *p, pool_handle h);

/* Bytes of RAM held by the pool itself (chunks and the chunk table). */
size_t pool_memory(const struct pool *p);

static inline void *pool_at(const struct pool *p, pool_handle h)
{
    return p->chunks[h >> POOL_CHUNK_BITS] + (size_t)(h & POOL_CHUNK_MASK) * p->item_size;
}

#endif
