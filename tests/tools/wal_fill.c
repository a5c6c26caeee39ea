/*
 * wal_fill.c -- write a WAL holding N messages, fast, for tests.
 *
 *   wal_fill DIR ROUTE N [DELAY_MS | MIN_MS-MAX_MS] [BODY_BYTES]
 *
 * Appends N messages for route ROUTE through the engine (so the log is
 * exactly what the daemon writes), due DELAY_MS (default one hour) after
 * now, or a delay uniform in [MIN_MS, MAX_MS] (a fixed pseudo-random
 * sequence), with a BODY_BYTES body (default 16), committing every 4096 and
 * fsyncing only at the end. Used by tests that need a log large enough for
 * recovery to take a while (progress in /stats) without publishing millions
 * of messages through a broker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "delay-bridge/engine.h"
#include "base/log.h"
#include "delay-bridge/wal.h"

static int route_index(void *arg, const char *name, size_t len)
{
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: wal_fill DIR ROUTE N [DELAY_MS | MIN_MS-MAX_MS] [BODY_BYTES]\n");
        return 2;
    }
    const char *route = argv[2];
    uint64_t n = strtoull(argv[3], NULL, 10), now = clock_now_ms();
    char *dash = NULL;
    uint64_t delay = argc > 4 ? strtoull(argv[4], &dash, 10) : 3600000, spread = 0, rng = n;
    if (dash && *dash == '-') {
        uint64_t max = strtoull(dash + 1, NULL, 10);
        spread = max >= delay ? max - delay + 1 : 0;
    }
    size_t body_len = argc > 5 ? strtoul(argv[5], NULL, 10) : 16;
    struct wal_opts wo = {.dir = argv[1], .no_sync = 1};
    struct eng_opts eo = {.log = wal_log(wal_new(&wo)), .nroutes = 1, .route_index = route_index,
                          .now_ms = now};
    struct engine *e;
    uint8_t *body = calloc(1, body_len ? body_len : 1);
    static const uint8_t props[] = {0x10, 0x00, 0x02}; /* delivery-mode 2 */
    int r;

    log_set_level(LOG_LEVEL_WARN);
    if ((r = eng_open(&e, &eo)) < 0) {
        fprintf(stderr, "wal_fill: %s\n", wlog_strerror(r));
        return 1;
    }
    for (uint64_t i = 0; i < n; i++) {
        struct walrec_add a;
        memset(&a, 0, sizeof(a));
        a.enqueue_ms = now;
        a.due_ms = now + delay;
        if (spread) { /* xorshift64: the same delays every run */
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            a.due_ms += rng % spread;
        }
        a.route = route;
        a.route_len = (uint8_t)strlen(route);
        a.exchange = "fill";
        a.exchange_len = 4;
        a.routing_key = "rk";
        a.routing_key_len = 2;
        a.props = props;
        a.props_len = sizeof(props);
        a.body = body;
        a.body_len = (uint32_t)body_len;
        if ((r = eng_add(e, 0, &a, NULL)) < 0 ||
            (i % 4096 == 4095 && (r = eng_commit(e, NULL, NULL)) < 0)) {
            fprintf(stderr, "wal_fill: %s\n", wlog_strerror(r));
            return 1;
        }
    }
    if ((r = eng_commit(e, NULL, NULL)) < 0) {
        fprintf(stderr, "wal_fill: %s\n", wlog_strerror(r));
        return 1;
    }
    eng_close(e);
    free(body);
    /* the daemon syncs when it writes; a filled log must be on disk too */
    sync();
    printf("wal_fill: %llu messages for route %s in %s\n", (unsigned long long)n, route, argv[1]);
    return 0;
}
