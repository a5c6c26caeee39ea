/*
 * api.c -- what the HTTP endpoint answers, without the HTTP (api.h).
 *
 * Routes
 * ------
 *   path       methods     200                         else
 *   /healthz   GET, HEAD   "ok\n"                      503 "event loop stalled\n"
 *   /readyz    GET, HEAD   "ready\n"                   503 "not ready: REASON\n"
 *   /metrics   GET, HEAD   Prometheus text (metrics.c)
 *   /stats     GET, HEAD   JSON (below)
 *   /pending   GET, HEAD   JSON page of pending messages (api_ops.pending_list)
 *   /pending/R/KEY  GET, HEAD, DELETE  one message / cancel it
 *   /purge     POST        JSON: the purge job
 *   /drain     POST        202 JSON: handing every held message back, then exit 0
 *   /routes    GET, HEAD   JSON: every running route (api_ops.routes; api_routes.c renders)
 *   /routes/NAME  GET, HEAD, PUT, DELETE  one route / put it / delete it
 *   other      any         404 "not found\n"
 *   known      other       405 "method not allowed\n", Allow: the methods above
 *
 * Every body is rendered for HEAD too: the transport drops it, and the
 * Content-Length it sends is then the one GET would have.
 *
 * Liveness is "the event loop turned in the last 5 s": the snapshot carries
 * the wall clock of the last loop turn, and a loop that is stuck (a blocking
 * call, a livelock) cannot update it -- although, since this code runs on
 * the loop itself, a stuck loop never answers at all; the 503 is for a
 * snapshot that a future transport thread would take.
 *
 * Readiness: not ready while any of these holds, the reason reported being
 * the first that applies, most final first:
 *
 *   draining                    POST /drain: held messages go back to the
 *                               ingress, then the process exits
 *   stopping                    SIGTERM received, waiting for confirms: will not come back
 *   standby (another bridge     wal.replicate: waiting for the lease of the log
 *     holds the WAL lease)      (or for the broker, to ask for it)
 *   recovering                  the WAL replay has not rebuilt the held set
 *   WAL not writable            a write or fsync failed, or out of space
 *   held limit reached ...      a route's max_held or limits.max_held: consuming
 *                               paused (the reason names the key path)
 *   consumer connection down    BLOCKED counts as connected (it is a broker
 *   publisher connection down   flow-control state, not an outage)
 *
 * /stats JSON (numbers are JSON numbers; *_ms are ms since the Unix epoch,
 * 0 = none; next_due is the same instant as ISO-8601 UTC, null when none):
 *
 *   { "version", "instance", "now_ms", "start_ms", "uptime_seconds",
 *     "recovery": { "recovered": bool, "seconds", "progress" },
 *     "connections": { "consumer": "up"|"down"|"blocked", "publisher": ... },
 *     "stopping": bool, "ready": bool, "reason": string | null,
 *     "held", "orphaned", "next_due_ms", "next_due", "ram_bytes", "rss_bytes",
 *     "held_limit": { "max_held" (null: 0, no bound), "paused": bool, "pauses",
 *                     "reason": string | null },
 *     "wal": { "segments", "disk_bytes", "live_bytes", "live_records", "commits",
 *              "appended_bytes", "compacted_bytes", "failed": bool,
 *              "writable": bool, "fsync": { "count", "sum_seconds" },
 *              "checkpoint": { "state": "idle"|"writing"|"sealing", "progress",
 *                              "installed", "failed", "lsn", "bytes",
 *                              "age_seconds", "seconds", "used_at_start": bool },
 *              "replication": { "state": "connecting"|"standby"|"importing"|"owner"|
 *                               "failed", "stream", "complete": bool,
 *                               "imported_records", "imported_bytes",
 *                               "import_seconds", "standby_seconds", "lease_renewals", "resumed",
 *                               "refused",
 *                               "published_messages", "published_bytes",
 *                               "horizons", "horizon_lsn", "horizon_running": bool,
 *                               "needed_bytes", "confirm": { "count", "sum_seconds" } }
 *                               (only with wal.replicate) },
 *     "drain": { "handed_back", "remaining", "done": bool } (only while draining),
 *     "routes": [ { "name", "target_exchange", "vhost", "retired" (removed at
 *                   run time, still publishing what it holds), "consume_refused"
 *                   (its declares refused by the broker, retried), <every counter and gauge of
 *                   struct db_route_stats under its field name>,
 *                   "next_due_ms", "next_due", "channel_open": bool,
 *                   "lateness": { "count", "sum_seconds" }, "fire_stages": { "wake",
 *                   "read", "write", "confirm": each as "lateness" } (stats.h),
 *                   "max_held" (null: none of its own), "held_limit_paused": bool,
 *                   "held_limit_pauses" } ],
 *     "reload": { "count", "refused", "last", "pending_changes", "error" } (SIGHUP),
 *     "retry": [ { "route", "queue", "retries", "parked": { "max_attempts", "reason",
 *                  "no_queue", "queue_gone", "invalid" }, "attempts_le": { "1", "2", ...,
 *                  "+Inf": cumulative counts }, "attempts_sum" } ] (retry routes, per queue),
 *     "exchanges": [ { "route", "exchange", "published" } ] (delayed_exchanges routes, per
 *                  exchange: publishes to it) }
 *
 * Pure: the snapshot comes from api_ops, the answer goes to a strbuf; the
 * json-c objects live only inside render_stats() and the section builders
 * it calls (recovery_json, wal_json, checkpoint_json, replication_json,
 * add_operations), each a part of the document in its order above.
 */
#include "delay-bridge/api.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/clock.h"
#include "delay-bridge/retry.h"
#include "delay-bridge/walrec.h"
#include "metrics.h"
#include "ready.h"
#include "delay-bridge/ui.h"

#define API_TEXT "text/plain; charset=utf-8"
#define API_JSON "application/json"
#define API_ALLOW "GET, HEAD"
#define API_LIVENESS_MS 5000

/* ---- JSON helpers ---- */

static const char *conn_name(enum db_conn_state c)
{
    switch (c) {
    case DB_CONN_UP: return "up";
    case DB_CONN_BLOCKED: return "blocked";
    default: return "down";
    }
}

static json_object *jstr(const char *s)
{
    return json_object_new_string(s ? s : "");
}

/* Doubles with 15 significant digits (json-c's default is 17: 0.1 -> 0.10000000000000001). */
static json_object *jdouble(double d)
{
    if (!isfinite(d))
        return NULL; /* JSON null */
    char buf[64];
    snprintf(buf, sizeof buf, "%.15g", d);
    return json_object_new_double_s(d, buf);
}

/* "2026-11-22T05:02:28.123Z", or JSON null for 0. */
static json_object *jtime(uint64_t ms)
{
    if (!ms)
        return NULL;
    char buf[CLOCK_ISO_LEN];
    return json_object_new_string(clock_iso8601(ms, buf));
}

static void add(json_object *o, const char *k, json_object *v)
{
    json_object_object_add(o, k, v);
}

static void add_u64(json_object *o, const char *k, uint64_t v)
{
    add(o, k, json_object_new_uint64(v));
}

/* The upper bound of the bucket holding quantile q (null: no observation, or +Inf). */
static json_object *hist_quantile_le(const struct db_hist *h, double q)
{
    uint64_t cum = 0;
    if (!h->n)
        return NULL;
    for (int i = 0; i < DB_HIST_BUCKETS; i++) {
        cum += h->count[i];
        if ((double)cum >= q * (double)h->n)
            return jdouble(db_hist_le[i]);
    }
    return NULL;
}

static json_object *hist_summary(const struct db_hist *h)
{
    json_object *o = json_object_new_object();
    add_u64(o, "count", h->n);
    add(o, "sum_seconds", jdouble(h->sum));
    /* since start: at most this many seconds for half of them, for 99 % of them */
    add(o, "p50_le_seconds", hist_quantile_le(h, 0.50));
    add(o, "p99_le_seconds", hist_quantile_le(h, 0.99));
    return o;
}

static json_object *route_json(const struct db_route_stats *r)
{
    json_object *o = json_object_new_object();
    add(o, "name", jstr(r->name));
    add(o, "target_exchange", jstr(r->target_exchange));
    add(o, "vhost", jstr(r->vhost ? r->vhost : ""));
    add(o, "retired", json_object_new_boolean(r->retired));
    add(o, "consume_refused", json_object_new_boolean(r->consume_refused));
    add_u64(o, "received", r->received);
    add_u64(o, "rejected", r->rejected);
    add_u64(o, "invalid_delay", r->invalid_delay);
    add_u64(o, "invalid_key", r->invalid_key);
    add_u64(o, "deduplicated", r->deduplicated);
    add_u64(o, "unstamped", r->unstamped);
    add_u64(o, "key_events_sent", r->key_events_sent);
    add_u64(o, "key_events_received", r->key_events_received);
    add_u64(o, "key_events_applied", r->key_events_applied);
    add_u64(o, "dead_lettered", r->dead_lettered);
    add_u64(o, "refused", r->refused);
    add_u64(o, "published", r->published);
    add_u64(o, "confirmed", r->confirmed);
    add_u64(o, "nacked", r->nacked);
    add_u64(o, "publish_retries", r->publish_retries);
    add_u64(o, "returned", r->returned);
    add_u64(o, "cancelled", r->cancelled);
    add_u64(o, "cancel_missed", r->cancel_missed);
    add_u64(o, "waiting", r->waiting);
    add_u64(o, "due", r->due);
    add_u64(o, "inflight", r->inflight);
    add_u64(o, "pending", r->pending);
    add_u64(o, "oldest_due_ms", r->oldest_due_ms);
    add(o, "oldest_due", jtime(r->oldest_due_ms));
    add(o, "channel_open", json_object_new_boolean(r->channel_open != 0));
    if (r->stream_offset >= -1) /* a stream ingress; null: reading from the first */
        add(o, "stream_offset",
            r->stream_offset >= 0 ? json_object_new_int64(r->stream_offset) : NULL);
    add(o, "lateness", hist_summary(&r->lateness));
    json_object *st = json_object_new_object();
    for (int k = 0; k < DB_STAGES; k++)
        add(st, db_stage_names[k], hist_summary(&r->stage[k]));
    add(o, "fire_stages", st);
    add(o, "max_held", r->max_held ? json_object_new_uint64(r->max_held) : NULL);
    add(o, "held_limit_paused", json_object_new_boolean(r->held_limit_paused != 0));
    add_u64(o, "held_limit_pauses", r->held_limit_pauses);
    return o;
}

/* /stats "recovery": whether the held set is back, and how long it took. */
/* Retry routes, a row per (route, queue): retries, parks by reason, attempts. */
static json_object *retry_json(const struct db_stats *s)
{
    json_object *a = json_object_new_array();

    for (int i = 0; s->retry && i < s->nretry; i++) {
        const struct db_retry_stats *r = &s->retry[i];
        json_object *o = json_object_new_object(), *p = json_object_new_object();
        json_object *h = json_object_new_object();
        uint64_t cum = 0;
        char le[16];
        add(o, "route", jstr(r->route));
        add(o, "queue", jstr(r->queue));
        add_u64(o, "retries", r->retries);
        for (int j = 0; j < RETRY_PARK_REASONS; j++)
            add_u64(p, retry_park_reasons[j], r->parked[j]);
        add(o, "parked", p);
        for (int j = 0; j < DB_RETRY_BUCKETS; j++) {
            cum += r->attempts[j];
            if (j == DB_RETRY_BUCKETS - 1)
                snprintf(le, sizeof le, "+Inf");
            else
                snprintf(le, sizeof le, "%u", (unsigned)db_retry_le[j]);
            add_u64(h, le, cum);
        }
        add(o, "attempts_le", h);
        add_u64(o, "attempts_sum", r->attempts_sum);
        json_object_array_add(a, o);
    }
    return a;
}

/* delayed_exchanges routes, a row per (route, exchange): publishes to it. */
static json_object *exchanges_json(const struct db_stats *s)
{
    json_object *a = json_object_new_array();

    for (int i = 0; s->exchanges && i < s->nexchanges; i++) {
        json_object *o = json_object_new_object();
        add(o, "route", jstr(s->exchanges[i].route));
        add(o, "exchange", api_json_str(s->exchanges[i].exchange, strlen(s->exchanges[i].exchange)));
        add_u64(o, "published", s->exchanges[i].published);
        json_object_array_add(a, o);
    }
    return a;
}

static json_object *recovery_json(const struct db_stats *s)
{
    json_object *rec = json_object_new_object();
    add(rec, "recovered", json_object_new_boolean(s->recovered != 0));
    add(rec, "seconds", jdouble(s->recovery_seconds));
    add(rec, "progress", jdouble(s->recovery_progress));
    return rec;
}

/* /stats "wal.checkpoint": the checkpoint being written and the one installed. */
static json_object *checkpoint_json(const struct db_wal_stats *w)
{
    json_object *ck = json_object_new_object();
    add(ck, "state", jstr(w->ckpt_state ? w->ckpt_state : "idle"));
    add(ck, "progress", jdouble(w->ckpt_progress));
    add_u64(ck, "installed", w->ckpt_installed);
    add_u64(ck, "failed", w->ckpt_failed);
    add_u64(ck, "lsn", w->ckpt_lsn);
    add_u64(ck, "bytes", w->ckpt_bytes);
    add(ck, "age_seconds", jdouble(w->ckpt_age_seconds));
    add(ck, "seconds", jdouble(w->ckpt_seconds));
    add(ck, "used_at_start", json_object_new_boolean(w->ckpt_used_at_start != 0));
    return ck;
}

/* /stats "wal.replication": a replicated log's stream, lease and import (w->repl only). */
static json_object *replication_json(const struct db_wal_stats *w)
{
    json_object *rj = json_object_new_object();
    add(rj, "state", jstr(w->repl_state));
    add(rj, "stream", jstr(w->repl_stream));
    add(rj, "complete", json_object_new_boolean(w->repl_complete != 0));
    add_u64(rj, "imported_records", w->repl_imported_records);
    add_u64(rj, "imported_bytes", w->repl_imported_bytes);
    add(rj, "import_seconds", jdouble(w->repl_import_seconds));
    add(rj, "standby_seconds", jdouble(w->repl_standby_seconds));
    add_u64(rj, "published_messages", w->repl_published_messages);
    add_u64(rj, "published_bytes", w->repl_published_bytes);
    add_u64(rj, "horizons", w->repl_horizons);
    add_u64(rj, "horizon_lsn", w->repl_horizon_lsn);
    add(rj, "horizon_running", json_object_new_boolean(w->repl_horizon_running != 0));
    add_u64(rj, "needed_bytes", w->repl_needed_bytes);
    add_u64(rj, "max_bytes", w->repl_max_bytes);
    add(rj, "confirm", hist_summary(&w->repl_confirm));
    add_u64(rj, "lease_renewals", w->repl_lease_renewals);
    add(rj, "resumed", json_object_new_boolean(w->repl_resumed != 0));
    add_u64(rj, "refused", w->repl_refused);
    return rj;
}

/* /stats "wal": the log's size, space, intake gate, compaction, checkpoint, replication. */
static json_object *wal_json(const struct db_wal_stats *w)
{
    json_object *wal = json_object_new_object();
    add_u64(wal, "segments", w->segments);
    add_u64(wal, "disk_bytes", w->disk_bytes);
    add_u64(wal, "live_bytes", w->live_bytes);
    add_u64(wal, "live_records", w->live_records);
    add_u64(wal, "commits", w->commits);
    add_u64(wal, "appended_bytes", w->appended_bytes);
    add_u64(wal, "compacted_bytes", w->compacted_bytes);
    add(wal, "failed", json_object_new_boolean(w->failed != 0));
    add(wal, "writable", json_object_new_boolean(w->writable != 0));
    add(wal, "disk_full", json_object_new_boolean(w->no_space != 0));
    add(wal, "intake_paused", json_object_new_boolean(w->intake_paused != 0));
    add_u64(wal, "intake_pauses", w->intake_pauses);
    add_u64(wal, "free_bytes", w->free_bytes);
    add_u64(wal, "reserve_bytes", w->reserve_bytes);
    add_u64(wal, "reserve_held", w->reserve_held);
    add_u64(wal, "reserve_spent", w->reserve_spent);
    add_u64(wal, "intake_waiting", w->intake_waiting);
    add_u64(wal, "intake_waiting_bytes", w->intake_waiting_bytes);
    add(wal, "fsync", hist_summary(&w->fsync));
    if (w->compact_segment) {
        json_object *cj = json_object_new_object();
        add_u64(cj, "segment", w->compact_segment);
        add(cj, "progress", jdouble(w->compact_progress));
        add(wal, "compaction", cj);
    }
    add(wal, "checkpoint", checkpoint_json(w));
    if (w->repl)
        add(wal, "replication", replication_json(w));
    return wal;
}

/* /stats "purge" (a purge started) and "drain" (a drain active), added to root. */
static void add_operations(json_object *root, const struct db_stats *s)
{
    if (s->purge.started) {
        json_object *pj = json_object_new_object();
        add(pj, "route", jstr(s->purge.route));
        if (s->purge.queue)
            add(pj, "queue", jstr(s->purge.queue));
        if (s->purge.exchange)
            add(pj, "exchange", api_json_str(s->purge.exchange, strlen(s->purge.exchange)));
        add_u64(pj, "due_before_ms", s->purge.due_before == UINT64_MAX ? 0 : s->purge.due_before);
        add_u64(pj, "removed", s->purge.removed);
        add(pj, "done", json_object_new_boolean(s->purge.done != 0));
        add(pj, "progress", jdouble(s->purge.progress));
        add(root, "purge", pj);
    }
    if (s->drain.active) {
        json_object *dj = json_object_new_object();
        add_u64(dj, "handed_back", s->drain.handed_back);
        add_u64(dj, "remaining", s->drain.remaining);
        add(dj, "done", json_object_new_boolean(s->drain.done != 0));
        add(root, "drain", dj);
    }
}

/* The /stats document: the top-level figures, then each section in a fixed order. */
static void render_stats(const struct db_stats *s, struct strbuf *out)
{
    json_object *root = json_object_new_object();
    add(root, "version", jstr(s->version));
    add(root, "instance", jstr(s->instance));
    add_u64(root, "now_ms", s->now_ms);
    add_u64(root, "start_ms", s->start_ms);
    add(root, "uptime_seconds",
        jdouble(s->now_ms > s->start_ms ? (double)(s->now_ms - s->start_ms) / 1000.0 : 0.0));
    add(root, "recovery", recovery_json(s));

    json_object *conns = json_object_new_object();
    add(conns, "consumer", jstr(conn_name(s->consumer)));
    add(conns, "publisher", jstr(conn_name(s->publisher)));
    json_object *vh = json_object_new_array();
    for (int k = 0; k < s->nvhosts; k++) {
        json_object *v = json_object_new_object();
        add(v, "vhost", jstr(s->vhosts[k].vhost));
        add(v, "consumer", jstr(conn_name(s->vhosts[k].consumer)));
        add(v, "publisher", jstr(conn_name(s->vhosts[k].publisher)));
        add(v, "routes", json_object_new_int(s->vhosts[k].routes));
        json_object_array_add(vh, v);
    }
    add(conns, "vhosts", vh);
    add(root, "connections", conns);

    const char *reason = ready_reason(s);
    add(root, "stopping", json_object_new_boolean(s->stopping != 0));
    add(root, "ready", json_object_new_boolean(reason[0] == '\0'));
    add(root, "reason", reason[0] ? jstr(reason) : NULL);

    add_u64(root, "held", s->held);
    add_u64(root, "orphaned", s->orphaned);
    add_u64(root, "next_due_ms", s->next_due_ms);
    add(root, "next_due", jtime(s->next_due_ms));
    add_u64(root, "ram_bytes", s->ram_bytes);
    add_u64(root, "rss_bytes", s->rss_bytes);
    json_object *hl = json_object_new_object(); /* limits.max_held */
    add(hl, "max_held", s->held_limit.max_held ? json_object_new_uint64(s->held_limit.max_held)
                                               : NULL);
    add(hl, "paused", json_object_new_boolean(s->held_limit.paused != 0));
    add_u64(hl, "pauses", s->held_limit.pauses);
    add(hl, "reason", s->held_limit.reason ? jstr(s->held_limit.reason) : NULL);
    add(root, "held_limit", hl);
    add(root, "wal", wal_json(&s->wal));
    add_operations(root, s);

    json_object *routes = json_object_new_array();
    for (int i = 0; s->routes && i < s->nroutes; i++)
        json_object_array_add(routes, route_json(&s->routes[i]));
    add(root, "routes", routes);
    add(root, "retry", retry_json(s));
    add(root, "exchanges", exchanges_json(s));
    json_object *rl = json_object_new_object();
    add_u64(rl, "count", s->reload.count);
    add_u64(rl, "refused", s->reload.refused);
    add(rl, "last", s->reload.last_ms ? jtime(s->reload.last_ms) : NULL);
    add_u64(rl, "pending_changes", (uint64_t)s->reload.pending);
    add(rl, "error", s->reload.error && *s->reload.error ? jstr(s->reload.error) : NULL);
    add(root, "reload", rl);

    size_t n = 0;
    const char *text = json_object_to_json_string_length(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    strbuf_append(out, text, n);
    strbuf_puts(out, "\n");
    json_object_put(root);
}

/* ---- routing ---- */

enum api_route {
    R_NONE, R_HEALTHZ, R_READYZ, R_METRICS, R_STATS, R_PENDING, R_MESSAGE, R_PURGE, R_DRAIN,
    R_DUE, R_UI, R_ROUTES, R_ROUTE
};

static enum api_route route_of(const char *path)
{
    if (!path)
        return R_NONE;
    if (!strcmp(path, "/pending"))
        return R_PENDING;
    if (!strncmp(path, "/pending/", 9))
        return R_MESSAGE;
    if (!strcmp(path, "/purge"))
        return R_PURGE;
    if (!strcmp(path, "/drain"))
        return R_DRAIN;
    if (!strcmp(path, "/healthz"))
        return R_HEALTHZ;
    if (!strcmp(path, "/readyz"))
        return R_READYZ;
    if (!strcmp(path, "/metrics"))
        return R_METRICS;
    if (!strcmp(path, "/stats"))
        return R_STATS;
    if (!strcmp(path, "/due"))
        return R_DUE;
    if (!strcmp(path, "/ui"))
        return R_UI;
    if (!strcmp(path, "/routes"))
        return R_ROUTES;
    if (!strncmp(path, "/routes/", 8))
        return R_ROUTE;
    return R_NONE;
}

static void text(struct api_response *resp, int status, const char *body)
{
    resp->status = status;
    resp->content_type = API_TEXT;
    strbuf_puts(&resp->body, body);
}

static void json_answer(struct api_response *resp, int status, struct json_object *o)
{
    size_t n = 0;
    const char *t = json_object_to_json_string_length(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE, &n);

    resp->status = status;
    resp->content_type = API_JSON;
    strbuf_append(&resp->body, t, n);
    strbuf_puts(&resp->body, "\n");
    json_object_put(o);
}

static void json_error(struct api_response *resp, int status, const char *why)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "error", json_object_new_string(why));
    json_answer(resp, status, o);
}

static const char *arg(const struct api_request *req, const char *name)
{
    return req->arg ? req->arg(req->ctx, name) : NULL;
}

/*
 * 405 with Allow when the method is not one the endpoint takes, 404 when the
 * daemon does not offer it (its api_ops entry is NULL). 1 if answered.
 */
static int refused(struct api_response *resp, int method_ok, const char *allow, int offered)
{
    if (!method_ok) {
        text(resp, 405, "method not allowed\n");
        resp->allow = allow;
        return 1;
    }
    if (!offered) {
        text(resp, 404, "not found\n");
        return 1;
    }
    return 0;
}

/* The held-message endpoints: argument checks here, the work in api_ops. */
static void held_messages(const struct api_ops *ops, const struct api_request *req,
                          enum api_route r, const char *m, struct api_response *resp)
{
    struct json_object *o;
    int status;

    if (r == R_DRAIN) {
        if (refused(resp, !strcmp(m, "POST"), "POST", ops->drain != NULL))
            return;
        o = json_object_new_object();
        status = ops->drain(ops->arg, o);
        json_answer(resp, status, o);
        return;
    }
    if (r == R_PURGE) {
        const char *route = arg(req, "route");
        if (refused(resp, !strcmp(m, "POST"), "POST", ops->purge != NULL))
            return;
        if (!route || !*route) {
            json_error(resp, 400, "route=NAME is required");
            return;
        }
        o = json_object_new_object();
        status = ops->purge(ops->arg, route, arg(req, "due_before"), arg(req, "queue"),
                            arg(req, "exchange"), o);
        json_answer(resp, status, o);
        return;
    }
    if (r == R_PENDING) {
        const char *route = arg(req, "route"), *lim = arg(req, "limit");
        unsigned long limit = 100;
        char *end;
        if (refused(resp, !strcmp(m, "GET") || !strcmp(m, "HEAD"), API_ALLOW,
                    ops->pending_list != NULL))
            return;
        if (!route || !*route) {
            json_error(resp, 400, "route=NAME is required");
            return;
        }
        if (lim) {
            limit = strtoul(lim, &end, 10);
            if (!*lim || *end || limit < 1 || limit > 1000) {
                json_error(resp, 400, "limit must be 1..1000");
                return;
            }
        }
        o = json_object_new_object();
        status = ops->pending_list(ops->arg, route, arg(req, "after"), (unsigned)limit,
                                   arg(req, "queue"), arg(req, "exchange"), o);
        json_answer(resp, status, o);
        return;
    }
    /* /pending/ROUTE/KEY: route names have no '/', a key may */
    const char *rest = req->path + 9, *slash = strchr(rest, '/');
    char route[256];
    if (!slash || slash == rest || (size_t)(slash - rest) >= sizeof(route) || !slash[1]) {
        json_error(resp, 404, "expected /pending/ROUTE/KEY");
        return;
    }
    memcpy(route, rest, (size_t)(slash - rest));
    route[slash - rest] = '\0';
    int del = !strcmp(m, "DELETE");
    if (refused(resp, del || !strcmp(m, "GET") || !strcmp(m, "HEAD"), "GET, HEAD, DELETE",
                (del ? ops->pending_cancel : ops->pending_get) != NULL))
        return;
    o = json_object_new_object();
    status = del ? ops->pending_cancel(ops->arg, route, slash + 1, o)
                 : ops->pending_get(ops->arg, route, slash + 1, o);
    json_answer(resp, status, o);
}

/* /routes and /routes/NAME: the method and the name checked here, the work in api_ops.routes. */
static void route_api(const struct api_ops *ops, const struct api_request *req, enum api_route r,
                      const char *m, struct api_response *resp)
{
    const char *name = r == R_ROUTE ? req->path + 8 : NULL;
    int get = !strcmp(m, "GET") || !strcmp(m, "HEAD");
    int ok = get || (name && (!strcmp(m, "PUT") || !strcmp(m, "DELETE")));

    if (refused(resp, ok, name ? "GET, HEAD, PUT, DELETE" : API_ALLOW, ops->routes != NULL))
        return;
    if (name && (!*name || strchr(name, '/'))) {
        json_error(resp, 404, "expected /routes/NAME");
        return;
    }
    struct json_object *o = json_object_new_object();
    int status = ops->routes(ops->arg, get ? "GET" : m, name, req->body, req->body_len, o);
    json_answer(resp, status, o);
}

void api_handle(const struct api_ops *ops, const struct api_request *req,
                struct api_response *resp)
{
    resp->status = 500;
    resp->content_type = API_TEXT;
    resp->allow = NULL;
    resp->body = (struct strbuf)STRBUF_INIT;

    enum api_route r = route_of(req->path);
    if (r == R_NONE) {
        text(resp, 404, "not found\n");
        return;
    }
    const char *m = req->method ? req->method : "";
    if (r == R_PENDING || r == R_MESSAGE || r == R_PURGE || r == R_DRAIN) {
        held_messages(ops, req, r, m, resp);
        return;
    }
    if (r == R_ROUTES || r == R_ROUTE) {
        route_api(ops, req, r, m, resp);
        return;
    }
    if (strcmp(m, "GET") && strcmp(m, "HEAD")) {
        text(resp, 405, "method not allowed\n");
        resp->allow = API_ALLOW;
        return;
    }
    if (r == R_UI) {
        size_t n;
        const char *page = ui_page(&n);
        resp->status = 200;
        resp->content_type = UI_CONTENT_TYPE;
        strbuf_append(&resp->body, page, n);
        return;
    }
    if (r == R_DUE) {
        if (refused(resp, 1, API_ALLOW, ops->due != NULL))
            return;
        struct json_object *o = json_object_new_object();
        int status = ops->due(ops->arg, o);
        json_answer(resp, status, o);
        return;
    }

    struct db_stats s;
    memset(&s, 0, sizeof s);
    ops->stats(ops->arg, &s);

    switch (r) {
    case R_HEALTHZ:
        /* A loop_turn_ms in the future (clock stepped back) counts as fresh. */
        if (s.loop_turn_ms >= s.now_ms || s.now_ms - s.loop_turn_ms < API_LIVENESS_MS)
            text(resp, 200, "ok\n");
        else
            text(resp, 503, "event loop stalled\n");
        break;
    case R_READYZ: {
        const char *reason = ready_reason(&s);
        if (!reason[0]) {
            text(resp, 200, "ready\n");
        } else {
            resp->status = 503;
            resp->content_type = API_TEXT;
            strbuf_printf(&resp->body, "not ready: %s\n", reason);
        }
        break;
    }
    case R_METRICS:
        resp->status = 200;
        resp->content_type = METRICS_CONTENT_TYPE;
        metrics_render(&s, &resp->body);
        break;
    case R_STATS:
        resp->status = 200;
        resp->content_type = API_JSON;
        render_stats(&s, &resp->body);
        break;
    default:
        break;
    }
}

struct json_object *api_json_str(const void *p, size_t n)
{
    struct strbuf b = STRBUF_INIT;
    struct json_object *o;

    strbuf_append_utf8(&b, p ? p : "", p ? n : 0);
    o = json_object_new_string_len(b.p ? b.p : "", (int)b.len);
    strbuf_free(&b);
    return o;
}

struct json_object *api_message_json(uint64_t log_id, uint64_t id, uint64_t due_ms, int due,
                                     const struct walrec_add *a, struct json_object *props,
                                     int full)
{
    struct json_object *o = json_object_new_object();
    char iso[CLOCK_ISO_LEN], sid[40];

    snprintf(sid, sizeof(sid), "%016" PRIx64 "-%" PRIu64, log_id, id);
    json_object_object_add(o, "id", json_object_new_string(sid));
    json_object_object_add(o, "due_ms", json_object_new_uint64(due_ms));
    json_object_object_add(o, "due", json_object_new_string(clock_iso8601(due_ms, iso)));
    json_object_object_add(o, "state", json_object_new_string(due ? "due" : "waiting"));
    json_object_object_add(o, "key", a->key ? api_json_str(a->key, a->key_len) : NULL);
    json_object_object_add(o, "exchange", api_json_str(a->exchange, a->exchange_len));
    json_object_object_add(o, "routing_key", api_json_str(a->routing_key, a->routing_key_len));
    json_object_object_add(o, "size", json_object_new_uint64(a->body_len));
    json_object_object_add(o, "enqueued_ms", json_object_new_uint64(a->enqueue_ms));
    struct json_object *mid = NULL;
    if (props && json_object_object_get_ex(props, "message_id", &mid))
        json_object_object_add(o, "message_id", json_object_get(mid));
    else
        json_object_object_add(o, "message_id", NULL);
    if (full) {
        json_object_object_add(o, "properties", props);
        props = NULL;
    }
    json_object_put(props);
    return o;
}
