/*
 * xalloc.h -- allocation that aborts with a message on out of memory
 * (STYLE.md: callers do not check every malloc).
 */
#ifndef DB_XALLOC_H
#define DB_XALLOC_H

#include <stdio.h>
#include <stdlib.h>

static inline void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "delay-bridge: out of memory (%zu bytes)\n", n);
        abort();
    }
    return q;
}

#endif
