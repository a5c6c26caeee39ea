/*
 * test_walrec.c -- the WAL's on-disk format.
 *
 * Round trips; every truncation of a valid item is PARTIAL; every flipped
 * bit is caught; a record checked with another segment's salt is INVALID;
 * DONE counts must match the length. Every decoder is run on input that
 * ends exactly against a PROT_NONE guard page, so a read past buf + len
 * crashes the test (and ASan builds see it too).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "delay-bridge/walrec.h"
#include "base/crc32c.h"

#include "check.h"
#include "guard.h"
#include "testkit.h"


/* ---- helpers ----------------------------------------------------------- */

static const char route[] = "orders";
static const char exchange[] = "orders.delayed";
static const char rkey[] = "eu.order.created";
static const uint8_t props[] = {0x98, 0x00, 0x10, 'a', 'p', 'p', 'l', 'i', 'c', 'a', 't', 'i',
                                'o', 'n', '/', 'j', 's', 'o', 'n', 0x02};
static uint8_t body[300];

static struct walrec_add sample_add(uint32_t body_len)
{
    struct walrec_add a;

    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 7 + 3);
    memset(&a, 0, sizeof(a));
    a.msg_id = 0x0102030405060708ull;
    a.due_ms = 1800000000123ull;
    a.enqueue_ms = 1700000000456ull;
    a.flags = WALREC_ADD_DEADLETTER;
    a.error = 0x1234;
    a.route = route;
    a.route_len = sizeof(route) - 1;
    a.exchange = exchange;
    a.exchange_len = sizeof(exchange) - 1;
    a.routing_key = rkey;
    a.routing_key_len = sizeof(rkey) - 1;
    a.props = props;
    a.props_len = sizeof(props);
    a.body = body;
    a.body_len = body_len;
    return a;
}

/* Encode a whole ADD payload into out; returns its size. */
static size_t encode_add(uint8_t *out, const struct walrec_add *a)
{
    size_t head = walrec_add_encode_head(out, a);

    if (a->body_len)
        memcpy(out + head, a->body, a->body_len);
    return head + a->body_len;
}

/* Encode a record (header + payload) into out; returns total bytes. */
static size_t encode_rec(uint8_t *out, uint8_t type, uint64_t lsn, uint32_t salt,
                         const uint8_t *payload, size_t plen)
{
    struct walrec_hdr h = {(uint32_t)plen, type, 0, lsn, 0};
    struct walrec_piece pc = {payload, plen};

    walrec_hdr_encode(out, &h, salt, &pc, 1);
    if (plen)
        memcpy(out + WALREC_HDR_SIZE, payload, plen);
    return WALREC_HDR_SIZE + plen;
}

/* ---- tests ------------------------------------------------------------- */

static void test_seghdr(void)
{
    struct walrec_seghdr h = {WALREC_VERSION, 0xdeadbeef, 42, 1000001, 0x1122334455667788ull,
                              1763788948000ull};
    struct walrec_seghdr d;
    uint8_t buf[WALREC_SEGHDR_SIZE];
    int r;

    walrec_seghdr_encode(buf, &h);
    CHECK(memcmp(buf, "DLYBRWAL", 8) == 0, "magic");
    CHECK(walrec_get32(buf + 52) == crc32c(0, buf, 52), "crc at 52 over 0..51");
    r = walrec_seghdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
    CHECK(r == WALREC_SEGHDR_SIZE, "decode -> %d", r);
    CHECK(d.version == h.version && d.salt == h.salt && d.segno == h.segno &&
              d.base_lsn == h.base_lsn && d.wal_id == h.wal_id && d.created_ms == h.created_ms,
          "round trip");
    for (size_t n = 0; n < sizeof(buf); n++) {
        r = walrec_seghdr_decode(at_guard(buf, n), n, &d);
        CHECK(r == WALREC_PARTIAL, "truncated to %zu -> %d", n, r);
    }
    for (size_t bit = 0; bit < sizeof(buf) * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        r = walrec_seghdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == WALREC_INVALID, "bit %zu flipped -> %d", bit, r);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    /* Wrong version with a correct CRC. */
    h.version = 2;
    walrec_seghdr_encode(buf, &h);
    r = walrec_seghdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
    CHECK(r == WALREC_INVALID, "version 2 -> %d", r);
    /* Zeros (a torn header) are invalid at once, not partial. */
    memset(buf, 0, sizeof(buf));
    r = walrec_seghdr_decode(at_guard(buf, 20), 20, &d);
    CHECK(r == WALREC_INVALID, "zeros -> %d", r);
}

static void test_record(void)
{
    static uint8_t payload[1024], rec[2048];
    struct walrec_add a = sample_add(200);
    struct walrec_hdr h;
    const uint8_t *pl;
    size_t plen, n;
    uint32_t salt = 0xa5a5f00d;
    int r;

    /* Header encoded from pieces: head and body separately. */
    {
        size_t head = walrec_add_encode_head(payload, &a);
        struct walrec_piece pcs[2] = {{payload, head}, {body, a.body_len}};
        struct walrec_hdr eh = {(uint32_t)(head + a.body_len), WALREC_ADD, 0, 77, 0};

        CHECK(head + a.body_len == walrec_add_size(&a), "size");
        walrec_hdr_encode(rec, &eh, salt, pcs, 2);
        memcpy(rec + WALREC_HDR_SIZE, payload, head);
        memcpy(rec + WALREC_HDR_SIZE + head, body, a.body_len);
        n = WALREC_HDR_SIZE + head + a.body_len;
        plen = head + a.body_len;
        CHECK(rec[6] == 0 && rec[7] == 0 && walrec_get32(rec + 20) == 0, "reserved zero");
        /* The CRC rule from the format comment, spelled out. */
        uint8_t s4[4];
        walrec_put32(s4, salt);
        uint32_t c = crc32c(crc32c(crc32c(0, s4, 4), rec, 16), rec + WALREC_HDR_SIZE, plen);
        CHECK(walrec_get32(rec + 16) == c && eh.crc == c, "crc rule");
    }

    const uint8_t *g = at_guard(rec, n);
    r = walrec_decode(g, n, salt, &h, &pl);
    CHECK(r == (int)n, "decode -> %d want %zu", r, n);
    CHECK(h.len == plen && h.type == WALREC_ADD && h.flags == 0 && h.lsn == 77, "hdr fields");
    CHECK(pl == g + WALREC_HDR_SIZE, "payload pointer");

    for (size_t k = 0; k < n; k++) {
        r = walrec_decode(at_guard(rec, k), k, salt, &h, &pl);
        CHECK(r == WALREC_PARTIAL, "truncated to %zu -> %d", k, r);
    }
    r = walrec_decode(at_guard(rec, n), n, salt ^ 1, &h, &pl);
    CHECK(r == WALREC_INVALID, "wrong salt -> %d", r);

    for (size_t bit = 0; bit < n * 8; bit++) {
        rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        r = walrec_decode(at_guard(rec, n), n, salt, &h, &pl);
        if (bit < 32) /* len: a larger length runs into the guard page: PARTIAL */
            CHECK(r == WALREC_INVALID || r == WALREC_PARTIAL, "len bit %zu -> %d", bit, r);
        else
            CHECK(r == WALREC_INVALID, "bit %zu flipped -> %d", bit, r);
        rec[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }

    /* Bad header fields are INVALID even with a matching CRC. */
    uint8_t small[64], cancel[12];
    uint64_t cancel_id = 42;
    walrec_done_encode(cancel, &cancel_id, 1);
    size_t sn = encode_rec(small, WALREC_CANCEL, 5, salt, cancel, sizeof(cancel));
    r = walrec_decode(at_guard(small, sn), sn, salt, &h, &pl);
    CHECK(r == (int)sn && h.type == WALREC_CANCEL, "cancel -> %d", r);
    /* A CANCEL whose payload is not the id-list layout is INVALID despite its CRC. */
    sn = encode_rec(small, WALREC_CANCEL, 5, salt, (const uint8_t *)"xyz", 3);
    r = walrec_decode(at_guard(small, sn), sn, salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "cancel with a bad payload -> %d", r);
    sn = encode_rec(small, WALREC_CANCEL, 5, salt, cancel, sizeof(cancel));
    small[20] = 1; /* reserved, outside the CRC */
    r = walrec_decode(at_guard(small, sn), sn, salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "reserved u32 -> %d", r);
    for (int t = 0; t < 256; t += (t < 8 ? 1 : 31)) {
        if (t >= WALREC_ADD && t <= WALREC_CANCEL)
            continue;
        sn = encode_rec(small, (uint8_t)t, 5, salt, (const uint8_t *)"xyz", 3);
        r = walrec_decode(at_guard(small, sn), sn, salt, &h, &pl);
        CHECK(r == WALREC_INVALID, "type %d -> %d", t, r);
        r = walrec_decode(at_guard(small, 5), 5, salt, &h, &pl);
        CHECK(r == WALREC_INVALID, "type %d seen in 5 bytes -> %d", t, r);
    }
    /* Length beyond the maximum is invalid as soon as it is seen. */
    walrec_put32(small, WALREC_MAX_PAYLOAD + 1);
    r = walrec_decode(at_guard(small, 4), 4, salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "len > max -> %d", r);
    /* Zeros (a torn tail) are invalid, not partial. */
    memset(small, 0, sizeof(small));
    r = walrec_decode(at_guard(small, sizeof(small)), sizeof(small), salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "zeros -> %d", r);
    /* An empty payload is no id list: INVALID. */
    sn = encode_rec(small, WALREC_CANCEL, 9, salt, NULL, 0);
    r = walrec_decode(at_guard(small, sn), sn, salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "empty payload -> %d", r);
    /* An ADD record whose payload layout is broken is INVALID despite its CRC. */
    plen = encode_add(payload, &a);
    n = encode_rec(rec, WALREC_ADD, 3, salt, payload, plen - 1);
    r = walrec_decode(at_guard(rec, n), n, salt, &h, &pl);
    CHECK(r == WALREC_INVALID, "ADD one byte short -> %d", r);
}

/* A keyed ADD: the key after the routing key, decoded by decode and peek. */
static void test_add_keyed(void)
{
    static uint8_t buf[1024];
    static const char key[] = "order-42";
    struct walrec_add a = sample_add(40), d;
    size_t n, plain;
    int r;

    plain = walrec_add_size(&a);
    a.flags |= WALREC_ADD_KEYED;
    a.key = key;
    a.key_len = sizeof(key) - 1;
    n = encode_add(buf, &a);
    CHECK(n == walrec_add_size(&a) && n == plain + 1 + a.key_len, "size %zu", n);
    r = walrec_add_decode(at_guard(buf, n), n, &d);
    CHECK(r == (int)n, "decode -> %d", r);
    CHECK(d.key_len == a.key_len && memcmp(d.key, key, d.key_len) == 0, "key");
    CHECK(d.props_len == a.props_len && memcmp(d.props, props, a.props_len) == 0, "props after key");
    CHECK(d.body_len == a.body_len && memcmp(d.body, body, a.body_len) == 0, "body after key");
    memset(&d, 0xee, sizeof(d));
    r = walrec_add_peek(at_guard(buf, n), n, &d);
    CHECK(r == (int)n && d.key_len == a.key_len && memcmp(d.key, key, d.key_len) == 0,
          "peek fills the key -> %d", r);
    for (size_t k = 0; k < n; k++)
        CHECK(walrec_add_decode(at_guard(buf, k), k, &d) == WALREC_PARTIAL, "truncated %zu", k);
    /* An unkeyed record decodes with no key. */
    a.flags &= (uint16_t)~WALREC_ADD_KEYED;
    n = encode_add(buf, &a);
    r = walrec_add_decode(at_guard(buf, n), n, &d);
    CHECK(r == (int)n && d.key == NULL && d.key_len == 0, "unkeyed -> %d", r);
}

static void test_add(void)
{
    static uint8_t buf[1024];
    struct walrec_add a = sample_add(123), d;
    size_t n = encode_add(buf, &a);
    const uint8_t *g;
    int r;

    CHECK(n == walrec_add_size(&a), "size %zu", n);
    g = at_guard(buf, n);
    r = walrec_add_decode(g, n, &d);
    CHECK(r == (int)n, "decode -> %d", r);
    CHECK(d.msg_id == a.msg_id && d.due_ms == a.due_ms && d.enqueue_ms == a.enqueue_ms &&
              d.flags == a.flags && d.error == a.error,
          "fixed fields");
    CHECK(d.route_len == a.route_len && memcmp(d.route, route, a.route_len) == 0, "route");
    CHECK(d.exchange_len == a.exchange_len && memcmp(d.exchange, exchange, a.exchange_len) == 0,
          "exchange");
    CHECK(d.routing_key_len == a.routing_key_len &&
              memcmp(d.routing_key, rkey, a.routing_key_len) == 0,
          "routing key");
    CHECK(d.props_len == a.props_len && memcmp(d.props, props, a.props_len) == 0, "props");
    CHECK(d.body_len == a.body_len && memcmp(d.body, body, a.body_len) == 0, "body");
    CHECK(d.body == g + n - a.body_len, "body points into buf");

    memset(&d, 0xee, sizeof(d));
    r = walrec_add_peek(g, n, &d);
    CHECK(r == (int)n, "peek -> %d", r);
    CHECK(d.msg_id == a.msg_id && d.due_ms == a.due_ms && d.flags == a.flags &&
              d.route_len == a.route_len && memcmp(d.route, route, a.route_len) == 0,
          "peek fields");

    for (size_t k = 0; k < n; k++) {
        r = walrec_add_decode(at_guard(buf, k), k, &d);
        CHECK(r == WALREC_PARTIAL, "decode truncated to %zu -> %d", k, r);
        r = walrec_add_peek(at_guard(buf, k), k, &d);
        CHECK(r == WALREC_PARTIAL, "peek truncated to %zu -> %d", k, r);
    }
    buf[n] = 0;
    r = walrec_add_decode(at_guard(buf, n + 1), n + 1, &d);
    CHECK(r == WALREC_INVALID, "trailing byte -> %d", r);

    /* Empty strings, props and body. */
    memset(&a, 0, sizeof(a));
    a.msg_id = 1;
    n = encode_add(buf, &a);
    CHECK(n == 39, "minimal ADD is 39 bytes, got %zu", n);
    r = walrec_add_decode(at_guard(buf, n), n, &d);
    CHECK(r == 39 && d.body_len == 0 && d.props_len == 0 && d.route_len == 0, "minimal -> %d",
          r);

    /* A body length larger than the maximum. */
    walrec_put32(buf + 35, 0xffffffffu);
    r = walrec_add_decode(at_guard(buf, n), n, &d);
    CHECK(r == WALREC_INVALID, "huge body_len -> %d", r);
}

static void test_done(void)
{
    uint64_t ids[5] = {1, 2, 0xffffffffffffffffull, 1ull << 40, 77};
    uint8_t buf[64], rec[128];
    struct walrec_hdr h;
    const uint8_t *pl, *g;
    uint32_t count = 0;
    size_t n;
    int r;

    n = walrec_done_encode(buf, ids, 5);
    CHECK(n == 44 && n == walrec_done_size(5), "size %zu", n);
    g = at_guard(buf, n);
    r = walrec_done_decode(g, n, &count);
    CHECK(r == 44 && count == 5, "decode -> %d count %u", r, count);
    for (uint32_t i = 0; i < 5; i++)
        CHECK(walrec_done_id(g, i) == ids[i], "id %u", i);
    for (size_t k = 0; k < n; k++) {
        r = walrec_done_decode(at_guard(buf, k), k, &count);
        CHECK(r == WALREC_PARTIAL, "truncated to %zu -> %d", k, r);
    }
    /* Longer than the count says. */
    buf[n] = 0;
    r = walrec_done_decode(at_guard(buf, n + 1), n + 1, &count);
    CHECK(r == WALREC_INVALID, "extra byte -> %d", r);
    /* An absurd count. */
    walrec_put32(buf, 0xffffffffu);
    r = walrec_done_decode(at_guard(buf, n), n, &count);
    CHECK(r == WALREC_INVALID, "count 2^32-1 -> %d", r);

    /* At record level a count that disagrees with len is INVALID either way. */
    n = walrec_done_encode(buf, ids, 5);
    walrec_put32(buf, 4); /* says 4 ids, carries 5 */
    size_t rn = encode_rec(rec, WALREC_DONE, 10, 1, buf, n);
    r = walrec_decode(at_guard(rec, rn), rn, 1, &h, &pl);
    CHECK(r == WALREC_INVALID, "DONE count 4 len 44 -> %d", r);
    walrec_put32(buf, 6); /* says 6 ids, carries 5 */
    rn = encode_rec(rec, WALREC_DONE, 10, 1, buf, n);
    r = walrec_decode(at_guard(rec, rn), rn, 1, &h, &pl);
    CHECK(r == WALREC_INVALID, "DONE count 6 len 44 -> %d", r);
    rn = encode_rec(rec, WALREC_DONE, 10, 1, buf, 3);
    r = walrec_decode(at_guard(rec, rn), rn, 1, &h, &pl);
    CHECK(r == WALREC_INVALID, "DONE len 3 -> %d", r);
    walrec_put32(buf, 5);
    rn = encode_rec(rec, WALREC_DONE, 10, 1, buf, n);
    r = walrec_decode(at_guard(rec, rn), rn, 1, &h, &pl);
    CHECK(r == (int)rn && h.type == WALREC_DONE, "DONE ok -> %d", r);
    /* Empty DONE. */
    n = walrec_done_encode(buf, NULL, 0);
    r = walrec_done_decode(at_guard(buf, n), n, &count);
    CHECK(r == 4 && count == 0, "empty DONE -> %d", r);
}

/* Random garbage never crashes a decoder or reads past the end. */
static void test_fuzz(void)
{
    static uint8_t buf[512];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    struct walrec_hdr h;
    struct walrec_add a;
    struct walrec_seghdr sh;
    const uint8_t *pl;
    uint32_t count;

    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(tk_rand(&x) % sizeof(buf));
        tk_fill(buf, n, &x);
        if (n >= 8 && (it & 1)) { /* plausible header so the decoders go deeper */
            buf[4] = (uint8_t)(1 + it % 3);
            buf[6] = buf[7] = 0;
            walrec_put32(buf, (uint32_t)(tk_rand(&x) % 600));
        }
        const uint8_t *g = at_guard(buf, n);
        (void)walrec_decode(g, n, 0, &h, &pl);
        (void)walrec_seghdr_decode(g, n, &sh);
        (void)walrec_add_decode(g, n, &a);
        (void)walrec_add_peek(g, n, &a);
        (void)walrec_done_decode(g, n, &count);
    }
}

static const struct check_case cases[] = {
    {"seghdr", test_seghdr},
    {"record", test_record},
    {"add", test_add},
    {"add_keyed", test_add_keyed},
    {"done", test_done},
    {"fuzz", test_fuzz},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
