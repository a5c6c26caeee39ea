/*
 * main.c -- delay-bridge: delayed messages for RabbitMQ, without the plugin.
 *
 * The daemon's whole life is run_daemon(), on one screen:
 *
 *   load and check the configuration          exit 3 on any mistake
 *   open the engine: recover held messages    exit 4 corrupt/locked, 1 I/O
 *   create the event loop
 *   start the bridge: consumer, publisher,    connections come up on the
 *   HTTP endpoint, signal handlers            loop's first turn
 *   run until SIGTERM/SIGINT has drained,     exit 0, or 1 after a fatal
 *   or a fatal error                          log failure
 *   close everything, exit code
 *
 * Subcommands (tools for operators) share the binary: `delay-bridge wal
 * check|dump`, `delay-bridge publish`; each has its own --help.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/bridge.h"
#include "delay-bridge/cli.h"
#include "delay-bridge/config.h"
#include "delay-bridge/engine.h"
#include "delay-bridge/log.h"
#include "delay-bridge/wal.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge -c FILE [--check-config]\n"
            "       delay-bridge wal check|dump DIR ...   (delay-bridge wal --help)\n"
            "       delay-bridge publish ...              (delay-bridge publish --help)\n"
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

/* Route names found in the log -> route index (engine recovery). */
static int route_index(void *arg, const char *name, size_t len)
{
    const struct config *cfg = arg;
    int i;

    for (i = 0; i < cfg->nroutes; i++)
        if (strlen(cfg->routes[i].name) == len && memcmp(cfg->routes[i].name, name, len) == 0)
            return i;
    return -1;
}

static int open_engine(const struct config *cfg, struct engine **eng)
{
    struct wal_opts wo = {cfg->wal_dir, cfg->segment_bytes, !cfg->fsync};
    struct eng_opts eo = {wal_file_log(&wo), cfg->nroutes, route_index, (void *)cfg, 0};
    int r = eng_open(eng, &eo);

    if (r == 0)
        return EXIT_OK;
    log_error("main", "cannot open the WAL", "dir=\"%s\" error=\"%s\"", cfg->wal_dir,
              eng_strerror(r));
    return r == ENG_ECORRUPT || r == ENG_ELOCKED || r == ENG_EFORMAT ? EXIT_WAL : EXIT_FATAL;
}

static int run_daemon(const char *path, int check)
{
    struct config cfg;
    struct engine *eng = NULL;
    struct ev_loop *loop;
    struct bridge *b;
    char err[1024];
    int rc;

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
    log_info("main", "starting", "version=%s wal_dir=\"%s\" routes=%d", DB_VERSION, cfg.wal_dir,
             cfg.nroutes);

    rc = open_engine(&cfg, &eng);
    if (rc == EXIT_OK) {
        loop = ev_default_loop(EVFLAG_AUTO);
        b = bridge_new(loop, &cfg, eng, &rc);
        if (b) {
            ev_run(loop, 0);
            rc = bridge_exit_code(b);
        }
        bridge_free(b);
        ev_loop_destroy(loop);
    }
    eng_close(eng);
    config_free(&cfg);
    return rc;
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
    int check = 0, c;

    if (argc > 1 && strcmp(argv[1], "wal") == 0)
        return cli_wal_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "publish") == 0)
        return cli_publish_main(argc - 1, argv + 1);
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
    return run_daemon(path, check);
}
