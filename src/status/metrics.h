/*
 * metrics.h -- a stats snapshot in the Prometheus text exposition format.
 *
 * Pure: reads a struct db_stats, appends text. Names follow RabbitMQ's own
 * Prometheus plugin (prefix, snake_case, _total for counters, base units:
 * seconds and bytes); per-route series carry the label route="NAME". Every
 * family gets its # HELP and # TYPE lines, label values are escaped (\\, \",
 * \n) as the format requires. The table of families is in README.md
 * ("Operations"); keep the two in step.
 */
#ifndef DB_METRICS_H
#define DB_METRICS_H

#include "delay-bridge/stats.h"
#include "delay-bridge/strbuf.h"

/* Content-Type of what metrics_render() produces. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

void metrics_render(const struct db_stats *s, struct strbuf *out);

#endif
