/*
 * msgrec.h -- a delivery as a log record, and a log record as a publish.
 *
 * Pure policy, no AMQP types: what the bridge writes for a message it
 * received (due time from x-delay or x-delay-until, the invalid-delay
 * policy of its route) and where and how it republishes it (target or
 * dead-letter exchange, the error text, the delay to rewrite x-delay with,
 * the message id header).
 * The AMQP encodings themselves (properties in, properties out) are the
 * consumer's and publisher's business (broker_msg.h).
 */
#ifndef DB_MSGREC_H
#define DB_MSGREC_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/config.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/xdelay.h"

/* A received message, as the consumer assembled it. Pointers are borrowed. */
struct msgrec_in {
    const char *exchange;    /* the exchange it was published to */
    size_t exchange_len;
    const char *routing_key;
    size_t routing_key_len;
    const uint8_t *props;    /* AMQP-encoded basic properties, as received */
    uint32_t props_len;
    const uint8_t *body;
    uint32_t body_len;
    const char *key;         /* x-delay-key, NULL if none */
    size_t key_len;
    int key_invalid;         /* x-delay-key present but not a string of at most 255 bytes */
};

#define MSGREC_KEY_MAX 255
#define MSGREC_INVALID_DELAY 1
#define MSGREC_INVALID_KEY 2

/*
 * Fill *a (pointers into in and rc) for a message of route rc received at
 * now, whose delay headers were judged xs with delay delay_ms
 * (broker_msg_due(): due = now + delay_ms, the absolute time x-delay-until
 * asked for). An invalid or too large delay (xdelay_invalid(xs)), or an
 * invalid x-delay-key, makes the message due now,
 * without a key; with invalid_delay "dead-letter" it is also flagged for
 * the dead-letter exchange (x-delay-error says which). A valid key makes
 * the record keyed. Returns 0, or MSGREC_INVALID_DELAY and/or
 * MSGREC_INVALID_KEY for the caller to count.
 */
int msgrec_from_delivery(struct walrec_add *a, const struct config_route *rc,
                         const struct msgrec_in *in, uint64_t now, enum xdelay_status xs,
                         uint64_t delay_ms);

/* How to republish a held message. */
struct msgrec_out {
    const char *exchange; /* the route's target, its dead-letter or its unroutable exchange;
                             on a delayed_exchanges route the record's own exchange (a copy in
                             exchange_buf: this struct is not to be copied) */
    char exchange_buf[256];
    const char *original_exchange; /* set when diverted to unroutable_exchange, else NULL */
    const char *error;    /* x-delay-error text for dead-lettered messages, else NULL */
    uint64_t delay_ms;    /* the delay it was held for (x-delay becomes -delay_ms) */
    char id[40];          /* x-delay-bridge-id: "<log id in hex>-<message id>" */
    /*
     * Handed back (a drain): published to the route's ingress exchange with
     * x-delay = +remaining_ms, so that another bridge holds it for the rest
     * of its delay. delay_ms is 0 then (x-delay is not negated).
     */
    int handback;
    uint64_t remaining_ms;
    /*
     * A delayed_exchanges route's hand-back goes to the message's own
     * exchange, an x-delayed-message exchange, which routes a message that
     * carries x-delay-bridge-id by its type at once (that header is what
     * stops a bridge's republish from looping): so it carries its id as
     * x-delay-bridge-drained instead, and the shim holds it for the rest
     * of its delay in delay-bridge.delayed.
     */
    int unmarked;
    /*
     * Not to be published: a delayed_exchanges route's record whose own
     * exchange is the default exchange "" (published straight into the
     * ingress queue; relayed, its routing key could name any queue) or
     * the route's ingress exchange (it would come straight back). The
     * intake refuses those; this catches a record logged otherwise (an
     * older configuration, a replicated log).
     */
    int refused;
    /*
     * The route counts delays from the broker's stamp (delay_from
     * "broker"): timestamp_in_ms is not forwarded. The stamp of the first
     * publish would date the next hop's delay wrongly (a chained delayed
     * route, a drain's hand-back); a stamping broker adds a fresh one.
     */
    int drop_stamp;
};

/*
 * unroutable: the broker returned its last publish (no queue bound), so it
 * goes to the route's unroutable_exchange, the exchange it missed named in
 * original_exchange.
 */
void msgrec_to_publish(const struct walrec_add *a, const struct config_route *rc,
                       uint64_t log_id, int unroutable, struct msgrec_out *o);

/*
 * What a drain does with a held message at time now: one still waiting
 * (due after now, a valid delay) goes back to the route's ingress exchange
 * with what remains of its delay (handback = 1); one already due, or
 * dead-lettered, is published as msgrec_to_publish() says.
 */
void msgrec_to_handback(const struct walrec_add *a, const struct config_route *rc,
                        uint64_t log_id, int unroutable, uint64_t now, struct msgrec_out *o);

/*
 * A 64-bit fingerprint of what the broker would redeliver: exchange,
 * routing key, properties and body (not the route, not the times). The same
 * for a delivery and for the ADD record made of it, so a redelivery can be
 * recognised against the log (engine.h, eng_seen). Never 0.
 */
uint64_t msgrec_fingerprint(const struct walrec_add *a);

#endif
