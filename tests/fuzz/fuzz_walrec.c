/*
 * fuzz_walrec.c -- libFuzzer harness for the WAL's on-disk format (walrec.h).
 *
 * Every decoder gets the fuzz bytes, in a heap buffer of exactly that size
 * so ASan catches a read one byte past the end (the picohttpparser rule:
 * never read past buf + len). Checked contracts:
 *  - each decoder returns bytes used (<= len), WALREC_PARTIAL or
 *    WALREC_INVALID, nothing else;
 *  - a decoder that says PARTIAL on a prefix never succeeds on it, and a
 *    decoder that succeeds on len bytes says PARTIAL or INVALID on fewer
 *    (payload decoders are given exactly one payload);
 *  - walrec_add_peek agrees with walrec_add_decode on success and on the
 *    fields it fills;
 *  - round trip: a decoded ADD re-encoded (walrec_add_encode_head + body)
 *    is byte-identical to the input and decodes to the same fields; the
 *    same for DONE; a record header re-encoded over its payload with the
 *    salt it decoded with reproduces the 24 header bytes;
 *  - a segment header that decodes re-encodes to the same 56 bytes.
 * walrec_decode is tried with fixed salts and with the salt that makes the
 * CRC check pass (computed from the first bytes), so the fuzzer reaches the
 * payload checks without having to guess CRC-32C.
 */
#include "delay-bridge/walrec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_walrec: %s:%d: check failed: %s\n", __FILE__, __LINE__,  \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static void check_rc(int rc, size_t len)
{
    CHECK(rc == WALREC_PARTIAL || rc == WALREC_INVALID || (rc > 0 && (size_t)rc <= len));
}

static void add_equal(const struct walrec_add *a, const struct walrec_add *b)
{
    CHECK(a->msg_id == b->msg_id && a->due_ms == b->due_ms && a->enqueue_ms == b->enqueue_ms);
    CHECK(a->flags == b->flags && a->error == b->error);
    CHECK(a->route_len == b->route_len && memcmp(a->route, b->route, a->route_len) == 0);
    CHECK(a->exchange_len == b->exchange_len &&
          memcmp(a->exchange, b->exchange, a->exchange_len) == 0);
    CHECK(a->routing_key_len == b->routing_key_len &&
          memcmp(a->routing_key, b->routing_key, a->routing_key_len) == 0);
    CHECK(a->props_len == b->props_len && memcmp(a->props, b->props, a->props_len) == 0);
    CHECK(a->body_len == b->body_len && memcmp(a->body, b->body, a->body_len) == 0);
}

static void fuzz_add(const uint8_t *buf, size_t len)
{
    struct walrec_add a, p, a2;
    int rc = walrec_add_decode(buf, len, &a);
    int rp = walrec_add_peek(buf, len, &p);

    check_rc(rc, len);
    CHECK(rc == rp);
    if (rc < 0)
        return;
    CHECK((size_t)rc == len); /* exactly one payload */
    CHECK(walrec_add_size(&a) == len);
    CHECK(p.msg_id == a.msg_id && p.due_ms == a.due_ms && p.flags == a.flags);
    CHECK(p.route_len == a.route_len && p.route == a.route);
    CHECK(p.body == NULL && p.body_len == 0 && p.props == NULL);

    /* one byte short is PARTIAL, one more is INVALID */
    if (len > 0) {
        CHECK(walrec_add_decode(buf, len - 1, &a2) == WALREC_PARTIAL);
    }

    /* re-encode: head, then the body as its own piece (as wal.c writes it) */
    uint8_t *out = malloc(len);
    size_t head = walrec_add_encode_head(out, &a);
    CHECK(head + a.body_len == len);
    memcpy(out + head, a.body, a.body_len);
    CHECK(memcmp(out, buf, len) == 0);
    CHECK(walrec_add_decode(out, len, &a2) == (int)len);
    add_equal(&a, &a2);
    free(out);
}

static void fuzz_done(const uint8_t *buf, size_t len)
{
    uint32_t n = 0;
    int rc = walrec_done_decode(buf, len, &n);

    check_rc(rc, len);
    if (rc < 0)
        return;
    CHECK((size_t)rc == len && walrec_done_size(n) == len);
    uint64_t *ids = malloc(((size_t)n + 1) * 8);
    for (uint32_t i = 0; i < n; i++)
        ids[i] = walrec_done_id(buf, i);
    uint8_t *out = malloc(len);
    CHECK(walrec_done_encode(out, ids, n) == len);
    CHECK(memcmp(out, buf, len) == 0);
    free(out);
    free(ids);
}

static void fuzz_seghdr(const uint8_t *buf, size_t len)
{
    struct walrec_seghdr h;
    uint8_t out[WALREC_SEGHDR_SIZE];
    int rc = walrec_seghdr_decode(buf, len, &h);

    check_rc(rc, len);
    if (rc < 0)
        return;
    CHECK(rc == WALREC_SEGHDR_SIZE && h.version == WALREC_VERSION);
    walrec_seghdr_encode(out, &h);
    CHECK(memcmp(out, buf, WALREC_SEGHDR_SIZE) == 0);
}

static void fuzz_record(const uint8_t *buf, size_t len, uint32_t salt)
{
    struct walrec_hdr h;
    const uint8_t *payload = NULL;
    int rc = walrec_decode(buf, len, salt, &h, &payload);

    check_rc(rc, len);
    if (rc < 0)
        return;
    CHECK((size_t)rc == WALREC_HDR_SIZE + h.len && payload == buf + WALREC_HDR_SIZE);
    CHECK(h.type >= WALREC_ADD && h.type <= WALREC_CANCEL && h.len <= WALREC_MAX_PAYLOAD);
    /* the record stands alone: every shorter prefix is PARTIAL or INVALID */
    CHECK(walrec_decode(buf, (size_t)rc - 1, salt, &(struct walrec_hdr){0}, &payload) < 0);
    payload = buf + WALREC_HDR_SIZE;
    if (h.type == WALREC_ADD)
        fuzz_add(payload, h.len);
    else if (h.type == WALREC_DONE)
        fuzz_done(payload, h.len);

    /* re-encode the header over the payload in two pieces */
    uint8_t out[WALREC_HDR_SIZE];
    struct walrec_hdr h2 = h;
    size_t half = h.len / 2;
    struct walrec_piece pieces[2] = {{payload, half}, {payload + half, h.len - half}};
    walrec_hdr_encode(out, &h2, salt, pieces, 2);
    CHECK(h2.crc == h.crc);
    /* byte 5 (flags) is carried, bytes 6..7 and 20..23 are zero */
    CHECK(memcmp(out, buf, WALREC_HDR_SIZE) == 0);
}

/* Rather than make the fuzzer guess CRC-32C: a copy with len clamped to the
 * bytes present and the CRC field rewritten for salt, so the payload checks
 * and the round trips run on every input. */
static void fuzz_record_fixed_crc(const uint8_t *data, size_t len, uint32_t salt)
{
    if (len < WALREC_HDR_SIZE)
        return;
    uint32_t plen = walrec_get32(data);
    if (plen > len - WALREC_HDR_SIZE)
        plen = (uint32_t)(len - WALREC_HDR_SIZE);
    uint8_t *b = malloc(len);
    memcpy(b, data, len);
    walrec_put32(b, plen);
    uint8_t s[4];
    walrec_put32(s, salt);
    uint32_t crc = crc32c(crc32c(crc32c(0, s, 4), b, 16), b + WALREC_HDR_SIZE, plen);
    walrec_put32(b + 16, crc);
    fuzz_record(b, len, salt);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* exact-size heap copy: ASan flags any read past the end */
    uint8_t *buf = malloc(size ? size : 1);
    if (size)
        memcpy(buf, data, size);

    fuzz_seghdr(buf, size);
    static const uint32_t salts[] = {0, 1, 0xdeadbeef, 0xffffffff};
    for (size_t i = 0; i < sizeof salts / sizeof salts[0]; i++)
        fuzz_record(buf, size, salts[i]);
    fuzz_record_fixed_crc(buf, size, 0x12345678);
    fuzz_add(buf, size);
    fuzz_done(buf, size);
    /* the same bytes after a valid segment header: a segment's first record */
    if (size >= WALREC_SEGHDR_SIZE) {
        struct walrec_seghdr h;
        if (walrec_seghdr_decode(buf, size, &h) == WALREC_SEGHDR_SIZE)
            fuzz_record(buf + WALREC_SEGHDR_SIZE, size - WALREC_SEGHDR_SIZE, h.salt);
    }
    free(buf);
    return 0;
}
