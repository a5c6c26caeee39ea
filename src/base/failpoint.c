/*
 * failpoint.c -- the armed failpoint (see failpoint.h); empty without
 * DB_FAILPOINTS.
 */
#include "failpoint.h"

#ifdef DB_FAILPOINTS

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define FAILPOINT_ENV "DELAY_BRIDGE_FAILPOINT"

/* Every point a FAILPOINT*() names; an armed name must be one of them. */
static const char *const known[] = {
    "wal.before_fsync", "wal.fsync_error", "wal.mid_roll", "wal.mid_compaction",
    "wal.ckpt_write_error", "wal.mid_ckpt", "wal.after_ckpt",
    "bridge.before_ack", "bridge.after_publish", "bridge.after_confirm",
    "publish.passive_403", "repl.lose_message", "keys.event_unconfirmed",
};

static char armed[64]; /* "" when nothing is armed */
static unsigned long long target = 1;
static atomic_ullong passes;

__attribute__((constructor)) static void failpoint_init(void)
{
    const char *v = getenv(FAILPOINT_ENV), *colon;
    size_t len, i;
    char *end;

    if (!v || !*v)
        return;
    colon = strchr(v, ':');
    len = colon ? (size_t)(colon - v) : strlen(v);
    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strlen(known[i]) == len && memcmp(known[i], v, len) == 0)
            break;
    if (i == sizeof(known) / sizeof(known[0]) ||
        (colon && ((target = strtoull(colon + 1, &end, 10)) == 0 || *end))) {
        log_error("failpoint", "bad " FAILPOINT_ENV ": expected NAME or NAME:N (N >= 1) with a "
                  "known NAME (src/base/failpoint.h)", "value=\"%s\"", v);
        _exit(2);
    }
    memcpy(armed, v, len);
    armed[len] = 0;
    log_warn("failpoint", "armed", "name=%s hit=%llu", armed, target);
}

int failpoint_hit(const char *name)
{
    unsigned long long n;

    if (!armed[0] || strcmp(name, armed) != 0)
        return 0;
    n = atomic_fetch_add(&passes, 1) + 1;
    if (n != target)
        return 0;
    log_warn("failpoint", "failpoint reached", "name=%s hit=%llu", name, n);
    return 1;
}

void failpoint_crash(const char *name)
{
    if (!failpoint_hit(name))
        return;
    log_error("failpoint", "crashing (SIGKILL)", "name=%s", name);
    raise(SIGKILL);
    _exit(137); /* not reached */
}

#else
typedef int failpoint_empty_unit; /* ISO C wants a declaration in every file */
#endif
