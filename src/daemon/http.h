/*
 * http.h -- the daemon's HTTP endpoint: libmicrohttpd on the libev loop.
 *
 * libmicrohttpd runs without a thread of its own, in its epoll mode: its
 * epoll fd is one ev_io watcher of the daemon's loop, its next timeout one
 * ev_timer, and MHD_run() is called from them. The loop never blocks on a
 * client: a slow or stalled client (slowloris) holds only its own
 * connection, which times out; oversized requests (a 1 MiB header) are
 * refused by libmicrohttpd's per-connection memory limit with 431/413.
 *
 * Every request is answered synchronously by the handler, on the loop.
 * Before the handler, and before a request body is read, every path but
 * the probes /healthz and /readyz passes these checks (http.c says why):
 *   421  with no token: a Host that is not a loopback name or address, nor
 *        one of allowed_hosts (DNS rebinding);
 *   403  Sec-Fetch-Site other than same-origin/none, or an Origin that is
 *        not this endpoint's own (a web page in the operator's browser);
 *   401  a token is set and "Authorization: Bearer TOKEN" is not sent
 *        (WWW-Authenticate; compared in constant time);
 *   403  a method other than GET/HEAD without Content-Type:
 *        application/json nor an X-Delay-Bridge header (never a CORS
 *        "simple" request).
 * Every response carries X-Frame-Options: DENY, X-Content-Type-Options:
 * nosniff, Referrer-Policy: no-referrer, Cross-Origin-Resource-Policy:
 * same-origin and a Content-Security-Policy with frame-ancestors 'none'.
 */
#ifndef DB_HTTP_H
#define DB_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "delay-bridge/api.h"

struct http_opts {
    const char *host;          /* numeric IPv4 or IPv6 address to bind, e.g. "127.0.0.1" */
    uint16_t port;             /* 0 = pick a free port (tests); see http_port() */
    const char *token;         /* bearer token, NULL or "" = none */
    unsigned max_connections;  /* 0 = 64 */
    unsigned timeout_s;        /* idle/slow connection timeout, 0 = 10 */
    /* Host names accepted besides loopback ones (no token set), and as an
       Origin's host; borrowed for http_start() only (copied). */
    const char *const *allowed_hosts;
    unsigned nallowed_hosts;
};

typedef void http_handler_fn(void *arg, const struct api_request *req, struct api_response *resp);

struct http_server;

/*
 * Listen and serve on loop. Returns 0, or -1 with a one-line reason in err
 * (address in use, bad address, ...).
 */
int http_start(struct http_server **out, struct ev_loop *loop, const struct http_opts *o,
               http_handler_fn *fn, void *arg, char *err, size_t errlen);

/* The port actually bound. */
uint16_t http_port(const struct http_server *s);

/*
 * Close the listener and every connection; stop the watchers. NULL is fine.
 * Call it from the loop's thread, never from inside the handler.
 */
void http_stop(struct http_server *s);

#endif
