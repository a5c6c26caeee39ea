/*
 * fuzz_retry.c -- libFuzzer harness for a retry route's headers: what the
 * broker's dead-lettering (or anyone publishing to a retry route's ingress)
 * puts in a message's headers, read and judged, then the headers the
 * bridge writes on its way out.
 *
 *   wire bytes --amqp_decode_properties--> props             (consumer)
 *   props --broker_msg_read--> struct broker_headers --broker_retry_in-->
 *         struct retry_in --retry_judge--> verdict
 *   props --broker_msg_outgoing, broker_retry_out (back, park, hand-back)--> props
 *                                                            (publisher)
 *   --broker_msg_encode_props--> wire, decoded once more
 *
 * Input: byte 0 = options (bit 0..1: jitter none/full/equal; bits 2..7:
 * max_attempts - 1), bytes 1..8 = the random number (LE u64), then the AMQP
 * basic properties as the broker would send them.
 *
 * The route is parsed from a configuration once (ROUTES below): a pattern,
 * a list, and the bridge's own queues beside them. Checked first, the
 * property issue 39 is about: whatever the headers say -- a forged x-death,
 * x-last-death-queue, a hand-back mark with or without user-id "bridge" --
 * a verdict that sends the message back (OK or NOW) names a queue that
 * admitted() allows, an oracle written apart from retry_admits: "billing",
 * or "work." followed by one or more of [a-z], and never work.retry.q, the
 * route's own ingress, which the pattern would match.
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
#include "delay-bridge/broker_msg.h"
#include "broker/broker_retry.h"

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

#define ROUTES                                                                                \
    "{\"broker\":{\"uri\":\"amqp://bridge:p@127.0.0.1:5672/v\"},\"wal\":{\"dir\":\"/tmp/x\"},"  \
    "\"routes\":[{\"name\":\"r\",\"ingress_exchange\":\"work.retry\",\"ingress_queue\":"            \
    "\"work.retry.q\",\"max_delay_ms\":86400000,\"retry\":{\"parking_exchange\":\"park\","          \
    "\"max_ms\":60000,\"initial_ms\":100,\"queue_pattern\":\"work\\\\.[a-z.]+\",\"queues\":"     \
    "{\"billing\":{}}}}]}"

/* Where a message may go back, written apart from retry_admits (the pattern's [a-z.]). */
static int admitted(const char *q, size_t n)
{
    if (n == 7 && memcmp(q, "billing", 7) == 0)
        return 1;
    if (n == 12 && memcmp(q, "work.retry.q", 12) == 0)
        return 0;
    if (n < 6 || memcmp(q, "work.", 5) != 0)
        return 0;
    for (size_t i = 5; i < n; i++)
        if (!((q[i] >= 'a' && q[i] <= 'z') || q[i] == '.'))
            return 0;
    return 1;
}

static struct config cfg;

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
    int n = broker_msg_encode_props(p, &ebuf[0], &ecap[0]);
    void *back = NULL;

    CHECK(n >= 0);
    CHECK(amqp_decode_properties(AMQP_BASIC_CLASS, pool, (amqp_bytes_t){(size_t)n, ebuf[0]},
                                 &back) >= 0);
    int m = broker_msg_encode_props(back, &ebuf[1], &ecap[1]);
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
    static int ready;
    if (!ready) {
        char err[512];
        if (config_parse(&cfg, ROUTES, "fuzz", err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_retry: %s\n", err);
            abort();
        }
        ready = 1;
    }
    struct config_route *route = &cfg.routes[0];
    struct config_retry rt = *route->retry;
    rt.policy.jitter = (enum retry_jitter)(data[0] & 3) % 3;
    rt.policy.max_attempts = (uint32_t)(data[0] >> 2) + 1;
    route->retry->policy = rt.policy;
    init_amqp_pool(&pool, 4096);
    if (amqp_decode_properties(AMQP_BASIC_CLASS, &pool,
                               (amqp_bytes_t){size - PREFIX, (void *)(data + PREFIX)},
                               (void **)&in) < 0) {
        empty_amqp_pool(&pool);
        return 0;
    }
    struct broker_headers h;
    broker_msg_read(in->_flags & AMQP_BASIC_HEADERS_FLAG ? &in->headers : NULL, 0, 0, NULL, &h);

    /* the destination: only where the route admits, whatever the headers claim */
    struct retry_verdict vd;
    broker_retry_judge(&cfg, route, &h, broker_msg_from_user(in, "bridge"), 1800000000000ull, rnd,
                       &vd);
    if (vd.st == XDELAY_OK || vd.st == XDELAY_NOW)
        CHECK(vd.queue && vd.admitted && admitted(vd.queue, vd.queue_len));
    if (vd.queue && !admitted(vd.queue, vd.queue_len))
        CHECK(!vd.admitted && !vd.handback && vd.st == XDELAY_RETRY_NOTADMITTED);
    if (vd.handback)
        CHECK((in->_flags & AMQP_BASIC_USER_ID_FLAG) && in->user_id.len == 6 &&
              memcmp(in->user_id.bytes, "bridge", 6) == 0);

    broker_retry_in(&h, &ri);
    ri.admitted = 1; /* the policy alone, below */
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

    for (int way = BROKER_RETRY_BACK; way <= BROKER_RETRY_HANDBACK; way++) {
        const amqp_field_value_t *v;
        /* as the publisher does: its outgoing copy first (defined flags only), then retry's */
        broker_msg_outgoing(in, &out, &pool, 0, "bridge", "0000000000000042-1", NULL);
        broker_retry_out(&out, &pool, (enum broker_retry_way)way, 1800000000000ull, "q",
                       way == BROKER_RETRY_PARK ? "max_attempts" : NULL);
        if (way == BROKER_RETRY_HANDBACK) {
            CHECK(count_key(&out, H_HANDBACK, &v) >= 1);
        } else {
            CHECK(count_key(&out, H_HANDBACK, &v) == 0);
            check_history(&out);
        }
        if (way == BROKER_RETRY_BACK) {
            int64_t counted = ri.attempt >= 1 ? ri.attempt : 1;
            CHECK(count_key(&out, H_RETRY_ATTEMPT, &v) == 1 && v->kind == AMQP_FIELD_KIND_I64);
            CHECK(v->value.i64 == (counted < INT64_MAX ? counted + 1 : counted));
        }
        if (way == BROKER_RETRY_PARK) {
            CHECK(count_key(&out, H_RETRY_PARKED, &v) == 1);
            CHECK(count_key(&out, H_RETRY_ATTEMPTS, &v) == 1);
            CHECK(count_key(&out, H_RETRY_QUEUE, &v) == 1);
        }
        roundtrip(&pool, &out);
    }
    empty_amqp_pool(&pool);
    return 0;
}
