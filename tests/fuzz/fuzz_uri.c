/*
 * fuzz_uri.c -- libFuzzer harness for uri_parse() (uri.h).
 *
 * The fuzz bytes, NUL-terminated in an exact-size heap copy, are parsed as
 * a broker URI. Checked: the result is 0 or -1; on -1 the message is
 * non-empty, NUL-terminated and does not depend on the password (parsed
 * again with the password's characters changed, the message is the same,
 * so it cannot quote the password raw or %-decoded); on
 * 0 every field is NUL-terminated inside its buffer, the host is not
 * empty, port != 0, and parsing "amqp[s]://user:password@host:port/vhost"
 * rebuilt with every field %-encoded gives the same struct back.
 */
#include "delay-bridge/uri.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                             \
    do {                                                                                     \
        if (!(c)) {                                                                          \
            fprintf(stderr, "fuzz_uri: %s:%d: check failed: %s\n", __FILE__, __LINE__,     \
                    #c);                                                                     \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static int terminated(const char *s)
{
    return memchr(s, '\0', URI_PART_MAX) != NULL;
}

/* %-encode every byte of s into out. */
static char *pct(char *out, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        *out++ = '%';
        *out++ = hex[(unsigned char)*s >> 4];
        *out++ = hex[(unsigned char)*s & 15];
    }
    return out;
}

/* c changed within its class: 1-9, a-f, A-F, g-z, G-Z rotate; others kept.
 * Keeps %-escapes valid, "%00" a NUL, and every length the same. */
static char rotate(char c)
{
    if (c >= '1' && c <= '9')
        return c == '9' ? '1' : (char)(c + 1);
    if (c >= 'a' && c <= 'f')
        return c == 'f' ? 'a' : (char)(c + 1);
    if (c >= 'A' && c <= 'F')
        return c == 'F' ? 'A' : (char)(c + 1);
    if (c >= 'g' && c <= 'z')
        return c == 'z' ? 'g' : (char)(c + 1);
    if (c >= 'G' && c <= 'Z')
        return c == 'Z' ? 'G' : (char)(c + 1);
    return c;
}

/*
 * The password never reaches the message: parse again with the password
 * part (between the userinfo's first ':' and its last '@', as uri.c splits
 * it) changed character by character; the result and the message must be
 * the same. A message quoting the password, raw or decoded, would differ.
 */
static void check_no_password(const char *s, int rc, const char *err)
{
    const char *auth = strstr(s, "://");
    if (!auth)
        return;
    auth += 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (!at)
        return;
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (!colon)
        return;
    char *v = strdup(s);
    for (char *p = v + (colon + 1 - s); p < v + (at - s); p++)
        *p = rotate(*p);
    struct uri u2;
    char err2[256];
    int rc2 = uri_parse(v, &u2, err2, sizeof err2);
    CHECK(rc2 == rc);
    if (rc < 0)
        CHECK(strcmp(err, err2) == 0);
    free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';

    struct uri u;
    char err[256];
    memset(err, 'X', sizeof err);
    int rc = uri_parse(s, &u, err, sizeof err);
    CHECK(rc == 0 || rc == -1);
    if (rc < 0) {
        CHECK(memchr(err, '\0', sizeof err) && err[0]);
        check_no_password(s, rc, err);
    } else {
        CHECK(terminated(u.user) && terminated(u.password) && terminated(u.host) &&
              terminated(u.vhost));
        CHECK(u.host[0] && u.port != 0);
        CHECK(u.tls == 0 || u.tls == 1);

        /* rebuild and parse again */
        char *r = malloc(16 + 4 * 3 * URI_PART_MAX + 16), *p = r;
        p += sprintf(p, "%s", u.tls ? "amqps://" : "amqp://");
        p = pct(p, u.user);
        *p++ = ':';
        p = pct(p, u.password);
        *p++ = '@';
        *p++ = '[';
        p = pct(p, u.host);
        p += sprintf(p, "]:%u/", (unsigned)u.port);
        p = pct(p, u.vhost);
        *p = '\0';
        struct uri u2;
        char err2[256];
        int rc2 = uri_parse(r, &u2, err2, sizeof err2);
        if (rc2 != 0)
            fprintf(stderr, "fuzz_uri: rebuilt %s: %s\n", r, err2);
        CHECK(rc2 == 0);
        CHECK(u2.tls == u.tls && u2.port == u.port);
        CHECK(strcmp(u2.user, u.user) == 0 && strcmp(u2.password, u.password) == 0);
        CHECK(strcmp(u2.host, u.host) == 0 && strcmp(u2.vhost, u.vhost) == 0);
        free(r);
    }
    free(s);
    return 0;
}
