/*
 * test_broker_msg.c -- reading x-delay from every AMQP field kind, and the
 * properties a held message is republished with (round-tripped through
 * rabbitmq-c's property encoder and decoder to prove they go on the wire).
 */
#include "delay-bridge/broker_msg.h"

#include <amqp_framing.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

/*
 * The old table-level reads, over broker_msg_read(): every case below
 * reads the table once, as the consumer does, then asks the struct.
 */
static enum xdelay_status t_xdelay(const amqp_table_t *t, uint64_t max, uint64_t *ms)
{
    struct broker_headers h;
    broker_msg_read(t, 0, 0, NULL, &h);
    return broker_msg_xdelay(&h, max, ms);
}

static enum xdelay_status t_due(const amqp_table_t *t, uint64_t now, uint64_t max, uint64_t *ms)
{
    struct broker_headers h;
    broker_msg_read(t, 0, 0, NULL, &h);
    return broker_msg_due(&h, now, max, ms);
}

static enum xdelay_status t_due_stamped(const amqp_table_t *t, uint64_t now, uint64_t max,
                                        uint64_t *ms, int *un)
{
    struct broker_headers h;
    broker_msg_read(t, 0, 0, NULL, &h);
    return broker_msg_due_stamped(&h, now, max, ms, un);
}

/* The struct's pointer for a header the consumer reads by name. */
static const amqp_field_value_t *t_field(const amqp_table_t *t, const char *name)
{
    struct broker_headers h;
    broker_msg_read(t, 0, 0, NULL, &h);
    if (strcmp(name, "x-delay-key") == 0)
        return h.key;
    if (strcmp(name, "x-delay-cancel") == 0)
        return h.cancel;
    if (strcmp(name, "x-stream-offset") == 0)
        return h.stream_offset;
    if (strcmp(name, "x-delay-key-at") == 0)
        return h.ev_at;
    abort();
}

static int t_header_str(const amqp_table_t *t, const char *name, const char **p, size_t *n)
{
    return broker_msg_str(t_field(t, name), p, n);
}

static int t_header_i64(const amqp_table_t *t, const char *name, int64_t *v)
{
    return broker_msg_i64(t_field(t, name), v);
}

static int t_intake(const amqp_table_t *t, int stream, int from_bridge, amqp_table_entry_t *out)
{
    struct broker_headers h;
    broker_msg_read(t, stream, from_bridge, out, &h);
    return h.nkeep;
}

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stdout, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
            failures++;                                                                \
        }                                                                              \
    } while (0)

static const char *st_name(enum xdelay_status s)
{
    switch (s) {
    case XDELAY_OK: return "OK";
    case XDELAY_NOW: return "NOW";
    case XDELAY_EINVALID: return "EINVALID";
    case XDELAY_ETOOBIG: return "ETOOBIG";
    case XDELAY_EKEY: return "EKEY";
    case XDELAY_UNTIL_EINVALID: return "UNTIL_EINVALID";
    case XDELAY_UNTIL_ETOOBIG: return "UNTIL_ETOOBIG";
    case XDELAY_DT_EINVALID: return "DT_EINVALID";
    case XDELAY_DT_ETOOBIG: return "DT_ETOOBIG";
    case XDELAY_DD_EINVALID: return "DD_EINVALID";
    case XDELAY_DD_ETOOBIG: return "DD_ETOOBIG";
    case XDELAY_RETRY_LAST: return "RETRY_LAST";
    case XDELAY_RETRY_REASON: return "RETRY_REASON";
    case XDELAY_RETRY_NOQUEUE: return "RETRY_NOQUEUE";
    case XDELAY_RETRY_NOTADMITTED: return "RETRY_NOTADMITTED";
    }
    return "?";
}

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value = v;
    return e;
}

/* Parse a table holding only x-delay = v, check status and delay. */
static void expect_at(int line, const char *what, amqp_field_value_t v, uint64_t max,
                      enum xdelay_status want, uint64_t want_ms)
{
    amqp_table_entry_t e = entry("x-delay", v);
    amqp_table_t t = { 1, &e };
    uint64_t ms = 12345;
    enum xdelay_status s = t_xdelay(&t, max, &ms);
    if (s != want || ms != want_ms) {
        printf("FAIL %s:%d: %s: got %s %llu, want %s %llu\n", __FILE__, line, what, st_name(s),
               (unsigned long long)ms, st_name(want), (unsigned long long)want_ms);
        failures++;
    }
}
#define EXPECT(what, v, max, want, ms) expect_at(__LINE__, what, v, max, want, ms)

#define BIG UINT64_MAX

static amqp_field_value_t vi(uint8_t kind, int64_t x)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    switch (kind) {
    case AMQP_FIELD_KIND_I8: v.value.i8 = (int8_t)x; break;
    case AMQP_FIELD_KIND_U8: v.value.u8 = (uint8_t)x; break;
    case AMQP_FIELD_KIND_I16: v.value.i16 = (int16_t)x; break;
    case AMQP_FIELD_KIND_U16: v.value.u16 = (uint16_t)x; break;
    case AMQP_FIELD_KIND_I32: v.value.i32 = (int32_t)x; break;
    case AMQP_FIELD_KIND_U32: v.value.u32 = (uint32_t)x; break;
    case AMQP_FIELD_KIND_I64: v.value.i64 = x; break;
    default: abort();
    }
    return v;
}

static amqp_field_value_t vu64(uint64_t x)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_U64;
    v.value.u64 = x;
    return v;
}

static amqp_field_value_t vf32(float f)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_F32;
    v.value.f32 = f;
    return v;
}

static amqp_field_value_t vf64(double d)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_F64;
    v.value.f64 = d;
    return v;
}

static amqp_field_value_t vdec(uint8_t scale, uint32_t raw)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_DECIMAL;
    v.value.decimal.decimals = scale;
    v.value.decimal.value = raw;
    return v;
}

static amqp_field_value_t vstr(uint8_t kind, const char *s, size_t n)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    v.value.bytes.len = n;
    v.value.bytes.bytes = (void *)s;
    return v;
}
#define VS(s) vstr(AMQP_FIELD_KIND_UTF8, s, strlen(s))

static void test_integers(void)
{
    const uint64_t M = 4294967295u;
    EXPECT("i8 max", vi(AMQP_FIELD_KIND_I8, 127), M, XDELAY_OK, 127);
    EXPECT("i8 1", vi(AMQP_FIELD_KIND_I8, 1), M, XDELAY_OK, 1);
    EXPECT("i8 0", vi(AMQP_FIELD_KIND_I8, 0), M, XDELAY_NOW, 0);
    EXPECT("i8 -1", vi(AMQP_FIELD_KIND_I8, -1), M, XDELAY_NOW, 0);
    EXPECT("i8 min", vi(AMQP_FIELD_KIND_I8, -128), M, XDELAY_NOW, 0);
    EXPECT("u8 max", vi(AMQP_FIELD_KIND_U8, 255), M, XDELAY_OK, 255);
    EXPECT("u8 0", vi(AMQP_FIELD_KIND_U8, 0), M, XDELAY_NOW, 0);
    EXPECT("i16 max", vi(AMQP_FIELD_KIND_I16, 32767), M, XDELAY_OK, 32767);
    EXPECT("i16 min", vi(AMQP_FIELD_KIND_I16, -32768), M, XDELAY_NOW, 0);
    EXPECT("u16 max", vi(AMQP_FIELD_KIND_U16, 65535), M, XDELAY_OK, 65535);
    EXPECT("i32 5000", vi(AMQP_FIELD_KIND_I32, 5000), M, XDELAY_OK, 5000);
    EXPECT("i32 max", vi(AMQP_FIELD_KIND_I32, INT32_MAX), M, XDELAY_OK, INT32_MAX);
    EXPECT("i32 min", vi(AMQP_FIELD_KIND_I32, INT32_MIN), M, XDELAY_NOW, 0);
    EXPECT("i32 -20", vi(AMQP_FIELD_KIND_I32, -20), M, XDELAY_NOW, 0);
    EXPECT("u32 max", vi(AMQP_FIELD_KIND_U32, UINT32_MAX), M, XDELAY_OK, UINT32_MAX);
    EXPECT("u32 max+1 > max", vi(AMQP_FIELD_KIND_U32, UINT32_MAX), M - 1, XDELAY_ETOOBIG, 0);
    EXPECT("i64 max", vi(AMQP_FIELD_KIND_I64, INT64_MAX), BIG, XDELAY_OK, INT64_MAX);
    EXPECT("i64 min", vi(AMQP_FIELD_KIND_I64, INT64_MIN), BIG, XDELAY_NOW, 0);
    EXPECT("i64 -1", vi(AMQP_FIELD_KIND_I64, -1), BIG, XDELAY_NOW, 0);
    EXPECT("u64 1", vu64(1), BIG, XDELAY_OK, 1);
    EXPECT("u64 0", vu64(0), BIG, XDELAY_NOW, 0);
    EXPECT("u64 int64 max", vu64(INT64_MAX), BIG, XDELAY_OK, INT64_MAX);
    /* py-amqp's 'L' is a signed 64-bit integer: 2^64 - 1 is -1 */
    EXPECT("u64 int64 max+1", vu64((uint64_t)INT64_MAX + 1), BIG, XDELAY_NOW, 0);
    EXPECT("u64 max (py-amqp -1)", vu64(UINT64_MAX), BIG, XDELAY_NOW, 0);
    EXPECT("u64 py-amqp -5000", vu64((uint64_t)-5000), BIG, XDELAY_NOW, 0);
}

static void test_max_delay(void)
{
    EXPECT("at max", vi(AMQP_FIELD_KIND_I32, 1000), 1000, XDELAY_OK, 1000);
    EXPECT("max+1", vi(AMQP_FIELD_KIND_I32, 1001), 1000, XDELAY_ETOOBIG, 0);
    EXPECT("max 1", vi(AMQP_FIELD_KIND_I32, 1), 1, XDELAY_OK, 1);
    EXPECT("max 1, 2", vi(AMQP_FIELD_KIND_I32, 2), 1, XDELAY_ETOOBIG, 0);
    EXPECT("default max", vi(AMQP_FIELD_KIND_I64, 4294967295ll), 4294967295u, XDELAY_OK,
           4294967295u);
    EXPECT("default max+1", vi(AMQP_FIELD_KIND_I64, 4294967296ll), 4294967295u, XDELAY_ETOOBIG,
           0);
    /* negative stays NOW whatever the limit */
    EXPECT("neg, max 1", vi(AMQP_FIELD_KIND_I32, -5000), 1, XDELAY_NOW, 0);
    EXPECT("string too big", VS("1001"), 1000, XDELAY_ETOOBIG, 0);
    EXPECT("double too big", vf64(1000.5), 999, XDELAY_ETOOBIG, 0);
    EXPECT("double at max", vf64(1000.9), 1000, XDELAY_OK, 1000);
}

static void test_floats(void)
{
    const uint64_t M = BIG;
    EXPECT("f64 2.9", vf64(2.9), M, XDELAY_OK, 2);
    EXPECT("f64 1500.0", vf64(1500.0), M, XDELAY_OK, 1500);
    EXPECT("f64 0.999", vf64(0.999), M, XDELAY_NOW, 0);
    EXPECT("f64 -0.5", vf64(-0.5), M, XDELAY_NOW, 0);
    EXPECT("f64 -0.0", vf64(-0.0), M, XDELAY_NOW, 0);
    EXPECT("f64 -2.9", vf64(-2.9), M, XDELAY_NOW, 0);
    EXPECT("f64 -1e300", vf64(-1e300), M, XDELAY_EINVALID, 0);
    EXPECT("f64 1e300", vf64(1e300), M, XDELAY_EINVALID, 0);
    EXPECT("f64 nan", vf64(NAN), M, XDELAY_EINVALID, 0);
    EXPECT("f64 -nan", vf64(-NAN), M, XDELAY_EINVALID, 0);
    EXPECT("f64 inf", vf64(INFINITY), M, XDELAY_EINVALID, 0);
    EXPECT("f64 -inf", vf64(-INFINITY), M, XDELAY_EINVALID, 0);
    EXPECT("f64 2^63", vf64(9223372036854775808.0), M, XDELAY_EINVALID, 0);
    EXPECT("f64 -2^63", vf64(-9223372036854775808.0), M, XDELAY_NOW, 0);
    EXPECT("f64 2^62", vf64(4611686018427387904.0), M, XDELAY_OK, 4611686018427387904ull);
    EXPECT("f64 largest below 2^63", vf64(9223372036854774784.0), M, XDELAY_OK,
           9223372036854774784ull);
    EXPECT("f32 2.5", vf32(2.5f), M, XDELAY_OK, 2);
    EXPECT("f32 1000", vf32(1000.0f), M, XDELAY_OK, 1000);
    EXPECT("f32 -3.5", vf32(-3.5f), M, XDELAY_NOW, 0);
    EXPECT("f32 0.25", vf32(0.25f), M, XDELAY_NOW, 0);
    EXPECT("f32 nan", vf32(NAN), M, XDELAY_EINVALID, 0);
    EXPECT("f32 inf", vf32(INFINITY), M, XDELAY_EINVALID, 0);
    EXPECT("f32 -inf", vf32(-INFINITY), M, XDELAY_EINVALID, 0);
    EXPECT("f32 3e38", vf32(3e38f), M, XDELAY_EINVALID, 0);
}

static void test_decimal(void)
{
    const uint64_t M = BIG;
    EXPECT("dec 0 scale", vdec(0, 5000), M, XDELAY_OK, 5000);
    EXPECT("dec 123.45", vdec(2, 12345), M, XDELAY_OK, 123);
    EXPECT("dec 0.99", vdec(2, 99), M, XDELAY_NOW, 0);
    EXPECT("dec 0", vdec(0, 0), M, XDELAY_NOW, 0);
    EXPECT("dec -123.45 (signed)", vdec(2, (uint32_t)-12345), M, XDELAY_NOW, 0);
    EXPECT("dec 0xffffffff is -1", vdec(0, 0xffffffffu), M, XDELAY_NOW, 0);
    EXPECT("dec int32 max", vdec(0, 0x7fffffffu), M, XDELAY_OK, 2147483647u);
    EXPECT("dec 0x80000000 is int32 min", vdec(0, 0x80000000u), M, XDELAY_NOW, 0);
    EXPECT("dec scale 9", vdec(9, 2147483647u), M, XDELAY_OK, 2);
    EXPECT("dec scale 10", vdec(10, 2147483647u), M, XDELAY_NOW, 0);
    EXPECT("dec scale 255", vdec(255, 2147483647u), M, XDELAY_NOW, 0);
}

static void test_strings(void)
{
    const uint64_t M = BIG;
    EXPECT("\"5000\"", VS("5000"), M, XDELAY_OK, 5000);
    EXPECT("\" -20 \"", VS(" -20 "), M, XDELAY_NOW, 0);
    EXPECT("\"+7\"", VS("+7"), M, XDELAY_OK, 7);
    EXPECT("\"  42  \"", VS("  42  "), M, XDELAY_OK, 42);
    EXPECT("\"007\"", VS("007"), M, XDELAY_OK, 7);
    EXPECT("\"0\"", VS("0"), M, XDELAY_NOW, 0);
    EXPECT("\"-0\"", VS("-0"), M, XDELAY_NOW, 0);
    EXPECT("int64 max", VS("9223372036854775807"), M, XDELAY_OK, INT64_MAX);
    EXPECT("int64 max+1", VS("9223372036854775808"), M, XDELAY_EINVALID, 0);
    EXPECT("int64 min", VS("-9223372036854775808"), M, XDELAY_NOW, 0);
    EXPECT("int64 min-1", VS("-9223372036854775809"), M, XDELAY_EINVALID, 0);
    EXPECT("20 digits", VS("99999999999999999999"), M, XDELAY_EINVALID, 0);
    EXPECT("\"5s\"", VS("5s"), M, XDELAY_EINVALID, 0);
    EXPECT("\"\"", VS(""), M, XDELAY_EINVALID, 0);
    EXPECT("\"   \"", VS("   "), M, XDELAY_EINVALID, 0);
    EXPECT("\"1e3\"", VS("1e3"), M, XDELAY_OK, 1000);
    EXPECT("\"0x10\"", VS("0x10"), M, XDELAY_EINVALID, 0);
    EXPECT("\"1.5\"", VS("1.5"), M, XDELAY_OK, 1);
    EXPECT("\"7000.5\" (php-amqplib float)", VS("7000.5"), M, XDELAY_OK, 7000);
    EXPECT("\" 2.5e3 \"", VS(" 2.5e3 "), M, XDELAY_OK, 2500);
    EXPECT("\"1.0E+25\" (PHP)", VS("1.0E+25"), M, XDELAY_EINVALID, 0);
    EXPECT("\"1.0E+4\" (PHP)", VS("1.0E+4"), M, XDELAY_OK, 10000);
    EXPECT("\"-0.5\"", VS("-0.5"), M, XDELAY_NOW, 0);
    EXPECT("\"0.9\"", VS("0.9"), M, XDELAY_NOW, 0);
    EXPECT("\"INF\" (PHP)", VS("INF"), M, XDELAY_EINVALID, 0);
    EXPECT("\"NAN\" (PHP)", VS("NAN"), M, XDELAY_EINVALID, 0);
    EXPECT("\"1e\"", VS("1e"), M, XDELAY_EINVALID, 0);
    EXPECT("\".\"", VS("."), M, XDELAY_EINVALID, 0);
    EXPECT("\"1,5\"", VS("1,5"), M, XDELAY_EINVALID, 0);
    EXPECT("\"-\"", VS("-"), M, XDELAY_EINVALID, 0);
    EXPECT("\"+-1\"", VS("+-1"), M, XDELAY_EINVALID, 0);
    EXPECT("\"- 1\"", VS("- 1"), M, XDELAY_EINVALID, 0);
    EXPECT("\"1 2\"", VS("1 2"), M, XDELAY_EINVALID, 0);
    EXPECT("\"\\t5\"", VS("\t5"), M, XDELAY_EINVALID, 0);
    EXPECT("\"5\\n\"", VS("5\n"), M, XDELAY_EINVALID, 0);
    EXPECT("\"１\" (fullwidth)", VS("\xef\xbc\x91"), M, XDELAY_EINVALID, 0);
    /* the length is the field's, not strlen: "12" then a NUL then "3" */
    EXPECT("embedded NUL", vstr(AMQP_FIELD_KIND_UTF8, "12\0003", 4), M, XDELAY_EINVALID, 0);
    EXPECT("not NUL-terminated", vstr(AMQP_FIELD_KIND_UTF8, "123456", 3), M, XDELAY_OK, 123);

    /* the string must end where the field does: put it at the very end of a heap block */
    char *p = malloc(4);
    memcpy(p, "4321", 4);
    EXPECT("exact-length heap", vstr(AMQP_FIELD_KIND_UTF8, p, 4), M, XDELAY_OK, 4321);
    EXPECT("exact-length heap, first 3 bytes", vstr(AMQP_FIELD_KIND_UTF8, p, 3), M,
           XDELAY_OK, 432);
    free(p);
}

static void test_other_kinds(void)
{
    const uint64_t M = BIG;
    amqp_field_value_t v;

    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_BOOLEAN;
    v.value.boolean = 1;
    EXPECT("boolean", v, M, XDELAY_EINVALID, 0);

    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_TIMESTAMP;
    v.value.u64 = 5000;
    EXPECT("timestamp", v, M, XDELAY_EINVALID, 0);

    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_VOID;
    EXPECT("void", v, M, XDELAY_EINVALID, 0);

    EXPECT("bytes", vstr(AMQP_FIELD_KIND_BYTES, "5000", 4), M, XDELAY_EINVALID, 0);

    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_TABLE;
    EXPECT("table", v, M, XDELAY_EINVALID, 0);

    memset(&v, 0, sizeof v);
    v.kind = AMQP_FIELD_KIND_ARRAY;
    EXPECT("array", v, M, XDELAY_EINVALID, 0);
}

static void test_lookup(void)
{
    uint64_t ms = 99;
    CHECK(t_xdelay(NULL, 1000, &ms) == XDELAY_NOW && ms == 0);
    amqp_table_t empty = { 0, NULL };
    ms = 99;
    CHECK(t_xdelay(&empty, 1000, &ms) == XDELAY_NOW && ms == 0);

    /* missing among other headers; similar names do not count */
    amqp_table_entry_t e[5];
    e[0] = entry("x-delayed", vi(AMQP_FIELD_KIND_I32, 10));
    e[1] = entry("X-Delay", vi(AMQP_FIELD_KIND_I32, 11));
    e[2] = entry("x-dela", vi(AMQP_FIELD_KIND_I32, 12));
    e[3] = entry("", vi(AMQP_FIELD_KIND_I32, 13));
    amqp_table_t t = { 4, e };
    ms = 99;
    CHECK(t_xdelay(&t, 1000, &ms) == XDELAY_NOW && ms == 0);

    /* the key compares by length: "x-delay\0" is not "x-delay" */
    e[0].key.bytes = (void *)"x-delay";
    e[0].key.len = 8;
    t.num_entries = 1;
    CHECK(t_xdelay(&t, 1000, &ms) == XDELAY_NOW);

    /* first x-delay wins */
    e[0] = entry("a", VS("zzz"));
    e[1] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 300));
    e[2] = entry("x-delay", VS("bad"));
    e[3] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 400));
    t.num_entries = 4;
    CHECK(t_xdelay(&t, 1000, &ms) == XDELAY_OK && ms == 300);
    e[1] = entry("x-delay", VS("bad"));
    e[2] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 300));
    CHECK(t_xdelay(&t, 1000, &ms) == XDELAY_EINVALID && ms == 0);

    CHECK(strcmp(xdelay_strerror(XDELAY_EINVALID), "invalid x-delay") == 0);
    CHECK(strcmp(xdelay_strerror(XDELAY_ETOOBIG), "x-delay above max_delay_ms") == 0);
    CHECK(strcmp(xdelay_strerror(XDELAY_OK), "") == 0);
    CHECK(strcmp(xdelay_strerror(XDELAY_NOW), "") == 0);
}

/* ---- xdelay_outgoing ---- */

static int bytes_eq(amqp_bytes_t b, const char *s)
{
    size_t n = strlen(s);
    return b.len == n && (n == 0 || memcmp(b.bytes, s, n) == 0);
}

static const amqp_table_entry_t *find(const amqp_table_t *t, const char *key, int *idx)
{
    for (int i = 0; i < t->num_entries; i++) {
        if (bytes_eq(t->entries[i].key, key)) {
            if (idx)
                *idx = i;
            return &t->entries[i];
        }
    }
    return NULL;
}

static int count(const amqp_table_t *t, const char *key)
{
    int n = 0;
    for (int i = 0; i < t->num_entries; i++)
        n += bytes_eq(t->entries[i].key, key);
    return n;
}

/* Byte-exact equality of two field values (shallow kinds used here). */
static int value_eq(const amqp_field_value_t *a, const amqp_field_value_t *b)
{
    if (a->kind != b->kind)
        return 0;
    switch (a->kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return a->value.bytes.len == b->value.bytes.len &&
               memcmp(a->value.bytes.bytes, b->value.bytes.bytes, a->value.bytes.len) == 0;
    case AMQP_FIELD_KIND_I32: return a->value.i32 == b->value.i32;
    case AMQP_FIELD_KIND_I64: return a->value.i64 == b->value.i64;
    case AMQP_FIELD_KIND_U8: return a->value.u8 == b->value.u8;
    case AMQP_FIELD_KIND_BOOLEAN: return a->value.boolean == b->value.boolean;
    case AMQP_FIELD_KIND_F64: return memcmp(&a->value.f64, &b->value.f64, 8) == 0;
    case AMQP_FIELD_KIND_TABLE: return a->value.table.num_entries == b->value.table.num_entries;
    default: return memcmp(&a->value, &b->value, sizeof a->value) == 0;
    }
}

/* Encode out, decode it again, and check the decoded copy matches. */
static void roundtrip(const amqp_basic_properties_t *p)
{
    static char buf[65536];
    amqp_bytes_t enc = { sizeof buf, buf };
    int n = amqp_encode_properties(AMQP_BASIC_CLASS, (void *)p, enc);
    CHECK(n > 0);
    if (n <= 0)
        return;
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_bytes_t got = { (size_t)n, buf };
    void *dec = NULL;
    int rc = amqp_decode_properties(AMQP_BASIC_CLASS, &pool, got, &dec);
    CHECK(rc == 0 && dec != NULL);
    if (rc == 0 && dec) {
        const amqp_basic_properties_t *d = dec;
        CHECK(d->_flags == p->_flags);
        CHECK(d->headers.num_entries == p->headers.num_entries);
        for (int i = 0; i < d->headers.num_entries && i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *a = &d->headers.entries[i], *b = &p->headers.entries[i];
            CHECK(a->key.len == b->key.len && memcmp(a->key.bytes, b->key.bytes, a->key.len) == 0);
            CHECK(value_eq(&a->value, &b->value));
        }
        if (p->_flags & AMQP_BASIC_USER_ID_FLAG)
            CHECK(d->user_id.len == p->user_id.len);
        if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
            CHECK(d->content_type.len == p->content_type.len &&
                  memcmp(d->content_type.bytes, p->content_type.bytes, d->content_type.len) == 0);
        if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG)
            CHECK(d->delivery_mode == p->delivery_mode);
        if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
            CHECK(d->timestamp == p->timestamp);
    }
    empty_amqp_pool(&pool);
}

/* A property set as a publisher might send it, headers in a pool-free array. */
struct msg {
    amqp_basic_properties_t p;
    amqp_table_entry_t e[8];
    amqp_table_entry_t nested[1];
};

static void make_msg(struct msg *m, const char *user, amqp_field_value_t xdelay)
{
    memset(m, 0, sizeof *m);
    m->p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_HEADERS_FLAG |
                  AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    m->p.content_type = amqp_cstring_bytes("application/json");
    m->p.delivery_mode = 2;
    m->p.timestamp = 1700000000;
    if (user) {
        m->p._flags |= AMQP_BASIC_USER_ID_FLAG;
        m->p.user_id = amqp_cstring_bytes(user);
    }
    amqp_field_value_t b;
    memset(&b, 0, sizeof b);
    b.kind = AMQP_FIELD_KIND_BOOLEAN;
    b.value.boolean = 1;
    m->nested[0] = entry("inner", VS("v"));
    amqp_field_value_t tab;
    memset(&tab, 0, sizeof tab);
    tab.kind = AMQP_FIELD_KIND_TABLE;
    tab.value.table.num_entries = 1;
    tab.value.table.entries = m->nested;
    m->e[0] = entry("trace-id", VS("abc\0def")); /* bytes after a NUL: len from VS is 3 */
    m->e[0].value.value.bytes.len = 7;
    m->e[1] = entry("x-delay", xdelay);
    m->e[2] = entry("flag", b);
    m->e[3] = entry("bin", vstr(AMQP_FIELD_KIND_BYTES, "\x00\xff\x01", 3));
    m->e[4] = entry("nested", tab);
    m->p.headers.num_entries = 5;
    m->p.headers.entries = m->e;
}

static void test_outgoing_basic(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    struct msg m, copy;
    make_msg(&m, "bridge", vi(AMQP_FIELD_KIND_I32, 5000));
    memcpy(&copy, &m, sizeof m);

    amqp_basic_properties_t out;
    broker_msg_outgoing(&m.p, &out, &pool, 5000, "bridge", "01HZY3", NULL);

    /* input untouched, byte for byte */
    CHECK(memcmp(&copy, &m, sizeof m) == 0);
    CHECK(out.headers.entries != m.p.headers.entries);

    /* x-delay in place, negated, as a signed 32-bit field */
    int idx = -1;
    const amqp_table_entry_t *x = find(&out.headers, "x-delay", &idx);
    CHECK(x && idx == 1);
    CHECK(x && x->value.kind == AMQP_FIELD_KIND_I32 && x->value.value.i32 == -5000);

    /* everything else in order and byte-exact; the id at the end */
    CHECK(out.headers.num_entries == 6);
    const char *order[] = { "trace-id", "x-delay", "flag", "bin", "nested", "x-delay-bridge-id" };
    for (int i = 0; i < 6 && i < out.headers.num_entries; i++)
        CHECK(bytes_eq(out.headers.entries[i].key, order[i]));
    for (int i = 0; i < 5; i++)
        if (i != 1)
            CHECK(value_eq(&out.headers.entries[i].value, &m.e[i].value));
    CHECK(out.headers.entries[0].value.value.bytes.len == 7);
    const amqp_table_entry_t *id = find(&out.headers, "x-delay-bridge-id", NULL);
    CHECK(id && id->value.kind == AMQP_FIELD_KIND_UTF8 && bytes_eq(id->value.value.bytes, "01HZY3"));

    /* same user as the bridge: user-id kept, no x-original-user-id */
    CHECK(out._flags & AMQP_BASIC_USER_ID_FLAG);
    CHECK(bytes_eq(out.user_id, "bridge"));
    CHECK(!find(&out.headers, "x-original-user-id", NULL));
    CHECK(!find(&out.headers, "x-delay-error", NULL));

    /* other properties carried over */
    CHECK(out._flags == m.p._flags);
    CHECK(bytes_eq(out.content_type, "application/json"));
    CHECK(out.delivery_mode == 2 && out.timestamp == 1700000000);
    roundtrip(&out);
    empty_amqp_pool(&pool);
}

static void test_outgoing_delay_width(void)
{
    struct {
        uint64_t delay;
        uint8_t kind;
        int64_t want;
    } cases[] = {
        { 1, AMQP_FIELD_KIND_I32, -1 },
        { 2147483647u, AMQP_FIELD_KIND_I32, -2147483647ll },
        { 2147483648u, AMQP_FIELD_KIND_I32, INT32_MIN }, /* -2^31 still fits */
        { 2147483649u, AMQP_FIELD_KIND_I64, -2147483649ll },
        { 4294967295u, AMQP_FIELD_KIND_I64, -4294967295ll },
        { (uint64_t)INT64_MAX, AMQP_FIELD_KIND_I64, -INT64_MAX },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        amqp_pool_t pool;
        init_amqp_pool(&pool, 4096);
        struct msg m;
        make_msg(&m, NULL, vf64(1.0 * (double)cases[i].delay));
        amqp_basic_properties_t out;
        broker_msg_outgoing(&m.p, &out, &pool, cases[i].delay, "bridge", "id", NULL);
        const amqp_table_entry_t *x = find(&out.headers, "x-delay", NULL);
        CHECK(x && x->value.kind == cases[i].kind);
        if (x && x->value.kind == AMQP_FIELD_KIND_I32)
            CHECK(x->value.value.i32 == cases[i].want);
        if (x && x->value.kind == AMQP_FIELD_KIND_I64)
            CHECK(x->value.value.i64 == cases[i].want);
        /* a republished message parses as "now" */
        uint64_t ms = 7;
        CHECK(t_xdelay(&out.headers, UINT64_MAX, &ms) == XDELAY_NOW && ms == 0);
        roundtrip(&out);
        empty_amqp_pool(&pool);
    }
}

static void test_outgoing_user_id(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    struct msg m, copy;
    make_msg(&m, "alice", VS("1500"));
    memcpy(&copy, &m, sizeof m);

    amqp_basic_properties_t out;
    broker_msg_outgoing(&m.p, &out, &pool, 1500, "bridge", "id-1", NULL);
    CHECK(memcmp(&copy, &m, sizeof m) == 0);
    CHECK(!(out._flags & AMQP_BASIC_USER_ID_FLAG));
    CHECK(out.user_id.len == 0);
    int io = -1, ii = -1;
    const amqp_table_entry_t *o = find(&out.headers, "x-original-user-id", &io);
    const amqp_table_entry_t *id = find(&out.headers, "x-delay-bridge-id", &ii);
    CHECK(o && o->value.kind == AMQP_FIELD_KIND_UTF8 && bytes_eq(o->value.value.bytes, "alice"));
    CHECK(o && id && io == 5 && ii == 6 && out.headers.num_entries == 7);
    /* the string was x-delay "1500": now an I32 -1500 */
    const amqp_table_entry_t *x = find(&out.headers, "x-delay", NULL);
    CHECK(x && x->value.kind == AMQP_FIELD_KIND_I32 && x->value.value.i32 == -1500);
    roundtrip(&out);

    /* a prefix of the bridge user is a different user */
    make_msg(&m, "bridg", vi(AMQP_FIELD_KIND_I32, 1));
    broker_msg_outgoing(&m.p, &out, &pool, 1, "bridge", "id", NULL);
    CHECK(!(out._flags & AMQP_BASIC_USER_ID_FLAG));
    CHECK(find(&out.headers, "x-original-user-id", NULL));

    /* NULL bridge_user: any user-id is moved */
    make_msg(&m, "bridge", vi(AMQP_FIELD_KIND_I32, 1));
    broker_msg_outgoing(&m.p, &out, &pool, 1, NULL, "id", NULL);
    CHECK(!(out._flags & AMQP_BASIC_USER_ID_FLAG));

    /* no user-id: nothing added */
    make_msg(&m, NULL, vi(AMQP_FIELD_KIND_I32, 1));
    broker_msg_outgoing(&m.p, &out, &pool, 1, "bridge", "id", NULL);
    CHECK(!find(&out.headers, "x-original-user-id", NULL));
    CHECK(!(out._flags & AMQP_BASIC_USER_ID_FLAG));

    /* an x-original-user-id already there is replaced in place when moving */
    make_msg(&m, "alice", vi(AMQP_FIELD_KIND_I32, 1));
    m.e[5] = entry("x-original-user-id", VS("mallory"));
    m.p.headers.num_entries = 6;
    broker_msg_outgoing(&m.p, &out, &pool, 1, "bridge", "id", NULL);
    o = find(&out.headers, "x-original-user-id", &io);
    CHECK(o && io == 5 && bytes_eq(o->value.value.bytes, "alice"));
    CHECK(count(&out.headers, "x-original-user-id") == 1);
    CHECK(bytes_eq(m.e[5].value.value.bytes, "mallory"));
    roundtrip(&out);
    empty_amqp_pool(&pool);
}

static void test_outgoing_id_and_error(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    struct msg m;

    /* id replaced in place, duplicates dropped; error appended */
    make_msg(&m, NULL, VS("5s"));
    m.e[2] = entry("x-delay-bridge-id", VS("old"));
    m.e[5] = entry("x-delay-bridge-id", VS("older"));
    m.p.headers.num_entries = 6;
    struct msg copy;
    memcpy(&copy, &m, sizeof m);
    char id[16] = "new-id", err[32] = "invalid x-delay";
    amqp_basic_properties_t out;
    broker_msg_outgoing(&m.p, &out, &pool, 0, "bridge", id, err);
    CHECK(memcmp(&copy, &m, sizeof m) == 0);
    /* the caller's buffers may be reused: the pool holds copies */
    memset(id, 'X', sizeof id - 1);
    memset(err, 'X', sizeof err - 1);
    int ii = -1, ie = -1;
    const amqp_table_entry_t *i1 = find(&out.headers, "x-delay-bridge-id", &ii);
    const amqp_table_entry_t *e1 = find(&out.headers, "x-delay-error", &ie);
    CHECK(i1 && ii == 2 && bytes_eq(i1->value.value.bytes, "new-id"));
    CHECK(count(&out.headers, "x-delay-bridge-id") == 1);
    CHECK(e1 && ie == out.headers.num_entries - 1 && e1->value.kind == AMQP_FIELD_KIND_UTF8 &&
          bytes_eq(e1->value.value.bytes, "invalid x-delay"));
    CHECK(out.headers.num_entries == 6); /* 6 in, one duplicate dropped, error added */
    /* delay 0 (dead-lettered invalid x-delay): x-delay left as it was */
    const amqp_table_entry_t *x = find(&out.headers, "x-delay", NULL);
    CHECK(x && x->value.kind == AMQP_FIELD_KIND_UTF8 && bytes_eq(x->value.value.bytes, "5s"));
    roundtrip(&out);

    /* error replaced in place */
    make_msg(&m, NULL, vi(AMQP_FIELD_KIND_I32, 1));
    m.e[0] = entry("x-delay-error", VS("old"));
    broker_msg_outgoing(&m.p, &out, &pool, 1, "bridge", "i", "x-delay above max_delay_ms");
    e1 = find(&out.headers, "x-delay-error", &ie);
    CHECK(e1 && ie == 0 && bytes_eq(e1->value.value.bytes, "x-delay above max_delay_ms"));
    CHECK(out.headers.num_entries == 6);

    /* error NULL: an existing x-delay-error is kept as it was */
    make_msg(&m, NULL, vi(AMQP_FIELD_KIND_I32, 1));
    m.e[0] = entry("x-delay-error", VS("old"));
    broker_msg_outgoing(&m.p, &out, &pool, 1, "bridge", "i", NULL);
    e1 = find(&out.headers, "x-delay-error", &ie);
    CHECK(e1 && ie == 0 && bytes_eq(e1->value.value.bytes, "old"));

    /* duplicate x-delay entries are all neutralised */
    make_msg(&m, NULL, vi(AMQP_FIELD_KIND_I32, 10));
    m.e[3] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 20));
    broker_msg_outgoing(&m.p, &out, &pool, 10, "bridge", "i", NULL);
    CHECK(count(&out.headers, "x-delay") == 2);
    CHECK(out.headers.entries[1].value.value.i32 == -10 && out.headers.entries[3].value.value.i32 == -10);
    empty_amqp_pool(&pool);
}

static void test_outgoing_no_headers(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);

    /* no properties at all */
    amqp_basic_properties_t in, copy, out;
    memset(&in, 0, sizeof in);
    memcpy(&copy, &in, sizeof in);
    broker_msg_outgoing(&in, &out, &pool, 0, "bridge", "id-0", NULL);
    CHECK(memcmp(&copy, &in, sizeof in) == 0);
    CHECK(out._flags == AMQP_BASIC_HEADERS_FLAG);
    CHECK(out.headers.num_entries == 1);
    CHECK(bytes_eq(out.headers.entries[0].key, "x-delay-bridge-id"));
    CHECK(bytes_eq(out.headers.entries[0].value.value.bytes, "id-0"));
    roundtrip(&out);

    /* headers flag clear: whatever the table fields hold is not looked at */
    memset(&in, 0, sizeof in);
    in._flags = AMQP_BASIC_USER_ID_FLAG;
    in.user_id = amqp_cstring_bytes("alice");
    in.headers.num_entries = 1000;
    in.headers.entries = NULL;
    broker_msg_outgoing(&in, &out, &pool, 500, "bridge", "id-1", "boom");
    CHECK(out._flags == AMQP_BASIC_HEADERS_FLAG);
    CHECK(out.headers.num_entries == 3);
    if (out.headers.num_entries == 3) {
        CHECK(bytes_eq(out.headers.entries[0].key, "x-original-user-id"));
        CHECK(bytes_eq(out.headers.entries[1].key, "x-delay-bridge-id"));
        CHECK(bytes_eq(out.headers.entries[2].key, "x-delay-error"));
    }
    roundtrip(&out);

    /* headers flag set, empty table */
    memset(&in, 0, sizeof in);
    in._flags = AMQP_BASIC_HEADERS_FLAG;
    broker_msg_outgoing(&in, &out, &pool, 500, "bridge", "id-2", NULL);
    CHECK(out.headers.num_entries == 1);
    roundtrip(&out);
    empty_amqp_pool(&pool);
}

/* What the broker hands over: decode real wire bytes, rewrite, encode again. */
static void test_outgoing_from_wire(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    struct msg m;
    make_msg(&m, "alice", vi(AMQP_FIELD_KIND_I64, 90000));
    static char buf[4096];
    amqp_bytes_t enc = { sizeof buf, buf };
    int n = amqp_encode_properties(AMQP_BASIC_CLASS, &m.p, enc);
    CHECK(n > 0);
    void *dec = NULL;
    amqp_bytes_t wire = { (size_t)(n > 0 ? n : 0), buf };
    CHECK(amqp_decode_properties(AMQP_BASIC_CLASS, &pool, wire, &dec) == 0);
    const amqp_basic_properties_t *in = dec;
    uint64_t ms = 0;
    CHECK(t_xdelay(&in->headers, 4294967295u, &ms) == XDELAY_OK && ms == 90000);
    amqp_basic_properties_t out;
    broker_msg_outgoing(in, &out, &pool, ms, "bridge", "0000000000000042", NULL);
    CHECK(out.headers.num_entries == 7);
    roundtrip(&out);
    empty_amqp_pool(&pool);
}

/* A drain hands a message back: x-delay = +remaining, once, the rest kept. */
static void test_set_delay(void)
{
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    struct msg m;
    amqp_basic_properties_t out, in;
    uint64_t ms = 0;

    make_msg(&m, NULL, vi(AMQP_FIELD_KIND_I32, 10));
    m.e[3] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 20)); /* a duplicate, dropped */
    broker_msg_outgoing(&m.p, &out, &pool, 0, "bridge", "id-7", NULL);
    broker_msg_set_delay(&out, &pool, 4321);
    CHECK(count(&out.headers, "x-delay") == 1);
    CHECK(t_xdelay(&out.headers, UINT64_MAX, &ms) == XDELAY_OK && ms == 4321);
    CHECK(count(&out.headers, "trace-id") == 1 && count(&out.headers, "nested") == 1);
    CHECK(count(&out.headers, "x-delay-bridge-id") == 1);
    roundtrip(&out);

    /* beyond 32 bits, and on a message that had no headers at all */
    memset(&in, 0, sizeof in);
    broker_msg_outgoing(&in, &out, &pool, 0, "bridge", "id-8", NULL);
    broker_msg_set_delay(&out, &pool, (int64_t)5 * 365 * 86400000);
    CHECK(out._flags & AMQP_BASIC_HEADERS_FLAG);
    CHECK(t_xdelay(&out.headers, UINT64_MAX, &ms) == XDELAY_OK &&
          ms == (uint64_t)5 * 365 * 86400000);
    roundtrip(&out);
    empty_amqp_pool(&pool);
}

/* x-delay-until, then x-opt-delivery-time, then x-delay: the first present decides. */
static void test_due(void)
{
    const uint64_t now = 1764000000000ull; /* 2025-11-24T16:00:00Z */
    const uint64_t M = 4294967295u;
    uint64_t ms = 99;
    amqp_table_entry_t e[4];
    amqp_table_t t = { 0, e };
    amqp_field_value_t ts;

    CHECK(t_due(NULL, now, M, &ms) == XDELAY_NOW && ms == 0);
    e[0] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5000));
    t.num_entries = 1;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 5000);

    /* x-delay-until wins over x-delay, wherever it stands */
    e[1] = entry("x-delay-until", VS("2025-11-24T16:00:07.250Z"));
    t.num_entries = 2;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 7250);
    /* ... and over x-opt-delivery-time */
    e[2] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    t.num_entries = 3;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 7250);
    /* an invalid x-delay-until is an error, not a fall back to x-delay */
    e[1] = entry("x-delay-until", VS("tomorrow"));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_UNTIL_EINVALID && ms == 0);
    CHECK(strcmp(xdelay_strerror(XDELAY_UNTIL_EINVALID), "invalid x-delay-until") == 0);
    /* x-opt-delivery-time alone (with x-delay): epoch ms */
    e[1] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    t.num_entries = 2;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 9000);
    e[1] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + M + 1));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_DT_ETOOBIG && ms == 0);
    CHECK(xdelay_invalid(XDELAY_DT_ETOOBIG) && !xdelay_invalid(XDELAY_NOW));
    /* an AMQP timestamp is seconds */
    memset(&ts, 0, sizeof ts);
    ts.kind = AMQP_FIELD_KIND_TIMESTAMP;
    ts.value.u64 = now / 1000 + 60;
    e[1] = entry("x-delay-until", ts);
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 60000);
    ts.value.u64 = now / 1000 - 60; /* the past: at once */
    e[1] = entry("x-delay-until", ts);
    CHECK(t_due(&t, now, M, &ms) == XDELAY_NOW && ms == 0);
    /* epoch ms as the clients send them: I64, U64 (py-amqp), double */
    e[1] = entry("x-delay-until", vu64(now + 1500));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 1500);
    e[1] = entry("x-delay-until", vf64((double)(now + 1500) + 0.25)); /* rounded up */
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 1501);
    /* seconds where ms were meant: invalid, never "at once" */
    e[1] = entry("x-delay-until", vi(AMQP_FIELD_KIND_I64, (int64_t)(now / 1000 + 60)));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_UNTIL_EINVALID);
    e[1] = entry("x-delay-until", vi(AMQP_FIELD_KIND_I8, 1));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_UNTIL_EINVALID);
    e[1] = entry("x-delay-until", vstr(AMQP_FIELD_KIND_BYTES, "2025-11-24T16:00:07Z", 20));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_UNTIL_EINVALID);

    /* x-opt-delivery-delay (AMQP 1.0, relative ms, a long as RabbitMQ 4 hands it over) */
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 1500));
    t.num_entries = 1;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 1500);
    /* x-delay beside it wins, wherever it stands */
    e[1] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5000));
    t.num_entries = 2;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 5000);
    /* an absolute due time wins over both */
    e[2] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    t.num_entries = 3;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 9000);
    /* its errors carry its name, and follow the invalid_delay policy */
    e[0] = entry("x-opt-delivery-delay", VS("soon"));
    t.num_entries = 1;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_DD_EINVALID && ms == 0);
    CHECK(strcmp(xdelay_strerror(XDELAY_DD_EINVALID), "invalid x-opt-delivery-delay") == 0);
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, (int64_t)M + 1));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_DD_ETOOBIG && ms == 0);
    CHECK(xdelay_invalid(XDELAY_DD_ETOOBIG) && xdelay_invalid(XDELAY_DD_EINVALID));
    CHECK(strcmp(xdelay_strerror(XDELAY_DD_ETOOBIG), "x-opt-delivery-delay above max_delay_ms") == 0);
    /* negative or zero: at once, as x-delay */
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, -20));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_NOW && ms == 0);
}

/* delay_from "broker": an x-delay counts from the broker's timestamp_in_ms. */
static void test_due_stamped(void)
{
    const uint64_t now = 1764000000000ull;
    const uint64_t M = 4294967295u;
    uint64_t ms = 99;
    int un = 9;
    amqp_table_entry_t e[3];
    amqp_table_t t = { 0, e };

    /* no stamp: t_due() exactly */
    CHECK(t_due_stamped(NULL, now, M, &ms, &un) == XDELAY_NOW && ms == 0 && un == 0);
    e[0] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5000));
    t.num_entries = 1;
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    /* stamped 1.2 s ago (a long string is not a stamp: counted from now) */
    e[1] = entry("timestamp_in_ms", vstr(AMQP_FIELD_KIND_UTF8, "1763999998800", 13));
    t.num_entries = 2;
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    /* (counted from the end of the stamp's ms: the receipt was somewhere in it) */
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1200));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 3801 && un == 0);
    e[1] = entry("timestamp_in_ms", vu64(now - 1200));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 3801 && un == 0);
    /* stamped in the ms just before now's (rounded-up) receipt: the whole delay */
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 0);
    /* stamped longer ago than the delay (a backlog): at once */
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 3600000));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 0 && un == 0);
    /* a stamp from the future (the broker's clock ahead): counted from now, never later */
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 700));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 0);
    /* zero or negative: not a stamp */
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, -5));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    /* an invalid x-delay stays invalid, at once */
    e[0] = entry("x-delay", VS("soon"));
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1200));
    CHECK(xdelay_invalid(t_due_stamped(&t, now, M, &ms, &un)) && ms == 0);
    /* no x-delay: at once */
    e[0] = entry("other", vi(AMQP_FIELD_KIND_I32, 1));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_NOW && ms == 0);
    /* an absolute due time is absolute: the stamp changes nothing */
    e[0] = entry("x-delay-until", VS("2025-11-24T16:00:07.250Z"));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 7250 && un == 0);
}

/* A drain's hand-back drops the broker's stamp of the first publish. */
static void test_set_delay_drops_stamp(void)
{
    amqp_pool_t pool;
    amqp_table_entry_t e[3];
    amqp_basic_properties_t p;

    init_amqp_pool(&pool, 4096);
    memset(&p, 0, sizeof p);
    e[0] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, 1764000000000ll));
    e[1] = entry("trace", VS("t-1"));
    e[2] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, 1764000000001ll));
    p._flags = AMQP_BASIC_HEADERS_FLAG;
    p.headers.entries = e;
    p.headers.num_entries = 3;
    broker_msg_set_delay(&p, &pool, 1500);
    CHECK(p.headers.num_entries == 2 && count(&p.headers, "timestamp_in_ms") == 0);
    CHECK(count(&p.headers, "trace") == 1 && count(&p.headers, "x-delay") == 1);
    CHECK(e[0].value.value.i64 == 1764000000000ll); /* the input table is not written */
    roundtrip(&p);

    /* delay_from "broker": the republish drops it, the rest as broker_msg_outgoing() made it */
    amqp_basic_properties_t out;
    p.headers.entries = e;
    p.headers.num_entries = 3;
    broker_msg_outgoing(&p, &out, &pool, 4000, "bridge", "id-9", NULL);
    CHECK(count(&out.headers, "timestamp_in_ms") == 2);
    broker_msg_drop_stamp(&out);
    CHECK(out.headers.num_entries == 2 && count(&out.headers, "timestamp_in_ms") == 0);
    CHECK(count(&out.headers, "trace") == 1 && count(&out.headers, "x-delay-bridge-id") == 1);
    CHECK(count(&p.headers, "timestamp_in_ms") == 2);
    roundtrip(&out);
    memset(&out, 0, sizeof out); /* no headers at all: nothing to do */
    broker_msg_drop_stamp(&out);
    CHECK(!(out._flags & AMQP_BASIC_HEADERS_FLAG));
    empty_amqp_pool(&pool);
}

static int key_eq(amqp_bytes_t k, const char *name)
{
    return k.len == strlen(name) && memcmp(k.bytes, name, k.len) == 0;
}

/* The encoded properties of a delivery with headers e[0..n): what intake logs and fingerprints. */
static size_t intake_props(amqp_table_entry_t *e, int n, int stream, int from_bridge,
                           uint8_t **buf, size_t *cap)
{
    amqp_basic_properties_t p;
    amqp_table_entry_t kept[8];
    amqp_table_t h = { n, e };
    int r;

    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_HEADERS_FLAG;
    p.message_id = amqp_cstring_bytes("d05201");
    p.headers.num_entries = t_intake(&h, stream, from_bridge, kept);
    p.headers.entries = kept;
    r = broker_msg_encode_props(&p, buf, cap);
    CHECK(r > 0);
    return r > 0 ? (size_t)r : 0;
}

/*
 * A redelivery is logged as its first delivery was: RabbitMQ 4.3's quorum
 * queue adds x-acquired-count (every redelivery) and x-delivery-count (a
 * return) -- kept, the redelivery's fingerprint missed its first record's
 * and integration.broker4's disk_full stored 945 messages twice.
 */
#define STAMP 1796561387125
static void test_intake_headers(void)
{
    amqp_table_entry_t first[] = { entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, STAMP)),
                                   entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5201)) };
    amqp_table_entry_t again[] = { entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, STAMP)),
                                   entry("x-acquired-count", vi(AMQP_FIELD_KIND_I64, 2)),
                                   entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5201)),
                                   entry("x-delivery-count", vi(AMQP_FIELD_KIND_I64, 1)) };
    amqp_table_entry_t timeout[] = { entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, STAMP)),
                                     entry("x-acquired-count", vi(AMQP_FIELD_KIND_I64, 1)),
                                     entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5201)) };
    amqp_table_entry_t stream[] = { entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, 7)),
                                    entry("x-original-user-id", VS("mallory")),
                                    entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5201)) };
    amqp_table_entry_t out[4];
    amqp_table_t t = { 3, stream };
    uint8_t *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0, na, nb;

    na = intake_props(first, 2, 0, 0, &a, &ca);
    nb = intake_props(again, 4, 0, 0, &b, &cb);
    CHECK(na > 0 && na == nb && memcmp(a, b, na) == 0);
    nb = intake_props(timeout, 3, 0, 0, &b, &cb);
    CHECK(na > 0 && na == nb && memcmp(a, b, na) == 0);

    /* A stream's offset only on a stream; a provenance header only from a bridge. */
    CHECK(t_intake(&t, 1, 0, out) == 1 && key_eq(out[0].key, "x-delay"));
    CHECK(t_intake(&t, 0, 0, out) == 2 && key_eq(out[0].key, "x-stream-offset"));
    CHECK(t_intake(&t, 1, 1, out) == 2 && key_eq(out[0].key, "x-original-user-id"));
    CHECK(t_intake(NULL, 0, 0, out) == 0);
    free(a);
    free(b);
}


/*
 * Rules a header read keeps, pinned before the reading moved to one pass
 * (issue 42): a name counts by its first entry only, whatever follows.
 */
static void test_first_entry_rules(void)
{
    const uint64_t now = 1764000000000ull;
    const uint64_t M = 4294967295u;
    uint64_t ms = 99;
    int un = 9;
    amqp_table_entry_t e[4];
    amqp_table_t t = { 0, e };
    const char *p;
    size_t n;

    /* x-delay-until after x-opt-delivery-time still wins */
    e[0] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    e[1] = entry("x-delay-until", VS("2025-11-24T16:00:07.250Z"));
    t.num_entries = 2;
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 7250);
    /* a second x-delay-until is not looked at, valid or not */
    e[0] = entry("x-delay-until", VS("tomorrow"));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_UNTIL_EINVALID && ms == 0);
    e[0] = entry("x-opt-delivery-time", VS("soon"));
    e[1] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_DT_EINVALID && ms == 0);
    /* an invalid x-delay beside a valid x-opt-delivery-delay: x-delay's error */
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 1500));
    e[1] = entry("x-delay", VS("soon"));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_EINVALID && ms == 0);
    /* two x-opt-delivery-delay: the first */
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 1500));
    e[1] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 2500));
    CHECK(t_due(&t, now, M, &ms) == XDELAY_OK && ms == 1500);
    CHECK(t_xdelay(&t, M, &ms) == XDELAY_NOW && ms == 0); /* x-delay alone: none */

    /* the stamp: its first entry only; a string there is no stamp, whatever follows */
    e[0] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 5000));
    e[1] = entry("timestamp_in_ms", VS("1763999998800"));
    e[2] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1200));
    t.num_entries = 3;
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1200));
    e[2] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 100));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 3801 && un == 0);
    /* stamp kinds: I64, U64 up to INT64_MAX, I32, U32; not I16, not a timestamp */
    t.num_entries = 2;
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I32, 5));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 0 && un == 0);
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_U32, 5));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 0 && un == 0);
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I16, 5));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    e[1] = entry("timestamp_in_ms", vu64((uint64_t)INT64_MAX + 1));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 5000 && un == 1);
    /* x-opt-delivery-delay counts from the stamp too, and keeps its errors' names */
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 5000));
    e[1] = entry("timestamp_in_ms", vi(AMQP_FIELD_KIND_I64, (int64_t)now - 1200));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 3801 && un == 0);
    e[0] = entry("x-opt-delivery-delay", VS("soon"));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_DD_EINVALID && ms == 0 &&
          un == 0);
    t.num_entries = 1; /* unstamped, invalid: not counted as unstamped */
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_DD_EINVALID && un == 0);
    e[0] = entry("x-opt-delivery-delay", vi(AMQP_FIELD_KIND_I64, 0)); /* NOW is not OK */
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_NOW && un == 0);
    /* x-opt-delivery-time with a stamp: absolute, unstamped stays 0 */
    e[0] = entry("x-opt-delivery-time", vi(AMQP_FIELD_KIND_I64, (int64_t)now + 9000));
    CHECK(t_due_stamped(&t, now, M, &ms, &un) == XDELAY_OK && ms == 9000 && un == 0);

    /* a string header: the first entry's kind decides (-1), a byte array is one */
    e[0] = entry("x-delay-key", vi(AMQP_FIELD_KIND_I32, 7));
    e[1] = entry("x-delay-key", VS("k1"));
    t.num_entries = 2;
    CHECK(t_header_str(&t, "x-delay-key", &p, &n) == -1);
    e[0] = entry("x-delay-key", vstr(AMQP_FIELD_KIND_BYTES, "k0", 2));
    CHECK(t_header_str(&t, "x-delay-key", &p, &n) == 1 && n == 2 &&
          memcmp(p, "k0", 2) == 0);
    e[0] = entry("x-delay-key", VS(""));
    CHECK(t_header_str(&t, "x-delay-key", &p, &n) == 1 && n == 0);
    CHECK(t_header_str(&t, "x-delay-cancel", &p, &n) == 0);
    CHECK(t_header_str(NULL, "x-delay-key", &p, &n) == 0);
    /* an integer header (x-stream-offset, x-delay-key-at): l L I T, the first entry's kind */
    int64_t v = 5;
    amqp_field_value_t ts;
    memset(&ts, 0, sizeof ts);
    ts.kind = AMQP_FIELD_KIND_TIMESTAMP;
    ts.value.u64 = 1700000000;
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, -3));
    e[1] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, 9));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) == 1 && v == -3);
    e[0] = entry("x-stream-offset", vu64(UINT64_MAX));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) == 1 && v == -1);
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I32, 12));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) == 1 && v == 12);
    e[0] = entry("x-stream-offset", ts);
    CHECK(t_header_i64(&t, "x-stream-offset", &v) == 1 && v == 1700000000);
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_U32, 12));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) < 1);
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I16, 12));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) < 1);
    e[0] = entry("x-stream-offset", VS("12"));
    CHECK(t_header_i64(&t, "x-stream-offset", &v) < 1);
    CHECK(t_header_i64(&t, "x-delay-key-at", &v) == 0);
    CHECK(t_header_i64(NULL, "x-delay-key-at", &v) == 0);
}

/* The one pass: first entries into the struct, and what intake keeps. */
static void test_read(void)
{
    amqp_table_entry_t e[8], out[8];
    amqp_table_t t = { 0, e };
    struct broker_headers h;

    broker_msg_read(NULL, 1, 0, out, &h);
    CHECK(h.nkeep == 0 && !h.xdelay && !h.stream_offset);
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.nkeep == 0);

    e[0] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 1));
    e[1] = entry("x-delay", vi(AMQP_FIELD_KIND_I32, 2));
    e[2] = entry("x-death", VS("d"));
    e[3] = entry("x-delay-bridge-handback", vi(AMQP_FIELD_KIND_I64, 1));
    e[4] = entry("x-delivery-count", vi(AMQP_FIELD_KIND_I64, 1));
    e[5] = entry("x-retry-history", VS("h"));
    e[6] = entry("x-delay-key-at", vi(AMQP_FIELD_KIND_I64, 9));
    e[7] = entry("x-acquired-count", vi(AMQP_FIELD_KIND_I64, 1));
    t.num_entries = 8;
    broker_msg_read(&t, 0, 0, out, &h);
    CHECK(h.xdelay == &e[0].value && h.death == &e[2].value && h.handback == &e[3].value);
    CHECK(h.retry_history == &e[5].value && h.ev_at == &e[6].value && !h.until && !h.key);
    CHECK(h.nkeep == 5 && key_eq(out[0].key, "x-delay") && out[1].value.value.i32 == 2 &&
          key_eq(out[2].key, "x-death") && key_eq(out[3].key, "x-retry-history") &&
          key_eq(out[4].key, "x-delay-key-at"));
    broker_msg_read(&t, 0, 1, out, &h); /* from a bridge: its hand-back mark stays */
    CHECK(h.nkeep == 6 && key_eq(out[3].key, "x-delay-bridge-handback"));
    broker_msg_read(&t, 0, 0, NULL, &h); /* no keep: read alone */
    CHECK(h.nkeep == 0 && h.xdelay == &e[0].value);

    /* a stream: every x-stream-offset goes when the first is the broker's place */
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, 7));
    e[1] = entry("a", VS("1"));
    e[2] = entry("x-stream-offset", VS("junk"));
    t.num_entries = 3;
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.stream_offset == &e[0].value && h.nkeep == 1 && key_eq(out[0].key, "a"));
    broker_msg_read(&t, 0, 0, out, &h); /* not a stream: kept */
    CHECK(h.stream_offset == &e[0].value && h.nkeep == 3);
    /* ... and every one stays when the first is no place (the delivery has none) */
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, -1));
    e[2] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I64, 7));
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.nkeep == 3);
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_U32, 7));
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.nkeep == 3);
    e[0] = entry("x-stream-offset", vi(AMQP_FIELD_KIND_I32, 0));
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.nkeep == 1);

    /* names compare by length and bytes; a NULL key is no name */
    e[0].key.bytes = (void *)"x-stream-offsetX";
    e[0].key.len = 16;
    e[1].key = amqp_empty_bytes;
    broker_msg_read(&t, 1, 0, out, &h);
    CHECK(h.stream_offset == &e[2].value && h.nkeep == 2);
    CHECK(broker_msg_provenance(amqp_cstring_bytes("x-original-user-id")) &&
          broker_msg_provenance(amqp_cstring_bytes("x-delay-bridge-drained")) &&
          !broker_msg_provenance(amqp_cstring_bytes("x-delay")) &&
          !broker_msg_provenance(amqp_cstring_bytes("x-delivery-count")) &&
          !broker_msg_provenance(amqp_empty_bytes));
}

int main(void)
{
    test_read();
    test_first_entry_rules();
    test_due();
    test_due_stamped();
    test_set_delay_drops_stamp();
    test_integers();
    test_max_delay();
    test_floats();
    test_decimal();
    test_strings();
    test_other_kinds();
    test_lookup();
    test_outgoing_basic();
    test_outgoing_delay_width();
    test_outgoing_user_id();
    test_outgoing_id_and_error();
    test_outgoing_no_headers();
    test_outgoing_from_wire();
    test_set_delay();
    test_intake_headers();
    if (failures) {
        printf("test_broker_msg: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_broker_msg: ok\n");
    return 0;
}
