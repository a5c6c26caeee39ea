/*
 * cli_http.c -- the operator tools' HTTP client (cli_http.h).
 *
 * Used by `delay-bridge cancel`, `drain` and `routes`. Blocking and
 * simple on purpose: one connection per request, SO_RCVTIMEO/SO_SNDTIMEO
 * bound every step, the answer is read to EOF (the daemon closes after
 * answering a Connection: close request).
 */
#include "cli_http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "delay-bridge/config.h"

void cli_http_encode(struct strbuf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";

    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c))
            strbuf_append(b, s, 1);
        else
            strbuf_printf(b, "%%%c%c", hex[c >> 4], hex[c & 15]);
    }
}

/* "http://host:port" -> host, port. 0 or -1. */
static int parse_url(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *h, *end, *colon;

    if (strncmp(url, "http://", 7) != 0)
        return -1;
    h = url + 7;
    end = h + strcspn(h, "/");
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb || (size_t)(rb - h - 1) >= hostlen)
            return -1;
        memcpy(host, h + 1, (size_t)(rb - h - 1));
        host[rb - h - 1] = '\0';
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        size_t n = (size_t)((colon ? colon : end) - h);
        if (n == 0 || n >= hostlen)
            return -1;
        memcpy(host, h, n);
        host[n] = '\0';
    }
    snprintf(port, portlen, "%.*s", colon ? (int)(end - colon - 1) : 2, colon ? colon + 1 : "80");
    return port[0] ? 0 : -1;
}

int cli_http_target(struct cli_http *h, const char *prog, const char *url, const char *cfgpath,
                    long timeout_s)
{
    char err[1024];

    memset(h, 0, sizeof(*h));
    h->prog = prog;
    h->timeout_s = timeout_s;
    h->token = getenv("DELAY_BRIDGE_HTTP_TOKEN");
    if (h->token && !*h->token)
        h->token = NULL;
    if (!url && cfgpath) {
        struct config cfg;
        if (config_load(&cfg, cfgpath, err, sizeof(err)) < 0) {
            fprintf(stderr, "%s: configuration error: %s\n", prog, err);
            return -1;
        }
        if (!cfg.http_listen[0]) {
            fprintf(stderr, "%s: %s has no http.listen: the daemon has no endpoint to ask\n",
                    prog, cfgpath);
            config_free(&cfg);
            return -1;
        }
        snprintf(h->url, sizeof(h->url),
                 strchr(cfg.http_host, ':') ? "http://[%s]:%u" : "http://%s:%u", cfg.http_host,
                 (unsigned)cfg.http_port);
        config_free(&cfg);
    } else {
        snprintf(h->url, sizeof(h->url), "%s", url ? url : "http://127.0.0.1:9800");
    }
    if (parse_url(h->url, h->host, sizeof(h->host), h->port, sizeof(h->port)) < 0) {
        fprintf(stderr, "%s: --url: expected http://HOST:PORT, got \"%s\"\n", prog, h->url);
        return -1;
    }
    return 0;
}

int cli_http_request(const struct cli_http *h, const char *method, const char *path,
                     int *status, struct strbuf *body)
{
    return cli_http_send(h, method, path, NULL, 0, status, body);
}

int cli_http_send(const struct cli_http *h, const char *method, const char *path,
                  const char *req_body, size_t len, int *status, struct strbuf *body)
{
    struct strbuf req = STRBUF_INIT, resp = STRBUF_INIT;
    struct addrinfo hints, *ai = NULL;
    int fd = -1, r = -1, c;

    *status = 0;
    /* Host as a browser would write it (the daemon checks it against DNS rebinding);
       X-Delay-Bridge: never a CORS "simple" request, which the daemon refuses to act on. */
    strbuf_printf(&req,
                  strchr(h->host, ':') ? "%s %s HTTP/1.1\r\nHost: [%s]:%s\r\n"
                                       : "%s %s HTTP/1.1\r\nHost: %s:%s\r\n",
                  method, path, h->host, h->port);
    strbuf_puts(&req, "Connection: close\r\nX-Delay-Bridge: 1\r\n");
    if (req_body)
        strbuf_printf(&req, "Content-Type: application/json\r\nContent-Length: %zu\r\n", len);
    else if (!strcmp(method, "POST"))
        strbuf_puts(&req, "Content-Length: 0\r\n");
    if (h->token)
        strbuf_printf(&req, "Authorization: Bearer %s\r\n", h->token);
    strbuf_puts(&req, "\r\n");
    if (req_body)
        strbuf_append(&req, req_body, len);

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if ((c = getaddrinfo(h->host, h->port, &hints, &ai)) != 0) {
        fprintf(stderr, "%s: %s: %s\n", h->prog, h->host, gai_strerror(c));
        goto out;
    }
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    struct timeval tv = {h->timeout_s, 0};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
        fprintf(stderr, "%s: socket: %s\n", h->prog, strerror(errno));
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno == ECONNREFUSED) {
            r = CLI_HTTP_REFUSED;
            goto out;
        }
        fprintf(stderr, "%s: cannot reach the daemon at %s: %s\n", h->prog, h->url,
                strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < req.len;) {
        ssize_t n = send(fd, req.p + off, req.len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            fprintf(stderr, "%s: send to %s: %s\n", h->prog, h->url, strerror(errno));
            goto out;
        }
        off += (size_t)n;
    }
    for (;;) {
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) {
            fprintf(stderr, "%s: no answer from %s: %s\n", h->prog, h->url, strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        strbuf_append(&resp, buf, (size_t)n);
    }
    if (!resp.p || sscanf(resp.p, "HTTP/1.%*d %d", status) != 1) {
        fprintf(stderr, "%s: %s answered something that is not HTTP\n", h->prog, h->url);
        goto out;
    }
    const char *b = strstr(resp.p, "\r\n\r\n");
    strbuf_puts(body, b ? b + 4 : "");
    r = 0;
out:
    if (fd >= 0)
        close(fd);
    if (ai)
        freeaddrinfo(ai);
    strbuf_free(&req);
    strbuf_free(&resp);
    return r;
}
