/*
 * ready.c -- the daemon's readiness policy (ready.h).
 *
 * Design
 * ------
 * "Ready" is a policy of the daemon's status, not of the snapshot it reads:
 * which states turn /readyz to 503 and in which order they are named is a
 * decision for the operator's load balancer (a Kubernetes readiness probe
 * takes a not-ready pod out of its Service). It lives on the status floor,
 * beside its two readers, and reads flags the daemon sets from its own
 * enums (stats.h's repl_waiting and the like) rather than matching the
 * names the renderers print.
 *
 * The order matters where two states hold at once: a draining bridge is
 * reported draining even while its consumer connection is down, a standby
 * is reported standing by rather than "recovering" (it has not begun to
 * recover: another bridge holds the log's lease).
 */
#include "ready.h"

#include "delay-bridge/stats.h"

const char *ready_reason(const struct db_stats *s)
{
    if (s->drain.active)
        return "draining";
    if (s->stopping)
        return "stopping";
    if (!s->recovered && s->wal.repl && s->wal.repl_waiting)
        return "standby (another bridge holds the WAL lease)";
    if (!s->recovered)
        return "recovering";
    if (s->wal.no_space)
        return "WAL disk full";
    if (s->wal.intake_paused)
        return "WAL space low (consuming paused while held messages fire)";
    if (!s->wal.writable)
        return "WAL not writable";
    if (s->held_limit.reason && s->held_limit.reason[0])
        return s->held_limit.reason; /* a max_held reached: consuming paused */
    if (s->consumer == DB_CONN_DOWN)
        return "consumer connection down";
    if (s->publisher == DB_CONN_DOWN)
        return "publisher connection down";
    return "";
}
