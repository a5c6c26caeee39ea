/*
 * backoff.h -- retry timing after a failure, and when to say so in the log.
 *
 * Every "try again later" in the daemon (consumer and publisher reconnects,
 * a route channel after a broker error) has the same shape: the first retry
 * after min_ms, each further failure doubling it up to max_ms, +-20% jitter
 * so that many bridges restarted together do not retry in step, back to
 * min_ms after a success; and a warning at most once per log interval,
 * saying how many attempts it stands for. The caller passes the time, in
 * monotonic ms (clock_mono_ms(): a wall-clock step must neither fire a
 * retry early nor stall it); the jitter is drawn from clock_rand64(), the
 * daemon's one random source, so tests check bounds and spread, not values.
 */
#ifndef DB_BACKOFF_H
#define DB_BACKOFF_H

#include <stdint.h>

#include "log.h"

struct backoff {
    uint32_t min_ms, max_ms;
    uint32_t cur_ms;        /* the last delay before jitter, 0 after a success */
    uint64_t retry_at;      /* monotonic ms of the next attempt, 0 = none scheduled */
    uint64_t log_interval_ms;
    uint64_t failures;      /* since the last success */
    struct log_ratelimit rl;
};

struct backoff_step {
    uint64_t retry_at;    /* when to try again (monotonic ms) */
    uint64_t retry_in_ms; /* retry_at - now */
    uint64_t log_events;  /* > 0: log this failure, standing for that many; 0: stay quiet */
};

/* min_ms <= max_ms (fixed up if not). log_interval_ms 0 = 30 s. */
void backoff_init(struct backoff *b, uint32_t min_ms, uint32_t max_ms, uint64_t log_interval_ms);

/* A failure at now (monotonic ms): schedule the next attempt. */
struct backoff_step backoff_fail(struct backoff *b, uint64_t now);

/*
 * A failure that cost the other side nothing (nobody listened: the TCP
 * connect was refused or timed out), at now: as backoff_fail, but the delay
 * before jitter grows to cap_ms at most (never past max_ms). A broker node
 * being restarted is then reached within about cap_ms of coming up, not a
 * doubled minute later; a failure after the connect (a login refused)
 * doubles on from there as usual.
 */
struct backoff_step backoff_fail_within(struct backoff *b, uint64_t now, uint32_t cap_ms);

/* A success: the next failure waits min_ms again. */
void backoff_reset(struct backoff *b);

/* Nothing scheduled, or its time has come (now: monotonic ms). */
int backoff_ready(const struct backoff *b, uint64_t now);

#endif
