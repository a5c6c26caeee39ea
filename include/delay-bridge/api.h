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
 * Anything else: 404; a known path with another method: 405 with Allow.
 * HEAD is answered like GET (the transport drops the body).
 */
#ifndef DB_API_H
#define DB_API_H

#include <stddef.h>

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

struct api_ops {
    /* Fill a snapshot (stats.h). Strings in it stay valid until the next call. */
    void (*stats)(void *arg, struct db_stats *out);
    void *arg;
};

/* Answer req into *resp (initialised here). Never fails: errors are HTTP statuses. */
void api_handle(const struct api_ops *ops, const struct api_request *req,
                struct api_response *resp);

/* Why the daemon is not ready ("" when it is), from a snapshot. */
const char *api_not_ready_reason(const struct db_stats *s);

#endif
