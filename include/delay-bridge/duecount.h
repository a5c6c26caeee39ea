/*
 * duecount.h -- how many waiting entries fall due in each UTC minute, hour
 * and day ahead, kept as they come and go, so the question "what fires in
 * the next hour, day, year" is answered without looking at the entries.
 *
 * The timing wheel owns one (wheel.c: every add, delete and firing updates
 * it); GET /due and the status page read a view of it.
 *
 * Cost: duecount_add() is O(1) (two counters; a day's minute counters are
 * allocated the first time an entry falls on that day: 5,760 bytes per UTC
 * day that has entries, freed when the day empties; plus 16 bytes per day
 * between the earliest and the latest due time, at most ~1 MiB).
 * duecount_view() reads at most 60 + 2 x 1,440 + 365 counters: the same few
 * microseconds with 10 entries or 10M (tests/bench/bench_due.c), and it
 * never reads the WAL or the entries.
 */
#ifndef DB_DUECOUNT_H
#define DB_DUECOUNT_H

#include <stddef.h>
#include <stdint.h>

#define DUECOUNT_MINUTES 60 /* the next hour, per minute */
#define DUECOUNT_HOURS 24   /* the next day, per hour */
#define DUECOUNT_DAYS 365   /* the next year, per day */

struct duecount;

struct duecount *duecount_new(void);
void duecount_free(struct duecount *d);

/* One more (delta +1) or one fewer (-1) entry due at due_ms (ms since the epoch). */
void duecount_add(struct duecount *d, uint64_t due_ms, int delta);

/*
 * Buckets are whole UTC minutes, hours and days, each view starting with the
 * one that holds now_ms: minutes[0] counts entries due in [minute_start,
 * minute_start + 60 s), minutes[1] the next minute, and so on. Entries due
 * before the current minute that still wait (the wheel fires them within
 * milliseconds) are in minutes[0], hours[0] and days[0] too. later: due after
 * the last day of the view. total: every entry.
 */
struct duecount_view {
    uint64_t minute_start, hour_start, day_start; /* ms since the epoch */
    uint64_t minutes[DUECOUNT_MINUTES];
    uint64_t hours[DUECOUNT_HOURS];
    uint64_t days[DUECOUNT_DAYS];
    uint64_t later;
    uint64_t total;
};
void duecount_view(const struct duecount *d, uint64_t now_ms, struct duecount_view *out);

/* Bytes of RAM it holds. */
size_t duecount_memory(const struct duecount *d);

#endif
