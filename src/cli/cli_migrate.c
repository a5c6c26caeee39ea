/*
 * cli_migrate.c -- "delay-bridge migrate-plugin": the migration out of the
 * delayed-message plugin, under the bridge's own name.
 *
 * The work is not done here. The plugin keeps what it holds in a Mnesia
 * table local to each RabbitMQ node, and the step that takes entries out
 * has to run inside the plugin's own process on that node (so it never
 * fires what is being moved): that is Erlang, reached through the Erlang
 * distribution with the node's cookie, which rabbitmqctl already speaks.
 * deploy/plugin/migrate/delay-bridge-migrate-plugin (a shell script) hands
 * rabbitmqctl eval the module deploy/plugin/migrate/delay_bridge_migrate.erl
 * and prints its progress; a C implementation would only run rabbitmqctl
 * too. So this subcommand replaces itself with that script, every argument
 * passed on (its --help says what they are), found as:
 *
 *   $DELAY_BRIDGE_MIGRATE_PLUGIN            when set (tests, a source tree)
 *   delay-bridge-migrate-plugin beside this executable (/usr/bin in the
 *                                           Debian package)
 *   delay-bridge-migrate-plugin on PATH
 *
 * Exit codes: the script's (0 all moved, 1 an error: run again, 2 usage);
 * 127 when it cannot be found or run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define MIGRATE_SCRIPT "delay-bridge-migrate-plugin"

int cli_migrate_main(int argc, char **argv)
{
    (void)argc;
    argv[0] = (char *)MIGRATE_SCRIPT;
    const char *env = getenv("DELAY_BRIDGE_MIGRATE_PLUGIN");
    if (env && *env) {
        execv(env, argv);
        fprintf(stderr, "delay-bridge migrate-plugin: cannot run %s (DELAY_BRIDGE_MIGRATE_PLUGIN): %s\n",
                env, strerror(errno));
        return 127;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash && (size_t)(slash - self) + 1 + sizeof MIGRATE_SCRIPT <= sizeof self) {
            memcpy(slash + 1, MIGRATE_SCRIPT, sizeof MIGRATE_SCRIPT);
            if (access(self, X_OK) == 0)
                execv(self, argv);
        }
    }
    execvp(MIGRATE_SCRIPT, argv);
    fprintf(stderr,
            "delay-bridge migrate-plugin: cannot run " MIGRATE_SCRIPT ": %s (installed by the Debian "
            "package beside delay-bridge; in a source tree: deploy/plugin/migrate/, or set "
            "DELAY_BRIDGE_MIGRATE_PLUGIN)\n",
            strerror(errno));
    return 127;
}
