/*
 * test_duecount.c -- the "what falls due ahead" counters (duecount.h) against
 * a brute-force count of the same due times, and through the timing wheel:
 * adds, deletes and firings keep them exact.
 */
#include "check.h"
#include "testkit.h"
#include "delay-bridge/duecount.h"
#include "delay-bridge/pool.h"
#include "engine/wheel.h"

#define MIN 60000ull
#define HOUR 3600000ull
#define DAY 86400000ull

/* The shared generator (testkit.h), seeded by $TEST_SEED (default 1). */
static uint64_t rng;
static uint64_t next_rand(void)
{
    static int seeded;
    if (!seeded) {
        rng = tk_seed("test_duecount", 1);
        seeded = 1;
    }
    return tk_rand(&rng);
}

/* What a view must say for due times dues[0..n) at now. */
static void brute(const uint64_t *dues, size_t n, uint64_t now, struct duecount_view *v)
{
    uint64_t m0 = now / MIN * MIN, h0 = now / HOUR * HOUR, d0 = now / DAY * DAY;
    memset(v, 0, sizeof(*v));
    v->total = n;
    for (size_t i = 0; i < n; i++) {
        uint64_t t = dues[i];
        if (t < m0) {
            v->minutes[0]++, v->hours[0]++;
        } else {
            if ((t - m0) / MIN < DUECOUNT_MINUTES)
                v->minutes[(t - m0) / MIN]++;
            if ((t - h0) / HOUR < DUECOUNT_HOURS)
                v->hours[(t - h0) / HOUR]++;
        }
        if (t < d0)
            v->days[0]++;
        else if ((t - d0) / DAY < DUECOUNT_DAYS)
            v->days[(t - d0) / DAY]++;
        else
            v->later++;
    }
}

static void same(const struct duecount_view *a, const struct duecount_view *b, const char *what)
{
    CHECK(a->total == b->total, "%s: total %" PRIu64 " != %" PRIu64, what, a->total, b->total);
    CHECK(a->later == b->later, "%s: later %" PRIu64 " != %" PRIu64, what, a->later, b->later);
    for (int i = 0; i < DUECOUNT_MINUTES; i++)
        CHECK(a->minutes[i] == b->minutes[i], "%s: minute %d: %" PRIu64 " != %" PRIu64, what, i,
              a->minutes[i], b->minutes[i]);
    for (int i = 0; i < DUECOUNT_HOURS; i++)
        CHECK(a->hours[i] == b->hours[i], "%s: hour %d: %" PRIu64 " != %" PRIu64, what, i,
              a->hours[i], b->hours[i]);
    for (int i = 0; i < DUECOUNT_DAYS; i++)
        CHECK(a->days[i] == b->days[i], "%s: day %d: %" PRIu64 " != %" PRIu64, what, i,
              a->days[i], b->days[i]);
}

static void test_random_against_brute_force(void)
{
    enum { N = 20000 };
    static uint64_t dues[N];
    const uint64_t now = 1795000000000ull + 12345; /* 2026-11-18, mid-minute */
    struct duecount *d = duecount_new();
    struct duecount_view got, want;

    for (size_t i = 0; i < N; i++) {
        uint64_t r = next_rand();
        switch (r % 5) {
        case 0: dues[i] = now - 5 * DAY + (r >> 8) % (5 * DAY); break; /* overdue */
        case 1: dues[i] = now + (r >> 8) % (2 * HOUR); break;
        case 2: dues[i] = now + (r >> 8) % (2 * DAY); break;
        case 3: dues[i] = now + (r >> 8) % (400 * DAY); break;
        default: dues[i] = now + (r >> 8) % (200 * 365 * DAY); break; /* some beyond the span */
        }
        duecount_add(d, dues[i], +1);
    }
    duecount_view(d, now, &got);
    brute(dues, N, now, &want);
    same(&got, &want, "after adds");
    CHECK_U64(got.minute_start, now / MIN * MIN);
    CHECK_U64(got.day_start, now / DAY * DAY);

    /* remove every other one; look again an hour and a half later */
    size_t k = 0;
    for (size_t i = 0; i < N; i++) {
        if (i % 2)
            duecount_add(d, dues[i], -1);
        else
            dues[k++] = dues[i];
    }
    duecount_view(d, now + 90 * MIN, &got);
    brute(dues, k, now + 90 * MIN, &want);
    same(&got, &want, "after deletes, 90 min later");
    for (size_t i = 0; i < k; i++)
        duecount_add(d, dues[i], -1);
    duecount_view(d, now, &got);
    CHECK_U64(got.total, 0);
    /* No minute block left; 16 bytes per day the array spans remain, rounded
     * up to a power of two. It spans from the earliest day seen to
     * DUECOUNT_SPAN_DAYS (40,000) after the first one: here at most 5 +
     * 73,000 + 40,000 days (the first due may be 200 years ahead), so 2^17
     * days, 2 MiB -- 1 MiB when the first due is within ~70 years of the
     * earliest, as the daemon's are (max_delay_ms is 49.7 days by default). */
    CHECK(duecount_memory(d) <= 16 * 131072 + 1024, "empty counters keep %zu bytes", duecount_memory(d));
    duecount_free(d);
}

struct item {
    struct wheel_node n;
};
static size_t fired;
static void on_fire(void *arg, pool_handle h)
{
    (void)arg, (void)h;
    fired++;
}

static void test_wheel_keeps_counts(void)
{
    enum { N = 5000 };
    const uint64_t now = 1795000000000ull;
    static struct pool pl;
    struct pool *p = &pl;
    pool_init(p, sizeof(struct item));
    struct wheel *w = wheel_new(p, now);
    static pool_handle hs[N];
    static uint64_t dues[N];
    struct duecount_view got, want;

    for (size_t i = 0; i < N; i++) {
        hs[i] = pool_alloc(p);
        dues[i] = now + 1 + next_rand() % (3 * HOUR);
        wheel_add(w, hs[i], dues[i], i);
    }
    wheel_due_view(w, now, &got);
    brute(dues, N, now, &want);
    same(&got, &want, "wheel after adds");
    /* delete the first 1000, fire the first hour */
    for (size_t i = 0; i < 1000; i++)
        wheel_del(w, hs[i]);
    wheel_advance(w, now + HOUR, on_fire, NULL);
    size_t k = 0;
    for (size_t i = 1000; i < N; i++)
        if (dues[i] > now + HOUR)
            dues[k++] = dues[i];
    CHECK_U64(fired, N - 1000 - k);
    wheel_due_view(w, now + HOUR, &got);
    brute(dues, k, now + HOUR, &want);
    same(&got, &want, "wheel after deletes and an hour of firing");
    CHECK_U64(got.total, wheel_count(w));
    wheel_free(w);
    pool_destroy(p);
}

static const struct check_case cases[] = {
    {"random_against_brute_force", test_random_against_brute_force},
    {"wheel_keeps_counts", test_wheel_keeps_counts},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
