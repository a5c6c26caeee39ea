/*
 * main.c -- delay-bridge: delayed messages for RabbitMQ, without the plugin.
 *
 * The daemon's whole life:
 *   parse the command line -> load and validate the configuration ->
 *   bridge_run(): recover held messages from the WAL, connect, consume,
 *   hold, republish, until SIGTERM/SIGINT -> exit code (see bridge.h).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/bridge.h"
#include "delay-bridge/config.h"
#include "delay-bridge/log.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge -c FILE [--check-config]\n"
            "       delay-bridge --version | --help\n"
            "\n"
            "Delayed messages for RabbitMQ without the delayed-message plugin: consumes\n"
            "each route's ingress queue, holds messages in a write-ahead log until their\n"
            "x-delay has passed, then publishes them to the route's target exchange.\n"
            "\n"
            "  -c, --config FILE   configuration file (JSON; see README.md)\n"
            "      --check-config  validate the configuration and exit\n"
            "  -V, --version       print the version and exit\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "Environment: DELAY_BRIDGE_BROKER_URI overrides broker.uri (comma-separated\n"
            "list for failover).\n"
            "Exit codes: 0 clean stop, 1 fatal runtime error, 2 usage, 3 configuration\n"
            "error, 4 WAL corrupt, unreadable or locked by another process.\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 'k'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int check = 0, c, rc;
    struct config cfg;
    char err[1024];

    while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'k':
            check = 1;
            break;
        case 'V':
            printf("delay-bridge %s\n", DB_VERSION);
            return EXIT_OK;
        case 'h':
            usage(stdout);
            return EXIT_OK;
        default:
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    if (!path || optind != argc) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (config_load(&cfg, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge: configuration error: %s\n", err);
        return EXIT_CONFIG;
    }
    if (check) {
        printf("%s: configuration OK (%d route%s)\n", path, cfg.nroutes, cfg.nroutes == 1 ? "" : "s");
        config_free(&cfg);
        return EXIT_OK;
    }
    log_set_level((enum log_level)cfg.log_level);
    rc = bridge_run(&cfg);
    config_free(&cfg);
    return rc;
}
