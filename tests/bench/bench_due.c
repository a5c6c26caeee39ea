/*
 * bench_due.c -- what the "falls due ahead" view (GET /due, the status
 * page's chart) costs with N held messages.
 *
 * Usage: bench_due [N]     (default 10000000)
 *
 * N items of the daemon's held-message layout go into a timing wheel with
 * delays uniform over 0..1 year (the worst spread for the counters: every
 * UTC day of the year has its minute block). Reported: the wheel's insert
 * cost per entry (the counters are updated inside it), the view's time
 * (mean of 1000 calls), and the counters' RAM.
 */
#define _GNU_SOURCE
#include "delay-bridge/duecount.h"
#include "delay-bridge/pool.h"
#include "engine/wheel.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct held {
    struct wheel_node node;
    uint32_t seg, off, len;
    uint16_t route, flags;
};

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    const uint64_t start = UINT64_C(1795000000000), year = UINT64_C(365) * 86400000;
    uint64_t rng = 0x243f6a8885a308d3;
    struct pool p;
    struct duecount_view v;

    pool_init(&p, sizeof(struct held));
    struct wheel *w = wheel_new(&p, start);
    double t0 = now_sec();
    for (size_t i = 0; i < n; i++) {
        rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
        wheel_add(w, pool_alloc(&p), start + 1 + (rng * UINT64_C(2685821657736338717)) % year, i);
    }
    double t1 = now_sec();
    for (int i = 0; i < 1000; i++)
        wheel_due_view(w, start + (uint64_t)i * 1000, &v);
    double t2 = now_sec();
    uint64_t sum = v.later;
    for (int i = 0; i < DUECOUNT_DAYS; i++)
        sum += v.days[i];
    printf("held %zu: wheel_add %.1f ns/entry (counters included); view %.1f us; "
           "counters %.2f MiB; view total %llu (sum of days + later %llu)\n",
           n, (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e6 / 1000.0,
           (double)(wheel_memory(w)) / 1048576.0, (unsigned long long)v.total,
           (unsigned long long)sum);
    wheel_free(w);
    pool_destroy(&p);
    return 0;
}
