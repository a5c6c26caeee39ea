/*
 * test_http.c -- the HTTP endpoint on a real libev loop, talked to over
 * loopback with plain sockets, the way curl, a load balancer, Prometheus
 * and a hostile client would.
 *
 * The server runs in the main thread (as in the daemon: one loop, no MHD
 * thread); each client case runs in a second thread against a fresh server
 * and ends the loop with an ev_async when done. A 10 ms ev_timer counts loop turns the whole time:
 * if serving anyone ever blocked the loop, it would stop counting.
 *
 * Checked: every status the endpoint gives (200, 401, 404, 405, 413, 431,
 * 503), HEAD without a body, the bearer token (and /healthz open without
 * it), query arguments and the body reaching the handler, a 1 MiB header
 * refused while the server keeps serving, a slowloris client (half a
 * request, then silence) that neither delays another client nor survives
 * the connection timeout, and http_start's errors (bad address, port in
 * use) and port 0. Strangers (http.h): X-Frame-Options, nosniff and CSP on
 * every answer; cross-site Origin / Sec-Fetch-Site refused for reads and
 * changes; CORS-simple changes refused; the token, and those refusals,
 * answered from the headers alone while a declared 60 KiB body is never
 * sent; with no token, a rebinding Host refused with 421.
 *
 * Usage: test_http [case...]   (--list names the cases: start, statuses,
 *                               token, head, echo, too_large, big_header,
 *                               slowloris, guard, token_first, rebinding)
 */
#define _GNU_SOURCE /* strcasestr */
#include "daemon/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ev.h>
#include <json-c/json.h>

#include "check.h"

#define TOKEN "s3cret-token"
#define AUTH "Authorization: Bearer " TOKEN "\r\n"
#define MUT "X-Delay-Bridge: 1\r\n"
#define CONN_TIMEOUT_S 2

static uint16_t port;
static atomic_ulong ticks;     /* loop timer firings */
static atomic_int not_ready;   /* fake: consumer down */
static atomic_int stalled;     /* fake: last loop turn 10 s ago */

/* ---- the server side: a fake daemon behind api_handle ---- */

static uint64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static struct db_route_stats route = { .name = "orders", .target_exchange = "orders.out",
                                       .published = 3 };

static void fake_stats(void *arg, struct db_stats *s)
{
    memset(s, 0, sizeof *s);
    s->version = "9.9.9";
    s->instance = "test";
    s->now_ms = wall_ms();
    s->start_ms = 1700000000000ULL; /* fixed: GET and HEAD bodies must match in length */
    s->loop_turn_ms = atomic_load(&stalled) ? s->now_ms - 10000 : s->now_ms;
    s->recovered = 1;
    s->recovery_progress = 1;
    s->consumer = atomic_load(&not_ready) ? DB_CONN_DOWN : DB_CONN_UP;
    s->publisher = DB_CONN_BLOCKED;
    s->wal.writable = 1;
    s->routes = &route;
    s->nroutes = 1;
}

static struct api_ops ops = {.stats = fake_stats};

/* /echo shows what reached the handler; everything else is the real API. */
static void handler(void *arg, const struct api_request *req, struct api_response *resp)
{
    if (!strcmp(req->path, "/echo")) {
        const char *name = req->arg(req->ctx, "name");
        resp->status = 200;
        resp->content_type = "text/plain";
        strbuf_printf(&resp->body, "method=%s name=%s body=%.*s", req->method,
                      name ? name : "(none)", (int)req->body_len, req->body ? req->body : "");
        return;
    }
    api_handle(&ops, req, resp);
}

/* ---- the client side ---- */

static int dial(int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct timeval tv = { timeout_s, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send all of p; 0, or -errno (EPIPE/ECONNRESET when the server hung up). */
static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

struct reply {
    int status;     /* 0: no status line came back */
    char head[4096];
    char *body;     /* malloc'd, NUL-terminated */
    size_t body_len;
};

/* Read until EOF (every request says Connection: close) and split the reply. */
static void read_reply(int fd, struct reply *r)
{
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    memset(r, 0, sizeof *r);
    char *end = strstr(buf, "\r\n\r\n");
    if (!strncmp(buf, "HTTP/1.", 7) && end) {
        r->status = atoi(buf + 9);
        size_t hl = (size_t)(end - buf) + 2;
        if (hl >= sizeof r->head)
            hl = sizeof r->head - 1;
        memcpy(r->head, buf, hl);
        r->body_len = len - (size_t)(end + 4 - buf);
        r->body = malloc(r->body_len + 1);
        memcpy(r->body, end + 4, r->body_len + 1);
    } else {
        r->body = calloc(1, 1);
    }
    free(buf);
}

/* One request on a fresh connection. */
static void request(const char *raw, struct reply *r)
{
    int fd = dial(10);
    CHECK(fd >= 0);
    if (fd < 0) {
        memset(r, 0, sizeof *r);
        r->body = calloc(1, 1);
        return;
    }
    CHECK(send_all(fd, raw, strlen(raw)) == 0);
    read_reply(fd, r);
    close(fd);
}

/* A header's value ("" if absent) into out. */
static const char *header(const struct reply *r, const char *name, char *out, size_t outlen)
{
    out[0] = '\0';
    char pat[128];
    snprintf(pat, sizeof pat, "\r\n%s:", name);
    const char *p = strcasestr(r->head, pat);
    if (!p)
        return out;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "\r");
    snprintf(out, outlen, "%.*s", (int)n, p);
    return out;
}

/* method path as the project's CLI sends it: X-Delay-Bridge on a change. */
static void get(const char *method, const char *path, int auth, struct reply *r)
{
    char raw[1024];
    int change = strcmp(method, "GET") && strcmp(method, "HEAD");
    snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\nHost: localhost\r\n%s%sConnection: close\r\n\r\n",
             method, path, auth ? AUTH : "", change ? MUT : "");
    request(raw, r);
}

/* ---- client cases ---- */

static void case_statuses(void)
{
    struct reply r;
    char h[256];

    get("GET", "/healthz", 1, &r);
    CHECK(r.status == 200 && !strcmp(r.body, "ok\n"));
    free(r.body);

    atomic_store(&stalled, 1);
    get("GET", "/healthz", 1, &r);
    CHECK(r.status == 503);
    free(r.body);
    atomic_store(&stalled, 0);

    get("GET", "/readyz", 1, &r);
    CHECK(r.status == 200 && !strcmp(r.body, "ready\n"));
    free(r.body);

    atomic_store(&not_ready, 1);
    get("GET", "/readyz", 1, &r);
    CHECK(r.status == 503 && !strcmp(r.body, "not ready: consumer connection down\n"));
    free(r.body);
    atomic_store(&not_ready, 0);

    get("GET", "/metrics", 1, &r);
    CHECK(r.status == 200);
    CHECK(!strcmp(header(&r, "Content-Type", h, sizeof h),
                  "text/plain; version=0.0.4; charset=utf-8"));
    CHECK(!strncmp(r.body, "# HELP ", 7));
    CHECK(strstr(r.body, "\ndelay_bridge_published_total{route=\"orders\"} 3\n") != NULL);
    free(r.body);

    get("GET", "/stats", 1, &r);
    CHECK(r.status == 200);
    CHECK(!strncmp(header(&r, "Content-Type", h, sizeof h), "application/json", 16));
    json_object *root = json_tokener_parse(r.body);
    CHECK(root != NULL);
    json_object *v = NULL;
    CHECK(root && json_object_object_get_ex(root, "version", &v) &&
          !strcmp(json_object_get_string(v), "9.9.9"));
    CHECK(root && json_object_object_get_ex(root, "connections", &v) &&
          json_object_object_get_ex(v, "publisher", &v) &&
          !strcmp(json_object_get_string(v), "blocked"));
    json_object_put(root);
    free(r.body);

    get("GET", "/stats?pretty=1", 1, &r); /* a query string does not change the route */
    CHECK(r.status == 200);
    free(r.body);

    get("GET", "/nope", 1, &r);
    CHECK(r.status == 404 && strstr(r.body, "not found"));
    free(r.body);

    get("POST", "/metrics", 1, &r);
    CHECK(r.status == 405);
    CHECK(!strcmp(header(&r, "Allow", h, sizeof h), "GET, HEAD"));
    free(r.body);

    get("DELETE", "/readyz", 1, &r);
    CHECK(r.status == 405);
    CHECK(!strcmp(header(&r, "Allow", h, sizeof h), "GET, HEAD"));
    free(r.body);
}

static void case_token(void)
{
    struct reply r;
    char h[256];
    static const char *const paths[] = { "/metrics", "/stats", "/nope", "/echo" };

    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        get("GET", paths[i], 0, &r);
        CHECK(r.status == 401);
        CHECK(!strncmp(header(&r, "WWW-Authenticate", h, sizeof h), "Bearer", 6));
        CHECK(strstr(r.body, "delay_bridge") == NULL); /* nothing leaks */
        free(r.body);
    }
    /* The probes are open: a liveness or readiness probe needs no secret. */
    get("GET", "/healthz", 0, &r);
    CHECK(r.status == 200);
    free(r.body);
    get("GET", "/readyz", 0, &r);
    CHECK(r.status == 200 || r.status == 503);
    free(r.body);
    /* The status page is open too (a static page, no data); /due is not. */
    get("GET", "/ui", 0, &r);
    CHECK(r.status == 200 && strstr(r.body, "<title>delay-bridge</title>") != NULL);
    CHECK(!strncmp(header(&r, "Content-Type", h, sizeof h), "text/html", 9));
    free(r.body);
    get("GET", "/due", 0, &r);
    CHECK(r.status == 401);
    free(r.body);

    static const char *const bad[] = {
        "Authorization: Bearer s3cret-toke\r\n",    /* prefix */
        "Authorization: Bearer s3cret-tokenX\r\n",  /* longer */
        "Authorization: Bearer S3CRET-TOKEN\r\n",   /* case */
        "Authorization: Basic czNjcmV0LXRva2Vu\r\n",
        "Authorization: Bearer\r\n",
        "Authorization: s3cret-token\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char raw[512];
        snprintf(raw, sizeof raw,
                 "GET /metrics HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n", bad[i]);
        request(raw, &r);
        CHECK(r.status == 401);
        free(r.body);
    }
    request("GET /readyz HTTP/1.1\r\nHost: x\r\nauthorization: bearer " TOKEN
            "\r\nConnection: close\r\n\r\n", &r);
    CHECK(r.status == 200);
    free(r.body);
}

static void case_head(void)
{
    struct reply r, g;
    char h[256];
    get("GET", "/metrics", 1, &g);
    get("HEAD", "/metrics", 1, &r);
    CHECK(g.status == 200 && r.status == 200);
    CHECK(r.body_len == 0); /* no body */
    CHECK(g.body_len > 0);
    /* Content-Length is the GET body's. */
    CHECK(strtoul(header(&r, "Content-Length", h, sizeof h), NULL, 10) == g.body_len);
    CHECK(!strcmp(header(&r, "Content-Type", h, sizeof h),
                  "text/plain; version=0.0.4; charset=utf-8"));
    free(r.body);
    free(g.body);

    get("HEAD", "/healthz", 0, &r);
    CHECK(r.status == 200 && r.body_len == 0);
    free(r.body);
    get("HEAD", "/readyz", 0, &r); /* a probe: open without the token */
    CHECK((r.status == 200 || r.status == 503) && r.body_len == 0);
    free(r.body);
    get("HEAD", "/stats", 0, &r);
    CHECK(r.status == 401 && r.body_len == 0);
    free(r.body);
}

static void case_echo(void)
{
    struct reply r;
    get("GET", "/echo?name=a%20b&x=1", 1, &r);
    CHECK(r.status == 200 && !strcmp(r.body, "method=GET name=a b body="));
    free(r.body);

    request("POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH MUT
            "Content-Length: 5\r\nConnection: close\r\n\r\nhello", &r);
    CHECK(r.status == 200 && !strcmp(r.body, "method=POST name=(none) body=hello"));
    free(r.body);

    /* chunked */
    request("POST /echo?name=c HTTP/1.1\r\nHost: x\r\n" AUTH MUT
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", &r);
    CHECK(r.status == 200 && !strcmp(r.body, "method=POST name=c body=abcde"));
    free(r.body);
}

static void case_too_large(void)
{
    struct reply r;
    /* Declared above the 64 KiB cap: 413 before any of it is sent. */
    request("POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH MUT
            "Content-Length: 100000\r\nConnection: close\r\n\r\n", &r);
    CHECK(r.status == 413);
    free(r.body);

    /* The same on a GET. */
    request("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n"
            "Connection: close\r\n\r\n", &r);
    CHECK(r.status == 413);
    printf("  GET with a 100000-byte body declared: status %d\n", r.status);
    free(r.body);

    /* Chunked past the cap: no way to answer mid-body, the connection is dropped. */
    {
        int fd = dial(10);
        CHECK(fd >= 0);
        const char *h = "POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH MUT
                        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        int rc = send_all(fd, h, strlen(h));
        char chunk[8200];
        int cl = snprintf(chunk, sizeof chunk, "%x\r\n", 8192);
        memset(chunk + cl, 'c', 8192);
        memcpy(chunk + cl + 8192, "\r\n", 2);
        for (int i = 0; i < 16 && rc == 0; i++) /* 128 KiB */
            rc = send_all(fd, chunk, (size_t)cl + 8192 + 2);
        if (rc == 0)
            rc = send_all(fd, "0\r\n\r\n", 5);
        read_reply(fd, &r);
        close(fd);
        CHECK(r.status != 200);
        printf("  128 KiB chunked body: status %d\n", r.status);
        free(r.body);
    }

    /* Just under the cap is fine. */
    size_t n = 60000;
    char *raw = malloc(n + 512);
    int hl = snprintf(raw, 512, "POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH MUT
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", n);
    memset(raw + hl, 'b', n);
    raw[hl + (int)n] = '\0';
    request(raw, &r);
    CHECK(r.status == 200 && r.body_len == strlen("method=POST name=(none) body=") + n);
    free(r.body);
    free(raw);

    get("GET", "/healthz", 0, &r);
    CHECK(r.status == 200);
    free(r.body);
}

static void case_big_header(void)
{
    size_t n = 1 << 20;
    char *raw = malloc(n + 256);
    int hl = snprintf(raw, 256, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ");
    memset(raw + hl, 'a', n);
    strcpy(raw + hl + n, "\r\nConnection: close\r\n\r\n");

    unsigned long t0 = atomic_load(&ticks);
    int fd = dial(10);
    CHECK(fd >= 0);
    int rc = send_all(fd, raw, strlen(raw)); /* may fail: the server hangs up */
    struct reply r;
    read_reply(fd, &r);
    close(fd);
    /* Refused: 431 (or 413/414), or the connection dropped without an answer. */
    CHECK(r.status == 0 || r.status == 431 || r.status == 413 || r.status == 414);
    CHECK(r.status != 200);
    if (r.status == 0)
        CHECK(rc == -EPIPE || rc == -ECONNRESET || rc == 0);
    printf("  1 MiB header: status %d, send %s\n", r.status, rc ? strerror(-rc) : "ok");
    free(r.body);
    free(raw);

    /* The server is still serving, and the loop kept turning. */
    get("GET", "/healthz", 0, &r);
    CHECK(r.status == 200 && !strcmp(r.body, "ok\n"));
    free(r.body);
    get("GET", "/metrics", 1, &r);
    CHECK(r.status == 200);
    free(r.body);
    (void)t0;
}

static int still_open(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    int n = poll(&p, 1, 0);
    return n == 0; /* nothing to read: no answer, no EOF, no reset */
}

static void case_slowloris(void)
{
    /* Half a request, then silence. */
    int slow = dial(CONN_TIMEOUT_S * 5);
    CHECK(slow >= 0);
    CHECK(send_all(slow, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", 40) == 0);

    /* Another client is answered while the slow one still holds its connection. */
    for (int i = 0; i < 3; i++) {
        struct reply r;
        get("GET", "/healthz", 0, &r);
        CHECK(r.status == 200);
        free(r.body);
        get("GET", "/metrics", 1, &r);
        CHECK(r.status == 200);
        free(r.body);
    }
    CHECK(still_open(slow));

    /* The stalled connection is closed by the timeout; the loop turns meanwhile. */
    unsigned long t0 = atomic_load(&ticks);
    char buf[256];
    ssize_t n = recv(slow, buf, sizeof buf, 0); /* blocks until the server gives up */
    CHECK(n >= 0);                               /* EOF (or an error answer), not our timeout */
    unsigned long t1 = atomic_load(&ticks);
    CHECK(t1 - t0 >= 10); /* >= 100 ms of 10 ms ticks while waiting ~2 s */
    close(slow);
}

/* ---- strangers: a web page in the operator's browser, a wrong token ---- */

/* raw request: "METHOD PATH", then the given header lines (each ending \r\n). */
static int status_of(const char *method, const char *path, const char *hdrs, struct reply *r)
{
    char raw[2048];
    snprintf(raw, sizeof raw, "%s %s HTTP/1.1\r\n%sConnection: close\r\n\r\n", method, path, hdrs);
    request(raw, r);
    return r->status;
}

static int status_free(const char *method, const char *path, const char *hdrs)
{
    struct reply r;
    int st = status_of(method, path, hdrs, &r);
    free(r.body);
    return st;
}

/* The headers every answer carries, whatever its status. */
static void check_safety_headers(const struct reply *r, const char *what)
{
    char h[512];
    CHECK(!strcmp(header(r, "X-Frame-Options", h, sizeof h), "DENY"), "%s: X-Frame-Options %s",
          what, h);
    CHECK(!strcmp(header(r, "X-Content-Type-Options", h, sizeof h), "nosniff"),
          "%s: X-Content-Type-Options %s", what, h);
    CHECK(strstr(header(r, "Content-Security-Policy", h, sizeof h), "frame-ancestors 'none'") != NULL,
          "%s: Content-Security-Policy %s", what, h);
}

static void case_guard(void)
{
    struct reply r;
    char h[512];

    /* Headers on every kind of answer. */
    static const char *const paths[] = { "/healthz", "/stats", "/ui", "/nope" };
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        get("GET", paths[i], 1, &r);
        check_safety_headers(&r, paths[i]);
        free(r.body);
    }
    get("GET", "/stats", 0, &r); /* 401 */
    CHECK(r.status == 401);
    check_safety_headers(&r, "401");
    free(r.body);
    get("GET", "/ui", 0, &r);
    CHECK(strstr(header(&r, "Content-Security-Policy", h, sizeof h), "connect-src 'self'") != NULL);
    free(r.body);

    /* Cross-site: refused for changes and for reads, token or not. */
    struct reply e;
    CHECK(status_of("POST", "/echo", "Host: localhost\r\n" AUTH MUT
                    "Origin: https://evil.example\r\nContent-Length: 5\r\n", &e) == 403);
    CHECK(strstr(e.body, "method=") == NULL && strstr(e.body, "cross-site") != NULL);
    check_safety_headers(&e, "403");
    free(e.body);
    CHECK(status_free("POST", "/echo", "Host: localhost\r\n" AUTH MUT "Sec-Fetch-Site: cross-site\r\n") == 403);
    CHECK(status_free("POST", "/echo", "Host: localhost\r\n" AUTH MUT "Sec-Fetch-Site: same-site\r\n") == 403);
    CHECK(status_free("GET", "/stats", "Host: localhost\r\n" AUTH "Sec-Fetch-Site: cross-site\r\n") == 403);
    CHECK(status_free("GET", "/stats", "Host: localhost\r\n" AUTH "Origin: null\r\n") == 403);
    CHECK(status_free("GET", "/stats", "Host: localhost:9800\r\n" AUTH
                      "Origin: http://localhost:3000\r\n") == 403);
    /* Its own origin, and a URL typed in the address bar, are fine. */
    CHECK(status_free("GET", "/stats", "Host: localhost:9800\r\n" AUTH
                      "Origin: http://localhost:9800\r\nSec-Fetch-Site: same-origin\r\n") == 200);
    CHECK(status_free("GET", "/stats", "Host: localhost\r\n" AUTH "Sec-Fetch-Site: none\r\n") == 200);
    CHECK(status_free("POST", "/echo", "Host: 127.0.0.1:9800\r\n" AUTH MUT
                      "Origin: http://127.0.0.1:9800\r\nContent-Length: 0\r\n") == 200);
    /* An allowed host's origin (a reverse proxy that rewrites Host). */
    CHECK(status_free("POST", "/echo", "Host: 127.0.0.1:9800\r\n" AUTH MUT
                      "Origin: https://bridge.internal\r\nContent-Length: 0\r\n") == 200);
    /* A link from another site to the status page opens it; a frame does not. */
    CHECK(status_free("GET", "/ui", "Host: localhost\r\nSec-Fetch-Site: cross-site\r\n"
                      "Sec-Fetch-Mode: navigate\r\nSec-Fetch-Dest: document\r\n") == 200);
    CHECK(status_free("GET", "/ui", "Host: localhost\r\nSec-Fetch-Site: cross-site\r\n"
                      "Sec-Fetch-Mode: navigate\r\nSec-Fetch-Dest: iframe\r\n") == 403);
    /* The probes answer anyone. */
    CHECK(status_free("GET", "/healthz", "Host: evil.example\r\nOrigin: https://evil.example\r\n"
                      "Sec-Fetch-Site: cross-site\r\n") == 200);

    /* CORS-simple changes: refused; JSON or the custom header: taken. */
    CHECK(status_free("POST", "/echo", "Host: x\r\n" AUTH "Content-Type: text/plain\r\n"
                      "Content-Length: 0\r\n") == 403);
    CHECK(status_free("POST", "/echo", "Host: x\r\n" AUTH
                      "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n") == 403);
    CHECK(status_free("DELETE", "/echo", "Host: x\r\n" AUTH) == 403);
    CHECK(status_free("PUT", "/echo", "Host: x\r\n" AUTH "Content-Type: application/jsonx\r\n"
                      "Content-Length: 0\r\n") == 403);
    CHECK(status_free("POST", "/echo", "Host: x\r\n" AUTH "X-Delay-Bridge:\r\n"
                      "Content-Length: 0\r\n") == 403);
    CHECK(status_free("PUT", "/echo", "Host: x\r\n" AUTH "Content-Type: application/json\r\n"
                      "Content-Length: 0\r\n") == 200);
    CHECK(status_free("DELETE", "/echo", "Host: x\r\n" AUTH "X-Delay-Bridge: 1\r\n") == 200);
    CHECK(status_free("POST", "/echo", "Host: x\r\n" AUTH
                      "Content-Type: Application/JSON; charset=utf-8\r\nContent-Length: 0\r\n") == 200);

    /* With a token, any Host: the token is the proof (a rebound page cannot know it). */
    CHECK(status_free("GET", "/stats", "Host: evil.example:9800\r\n" AUTH) == 200);
    CHECK(status_free("GET", "/stats", "Host: evil.example:9800\r\n") == 401);
}

/*
 * The token is checked on the headers alone: a request that declares 60 KiB
 * and sends none of it is answered 401 at once (it used to wait for the
 * body, buffer it, then refuse). Likewise a cross-site or simple one.
 */
static void case_token_first(void)
{
    static const char *const heads[] = {
        "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n" MUT,
        "POST /echo HTTP/1.1\r\nHost: x\r\n" MUT,
        "POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH MUT "Origin: https://evil.example\r\n",
        "POST /echo HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Type: text/plain\r\n",
    };
    static const int want[] = { 401, 401, 403, 403 };
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        char raw[512];
        struct reply r;
        snprintf(raw, sizeof raw, "%sContent-Length: 61440\r\nConnection: close\r\n\r\n", heads[i]);
        int fd = dial(CONN_TIMEOUT_S * 3);
        CHECK(fd >= 0);
        if (fd < 0)
            continue;
        CHECK(send_all(fd, raw, strlen(raw)) == 0);
        /* No body sent: the answer must come from the headers alone. */
        read_reply(fd, &r);
        close(fd);
        CHECK(r.status == want[i], "case %zu: status %d, want %d (waiting for a body?)", i,
              r.status, want[i]);
        CHECK(strstr(r.body, "method=") == NULL);
        free(r.body);
    }
}

/* No token (loopback): Host must be a loopback name or an allowed host. */
static void case_rebinding(void)
{
    CHECK(status_free("GET", "/stats", "Host: evil.example:9800\r\n") == 421);
    CHECK(status_free("PUT", "/echo", "Host: evil.example:9800\r\n" MUT "Content-Length: 0\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: 127.0.0.1.evil.example\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: localhost.evil.example:9800\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: 10.0.0.1:9800\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: [::2]:9800\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: evil.example:9800:1\r\n") == 421);
    CHECK(status_free("GET", "/ui", "Host: evil.example\r\n") == 421);
    CHECK(status_free("GET", "/stats", "Host: localhost:9800\r\n") == 200);
    CHECK(status_free("GET", "/stats", "Host: LOCALHOST\r\n") == 200);
    CHECK(status_free("GET", "/stats", "Host: 127.0.0.5:80\r\n") == 200);
    CHECK(status_free("GET", "/stats", "Host: [::1]:9800\r\n") == 200);
    CHECK(status_free("GET", "/stats", "Host: bridge.internal:443\r\n") == 200);
    CHECK(status_free("POST", "/echo", "Host: 127.0.0.1\r\n" MUT "Content-Length: 0\r\n") == 200);
    /* The probes answer whatever the Host. */
    CHECK(status_free("GET", "/readyz", "Host: evil.example\r\n") == 200);
    /* HTTP/1.0 with no Host at all: not a browser. */
    struct reply r;
    request("GET /stats HTTP/1.0\r\n\r\n", &r);
    CHECK(r.status == 200);
    free(r.body);
}

/* ---- the server side of a case: one loop in this thread ---- */

static struct ev_loop *loop;
static ev_async done;
/* The server's token (NULL: none, loopback only) and its one allowed host. */
static const char *serve_token = TOKEN;
static const char *const serve_hosts[] = { "[Bridge.Internal]" };
static void (*client_case)(void); /* what the client thread runs */

static void on_done(struct ev_loop *l, ev_async *w, int revents)
{
    ev_break(l, EVBREAK_ALL);
}

static void on_tick(struct ev_loop *l, ev_timer *w, int revents)
{
    atomic_fetch_add(&ticks, 1);
}

static void *clients(void *arg)
{
    unsigned long t0 = atomic_load(&ticks);
    client_case();
    /* The loop timer kept firing through all of it. */
    struct timespec ts = { 0, 100 * 1000000 };
    nanosleep(&ts, NULL);
    CHECK(atomic_load(&ticks) > t0);
    ev_async_send(loop, &done);
    return NULL;
}

/*
 * Run fn as a client in a second thread against a fresh server whose loop
 * runs here. While the client runs this thread only serves: CHECK (whose
 * failure count is a plain int) is called from one thread at a time, and
 * pthread_join orders the client's checks before the runner reads the count.
 */
static void serve(void (*fn)(void))
{
    char err[256];
    struct http_server *srv = NULL;
    struct http_opts o = {
        .host = "127.0.0.1", .port = 0, .token = serve_token,
        .max_connections = 16, .timeout_s = CONN_TIMEOUT_S,
        .allowed_hosts = serve_hosts, .nallowed_hosts = 1,
    };
    loop = ev_loop_new(EVFLAG_AUTO);
    CHECK(loop != NULL);
    if (!loop)
        return;
    int rc = http_start(&srv, loop, &o, handler, NULL, err, sizeof err);
    CHECK(rc == 0, "http_start: %s", err);
    if (rc != 0) {
        ev_loop_destroy(loop);
        return;
    }
    port = http_port(srv);

    ev_timer tick;
    ev_timer_init(&tick, on_tick, 0.01, 0.01);
    ev_timer_start(loop, &tick);
    ev_async_init(&done, on_done);
    ev_async_start(loop, &done);

    pthread_t th;
    client_case = fn;
    rc = pthread_create(&th, NULL, clients, NULL);
    CHECK(rc == 0, "pthread_create: %s", strerror(rc));
    if (rc == 0) {
        ev_run(loop, 0);
        pthread_join(th, NULL);
    }

    ev_timer_stop(loop, &tick);
    ev_async_stop(loop, &done);
    http_stop(srv);
    ev_loop_destroy(loop);
    loop = NULL;
}

/* A case that talks to a live server: case_<name> run by serve(). */
#define SERVED(name)                                                             \
    static void served_##name(void)                                              \
    {                                                                            \
        serve(case_##name);                                                      \
    }
SERVED(statuses)
SERVED(token)
SERVED(head)
SERVED(echo)
SERVED(too_large)
SERVED(big_header)
SERVED(slowloris)
SERVED(guard)
SERVED(token_first)

static void served_rebinding(void)
{
    serve_token = NULL;
    serve(case_rebinding);
    serve_token = TOKEN;
}

static void nop_handler(void *arg, const struct api_request *req, struct api_response *resp)
{
    resp->status = 200;
}

/* http_start's errors and port 0 (main thread, no clients). */
static void case_start(void)
{
    char err[256];
    struct http_server *a = NULL, *b = NULL;
    struct http_opts o = { .host = "127.0.0.1", .port = 0 };

    loop = ev_loop_new(EVFLAG_AUTO);
    CHECK(loop != NULL);
    if (!loop)
        return;
    CHECK(http_start(&a, loop, &o, nop_handler, NULL, err, sizeof err) == 0);
    CHECK(a && http_port(a) != 0);

    /* The same port again: address in use, said in one line. */
    o.port = http_port(a);
    CHECK(http_start(&b, loop, &o, nop_handler, NULL, err, sizeof err) == -1);
    CHECK(b == NULL);
    printf("  port in use: %s\n", err);
    CHECK(strstr(err, "in use") != NULL);
    CHECK(strchr(err, '\n') == NULL);
    http_stop(a);

    o.port = 0;
    o.host = "localhost"; /* not numeric */
    CHECK(http_start(&b, loop, &o, nop_handler, NULL, err, sizeof err) == -1);
    printf("  bad address: %s\n", err);
    CHECK(strstr(err, "bad address") != NULL);
    o.host = "300.1.2.3";
    CHECK(http_start(&b, loop, &o, nop_handler, NULL, err, sizeof err) == -1);

    /* IPv6 loopback, where the host has it. */
    o.host = "::1";
    if (http_start(&b, loop, &o, nop_handler, NULL, err, sizeof err) == 0) {
        CHECK(http_port(b) != 0);
        http_stop(b);
    } else {
        printf("  ::1 not available: %s\n", err);
    }
    http_stop(NULL);
    ev_loop_destroy(loop);
    loop = NULL;
}

static const struct check_case cases[] = {
    { "start", case_start },
    { "statuses", served_statuses },
    { "token", served_token },
    { "head", served_head },
    { "echo", served_echo },
    { "too_large", served_too_large },
    { "big_header", served_big_header },
    { "slowloris", served_slowloris },
    { "guard", served_guard },
    { "token_first", served_token_first },
    { "rebinding", served_rebinding },
};

int main(int argc, char **argv)
{
    alarm(120); /* a hung test fails instead of hanging ctest */
    return CHECK_MAIN(argc, argv, cases);
}
