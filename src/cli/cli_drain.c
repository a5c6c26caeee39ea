/*
 * cli_drain.c -- `delay-bridge drain`: hand a running daemon's held
 * messages back to the broker and wait until it has exited.
 *
 * POST /drain makes the daemon stop consuming, publish every held message
 * back to its route's ingress exchange with what remains of its delay (the
 * other bridges of the route take them from the shared ingress queue; one
 * already due goes to its target), and exit 0 once all are confirmed and
 * the log says so. This tool then polls /stats for the progress and waits
 * until the endpoint stops answering: the daemon has exited. Scaling a
 * bridge down, or moving it, no longer means waiting hours for its longest
 * delay; a Kubernetes preStop hook runs it (deploy/kubernetes).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "cli.h"
#include "base/clock.h"
#include "delay-bridge/strbuf.h"
#include "cli_http.h"

#define PROG "delay-bridge drain"

enum { DRAIN_DONE = 0, DRAIN_TIMEOUT = 1, DRAIN_USAGE = 2, DRAIN_ERROR = 3 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge drain [--url URL | -c CONFIG] [--timeout S]\n"
            "\n"
            "Drain the running daemon (POST /drain): it stops consuming, publishes every\n"
            "held message back to its route's ingress exchange with x-delay = the rest of\n"
            "its delay (headers and x-delay-key kept; the other bridges of the route take\n"
            "them over; due ones go to their target), with publisher confirms, and exits 0\n"
            "when none is left. Prints the progress and waits until the daemon has exited.\n"
            "\n"
            "  -u, --url URL        the endpoint, http://HOST:PORT (default: from -c, else\n"
            "                       http://127.0.0.1:9800)\n"
            "  -c, --config FILE    take the endpoint from this config's http.listen\n"
            "  -t, --timeout S      give up waiting after S seconds (default 300); the\n"
            "                       daemon goes on draining\n"
            "  -h, --help\n"
            "\n"
            "Environment: DELAY_BRIDGE_HTTP_TOKEN, sent as a bearer token when set.\n"
            "Exit codes: 0 drained, the daemon exited; 1 still draining at the timeout;\n"
            "2 usage; 3 the daemon could not be asked (not running, 401, recovering, error)\n"
            "or exited before it reported the drain done.\n");
}

/*
 * The drain's progress as the daemon reports it: "handed_back", "remaining"
 * and "done" of /stats "drain" (one GET). 0 when they could be read.
 */
static int drain_progress(const struct cli_http *h, uint64_t *handed, uint64_t *remaining,
                          int *done)
{
    struct strbuf body = STRBUF_INIT;
    int status = 0, r = cli_http_request(h, "GET", "/stats", &status, &body);
    json_object *root = NULL, *d, *v;

    if (r < 0 || status != 200 || !(root = json_tokener_parse(body.p ? body.p : ""))) {
        strbuf_free(&body);
        return r == CLI_HTTP_REFUSED ? CLI_HTTP_REFUSED : -1;
    }
    if (json_object_object_get_ex(root, "drain", &d)) {
        if (json_object_object_get_ex(d, "handed_back", &v))
            *handed = (uint64_t)json_object_get_int64(v);
        if (json_object_object_get_ex(d, "remaining", &v))
            *remaining = (uint64_t)json_object_get_int64(v);
        if (json_object_object_get_ex(d, "done", &v))
            *done = json_object_get_boolean(v);
    }
    json_object_put(root);
    strbuf_free(&body);
    return 0;
}

int cli_drain_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},     {"config", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *url = NULL, *cfgpath = NULL;
    struct strbuf body = STRBUF_INIT;
    struct cli_http h;
    long timeout = 300;
    int c, status = 0, r, rc = DRAIN_ERROR;

    optind = 1;
    while ((c = getopt_long(argc, argv, "u:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'u': url = optarg; break;
        case 'c': cfgpath = optarg; break;
        case 't': timeout = strtol(optarg, NULL, 10); break;
        case 'h': usage(stdout); return DRAIN_DONE;
        default: usage(stderr); return DRAIN_USAGE;
        }
    }
    if (optind != argc || timeout <= 0) {
        usage(stderr);
        return DRAIN_USAGE;
    }
    if (cli_http_target(&h, PROG, url, cfgpath, 10) < 0)
        return DRAIN_USAGE;

    r = cli_http_request(&h, "POST", "/drain", &status, &body);
    if (r == CLI_HTTP_REFUSED)
        fprintf(stderr, PROG ": cannot reach the daemon at %s: %s\n", h.url,
                strerror(ECONNREFUSED));
    if (r < 0)
        goto out;
    if (status != 202) {
        fprintf(stderr, PROG ": %s answered %d: %s", h.url, status, body.p ? body.p : "");
        goto out;
    }
    printf("%s", body.p ? body.p : "");
    fflush(stdout);

    uint64_t t0 = clock_mono_ms(), last_print = 0, last_remaining = 0;
    int done = 0;
    for (;;) {
        uint64_t handed = 0, remaining = 0, now = clock_mono_ms();
        int was_done = done;
        r = drain_progress(&h, &handed, &remaining, &done);
        if (r == CLI_HTTP_REFUSED) {
            if (done) {
                printf("drained: the daemon has exited (%.1f s)\n", (double)(now - t0) / 1e3);
                rc = DRAIN_DONE;
            } else {
                fprintf(stderr, PROG ": the daemon exited before it reported the drain done "
                        "(last seen: %llu remaining); see its log\n",
                        (unsigned long long)last_remaining);
            }
            break;
        }
        if (r == 0)
            last_remaining = remaining;
        if (done && !was_done) {
            printf("drain done: %llu handed back; waiting for the daemon to exit\n",
                   (unsigned long long)handed);
            fflush(stdout);
        }
        if (r == 0 && now - last_print >= 1000) {
            printf("draining: %llu handed back, %llu remaining\n", (unsigned long long)handed,
                   (unsigned long long)remaining);
            fflush(stdout);
            last_print = now;
        }
        if (now - t0 >= (uint64_t)timeout * 1000) {
            fprintf(stderr, PROG ": still draining after %ld s; the daemon goes on\n", timeout);
            rc = DRAIN_TIMEOUT;
            break;
        }
        usleep(200000);
    }
out:
    strbuf_free(&body);
    return rc;
}
