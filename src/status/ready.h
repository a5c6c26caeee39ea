/*
 * ready.h -- the daemon's readiness policy: one definition of "ready".
 *
 * Read by /readyz and /stats (api.c) and by delay_bridge_ready (metrics.c),
 * so the gauge and the endpoints can never disagree. Pure: reads the
 * snapshot (delay-bridge/stats.h) only.
 */
#ifndef DB_STATUS_READY_H
#define DB_STATUS_READY_H

struct db_stats;

/*
 * Why the daemon is not ready ("" when it is). The first that applies,
 * most final first: draining, stopping, standing by for another bridge's
 * WAL lease, recovering, WAL disk full, WAL space low, WAL not writable, a
 * held bound reached (held_limit.reason), consumer connection down,
 * publisher connection down (blocked counts as connected: it is broker
 * flow control, not an outage). The string is static or the snapshot's
 * own; never NULL.
 */
const char *ready_reason(const struct db_stats *s);

#endif
