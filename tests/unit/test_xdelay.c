/*
 * test_xdelay.c -- the rules of xdelay.c on values clients really send:
 * decimal text (php-amqplib's floats), py-amqp's signed 'L' read unsigned,
 * amqp091-go's wrapped uint32, and the absolute due times (x-delay-until,
 * x-opt-delivery-time) in every form, with text ending at a guard page.
 * (test_broker_msg covers the mapping from rabbitmq-c's field kinds.)
 */
#define _GNU_SOURCE /* timegm */
#include "delay-bridge/xdelay.h"

#include <time.h>

#include "check.h"
#include "guard.h"
#include "testkit.h"

#define BIG UINT64_MAX
#define NOW_MS 1764000000000ull /* 2025-11-24T16:00:00.000Z */

static struct xdelay_value text(const char *s)
{
    struct xdelay_value v = {0};
    size_t n = strlen(s);
    v.kind = XDELAY_TEXT;
    v.text.p = (const char *)at_guard((const uint8_t *)s, n); /* ends at an unreadable page */
    v.text.len = n;
    return v;
}

static struct xdelay_value ival(int64_t i)
{
    struct xdelay_value v = {0};
    v.kind = XDELAY_INT;
    v.i = i;
    return v;
}

static struct xdelay_value uval(uint64_t u)
{
    struct xdelay_value v = {0};
    v.kind = XDELAY_UINT;
    v.u = u;
    return v;
}

static struct xdelay_value fval(double f)
{
    struct xdelay_value v = {0};
    v.kind = XDELAY_FLOAT;
    v.f = f;
    return v;
}

static void expect_delay(int line, const char *what, struct xdelay_value v, uint64_t max,
                         enum xdelay_status want, uint64_t want_ms)
{
    uint64_t ms = 777;
    enum xdelay_status s = xdelay_eval(&v, max, &ms);
    if (s != want || ms != want_ms)
        check_failed(__FILE__, line, what, "x-delay: got status %d delay %" PRIu64
                     ", want %d %" PRIu64, s, ms, want, want_ms);
}
#define DELAY(v, max, want, ms) expect_delay(__LINE__, #v, v, max, want, ms)

static void expect_until(int line, const char *what, struct xdelay_value v, int which,
                         uint64_t max, enum xdelay_status want, uint64_t want_ms)
{
    uint64_t ms = 777;
    enum xdelay_status s = xdelay_until_eval(&v, which, NOW_MS, max, &ms);
    if (s != want || ms != want_ms)
        check_failed(__FILE__, line, what, "until: got status %d delay %" PRIu64
                     ", want %d %" PRIu64, s, ms, want, want_ms);
}
#define UNTIL(v, max, want, ms) expect_until(__LINE__, #v, v, XDELAY_H_UNTIL, max, want, ms)

/* php-amqplib writes a PHP float as its string: "7000.5", "1.0E+25"; people write " 2.5e3 ". */
static void test_decimal_text(void)
{
    DELAY(text("7000.5"), BIG, XDELAY_OK, 7000);
    DELAY(text("7000.0"), BIG, XDELAY_OK, 7000);
    DELAY(text(" 2.5e3 "), BIG, XDELAY_OK, 2500);
    DELAY(text("2.5E3"), BIG, XDELAY_OK, 2500);
    DELAY(text("2.5e+3"), BIG, XDELAY_OK, 2500);
    DELAY(text("25000e-1"), BIG, XDELAY_OK, 2500);
    DELAY(text("1.0E+15"), BIG, XDELAY_OK, 1000000000000000ull);
    DELAY(text("1.0E+25"), BIG, XDELAY_EINVALID, 0);
    DELAY(text(".5e4"), BIG, XDELAY_OK, 5000);
    DELAY(text("5."), BIG, XDELAY_OK, 5);
    DELAY(text("+12.999"), BIG, XDELAY_OK, 12);
    DELAY(text("-12.999"), BIG, XDELAY_NOW, 0);
    DELAY(text("0.999999999999999999999999"), BIG, XDELAY_NOW, 0); /* exact: a double says 1 */
    DELAY(text("9007199254740993.5"), BIG, XDELAY_OK, 9007199254740993ull); /* exact: a double loses it */
    DELAY(text("9223372036854775807.9"), BIG, XDELAY_OK, (uint64_t)INT64_MAX);
    DELAY(text("9223372036854775808.0"), BIG, XDELAY_EINVALID, 0);
    DELAY(text("-9223372036854775808.9"), BIG, XDELAY_NOW, 0);
    DELAY(text("0.00000000000000000000000000000000001e40"), BIG, XDELAY_OK, 100000);
    DELAY(text("000000000000000000000000000000001500"), BIG, XDELAY_OK, 1500);
    DELAY(text("1e999999999999999999999"), BIG, XDELAY_EINVALID, 0); /* exponent saturates */
    DELAY(text("1e-999999999999999999999"), BIG, XDELAY_NOW, 0);
    DELAY(text("0e999999999"), BIG, XDELAY_NOW, 0);
    DELAY(text("5000.5"), 5000, XDELAY_OK, 5000);
    DELAY(text("5001.5"), 5000, XDELAY_ETOOBIG, 0);
    const char *bad[] = {"", " ", ".", "e3", ".e3", "1e", "1e+", "1.5.0", "1,5", "0x10", "inf",
                         "INF", "NAN", "-INF", "1 e3", "1e 3", "1. 5", "\t5", "5\n", "+", "--5",
                         "1e3.0", "1_000", "１"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t ms = 9;
        struct xdelay_value v = text(bad[i]);
        CHECK(xdelay_eval(&v, BIG, &ms) == XDELAY_EINVALID && ms == 0, "\"%s\"", bad[i]);
    }
}

/* py-amqp sends 'L' signed; rabbitmq-c reads it unsigned. amqp091-go wraps ints through uint32. */
static void test_wire_quirks(void)
{
    DELAY(uval(5000), BIG, XDELAY_OK, 5000);
    DELAY(uval((uint64_t)-5000), BIG, XDELAY_NOW, 0);     /* py-amqp -5000 */
    DELAY(uval(UINT64_MAX), BIG, XDELAY_NOW, 0);          /* py-amqp -1 */
    DELAY(uval((uint64_t)INT64_MAX + 1), BIG, XDELAY_NOW, 0);
    /* amqp091-go: int(3_000_000_000) as uint32 read as int32 is -1294967296: at once, as the plugin */
    DELAY(ival((int32_t)(uint32_t)3000000000u), 4294967295u, XDELAY_NOW, 0);
    /* and what the bridge writes on delivery (-delay) is never held again */
    DELAY(ival(-5000), 4294967295u, XDELAY_NOW, 0);
    DELAY(ival(INT32_MIN), 4294967295u, XDELAY_NOW, 0);
}

static void test_until_numbers(void)
{
    const uint64_t M = 4294967295u;
    UNTIL(ival((int64_t)NOW_MS + 1500), M, XDELAY_OK, 1500);
    UNTIL(uval(NOW_MS + 1500), M, XDELAY_OK, 1500);
    UNTIL(ival((int64_t)NOW_MS), M, XDELAY_NOW, 0);      /* now is not later */
    UNTIL(ival((int64_t)NOW_MS - 1), M, XDELAY_NOW, 0);  /* the past: at once */
    UNTIL(ival((int64_t)NOW_MS + (int64_t)M), M, XDELAY_OK, M);
    UNTIL(ival((int64_t)NOW_MS + (int64_t)M + 1), M, XDELAY_UNTIL_ETOOBIG, 0);
    UNTIL(ival(100000000000LL), M, XDELAY_NOW, 0);       /* the floor itself: 1973, past */
    UNTIL(ival(99999999999LL), M, XDELAY_UNTIL_EINVALID, 0); /* epoch seconds: refused */
    UNTIL(ival((int64_t)(NOW_MS / 1000) + 60), M, XDELAY_UNTIL_EINVALID, 0);
    UNTIL(ival(0), M, XDELAY_UNTIL_EINVALID, 0);
    UNTIL(ival(-1), M, XDELAY_UNTIL_EINVALID, 0);
    UNTIL(ival(INT64_MAX), BIG, XDELAY_OK, (uint64_t)INT64_MAX - NOW_MS);
    UNTIL(uval(UINT64_MAX), M, XDELAY_UNTIL_EINVALID, 0); /* py-amqp's -1 */
    UNTIL(fval((double)NOW_MS + 1500.25), M, XDELAY_OK, 1501); /* rounded up */
    UNTIL(fval((double)NOW_MS + 1500.0), M, XDELAY_OK, 1500);
    UNTIL(fval(1e300), M, XDELAY_UNTIL_EINVALID, 0);
    UNTIL(text("1764000001500"), M, XDELAY_OK, 1500);
    UNTIL(text("1764000001500.1"), M, XDELAY_OK, 1501);
    UNTIL(text("1.7640000015e12"), M, XDELAY_OK, 1500);
    struct xdelay_value d = {0};
    d.kind = XDELAY_DECIMAL; /* |value| < 2^31: never an epoch ms */
    d.dec.value = INT32_MAX;
    UNTIL(d, M, XDELAY_UNTIL_EINVALID, 0);
    uint64_t ms;
    struct xdelay_value ts = {0};
    ts.kind = XDELAY_TIMESTAMP;
    ts.u = NOW_MS / 1000 + 30;
    UNTIL(ts, M, XDELAY_OK, 30000);
    CHECK(xdelay_until_eval(&ts, XDELAY_H_DELIVERY_TIME, NOW_MS, M, &ms) == XDELAY_OK &&
          ms == 30999); /* RabbitMQ cut the AMQP 1.0 ms off: the last ms of that second */
    ts.u = 0;
    UNTIL(ts, M, XDELAY_NOW, 0);
    ts.u = UINT64_MAX;
    UNTIL(ts, BIG, XDELAY_UNTIL_EINVALID, 0);
    struct xdelay_value other = {0};
    other.kind = XDELAY_OTHER;
    UNTIL(other, M, XDELAY_UNTIL_EINVALID, 0);
    /* x-opt-delivery-time reports its own name */
    struct xdelay_value bad = ival(5);
    CHECK(xdelay_until_eval(&bad, XDELAY_H_DELIVERY_TIME, NOW_MS, M, &ms) == XDELAY_DT_EINVALID);
    struct xdelay_value far = ival((int64_t)NOW_MS + (int64_t)M + 1);
    CHECK(xdelay_until_eval(&far, XDELAY_H_DELIVERY_TIME, NOW_MS, M, &ms) == XDELAY_DT_ETOOBIG);
    CHECK(xdelay_until_eval(NULL, XDELAY_H_UNTIL, NOW_MS, M, &ms) == XDELAY_NOW && ms == 0);
    CHECK_STR(xdelay_strerror(XDELAY_UNTIL_ETOOBIG), "x-delay-until beyond max_delay_ms");
    CHECK_STR(xdelay_strerror(XDELAY_DT_EINVALID), "invalid x-opt-delivery-time");
    CHECK_STR(xdelay_strerror(XDELAY_DT_ETOOBIG), "x-opt-delivery-time beyond max_delay_ms");
    for (int s = XDELAY_OK; s <= XDELAY_DT_ETOOBIG; s++)
        CHECK(xdelay_invalid((enum xdelay_status)s) ==
                  (s != XDELAY_OK && s != XDELAY_NOW && s != XDELAY_EKEY), "status %d", s);
}

static void test_rfc3339(void)
{
    const uint64_t M = BIG;
    UNTIL(text("2025-11-24T16:00:07.250Z"), M, XDELAY_OK, 7250);
    UNTIL(text("2025-11-24T16:00:07Z"), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24t16:00:07z"), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24 16:00:07Z"), M, XDELAY_OK, 7000);
    UNTIL(text("  2025-11-24T16:00:07Z  "), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24T17:00:07+01:00"), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24T10:30:07-05:30"), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24T16:00:07.2Z"), M, XDELAY_OK, 7200);
    UNTIL(text("2025-11-24T16:00:07.0001Z"), M, XDELAY_OK, 7001); /* never early */
    UNTIL(text("2025-11-24T16:00:07.000000000Z"), M, XDELAY_OK, 7000);
    UNTIL(text("2025-11-24T16:00:07.999999Z"), M, XDELAY_OK, 8000);
    UNTIL(text("2025-11-24T15:59:60Z"), M, XDELAY_NOW, 0);  /* a leap second: 16:00:00 */
    UNTIL(text("2025-11-24T15:59:59.999Z"), M, XDELAY_NOW, 0);
    UNTIL(text("1970-01-01T00:00:00Z"), M, XDELAY_NOW, 0);
    UNTIL(text("0000-01-01T00:00:00Z"), M, XDELAY_NOW, 0);
    UNTIL(text("2026-12-01T08:00:00.000Z"), M, XDELAY_OK, 1796112000000ull - NOW_MS);
    UNTIL(text("9999-12-31T23:59:59.999Z"), M, XDELAY_OK, 253402300799999ull - NOW_MS);
    UNTIL(text("2028-02-29T00:00:00Z"), M, XDELAY_OK, 1835395200000ull - NOW_MS);
    UNTIL(text("2026-12-01T08:00:00.000Z"), 86400000, XDELAY_UNTIL_ETOOBIG, 0);
    const char *bad[] = {
        "2025-11-24", "2025-11-24T16:00Z", "2025-11-24T16:00:07", "2025-13-01T00:00:00Z",
        "2025-00-01T00:00:00Z", "2025-02-29T00:00:00Z", "2100-02-29T00:00:00Z",
        "2025-04-31T00:00:00Z", "2025-11-24T24:00:00Z", "2025-11-24T16:60:00Z",
        "2025-11-24T16:00:61Z", "2025-11-24T16:00:07.Z", "2025-11-24T16:00:07+0100",
        "2025-11-24T16:00:07+24:00", "2025-11-24T16:00:07+01:60", "25-11-24T16:00:07Z",
        "2025-1-24T16:00:07Z", "2025-11-24X16:00:07Z", "2025-11-24T16:00:07ZZ",
        "2025-11-24T16:00:07 Z", "+2025-11-24T16:00:07Z", "2025-11-24T16:00:07.5+01",
        "2025-11-24T16:00:07\t", "tomorrow", "", " ", "1764000001500x",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t ms = 9;
        struct xdelay_value v = text(bad[i]);
        CHECK(xdelay_until_eval(&v, XDELAY_H_UNTIL, NOW_MS, M, &ms) == XDELAY_UNTIL_EINVALID &&
                  ms == 0, "\"%s\"", bad[i]);
    }
}

/* Any time from 1973 to 9999, written with libc's gmtime_r at a random offset and fraction, reads back exactly. */
static void test_rfc3339_random(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int n = 0; n < 200000; n++) {
        uint64_t a = tk_rand(&x), b = tk_rand(&x);
        int64_t due = 100000000000LL + (int64_t)(a % (253402300799999ull - 100000000000ull));
        int off_min = (int)(b % (2 * 1440 - 1)) - 1439; /* -23:59 .. +23:59 */
        int digits = (int)((b >> 16) % 10);               /* 0 = no fraction, else 1..9 digits */
        int64_t shown = due + (int64_t)off_min * 60000;   /* local time at that offset */
        time_t secs = (time_t)(shown >= 0 ? shown / 1000 : (shown - 999) / 1000);
        int msec = (int)(shown - (int64_t)secs * 1000);
        struct tm tm;
        if (!gmtime_r(&secs, &tm) || tm.tm_year + 1900 > 9999 || tm.tm_year + 1900 < 0)
            continue;
        char buf[64];
        int len = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        int64_t want = due;
        if (digits) {
            char f[16];
            snprintf(f, sizeof f, "%03d%06u", msec, (unsigned)((b >> 24) % 1000000));
            len += snprintf(buf + len, sizeof buf - (size_t)len, ".%.*s", digits, f);
            /* fewer than 3 digits cut the ms off (earlier); more may round up */
            int64_t cut = digits >= 3 ? msec : msec - msec % (digits == 1 ? 100 : 10);
            int up = 0;
            for (int k = 3; k < digits; k++)
                up |= f[k] != '0';
            want = due - msec + cut + up;
        } else {
            want = due - msec;
        }
        if (off_min == 0)
            snprintf(buf + len, sizeof buf - (size_t)len, "Z");
        else
            snprintf(buf + len, sizeof buf - (size_t)len, "%c%02d:%02d", off_min < 0 ? '-' : '+',
                     abs(off_min) / 60, abs(off_min) % 60);
        uint64_t ms;
        struct xdelay_value v = text(buf);
        enum xdelay_status s = xdelay_until_eval(&v, XDELAY_H_UNTIL, 0, BIG, &ms);
        CHECK(s == XDELAY_OK && ms == (uint64_t)want, "%s: status %d got %" PRIu64 " want %" PRId64,
              buf, s, ms, want);
        if (check_failures)
            return;
    }
}

static const struct check_case cases[] = {
    {"decimal_text", test_decimal_text},
    {"wire_quirks", test_wire_quirks},
    {"until_numbers", test_until_numbers},
    {"rfc3339", test_rfc3339},
    {"rfc3339_random", test_rfc3339_random},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
