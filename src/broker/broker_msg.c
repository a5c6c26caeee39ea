/*
 * broker_msg.c -- delay-bridge's headers in and out of rabbitmq-c's types.
 *
 * Reading is one pass (broker_msg_read): each entry's name is looked up
 * once in names[] below, which says where its value goes in struct
 * broker_headers -- only the first entry of a name is kept (a table lookup
 * in RabbitMQ also returns the first; a later duplicate is never looked at,
 * valid or not) -- and what intake does with it (kept, or dropped: a
 * queue's counter, a stream's place, a provenance header from anyone but a
 * bridge). Every later question (the delay, the keys, a stream's offset, a
 * retry's dead-letter in broker_retry.c) is asked of the struct, so a
 * delivery's header table is read once, whatever the route. Before, each
 * reader scanned the table for its own names: a plain delivery 7 times, a
 * broker-stamped one 8, a retry route's up to 15.
 *
 * The delay: x-delay's value is mapped onto struct xdelay_value and judged
 * by xdelay_eval() (xdelay.c holds the rules):
 *
 *   b B s u I i l (I8..I64)  -> INT      L (U64)  -> UINT
 *   f d (F32, F64)           -> FLOAT    D        -> DECIMAL (v read as int32, as RabbitMQ does)
 *   S (UTF8, long string)    -> TEXT     T        -> TIMESTAMP
 *   anything else (t x V F A) -> OTHER
 *
 * broker_msg_due() looks first for "x-delay-until", then "x-opt-delivery-time"
 * (an AMQP 1.0 annotation as RabbitMQ 4.x hands it to 0-9-1 consumers),
 * judged by xdelay_until_eval(); then "x-delay" as above; then
 * "x-opt-delivery-delay" (the relative AMQP 1.0 annotation, ms), judged as
 * x-delay with errors of its own name. The first present decides, even
 * when it is invalid (its error then follows the route's invalid_delay
 * policy): absolute before relative, the plugin's header before AMQP 1.0's.
 *
 * rabbitmq-c has no short-string field kind (0-9-1's 's' is decoded as a
 * short int, as RabbitMQ does), so "short or long string" is 'S' here. A
 * byte array 'x' is binary by definition and is not read as text.
 *
 * Writing: broker_msg_outgoing() copies the properties struct, then builds a
 * new header table in the pool: the input's entries in order (values shared
 * with the input, not copied), x-delay rewritten in place, bridge headers
 * replaced in place or appended. Strings the bridge adds (id, error, the
 * moved user-id) are copied into the pool. The input is never written.
 */
#include "delay-bridge/broker_msg.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "delay-bridge/api.h"
#include "delay-bridge/strbuf.h"
#include "base/xalloc.h"

#define H_XDELAY "x-delay"
#define H_UNTIL "x-delay-until"
#define H_DELIVERY_TIME "x-opt-delivery-time"
#define H_DELIVERY_DELAY "x-opt-delivery-delay"
#define H_ORIG_USER "x-original-user-id"
#define H_BRIDGE_ID "x-delay-bridge-id"
#define H_ERROR "x-delay-error"
#define H_STAMP "timestamp_in_ms"

static int key_is(amqp_bytes_t k, const char *name)
{
    size_t n = strlen(name);
    return k.len == n && (n == 0 || (k.bytes && memcmp(k.bytes, name, n) == 0));
}

static void field_to_value(const amqp_field_value_t *f, struct xdelay_value *v)
{
    memset(v, 0, sizeof(*v));
    v->kind = XDELAY_INT;
    switch (f->kind) {
    case AMQP_FIELD_KIND_I8: v->i = f->value.i8; break;
    case AMQP_FIELD_KIND_U8: v->i = f->value.u8; break;
    case AMQP_FIELD_KIND_I16: v->i = f->value.i16; break;
    case AMQP_FIELD_KIND_U16: v->i = f->value.u16; break;
    case AMQP_FIELD_KIND_I32: v->i = f->value.i32; break;
    case AMQP_FIELD_KIND_U32: v->i = f->value.u32; break;
    case AMQP_FIELD_KIND_I64: v->i = f->value.i64; break;
    case AMQP_FIELD_KIND_U64:
        v->kind = XDELAY_UINT;
        v->u = f->value.u64;
        break;
    case AMQP_FIELD_KIND_F32:
        v->kind = XDELAY_FLOAT;
        v->f = (double)f->value.f32;
        break;
    case AMQP_FIELD_KIND_F64:
        v->kind = XDELAY_FLOAT;
        v->f = f->value.f64;
        break;
    case AMQP_FIELD_KIND_DECIMAL:
        v->kind = XDELAY_DECIMAL;
        v->dec.scale = f->value.decimal.decimals;
        v->dec.value = (int32_t)f->value.decimal.value;
        break;
    case AMQP_FIELD_KIND_UTF8:
        v->kind = XDELAY_TEXT;
        v->text.p = f->value.bytes.bytes;
        v->text.len = f->value.bytes.len;
        break;
    case AMQP_FIELD_KIND_TIMESTAMP:
        v->kind = XDELAY_TIMESTAMP;
        v->u = f->value.u64;
        break;
    default:
        v->kind = XDELAY_OTHER;
        break;
    }
}

/*
 * The names a read looks for: where the first entry of each goes in struct
 * broker_headers (-1: nowhere), and what intake does with every entry of it.
 */
enum { KEEP, QUEUE_COUNT, STREAM_OFFSET, PROVENANCE };
#define SLOT(f) (int)offsetof(struct broker_headers, f)
static const struct name {
    const char *s;
    size_t len;
    int slot;
    int intake;
} names[] = {
#define N(s, slot, intake) {s, sizeof(s) - 1, slot, intake}
    N(H_XDELAY, SLOT(xdelay), KEEP),
    N(H_UNTIL, SLOT(until), KEEP),
    N(H_DELIVERY_TIME, SLOT(delivery_time), KEEP),
    N(H_DELIVERY_DELAY, SLOT(delivery_delay), KEEP),
    N(H_STAMP, SLOT(stamp), KEEP),
    N("x-delay-key", SLOT(key), KEEP),
    N("x-delay-cancel", SLOT(cancel), KEEP),
    N(H_BRIDGE_ID, SLOT(bridge_id), KEEP),
    N("x-delay-key-event", SLOT(ev_kind), KEEP),
    N("x-delay-key-origin", SLOT(ev_origin), KEEP),
    N("x-delay-key-at", SLOT(ev_at), KEEP),
    N("x-stream-offset", SLOT(stream_offset), STREAM_OFFSET),
    N("x-death", SLOT(death), KEEP),
    N("x-last-death-queue", SLOT(last_death_queue), KEEP),
    N("x-first-death-queue", SLOT(first_death_queue), KEEP),
    N("x-last-death-reason", SLOT(last_death_reason), KEEP),
    N("x-first-death-reason", SLOT(first_death_reason), KEEP),
    N("x-retry-attempt", SLOT(retry_attempt), KEEP),
    N("x-retry-history", SLOT(retry_history), KEEP),
    N("x-delay-bridge-handback", SLOT(handback), PROVENANCE),
    N("x-delivery-count", -1, QUEUE_COUNT),
    N("x-acquired-count", -1, QUEUE_COUNT),
    N(H_ORIG_USER, -1, PROVENANCE),
    N(H_ERROR, -1, PROVENANCE),
    N("x-delay-unroutable", -1, PROVENANCE),
    N("x-original-exchange", -1, PROVENANCE),
    N("x-original-routing-key", -1, PROVENANCE),
    N("x-retry-parked-reason", -1, PROVENANCE),
    N("x-retry-queue", -1, PROVENANCE),
    N("x-retry-attempts", -1, PROVENANCE),
    N("x-delay-bridge-drained", -1, PROVENANCE),
#undef N
};
#undef SLOT

/* The entry of names[] that k is, or NULL. */
static const struct name *name_of(amqp_bytes_t k)
{
    if (!k.bytes || k.len < 7) /* "x-death", the shortest */
        return NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (k.len == names[i].len && memcmp(k.bytes, names[i].s, k.len) == 0)
            return &names[i];
    return NULL;
}

void broker_msg_read(const amqp_table_t *t, int stream, int from_bridge, amqp_table_entry_t *keep,
                     struct broker_headers *h)
{
    int stream_drop = 0;

    memset(h, 0, sizeof *h);
    if (!t || t->num_entries <= 0 || !t->entries)
        return;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        const struct name *n = name_of(e->key);
        int drop = 0;

        if (n && n->slot >= 0) {
            const amqp_field_value_t **slot =
                (const amqp_field_value_t **)((char *)h + n->slot);
            if (!*slot) {
                *slot = &e->value;
                if (n->intake == STREAM_OFFSET) { /* the first decides for every one */
                    int64_t off;
                    stream_drop = stream && broker_msg_i64(&e->value, &off) > 0 && off >= 0;
                }
            }
        }
        if (n) {
            switch (n->intake) {
            case QUEUE_COUNT: drop = 1; break;
            case STREAM_OFFSET: drop = stream_drop; break;
            case PROVENANCE: drop = !from_bridge; break;
            default: break;
            }
        }
        if (keep && !drop)
            keep[h->nkeep++] = *e;
    }
}

enum xdelay_status broker_msg_xdelay(const struct broker_headers *h, uint64_t max_delay_ms,
                                     uint64_t *delay_ms)
{
    struct xdelay_value v;

    if (!h->xdelay)
        return xdelay_eval(NULL, max_delay_ms, delay_ms);
    field_to_value(h->xdelay, &v);
    return xdelay_eval(&v, max_delay_ms, delay_ms);
}

/* A relative delay: x-delay, or without it x-opt-delivery-delay (its errors named after it). */
static enum xdelay_status relative(const struct broker_headers *h, uint64_t max_delay_ms,
                                   uint64_t *delay_ms)
{
    struct xdelay_value v;
    enum xdelay_status s;

    if (h->xdelay || !h->delivery_delay)
        return broker_msg_xdelay(h, max_delay_ms, delay_ms);
    field_to_value(h->delivery_delay, &v);
    s = xdelay_eval(&v, max_delay_ms, delay_ms);
    return s == XDELAY_EINVALID ? XDELAY_DD_EINVALID : s == XDELAY_ETOOBIG ? XDELAY_DD_ETOOBIG : s;
}

enum xdelay_status broker_msg_due(const struct broker_headers *h, uint64_t now_ms,
                                  uint64_t max_delay_ms, uint64_t *delay_ms)
{
    const amqp_field_value_t *abs[2] = {h->until, h->delivery_time};
    struct xdelay_value v;

    for (int which = 0; which < 2; which++) {
        if (abs[which]) {
            field_to_value(abs[which], &v);
            return xdelay_until_eval(&v, which, now_ms, max_delay_ms, delay_ms);
        }
    }
    return relative(h, max_delay_ms, delay_ms);
}

/* The broker's stamp: an integer of any width, > 0; 0 when absent or another kind. */
static uint64_t stamp_ms(const amqp_field_value_t *f)
{
    int64_t v;

    if (!f)
        return 0;
    switch (f->kind) {
    case AMQP_FIELD_KIND_I64: v = f->value.i64; break;
    case AMQP_FIELD_KIND_U64: v = f->value.u64 > INT64_MAX ? 0 : (int64_t)f->value.u64; break;
    case AMQP_FIELD_KIND_I32: v = f->value.i32; break;
    case AMQP_FIELD_KIND_U32: v = f->value.u32; break;
    default: return 0;
    }
    return v > 0 ? (uint64_t)v : 0;
}

enum xdelay_status broker_msg_due_stamped(const struct broker_headers *h, uint64_t now_ms,
                                          uint64_t max_delay_ms, uint64_t *delay_ms,
                                          int *unstamped)
{
    uint64_t at, d;
    enum xdelay_status s;

    *unstamped = 0;
    if (h->until || h->delivery_time)
        return broker_msg_due(h, now_ms, max_delay_ms, delay_ms);
    s = relative(h, max_delay_ms, &d);
    if (!(at = stamp_ms(h->stamp))) {
        *unstamped = s == XDELAY_OK;
        *delay_ms = d;
        return s;
    }
    /* The broker's receipt lies somewhere in the ms `at`: count from its end,
     * as from our own receipt rounded up (clock_receipt_ms), never early. */
    if (++at > now_ms)
        at = now_ms;
    *delay_ms = at + d > now_ms ? at + d - now_ms : 0;
    return s;
}

static void *pool_alloc(amqp_pool_t *pool, size_t n)
{
    void *p = amqp_pool_alloc(pool, n ? n : 1);
    if (!p)
        xalloc_die(n);
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

void broker_msg_outgoing(const amqp_basic_properties_t *in, amqp_basic_properties_t *out,
                       amqp_pool_t *pool, uint64_t delay_ms, const char *bridge_user,
                       const char *id, const char *error)
{
    *out = *in;
    /*
     * Only the 14 basic properties (bits 15..2). rabbitmq-c keeps whatever
     * flag bits it decoded, continuation words included; published again,
     * a stray bit 0 becomes a continuation word the broker misreads.
     */
    out->_flags &= 0xfffc;

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

int broker_msg_encode_props(const amqp_basic_properties_t *props, uint8_t **buf, size_t *cap)
{
    for (;;) {
        amqp_bytes_t enc = {*cap, *buf};
        int res = props ? amqp_encode_properties(AMQP_BASIC_CLASS, (void *)props, enc) : 0;
        if (res >= 0)
            return res;
        if (*cap >= (64u << 20))
            return -EOVERFLOW;
        *cap = *cap ? *cap * 2 : 65536;
        *buf = xrealloc(*buf, *cap);
    }
}

int broker_msg_header_str(const amqp_table_t *headers, const char *name, const char **p,
                        size_t *len)
{
    if (!headers || headers->num_entries <= 0 || !headers->entries)
        return 0;
    for (int i = 0; i < headers->num_entries; i++) {
        const amqp_field_value_t *v = &headers->entries[i].value;
        if (!key_is(headers->entries[i].key, name))
            continue;
        if (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES)
            return -1;
        *p = v->value.bytes.bytes;
        *len = v->value.bytes.len;
        return 1;
    }
    return 0;
}

int broker_msg_from_user(const amqp_basic_properties_t *p, const char *user)
{
    size_t n = user ? strlen(user) : 0;

    return p && (p->_flags & AMQP_BASIC_USER_ID_FLAG) && n > 0 && p->user_id.len == n &&
           p->user_id.bytes && memcmp(p->user_id.bytes, user, n) == 0;
}

int broker_msg_provenance(amqp_bytes_t k)
{
    const struct name *n = name_of(k);

    return n && n->intake == PROVENANCE;
}

static struct json_object *field_json(const amqp_field_value_t *v, int depth);

static struct json_object *table_json(const amqp_table_t *t, int depth)
{
    struct json_object *o = json_object_new_object();

    for (int i = 0; t && i < t->num_entries; i++) {
        struct strbuf key = STRBUF_INIT;
        strbuf_append_utf8(&key, t->entries[i].key.bytes, t->entries[i].key.len);
        json_object_object_add(o, key.p ? key.p : "", field_json(&t->entries[i].value, depth + 1));
        strbuf_free(&key);
    }
    return o;
}

static struct json_object *field_json(const amqp_field_value_t *v, int depth)
{
    struct json_object *o;
    char kind[2] = {(char)v->kind, 0};

    if (depth > 32) /* a table nested deeper than anyone means */
        return json_object_new_string("...");
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: return json_object_new_boolean(v->value.boolean);
    case AMQP_FIELD_KIND_I8: return json_object_new_int64(v->value.i8);
    case AMQP_FIELD_KIND_U8: return json_object_new_int64(v->value.u8);
    case AMQP_FIELD_KIND_I16: return json_object_new_int64(v->value.i16);
    case AMQP_FIELD_KIND_U16: return json_object_new_int64(v->value.u16);
    case AMQP_FIELD_KIND_I32: return json_object_new_int64(v->value.i32);
    case AMQP_FIELD_KIND_U32: return json_object_new_int64(v->value.u32);
    case AMQP_FIELD_KIND_I64: return json_object_new_int64(v->value.i64);
    case AMQP_FIELD_KIND_U64: return json_object_new_uint64(v->value.u64);
    case AMQP_FIELD_KIND_F32: return json_object_new_double(v->value.f32);
    case AMQP_FIELD_KIND_F64: return json_object_new_double(v->value.f64);
    case AMQP_FIELD_KIND_TIMESTAMP: return json_object_new_uint64(v->value.u64);
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return api_json_str(v->value.bytes.bytes, v->value.bytes.len);
    case AMQP_FIELD_KIND_TABLE: return table_json(&v->value.table, depth);
    case AMQP_FIELD_KIND_ARRAY:
        o = json_object_new_array();
        for (int i = 0; i < v->value.array.num_entries; i++)
            json_object_array_add(o, field_json(&v->value.array.entries[i], depth + 1));
        return o;
    case AMQP_FIELD_KIND_VOID: return NULL;
    default:
        o = json_object_new_object();
        json_object_object_add(o, "type", json_object_new_string(kind));
        return o;
    }
}

#define ADD_STR(o, flag, name, field)                                                        \
    if (p->_flags & (flag))                                                                  \
    json_object_object_add(o, name, api_json_str(p->field.bytes, p->field.len))

struct json_object *broker_msg_props_json(const uint8_t *props, size_t len)
{
    amqp_pool_t pool;
    amqp_basic_properties_t *p;
    struct json_object *o = NULL;

    init_amqp_pool(&pool, 4096);
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool, (amqp_bytes_t){len, (void *)props},
                               (void **)&p) >= 0) {
        o = json_object_new_object();
        ADD_STR(o, AMQP_BASIC_CONTENT_TYPE_FLAG, "content_type", content_type);
        ADD_STR(o, AMQP_BASIC_CONTENT_ENCODING_FLAG, "content_encoding", content_encoding);
        if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG)
            json_object_object_add(o, "delivery_mode", json_object_new_int(p->delivery_mode));
        if (p->_flags & AMQP_BASIC_PRIORITY_FLAG)
            json_object_object_add(o, "priority", json_object_new_int(p->priority));
        ADD_STR(o, AMQP_BASIC_CORRELATION_ID_FLAG, "correlation_id", correlation_id);
        ADD_STR(o, AMQP_BASIC_REPLY_TO_FLAG, "reply_to", reply_to);
        ADD_STR(o, AMQP_BASIC_EXPIRATION_FLAG, "expiration", expiration);
        ADD_STR(o, AMQP_BASIC_MESSAGE_ID_FLAG, "message_id", message_id);
        if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
            json_object_object_add(o, "timestamp", json_object_new_uint64(p->timestamp));
        ADD_STR(o, AMQP_BASIC_TYPE_FLAG, "type", type);
        ADD_STR(o, AMQP_BASIC_USER_ID_FLAG, "user_id", user_id);
        ADD_STR(o, AMQP_BASIC_APP_ID_FLAG, "app_id", app_id);
        if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
            json_object_object_add(o, "headers", table_json(&p->headers, 0));
    }
    empty_amqp_pool(&pool);
    return o;
}

/* Set name = v in p's headers, in a copy of the table that lives in pool. */
void broker_msg_set_value(amqp_basic_properties_t *p, amqp_pool_t *pool, const char *name,
                        amqp_field_value_t v)
{
    int n = (p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.entries ? p->headers.num_entries
                                                                         : 0;
    amqp_table_t t;

    t.entries = pool_alloc(pool, sizeof(amqp_table_entry_t) * ((size_t)n + 1));
    t.num_entries = n;
    if (n)
        memcpy(t.entries, p->headers.entries, sizeof(amqp_table_entry_t) * (size_t)n);
    table_set(&t, name, v);
    p->headers = t;
    p->_flags |= AMQP_BASIC_HEADERS_FLAG;
}

void broker_msg_set_header(amqp_basic_properties_t *p, amqp_pool_t *pool, const char *name,
                         const char *value)
{
    broker_msg_set_value(p, pool, name, pool_string(pool, value, strlen(value)));
}

void broker_msg_set_delay(amqp_basic_properties_t *p, amqp_pool_t *pool, int64_t ms)
{
    amqp_field_value_t v;

    memset(&v, 0, sizeof(v));
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = ms;
    broker_msg_set_value(p, pool, H_XDELAY, v);
    broker_msg_drop_stamp(p); /* the table is the pool's copy now */
}

void broker_msg_drop_header(amqp_basic_properties_t *p, const char *name)
{
    int k = 0;

    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return;
    for (int i = 0; i < p->headers.num_entries; i++)
        if (!key_is(p->headers.entries[i].key, name))
            p->headers.entries[k++] = p->headers.entries[i];
    p->headers.num_entries = k;
}

void broker_msg_drop_stamp(amqp_basic_properties_t *p)
{
    broker_msg_drop_header(p, H_STAMP);
}
