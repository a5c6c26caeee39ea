/*
 * pool.c -- fixed-size items addressed by 32-bit handles.
 *
 * Design
 * ------
 * A handle is an item index. The high bits (h >> POOL_CHUNK_BITS) pick a
 * chunk, the low bits the item inside it, so pool_at() is one load of the
 * chunk pointer and a multiply-add, and a handle stays valid (and its item
 * stays put) however much the pool grows afterwards: growth appends chunks
 * and reallocates only the small table of chunk pointers, never a chunk.
 *
 *   handle:  31 ............ 16 15 ............. 0
 *            |   chunk index    |  item in chunk  |
 *
 * Index 0 is burnt so that handle 0 (POOL_NIL) can be the nil link in every
 * structure built on the pool; handle 0xFFFFFFFF is never handed out either,
 * so callers may use it as a second sentinel. That leaves 2^32 - 2 items.
 *
 * Items are handed out in two ways:
 *  - from the free list, a LIFO stack threaded through bytes 0..3 of released
 *    items (hence item_size >= 4), so the most recently released -- and most
 *    likely cached -- item is reused first;
 *  - otherwise from next_fresh, the first index never used. Chunks come from
 *    calloc(), so fresh items are already zero and the kernel maps their pages
 *    only when first touched: RSS follows the items in use, not the chunk.
 *
 * Memory is never given back before pool_destroy(): a daemon that once held
 * N messages is expected to hold N again.
 */
#include "delay-bridge/pool.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xalloc.h"

#define POOL_MAX_HANDLE 0xFFFFFFFEu /* last handle ever handed out */

void pool_init(struct pool *p, size_t item_size)
{
    assert(item_size > 0);
    if (item_size < 4)
        item_size = 4;
    p->item_size = (item_size + 3) & ~(size_t)3;
    p->chunks = NULL;
    p->nchunks = 0;
    p->cap_chunks = 0;
    p->next_fresh = 1; /* handle 0 is POOL_NIL */
    p->free_head = POOL_NIL;
    p->used = 0;
}

void pool_destroy(struct pool *p)
{
    for (uint32_t i = 0; i < p->nchunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    pool_init(p, p->item_size);
}

/* Make chunk number p->nchunks exist. */
static void pool_grow(struct pool *p)
{
    if (p->nchunks == p->cap_chunks) {
        uint32_t cap = p->cap_chunks ? p->cap_chunks * 2 : 16;
        p->chunks = xrealloc(p->chunks, cap * sizeof(*p->chunks));
        p->cap_chunks = cap;
    }
    p->chunks[p->nchunks++] = xcalloc(POOL_CHUNK_ITEMS, p->item_size);
}

pool_handle pool_alloc(struct pool *p)
{
    pool_handle h = p->free_head;

    if (h != POOL_NIL) {
        void *item = pool_at(p, h);
        memcpy(&p->free_head, item, sizeof(p->free_head));
        memset(item, 0, p->item_size);
        p->used++;
        return h;
    }
    if (p->next_fresh > POOL_MAX_HANDLE) {
        fprintf(stderr, "pool: more than %u items of %zu bytes\n", POOL_MAX_HANDLE,
                p->item_size);
        abort();
    }
    h = p->next_fresh++;
    if ((h >> POOL_CHUNK_BITS) == p->nchunks)
        pool_grow(p); /* calloc: the new chunk is zero */
    p->used++;
    return h;
}

void pool_release(struct pool *p, pool_handle h)
{
    assert(h != POOL_NIL && h < p->next_fresh && p->used > 0);
    memcpy(pool_at(p, h), &p->free_head, sizeof(p->free_head));
    p->free_head = h;
    p->used--;
}

size_t pool_memory(const struct pool *p)
{
    return (size_t)p->nchunks * POOL_CHUNK_ITEMS * p->item_size +
           (size_t)p->cap_chunks * sizeof(*p->chunks);
}
