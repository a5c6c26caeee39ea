/*
 * walrec.c -- the write-ahead log's on-disk format.
 *
 * This file owns every byte the WAL puts on disk; src/wal/wal.c only moves
 * these bytes around. All integers are little-endian. Offsets are in bytes.
 *
 * SEGMENT FILE
 *
 * The log is a directory of segment files named %020llu.wal after their
 * segment number (00000000000000000001.wal, ...). A segment is a 56-byte
 * header followed by records, back to back, with no padding and no trailer:
 *
 *   +--------+--------+-----------------------------------------------+
 *   | offset |  size  | segment header field                          |
 *   +--------+--------+-----------------------------------------------+
 *   |      0 |      8 | magic: the ASCII bytes "DLYBRWAL"             |
 *   |      8 |      4 | version: 1                                    |
 *   |     12 |      4 | salt: random, new for every segment           |
 *   |     16 |      8 | segno: the segment number, as in the name     |
 *   |     24 |      8 | base_lsn: LSN of the first record in the file |
 *   |     32 |      8 | wal_id: random id of the log, same in all     |
 *   |        |        | of its segments                               |
 *   |     40 |      8 | created_ms: wall clock at creation (info)     |
 *   |     48 |      4 | reserved, must be 0                           |
 *   |     52 |      4 | crc: CRC-32C of bytes 0..51                   |
 *   +--------+--------+-----------------------------------------------+
 *
 * A header is valid when the magic matches, version == 1, the reserved
 * word is 0 and the CRC matches.
 *
 * RECORD
 *
 *   +--------+--------+-----------------------------------------------+
 *   | offset |  size  | record header field                           |
 *   +--------+--------+-----------------------------------------------+
 *   |      0 |      4 | len: payload bytes, <= 2^30                   |
 *   |      4 |      1 | type: 1 ADD, 2 DONE, 3 CANCEL (reserved)      |
 *   |      5 |      1 | flags: 0 for now (not checked)                |
 *   |      6 |      2 | reserved, must be 0                           |
 *   |      8 |      8 | lsn: log sequence number                      |
 *   |     16 |      4 | crc (see below)                               |
 *   |     20 |      4 | reserved, must be 0                           |
 *   |     24 |    len | payload                                       |
 *   +--------+--------+-----------------------------------------------+
 *
 * The checksum is seeded with the segment's salt, so a record copied from
 * another segment, or left over from an older file, never checks out:
 *
 *   salt4 = the salt as 4 little-endian bytes
 *   crc   = crc32c(0, salt4, 4)
 *   crc   = crc32c(crc, header bytes 0..15, 16)
 *   crc   = crc32c(crc, payload, len)
 *
 * ADD payload (a message to hold; body last, so it is written from the
 * caller's buffer as a separate piece and never copied by the encoder):
 *
 *   +--------+--------+-----------------------------------------------+
 *   |      0 |      8 | msg_id: LSN of the message's first ADD        |
 *   |      8 |      8 | due_ms: when to publish, ms since the epoch   |
 *   |     16 |      8 | enqueue_ms: when the bridge received it       |
 *   |     24 |      2 | flags: bit 0 = publish to dead-letter exchange|
 *   |        |        |        bit 1 = keyed (the key field is there) |
 *   |     26 |      2 | error: project code when dead-lettered, or 0  |
 *   |     28 |      1 | route_len R                                   |
 *   |     29 |      R | route name                                    |
 *   |        |      1 | exchange_len E                                |
 *   |        |      E | exchange the message was published to         |
 *   |        |      1 | routing_key_len K                             |
 *   |        |      K | routing key                                   |
 *   |        |      1 | key_len Y        } only when flags bit 1 is set |
 *   |        |      Y | x-delay-key      }                              |
 *   |        |      4 | props_len P                                   |
 *   |        |      P | AMQP basic properties (flags + property list) |
 *   |        |      4 | body_len B                                    |
 *   |        |      B | body                                          |
 *   +--------+--------+-----------------------------------------------+
 *   len = 39 + R + E + K + P + B exactly, plus 1 + Y when keyed. (Records
 *   written before keys existed have bit 1 clear and read as before.)
 *
 * DONE payload (messages published and confirmed):
 *
 *   |      0 |      4 | count N                                       |
 *   |      4 |    8*N | N message ids (u64)                           |
 *   len = 4 + 8*N exactly.
 *
 * CANCEL payload (held messages removed by x-delay-cancel, by a newer message
 * with the same x-delay-key, or by a purge; never to be published): the
 * DONE layout, a count N and N message ids, len = 4 + 8*N exactly. Kept
 * apart from DONE so that a dump tells "cancelled" from "published".
 *
 * WHEN IS A RECORD VALID
 *
 * A record at offset off of a segment with salt S is valid when all of:
 *   1. the 24 header bytes and len payload bytes lie inside the file;
 *   2. type is 1, 2 or 3; both reserved fields are 0; len <= 2^30;
 *   3. the CRC computed as above with S equals the stored crc;
 *   4. an ADD, DONE or CANCEL payload has exactly the layout above (the lengths
 *      inside it add up to len);
 *   5. (checked by the WAL, not here) lsn is the previous record's lsn + 1,
 *      the first record's lsn is the segment's base_lsn, and a segment's
 *      base_lsn is the previous segment's last lsn + 1.
 * Replay stops at the first record that is not valid. If that record is in
 * the newest segment and no valid record (CRC correct with S, lsn beyond
 * the last good one) follows it anywhere in the file, the rest of the file
 * is a torn tail from a crash during a write and is cut off; otherwise the
 * log is corrupt and opening it fails (see src/wal/wal.c).
 *
 * DECODERS
 *
 * Like picohttpparser: they never allocate, never read past buf + len, and
 * return the bytes consumed, WALREC_PARTIAL when buf ends before the item
 * does, or WALREC_INVALID as soon as the bytes seen cannot be a valid item.
 * A payload decoder is given exactly one payload: fewer bytes than the
 * layout needs is PARTIAL, more is INVALID.
 */
#include "delay-bridge/walrec.h"

#include <assert.h>
#include <string.h>

#include "base/crc32c.h"

static const uint8_t seg_magic[8] = {'D', 'L', 'Y', 'B', 'R', 'W', 'A', 'L'};

#define ADD_FIXED 39 /* ADD payload bytes besides the five variable fields */

/* ---- segment header --------------------------------------------------- */

void walrec_seghdr_encode(uint8_t out[WALREC_SEGHDR_SIZE], const struct walrec_seghdr *h)
{
    memcpy(out, seg_magic, 8);
    walrec_put32(out + 8, h->version);
    walrec_put32(out + 12, h->salt);
    walrec_put64(out + 16, h->segno);
    walrec_put64(out + 24, h->base_lsn);
    walrec_put64(out + 32, h->wal_id);
    walrec_put64(out + 40, h->created_ms);
    walrec_put32(out + 48, 0);
    walrec_put32(out + 52, crc32c(0, out, 52));
}

int walrec_seghdr_decode(const uint8_t *buf, size_t len, struct walrec_seghdr *h)
{
    size_t m = len < 8 ? len : 8;

    if (memcmp(buf, seg_magic, m) != 0)
        return WALREC_INVALID;
    if (len >= 12 && walrec_get32(buf + 8) != WALREC_VERSION)
        return WALREC_INVALID;
    if (len < WALREC_SEGHDR_SIZE)
        return WALREC_PARTIAL;
    if (walrec_get32(buf + 48) != 0 || walrec_get32(buf + 52) != crc32c(0, buf, 52))
        return WALREC_INVALID;
    h->version = walrec_get32(buf + 8);
    h->salt = walrec_get32(buf + 12);
    h->segno = walrec_get64(buf + 16);
    h->base_lsn = walrec_get64(buf + 24);
    h->wal_id = walrec_get64(buf + 32);
    h->created_ms = walrec_get64(buf + 40);
    return WALREC_SEGHDR_SIZE;
}

/* ---- record ------------------------------------------------------------ */

static uint32_t rec_crc_start(uint32_t salt, const uint8_t *hdr)
{
    uint8_t s[4];

    walrec_put32(s, salt);
    return crc32c(crc32c(0, s, 4), hdr, 16);
}

void walrec_hdr_encode(uint8_t out[WALREC_HDR_SIZE], struct walrec_hdr *h, uint32_t salt,
                       const struct walrec_piece *pieces, int npieces)
{
    uint32_t crc;
    size_t total = 0;

    walrec_put32(out, h->len);
    out[4] = h->type;
    out[5] = h->flags;
    out[6] = 0;
    out[7] = 0;
    walrec_put64(out + 8, h->lsn);
    crc = rec_crc_start(salt, out);
    for (int i = 0; i < npieces; i++) {
        crc = crc32c(crc, pieces[i].p, pieces[i].n);
        total += pieces[i].n;
    }
    assert(total == h->len);
    (void)total;
    h->crc = crc;
    walrec_put32(out + 16, crc);
    walrec_put32(out + 20, 0);
}

/* Checks 4 of "when is a record valid": the payload's own layout. */
static int payload_ok(uint8_t type, const uint8_t *p, uint32_t len)
{
    struct walrec_add a;
    uint32_t n;

    switch (type) {
    case WALREC_ADD:
        return walrec_add_decode(p, len, &a) == (int)len;
    case WALREC_DONE:
    case WALREC_CANCEL:
        return walrec_done_decode(p, len, &n) == (int)len;
    default:
        return 1;
    }
}

int walrec_decode(const uint8_t *buf, size_t len, uint32_t salt, struct walrec_hdr *h,
                  const uint8_t **payload)
{
    uint32_t plen;

    /* Reject what the bytes seen so far already rule out. */
    if (len >= 5 && (buf[4] < WALREC_ADD || buf[4] > WALREC_CANCEL))
        return WALREC_INVALID;
    if (len >= 8 && (buf[6] | buf[7]) != 0)
        return WALREC_INVALID;
    if (len >= 4 && walrec_get32(buf) > WALREC_MAX_PAYLOAD)
        return WALREC_INVALID;
    if (len < WALREC_HDR_SIZE)
        return WALREC_PARTIAL;
    if (walrec_get32(buf + 20) != 0)
        return WALREC_INVALID;
    plen = walrec_get32(buf);
    if (len - WALREC_HDR_SIZE < plen)
        return WALREC_PARTIAL;
    if (crc32c(rec_crc_start(salt, buf), buf + WALREC_HDR_SIZE, plen) != walrec_get32(buf + 16))
        return WALREC_INVALID;
    if (!payload_ok(buf[4], buf + WALREC_HDR_SIZE, plen))
        return WALREC_INVALID;
    h->len = plen;
    h->type = buf[4];
    h->flags = buf[5];
    h->lsn = walrec_get64(buf + 8);
    h->crc = walrec_get32(buf + 16);
    *payload = buf + WALREC_HDR_SIZE;
    return (int)(WALREC_HDR_SIZE + plen);
}

/* ---- ADD payload ------------------------------------------------------- */

size_t walrec_add_size(const struct walrec_add *a)
{
    return ADD_FIXED + (size_t)a->route_len + a->exchange_len + a->routing_key_len +
           ((a->flags & WALREC_ADD_KEYED) ? 1 + (size_t)a->key_len : 0) + a->props_len +
           a->body_len;
}

size_t walrec_add_encode_head(uint8_t *out, const struct walrec_add *a)
{
    uint8_t *p = out;

    walrec_put64(p, a->msg_id);
    walrec_put64(p + 8, a->due_ms);
    walrec_put64(p + 16, a->enqueue_ms);
    p[24] = (uint8_t)a->flags;
    p[25] = (uint8_t)(a->flags >> 8);
    p[26] = (uint8_t)a->error;
    p[27] = (uint8_t)(a->error >> 8);
    p += 28;
    *p++ = a->route_len;
    if (a->route_len)
        memcpy(p, a->route, a->route_len);
    p += a->route_len;
    *p++ = a->exchange_len;
    if (a->exchange_len)
        memcpy(p, a->exchange, a->exchange_len);
    p += a->exchange_len;
    *p++ = a->routing_key_len;
    if (a->routing_key_len)
        memcpy(p, a->routing_key, a->routing_key_len);
    p += a->routing_key_len;
    if (a->flags & WALREC_ADD_KEYED) {
        *p++ = a->key_len;
        if (a->key_len)
            memcpy(p, a->key, a->key_len);
        p += a->key_len;
    }
    walrec_put32(p, a->props_len);
    p += 4;
    if (a->props_len)
        memcpy(p, a->props, a->props_len);
    p += a->props_len;
    walrec_put32(p, a->body_len);
    p += 4;
    return (size_t)(p - out);
}

/*
 * Walk the layout. full = 0 stops filling *a after the route (peek) but
 * still checks that the lengths add up to len.
 */
static int add_walk(const uint8_t *buf, size_t len, struct walrec_add *a, int full)
{
    size_t off, n;

    if (len < 29)
        return WALREC_PARTIAL;
    a->msg_id = walrec_get64(buf);
    a->due_ms = walrec_get64(buf + 8);
    a->enqueue_ms = walrec_get64(buf + 16);
    a->flags = (uint16_t)(buf[24] | buf[25] << 8);
    a->error = (uint16_t)(buf[26] | buf[27] << 8);
    a->route_len = buf[28];
    a->route = (const char *)buf + 29;
    off = 29 + (size_t)a->route_len;
    /* exchange */
    if (len < off + 1)
        return WALREC_PARTIAL;
    n = buf[off];
    if (full) {
        a->exchange_len = (uint8_t)n;
        a->exchange = (const char *)buf + off + 1;
    }
    off += 1 + n;
    /* routing key */
    if (len < off + 1)
        return WALREC_PARTIAL;
    n = buf[off];
    if (full) {
        a->routing_key_len = (uint8_t)n;
        a->routing_key = (const char *)buf + off + 1;
    }
    off += 1 + n;
    /* key, when the record is keyed (recovery needs it, so peek fills it too) */
    a->key = NULL;
    a->key_len = 0;
    if (a->flags & WALREC_ADD_KEYED) {
        if (len < off + 1)
            return WALREC_PARTIAL;
        a->key_len = buf[off];
        a->key = (const char *)buf + off + 1;
        off += 1 + (size_t)a->key_len;
    }
    /* props */
    if (len < off + 4)
        return WALREC_PARTIAL;
    n = walrec_get32(buf + off);
    if (full) {
        a->props_len = (uint32_t)n;
        a->props = buf + off + 4;
    }
    if (n > WALREC_MAX_PAYLOAD)
        return WALREC_INVALID;
    off += 4 + n;
    /* body */
    if (len < off + 4)
        return WALREC_PARTIAL;
    n = walrec_get32(buf + off);
    if (full) {
        a->body_len = (uint32_t)n;
        a->body = buf + off + 4;
    }
    if (n > WALREC_MAX_PAYLOAD)
        return WALREC_INVALID;
    off += 4 + n;
    if (len < off)
        return WALREC_PARTIAL;
    if (len > off || off > WALREC_MAX_PAYLOAD)
        return WALREC_INVALID;
    return (int)off;
}

int walrec_add_decode(const uint8_t *buf, size_t len, struct walrec_add *a)
{
    return add_walk(buf, len, a, 1);
}

int walrec_add_peek(const uint8_t *buf, size_t len, struct walrec_add *a)
{
    a->exchange = NULL;
    a->exchange_len = 0;
    a->routing_key = NULL;
    a->routing_key_len = 0;
    a->props = NULL;
    a->props_len = 0;
    a->body = NULL;
    a->body_len = 0;
    return add_walk(buf, len, a, 0);
}

/* ---- DONE payload ------------------------------------------------------ */

size_t walrec_done_size(uint32_t count)
{
    return 4 + (size_t)count * 8;
}

size_t walrec_done_encode(uint8_t *out, const uint64_t *ids, uint32_t count)
{
    walrec_put32(out, count);
    for (uint32_t i = 0; i < count; i++)
        walrec_put64(out + 4 + (size_t)i * 8, ids[i]);
    return walrec_done_size(count);
}

int walrec_done_decode(const uint8_t *buf, size_t len, uint32_t *count)
{
    uint32_t n;
    size_t need;

    if (len < 4)
        return WALREC_PARTIAL;
    n = walrec_get32(buf);
    if (n > (WALREC_MAX_PAYLOAD - 4) / 8)
        return WALREC_INVALID;
    need = walrec_done_size(n);
    if (len < need)
        return WALREC_PARTIAL;
    if (len > need)
        return WALREC_INVALID;
    *count = n;
    return (int)need;
}

uint64_t walrec_done_id(const uint8_t *buf, uint32_t i)
{
    return walrec_get64(buf + 4 + (size_t)i * 8);
}
