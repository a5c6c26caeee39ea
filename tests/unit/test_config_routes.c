/*
 * test_config_routes.c -- the routes of issue 31: routes[].vhost and the
 * rules that become per vhost, routes_file, route_templates and a route's
 * "template", the routes file (config_add_routes, config_load_all) and its
 * text edits (config_store_put, config_store_delete). Messages are checked
 * whole where the key path is the point (ERRX).
 */
#include "delay-bridge/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "config_test.h"

/* a route in the given vhost (start extra with a comma) */
#define VROUTE(name, ex, q, target, vhost, extra)                                           \
    "{\"name\":\"" name "\",\"ingress_exchange\":\"" ex "\",\"ingress_queue\":\"" q        \
    "\",\"target_exchange\":\"" target "\",\"vhost\":\"" vhost "\"" extra "}"

static void test_vhost(void)
{
    struct config c;

    /* default: the first URI's vhost, %-decoded */
    if (OK(CFG(ROUTE("") "," ROUTE2(",\"vhost\":\"other\"")), &c) == 0) {
        CHECK_STR(c.routes[0].vhost, "");
        CHECK_STR(config_route_vhost(&c, &c.routes[0]), "dev");
        CHECK_STR(config_route_vhost(&c, &c.routes[1]), "other");
        config_free(&c);
    }
    static const struct {
        const char *uri, *vhost;
    } uris[] = {
        {"amqp://h/%2f", "/"}, {"amqp://h", "/"}, {"amqp://h/", ""}, {"amqp://h/a%2Fb", "a/b"},
    };
    for (size_t i = 0; i < sizeof uris / sizeof uris[0]; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"broker\":{\"uri\":[\"%s\",\"amqp://h2/x\"]}," WAL ",\"routes\":[" ROUTE("")
                 "]}",
                 uris[i].uri);
        if (OK(json, &c) == 0) {
            CHECK_STR(config_route_vhost(&c, &c.routes[0]), uris[i].vhost);
            CHECK_STR(c.uris[0], uris[i].uri);
            config_free(&c);
        }
    }
    /* no URI parsed: "/" */
    memset(&c, 0, sizeof c);
    struct config_route r;
    memset(&r, 0, sizeof r);
    CHECK_STR(config_route_vhost(&c, &r), "/");

    /* the key itself */
    ERRX(CFG(ROUTE(",\"vhost\":\"\"")), "test.json: routes[0].vhost: must not be empty");
    ERRX(CFG(ROUTE(",\"vhost\":5")), "test.json: routes[0].vhost: expected a string, got 5");
    ERRX(CFG(ROUTE(",\"vhost\":\"a\\tb\"")),
         "test.json: routes[0].vhost: expected a vhost name without control characters, got "
         "\"a\\u0009b\"");
    char json[1024], name[300];
    memset(name, 'v', 256);
    name[256] = '\0';
    snprintf(json, sizeof json, CFG(ROUTE(",\"vhost\":\"%s\"")), name);
    ERRX(json, "test.json: routes[0].vhost: too long (256 bytes); at most 255 bytes");
    name[255] = '\0';
    snprintf(json, sizeof json, CFG(ROUTE(",\"vhost\":\"%s\"")), name);
    if (OK(json, &c) == 0) {
        CHECK(strlen(c.routes[0].vhost) == 255);
        config_free(&c);
    }
}

/* Names are unique per vhost (the effective one), route names across the bridge. */
static void test_vhost_unique(void)
{
    struct config c;
#define A VROUTE("a", "x.delayed", "x.q", "x", "one", "")
    /* the same exchange and queue in two vhosts */
    if (OK(CFG(A "," VROUTE("b", "x.delayed", "x.q", "x", "two", "")), &c) == 0) {
        CHECK(c.nroutes == 2);
        config_free(&c);
    }
    /* ... and beside a route in the URI's vhost ("dev") */
    if (OK(CFG(A "," VROUTE("b", "x.delayed", "x.q", "x", "two", "") ","
               "{\"name\":\"c\",\"ingress_exchange\":\"x.delayed\",\"ingress_queue\":\"x.q\","
               "\"target_exchange\":\"x\"}"),
           &c) == 0)
        config_free(&c);
    ERRX(CFG(A "," VROUTE("b", "x.delayed", "y.q", "x", "one", "")),
         "test.json: routes[1].ingress_exchange: \"x.delayed\" is already used by routes[0]; "
         "expected a unique ingress_exchange");
    ERRX(CFG(A "," VROUTE("b", "y.delayed", "x.q", "x", "one", "")),
         "test.json: routes[1].ingress_queue: \"x.q\" is already used by routes[0]; expected a "
         "unique ingress_queue");
    /* the effective vhost: "dev" written out is the URI's */
    ERRX(CFG(VROUTE("a", "x.delayed", "x.q", "x", "dev", "") ","
             "{\"name\":\"c\",\"ingress_exchange\":\"x.delayed\",\"ingress_queue\":\"y.q\","
             "\"target_exchange\":\"x\"}"),
         "test.json: routes[1].ingress_exchange: \"x.delayed\" is already used by routes[0]; "
         "expected a unique ingress_exchange");
    /* names stay unique across vhosts */
    ERRX(CFG(A "," VROUTE("a", "y.delayed", "y.q", "x", "two", "")),
         "test.json: routes[1].name: \"a\" is already used by routes[0]; expected a unique name");
#undef A
}

/* Loops are followed within a vhost; wal.replicate's names clash only in the URI's. */
static void test_vhost_loops_repl(void)
{
    struct config c;
    /* a -> b's ingress in another vhost: no loop */
    if (OK(CFG(VROUTE("a", "a.in", "a.q", "b.in", "one", "") ","
               VROUTE("b", "b.in", "b.q", "a.in", "two", "")),
           &c) == 0)
        config_free(&c);
    ERRX(CFG(VROUTE("a", "a.in", "a.q", "b.in", "one", "") ","
             VROUTE("b", "b.in", "b.q", "a.in", "one", "")),
         "test.json: routes[0].target_exchange: routes form a loop (a -> b -> a): a message "
         "would be republished for ever; point a route at an exchange that is not another "
         "route's ingress_exchange");
    /* the loop by dead-letter exchange, likewise */
    ERR2(CFG(VROUTE("a", "a.in", "a.q", "t", "one",
                    ",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"b.in\"") ","
             VROUTE("b", "b.in", "b.q", "a.in", "one", "")),
         "test.json: routes[0].dead_letter_exchange: routes form a loop (a -> b -> a)", NULL);
    if (OK(CFG(VROUTE("a", "a.in", "a.q", "t", "one",
                      ",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"b.in\"") ","
               VROUTE("b", "b.in", "b.q", "a.in", "two", "")),
           &c) == 0)
        config_free(&c);

#define REPL ",\"wal\":{\"dir\":\"/w\",\"replicate\":{\"stream\":\"s\",\"lease_queue\":\"l\"}}"
#define RCFG(routes) "{" BROKER REPL ",\"routes\":[" routes "]}"
    ERRX(RCFG(VROUTE("a", "a.in", "s", "t", "dev", "")),
         "test.json: wal.replicate.stream: \"s\" is also routes[0].ingress_queue; expected a name "
         "no route uses");
    ERRX(RCFG("{\"name\":\"a\",\"ingress_exchange\":\"a.in\",\"ingress_queue\":\"l\","
              "\"target_exchange\":\"t\"}"),
         "test.json: wal.replicate.lease_queue: \"l\" is also routes[0].ingress_queue; expected "
         "a name no route uses");
    if (OK(RCFG(VROUTE("a", "a.in", "s", "t", "other", "") ","
                VROUTE("b", "b.in", "l", "t", "other", "")),
           &c) == 0)
        config_free(&c);
    /* a stream ingress and share_keys in another vhost: the rules of the URI's vhost */
    if (OK("{" BROKER "," WAL ",\"instance\":\"i1\",\"routes\":["
           VROUTE("a", "a.in", "a.q", "t", "other", ",\"queue_type\":\"stream\"") ","
           VROUTE("b", "b.in", "b.q", "t", "other", ",\"share_keys\":true") "]}",
           &c) == 0)
        config_free(&c);
    ERRX(RCFG(VROUTE("a", "a.in", "a.q", "t", "other", ",\"queue_type\":\"stream\"")),
         "test.json: routes[0].queue_type: \"stream\" cannot be combined with wal.replicate: the "
         "place read in the stream is kept beside the log, and a standby taking the log over "
         "would not have it; use \"classic\" or \"quorum\"");
#undef RCFG
#undef REPL
}

static void test_routes_file(void)
{
    struct config c;
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK_STR(c.routes_file, "/var/lib/delay-bridge/routes.json");
        config_free(&c);
    }
    if (OK("{" BROKER ",\"wal\":{\"dir\":\"/w//\"},\"routes\":[" ROUTE("") "]}", &c) == 0) {
        CHECK_STR(c.routes_file, "/w/routes.json");
        config_free(&c);
    }
    if (OK("{" BROKER ",\"wal\":{\"dir\":\"/\"},\"routes\":[" ROUTE("") "]}", &c) == 0) {
        CHECK_STR(c.routes_file, "/routes.json");
        config_free(&c);
    }
    if (OK(CFGX(",\"routes_file\":\"/etc/delay-bridge/api-routes.json\"", ROUTE("")), &c) == 0) {
        CHECK_STR(c.routes_file, "/etc/delay-bridge/api-routes.json");
        config_free(&c);
    }
    if (OK(CFGX(",\"routes_file\":\"\"", ROUTE("")), &c) == 0) {
        CHECK_STR(c.routes_file, "/var/lib/delay-bridge/routes.json");
        config_free(&c);
    }
    ERRX(CFGX(",\"routes_file\":[]", ROUTE("")),
         "test.json: routes_file: expected a string, got an array");
    static char json[8192], dir[4096];
    memset(dir, 'd', 4090);
    dir[0] = '/';
    dir[4090] = '\0';
    snprintf(json, sizeof json, "{" BROKER ",\"wal\":{\"dir\":\"%s\"},\"routes\":[" ROUTE("") "]}",
             dir);
    ERRX(json, "test.json: routes_file: the default, wal.dir + \"/routes.json\", would be 4102 "
               "bytes; at most 4095: set routes_file or shorten wal.dir");
}

/* a template "delayed" (start extra with a comma), and a config with templates T */
#define TPL(extra)                                                                           \
    "\"delayed\":{\"ingress_exchange\":\"{name}.delayed\",\"ingress_queue\":\"{name}.q\","    \
    "\"target_exchange\":\"{name}\",\"queue_type\":\"quorum\"" extra "}"
#define TCFG(t, routes) "{" BROKER "," WAL ",\"route_templates\":{" t "},\"routes\":[" routes "]}"
#define TCFG0(t) "{" BROKER "," WAL ",\"route_templates\":{" t "}}"

static void test_templates(void)
{
    struct config c;

    /* instances from the template's "routes", after the file's routes */
    if (OK(TCFG(TPL(",\"routes\":[\"orders\",\"mail\"]"), ROUTE2("")), &c) == 0) {
        CHECK(c.nroutes == 3);
        CHECK_STR(c.routes[0].name, "billing");
        CHECK_STR(c.routes[0].template_name, "");
        const struct config_route *r = &c.routes[1];
        CHECK_STR(r->name, "orders");
        CHECK_STR(r->template_name, "delayed");
        CHECK_STR(r->ingress_exchange, "orders.delayed");
        CHECK_STR(r->ingress_queue, "orders.q");
        CHECK_STR(r->target_exchange, "orders");
        CHECK(r->queue_type == QUEUE_QUORUM && r->source == CONFIG_SOURCE_FILE);
        CHECK_STR(c.routes[2].name, "mail");
        CHECK_STR(c.routes[2].ingress_queue, "mail.q");
        CHECK(c.ntemplates == 1);
        CHECK_STR(c.templates[0].name, "delayed");
        CHECK_STR(c.templates[0].json,
                  "{\"ingress_exchange\":\"{name}.delayed\",\"ingress_queue\":\"{name}.q\","
                  "\"target_exchange\":\"{name}\",\"queue_type\":\"quorum\","
                  "\"routes\":[\"orders\",\"mail\"]}");
        config_free(&c);
    }
    /* a route naming a template, with keys of its own over it; no "routes" at all */
    if (OK(TCFG(TPL(",\"prefetch\":7,\"vhost\":\"v-{name}\""),
                "{\"name\":\"pay\",\"template\":\"delayed\"},"
                "{\"name\":\"ship\",\"template\":\"delayed\",\"queue_type\":\"classic\","
                "\"ingress_queue\":\"own.q\"}"),
           &c) == 0) {
        CHECK(c.nroutes == 2);
        CHECK_STR(c.routes[0].ingress_exchange, "pay.delayed");
        CHECK_STR(c.routes[0].vhost, "v-pay");
        CHECK(c.routes[0].prefetch == 7 && c.routes[0].queue_type == QUEUE_QUORUM);
        CHECK_STR(c.routes[0].template_name, "delayed");
        CHECK_STR(c.routes[1].ingress_queue, "own.q");
        CHECK(c.routes[1].queue_type == QUEUE_CLASSIC && c.routes[1].prefetch == 7);
        config_free(&c);
    }
    /* max_held from the template, and a route's own over it */
    if (OK(TCFG(TPL(",\"max_held\":500"),
                "{\"name\":\"pay\",\"template\":\"delayed\"},"
                "{\"name\":\"ship\",\"template\":\"delayed\",\"max_held\":0}"),
           &c) == 0) {
        CHECK(c.routes[0].max_held == 500 && c.routes[1].max_held == 0);
        config_free(&c);
    }
    if (OK(TCFG0(TPL(",\"routes\":[\"a\"]")), &c) == 0) {
        CHECK(c.nroutes == 1 && strcmp(c.routes[0].ingress_queue, "a.q") == 0);
        config_free(&c);
    }
    if (OK(TCFG(TPL(",\"routes\":[\"a\"]"), ""), &c) == 0) { /* "routes": [] */
        CHECK(c.nroutes == 1);
        config_free(&c);
    }
    /* "{name}" in nested strings too (a retry route's parking); "/" kept as written */
    if (OK(TCFG0("\"r\":{\"ingress_exchange\":\"{name}.retry\",\"ingress_queue\":\"{name}/{name}\","
                 "\"retry\":{\"parking_exchange\":\"{name}.parked\",\"queues\":{\"{x}\":{}}},"
                 "\"routes\":[\"o\"]}"),
           &c) == 0) {
        CHECK_STR(c.routes[0].ingress_queue, "o/o");
        CHECK(c.routes[0].retry && strcmp(c.routes[0].retry->parking_exchange, "o.parked") == 0);
        CHECK(c.routes[0].retry && strcmp(c.routes[0].retry->queues[0].queue, "{x}") == 0);
        CHECK(strstr(c.templates[0].json, "{name}/{name}") != NULL);
        config_free(&c);
    }

    /* no route in all */
    ERRX(TCFG0(TPL("")), "test.json: routes: no routes, here or in route_templates' routes; "
                         "expected at least one");
    ERRX(TCFG(TPL(",\"routes\":[]"), ""),
         "test.json: routes: no routes, here or in route_templates' routes; expected at least one");
}

static void test_template_errors(void)
{
    /* the template's shape */
    ERRX("{" BROKER "," WAL ",\"route_templates\":[],\"routes\":[" ROUTE("") "]}",
         "test.json: route_templates: expected an object of template name: template, got an "
         "array");
    ERRX(TCFG("\"a b\":{}", ROUTE("")),
         "test.json: route_templates: template name \"a b\": expected 1..255 letters, digits, "
         "'.', '_' or '-'");
    ERRX(TCFG("\"delayed\":5", ROUTE("")),
         "test.json: route_templates.delayed: expected an object of route keys, got 5");
    ERR3(TCFG(TPL(",\"name\":\"x\""), ROUTE("")), "test.json: route_templates.delayed.name: ",
         "unknown key \"name\"; expected one of: ingress_exchange", "vhost, routes");
    ERR2(TCFG(TPL(",\"template\":\"x\""), ROUTE("")),
         "test.json: route_templates.delayed.template: unknown key", NULL);
    ERRX(TCFG("\"delayed\":{\"ingress_queue\":\"{nmae}.q\"}", ROUTE("")),
         "test.json: route_templates.delayed.ingress_queue: \"{nmae}.q\": only \"{name}\" may "
         "stand in braces (replaced by each route's name)");
    ERRX(TCFG("\"delayed\":{\"ingress_queue\":\"{name}.{\"}", ROUTE("")),
         "test.json: route_templates.delayed.ingress_queue: \"{name}.{\": only \"{name}\" may "
         "stand in braces (replaced by each route's name)");
    ERRX(TCFG("\"d\":{\"retry\":{\"reasons\":[\"{x}\"]}}", ROUTE("")),
         "test.json: route_templates.d.retry.reasons[0]: \"{x}\": only \"{name}\" may stand in "
         "braces (replaced by each route's name)");
    ERRX(TCFG(TPL(",\"routes\":\"orders\""), ROUTE("")),
         "test.json: route_templates.delayed.routes: expected an array of route names, got "
         "\"orders\"");
    ERRX(TCFG(TPL(",\"routes\":[\"a\",5]"), ROUTE("")),
         "test.json: route_templates.delayed.routes[1]: expected a route name (1..255 letters, "
         "digits, '.', '_' or '-'), got 5");
    ERRX(TCFG(TPL(",\"routes\":[\"a/b\"]"), ROUTE("")),
         "test.json: route_templates.delayed.routes[0]: expected a route name (1..255 letters, "
         "digits, '.', '_' or '-'), got \"a/b\"");

    /* an instance's values: the template's key path */
    ERRX(TCFG(TPL(",\"prefetch\":0,\"routes\":[\"a\"]"), ROUTE("")),
         "test.json: route_templates.delayed.prefetch: expected an integer 1..65535, got 0");
    ERRX(TCFG(TPL(",\"max_held\":-1,\"routes\":[\"a\"]"), ROUTE("")),
         "test.json: route_templates.delayed.max_held: expected an integer 0..4294967295, got -1");
    ERRX(TCFG("\"d\":{\"ingress_exchange\":\"x\",\"ingress_queue\":\"{name}\\u0000\","
              "\"target_exchange\":\"t\",\"routes\":[\"a\"]}", ROUTE("")),
         "test.json: route_templates.d.ingress_queue: must not contain a NUL character (\\u0000)");
    static char json[4096], q[300];
    memset(q, 'q', 250);
    q[250] = '\0';
    snprintf(json, sizeof json,
             TCFG("\"d\":{\"ingress_exchange\":\"{name}.x\",\"ingress_queue\":\"{name}%s\","
                  "\"target_exchange\":\"t\",\"routes\":[\"abcde\",\"abcdef\"]}", ROUTE("")), q);
    ERRX(json, "test.json: route_templates.d.ingress_queue: too long (256 bytes); at most 255 "
               "bytes");
    ERRX(TCFG(TPL(",\"target_exchange\":\"{name}.delayed\",\"routes\":[\"a\"]"), ROUTE("")),
         "test.json: route_templates.delayed.target_exchange: same as ingress_exchange "
         "\"a.delayed\": messages would loop; expected the exchange consumers read from");
    /* between routes: the instance's entry for its name, the template's key for the rest */
    ERRX(TCFG(TPL(",\"routes\":[\"a\",\"billing\"]"), ROUTE2("")),
         "test.json: route_templates.delayed.routes[1]: \"billing\" is already used by "
         "routes[0]; expected a unique name");
    ERRX(TCFG(TPL(",\"routes\":[\"a\",\"a\"]"), ROUTE2("")),
         "test.json: route_templates.delayed.routes[1]: \"a\" is already used by "
         "route_templates.delayed.routes[0]; expected a unique name");
    ERRX(TCFG("\"d\":{\"ingress_exchange\":\"{name}.x\",\"ingress_queue\":\"shared.q\","
              "\"target_exchange\":\"t\",\"routes\":[\"a\",\"b\"]}", ROUTE("")),
         "test.json: route_templates.d.ingress_queue: \"shared.q\" is already used by "
         "route_templates.d.routes[0]; expected a unique ingress_queue");
    ERRX(TCFG("\"d\":{\"ingress_exchange\":\"{name}.x\",\"ingress_queue\":\"{name}.q\","
              "\"target_exchange\":\"f.x\",\"routes\":[\"a\"]}",
              "{\"name\":\"f\",\"ingress_exchange\":\"f.x\",\"ingress_queue\":\"f.q\","
              "\"target_exchange\":\"a.x\"}"),
         "test.json: routes[0].target_exchange: routes form a loop (f -> a -> f): a message "
         "would be republished for ever; point a route at an exchange that is not another "
         "route's ingress_exchange");

    /* a route naming a template */
    ERRX(TCFG(TPL(""), "{\"name\":\"a\",\"template\":\"nope\"}"),
         "test.json: routes[0].template: \"nope\" is not one of route_templates (1); expected a "
         "template's name");
    ERRX(TCFG(TPL(""), "{\"name\":\"a\",\"template\":5}"),
         "test.json: routes[0].template: expected a string, got 5");
    ERRX(TCFG(TPL(""), "{\"template\":\"delayed\"}"),
         "test.json: routes[0].name: missing; expected a string");
    ERRX(TCFG("\"t\":{\"ingress_exchange\":\"{name}.x\",\"ingress_queue\":\"{name}.q\"}",
              "{\"name\":\"a\",\"template\":\"t\"}"),
         "test.json: routes[0].target_exchange: missing; expected a string");
    ERRX(TCFG(TPL(""), "{\"name\":\"a\",\"template\":\"delayed\",\"prefetch\":-1}"),
         "test.json: routes[0].prefetch: expected an integer 1..65535, got -1");
    ERRX(CFG("{\"name\":\"a\",\"template\":\"delayed\"}"),
         "test.json: routes[0].template: \"delayed\" is not one of route_templates (0); expected "
         "a template's name");

    /* how many */
    static char big[65536];
    size_t o = (size_t)snprintf(big, sizeof big, "{" BROKER "," WAL ",\"route_templates\":{");
    for (int i = 0; i < 65; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"t%d\":{}", i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "},\"routes\":[" ROUTE("") "]}");
    ERRX(big, "test.json: route_templates: 65 templates; at most 64");
    o = (size_t)snprintf(big, sizeof big, TCFG0(TPL(",\"routes\":[")));
    o -= strlen("}}}"); /* the tail, written again below */
    for (int i = 0; i < 256; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"r%d\"", i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]}}}");
    struct config c;
    if (OK(big, &c) == 0) {
        CHECK(c.nroutes == 256);
        config_free(&c);
    }
    o = (size_t)snprintf(big, sizeof big, TCFG(TPL(",\"routes\":["), ROUTE2("")));
    o -= strlen("}},\"routes\":[" ROUTE2("") "]}");
    for (int i = 0; i < 256; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"r%d\"", i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]}},\"routes\":[" ROUTE2("") "]}");
    ERRX(big, "test.json: route_templates.delayed.routes[255]: one route too many; at most 256 "
              "routes in all (routes, route_templates' routes and the routes file's)");
}

/* a routes file around the given routes array body */
#define STORE(routes) "{\"version\":1,\"routes\":[" routes "]}"
#define PAY(extra)                                                                           \
    "{\"name\":\"pay\",\"ingress_exchange\":\"pay.x\",\"ingress_queue\":\"pay.q\","          \
    "\"target_exchange\":\"pay\"" extra "}"

static const struct config_route zero_route;

/* config_add_routes(store) on a config parsed from base must fail with want, c unchanged. */
static void expect_add_err_at(int line, const char *base, const char *store, const char *want)
{
    struct config c;
    char err[512] = "";
    int shadowed = -1;
    if (expect_ok_at(line, base, &c) != 0)
        return;
    int n0 = c.nroutes;
    int rc = config_add_routes(&c, store, "routes.json", &shadowed, err, sizeof err);
    if (rc != -1 || strcmp(err, want) != 0)
        check_failed(__FILE__, line, "config_add_routes() == -1 with the message",
                     "rc=%d\n  got:  %s\n  want: %s\n  store: %s", rc, rc == 0 ? "(none)" : err,
                     want, store);
    if (c.nroutes != n0)
        check_failed(__FILE__, line, "c.nroutes == n0", "%d routes after an error, want %d",
                     c.nroutes, n0);
    for (int i = n0; i < CONFIG_MAX_ROUTES; i++)
        if (memcmp(&c.routes[i], &zero_route, sizeof zero_route) != 0) {
            check_failed(__FILE__, line, "routes beyond nroutes zero", "routes[%d] is not", i);
            break;
        }
    config_free(&c);
}
#define ADD_ERR(base, store, want) expect_add_err_at(__LINE__, base, store, want)

static void test_add_routes(void)
{
    struct config c;
    char err[512] = "";
    int shadowed = -1;

    if (OK(TCFG(TPL(""), ROUTE("")), &c) != 0)
        return;
    /* the -c file's "orders" wins; "t1" is made from a template of the -c file */
    CHECK(config_add_routes(&c,
                            STORE(PAY(",\"vhost\":\"v\"") ","
                                  "{\"name\":\"orders\",\"ingress_exchange\":\"o2\"},"
                                  "{\"name\":\"t1\",\"template\":\"delayed\",\"prefetch\":3}"),
                            "routes.json", &shadowed, err, sizeof err) == 0,
          "%s", err);
    CHECK(shadowed == 1 && c.nroutes == 3);
    CHECK_STR(c.routes[0].name, "orders");
    CHECK(c.routes[0].source == CONFIG_SOURCE_FILE);
    CHECK_STR(c.routes[1].name, "pay");
    CHECK_STR(c.routes[1].vhost, "v");
    CHECK(c.routes[1].source == CONFIG_SOURCE_STORE);
    CHECK_STR(c.routes[2].ingress_queue, "t1.q");
    CHECK_STR(c.routes[2].template_name, "delayed");
    CHECK(c.routes[2].prefetch == 3 && c.routes[2].source == CONFIG_SOURCE_STORE);
    /* a second routes file's route clashes with the first's: not shadowed */
    CHECK(config_add_routes(&c, STORE(PAY("")), "more.json", &shadowed, err, sizeof err) == -1);
    CHECK_STR(err, "more.json: routes[pay].name: \"pay\" is already used by routes[pay]; "
                   "expected a unique name");
    CHECK(c.nroutes == 3);
    /* empty texts: nothing */
    CHECK(config_add_routes(&c, "", "r", &shadowed, err, sizeof err) == 0 && shadowed == 0);
    CHECK(config_add_routes(&c, " \n", "r", &shadowed, err, sizeof err) == 0);
    CHECK(config_add_routes(&c, "{\"version\":1}", "r", &shadowed, err, sizeof err) == 0);
    CHECK(config_add_routes(&c, STORE(""), "r", NULL, err, sizeof err) == 0 && c.nroutes == 3);
    config_free(&c);

    /* a retired route of the file neither shadows nor clashes */
    if (OK(CFG(ROUTE("") "," ROUTE2("")), &c) == 0) {
        c.routes[0].retired = 1;
        CHECK(config_add_routes(&c,
                                STORE("{\"name\":\"orders\",\"ingress_exchange\":\"orders.delayed\","
                                      "\"ingress_queue\":\"orders.delayed.q\","
                                      "\"target_exchange\":\"t\"}"),
                                "routes.json", &shadowed, err, sizeof err) == 0,
              "%s", err);
        CHECK(shadowed == 0 && c.nroutes == 3);
        config_free(&c);
    }

    /* the file's format */
    const char *base = CFG(ROUTE(""));
    ADD_ERR(base, "{\"version\":1,", "routes.json:1:14: invalid JSON: unexpected end of file "
                                     "(an unclosed { [ or \"?)");
    ADD_ERR(base, "[]", "routes.json: expected a JSON object at the top level");
    ADD_ERR(base, "{\"routes\":[]}",
            "routes.json: version: missing; expected 1 (the routes file's format)");
    ADD_ERR(base, "{\"version\":2,\"routes\":[]}",
            "routes.json: version: expected 1, got 2; written by a newer delay-bridge?");
    ADD_ERR(base, "{\"version\":\"1\"}",
            "routes.json: version: expected 1, got \"1\"; written by a newer delay-bridge?");
    ADD_ERR(base, "{\"version\":1,\"extra\":0}",
            "routes.json: extra: unknown key \"extra\"; expected one of: version, routes");
    ADD_ERR(base, "{\"version\":1,\"routes\":{}}",
            "routes.json: routes: expected an array, got an object");
    /* a route: by its name, else its index */
    ADD_ERR(base, STORE(PAY(",\"prefetch\":0")),
            "routes.json: routes[pay].prefetch: expected an integer 1..65535, got 0");
    ADD_ERR(base, STORE(PAY("") ",{\"ingress_exchange\":\"x\"}"),
            "routes.json: routes[1].name: missing; expected a string");
    ADD_ERR(base, STORE(PAY("") ",5"), "routes.json: routes[1]: expected an object, got 5");
    ADD_ERR(base, STORE("{\"name\":\"a b\"}"),
            "routes.json: routes[0].name: \"a b\": only letters, digits, '.', '_' and '-' are "
            "allowed");
    ADD_ERR(base, STORE(PAY(",\"template\":\"none\"")),
            "routes.json: routes[pay].template: \"none\" is not one of route_templates (0); "
            "expected a template's name");
    /*
     * a retry route appended, then an error: freed, c as it was. The list is every route
     * key in the schema's order: the first and last named here, the rest from config_keys[]
     * (so that a key added to the schema needs no edit of this test).
     */
    char want[1024] = "routes.json: routes[pay].bad: unknown key \"bad\"; expected one of: ";
    for (int i = 0; i < config_nkeys; i++)
        if (config_keys[i].sect == CONFIG_SECT_ROUTE)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
                     want[strlen(want) - 2] == ':' ? "" : ", ", config_keys[i].key);
    static const char tail[] = ", delayed_exchanges, vhost, template";
    CHECK(strstr(want, "one of: name, ingress_exchange, ingress_queue, target_exchange, ") &&
              strcmp(want + strlen(want) - (sizeof tail - 1), tail) == 0,
          "%s", want);
    ADD_ERR(base, STORE("{\"name\":\"r\",\"ingress_exchange\":\"r.x\",\"ingress_queue\":\"r.q\","
                        "\"retry\":{\"parking_exchange\":\"p\",\"queues\":{\"w\":{}}}}," PAY(",\"bad\":1")),
            want);

    /* the rules between routes, over the whole set */
    ADD_ERR(base, STORE(PAY(",\"ingress_exchange\":\"orders.delayed\"")),
            "routes.json: routes[pay].ingress_exchange: \"orders.delayed\" is already used by "
            "routes[orders]; expected a unique ingress_exchange");
    ADD_ERR(base, STORE(PAY(",\"ingress_queue\":\"orders.delayed.q\",\"vhost\":\"dev\"")),
            "routes.json: routes[pay].ingress_queue: \"orders.delayed.q\" is already used by "
            "routes[orders]; expected a unique ingress_queue");
    if (OK(base, &c) == 0) { /* the same names in another vhost */
        CHECK(config_add_routes(&c,
                                STORE(PAY(",\"ingress_exchange\":\"orders.delayed\","
                                          "\"ingress_queue\":\"orders.delayed.q\","
                                          "\"vhost\":\"other\"")),
                                "routes.json", &shadowed, err, sizeof err) == 0,
              "%s", err);
        config_free(&c);
    }
    ADD_ERR(base, STORE(PAY(",\"ingress_exchange\":\"orders\",\"target_exchange\":\"orders.delayed\"")),
            "routes.json: routes[pay].target_exchange: routes form a loop (pay -> orders -> pay): "
            "a message would be republished for ever; point a route at an exchange that is not "
            "another route's ingress_exchange");
    ADD_ERR(base, STORE(PAY(",\"share_keys\":true")),
            "routes.json: routes[pay].share_keys: needs \"instance\" set: each bridge's key-event "
            "queue is named after it");
    ADD_ERR("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{\"stream\":\"s\"}},\"routes\":["
            ROUTE("") "]}",
            STORE(PAY(",\"ingress_queue\":\"s\"")),
            "routes.json: wal.replicate.stream: \"s\" is also routes[pay].ingress_queue; expected "
            "a name no route uses");
    ADD_ERR("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{}},\"routes\":[" ROUTE("") "]}",
            STORE(PAY(",\"queue_type\":\"stream\"")),
            "routes.json: routes[pay].queue_type: \"stream\" cannot be combined with "
            "wal.replicate: the place read in the stream is kept beside the log, and a standby "
            "taking the log over would not have it; use \"classic\" or \"quorum\"");

    /* how many in all */
    static char big[16384];
    size_t o = (size_t)snprintf(big, sizeof big, "{" BROKER "," WAL ",\"route_templates\":{"
                                "\"delayed\":{\"ingress_exchange\":\"{name}.x\","
                                "\"ingress_queue\":\"{name}.q\",\"target_exchange\":\"t\","
                                "\"routes\":[");
    for (int i = 0; i < 255; i++)
        o += (size_t)snprintf(big + o, sizeof big - o, "%s\"r%d\"", i ? "," : "", i);
    snprintf(big + o, sizeof big - o, "]}},\"routes\":[" ROUTE("") "]}");
    ADD_ERR(big, STORE(PAY("")), "routes.json: routes[pay]: one route too many; at most 256 "
                                 "routes in all (routes, route_templates' routes and the routes "
                                 "file's)");
    if (OK(big, &c) == 0) { /* a shadowed one is not counted */
        CHECK(config_add_routes(&c, STORE(ROUTE("")), "r", &shadowed, err, sizeof err) == 0);
        CHECK(shadowed == 1 && c.nroutes == 256);
        config_free(&c);
    }
}

static void put_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "%s: %s", path, strerror(errno));
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* config_load_all(path) with stderr (the log) caught in log (at most n bytes). */
static int load_all_logged(struct config *c, const char *path, char **text, char *err,
                           size_t errlen, char *log, size_t n)
{
    char lp[] = "/tmp/test_config_routes.log.XXXXXX";
    int fd = mkstemp(lp), saved = dup(2);
    fflush(stderr);
    dup2(fd, 2);
    int rc = config_load_all(c, path, text, err, errlen);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, log, n - 1, 0);
    log[got > 0 ? got : 0] = '\0';
    close(fd);
    unlink(lp);
    return rc;
}

static void test_load_all(void)
{
    char dir[] = "/tmp/test_config_routes.XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char cfg[256], routes[256], json[1024], err[512], log[4096];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(routes, sizeof routes, "%s/routes.json", dir);
    snprintf(json, sizeof json, "{" BROKER ",\"wal\":{\"dir\":\"%s\"},\"routes\":[" ROUTE("") "]}",
             dir);
    put_file(cfg, json);
    chmod(cfg, 0600); /* no warning about the password in it */
    struct config c;
    char *text = NULL;

    /* no routes file: the file's routes; the text is the file's */
    CHECK(load_all_logged(&c, cfg, &text, err, sizeof err, log, sizeof log) == 0, "%s", err);
    CHECK(c.nroutes == 1 && strcmp(c.routes_file, routes) == 0);
    CHECK(text && strcmp(text, json) == 0);
    CHECK_STR(err, "");
    free(text);
    text = NULL;
    config_free(&c);

    /* the routes file's routes after the file's; a shadowed one warns once */
    put_file(routes, STORE(PAY("") "," ROUTE(",\"prefetch\":5")));
    CHECK(load_all_logged(&c, cfg, NULL, err, sizeof err, log, sizeof log) == 0, "%s", err);
    CHECK(c.nroutes == 2 && strcmp(c.routes[1].name, "pay") == 0);
    CHECK(c.routes[0].prefetch == 1000 && c.routes[1].source == CONFIG_SOURCE_STORE);
    CHECK(strstr(log, "level=warn mod=config msg=\"a route of the routes file has the name of a "
                      "route of the configuration file, which wins; the routes file's is not "
                      "used\"") != NULL && strstr(log, " route=orders ") != NULL,
          "log: %s", log);
    CHECK(strchr(log, '\n') == log + strlen(log) - 1, "one line: %s", log);
    config_free(&c);
    /* config_load alone does not read it */
    CHECK(config_load(&c, cfg, err, sizeof err) == 0 && c.nroutes == 1);
    config_free(&c);

    /* a bad routes file: the error names it, nothing is loaded */
    put_file(routes, STORE(PAY(",\"prefetch\":0")));
    CHECK(load_all_logged(&c, cfg, &text, err, sizeof err, log, sizeof log) == -1);
    char want[512];
    snprintf(want, sizeof want, "%s: routes[pay].prefetch: expected an integer 1..65535, got 0",
             routes);
    CHECK_STR(err, want);
    CHECK(is_zero(&c) && text == NULL);
    put_file(routes, "{\"version\":1,\n\"routes\":[}");
    CHECK(load_all_logged(&c, cfg, NULL, err, sizeof err, log, sizeof log) == -1);
    snprintf(want, sizeof want, "%s:2:11: invalid JSON", routes);
    CHECK(strncmp(err, want, strlen(want)) == 0, "got %s", err);
    /* unreadable: a directory */
    unlink(routes);
    CHECK(mkdir(routes, 0700) == 0);
    CHECK(load_all_logged(&c, cfg, NULL, err, sizeof err, log, sizeof log) == -1);
    snprintf(want, sizeof want, "%s: cannot read: Is a directory", routes);
    CHECK_STR(err, want);
    rmdir(routes);
    /* routes_file set: that file */
    snprintf(json, sizeof json, "{" BROKER ",\"wal\":{\"dir\":\"%s\"},\"routes_file\":\"%s/r2\","
             "\"routes\":[" ROUTE("") "]}", dir, dir);
    put_file(cfg, json);
    snprintf(routes, sizeof routes, "%s/r2", dir);
    put_file(routes, "");
    CHECK(load_all_logged(&c, cfg, NULL, err, sizeof err, log, sizeof log) == 0, "%s", err);
    CHECK(c.nroutes == 1);
    config_free(&c);
    put_file(routes, STORE(PAY("")));
    CHECK(load_all_logged(&c, cfg, NULL, err, sizeof err, log, sizeof log) == 0, "%s", err);
    CHECK(c.nroutes == 2);
    config_free(&c);
    unlink(routes);
    /* the -c file's errors as config_load's */
    unlink(cfg);
    CHECK(config_load_all(&c, cfg, &text, err, sizeof err) == -1 && text == NULL);
    CHECK(strstr(err, "cannot open: No such file") != NULL);
    rmdir(dir);
}

/* config_store_put() must give exactly want (NULL: fail with the message why). */
static void expect_put_at(int line, const char *store, const char *name, const char *route,
                          const char *want, const char *why)
{
    char err[512] = "";
    char *got = config_store_put(store, name, route, err, sizeof err);
    if (want ? !got || strcmp(got, want) != 0 : got || strcmp(err, why) != 0)
        check_failed(__FILE__, line, "config_store_put()", "\n  got:  %s\n  want: %s",
                     got ? got : err, want ? want : why);
    free(got);
}
#define PUT(store, name, route, want) expect_put_at(__LINE__, store, name, route, want, NULL)
#define PUT_ERR(store, name, route, why) expect_put_at(__LINE__, store, name, route, NULL, why)

static void test_store(void)
{
    const char *one = "{\n  \"version\": 1,\n  \"routes\": [\n    {\n      \"name\": \"a\",\n"
                      "      \"template\": \"delayed\"\n    }\n  ]\n}\n";
    /* into an empty file; the name first, "/" as written */
    PUT(NULL, "a", "{\"template\":\"delayed\"}", one);
    PUT("", "a", "{\"template\":\"delayed\",\"name\":\"a\"}", one);
    PUT(" \n", "a", "{\"template\":\"delayed\"}", one);
    char *s = config_store_put(one, "b", "{\"vhost\":\"/\",\"prefetch\":2.50}", NULL, 0);
    CHECK_STR(s, "{\n  \"version\": 1,\n  \"routes\": [\n    {\n      \"name\": \"a\",\n"
                 "      \"template\": \"delayed\"\n    },\n    {\n      \"name\": \"b\",\n"
                 "      \"vhost\": \"/\",\n      \"prefetch\": 2.50\n    }\n  ]\n}\n");
    /* replaced where it stands */
    char *s2 = config_store_put(s, "a", "{\"ingress_queue\":\"q\"}", NULL, 0);
    CHECK_STR(s2, "{\n  \"version\": 1,\n  \"routes\": [\n    {\n      \"name\": \"a\",\n"
                  "      \"ingress_queue\": \"q\"\n    },\n    {\n      \"name\": \"b\",\n"
                  "      \"vhost\": \"/\",\n      \"prefetch\": 2.50\n    }\n  ]\n}\n");
    /* what it writes is a routes file */
    struct config c;
    char err[512];
    int shadowed, found = -1;
    char *s3 = config_store_put(NULL, "a", "{\"template\":\"delayed\",\"prefetch\":3}", NULL, 0);
    char *s4 = config_store_put(s3, "b", "{\"template\":\"delayed\",\"vhost\":\"/\"}", NULL, 0);
    if (OK(TCFG(TPL(""), ROUTE("")), &c) == 0) {
        CHECK(config_add_routes(&c, s4, "r", &shadowed, err, sizeof err) == 0, "%s", err);
        CHECK(c.nroutes == 3 && c.routes[1].prefetch == 3);
        CHECK_STR(config_route_vhost(&c, &c.routes[2]), "/");
        config_free(&c);
    }
    free(s3);
    free(s4);

    /* deleted */
    char *d = config_store_delete(s2, "b", &found, err, sizeof err);
    CHECK(found == 1);
    CHECK_STR(d, "{\n  \"version\": 1,\n  \"routes\": [\n    {\n      \"name\": \"a\",\n"
                 "      \"ingress_queue\": \"q\"\n    }\n  ]\n}\n");
    char *d2 = config_store_delete(d, "b", &found, err, sizeof err);
    CHECK(found == 0 && d2 && strcmp(d, d2) == 0);
    char *d3 = config_store_delete(d, "a", &found, err, sizeof err);
    CHECK(found == 1);
    CHECK_STR(d3, "{\n  \"version\": 1,\n  \"routes\": [\n  ]\n}\n");
    char *d4 = config_store_delete(NULL, "a", &found, err, sizeof err);
    CHECK(found == 0);
    CHECK_STR(d4, "{\n  \"version\": 1,\n  \"routes\": [\n  ]\n}\n");
    free(d);
    free(d2);
    free(d3);
    free(d4);
    free(s);
    free(s2);
    /* other keys and entries that are not routes are kept, unchecked */
    PUT("{\"version\":1,\"x\":[],\"routes\":[5,{\"name\":\"a\"}]}", "a", "{}",
        "{\n  \"version\": 1,\n  \"x\": [\n  ],\n  \"routes\": [\n    5,\n    {\n"
        "      \"name\": \"a\"\n    }\n  ]\n}\n");
    PUT("{}", "a", "{\"prefetch\":\"x\"}",
        "{\n  \"routes\": [\n    {\n      \"name\": \"a\",\n      \"prefetch\": \"x\"\n    }\n"
        "  ]\n}\n");

    /* what it refuses */
    PUT_ERR(NULL, "a", "{\"template\":", "route: invalid JSON at 1:13: unexpected end of file "
                                        "(an unclosed { [ or \"?)");
    PUT_ERR(NULL, "a", "{\"a\":01}", "route: invalid JSON at 1:8: number expected");
    PUT_ERR(NULL, "a", "", "route: empty; expected a JSON object");
    PUT_ERR(NULL, "a", "[]", "route: expected a JSON object, got an array");
    PUT_ERR(NULL, "a", "{\"name\":\"b\"}",
            "route: name: \"b\" differs from the name it is put as, \"a\"");
    PUT_ERR(NULL, "a", "{\"name\":5}", "route: name: 5 differs from the name it is put as, \"a\"");
    PUT_ERR("{\"version\":1,", "a", "{}", "routes file: invalid JSON at 1:14: unexpected end of "
                                         "file (an unclosed { [ or \"?)");
    PUT_ERR("7", "a", "{}", "routes file: expected a JSON object, got 7");
    PUT_ERR("{\"routes\":{}}", "a", "{}",
            "routes file: routes: expected an array, got an object");
    CHECK(config_store_delete("[", "a", &found, err, sizeof err) == NULL);
    CHECK_STR(err, "routes file: invalid JSON at 1:2: unexpected end of file (an unclosed { [ "
                   "or \"?)");
}

static const struct check_case cases[] = {
    {"store", test_store},
    {"load_all", test_load_all},
    {"add_routes", test_add_routes},
    {"templates", test_templates},
    {"template_errors", test_template_errors},
    {"routes_file", test_routes_file},
    {"vhost", test_vhost},
    {"vhost_unique", test_vhost_unique},
    {"vhost_loops_repl", test_vhost_loops_repl},
};

int main(int argc, char **argv)
{
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    return CHECK_MAIN(argc, argv, cases);
}
