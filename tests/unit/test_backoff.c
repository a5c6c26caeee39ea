/*
 * test_backoff.c -- retry timing: doubling from min to max, +-20% jitter,
 * reset on success, and the rate-limited log count.
 *
 * The jitter comes from clock_rand64() (the kernel's randomness here), so
 * no delay is known in advance: the cases check bounds on every draw, and
 * spread over many draws, never an exact value. The spread checks allow
 * several times the expected deviation, so they fail for a broken
 * generator or a constant jitter, not by chance.
 */
#include "check.h"
#include "base/backoff.h"

#define RUNS 2000  /* backoff sequences drawn where a case wants many */
#define DRAWS 20000 /* single draws compared between two backoffs */

/* Every delay within +-20% of its step; steps double from min and stop at max. */
static void test_doubling_and_cap(void)
{
    uint64_t now = 1000000;

    for (int run = 0; run < RUNS; run++) {
        struct backoff b;
        uint64_t step = 500;

        backoff_init(&b, 500, 8000, 30000);
        CHECK(backoff_ready(&b, now));
        for (int i = 0; i < 10; i++) {
            struct backoff_step st = backoff_fail(&b, now);
            CHECK_U64(b.cur_ms, step);
            CHECK(st.retry_in_ms >= step - step / 5 && st.retry_in_ms <= step + step / 5,
                  "run %d attempt %d: %llu ms for a step of %llu", run, i,
                  (unsigned long long)st.retry_in_ms, (unsigned long long)step);
            CHECK_U64(st.retry_at, now + st.retry_in_ms);
            CHECK(!backoff_ready(&b, now + st.retry_in_ms - 1));
            CHECK(backoff_ready(&b, now + st.retry_in_ms));
            step = step * 2 > 8000 ? 8000 : step * 2;
        }
        CHECK_U64(b.failures, 10);
        backoff_reset(&b);
        CHECK(backoff_ready(&b, now) && b.failures == 0);
        CHECK(backoff_fail(&b, now).retry_in_ms <= 600, "after a reset: min_ms again");
        if (check_failures)
            return;
    }
}

/* The jitter covers its whole range, centred on the step. */
static void test_jitter_covers_range(void)
{
    struct backoff b;
    uint64_t lo = UINT64_MAX, hi = 0, sum = 0;

    backoff_init(&b, 1000, 1000, 0);
    for (int i = 0; i < DRAWS; i++) {
        uint64_t d = backoff_fail(&b, 0).retry_in_ms;
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        sum += d;
    }
    /* 401 values, uniform: the ends are reached within 20 ms over 20000 draws */
    CHECK(lo >= 800 && lo <= 820 && hi <= 1200 && hi >= 1180, "range [%llu, %llu]",
          (unsigned long long)lo, (unsigned long long)hi);
    /* mean 1000, standard error about 0.8 ms */
    CHECK(sum / DRAWS >= 990 && sum / DRAWS <= 1010, "mean %llu",
          (unsigned long long)(sum / DRAWS));
}

/* Two backoffs failing at the same moments (bridges restarted together) never retry in step. */
static void test_not_in_step(void)
{
    struct backoff a, b;
    uint64_t same = 0, apart = 0;

    backoff_init(&a, 1000, 1000, 0);
    backoff_init(&b, 1000, 1000, 0);
    for (int i = 0; i < DRAWS; i++) {
        uint64_t x = backoff_fail(&a, 0).retry_in_ms, y = backoff_fail(&b, 0).retry_in_ms;
        same += x == y;
        apart += x > y ? x - y : y - x;
    }
    /* independent draws from 401 values: equal about 1 in 401 (50 of 20000) */
    CHECK(same < DRAWS / 100, "%llu of %d retries in step", (unsigned long long)same, DRAWS);
    /* the mean distance of two uniform draws over 400 ms is 400/3, about 133 ms */
    CHECK(apart / DRAWS >= 120 && apart / DRAWS <= 147, "mean distance %llu ms",
          (unsigned long long)(apart / DRAWS));
}

static void test_log_rate_limit(void)
{
    struct backoff b;
    uint64_t now = 5000000;
    int logged = 0, i;
    uint64_t total = 0;

    backoff_init(&b, 10, 10, 30000);
    /* 100 failures one second apart: logged at 0 s, 30 s, 60 s, 90 s. */
    for (i = 0; i < 100; i++) {
        struct backoff_step st = backoff_fail(&b, now + (uint64_t)i * 1000);
        if (st.log_events) {
            logged++;
            total += st.log_events;
        }
    }
    CHECK(logged == 4, "logged %d times", logged);
    CHECK(total == 91, "the logged lines stand for %llu failures", (unsigned long long)total);
}

/* Nobody listening: the step grows to the cap and stays there; a failure
 * after the connect doubles on from the cap; the cap never passes max_ms
 * nor falls below min_ms. */
static void test_within(void)
{
    uint64_t now = 1000000;
    struct backoff b;

    backoff_init(&b, 500, 30000, 30000);
    for (int i = 0; i < 4; i++) /* 500, 1000, 2000, 4000 */
        backoff_fail(&b, now);
    CHECK_U64(b.cur_ms, 4000);
    for (int i = 0; i < 20; i++) {
        struct backoff_step st = backoff_fail_within(&b, now, 1000);
        CHECK_U64(b.cur_ms, 1000);
        CHECK(st.retry_in_ms >= 800 && st.retry_in_ms <= 1200, "attempt %d: %llu ms", i,
              (unsigned long long)st.retry_in_ms);
    }
    CHECK_U64(b.failures, 24);
    backoff_fail(&b, now); /* the broker answered, then refused the login */
    CHECK_U64(b.cur_ms, 2000);
    backoff_reset(&b);
    backoff_fail_within(&b, now, 1000); /* the first failure waits min_ms */
    CHECK_U64(b.cur_ms, 500);

    backoff_init(&b, 500, 800, 30000);
    backoff_fail_within(&b, now, 1000);
    backoff_fail_within(&b, now, 1000);
    CHECK_U64(b.cur_ms, 800); /* never past max_ms */
    backoff_init(&b, 2000, 30000, 30000);
    backoff_fail_within(&b, now, 1000);
    backoff_fail_within(&b, now, 1000);
    CHECK_U64(b.cur_ms, 2000); /* never below min_ms */
}

static void test_bad_bounds(void)
{
    struct backoff b;

    backoff_init(&b, 0, 0, 0); /* min 0 becomes 1; max below min becomes min */
    CHECK(b.min_ms == 1 && b.max_ms == 1 && b.log_interval_ms == 30000);
    CHECK(backoff_fail(&b, 0).retry_in_ms == 1);
}

static const struct check_case cases[] = {
    {"doubling_and_cap", test_doubling_and_cap},
    {"jitter_covers_range", test_jitter_covers_range},
    {"not_in_step", test_not_in_step},
    {"log_rate_limit", test_log_rate_limit},
    {"bad_bounds", test_bad_bounds},
    {"within", test_within},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
