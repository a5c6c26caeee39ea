/*
 * bench_wheel.c -- what a held message costs in time and in RAM.
 *
 * Usage: bench_wheel [N ...]     (default: 1000000 10000000 100000000)
 *
 * For each N, in a child process of its own (so that one run's freed memory
 * does not flatter the next run's RSS):
 *
 *  - insert+expire: allocate N items of the daemon's held-message layout,
 *    add each to the wheel with a delay uniform over 0..1 h (then 0..48 h),
 *    then drain the wheel as the daemon does: advance to wheel_next_event(),
 *    fire, release the item, repeat. Reported: total time / N, with the
 *    insert and expire halves, from a fresh pool (cold: includes first-touch
 *    page faults) and from one whose pages are already in (warm: a daemon in
 *    steady state). Goal: <= 100 ns/op at N = 10M.
 *
 *  - RAM per held message: the same N items, each in the wheel, as the
 *    engine holds them at run time (no id index since recovery frees its
 *    own: engine.c). Reported: the modules' own accounting (pool + wheel) / N,
 *    and the growth of the process's resident set (/proc/self/statm) / N.
 *    Goal: <= 64 B (issue 10: <= 48 B).
 *
 * Prints one line per figure.
 */
#define _GNU_SOURCE
#include "delay-bridge/pool.h"
#include "engine/wheel.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct held {
    struct wheel_node node;
    uint32_t seg, off, len;
    uint16_t route, flags;
};
_Static_assert(sizeof(struct held) == 40, "held message layout is 40 bytes");

static const uint64_t start_ms = UINT64_C(1700000000000);

static uint64_t rng = 0x243f6a8885a308d3;

static inline uint64_t rnd(void)
{
    /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * UINT64_C(2685821657736338717);
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

struct drain {
    struct pool *pool;
    size_t fired;
    uint64_t last_due;
    int bad;
};

static void fire_release(void *arg, pool_handle h)
{
    struct drain *d = arg;
    struct held *m = pool_at(d->pool, h);
    d->bad |= m->node.due < d->last_due; /* cheap sanity: never out of order */
    d->last_due = m->node.due;
    d->fired++;
    pool_release(d->pool, h);
}

/*
 * warm: fault the pool's pages in first (allocate and release N items), as
 * in a daemon that has held N messages before; cold includes first-touch
 * page faults, which cost ~20 ns per 40-byte item on the VM we measured on.
 */
static void bench_insert_expire(size_t n, uint64_t span_ms, const char *label, int warm)
{
    struct pool pool;
    pool_init(&pool, sizeof(struct held));
    struct wheel *w = wheel_new(&pool, start_ms);
    if (warm) {
        for (size_t i = 0; i < n; i++)
            pool_alloc(&pool);
        for (size_t i = n; i >= 1; i--)
            pool_release(&pool, (pool_handle)i); /* LIFO: handed back 1, 2, ... */
    }

    double t0 = now_sec();
    for (size_t i = 0; i < n; i++) {
        pool_handle h = pool_alloc(&pool);
        struct held *m = pool_at(&pool, h);
        m->len = (uint32_t)i;
        wheel_add(w, h, start_ms + rnd() % span_ms, i);
    }
    double t1 = now_sec();
    struct drain d = {&pool, 0, 0, 0};
    size_t steps = 0;
    while (wheel_count(w) > 0) {
        wheel_advance(w, wheel_next_event(w), fire_release, &d);
        steps++;
    }
    double t2 = now_sec();

    if (d.fired != n || d.bad)
        printf("ERROR: fired %zu of %zu, order %s\n", d.fired, n, d.bad ? "wrong" : "ok");
    printf("wheel insert+expire n=%zu delays 0..%s pool %s: %.1f ns/op (goal <= 100)"
           " [insert %.1f, expire %.1f ns/op, %zu advances]\n",
           n, label, warm ? "warm" : "cold", (t2 - t0) * 1e9 / (double)n,
           (t1 - t0) * 1e9 / (double)n, (t2 - t1) * 1e9 / (double)n, steps);
    wheel_free(w);
    pool_destroy(&pool);
}

static void bench_memory(size_t n)
{
    size_t rss0 = rss_bytes();
    struct pool pool;
    pool_init(&pool, sizeof(struct held));
    struct wheel *w = wheel_new(&pool, start_ms);

    for (size_t i = 0; i < n; i++) {
        pool_handle h = pool_alloc(&pool);
        struct held *m = pool_at(&pool, h);
        m->seg = (uint32_t)(i >> 20);
        m->off = (uint32_t)i * 64;
        m->len = 1000;
        wheel_add(w, h, start_ms + rnd() % 3600000, i + 1); /* seq = message id */
    }
    size_t rss1 = rss_bytes();
    size_t acct = pool_memory(&pool) + wheel_memory(w);

    printf("RAM per held message n=%zu: %.1f B accounted (pool %.1f + wheel %.3f),"
           " %.1f B RSS delta (goal <= 48)\n",
           n, (double)acct / (double)n, (double)pool_memory(&pool) / (double)n,
           (double)wheel_memory(w) / (double)n, (double)(rss1 - rss0) / (double)n);
    wheel_free(w);
    pool_destroy(&pool);
}

enum figure { INSERT_EXPIRE_1H, INSERT_EXPIRE_48H, MEMORY };

/* Run one figure in a child so that each starts from a fresh heap. */
static void in_child(enum figure fig, size_t n, int warm)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        if (fig == INSERT_EXPIRE_1H)
            bench_insert_expire(n, UINT64_C(3600000), "1h", warm);
        else if (fig == INSERT_EXPIRE_48H)
            bench_insert_expire(n, UINT64_C(48) * 3600000, "48h", warm);
        else
            bench_memory(n);
        fflush(stdout);
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("n=%zu: child failed (out of memory?)\n", n);
}

int main(int argc, char **argv)
{
    size_t ns[16];
    int count = 0;
    for (int i = 1; i < argc && count < 16; i++)
        ns[count++] = strtoull(argv[i], NULL, 0);
    if (count == 0) {
        ns[count++] = 1000000;
        ns[count++] = 10000000;
        ns[count++] = 100000000;
    }
    for (int i = 0; i < count; i++) {
        for (int warm = 0; warm <= 1; warm++) {
            in_child(INSERT_EXPIRE_1H, ns[i], warm);
            in_child(INSERT_EXPIRE_48H, ns[i], warm);
        }
    }
    for (int i = 0; i < count; i++)
        in_child(MEMORY, ns[i], 0);
    return 0;
}
