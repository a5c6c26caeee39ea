/*
 * xdelay.c -- what a delay header's value means.
 *
 * The rules, on a value already taken out of its wire encoding (the AMQP
 * side, broker_msg.c, maps rabbitmq-c's field kinds onto struct xdelay_value):
 *
 * x-delay (xdelay_eval), a delay in ms:
 *
 *   kind       rule                                          e.g.
 *   INT        the integer                                   -20 -> NOW
 *   UINT       the 64 bits read as a signed integer: what    2^64-5000 -> -5000 -> NOW
 *              py-amqp (kombu, Celery) meant by its 'L'
 *              (signed per RabbitMQ's field table; rabbitmq-c
 *              reads 'L' as unsigned)
 *   FLOAT      truncated toward zero;                        2.9 -> 2
 *              NaN, inf, outside int64 invalid
 *   DECIMAL    value / 10^scale truncated                    s=2 v=12345 -> 123
 *   TEXT       a decimal number, truncated toward zero,      " 7000.5 " -> 7000
 *              exactly (no rounding through a double):       "2.5e3" -> 2500
 *              [ ]*[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?[ ]*     "1.0E+4" -> 10000 (PHP)
 *              D an ASCII digit, spaces only U+0020 (no      "0x10", "inf", "1,5",
 *              tabs, no other whitespace); the truncated      "\t5", "" -> invalid
 *              value must fit int64
 *   TIMESTAMP  invalid (a point in time is not a delay)
 *   OTHER      invalid (bool, bytes, void, table, array)
 *
 * Then, on the int64 value v: v <= 0 -> XDELAY_NOW, v > max_delay_ms ->
 * XDELAY_ETOOBIG, else XDELAY_OK. No value at all (header missing) is NOW.
 *
 * A negative 32-bit x-delay stays NOW (the plugin's rule) even though
 * amqp091-go writes a Go int through a uint32 cast, so that its delays of
 * 2^31 ms (24.8 days) and more arrive negative: the plugin and this bridge
 * both write x-delay = -delay on what they deliver, so a negative value is
 * above all a message being republished (retries, shovels, a target that
 * routes back to an ingress), which must not be held again for 2^32 - d ms.
 * amqp091-go users pass an int64 for long delays (README, clients).
 *
 * x-delay-until / x-opt-delivery-time (xdelay_until_eval), a due time:
 *
 *   kind       rule
 *   TIMESTAMP  AMQP timestamp: seconds since the epoch, x 1000 (+ 999 for
 *              x-opt-delivery-time: RabbitMQ cut an AMQP 1.0 timestamp in ms
 *              down to seconds, so the last ms of that second, never early)
 *   INT UINT   epoch ms (UINT read as signed, as above); below 10^11
 *              (1973-03-03) invalid: that is epoch seconds sent where
 *              milliseconds were meant, which would otherwise deliver at once
 *   FLOAT DECIMAL  epoch ms, rounded UP to the ms; same 10^11 floor
 *   TEXT       RFC 3339 date-time, YYYY-MM-DD(T|t| )hh:mm:ss(.f+)?(Z|z|+hh:mm|-hh:mm),
 *              surrounding spaces allowed, fractions below the ms rounded
 *              up, second 60 (a leap second) read as the next second; or a
 *              decimal number as for x-delay, read as epoch ms
 *   OTHER      invalid
 *
 * Then, with due the time in epoch ms: due <= now -> NOW (a time in the
 * past means at once), due - now > max_delay_ms -> ETOOBIG, else OK with
 * delay = due - now, so the caller's now + delay is due itself: the due time
 * stored in the WAL is the one asked for, to the ms, never earlier.
 */
#include "delay-bridge/xdelay.h"

#include <math.h>
#include <stddef.h>

#define UNTIL_FLOOR_MS 100000000000LL /* 10^11 ms: 1973-03-03, 10^11 s is year 5138 */

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Text to int64, truncated toward zero; *frac set when a nonzero digit was
 * cut off (the caller rounds up with it). 0, or -1 when the text does not
 * match the grammar above or the truncated value is outside int64.
 *
 * Exact: the digits are taken from the text as a virtual digit string
 * (integer digits, then fraction digits) whose decimal point the exponent
 * moves; the integer part is the first pt significant digits.
 */
static int parse_number(const char *s, size_t len, int64_t *out, int *frac)
{
    size_t i = 0, a, nint, c = 0, nfrac = 0;
    int neg = 0;
    long long exp = 0;

    *frac = 0;
    while (i < len && s[i] == ' ')
        i++;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    a = i;
    while (i < len && is_digit(s[i]))
        i++;
    nint = i - a;
    if (i < len && s[i] == '.') {
        c = ++i;
        while (i < len && is_digit(s[i]))
            i++;
        nfrac = i - c;
    }
    if (nint + nfrac == 0)
        return -1;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0;
        size_t e0;
        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        e0 = i;
        while (i < len && is_digit(s[i])) {
            if (exp < 1000000) /* saturate: 10^1000000 is out of range either way */
                exp = exp * 10 + (s[i] - '0');
            i++;
        }
        if (i == e0)
            return -1;
        if (eneg)
            exp = -exp;
    }
    while (i < len && s[i] == ' ')
        i++;
    if (i != len)
        return -1;

    /* the virtual digit string: k < nint -> s[a + k], then s[c + k - nint] */
    size_t n = nint + nfrac, z = 0;
#define DIGIT(k) ((k) < nint ? s[a + (k)] : s[c + (k) - nint])
    while (z < n && DIGIT(z) == '0')
        z++;
    if (z == n) {
        *out = 0;
        return 0;
    }
    /* significant digits before the point: nint - z + exp (may be <= 0) */
    long long pt = (long long)nint - (long long)z + exp;
    if (pt > 19)
        return -1; /* >= 10^19 > INT64_MAX */
    uint64_t mag = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (long long k = 0; k < pt; k++) {
        size_t idx = z + (size_t)k;
        uint64_t d = idx < n ? (uint64_t)(DIGIT(idx) - '0') : 0;
        if (mag > (limit - d) / 10)
            return -1;
        mag = mag * 10 + d;
    }
    for (size_t k = pt > 0 ? z + (size_t)pt : z; k < n && !*frac; k++)
        *frac = DIGIT(k) != '0';
#undef DIGIT
    if (neg)
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    else
        *out = (int64_t)mag;
    return 0;
}

/* Float to int64 truncated toward zero; -1 for NaN, inf and out of range. */
static int from_double(double d, int64_t *out)
{
    if (isnan(d) || isinf(d))
        return -1;
    /*
     * -2^63 and 2^63 are exact in a double, and no double lies strictly
     * between -2^63 - 1 and -2^63, so this is "trunc(d) fits in int64".
     * The conversion itself truncates toward zero (C11 6.3.1.4).
     */
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
        return -1;
    *out = (int64_t)d;
    return 0;
}

/* A number of any kind to int64 truncated toward zero; *frac as in parse_number. */
static int value_to_int64(const struct xdelay_value *v, int64_t *out, int *frac)
{
    *frac = 0;
    switch (v->kind) {
    case XDELAY_INT:
        *out = v->i;
        return 0;
    case XDELAY_UINT:
        *out = (int64_t)v->u; /* two's complement: py-amqp's signed 'L' */
        return 0;
    case XDELAY_FLOAT:
        if (from_double(v->f, out) < 0)
            return -1;
        *frac = (double)*out != v->f;
        return 0;
    case XDELAY_DECIMAL: {
        int64_t x = v->dec.value;
        /* |x| < 2^31 < 10^10: from scale 10 on the result is 0 */
        for (unsigned s = v->dec.scale; s > 0 && x != 0; s--) {
            *frac |= x % 10 != 0;
            x /= 10;
        }
        *out = x;
        return 0;
    }
    case XDELAY_TEXT:
        if (v->text.len > 0 && !v->text.p)
            return -1;
        return parse_number(v->text.p, v->text.len, out, frac);
    default:
        return -1;
    }
}

enum xdelay_status xdelay_eval(const struct xdelay_value *v, uint64_t max_delay_ms,
                               uint64_t *delay_ms)
{
    int64_t x;
    int frac;

    *delay_ms = 0;
    if (!v)
        return XDELAY_NOW;
    if (value_to_int64(v, &x, &frac) < 0)
        return XDELAY_EINVALID;
    if (x <= 0)
        return XDELAY_NOW;
    if ((uint64_t)x > max_delay_ms)
        return XDELAY_ETOOBIG;
    *delay_ms = (uint64_t)x;
    return XDELAY_OK;
}

/* ---- RFC 3339 ------------------------------------------------------------------ */

/* n digits at s[*i] as a number, or -1. */
static int digits(const char *s, size_t len, size_t *i, int n)
{
    int v = 0;
    for (int k = 0; k < n; k++, (*i)++) {
        if (*i >= len || !is_digit(s[*i]))
            return -1;
        v = v * 10 + (s[*i] - '0');
    }
    return v;
}

static int expect_char(const char *s, size_t len, size_t *i, char c)
{
    if (*i >= len || s[*i] != c)
        return -1;
    (*i)++;
    return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : dm[m - 1];
}

/* RFC 3339 date-time to epoch ms (sub-ms fractions rounded up); 0 or -1. */
static int parse_rfc3339(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    while (i < len && s[i] == ' ')
        i++;
    while (len > i && s[len - 1] == ' ')
        len--;
    int y = digits(s, len, &i, 4);
    if (y < 0 || expect_char(s, len, &i, '-') < 0)
        return -1;
    int mo = digits(s, len, &i, 2);
    if (mo < 1 || mo > 12 || expect_char(s, len, &i, '-') < 0)
        return -1;
    int d = digits(s, len, &i, 2);
    if (d < 1 || d > days_in_month(y, mo))
        return -1;
    if (i >= len || (s[i] != 'T' && s[i] != 't' && s[i] != ' '))
        return -1;
    i++;
    int hh = digits(s, len, &i, 2);
    if (hh < 0 || hh > 23 || expect_char(s, len, &i, ':') < 0)
        return -1;
    int mi = digits(s, len, &i, 2);
    if (mi < 0 || mi > 59 || expect_char(s, len, &i, ':') < 0)
        return -1;
    int ss = digits(s, len, &i, 2);
    if (ss < 0 || ss > 60)
        return -1;
    int64_t ms = 0;
    if (i < len && s[i] == '.') {
        size_t f0 = ++i;
        int up = 0;
        while (i < len && is_digit(s[i])) {
            if (i - f0 < 3)
                ms = ms * 10 + (s[i] - '0');
            else
                up |= s[i] != '0';
            i++;
        }
        if (i == f0)
            return -1;
        for (size_t k = i - f0; k < 3; k++)
            ms *= 10;
        ms += up; /* never early: 0.0001 s is the next ms */
    }
    int64_t off = 0;
    if (i < len && (s[i] == 'Z' || s[i] == 'z')) {
        i++;
    } else if (i < len && (s[i] == '+' || s[i] == '-')) {
        int sign = s[i++] == '-' ? -1 : 1;
        int oh = digits(s, len, &i, 2);
        if (oh < 0 || oh > 23 || expect_char(s, len, &i, ':') < 0)
            return -1;
        int om = digits(s, len, &i, 2);
        if (om < 0 || om > 59)
            return -1;
        off = sign * (int64_t)(oh * 60 + om) * 60;
    } else {
        return -1;
    }
    if (i != len)
        return -1;
    int64_t secs = days_from_civil(y, mo, d) * 86400 + hh * 3600 + mi * 60 + ss - off;
    *out = secs * 1000 + ms;
    return 0;
}

/* ---- due times ----------------------------------------------------------------- */

static int until_ms(const struct xdelay_value *v, int which, int64_t *due)
{
    int64_t x;
    int frac;

    if (v->kind == XDELAY_TIMESTAMP) {
        if (v->u > (uint64_t)INT64_MAX / 1000 - 1)
            return -1;
        /*
         * x-opt-delivery-time as a timestamp was an AMQP 1.0 timestamp (ms)
         * that RabbitMQ cut to seconds (mc_amqpl: V div 1000): the sender
         * meant some ms of that second, so the last one, never early.
         */
        *due = (int64_t)v->u * 1000 + (which == XDELAY_H_DELIVERY_TIME ? 999 : 0);
        return 0;
    }
    if (v->kind == XDELAY_TEXT && v->text.p && parse_rfc3339(v->text.p, v->text.len, due) == 0)
        return 0;
    if (value_to_int64(v, &x, &frac) < 0)
        return -1;
    if (x < UNTIL_FLOOR_MS)
        return -1; /* seconds, or nonsense: not a time anyone means in ms */
    if (frac) {
        if (x == INT64_MAX)
            return -1;
        x++; /* never early: round a fractional ms up */
    }
    *due = x;
    return 0;
}

enum xdelay_status xdelay_until_eval(const struct xdelay_value *v, int which, uint64_t now_ms,
                                     uint64_t max_delay_ms, uint64_t *delay_ms)
{
    int64_t due;
    int dt = which == XDELAY_H_DELIVERY_TIME;

    *delay_ms = 0;
    if (!v)
        return XDELAY_NOW;
    if (until_ms(v, which, &due) < 0)
        return dt ? XDELAY_DT_EINVALID : XDELAY_UNTIL_EINVALID;
    if (due <= 0 || (uint64_t)due <= now_ms)
        return XDELAY_NOW;
    if ((uint64_t)due - now_ms > max_delay_ms)
        return dt ? XDELAY_DT_ETOOBIG : XDELAY_UNTIL_ETOOBIG;
    *delay_ms = (uint64_t)due - now_ms;
    return XDELAY_OK;
}

int xdelay_invalid(enum xdelay_status s)
{
    return s == XDELAY_EINVALID || s == XDELAY_ETOOBIG || s == XDELAY_UNTIL_EINVALID ||
           s == XDELAY_UNTIL_ETOOBIG || s == XDELAY_DT_EINVALID || s == XDELAY_DT_ETOOBIG ||
           s == XDELAY_DD_EINVALID || s == XDELAY_DD_ETOOBIG || s == XDELAY_RETRY_LAST ||
           s == XDELAY_RETRY_REASON || s == XDELAY_RETRY_NOQUEUE ||
           s == XDELAY_RETRY_NOTADMITTED;
}

const char *xdelay_strerror(enum xdelay_status s)
{
    switch (s) {
    case XDELAY_EINVALID: return "invalid x-delay";
    case XDELAY_ETOOBIG: return "x-delay above max_delay_ms";
    case XDELAY_EKEY: return "invalid x-delay-key";
    case XDELAY_UNTIL_EINVALID: return "invalid x-delay-until";
    case XDELAY_UNTIL_ETOOBIG: return "x-delay-until beyond max_delay_ms";
    case XDELAY_DT_EINVALID: return "invalid x-opt-delivery-time";
    case XDELAY_DT_ETOOBIG: return "x-opt-delivery-time beyond max_delay_ms";
    case XDELAY_DD_EINVALID: return "invalid x-opt-delivery-delay";
    case XDELAY_DD_ETOOBIG: return "x-opt-delivery-delay above max_delay_ms";
    case XDELAY_RETRY_LAST: return "retry: the last attempt failed (retry.max_attempts)";
    case XDELAY_RETRY_REASON: return "retry: dead-lettered for a reason the route does not retry "
                                     "(retry.reasons)";
    case XDELAY_RETRY_NOQUEUE: return "retry: no x-death names the queue it failed in (not "
                                      "dead-lettered by a queue)";
    case XDELAY_RETRY_NOTADMITTED: return "retry: the queue it names is not one this route "
                                          "sends back to (retry.queues, retry.queue_pattern)";
    default: return "";
    }
}
