/*
 * backoff.c -- exponential backoff with jitter and a rate-limited log.
 *
 * The jitter comes from clock_rand64(), not from a generator of its own:
 * the kernel's randomness in the daemon, the simulator's seeded one under
 * DB_SIM, so every random draw in the process has one source to replay.
 * Two bridges (or a consumer and a publisher) that failed at the same
 * moment therefore draw independent delays and do not retry in step.
 */
#include "backoff.h"

#include "clock.h"

void backoff_init(struct backoff *b, uint32_t min_ms, uint32_t max_ms, uint64_t log_interval_ms)
{
    b->min_ms = min_ms ? min_ms : 1;
    b->max_ms = max_ms < b->min_ms ? b->min_ms : max_ms;
    b->cur_ms = 0;
    b->retry_at = 0;
    b->log_interval_ms = log_interval_ms ? log_interval_ms : 30000;
    b->failures = 0;
    b->rl.last_ms = 0;
    b->rl.suppressed = 0;
}

static struct backoff_step fail_upto(struct backoff *b, uint64_t now, uint32_t cap_ms)
{
    struct backoff_step st;
    uint64_t d = b->cur_ms ? (uint64_t)b->cur_ms * 2 : b->min_ms;
    uint32_t span;

    if (d > cap_ms)
        d = cap_ms;
    b->cur_ms = (uint32_t)d;
    span = b->cur_ms / 5; /* +-20% */
    if (span)
        d = b->cur_ms - span + clock_rand64() % (2ull * span + 1);
    b->retry_at = now + d;
    b->failures++;
    st.retry_at = b->retry_at;
    st.retry_in_ms = d;
    st.log_events = log_ratelimit(&b->rl, now, b->log_interval_ms);
    return st;
}

struct backoff_step backoff_fail(struct backoff *b, uint64_t now)
{
    return fail_upto(b, now, b->max_ms);
}

struct backoff_step backoff_fail_within(struct backoff *b, uint64_t now, uint32_t cap_ms)
{
    if (cap_ms > b->max_ms)
        cap_ms = b->max_ms;
    if (cap_ms < b->min_ms)
        cap_ms = b->min_ms;
    return fail_upto(b, now, cap_ms);
}

void backoff_reset(struct backoff *b)
{
    b->cur_ms = 0;
    b->retry_at = 0;
    b->failures = 0;
}

int backoff_ready(const struct backoff *b, uint64_t now)
{
    return b->retry_at == 0 || now >= b->retry_at;
}
