/*
 * uri.c -- AMQP URIs, parsed once for the config check and the connection.
 *
 * A small left-to-right scan: scheme, then authority up to the first '/',
 * split at its last '@' into userinfo and host:port, then the path. Every
 * part is %-decoded into a fixed buffer; a part that does not fit, a bad
 * %-escape, a port outside 1..65535 or an empty host is an error. Errors
 * name the part, never its value, so a password cannot leak into a log.
 */
#include "delay-bridge/uri.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* %-decode [p, p+n) into out (URI_PART_MAX). 0 or -1. */
static int decode(const char *p, size_t n, char *out)
{
    size_t i, o = 0;

    for (i = 0; i < n; i++) {
        char c = p[i];
        if (c == '%') {
            int hi, lo;
            if (i + 2 >= n)
                return -1;
            hi = hexval(p[i + 1]);
            lo = hexval(p[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (o + 1 >= URI_PART_MAX || c == '\0')
            return -1;
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

#define FAIL(...)                                                                            \
    do {                                                                                     \
        snprintf(err, errlen, __VA_ARGS__);                                                  \
        return -1;                                                                           \
    } while (0)

int uri_parse(const char *s, struct uri *u, char *err, size_t errlen)
{
    const char *auth, *auth_end, *at = NULL, *host, *host_end, *port = NULL, *p;

    memset(u, 0, sizeof(*u));
    if (strncmp(s, "amqp://", 7) == 0) {
        auth = s + 7;
    } else if (strncmp(s, "amqps://", 8) == 0) {
        auth = s + 8;
        u->tls = 1;
    } else {
        FAIL("scheme must be amqp:// or amqps://");
    }
    auth_end = auth + strcspn(auth, "/?#");
    if (*auth_end == '?' || *auth_end == '#')
        FAIL("query parameters and fragments are not supported (use the broker.* keys)");
    for (p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    strcpy(u->user, "guest");
    strcpy(u->password, "guest");
    host = auth;
    if (at) {
        const char *colon = memchr(auth, ':', (size_t)(at - auth));
        if (decode(auth, (size_t)((colon ? colon : at) - auth), u->user) < 0)
            FAIL("bad user name (too long or bad %%-escape)");
        if (colon && decode(colon + 1, (size_t)(at - colon - 1), u->password) < 0)
            FAIL("bad password (too long or bad %%-escape)");
        if (!colon)
            u->password[0] = '\0';
        host = at + 1;
    }
    if (*host == '[') {
        host_end = memchr(host, ']', (size_t)(auth_end - host));
        if (!host_end)
            FAIL("IPv6 host without its closing ']'");
        if (decode(host + 1, (size_t)(host_end - host - 1), u->host) < 0)
            FAIL("bad host");
        if (host_end + 1 < auth_end) {
            if (host_end[1] != ':')
                FAIL("unexpected text after the IPv6 host");
            port = host_end + 2;
        }
    } else {
        host_end = memchr(host, ':', (size_t)(auth_end - host));
        if (host_end)
            port = host_end + 1;
        else
            host_end = auth_end;
        if (decode(host, (size_t)(host_end - host), u->host) < 0)
            FAIL("bad host");
    }
    if (!u->host[0])
        FAIL("no host");
    u->port = u->tls ? 5671 : 5672;
    if (port) {
        unsigned long v = 0;
        if (port == auth_end)
            FAIL("empty port");
        for (p = port; p < auth_end; p++) {
            if (*p < '0' || *p > '9')
                FAIL("port is not a number");
            v = v * 10 + (unsigned long)(*p - '0');
            if (v > 65535)
                break;
        }
        if (v < 1 || v > 65535)
            FAIL("port must be 1..65535");
        u->port = (uint16_t)v;
    }
    if (*auth_end == '\0') {
        strcpy(u->vhost, "/");
    } else {
        const char *path = auth_end + 1;
        if (strpbrk(path, "?#"))
            FAIL("query parameters and fragments are not supported (use the broker.* keys)");
        if (strchr(path, '/'))
            FAIL("vhost must be one path segment (write \"/\" inside it as %%2f)");
        if (decode(path, strlen(path), u->vhost) < 0)
            FAIL("bad vhost (too long or bad %%-escape)");
    }
    return 0;
}
