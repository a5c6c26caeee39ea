/*
 * bridge.h -- the daemon's policy: the engine wired to RabbitMQ on one loop.
 *
 * The bridge owns the engine (which it recovers from the log it is given, on
 * a thread, while the HTTP endpoint already answers), the consumer, the
 * publisher and the HTTP endpoint. It decides
 * what the parts do not: what a delivery becomes (x-delay, the invalid-delay
 * policy, oversized messages), when the log commits and the broker is
 * acked, what is published when, what a confirm, a nack or a lost channel
 * means for a held message, and how the daemon stops.
 *
 *   bridge_new()  start the HTTP endpoint, the signal handlers and the
 *                 recovery; connections are made once it is done;
 *                 SIGTERM and SIGINT start a drain
 *   ev_run(loop)  returns once the drain is over, or at a fatal error
 *   bridge_exit_code(), bridge_free()
 */
#ifndef DB_BRIDGE_H
#define DB_BRIDGE_H

#include <ev.h>

#include "delay-bridge/config.h"
#include "delay-bridge/stats.h"

struct wlog;
struct bridge;

/* Exit codes of the daemon (also documented in README.md). */
enum {
    EXIT_OK = 0,      /* clean shutdown after SIGTERM/SIGINT */
    EXIT_FATAL = 1,   /* WAL write/fsync/read failed, or out of resources */
    EXIT_USAGE = 2,   /* bad command line */
    EXIT_CONFIG = 3,  /* configuration invalid */
    EXIT_WAL = 4,     /* WAL corrupt, unreadable or locked by another process */
};

/*
 * Start the bridge on loop over the messages held in log (which it owns
 * from here on, whatever happens). cfg must outlive it. Returns NULL, with
 * the reason logged and *exit_code set, when something cannot start (the
 * HTTP address is in use, for one).
 */
struct bridge *bridge_new(struct ev_loop *loop, const struct config *cfg, struct wlog *log,
                          int *exit_code);

/*
 * After ev_run() returned: EXIT_OK after a clean drain, EXIT_FATAL after a
 * fatal error, EXIT_WAL when the log could not be recovered.
 */
int bridge_exit_code(const struct bridge *b);

/*
 * The file cfg was loaded from, and cfg itself (the object bridge_new got,
 * writable): SIGHUP reads the file again (bridge_reload.c), writes what can
 * change live into cfg, on the loop, and logs by key path what waits for a
 * restart; a file that does not load changes nothing. Without it SIGHUP is
 * logged and ignored -- never the default action, which would end the
 * process. text: the file's text as config_load_all() read it, taken over
 * (the route API rebuilds the configuration from it, never from the file
 * on disk); the routes file is read here too.
 */
void bridge_set_reload(struct bridge *b, const char *path, struct config *cfg, char *text);

/*
 * Read the -c file again whenever it changes (checked every interval_s;
 * the command line's --watch-config), as SIGHUP does: the Kubernetes
 * recipe's path from an edited ConfigMap to a running bridge.
 */
void bridge_watch_config(struct bridge *b, double interval_s);

/*
 * A snapshot of every figure (stats.h); the routes array and strings stay
 * valid until the next call or bridge_free(). O(routes).
 */
void bridge_stats(struct bridge *b, struct db_stats *s);

/* Log the totals, close the connections, stop the watchers and free. NULL is fine. */
void bridge_free(struct bridge *b);

#endif
