/*
 * broker_msg.h -- delay-bridge's headers in and out of rabbitmq-c's types.
 *
 * The AMQP side of what the pure modules decide: finding x-delay in a
 * decoded header table (xdelay.h judges it), and building the properties a
 * held message is republished with. No connection needed: unit-tested over
 * hand-built tables and properties decoded from wire bytes.
 */
#ifndef DB_BROKER_MSG_H
#define DB_BROKER_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>

#include "delay-bridge/xdelay.h"

/* The first x-delay entry of headers (may be NULL or empty), judged by xdelay_eval(). */
enum xdelay_status broker_msg_xdelay(const amqp_table_t *headers, uint64_t max_delay_ms,
                                   uint64_t *delay_ms);

/*
 * The delay a delivery received at wall-clock now_ms asks for: the first
 * x-delay-until, else the first x-opt-delivery-time, judged as a due time by
 * xdelay_until_eval() (now_ms + *delay_ms is that due time); without
 * either, broker_msg_xdelay(). The bridge stores now_ms + *delay_ms.
 */
enum xdelay_status broker_msg_due(const amqp_table_t *headers, uint64_t now_ms,
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
enum xdelay_status broker_msg_due_stamped(const amqp_table_t *headers, uint64_t now_ms,
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
 * The value of header name when it is an integer the broker writes for an
 * offset or a time (long 'l', unsigned long 'L' cast, int 'I', timestamp
 * 'T'): returns 1 with *v; 0 when absent; -1 when it has another type.
 * The first entry of that name decides.
 */
int broker_msg_header_i64(const amqp_table_t *headers, const char *name, int64_t *v);

/*
 * Provenance. The bridge writes headers that say what it did to a message
 * (x-original-user-id, x-delay-error, x-delay-unroutable, x-original-exchange,
 * x-original-routing-key, the parked x-retry-* ones) and marks a drain's
 * hand-back (x-delay-bridge-handback; x-delay-bridge-drained on a
 * delayed_exchanges route, its id). A publisher can write any of them;
 * a consumer must be able to trust them. So on intake they are dropped
 * (broker_msg_provenance says which) unless the broker vouches that a bridge
 * published the message: its user-id property is the bridge's broker user
 * (RabbitMQ refuses a publish whose user-id is not the connection's user;
 * a user tagged "impersonator" is the one exception, README "Security").
 */

/* p's user-id property is set and is user (non-empty). */
int broker_msg_from_user(const amqp_basic_properties_t *p, const char *user);

/* Header name k is one the bridge writes of its own doings (dropped on intake). */
int broker_msg_provenance(amqp_bytes_t k);

/*
 * Intake. The headers of an ingress delivery that go into the log (and so
 * into its fingerprint, msgrec_fingerprint, and out again when it fires):
 * h's entries in order into out (room for h->num_entries), without
 *  - a queue's own bookkeeping, which changes from one delivery of the same
 *    message to the next: a quorum queue's x-delivery-count and (RabbitMQ
 *    4.x) x-acquired-count, on every redelivery -- kept, a redelivery
 *    would not match the record its first delivery left, and would be
 *    stored twice (integration.broker4, disk_full on 4.3.6);
 *  - a stream's x-stream-offset (stream set);
 *  - the provenance headers, unless from_bridge (broker_msg_provenance).
 * Returns how many entries out holds.
 */
int broker_msg_intake_headers(const amqp_table_t *h, int stream, int from_bridge,
                            amqp_table_entry_t *out);

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
