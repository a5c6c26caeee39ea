/*
 * fuzz_xdelay.c -- libFuzzer harness for xdelay_eval() (xdelay.h).
 *
 * Input: byte 0 = kind (mod 7: the six kinds and "no value"), bytes 1..8 =
 * max_delay_ms (LE u64), then the value: 8 bytes for INT/UINT/FLOAT (any
 * bit pattern, NaN and inf included), 1 + 4 for DECIMAL (scale, value),
 * and every remaining byte, unterminated in an exact-size heap buffer, for
 * TEXT. Checked: the documented contract -- OK iff 0 < delay <= max, any
 * other status leaves delay 0 -- and, where a reference is easy to compute
 * independently, the exact status and delay.
 */
#include "delay-bridge/xdelay.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Reference for TEXT: [ ]*[+-]?[0-9]+[ ]* within int64, via strtoll on a copy. */
static int ref_text(const char *p, size_t n, int64_t *out)
{
    size_t i = 0, j = n;
    while (i < n && p[i] == ' ')
        i++;
    while (j > i && p[j - 1] == ' ')
        j--;
    size_t k = i;
    if (k < j && (p[k] == '+' || p[k] == '-'))
        k++;
    if (k == j)
        return -1;
    for (size_t m = k; m < j; m++)
        if (p[m] < '0' || p[m] > '9')
            return -1;
    char buf[64];
    /* strip leading zeros so long zero runs still fit the copy */
    size_t z = k;
    while (z + 1 < j && p[z] == '0')
        z++;
    if (j - z > 25)
        return -1; /* more than 25 significant digits: out of int64 */
    size_t o = 0;
    if (p[i] == '-')
        buf[o++] = '-';
    memcpy(buf + o, p + z, j - z);
    buf[o + j - z] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || *end)
        return -1;
    *out = v;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
        have_ref = v.u <= (uint64_t)INT64_MAX ? 1 : 2;
        x = (int64_t)(v.u & (uint64_t)INT64_MAX);
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
        have_ref = ref_text(text, n, &x) == 0 ? 1 : 2;
        break;
    case 5:
        v.kind = XDELAY_OTHER;
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
