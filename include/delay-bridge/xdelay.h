/*
 * xdelay.h -- what the bridge reads from and writes into AMQP headers.
 *
 * Pure functions over rabbitmq-c's decoded types (no connection needed):
 *  - xdelay_parse(): the delay a publisher asked for in the x-delay header;
 *  - xdelay_outgoing(): the properties a held message is republished with.
 *
 * x-delay accepted (delay in ms, as the plugin and better):
 *   any AMQP integer (signed or unsigned, 8 to 64 bit)      -> its value
 *   float or double                                          -> truncated toward zero
 *   decimal (scale s, value v)                               -> v / 10^s truncated
 *   a string (short or long) holding an optionally signed decimal integer,
 *   surrounding ASCII spaces allowed                         -> its value
 * Missing header, or a value <= 0                            -> XDELAY_NOW (delay 0)
 * Anything else (other types, non-numeric or empty string, NaN/inf,
 * out of int64 range)                                        -> XDELAY_EINVALID
 * A value above max_delay_ms                                 -> XDELAY_ETOOBIG
 */
#ifndef DB_XDELAY_H
#define DB_XDELAY_H

#include <stdint.h>

#include <amqp.h>

enum xdelay_status {
    XDELAY_OK = 0,       /* *delay_ms > 0 */
    XDELAY_NOW = 1,      /* missing, zero or negative: publish at once; *delay_ms = 0 */
    XDELAY_EINVALID = 2, /* not a number we accept */
    XDELAY_ETOOBIG = 3,  /* above max_delay_ms */
};

/* Parse x-delay from headers (may be NULL or empty). *delay_ms is 0 unless XDELAY_OK. */
enum xdelay_status xdelay_parse(const amqp_table_t *headers, uint64_t max_delay_ms,
                                uint64_t *delay_ms);

/* "invalid x-delay" / "x-delay above max_delay_ms" / "" for OK and NOW. */
const char *xdelay_strerror(enum xdelay_status s);

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
void xdelay_outgoing(const amqp_basic_properties_t *in, amqp_basic_properties_t *out,
                     amqp_pool_t *pool, uint64_t delay_ms, const char *bridge_user,
                     const char *id, const char *error);

#endif
