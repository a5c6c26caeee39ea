/*
 * bench_rec.h -- the record the engine benchmarks (bench_keys, bench_keyflood)
 * add as message i: route "orders", due 1 h after t0 plus i % 10 min (so
 * the wheel's slots fill as in production), body as given, keyed when key
 * is not NULL. Pointers are borrowed for the eng_add() call.
 */
#ifndef DB_BENCH_REC_H
#define DB_BENCH_REC_H

#include <stdint.h>
#include <string.h>

#include "delay-bridge/walrec.h"

static inline void bench_rec(struct walrec_add *a, uint64_t t0, uint64_t i, const uint8_t *body,
                             size_t body_len, const char *key, size_t key_len)
{
    memset(a, 0, sizeof(*a));
    a->enqueue_ms = t0;
    a->due_ms = t0 + 3600000 + i % 600000;
    a->route = "orders";
    a->route_len = 6;
    a->body = body;
    a->body_len = body_len;
    if (key) {
        a->flags = WALREC_ADD_KEYED;
        a->key = key;
        a->key_len = key_len;
    }
}

#endif
