/*
 * fuzz_replrec.c -- libFuzzer harness for the replication stream's import
 * (replrec.h): what a bridge makes of whatever a stream holds.
 *
 * The input is a sequence of stream messages, each a 2-byte little-endian
 * length and that many bytes, fed in order to replrec_import_msg(), each in
 * a heap buffer of exactly its size (ASan sees a read past the end). To get
 * past the checksums, the harness seals what it can before feeding: the
 * 40-byte header's CRC, and the CRC of every record whose length fits,
 * with REPLREC_SALT. The mine token is the first 8 bytes' worth of input
 * (or 0). Checked:
 *  - the import returns -1, 0 or 1, and 1 only for a fence of mine; after
 *    1 nothing more is fed;
 *  - the sink sees reset(base) and then records whose LSNs run +1 from
 *    base, never anything else, and no record before the first reset;
 *  - im.next_lsn is the LSN after the last record handed, im.first_lsn the
 *    last reset's base, and replrec_import_complete() is 1 when nothing
 *    was handed.
 */
#include "delay-bridge/replrec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_replrec: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

struct sink_state {
    int reset;
    uint64_t base, next, handed;
};

static int s_reset(void *arg, uint64_t wal_id, uint64_t base)
{
    struct sink_state *s = arg;
    (void)wal_id;
    s->reset = 1;
    s->base = s->next = base;
    return 0;
}

static int s_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct sink_state *s = arg;
    (void)payload;
    CHECK(s->reset);
    CHECK(h->lsn == s->next);
    s->next++;
    s->handed++;
    return 0;
}

/* Seal the header CRC and every record's CRC that fits, so the checks further in are reached. */
static void seal(uint8_t *m, size_t n)
{
    if (n < REPLREC_HDR_SIZE)
        return;
    walrec_put32(m + 36, crc32c(0, m, 36));
    for (size_t pos = REPLREC_HDR_SIZE; pos + WALREC_HDR_SIZE <= n;) {
        uint32_t len = walrec_get32(m + pos);
        if (len > n - pos - WALREC_HDR_SIZE)
            break;
        uint8_t salt[4];
        walrec_put32(salt, REPLREC_SALT);
        uint32_t crc = crc32c(0, salt, 4);
        crc = crc32c(crc, m + pos, 16);
        crc = crc32c(crc, m + pos + WALREC_HDR_SIZE, len);
        walrec_put32(m + pos + 16, crc);
        pos += WALREC_HDR_SIZE + len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct replrec_import im;
    struct sink_state st = {0};
    struct replrec_sink sink = {s_reset, s_record, &st};
    uint64_t mine = size >= 8 ? walrec_get64(data) : 0;
    char why[512];
    size_t pos = size >= 8 ? 8 : size;

    replrec_import_init(&im, mine);
    while (pos + 2 <= size) {
        size_t n = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
        pos += 2;
        if (n > size - pos)
            n = size - pos;
        uint8_t *m = malloc(n ? n : 1);
        memcpy(m, data + pos, n);
        seal(m, n);
        pos += n;
        int r = replrec_import_msg(&im, m, n, &sink, why, sizeof(why));
        CHECK(r == -1 || r == 0 || r == 1);
        if (r == 1) {
            struct replrec_hdr h;
            CHECK(replrec_hdr_decode(m, n, &h) == REPLREC_HDR_SIZE);
            CHECK(h.kind == REPLREC_FENCE && h.owner == mine);
        }
        free(m);
        if (r != 0)
            break;
    }
    CHECK(im.records == st.handed);
    if (st.reset) {
        CHECK(im.first_lsn == st.base);
        CHECK(im.next_lsn == st.next);
    } else {
        CHECK(im.next_lsn == 0 && replrec_import_complete(&im) == 1);
    }
    return 0;
}
