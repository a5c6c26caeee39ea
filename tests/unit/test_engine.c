/*
 * test_engine.c -- the engine without a broker: ingest, group commit, fire
 * in due order, payload read back from disk, DONE, crash and recovery,
 * retry, unknown routes, compaction through the engine.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/engine.h"
#include "delay-bridge/log.h"

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

static char dir[256];

static int route_index(void *arg, const char *name, size_t len)
{
    static const char *names[] = {"orders", "rates"};
    int known = arg ? *(int *)arg : 2;

    for (int i = 0; i < known; i++)
        if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0)
            return i;
    return -1;
}

static struct engine *open_engine(uint64_t now, int *known_routes, uint64_t segment_bytes)
{
    struct eng_opts o;
    struct engine *e = NULL;

    memset(&o, 0, sizeof(o));
    o.wal.dir = dir;
    o.wal.no_sync = 1;
    o.wal.segment_bytes = segment_bytes;
    o.route_index = route_index;
    o.route_arg = known_routes;
    o.now_ms = now;
    int r = eng_open(&e, &o);
    if (r < 0) {
        fprintf(stderr, "eng_open: %s\n", wal_strerror(r));
        exit(1);
    }
    return e;
}

static void add(struct engine *e, uint16_t route, uint64_t now, uint64_t delay, const char *body,
                size_t body_len)
{
    struct walrec_add a;
    static const uint8_t props[] = {0x90, 0x00, 0x10, 'a', 'p', 'p', 'l', 'i', 'c', 'a',
                                    't',  'i',  'o',  'n', '/', 'j', 's', 'o', 'n', 0x02};

    memset(&a, 0, sizeof(a));
    a.due_ms = now + delay;
    a.enqueue_ms = now;
    a.route = route == 0 ? "orders" : "rates";
    a.route_len = (uint8_t)strlen(a.route);
    a.exchange = "orders.delayed";
    a.exchange_len = 14;
    a.routing_key = "order.close";
    a.routing_key_len = 11;
    a.props = props;
    a.props_len = sizeof(props);
    a.body = (const uint8_t *)body;
    a.body_len = (uint32_t)body_len;
    CHECK(eng_add(e, route, &a, NULL) == 0);
}

/* Collects fired handles. */
struct fired {
    pool_handle h[4096];
    uint16_t route[4096];
    int n;
};

static void on_fire(void *arg, pool_handle h, uint16_t route)
{
    struct fired *f = arg;

    if (f->n < 4096) {
        f->h[f->n] = h;
        f->route[f->n] = route;
    }
    f->n++;
}

static void body_of(struct engine *e, pool_handle h, char *out, size_t len)
{
    struct walrec_add a;

    CHECK(eng_load(e, h, &a) == 0);
    snprintf(out, len, "%.*s", (int)a.body_len, (const char *)a.body);
}

static void rm_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[600];

    if (!d)
        return;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

static void test_due_order_and_payload(void)
{
    uint64_t t0 = 1700000000000ull;
    struct engine *e = open_engine(t0, NULL, 0);
    struct fired f = {0};
    char body[64];

    add(e, 0, t0, 3000, "three", 5);
    add(e, 0, t0, 1000, "one", 3);
    add(e, 1, t0, 2000, "two", 3);
    add(e, 0, t0, 1000, "one-bis", 7); /* same due as "one": must follow it */
    CHECK(eng_dirty(e));
    /* Nothing fires before the commit, even when overdue. */
    CHECK(eng_advance(e, t0 + 500, on_fire, &f) == 0);
    CHECK(eng_commit(e) == 0);
    CHECK(!eng_dirty(e));
    CHECK(eng_next_event(e) <= t0 + 1000);
    CHECK(eng_advance(e, t0 + 999, on_fire, &f) == 0); /* never early */
    CHECK(eng_advance(e, t0 + 2000, on_fire, &f) == 3);
    CHECK(f.n == 3);
    body_of(e, f.h[0], body, sizeof(body));
    CHECK(strcmp(body, "one") == 0);
    body_of(e, f.h[1], body, sizeof(body));
    CHECK(strcmp(body, "one-bis") == 0);
    body_of(e, f.h[2], body, sizeof(body));
    CHECK(strcmp(body, "two") == 0);
    CHECK(f.route[2] == 1);
    eng_done(e, f.h[0]);
    eng_done(e, f.h[1]);
    /* f.h[2] stays FIRED: not confirmed when we "crash". */
    CHECK(eng_commit(e) == 0);
    eng_close(e);

    /* Recovery: "two" (fired, never done) and "three" come back; done ones do not. */
    e = open_engine(t0 + 2500, NULL, 0);
    struct eng_stats s;
    eng_get_stats(e, &s);
    CHECK(s.held == 2);
    f.n = 0;
    CHECK(eng_advance(e, t0 + 2500, on_fire, &f) == 1); /* overdue "two" at once */
    body_of(e, f.h[0], body, sizeof(body));
    CHECK(strcmp(body, "two") == 0);
    eng_done(e, f.h[0]);
    CHECK(eng_advance(e, t0 + 3000, on_fire, &f) == 1);
    body_of(e, f.h[1], body, sizeof(body));
    CHECK(strcmp(body, "three") == 0);
    /* Publish failed: retry later; it keeps its id. */
    eng_retry(e, f.h[1], t0 + 4000);
    CHECK(eng_advance(e, t0 + 3999, on_fire, &f) == 0);
    CHECK(eng_advance(e, t0 + 4000, on_fire, &f) == 1);
    eng_done(e, f.h[2]);
    CHECK(eng_commit(e) == 0);
    eng_get_stats(e, &s);
    CHECK(s.held == 0);
    eng_close(e);

    e = open_engine(t0 + 5000, NULL, 0);
    eng_get_stats(e, &s);
    CHECK(s.held == 0);
    eng_close(e);
    rm_dir();
}

static void test_overdue_in_due_order_after_restart(void)
{
    uint64_t t0 = 1700000000000ull;
    struct engine *e;
    struct fired f = {0};
    char body[64], want[64];
    int i;

    CHECK(mkdir(dir, 0700) == 0 || 1);
    e = open_engine(t0, NULL, 0);
    /* Appended in reverse due order; the bridge is then down for an hour. */
    for (i = 0; i < 100; i++) {
        snprintf(body, sizeof(body), "m%03d", 99 - i);
        add(e, 0, t0, (uint64_t)(99 - i) * 1000, body, strlen(body));
    }
    CHECK(eng_commit(e) == 0);
    eng_close(e);
    e = open_engine(t0 + 3600000, NULL, 0);
    CHECK(eng_advance(e, t0 + 3600000, on_fire, &f) == 100);
    for (i = 0; i < 100 && i < f.n; i++) {
        snprintf(want, sizeof(want), "m%03d", i);
        body_of(e, f.h[i], body, sizeof(body));
        CHECK(strcmp(body, want) == 0);
    }
    eng_close(e);
    rm_dir();
}

static void test_unknown_route_kept(void)
{
    uint64_t t0 = 1700000000000ull;
    int one_route = 1;
    struct engine *e = open_engine(t0, NULL, 0);
    struct fired f = {0};
    struct eng_stats s;

    add(e, 1, t0, 10, "rate", 4); /* route "rates" */
    add(e, 0, t0, 10, "order", 5);
    CHECK(eng_commit(e) == 0);
    eng_close(e);

    /* Restart with "rates" removed from the configuration: held, never fired. */
    e = open_engine(t0 + 100, &one_route, 0);
    CHECK(eng_advance(e, t0 + 100, on_fire, &f) == 1);
    eng_get_stats(e, &s);
    CHECK(s.held == 2 && s.orphaned == 1);
    eng_done(e, f.h[0]);
    CHECK(eng_commit(e) == 0);
    eng_close(e);

    /* Route restored: the message is still there. */
    e = open_engine(t0 + 200, NULL, 0);
    f.n = 0;
    CHECK(eng_advance(e, t0 + 200, on_fire, &f) == 1);
    CHECK(f.n == 1 && f.route[0] == 1);
    eng_close(e);
    rm_dir();
}

static void test_compaction_keeps_long_delays(void)
{
    uint64_t t0 = 1700000000000ull, now = t0;
    struct engine *e = open_engine(t0, NULL, 64 << 10); /* 64 KiB segments */
    struct fired f;
    struct eng_stats s;
    char body[200];
    int i, round, more;

    memset(body, 'x', sizeof(body));
    /* One long-delay message per round, among many short ones that complete. */
    for (round = 0; round < 40; round++) {
        snprintf(body, sizeof(body), "long-%02d", round);
        add(e, 0, now, 86400000ull * 2, body, 180);
        for (i = 0; i < 50; i++)
            add(e, 1, now, 1, body, 180);
        CHECK(eng_commit(e) == 0);
        now += 10;
        memset(&f, 0, sizeof(f));
        eng_advance(e, now, on_fire, &f);
        CHECK(f.n == 50);
        for (i = 0; i < f.n && i < 4096; i++)
            eng_done(e, f.h[i]);
        CHECK(eng_commit(e) == 0);
        do {
            more = eng_maintain(e, 1 << 20);
            CHECK(more >= 0);
            CHECK(eng_commit(e) == 0);
        } while (more > 0);
        eng_maintain(e, 1 << 20);
    }
    eng_get_stats(e, &s);
    CHECK(s.held == 40);
    /* Disk stays within about 2x live data plus a segment or two. */
    CHECK(s.wal.disk_bytes <= 2 * s.wal.live_bytes + 3 * (64 << 10));
    if (s.wal.disk_bytes > 2 * s.wal.live_bytes + 3 * (64 << 10))
        fprintf(stderr, "disk=%llu live=%llu segments=%llu\n",
                (unsigned long long)s.wal.disk_bytes, (unsigned long long)s.wal.live_bytes,
                (unsigned long long)s.wal.segments);
    eng_close(e);

    /* Every long-delay message survives compaction and restart, body intact. */
    e = open_engine(now + 86400000ull * 3, NULL, 64 << 10);
    memset(&f, 0, sizeof(f));
    CHECK(eng_advance(e, now + 86400000ull * 3, on_fire, &f) == 40);
    for (i = 0; i < 40 && i < f.n; i++) {
        char want[32];
        snprintf(want, sizeof(want), "long-%02d", i);
        body_of(e, f.h[i], body, sizeof(body));
        CHECK(strncmp(body, want, strlen(want)) == 0);
    }
    eng_close(e);
    rm_dir();
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_engine.%d", (int)getpid());
    log_set_level(LOG_WARN);
    test_due_order_and_payload();
    test_overdue_in_due_order_after_restart();
    test_unknown_route_kept();
    test_compaction_keeps_long_delays();
    if (failures) {
        fprintf(stderr, "test_engine: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_engine: ok\n");
    return 0;
}
