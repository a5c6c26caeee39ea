/*
 * bigalloc.c -- an LD_PRELOAD shim for the RSS hunt (tests/soak/README.md,
 * "RSS over 30 minutes"): every malloc, calloc and realloc of BIGALLOC_MIN
 * bytes or more (default 256 KiB) is written to $BIGALLOC_LOG.<pid> with
 * its size and a backtrace; resolve the delay-bridge(+0x...) frames with
 * `addr2line -f -s -e delay-bridge 0x...`. Diagnostic only, never built by
 * the project:
 *
 *   gcc -O2 -shared -fPIC -o bigalloc.so tests/soak/bigalloc.c -ldl
 *   printf '#!/bin/sh\nLD_PRELOAD=%s/bigalloc.so exec %s "$@"\n' "$PWD" "$PWD/build/delay-bridge" > wrap.sh
 *   chmod +x wrap.sh   # exec keeps the pid the soak kills
 *   BIGALLOC_LOG=/tmp/big DB_BRIDGE_BIN=$PWD/wrap.sh tests/soak/ha_soak.py --minutes 7 ...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static void *(*real_malloc)(size_t);
static void *(*real_realloc)(void *, size_t);
static void *(*real_calloc)(size_t, size_t);
static __thread int inside;
static size_t minsz = 256 * 1024;
static int fd = -1;

static char tmpbuf[65536];
static size_t tmpused;

static void init(void)
{
    if (real_malloc)
        return;
    inside = 1;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    const char *m = getenv("BIGALLOC_MIN");
    if (m)
        minsz = strtoul(m, NULL, 10);
    const char *l = getenv("BIGALLOC_LOG");
    if (l) {
        char p[512];
        snprintf(p, sizeof(p), "%s.%d", l, (int)getpid());
        fd = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    inside = 0;
}

static void note(const char *what, void *old, size_t n, void *res)
{
    if (inside || fd < 0 || n < minsz)
        return;
    inside = 1;
    char line[256];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int k = snprintf(line, sizeof(line), "%ld.%03ld %s %p -> %p size %zu\n", (long)ts.tv_sec,
                     ts.tv_nsec / 1000000, what, old, res, n);
    write(fd, line, (size_t)k);
    void *bt[12];
    int nb = backtrace(bt, 12);
    backtrace_symbols_fd(bt, nb, fd);
    write(fd, "--\n", 3);
    inside = 0;
}

void *malloc(size_t n)
{
    if (!real_malloc) {
        if (inside) { /* dlsym's own allocation */
            void *p = tmpbuf + tmpused;
            tmpused += (n + 15) & ~15ul;
            return p;
        }
        init();
    }
    void *r = real_malloc(n);
    note("malloc", NULL, n, r);
    return r;
}

void *calloc(size_t a, size_t b)
{
    if (!real_calloc) {
        if (inside) {
            void *p = tmpbuf + tmpused;
            tmpused += (a * b + 15) & ~15ul;
            memset(p, 0, a * b);
            return p;
        }
        init();
    }
    void *r = real_calloc(a, b);
    note("calloc", NULL, a * b, r);
    return r;
}

void *realloc(void *p, size_t n)
{
    if (!real_realloc)
        init();
    void *r = real_realloc(p, n);
    note("realloc", p, n, r);
    return r;
}

void free(void *p)
{
    static void (*real_free)(void *);
    if ((char *)p >= tmpbuf && (char *)p < tmpbuf + sizeof(tmpbuf))
        return;
    if (!real_free)
        real_free = dlsym(RTLD_NEXT, "free");
    real_free(p);
}
