/*
 * retry.c -- a retry route's decisions: which policy, how long, or parked.
 *
 * The contract and the backoff formula are in retry.h. Two details of the
 * arithmetic: the exponential step is computed in double and compared with
 * max_ms before it is turned into an integer, so a long run of failures
 * (multiplier 100, attempt 10000) saturates at max_ms instead of
 * overflowing; and jitter draws from the caller's 64 random bits with a
 * modulo, whose bias over a range below 2^32 ms is under 2^-32.
 *
 * A dead-letter's attempt header is taken at its word when it is an
 * integer >= 1 (the bridge wrote it); anything else counts as the first
 * failure. A value past max_attempts parks at once: a message never loops
 * because its count was raised by hand, and a consumer that strips the
 * header is the one case this cannot bound (README says so).
 *
 * Where it goes back is not the headers' to say alone: retry_admits holds
 * the queue x-death names against the route's list and pattern and the
 * bridge's own queues. A forged x-death can only park the forger's own
 * message (README, "Security").
 */
#include "delay-bridge/retry.h"

#include <string.h>

#include "base/utf8.h"

static int same(const char *name, const char *q, size_t n)
{
    return name[0] && strlen(name) == n && memcmp(name, q, n) == 0;
}

/* q is one of the queues the bridge declares or reads for itself. */
static int own_queue(const struct config *c, const char *q, size_t n)
{
    for (int i = 0; i < c->nroutes; i++) {
        const struct config_route *r = &c->routes[i];
        size_t il = strlen(r->ingress_queue);
        if (same(r->ingress_queue, q, n) ||
            (n > il + 6 && memcmp(q, r->ingress_queue, il) == 0 &&
             memcmp(q + il, ".keys.", 6) == 0) ||
            (r->retry && same(r->retry->parking_queue, q, n)))
            return 1;
    }
    return same(c->repl.stream, q, n) || same(c->repl.lease_queue, q, n);
}

int retry_admits(const struct config *c, const struct config_route *r, const char *q, size_t n)
{
    const struct config_retry *rt = r->retry;
    char name[256];

    if (!rt || !q || n == 0 || n > 255 || memchr(q, '\0', n) ||
        !utf8_valid(q, n) || (n >= 4 && memcmp(q, "amq.", 4) == 0) ||
        own_queue(c, q, n))
        return 0;
    for (int i = 0; i < rt->nqueues; i++)
        if (same(rt->queues[i].queue, q, n))
            return 1;
    if (!rt->queue_re)
        return 0;
    memcpy(name, q, n);
    name[n] = '\0';
    return regexec(rt->queue_re, name, 0, NULL, 0) == 0;
}

const char *const retry_park_reasons[RETRY_PARK_REASONS] = {
    "max_attempts", "reason", "no_queue", "queue_gone", "invalid", "not_admitted",
};

const struct config_retry_policy *retry_policy(const struct config_retry *rt, const char *queue,
                                               size_t queue_len)
{
    for (int i = 0; queue && i < rt->nqueues; i++)
        if (strlen(rt->queues[i].queue) == queue_len &&
            memcmp(rt->queues[i].queue, queue, queue_len) == 0)
            return &rt->queues[i].policy;
    return &rt->policy;
}

uint64_t retry_backoff_ms(const struct config_retry_policy *p, uint32_t n, uint64_t rnd)
{
    double d = (double)p->initial_ms;
    uint64_t ms;

    for (uint32_t i = 1; i < n && d < (double)p->max_ms; i++)
        d *= p->multiplier;
    ms = d >= (double)p->max_ms ? p->max_ms : (uint64_t)d;
    switch (p->jitter) {
    case RETRY_JITTER_FULL:
        return rnd % (ms + 1);
    case RETRY_JITTER_EQUAL:
        return (ms + 1) / 2 + rnd % (ms / 2 + 1);
    default:
        return ms;
    }
}

unsigned retry_reason_bit(const char *s, size_t n)
{
    static const struct {
        const char *name;
        unsigned bit;
    } r[] = {
        {"rejected", RETRY_REASON_REJECTED},
        {"delivery_limit", RETRY_REASON_DELIVERY_LIMIT},
        {"expired", RETRY_REASON_EXPIRED},
        {"maxlen", RETRY_REASON_MAXLEN},
    };

    for (size_t i = 0; s && i < sizeof r / sizeof r[0]; i++)
        if (strlen(r[i].name) == n && memcmp(r[i].name, s, n) == 0)
            return r[i].bit;
    return 0;
}

enum xdelay_status retry_judge(const struct config_retry *rt, const struct retry_in *in,
                               uint64_t rnd, uint32_t *failed, uint64_t *delay_ms)
{
    const struct config_retry_policy *p = retry_policy(rt, in->queue, in->queue_len);
    int64_t a = in->attempt;

    *failed = a >= 1 ? (a > UINT32_MAX ? UINT32_MAX : (uint32_t)a) : 1;
    *delay_ms = 0;
    if (!in->queue)
        return XDELAY_RETRY_NOQUEUE;
    if (!in->admitted)
        return XDELAY_RETRY_NOTADMITTED;
    if (!(retry_reason_bit(in->reason, in->reason_len) & rt->reasons))
        return XDELAY_RETRY_REASON;
    if (*failed >= p->max_attempts)
        return XDELAY_RETRY_LAST;
    *delay_ms = retry_backoff_ms(p, *failed, rnd);
    return *delay_ms ? XDELAY_OK : XDELAY_NOW;
}

const char *retry_park_reason(uint16_t error, int queue_gone)
{
    if (queue_gone)
        return retry_park_reasons[3];
    switch (error) {
    case XDELAY_RETRY_LAST: return retry_park_reasons[0];
    case XDELAY_RETRY_REASON: return retry_park_reasons[1];
    case XDELAY_RETRY_NOQUEUE: return retry_park_reasons[2];
    case XDELAY_RETRY_NOTADMITTED: return retry_park_reasons[5];
    default: return retry_park_reasons[4];
    }
}

int retry_park_index(const char *reason)
{
    for (int i = 0; reason && i < RETRY_PARK_REASONS; i++)
        if (strcmp(retry_park_reasons[i], reason) == 0)
            return i;
    return -1;
}
