/*
 * test_clock.c -- ISO 8601 out and in, ms since the epoch in.
 */
#include "base/clock.h"
#include "check.h"

static void test_iso_out(void)
{
    char b[CLOCK_ISO_LEN];

    CHECK_STR(clock_iso8601(0, b), "1970-01-01T00:00:00.000Z");
    CHECK_STR(clock_iso8601(1795435506789ull, b), "2026-11-23T12:05:06.789Z");
    /* ten years ahead and more still print */
    CHECK_STR(clock_iso8601(4102444800000ull, b), "2100-01-01T00:00:00.000Z");
}

static void test_parse(void)
{
    uint64_t ms;

    CHECK(clock_parse("1795435506789", &ms) == 0 && ms == 1795435506789ull);
    CHECK(clock_parse("2026-11-23T12:05:06Z", &ms) == 0 && ms == 1795435506000ull);
    CHECK(clock_parse("2026-11-23T12:05:06.789Z", &ms) == 0 && ms == 1795435506789ull);
    CHECK(clock_parse("2026-11-23T12:05:06.7Z", &ms) == 0 && ms == 1795435506700ull);
    CHECK(clock_parse("2026-11-23T12:05:06+00:00", &ms) == 0 && ms == 1795435506000ull);
    CHECK(clock_parse("", &ms) == -1);
    CHECK(clock_parse("-5", &ms) == -1);
    CHECK(clock_parse("12x", &ms) == -1);
    CHECK(clock_parse("2026-13-01T00:00:00Z", &ms) == -1);
    CHECK(clock_parse("2026-11-23T12:05:06", &ms) == -1); /* no zone: ambiguous */
    CHECK(clock_parse("2026-11-23T12:05:06+01:00", &ms) == -1);
}

static void test_now(void)
{
    uint64_t a = clock_now_ms(), m1 = clock_mono_ns(), m2 = clock_mono_ns();

    CHECK(a > 1700000000000ull);
    CHECK(m2 >= m1);
}

static const struct check_case cases[] = {
    {"iso_out", test_iso_out},
    {"parse", test_parse},
    {"now", test_now},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
