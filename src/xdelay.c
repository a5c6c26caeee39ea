/*
 * xdelay.c -- what a delay header's value means.
 *
 * The rules, on a value already taken out of its wire encoding (the AMQP
 * side, amqp_msg.c, maps rabbitmq-c's field kinds onto struct xdelay_value):
 *
 *   kind            rule                                       e.g.
 *   INT             the integer                                -20 -> NOW
 *   UINT            the integer; > INT64_MAX invalid           2^63 -> EINVALID
 *   FLOAT           truncated toward zero;                     2.9 -> 2
 *                   NaN, inf, outside int64 invalid
 *   DECIMAL         value / 10^scale truncated                 s=2 v=12345 -> 123
 *   TEXT            [ ]*[+-]?[0-9]+[ ]*, within int64          " -20 " -> NOW
 *   OTHER           invalid (bool, timestamp, bytes, void, table, array)
 *
 * Then, on the int64 value v: v <= 0 -> XDELAY_NOW, v > max_delay_ms ->
 * XDELAY_ETOOBIG, else XDELAY_OK. No value at all (header missing) is NOW.
 */
#include "delay-bridge/xdelay.h"

#include <math.h>
#include <stddef.h>

/* Text to int64. 0, or -1 when it is not [ ]*[+-]?[0-9]+[ ]* within int64. */
static int parse_text(const char *s, size_t len, int64_t *out)
{
    size_t i = 0;
    while (i < len && s[i] == ' ')
        i++;
    int neg = 0;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    size_t digits = 0;
    uint64_t mag = 0;
    const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (mag > (limit - d) / 10)
            return -1;
        mag = mag * 10 + d;
        i++;
        digits++;
    }
    while (i < len && s[i] == ' ')
        i++;
    if (digits == 0 || i != len)
        return -1;
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

static int value_to_int64(const struct xdelay_value *v, int64_t *out)
{
    switch (v->kind) {
    case XDELAY_INT:
        *out = v->i;
        return 0;
    case XDELAY_UINT:
        if (v->u > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v->u;
        return 0;
    case XDELAY_FLOAT:
        return from_double(v->f, out);
    case XDELAY_DECIMAL: {
        int64_t x = v->dec.value;
        /* |x| < 2^31 < 10^10: from scale 10 on the result is 0 */
        for (unsigned s = v->dec.scale; s > 0 && x != 0; s--)
            x /= 10;
        *out = x;
        return 0;
    }
    case XDELAY_TEXT:
        if (v->text.len > 0 && !v->text.p)
            return -1;
        return parse_text(v->text.p, v->text.len, out);
    default:
        return -1;
    }
}

enum xdelay_status xdelay_eval(const struct xdelay_value *v, uint64_t max_delay_ms,
                               uint64_t *delay_ms)
{
    int64_t x;

    *delay_ms = 0;
    if (!v)
        return XDELAY_NOW;
    if (value_to_int64(v, &x) < 0)
        return XDELAY_EINVALID;
    if (x <= 0)
        return XDELAY_NOW;
    if ((uint64_t)x > max_delay_ms)
        return XDELAY_ETOOBIG;
    *delay_ms = (uint64_t)x;
    return XDELAY_OK;
}

const char *xdelay_strerror(enum xdelay_status s)
{
    switch (s) {
    case XDELAY_EINVALID: return "invalid x-delay";
    case XDELAY_ETOOBIG: return "x-delay above max_delay_ms";
    case XDELAY_EKEY: return "invalid x-delay-key";
    default: return "";
    }
}
