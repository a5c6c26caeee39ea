/*
 * stats.c -- the histogram helpers of the stats snapshot (stats.h).
 *
 * Design
 * ------
 * Every histogram in the daemon (fire lateness per route, WAL fdatasync
 * duration) shares one set of upper bounds, so the snapshot stays a plain
 * struct with fixed-size arrays and the renderers need no per-histogram
 * bucket table. The bounds run from 100 us (an fdatasync on a fast NVMe
 * device) to 10 s (a publish that waited out a broker restart) in the usual
 * 1 - 2.5 - 5 steps, and the last bucket catches everything above:
 *
 *   i    0       1        2       3      4       5      6      7
 *   le   0.0001  0.00025  0.0005  0.001  0.0025  0.005  0.01   0.025
 *   i    8       9        10      11     12      13     14     15
 *   le   0.05    0.1      0.25    0.5    1       2.5    10     +Inf
 *
 * Buckets are stored per bucket (not cumulative) so an observation touches
 * one counter; metrics.c makes them cumulative when rendering. A value goes
 * to the first bucket whose bound is >= the value, as Prometheus' "le"
 * (less than or equal) requires. Negative values and NaN count as 0: a
 * clock step must not lose an observation or poison the sum.
 */
#include "delay-bridge/stats.h"

#include <math.h>

/* Retry routes' attempt histogram (stats.h): the last bucket, +Inf, has no bound here. */
const uint32_t db_retry_le[DB_RETRY_BUCKETS - 1] = {1, 2, 3, 5, 10, 20, 50, 100};

const char *const db_stage_names[DB_STAGES] = {"wake", "read", "write", "confirm"};

const double db_hist_le[DB_HIST_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
    0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   10.0, INFINITY,
};

void db_hist_observe(struct db_hist *h, double v)
{
    if (!(v > 0)) /* negative, zero or NaN */
        v = 0;
    int i = 0;
    while (i < DB_HIST_BUCKETS - 1 && v > db_hist_le[i])
        i++;
    h->count[i]++;
    h->n++;
    if (isfinite(v))
        h->sum += v;
}
