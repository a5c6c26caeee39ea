/*
 * broker_msg.h -- delay-bridge's headers in and out of rabbitmq-c's types.
 *
 * The AMQP side of what the pure modules decide: reading a delivery's
 * headers once (struct broker_headers) and its delay from them (xdelay.h
 * judges it), what of them goes into the log, and building the properties
 * a held message is republished with. No connection needed: unit-tested
 * over hand-built tables and properties decoded from wire bytes.
 */
#ifndef DB_BROKER_MSG_H
#define DB_BROKER_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "delay-bridge/xdelay.h"

/*
 * A delivery's headers, read once. broker_msg_read() passes over the
 * header table one time and fills this struct, picohttpparser's way: a
 * borrowed pointer to the value of each name the bridge acts on; every
 * later step (the delay, the keys, a stream's offset, a retry's
 * dead-letter) reads the struct and never the table again. Each pointer is
 * the first entry of its name, or NULL: a table lookup in RabbitMQ returns
 * the first, so a later duplicate is never looked at, valid or not. The
 * pointers live as long as the table.
 */
struct broker_headers {
    /* the delay: broker_msg_due() */
    const amqp_field_value_t *xdelay;         /* x-delay */
    const amqp_field_value_t *until;          /* x-delay-until */
    const amqp_field_value_t *delivery_time;  /* x-opt-delivery-time */
    const amqp_field_value_t *delivery_delay; /* x-opt-delivery-delay */
    const amqp_field_value_t *stamp;          /* timestamp_in_ms */
    /* keys (consumer.c) */
    const amqp_field_value_t *key;            /* x-delay-key */
    const amqp_field_value_t *cancel;         /* x-delay-cancel */
    const amqp_field_value_t *bridge_id;      /* x-delay-bridge-id */
    const amqp_field_value_t *ev_kind;        /* x-delay-key-event (share_keys) */
    const amqp_field_value_t *ev_origin;      /* x-delay-key-origin */
    const amqp_field_value_t *ev_at;          /* x-delay-key-at */
    /* a stream ingress */
    const amqp_field_value_t *stream_offset;  /* x-stream-offset */
    /* a retry route: broker_retry_in() */
    const amqp_field_value_t *death;          /* x-death */
    const amqp_field_value_t *last_death_queue, *first_death_queue;
    const amqp_field_value_t *last_death_reason, *first_death_reason;
    const amqp_field_value_t *retry_attempt;  /* x-retry-attempt */
    const amqp_field_value_t *retry_history;  /* x-retry-history */
    const amqp_field_value_t *handback;       /* x-delay-bridge-handback */
    int nkeep;                                /* entries put in keep (intake) */
};

/*
 * Intake. The headers of an ingress delivery that go into the log (and so
 * into its fingerprint, msgrec_fingerprint, and out again when it fires)
 * are its entries in order without
 *  - a queue's own bookkeeping, which changes from one delivery of the same
 *    message to the next: a quorum queue's x-delivery-count and (RabbitMQ
 *    4.x) x-acquired-count, on every redelivery -- kept, a redelivery
 *    would not match the record its first delivery left, and would be
 *    stored twice (integration.broker4, disk_full on 4.3.6);
 *  - on a stream (stream set), every x-stream-offset when the first is the
 *    broker's place (broker_msg_i64() reads it, >= 0): the delivery's
 *    place, kept beside the log, not part of the message;
 *  - the provenance headers, unless from_bridge (broker_msg_provenance).
 * The same pass sorts them out, since it looks at every name anyway.
 */

/*
 * Read headers (may be NULL or empty) into *h in one pass. keep (room for
 * headers->num_entries, or NULL: not wanted) receives the entries intake
 * keeps, h->nkeep of them, with values shared with headers.
 */
void broker_msg_read(const amqp_table_t *headers, int stream, int from_bridge,
                     amqp_table_entry_t *keep, struct broker_headers *h);

/*
 * A string value (AMQP long string 'S' or byte array 'x'): 1 with *p, *len
 * pointing into it; 0 when f is NULL (the header is absent); -1 for any
 * other kind.
 */
static inline int broker_msg_str(const amqp_field_value_t *f, const char **p, size_t *len)
{
    if (!f)
        return 0;
    if (f->kind != AMQP_FIELD_KIND_UTF8 && f->kind != AMQP_FIELD_KIND_BYTES)
        return -1;
    *p = f->value.bytes.bytes;
    *len = f->value.bytes.len;
    return 1;
}

/*
 * An integer the broker writes for an offset or a time (long 'l', unsigned
 * long 'L' cast, int 'I', timestamp 'T'): 1 with *v; 0 when f is NULL; -1
 * for any other kind.
 */
static inline int broker_msg_i64(const amqp_field_value_t *f, int64_t *v)
{
    if (!f)
        return 0;
    switch (f->kind) {
    case AMQP_FIELD_KIND_I64: *v = f->value.i64; return 1;
    case AMQP_FIELD_KIND_U64: *v = (int64_t)f->value.u64; return 1;
    case AMQP_FIELD_KIND_I32: *v = f->value.i32; return 1;
    case AMQP_FIELD_KIND_TIMESTAMP: *v = (int64_t)f->value.u64; return 1;
    default: return -1;
    }
}

/* h's x-delay, judged by xdelay_eval() (none: XDELAY_NOW). */
enum xdelay_status broker_msg_xdelay(const struct broker_headers *h, uint64_t max_delay_ms,
                                     uint64_t *delay_ms);

/*
 * The delay a delivery received at wall-clock now_ms asks for: its
 * x-delay-until, else its x-opt-delivery-time, judged as a due time by
 * xdelay_until_eval() (now_ms + *delay_ms is that due time); without
 * either, its x-delay (broker_msg_xdelay), else its x-opt-delivery-delay
 * judged as x-delay with errors of its own name. The first present
 * decides, even when invalid. The bridge stores now_ms + *delay_ms.
 */
enum xdelay_status broker_msg_due(const struct broker_headers *h, uint64_t now_ms,
                                  uint64_t max_delay_ms, uint64_t *delay_ms);

/*
 * broker_msg_due() for a route whose delay counts from the broker's receipt
 * (delay_from "broker"): when headers carry timestamp_in_ms (an integer, ms
 * since the epoch, stamped by RabbitMQ >= 3.12's incoming message
 * interceptor set_header_timestamp) and no absolute due time, an x-delay
 * counts from the end of that stamp's millisecond (the receipt lies
 * somewhere inside it: counted from its start, the message could go out
 * before receipt + delay), and *delay_ms is what remains of it at now_ms (0
 * if already past: published at once). A stamp later than now_ms (the
 * broker's clock ahead of ours) counts as now_ms, so a message is never
 * later than counting from the bridge's receipt. Without a stamp (absent,
 * not an integer, or <= 0) the result is broker_msg_due()'s, and *unstamped
 * is 1 when that was a valid x-delay (counted from now_ms: the broker is
 * not stamping, or something stripped it); else *unstamped is 0.
 */
enum xdelay_status broker_msg_due_stamped(const struct broker_headers *h, uint64_t now_ms,
                                          uint64_t max_delay_ms, uint64_t *delay_ms,
                                          int *unstamped);

/*
 * Build the properties to republish a held message with, from in (decoded
 * from the WAL; not modified). Allocations come from pool, so the result
 * lives as long as the pool.
 *  - every property and header is kept, in order, except:
 *  - x-delay, when delay_ms > 0: replaced by -delay_ms (signed 32-bit field
 *    if it fits, else signed 64-bit), like the plugin, so a message routed
 *    to another delayed exchange is not delayed twice;
 *  - user-id, when set and different from bridge_user: removed (RabbitMQ
 *    would close the channel) and kept as header x-original-user-id;
 *  - header x-delay-bridge-id = id (a long string), set or replaced;
 *  - header x-delay-error = error, set or replaced, when error != NULL
 *    (dead-lettered messages).
 * Headers are created when in has none.
 */
void broker_msg_outgoing(const amqp_basic_properties_t *in, amqp_basic_properties_t *out,
                         amqp_pool_t *pool, uint64_t delay_ms, const char *bridge_user,
                         const char *id, const char *error);

/*
 * Set x-delay = ms (a signed 64-bit integer) in p: every x-delay entry
 * replaced, or one appended; and drop timestamp_in_ms, the broker's stamp
 * of the first publish (the rest of the delay counts from the new one). The
 * new table lives in pool. A drain hands a message back to the ingress with
 * what remains of its delay this way.
 */
void broker_msg_set_delay(amqp_basic_properties_t *p, amqp_pool_t *pool, int64_t ms);

/*
 * Remove every timestamp_in_ms entry from p's header table, in place: the
 * table must be the caller's to write (broker_msg_outgoing()'s, in its pool).
 */
void broker_msg_drop_stamp(amqp_basic_properties_t *p);

/*
 * Set header name = value (a long string) in p, replacing an entry of that
 * name or appending one; the new table and the string live in pool.
 */
void broker_msg_set_header(amqp_basic_properties_t *p, amqp_pool_t *pool, const char *name,
                           const char *value);

/*
 * Set header name = v in p, replacing an entry of that name (later
 * duplicates dropped) or appending one; the new table lives in pool, and
 * so must whatever v points to.
 */
void broker_msg_set_value(amqp_basic_properties_t *p, amqp_pool_t *pool, const char *name,
                          amqp_field_value_t v);

/* Remove every entry called name from p's header table, in place (the caller's table). */
void broker_msg_drop_header(amqp_basic_properties_t *p, const char *name);

/*
 * The value of header name when it is a string (AMQP long string 'S' or byte
 * array 'x'): returns 1 with *p, *len pointing into headers; 0 when the
 * header is absent; -1 when it has another type.
 */
int broker_msg_header_str(const amqp_table_t *headers, const char *name, const char **p,
                          size_t *len);

/*
 * Provenance. The bridge writes headers that say what it did to a message
 * (x-original-user-id, x-delay-error, x-delay-unroutable, x-original-exchange,
 * x-original-routing-key, the parked x-retry-* ones) and marks a drain's
 * hand-back (x-delay-bridge-handback; x-delay-bridge-drained on a
 * delayed_exchanges route, its id). A publisher can write any of them;
 * a consumer must be able to trust them. So on intake they are dropped
 * (broker_msg_provenance says which; broker_msg_read sorts them out)
 * unless the broker vouches that a bridge
 * published the message: its user-id property is the bridge's broker user
 * (RabbitMQ refuses a publish whose user-id is not the connection's user;
 * a user tagged "impersonator" is the one exception, README "Security").
 */

/* p's user-id property is set and is user (non-empty). */
int broker_msg_from_user(const amqp_basic_properties_t *p, const char *user);

/* Header name k is one the bridge writes of its own doings (dropped on intake). */
int broker_msg_provenance(amqp_bytes_t k);

/*
 * AMQP-encoded basic properties (as stored in the WAL) as a JSON object
 * (json-c, new reference): content_type, message_id, delivery_mode, ... and
 * "headers" with strings, numbers, booleans, nested tables and arrays
 * (other kinds as {"type": "K"}). NULL if the bytes do not decode.
 */
struct json_object;
struct json_object *broker_msg_props_json(const uint8_t *props, size_t len);

/*
 * Encode props (may be NULL: no properties) in AMQP wire form into *buf,
 * grown as needed up to 64 MiB. Returns the length, or -EOVERFLOW.
 */
int broker_msg_encode_props(const amqp_basic_properties_t *props, uint8_t **buf, size_t *cap);

#endif
