/*
 * duewake.h -- wake the loop at a due time, to the microsecond.
 *
 * A due time is a wall-clock millisecond (clock.h). libev's timers cannot
 * wake at one exactly: they count from the loop's cached time (stale by the
 * turn's own work) and the epoll backend rounds its wait up to the next
 * whole millisecond, so a timer armed "due - now" ms ahead wakes up to two
 * milliseconds after the due time, and a message fired on that turn is that
 * much late. A timerfd armed at the due time itself (CLOCK_REALTIME,
 * absolute) makes the kernel wake epoll at that instant, whatever the
 * loop's cached time, and follows a step of the wall clock by itself.
 *
 * The bridge keeps its ev_timer for everything measured on the monotonic
 * clock (retries, heartbeats, the longest sleep) and arms this for the
 * wheel's next event only. Where no timerfd can be made (not Linux, or the
 * descriptor limit), duewake_init() says so and the caller counts the due
 * time into its ev_timer as before.
 */
#ifndef DB_DUEWAKE_H
#define DB_DUEWAKE_H

#include <ev.h>
#include <stdint.h>

struct duewake {
    int fd;            /* the timerfd, or -1 */
    ev_io io;          /* readable when it expired */
    uint64_t armed_ms; /* the wall-clock ms it is armed at; 0 = disarmed */
    uint64_t wakes;    /* times it woke the loop (counter) */
};

/* 0, or -1 with errno (no timerfd: fd stays -1 and every other call is a no-op). */
int duewake_init(struct duewake *w, struct ev_loop *loop);
/* Arm at wall-clock ms at (disarm with 0 or UINT64_MAX); a no-op when already so. */
void duewake_arm(struct duewake *w, uint64_t at_ms);
/* 1 when armed (the due time need not be counted into another timer). */
static inline int duewake_on(const struct duewake *w)
{
    return w->fd >= 0;
}
void duewake_stop(struct duewake *w, struct ev_loop *loop);

#endif
