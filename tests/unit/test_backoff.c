/*
 * test_backoff.c -- retry timing: doubling from min to max, +-20% jitter,
 * reset on success, and the rate-limited log count.
 */
#include "check.h"
#include "base/backoff.h"

static void test_doubling_and_cap(void)
{
    struct backoff b;
    uint64_t now = 1000000, expect = 500;
    int i;

    backoff_init(&b, 500, 8000, 30000, 42);
    CHECK(backoff_ready(&b, now));
    for (i = 0; i < 10; i++) {
        struct backoff_step st = backoff_fail(&b, now);
        CHECK_U64(b.cur_ms, expect);
        /* within +-20% of the nominal delay */
        CHECK(st.retry_in_ms >= expect - expect / 5 && st.retry_in_ms <= expect + expect / 5,
              "attempt %d: %llu ms for nominal %llu", i, (unsigned long long)st.retry_in_ms,
              (unsigned long long)expect);
        CHECK_U64(st.retry_at, now + st.retry_in_ms);
        CHECK(!backoff_ready(&b, now + st.retry_in_ms - 1));
        CHECK(backoff_ready(&b, now + st.retry_in_ms));
        expect = expect * 2 > 8000 ? 8000 : expect * 2;
    }
    CHECK_U64(b.failures, 10);
    backoff_reset(&b);
    CHECK(backoff_ready(&b, now) && b.failures == 0);
    CHECK_U64(backoff_fail(&b, now).retry_in_ms <= 600, 1);
}

static void test_jitter_spreads(void)
{
    struct backoff a, b;
    int i, differ = 0;

    /* Two bridges with different seeds do not retry in step. */
    backoff_init(&a, 1000, 1000, 0, 1);
    backoff_init(&b, 1000, 1000, 0, 2);
    for (i = 0; i < 20; i++)
        differ += backoff_fail(&a, 0).retry_in_ms != backoff_fail(&b, 0).retry_in_ms;
    CHECK(differ >= 15, "only %d of 20 attempts differ", differ);
}

static void test_log_rate_limit(void)
{
    struct backoff b;
    uint64_t now = 5000000;
    int logged = 0, i;
    uint64_t total = 0;

    backoff_init(&b, 10, 10, 30000, 7);
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

static void test_bad_bounds(void)
{
    struct backoff b;

    backoff_init(&b, 0, 0, 0, 0); /* min 0 becomes 1; max below min becomes min */
    CHECK(b.min_ms == 1 && b.max_ms == 1 && b.rng != 0);
    CHECK(backoff_fail(&b, 0).retry_in_ms == 1);
}

static const struct check_case cases[] = {
    {"doubling_and_cap", test_doubling_and_cap},
    {"jitter_spreads", test_jitter_spreads},
    {"log_rate_limit", test_log_rate_limit},
    {"bad_bounds", test_bad_bounds},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
