/*
 * fuzz_retry.c -- libFuzzer harness for a retry route's headers: what the
 * broker's dead-lettering (or anyone publishing to a retry route's ingress)
 * puts in a message's headers, read and judged, then the headers the
 * bridge writes on its way out.
 *
 *   wire bytes --amqp_decode_properties--> props             (consumer)
 *   props --amqp_retry_in--> struct retry_in --retry_judge--> verdict
 *   props --amqp_msg_outgoing, amqp_retry_out (back, park, hand-back)--> props
 *                                                            (publisher)
 *   --amqp_msg_encode_props--> wire, decoded once more
 *
 * Input: byte 0 = options (bit 0..1: jitter none/full/equal; bits 2..7:
 * max_attempts - 1), bytes 1..8 = the random number (LE u64), then the AMQP
 * basic properties as the broker would send them.
 *
 * Checked: a queue read is 1..255 bytes inside the input's decoded table;
 * the attempt is >= 0; retry_judge returns OK (delay 1..max_ms), NOW (full
 * jitter's 0), or a park with delay 0, and a park for max attempts exactly
 * when the attempt counted reaches max_attempts; the way out back sets
 * x-retry-attempt = counted + 1 once, parks set the reason once; every way
 * keeps x-retry-history an array of at most 32 integers and leaves the
 * hand-back mark only on a hand-back; the result encodes and decodes to
 * the same bytes.
 */
#include "broker/amqp_msg.h"
#include "broker/amqp_retry.h"

#include <amqp_framing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/retry.h"

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_retry: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define PREFIX 9

static uint8_t *ebuf[2];
static size_t ecap[2];

static int key_is(amqp_bytes_t k, const char *name)
{
    size_t n = strlen(name);
    return k.len == n && (n == 0 || memcmp(k.bytes, name, n) == 0);
}

static int count_key(const amqp_basic_properties_t *p, const char *name,
                     const amqp_field_value_t **first)
{
    int n = 0;
    *first = NULL;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < p->headers.num_entries; i++)
        if (key_is(p->headers.entries[i].key, name)) {
            if (!n)
                *first = &p->headers.entries[i].value;
            n++;
        }
    return n;
}

static void check_history(const amqp_basic_properties_t *p)
{
    const amqp_field_value_t *v;

    CHECK(count_key(p, H_RETRY_HISTORY, &v) == 1);
    CHECK(v->kind == AMQP_FIELD_KIND_ARRAY);
    CHECK(v->value.array.num_entries >= 1 && v->value.array.num_entries <= RETRY_HISTORY_MAX);
    for (int i = 0; i < v->value.array.num_entries; i++)
        CHECK(v->value.array.entries[i].kind == AMQP_FIELD_KIND_I64);
}

/* Encode, decode, encode again: the same bytes. */
static void roundtrip(amqp_pool_t *pool, const amqp_basic_properties_t *p)
{
    int n = amqp_msg_encode_props(p, &ebuf[0], &ecap[0]);
    void *back = NULL;

    CHECK(n >= 0);
    CHECK(amqp_decode_properties(AMQP_BASIC_CLASS, pool, (amqp_bytes_t){(size_t)n, ebuf[0]},
                                 &back) >= 0);
    int m = amqp_msg_encode_props(back, &ebuf[1], &ecap[1]);
    CHECK(m == n && memcmp(ebuf[0], ebuf[1], (size_t)n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    amqp_pool_t pool;
    amqp_basic_properties_t *in = NULL, out;
    struct retry_in ri;
    uint64_t rnd = 0, delay;
    uint32_t failed;

    if (size < PREFIX)
        return 0;
    memcpy(&rnd, data + 1, 8);
    struct config_retry rt = {{100, 2.0, 60000, (enum retry_jitter)(data[0] & 3) % 3,
                               (uint32_t)(data[0] >> 2) + 1},
                              "park", "", RETRY_REASON_REJECTED | RETRY_REASON_DELIVERY_LIMIT,
                              NULL, 0};
    init_amqp_pool(&pool, 4096);
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool,
                               (amqp_bytes_t){size - PREFIX, (void *)(data + PREFIX)},
                               (void **)&in) < 0) {
        empty_amqp_pool(&pool);
        return 0;
    }
    const amqp_table_t *h = in->_flags & AMQP_BASIC_HEADERS_FLAG ? &in->headers : NULL;

    amqp_retry_in(h, &ri);
    CHECK(ri.attempt >= 0);
    CHECK(!ri.queue || (ri.queue_len >= 1 && ri.queue_len <= 255));
    enum xdelay_status st = retry_judge(&rt, &ri, rnd, &failed, &delay);
    CHECK(failed >= 1);
    switch (st) {
    case XDELAY_OK: CHECK(delay >= 1 && delay <= rt.policy.max_ms); break;
    case XDELAY_NOW: CHECK(delay == 0 && rt.policy.jitter == RETRY_JITTER_FULL); break;
    case XDELAY_RETRY_LAST: CHECK(delay == 0 && failed >= rt.policy.max_attempts); break;
    case XDELAY_RETRY_REASON:
    case XDELAY_RETRY_NOQUEUE: CHECK(delay == 0); break;
    default: CHECK(0);
    }
    if (st == XDELAY_OK || st == XDELAY_NOW)
        CHECK(ri.queue && failed < rt.policy.max_attempts);
    if (st == XDELAY_RETRY_NOQUEUE)
        CHECK(!ri.queue);

    for (int way = AMQP_RETRY_BACK; way <= AMQP_RETRY_HANDBACK; way++) {
        const amqp_field_value_t *v;
        /* as the publisher does: its outgoing copy first (defined flags only), then retry's */
        amqp_msg_outgoing(in, &out, &pool, 0, "bridge", "0000000000000042-1", NULL);
        amqp_retry_out(&out, &pool, (enum amqp_retry_way)way, 1800000000000ull, "q",
                       way == AMQP_RETRY_PARK ? "max_attempts" : NULL);
        if (way == AMQP_RETRY_HANDBACK) {
            CHECK(count_key(&out, H_HANDBACK, &v) >= 1);
        } else {
            CHECK(count_key(&out, H_HANDBACK, &v) == 0);
            check_history(&out);
        }
        if (way == AMQP_RETRY_BACK) {
            int64_t counted = ri.attempt >= 1 ? ri.attempt : 1;
            CHECK(count_key(&out, H_RETRY_ATTEMPT, &v) == 1 && v->kind == AMQP_FIELD_KIND_I64);
            CHECK(v->value.i64 == (counted < INT64_MAX ? counted + 1 : counted));
        }
        if (way == AMQP_RETRY_PARK) {
            CHECK(count_key(&out, H_RETRY_PARKED, &v) == 1);
            CHECK(count_key(&out, H_RETRY_ATTEMPTS, &v) == 1);
            CHECK(count_key(&out, H_RETRY_QUEUE, &v) == 1);
        }
        roundtrip(&pool, &out);
    }
    empty_amqp_pool(&pool);
    return 0;
}
