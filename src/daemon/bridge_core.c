/*
 * bridge_core.c -- the floor the bridge's other files stand on: the fatal
 * stop and the route lookup by name.
 *
 * Every file of the bridge may need to stop the daemon when the log fails
 * (a write, an fsync, a read back), and the log and the HTTP endpoint both
 * name routes that the configuration numbers. Those two live here, below
 * everything else, so that no file split out of bridge.c ever calls back up
 * into it (bridge_int.h draws the floors). This file calls no other file of
 * the bridge.
 */
#include "bridge_int.h"

#include <stdlib.h>
#include <string.h>

#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "base/log.h"

/*
 * The first fatal error wins: its message is logged, the exit code set, the
 * ingress connection closed without acking (the broker redelivers what was
 * not acked) and the loop broken. Later calls do nothing.
 */
void bridge_fatal(struct bridge *b, const char *what, int err)
{
    if (b->exit_code)
        return;
    log_error("bridge", "fatal error, stopping without acking more", "what=\"%s\" error=\"%s\"",
              what, wlog_strerror(err));
    b->exit_code = EXIT_FATAL;
    /* Abrupt close: unacked deliveries go back to their queues. */
    bridge_consumers(b, CONSUMERS_ABORT);
    ev_break(b->loop, EVBREAK_ALL);
}

/* Route names found in the log, or named in a request -> route index; -1: not configured. */
int bridge_route_index(void *arg, const char *name, size_t len)
{
    const struct config *c = arg;

    /* retired routes too (config_route_index skips them): their messages and keys are held */
    for (int i = 0; i < c->nroutes; i++)
        if (strlen(c->routes[i].name) == len && !memcmp(c->routes[i].name, name, len))
            return i;
    return -1;
}
