/*
 * api.h -- what the HTTP endpoint answers, without the HTTP.
 *
 * The transport (http.c, libmicrohttpd on the event loop) turns a request
 * into a struct api_request, calls the daemon's handler, and sends the
 * struct api_response back. api_handle() is that handler's pure part: it
 * routes method and path, asks the daemon for what it needs through
 * struct api_ops, and renders the answer (metrics.c, json-c). Unit tests
 * drive it with a fake api_ops; no socket, no loop.
 *
 * Endpoints (README.md, "Operations"):
 *   GET /healthz  200 "ok\n" while the event loop turns (last turn < 5 s ago), else 503
 *   GET /readyz   200 "ready\n", or 503 with the reason: recovering, consumer or
 *                 publisher connection down, WAL not writable, stopping
 *   GET /metrics  Prometheus text (metrics.h)
 *   GET /stats    JSON: version, instance, per-route counters and gauges, next
 *                 due time, WAL state, connection state, recovery progress
 *
 * Held messages (each answered with JSON; the daemon does the work through
 * the api_ops below, and says whether the change is durable):
 *   GET    /pending?route=R[&limit=N][&after=CURSOR][&queue=Q][&exchange=X]
 *                  R's pending messages in due order, N per page (default
 *                  100, at most 1000), and "next" -- the cursor of the next
 *                  page, null after the last. queue=Q keeps those whose
 *                  routing key is Q: on a retry route, the retries of
 *                  queue Q; exchange=X those published to exchange X: on
 *                  a delayed_exchanges route, X's (a filtered page looks
 *                  at up to 10,000 messages and may hold fewer than N with
 *                  a "next" to follow)
 *   GET    /pending/R/KEY   the message with x-delay-key KEY, with its headers
 *   DELETE /pending/R/KEY   cancel it: 200 {"cancelled": true}, or 404 when no
 *                  such key is pending (unknown, published or in flight)
 *   POST   /purge?route=R[&due_before=T][&queue=Q][&exchange=X]   cancel
 *                  every pending message of R (due before T: ms or ISO
 *                  8601; with routing key Q: on a retry route, the retries
 *                  of queue Q; published to exchange X: on a
 *                  delayed_exchanges route, X's; each read back from the
 *                  log to tell), as a bounded background job:
 *                  200 with "removed" when it finished at once, else 202; its
 *                  progress is in /stats under "purge"
 *   POST   /drain  stop consuming, hand every held message back to its
 *                  route's ingress exchange (x-delay = what remains of its
 *                  delay), then exit 0: 202 {"draining": true, "held": N};
 *                  /readyz says "draining", /stats "drain" the progress
 *   GET    /due    how many held messages fall due in each minute of the next
 *                  hour, hour of the next day, day of the next year (from
 *                  the wheel's counters: no WAL read; ui.h)
 *   GET    /ui     the status page (ui.h): one self-contained HTML page
 *
 * Routes at run time (the daemon's routes file, config.h routes_file):
 *   GET    /routes        {"routes": [ROUTE...]}: every running route, as
 *                  api_route_json() renders it (retired ones too)
 *   GET    /routes/NAME   one route; 404 when none is called NAME
 *   PUT    /routes/NAME   body: a route object (api_route_body()); the
 *                  route added (201) or replaced (200), stored in the
 *                  routes file and running before the answer; 400 a bad
 *                  key (its path named), 409 a route of the -c file or a
 *                  change that waits for a restart ("pending": its keys),
 *                  503 busy (recovering, draining) or started without -c
 *   DELETE /routes/NAME   a route put through the API: 200 {"removed",
 *                  "retired", "held"}; 404 none, 409 a route of the -c file
 * Anything else: 404; a known path with another method: 405 with Allow.
 * HEAD is answered like GET (the transport drops the body).
 */
#ifndef DB_API_H
#define DB_API_H

#include <stddef.h>
#include <stdint.h>

#include "delay-bridge/stats.h"
#include "delay-bridge/strbuf.h"

struct api_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* "/metrics": no query string, not decoded further */
    /* A query argument by name (already %-decoded), NULL if absent. */
    const char *(*arg)(void *ctx, const char *name);
    void *ctx;
    const char *body; /* request body, may be NULL */
    size_t body_len;
};

struct api_response {
    int status;               /* HTTP status code */
    const char *content_type; /* static string */
    const char *allow;        /* for 405: the Allow header value, else NULL */
    struct strbuf body;       /* owned by the response; the transport frees it */
};

struct json_object;

struct api_ops {
    /* Fill a snapshot (stats.h). Strings in it stay valid until the next call. */
    void (*stats)(void *arg, struct db_stats *out);
    /*
     * The held-message endpoints: fill the JSON object out and return the
     * HTTP status (404 for an unknown route or key, 400 for a bad argument,
     * with {"error": "..."}). NULL: the endpoint answers 404.
     */
    int (*pending_list)(void *arg, const char *route, const char *after, unsigned limit,
                        const char *queue, const char *exchange, struct json_object *out);
    int (*pending_get)(void *arg, const char *route, const char *key, struct json_object *out);
    int (*pending_cancel)(void *arg, const char *route, const char *key,
                          struct json_object *out);
    int (*purge)(void *arg, const char *route, const char *due_before, const char *queue,
                 const char *exchange, struct json_object *out);
    int (*drain)(void *arg, struct json_object *out);
    void *arg;
    /* GET /due: what falls due ahead (ui.h's ui_due_json); NULL: 404. */
    int (*due)(void *arg, struct json_object *out);
    /*
     * The route API: method "GET" (for HEAD too), "PUT" or "DELETE"; name:
     * NAME of /routes/NAME, NULL for /routes (GET only); body: a PUT's
     * (NULL, 0: none). Fills out, returns the HTTP status. NULL: 404.
     */
    int (*routes)(void *arg, const char *method, const char *name, const char *body,
                  size_t body_len, struct json_object *out);
};

/* Answer req into *resp (initialised here). Never fails: errors are HTTP statuses. */
void api_handle(const struct api_ops *ops, const struct api_request *req,
                struct api_response *resp);

/*
 * A JSON string (json-c, new reference) of n bytes that may not be UTF-8
 * (AMQP strings are bytes): invalid bytes become U+FFFD, so the document
 * stays valid JSON.
 */
struct json_object *api_json_str(const void *p, size_t n);

struct walrec_add;

/*
 * A held message as the JSON of GET /pending (full = 0) and GET
 * /pending/R/KEY (full = 1): "id" ("<log_id, 16 hex>-<msg id>"), "due_ms",
 * "due", "state" ("due" when due, else "waiting"), "key", "routing_key",
 * "size", "enqueued_ms", "message_id"; full adds "exchange" and
 * "properties". props: the message's AMQP properties as JSON
 * (broker_msg_props_json), or NULL; taken over. a's strings are borrowed.
 * Returns a new reference.
 */
struct json_object *api_message_json(uint64_t log_id, uint64_t id, uint64_t due_ms, int due,
                                     const struct walrec_add *a, struct json_object *props,
                                     int full);

struct config_route;

/*
 * A route as GET /routes shows it (api_routes.c): every key of the route
 * as the file writes it, defaults included, in the schema's order
 * (config_keys.def) -- "vhost" the effective one (vhost;
 * config_route_vhost), "target_exchange" null for a retry or
 * delayed_exchanges route, "template" null for none -- then "source"
 * ("file" | "api"), "retired" and "held" (held: < 0 = not known yet,
 * null), so that the object PUT back (through api_route_body) makes the
 * same route. A new reference.
 */
struct json_object *api_route_json(const struct config_route *r, const char *vhost,
                                   int64_t held);

/*
 * A PUT /routes/NAME body (len bytes of JSON) made the route object the
 * routes file keeps: what GET adds and a file may not hold is dropped --
 * "source", "retired", "held", every key whose value is null, and "vhost"
 * when it is default_vhost (the broker URI's: GET shows the effective
 * vhost, the file keeps "" for it). Returns the compact JSON text
 * (malloc'd), or NULL with "body: ..." in err (not JSON, not an object).
 */
char *api_route_body(const char *body, size_t len, const char *default_vhost, char *err,
                     size_t errlen);


#endif
