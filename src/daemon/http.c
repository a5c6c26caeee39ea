/*
 * http.c -- the daemon's HTTP endpoint: libmicrohttpd on the libev loop (http.h).
 *
 * Design
 * ------
 * libmicrohttpd (MHD) is started without a thread of its own, in its epoll
 * mode. All its sockets -- the listener and every connection -- sit in one
 * epoll set of MHD's, whose fd becomes readable whenever one of them has an
 * event. That fd is one ev_io watcher of the daemon's loop; MHD's own
 * deadlines (connection timeouts, work it left pending) are one ev_timer:
 *
 *   ev_io(epoll fd) readable --+
 *                              +--> MHD_run(): accept, read, call on_request(),
 *   ev_timer(MHD_get_timeout) -+    write, close timed-out connections
 *                                          |
 *                                          +--> arm(): timer := MHD_get_timeout()
 *
 * MHD_get_timeout() says how long the loop may sleep before MHD must run
 * again (0 when it has buffered work, "no" when it has nothing timed), and
 * it changes only inside MHD_run(), so re-arming after every run -- and
 * once at start -- keeps the timer right. MHD_run() never blocks: every
 * socket is non-blocking and the handler answers synchronously.
 *
 * Hostile clients cost only their own connection:
 *   slowloris (half a request, then silence)  MHD_OPTION_CONNECTION_TIMEOUT
 *                                             closes it after timeout_s idle;
 *                                             meanwhile the loop serves others
 *   huge header (1 MiB)                       MHD_OPTION_CONNECTION_MEMORY_LIMIT
 *                                             (HTTP_CONN_MEMORY): MHD answers
 *                                             431 and closes
 *   huge body                                 Content-Length > HTTP_MAX_BODY:
 *                                             413 before reading it; a chunked
 *                                             body that grows past it: closed
 *   many connections                          MHD_OPTION_CONNECTION_LIMIT
 *
 * Request life: MHD calls on_request() once with the headers (we allocate
 * struct http_req in *con_cls, after the checks below), then once per body
 * chunk (appended to a strbuf), then once more with no data: the request is
 * complete, and the handler runs. The response takes the handler's strbuf without a copy
 * (strbuf_detach + MHD_RESPMEM_MUST_FREE). For HEAD, MHD itself sends the
 * headers only, Content-Length being that of the GET body. on_completed()
 * frees struct http_req whatever way the connection ended.
 *
 * Who may ask (Redis's protected mode is the model; config.c refuses to
 * listen beyond loopback without a token). Strangers come in three shapes,
 * and every check is made on the first call, with the headers alone --
 * before a byte of the body is read, so a stranger's 64 KiB is never
 * buffered, let alone parsed:
 *
 *   a neighbour on the network   needs the token: when one is set, every
 *                                path but the probes needs "Authorization:
 *                                Bearer TOKEN" (scheme case-insensitive),
 *                                compared in time that does not depend on
 *                                where the first wrong byte is; else 401
 *                                with WWW-Authenticate;
 *   a web page in the operator's browser, sending to 127.0.0.1:9800 (or a
 *   kubectl port-forward) -- the browser adds no token by itself, so this
 *   matters most with none:
 *     - DNS rebinding (evil.example made to resolve to 127.0.0.1: the page
 *       is then "same-origin" with us): with no token, the Host must be a
 *       loopback name or address (localhost, 127.0.0.0/8, [::1]) or one of
 *       http.allowed_hosts, else 421. With a token any Host is accepted:
 *       the token is the proof, and a rebound page cannot know it;
 *     - cross-site requests: Sec-Fetch-Site other than "same-origin" or
 *       "none" (typed in the address bar), or an Origin that is not
 *       http(s):// + the request's Host (or an allowed host's), is 403 --
 *       for reads as well as changes: a page must not read /stats either;
 *     - CORS "simple" requests (a form's POST, fetch with no-cors): a
 *       method other than GET and HEAD needs Content-Type: application/json
 *       or an X-Delay-Bridge header, which a browser sends cross-origin
 *       only after a preflight this endpoint never grants; else 403;
 *     - clickjacking: every response says X-Frame-Options: DENY and
 *       Content-Security-Policy frame-ancestors 'none' (the /ui page's
 *       Drain button cannot be framed), X-Content-Type-Options: nosniff.
 *
 * /healthz and /readyz are exempt from all of it: a Kubernetes httpGet
 * probe cannot send a header from a Secret, and they tell no more than
 * "up" or "not ready: why"; they only read. /ui (the status page) needs no
 * token: it is a static page with no data in it, whose scripts send the
 * token the person types in (and X-Delay-Bridge) with every request; a
 * top-level navigation to it from another site is let through (nothing
 * there to read, and it cannot be framed). Refusals other than 401 are
 * logged, rate limited, without the stranger's header values.
 *
 * MHD's own messages go to log_warn (rate limited: a client can trigger
 * them); while MHD_start_daemon() runs, the first one is kept as the reason
 * http_start() reports (e.g. "Failed to bind to port 8080: Address already
 * in use").
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "base/clock.h"
#include "base/log.h"
#include "delay-bridge/strbuf.h"
#include "base/xalloc.h"

#define HTTP_MAX_BODY (64 * 1024)         /* request body cap: 413 above */
#define HTTP_CONN_MEMORY ((size_t)32 * 1024) /* per-connection header memory */
#define HTTP_DEFAULT_CONNS 64
#define HTTP_DEFAULT_TIMEOUT_S 10
#define HTTP_LOG_INTERVAL_MS 10000
/* The status page (src/status/ui_page.html): its own inline script and
   style, fetches to this origin only, and never inside a frame. */
#define HTTP_CSP_PAGE                                                                   \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "       \
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; " \
    "frame-ancestors 'none'"
/* Everything else is data: nothing in it runs, nothing frames it. */
#define HTTP_CSP_DATA "default-src 'none'; frame-ancestors 'none'"

struct http_server {
    struct MHD_Daemon *d;
    struct ev_loop *loop;
    ev_io io;       /* MHD's epoll fd */
    ev_timer timer; /* MHD_get_timeout() */
    http_handler_fn *fn;
    void *arg;
    char *token; /* NULL = no authentication */
    size_t token_len;
    char **hosts; /* allowed_hosts, without brackets; nhosts of them */
    unsigned nhosts;
    struct log_ratelimit refuse_rl;
    uint16_t port;
    /* during MHD_start_daemon(): where the first MHD message goes */
    char *start_err;
    size_t start_errlen;
    struct log_ratelimit log_rl;
};

/* Per request, in MHD's *con_cls. */
struct http_req {
    struct strbuf body;
};

/* ---- libmicrohttpd's messages ---- */

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    struct http_server *s = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r' || msg[n - 1] == '.'))
        msg[--n] = '\0';
    if (s->start_err) {
        if (!s->start_err[0])
            snprintf(s->start_err, s->start_errlen, "%s", msg);
        return;
    }
    uint64_t allowed = log_ratelimit(&s->log_rl, clock_mono_ms(), HTTP_LOG_INTERVAL_MS);
    if (allowed)
        log_warn("http", msg, "from=libmicrohttpd suppressed=%llu",
                 (unsigned long long)(allowed - 1)); /* msg: log.c quotes and escapes it */
}

/* ---- requests ---- */

/* Constant-time check of an Authorization header against the token. */
static int token_ok(const struct http_server *s, const char *hdr)
{
    if (!hdr || strncasecmp(hdr, "Bearer ", 7) != 0)
        return 0;
    const char *given = hdr + 7;
    while (*given == ' ')
        given++;
    size_t glen = strlen(given);
    unsigned char diff = glen != s->token_len;
    for (size_t i = 0; i < s->token_len; i++)
        diff |= (unsigned char)s->token[i] ^ (unsigned char)(i < glen ? given[i] : 0);
    return diff == 0;
}

/* ---- who may ask (see the top of the file) ---- */

static const char *header_of(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/*
 * The host of a Host value (or of an Origin after its scheme) into out:
 * "[::1]:9800" -> "::1", "Evil.Example:80" -> "Evil.Example". -1 when it is
 * empty, malformed or too long.
 */
static int host_part(const char *v, char *out, size_t outlen)
{
    const char *p = v, *end;
    if (*p == '[') {
        end = strchr(++p, ']');
        if (!end || (end[1] && end[1] != ':'))
            return -1;
    } else {
        end = p + strcspn(p, ":");
        if (*end && strchr(end + 1, ':'))
            return -1; /* two colons without brackets */
    }
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= outlen)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

static int loopback_host(const char *h)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!strcasecmp(h, "localhost"))
        return 1;
    if (inet_pton(AF_INET, h, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, h, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return 0;
}

static int allowed_host(const struct http_server *s, const char *h)
{
    for (unsigned i = 0; i < s->nhosts; i++)
        if (!strcasecmp(h, s->hosts[i]))
            return 1;
    return 0;
}

/* Origin is this endpoint's own: http(s):// + the request's Host, or an allowed host. */
static int origin_ok(const struct http_server *s, const char *origin, const char *host)
{
    const char *p;
    char h[256];
    if (!strncasecmp(origin, "http://", 7))
        p = origin + 7;
    else if (!strncasecmp(origin, "https://", 8))
        p = origin + 8;
    else
        return 0; /* "null" (a sandboxed frame, a file: page), or anything else */
    if (host && !strcasecmp(p, host))
        return 1;
    return host_part(p, h, sizeof h) == 0 && allowed_host(s, h);
}

/* A media type application/json, parameters allowed. */
static int json_type(const char *ct)
{
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, "application/json", 16) != 0)
        return 0;
    ct += 16;
    return !*ct || *ct == ';' || *ct == ' ' || *ct == '\t';
}

enum refusal { ADMIT = 0, BAD_HOST, CROSS_SITE, NO_TOKEN, SIMPLE };

/* Whether to answer this request at all, from its method, path and headers alone. */
static enum refusal admit(const struct http_server *s, struct MHD_Connection *c, const char *url,
                          const char *method)
{
    int read_only = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    const char *host = header_of(c, MHD_HTTP_HEADER_HOST);
    const char *v;
    char h[256];

    if (!strcmp(url, "/healthz") || !strcmp(url, "/readyz"))
        return ADMIT;
    /* No Host at all: HTTP/1.0 (MHD refuses HTTP/1.1 without it); browsers always send one. */
    if (!s->token && host &&
        (host_part(host, h, sizeof h) < 0 || !(loopback_host(h) || allowed_host(s, h))))
        return BAD_HOST;
    v = header_of(c, "Sec-Fetch-Site");
    if (v && strcasecmp(v, "same-origin") != 0 && strcasecmp(v, "none") != 0) {
        const char *mode = header_of(c, "Sec-Fetch-Mode"), *dest = header_of(c, "Sec-Fetch-Dest");
        if (!(read_only && !strcmp(url, "/ui") && mode && !strcasecmp(mode, "navigate") &&
              dest && !strcasecmp(dest, "document")))
            return CROSS_SITE;
    }
    v = header_of(c, "Origin");
    if (v && !origin_ok(s, v, host))
        return CROSS_SITE;
    if (s->token && strcmp(url, "/ui") != 0 &&
        !token_ok(s, header_of(c, MHD_HTTP_HEADER_AUTHORIZATION)))
        return NO_TOKEN;
    if (!read_only) {
        v = header_of(c, MHD_HTTP_HEADER_CONTENT_TYPE);
        const char *x = header_of(c, "X-Delay-Bridge");
        if (!(v && json_type(v)) && !(x && *x))
            return SIMPLE;
    }
    return ADMIT;
}

static const char *lookup_arg(void *ctx, const char *name)
{
    return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/* Queue resp (taking its body) on c. */
static enum MHD_Result send_response(struct MHD_Connection *c, struct api_response *resp)
{
    size_t len = 0;
    char *body = strbuf_detach(&resp->body, &len);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO; /* closes the connection */
    }
    if (resp->content_type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    if (resp->allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
    if (resp->status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"delay-bridge\"");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    /* Never framed, never sniffed into something else, read by no other origin. */
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
    MHD_add_response_header(r, "Content-Security-Policy",
                            resp->content_type && !strncmp(resp->content_type, "text/html", 9)
                                ? HTTP_CSP_PAGE : HTTP_CSP_DATA);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, const char *text)
{
    struct api_response resp = { status, "text/plain; charset=utf-8", NULL, STRBUF_INIT };
    strbuf_puts(&resp.body, text);
    return send_response(c, &resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    struct http_server *s = cls;
    struct http_req *r = *con_cls;

    if (!r) { /* first call: headers only -- refuse here, before any body is read */
        r = xrealloc(NULL, sizeof *r);
        r->body = (struct strbuf)STRBUF_INIT;
        *con_cls = r;
        enum refusal no = admit(s, c, url, method);
        if (no != ADMIT && no != NO_TOKEN) {
            uint64_t allowed = log_ratelimit(&s->refuse_rl, clock_mono_ms(), HTTP_LOG_INTERVAL_MS);
            if (allowed)
                log_warn("http", "refused a request a browser may have been made to send",
                         "why=%s suppressed=%llu",
                         no == BAD_HOST ? "host" : no == CROSS_SITE ? "cross-site" : "simple",
                         (unsigned long long)(allowed - 1));
        }
        switch (no) {
        case BAD_HOST:
            return send_text(c, 421, "misdirected request: the Host is not this bridge's name "
                                     "(a loopback name, or one of http.allowed_hosts)\n");
        case CROSS_SITE:
            return send_text(c, MHD_HTTP_FORBIDDEN,
                             "cross-site request refused: Origin or Sec-Fetch-Site says it "
                             "comes from another site\n");
        case NO_TOKEN:
            return send_text(c, MHD_HTTP_UNAUTHORIZED, "unauthorized\n");
        case SIMPLE:
            return send_text(c, MHD_HTTP_FORBIDDEN,
                             "a request that changes something needs Content-Type: "
                             "application/json or an X-Delay-Bridge: 1 header\n");
        case ADMIT:
            break;
        }
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > HTTP_MAX_BODY)
            return send_text(c, MHD_HTTP_CONTENT_TOO_LARGE, "request body too large\n");
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body chunk */
        if (r->body.len + *upload_data_size > HTTP_MAX_BODY)
            return MHD_NO; /* chunked past the cap: close */
        strbuf_append(&r->body, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }

    /* complete (admitted on the first call) */
    struct api_request req = {
        .method = method,
        .path = url,
        .arg = lookup_arg,
        .ctx = c,
        .body = r->body.p,
        .body_len = r->body.len,
    };
    struct api_response resp = { 500, NULL, NULL, STRBUF_INIT };
    s->fn(s->arg, &req, &resp);
    return send_response(c, &resp);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct http_req *r = *con_cls;
    if (!r)
        return;
    strbuf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

/* ---- the loop ---- */

static void arm(struct http_server *s)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;
    ev_timer_stop(s->loop, &s->timer);
    if (MHD_get_timeout(s->d, &ms) == MHD_YES) {
        ev_timer_set(&s->timer, (double)ms / 1000.0, 0.0);
        ev_timer_start(s->loop, &s->timer);
    }
}

static void run(struct http_server *s)
{
    MHD_run(s->d);
    arm(s);
}

static void on_io(struct ev_loop *loop, ev_io *w, int revents)
{
    run(w->data);
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
    run(w->data);
}

/* ---- start / stop ---- */

static void free_server(struct http_server *s)
{
    for (unsigned i = 0; i < s->nhosts; i++)
        free(s->hosts[i]);
    free(s->hosts);
    free(s->token);
    free(s);
}

int http_start(struct http_server **out, struct ev_loop *loop, const struct http_opts *o,
               http_handler_fn *fn, void *arg, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = '\0';

    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    const char *host = o->host && o->host[0] ? o->host : "127.0.0.1";
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(o->port);
    } else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(o->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "http: bad address \"%s\": not a numeric IPv4 or IPv6 address", host);
        return -1;
    }

    struct http_server *s = xrealloc(NULL, sizeof *s);
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->fn = fn;
    s->arg = arg;
    if (o->token && o->token[0]) {
        s->token_len = strlen(o->token);
        s->token = xrealloc(NULL, s->token_len + 1);
        memcpy(s->token, o->token, s->token_len + 1);
    }

    if (o->nallowed_hosts) {
        s->hosts = xrealloc(NULL, o->nallowed_hosts * sizeof *s->hosts);
        for (unsigned i = 0; i < o->nallowed_hosts; i++) {
            const char *h = o->allowed_hosts[i];
            size_t n = strlen(h);
            if (n >= 2 && h[0] == '[' && h[n - 1] == ']') /* "[::1]": compared without brackets */
                h++, n -= 2;
            s->hosts[i] = xrealloc(NULL, n + 1);
            memcpy(s->hosts[i], h, n);
            s->hosts[i][n] = '\0';
        }
        s->nhosts = o->nallowed_hosts;
    }

    char mhd_err[256] = "";
    s->start_err = mhd_err;
    s->start_errlen = sizeof mhd_err;
    s->d = MHD_start_daemon(
        flags, o->port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first, or MHD complains */
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_connections ? o->max_connections
                                                                   : HTTP_DEFAULT_CONNS),
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(o->timeout_s ? o->timeout_s
                                                               : HTTP_DEFAULT_TIMEOUT_S),
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, HTTP_CONN_MEMORY,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_END);
    int saved = errno;
    s->start_err = NULL;
    if (!s->d) {
        snprintf(err, errlen, "http: cannot listen on %s port %u: %s", host, (unsigned)o->port,
                 mhd_err[0] ? mhd_err : strerror(saved));
        goto cleanup;
    }

    const union MHD_DaemonInfo *fdi = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    const union MHD_DaemonInfo *pi = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    if (!fdi || fdi->epoll_fd < 0) {
        snprintf(err, errlen, "http: libmicrohttpd has no epoll fd (built without epoll?)");
        goto cleanup;
    }
    s->port = pi ? pi->port : o->port;

    ev_io_init(&s->io, on_io, fdi->epoll_fd, EV_READ);
    s->io.data = s;
    ev_io_start(loop, &s->io);
    ev_timer_init(&s->timer, on_timer, 0.0, 0.0);
    s->timer.data = s;
    arm(s);
    *out = s;
    return 0;

cleanup:
    if (s->d)
        MHD_stop_daemon(s->d);
    free_server(s);
    return -1;
}

uint16_t http_port(const struct http_server *s)
{
    return s ? s->port : 0;
}

void http_stop(struct http_server *s)
{
    if (!s)
        return;
    ev_io_stop(s->loop, &s->io);
    ev_timer_stop(s->loop, &s->timer);
    MHD_stop_daemon(s->d);
    free_server(s);
}
