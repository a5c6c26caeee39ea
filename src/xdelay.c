/*
 * xdelay.c -- the x-delay header in, the republish properties out.
 *
 * Reading x-delay (the value types are rabbitmq-c's decoded field kinds):
 *
 *   kind                         rule                              e.g.
 *   b B s u I i l (I8..I64)      the integer                       'I' -20 -> NOW
 *   L (U64)                      the integer; > INT64_MAX invalid  'L' 2^63 -> EINVALID
 *   f d (F32, F64)               truncated toward zero;            'd' 2.9 -> 2
 *                                NaN, inf, outside int64 invalid
 *   D (DECIMAL: scale s, u32 v)  v read as int32 (as RabbitMQ       s=2 v=12345 -> 123
 *                                does), v / 10^s truncated
 *   S (UTF8, AMQP long string)   [ ]*[+-]?[0-9]+[ ]*, in int64     " -20 " -> NOW
 *   anything else                invalid: t (bool), T (timestamp),
 *                                x (byte array), V (void), F, A
 *
 * rabbitmq-c has no short-string field kind (0-9-1's 's' is decoded as a
 * short int, as RabbitMQ does), so "short or long string" is 'S' here. A
 * byte array 'x' is binary by definition and is not read as text.
 *
 * Then, on the int64 value v: v <= 0 -> XDELAY_NOW, v > max_delay_ms ->
 * XDELAY_ETOOBIG, else XDELAY_OK. Only the first x-delay entry counts (a
 * table lookup in RabbitMQ also returns the first).
 *
 * Writing: xdelay_outgoing() copies the properties struct, then builds a
 * new header table in the pool: the input's entries in order (values shared
 * with the input, not copied), x-delay rewritten in place, bridge headers
 * replaced in place or appended. Strings the bridge adds (id, error, the
 * moved user-id) are copied into the pool. The input is never written.
 */
#include "delay-bridge/xdelay.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H_XDELAY "x-delay"
#define H_ORIG_USER "x-original-user-id"
#define H_BRIDGE_ID "x-delay-bridge-id"
#define H_ERROR "x-delay-error"

static int key_is(amqp_bytes_t k, const char *name)
{
    size_t n = strlen(name);
    return k.len == n && (n == 0 || (k.bytes && memcmp(k.bytes, name, n) == 0));
}

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

static int value_to_int64(const amqp_field_value_t *v, int64_t *out)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8: *out = v->value.i8; return 0;
    case AMQP_FIELD_KIND_U8: *out = v->value.u8; return 0;
    case AMQP_FIELD_KIND_I16: *out = v->value.i16; return 0;
    case AMQP_FIELD_KIND_U16: *out = v->value.u16; return 0;
    case AMQP_FIELD_KIND_I32: *out = v->value.i32; return 0;
    case AMQP_FIELD_KIND_U32: *out = v->value.u32; return 0;
    case AMQP_FIELD_KIND_I64: *out = v->value.i64; return 0;
    case AMQP_FIELD_KIND_U64:
        if (v->value.u64 > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)v->value.u64;
        return 0;
    case AMQP_FIELD_KIND_F32: return from_double((double)v->value.f32, out);
    case AMQP_FIELD_KIND_F64: return from_double(v->value.f64, out);
    case AMQP_FIELD_KIND_DECIMAL: {
        int64_t x = (int32_t)v->value.decimal.value;
        /* |x| < 2^31 < 10^10: from scale 10 on the result is 0 */
        for (unsigned s = v->value.decimal.decimals; s > 0 && x != 0; s--)
            x /= 10;
        *out = x;
        return 0;
    }
    case AMQP_FIELD_KIND_UTF8:
        if (v->value.bytes.len > 0 && !v->value.bytes.bytes)
            return -1;
        return parse_text(v->value.bytes.bytes, v->value.bytes.len, out);
    default:
        return -1;
    }
}

enum xdelay_status xdelay_parse(const amqp_table_t *headers, uint64_t max_delay_ms,
                                uint64_t *delay_ms)
{
    *delay_ms = 0;
    if (!headers || headers->num_entries <= 0 || !headers->entries)
        return XDELAY_NOW;
    for (int i = 0; i < headers->num_entries; i++) {
        const amqp_table_entry_t *e = &headers->entries[i];
        if (!key_is(e->key, H_XDELAY))
            continue;
        int64_t v;
        if (value_to_int64(&e->value, &v) < 0)
            return XDELAY_EINVALID;
        if (v <= 0)
            return XDELAY_NOW;
        if ((uint64_t)v > max_delay_ms)
            return XDELAY_ETOOBIG;
        *delay_ms = (uint64_t)v;
        return XDELAY_OK;
    }
    return XDELAY_NOW;
}

const char *xdelay_strerror(enum xdelay_status s)
{
    switch (s) {
    case XDELAY_EINVALID: return "invalid x-delay";
    case XDELAY_ETOOBIG: return "x-delay above max_delay_ms";
    default: return "";
    }
}

static void *pool_alloc(amqp_pool_t *pool, size_t n)
{
    void *p = amqp_pool_alloc(pool, n ? n : 1);
    if (!p) {
        fprintf(stderr, "delay-bridge: out of memory (amqp pool, %zu bytes)\n", n);
        abort();
    }
    return p;
}

static amqp_field_value_t pool_string(amqp_pool_t *pool, const void *p, size_t n)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes.len = n;
    v.value.bytes.bytes = pool_alloc(pool, n);
    if (n)
        memcpy(v.value.bytes.bytes, p, n);
    return v;
}

/*
 * Put (name, v) into t: replace the first entry with that name in place and
 * drop any later duplicates, or append. t->entries has room for one more.
 */
static void table_set(amqp_table_t *t, const char *name, amqp_field_value_t v)
{
    int found = -1, w = 0;
    for (int r = 0; r < t->num_entries; r++) {
        if (key_is(t->entries[r].key, name)) {
            if (found >= 0)
                continue; /* later duplicate: drop */
            found = w;
        }
        t->entries[w++] = t->entries[r];
    }
    t->num_entries = w;
    if (found < 0) {
        found = t->num_entries++;
        t->entries[found].key = amqp_cstring_bytes(name);
    }
    t->entries[found].value = v;
}

void xdelay_outgoing(const amqp_basic_properties_t *in, amqp_basic_properties_t *out,
                     amqp_pool_t *pool, uint64_t delay_ms, const char *bridge_user,
                     const char *id, const char *error)
{
    *out = *in;

    int nin = 0;
    const amqp_table_entry_t *ein = NULL;
    if ((in->_flags & AMQP_BASIC_HEADERS_FLAG) && in->headers.num_entries > 0 &&
        in->headers.entries) {
        nin = in->headers.num_entries;
        ein = in->headers.entries;
    }

    amqp_table_t t;
    t.num_entries = 0;
    t.entries = pool_alloc(pool, sizeof(amqp_table_entry_t) * ((size_t)nin + 3));
    for (int i = 0; i < nin; i++) {
        amqp_table_entry_t e = ein[i];
        if (delay_ms > 0 && key_is(e.key, H_XDELAY)) {
            /* every x-delay, so no later duplicate can delay it again */
            memset(&e.value, 0, sizeof e.value);
            if (delay_ms <= (uint64_t)INT32_MAX + 1) {
                e.value.kind = AMQP_FIELD_KIND_I32;
                e.value.value.i32 = delay_ms == (uint64_t)INT32_MAX + 1 ? INT32_MIN
                                                                      : -(int32_t)delay_ms;
            } else {
                e.value.kind = AMQP_FIELD_KIND_I64;
                e.value.value.i64 = delay_ms >= (uint64_t)INT64_MAX + 1 ? INT64_MIN
                                                                      : -(int64_t)delay_ms;
            }
        }
        t.entries[t.num_entries++] = e;
    }

    if (in->_flags & AMQP_BASIC_USER_ID_FLAG) {
        const char *bu = bridge_user ? bridge_user : "";
        size_t bn = strlen(bu);
        amqp_bytes_t u = in->user_id;
        int same = u.len == bn && (bn == 0 || (u.bytes && memcmp(u.bytes, bu, bn) == 0));
        if (!same) {
            table_set(&t, H_ORIG_USER, pool_string(pool, u.bytes, u.bytes ? u.len : 0));
            out->_flags &= ~(amqp_flags_t)AMQP_BASIC_USER_ID_FLAG;
            out->user_id = amqp_empty_bytes;
        }
    }
    if (id)
        table_set(&t, H_BRIDGE_ID, pool_string(pool, id, strlen(id)));
    if (error)
        table_set(&t, H_ERROR, pool_string(pool, error, strlen(error)));

    out->headers = t;
    out->_flags |= AMQP_BASIC_HEADERS_FLAG;
}
