/*
 * strbuf.c -- a growing byte buffer for building text (strbuf.h).
 *
 * Design
 * ------
 * The capacity doubles (from 256 bytes) so n appends cost O(n) copies in
 * total; one byte beyond len is always reserved for the NUL, so p is a C
 * string after every append. printf formats straight into the spare room
 * and only formats a second time when the text did not fit. Out of memory
 * aborts in xrealloc (src/STYLE.md): no function here can fail.
 */
#include "delay-bridge/strbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "xalloc.h"

#define STRBUF_MIN_CAP 256

/* Make room for n more bytes plus the NUL. */
static void reserve(struct strbuf *b, size_t n)
{
    if (n >= SIZE_MAX - b->len) {
        fprintf(stderr, "delay-bridge: strbuf too large\n");
        abort();
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : STRBUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

void strbuf_append(struct strbuf *b, const void *data, size_t n)
{
    reserve(b, n);
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void strbuf_puts(struct strbuf *b, const char *s)
{
    strbuf_append(b, s, strlen(s));
}

void strbuf_vprintf(struct strbuf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    reserve(b, 0);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p + b->len, room, fmt, ap);
    if (n < 0) { /* an encoding error: append nothing */
        b->p[b->len] = '\0';
        va_end(ap2);
        return;
    }
    if ((size_t)n >= room) {
        reserve(b, (size_t)n);
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
    }
    va_end(ap2);
    b->len += (size_t)n;
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void strbuf_reset(struct strbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

char *strbuf_detach(struct strbuf *b, size_t *len)
{
    reserve(b, 0); /* so an empty buffer still hands out "" */
    b->p[b->len] = '\0';
    char *p = b->p;
    if (len)
        *len = b->len;
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

void strbuf_free(struct strbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = 0;
    b->cap = 0;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if none. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len, i;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, cp = s[0] & 0x1f;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, cp = s[0] & 0x0f;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, cp = s[0] & 0x07;
    else
        return 0;
    if (n < len)
        return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

void strbuf_append_utf8(struct strbuf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, run = 0;

    while (i < n) {
        size_t k = utf8_seq(p + i, n - i);
        if (k) {
            i += k;
            run += k;
            continue;
        }
        strbuf_append(b, p + i - run, run);
        strbuf_append(b, "\xef\xbf\xbd", 3); /* U+FFFD */
        run = 0;
        i++;
    }
    strbuf_append(b, p + i - run, run);
}
