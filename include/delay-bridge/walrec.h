/*
 * walrec.h -- the write-ahead log's on-disk format: encoders and decoders.
 *
 * Pure functions over byte buffers; no I/O, no allocation. The format is
 * written out byte by byte at the top of src/wal/walrec.c. Decoders follow the
 * picohttpparser convention: they return the number of bytes consumed,
 * WALREC_PARTIAL (-2) when the buffer ends before the item does, or
 * WALREC_INVALID (-1) when the bytes cannot be a valid item. They never read
 * past buf + len.
 */
#ifndef DB_WALREC_H
#define DB_WALREC_H

#include <stddef.h>
#include <stdint.h>

#define WALREC_INVALID (-1)
#define WALREC_PARTIAL (-2)

#define WALREC_VERSION 1
#define WALREC_SEGHDR_SIZE 56 /* 48 bytes of fields, reserved u32, CRC u32 */
#define WALREC_HDR_SIZE 24
#define WALREC_MAX_PAYLOAD (1u << 30) /* 1 GiB: larger lengths are corrupt */

enum walrec_type {
    WALREC_ADD = 1,    /* a message to hold: struct walrec_add */
    WALREC_DONE = 2,   /* messages published and confirmed: a list of ids */
    WALREC_CANCEL = 3, /* messages cancelled (x-delay-cancel, replaced, purged): ids */
};

/* Segment file header, at offset 0 of every segment. */
struct walrec_seghdr {
    uint32_t version;    /* WALREC_VERSION */
    uint32_t salt;       /* random per segment; seeds every record CRC */
    uint64_t segno;      /* segment number, also in the file name */
    uint64_t base_lsn;   /* LSN of the first record in this segment */
    uint64_t wal_id;     /* random id of this log, same in all its segments */
    uint64_t created_ms; /* wall clock at creation, informative */
};

void walrec_seghdr_encode(uint8_t out[WALREC_SEGHDR_SIZE], const struct walrec_seghdr *h);
/* WALREC_SEGHDR_SIZE, WALREC_PARTIAL, or WALREC_INVALID (magic, version or CRC). */
int walrec_seghdr_decode(const uint8_t *buf, size_t len, struct walrec_seghdr *h);

/* Record header (the 24 bytes before each payload). */
struct walrec_hdr {
    uint32_t len;  /* payload bytes */
    uint8_t type;  /* enum walrec_type */
    uint8_t flags; /* 0 for now */
    uint64_t lsn;  /* log sequence number, +1 per record across segments */
    uint32_t crc;  /* CRC-32C over salt, header bytes 0..15 and payload */
};

/*
 * Encode header h for payload (h->crc is computed, not read) into out.
 * payload may be given in pieces (iov-style) so big bodies are not copied.
 */
struct walrec_piece {
    const void *p;
    size_t n;
};
void walrec_hdr_encode(uint8_t out[WALREC_HDR_SIZE], struct walrec_hdr *h, uint32_t salt,
                       const struct walrec_piece *pieces, int npieces);

/*
 * Decode and verify one record at buf: header sanity (known type, zero
 * reserved bytes, len <= WALREC_MAX_PAYLOAD), then CRC with salt. On
 * success fills *h, points *payload into buf and returns
 * WALREC_HDR_SIZE + h->len.
 */
int walrec_decode(const uint8_t *buf, size_t len, uint32_t salt, struct walrec_hdr *h,
                  const uint8_t **payload);

/* ADD payload: a complete AMQP message and when to publish it. */
#define WALREC_ADD_DEADLETTER 0x0001 /* publish to the route's dead-letter exchange */
#define WALREC_ADD_KEYED 0x0002      /* the record carries an x-delay-key */

struct walrec_add {
    uint64_t msg_id;     /* stable id: LSN of the first ADD of this message */
    uint64_t due_ms;     /* ms since the epoch */
    uint64_t enqueue_ms; /* when the bridge received it */
    uint16_t flags;      /* WALREC_ADD_* */
    uint16_t error;      /* why it is dead-lettered (project code), else 0 */
    const char *route;   /* route name, not NUL-terminated */
    uint8_t route_len;
    const char *exchange; /* exchange it was published to */
    uint8_t exchange_len;
    const char *routing_key;
    uint8_t routing_key_len;
    const char *key;      /* x-delay-key, when flags has WALREC_ADD_KEYED */
    uint8_t key_len;
    const uint8_t *props; /* AMQP-encoded basic properties (flags + list) */
    uint32_t props_len;
    const uint8_t *body;
    uint32_t body_len;
};

/* Bytes walrec_add_encode() writes for a. */
size_t walrec_add_size(const struct walrec_add *a);
/*
 * Encode a's fixed part and strings into out (size walrec_add_size(a) -
 * a->body_len); the body follows as a separate piece so it is never copied.
 * Returns bytes written.
 */
size_t walrec_add_encode_head(uint8_t *out, const struct walrec_add *a);
/* Decode a whole ADD payload; pointers in *a point into buf. */
int walrec_add_decode(const uint8_t *buf, size_t len, struct walrec_add *a);
/* Decode only msg_id, due_ms, flags, route and key (what recovery needs). */
int walrec_add_peek(const uint8_t *buf, size_t len, struct walrec_add *a);

/* DONE payload (and CANCEL, the same layout): u32 count, then count u64 message ids. */
size_t walrec_done_size(uint32_t count);
size_t walrec_done_encode(uint8_t *out, const uint64_t *ids, uint32_t count);
/* On success *count is set and ids are read with walrec_done_id(buf, i). */
int walrec_done_decode(const uint8_t *buf, size_t len, uint32_t *count);
uint64_t walrec_done_id(const uint8_t *buf, uint32_t i);

/* Little-endian helpers shared by the codec's users (and the checkpoint formats). */
static inline void walrec_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
}
static inline uint16_t walrec_get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static inline void walrec_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void walrec_put64(uint8_t *p, uint64_t v)
{
    walrec_put32(p, (uint32_t)v);
    walrec_put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t walrec_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t walrec_get64(const uint8_t *p)
{
    return (uint64_t)walrec_get32(p) | (uint64_t)walrec_get32(p + 4) << 32;
}

#endif
