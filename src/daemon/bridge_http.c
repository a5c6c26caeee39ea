/*
 * bridge_http.c -- the HTTP endpoint's handlers: what api.c asks of the
 * daemon through struct api_ops (held messages browsed, fetched, cancelled,
 * purged; the drain; the /stats snapshot).
 *
 * api.c routes the request and renders the answer; these functions do the
 * work against the engine and fill in the JSON object api.c sends. A change
 * an operator asks for is made durable before the answer says so
 * (bridge_commit_and_wait: the loop waits one fsync). While the engine is
 * still recovering every one answers 503 "recovering".
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "delay-bridge/broker_msg.h"
#include "delay-bridge/api.h"
#include "base/clock.h"
#include "base/xalloc.h"
#include "delay-bridge/duecount.h"
#include "delay-bridge/ui.h"

static void api_stats(void *arg, struct db_stats *s)
{
    bridge_stats(arg, s);
}

static int route_by_name(const struct bridge *b, const char *name)
{
    return bridge_route_index((void *)b->cfg, name, strlen(name));
}

static int api_fail(struct json_object *out, int status, const char *why)
{
    json_object_object_add(out, "error", json_object_new_string(why));
    return status;
}

/* A held message as JSON (api.c renders it; the properties are decoded here, with rabbitmq-c). */
static struct json_object *message_json(struct bridge *b, const struct eng_item *it,
                                        const struct walrec_add *a, int full)
{
    return api_message_json(b->log_id, it->id, it->due_ms, it->state == ENG_DUE, a,
                            broker_msg_props_json(a->props, a->props_len), full);
}

/* Messages one filtered page of /pending looks at, at most (api.h). */
#define PENDING_SCAN_MAX 10000

static int api_pending_list(void *arg, const char *route, const char *after, unsigned limit,
                            const char *queue, const char *exchange, struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), more = 1, r, filtered = queue || exchange;
    uint64_t after_due = 0, after_id = 0, next_due, next_id;
    size_t qlen = queue ? strlen(queue) : 0, xlen = exchange ? strlen(exchange) : 0;
    size_t scanned = 0, kept = 0, n, i;
    struct eng_item *items;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (after && *after) {
        char *end;
        after_due = strtoull(after, &end, 10);
        if (*end != '-' || !end[1])
            return api_fail(out, 400, "after: expected the cursor of a previous page");
        after_id = strtoull(end + 1, &end, 10);
        if (*end)
            return api_fail(out, 400, "after: expected the cursor of a previous page");
    }
    items = xmalloc(limit * sizeof(*items));
    struct json_object *arr = json_object_new_array();
    /* Unfiltered: one page. Filtered: pages until limit kept or the scan bound. */
    int pages = 0;
    do {
        n = eng_list(b->eng, (uint16_t)ri, after_due, after_id, items, limit, &more, &next_due,
                     &next_id);
        scanned += n ? 0 : ENG_LIST_BUDGET / 64; /* an empty page walked, but did not stop */
        for (i = 0; i < n && kept < limit; i++) {
            struct walrec_add a;
            if ((r = eng_read(b->eng, items[i].m, &a)) < 0) {
                free(items);
                json_object_put(arr);
                return api_fail(out, 500, wlog_strerror(r));
            }
            after_due = items[i].due_ms;
            after_id = items[i].id;
            scanned++;
            if (queue && (a.routing_key_len != qlen || memcmp(a.routing_key, queue, qlen)))
                continue;
            if (exchange && (a.exchange_len != xlen || memcmp(a.exchange, exchange, xlen)))
                continue;
            json_object_array_add(arr, message_json(b, &items[i], &a, 0));
            kept++;
        }
        if (i < n) { /* stopped inside the page: the rest of it comes next */
            more = 1;
            next_due = after_due;
            next_id = after_id;
        } else if (more) {
            after_due = next_due;
            after_id = next_id;
        }
    } while (filtered && more && kept < limit && scanned < PENDING_SCAN_MAX && ++pages < 100);
    json_object_object_add(out, "route", json_object_new_string(route));
    if (queue)
        json_object_object_add(out, "queue", json_object_new_string(queue));
    if (exchange)
        json_object_object_add(out, "exchange", api_json_str(exchange, strlen(exchange)));
    json_object_object_add(out, "count", json_object_new_uint64(kept));
    json_object_object_add(out, "messages", arr);
    if (more) {
        char cursor[48];
        snprintf(cursor, sizeof(cursor), "%" PRIu64 "-%" PRIu64, next_due, next_id);
        json_object_object_add(out, "next", json_object_new_string(cursor));
    } else {
        json_object_object_add(out, "next", NULL);
    }
    free(items);
    return 200;
}

static int api_pending_get(void *arg, const char *route, const char *key, struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;
    struct walrec_add a;
    eng_msg m;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (!(m = eng_find(b->eng, (uint16_t)ri, key, strlen(key))))
        return api_fail(out, 404, "no message with this key is pending");
    if ((r = eng_read(b->eng, m, &a)) < 0)
        return api_fail(out, 500, wlog_strerror(r));
    struct eng_item it = {m, a.msg_id, a.due_ms, eng_state(b->eng, m)};
    struct json_object *msg = message_json(b, &it, &a, 1);
    json_object_object_foreach(msg, k, v) json_object_object_add(out, k, json_object_get(v));
    json_object_put(msg);
    return 200;
}

static int api_pending_cancel(void *arg, const char *route, const char *key,
                              struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    r = eng_cancel(b->eng, (uint16_t)ri, key, strlen(key));
    if (r < 0) {
        bridge_fatal(b, "WAL read (cancel)", r);
        return api_fail(out, 500, wlog_strerror(r));
    }
    json_object_object_add(out, "route", api_json_str(route, strlen(route)));
    json_object_object_add(out, "key", api_json_str(key, strlen(key)));
    json_object_object_add(out, "cancelled", json_object_new_boolean(r == 1));
    if (r == 0)
        return 404; /* unknown, already published, or in flight */
    /* Durable before answering. */
    bridge_commit_and_wait(b);
    if (b->exit_code)
        return api_fail(out, 500, "WAL commit failed");
    json_object_object_add(out, "durable", json_object_new_boolean(!eng_dirty(b->eng)));
    return eng_dirty(b->eng) ? 202 : 200;
}

/*
 * POST /drain: make what was received durable and ack it, stop consuming
 * (unacked deliveries go back to the queue, to the other bridges), and from
 * the next turn on publish every held message: back to its ingress exchange
 * with what remains of its delay, or to its target if it is due.
 */
static int api_drain(void *arg, struct json_object *out)
{
    struct bridge *b = arg;
    struct eng_stats es;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (b->stopping)
        return api_fail(out, 409, "stopping");
    eng_stats(b->eng, &es);
    if (!b->drain.active) {
        bridge_commit_and_wait(b);
        if (b->exit_code)
            return api_fail(out, 500, "WAL commit failed");
        bridge_consumers(b, CONSUMERS_PAUSE);
        b->drain.active = 1;
        b->drain.started_ms = clock_mono_ms(); /* for the drain's duration */
        log_info("bridge", "drain started: consuming stopped, handing every held message back "
                 "to its ingress exchange", "held=%" PRIu64 " orphaned=%" PRIu64, es.held,
                 es.orphaned);
    }
    json_object_object_add(out, "draining", json_object_new_boolean(1));
    json_object_object_add(out, "held", json_object_new_uint64(es.held));
    json_object_object_add(out, "handed_back", json_object_new_uint64(b->drain.handed_back));
    return 202;
}

static int api_purge(void *arg, const char *route, const char *due_before, const char *queue,
                     const char *exchange, struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;
    uint64_t before = UINT64_MAX;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (due_before && *due_before && clock_parse(due_before, &before) < 0)
        return api_fail(out, 400, "due_before: expected ms since the epoch or ISO 8601 UTC");
    if (queue && (!*queue || strlen(queue) > 255))
        return api_fail(out, 400, "queue: expected a queue name of 1..255 bytes");
    if (exchange && strlen(exchange) > 255)
        return api_fail(out, 400, "exchange: expected an exchange name of 0..255 bytes");
    if (b->purge.active)
        return api_fail(out, 409, "a purge is already running (see /stats)");
    eng_purge_begin(b->eng, &b->purge.job, (uint16_t)ri, before);
    if (queue) {
        b->purge.job.by_key = 1;
        b->purge.job.routing_key_len = (uint8_t)strlen(queue);
        memcpy(b->purge.job.routing_key, queue, strlen(queue) + 1);
    }
    if (exchange) {
        b->purge.job.by_exchange = 1;
        b->purge.job.exchange_len = (uint8_t)strlen(exchange);
        memcpy(b->purge.job.exchange, exchange, strlen(exchange) + 1);
    }
    b->purge.started = 1;
    b->purge.active = 1;
    log_info("bridge", "purge started", "route=%s queue=%s exchange=%s due_before_ms=%" PRIu64,
             route, LOG_QUOTE_STR(queue), LOG_QUOTE_STR(exchange ? b->purge.job.exchange : NULL),
             before == UINT64_MAX ? 0 : before);
    r = eng_purge_step(b->eng, &b->purge.job, PURGE_AT_ONCE);
    if (r < 0) {
        bridge_fatal(b, "WAL read (purge)", r);
        return api_fail(out, 500, wlog_strerror(r));
    }
    if (r == 0) {
        b->purge.active = 0;
        bridge_commit_and_wait(b);
        log_info("bridge", "purge done", "route=%s removed=%" PRIu64, route,
                 b->purge.job.removed);
    }
    json_object_object_add(out, "route", json_object_new_string(route));
    json_object_object_add(out, "removed", json_object_new_uint64(b->purge.job.removed));
    json_object_object_add(out, "done", json_object_new_boolean(r == 0));
    return r == 0 ? 200 : 202;
}

/* GET /due: what falls due ahead, from the wheel's counters (no WAL read). */
static int api_due(void *arg, struct json_object *out)
{
    struct bridge *b = arg;
    struct duecount_view v;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    uint64_t now = clock_now_ms();
    eng_due_view(b->eng, now, &v);
    ui_due_json(&v, now, out);
    return 200;
}

static void on_http(void *arg, const struct api_request *req, struct api_response *resp)
{
    struct api_ops ops = {api_stats, api_pending_list, api_pending_get, api_pending_cancel,
                          api_purge, api_drain, arg, api_due, bridge_routes_http};

    api_handle(&ops, req, resp);
}

#define HTTP_TOKEN_ENV "DELAY_BRIDGE_HTTP_TOKEN"

/*
 * Beyond loopback without a token never gets here: config.c refuses it
 * (exit 3, naming http.listen). http.c checks Host, Origin, Sec-Fetch-Site,
 * the token and a mutation's content type before the body is read.
 */
int bridge_start_http(struct bridge *b)
{
    const struct config *cfg = b->cfg;
    const char *token = getenv(HTTP_TOKEN_ENV);
    const char *hosts[CONFIG_HTTP_MAX_HOSTS];
    struct http_opts o = {cfg->http_host, cfg->http_port, token, 0, 0, hosts,
                          (unsigned)cfg->http_nallowed_hosts};
    char err[512];

    if (!cfg->http_listen[0])
        return 0;
    for (int i = 0; i < cfg->http_nallowed_hosts; i++)
        hosts[i] = cfg->http_allowed_hosts[i];
    if (http_start(&b->http, b->loop, &o, on_http, b, err, sizeof(err)) < 0) {
        log_error("http", "cannot start the HTTP endpoint", "listen=\"%s\" error=\"%s\"",
                  cfg->http_listen, err);
        return -1;
    }
    log_info("http", "serving", "listen=\"%s\" port=%u auth=%s allowed_hosts=%d",
             cfg->http_listen, (unsigned)http_port(b->http), token && *token ? "bearer" : "none",
             cfg->http_nallowed_hosts);
    return 0;
}
