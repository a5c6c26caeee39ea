/*
 * bench_recovery.c -- how long a restart takes with N messages held, and
 * what each held message costs in RAM, measured through the engine exactly
 * as the daemon opens it.
 *
 *   bench_recovery [DIR] [N ...]        default DIR /var/tmp, N = 1000000 10000000
 *   BENCH_COLD=1 bench_recovery ...     drop the page cache before each open (root)
 *
 * Each N, twice: write N ADD records of 256-byte bodies with delays spread
 * over 48 h (plus 10% completed messages, so DONE records are replayed
 * too), close, drop caches if asked, then time eng_open() and report RSS.
 * The first time without a checkpoint (the whole log is replayed), the
 * second with one taken after 99% of the messages (the checkpoint is read,
 * then the last 1% of the log replayed).
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/engine.h"
#include "delay-bridge/wal.h"
#include "base/log.h"
#include "../unit/testkit.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static int route_index(void *arg, const char *name, size_t len)
{
    return 0;
}


/* Fire what is due and confirm it at once, as a broker would. */
static void retire(struct engine *e, uint64_t now)
{
    struct walrec_add a;
    eng_msg m;

    eng_advance(e, now);
    while (eng_take(e, 0, &m, &a) == 1)
        eng_confirm(e, m, now);
}

static const char *route_name(void *arg, int i)
{
    return "orders";
}

static struct engine *open_at(const char *dir, uint64_t t0, int no_sync)
{
    struct wal_opts wo = {.dir = dir, .no_sync = no_sync};
    struct eng_opts o = {.log = wal_log(wal_new(&wo)), .nroutes = 1, .route_index = route_index,
                         .route_name = route_name, .now_ms = t0};
    struct engine *e;

    if (eng_open(&e, &o) < 0)
        exit(1);
    return e;
}

/* Take a checkpoint of what e holds and wait until it is installed. */
static void checkpoint(struct engine *e)
{
    struct eng_stats s;
    double t = now_s();

    eng_stats(e, &s);
    uint64_t before = s.ckpt_installed;
    if (eng_checkpoint(e) < 0)
        exit(1);
    do {
        if (eng_dirty(e) && eng_commit(e, NULL, NULL) < 0)
            exit(1);
        if (eng_maintain(e, 8u << 20) < 0)
            exit(1);
        eng_stats(e, &s);
        if (s.ckpt_failed)
            exit(1);
    } while (s.ckpt_installed == before);
    printf("checkpoint held=%llu: %.1f MiB, %.2f s (written and installed)\n",
           (unsigned long long)s.held, (double)s.ckpt_bytes / (1 << 20), now_s() - t);
}

/*
 * Append n messages (and n/10 that complete at once). ckpt_at: take a
 * checkpoint after that many (0: none), so the rest is the replayed tail.
 */
static void fill(const char *dir, uint64_t n, uint64_t t0, uint64_t ckpt_at)
{
    struct engine *e = open_at(dir, t0, 1); /* no fsync: the fill is not what is measured */
    uint8_t body[256], props[64];
    uint64_t i;
    memset(body, 'b', sizeof(body));
    memset(props, 0, sizeof(props));
    props[0] = 0x90; /* content-type + delivery-mode flags */
    props[2] = 16;
    memcpy(props + 3, "application/json", 16);
    props[19] = 2;
    srandom(42);
    for (i = 0; i < n + n / 10; i++) {
        struct walrec_add a;
        memset(&a, 0, sizeof(a));
        a.enqueue_ms = t0;
        /* Every 11th message completes at once: its DONE is replayed too. */
        a.due_ms = i % 11 == 10 ? t0 : t0 + 60000 + (uint64_t)random() % (48ull * 3600 * 1000);
        a.route = "orders";
        a.route_len = 6;
        a.exchange = "orders.delayed";
        a.exchange_len = 14;
        a.routing_key = "order.close";
        a.routing_key_len = 11;
        a.props = props;
        a.props_len = 20;
        a.body = body;
        a.body_len = sizeof(body);
        if (eng_add(e, 0, &a, NULL) < 0)
            exit(1);
        if (i % 4096 == 4095) {
            if (eng_commit(e, NULL, NULL) < 0)
                exit(1);
            retire(e, t0);
        }
        if (ckpt_at && i == ckpt_at + ckpt_at / 10) {
            if (eng_commit(e, NULL, NULL) < 0)
                exit(1);
            checkpoint(e);
        }
    }
    if (eng_commit(e, NULL, NULL) < 0)
        exit(1);
    retire(e, t0);
    if (eng_commit(e, NULL, NULL) < 0)
        exit(1);
    eng_close(e);
}

/* One measurement: fill a log of n held messages, close, reopen timed. */
static void run(const char *base, uint64_t n, int with_ckpt, int *cold, uint64_t t0)
{
    char dir[512];
    struct engine *e;
    struct eng_stats s;
    double t;
    long rss0, rss1;

    snprintf(dir, sizeof(dir), "%s/bench_recovery.%d", base, (int)getpid());
    tk_rm_rf(dir);
    fill(dir, n, t0, with_ckpt ? n - n / 100 : 0);
    if (*cold) {
        sync();
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        if (!f || fputs("3\n", f) < 0)
            fprintf(stderr, "cannot drop caches (need root); measuring warm\n"), *cold = 0;
        if (f)
            fclose(f);
    }
    rss0 = rss_kb();
    t = now_s();
    e = open_at(dir, t0, 0);
    t = now_s() - t;
    rss1 = rss_kb();
    eng_stats(e, &s);
    printf("recovery n=%llu held=%llu wal=%.1f MiB in %llu segments, %s: %.2f s, %.2f M "
           "msgs/s (%s page cache; goal 10M <= 5 s)\n",
           (unsigned long long)n, (unsigned long long)s.held,
           (double)s.log_disk_bytes / (1 << 20), (unsigned long long)s.log_segments,
           s.ckpt_loaded_lsn ? "from a checkpoint + 1% of the log" : "whole log replayed", t,
           (double)s.held / t / 1e6, *cold ? "cold" : "warm");
    printf("ram per held message n=%llu: %.1f B accounted (engine structures), %.1f B RSS "
           "delta (goal <= 64)\n",
           (unsigned long long)n, (double)s.ram_bytes / (double)s.held,
           (double)(rss1 - rss0) * 1024.0 / (double)s.held);
    fflush(stdout);
    eng_close(e);
    tk_rm_rf(dir);
}

int main(int argc, char **argv)
{
    const char *base = argc > 1 ? argv[1] : "/var/tmp";
    uint64_t defaults[] = {1000000, 10000000};
    int nn = argc > 2 ? argc - 2 : 2;
    int cold = getenv("BENCH_COLD") != NULL;
    uint64_t t0 = 1700000000000ull;

    mallopt(M_MMAP_THRESHOLD, 256 << 10); /* as the daemon does (main.c) */
    log_set_level(getenv("BENCH_LOG") ? LOG_LEVEL_INFO : LOG_LEVEL_WARN); /* BENCH_LOG=1: phases */
    for (int k = 0; k < nn; k++) {
        uint64_t n = argc > 2 ? strtoull(argv[k + 2], NULL, 10) : defaults[k];
        run(base, n, 0, &cold, t0);
        run(base, n, 1, &cold, t0);
    }
    return 0;
}
