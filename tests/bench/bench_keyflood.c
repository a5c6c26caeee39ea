/*
 * bench_keyflood.c -- keys chosen to collide, before and after the keyed
 * hash (issue 39): what a publisher who picks x-delay-key values can make
 * each keyed publish, lookup and cancel cost on the event loop.
 *
 *   build/tests/bench_keyflood [N] [RUNS] [DIR]   (default 50000, 3, /var/tmp)
 *
 * Four engines a run, each in a fresh log with fsync off (the log is not
 * what is measured), N keyed messages on one route, 8-byte keys:
 *
 *   old hash, random keys    the unkeyed FNV-1a the key index used before
 *   old hash, chosen keys    keys chosen offline so that under it they all
 *                            go home to the first slots (tests/unit/keyflood.h)
 *   new hash, random keys    SipHash-2-4 under the engine's secret (keymap.c)
 *   new hash, chosen keys    the same chosen keys
 *
 * and times eng_add (a keyed add looks the key up first, to replace),
 * eng_find and eng_cancel of every key, per operation, in CPU time of the
 * thread (user + system: the log's writes count), which a machine shared
 * with other work disturbs less than wall time. The old hash is put
 * back through eng_opts.key_hash; the daemon cannot select it. Prints the
 * median of RUNS runs with min and max, and each case against random keys
 * under the same hash, measured in the same run. One engine first as a
 * warm-up, not counted; run r starts at case r mod 4, so no case is
 * always first.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "delay-bridge/engine.h"
#include "delay-bridge/wal.h"
#include "../unit/keyflood.h"
#include "bench_rec.h"

enum { OPS = 3, CASES = 4, MAX_RUNS = 15 };
static const char *op_name[OPS] = {"add", "find", "cancel"};
static const char *case_name[CASES] = {"old hash, random keys", "old hash, chosen keys",
                                       "new hash, random keys", "new hash, chosen keys"};

/* CPU time of this thread (user + system): what the event loop would spend, less others' load. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int route_index(void *arg, const char *name, size_t len)
{
    (void)arg;
    (void)name;
    (void)len;
    return 0;
}

/* ns per operation of each of OPS over n keys, in a fresh engine. */
static void run(const char *base, const char *keys, uint64_t n, int old_hash, double ns[OPS])
{
    char dir[512], cmd[600];
    struct wal_opts wo;
    struct engine *e;
    uint8_t body[64];
    uint64_t t0 = 1700000000000ull, i;
    double t;

    snprintf(dir, sizeof(dir), "%s/bench_keyflood.%d", base, (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        exit(1);
    memset(&wo, 0, sizeof(wo));
    wo.dir = dir;
    wo.no_sync = 1;
    struct eng_opts o = {.log = wal_log(wal_new(&wo)), .nroutes = 1, .route_index = route_index,
                         .now_ms = t0, .key_hash = old_hash ? keyflood_old_hash : NULL};
    if (eng_open(&e, &o) < 0)
        exit(1);
    memset(body, 'b', sizeof(body));
    t = now_s();
    for (i = 0; i < n; i++) {
        struct walrec_add a;
        bench_rec(&a, t0, i, body, sizeof(body), keys + i * KEYFLOOD_KEY_LEN, KEYFLOOD_KEY_LEN);
        if (eng_add(e, 0, &a, NULL) < 0 || (i % 4096 == 4095 && eng_commit(e, NULL, NULL) < 0))
            exit(1);
    }
    if (eng_commit(e, NULL, NULL) < 0)
        exit(1);
    ns[0] = (now_s() - t) * 1e9 / (double)n;
    t = now_s();
    for (i = 0; i < n; i++)
        if (!eng_find(e, 0, keys + i * KEYFLOOD_KEY_LEN, KEYFLOOD_KEY_LEN))
            exit(2);
    ns[1] = (now_s() - t) * 1e9 / (double)n;
    t = now_s();
    for (i = 0; i < n; i++) {
        if (eng_cancel(e, 0, keys + i * KEYFLOOD_KEY_LEN, KEYFLOOD_KEY_LEN) != 1)
            exit(3);
        if (i % 4096 == 4095 && eng_commit(e, NULL, NULL) < 0)
            exit(1);
    }
    ns[2] = (now_s() - t) * 1e9 / (double)n;
    eng_close(e);
    if (system(cmd) != 0)
        exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 50000;
    int runs = argc > 2 ? atoi(argv[2]) : 3;
    const char *base = argc > 3 ? argv[3] : "/var/tmp";
    static double ns[CASES][OPS][MAX_RUNS];
    double med[CASES][OPS];
    uint64_t rng = 0x9e3779b97f4a7c15ull;

    if (n == 0 || runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "usage: bench_keyflood [N > 0] [RUNS 1..%d] [DIR]\n", MAX_RUNS);
        return 2;
    }
    mallopt(M_MMAP_THRESHOLD, 256 << 10); /* as the daemon does (main.c) */
    log_set_level(LOG_LEVEL_WARN);

    /* Chosen: home slot 0 under the old hash in tables up to 2^10 slots. Random: same shape. */
    char *chosen = malloc(n * KEYFLOOD_KEY_LEN), *random = malloc(n * KEYFLOOD_KEY_LEN);
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    double t = now_s();
    keyflood_keys(0, 10, chosen, n);
    printf("%llu chosen keys found in %.2f s (one in 2^10 tries qualifies)\n",
           (unsigned long long)n, now_s() - t);
    for (uint64_t i = 0; i < n; i++) {
        char *k = random + i * KEYFLOOD_KEY_LEN;
        k[0] = 'f';
        k[1] = 'l';
        for (int j = 2; j < KEYFLOOD_KEY_LEN; j++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            k[j] = abc[rng & 63];
        }
    }

    /* A warm-up engine, not counted; then each run starts at another case. */
    double one[OPS];
    run(base, random, n, 0, one);
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < CASES; k++) {
            int c = (k + r) % CASES;
            run(base, c % 2 ? chosen : random, n, c < 2, one);
            for (int o = 0; o < OPS; o++)
                ns[c][o][r] = one[o];
        }

    printf("N=%llu keyed messages on one route, %d runs: ns per operation, median [min..max]\n",
           (unsigned long long)n, runs);
    printf("%-24s", "");
    for (int o = 0; o < OPS; o++)
        printf(" %-28s", op_name[o]);
    printf("\n");
    for (int c = 0; c < CASES; c++) {
        printf("%-24s", case_name[c]);
        for (int o = 0; o < OPS; o++) {
            qsort(ns[c][o], (size_t)runs, sizeof(double), cmp_double);
            med[c][o] = runs % 2 ? ns[c][o][runs / 2]
                                 : (ns[c][o][runs / 2 - 1] + ns[c][o][runs / 2]) / 2;
            char cell[64];
            snprintf(cell, sizeof(cell), "%.0f [%.0f..%.0f]", med[c][o], ns[c][o][0],
                     ns[c][o][runs - 1]);
            printf(" %-28s", cell);
        }
        printf("\n");
    }
    printf("chosen keys against random keys under the same hash (medians):\n");
    for (int h = 0; h < 2; h++) {
        printf("  %s hash:", h ? "new" : "old");
        for (int o = 0; o < OPS; o++)
            printf(" %s x%.2f", op_name[o], med[2 * h + 1][o] / med[2 * h][o]);
        printf("\n");
    }
    printf("new hash against old, random keys (medians):");
    for (int o = 0; o < OPS; o++)
        printf(" %s x%.2f", op_name[o], med[2][o] / med[0][o]);
    printf("\n");
    free(chosen);
    free(random);
    return 0;
}
