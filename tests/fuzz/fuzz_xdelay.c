/*
 * fuzz_xdelay.c -- libFuzzer harness for xdelay_eval() (xdelay.h).
 *
 * Input (x-delay, byte 0 below 0x80): byte 0 = kind (mod 7: INT UINT FLOAT
 * DECIMAL TEXT, OTHER or TIMESTAMP, "no value"), bytes 1..8 =
 * max_delay_ms (LE u64), then the value: 8 bytes for INT/UINT/FLOAT (any
 * bit pattern, NaN and inf included), 1 + 4 for DECIMAL (scale, value),
 * and every remaining byte, unterminated in an exact-size heap buffer, for
 * TEXT. Checked: the documented contract -- OK iff 0 < delay <= max, any
 * other status leaves delay 0 -- and, where a reference is easy to compute
 * independently, the exact status and delay.
 *
 * Input (x-delay-until, byte 0 from 0x80; bit 6 = x-opt-delivery-time):
 * kind = (byte 0 & 0x7f) mod 8 (the above, TIMESTAMP, "no value"), bytes
 * 1..8 max, 9..16 now, then the value as above. Checked: the contract (OK
 * iff 0 < delay <= max), the reference for integers and timestamps, and
 * that a due time read from text reads back the same written as RFC 3339.
 */
#include "delay-bridge/xdelay.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_xdelay: %s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static uint64_t le64(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < 8 && i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The status an int64 x maps to. */
static enum xdelay_status judge(int64_t x, uint64_t max, uint64_t *d)
{
    *d = 0;
    if (x <= 0)
        return XDELAY_NOW;
    if ((uint64_t)x > max)
        return XDELAY_ETOOBIG;
    *d = (uint64_t)x;
    return XDELAY_OK;
}

/*
 * Reference for TEXT: [ ]*[+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?[ ]*, truncated
 * toward zero within int64, computed differently from xdelay.c: the digits
 * are copied into a buffer, the decimal point moved by the exponent, and
 * the integer part handed to strtoll. 0 ok, -1 invalid, -2 no reference
 * (more digits or a larger exponent than the buffer takes).
 */
static int ref_text(const char *p, size_t n, int64_t *out)
{
    size_t i = 0, j = n;
    while (i < n && p[i] == ' ')
        i++;
    while (j > i && p[j - 1] == ' ')
        j--;
    int neg = 0;
    if (i < j && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    char dig[400];
    size_t nd = 0, nint = 0, nfrac = 0;
    int dot = 0;
    for (; i < j && ((p[i] >= '0' && p[i] <= '9') || (p[i] == '.' && !dot)); i++) {
        if (p[i] == '.') {
            dot = 1;
            continue;
        }
        if (nd == sizeof dig)
            return -2;
        dig[nd++] = p[i];
        if (dot)
            nfrac++;
        else
            nint++;
    }
    if (nd == 0)
        return -1;
    long exp = 0;
    if (i < j && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < j && (p[i] == '+' || p[i] == '-'))
            eneg = p[i++] == '-';
        size_t e0 = i;
        for (; i < j && p[i] >= '0' && p[i] <= '9'; i++) {
            exp = exp * 10 + (p[i] - '0');
            if (exp > 1000)
                return -2;
        }
        if (i == e0)
            return -1;
        if (eneg)
            exp = -exp;
    }
    if (i != j)
        return -1;
    long pos = (long)nint + exp; /* digits before the point */
    char buf[1500];
    size_t o = 0;
    if (neg)
        buf[o++] = '-';
    int any = 0;
    for (long k = 0; k < pos; k++) {
        char c = k < (long)nd ? dig[k] : '0';
        if (c == '0' && !any)
            continue; /* leading zeros */
        any = 1;
        buf[o++] = c;
        if (o > 25)
            return -1; /* more than 25 significant digits: out of int64 */
    }
    if (!any)
        buf[o++] = '0';
    buf[o] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || *end)
        return -1;
    *out = v;
    return 0;
}

/* x-delay-until mode: byte 0 has bit 7 set; max and now (u64 LE), then the value. */
static int fuzz_until(const uint8_t *data, size_t size)
{
    if (size < 17)
        return 0;
    int kind = (data[0] & 0x7f) % 8;
    uint64_t max = le64(data + 1, 8), now = le64(data + 9, 8);
    const uint8_t *rest = data + 17;
    size_t n = size - 17;
    struct xdelay_value v;
    memset(&v, 0, sizeof v);
    char *text = NULL;
    int have_ref = 0, which = data[0] & 0x40 ? XDELAY_H_DELIVERY_TIME : XDELAY_H_UNTIL;
    int64_t due = 0;

    switch (kind) {
    case 0:
        v.kind = XDELAY_INT;
        v.i = (int64_t)le64(rest, n);
        due = v.i;
        have_ref = due >= 100000000000LL ? 1 : 2;
        break;
    case 1:
        v.kind = XDELAY_UINT;
        v.u = le64(rest, n);
        due = (int64_t)v.u;
        have_ref = due >= 100000000000LL ? 1 : 2;
        break;
    case 2: {
        uint64_t bits = le64(rest, n);
        memcpy(&v.f, &bits, sizeof v.f);
        v.kind = XDELAY_FLOAT;
        break;
    }
    case 3:
        v.kind = XDELAY_DECIMAL;
        v.dec.scale = n > 0 ? rest[0] : 0;
        v.dec.value = (int32_t)(uint32_t)le64(rest + (n > 0), n > 0 ? (n - 1 < 4 ? n - 1 : 4) : 0);
        have_ref = 2; /* |value| < 2^31 < 10^11 */
        break;
    case 4:
        v.kind = XDELAY_TEXT;
        text = malloc(n ? n : 1);
        memcpy(text, rest, n);
        v.text.p = n ? text : NULL;
        v.text.len = n;
        break;
    case 5:
        v.kind = XDELAY_OTHER;
        have_ref = 2;
        break;
    case 6:
        v.kind = XDELAY_TIMESTAMP;
        v.u = le64(rest, n);
        have_ref = v.u <= (uint64_t)INT64_MAX / 1000 - 1 ? 1 : 2;
        due = (int64_t)(have_ref == 1 ? v.u * 1000 + (which ? 999 : 0) : 0);
        break;
    default:
        have_ref = 3;
        break;
    }

    uint64_t d = 999;
    enum xdelay_status s = xdelay_until_eval(have_ref == 3 ? NULL : &v, which, now, max, &d);
    enum xdelay_status einv = which ? XDELAY_DT_EINVALID : XDELAY_UNTIL_EINVALID;
    enum xdelay_status ebig = which ? XDELAY_DT_ETOOBIG : XDELAY_UNTIL_ETOOBIG;
    CHECK(s == XDELAY_OK || s == XDELAY_NOW || s == einv || s == ebig);
    if (s == XDELAY_OK)
        CHECK(d > 0 && d <= max && now + d > now && now + d <= (uint64_t)INT64_MAX);
    else
        CHECK(d == 0);
    CHECK(xdelay_strerror(s) != NULL && xdelay_invalid(s) == (s == einv || s == ebig));

    enum xdelay_status want = einv;
    uint64_t wd = 0;
    if (have_ref == 1) {
        if (due <= 0 || (uint64_t)due <= now)
            want = XDELAY_NOW;
        else if ((uint64_t)due - now > max)
            want = ebig;
        else {
            want = XDELAY_OK;
            wd = (uint64_t)due - now;
        }
    } else if (have_ref == 3) {
        want = XDELAY_NOW;
    }
    if (have_ref && (s != want || d != wd)) {
        fprintf(stderr, "fuzz_xdelay: until kind %d: got status %d delay %llu, want %d %llu\n",
                kind, s, (unsigned long long)d, want, (unsigned long long)wd);
        abort();
    }
    /* a due time read from any text reads back the same when written as RFC 3339 */
    if (kind == 4 && s == XDELAY_OK) {
        uint64_t t = now + d;
        time_t secs = (time_t)(t / 1000);
        struct tm tm;
        if (gmtime_r(&secs, &tm) && tm.tm_year + 1900 <= 9999) {
            char buf[40];
            snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (unsigned)(t % 1000));
            struct xdelay_value w;
            memset(&w, 0, sizeof w);
            w.kind = XDELAY_TEXT;
            w.text.p = buf;
            w.text.len = strlen(buf);
            uint64_t d2;
            CHECK(xdelay_until_eval(&w, which, now, max, &d2) == XDELAY_OK && d2 == d);
        }
    }
    free(text);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && (data[0] & 0x80))
        return fuzz_until(data, size);
    if (size < 9)
        return 0;
    int kind = data[0] % 7;
    uint64_t max = le64(data + 1, 8);
    const uint8_t *rest = data + 9;
    size_t n = size - 9;
    struct xdelay_value v;
    memset(&v, 0, sizeof v);
    char *text = NULL;
    int have_ref = 0;
    int64_t x = 0;
    enum xdelay_status want = XDELAY_EINVALID;

    switch (kind) {
    case 0:
        v.kind = XDELAY_INT;
        v.i = (int64_t)le64(rest, n);
        x = v.i;
        have_ref = 1;
        break;
    case 1:
        v.kind = XDELAY_UINT;
        v.u = le64(rest, n);
        x = (int64_t)v.u; /* py-amqp's 'L' is signed */
        have_ref = 1;
        break;
    case 2: {
        uint64_t bits = le64(rest, n);
        memcpy(&v.f, &bits, sizeof v.f);
        v.kind = XDELAY_FLOAT;
        if (isnan(v.f) || isinf(v.f) || fabs(trunc(v.f)) >= 9223372036854775808.0) {
            have_ref = 2;
        } else if (trunc(v.f) == -9223372036854775808.0) {
            x = INT64_MIN;
            have_ref = 1;
        } else {
            x = (int64_t)trunc(v.f);
            have_ref = 1;
        }
        break;
    }
    case 3: {
        v.kind = XDELAY_DECIMAL;
        v.dec.scale = n > 0 ? rest[0] : 0;
        v.dec.value = (int32_t)(uint32_t)le64(rest + (n > 0), n > 0 ? (n - 1 < 4 ? n - 1 : 4) : 0);
        int64_t p10 = 1;
        for (unsigned s = 0; s < v.dec.scale && p10 <= INT32_MAX; s++)
            p10 *= 10;
        x = (int64_t)v.dec.value / p10; /* C division truncates toward zero */
        have_ref = 1;
        break;
    }
    case 4:
        v.kind = XDELAY_TEXT;
        text = malloc(n ? n : 1); /* exact size, unterminated */
        memcpy(text, rest, n);
        v.text.p = n ? text : NULL;
        v.text.len = n;
        switch (ref_text(text, n, &x)) {
        case 0: have_ref = 1; break;
        case -1: have_ref = 2; break;
        default: have_ref = 0; break; /* the contract only */
        }
        break;
    case 5:
        v.kind = n > 0 && (rest[0] & 1) ? XDELAY_TIMESTAMP : XDELAY_OTHER; /* both refused */
        have_ref = 2;
        break;
    default:
        have_ref = 3; /* no value */
        break;
    }

    uint64_t d = 999;
    enum xdelay_status s = xdelay_eval(have_ref == 3 ? NULL : &v, max, &d);
    CHECK(s >= XDELAY_OK && s <= XDELAY_ETOOBIG);
    if (s == XDELAY_OK)
        CHECK(d > 0 && d <= max);
    else
        CHECK(d == 0);
    CHECK(xdelay_strerror(s) != NULL);

    uint64_t wd = 0;
    if (have_ref == 1)
        want = judge(x, max, &wd);
    else if (have_ref == 2)
        want = XDELAY_EINVALID;
    else if (have_ref == 3)
        want = XDELAY_NOW;
    if (have_ref) {
        if (s != want || d != wd) {
            fprintf(stderr, "fuzz_xdelay: kind %d: got status %d delay %llu, want %d %llu\n",
                    kind, s, (unsigned long long)d, want, (unsigned long long)wd);
            abort();
        }
    }
    free(text);
    return 0;
}
