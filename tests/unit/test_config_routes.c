/*
 * test_config_routes.c -- the routes of issue 31: routes[].vhost and the
 * rules that become per vhost, routes_file, route_templates and a route's
 * "template", the routes file (config_add_routes, config_load_all) and its
 * text edits (config_store_put, config_store_delete). Messages are checked
 * whole where the key path is the point (ERRX).
 */
#include "delay-bridge/config.h"

#include <errno.h>
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

static const struct check_case cases[] = {
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
