/*
 * duecount.c -- counts of waiting entries per UTC day and per minute of each
 * day, for the "what falls due ahead" view (duecount.h).
 *
 * Layout. Days are numbered from the epoch (day = due / 86,400,000). A
 * growable array `day[]` covers days base .. base + n - 1; each element holds
 * the day's total and, while the day has entries, a block of 1,440 uint32
 * minute counters. An entry due before `base` (base is the day of the first
 * entry ever added, or earlier ones seen since) moves base down; one due more
 * than DUECOUNT_SPAN_DAYS after base is counted in `far` only (its minute
 * is never asked for: a view reaches 365 days ahead of now >= base).
 *
 * View. minutes: 60 minute counters from the current one (two days' blocks
 * at most); hours: 24 sums of 60 minute counters; days: 365 day totals.
 * Entries before the current minute are folded into the first bucket of
 * each view, from the day totals before today and the minutes of today
 * before now.
 *
 * Pure: no clock, no I/O. Out of memory aborts (xalloc.h).
 */
#include "delay-bridge/duecount.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define MS_MINUTE 60000ull
#define MS_HOUR 3600000ull
#define MS_DAY 86400000ull
#define DAY_MINUTES 1440
#define DUECOUNT_SPAN_DAYS 40000u /* ~109 years after the first day seen */

struct dc_day {
    uint64_t total;
    uint32_t *minute; /* DAY_MINUTES counters, NULL while total == 0 */
};

struct duecount {
    uint64_t base;     /* day number of day[0] */
    size_t n, cap;     /* day[0..n) in use */
    struct dc_day *day;
    uint64_t far;      /* entries beyond base + DUECOUNT_SPAN_DAYS */
    uint64_t total;
    size_t blocks;     /* minute blocks allocated */
};

struct duecount *duecount_new(void)
{
    struct duecount *d = xrealloc(NULL, sizeof(*d));
    memset(d, 0, sizeof(*d));
    return d;
}

void duecount_free(struct duecount *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        free(d->day[i].minute);
    free(d->day);
    free(d);
}

/* Room for need days: the array grows by doubling from 64, whichever end
 * a day is added at, so it never holds more than the next power of two
 * above the days spanned (65,536 x 16 B = 1 MiB for DUECOUNT_SPAN_DAYS). */
static void room(struct duecount *d, size_t need)
{
    if (need <= d->cap)
        return;
    size_t cap = d->cap ? d->cap : 64;
    while (cap < need)
        cap *= 2;
    d->day = xrealloc(d->day, cap * sizeof(*d->day));
    d->cap = cap;
}

/* Make day number dn addressable; 0, or -1 when it is too far ahead. */
static int reach(struct duecount *d, uint64_t dn)
{
    if (d->n == 0) {
        d->base = dn;
    } else if (dn < d->base) {
        size_t shift = (size_t)(d->base - dn);
        room(d, d->n + shift);
        memmove(d->day + shift, d->day, d->n * sizeof(*d->day));
        memset(d->day, 0, shift * sizeof(*d->day));
        d->n += shift;
        d->base = dn;
        return 0;
    }
    if (dn - d->base >= DUECOUNT_SPAN_DAYS)
        return -1;
    size_t need = (size_t)(dn - d->base) + 1;
    room(d, need);
    if (need > d->n) {
        memset(d->day + d->n, 0, (need - d->n) * sizeof(*d->day));
        d->n = need;
    }
    return 0;
}

static void day_emptied(struct duecount *d, struct dc_day *day)
{
    free(day->minute);
    day->minute = NULL;
    d->blocks--;
}

void duecount_add(struct duecount *d, uint64_t due_ms, int delta)
{
    uint64_t m = due_ms / MS_MINUTE, dn = m / DAY_MINUTES, i = dn - d->base;

    d->total += (uint64_t)(int64_t)delta;
    /* Fast path (every call but a day's first and last): the day has its block. */
    if (__builtin_expect(i < d->n && d->day[i].minute != NULL, 1)) {
        struct dc_day *day = &d->day[i];
        day->minute[m - dn * DAY_MINUTES] += (uint32_t)delta;
        if ((day->total += (uint64_t)(int64_t)delta) == 0)
            day_emptied(d, day);
        return;
    }
    if (reach(d, dn) < 0) {
        d->far += (uint64_t)(int64_t)delta;
        return;
    }
    struct dc_day *day = &d->day[dn - d->base];
    if (!day->minute) {
        day->minute = xrealloc(NULL, DAY_MINUTES * sizeof(uint32_t));
        memset(day->minute, 0, DAY_MINUTES * sizeof(uint32_t));
        d->blocks++;
    }
    day->minute[m - dn * DAY_MINUTES] += (uint32_t)delta;
    if ((day->total += (uint64_t)(int64_t)delta) == 0)
        day_emptied(d, day);
}

static uint64_t day_total(const struct duecount *d, uint64_t dn)
{
    if (d->n == 0 || dn < d->base || dn - d->base >= d->n)
        return 0;
    return d->day[dn - d->base].total;
}

/* Entries due in minute m (minutes since the epoch). */
static uint64_t minute_count(const struct duecount *d, uint64_t m)
{
    uint64_t dn = m / DAY_MINUTES;
    if (d->n == 0 || dn < d->base || dn - d->base >= d->n)
        return 0;
    const struct dc_day *day = &d->day[dn - d->base];
    return day->minute ? day->minute[m % DAY_MINUTES] : 0;
}

void duecount_view(const struct duecount *d, uint64_t now_ms, struct duecount_view *out)
{
    uint64_t now_min = now_ms / MS_MINUTE, today = now_ms / MS_DAY;
    uint64_t before = 0; /* due before the current minute */

    memset(out, 0, sizeof(*out));
    out->minute_start = now_min * MS_MINUTE;
    out->hour_start = now_ms / MS_HOUR * MS_HOUR;
    out->day_start = today * MS_DAY;
    out->total = d->total;

    for (uint64_t dn = d->base; d->n && dn < today && dn - d->base < d->n; dn++)
        before += d->day[dn - d->base].total;
    for (uint64_t m = today * DAY_MINUTES; m < now_min; m++)
        before += minute_count(d, m);

    for (int i = 0; i < DUECOUNT_MINUTES; i++)
        out->minutes[i] = minute_count(d, now_min + (uint64_t)i);
    out->minutes[0] += before;

    uint64_t hour_min = out->hour_start / MS_MINUTE;
    for (int h = 0; h < DUECOUNT_HOURS; h++)
        for (int i = 0; i < 60; i++) {
            uint64_t m = hour_min + (uint64_t)h * 60 + (uint64_t)i;
            if (m >= now_min)
                out->hours[h] += minute_count(d, m);
        }
    out->hours[0] += before;

    uint64_t in_days = 0;
    for (int i = 0; i < DUECOUNT_DAYS; i++) {
        out->days[i] = day_total(d, today + (uint64_t)i);
        in_days += out->days[i];
    }
    /* today's total holds what is due before now; everything before today is added */
    for (uint64_t dn = d->base; d->n && dn < today && dn - d->base < d->n; dn++)
        out->days[0] += d->day[dn - d->base].total, in_days += d->day[dn - d->base].total;
    out->later = d->total - in_days;
}

size_t duecount_memory(const struct duecount *d)
{
    return sizeof(*d) + d->cap * sizeof(*d->day) + d->blocks * DAY_MINUTES * sizeof(uint32_t);
}
