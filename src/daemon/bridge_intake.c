/*
 * bridge_intake.c -- deliveries in: the intake gate, the stash, the log.
 *
 * A delivery from an ingress queue becomes a log record here
 * (take_delivery): oversized ones are rejected at once (before any later
 * multiple-ack could cover them), x-delay-cancel cancels by key, a
 * redelivery already logged is recognised (eng_seen) and only acked,
 * everything else is judged (xdelay.c), encoded (msgrec.c) and appended
 * (engine: PENDING). Nothing is acked here: bridge_commit_and_ack()
 * (bridge_commit.c) acks up to the last delivery a durable commit covered,
 * and calls the gate here when a commit completes: this file is below it.
 *
 * THE INTAKE GATE. The log pauses intake when its volume runs short
 * (wal_space.c: free space under one segment, its space reserve not
 * whole, a commit that met a full disk) and lifts the pause with
 * hysteresis. bridge_intake_gate() cancels the ingress consumers while the
 * log or a failed commit (disk_full) holds them, and consumes again when
 * neither does. Held messages keep firing meanwhile: their DONE records
 * and compaction are what give space back, and the reserve keeps them
 * room.
 *
 * THE STASH. A cancel is not instant: the broker has up to prefetch
 * deliveries per route on the wire when it is sent. Those, and every
 * ingress delivery while older ones wait, go to the stash (dstash.h):
 * copied, unacked, in order. So intake appends nothing once the gate
 * closes, and the log's last segment and its reserve stay for the records
 * that end messages. When the gate opens, bridge_stash_drain() appends
 * them, oldest first, while the log keeps room. Acks stay below the oldest
 * stashed tag and a stream ingress's place at or below its oldest stashed
 * offset (bridge_commit.c: ack_tag, take_places), so a crash gives the stash back
 * to the broker: nothing acked was only in memory. A lost connection drops
 * the stash (the broker has those deliveries again). Key events and
 * oversized rejects never wait: they append no message.
 *
 * THE HELD GATE. Every held message costs RAM (40 B, engine.h) for as long
 * as its delay, and a restart needs that RAM again to replay it; so a
 * publisher of many long delays could grow the process until it is
 * killed, and then kill every restart. routes[].max_held bounds a route,
 * limits.max_held every route together (config.h; README, "Bounds on what
 * is held"). bridge_held_gate() weighs the engine's counts against them:
 * at the bound a route's ingress consumer is cancelled (consumer_hold_route,
 * the connection kept, as the disk gate does) and new messages wait in its
 * ingress queue, in the broker; it consumes again once the count is below
 * 95 % of the bound (hysteresis: a resume is not undone by the next
 * delivery). Deliveries already on the wire when the cancel goes out (up
 * to prefetch a route) are taken as any other, so the bound may be passed
 * by at most the prefetch (the routes' together, for limits.max_held).
 * Nothing is refused, nothing nacked: the count falls as held messages
 * fire, are cancelled or purged. A replay at start loads whatever the log
 * holds, over the bound or not -- those messages were acked -- and the
 * gate's first look, before the consumers connect, starts the routes
 * paused. Each pause and resume is one log line naming the route, the
 * count, the bound and its key path; /readyz names the first.
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "base/log.h"
#include "delay-bridge/msgrec.h"
#include "delay-bridge/xdelay.h"

/*
 * The intake gate. The log pauses intake when its volume runs short
 * (wal_space.c: free space under one segment, its space reserve not whole,
 * a commit that met a full disk) and lifts the pause with hysteresis; the
 * ingress consumers are cancelled while it or a failed commit (disk_full)
 * holds them, and consume again when neither does. Held messages keep
 * firing meanwhile: their DONE records and compaction are what give space
 * back, and the reserve guarantees them room.
 */
void bridge_intake_gate(struct bridge *b)
{
    /*
     * Resume only with a segment of room beyond the log's own mark: the
     * stash, appended when the log's gate opened, may have taken the
     * room its hysteresis left, and consuming again at once would pause
     * again at once.
     */
    uint64_t room = b->space_paused ? b->cfg->segment_bytes : 0;
    int paused = eng_intake(b->eng, room) != WLOG_INTAKE_OK || b->stash.n;

    if (paused && !b->space_paused) {
        struct eng_stats es;
        eng_stats(b->eng, &es);
        b->space_paused = 1;
        b->space_pauses++;
        log_warn("bridge", "WAL space low: consuming paused, messages stay in the broker; held "
                 "messages keep firing and give space back; resumes by itself",
                 "wal_dir=\"%s\" free_bytes=%" PRIu64 " reserve_held=%" PRIu64
                 " reserve_bytes=%" PRIu64, b->cfg->wal_dir, es.log_free_bytes,
                 es.log_reserve_held, es.log_reserve_bytes);
        bridge_consumers(b, CONSUMERS_HOLD);
    } else if (!paused && b->space_paused) {
        struct eng_stats es;
        eng_stats(b->eng, &es);
        b->space_paused = 0;
        log_info("bridge", "WAL space again: consuming resumes",
                 "wal_dir=\"%s\" free_bytes=%" PRIu64 " reserve_bytes=%" PRIu64,
                 b->cfg->wal_dir, es.log_free_bytes, es.log_reserve_held);
        if (!b->disk_full && !b->stopping && !b->drain.active)
            bridge_consumers(b, CONSUMERS_RELEASE);
    }
}

/* A bound with hysteresis: paused at max held, resumed below 95 % of it; max 0: none. */
static int held_over(uint64_t held, uint64_t max, int paused)
{
    if (!max)
        return 0;
    return held >= (paused ? max - max / 20 : max);
}

/* /readyz's reason while a held bound pauses consuming: the bound in all first. */
static void held_reason(struct bridge *b, int first, int routes)
{
    const struct config *cfg = b->cfg;

    if (b->held_all_paused)
        snprintf(b->held_reason, sizeof(b->held_reason), "held limit reached (consuming paused "
                 "on every route): limits.max_held %" PRIu64 ", %" PRIu64 " held",
                 cfg->max_held, eng_held(b->eng, -1));
    else if (routes)
        snprintf(b->held_reason, sizeof(b->held_reason), "held limit reached (consuming paused): "
                 "routes[%s].max_held %" PRIu64 ", %" PRIu64 " held%s", cfg->routes[first].name,
                 cfg->routes[first].max_held, eng_held(b->eng, first),
                 routes > 1 ? ", and other routes" : "");
    else
        b->held_reason[0] = '\0';
}

void bridge_held_gate(struct bridge *b)
{
    const struct config *cfg = b->cfg;
    uint64_t all = eng_held(b->eng, -1), max = cfg->max_held;
    int paused, routes = 0, first = -1;

    paused = held_over(all, max, b->held_all_paused);
    if (paused && !b->held_all_paused) {
        b->held_all_pauses++;
        log_warn("bridge", "held limit in all reached: every route stops consuming, new "
                 "messages wait in the ingress queues; resumes below 95 %",
                 "held=%" PRIu64 " max_held=%" PRIu64 " key=limits.max_held resume_below=%"
                 PRIu64, all, max, max - max / 20);
    } else if (!paused && b->held_all_paused) {
        log_info("bridge", max ? "held below the limit in all again: consuming resumes"
                               : "the limit in all was lifted (0, no bound): consuming resumes",
                 "held=%" PRIu64 " max_held=%" PRIu64 " key=limits.max_held", all, max);
    }
    b->held_all_paused = paused;
    for (int i = 0; i < cfg->nroutes; i++) {
        const struct config_route *rc = &cfg->routes[i];
        struct route_counts *n = &b->counts[i];
        uint64_t held = eng_held(b->eng, i);
        int p = !rc->retired && held_over(held, rc->max_held, n->held_paused);

        if (p && !n->held_paused) {
            n->held_pauses++;
            log_warn("bridge", "held limit reached: the route stops consuming, new messages "
                     "wait in its ingress queue; resumes below 95 %",
                     "route=%s held=%" PRIu64 " max_held=%" PRIu64 " key=routes[%s].max_held "
                     "resume_below=%" PRIu64 " queue=\"%s\"", rc->name, held, rc->max_held,
                     rc->name, rc->max_held - rc->max_held / 20, rc->ingress_queue);
        } else if (!p && n->held_paused && !rc->retired) {
            log_info("bridge", rc->max_held ? "held below the limit again: the route consumes "
                                              "again"
                                            : "the route's limit was lifted (0, none of its "
                                              "own): the route consumes again",
                     "route=%s held=%" PRIu64 " max_held=%" PRIu64 " key=routes[%s].max_held",
                     rc->name, held, rc->max_held, rc->name);
        }
        n->held_paused = p;
        if (p && !routes++)
            first = i;
        if (b->nvc && !rc->retired) {
            if (p || paused)
                consumer_hold_route(bridge_cons(b, i), i);
            else
                consumer_release_route(bridge_cons(b, i), i);
        }
    }
    held_reason(b, first, routes);
}

/*
 * The memory this process may use, from its cgroup (v2 memory.max, else v1
 * memory.limit_in_bytes); 0 when there is no limit or none is found.
 */
static uint64_t memory_limit(const char **from)
{
    static const char *const files[] = {"/sys/fs/cgroup/memory.max",
                                        "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
    char buf[64];

    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        FILE *f = fopen(files[i], "r");
        unsigned long long v;
        int ok;
        if (!f)
            continue;
        ok = fgets(buf, sizeof(buf), f) != NULL;
        fclose(f);
        *from = files[i];
        if (!ok || sscanf(buf, "%llu", &v) != 1 || v >= (1ull << 62)) /* "max", or v1's none */
            return 0;
        return v;
    }
    return 0;
}

#define HELD_RAM_BYTES 40u          /* a held message, unkeyed (engine.h; tests/bench) */
#define HELD_RAM_KEYED_BYTES 57u    /* ... with an x-delay-key */
#define PROCESS_RAM_BYTES (20u << 20)

void bridge_held_start(struct bridge *b)
{
    uint64_t max = b->cfg->max_held, limit, need;
    const char *from = "";

    if (!max) {
        log_warn("bridge", "limits.max_held is 0: no bound on the messages held; publishers "
                 "can grow this process's memory until it is killed", "key=limits.max_held");
        return;
    }
    limit = memory_limit(&from);
    need = max * HELD_RAM_BYTES + PROCESS_RAM_BYTES;
    if (limit && need > limit)
        log_warn("bridge", "limits.max_held needs more RAM than this process may use: it "
                 "would be killed before the bound pauses consuming; lower limits.max_held",
                 "key=limits.max_held max_held=%" PRIu64 " needs_bytes=%" PRIu64
                 " memory_limit_bytes=%" PRIu64 " from=\"%s\" suggested=%" PRIu64, max, need,
                 limit, from,
                 limit > 2 * PROCESS_RAM_BYTES
                     ? (limit - 2 * PROCESS_RAM_BYTES) / HELD_RAM_KEYED_BYTES : 0);
}

/* After a message was added to route: at a bound now? Then the gate, at once. */
static void held_check(struct bridge *b, int route)
{
    uint64_t max = b->cfg->routes[route].max_held;

    if ((max && !b->counts[route].held_paused && eng_held(b->eng, route) >= max) ||
        (b->cfg->max_held && !b->held_all_paused && eng_held(b->eng, -1) >= b->cfg->max_held))
        bridge_held_gate(b);
}

/* d as the ADD record the log would store (msgrec_from_delivery's flags); props_len >= 0. */
static int delivery_record(const struct bridge *b, const struct delivery *d, struct walrec_add *a)
{
    struct msgrec_in in = {d->exchange, d->exchange_len, d->routing_key, d->routing_key_len,
                           d->props, (uint32_t)d->props_len, d->body, (uint32_t)d->body_size,
                           d->key_str, d->key_str ? d->key_len : 0, d->key < 0};

    if (d->retry_queue) { /* a retry goes back to the queue it failed in: its routing key */
        in.routing_key = d->retry_queue;
        in.routing_key_len = d->retry_queue_len;
    }

    /* d->now_ms, not now: a due time asked for is stored to the ms, whenever the clock ticks */
    return msgrec_from_delivery(a, &b->cfg->routes[d->route], &in, d->now_ms, d->xdelay,
                                d->delay_ms);
}

/* Larger than wal.max_message_bytes: rejected now, before any later multiple-ack covers it. */
static void reject_oversized(struct bridge *b, const struct delivery *d)
{
    const struct config_route *rc = &b->cfg->routes[d->route];

    b->counts[d->route].rejected++;
    if (rc->queue_type == QUEUE_STREAM)
        log_error("consume", "message larger than wal.max_message_bytes skipped",
                  "route=%s bytes=%" PRIu64 " limit=%u offset=%" PRId64 " action=\"not "
                  "logged; it stays in the stream until retention removes it\"",
                  rc->name, d->body_size, b->cfg->max_message_bytes, d->stream_offset);
    else
        log_error("consume", "message larger than wal.max_message_bytes rejected",
                  "route=%s bytes=%" PRIu64 " limit=%u action=\"basic.reject, requeue=false: "
                  "dead-lettered if the ingress queue has a dead-letter exchange\"",
                  rc->name, d->body_size, b->cfg->max_message_bytes);
    consumer_reject(bridge_cons(b, d->route), d->route, d->gen, d->tag);
}

/*
 * x-delay-cancel: remove the pending message with that key (and tell the
 * route's other bridges, dated now on the wall clock); not forwarded.
 * Acked once the CANCEL record is durable.
 */
static void take_cancel(struct bridge *b, const struct delivery *d, uint64_t now, uint64_t mono)
{
    struct route_counts *n = &b->counts[d->route];
    const char *key = d->cancel_key;
    size_t key_len = d->cancel_key_len;
    uint64_t ev;
    int r;

    if (d->cancel < 0 || key_len > MSGREC_KEY_MAX) {
        n->invalid_key++;
        if ((ev = log_ratelimit(&n->rl_delay, mono, 10000)))
            log_warn("consume", "invalid x-delay-cancel (not a string of at most 255 bytes): "
                     "dropped", "route=%s events=%" PRIu64, b->cfg->routes[d->route].name, ev);
    } else if ((r = eng_cancel(b->eng, (uint16_t)d->route, key, key_len)) < 0) {
        bridge_fatal(b, "WAL read (cancel)", r);
        return;
    } else {
        bridge_key_event_out(b, d->route, "cancel", key, key_len, now);
    }
    bridge_logged(b, d); /* acked once the CANCEL record is durable */
}

/* An invalid x-delay or x-delay-key (msgrec_from_delivery's flags r): counted, logged. */
static void note_invalid(struct bridge *b, const struct delivery *d, const struct walrec_add *a,
                         int r, uint64_t mono)
{
    const struct config_route *rc = &b->cfg->routes[d->route];
    struct route_counts *n = &b->counts[d->route];
    uint64_t ev;

    if (r & MSGREC_INVALID_DELAY)
        n->invalid_delay++;
    if (r & MSGREC_INVALID_KEY)
        n->invalid_key++;
    if (a->flags & WALREC_ADD_DEADLETTER)
        n->dead_lettered++;
    if ((ev = log_ratelimit(&n->rl_delay, mono, 10000)))
        log_warn("consume",
                 r & MSGREC_INVALID_DELAY ? xdelay_strerror(d->xdelay)
                                          : "invalid x-delay-key (not a string of at most 255 "
                                            "bytes)",
                 "route=%s action=%s events=%" PRIu64, rc->name,
                 rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? "dead-letter" : "publish-now",
                 ev);
}

/* delay_from "broker" and no timestamp_in_ms: counted, and logged with the broker's fix. */
static void note_unstamped(struct bridge *b, const struct delivery *d, uint64_t mono)
{
    struct route_counts *n = &b->counts[d->route];
    uint64_t ev;

    n->unstamped++;
    if ((ev = log_ratelimit(&n->rl_stamp, mono, 60000)))
        log_warn("consume", "delay_from is \"broker\" but a message has no timestamp_in_ms: its "
                 "x-delay counts from its receipt here", "route=%s events=%" PRIu64 " hint=\""
                 "message_interceptors.incoming.set_header_timestamp.overwrite = true in "
                 "rabbitmq.conf (RabbitMQ 3.12 or later)\"", b->cfg->routes[d->route].name, ev);
}

/*
 * One delivery into the log: an oversized one rejected, a key event or a
 * cancel applied, a redelivery already logged recognised, everything else
 * appended as an ADD record. The ack waits for the commit that covers it.
 */
static void take_delivery(struct bridge *b, const struct delivery *d)
{
    struct route_counts *n = &b->counts[d->route];
    struct walrec_add a;
    uint64_t now = clock_now_ms(); /* wall: the time a key event carries */
    uint64_t mono = clock_mono_ms(), first_ms;
    int r;

    if (b->exit_code)
        return;
    if (d->too_big) {
        reject_oversized(b, d);
        return;
    }
    if (d->key_event) {
        bridge_key_event_in(b, d);
        return;
    }
    if (d->cancel != 0) {
        take_cancel(b, d, now, mono);
        return;
    }
    if (bridge_dx_refuse(b, d)) /* delayed_exchanges: nowhere of its own to go back to */
        return;

    /* Encoded by the consumer without the queue's counters (broker_msg_read, "Intake"). */
    if (d->props_len < 0) {
        bridge_fatal(b, "encode message properties", d->props_len);
        return;
    }
    r = delivery_record(b, d, &a);
    if (d->redelivered &&
        eng_seen(b->eng, (uint16_t)d->route, msgrec_fingerprint(&a), &first_ms)) {
        /* Logged before a crash or a lost connection, its ack lost with it: ack, store nothing. */
        n->deduplicated++;
        if (a.flags & WALREC_ADD_KEYED) /* its event may be what the crash lost */
            bridge_key_event_again(b, d->route, &a, first_ms);
        bridge_logged(b, d);
        return;
    }
    if (r && !b->cfg->routes[d->route].retry)
        note_invalid(b, d, &a, r, mono);
    r = eng_add(b->eng, (uint16_t)d->route, &a, NULL);
    if (r < 0) {
        bridge_fatal(b, "WAL append", r);
        return;
    }
    if (b->cfg->routes[d->route].retry)
        bridge_retry_taken(b, d, &a, mono);
    if (a.flags & WALREC_ADD_KEYED)
        bridge_key_event_out(b, d->route, "replace", a.key, a.key_len, a.enqueue_ms);
    if (d->unstamped)
        note_unstamped(b, d, mono);
    n->received++;
    bridge_logged(b, d);
    held_check(b, d->route);
}

/*
 * A delivery from an ingress queue while the log asks for no new messages
 * (or while older ones still wait) goes to the stash, in order, unacked;
 * key events and oversized rejects are taken at once (they append no
 * message). The stash goes into the log when intake resumes (stash_drain).
 */
/* About how long d's ADD record is: what the gate weighs it by. */
static uint64_t record_bytes(const struct delivery *d)
{
    return d->body_size + (uint64_t)(d->props_len > 0 ? d->props_len : 0) + d->exchange_len +
           d->routing_key_len + (d->key_str ? d->key_len : 0) + 128;
}

/*
 * A record the WAL's volume can never hold beside its reserve: like an
 * oversized message, rejected (a stream's skipped), or it would hold up
 * every message behind it for good.
 */
static void reject_unfit(struct bridge *b, const struct delivery *d)
{
    const struct config_route *rc = &b->cfg->routes[d->route];

    b->counts[d->route].rejected++;
    log_error("consume", "message larger than the WAL's volume can hold beside its space reserve: "
              "rejected (a stream's skipped); give the WAL a larger volume or lower "
              "wal.max_message_bytes", "route=%s bytes=%" PRIu64 " wal_dir=\"%s\" action=\"%s\"",
              rc->name, d->body_size, b->cfg->wal_dir,
              rc->queue_type == QUEUE_STREAM ? "not logged; it stays in the stream"
                                             : "basic.reject, requeue=false");
    consumer_reject(bridge_cons(b, d->route), d->route, d->gen, d->tag);
}

/*
 * A redelivery already in the log needs no room: recognise it now and ack
 * it alone (the stash below it stays unacked), rather than hold it while
 * its copy may fire. It is recognised by its fingerprint, so intake must
 * give a redelivery the same properties as its first delivery: the broker's
 * own redelivery headers (x-delivery-count, 4.x's x-acquired-count) are
 * dropped first (broker_msg_read's intake; the 945 stored twice that
 * integration.broker4's disk_full once saw on 4.3.6 were x-acquired-count
 * after a consumer timeout). Keyed ones wait: their key event must be
 * confirmed before the ack (bridge_keys.c).
 */
static int seen_now(struct bridge *b, const struct delivery *d)
{
    struct walrec_add a;
    uint64_t first_ms;

    if (!d->redelivered || d->cancel || d->props_len < 0)
        return 0;
    delivery_record(b, d, &a);
    if ((a.flags & WALREC_ADD_KEYED) ||
        !eng_seen(b->eng, (uint16_t)d->route, msgrec_fingerprint(&a), &first_ms))
        return 0;
    b->counts[d->route].deduplicated++;
    consumer_settle(bridge_cons(b, d->route), d->route, d->gen, d->tag, 1);
    return 1;
}

void bridge_on_delivery(void *arg, const struct delivery *d)
{
    struct bridge *b = arg;
    int r;

    if (b->exit_code)
        return;
    if (d->key_event || d->too_big) {
        take_delivery(b, d);
        return;
    }
    r = b->stash.n ? WLOG_INTAKE_WAIT : eng_intake(b->eng, record_bytes(d));
    if (r == WLOG_INTAKE_WAIT && seen_now(b, d))
        return;
    if (r == WLOG_INTAKE_OK) {
        take_delivery(b, d);
    } else if (r == WLOG_INTAKE_NEVER) {
        reject_unfit(b, d);
    } else {
        dstash_put(&b->stash, d);
        if (!b->space_paused)
            bridge_intake_gate(b);
    }
}

/* Intake resumed: the stash into the log, oldest first, while the log has room. */
void bridge_stash_drain(struct bridge *b)
{
    const struct delivery *d;
    int r;

    while (!b->exit_code && (d = dstash_peek(&b->stash))) {
        if (d->gen != consumer_gen(bridge_cons(b, d->route))) {
            /* an older connection's: back in the broker already */
            dstash_pop(&b->stash);
            continue;
        }
        if ((r = eng_intake(b->eng, record_bytes(d))) == WLOG_INTAKE_WAIT)
            break;
        if (r == WLOG_INTAKE_NEVER)
            reject_unfit(b, d);
        else
            take_delivery(b, d);
        dstash_pop(&b->stash);
    }
    if (!b->stash.n && b->space_paused)
        bridge_intake_gate(b);
}

void bridge_on_consumer_state(void *arg, int up)
{
    /* Deliveries appended but not acked go back to the queue with the old
     * connection; they are committed anyway and will be received again
     * (README, delivery guarantees). Tags of the old connection are dead,
     * and so is the stash: the broker has those deliveries again. So are
     * the redeliveries recognised on it whose acks it lost: their
     * fingerprints must match once more (eng_seen_reset: every route's,
     * more than this connection's, which costs only what a restart costs). */
    struct bridge *b = arg;

    /* With several vhosts, the others' deliveries stay; stale ones are skipped by gen. */
    if (!up && b->nvc == 1)
        dstash_clear(&b->stash);
    if (!up && b->eng)
        eng_seen_reset(b->eng);
}
