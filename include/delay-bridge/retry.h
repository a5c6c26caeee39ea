/*
 * retry.h -- what a retry route does with a message a consumer gave up on.
 *
 * Pure policy, no AMQP types: the consumer reads the broker's dead-letter
 * headers into struct retry_in (broker_retry.h, broker_retry_in), and this
 * decides: back to the queue it failed in after a delay, or parked, and
 * why. README, "Retries with backoff", is the user's side of it.
 *
 * Counting. Attempts are deliveries to the consumer, the first included.
 * The bridge writes x-retry-attempt = n + 1 on the message it sends back
 * after failure n; a dead-letter that carries none failed its first
 * attempt. The count is the bridge's own header because RabbitMQ 4.x
 * restarts x-death's count whenever a client republishes the message
 * (checked on 4.0.5 and 4.3.6: the second rejection says count 1 where
 * 3.10.8 says 2), and the bridge is such a client.
 *
 * Backoff after failure n (n >= 1), with the queue's policy:
 *   d = min(max_ms, initial_ms * multiplier^(n-1))
 *   jitter "none":  d
 *   jitter "full":  uniform integer in [0, d]
 *   jitter "equal": ceil(d/2) + uniform integer in [0, floor(d/2)]
 * The random number is the caller's (rnd), so the formula is tested
 * without a random source.
 */
#ifndef DB_RETRY_H
#define DB_RETRY_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/config.h"
#include "delay-bridge/xdelay.h"

/* What the dead-letter headers of one delivery say. Pointers are borrowed. */
struct retry_in {
    const char *queue;  /* the queue it was dead-lettered from; NULL when none is named */
    size_t queue_len;
    const char *reason; /* x-death's reason ("rejected", ...); NULL when none */
    size_t reason_len;
    int64_t attempt;    /* x-retry-attempt: the attempt that failed; 0 when absent or not an
                           integer (the first) */
    int handback;       /* another bridge's drain handed it over mid-delay (x-delay-bridge-
                           handback): x-delay, not the policy, says what remains. A claim:
                           the caller honours it only from a bridge (README, "Security") */
    int admitted;       /* queue is one the route may send back to (retry_admits); 0 (the
                           default of a zeroed struct) parks */
};

/*
 * Whether route r of c may send a message back to queue q (n bytes): q is
 * a key of r's retry.queues or matches its retry.queue_pattern whole, and
 * is none of the bridge's own queues -- any route's ingress queue, its key
 * event queues (INGRESS.keys.*) and parking queue, the replicated log's
 * stream and lease queue -- nor a broker-named or reserved one ("amq.*").
 * q must be 1..255 bytes of valid UTF-8 without NUL (a queue name RabbitMQ
 * accepts). Everything a publisher can write into x-death reaches here: a
 * 0 parks the message (XDELAY_RETRY_NOTADMITTED), never sends it.
 */
int retry_admits(const struct config *c, const struct config_route *r, const char *q, size_t n);

/* The policy for queue (retry.queues' entry, else the route's). */
const struct config_retry_policy *retry_policy(const struct config_retry *rt, const char *queue,
                                               size_t queue_len);

/* The delay after failure n (n >= 1; 0 counts as 1) under p, rnd a uniform random number. */
uint64_t retry_backoff_ms(const struct config_retry_policy *p, uint32_t n, uint64_t rnd);

/*
 * Judge a dead-letter for route rt (not a handback): XDELAY_OK with
 * *delay_ms (> 0), XDELAY_NOW (a full jitter drew 0), or a park:
 * XDELAY_RETRY_LAST (attempt max_attempts failed), XDELAY_RETRY_REASON (a
 * reason rt does not retry), XDELAY_RETRY_NOQUEUE (no queue named: not a
 * dead-letter), XDELAY_RETRY_NOTADMITTED (in->admitted is 0; checked
 * right after NOQUEUE, before anything else the headers say). *failed is the attempt that failed (>= 1) in every case.
 */
enum xdelay_status retry_judge(const struct config_retry *rt, const struct retry_in *in,
                               uint64_t rnd, uint32_t *failed, uint64_t *delay_ms);

/* RETRY_REASON_* for x-death's reason text, 0 for one not known. */
unsigned retry_reason_bit(const char *s, size_t n);

/*
 * Why a message is parked, for x-retry-parked-reason and the metrics'
 * reason label: "max_attempts", "reason", "no_queue", "queue_gone" (the
 * send back was returned: pass queue_gone 1), "not_admitted"
 * (XDELAY_RETRY_NOTADMITTED), or "invalid" for the other
 * dead-letter errors (an x-delay-key, or a handed-back x-delay, refused).
 */
const char *retry_park_reason(uint16_t error, int queue_gone);

/* The reasons of retry_park_reason(), in a fixed order (metrics): index of one, or -1. */
#define RETRY_PARK_REASONS 6
extern const char *const retry_park_reasons[RETRY_PARK_REASONS];
int retry_park_index(const char *reason);

#endif
