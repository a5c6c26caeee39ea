/*
 * bench_keys.c -- what an x-delay-key costs: RAM per held message with and
 * without keys, and the time of a keyed add (with its lookup) and a cancel.
 *
 *   build/tests/bench_keys [N] [DIR]      (default 1000000, /var/tmp)
 *
 * Holds N unkeyed messages, then N keyed ones (each key distinct, 24 bytes),
 * in fresh logs with fsync off (the log is not what is measured), and
 * prints the engine's own accounting (pool + id index + wheel + key map)
 * and the RSS growth per message, and their difference: the goal is at
 * most 24 B more per keyed message.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/engine.h"
#include "base/log.h"
#include "delay-bridge/wal.h"
#include "bench_rec.h"

static long rss_kb(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int route_index(void *arg, const char *name, size_t len)
{
    return 0;
}

static void run(const char *base, uint64_t n, int keyed, double *ram_per, double *rss_per,
                double *ns_add)
{
    char dir[512], cmd[600], key[32];
    struct wal_opts wo;
    struct engine *e;
    struct eng_stats s;
    uint8_t body[64];
    uint64_t t0 = 1700000000000ull, i;
    long rss0;
    double t;

    snprintf(dir, sizeof(dir), "%s/bench_keys.%d.%d", base, (int)getpid(), keyed);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        exit(1);
    memset(&wo, 0, sizeof(wo));
    wo.dir = dir;
    wo.no_sync = 1;
    struct eng_opts o = {.log = wal_log(wal_new(&wo)), .nroutes = 1, .route_index = route_index,
                         .now_ms = t0};
    if (eng_open(&e, &o) < 0)
        exit(1);
    memset(body, 'b', sizeof(body));
    rss0 = rss_kb();
    t = now_s();
    for (i = 0; i < n; i++) {
        struct walrec_add a;
        if (keyed)
            snprintf(key, sizeof(key), "order-%018llu", (unsigned long long)i);
        bench_rec(&a, t0, i, body, sizeof(body), keyed ? key : NULL, 24);
        if (eng_add(e, 0, &a, NULL) < 0 || (i % 4096 == 4095 && eng_commit(e, NULL, NULL) < 0))
            exit(1);
    }
    if (eng_commit(e, NULL, NULL) < 0)
        exit(1);
    *ns_add = (now_s() - t) * 1e9 / (double)n;
    eng_stats(e, &s);
    *ram_per = (double)s.ram_bytes / (double)n;
    *rss_per = (double)(rss_kb() - rss0) * 1024.0 / (double)n;
    if (keyed) {
        t = now_s();
        for (i = 0; i < n / 10; i++) {
            snprintf(key, sizeof(key), "order-%018llu", (unsigned long long)(i * 7 % n));
            eng_cancel(e, 0, key, 24);
        }
        printf("cancel by key: %.0f ns/op (hash lookup + one record read from the page cache)\n",
               (now_s() - t) * 1e9 / (double)(n / 10));
    }
    eng_close(e);
    if (system(cmd) != 0)
        exit(1);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    const char *base = argc > 2 ? argv[2] : "/var/tmp";
    double r0, s0, a0, r1, s1, a1;

    /* As the daemon does (main.c): big tables are mmapped, so a freed one leaves RSS. */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    log_set_level(LOG_LEVEL_WARN);
    run(base, n, 0, &r0, &s0, &a0);
    run(base, n, 1, &r1, &s1, &a1);
    printf("held n=%llu unkeyed: %.1f B/msg accounted, %.1f B/msg RSS growth, add %.0f ns\n",
           (unsigned long long)n, r0, s0, a0);
    printf("held n=%llu keyed:   %.1f B/msg accounted, %.1f B/msg RSS growth, add %.0f ns "
           "(lookup + insert)\n", (unsigned long long)n, r1, s1, a1);
    printf("a key costs %.1f B accounted, %.1f B RSS per message (goal <= 24)\n", r1 - r0, s1 - s0);
    return 0;
}
