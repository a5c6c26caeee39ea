/*
 * bridge_stats.c -- the daemon's figures: one struct db_stats snapshot
 * (stats.h) gathered from the engine, the log, the connections and the
 * bridge's own counters, for /stats and /metrics (api.c and metrics.c
 * render it), and the totals logged once at a clean exit.
 *
 * Strings in the snapshot point into the configuration or static tables;
 * the per-route array is the bridge's (b->snap), valid until the next call.
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "delay-bridge/ingress_off.h"
#include "delay-bridge/wlog.h"

/* Resident set size from /proc (one small read), 0 if unknown. */
static uint64_t rss_bytes(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &size, &resident) != 2)
        resident = 0;
    fclose(f);
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}


/* Recovery: the engine's figures once it is done, the thread's progress while it runs. */
static void stats_recovery(const struct bridge *b, const struct eng_stats *es, struct db_stats *s)
{
    s->recovered = b->eng != NULL;
    if (b->eng) {
        s->recovery_seconds = es->recovery_seconds;
        s->recovery_progress = 1.0;
    } else {
        uint64_t done = atomic_load(&b->rec.progress.done);
        uint64_t total = atomic_load(&b->rec.progress.total);
        s->recovery_seconds = (double)(clock_mono_ms() - b->start_mono_ms) / 1000.0;
        s->recovery_progress = total ? (double)done / (double)total : 0.0;
    }
}

/* The log: its files, space and intake, compaction and checkpoint. */
static void stats_wal(const struct bridge *b, const struct eng_stats *es, struct db_stats *s)
{
    s->wal.segments = es->log_segments;
    s->wal.disk_bytes = es->log_disk_bytes;
    s->wal.live_bytes = es->log_live_bytes;
    s->wal.live_records = es->log_live_records;
    s->wal.commits = es->log_commits;
    s->wal.appended_bytes = es->log_appended_bytes;
    s->wal.compacted_bytes = es->log_compacted_bytes;
    s->wal.failed = es->log_failed != 0;
    s->wal.no_space = b->disk_full || es->log_no_space;
    s->wal.writable = !s->wal.failed && !s->wal.no_space;
    s->wal.intake_paused = b->space_paused || es->log_intake_paused;
    s->wal.intake_pauses = b->space_pauses; /* the daemon's: the log's gate, or a message's size */
    s->wal.free_bytes = es->log_free_bytes;
    s->wal.reserve_bytes = es->log_reserve_bytes;
    s->wal.reserve_held = es->log_reserve_held;
    s->wal.reserve_spent = es->log_reserve_spent;
    s->wal.intake_waiting = b->stash.n;
    s->wal.intake_waiting_bytes = b->stash.bytes;
    s->wal.fsync = es->fsync;
    s->wal.compact_segment = es->compact_segment;
    s->wal.compact_progress =
        es->compact_total ? (double)es->compact_done / (double)es->compact_total : 0.0;
    s->wal.ckpt_state = es->ckpt_state == WLOG_CKPT_WRITING   ? "writing"
                        : es->ckpt_state == WLOG_CKPT_SEALING ? "sealing"
                                                              : "idle";
    s->wal.ckpt_progress =
        es->ckpt_total ? (double)es->ckpt_walked / (double)es->ckpt_total : 0.0;
    s->wal.ckpt_installed = es->ckpt_installed;
    s->wal.ckpt_failed = es->ckpt_failed;
    s->wal.ckpt_lsn = es->ckpt_lsn;
    s->wal.ckpt_bytes = es->ckpt_bytes;
    s->wal.ckpt_age_seconds = (double)es->ckpt_age_ms / 1000.0;
    s->wal.ckpt_seconds = es->ckpt_seconds;
    s->wal.ckpt_used_at_start = es->ckpt_loaded_lsn != 0;
}

/* A replicated log (wal.replicate): its state and figures; a failed one is not writable. */
static void stats_repl(const struct bridge *b, struct db_stats *s)
{
    static const char *const names[] = {"off", "connecting", "standby", "importing",
                                        "owner", "failed"};
    struct wlog_repl_stats rs;

    memset(&rs, 0, sizeof(rs));
    if (!b->rec.opts.log || !wlog_repl_stats(b->rec.opts.log, &rs))
        return;
    s->wal.repl = 1;
    s->wal.repl_state = rs.state >= 0 && rs.state <= WLOG_REPL_FAILED ? names[rs.state] : "?";
    s->wal.repl_waiting = rs.state == WLOG_REPL_CONNECTING || rs.state == WLOG_REPL_STANDBY;
    s->wal.repl_owner = rs.state == WLOG_REPL_OWNER;
    s->wal.repl_stream = rs.stream;
    s->wal.repl_complete = rs.complete;
    s->wal.repl_imported_records = rs.imported_records;
    s->wal.repl_imported_bytes = rs.imported_bytes;
    s->wal.repl_import_seconds = rs.import_seconds;
    s->wal.repl_standby_seconds = rs.standby_seconds;
    s->wal.repl_published_messages = rs.published_messages;
    s->wal.repl_published_bytes = rs.published_bytes;
    s->wal.repl_horizons = rs.horizons;
    s->wal.repl_horizon_lsn = rs.horizon_lsn;
    s->wal.repl_horizon_running = rs.horizon_running;
    s->wal.repl_needed_bytes = rs.needed_bytes;
    s->wal.repl_max_bytes = b->cfg->repl.max_bytes;
    s->wal.repl_confirm = rs.confirm;
    s->wal.repl_lease_renewals = rs.lease_renewals;
    s->wal.repl_resumed = rs.resumed;
    s->wal.repl_refused = rs.refused;
    if (rs.state == WLOG_REPL_FAILED)
        s->wal.writable = 0;
}

/* The last purge asked for (POST /purge), running or done. */
static void stats_purge(const struct bridge *b, struct db_stats *s)
{
    const struct eng_purge *j = &b->purge.job;

    if (!b->purge.started)
        return;
    s->purge.started = 1;
    s->purge.done = !b->purge.active;
    s->purge.route = b->cfg->routes[j->route].name;
    s->purge.due_before = j->due_before;
    s->purge.queue = j->by_key ? j->routing_key : NULL;
    s->purge.exchange = j->by_exchange ? j->exchange : NULL;
    s->purge.removed = j->removed;
    s->purge.progress = j->end > 1 ? (double)(j->cursor - 1) / (double)(j->end - 1) : 1.0;
}

/* Route i: the bridge's counters, the publisher's and the engine's figures. */
static void stats_route(const struct bridge *b, int i, struct db_route_stats *r)
{
    const struct route_counts *n = &b->counts[i];
    struct eng_route_stats ers;

    memset(r, 0, sizeof(*r));
    r->name = b->cfg->routes[i].name;
    r->target_exchange = b->cfg->routes[i].target_exchange;
    r->vhost = config_route_vhost(b->cfg, &b->cfg->routes[i]);
    r->retired = b->cfg->routes[i].retired;
    r->consume_refused = b->nvc && consumer_route_failed(bridge_cons(b, i), i);
    r->received = n->received;
    r->rejected = n->rejected;
    r->invalid_delay = n->invalid_delay;
    r->invalid_key = n->invalid_key;
    r->deduplicated = n->deduplicated;
    r->unstamped = n->unstamped;
    r->key_events_sent = n->key_events_sent;
    r->key_events_received = n->key_events_received;
    r->key_events_applied = n->key_events_applied;
    r->dead_lettered = n->dead_lettered;
    r->refused = n->refused;
    r->stream_offset = b->cfg->routes[i].queue_type != QUEUE_STREAM ? -2
                       : b->nvc ? consumer_stream_next(bridge_cons(b, i), i)
                                 : b->ioff ? b->ioff[i].stored : -1;
    if (b->nvc)
        publisher_route_stats(bridge_pub(b, i), i, r);
    memset(&ers, 0, sizeof(ers));
    if (b->eng)
        eng_route_stats(b->eng, (uint16_t)i, &ers);
    r->confirmed = ers.confirmed;
    r->cancelled = ers.cancelled + ers.replaced;
    r->cancel_missed = ers.cancel_missed;
    r->waiting = ers.waiting;
    r->due = ers.due;
    r->inflight = ers.inflight;
    r->pending = ers.held;
    r->oldest_due_ms = ers.oldest_due_ms;
    r->lateness = ers.lateness;
    r->stage[DB_STAGE_WAKE] = n->wake;
    r->stage[DB_STAGE_READ] = n->read;
    r->max_held = b->cfg->routes[i].max_held;
    r->held_limit_paused = !r->retired && (n->held_paused || b->held_all_paused);
    r->held_limit_pauses = n->held_pauses;
}

void bridge_stats(struct bridge *b, struct db_stats *s)
{
    struct eng_stats es;

    memset(s, 0, sizeof(*s));
    memset(&es, 0, sizeof(es));
    if (b->eng)
        eng_stats(b->eng, &es);
    s->version = DB_VERSION;
    s->instance = b->cfg->instance;
    s->now_ms = clock_now_ms();
    s->start_ms = b->start_ms;
    s->loop_turn_ms = b->turn_ms;
    stats_recovery(b, &es, s);
    /* With several vhosts: up when every pair is; blocked when any publisher is. */
    s->consumer = bridge_consumers_up(b) ? DB_CONN_UP : DB_CONN_DOWN;
    s->publisher = bridge_pubs_up(b) ? DB_CONN_UP : DB_CONN_DOWN;
    for (int k = 0; k < b->nvc && s->publisher == DB_CONN_UP; k++)
        if (publisher_blocked(b->vc[k].pub))
            s->publisher = DB_CONN_BLOCKED;
    for (int k = 0; k < b->nvc; k++) {
        struct db_vhost_conn *v = &b->vsnap[k];
        v->vhost = b->vc[k].vhost;
        v->consumer = consumer_up(b->vc[k].cons) ? DB_CONN_UP : DB_CONN_DOWN;
        v->publisher = !publisher_up(b->vc[k].pub)    ? DB_CONN_DOWN
                       : publisher_blocked(b->vc[k].pub) ? DB_CONN_BLOCKED
                                                        : DB_CONN_UP;
        v->routes = 0;
    }
    for (int i = 0; i < b->cfg->nroutes && b->nvc; i++)
        b->vsnap[b->route_vc[i]].routes++;
    s->vhosts = b->vsnap;
    s->nvhosts = b->nvc;
    s->stopping = b->stopping;
    s->held = es.held;
    s->orphaned = es.orphaned;
    s->held_limit.max_held = b->cfg->max_held;
    s->held_limit.paused = b->held_all_paused;
    s->held_limit.pauses = b->held_all_pauses;
    s->held_limit.reason = b->eng && b->held_reason[0] ? b->held_reason : NULL;
    s->drain.active = b->drain.active;
    s->drain.done = b->drain.done;
    s->drain.handed_back = b->drain.handed_back;
    s->drain.remaining = es.held - es.orphaned;
    s->next_due_ms = es.next_due_ms;
    s->ram_bytes = es.ram_bytes;
    s->rss_bytes = rss_bytes();
    stats_wal(b, &es, s);
    stats_repl(b, s);
    stats_purge(b, s);
    for (int i = 0; i < b->cfg->nroutes; i++)
        stats_route(b, i, &b->snap[i]);
    s->nroutes = b->cfg->nroutes;
    s->routes = b->snap;
    s->retry = bridge_retry_rows(b, &s->nretry);
    s->exchanges = bridge_dx_rows(b, &s->nexchanges);
    s->reload.count = b->reload.count;
    s->reload.refused = b->reload.refused;
    s->reload.last_ms = b->reload.last_ms;
    s->reload.pending = b->reload.pending;
    s->reload.error = b->reload.error;
}

void bridge_log_summary(struct bridge *b)
{
    struct db_stats s;
    int i;

    bridge_stats(b, &s);
    for (i = 0; i < s.nroutes; i++) {
        const struct db_route_stats *r = &s.routes[i];
        log_info("bridge", "route totals",
                 "route=%s received=%" PRIu64 " published=%" PRIu64 " confirmed=%" PRIu64
                 " nacked=%" PRIu64 " invalid_delay=%" PRIu64 " dead_lettered=%" PRIu64
                 " rejected=%" PRIu64 " held=%" PRIu64,
                 r->name, r->received, r->published, r->confirmed, r->nacked, r->invalid_delay,
                 r->dead_lettered, r->rejected, r->pending);
    }
    log_info("bridge", "stopped",
             "held=%" PRIu64 " orphaned=%" PRIu64 " wal_segments=%" PRIu64 " wal_bytes=%" PRIu64,
             s.held, s.orphaned, s.wal.segments, s.wal.disk_bytes);
}
