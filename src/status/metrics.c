/*
 * metrics.c -- a stats snapshot in the Prometheus text exposition format.
 *
 * Format (text/plain; version=0.0.4), one family after the other:
 *
 *   # HELP delay_bridge_published_total Messages published to their target exchange.
 *   # TYPE delay_bridge_published_total counter
 *   delay_bridge_published_total{route="orders"} 1200
 *   delay_bridge_published_total{route="mails"} 17
 *
 * - every family has exactly one # HELP and one # TYPE line, before its
 *   samples, even when it has no sample (no routes configured);
 * - label values escape '\' as \\, '"' as \" and a newline as \n, and
 *   each byte that is not part of valid UTF-8 becomes U+FFFD; HELP text
 *   escapes '\' and newline (ours are constants without either);
 * - numbers: integers in decimal, floating point with up to 15 significant
 *   digits, infinity as +Inf (only in the le label of the last bucket);
 * - a histogram NAME is NAME_bucket{...,le="B"} for every bound in
 *   stats.c's table, cumulative, ending with le="+Inf", then NAME_sum and
 *   NAME_count. The +Inf bucket and _count are the same number by
 *   construction (both the cumulative total), so a snapshot taken while an
 *   observation is half-recorded can never render an inconsistent family.
 *
 * Design
 * ------
 * The per-route families are a table of (name, type, help, field offset)
 * rows walked once per family, so adding a counter is one row here plus
 * one field in stats.h. Names follow RabbitMQ's own Prometheus plugin:
 * prefix, snake_case, _total on counters, seconds and bytes as units.
 * Values that are unknown are left out rather than rendered as 0: the
 * resident set size when stats.h says 0 = unknown, next_due_seconds for a
 * route that holds nothing. next_due_seconds is per route only; the
 * earliest due time over all routes is min() of those series (messages of
 * routes missing from the config are never due: see orphaned_messages).
 *
 * delay_bridge_ready is 1 exactly when ready_reason() says "", so
 * the gauge and /readyz can never disagree.
 *
 * Pure: reads the snapshot, appends to a strbuf; no clock, no I/O.
 */
#include "metrics.h"
#include "ready.h"

#include "base/utf8.h"
#include "delay-bridge/retry.h"


#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define PREFIX "delay_bridge_"

/* ---- formatting helpers ---- */

static void put_escaped_label(struct strbuf *out, const char *v)
{
    const unsigned char *p = (const unsigned char *)v;
    size_t n = strlen(v);

    for (size_t i = 0; i < n;) {
        int k = utf8_char(p + i, n - i);
        if (k == 0) /* not UTF-8: one bad byte would fail the whole scrape */
            strbuf_puts(out, "\xef\xbf\xbd"), k = 1; /* U+FFFD */
        else if (p[i] == '\\')
            strbuf_puts(out, "\\\\");
        else if (p[i] == '"')
            strbuf_puts(out, "\\\"");
        else if (p[i] == '\n')
            strbuf_puts(out, "\\n");
        else
            strbuf_append(out, (const char *)p + i, (size_t)k);
        i += (size_t)k;
    }
}

static void put_double(struct strbuf *out, double v)
{
    if (isnan(v))
        strbuf_puts(out, "NaN");
    else if (isinf(v))
        strbuf_puts(out, v > 0 ? "+Inf" : "-Inf");
    else
        strbuf_printf(out, "%.15g", v);
}

static void family(struct strbuf *out, const char *name, const char *type, const char *help)
{
    strbuf_printf(out, "# HELP " PREFIX "%s %s\n# TYPE " PREFIX "%s %s\n", name, help, name, type);
}

/*
 * One sample line: name{k1="v1",k2="v2"} (labels optional, up to two pairs
 * given as k/v with NULL k = absent), without the value.
 */
static void sample_head(struct strbuf *out, const char *name, const char *suffix,
                        const char *k1, const char *v1, const char *k2, const char *v2)
{
    strbuf_printf(out, PREFIX "%s%s", name, suffix ? suffix : "");
    if (k1 || k2) {
        strbuf_puts(out, "{");
        if (k1) {
            strbuf_printf(out, "%s=\"", k1);
            put_escaped_label(out, v1 ? v1 : "");
            strbuf_puts(out, "\"");
        }
        if (k2) {
            strbuf_printf(out, "%s%s=\"", k1 ? "," : "", k2);
            put_escaped_label(out, v2 ? v2 : "");
            strbuf_puts(out, "\"");
        }
        strbuf_puts(out, "}");
    }
    strbuf_puts(out, " ");
}

static void sample_u64(struct strbuf *out, const char *name, const char *k, const char *v,
                       uint64_t val)
{
    sample_head(out, name, NULL, k, v, NULL, NULL);
    strbuf_printf(out, "%" PRIu64 "\n", val);
}

static void sample_double(struct strbuf *out, const char *name, const char *k, const char *v,
                          double val)
{
    sample_head(out, name, NULL, k, v, NULL, NULL);
    put_double(out, val);
    strbuf_puts(out, "\n");
}

/* A whole family with one unlabelled sample. */
static void scalar_u64(struct strbuf *out, const char *name, const char *type, const char *help,
                       uint64_t val)
{
    family(out, name, type, help);
    sample_u64(out, name, NULL, NULL, val);
}

static void scalar_double(struct strbuf *out, const char *name, const char *type,
                          const char *help, double val)
{
    family(out, name, type, help);
    sample_double(out, name, NULL, NULL, val);
}

/* The samples of one histogram (k/v: an optional label before le). */
static void hist_samples(struct strbuf *out, const char *name, const char *k, const char *v,
                         const struct db_hist *h)
{
    uint64_t cum = 0;
    char le[32];
    for (int i = 0; i < DB_HIST_BUCKETS; i++) {
        cum += h->count[i];
        if (i == DB_HIST_BUCKETS - 1 || isinf(db_hist_le[i]))
            snprintf(le, sizeof le, "+Inf");
        else
            snprintf(le, sizeof le, "%.15g", db_hist_le[i]);
        sample_head(out, name, "_bucket", k, v, "le", le);
        strbuf_printf(out, "%" PRIu64 "\n", cum);
    }
    sample_head(out, name, "_sum", k, v, NULL, NULL);
    put_double(out, h->sum);
    strbuf_puts(out, "\n");
    sample_head(out, name, "_count", k, v, NULL, NULL);
    strbuf_printf(out, "%" PRIu64 "\n", cum);
}

/* A histogram with labels route and stage (hist_samples has room for one label). */
static void stage_samples(struct strbuf *out, const char *route, const char *stage,
                          const struct db_hist *h)
{
    static const char *const suffix[] = {"_bucket", "_sum", "_count"};
    uint64_t cum = 0;

    for (int i = 0; i < DB_HIST_BUCKETS + 2; i++) {
        int kind = i < DB_HIST_BUCKETS ? 0 : i - DB_HIST_BUCKETS + 1;
        strbuf_printf(out, PREFIX "fire_stage_seconds%s{route=\"", suffix[kind]);
        put_escaped_label(out, route);
        strbuf_printf(out, "\",stage=\"%s\"", stage);
        if (kind == 0) {
            cum += h->count[i];
            if (i == DB_HIST_BUCKETS - 1 || isinf(db_hist_le[i]))
                strbuf_puts(out, ",le=\"+Inf\"} ");
            else
                strbuf_printf(out, ",le=\"%.15g\"} ", db_hist_le[i]);
            strbuf_printf(out, "%" PRIu64 "\n", cum);
        } else if (kind == 1) {
            strbuf_puts(out, "} ");
            put_double(out, h->sum);
            strbuf_puts(out, "\n");
        } else {
            strbuf_printf(out, "} %" PRIu64 "\n", cum);
        }
    }
}

/* ---- per-route families ---- */

struct route_family {
    const char *name;
    const char *type;
    const char *help;
    size_t off; /* of a uint64_t in struct db_route_stats */
};

#define RF(n, t, field, h) { n, t, h, offsetof(struct db_route_stats, field) }

static const struct route_family route_families[] = {
    RF("pending_messages", "gauge", pending,
       "Messages held for the route: waiting, due or in flight."),
    RF("inflight_messages", "gauge", inflight,
       "Messages published to the target, broker confirm not yet received."),
    RF("due_messages", "gauge", due,
       "Messages whose delay has expired, not yet published."),
    RF("waiting_messages", "gauge", waiting,
       "Durable messages waiting for their delay to expire."),
    RF("received_total", "counter", received,
       "Deliveries taken from the ingress queue and logged."),
    RF("rejected_total", "counter", rejected,
       "Deliveries rejected for being larger than wal.max_message_bytes."),
    RF("published_total", "counter", published,
       "Messages published to the target exchange (a republish counts again)."),
    RF("confirmed_total", "counter", confirmed,
       "Publishes confirmed by the broker: the message is done."),
    RF("publish_nacks_total", "counter", nacked,
       "Publishes nacked by the broker and published again."),
    RF("publish_retries_total", "counter", publish_retries,
       "Times the route's publish channel was reopened after an error."),
    RF("returned_total", "counter", returned,
       "Publishes returned by the broker: no queue bound at the target."),
    RF("invalid_delay_total", "counter", invalid_delay,
       "Deliveries with an x-delay that is not accepted or above max_delay_ms."),
    RF("redeliveries_deduplicated_total", "counter", deduplicated,
       "Redelivered deliveries recognised as already logged (lost ack): acked, not stored again."),
    RF("unstamped_total", "counter", unstamped,
       "delay_from \"broker\": messages with x-delay but no timestamp_in_ms, delayed from receipt."),
    RF("key_events_sent_total", "counter", key_events_sent,
       "share_keys: key events published (keyed messages and cancels taken here)."),
    RF("key_events_applied_total", "counter", key_events_applied,
       "share_keys: other bridges' key events that cancelled an older version held here."),
    RF("invalid_key_total", "counter", invalid_key,
       "Deliveries whose x-delay-key or x-delay-cancel is not a string of at most 255 bytes."),
    RF("dead_lettered_total", "counter", dead_lettered,
       "Messages sent to the dead letter exchange with x-delay-error."),
    RF("refused_total", "counter", refused,
       "delayed_exchanges routes: deliveries with no exchange of their own to go back to "
       "(the default or the route's ingress exchange, or a bridge's republish come back), "
       "rejected and not relayed."),
    RF("cancelled_total", "counter", cancelled,
       "Held messages removed by x-delay-cancel, replacement or purge."),
    RF("cancel_missed_total", "counter", cancel_missed,
       "Cancels for a key that was not pending."),
    RF("held_limit_paused", "gauge", held_limit_paused,
       "1 while the route does not consume because its max_held or limits.max_held is "
       "reached: new messages wait in its ingress queue."),
    RF("held_limit_pauses_total", "counter", held_limit_pauses,
       "Times the route's own max_held paused its consuming."),
};

static uint64_t route_field(const struct db_route_stats *r, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)r + off, sizeof v);
    return v;
}

/* Which vhost each route is in, and whether it consumes: labels to join on (route). */
static void render_route_info(const struct db_stats *s, struct strbuf *out)
{
    family(out, "route_info", "gauge",
           "Always 1 per route; vhost, and state: active, retired (removed at run time, "
           "publishing what it holds) or refused (added at run time, its declares refused by "
           "the broker, retried).");
    for (int i = 0; i < s->nroutes; i++) {
        const struct db_route_stats *r = &s->routes[i];
        strbuf_puts(out, PREFIX "route_info{route=\"");
        put_escaped_label(out, r->name);
        strbuf_puts(out, "\",vhost=\"");
        put_escaped_label(out, r->vhost ? r->vhost : "");
        strbuf_printf(out, "\",state=\"%s\"} 1\n",
                      r->retired ? "retired" : r->consume_refused ? "refused" : "active");
    }
}

static void render_routes(const struct db_stats *s, struct strbuf *out)
{
    int nr = s->routes ? s->nroutes : 0;

    for (size_t f = 0; f < sizeof route_families / sizeof route_families[0]; f++) {
        const struct route_family *rf = &route_families[f];
        family(out, rf->name, rf->type, rf->help);
        for (int i = 0; i < nr; i++)
            sample_u64(out, rf->name, "route", s->routes[i].name,
                       route_field(&s->routes[i], rf->off));
    }

    family(out, "route_channel_open", "gauge",
           "1 when the route's publish channel is open, else 0.");
    for (int i = 0; i < nr; i++)
        sample_u64(out, "route_channel_open", "route", s->routes[i].name,
                   s->routes[i].channel_open ? 1 : 0);

    family(out, "overdue_seconds", "gauge",
           "How long the route's oldest due, unpublished message has been due; 0 when none.");
    for (int i = 0; i < nr; i++) {
        uint64_t due = s->routes[i].oldest_due_ms;
        double secs = due && due < s->now_ms ? (double)(s->now_ms - due) / 1000.0 : 0.0;
        sample_double(out, "overdue_seconds", "route", s->routes[i].name, secs);
    }

    family(out, "fire_lateness_seconds", "histogram",
           "Broker confirm time minus due time of published messages, seconds.");
    for (int i = 0; i < nr; i++)
        hist_samples(out, "fire_lateness_seconds", "route", s->routes[i].name,
                     &s->routes[i].lateness);

    family(out, "fire_stage_seconds", "histogram",
           "Where a firing's lateness went, stage by stage: wake (due time to the loop turn "
           "that takes it), read (to its payload read back), write (to its frames sent), "
           "confirm (to the broker's confirm), seconds.");
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < DB_STAGES; k++)
            stage_samples(out, s->routes[i].name, db_stage_names[k], &s->routes[i].stage[k]);
}

/* The max_held bounds as gauges (absent: no bound), beside held_messages and pending_messages. */
static void render_held_limit(const struct db_stats *s, struct strbuf *out)
{
    family(out, "max_held_messages", "gauge",
           "limits.max_held: at this many held in all, every route stops consuming; absent "
           "when 0 (no bound).");
    if (s->held_limit.max_held)
        sample_u64(out, "max_held_messages", NULL, NULL, s->held_limit.max_held);
    family(out, "route_max_held_messages", "gauge",
           "routes[].max_held: at this many held, the route stops consuming; absent when the "
           "route has none of its own.");
    for (int i = 0; s->routes && i < s->nroutes; i++)
        if (s->routes[i].max_held)
            sample_u64(out, "route_max_held_messages", "route", s->routes[i].name,
                       s->routes[i].max_held);
}

/* ---- retry routes: per (route, queue) ---- */

/* name{route="R",queue="Q"[,k="v"]} and a space. */
static void retry_head(struct strbuf *out, const char *name, const char *suffix,
                       const struct db_retry_stats *r, const char *k, const char *v)
{
    strbuf_printf(out, PREFIX "%s%s{route=\"", name, suffix ? suffix : "");
    put_escaped_label(out, r->route);
    strbuf_puts(out, "\",queue=\"");
    put_escaped_label(out, r->queue);
    strbuf_puts(out, "\"");
    if (k) {
        strbuf_printf(out, ",%s=\"", k);
        put_escaped_label(out, v);
        strbuf_puts(out, "\"");
    }
    strbuf_puts(out, "} ");
}

static void render_retry(const struct db_stats *s, struct strbuf *out)
{
    int n = s->retry ? s->nretry : 0;
    char le[16];

    family(out, "retries_total", "counter",
           "Retry routes: messages a consumer's queue dead-lettered, held for another attempt "
           "at its queue.");
    for (int i = 0; i < n; i++) {
        retry_head(out, "retries_total", NULL, &s->retry[i], NULL, NULL);
        strbuf_printf(out, "%" PRIu64 "\n", s->retry[i].retries);
    }
    family(out, "retry_parked_total", "counter",
           "Retry routes: messages parked in the parking exchange, by reason (max_attempts, "
           "reason, no_queue, queue_gone, invalid).");
    for (int i = 0; i < n; i++)
        for (int j = 0; j < RETRY_PARK_REASONS; j++) {
            retry_head(out, "retry_parked_total", NULL, &s->retry[i], "reason",
                       retry_park_reasons[j]);
            strbuf_printf(out, "%" PRIu64 "\n", s->retry[i].parked[j]);
        }
    family(out, "retry_attempts", "histogram",
           "Retry routes: the number of the attempt that failed, for each dead-letter received "
           "(1 = the first delivery).");
    for (int i = 0; i < n; i++) {
        uint64_t cum = 0;
        for (int j = 0; j < DB_RETRY_BUCKETS; j++) {
            cum += s->retry[i].attempts[j];
            if (j == DB_RETRY_BUCKETS - 1)
                snprintf(le, sizeof le, "+Inf");
            else
                snprintf(le, sizeof le, "%" PRIu32, db_retry_le[j]);
            retry_head(out, "retry_attempts", "_bucket", &s->retry[i], "le", le);
            strbuf_printf(out, "%" PRIu64 "\n", cum);
        }
        retry_head(out, "retry_attempts", "_sum", &s->retry[i], NULL, NULL);
        strbuf_printf(out, "%" PRIu64 "\n", s->retry[i].attempts_sum);
        retry_head(out, "retry_attempts", "_count", &s->retry[i], NULL, NULL);
        strbuf_printf(out, "%" PRIu64 "\n", cum);
    }
}

/* ---- delayed_exchanges routes: per (route, exchange) ---- */

static void render_exchanges(const struct db_stats *s, struct strbuf *out)
{
    family(out, "exchange_published_total", "counter",
           "delayed_exchanges routes: publishes to each message's own exchange (a hand-back "
           "counts); past 64 exchanges a route, under exchange \"_other\".");
    for (int i = 0; s->exchanges && i < s->nexchanges; i++) {
        sample_head(out, "exchange_published_total", NULL, "route", s->exchanges[i].route,
                    "exchange", s->exchanges[i].exchange);
        strbuf_printf(out, "%" PRIu64 "\n", s->exchanges[i].published);
    }
}

/* ---- the rest ---- */

static int conn_connected(enum db_conn_state c)
{
    return c == DB_CONN_UP || c == DB_CONN_BLOCKED;
}

static void render_conns(const struct db_stats *s, struct strbuf *out)
{
    family(out, "broker_connected", "gauge",
           "1 when the broker connection is up (blocked counts as up), else 0.");
    sample_u64(out, "broker_connected", "connection", "consumer", conn_connected(s->consumer));
    sample_u64(out, "broker_connected", "connection", "publisher", conn_connected(s->publisher));

    family(out, "broker_blocked", "gauge",
           "1 while the broker has blocked the connection (connection.blocked), else 0.");
    sample_u64(out, "broker_blocked", "connection", "consumer", s->consumer == DB_CONN_BLOCKED);
    sample_u64(out, "broker_blocked", "connection", "publisher", s->publisher == DB_CONN_BLOCKED);

    family(out, "vhost_connected", "gauge",
           "Per vhost in use (routes[].vhost): 1 when that vhost's consumer or publisher "
           "connection is up, else 0 (broker_connected is all of them together).");
    for (int k = 0; k < s->nvhosts; k++) {
        const struct db_vhost_conn *v = &s->vhosts[k];
        sample_head(out, "vhost_connected", NULL, "vhost", v->vhost, "connection", "consumer");
        strbuf_printf(out, "%d\n", conn_connected(v->consumer));
        sample_head(out, "vhost_connected", NULL, "vhost", v->vhost, "connection", "publisher");
        strbuf_printf(out, "%d\n", conn_connected(v->publisher));
    }
}

static void render_wal(const struct db_wal_stats *w, struct strbuf *out)
{
    scalar_u64(out, "wal_bytes", "gauge", "Bytes of WAL segment files on disk.", w->disk_bytes);
    scalar_u64(out, "wal_live_bytes", "gauge", "Bytes of live records in the WAL.", w->live_bytes);
    scalar_u64(out, "wal_live_records", "gauge", "Live records in the WAL.", w->live_records);
    scalar_u64(out, "wal_segments", "gauge", "WAL segment files on disk.", w->segments);
    scalar_u64(out, "wal_commits_total", "counter", "WAL group commits that wrote.", w->commits);
    scalar_u64(out, "wal_appended_bytes_total", "counter", "Bytes appended to the WAL.",
               w->appended_bytes);
    scalar_u64(out, "wal_compacted_bytes_total", "counter",
               "Bytes reclaimed by WAL compaction.", w->compacted_bytes);
    scalar_u64(out, "wal_writable", "gauge",
               "1 while the WAL accepts writes, 0 after a failed write or fsync or when out of space.",
               w->writable ? 1 : 0);
    scalar_u64(out, "wal_disk_full", "gauge",
               "1 while the WAL's disk is full: consuming paused, publishing goes on, the write "
               "is tried again every second.", w->no_space ? 1 : 0);
    scalar_u64(out, "wal_intake_paused", "gauge",
               "1 while consuming is paused because the WAL's volume is short of space "
               "(free space under one segment, or the space reserve not whole); held messages "
               "keep firing.", w->intake_paused ? 1 : 0);
    scalar_u64(out, "wal_intake_pauses_total", "counter",
               "Times consuming paused because the WAL's volume was short of space.",
               w->intake_pauses);
    scalar_u64(out, "wal_free_bytes", "gauge",
               "Free space on the WAL's volume, the space reserve excluded.", w->free_bytes);
    scalar_u64(out, "wal_reserve_bytes", "gauge",
               "Bytes the WAL's space reserve (dir/RESERVE) holds now; it holds "
               "2 x wal.segment_mb when whole.", w->reserve_held);
    scalar_u64(out, "wal_intake_waiting_messages", "gauge",
               "Deliveries taken off the wire while intake is paused, waiting in memory "
               "(unacked) for the WAL to have room.", w->intake_waiting);
    scalar_u64(out, "wal_reserve_spent_total", "counter",
               "Times the space reserve was given back to a commit that met a full disk.",
               w->reserve_spent);
    family(out, "wal_fsync_seconds", "histogram", "Duration of WAL fdatasync calls, seconds.");
    hist_samples(out, "wal_fsync_seconds", NULL, NULL, &w->fsync);
    scalar_u64(out, "wal_checkpoints_total", "counter",
               "WAL checkpoints installed since start.", w->ckpt_installed);
    scalar_u64(out, "wal_checkpoint_failures_total", "counter",
               "WAL checkpoints abandoned on an I/O error (the previous one stays in use).",
               w->ckpt_failed);
    scalar_u64(out, "wal_checkpoint_bytes", "gauge", "Size of the installed WAL checkpoint.",
               w->ckpt_bytes);
    scalar_double(out, "wal_checkpoint_age_seconds", "gauge",
                  "Age of the installed WAL checkpoint (0 = none): a restart replays the log "
                  "written since.", w->ckpt_age_seconds);
    if (!w->repl)
        return;
    family(out, "wal_replication_info", "gauge",
           "Always 1: the stream this bridge's log replicates to and its state (connecting, "
           "standby, importing, owner, failed); count by stream to find a log with no owner.");
    sample_head(out, "wal_replication_info", NULL, "stream", w->repl_stream, "state",
                w->repl_state);
    strbuf_puts(out, "1\n");
    scalar_u64(out, "wal_replication_owner", "gauge",
               "1 while this bridge holds the lease of its log and replicates every commit to "
               "the stream; 0 while standing by, importing or failed.",
               w->repl_owner);
    scalar_u64(out, "wal_replication_complete", "gauge",
               "1 when the stream alone holds the whole log (0 until the first stream "
               "checkpoint of a log that had records before replication began).",
               w->repl_complete ? 1 : 0);
    scalar_u64(out, "wal_replication_published_bytes_total", "counter",
               "Bytes of stream messages published and confirmed.", w->repl_published_bytes);
    scalar_u64(out, "wal_replication_checkpoints_total", "counter",
               "Stream checkpoints completed (horizons published) since start.",
               w->repl_horizons);
    scalar_u64(out, "wal_replication_lease_renewals_total", "counter",
               "Lease tokens the owner traded for fresh ones (every wal.replicate.lease_renew_ms): "
               "flat while it owns the log means the lease is not being renewed.",
               w->repl_lease_renewals);
    scalar_u64(out, "wal_replication_refused_total", "counter",
               "Stream messages refused because their user-id is not this log's broker user "
               "(forged, or written by another user or an older bridge): never imported.",
               w->repl_refused);
    scalar_u64(out, "wal_replication_needed_bytes", "gauge",
               "Stream bytes a rebuild needs (published since the newest stream checkpoint "
               "began): keep it below wal.replicate.max_mb.", w->repl_needed_bytes);
    scalar_u64(out, "wal_replication_max_bytes", "gauge",
               "wal.replicate.max_mb in bytes (0 = no size limit): needed_bytes must stay below.",
               w->repl_max_bytes);
    scalar_double(out, "wal_replication_import_seconds", "gauge",
                  "Lease granted to local log rebuilt from the stream, at start.",
                  w->repl_import_seconds);
    family(out, "wal_replication_confirm_seconds", "histogram",
           "Stream publish to confirm, per commit, seconds.");
    hist_samples(out, "wal_replication_confirm_seconds", NULL, NULL, &w->repl_confirm);
}

void metrics_render(const struct db_stats *s, struct strbuf *out)
{
    family(out, "build_info", "gauge", "Always 1; labels carry the version and instance name.");
    sample_head(out, "build_info", NULL, "version", s->version ? s->version : "",
                "instance", s->instance ? s->instance : "");
    strbuf_puts(out, "1\n");

    scalar_double(out, "start_time_seconds", "gauge",
                  "Process start time, seconds since the Unix epoch.", (double)s->start_ms / 1000.0);
    scalar_u64(out, "ready", "gauge", "1 when /readyz answers 200, else 0.",
               ready_reason(s)[0] == '\0');
    scalar_double(out, "recovery_seconds", "gauge",
                  "Seconds the WAL replay at start took (so far, while recovering).",
                  s->recovery_seconds);
    scalar_double(out, "recovery_progress", "gauge",
                  "WAL replay progress at start, 0 to 1.", s->recovery_progress);

    render_conns(s, out);

    scalar_u64(out, "held_messages", "gauge", "Messages the WAL holds live, all routes.", s->held);
    scalar_u64(out, "orphaned_messages", "gauge",
               "Held messages of routes missing from the config: never published.", s->orphaned);

    render_held_limit(s, out);
    render_route_info(s, out);
    render_routes(s, out);
    render_retry(s, out);
    render_exchanges(s, out);
    family(out, "config_reloads_total", "counter",
           "SIGHUPs taken: the configuration file read again (result read), or refused because "
           "it did not load (result refused: nothing changed).");
    sample_u64(out, "config_reloads_total", "result", "read", s->reload.count - s->reload.refused);
    sample_u64(out, "config_reloads_total", "result", "refused", s->reload.refused);
    scalar_u64(out, "config_pending_changes", "gauge",
               "Changes in the configuration file, as last read by a reload, that wait for a "
               "restart (logged by key path).", (uint64_t)s->reload.pending);
    render_wal(&s->wal, out);

    scalar_u64(out, "engine_memory_bytes", "gauge",
               "Bytes of engine structures: message pool, id index, timing wheel.", s->ram_bytes);
    family(out, "process_resident_memory_bytes", "gauge",
           "Resident set size of the process, bytes; absent when unknown.");
    if (s->rss_bytes)
        sample_u64(out, "process_resident_memory_bytes", NULL, NULL, s->rss_bytes);

    family(out, "next_due_seconds", "gauge",
           "Seconds until the earliest waiting message is due (0 if due now); "
           "absent when nothing waits.");
    if (s->next_due_ms)
        sample_double(out, "next_due_seconds", NULL, NULL,
                      s->next_due_ms > s->now_ms ? (double)(s->next_due_ms - s->now_ms) / 1000.0
                                                 : 0.0);
}
