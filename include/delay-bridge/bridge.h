/*
 * bridge.h -- the daemon: the engine wired to RabbitMQ on one libev loop.
 */
#ifndef DB_BRIDGE_H
#define DB_BRIDGE_H

#include "delay-bridge/config.h"

/* Exit codes of the daemon (also documented in README.md). */
enum {
    EXIT_OK = 0,      /* clean shutdown after SIGTERM/SIGINT */
    EXIT_FATAL = 1,   /* WAL write/fsync/read failed, or out of resources */
    EXIT_USAGE = 2,   /* bad command line */
    EXIT_CONFIG = 3,  /* configuration invalid */
    EXIT_WAL = 4,     /* WAL corrupt, unreadable or locked by another process */
};

/* Run until a signal asks to stop or a fatal error. Returns an exit code. */
int bridge_run(const struct config *cfg);

#endif
