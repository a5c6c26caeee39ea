/*
 * test_api_routes.c -- the route API without the daemon: a route as GET
 * /routes shows it (api_route_json), a PUT body made a routes file entry
 * (api_route_body), and api_handle's routing of /routes and /routes/NAME
 * to api_ops.routes. The round trip is the contract: every kind of route
 * (delayed with every key set, retry with per-queue policies, stream),
 * rendered, taken back as a PUT body and parsed by the config, is the same
 * route (config_route_same).
 *
 * Usage: test_api_routes [case...]   (--list names the cases)
 */
#include "delay-bridge/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "check.h"
#include "delay-bridge/config.h"

#define HEAD_JSON                                                                            \
    "{\"broker\": {\"uri\": \"amqp://localhost/prod\"}, \"wal\": {\"dir\": \"/tmp/x\"}, "    \
    "\"routes\": ["

static const char *const routes_json =
    HEAD_JSON
    "{\"name\": \"orders\", \"ingress_exchange\": \"orders.in\", \"ingress_queue\": \"orders.q\","
    " \"target_exchange\": \"orders.out\", \"queue_type\": \"quorum\", \"prefetch\": 5,"
    " \"max_inflight\": 7, \"max_delay_ms\": 86400000, \"delay_from\": \"broker\","
    " \"invalid_delay\": \"dead-letter\", \"dead_letter_exchange\": \"orders.dl\","
    " \"unroutable_exchange\": \"orders.lost\", \"declare_target\": true,"
    " \"target_type\": \"topic\", \"single_active_consumer\": true, \"max_held\": 250},"
    "{\"name\": \"rr\", \"ingress_exchange\": \"rr.in\", \"ingress_queue\": \"rr.q\","
    " \"retry\": {\"initial_ms\": 250, \"multiplier\": 1.5, \"max_ms\": 60000,"
    " \"jitter\": \"equal\", \"max_attempts\": 3, \"parking_exchange\": \"rr.park\","
    " \"parking_queue\": \"rr.parked\", \"reasons\": [\"rejected\", \"expired\"],"
    " \"queues\": {\"mail\": {\"max_attempts\": 9}, \"sms\": {\"jitter\": \"full\"}}}},"
    "{\"name\": \"st\", \"ingress_exchange\": \"st.in\", \"ingress_queue\": \"st.q\","
    " \"target_exchange\": \"\", \"queue_type\": \"stream\", \"stream_max_age\": \"2D\","
    " \"stream_max_mb\": 300},"
    "{\"name\": \"dx\", \"delayed_exchanges\": true, \"max_delay_ms\": 86400000},"
    "{\"name\": \"dx2\", \"delayed_exchanges\": true, \"ingress_exchange\": \"dx2.in\","
    " \"ingress_queue\": \"dx2.q\", \"unroutable_exchange\": \"dx2.lost\"}]}";

static const char *str(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v))
        return "(absent)";
    return v ? json_object_get_string(v) : "(null)";
}

/* Each route rendered, put back through api_route_body, parsed again: the same route. */
static void test_round_trip(void)
{
    struct config c, back;
    char err[512];

    if (config_parse(&c, routes_json, "t", err, sizeof err) < 0) {
        CHECK(0, "the test's config: %s", err);
        return;
    }
    for (int i = 0; i < c.nroutes; i++) {
        json_object *o = api_route_json(&c.routes[i], "prod", i == 0 ? 12 : -1);
        const char *shown = json_object_to_json_string(o);
        char *entry = api_route_body(shown, strlen(shown), "prod", err, sizeof err);
        CHECK(entry != NULL, "%s: %s", c.routes[i].name, err);
        if (!entry) {
            json_object_put(o);
            continue;
        }
        CHECK(!strstr(entry, "\"source\"") && !strstr(entry, "\"held\"") &&
                  !strstr(entry, "\"retired\"") && !strstr(entry, "\"vhost\"") &&
                  !strstr(entry, "null"),
              "%s: the entry keeps what GET adds: %s", c.routes[i].name, entry);
        struct strbuf doc = STRBUF_INIT;
        strbuf_printf(&doc, "%s%s]}", HEAD_JSON, entry);
        if (config_parse(&back, doc.p, "back", err, sizeof err) < 0) {
            CHECK(0, "%s: what GET showed does not parse back: %s\n%s", c.routes[i].name, err,
                  entry);
        } else {
            CHECK(config_route_same(&c.routes[i], &back.routes[0]),
                  "%s: not the same route after the round trip:\n%s", c.routes[i].name, shown);
            config_free(&back);
        }
        strbuf_free(&doc);
        free(entry);
        json_object_put(o);
    }
    config_free(&c);
}

/* What GET shows of each kind of route. */
static void test_shown(void)
{
    struct config c;
    char err[512];

    if (config_parse(&c, routes_json, "t", err, sizeof err) < 0) {
        CHECK(0, "the test's config: %s", err);
        return;
    }
    json_object *o = api_route_json(&c.routes[0], "prod", 12), *v;
    CHECK_STR(str(o, "name"), "orders");
    CHECK_STR(str(o, "vhost"), "prod");
    CHECK_STR(str(o, "target_exchange"), "orders.out");
    CHECK_STR(str(o, "queue_type"), "quorum");
    CHECK_STR(str(o, "source"), "file");
    CHECK_STR(str(o, "template"), "(null)");
    CHECK_STR(str(o, "retired"), "false");
    CHECK_STR(str(o, "held"), "12");
    CHECK_STR(str(o, "invalid_delay"), "dead-letter");
    CHECK_STR(str(o, "delay_from"), "broker");
    CHECK_STR(str(o, "stream_max_age"), "(absent)");
    CHECK_STR(str(o, "max_held"), "250");
    json_object_put(o);

    c.routes[1].source = CONFIG_SOURCE_STORE;
    c.routes[1].retired = 1;
    snprintf(c.routes[1].template_name, sizeof c.routes[1].template_name, "tpl");
    o = api_route_json(&c.routes[1], "prod", -1);
    CHECK_STR(str(o, "source"), "api");
    CHECK_STR(str(o, "template"), "tpl");
    CHECK_STR(str(o, "retired"), "true");
    CHECK_STR(str(o, "held"), "(null)");
    CHECK_STR(str(o, "target_exchange"), "(null)");
    CHECK_STR(str(o, "invalid_delay"), "(absent)"); /* config_retry.c refuses it */
    CHECK_STR(str(o, "max_held"), "0");             /* none of its own; a retry route too */
    CHECK(json_object_object_get_ex(o, "retry", &v));
    CHECK_STR(str(v, "multiplier"), "1.5");
    CHECK_STR(str(v, "jitter"), "equal");
    CHECK_STR(json_object_to_json_string_ext(json_object_object_get(v, "reasons"),
                                             JSON_C_TO_STRING_PLAIN),
              "[\"rejected\",\"expired\"]");
    json_object_put(o);

    o = api_route_json(&c.routes[2], "prod", 0);
    CHECK_STR(str(o, "queue_type"), "stream");
    CHECK_STR(str(o, "stream_max_age"), "2D");
    CHECK_STR(str(o, "stream_max_mb"), "300");
    CHECK_STR(str(o, "target_exchange"), "");
    json_object_put(o);
    config_free(&c);
}

/* A PUT body: what is refused, what is dropped, what is kept. */
static void test_body(void)
{
    static const struct {
        const char *body, *want; /* want: the entry, or "!" + a piece of the error */
    } cases[] = {
        {"", "!body: empty"},
        {"{\"name\": \"a\"", "!body: invalid JSON"},
        {"[1]", "!expected a route object, got array"},
        {"null", "!expected a route object, got null"},
        {"{} x", "!body: invalid JSON at byte 3"},
        {"{\"a\": 1, \"source\": \"api\", \"retired\": false, \"held\": 3, \"template\": null}",
         "{\"a\":1}"},
        {"{\"vhost\": \"/\", \"template\": \"t\", \"target_exchange\": null}",
         "{\"template\":\"t\"}"},
        {"{\"vhost\": \"other\"}", "{\"vhost\":\"other\"}"},
        {" {\"prefetch\": \"lots\"}\n", "{\"prefetch\":\"lots\"}"}, /* the config says why */
    };
    char err[256];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = '\0';
        char *e = api_route_body(cases[i].body, strlen(cases[i].body), "/", err, sizeof err);
        if (cases[i].want[0] == '!')
            CHECK(!e && strstr(err, cases[i].want + 1), "%s: got %s / %s", cases[i].body,
                  e ? e : "NULL", err);
        else
            CHECK(e && !strcmp(e, cases[i].want), "%s: got %s (%s)", cases[i].body,
                  e ? e : "NULL", err);
        free(e);
    }
}

/* ---- api_handle's routing to api_ops.routes ---- */

static struct {
    int calls;
    char method[16], name[64], body[64];
} seen;

static void no_stats(void *arg, struct db_stats *s)
{
    (void)arg;
    (void)s;
}

static int fake_routes(void *arg, const char *method, const char *name, const char *body,
                       size_t len, json_object *out)
{
    (void)arg;
    seen.calls++;
    snprintf(seen.method, sizeof seen.method, "%s", method);
    snprintf(seen.name, sizeof seen.name, "%s", name ? name : "(list)");
    snprintf(seen.body, sizeof seen.body, "%.*s", (int)len, body ? body : "");
    json_object_object_add(out, "ok", json_object_new_boolean(1));
    return !strcmp(method, "PUT") ? 201 : 200;
}

static void test_routing(void)
{
    static const struct {
        const char *method, *path;
        int status;
        const char *seen_method, *seen_name, *allow;
    } cases[] = {
        {"GET", "/routes", 200, "GET", "(list)", NULL},
        {"HEAD", "/routes", 200, "GET", "(list)", NULL},
        {"PUT", "/routes", 405, NULL, NULL, "GET, HEAD"},
        {"DELETE", "/routes", 405, NULL, NULL, "GET, HEAD"},
        {"GET", "/routes/orders", 200, "GET", "orders", NULL},
        {"PUT", "/routes/orders", 201, "PUT", "orders", NULL},
        {"DELETE", "/routes/orders", 200, "DELETE", "orders", NULL},
        {"POST", "/routes/orders", 405, NULL, NULL, "GET, HEAD, PUT, DELETE"},
        {"GET", "/routes/", 404, NULL, NULL, NULL},
        {"GET", "/routes/a/b", 404, NULL, NULL, NULL},
    };
    struct api_ops ops = {.stats = no_stats, .routes = fake_routes};

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct api_request req = {.method = cases[i].method, .path = cases[i].path,
                                  .body = "{\"x\": 1}", .body_len = 8};
        struct api_response resp;
        memset(&seen, 0, sizeof seen);
        api_handle(&ops, &req, &resp);
        CHECK(resp.status == cases[i].status, "%s %s: %d", cases[i].method, cases[i].path,
              resp.status);
        if (cases[i].seen_method) {
            CHECK(seen.calls == 1);
            CHECK_STR(seen.method, cases[i].seen_method);
            CHECK_STR(seen.name, cases[i].seen_name);
            CHECK_STR(seen.body, "{\"x\": 1}");
            CHECK(resp.content_type && !strcmp(resp.content_type, "application/json"));
        } else {
            CHECK(seen.calls == 0, "%s %s reached the op", cases[i].method, cases[i].path);
        }
        if (cases[i].allow)
            CHECK(resp.allow && !strcmp(resp.allow, cases[i].allow), "%s %s: Allow %s",
                  cases[i].method, cases[i].path, resp.allow ? resp.allow : "none");
        strbuf_free(&resp.body);
    }

    ops.routes = NULL; /* a daemon without the API */
    struct api_request req = {.method = "GET", .path = "/routes"};
    struct api_response resp;
    api_handle(&ops, &req, &resp);
    CHECK(resp.status == 404, "no routes op: %d", resp.status);
    strbuf_free(&resp.body);
}

static const struct check_case cases[] = {
    {"round_trip", test_round_trip},
    {"shown", test_shown},
    {"body", test_body},
    {"routing", test_routing},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
