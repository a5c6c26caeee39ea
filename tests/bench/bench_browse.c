/*
 * bench_browse.c -- what one browse page (GET /pending) costs the loop, at
 * millions held, for the distributions that make wheel slots big.
 *
 *   build/tests/bench_browse [N] [DIR] [DIST...]    (default 10000000, /var/tmp, all)
 *
 * For each distribution it holds N messages (16-byte bodies, one route
 * unless said) in a fresh log with fsync off, then times eng_list() pages
 * of 100 plus eng_read() of each listed message -- what the HTTP handler
 * does for a page, less the JSON -- both walking from the start (200 pages
 * in a row) and from 200 cursors spread over the held set (following
 * empty pages, which a page whose budget ran out is, until one lists
 * something). It prints the median, p99 and largest page time. The distributions:
 *
 *   spread     due uniform over the next hour (256 ms to 65 s slots)
 *   48h        "auto-rate after 48 hours", sent over four hours: due uniform
 *              over [48 h, 52 h] (one or two level-3 slots hold everything)
 *   same       every message due at one instant (x-delay-until midnight)
 *   tworoutes  the held set of "48h", 1 in 100 on route 0, browsed; the
 *              rest on route 1
 *   rare       the same, 1 in 100,000 on route 0: pages end on the walk's
 *              budget (ENG_LIST_BUDGET entries looked at), not on 100 found
 *   due        every message already due, not yet published (target down:
 *              the route's DUE list)
 *
 * Also printed: the engine's RAM per held message (/stats ram_bytes), to
 * show what split slots cost. Run it on a quiet machine; ~1.5 GB of log per
 * distribution at 10M, removed after each.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/engine.h"
#include "base/log.h"
#include "delay-bridge/wal.h"
#include "../unit/testkit.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    return tk_rand(&rng);
}

static const char *route_names[2] = {"r0", "r1"};

static int route_index(void *arg, const char *name, size_t len)
{
    (void)arg;
    return len == 2 && name[0] == 'r' ? name[1] - '0' : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One page of 100 and a read of each message; its time in ms. */
static double page(struct engine *e, uint16_t route, uint64_t *ad, uint64_t *ai, size_t *got,
                   int *more_out)
{
    struct eng_item items[100];
    struct walrec_add a;
    int more;
    uint64_t nd, ni;
    double t0 = now_s();
    size_t n = eng_list(e, route, *ad, *ai, items, 100, &more, &nd, &ni);

    for (size_t i = 0; i < n; i++)
        if (eng_read(e, items[i].m, &a) < 0) {
            fprintf(stderr, "bench_browse: read failed\n");
            exit(1);
        }
    *got = n;
    *more_out = more;
    if (more) {
        *ad = nd;
        *ai = ni;
    }
    return (now_s() - t0) * 1000.0;
}

static void report(const char *what, double *ms, size_t n)
{
    qsort(ms, n, sizeof(*ms), cmp_double);
    printf("  %-26s median %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", what, ms[n / 2],
           ms[n * 99 / 100], ms[n - 1]);
}

static void run(const char *base, uint64_t n, const char *dist)
{
    char dir[4096];
    uint64_t now = wall_ms(), lo = 0, span = 0;
    int rare = !strcmp(dist, "rare"), tworoutes = rare || !strcmp(dist, "tworoutes");
    int due = !strcmp(dist, "due");
    struct engine *e;
    struct eng_stats st;
    static const uint8_t props[] = {0x10, 0x00, 0x02};
    uint8_t body[16] = {0};
    double fill, ms[200];
    int r;

    if (!strcmp(dist, "spread")) {
        lo = 60000;
        span = 3600000;
    } else if (!strcmp(dist, "48h") || tworoutes) {
        lo = 48 * 3600000ull;
        span = 4 * 3600000ull;
    } else if (!strcmp(dist, "same")) {
        lo = 3600000;
        span = 1;
    } else if (due) {
        lo = 0;
        span = 1;
    } else {
        fprintf(stderr, "bench_browse: unknown distribution %s\n", dist);
        exit(2);
    }
    snprintf(dir, sizeof(dir), "%s/bench_browse.%d", base, (int)getpid());
    struct wal_opts wo = {.dir = dir, .no_sync = 1};
    struct eng_opts o = {.log = wal_log(wal_new(&wo)), .nroutes = 2, .route_index = route_index,
                         .now_ms = now};
    if ((r = eng_open(&e, &o)) < 0) {
        fprintf(stderr, "bench_browse: %s: %s\n", dir, wlog_strerror(r));
        exit(1);
    }
    double t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        struct walrec_add a;
        int route = tworoutes && rnd() % (rare ? 100000 : 100) != 0;
        memset(&a, 0, sizeof(a));
        a.enqueue_ms = now;
        a.due_ms = due ? now - 1000 : now + lo + rnd() % span;
        a.route = route_names[route];
        a.route_len = 2;
        a.exchange = "x";
        a.exchange_len = 1;
        a.routing_key = "rk";
        a.routing_key_len = 2;
        a.props = props;
        a.props_len = sizeof(props);
        a.body = body;
        a.body_len = sizeof(body);
        if ((r = eng_add(e, (uint16_t)route, &a, NULL)) < 0 ||
            (i % 4096 == 4095 && (r = eng_commit(e, NULL, NULL)) < 0)) {
            fprintf(stderr, "bench_browse: %s\n", wlog_strerror(r));
            exit(1);
        }
    }
    if ((r = eng_commit(e, NULL, NULL)) < 0) {
        fprintf(stderr, "bench_browse: %s\n", wlog_strerror(r));
        exit(1);
    }
    eng_advance(e, wall_ms()); /* "due": every message onto the DUE list */
    fill = now_s() - t0;
    eng_stats(e, &st);
    printf("%s: %llu held (%llu due) in %.1f s, engine RAM %.2f B per held message\n", dist,
           (unsigned long long)st.held, (unsigned long long)st.due, fill,
           (double)st.ram_bytes / (double)st.held);

    /* 200 pages in a row from the start */
    uint64_t ad = 0, ai = 0, shown = 0;
    size_t got;
    int more;
    for (int i = 0; i < 200; i++) {
        ms[i] = page(e, 0, &ad, &ai, &got, &more);
        shown += got;
    }
    report("200 pages in a row", ms, 200);
    /* from each of 200 cursors spread over the due times, pages until one lists
     * something (a budget-bound page is empty and keeps the cursor): the slowest page */
    int most_pages = 0;
    for (int i = 0; i < 200; i++) {
        uint64_t d = due ? now - 1000 : now + lo + (span * (uint64_t)i) / 200, id = 0;
        int pages = 0;
        if (due || span == 1)
            id = (n * (uint64_t)i) / 200; /* ids are log positions: about one per message */
        ms[i] = 0;
        do {
            double t = page(e, 0, &d, &id, &got, &more);
            ms[i] = t > ms[i] ? t : ms[i];
            pages++;
        } while (got == 0 && more && pages < 1000);
        most_pages = pages > most_pages ? pages : most_pages;
    }
    report("one page at 200 cursors", ms, 200);
    if (most_pages > 1)
        printf("  (a cursor took up to %d pages to list something: the budget's empty pages)\n",
               most_pages);
    if (shown == 0)
        printf("  (no message shown: wrong distribution?)\n");
    eng_close(e);
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_browse: could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    const char *base = argc > 2 ? argv[2] : "/var/tmp";
    static const char *all[] = {"spread", "48h", "same", "tworoutes", "rare", "due"};

    log_set_level(LOG_LEVEL_WARN);
    if (argc > 3)
        for (int i = 3; i < argc; i++)
            run(base, n, argv[i]);
    else
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
            run(base, n, all[i]);
    return 0;
}
