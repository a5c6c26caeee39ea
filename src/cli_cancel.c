/*
 * cli_cancel.c -- `delay-bridge cancel`: cancel a pending message by key.
 *
 * The daemon owns its WAL (it is locked), so the tool asks the running
 * daemon over its HTTP endpoint: DELETE /pending/ROUTE/KEY, with the bearer
 * token from DELAY_BRIDGE_HTTP_TOKEN when set. The daemon answers after the
 * CANCEL record is durable. A tiny HTTP/1.1 client over one socket is all
 * this needs: one request, Connection: close, read to EOF.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "delay-bridge/cli.h"
#include "delay-bridge/config.h"
#include "delay-bridge/strbuf.h"

enum { CANCEL_OK = 0, CANCEL_MISSED = 1, CANCEL_USAGE = 2, CANCEL_ERROR = 3 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge cancel --route ROUTE [--url URL | -c CONFIG] KEY\n"
            "\n"
            "Cancel the pending message with x-delay-key KEY on ROUTE, through the running\n"
            "daemon's HTTP endpoint (DELETE /pending/ROUTE/KEY). The cancel is durable when\n"
            "this returns 0.\n"
            "\n"
            "  -r, --route ROUTE    the route (a key names a message within its route)\n"
            "  -u, --url URL        the endpoint, http://HOST:PORT (default: from -c, else\n"
            "                       http://127.0.0.1:9800)\n"
            "  -c, --config FILE    take the endpoint from this config's http.listen\n"
            "  -t, --timeout S      seconds to wait for the answer (default 10)\n"
            "  -h, --help\n"
            "\n"
            "Environment: DELAY_BRIDGE_HTTP_TOKEN, sent as a bearer token when set.\n"
            "Exit codes: 0 cancelled, 1 no such key pending (unknown, already published or\n"
            "in flight), 2 usage, 3 the daemon could not be asked.\n");
}

/* %-encode s into b, leaving unreserved characters as they are. */
static void encode(struct strbuf *b, const char *s)
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

int cli_cancel_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"route", required_argument, NULL, 'r'},   {"url", required_argument, NULL, 'u'},
        {"config", required_argument, NULL, 'c'},  {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *route = NULL, *url = NULL, *cfgpath = NULL, *token = getenv("DELAY_BRIDGE_HTTP_TOKEN");
    char host[256], port[16], urlbuf[300], err[1024];
    struct strbuf req = STRBUF_INIT, resp = STRBUF_INIT;
    struct addrinfo hints, *ai = NULL;
    long timeout = 10;
    int c, fd = -1, rc = CANCEL_ERROR, status = 0;

    optind = 1;
    while ((c = getopt_long(argc, argv, "r:u:c:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': route = optarg; break;
        case 'u': url = optarg; break;
        case 'c': cfgpath = optarg; break;
        case 't': timeout = strtol(optarg, NULL, 10); break;
        case 'h': usage(stdout); return CANCEL_OK;
        default: usage(stderr); return CANCEL_USAGE;
        }
    }
    if (!route || !*route || optind + 1 != argc || !argv[optind][0] || timeout <= 0) {
        usage(stderr);
        return CANCEL_USAGE;
    }
    if (!url && cfgpath) {
        struct config cfg;
        if (config_load(&cfg, cfgpath, err, sizeof(err)) < 0) {
            fprintf(stderr, "delay-bridge cancel: configuration error: %s\n", err);
            return CANCEL_USAGE;
        }
        if (!cfg.http_listen[0]) {
            fprintf(stderr, "delay-bridge cancel: %s has no http.listen: the daemon has no "
                    "endpoint to ask\n", cfgpath);
            config_free(&cfg);
            return CANCEL_USAGE;
        }
        snprintf(urlbuf, sizeof(urlbuf), strchr(cfg.http_host, ':') ? "http://[%s]:%u" : "http://%s:%u",
                 cfg.http_host, (unsigned)cfg.http_port);
        url = urlbuf;
        config_free(&cfg);
    }
    if (!url)
        url = "http://127.0.0.1:9800";
    if (parse_url(url, host, sizeof(host), port, sizeof(port)) < 0) {
        fprintf(stderr, "delay-bridge cancel: --url: expected http://HOST:PORT, got \"%s\"\n", url);
        return CANCEL_USAGE;
    }

    strbuf_puts(&req, "DELETE /pending/");
    encode(&req, route);
    strbuf_puts(&req, "/");
    encode(&req, argv[optind]);
    strbuf_printf(&req, " HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n", host);
    if (token && *token)
        strbuf_printf(&req, "Authorization: Bearer %s\r\n", token);
    strbuf_puts(&req, "\r\n");

    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if ((c = getaddrinfo(host, port, &hints, &ai)) != 0) {
        fprintf(stderr, "delay-bridge cancel: %s: %s\n", host, gai_strerror(c));
        goto cleanup;
    }
    fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    struct timeval tv = {timeout, 0};
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
        connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        fprintf(stderr, "delay-bridge cancel: cannot reach the daemon at %s: %s\n", url,
                strerror(errno));
        goto cleanup;
    }
    for (size_t off = 0; off < req.len;) {
        ssize_t n = send(fd, req.p + off, req.len - off, MSG_NOSIGNAL);
        if (n <= 0) {
            fprintf(stderr, "delay-bridge cancel: send to %s: %s\n", url, strerror(errno));
            goto cleanup;
        }
        off += (size_t)n;
    }
    for (;;) {
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) {
            fprintf(stderr, "delay-bridge cancel: no answer from %s: %s\n", url, strerror(errno));
            goto cleanup;
        }
        if (n == 0)
            break;
        strbuf_append(&resp, buf, (size_t)n);
    }
    if (!resp.p || sscanf(resp.p, "HTTP/1.%*d %d", &status) != 1) {
        fprintf(stderr, "delay-bridge cancel: %s answered something that is not HTTP\n", url);
        goto cleanup;
    }
    const char *body = strstr(resp.p, "\r\n\r\n");
    body = body ? body + 4 : "";
    if (status == 200 || status == 202) {
        printf("%s", body);
        rc = CANCEL_OK;
    } else if (status == 404 && strstr(body, "\"cancelled\"")) {
        printf("%s", body);
        rc = CANCEL_MISSED;
    } else {
        fprintf(stderr, "delay-bridge cancel: %s answered %d: %s", url, status, body);
    }

cleanup:
    if (fd >= 0)
        close(fd);
    if (ai)
        freeaddrinfo(ai);
    strbuf_free(&req);
    strbuf_free(&resp);
    return rc;
}
