/*
 * duewake.c -- a timerfd on the wall clock as a libev watcher (duewake.h).
 *
 * One descriptor for the life of the bridge, armed with TFD_TIMER_ABSTIME
 * at the next due time and re-armed only when that time changes, so a turn
 * that changes nothing costs no system call. An expiry makes the descriptor
 * readable; the watcher reads the expiration count (8 bytes) to clear it
 * and does nothing else: waking is the point, the loop's prepare step does
 * the work (bridge.c).
 */
#define _GNU_SOURCE
#include "duewake.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

static void on_expired(struct ev_loop *loop, ev_io *io, int revents)
{
    struct duewake *w = io->data;
    uint64_t n;

    (void)loop;
    (void)revents;
    if (read(w->fd, &n, sizeof n) == (ssize_t)sizeof n)
        w->wakes++;
    w->armed_ms = 0; /* a one-shot timer: disarmed once it expired */
}

int duewake_init(struct duewake *w, struct ev_loop *loop)
{
    memset(w, 0, sizeof *w);
    w->fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (w->fd < 0)
        return -1;
    ev_io_init(&w->io, on_expired, w->fd, EV_READ);
    w->io.data = w;
    ev_io_start(loop, &w->io);
    return 0;
}

void duewake_arm(struct duewake *w, uint64_t at_ms)
{
    struct itimerspec its;

    if (w->fd < 0)
        return;
    if (at_ms == UINT64_MAX)
        at_ms = 0;
    if (at_ms == w->armed_ms)
        return;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(at_ms / 1000u);
    its.it_value.tv_nsec = (long)(at_ms % 1000u) * 1000000L;
    /* Both zero disarms. A time already past expires at once: the loop turns again. */
    if (timerfd_settime(w->fd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
        w->armed_ms = at_ms;
}

void duewake_stop(struct duewake *w, struct ev_loop *loop)
{
    if (w->fd < 0)
        return;
    ev_io_stop(loop, &w->io);
    close(w->fd);
    w->fd = -1;
    w->armed_ms = 0;
}
