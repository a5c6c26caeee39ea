/*
 * cli_cancel.c -- `delay-bridge cancel`: cancel a pending message by key.
 *
 * The daemon owns its WAL (it is locked), so the tool asks the running
 * daemon over its HTTP endpoint (cli_http.h): DELETE /pending/ROUTE/KEY.
 * The daemon answers after the CANCEL record is durable.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "delay-bridge/strbuf.h"
#include "cli_http.h"

enum { CANCEL_OK = 0, CANCEL_MISSED = 1, CANCEL_USAGE = 2, CANCEL_ERROR = 3 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge cancel --route ROUTE [--url URL | -c CONFIG] KEY\n"
            "\n"
            "Cancel the pending message with x-delay-key KEY on ROUTE, through the running\n"
            "daemon's HTTP endpoint (DELETE /pending/ROUTE/KEY). The cancel is durable when\n"
            "this returns 0.\n"
            "\n"
            "  -r, --route ROUTE    the route (a key names a message within its route)\n"
            "  -u, --url URL        the endpoint, http://HOST:PORT (default: from -c, else\n"
            "                       http://127.0.0.1:9800)\n"
            "  -c, --config FILE    take the endpoint from this config's http.listen\n"
            "  -t, --timeout S      seconds to wait for the answer (default 10)\n"
            "  -h, --help\n"
            "\n"
            "Environment: DELAY_BRIDGE_HTTP_TOKEN, sent as a bearer token when set.\n"
            "Exit codes: 0 cancelled, 1 no such key pending (unknown, already published or\n"
            "in flight), 2 usage, 3 the daemon could not be asked.\n");
}

int cli_cancel_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"route", required_argument, NULL, 'r'},   {"url", required_argument, NULL, 'u'},
        {"config", required_argument, NULL, 'c'},  {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *route = NULL, *url = NULL, *cfgpath = NULL;
    struct strbuf path = STRBUF_INIT, body = STRBUF_INIT;
    struct cli_http h;
    long timeout = 10;
    int c, rc = CANCEL_ERROR, status = 0, r;

    optind = 1;
    while ((c = getopt_long(argc, argv, "r:u:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': route = optarg; break;
        case 'u': url = optarg; break;
        case 'c': cfgpath = optarg; break;
        case 't': timeout = strtol(optarg, NULL, 10); break;
        case 'h': usage(stdout); return CANCEL_OK;
        default: usage(stderr); return CANCEL_USAGE;
        }
    }
    if (!route || !*route || optind + 1 != argc || !argv[optind][0] || timeout <= 0) {
        usage(stderr);
        return CANCEL_USAGE;
    }
    if (cli_http_target(&h, "delay-bridge cancel", url, cfgpath, timeout) < 0)
        return CANCEL_USAGE;

    strbuf_puts(&path, "/pending/");
    cli_http_encode(&path, route);
    strbuf_puts(&path, "/");
    cli_http_encode(&path, argv[optind]);
    r = cli_http_request(&h, "DELETE", path.p, &status, &body);
    if (r == CLI_HTTP_REFUSED)
        fprintf(stderr, "delay-bridge cancel: cannot reach the daemon at %s: %s\n", h.url,
                strerror(ECONNREFUSED));
    if (r < 0)
        goto cleanup;
    if (status == 200 || status == 202) {
        printf("%s", body.p ? body.p : "");
        rc = CANCEL_OK;
    } else if (status == 404 && body.p && strstr(body.p, "\"cancelled\"")) {
        printf("%s", body.p);
        rc = CANCEL_MISSED;
    } else {
        fprintf(stderr, "delay-bridge cancel: %s answered %d: %s", h.url, status,
                body.p ? body.p : "");
    }

cleanup:
    strbuf_free(&path);
    strbuf_free(&body);
    return rc;
}
