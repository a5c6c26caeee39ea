/*
 * test_config_diff.c -- config_diff(): every key of a full configuration
 * changed once, alone, is reported once under its key path; routes are
 * matched by name (moved: no difference; renamed: one removed, one added);
 * a retry route's policy, parking and per-queue overrides count as the
 * route changing; a retired route is as good as absent.
 */
#include "delay-bridge/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char base[] =
    "{\"instance\": \"eu-1\","
    " \"broker\": {\"uri\": [\"amqp://u:p@h1/v\", \"amqp://u:p@h2/v\"], \"heartbeat_s\": 30,"
    "  \"connect_timeout_ms\": 5000, \"reconnect_min_ms\": 500, \"reconnect_max_ms\": 30000,"
    "  \"publish_retry_min_ms\": 1000, \"publish_retry_max_ms\": 60000,"
    "  \"tls\": {\"verify_hostname\": true}},"
    " \"wal\": {\"dir\": \"/w\", \"segment_mb\": 64, \"fsync\": true, \"commit_interval_ms\": 10,"
    "  \"max_message_bytes\": 1000000, \"checkpoint_interval_s\": 60, \"checkpoint_min_mb\": 64,"
    "  \"replicate\": {\"stream\": \"s\", \"max_mb\": 4096}},"
    " \"http\": {\"listen\": \"9800\"}, \"log\": {\"level\": \"info\"},"
    " \"shutdown_timeout_ms\": 10000, \"routes_file\": \"/w/r.json\","
    " \"limits\": {\"max_held\": 5000000},"
    " \"route_templates\": {\"t\": {\"ingress_exchange\": \"{name}.d\", \"ingress_queue\": \"{name}.q\","
    "  \"target_exchange\": \"{name}.t\", \"prefetch\": 5},"
    "  \"t2\": {\"ingress_exchange\": \"{name}.d\", \"ingress_queue\": \"{name}.q\","
    "  \"target_exchange\": \"{name}.t\"}},"
    " \"routes\": ["
    "  {\"name\": \"i\", \"template\": \"t\", \"prefetch\": 7, \"vhost\": \"v2\"},"
    "  {\"name\": \"a\", \"ingress_exchange\": \"a.d\", \"ingress_queue\": \"a.q\","
    "   \"target_exchange\": \"a.t\", \"prefetch\": 100, \"max_inflight\": 100,"
    "   \"max_delay_ms\": 1000000, \"queue_type\": \"quorum\", \"delay_from\": \"bridge\","
    "   \"invalid_delay\": \"dead-letter\", \"dead_letter_exchange\": \"a.dl\","
    "   \"unroutable_exchange\": \"a.u\", \"declare_target\": true, \"target_type\": \"topic\","
    "   \"single_active_consumer\": false, \"max_held\": 300},"
    "  {\"name\": \"r\", \"ingress_exchange\": \"r.d\", \"ingress_queue\": \"r.q\","
    "   \"retry\": {\"initial_ms\": 100, \"multiplier\": 2, \"max_ms\": 1000, \"jitter\": \"none\","
    "    \"max_attempts\": 5, \"parking_exchange\": \"r.p\", \"parking_queue\": \"r.pq\","
    "    \"reasons\": [\"rejected\"], \"queues\": {\"w\": {\"max_attempts\": 2}},"
    "    \"queue_pattern\": \"w[0-9]+\"}}"
    " ]}";

/* base with the first occurrence of from replaced by to. */
static char *edit(const char *from, const char *to)
{
    const char *at = strstr(base, from);
    if (!at) {
        fprintf(stderr, "test_config_diff: \"%s\" not in the base config\n", from);
        abort();
    }
    size_t n = strlen(base) - strlen(from) + strlen(to) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from));
    return s;
}

struct seen {
    int n;
    char what[8][16], path[8][300];
};

static void note(void *arg, const char *what, const char *path)
{
    struct seen *s = arg;
    if (s->n < 8) {
        snprintf(s->what[s->n], sizeof s->what[0], "%s", what);
        snprintf(s->path[s->n], sizeof s->path[0], "%s", path);
    }
    s->n++;
}

static int load(const char *json, struct config *c)
{
    char err[512];
    if (config_parse(c, json, "t.json", err, sizeof err) < 0) {
        fprintf(stderr, "test_config_diff: %s\n", err);
        return -1;
    }
    return 0;
}

/* Changing from to to: exactly one difference, what at path. */
static void one(int line, const char *from, const char *to, const char *what, const char *path)
{
    struct config a, b;
    struct seen s = {0};
    char *json = edit(from, to);

    if (load(base, &a) < 0) {
        check_failed(__FILE__, line, "base parses", " ");
        free(json);
        return;
    }
    if (load(json, &b) < 0) {
        check_failed(__FILE__, line, "edited config parses", "%s -> %s", from, to);
    } else {
        int n = config_diff(&a, &b, note, &s);
        if (n != 1 || s.n != 1 || strcmp(s.what[0], what) || strcmp(s.path[0], path))
            check_failed(__FILE__, line, "one difference", "%s -> %s: %d differences, first "
                         "%s %s; want %s %s", from, to, n, s.n ? s.what[0] : "-",
                         s.n ? s.path[0] : "-", what, path);
        config_free(&b);
    }
    config_free(&a);
    free(json);
}
#define ONE(from, to, path) one(__LINE__, from, to, "changed", path)

static void test_same(void)
{
    struct config a, b;
    if (load(base, &a) < 0 || load(base, &b) < 0)
        return;
    CHECK(config_diff(&a, &b, NULL, NULL) == 0);
    CHECK(config_route_same(&a.routes[1], &b.routes[1]));
    config_free(&a);
    config_free(&b);
}

static void test_every_key(void)
{
    ONE("\"amqp://u:p@h2/v\"", "\"amqp://u:p@h3/v\"", "broker.uri");
    ONE("\"heartbeat_s\": 30", "\"heartbeat_s\": 10", "broker.heartbeat_s");
    ONE("\"connect_timeout_ms\": 5000", "\"connect_timeout_ms\": 50", "broker.connect_timeout_ms");
    ONE("\"reconnect_min_ms\": 500", "\"reconnect_min_ms\": 50", "broker.reconnect_*_ms");
    ONE("\"publish_retry_max_ms\": 60000", "\"publish_retry_max_ms\": 6000",
        "broker.publish_retry_*_ms");
    ONE("\"verify_hostname\": true", "\"verify_hostname\": false", "broker.tls");
    ONE("\"dir\": \"/w\"", "\"dir\": \"/w2\"", "wal.dir");
    ONE("\"segment_mb\": 64", "\"segment_mb\": 32", "wal.segment_mb");
    ONE("\"fsync\": true", "\"fsync\": false", "wal.fsync");
    ONE("\"commit_interval_ms\": 10", "\"commit_interval_ms\": 0", "wal.commit_interval_ms");
    ONE("\"max_message_bytes\": 1000000", "\"max_message_bytes\": 100", "wal.max_message_bytes");
    ONE("\"checkpoint_interval_s\": 60", "\"checkpoint_interval_s\": 0", "wal.checkpoint_*");
    ONE("\"max_mb\": 4096", "\"max_mb\": 8192", "wal.replicate");
    ONE("\"instance\": \"eu-1\"", "\"instance\": \"eu-2\"", "instance");
    ONE("\"listen\": \"9800\"", "\"listen\": \"9801\"", "http");
    ONE("\"level\": \"info\"", "\"level\": \"debug\"", "log.level");
    ONE("\"shutdown_timeout_ms\": 10000", "\"shutdown_timeout_ms\": 1", "shutdown_timeout_ms");
    ONE("\"routes_file\": \"/w/r.json\"", "\"routes_file\": \"/w/r2.json\"", "routes_file");
    ONE("\"max_held\": 5000000", "\"max_held\": 0", "limits.max_held");
    /* a template's key that its route overrides: the template alone */
    ONE("\"prefetch\": 5", "\"prefetch\": 6", "route_templates");
    /* a route's vhost and template */
    ONE("\"vhost\": \"v2\"", "\"vhost\": \"v3\"", "routes[i]");
    ONE("\"template\": \"t\"", "\"template\": \"t2\"", "routes[i]");
    /* every key of a route: the route changed */
    ONE("\"ingress_exchange\": \"a.d\"", "\"ingress_exchange\": \"a.d2\"", "routes[a]");
    ONE("\"ingress_queue\": \"a.q\"", "\"ingress_queue\": \"a.q2\"", "routes[a]");
    ONE("\"target_exchange\": \"a.t\"", "\"target_exchange\": \"a.t2\"", "routes[a]");
    ONE("\"prefetch\": 100", "\"prefetch\": 10", "routes[a]");
    ONE("\"max_inflight\": 100", "\"max_inflight\": 10", "routes[a]");
    ONE("\"max_delay_ms\": 1000000", "\"max_delay_ms\": 100000", "routes[a]");
    ONE("\"queue_type\": \"quorum\"", "\"queue_type\": \"classic\"", "routes[a]");
    ONE("\"delay_from\": \"bridge\"", "\"delay_from\": \"broker\"", "routes[a]");
    ONE("\"dead_letter_exchange\": \"a.dl\"", "\"dead_letter_exchange\": \"a.dl2\"", "routes[a]");
    ONE("\"unroutable_exchange\": \"a.u\"", "\"unroutable_exchange\": \"a.u2\"", "routes[a]");
    ONE("\"declare_target\": true", "\"declare_target\": false", "routes[a]");
    ONE("\"target_type\": \"topic\"", "\"target_type\": \"fanout\"", "routes[a]");
    ONE("\"single_active_consumer\": false", "\"single_active_consumer\": true", "routes[a]");
    ONE("\"max_held\": 300", "\"max_held\": 301", "routes[a]");
    /* a retry route's policy, parking, reasons and per-queue entries */
    ONE("\"initial_ms\": 100", "\"initial_ms\": 200", "routes[r]");
    ONE("\"multiplier\": 2", "\"multiplier\": 3", "routes[r]");
    ONE("\"max_ms\": 1000", "\"max_ms\": 2000", "routes[r]");
    ONE("\"jitter\": \"none\"", "\"jitter\": \"full\"", "routes[r]");
    ONE("\"max_attempts\": 5", "\"max_attempts\": 6", "routes[r]");
    ONE("\"parking_exchange\": \"r.p\"", "\"parking_exchange\": \"r.p2\"", "routes[r]");
    ONE("\"parking_queue\": \"r.pq\"", "\"parking_queue\": \"r.pq2\"", "routes[r]");
    ONE("[\"rejected\"]", "[\"rejected\", \"expired\"]", "routes[r]");
    ONE("{\"max_attempts\": 2}", "{\"max_attempts\": 3}", "routes[r]");
    ONE("\"queues\": {\"w\"", "\"queues\": {\"w2\"", "routes[r]");
    ONE("\"w[0-9]+\"", "\"w[0-9]*\"", "routes[r]");
}

static void test_routes_by_name(void)
{
    /* renamed: one removed, one added */
    struct config a, b;
    struct seen s = {0};
    char *json = edit("\"name\": \"a\"", "\"name\": \"b\"");
    if (load(base, &a) < 0 || load(json, &b) < 0)
        return;
    CHECK(config_diff(&a, &b, note, &s) == 2 && s.n == 2);
    CHECK(!strcmp(s.what[0], "added") && !strcmp(s.path[0], "routes[b]"));
    CHECK(!strcmp(s.what[1], "removed") && !strcmp(s.path[1], "routes[a]"));
    config_free(&b);
    free(json);

    /* moved: nothing; the second route alone: r removed */
    const char *ra = strstr(base, "{\"name\": \"a\"");
    const char *rr = strstr(base, "{\"name\": \"r\"");
    const char *end = strstr(base, " ]}");
    char moved[sizeof base + 8];
    snprintf(moved, sizeof moved, "%.*s%.*s, %.*s ]}", (int)(ra - base), base, (int)(end - rr),
             rr, (int)(rr - ra - 3), ra);
    if (load(moved, &b) == 0) {
        CHECK(config_diff(&a, &b, NULL, NULL) == 0, "routes moved: %s", moved);
        config_free(&b);
    } else {
        CHECK(0, "the moved config parses: %s", moved);
    }
    s.n = 0;
    char only_a[sizeof base + 4];
    snprintf(only_a, sizeof only_a, "%.*s ]}", (int)(rr - base - 3), base);
    if (load(only_a, &b) == 0) {
        CHECK(config_diff(&a, &b, note, &s) == 1 && !strcmp(s.what[0], "removed") &&
              !strcmp(s.path[0], "routes[r]"));
        config_free(&b);
    } else {
        CHECK(0, "the one-route config parses: %s", only_a);
    }
    config_free(&a);
}

struct keys {
    int n;
    char key[4][32];
};

static void key_note(void *arg, const char *key)
{
    struct keys *k = arg;
    if (k->n < 4)
        snprintf(k->key[k->n], sizeof k->key[0], "%s", key);
    k->n++;
}

/* The keys config_route_keys_diff names for route i when from becomes to. */
static void keys(int line, const char *from, const char *to, const char *want)
{
    struct config a, b;
    struct keys k = {0};
    char *json = edit(from, to);

    if (load(base, &a) == 0 && load(json, &b) == 0) {
        int n = config_route_keys_diff(&a.routes[0], &b.routes[0], key_note, &k);
        if (n != 1 || k.n != 1 || strcmp(k.key[0], want))
            check_failed(__FILE__, line, "one key", "%s -> %s: %d keys, first %s; want %s",
                         from, to, n, k.n ? k.key[0] : "-", want);
        config_free(&a);
        config_free(&b);
    }
    free(json);
}

static void test_route_keys(void)
{
    keys(__LINE__, "\"vhost\": \"v2\"", "\"vhost\": \"v3\"", "vhost");
    keys(__LINE__, "\"template\": \"t\"", "\"template\": \"t2\"", "template");
    keys(__LINE__, "\"prefetch\": 7", "\"prefetch\": 8", "prefetch");
    keys(__LINE__, "\"prefetch\": 7,", "\"prefetch\": 7, \"max_held\": 9,", "max_held");

    /* where a route was read is not a key */
    struct config a, b;
    if (load(base, &a) < 0 || load(base, &b) < 0)
        return;
    b.routes[0].source = CONFIG_SOURCE_STORE;
    CHECK(config_route_same(&a.routes[0], &b.routes[0]));
    CHECK(config_diff(&a, &b, NULL, NULL) == 0);
    config_free(&a);
    config_free(&b);
}

/* A retired route: not found by name, not matched, not reported. */
static void test_retired(void)
{
    struct config a, b;
    struct seen s = {0};
    if (load(base, &a) < 0 || load(base, &b) < 0)
        return;
    CHECK(config_route_index(&a, "a", 1) == 1);
    a.routes[1].retired = 1;
    CHECK(config_route_index(&a, "a", 1) == -1);
    CHECK(config_route_index(&a, "r", 1) == 2);
    /* the running one retired "a": the file naming it adds it again */
    CHECK(config_diff(&a, &b, note, &s) == 1 && s.n == 1);
    CHECK(!strcmp(s.what[0], "added") && !strcmp(s.path[0], "routes[a]"));
    /* both retired: no difference */
    b.routes[1].retired = 1;
    CHECK(config_diff(&a, &b, NULL, NULL) == 0);
    /* retired in b alone: removed */
    a.routes[1].retired = 0;
    s.n = 0;
    CHECK(config_diff(&a, &b, note, &s) == 1 && s.n == 1);
    CHECK(!strcmp(s.what[0], "removed") && !strcmp(s.path[0], "routes[a]"));
    /* a retired route and a live one of the same name: the live one is matched */
    b.routes[b.nroutes] = b.routes[1];
    b.routes[b.nroutes].retry = NULL;
    b.routes[b.nroutes++].retired = 0;
    CHECK(config_diff(&a, &b, NULL, NULL) == 0);
    CHECK(config_route_index(&b, "a", 1) == b.nroutes - 1);
    config_free(&a);
    config_free(&b);
}

static const struct check_case cases[] = {
    {"route_keys", test_route_keys},
    {"retired", test_retired},
    {"same", test_same},
    {"every_key", test_every_key},
    {"routes_by_name", test_routes_by_name},
};

int main(int argc, char **argv)
{
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    return CHECK_MAIN(argc, argv, cases);
}
