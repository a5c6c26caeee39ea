/*
 * main.c -- delay-bridge: delayed messages for RabbitMQ, without the plugin.
 *
 * The daemon's whole life is run_daemon(), on one screen:
 *
 *   load and check the configuration           exit 3 on any mistake
 *   create the event loop and the log (wal.h)
 *   start the bridge: HTTP endpoint and        exit 1 if the address is taken
 *   signal handlers at once; the engine
 *   recovers the held messages on a thread     exit 4 corrupt/locked, 1 I/O
 *   (/readyz says "recovering"), then the
 *   consumer and publisher connect
 *   run until SIGTERM/SIGINT has drained,      exit 0, or 1 after a fatal
 *   or a fatal error                           log failure
 *   close everything, exit code
 *
 * Subcommands (tools for operators) share the binary: `delay-bridge wal
 * check|dump`, `delay-bridge publish`, `delay-bridge routes`, ...; each has
 * its own --help.
 */
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/bridge.h"
#include "cli/cli.h"
#include "delay-bridge/config.h"
#include "base/log.h"
#include "delay-bridge/wal.h"
#include "repl/wrepl.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge -c FILE [--check-config] [--watch-config]\n"
            "       delay-bridge wal check|dump|salvage DIR ...  (delay-bridge wal --help)\n"
            "       delay-bridge publish ...              (delay-bridge publish --help)\n"
            "       delay-bridge cancel --route R KEY     (delay-bridge cancel --help)\n"
            "       delay-bridge drain [-c FILE]          (delay-bridge drain --help)\n"
            "       delay-bridge routes list|get|put|delete  (delay-bridge routes --help)\n"
            "       delay-bridge migrate-plugin [--dry-run] ...  (delay-bridge migrate-plugin --help)\n"
            "       delay-bridge --version | --help\n"
            "\n"
            "Delayed messages for RabbitMQ without the delayed-message plugin: consumes\n"
            "each route's ingress queue, holds messages in a write-ahead log until their\n"
            "x-delay has passed, then publishes them to the route's target exchange.\n"
            "\n"
            "  -c, --config FILE   configuration file (JSON; see README.md)\n"
            "      --check-config  validate the configuration and exit\n"
            "      --watch-config  read FILE again whenever it changes (as SIGHUP does)\n"
            "  -V, --version       print the version and exit\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "Environment: DELAY_BRIDGE_BROKER_URI overrides broker.uri (comma-separated\n"
            "list for failover).\n"
            "Exit codes: 0 clean stop, 1 fatal runtime error, 2 usage, 3 configuration\n"
            "error, 4 WAL corrupt, unreadable or locked by another process.\n");
}

static int run_daemon(const char *path, int check, int watch)
{
    struct config cfg;
    struct ev_loop *loop;
    struct bridge *b;
    char err[1024], *text = NULL;
    int rc, stored = 0;

    /* SIGHUP reads the file again once the loop runs (bridge_reload.c); until then it must
       not end the process, its default action */
    if (!check)
        signal(SIGHUP, SIG_IGN);
    /* the -c file, then the routes the HTTP API stored (routes_file) */
    if (config_load_all(&cfg, path, check ? NULL : &text, err, sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge: configuration error: %s\n", err);
        return EXIT_CONFIG;
    }
    for (int i = 0; i < cfg.nroutes; i++)
        stored += cfg.routes[i].source == CONFIG_SOURCE_STORE;
    if (check) {
        printf("%s: configuration OK (%d route%s, %d from the routes file)\n", path,
               cfg.nroutes, cfg.nroutes == 1 ? "" : "s", stored);
        config_free(&cfg);
        return EXIT_OK;
    }
    if (config_check_wal_dir(&cfg, path, err, sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge: configuration error: %s\n", err);
        config_free(&cfg);
        free(text);
        return EXIT_CONFIG;
    }
    log_set_level((enum log_level)cfg.log_level);
    log_info("main", "starting", "version=%s instance=\"%s\" wal_dir=\"%s\" routes=%d "
             "routes_from_api=%d", DB_VERSION, cfg.instance, cfg.wal_dir, cfg.nroutes, stored);

    struct wal_opts wo = {.dir = cfg.wal_dir, .segment_bytes = cfg.segment_bytes,
                          .no_sync = !cfg.fsync, .sync_thread = 1,
                          .reserve_bytes = WAL_RESERVE_SEGMENTS * cfg.segment_bytes,
                          .prewrite_bytes = cfg.prewrite_bytes};
    loop = ev_default_loop(EVFLAG_AUTO);
    b = bridge_new(loop, &cfg, cfg.repl.enabled ? wrepl_log(&wo, &cfg) : wal_log(wal_new(&wo)),
                   &rc);
    if (b) {
        bridge_set_reload(b, path, &cfg, text);
        if (watch)
            bridge_watch_config(b, 2.0);
        ev_run(loop, 0);
        rc = bridge_exit_code(b);
    } else {
        free(text);
    }
    bridge_free(b);
    ev_loop_destroy(loop);
    config_free(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", no_argument, NULL, 'k'},
        {"watch-config", no_argument, NULL, 'w'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *path = NULL;
    int check = 0, watch = 0, c;

    /*
     * Tables that grow by doubling (the key map, recovery's id index) are
     * allocated and freed whole. A fixed mmap threshold keeps every big one
     * out of the heap, so a freed table goes back to the kernel instead of
     * staying in RSS (glibc's sliding threshold would move them to the heap
     * after the first free).
     */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);

    if (argc > 1 && strcmp(argv[1], "wal") == 0)
        return cli_wal_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "publish") == 0)
        return cli_publish_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "cancel") == 0)
        return cli_cancel_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "drain") == 0)
        return cli_drain_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "routes") == 0)
        return cli_routes_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "migrate-plugin") == 0)
        return cli_migrate_main(argc - 1, argv + 1);
    while ((c = getopt_long(argc, argv, "c:Vh", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            path = optarg;
            break;
        case 'k':
            check = 1;
            break;
        case 'w':
            watch = 1;
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
    return run_daemon(path, check, watch);
}
