/*
 * cli_routes.c -- `delay-bridge routes`: the routes of a running daemon,
 * listed, shown, put and deleted through its HTTP route API.
 *
 *   routes list            GET /routes: a table (--json: the daemon's JSON)
 *   routes get NAME        GET /routes/NAME: the route object, as JSON; what
 *                          `put` takes back
 *   routes put NAME FILE   PUT /routes/NAME with FILE's route object ("-":
 *                          standard input): added or replaced, stored and
 *                          running when this returns 0
 *   routes delete NAME     DELETE /routes/NAME: a route put through the API
 *
 * The daemon decides everything (cli_http.h: one request, the token from
 * DELAY_BRIDGE_HTTP_TOKEN); this tool only maps its answer to an exit
 * code a script can act on, and prints its error as it said it:
 *
 *   0 done   1 no such route (404)   2 usage   3 the daemon could not be
 *   asked (not running, 401, busy, an error of its own)   4 refused: the
 *   route is wrong (400, with the key path) or cannot change so (409: a
 *   route of the -c file, a change that waits for a restart)
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "cli.h"
#include "delay-bridge/strbuf.h"
#include "cli_http.h"

#define PROG "delay-bridge routes"
#define BODY_MAX (64 * 1024) /* the daemon's request body cap (http.c) */

enum { ROUTES_OK = 0, ROUTES_MISSING = 1, ROUTES_USAGE = 2, ROUTES_ERROR = 3,
       ROUTES_REFUSED = 4 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge routes list [--json] [--url URL | -c CONFIG]\n"
            "       delay-bridge routes get NAME [--url URL | -c CONFIG]\n"
            "       delay-bridge routes put NAME FILE|- [--json] [--url URL | -c CONFIG]\n"
            "       delay-bridge routes delete NAME [--json] [--url URL | -c CONFIG]\n"
            "\n"
            "The routes of the running daemon, through its HTTP route API (/routes). A\n"
            "route put here is stored in the daemon's routes file (routes_file, default\n"
            "WAL_DIR/routes.json) and runs before this returns; the routes of the -c file\n"
            "are changed by editing the file and reloading (SIGHUP), never here.\n"
            "\n"
            "  list           every running route: a table (retired: removed, still\n"
            "                 publishing what it holds)\n"
            "  get NAME       the route as JSON, every key; `put` takes it back\n"
            "  put NAME FILE  add or replace route NAME with FILE's JSON route object\n"
            "                 (\"-\": standard input)\n"
            "  delete NAME    remove a route put through the API\n"
            "\n"
            "  -u, --url URL        the endpoint, http://HOST:PORT (default: from -c, else\n"
            "                       http://127.0.0.1:9800)\n"
            "  -c, --config FILE    take the endpoint from this config's http.listen\n"
            "  -j, --json           print the daemon's JSON answer\n"
            "  -t, --timeout S      seconds to wait for the answer (default 10)\n"
            "  -h, --help\n"
            "\n"
            "Environment: DELAY_BRIDGE_HTTP_TOKEN, sent as a bearer token when set.\n"
            "Exit codes: 0 done, 1 no such route, 2 usage, 3 the daemon could not be asked\n"
            "(not running, 401, busy, error), 4 refused: a bad route (the key named) or a\n"
            "change it cannot make (a route of the -c file, one that waits for a restart).\n");
}

static const char *jstr(json_object *o, const char *key)
{
    json_object *v;

    if (!o || !json_object_object_get_ex(o, key, &v) || !v)
        return "-";
    return json_object_get_string(v);
}

/* FILE, or standard input for "-", into b. 0, or -1 after saying why. */
static int read_route(const char *file, struct strbuf *b)
{
    FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
    char buf[4096];
    size_t n;

    if (!f) {
        fprintf(stderr, PROG ": %s: %s\n", file, strerror(errno));
        return -1;
    }
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && b->len + n <= BODY_MAX)
        strbuf_append(b, buf, n);
    int bad = ferror(f), big = n > 0;
    if (f != stdin)
        fclose(f);
    if (bad || big)
        fprintf(stderr, PROG ": %s: %s\n", file,
                bad ? "cannot read it" : "larger than 64 KiB; the daemon takes no more");
    return bad || big ? -1 : 0;
}

/* The list as a table: one line a route, the columns as wide as their longest value. */
static void print_table(json_object *root)
{
    static const char *const heads[] = {"NAME", "SOURCE", "VHOST", "INGRESS EXCHANGE",
                                        "TARGET EXCHANGE", "QUEUE", "HELD", "STATE"};
    enum { NCOL = 8 };
    json_object *a = NULL;
    int w[NCOL];

    json_object_object_get_ex(root, "routes", &a);
    size_t n = a ? json_object_array_length(a) : 0;
    for (int c = 0; c < NCOL; c++)
        w[c] = (int)strlen(heads[c]);
    for (int pass = 0; pass < 2; pass++) {
        if (pass)
            printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %*s  %s\n", w[0], heads[0], w[1],
                   heads[1], w[2], heads[2], w[3], heads[3], w[4], heads[4], w[5], heads[5],
                   w[6], heads[6], heads[7]);
        for (size_t i = 0; i < n; i++) {
            json_object *r = json_object_array_get_idx(a, i), *t;
            const char *v[NCOL] = {jstr(r, "name"), jstr(r, "source"), jstr(r, "vhost"),
                                   jstr(r, "ingress_exchange"), jstr(r, "target_exchange"),
                                   jstr(r, "queue_type"), jstr(r, "held"), "running"};
            if (json_object_object_get_ex(r, "retry", &t))
                v[4] = "(retry)";
            if (json_object_object_get_ex(r, "retired", &t) && json_object_get_boolean(t))
                v[7] = "retired";
            for (int c = 0; c < NCOL && !pass; c++)
                if ((int)strlen(v[c]) > w[c])
                    w[c] = (int)strlen(v[c]);
            if (pass)
                printf("%-*s  %-*s  %-*s  %-*s  %-*s  %-*s  %*s  %s\n", w[0], v[0], w[1], v[1],
                       w[2], v[2], w[3], v[3], w[4], v[4], w[5], v[5], w[6], v[6], v[7]);
        }
    }
    if (!n)
        printf("(no routes)\n");
}

/* What the daemon answered a change, in one line. */
static void print_done(const char *cmd, const char *name, int status, json_object *root)
{
    json_object *v;

    if (!strcmp(cmd, "put")) {
        printf("route %s %s\n", name, status == 201 ? "added" : "replaced");
        return;
    }
    int retired = json_object_object_get_ex(root, "retired", &v) && json_object_get_boolean(v);
    printf("route %s removed", name);
    if (retired)
        printf(": retired, publishing the %s message(s) it holds when due", jstr(root, "held"));
    printf("\n");
}

int cli_routes_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},     {"config", required_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *url = NULL, *cfgpath = NULL, *cmd, *name = NULL, *method = "GET";
    struct strbuf path = STRBUF_INIT, req = STRBUF_INIT, body = STRBUF_INIT;
    struct cli_http h;
    json_object *root = NULL;
    long timeout = 10;
    int c, json = 0, status = 0, r, rc = ROUTES_ERROR, want;

    optind = 1;
    while ((c = getopt_long(argc, argv, "u:c:t:jh", opts, NULL)) != -1) {
        switch (c) {
        case 'u': url = optarg; break;
        case 'c': cfgpath = optarg; break;
        case 't': timeout = strtol(optarg, NULL, 10); break;
        case 'j': json = 1; break;
        case 'h': usage(stdout); return ROUTES_OK;
        default: usage(stderr); return ROUTES_USAGE;
        }
    }
    cmd = optind < argc ? argv[optind] : "";
    want = !strcmp(cmd, "list") ? 1 : !strcmp(cmd, "put") ? 3
           : !strcmp(cmd, "get") || !strcmp(cmd, "delete") ? 2 : -1;
    if (want < 0 || argc - optind != want || timeout <= 0 || (want > 1 && !argv[optind + 1][0])) {
        usage(stderr);
        return ROUTES_USAGE;
    }
    if (want > 1)
        name = argv[optind + 1];
    if (!strcmp(cmd, "put") && read_route(argv[optind + 2], &req) < 0)
        return ROUTES_USAGE;
    if (cli_http_target(&h, PROG, url, cfgpath, timeout) < 0)
        return ROUTES_USAGE;

    strbuf_puts(&path, "/routes");
    if (name) {
        strbuf_puts(&path, "/");
        cli_http_encode(&path, name);
        method = !strcmp(cmd, "put") ? "PUT" : !strcmp(cmd, "delete") ? "DELETE" : "GET";
    }
    r = cli_http_send(&h, method, path.p, !strcmp(method, "PUT") ? (req.p ? req.p : "") : NULL,
                      req.len, &status, &body);
    if (r == CLI_HTTP_REFUSED)
        fprintf(stderr, PROG ": cannot reach the daemon at %s: %s\n", h.url,
                strerror(ECONNREFUSED));
    if (r < 0)
        goto cleanup;
    root = json_tokener_parse(body.p ? body.p : "");
    if (status >= 200 && status < 300) {
        rc = ROUTES_OK;
        if (json || !strcmp(cmd, "get"))
            printf("%s", body.p ? body.p : "");
        else if (!strcmp(cmd, "list"))
            print_table(root);
        else
            print_done(cmd, name, status, root);
    } else if (status == 404 && name && root) {
        fprintf(stderr, PROG ": %s: %s\n", name, jstr(root, "error"));
        rc = ROUTES_MISSING;
    } else if ((status == 400 || status == 409) && root) {
        fprintf(stderr, PROG ": %s %s refused: %s\n", cmd, name ? name : "",
                jstr(root, "error"));
        rc = ROUTES_REFUSED;
    } else {
        fprintf(stderr, PROG ": %s answered %d: %s", h.url, status, body.p ? body.p : "");
    }

cleanup:
    json_object_put(root);
    strbuf_free(&path);
    strbuf_free(&req);
    strbuf_free(&body);
    return rc;
}
