/*
 * broker_retry.h -- a retry route's headers, in from the broker's
 * dead-lettering and out on the message sent back or parked.
 *
 * The AMQP side of retry.h's decisions. In: x-death (an array of tables,
 * the newest first: its first entry's queue and reason), falling back to
 * x-last-death-queue (4.x) and x-first-death-queue; the bridge's own
 * x-retry-attempt; the drain's hand-back mark. Out: the headers README
 * ("Retries with backoff") lists for a returned and for a parked message.
 * Unit-tested over hand-built tables (tests/unit/test_broker_retry.c).
 */
#ifndef DB_BROKER_RETRY_H
#define DB_BROKER_RETRY_H

#include <stdint.h>

#include <amqp.h>

#include "delay-bridge/broker_msg.h"
#include "delay-bridge/retry.h"

#define H_RETRY_ATTEMPT "x-retry-attempt"   /* long: which attempt this delivery is (>= 2) */
#define H_RETRY_ATTEMPTS "x-retry-attempts" /* long, parked: attempts made */
#define H_RETRY_HISTORY "x-retry-history"   /* array of long: ms of each failure, oldest first */
#define H_RETRY_PARKED "x-retry-parked-reason" /* string, parked: retry_park_reason() */
#define H_RETRY_QUEUE "x-retry-queue"       /* string, parked: the queue it failed in */
#define H_HANDBACK "x-delay-bridge-handback" /* a drain's hand-back of a retry, mid-delay */
#define RETRY_HISTORY_MAX 32                /* failures x-retry-history keeps, the newest */

/* What headers h (broker_msg_read) say of a dead-letter: *in filled, pointers into them. */
void broker_retry_in(const struct broker_headers *h, struct retry_in *in);

/*
 * What a retry route does with one delivery: its headers h read
 * (broker_retry_in), the queue held against the route (retry_admits), the
 * hand-back mark honoured only when the broker vouches a bridge published
 * it (from_bridge: the properties' user-id is the bridge's user,
 * broker_msg_from_user), then judged: a verified hand-back of an admitted
 * queue keeps what its x-delay says remains (counted from now_ms, up to
 * max_delay_ms); everything else goes through retry_judge with rnd. The
 * consumer and the fuzzer (tests/fuzz/fuzz_retry.c, which asserts that no
 * verdict sends a message anywhere retry_admits refuses) both call this.
 */
struct retry_verdict {
    const char *queue;        /* where it failed, as claimed (into the headers); NULL: none */
    size_t queue_len;
    int admitted;             /* queue passed retry_admits */
    int handback;             /* a bridge's hand-back, vouched for */
    uint32_t failed;          /* the attempt that failed, >= 1 */
    enum xdelay_status st;    /* OK / NOW: send back to queue after delay_ms; else parked */
    uint64_t delay_ms;
};
void broker_retry_judge(const struct config *c, const struct config_route *rc,
                        const struct broker_headers *h, int from_bridge, uint64_t now_ms,
                        uint64_t rnd, struct retry_verdict *v);

/* How a retry route's message leaves the bridge. */
enum broker_retry_way {
    BROKER_RETRY_BACK,     /* to its queue: x-retry-attempt = failed + 1, history + failed_ms */
    BROKER_RETRY_PARK,     /* to the parking exchange: reason, attempts, history, queue */
    BROKER_RETRY_HANDBACK, /* a drain: to the retry ingress, marked, counts unchanged */
};

/*
 * Rewrite p (the outgoing copy, its table in pool) for way. failed_ms is
 * when the bridge received the failure (the record's enqueue time); queue
 * (NUL-terminated) the queue it failed in, or NULL; reason the park's
 * (BROKER_RETRY_PARK only). The hand-back mark is removed on every way but
 * BROKER_RETRY_HANDBACK, so it never reaches a consumer. A hand-back carries
 * the failure's time in x-retry-history (the next bridge's enqueue time is
 * only the hand-back's), so the way out of a handed-back message adds none.
 */
void broker_retry_out(amqp_basic_properties_t *p, amqp_pool_t *pool, enum broker_retry_way way,
                      uint64_t failed_ms, const char *queue, const char *reason);

#endif
