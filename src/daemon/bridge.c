/*
 * bridge.c -- the daemon's policy: the engine wired to RabbitMQ on one loop.
 *
 * Parts, each owning its own state and reporting back through callbacks,
 * so every arrow points down (main -> bridge -> parts -> pure modules):
 *
 *   consumer   ingress connection: deliveries in, acks out   (consumer.c)
 *   publisher  egress connection: publishes out, confirms in (publisher.c)
 *   engine     every held message and its state              (engine.c)
 *   http       the operator's endpoint                       (http.c, api.c)
 *
 * What the bridge decides:
 *
 *   a delivery  oversized: rejected at once (before any later ack could
 *               cover it); otherwise x-delay judged (xdelay.c), turned into
 *               a log record (msgrec.c) and appended (engine: PENDING).
 *               Nothing is acked yet. It arrives as a plain struct
 *               delivery: the consumer has read its headers and encoded
 *               its properties, so no rabbitmq-c type reaches this file.
 *   a commit    bridge_commit_and_ack() (bridge_commit.c) is the one place
 *               the log commits: once per loop turn, before the loop sleeps
 *               (ev_prepare, like Redis's beforeSleep), it covers every
 *               delivery appended so far and every confirm; when the commit
 *               completes, basic.ack (multiple) goes out up to the last
 *               delivery it covered (a stream ingress: its place is written).
 *   a publish   due messages are taken from the engine route by route while
 *               the publisher has room (max_inflight unconfirmed per route).
 *   a confirm   ack: the message is done (engine: DONE record at the next
 *               commit); nack: due again, published again in due order.
 *   a loss      a route's channel or the whole publisher connection lost:
 *               everything unconfirmed on it is due again. Nothing is lost:
 *               at least once.
 *   a failure   a failed log write, fsync or read is fatal: stop without
 *               acking anything more; recovery starts from what is on disk.
 *   a signal    SIGTERM/SIGINT: commit and ack what was received, stop
 *               consuming, stop publishing new messages, wait up to
 *               shutdown_timeout_ms for outstanding confirms, commit their
 *               DONE records, close, exit 0. A second signal cuts the wait.
 *
 * Start. The HTTP endpoint and the signal handlers come up at once; the
 * engine recovers the held set from the log on a thread of its own (it
 * touches nothing the loop uses), so /healthz answers and /readyz says
 * "recovering" with its progress in /stats while a large log replays. When
 * the thread is done (ev_async) the consumer and publisher are created and
 * connect on the next turn. A corrupt, locked or unreadable log stops the
 * daemon with exit code 4 (or 1 for an I/O error).
 *
 * The loop turn (on_prepare) in order: connections and channel retries,
 * buffered frames, commit and ack, advance the wheel, publish, reclaim log
 * space (at most every 100 ms, a bounded amount), then arm the wall-clock
 * timerfd for the next wheel event (duewake.c) and one ev_timer for the
 * earliest of: a reconnect or retry, a heartbeat, the longest sleep.
 *
 * Deliveries in (the intake gate, the stash) are in bridge_intake.c, the
 * key-event protocol in bridge_keys.c, the commit and its acks in
 * bridge_commit.c, the HTTP handlers in bridge_http.c, the /stats snapshot
 * in bridge_stats.c, the fatal stop and the route lookup in bridge_core.c;
 * bridge_int.h holds what they share and draws their floors. This file is
 * the top floor: it calls them, none of them calls it.
 */
#include "bridge_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delay-bridge/api.h"
#include "base/clock.h"
#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "http.h"
#include "delay-bridge/ingress_off.h"
#include "base/log.h"
#include "delay-bridge/msgrec.h"
#include "delay-bridge/publisher.h"
#include "delay-bridge/wlog.h"
#include "base/xalloc.h"
#include "base/failpoint.h"


/* ---- publishes out --------------------------------------------------------------- */

static void on_confirmed(void *arg, int route, uint32_t ref, int ok, int returned)
{
    struct bridge *b = arg;
    const struct config_route *rc = &b->cfg->routes[route];
    uint64_t now = clock_now_ms(), mono = clock_mono_ms(), ev;

    if (!ok) {
        eng_unsent(b->eng, ref);
        return;
    }
    if (b->drain.active && eng_due_ms(b->eng, ref) > now) {
        /* a delayed_exchanges route's went to its own exchange: returned, it is unroutable */
        if (returned && !rc->delayed_exchanges) {
            /* The ingress queue is gone: keep it and try again (logged). */
            if ((ev = log_ratelimit(&b->counts[route].rl_return, mono, 10000)))
                log_warn("bridge", "drain: a message handed back came back (no queue bound to "
                         "the ingress exchange); kept and tried again",
                         "route=%s ingress=\"%s\" events=%" PRIu64, rc->name,
                         rc->ingress_exchange, ev);
            eng_unsent(b->eng, ref);
            return;
        }
        if (!returned)
            b->drain.handed_back++;
    }
    if (returned) {
        /* No queue was bound at the target: keep it, where the route says so. */
        if (rc->unroutable_exchange[0] && !eng_diverted(b->eng, ref)) {
            eng_divert(b->eng, ref);
            return;
        }
        if ((ev = log_ratelimit(&b->counts[route].rl_return, mono, 10000)))
            log_warn("publish",
                     rc->retry ? "parked message returned by the parking exchange (no queue "
                                 "bound to it): dropped; set routes[].retry.parking_queue"
                     : rc->unroutable_exchange[0]
                         ? "unroutable message returned by the unroutable exchange too: dropped"
                         : "unroutable message dropped by the broker (no queue bound at the "
                           "target; set routes[].unroutable_exchange to keep them)",
                     "route=%s target=\"%s\" events=%" PRIu64, rc->name,
                     rc->unroutable_exchange[0] ? rc->unroutable_exchange
                     : rc->delayed_exchanges    ? "(each message's own exchange)"
                                                : rc->target_exchange,
                     ev);
    }
    eng_confirm(b->eng, ref, now);
    FAILPOINT("bridge.after_confirm");
}

static void on_route_lost(void *arg, int route)
{
    struct bridge *b = arg;

    eng_unsent_route(b->eng, (uint16_t)route);
}

/*
 * A message taken to publish: its first two stages (stats.h). The wake
 * stage runs from its due time to the start of this loop turn, the read
 * stage from there to now, its payload read back. Not for a drain: there
 * a message is taken before its due time.
 */
static void time_taken(struct bridge *b, int route, eng_msg m)
{
    struct route_counts *n = &b->counts[route];
    uint64_t due_us = eng_due_ms(b->eng, m) * 1000u, now_us = clock_now_us();

    if (b->drain.active)
        return;
    db_hist_observe(&n->wake, b->turn_us > due_us ? (double)(b->turn_us - due_us) / 1e6 : 0.0);
    db_hist_observe(&n->read, now_us > b->turn_us ? (double)(now_us - b->turn_us) / 1e6 : 0.0);
}

/* Publish what is due, route by route, while the publisher has room. */
static void pump(struct bridge *b)
{
    int progress = 1, rounds = 0, i;

    while (progress && rounds++ < 64 && !b->exit_code) {
        progress = 0;
        for (i = 0; i < b->cfg->nroutes; i++) {
            int sent = 0;
            while (sent < PUBLISH_BURST && eng_due(b->eng, (uint16_t)i) &&
                   publisher_ready(bridge_pub(b, i), i)) {
                struct walrec_add a;
                struct msgrec_out o;
                eng_msg m;
                int r = eng_take(b->eng, (uint16_t)i, &m, &a);
                if (r < 0) {
                    bridge_fatal(b, "read a held message back from the WAL", r);
                    return;
                }
                if (r == 0)
                    break;
                time_taken(b, i, m);
                if (b->drain.active)
                    msgrec_to_handback(&a, &b->cfg->routes[i], b->log_id,
                                       eng_diverted(b->eng, m), clock_now_ms(), &o);
                else
                    msgrec_to_publish(&a, &b->cfg->routes[i], b->log_id,
                                      eng_diverted(b->eng, m), &o);
                if (b->cfg->routes[i].retry && o.original_exchange &&
                    !(a.flags & WALREC_ADD_DEADLETTER))
                    bridge_retry_gone(b, i, &a);
                if (o.refused) { /* msgrec.h: never published; done */
                    bridge_dx_refused_record(b, i, &a);
                    eng_confirm(b->eng, m, clock_now_ms());
                    continue;
                }
                if ((r = publisher_send(bridge_pub(b, i), i, m, &a, &o)) < 0)
                    return; /* connection lost: everything in flight is due again */
                if (r == 0 && o.exchange == o.exchange_buf)
                    bridge_dx_published(b, i, o.exchange);
                FAILPOINT("bridge.after_publish");
                sent++;
            }
            progress |= sent > 0;
        }
        /* Publishing may have pulled confirms into rabbitmq-c's buffer. */
        bridge_pubs_flush(b, progress);
    }
}

/* ---- the loop turn ----------------------------------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* ms from now until at, on one clock; 0 if at has passed. */
static uint64_t ms_until(uint64_t at, uint64_t now)
{
    return at > now ? at - now : 0;
}

/* Stopping: once nothing is in flight (or the deadline, monotonic, passed), commit and end. */
static void shutdown_step(struct bridge *b, uint64_t mono)
{
    size_t inflight = bridge_pubs_inflight(b);

    if (inflight && bridge_pubs_up(b) && mono < b->stop_deadline)
        return;
    if (inflight)
        log_warn("bridge", "shutdown timeout: unconfirmed publishes stay held and will be "
                 "published again on restart", "unconfirmed=%zu", inflight);
    bridge_commit_and_ack(b);
    if (b->exit_code)
        return;
    if (eng_committing(b->eng))
        return; /* its completion comes on a later turn */
    bridge_pubs_close(b);
    b->done = 1;
    ev_break(b->loop, EVBREAK_ALL);
}

static void drain_step(struct bridge *b, uint64_t mono);
static void arm_wake(struct bridge *b, uint64_t now, uint64_t mono);

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct bridge *b = w->data;
    uint64_t now_us = clock_now_us(), now = now_us / 1000u, mono = clock_mono_ms();
    int r;

    b->turn_ms = now;
    b->turn_us = now_us;
    if (b->exit_code || b->done)
        return;
    if (!b->eng) {
        /* Recovering: only the HTTP endpoint and the signals are served. */
        ev_timer_stop(loop, &b->wake);
        ev_timer_set(&b->wake, MAX_SLEEP_MS / 1000.0, 0.0);
        ev_timer_start(loop, &b->wake);
        return;
    }
    bridge_conns_turn(b, mono);
    if (!b->ready_logged && bridge_conns_up(b)) {
        b->ready_logged = 1;
        log_info("bridge", "ready", "routes=%d vhosts=%d", b->cfg->nroutes, b->nvc);
    }
    bridge_commit_and_ack(b);
    if (!b->stopping) {
        /* Draining: every message is due now, for the ingress or its target. */
        eng_advance(b->eng, b->drain.active ? DRAIN_HORIZON_MS : now);
        pump(b);
        if (b->drain.active)
            drain_step(b, mono);
    }
    if (b->exit_code)
        return;
    if (b->purge.active && (r = eng_purge_step(b->eng, &b->purge.job, PURGE_STEP)) <= 0) {
        if (r < 0) {
            bridge_fatal(b, "WAL read (purge)", r);
            return;
        }
        b->purge.active = 0;
        log_info("bridge", "purge done", "route=%s removed=%" PRIu64,
                 b->cfg->routes[b->purge.job.route].name, b->purge.job.removed);
    }
    if (mono - b->last_maintain >= MAINTAIN_EVERY_MS) {
        b->last_maintain = mono;
        r = eng_maintain(b->eng, MAINTAIN_BUDGET);
        if (r < 0) {
            bridge_fatal(b, "WAL maintenance", r);
            return;
        }
        bridge_intake_gate(b);
    }
    if (b->stash.n && !b->stopping)
        bridge_stash_drain(b);
    if (!b->stopping && !b->drain.active)
        bridge_held_gate(b); /* after firing, confirms and purges: a resume, or a bound changed */
    if (b->stopping) {
        shutdown_step(b, mono);
        if (b->exit_code || b->done)
            return;
    }

    arm_wake(b, now, mono);
}

/*
 * Arm the timers for the earliest thing to do. Each time is measured on its
 * own clock: the wheel's next due time on the wall clock, to the
 * microsecond, by the timerfd of duewake.h (without one, counted in ms from
 * now into the ev_timer); the disk retry and the consumer's and publisher's
 * waits (ms from mono, the clock their turn is given) on the monotonic one,
 * by the ev_timer.
 */
static void arm_wake(struct bridge *b, uint64_t now, uint64_t mono)
{
    uint64_t sleep = MAX_SLEEP_MS;

    if (b->stopping)
        duewake_arm(&b->due, 0); /* nothing fires while stopping */
    else if (duewake_on(&b->due))
        duewake_arm(&b->due, eng_next_event(b->eng));
    else
        sleep = min_u64(sleep, ms_until(eng_next_event(b->eng), now));
    sleep = min_u64(sleep, bridge_conns_wait_ms(b, mono));
    if (eng_dirty(b->eng) && !eng_committing(b->eng) && !b->disk_full)
        sleep = min_u64(sleep, (bridge_commit_wait_us(b, clock_mono_ns() / 1000u) + 999u) / 1000u);
    if (bridge_conns_busy(b) || b->purge.active)
        sleep = 0;
    if (b->disk_full)
        sleep = min_u64(sleep, ms_until(b->disk_retry_at, mono));
    if (b->drain.done)
        sleep = min_u64(sleep, 50);
    if (b->stopping)
        sleep = min_u64(sleep, 10);
    ev_timer_stop(b->loop, &b->wake);
    ev_timer_set(&b->wake, (double)sleep / 1000.0, 0.0);
    ev_timer_start(b->loop, &b->wake);
}

/*
 * The drain is over when nothing is held but orphans (no route to hand them
 * to: they stay in the log) and every DONE record is durable: then stop as
 * on SIGTERM, with nothing left to wait for, and exit 0.
 */
static void drain_step(struct bridge *b, uint64_t mono)
{
    struct eng_stats es;

    if (!b->drain.done) {
        eng_stats(b->eng, &es);
        if (es.held > es.orphaned || eng_dirty(b->eng) || eng_committing(b->eng))
            return;
        log_info("bridge", "drain done: every held message was handed back; exiting",
                 "handed_back=%" PRIu64 " orphaned_kept=%" PRIu64 " seconds=%.3f",
                 b->drain.handed_back, es.orphaned, (double)(mono - b->drain.started_ms) / 1000.0);
        b->drain.done = 1;
        b->drain.done_ms = mono;
    }
    if (mono - b->drain.done_ms < DRAIN_LINGER_MS)
        return;
    b->stopping = 1;
    b->stop_deadline = mono + b->cfg->shutdown_timeout_ms;
    bridge_consumers(b, CONSUMERS_STOP);
}

static void on_wake(struct ev_loop *loop, ev_timer *w, int revents)
{
    /* Nothing: waking up is the point; on_prepare does the work. */
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct bridge *b = w->data;

    if (b->stopping) {
        log_warn("bridge", "second signal: stopping now", NULL);
        b->stop_deadline = 0;
        return;
    }
    log_info("bridge", "stopping", "signal=%d timeout_ms=%u", w->signum,
             b->cfg->shutdown_timeout_ms);
    b->stopping = 1;
    b->stop_deadline = clock_mono_ms() + b->cfg->shutdown_timeout_ms;
    if (!b->eng) {
        /* still recovering: stop as soon as it is done; a standby stops waiting */
        if (b->rec.opts.log)
            wlog_cancel(b->rec.opts.log);
        return;
    }
    /*
     * Make what was received durable, ack it, and stop consuming -- in that
     * order, waiting for the commit (one fsync; the one running, if any,
     * first): closing the channel before the acks went out would give the
     * broker back messages already in the log, duplicates after a restart.
     */
    bridge_commit_and_wait(b);
    bridge_consumers(b, CONSUMERS_STOP);
}

/* ---- recovery ---------------------------------------------------------------------- */

/* Route index -> name, for the engine's log messages (bridge_route_index is the other way). */
static const char *route_name(void *arg, int i)
{
    return ((const struct config *)arg)->routes[i].name;
}

static void *recover_thread(void *arg)
{
    struct bridge *b = arg;

    b->rec.result = eng_open(&b->rec.eng, &b->rec.opts);
    ev_async_send(b->loop, &b->rec.recovered);
    return NULL;
}

/* From the log's sync thread: wake the loop (ev_async_send is thread-safe). */
static void log_notify(void *arg)
{
    struct bridge *b = arg;

    ev_async_send(b->loop, &b->rec.log_ready);
}

static void on_log_ready(struct ev_loop *loop, ev_async *w, int revents)
{
    struct bridge *b = w->data;

    if (b->eng)
        eng_poll(b->eng);
}

/*
 * Stream ingresses: each route's place file, opened beside the log once the
 * log is ours (its lock held). A corrupt one stops the start: guessing a
 * place would lose messages or fire them twice.
 */
static int open_places(struct bridge *b)
{
    char err[4608];
    int i, r;

    for (i = 0; i < b->cfg->nroutes && b->cfg->routes[i].queue_type != QUEUE_STREAM; i++)
        ;
    if (i == b->cfg->nroutes)
        return 0;
    /* room for routes added at run time too (never a stream: bridge_routes.c) */
    b->ioff = xcalloc(CONFIG_MAX_ROUTES, sizeof(*b->ioff));
    b->commit_next = xcalloc(CONFIG_MAX_ROUTES, sizeof(*b->commit_next));
    for (i = 0; i < CONFIG_MAX_ROUTES; i++) {
        b->ioff[i].fd = -1; /* not a stream route: nothing to write */
        b->ioff[i].stored = b->ioff[i].upto = INGRESS_OFF_NONE;
    }
    for (i = 0; i < b->cfg->nroutes; i++) {
        const struct config_route *rc = &b->cfg->routes[i];
        int64_t next, upto;
        if (rc->queue_type != QUEUE_STREAM)
            continue;
        r = ingress_off_open(&b->ioff[i], b->cfg->wal_dir, rc->name, &next, &upto, err,
                             sizeof(err));
        if (r < 0) {
            log_error("bridge", "cannot read a stream ingress's place", "route=%s error=\"%s\"",
                      rc->name, err);
            return -1;
        }
        if (upto > next)
            log_info("bridge", "the last commit before the stop may have been cut short: "
                     "the messages it covered are recognised if logged already",
                     "route=%s from=%" PRId64 " upto=%" PRId64, rc->name, next, upto);
    }
    return 0;
}

static void on_recovered(struct ev_loop *loop, ev_async *w, int revents)
{
    struct bridge *b = w->data;
    static const struct consumer_ops cops = {bridge_on_delivery, bridge_on_consumer_state, NULL,
                                             0};
    static const struct publisher_ops pops = {on_confirmed, on_route_lost, NULL};
    int r;

    if (!b->rec.running)
        return;
    pthread_join(b->rec.thread, NULL);
    b->rec.running = 0;
    ev_async_stop(loop, &b->rec.recovered);
    r = b->rec.result;
    if (r == -ECANCELED && b->stopping) {
        log_info("bridge", "stopped before holding the WAL lease", NULL);
        b->done = 1;
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    if (r < 0) {
        log_error("bridge", "cannot open the WAL", "dir=\"%s\" error=\"%s\"", b->cfg->wal_dir,
                  wlog_strerror(r));
        b->exit_code =
            r == WLOG_ECORRUPT || r == WLOG_ELOCKED || r == WLOG_EFORMAT ? EXIT_WAL : EXIT_FATAL;
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    b->eng = b->rec.eng;
    b->log_id = eng_log_id(b->eng);
    ev_async_init(&b->rec.log_ready, on_log_ready);
    b->rec.log_ready.data = b;
    ev_async_start(loop, &b->rec.log_ready);
    eng_set_notify(b->eng, log_notify, b);
    if (b->stopping) {
        log_info("bridge", "recovered during shutdown: stopping", NULL);
        b->done = 1;
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    if (open_places(b) < 0) {
        b->exit_code = EXIT_WAL;
        ev_break(loop, EVBREAK_ALL);
        return;
    }
    b->cops = cops;
    b->pops = pops;
    b->cops.arg = b;
    b->pops.arg = b;
    /* Consuming starts even on a short volume: the redeliveries of what the log already
     * holds come first and are recognised at once (bridge_intake.c, seen_now); the rest
     * waits in the stash, and the gate cancels the consumers on its first look. */
    for (int i = 0; i < b->cfg->nroutes; i++) {
        if (bridge_route_attach(b, i, 0) < 0) {
            b->exit_code = EXIT_CONFIG;
            ev_break(loop, EVBREAK_ALL);
            return;
        }
        if (b->ioff)
            consumer_set_stream_next(bridge_cons(b, i), i, b->ioff[i].stored, b->ioff[i].upto);
        consumer_route_add(bridge_cons(b, i), i);
    }
    /* Before the consumers connect: a log replayed over a max_held starts those routes
     * paused (bridge_intake.c, the held gate); what it holds was acked, it is all loaded. */
    bridge_held_start(b);
    bridge_held_gate(b);
    bridge_reload_recovered(b);
}

#define RECENT_MIN 4096 /* redeliveries recognised per route, at least (start_recovery) */

static int start_recovery(struct bridge *b, struct wlog *log)
{
    int r;

    /*
     * Redeliveries recognised (eng_seen): the last max(prefetch, 4096) fresh
     * messages of each route. prefetch alone would do if only an unacked
     * delivery could come back; but an ack sent on a connection the broker
     * had already closed (a bridge paused longer than its heartbeat) is
     * lost while the bridge goes on, and the delivery can come back after a
     * detour through another bridge, hundreds of messages later (chaos
     * seed 3: 578). 17 bytes each (a fingerprint, its time, a used mark).
     */
    uint32_t recent = RECENT_MIN;
    for (int i = 0; i < b->cfg->nroutes; i++)
        if (b->cfg->routes[i].prefetch > recent)
            recent = b->cfg->routes[i].prefetch;
    b->rec.opts = (struct eng_opts){.log = log,
                                    .nroutes = b->cfg->nroutes,
                                    .max_routes = CONFIG_MAX_ROUTES, /* routes added at run time */
                                    .route_index = bridge_route_index,
                                    .route_name = route_name,
                                    .route_arg = (void *)b->cfg,
                                    .progress = &b->rec.progress,
                                    .recent = recent,
                                    .fingerprint = msgrec_fingerprint,
                                    .checkpoint_interval_ms =
                                        (uint64_t)b->cfg->checkpoint_interval_s * 1000,
                                    .checkpoint_min_bytes =
                                        (uint64_t)b->cfg->checkpoint_min_mb << 20};
    ev_async_init(&b->rec.recovered, on_recovered);
    b->rec.recovered.data = b;
    ev_async_start(b->loop, &b->rec.recovered);
    b->rec.running = 1;
    r = pthread_create(&b->rec.thread, NULL, recover_thread, b);
    if (r != 0) {
        b->rec.running = 0;
        wlog_close(log);
        log_error("bridge", "cannot start the recovery thread", "error=\"%s\"", strerror(r));
        return -1;
    }
    return 0;
}

/* ---- life ------------------------------------------------------------------------ */

struct bridge *bridge_new(struct ev_loop *loop, const struct config *cfg, struct wlog *log,
                          int *exit_code)
{
    struct bridge *b = xcalloc(1, sizeof(*b));

    *exit_code = EXIT_OK;
    b->loop = loop;
    b->cfg = cfg;
    b->start_ms = clock_now_ms();
    b->start_mono_ms = clock_mono_ms();
    b->counts = xcalloc(CONFIG_MAX_ROUTES, sizeof(*b->counts));
    b->commit_early_at = bridge_commit_early_at(cfg);
    b->snap = xcalloc(CONFIG_MAX_ROUTES, sizeof(*b->snap));
    signal(SIGPIPE, SIG_IGN);

    ev_prepare_init(&b->prepare, on_prepare);
    b->prepare.data = b;
    ev_prepare_start(loop, &b->prepare);
    ev_timer_init(&b->wake, on_wake, 0.0, 0.0);
    b->wake.data = b;
    ev_timer_start(loop, &b->wake);
    if (duewake_init(&b->due, loop) < 0)
        log_warn("bridge", "no timerfd: due times wake the loop by the ms timer (up to 2 ms late)",
                 "error=\"%s\"", strerror(errno));
    ev_signal_init(&b->sigterm, on_signal, SIGTERM);
    b->sigterm.data = b;
    ev_signal_start(loop, &b->sigterm);
    ev_signal_init(&b->sigint, on_signal, SIGINT);
    b->sigint.data = b;
    ev_signal_start(loop, &b->sigint);
    bridge_reload_init(b);
    if (bridge_start_http(b) < 0 || start_recovery(b, log) < 0) {
        if (!b->rec.running && !b->rec.opts.log)
            wlog_close(log);
        *exit_code = EXIT_FATAL;
        b->exit_code = EXIT_FATAL;
        bridge_free(b);
        return NULL;
    }
    return b;
}

int bridge_exit_code(const struct bridge *b)
{
    return b->exit_code;
}


void bridge_free(struct bridge *b)
{
    if (!b)
        return;
    if (b->rec.running) {
        /* Stopped before recovery ended (a fatal error elsewhere): let it finish. */
        pthread_join(b->rec.thread, NULL);
        b->rec.running = 0;
        ev_async_stop(b->loop, &b->rec.recovered);
        if (b->rec.result == 0)
            b->eng = b->rec.eng;
    }
    if (!b->exit_code && b->eng)
        bridge_log_summary(b);
    http_stop(b->http);
    bridge_conns_free(b);
    if (b->eng)
        eng_set_notify(b->eng, NULL, NULL);
    ev_async_stop(b->loop, &b->rec.log_ready);
    ev_prepare_stop(b->loop, &b->prepare);
    ev_timer_stop(b->loop, &b->wake);
    duewake_stop(&b->due, b->loop);
    ev_signal_stop(b->loop, &b->sigterm);
    ev_signal_stop(b->loop, &b->sigint);
    ev_signal_stop(b->loop, &b->sighup);
    ev_stat_stop(b->loop, &b->watch);
    free(b->reload.text);
    free(b->reload.store);
    for (int i = 0; b->ioff && i < b->cfg->nroutes; i++)
        ingress_off_close(&b->ioff[i]); /* synced: a clean stop reads nothing twice */
    free(b->ioff);
    free(b->commit_next);
    free(b->counts);
    free(b->snap);
    bridge_retry_free(b);
    bridge_dx_free(b);
    eng_close(b->eng);
    free(b);
}
