/*
 * cli_http.h -- the operator tools' HTTP client: one request to the running
 * daemon's endpoint.
 *
 * The daemon owns its WAL (it is locked), so tools that change held
 * messages ask it over its HTTP endpoint. One request, Connection: close,
 * read to EOF, with the bearer token from DELAY_BRIDGE_HTTP_TOKEN when set
 * and "X-Delay-Bridge: 1" (the daemon acts on no request that a web page
 * could send cross-site without it): a tiny HTTP/1.1 client over one
 * socket is all this needs.
 */
#ifndef DB_CLI_HTTP_H
#define DB_CLI_HTTP_H

#include "delay-bridge/strbuf.h"

struct cli_http {
    const char *prog;   /* "delay-bridge cancel": prefixes every error line */
    char url[300];      /* http://HOST:PORT */
    char host[256];
    char port[16];
    const char *token;  /* NULL: none */
    long timeout_s;     /* connect, send and each receive */
};

/*
 * Where to ask: url if given, else the config file's http.listen, else
 * http://127.0.0.1:9800. Returns 0, or -1 after printing why (a usage error).
 */
int cli_http_target(struct cli_http *h, const char *prog, const char *url, const char *cfgpath,
                    long timeout_s);

/*
 * Send "METHOD PATH" (path already %-encoded) and read the answer: *status
 * and the body (appended to body). Returns 0; CLI_HTTP_REFUSED when nothing
 * listens (the daemon is not running, or has exited); -1 on any other
 * failure, after printing why.
 */
#define CLI_HTTP_REFUSED (-2)
int cli_http_request(const struct cli_http *h, const char *method, const char *path,
                     int *status, struct strbuf *body);
/* The same with a JSON request body of len bytes (PUT /routes/NAME). */
int cli_http_send(const struct cli_http *h, const char *method, const char *path,
                  const char *req_body, size_t len, int *status, struct strbuf *body);

/* %-encode s into b (a path segment), leaving unreserved characters as they are. */
void cli_http_encode(struct strbuf *b, const char *s);

#endif
