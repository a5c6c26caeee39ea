/*
 * fuzz_props_roundtrip.c -- libFuzzer harness for the path a message's
 * properties take through the daemon, with rabbitmq-c's own codec:
 *
 *   wire bytes --amqp_decode_properties--> props            (consumer)
 *   props --broker_msg_read--> headers read, intake's entries (consumer)
 *   headers --broker_msg_xdelay, broker_msg_due--> delay     (consumer)
 *   props --broker_msg_encode_props--> WAL ADD record        (bridge, wal)
 *   WAL ADD --amqp_decode_properties--> props                (publisher)
 *   props --broker_msg_outgoing--> republished props         (publisher)
 *   --amqp_encode_properties--> wire, decoded once more      (broker)
 *
 * Input: byte 0 = options, bytes 1..8 = a delay (LE u64), then the AMQP
 * basic properties (flags + property list) as the broker would send them.
 * options bit 0: pass an error string (dead-letter); bit 1: the bridge's
 * user is the message's user-id; bit 2: use the delay from bytes 1..8 even
 * when x-delay is valid.
 *
 * Checked: the read keeps table entries in order and none a queue adds or
 * a bridge alone may write; broker_msg_xdelay keeps xdelay.h's contract; the
 * WAL record gives back the encoded properties byte for byte and they decode
 * again to the same properties; broker_msg_outgoing publishes only defined
 * flag bits, does not modify its input, keeps every
 * property other than headers and user-id, sets exactly one
 * x-delay-bridge-id (and x-delay-error), moves a foreign user-id to
 * x-original-user-id, leaves no positive x-delay when it delayed the
 * message, and what it builds encodes and decodes to the same bytes.
 */
#include "delay-bridge/broker_msg.h"

#include <amqp_framing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/walrec.h"

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_props_roundtrip: %s:%d: check failed: %s\n", __FILE__,    \
                    __LINE__, #c);                                                           \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

#define PREFIX 9
#define BASIC_FLAGS 0xfffc /* content-type (bit 15) .. cluster-id (bit 2) */
#define BRIDGE_ID "00000000000000000042"
#define ERROR_TEXT "invalid x-delay"

static uint8_t *ebuf[4];
static size_t ecap[4];

/* Encode p into scratch buffer slot; returns the length (must fit 64 MiB). */
static int enc(int slot, const amqp_basic_properties_t *p)
{
    int n = broker_msg_encode_props(p, &ebuf[slot], &ecap[slot]);
    CHECK(n >= 0);
    return n;
}

static amqp_basic_properties_t *dec(amqp_pool_t *pool, const uint8_t *p, size_t n)
{
    void *out = NULL;
    int rc = amqp_decode_properties(AMQP_BASIC_CLASS, pool, (amqp_bytes_t){n, (void *)p}, &out);
    return rc < 0 ? NULL : out;
}

static int key_is(amqp_bytes_t k, const char *name)
{
    size_t n = strlen(name);
    return k.len == n && (n == 0 || memcmp(k.bytes, name, n) == 0);
}

/* Number of entries named name; *first = the first one's value. */
static int count_key(const amqp_table_t *t, const char *name, const amqp_field_value_t **first)
{
    int n = 0;
    *first = NULL;
    for (int i = 0; i < t->num_entries; i++) {
        if (key_is(t->entries[i].key, name)) {
            if (!n)
                *first = &t->entries[i].value;
            n++;
        }
    }
    return n;
}

static int is_string(const amqp_field_value_t *v, const void *p, size_t n)
{
    return v && v->kind == AMQP_FIELD_KIND_UTF8 && v->value.bytes.len == n &&
           (n == 0 || memcmp(v->value.bytes.bytes, p, n) == 0);
}

static void check_xdelay(const amqp_basic_properties_t *p, uint64_t max, enum xdelay_status *st,
                         uint64_t *delay)
{
    const amqp_table_t *t = (p->_flags & AMQP_BASIC_HEADERS_FLAG) ? &p->headers : NULL;
    struct broker_headers rh, *h = &rh;
    int n = t && t->num_entries > 0 && t->entries ? t->num_entries : 0;
    amqp_table_entry_t *keep = malloc(sizeof(*keep) * (size_t)(n ? n : 1));

    /* the one read: intake keeps entries of the table, in order, none the queue's or forged */
    broker_msg_read(t, 1, 0, keep, h);
    CHECK(h->nkeep >= 0 && h->nkeep <= n);
    for (int i = 0, j = 0; i < h->nkeep; i++, j++) {
        while (j < n && memcmp(&t->entries[j], &keep[i], sizeof(keep[i])) != 0)
            j++;
        CHECK(j < n);
        CHECK(!broker_msg_provenance(keep[i].key));
        CHECK(!(keep[i].key.len == 16 && memcmp(keep[i].key.bytes, "x-delivery-count", 16) == 0));
    }
    free(keep);
    *delay = 777;
    *st = broker_msg_xdelay(h, max, delay);
    CHECK(*st >= XDELAY_OK && *st <= XDELAY_ETOOBIG);
    if (*st == XDELAY_OK)
        CHECK(*delay > 0 && *delay <= max);
    else
        CHECK(*delay == 0);
    CHECK(xdelay_strerror(*st) != NULL);

    /* what the bridge calls: x-delay-until / x-opt-delivery-time first, same contract */
    uint64_t now = 1764000000000ull, d = 777;
    enum xdelay_status s = broker_msg_due(h, now, max, &d);
    CHECK(s >= XDELAY_OK && s <= XDELAY_DD_ETOOBIG && s != XDELAY_EKEY);
    if (s == XDELAY_OK)
        CHECK(d > 0 && d <= max);
    else
        CHECK(d == 0);
    CHECK(xdelay_strerror(s) != NULL && xdelay_invalid(s) == (s != XDELAY_OK && s != XDELAY_NOW));
}

/* p with only the 14 defined basic property flags, encoded. */
static int enc_defined(int slot, const amqp_basic_properties_t *p)
{
    amqp_basic_properties_t q = *p;
    q._flags &= BASIC_FLAGS;
    return enc(slot, &q);
}

/* The properties other than headers and user-id, encoded. */
static int enc_rest(int slot, const amqp_basic_properties_t *p)
{
    amqp_basic_properties_t q = *p;
    q._flags &= ~(amqp_flags_t)(AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_USER_ID_FLAG);
    q.headers = (amqp_table_t){0, NULL};
    q.user_id = amqp_empty_bytes;
    return enc(slot, &q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < PREFIX)
        return 0;
    uint8_t opt = data[0];
    uint64_t fuzz_delay = walrec_get64(data + 1);
    size_t plen = size - PREFIX;
    uint8_t *wire = malloc(plen ? plen : 1); /* exact size, for ASan */
    memcpy(wire, data + PREFIX, plen);

    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_basic_properties_t *p1 = dec(&pool, wire, plen);
    if (!p1)
        goto cleanup;

    /* consumer side: x-delay, with a few limits */
    enum xdelay_status st;
    uint64_t delay;
    check_xdelay(p1, 1, &st, &delay);
    check_xdelay(p1, UINT64_MAX, &st, &delay);
    check_xdelay(p1, 4294967295u, &st, &delay);

    /* into a WAL ADD record and out again */
    int e1 = enc(0, p1);
    static const char body[] = "body";
    struct walrec_add a = {
        .msg_id = 42, .due_ms = 1000 + delay, .enqueue_ms = 1000, .route = "orders",
        .route_len = 6, .exchange = "orders.delayed", .exchange_len = 14,
        .routing_key = "rk", .routing_key_len = 2, .props = ebuf[0], .props_len = (uint32_t)e1,
        .body = (const uint8_t *)body, .body_len = 4,
    };
    size_t asize = walrec_add_size(&a);
    uint8_t *rec = malloc(WALREC_HDR_SIZE + asize);
    size_t head = walrec_add_encode_head(rec + WALREC_HDR_SIZE, &a);
    struct walrec_piece pieces[2] = {{rec + WALREC_HDR_SIZE, head}, {body, 4}};
    memcpy(rec + WALREC_HDR_SIZE + head, body, 4);
    struct walrec_hdr h = {.len = (uint32_t)asize, .type = WALREC_ADD, .lsn = 42};
    walrec_hdr_encode(rec, &h, 0x5a17, pieces, 2);
    struct walrec_hdr h2;
    const uint8_t *payload;
    CHECK(walrec_decode(rec, WALREC_HDR_SIZE + asize, 0x5a17, &h2, &payload) ==
          (int)(WALREC_HDR_SIZE + asize));
    struct walrec_add a2;
    CHECK(walrec_add_decode(payload, h2.len, &a2) == (int)asize);
    CHECK(a2.props_len == (uint32_t)e1 && memcmp(a2.props, ebuf[0], (size_t)e1) == 0);

    /* publisher side: decode what the WAL holds */
    amqp_basic_properties_t *p2 = dec(&pool, a2.props, a2.props_len);
    CHECK(p2 != NULL);
    {
        /* every defined property survives; rabbitmq-c also keeps undefined
         * flag bits (1, 0 = continuation, 16..63), which do not round-trip */
        int c1 = enc_defined(2, p1), c2 = enc_defined(3, p2);
        CHECK(c1 == c2 && memcmp(ebuf[2], ebuf[3], (size_t)c1) == 0);
    }
    int e2 = enc(0, p2);
    {
        enum xdelay_status st2;
        uint64_t d2;
        check_xdelay(p2, 4294967295u, &st2, &d2);
        CHECK(st2 == st && d2 == delay);
    }

    uint64_t delay_out = (st == XDELAY_OK && !(opt & 4)) ? delay : fuzz_delay;
    char user[256] = "guest";
    if ((opt & 2) && (p2->_flags & AMQP_BASIC_USER_ID_FLAG)) {
        size_t n = p2->user_id.len < sizeof user - 1 ? p2->user_id.len : sizeof user - 1;
        memcpy(user, p2->user_id.bytes, n);
        user[n] = '\0';
    }
    const char *error = (opt & 1) ? ERROR_TEXT : NULL;
    amqp_basic_properties_t out;
    broker_msg_outgoing(p2, &out, &pool, delay_out, user, BRIDGE_ID, error);

    /* the input is untouched; the output has only defined flags */
    CHECK(enc(1, p2) == e2 && memcmp(ebuf[1], ebuf[0], (size_t)e2) == 0);
    CHECK((out._flags & ~(amqp_flags_t)BASIC_FLAGS) == 0);

    /* the republished properties go on the wire and come back the same */
    int e3 = enc(2, &out);
    amqp_basic_properties_t *p4 = dec(&pool, ebuf[2], (size_t)e3);
    CHECK(p4 != NULL);
    int e4 = enc(3, p4);
    CHECK(e4 == e3 && memcmp(ebuf[3], ebuf[2], (size_t)e3) == 0);

    /* everything but headers and user-id kept */
    amqp_basic_properties_t p2d = *p2;
    p2d._flags &= BASIC_FLAGS;
    int r2 = enc_rest(0, &p2d), r4 = enc_rest(1, p4);
    CHECK(r2 == r4 && memcmp(ebuf[0], ebuf[1], (size_t)r2) == 0);

    const amqp_field_value_t *v;
    CHECK(p4->_flags & AMQP_BASIC_HEADERS_FLAG);
    int nin = (p2->_flags & AMQP_BASIC_HEADERS_FLAG) ? p2->headers.num_entries : 0;
    CHECK(p4->headers.num_entries <= nin + 3);
    CHECK(count_key(&p4->headers, "x-delay-bridge-id", &v) == 1);
    CHECK(is_string(v, BRIDGE_ID, strlen(BRIDGE_ID)));
    if (error) {
        CHECK(count_key(&p4->headers, "x-delay-error", &v) == 1);
        CHECK(is_string(v, ERROR_TEXT, strlen(ERROR_TEXT)));
    }

    /* user-id: kept if it is the bridge's, else moved to a header */
    if (p2->_flags & AMQP_BASIC_USER_ID_FLAG) {
        size_t un = strlen(user);
        int same = p2->user_id.len == un && memcmp(p2->user_id.bytes, user, un) == 0;
        if (same) {
            CHECK(p4->_flags & AMQP_BASIC_USER_ID_FLAG);
            CHECK(p4->user_id.len == un && memcmp(p4->user_id.bytes, user, un) == 0);
        } else {
            CHECK(!(p4->_flags & AMQP_BASIC_USER_ID_FLAG));
            CHECK(count_key(&p4->headers, "x-original-user-id", &v) == 1);
            CHECK(is_string(v, p2->user_id.bytes, p2->user_id.len));
        }
    } else {
        CHECK(!(p4->_flags & AMQP_BASIC_USER_ID_FLAG));
    }

    /* delayed once: no x-delay left that would delay it again */
    {
        enum xdelay_status st4;
        uint64_t d4;
        check_xdelay(p4, UINT64_MAX, &st4, &d4);
        if (delay_out > 0)
            CHECK(st4 == XDELAY_NOW);
    }
    free(rec);

cleanup:
    empty_amqp_pool(&pool);
    free(wire);
    return 0;
}
