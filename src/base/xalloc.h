/*
 * xalloc.h -- allocation that aborts with a message on out of memory
 * (src/STYLE.md: callers do not check every malloc). The one copy in the tree.
 */
#ifndef DB_XALLOC_H
#define DB_XALLOC_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void xalloc_die(size_t n)
{
    fprintf(stderr, "delay-bridge: out of memory (%zu bytes)\n", n);
    abort();
}

static inline void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        xalloc_die(n);
    return q;
}

static inline void *xmalloc(size_t n)
{
    return xrealloc(NULL, n);
}

static inline void *xcalloc(size_t n, size_t size)
{
    void *q = calloc(n ? n : 1, size ? size : 1);
    if (!q)
        xalloc_die(n * size);
    return q;
}

static inline char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

static inline char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

#endif
