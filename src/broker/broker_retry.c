/*
 * broker_retry.c -- a retry route's headers in and out (broker_retry.h).
 *
 * x-death, as RabbitMQ 3.10.8, 4.0.5 and 4.3.6 all write it (checked on
 * the brokers): an array of tables, one per (queue, reason), the newest
 * first, each with "queue", "reason", "count", "exchange", "routing-keys"
 * and "time". The queue a message was last dead-lettered from is the
 * first entry's. 4.x adds x-last-death-queue, and every version
 * x-first-death-queue; they are read only when x-death is missing or
 * malformed (a client that rewrote it), the first-death one last, since it
 * names the first queue ever, which is right only for a message that never
 * moved between queues. Every one of these is asked of the delivery's
 * headers as broker_msg_read() found them (struct broker_headers: the
 * first entry of each name), never of the table again; the one table
 * looked into here is x-death's newest entry. broker_retry_out() reads the
 * outgoing table once the same way, before it writes a new one.
 *
 * A forged x-death (any publisher to the ingress can write one) names a
 * queue the route may not reach: broker_retry_judge parks it (retry_admits),
 * and a hand-back mark counts only on a message whose user-id the broker
 * checked to be the bridge's own.
 *
 * x-retry-history grows by one entry a failure and keeps the newest
 * RETRY_HISTORY_MAX, so a message with 10,000 attempts carries 32 times,
 * not 10,000 (x-retry-attempt keeps the count).
 */
#include "broker_retry.h"

#include <string.h>

#include "delay-bridge/broker_msg.h"
#include "base/xalloc.h"

static int key_is(amqp_bytes_t k, const char *name)
{
    return k.len == strlen(name) && memcmp(k.bytes, name, k.len) == 0;
}

static const amqp_field_value_t *find(const amqp_table_t *t, const char *name)
{
    for (int i = 0; t && t->entries && i < t->num_entries; i++)
        if (key_is(t->entries[i].key, name))
            return &t->entries[i].value;
    return NULL;
}

/* A string value (long string or byte array) into *s, *n; 0 when v is not one. */
static int str_of(const amqp_field_value_t *v, const char **s, size_t *n)
{
    if (!v || (v->kind != AMQP_FIELD_KIND_UTF8 && v->kind != AMQP_FIELD_KIND_BYTES))
        return 0;
    *s = v->value.bytes.bytes;
    *n = v->value.bytes.len;
    return *n > 0;
}

static int int_of(const amqp_field_value_t *v, int64_t *out)
{
    if (!v)
        return 0;
    switch (v->kind) {
    case AMQP_FIELD_KIND_I8: *out = v->value.i8; return 1;
    case AMQP_FIELD_KIND_U8: *out = v->value.u8; return 1;
    case AMQP_FIELD_KIND_I16: *out = v->value.i16; return 1;
    case AMQP_FIELD_KIND_U16: *out = v->value.u16; return 1;
    case AMQP_FIELD_KIND_I32: *out = v->value.i32; return 1;
    case AMQP_FIELD_KIND_U32: *out = v->value.u32; return 1;
    case AMQP_FIELD_KIND_I64: *out = v->value.i64; return 1;
    case AMQP_FIELD_KIND_U64: *out = v->value.u64 > INT64_MAX ? INT64_MAX
                                                              : (int64_t)v->value.u64; return 1;
    default: return 0;
    }
}

void broker_retry_in(const struct broker_headers *h, struct retry_in *in)
{
    const amqp_field_value_t *d = h->death;
    int64_t a;

    memset(in, 0, sizeof(*in));
    if (d && d->kind == AMQP_FIELD_KIND_ARRAY && d->value.array.num_entries > 0 &&
        d->value.array.entries[0].kind == AMQP_FIELD_KIND_TABLE) {
        const amqp_table_t *e = &d->value.array.entries[0].value.table;
        if (!str_of(find(e, "queue"), &in->queue, &in->queue_len))
            in->queue = NULL;
        if (!str_of(find(e, "reason"), &in->reason, &in->reason_len))
            in->reason = NULL;
    }
    if (!in->queue && !str_of(h->last_death_queue, &in->queue, &in->queue_len) &&
        !str_of(h->first_death_queue, &in->queue, &in->queue_len))
        in->queue = NULL;
    if (!in->reason && !str_of(h->last_death_reason, &in->reason, &in->reason_len) &&
        !str_of(h->first_death_reason, &in->reason, &in->reason_len))
        in->reason = NULL;
    if (in->queue_len > 255) /* an AMQP short string: no queue has a longer name */
        in->queue = NULL, in->queue_len = 0;
    if (int_of(h->retry_attempt, &a) && a >= 1)
        in->attempt = a;
    in->handback = h->handback != NULL;
}

void broker_retry_judge(const struct config *c, const struct config_route *rc,
                        const struct broker_headers *h, int from_bridge, uint64_t now_ms,
                        uint64_t rnd, struct retry_verdict *v)
{
    struct retry_in in;

    broker_retry_in(h, &in);
    in.admitted = retry_admits(c, rc, in.queue, in.queue_len);
    in.handback = in.handback && from_bridge;
    memset(v, 0, sizeof *v);
    v->queue = in.queue;
    v->queue_len = in.queue_len;
    v->admitted = in.admitted;
    if (in.handback && in.queue && in.admitted) {
        v->handback = 1;
        v->failed = in.attempt >= 1 ? (in.attempt > UINT32_MAX ? UINT32_MAX
                                                                : (uint32_t)in.attempt) : 1;
        v->st = broker_msg_due(h, now_ms, rc->max_delay_ms, &v->delay_ms);
        return;
    }
    v->st = retry_judge(rc->retry, &in, rnd, &v->failed, &v->delay_ms);
}

static amqp_field_value_t long_value(int64_t v)
{
    amqp_field_value_t f;

    memset(&f, 0, sizeof(f));
    f.kind = AMQP_FIELD_KIND_I64;
    f.value.i64 = v;
    return f;
}

static amqp_field_value_t str_value(amqp_pool_t *pool, const char *s)
{
    amqp_field_value_t f;
    size_t n = strlen(s);

    memset(&f, 0, sizeof(f));
    f.kind = AMQP_FIELD_KIND_UTF8;
    f.value.bytes.len = n;
    f.value.bytes.bytes = amqp_pool_alloc(pool, n ? n : 1);
    if (!f.value.bytes.bytes)
        xalloc_die(n);
    memcpy(f.value.bytes.bytes, s, n);
    return f;
}

/* The history as it came (old; integers only), plus at, the newest RETRY_HISTORY_MAX kept. */
static amqp_field_value_t history(const amqp_field_value_t *old, amqp_pool_t *pool, uint64_t at)
{
    int n = old && old->kind == AMQP_FIELD_KIND_ARRAY ? old->value.array.num_entries : 0;
    amqp_field_value_t f;
    int k = 0;
    int64_t v;

    memset(&f, 0, sizeof(f));
    f.kind = AMQP_FIELD_KIND_ARRAY;
    f.value.array.entries = amqp_pool_alloc(pool, sizeof(amqp_field_value_t) * ((size_t)n + 1));
    if (!f.value.array.entries)
        xalloc_die(sizeof(amqp_field_value_t) * ((size_t)n + 1));
    for (int i = 0; i < n; i++)
        if (int_of(&old->value.array.entries[i], &v))
            f.value.array.entries[k++] = long_value(v);
    f.value.array.entries[k++] = long_value((int64_t)at);
    if (k > RETRY_HISTORY_MAX) {
        memmove(f.value.array.entries, f.value.array.entries + (k - RETRY_HISTORY_MAX),
                sizeof(amqp_field_value_t) * RETRY_HISTORY_MAX);
        k = RETRY_HISTORY_MAX;
    }
    f.value.array.num_entries = k;
    return f;
}

/* v is an x-retry-history as the bridge writes it: 1..32 longs. */
static int has_history(const amqp_field_value_t *v)
{

    if (!v || v->kind != AMQP_FIELD_KIND_ARRAY || v->value.array.num_entries < 1 ||
        v->value.array.num_entries > RETRY_HISTORY_MAX)
        return 0;
    for (int i = 0; i < v->value.array.num_entries; i++)
        if (v->value.array.entries[i].kind != AMQP_FIELD_KIND_I64)
            return 0;
    return 1;
}

void broker_retry_out(amqp_basic_properties_t *p, amqp_pool_t *pool, enum broker_retry_way way,
                      uint64_t failed_ms, const char *queue, const char *reason)
{
    struct broker_headers h;
    struct retry_in in;
    int64_t failed;

    /* read once, the old table: what is set below goes into a new one */
    broker_msg_read(p->_flags & AMQP_BASIC_HEADERS_FLAG ? &p->headers : NULL, 0, 0, NULL, &h);
    broker_retry_in(&h, &in);
    if (way == BROKER_RETRY_HANDBACK) {
        /* the failure's time goes with it: the next bridge received only the hand-back */
        if (!in.handback)
            broker_msg_set_value(p, pool, H_RETRY_HISTORY,
                                 history(h.retry_history, pool, failed_ms));
        broker_msg_set_value(p, pool, H_HANDBACK, long_value(1));
        return;
    }
    failed = in.attempt >= 1 ? in.attempt : 1;
    if (!in.handback || !has_history(h.retry_history)) /* a hand-back's has its failure already */
        broker_msg_set_value(p, pool, H_RETRY_HISTORY, history(h.retry_history, pool, failed_ms));
    broker_msg_drop_header(p, H_HANDBACK);
    if (way == BROKER_RETRY_BACK) {
        broker_msg_set_value(p, pool, H_RETRY_ATTEMPT,
                             long_value(failed < INT64_MAX ? failed + 1 : failed));
        return;
    }
    broker_msg_set_value(p, pool, H_RETRY_ATTEMPTS, long_value(failed));
    broker_msg_set_value(p, pool, H_RETRY_PARKED, str_value(pool, reason ? reason : "invalid"));
    if (queue)
        broker_msg_set_value(p, pool, H_RETRY_QUEUE, str_value(pool, queue));
}
