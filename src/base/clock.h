/*
 * clock.h -- the daemon's one notion of time.
 *
 * Due times are wall-clock milliseconds since the epoch (they are written to
 * the WAL and must mean the same after a restart); durations that must not
 * jump with the wall clock (fsync time, timeouts, reconnect backoff) use the
 * monotonic clock, in ms through clock_mono_ms().
 * Everything that needs "now" asks here, so tests and tools agree on units.
 *
 * The other thing the outside world supplies, randomness, comes from here
 * too: clock_rand64() (segment salts, log ids, lease tokens).
 */
#ifndef DB_CLOCK_H
#define DB_CLOCK_H

#include <stddef.h>
#include <stdint.h>

/* Wall clock, ms since the epoch (CLOCK_REALTIME), rounded down. */
uint64_t clock_now_ms(void);

/* Wall clock, us since the epoch. */
uint64_t clock_now_us(void);

/*
 * The wall clock rounded up to the next whole ms: the base a delay is
 * counted from. A due time is a whole ms; counted from the instant rounded
 * down, it would end up to a millisecond before receipt + delay, and a
 * message would go out early. Rounded up, due >= receipt + delay always
 * (the cost: half a millisecond late on average, at most one).
 */
static inline uint64_t clock_receipt_ms(void)
{
    return (clock_now_us() + 999u) / 1000u;
}

/* Monotonic clock, ns (CLOCK_MONOTONIC): for measuring durations only. */
uint64_t clock_mono_ns(void);

/*
 * The same clock in whole ms: every duration, timeout and backoff in the
 * daemon is measured with this one (a wall-clock step, NTP or an operator's
 * `date`, must not fire a timeout early or stall a reconnect). In the
 * simulator it follows the simulated clock, as clock_mono_ns() does.
 */
static inline uint64_t clock_mono_ms(void)
{
    return clock_mono_ns() / 1000000u;
}

/*
 * 64 random bits from the kernel (getrandom); without it (an old kernel),
 * splitmix64 over the time, the pid and a counter. Not for secrets.
 */
uint64_t clock_rand64(void);

/*
 * ms since the epoch as ISO 8601 UTC with milliseconds,
 * "2026-11-23T04:05:06.789Z" (24 chars + NUL; room for any year). Returns out.
 */
#define CLOCK_ISO_LEN 64
char *clock_iso8601(uint64_t ms, char out[CLOCK_ISO_LEN]);

/*
 * Parse ms since the epoch from "1790000000000" or ISO 8601 UTC
 * ("2026-11-23T10:00:00Z", optional ".mmm"). 0 or -1.
 */
int clock_parse(const char *s, uint64_t *ms);

#endif
