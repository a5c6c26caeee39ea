/*
 * clock.c -- wall and monotonic time, ISO 8601 in and out, and the one
 * source of random numbers.
 *
 * The deterministic simulator (tests/sim/, built with -DDB_SIM) supplies
 * its own clock_now_ms(), clock_now_us(), clock_mono_ns() and clock_rand64(): a simulated
 * clock and a seeded generator, so one seed replays exactly. Every other
 * build compiles the three below.
 */
#define _GNU_SOURCE
#include "clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#ifndef DB_SIM
uint64_t clock_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t clock_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t clock_mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif

char *clock_iso8601(uint64_t ms, char out[CLOCK_ISO_LEN])
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;

    if (!gmtime_r(&secs, &tm)) {
        snprintf(out, CLOCK_ISO_LEN, "?");
        return out;
    }
    snprintf(out, CLOCK_ISO_LEN, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000));
    return out;
}

int clock_parse(const char *s, uint64_t *ms)
{
    struct tm tm;
    unsigned frac = 0;
    int n = 0;
    char *end;

    if (!s || !*s)
        return -1;
    if (strchr(s, '-') == NULL) {
        unsigned long long v = strtoull(s, &end, 10);
        if (*end || s[0] == '-' || s[0] == '+' || s[0] == ' ')
            return -1;
        *ms = v;
        return 0;
    }
    memset(&tm, 0, sizeof(tm));
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &n) != 6)
        return -1;
    s += n;
    if (*s == '.') {
        int digits = 0;
        for (s++; *s >= '0' && *s <= '9'; s++, digits++)
            if (digits < 3)
                frac = frac * 10 + (unsigned)(*s - '0');
        if (digits == 0)
            return -1;
        for (; digits < 3; digits++)
            frac *= 10;
    }
    if (strcmp(s, "Z") != 0 && strcmp(s, "+00:00") != 0)
        return -1;
    if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
        tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *ms = (uint64_t)t * 1000u + frac;
    return 0;
}

#ifndef DB_SIM
uint64_t clock_rand64(void)
{
    static uint64_t fallback;
    uint64_t v = 0;
    ssize_t n;

    do
        n = getrandom(&v, sizeof(v), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(v)) {
        /* No getrandom (old kernel): splitmix64 over time, pid and a counter. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 48;
        z += (fallback += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        v = z ^ (z >> 31);
    }
    return v;
}
#endif
