/*
 * test_api.c -- api_handle() with a fake api_ops: what a load balancer, a
 * scraper and an operator see on each endpoint. Liveness by loop age,
 * readiness and its reasons (BLOCKED counts as connected), /metrics as
 * Prometheus text, /stats parsed back with json-c, 404 for unknown paths,
 * 405 with Allow for the wrong method, HEAD answered like GET.
 *
 * Usage: test_api [case...]   (--list names the cases)
 */
#include "delay-bridge/api.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "check.h"
#include "delay-bridge/duecount.h"
#include "status/metrics.h"
#include "status/ready.h"
#include "delay-bridge/ui.h"

/* ---- the fake daemon ---- */

#define NOW 1800000000000ULL /* 2027-01-15T08:00:00.000Z */

struct fake {
    struct db_stats s;
    struct db_route_stats routes[2];
    int calls;
};

static void fake_stats(void *arg, struct db_stats *out)
{
    struct fake *f = arg;
    f->calls++;
    *out = f->s;
}

static void fake_init(struct fake *f)
{
    memset(f, 0, sizeof *f);
    struct db_stats *s = &f->s;
    s->version = "0.1.0";
    s->instance = "eu-1";
    s->now_ms = NOW;
    s->start_ms = NOW - 60000;
    s->loop_turn_ms = NOW - 10;
    s->recovered = 1;
    s->recovery_seconds = 0.25;
    s->recovery_progress = 1;
    s->consumer = DB_CONN_UP;
    s->publisher = DB_CONN_UP;
    s->held = 5;
    s->orphaned = 1;
    s->next_due_ms = NOW + 1500;
    s->ram_bytes = 4096;
    s->rss_bytes = 8192;
    s->wal.segments = 1;
    s->wal.disk_bytes = 300;
    s->wal.live_bytes = 200;
    s->wal.live_records = 4;
    s->wal.commits = 7;
    s->wal.writable = 1;
    db_hist_observe(&s->wal.fsync, 0.001);
    db_hist_observe(&s->wal.fsync, 0.003);

    f->routes[0].name = "orders";
    f->routes[0].target_exchange = "orders.out";
    f->routes[0].received = 10;
    f->routes[0].published = 6;
    f->routes[0].confirmed = 5;
    f->routes[0].waiting = 3;
    f->routes[0].inflight = 1;
    f->routes[0].pending = 4;
    f->routes[0].oldest_due_ms = NOW + 1500;
    f->routes[0].channel_open = 1;
    db_hist_observe(&f->routes[0].lateness, 0.5);
    db_hist_observe(&f->routes[0].stage[DB_STAGE_WRITE], 0.25);
    f->routes[1].name = "mails";
    f->routes[1].target_exchange = "mails.out";
    s->routes = f->routes;
    s->nroutes = 2;
}

static struct fake fake;
static struct api_ops ops = {.stats = fake_stats, .arg = &fake};

/* GET/POST/... path: a fresh response the caller frees with strbuf_free(&r->body). */
static void call(const char *method, const char *path, struct api_response *r)
{
    struct api_request req = { method, path, NULL, NULL, NULL, 0 };
    memset(r, 0x5a, sizeof *r); /* api_handle must initialise everything */
    api_handle(&ops, &req, r);
}

static int body_is(const struct api_response *r, const char *want)
{
    return r->body.p && r->body.len == strlen(want) && !strcmp(r->body.p, want);
}

/* ---- cases ---- */

static void test_healthz(void)
{
    struct api_response r;
    fake_init(&fake);
    call("GET", "/healthz", &r);
    CHECK(r.status == 200 && body_is(&r, "ok\n"));
    CHECK(r.allow == NULL);
    CHECK(r.content_type && !strncmp(r.content_type, "text/plain", 10));
    strbuf_free(&r.body);

    /* Not ready does not mean not alive. */
    fake.s.consumer = DB_CONN_DOWN;
    fake.s.recovered = 0;
    call("GET", "/healthz", &r);
    CHECK(r.status == 200);
    strbuf_free(&r.body);

    fake.s.loop_turn_ms = NOW - 4999;
    call("HEAD", "/healthz", &r);
    CHECK(r.status == 200);
    strbuf_free(&r.body);

    fake.s.loop_turn_ms = NOW - 5000; /* stalled for 5 s */
    call("GET", "/healthz", &r);
    CHECK(r.status == 503);
    CHECK(r.body.len > 0);
    strbuf_free(&r.body);
}

static void check_ready(int want_status, const char *want_body)
{
    struct api_response r;
    call("GET", "/readyz", &r);
    CHECK(r.status == want_status, "got %d, want %d", r.status, want_status);
    CHECK(body_is(&r, want_body), "got \"%s\", want \"%s\"", r.body.p ? r.body.p : "(null)",
          want_body);
    strbuf_free(&r.body);
}

static void test_readyz(void)
{
    fake_init(&fake);
    check_ready(200, "ready\n");
    CHECK(!strcmp(ready_reason(&fake.s), ""));

    fake.s.consumer = DB_CONN_BLOCKED; /* blocked is connected */
    fake.s.publisher = DB_CONN_BLOCKED;
    check_ready(200, "ready\n");

    fake_init(&fake);
    fake.s.recovered = 0;
    check_ready(503, "not ready: recovering\n");

    fake_init(&fake);
    fake.s.consumer = DB_CONN_DOWN;
    check_ready(503, "not ready: consumer connection down\n");

    fake_init(&fake);
    fake.s.publisher = DB_CONN_DOWN;
    check_ready(503, "not ready: publisher connection down\n");

    fake_init(&fake);
    fake.s.wal.writable = 0;
    fake.s.wal.failed = 1;
    check_ready(503, "not ready: WAL not writable\n");

    fake_init(&fake);
    fake.s.stopping = 1;
    check_ready(503, "not ready: stopping\n");

    /* a max_held reached: its reason (bridge_held_gate's), before a connection down */
    fake_init(&fake);
    fake.s.held_limit.reason = "held limit reached (consuming paused): routes[a].max_held 2, 3 held";
    fake.s.consumer = DB_CONN_DOWN;
    check_ready(503, "not ready: held limit reached (consuming paused): routes[a].max_held 2, "
                     "3 held\n");
    fake.s.held_limit.reason = "";
    check_ready(503, "not ready: consumer connection down\n");

    /* Several at once: the most final one is reported. */
    fake_init(&fake);
    fake.s.stopping = 1;
    fake.s.consumer = DB_CONN_DOWN;
    fake.s.recovered = 0;
    check_ready(503, "not ready: stopping\n");
    fake.s.stopping = 0;
    check_ready(503, "not ready: recovering\n");

    /* A replicated log waiting for another bridge's lease stands by; once it
     * imports (not waiting any more) it is recovering; the owner is ready. */
    fake_init(&fake);
    fake.s.recovered = 0;
    fake.s.wal.repl = 1;
    fake.s.wal.repl_waiting = 1;
    check_ready(503, "not ready: standby (another bridge holds the WAL lease)\n");
    fake.s.wal.repl_waiting = 0;
    check_ready(503, "not ready: recovering\n");
    fake.s.recovered = 1;
    fake.s.wal.repl_owner = 1;
    check_ready(200, "ready\n");
}

static void test_metrics(void)
{
    struct api_response r;
    fake_init(&fake);
    call("GET", "/metrics", &r);
    CHECK(r.status == 200);
    CHECK(r.content_type && !strcmp(r.content_type, METRICS_CONTENT_TYPE));
    CHECK(r.body.p && !strncmp(r.body.p, "# HELP ", 7));
    CHECK(r.body.p && strstr(r.body.p, "\ndelay_bridge_published_total{route=\"orders\"} 6\n"));
    CHECK(r.body.p && strstr(r.body.p, "\ndelay_bridge_ready 1\n"));
    CHECK(r.body.p && strstr(r.body.p,
                             "\ndelay_bridge_build_info{version=\"0.1.0\",instance=\"eu-1\"} 1\n"));
    strbuf_free(&r.body);
}

static json_object *get(json_object *o, const char *path)
{
    /* "a.b.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, k, &v))
            return NULL;
        o = v;
    }
    return o;
}

static int str_is(json_object *root, const char *path, const char *want)
{
    json_object *v = get(root, path);
    return v && json_object_is_type(v, json_type_string) && !strcmp(json_object_get_string(v), want);
}

static int int_is(json_object *root, const char *path, int64_t want)
{
    json_object *v = get(root, path);
    return v && json_object_is_type(v, json_type_int) && json_object_get_int64(v) == want;
}

static int bool_is(json_object *root, const char *path, int want)
{
    json_object *v = get(root, path);
    return v && json_object_is_type(v, json_type_boolean) && json_object_get_boolean(v) == want;
}

static int double_is(json_object *root, const char *path, double want)
{
    json_object *v = get(root, path);
    return v && (json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)) &&
           fabs(json_object_get_double(v) - want) < 1e-9;
}

static int is_null(json_object *root, const char *path)
{
    return json_object_object_get_ex(root, path, NULL) && get(root, path) == NULL;
}

static json_object *stats_json(void)
{
    struct api_response r;
    call("GET", "/stats", &r);
    CHECK(r.status == 200);
    CHECK(r.content_type && !strncmp(r.content_type, "application/json", 16));
    json_tokener *tok = json_tokener_new();
    json_object *root = json_tokener_parse_ex(tok, r.body.p, (int)r.body.len);
    CHECK(root != NULL);
    /* The whole body is one JSON value (json-c eats the final newline). */
    CHECK(json_tokener_get_parse_end(tok) == r.body.len && r.body.p[r.body.len - 1] == '\n');
    json_tokener_free(tok);
    strbuf_free(&r.body);
    return root;
}

static void test_stats(void)
{
    fake_init(&fake);
    json_object *root = stats_json();
    if (!root)
        return;
    CHECK(str_is(root, "version", "0.1.0"));
    CHECK(str_is(root, "instance", "eu-1"));
    CHECK(double_is(root, "uptime_seconds", 60));
    CHECK(bool_is(root, "recovery.recovered", 1));
    CHECK(double_is(root, "recovery.seconds", 0.25));
    CHECK(double_is(root, "recovery.progress", 1));
    CHECK(str_is(root, "connections.consumer", "up"));
    CHECK(str_is(root, "connections.publisher", "up"));
    CHECK(bool_is(root, "ready", 1));
    CHECK(is_null(root, "reason"));
    CHECK(int_is(root, "held", 5));
    CHECK(int_is(root, "orphaned", 1));
    CHECK(int_is(root, "next_due_ms", (int64_t)(NOW + 1500)));
    CHECK(str_is(root, "next_due", "2027-01-15T08:00:01.500Z"));
    CHECK(int_is(root, "ram_bytes", 4096));
    CHECK(int_is(root, "rss_bytes", 8192));
    CHECK(int_is(root, "wal.segments", 1));
    CHECK(int_is(root, "wal.disk_bytes", 300));
    CHECK(int_is(root, "wal.live_bytes", 200));
    CHECK(int_is(root, "wal.live_records", 4));
    CHECK(int_is(root, "wal.commits", 7));
    CHECK(bool_is(root, "wal.writable", 1));
    CHECK(bool_is(root, "wal.failed", 0));
    CHECK(int_is(root, "wal.fsync.count", 2));
    CHECK(double_is(root, "wal.fsync.sum_seconds", 0.004));

    json_object *routes = get(root, "routes");
    CHECK(routes && json_object_is_type(routes, json_type_array));
    CHECK(routes && json_object_array_length(routes) == 2);
    if (routes && json_object_array_length(routes) == 2) {
        json_object *r0 = json_object_array_get_idx(routes, 0);
        json_object *r1 = json_object_array_get_idx(routes, 1);
        CHECK(str_is(r0, "name", "orders"));
        CHECK(str_is(r0, "target_exchange", "orders.out"));
        CHECK(int_is(r0, "received", 10));
        CHECK(int_is(r0, "published", 6));
        CHECK(int_is(r0, "confirmed", 5));
        CHECK(int_is(r0, "waiting", 3));
        CHECK(int_is(r0, "inflight", 1));
        CHECK(int_is(r0, "pending", 4));
        CHECK(int_is(r0, "cancel_missed", 0));
        CHECK(int_is(r0, "oldest_due_ms", (int64_t)(NOW + 1500)));
        CHECK(str_is(r0, "oldest_due", "2027-01-15T08:00:01.500Z"));
        CHECK(bool_is(r0, "channel_open", 1));
        CHECK(int_is(r0, "lateness.count", 1));
        CHECK(int_is(r0, "fire_stages.write.count", 1) && int_is(r0, "fire_stages.wake.count", 0) &&
              int_is(r0, "fire_stages.read.count", 0) && int_is(r0, "fire_stages.confirm.count", 0));
        CHECK(double_is(r0, "fire_stages.write.sum_seconds", 0.25));
        CHECK(double_is(r0, "lateness.sum_seconds", 0.5));
        CHECK(str_is(r1, "name", "mails"));
        CHECK(int_is(r1, "oldest_due_ms", 0));
        CHECK(is_null(r1, "oldest_due"));
        CHECK(bool_is(r1, "channel_open", 0));
    }
    json_object_put(root);

    /* Not ready: reason given; connection states spelled out; nothing due. */
    fake_init(&fake);
    fake.s.consumer = DB_CONN_BLOCKED;
    fake.s.publisher = DB_CONN_DOWN;
    fake.s.next_due_ms = 0;
    fake.s.nroutes = 0;
    fake.s.routes = NULL;
    root = stats_json();
    if (!root)
        return;
    CHECK(str_is(root, "connections.consumer", "blocked"));
    CHECK(str_is(root, "connections.publisher", "down"));
    CHECK(bool_is(root, "ready", 0));
    CHECK(str_is(root, "reason", "publisher connection down"));
    CHECK(is_null(root, "next_due"));
    CHECK(get(root, "routes") && json_object_array_length(get(root, "routes")) == 0);
    json_object_put(root);
}

static void test_not_found(void)
{
    static const char *const paths[] = { "/", "/nope", "/metrics/", "/healthz/x", "/METRICS", "" };
    fake_init(&fake);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        struct api_response r;
        call("GET", paths[i], &r);
        CHECK(r.status == 404);
        CHECK(r.body.p && strstr(r.body.p, "not found"));
        CHECK(r.allow == NULL);
        strbuf_free(&r.body);
    }
    struct api_response r;
    call("DELETE", "/nope", &r); /* unknown path: 404 whatever the method */
    CHECK(r.status == 404);
    strbuf_free(&r.body);
}

static void test_method(void)
{
    static const char *const paths[] = { "/healthz", "/readyz", "/metrics", "/stats" };
    static const char *const methods[] = { "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get" };
    fake_init(&fake);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        for (size_t j = 0; j < sizeof methods / sizeof methods[0]; j++) {
            struct api_response r;
            call(methods[j], paths[i], &r);
            CHECK(r.status == 405);
            CHECK(r.allow && !strcmp(r.allow, "GET, HEAD"));
            strbuf_free(&r.body);
        }
    }
    /* The daemon was not asked for a snapshot to answer 404/405. */
    CHECK(fake.calls == 0);
}

static void test_head(void)
{
    /* HEAD renders the same answer as GET; the transport drops the body. */
    static const char *const paths[] = { "/healthz", "/readyz", "/metrics", "/stats" };
    fake_init(&fake);
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        struct api_response g, h;
        call("GET", paths[i], &g);
        call("HEAD", paths[i], &h);
        CHECK(g.status == 200 && h.status == 200);
        CHECK(g.body.len == h.body.len);
        CHECK(!strcmp(g.content_type, h.content_type));
        strbuf_free(&g.body);
        strbuf_free(&h.body);
    }
}

/* GET /ui: the page; GET /due: 404 until the daemon offers it, then its JSON. */
static int fake_due(void *arg, struct json_object *out)
{
    struct duecount *d = duecount_new();
    struct duecount_view v;

    duecount_add(d, NOW + 90000, +1);        /* the minute after next */
    duecount_add(d, NOW + 2 * 86400000ull, +1); /* the day after tomorrow */
    duecount_view(d, NOW, &v);
    ui_due_json(&v, NOW, out);
    duecount_free(d);
    return 200;
}

static void test_ui_and_due(void)
{
    struct api_response r;
    fake_init(&fake);
    call("GET", "/ui", &r);
    CHECK(r.status == 200 && !strcmp(r.content_type, UI_CONTENT_TYPE));
    CHECK(r.body.p && strstr(r.body.p, "<title>delay-bridge</title>") && !strstr(r.body.p, "http"
                                                                                 "s://"),
          "the page loads nothing from elsewhere");
    strbuf_free(&r.body);
    call("POST", "/ui", &r);
    CHECK(r.status == 405);
    strbuf_free(&r.body);
    call("GET", "/due", &r);
    CHECK(r.status == 404, "no due op: 404, got %d", r.status);
    strbuf_free(&r.body);

    ops.due = fake_due;
    call("GET", "/due", &r);
    ops.due = NULL;
    CHECK(r.status == 200 && !strcmp(r.content_type, "application/json"));
    json_object *o = json_tokener_parse(r.body.p), *m, *c, *dd;
    CHECK(o != NULL);
    if (o) {
        CHECK(json_object_object_get_ex(o, "minutes", &m) && json_object_object_get_ex(m, "counts", &c));
        CHECK(json_object_array_length(c) == DUECOUNT_MINUTES);
        uint64_t in_minutes = 0;
        for (size_t i = 0; i < json_object_array_length(c); i++)
            in_minutes += (uint64_t)json_object_get_int64(json_object_array_get_idx(c, i));
        CHECK(in_minutes == 1);
        CHECK(json_object_object_get_ex(o, "days", &dd) && json_object_object_get_ex(dd, "counts", &c));
        CHECK(json_object_array_length(c) == DUECOUNT_DAYS);
        CHECK(json_object_get_int64(json_object_array_get_idx(c, 2)) == 1);
        CHECK(json_object_object_get_ex(o, "total", &m) && json_object_get_int64(m) == 2);
        json_object_put(o);
    }
    strbuf_free(&r.body);
}

static const struct check_case cases[] = {
    { "ui_and_due", test_ui_and_due },
    { "healthz", test_healthz },
    { "readyz", test_readyz },
    { "metrics", test_metrics },
    { "stats", test_stats },
    { "not_found", test_not_found },
    { "method", test_method },
    { "head", test_head },
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
