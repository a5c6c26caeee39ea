/*
 * test_replrec.c -- the replication stream's message format and its import.
 *
 * The 40-byte header: round trips for the three kinds, every truncation is
 * PARTIAL, every flipped bit is INVALID (the CRC covers bytes 0..35 and
 * itself), bad magic, version, reserved bytes or kind are INVALID even with
 * a matching CRC.
 *
 * The import, against a sink that keeps what a log would keep (reset()
 * drops what was handed so far) and checks that every record it is handed
 * runs +1 from the last reset and carries the payload its batch was built
 * with: an empty stream, a fresh log, a retention cut with and without a
 * horizon, gaps, overlaps, stray batches of an earlier term, records of two
 * logs, broken messages, sink errors, and other bridges' fences.
 *
 * Every message is fed from a buffer that ends exactly against a PROT_NONE
 * guard page, so a read past the end of a message crashes the test.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "delay-bridge/walrec.h"
#include "base/crc32c.h"
#include "delay-bridge/replrec.h"

#include "check.h"
#include "guard.h"
#include "testkit.h"


/* ---- messages ---------------------------------------------------------- */

#define WAL1 0x1111222233334444ull
#define WAL2 0x5555666677778888ull
#define OWNER_A 0xa1a1a1a1ull
#define OWNER_B 0xb2b2b2b2ull
#define OWNER_C 0xc3c3c3c3ull
#define MINE 0x4d4d4d4dull

static const char route[] = "orders";
static const uint8_t body[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void reseal(uint8_t *hdr) /* recompute a header's CRC after editing it */
{
    walrec_put32(hdr + 36, crc32c(0, hdr, 36));
}

static size_t msg_hdr(uint8_t *out, uint8_t kind, uint64_t wal_id, uint64_t owner, uint64_t lsn,
                      uint32_t count)
{
    struct replrec_hdr h = {kind, wal_id, owner, lsn, count};

    replrec_hdr_encode(out, &h);
    return REPLREC_HDR_SIZE;
}

/*
 * One record with LSN lsn into out, checked with salt; returns its size.
 * The payload names the batch's tag (the owner that built it): an ADD with
 * msg_id tag + lsn for odd LSNs (head and body as two pieces), a DONE of the
 * one id tag + lsn for even ones. The sink reads the tag back.
 */
static size_t encode_rec(uint8_t *out, uint64_t lsn, uint64_t tag, uint32_t salt)
{
    uint8_t head[128];
    struct walrec_hdr h;

    memset(&h, 0, sizeof(h));
    h.lsn = lsn;
    if (lsn & 1) {
        struct walrec_add a;
        size_t hn;

        memset(&a, 0, sizeof(a));
        a.msg_id = tag + lsn;
        a.due_ms = 1800000000000ull + lsn;
        a.enqueue_ms = 1700000000000ull;
        a.route = route;
        a.route_len = sizeof(route) - 1;
        a.body = body;
        a.body_len = sizeof(body);
        hn = walrec_add_encode_head(head, &a);

        struct walrec_piece pcs[2] = {{head, hn}, {body, sizeof(body)}};

        h.len = (uint32_t)(hn + sizeof(body));
        h.type = WALREC_ADD;
        walrec_hdr_encode(out, &h, salt, pcs, 2);
        memcpy(out + WALREC_HDR_SIZE, head, hn);
        memcpy(out + WALREC_HDR_SIZE + hn, body, sizeof(body));
    } else {
        uint64_t id = tag + lsn;
        size_t dn = walrec_done_encode(head, &id, 1);
        struct walrec_piece pc = {head, dn};

        h.len = (uint32_t)dn;
        h.type = WALREC_DONE;
        walrec_hdr_encode(out, &h, salt, &pc, 1);
        memcpy(out + WALREC_HDR_SIZE, head, dn);
    }
    return WALREC_HDR_SIZE + h.len;
}

/* A RECORDS message: header + count records, LSNs lsn, lsn+1, ...; tag = owner. */
static size_t msg_records(uint8_t *out, uint64_t wal_id, uint64_t owner, uint64_t lsn,
                          uint32_t count)
{
    size_t n = msg_hdr(out, REPLREC_RECORDS, wal_id, owner, lsn, count);

    for (uint32_t i = 0; i < count; i++)
        n += encode_rec(out + n, lsn + i, owner, REPLREC_SALT);
    return n;
}

/* ---- the sink ---------------------------------------------------------- */

#define SINK_MAX 4096

struct sink {
    int resets;
    uint64_t reset_wal[16], reset_base[16];
    /* what the log holds: the records handed since the last reset */
    size_t n;
    uint64_t lsn[SINK_MAX], tag[SINK_MAX];
    size_t handed;     /* records handed in all, across resets */
    int bad_order;     /* a record that did not run +1 from the reset's base */
    int bad_payload;   /* a payload that does not decode, or len != its payload */
    int fail_reset;    /* reset() returns this when non-zero */
    size_t fail_at;    /* record() returns fail_record for the fail_at-th record (1-based) */
    int fail_record;
};

static int sink_reset(void *arg, uint64_t wal_id, uint64_t base_lsn)
{
    struct sink *s = arg;

    if (s->fail_reset)
        return s->fail_reset;
    if (s->resets < 16) {
        s->reset_wal[s->resets] = wal_id;
        s->reset_base[s->resets] = base_lsn;
    }
    s->resets++;
    s->n = 0;
    return 0;
}

static int sink_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct sink *s = arg;
    uint64_t want, id = 0;

    s->handed++;
    if (s->fail_at && s->handed == s->fail_at)
        return s->fail_record;
    if (s->resets == 0 || s->resets > 16)
        s->bad_order++;
    else {
        want = s->n ? s->lsn[s->n - 1] + 1 : s->reset_base[s->resets - 1];
        if (h->lsn != want)
            s->bad_order++;
    }
    if (h->type == WALREC_ADD) {
        struct walrec_add a;
        if (walrec_add_decode(payload, h->len, &a) != (int)h->len)
            s->bad_payload++;
        else
            id = a.msg_id;
    } else if (h->type == WALREC_DONE) {
        uint32_t count;
        if (walrec_done_decode(payload, h->len, &count) != (int)h->len || count != 1)
            s->bad_payload++;
        else
            id = walrec_done_id(payload, 0);
    } else {
        s->bad_payload++;
    }
    if (s->n < SINK_MAX) {
        s->lsn[s->n] = h->lsn;
        s->tag[s->n] = id - h->lsn;
        s->n++;
    }
    return 0;
}

static struct sink snk;
static struct replrec_sink sink_ops = {sink_reset, sink_record, &snk};
static struct replrec_import im;
static char why[512];
static uint8_t msgbuf[1 << 16];

static void start(uint64_t mine)
{
    memset(&snk, 0, sizeof(snk));
    replrec_import_init(&im, mine);
}

/* Feed one message body (copied against the guard page). */
static int feed(const uint8_t *msg, size_t n)
{
    memset(why, 0, sizeof(why));
    return replrec_import_msg(&im, at_guard(msg, n), n, &sink_ops, why, sizeof(why));
}

static int batch(uint64_t wal_id, uint64_t owner, uint64_t lsn, uint32_t count)
{
    return feed(msgbuf, msg_records(msgbuf, wal_id, owner, lsn, count));
}

static int fence(uint64_t owner)
{
    return feed(msgbuf, msg_hdr(msgbuf, REPLREC_FENCE, 0, owner, 0, 0));
}

static int horizon(uint64_t wal_id, uint64_t owner, uint64_t lsn)
{
    return feed(msgbuf, msg_hdr(msgbuf, REPLREC_HORIZON, wal_id, owner, lsn, 0));
}

/* The log the sink holds is exactly first..last, every record tagged tag. */
static int holds(uint64_t first, uint64_t last, uint64_t tag)
{
    if (snk.n != last - first + 1)
        return 0;
    for (size_t i = 0; i < snk.n; i++)
        if (snk.lsn[i] != first + i || snk.tag[i] != tag)
            return 0;
    return 1;
}

/* Nothing the sink saw was out of order or damaged. */
#define CHECK_SINK_CLEAN()                                                                   \
    do {                                                                                     \
        CHECK(snk.bad_order == 0, "%d record(s) out of order", snk.bad_order);               \
        CHECK(snk.bad_payload == 0, "%d bad payload(s)", snk.bad_payload);                   \
    } while (0)

/* ---- header ------------------------------------------------------------ */

static void test_hdr_roundtrip(void)
{
    static const struct replrec_hdr hs[] = {
        {REPLREC_RECORDS, 0x0102030405060708ull, 0x1112131415161718ull, 0x2122232425262728ull,
         0x31323334u},
        {REPLREC_FENCE, 0, 0xfedcba9876543210ull, 0, 0},
        {REPLREC_HORIZON, WAL1, OWNER_A, 123456789, 0},
    };
    uint8_t buf[REPLREC_HDR_SIZE + 8];
    struct replrec_hdr d;
    int r;

    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++) {
        const struct replrec_hdr *h = &hs[i];

        memset(buf, 0xee, sizeof(buf));
        replrec_hdr_encode(buf, h);
        CHECK(memcmp(buf, "DBRS", 4) == 0 && buf[4] == 1 && buf[5] == h->kind, "kind %u magic",
              h->kind);
        CHECK(buf[6] == 0 && buf[7] == 0, "kind %u reserved", h->kind);
        CHECK(walrec_get64(buf + 8) == h->wal_id && walrec_get64(buf + 16) == h->owner &&
                  walrec_get64(buf + 24) == h->lsn && walrec_get32(buf + 32) == h->count,
              "kind %u field offsets, little-endian", h->kind);
        CHECK(walrec_get32(buf + 36) == crc32c(0, buf, 36), "kind %u crc at 36 over 0..35",
              h->kind);
        CHECK(buf[REPLREC_HDR_SIZE] == 0xee, "kind %u: encode wrote past 40 bytes", h->kind);

        memset(&d, 0, sizeof(d));
        r = replrec_hdr_decode(at_guard(buf, REPLREC_HDR_SIZE), REPLREC_HDR_SIZE, &d);
        CHECK(r == REPLREC_HDR_SIZE, "kind %u decode -> %d", h->kind, r);
        CHECK(d.kind == h->kind && d.wal_id == h->wal_id && d.owner == h->owner &&
                  d.lsn == h->lsn && d.count == h->count,
              "kind %u round trip", h->kind);
        /* Bytes after the header (the records) are not the header's business. */
        r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == REPLREC_HDR_SIZE, "kind %u with 8 bytes after -> %d", h->kind, r);
    }
}

static void test_hdr_truncated(void)
{
    uint8_t buf[REPLREC_HDR_SIZE];
    struct replrec_hdr h = {REPLREC_RECORDS, WAL1, OWNER_A, 77, 5}, d;
    int r;

    replrec_hdr_encode(buf, &h);
    for (size_t k = 0; k < sizeof(buf); k++) {
        r = replrec_hdr_decode(at_guard(buf, k), k, &d);
        CHECK(r == WALREC_PARTIAL, "truncated to %zu -> %d", k, r);
    }
}

static void test_hdr_bitflip(void)
{
    static const uint8_t kinds[] = {REPLREC_RECORDS, REPLREC_FENCE, REPLREC_HORIZON};
    uint8_t buf[REPLREC_HDR_SIZE];
    struct replrec_hdr d;
    int r;

    for (size_t i = 0; i < sizeof(kinds); i++) {
        struct replrec_hdr h = {kinds[i], WAL1, OWNER_B, 1000 + i, kinds[i] == 1 ? 3 : 0};

        replrec_hdr_encode(buf, &h);
        for (size_t bit = 0; bit < sizeof(buf) * 8; bit++) {
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
            CHECK(r == WALREC_INVALID, "kind %u bit %zu flipped -> %d", kinds[i], bit, r);
            buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        }
    }
}

/* Fields the decoder must check itself: a matching CRC does not make them right. */
static void test_hdr_bad_fields(void)
{
    uint8_t buf[REPLREC_HDR_SIZE], good[REPLREC_HDR_SIZE];
    struct replrec_hdr h = {REPLREC_HORIZON, WAL1, OWNER_A, 9, 0}, d;
    int r;

    replrec_hdr_encode(good, &h);
    for (int k = 0; k < 256; k++) {
        if (k >= REPLREC_RECORDS && k <= REPLREC_HORIZON)
            continue;
        memcpy(buf, good, sizeof(buf));
        buf[5] = (uint8_t)k;
        reseal(buf);
        r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == WALREC_INVALID, "kind %d -> %d", k, r);
    }
    for (int v = 0; v < 256; v++) {
        if (v == 1)
            continue;
        memcpy(buf, good, sizeof(buf));
        buf[4] = (uint8_t)v;
        reseal(buf);
        r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == WALREC_INVALID, "version %d -> %d", v, r);
    }
    for (int i = 6; i <= 7; i++) {
        memcpy(buf, good, sizeof(buf));
        buf[i] = 0x80;
        reseal(buf);
        r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == WALREC_INVALID, "reserved byte %d -> %d", i, r);
    }
    for (int i = 0; i < 4; i++) {
        memcpy(buf, good, sizeof(buf));
        buf[i] ^= 0x20; /* "dBRS", "DbRS", ... */
        reseal(buf);
        r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
        CHECK(r == WALREC_INVALID, "magic byte %d -> %d", i, r);
    }
    /* A WAL segment header or zeros are no stream message. */
    memset(buf, 0, sizeof(buf));
    r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
    CHECK(r == WALREC_INVALID, "zeros -> %d", r);
    memcpy(buf, "DLYBRWAL", 8);
    r = replrec_hdr_decode(at_guard(buf, sizeof(buf)), sizeof(buf), &d);
    CHECK(r == WALREC_INVALID, "a WAL segment's magic -> %d", r);
    /* The untouched header still decodes (the edits above are what failed). */
    r = replrec_hdr_decode(at_guard(good, sizeof(good)), sizeof(good), &d);
    CHECK(r == REPLREC_HDR_SIZE, "good -> %d", r);
}

/* Random bytes (some with a valid header in front) never crash the decoder or the import. */
static void test_fuzz(void)
{
    static uint8_t buf[2048];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    struct replrec_hdr d;

    for (int it = 0; it < 20000; it++) {
        size_t n = (size_t)(tk_rand(&x) % sizeof(buf));
        tk_fill(buf, n, &x);
        if (n >= REPLREC_HDR_SIZE && (it & 1)) { /* a valid header, random records */
            uint64_t r = tk_rand(&x);
            struct replrec_hdr h = {(uint8_t)(1 + it % 3), WAL1, OWNER_A, 1 + r % 5,
                                    (uint32_t)(r / 5 % 4)};
            replrec_hdr_encode(buf, &h);
        }
        (void)replrec_hdr_decode(at_guard(buf, n), n, &d);
        start(MINE);
        int r = feed(buf, n);
        CHECK(r <= 1, "import of random bytes -> %d", r);
        if (r < 0)
            CHECK(why[0] != '\0', "an error without a reason");
    }
}

/* ---- import ------------------------------------------------------------ */

static void test_import_empty(void)
{
    int r;

    start(MINE);
    CHECK(replrec_import_complete(&im) == 1, "nothing read yet is a complete empty log");
    r = fence(MINE);
    CHECK(r == 1, "my fence on an empty stream -> %d", r);
    CHECK(replrec_import_complete(&im) == 1, "empty stream is complete");
    CHECK(snk.resets == 0 && snk.handed == 0, "resets %d handed %zu", snk.resets, snk.handed);
    CHECK_U64(im.fences, 1);
    CHECK_U64(im.messages, 1);
    CHECK_U64(im.bytes, REPLREC_HDR_SIZE);
}

static void test_import_fresh(void)
{
    int r;

    start(MINE);
    CHECK((r = fence(OWNER_A)) == 0, "A's fence -> %d", r);
    CHECK((r = batch(WAL1, OWNER_A, 1, 5)) == 0, "1..5 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 6, 7)) == 0, "6..12 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 13, 8)) == 0, "13..20 -> %d %s", r, why);
    CHECK(replrec_import_complete(&im) == 1, "a run from LSN 1 is complete");
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(snk.resets == 1 && snk.reset_wal[0] == WAL1 && snk.reset_base[0] == 1,
          "one reset (wal 1, base 1): %d", snk.resets);
    CHECK(holds(1, 20, OWNER_A), "log holds 1..20 of A (%zu records)", snk.n);
    CHECK(snk.handed == 20, "each record handed once: %zu", snk.handed);
    CHECK_SINK_CLEAN();
    CHECK(replrec_import_complete(&im) == 1, "complete");
    CHECK_U64(im.wal_id, WAL1);
    CHECK_U64(im.first_lsn, 1);
    CHECK_U64(im.next_lsn, 21);
    CHECK_U64(im.records, 20);
    CHECK_U64(im.batches, 3);
    CHECK_U64(im.messages, 5);
    CHECK_U64(im.gaps, 0);
    CHECK_U64(im.strays, 0);
    CHECK_U64(im.last_owner, OWNER_A);
}

/* The stream begins at LSN 1000: records before it were cut by retention. */
static void cut_stream(void)
{
    int r;

    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 1000, 10)) == 0, "1000..1009 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 1010, 10)) == 0, "1010..1019 -> %d %s", r, why);
}

static void test_import_retention_cut(void)
{
    int r;

    /* No horizon: the records before 1000 may still be live. */
    cut_stream();
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(holds(1000, 1019, OWNER_A), "log holds 1000..1019 (%zu)", snk.n);
    CHECK(snk.resets == 1 && snk.reset_base[0] == 1000, "reset at 1000");
    CHECK_SINK_CLEAN();
    CHECK(replrec_import_complete(&im) == 0, "a cut stream without a horizon is incomplete");

    /* A horizon at the first record: nothing live predates the run. */
    cut_stream();
    CHECK((r = horizon(WAL1, OWNER_A, 1000)) == 0, "horizon 1000 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(replrec_import_complete(&im) == 1, "horizon == first_lsn: complete");
    CHECK_U64(im.horizons, 1);

    /* Inside the run, and at its end (next_lsn). */
    cut_stream();
    CHECK(horizon(WAL1, OWNER_A, 1012) == 0, "horizon 1012");
    CHECK(fence(MINE) == 1 && replrec_import_complete(&im) == 1, "horizon in the run");
    cut_stream();
    CHECK(horizon(WAL1, OWNER_A, 1020) == 0, "horizon 1020");
    CHECK(fence(MINE) == 1 && replrec_import_complete(&im) == 1, "horizon == next_lsn");

    /* Before the run: the records between it and the run may be live. */
    cut_stream();
    CHECK((r = horizon(WAL1, OWNER_A, 999)) == 0, "horizon 999 -> %d %s", r, why);
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "horizon < first_lsn does not count");
    CHECK_U64(im.horizons, 0);

    /* Ahead of what was read: it vouches for records the run does not have. */
    cut_stream();
    CHECK((r = horizon(WAL1, OWNER_A, 1021)) == 0, "horizon 1021 -> %d %s", r, why);
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "horizon > next_lsn does not count");
    CHECK_U64(im.horizons, 0);

    /* A horizon before any record does not vouch for the run that follows. */
    start(MINE);
    CHECK(horizon(WAL1, OWNER_A, 1000) == 0, "early horizon");
    CHECK(batch(WAL1, OWNER_A, 1000, 10) == 0, "1000..1009");
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "a horizon before the run does not count");

    /* A horizon of an earlier term after a newer fence is a stray too. */
    start(MINE);
    CHECK(fence(OWNER_A) == 0 && batch(WAL1, OWNER_A, 1000, 10) == 0, "A's run");
    CHECK(fence(OWNER_B) == 0 && batch(WAL1, OWNER_B, 1010, 5) == 0, "B's run");
    CHECK((r = horizon(WAL1, OWNER_A, 1000)) == 0, "A's late horizon -> %d %s", r, why);
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "a stray horizon does not count");
    /* ... but the current owner's does. */
    start(MINE);
    CHECK(fence(OWNER_A) == 0 && batch(WAL1, OWNER_A, 1000, 10) == 0, "A's run");
    CHECK(fence(OWNER_B) == 0 && batch(WAL1, OWNER_B, 1010, 5) == 0, "B's run");
    CHECK(horizon(WAL1, OWNER_B, 1000) == 0, "B's horizon");
    CHECK(fence(MINE) == 1 && replrec_import_complete(&im) == 1, "B's horizon counts");
}

static void test_import_gap(void)
{
    int r;

    /* 1..10, then 20..30: 11..19 are lost, the run restarts at 20. */
    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 1, 10)) == 0, "1..10 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 20, 11)) == 0, "20..30 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(snk.resets == 2, "two resets: %d", snk.resets);
    CHECK(snk.reset_wal[1] == WAL1 && snk.reset_base[1] == 20, "second reset at 20: %" PRIu64,
          snk.reset_base[1]);
    CHECK(holds(20, 30, OWNER_A), "log holds 20..30 only (%zu)", snk.n);
    CHECK(snk.handed == 21, "handed %zu", snk.handed);
    CHECK_SINK_CLEAN();
    CHECK_U64(im.gaps, 1);
    CHECK_U64(im.first_lsn, 20);
    CHECK_U64(im.next_lsn, 31);
    CHECK(replrec_import_complete(&im) == 0, "a run after a gap without a horizon: incomplete");

    /* The same with a horizon at 20 after the gap: complete. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 10) == 0 && batch(WAL1, OWNER_A, 20, 11) == 0, "1..10 20..30");
    CHECK((r = horizon(WAL1, OWNER_A, 20)) == 0, "horizon 20 -> %d %s", r, why);
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 1, "horizon >= 20 after the gap: complete");

    /* A horizon of 19 vouches for 19, which the run does not have. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 10) == 0 && batch(WAL1, OWNER_A, 20, 11) == 0, "1..10 20..30");
    CHECK(horizon(WAL1, OWNER_A, 19) == 0, "horizon 19");
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "horizon 19 < first_lsn 20: incomplete");

    /* A horizon before the gap belongs to the run the gap dropped. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1000, 11) == 0, "1000..1010");
    CHECK(horizon(WAL1, OWNER_A, 1005) == 0, "horizon 1005");
    CHECK(replrec_import_complete(&im) == 1, "complete before the gap");
    CHECK(batch(WAL1, OWNER_A, 1020, 11) == 0, "1020..1030");
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "the gap drops the old run's horizon");
    CHECK(holds(1020, 1030, OWNER_A), "log holds 1020..1030 (%zu)", snk.n);

    /* A gap in a run from LSN 1 makes it incomplete too. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 3) == 0 && batch(WAL1, OWNER_A, 5, 3) == 0, "1..3 5..7");
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(replrec_import_complete(&im) == 0, "one missing LSN: incomplete");
    CHECK(holds(5, 7, OWNER_A) && snk.resets == 2, "restarted at 5");
}

static void test_import_overlap(void)
{
    int r;

    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 1, 10)) == 0, "1..10 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 5, 11)) == 0, "5..15 -> %d %s", r, why);
    CHECK(snk.resets == 1, "no reset for an overlap: %d", snk.resets);
    CHECK(holds(1, 15, OWNER_A), "log holds 1..15 (%zu)", snk.n);
    CHECK(snk.handed == 15, "11..15 handed once, 5..10 not again: %zu handed", snk.handed);
    /* A batch wholly inside what was taken hands nothing. */
    CHECK((r = batch(WAL1, OWNER_A, 3, 5)) == 0, "3..7 -> %d %s", r, why);
    CHECK(snk.handed == 15 && snk.resets == 1, "3..7 handed nothing");
    /* And the run goes on after it. */
    CHECK((r = batch(WAL1, OWNER_A, 16, 2)) == 0, "16..17 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(holds(1, 17, OWNER_A), "log holds 1..17 (%zu)", snk.n);
    CHECK_SINK_CLEAN();
    CHECK_U64(im.records, 17);
    CHECK_U64(im.gaps, 0);
    CHECK(replrec_import_complete(&im) == 1, "complete");
}

static void test_import_strays(void)
{
    int r;

    start(MINE);
    CHECK((r = fence(OWNER_A)) == 0, "fence A -> %d", r);
    CHECK((r = batch(WAL1, OWNER_A, 1, 10)) == 0, "A 1..10 -> %d %s", r, why);
    CHECK((r = fence(OWNER_B)) == 0, "fence B -> %d", r);
    /* A lost its lease but published once more: a stray. */
    CHECK((r = batch(WAL1, OWNER_A, 11, 5)) == 0, "stray A 11..15 -> %d %s", r, why);
    CHECK_U64(im.strays, 1);
    CHECK(holds(1, 10, OWNER_A), "the stray was not handed (%zu)", snk.n);
    CHECK(snk.handed == 10 && snk.resets == 1, "handed %zu resets %d", snk.handed, snk.resets);
    /* A stray that jumps ahead is no gap either. */
    CHECK((r = batch(WAL1, OWNER_A, 40, 3)) == 0, "stray A 40..42 -> %d %s", r, why);
    CHECK_U64(im.strays, 2);
    CHECK_U64(im.gaps, 0);
    CHECK(snk.resets == 1 && snk.handed == 10, "the jumping stray reset nothing");
    /* B carries on from 11 with its own records. */
    CHECK((r = batch(WAL1, OWNER_B, 11, 10)) == 0, "B 11..20 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(snk.n == 20 && snk.handed == 20 && snk.resets == 1, "log 1..20: n %zu handed %zu",
          snk.n, snk.handed);
    for (size_t i = 0; i < snk.n && i < 20; i++)
        CHECK(snk.lsn[i] == i + 1 && snk.tag[i] == (i < 10 ? OWNER_A : OWNER_B),
              "record %zu: lsn %" PRIu64 " tag %" PRIx64, i, snk.lsn[i], snk.tag[i]);
    CHECK_SINK_CLEAN();
    CHECK_U64(im.strays, 2);
    CHECK_U64(im.batches, 2);
    CHECK_U64(im.last_owner, OWNER_B);
    CHECK(replrec_import_complete(&im) == 1, "complete");
}

/* Without a fence in front, the first batch's writer owns the stream. */
static void test_import_first_owner(void)
{
    int r;

    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 1, 10)) == 0, "A 1..10 -> %d %s", r, why);
    CHECK_U64(im.owner, OWNER_A);
    CHECK((r = batch(WAL1, OWNER_B, 11, 5)) == 0, "B 11..15 -> %d %s", r, why);
    CHECK_U64(im.strays, 1);
    CHECK(holds(1, 10, OWNER_A) && snk.handed == 10, "B's batch without a fence is a stray");
    /* Once B fences, B's batches are taken. */
    CHECK(fence(OWNER_B) == 0, "fence B");
    CHECK((r = batch(WAL1, OWNER_B, 11, 5)) == 0, "B 11..15 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_A, 16, 5)) == 0, "A 16..20 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(snk.n == 15 && snk.handed == 15, "log 1..15: n %zu handed %zu", snk.n, snk.handed);
    for (size_t i = 10; i < snk.n && i < 15; i++)
        CHECK(snk.tag[i] == OWNER_B, "record %zu is B's", i);
    CHECK_SINK_CLEAN();
    CHECK_U64(im.strays, 2);
    /* Two owners before any fence: which was the stray cannot be told. */
    CHECK(im.ambiguous == 1, "ambiguous");
    CHECK(replrec_import_complete(&im) == 0, "not whole without a horizon of a fenced term");
}

/*
 * Retention cut between B's fence and a stray of A: the first batch is A's,
 * so A is taken for the owner and B's batches are skipped. Not whole (the
 * log may be the wrong owner's) -- until a term that began with a fence
 * the import read marks a horizon: what matters was written after it.
 */
static void test_import_ambiguous(void)
{
    int r;

    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 11, 5)) == 0, "A stray 11..15 -> %d %s", r, why);
    CHECK((r = horizon(WAL1, OWNER_A, 11)) == 0, "A's horizon 11 -> %d %s", r, why);
    CHECK((r = batch(WAL1, OWNER_B, 11, 10)) == 0, "B 11..20 -> %d %s", r, why);
    CHECK(im.ambiguous == 1 && im.strays == 1, "ambiguous, 1 stray");
    CHECK(replrec_import_complete(&im) == 0, "A's horizon does not make it whole");

    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 11, 5) == 0, "A stray 11..15");
    CHECK(batch(WAL1, OWNER_B, 11, 10) == 0, "B 11..20 (skipped)");
    CHECK(fence(OWNER_C) == 0, "C fences");
    CHECK((r = batch(WAL1, OWNER_C, 16, 10)) == 0, "C 16..25 -> %d %s", r, why);
    CHECK(replrec_import_complete(&im) == 0, "not yet");
    CHECK((r = horizon(WAL1, OWNER_C, 20)) == 0, "C's horizon 20 -> %d %s", r, why);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK(replrec_import_complete(&im) == 1, "whole: C's horizon follows C's fence");
}

static void test_import_two_logs(void)
{
    int r;

    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "wal 1: 1..5");
    r = batch(WAL2, OWNER_A, 6, 5);
    CHECK(r == -1, "wal 2: 6..10 -> %d", r);
    CHECK(strstr(why, "two logs") != NULL, "why: %s", why);
    CHECK(snk.handed == 5, "nothing of wal 2 handed: %zu", snk.handed);

    /* Also when wal 2's records would start a new run, or come from a new term. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "wal 1: 1..5");
    CHECK(fence(OWNER_B) == 0, "fence B");
    r = batch(WAL2, OWNER_B, 100, 5);
    CHECK(r == -1 && strstr(why, "two logs") != NULL, "wal 2 after a gap -> %d %s", r, why);
    CHECK(snk.resets == 1, "no reset for wal 2");

    /* A horizon of another log. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "wal 1: 1..5");
    r = horizon(WAL2, OWNER_A, 3);
    CHECK(r == -1 && why[0] != '\0', "horizon of wal 2 -> %d", r);
}

static void test_import_broken(void)
{
    static uint8_t m[1 << 14];
    size_t n;
    int r;

    /* Not a stream message at all. */
    start(MINE);
    memset(m, 0, sizeof(m));
    snprintf((char *)m, sizeof(m), "{\"hello\": \"this is somebody else's stream message\"}");
    r = feed(m, strlen((char *)m));
    CHECK(r == -1 && why[0] != '\0', "garbage -> %d", r);
    r = feed(m, 10);
    CHECK(r == -1, "10 bytes -> %d", r);
    r = feed(m, 0);
    CHECK(r == -1, "empty message -> %d", r);
    n = msg_records(m, WAL1, OWNER_A, 1, 3);
    m[2] ^= 0x01; /* "DBSS" */
    r = feed(m, n);
    CHECK(r == -1 && snk.handed == 0, "bad magic -> %d", r);

    /* A record with a bad CRC in the middle of a batch. */
    start(MINE);
    n = msg_records(m, WAL1, OWNER_A, 1, 5);
    {
        size_t off = REPLREC_HDR_SIZE;
        for (int i = 0; i < 2; i++) /* skip two records */
            off += WALREC_HDR_SIZE + walrec_get32(m + off);
        m[off + WALREC_HDR_SIZE + 4] ^= 0x10; /* a payload byte of the third */
    }
    r = feed(m, n);
    CHECK(r == -1 && why[0] != '\0', "bad CRC in record 3 -> %d", r);
    CHECK(snk.handed <= 2, "nothing from the bad record on: %zu", snk.handed);

    /* Records checked with another salt (a WAL segment's). */
    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 1, 2);
    n += encode_rec(m + n, 1, OWNER_A, 0xa5a5f00d);
    n += encode_rec(m + n, 2, OWNER_A, 0xa5a5f00d);
    r = feed(m, n);
    CHECK(r == -1 && snk.handed == 0, "records with another salt -> %d", r);

    /* Bytes after the last record. */
    start(MINE);
    n = msg_records(m, WAL1, OWNER_A, 1, 3);
    m[n] = 0;
    r = feed(m, n + 1);
    CHECK(r == -1 && why[0] != '\0', "one byte after the last record -> %d", r);
    start(MINE);
    n = msg_records(m, WAL1, OWNER_A, 1, 3);
    n += encode_rec(m + n, 4, OWNER_A, REPLREC_SALT); /* a fourth record, count says 3 */
    r = feed(m, n);
    CHECK(r == -1, "a record more than count -> %d", r);

    /* A record less than count. */
    start(MINE);
    n = msg_records(m, WAL1, OWNER_A, 1, 3);
    walrec_put32(m + 32, 4);
    reseal(m);
    r = feed(m, n);
    CHECK(r == -1, "count 4, three records -> %d", r);

    /* LSNs that do not run +1 from the header's lsn. */
    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 1, 3);
    n += encode_rec(m + n, 1, OWNER_A, REPLREC_SALT);
    n += encode_rec(m + n, 2, OWNER_A, REPLREC_SALT);
    n += encode_rec(m + n, 4, OWNER_A, REPLREC_SALT);
    r = feed(m, n);
    CHECK(r == -1 && why[0] != '\0', "LSNs 1 2 4 -> %d", r);
    CHECK(snk.handed <= 2, "LSN 4 not handed: %zu", snk.handed);
    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 1, 2);
    n += encode_rec(m + n, 2, OWNER_A, REPLREC_SALT);
    n += encode_rec(m + n, 3, OWNER_A, REPLREC_SALT);
    r = feed(m, n);
    CHECK(r == -1 && snk.handed == 0, "header lsn 1, records 2 3 -> %d", r);
    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 5, 2);
    n += encode_rec(m + n, 5, OWNER_A, REPLREC_SALT);
    n += encode_rec(m + n, 5, OWNER_A, REPLREC_SALT);
    r = feed(m, n);
    CHECK(r == -1, "LSNs 5 5 -> %d", r);

    /* A horizon with bytes after it. */
    start(MINE);
    n = msg_hdr(m, REPLREC_HORIZON, WAL1, OWNER_A, 1, 0);
    m[n] = 0;
    r = feed(m, n + 1);
    CHECK(r == -1 && why[0] != '\0', "horizon + 1 byte -> %d", r);
}

/*
 * The format says a message is exactly as long as its records: a RECORDS
 * message with count 0, or a FENCE, has nothing after its 40 bytes.
 */
static void test_import_exact_length(void)
{
    static uint8_t m[256];
    size_t n;
    int r;

    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 1, 0);
    memset(m + n, 0, 8);
    r = feed(m, n + 8);
    CHECK(r == -1, "RECORDS count 0 with 8 bytes after -> %d", r);

    start(MINE);
    n = msg_hdr(m, REPLREC_RECORDS, WAL1, OWNER_A, 1, 0);
    n += encode_rec(m + n, 1, OWNER_A, REPLREC_SALT); /* a record the count does not own */
    r = feed(m, n);
    CHECK(r == -1, "RECORDS count 0 with a record after -> %d", r);

    start(MINE);
    n = msg_hdr(m, REPLREC_FENCE, 0, MINE, 0, 0);
    memset(m + n, 0xab, 8);
    r = feed(m, n + 8);
    CHECK(r == -1, "my FENCE with 8 bytes after -> %d", r);
}

/* A RECORDS message with no records starts no run and makes no gap. */
static void test_import_empty_batch(void)
{
    int r;

    start(MINE);
    CHECK((r = batch(WAL1, OWNER_A, 1, 0)) == 0, "empty batch first -> %d %s", r, why);
    CHECK(snk.resets == 0 && snk.handed == 0, "no reset for an empty batch: %d", snk.resets);
    CHECK(replrec_import_complete(&im) == 1, "still an empty log");
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "1..5");
    CHECK((r = batch(WAL1, OWNER_A, 100, 0)) == 0, "empty batch at 100 -> %d %s", r, why);
    CHECK(batch(WAL1, OWNER_A, 6, 5) == 0, "6..10");
    CHECK(fence(MINE) == 1, "my fence");
    CHECK(holds(1, 10, OWNER_A) && snk.resets == 1, "log 1..10, one reset (%zu, %d)", snk.n,
          snk.resets);
    CHECK_U64(im.gaps, 0);
    CHECK_SINK_CLEAN();
    CHECK(replrec_import_complete(&im) == 1, "complete");
}

static void test_import_sink_error(void)
{
    int r;

    /* reset() fails on the first batch. */
    start(MINE);
    snk.fail_reset = -ENOSPC;
    r = batch(WAL1, OWNER_A, 1, 5);
    CHECK(r == -ENOSPC, "reset error -> %d", r);
    CHECK(snk.handed == 0, "no record after a failed reset: %zu", snk.handed);

    /* reset() fails on the gap's restart. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "1..5");
    snk.fail_reset = -EROFS;
    r = batch(WAL1, OWNER_A, 10, 5);
    CHECK(r == -EROFS, "reset error at the gap -> %d", r);
    CHECK(snk.handed == 5, "no record of the new run: %zu", snk.handed);

    /* record() fails on the third record. */
    start(MINE);
    snk.fail_at = 3;
    snk.fail_record = -EIO;
    r = batch(WAL1, OWNER_A, 1, 5);
    CHECK(r == -EIO, "record error -> %d", r);
    CHECK(snk.handed == 3, "stopped at the failing record: %zu handed", snk.handed);

    /* record() fails in a later batch. */
    start(MINE);
    CHECK(batch(WAL1, OWNER_A, 1, 5) == 0, "1..5");
    snk.fail_at = 7;
    snk.fail_record = -12345;
    r = batch(WAL1, OWNER_A, 6, 5);
    CHECK(r == -12345, "record error in batch 2 -> %d", r);
}

/* Other bridges' fences start their terms; only mine ends the import. */
static void test_import_other_fences(void)
{
    static const uint64_t others[] = {OWNER_A, OWNER_B, OWNER_C, MINE + 1, MINE ^ (1ull << 63)};
    int r;

    start(MINE);
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        r = fence(others[i]);
        CHECK(r == 0, "fence %" PRIx64 " -> %d", others[i], r);
        CHECK_U64(im.owner, others[i]);
        r = batch(WAL1, others[i], 1 + 4 * i, 4);
        CHECK(r == 0, "batch of %" PRIx64 " -> %d %s", others[i], r, why);
    }
    CHECK_U64(im.fences, 5);
    CHECK_U64(im.strays, 0);
    CHECK((r = fence(MINE)) == 1, "my fence -> %d", r);
    CHECK_U64(im.fences, 6);
    CHECK(snk.n == 20 && snk.resets == 1, "log 1..20 (%zu)", snk.n);
    for (size_t i = 0; i < snk.n && i < 20; i++)
        CHECK(snk.lsn[i] == i + 1 && snk.tag[i] == others[i / 4], "record %zu", i);
    CHECK_SINK_CLEAN();
    CHECK(replrec_import_complete(&im) == 1, "complete");

    /* My token as a batch's owner is not my fence. */
    start(MINE);
    r = batch(WAL1, MINE, 1, 2);
    CHECK(r == 0, "a batch owned by my token -> %d", r);
}

static const struct check_case cases[] = {
    {"hdr_roundtrip", test_hdr_roundtrip},
    {"hdr_truncated", test_hdr_truncated},
    {"hdr_bitflip", test_hdr_bitflip},
    {"hdr_bad_fields", test_hdr_bad_fields},
    {"fuzz", test_fuzz},
    {"import_empty", test_import_empty},
    {"import_fresh", test_import_fresh},
    {"import_retention_cut", test_import_retention_cut},
    {"import_gap", test_import_gap},
    {"import_overlap", test_import_overlap},
    {"import_strays", test_import_strays},
    {"import_first_owner", test_import_first_owner},
    {"import_ambiguous", test_import_ambiguous},
    {"import_two_logs", test_import_two_logs},
    {"import_broken", test_import_broken},
    {"import_empty_batch", test_import_empty_batch},
    {"import_exact_length", test_import_exact_length},
    {"import_sink_error", test_import_sink_error},
    {"import_other_fences", test_import_other_fences},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
