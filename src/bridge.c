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
 *               Nothing is acked yet.
 *   a commit    commit_and_ack() is the one place the log commits: once per
 *               loop turn, before the loop sleeps (ev_prepare, like Redis's
 *               beforeSleep), it covers every delivery appended so far and
 *               every confirm; when the commit completes, basic.ack
 *               (multiple) goes out up to the last delivery it covered.
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
 * space (at most every 100 ms, a bounded amount), then arm one timer for
 * the earliest of: next wheel event, a reconnect or retry, a heartbeat
 * poll, one second.
 */
#include "delay-bridge/bridge.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delay-bridge/amqp_msg.h"
#include "delay-bridge/api.h"
#include "delay-bridge/clock.h"
#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "delay-bridge/failpoint.h"
#include "delay-bridge/http.h"
#include "delay-bridge/log.h"
#include "delay-bridge/msgrec.h"
#include "delay-bridge/publisher.h"
#include "delay-bridge/ui.h"
#include "delay-bridge/wlog.h"
#include "delay-bridge/xalloc.h"

#include <json-c/json.h>

#define PURGE_STEP 65536            /* message-table entries a purge looks at per turn */
#define PURGE_AT_ONCE (1u << 20)    /* ... and in the request itself, before answering 202 */
#define MAINTAIN_BUDGET (8u << 20)
#define MAINTAIN_EVERY_MS 100
/* Draining: the engine's clock jumps here, so every held message is due. */
#define DRAIN_HORIZON_MS (UINT64_MAX / 4)
#define DRAIN_LINGER_MS 1000 /* after the drain, /stats reports it this long before the exit */
#define DISK_RETRY_MS 1000
#define MAX_SLEEP_MS 1000
#define PUBLISH_BURST 1024 /* per route per round, so routes take turns */

#define H_KEY "x-delay-key"
#define H_CANCEL "x-delay-cancel"
#define H_EVENT "x-delay-key-event" /* share_keys: "replace" or "cancel" */
#define H_ORIGIN "x-delay-key-origin"
#define H_AT "x-delay-key-at"

/* What the bridge itself counts per route (the parts count the rest). */
struct route_counts {
    uint64_t received, rejected, invalid_delay, invalid_key, dead_lettered, deduplicated;
    uint64_t key_events_sent, key_events_received, key_events_applied;
    struct log_ratelimit rl_delay, rl_return;
};

struct bridge {
    struct ev_loop *loop;
    const struct config *cfg;
    struct engine *eng;
    struct consumer *cons;
    struct publisher *pub;
    struct http_server *http;
    struct route_counts *counts;
    uint64_t log_id;

    /* The last delivery appended, and the last one the running commit covers. */
    uint32_t logged_gen, commit_gen;
    uint64_t logged_tag, commit_tag;

    uint8_t *props_buf; /* the current delivery's properties, AMQP-encoded */
    size_t props_cap;
    amqp_table_entry_t *hdr_scratch; /* headers without the broker's x-delivery-count */
    size_t hdr_cap;

    ev_prepare prepare;
    ev_timer wake;
    ev_signal sigterm, sigint;
    uint64_t start_ms, turn_ms, last_maintain;
    int ready_logged;
    int disk_full;          /* the last commit found no space: consuming paused */
    uint64_t disk_retry_at; /* when to try the commit again */
    int stopping;
    uint64_t stop_deadline;
    int exit_code, done;

    struct db_route_stats *snap; /* bridge_stats() output */

    /* The purge job (POST /purge), a bounded step per loop turn. */
    struct {
        int started, active;
        struct eng_purge job;
    } purge;

    /*
     * The drain (POST /drain): every held message handed back, then exit 0.
     * Once done it lingers DRAIN_LINGER_MS with /stats saying so, so that
     * `delay-bridge drain` (polling every 200 ms) can tell a finished drain
     * from a daemon that died.
     */
    struct {
        int active, done;
        uint64_t handed_back, started_ms, done_ms;
    } drain;

    /* Recovery on a thread: the loop learns it is over through `recovered`. */
    struct {
        pthread_t thread;
        int running;
        ev_async recovered;
        ev_async log_ready; /* the log's sync thread finished a commit */
        struct eng_opts opts;
        struct db_progress progress;
        struct engine *eng;
        int result;
    } rec;
};

static void fatal(struct bridge *b, const char *what, int err)
{
    if (b->exit_code)
        return;
    log_error("bridge", "fatal error, stopping without acking more", "what=\"%s\" error=\"%s\"",
              what, eng_strerror(err));
    b->exit_code = EXIT_FATAL;
    /* Abrupt close: unacked deliveries go back to their queues. */
    if (b->cons)
        consumer_abort(b->cons);
    ev_break(b->loop, EVBREAK_ALL);
}

/* ---- commit and ack ------------------------------------------------------------ */

static void on_committed(void *arg, int err)
{
    struct bridge *b = arg;

    if (err < 0) {
        fatal(b, "WAL commit", err);
        return;
    }
    if (b->disk_full) {
        b->disk_full = 0;
        log_info("bridge", "WAL has space again: consuming resumes", NULL);
        if (!b->stopping && !b->drain.active)
            consumer_resume(b->cons);
    }
    FAILPOINT("bridge.before_ack");
    consumer_ack(b->cons, b->commit_gen, b->commit_tag);
}

/*
 * The one place the log commits: everything appended and confirmed so far
 * becomes durable, then the broker is acked up to the last delivery that
 * commit covered. A commit still running (an asynchronous log) just means
 * this turn's work goes into the next one.
 */
static void commit_and_ack(struct bridge *b)
{
    int r;

    if (b->exit_code || eng_committing(b->eng))
        return;
    if (!eng_dirty(b->eng)) {
        consumer_ack(b->cons, b->logged_gen, b->logged_tag);
        return;
    }
    if (b->disk_full && clock_now_ms() < b->disk_retry_at)
        return;
    b->commit_gen = b->logged_gen;
    b->commit_tag = b->logged_tag;
    r = eng_commit(b->eng, on_committed, b);
    if (r == -ENOSPC || r == -EDQUOT) {
        /*
         * Disk full: what was received stays unacked (it goes back to the
         * broker with the consumer connection, and redeliveries of what is
         * already logged are recognised); held messages keep firing, and
         * their segments are deleted as they are confirmed, which is how
         * space usually comes back. Try again every second.
         */
        b->disk_retry_at = clock_now_ms() + DISK_RETRY_MS;
        if (!b->disk_full) {
            b->disk_full = 1;
            log_error("bridge", "WAL disk full: consuming paused, messages stay in the broker; "
                      "held messages keep firing; resumes by itself when space returns",
                      "wal_dir=\"%s\"", b->cfg->wal_dir);
            consumer_pause(b->cons);
        }
        return;
    }
    if (r < 0 && r != ENG_EBUSY)
        fatal(b, "WAL commit", r);
}

/*
 * Commit now and wait for it: for an operator's request that answers
 * "durable" (DELETE /pending, POST /purge). The loop waits one fsync.
 */
static void commit_and_wait(struct bridge *b)
{
    eng_flush(b->eng);  /* the commit already out, if any */
    commit_and_ack(b);  /* one with everything so far */
    eng_flush(b->eng);
}

/* ---- keys across bridges (routes[].share_keys) ----------------------------------- */

/*
 * Bridges that share a route are competing consumers, so a replacement or a
 * cancel for a key may reach a bridge that does not hold the key's message.
 * With share_keys, each bridge tells the others: for every keyed message
 * and every x-delay-cancel it takes from the ingress, it publishes a key
 * event (an empty message with the headers below) to the route's fanout
 * INGRESS_EXCHANGE.keys, where every bridge of the route has its own
 * durable queue INGRESS_QUEUE.keys.INSTANCE.
 *
 *   x-delay-key-event   "replace" (a newer message with this key arrived)
 *                       or "cancel"
 *   x-delay-key         the key
 *   x-delay-key-origin  the sending bridge's instance name
 *   x-delay-key-at      when it took the message, ms since the epoch
 *
 * A bridge that holds the key's message (pending, waiting or due) and
 * took it before `at` (or at the same ms, with an instance name that sorts
 * before the origin's) cancels it: of the versions held across the
 * bridges, the one that arrived last survives, and a cancel removes what
 * arrived before it. "Last" is by the bridges' clocks (keep them in NTP
 * sync) and by arrival at a bridge, not by publication.
 *
 * Reliability: the event goes out on the consumer's channel before the
 * ack of the delivery that caused it, so an acked delivery's event reached
 * the broker; a delivery whose ack was lost comes back, is recognised as
 * logged, and its event is sent again. A bridge acks an event like a
 * delivery: once the CANCEL it caused is durable. An event the broker
 * loses in a crash before it stored it lets both versions fire.
 */
static void key_event_out(struct bridge *b, int route, const char *kind, const char *key,
                          size_t key_len, uint64_t at)
{
    amqp_table_entry_t e[4];
    amqp_table_t t = {4, e};

    if (!b->cfg->routes[route].share_keys)
        return;
    e[0].key = amqp_cstring_bytes(H_EVENT);
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes(kind);
    e[1].key = amqp_cstring_bytes(H_KEY);
    e[1].value.kind = AMQP_FIELD_KIND_UTF8;
    e[1].value.value.bytes = (amqp_bytes_t){key_len, (void *)key};
    e[2].key = amqp_cstring_bytes(H_ORIGIN);
    e[2].value.kind = AMQP_FIELD_KIND_UTF8;
    e[2].value.value.bytes = amqp_cstring_bytes(b->cfg->instance);
    e[3].key = amqp_cstring_bytes(H_AT);
    e[3].value.kind = AMQP_FIELD_KIND_I64;
    e[3].value.value.i64 = (int64_t)at;
    if (consumer_publish_key_event(b->cons, route, &t) == 0)
        b->counts[route].key_events_sent++;
}

static int header_i64(const amqp_table_t *h, const char *name, int64_t *v)
{
    for (int i = 0; h && i < h->num_entries; i++) {
        const amqp_table_entry_t *e = &h->entries[i];
        if (e->key.len != strlen(name) || memcmp(e->key.bytes, name, e->key.len) != 0)
            continue;
        switch (e->value.kind) {
        case AMQP_FIELD_KIND_I64: *v = e->value.value.i64; return 1;
        case AMQP_FIELD_KIND_U64: *v = (int64_t)e->value.value.u64; return 1;
        case AMQP_FIELD_KIND_I32: *v = e->value.value.i32; return 1;
        case AMQP_FIELD_KIND_TIMESTAMP: *v = (int64_t)e->value.value.u64; return 1;
        default: return 0;
        }
    }
    return 0;
}

/* Another bridge's key event: cancel our older version of the key, if we hold one. */
static void key_event_in(struct bridge *b, const struct delivery *d, const amqp_table_t *h)
{
    struct route_counts *n = &b->counts[d->route];
    const char *kind = NULL, *key = NULL, *origin = NULL;
    size_t kind_len = 0, key_len = 0, origin_len = 0;
    int64_t at = 0;
    eng_msg m;
    int r;

    b->logged_gen = d->gen; /* acked with the next commit, after the CANCEL it may cause */
    b->logged_tag = d->tag;
    n->key_events_received++;
    if (amqp_msg_header_str(h, H_EVENT, &kind, &kind_len) <= 0 ||
        amqp_msg_header_str(h, H_KEY, &key, &key_len) <= 0 || key_len > MSGREC_KEY_MAX ||
        amqp_msg_header_str(h, H_ORIGIN, &origin, &origin_len) <= 0 || !header_i64(h, H_AT, &at)) {
        log_warn("keys", "malformed key event dropped", "route=%s", b->cfg->routes[d->route].name);
        return;
    }
    size_t mine = strlen(b->cfg->instance);
    if (origin_len == mine && memcmp(origin, b->cfg->instance, mine) == 0)
        return; /* our own */
    if (!(m = eng_find(b->eng, (uint16_t)d->route, key, key_len)))
        return;
    struct walrec_add a;
    if ((r = eng_read(b->eng, m, &a)) < 0) {
        fatal(b, "WAL read (key event)", r);
        return;
    }
    int cmp = strncmp(b->cfg->instance, origin, origin_len);
    if (cmp == 0 && mine != origin_len)
        cmp = mine < origin_len ? -1 : 1;
    if (a.enqueue_ms > (uint64_t)at || (a.enqueue_ms == (uint64_t)at && cmp > 0))
        return; /* ours is the newer one: the other bridge cancels its copy */
    if ((r = eng_cancel(b->eng, (uint16_t)d->route, key, key_len)) < 0) {
        fatal(b, "WAL read (cancel)", r);
        return;
    }
    if (r > 0)
        n->key_events_applied++;
}

/* ---- deliveries in ------------------------------------------------------------- */

static void on_delivery(void *arg, const struct delivery *d)
{
    struct bridge *b = arg;
    const struct config_route *rc = &b->cfg->routes[d->route];
    struct route_counts *n = &b->counts[d->route];
    const amqp_table_t *headers = NULL;
    struct msgrec_in in;
    struct walrec_add a;
    uint64_t now = clock_now_ms(), delay = 0, ev;
    enum xdelay_status xs;
    int len, r;

    if (b->exit_code)
        return;
    if (d->too_big) {
        /* Rejected now, before any later multiple-ack could cover its tag. */
        n->rejected++;
        log_error("consume", "message larger than wal.max_message_bytes rejected",
                  "route=%s bytes=%" PRIu64 " limit=%u action=\"basic.reject, requeue=false: "
                  "dead-lettered if the ingress queue has a dead-letter exchange\"",
                  rc->name, d->body_size, b->cfg->max_message_bytes);
        consumer_reject(b->cons, d->gen, d->tag);
        return;
    }
    if (d->props->_flags & AMQP_BASIC_HEADERS_FLAG)
        headers = &d->props->headers;

    if (d->key_event) {
        key_event_in(b, d, headers);
        return;
    }

    /* x-delay-cancel: remove the pending message with that key; not forwarded. */
    const char *key = NULL;
    size_t key_len = 0;
    int kind = amqp_msg_header_str(headers, H_CANCEL, &key, &key_len);
    if (kind != 0) {
        if (kind < 0 || key_len > MSGREC_KEY_MAX) {
            n->invalid_key++;
            if ((ev = log_ratelimit(&n->rl_delay, now, 10000)))
                log_warn("consume", "invalid x-delay-cancel (not a string of at most 255 bytes): "
                         "dropped", "route=%s events=%" PRIu64, rc->name, ev);
        } else if ((r = eng_cancel(b->eng, (uint16_t)d->route, key, key_len)) < 0) {
            fatal(b, "WAL read (cancel)", r);
            return;
        } else {
            key_event_out(b, d->route, "cancel", key, key_len, now);
        }
        b->logged_gen = d->gen; /* acked once the CANCEL record is durable */
        b->logged_tag = d->tag;
        return;
    }

    xs = amqp_msg_due(headers, now, rc->max_delay_ms, &delay);
    /*
     * A quorum queue adds x-delivery-count when it redelivers: not part of
     * the message (it is the ingress queue's bookkeeping), so it is neither
     * stored nor forwarded, and a redelivery looks like the original.
     */
    amqp_basic_properties_t props = *d->props;
    if (headers) {
        int k = 0;
        if ((size_t)headers->num_entries > b->hdr_cap) {
            b->hdr_cap = (size_t)headers->num_entries;
            b->hdr_scratch = xrealloc(b->hdr_scratch, b->hdr_cap * sizeof(*b->hdr_scratch));
        }
        for (int i = 0; i < headers->num_entries; i++)
            if (!(headers->entries[i].key.len == 16 &&
                  memcmp(headers->entries[i].key.bytes, "x-delivery-count", 16) == 0))
                b->hdr_scratch[k++] = headers->entries[i];
        props.headers.entries = b->hdr_scratch;
        props.headers.num_entries = k;
    }
    len = amqp_msg_encode_props(&props, &b->props_buf, &b->props_cap);
    if (len < 0) {
        fatal(b, "encode message properties", len);
        return;
    }
    in = (struct msgrec_in){d->exchange, d->exchange_len, d->routing_key, d->routing_key_len,
                            b->props_buf, (uint32_t)len, d->body, (uint32_t)d->body_size,
                            NULL, 0, 0};
    kind = amqp_msg_header_str(headers, H_KEY, &in.key, &in.key_len);
    if (kind <= 0) {
        in.key = NULL;
        in.key_invalid = kind < 0;
    }
    r = msgrec_from_delivery(&a, rc, &in, now, xs, delay);
    if (d->redelivered && eng_seen(b->eng, (uint16_t)d->route, msgrec_fingerprint(&a))) {
        /* Logged before a crash or a lost connection, its ack lost with it: ack, store nothing. */
        n->deduplicated++;
        if (a.flags & WALREC_ADD_KEYED) /* its event may be what the crash lost */
            key_event_out(b, d->route, "replace", a.key, a.key_len, a.enqueue_ms);
        b->logged_gen = d->gen;
        b->logged_tag = d->tag;
        return;
    }
    if (r) {
        if (r & MSGREC_INVALID_DELAY)
            n->invalid_delay++;
        if (r & MSGREC_INVALID_KEY)
            n->invalid_key++;
        if (a.flags & WALREC_ADD_DEADLETTER)
            n->dead_lettered++;
        if ((ev = log_ratelimit(&n->rl_delay, now, 10000)))
            log_warn("consume",
                     r & MSGREC_INVALID_DELAY ? xdelay_strerror(xs)
                                              : "invalid x-delay-key (not a string of at most 255 "
                                                "bytes)",
                     "route=%s action=%s events=%" PRIu64, rc->name,
                     rc->invalid_delay == INVALID_DELAY_DEAD_LETTER ? "dead-letter" : "publish-now",
                     ev);
    }
    r = eng_add(b->eng, (uint16_t)d->route, &a, NULL);
    if (r < 0) {
        fatal(b, "WAL append", r);
        return;
    }
    if (a.flags & WALREC_ADD_KEYED)
        key_event_out(b, d->route, "replace", a.key, a.key_len, a.enqueue_ms);
    n->received++;
    b->logged_gen = d->gen;
    b->logged_tag = d->tag;
}

static void on_consumer_state(void *arg, int up)
{
    /* Deliveries appended but not acked go back to the queue with the old
     * connection; they are committed anyway and will be received again
     * (README, delivery guarantees). Tags of the old connection are dead. */
    (void)arg;
    (void)up;
}

/* ---- publishes out --------------------------------------------------------------- */

static void on_confirmed(void *arg, int route, uint32_t ref, int ok, int returned)
{
    struct bridge *b = arg;
    const struct config_route *rc = &b->cfg->routes[route];
    uint64_t now = clock_now_ms(), ev;

    if (!ok) {
        eng_unsent(b->eng, ref);
        return;
    }
    if (b->drain.active && eng_due_ms(b->eng, ref) > now) {
        if (returned) {
            /* The ingress queue is gone: keep it and try again (logged). */
            if ((ev = log_ratelimit(&b->counts[route].rl_return, now, 10000)))
                log_warn("bridge", "drain: a message handed back came back (no queue bound to "
                         "the ingress exchange); kept and tried again",
                         "route=%s ingress=\"%s\" events=%" PRIu64, rc->name,
                         rc->ingress_exchange, ev);
            eng_unsent(b->eng, ref);
            return;
        }
        b->drain.handed_back++;
    }
    if (returned) {
        /* No queue was bound at the target: keep it, where the route says so. */
        if (rc->unroutable_exchange[0] && !eng_diverted(b->eng, ref)) {
            eng_divert(b->eng, ref);
            return;
        }
        if ((ev = log_ratelimit(&b->counts[route].rl_return, now, 10000)))
            log_warn("publish",
                     rc->unroutable_exchange[0]
                         ? "unroutable message returned by the unroutable exchange too: dropped"
                         : "unroutable message dropped by the broker (no queue bound at the "
                           "target; set routes[].unroutable_exchange to keep them)",
                     "route=%s target=\"%s\" events=%" PRIu64, rc->name,
                     rc->unroutable_exchange[0] ? rc->unroutable_exchange : rc->target_exchange,
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

/* Publish what is due, route by route, while the publisher has room. */
static void pump(struct bridge *b)
{
    int progress = 1, rounds = 0, i;

    while (progress && rounds++ < 64 && !b->exit_code) {
        progress = 0;
        for (i = 0; i < b->cfg->nroutes; i++) {
            int sent = 0;
            while (sent < PUBLISH_BURST && eng_due(b->eng, (uint16_t)i) &&
                   publisher_ready(b->pub, i)) {
                struct walrec_add a;
                struct msgrec_out o;
                eng_msg m;
                int r = eng_take(b->eng, (uint16_t)i, &m, &a);
                if (r < 0) {
                    fatal(b, "read a held message back from the WAL", r);
                    return;
                }
                if (r == 0)
                    break;
                if (b->drain.active)
                    msgrec_to_handback(&a, &b->cfg->routes[i], b->log_id,
                                       eng_diverted(b->eng, m), clock_now_ms(), &o);
                else
                    msgrec_to_publish(&a, &b->cfg->routes[i], b->log_id,
                                      eng_diverted(b->eng, m), &o);
                if (publisher_send(b->pub, i, m, &a, &o) < 0)
                    return; /* connection lost: everything in flight is due again */
                FAILPOINT("bridge.after_publish");
                sent++;
            }
            progress |= sent > 0;
        }
        /* Publishing may have pulled confirms into rabbitmq-c's buffer. */
        if (progress || publisher_busy(b->pub))
            publisher_flush(b->pub);
    }
}

/* ---- the loop turn ----------------------------------------------------------------- */

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

static void shutdown_step(struct bridge *b, uint64_t now)
{
    size_t inflight = publisher_inflight(b->pub);

    if (inflight && publisher_up(b->pub) && now < b->stop_deadline)
        return;
    if (inflight)
        log_warn("bridge", "shutdown timeout: unconfirmed publishes stay held and will be "
                 "published again on restart", "unconfirmed=%zu", inflight);
    commit_and_ack(b);
    if (b->exit_code)
        return;
    if (eng_committing(b->eng))
        return; /* its completion comes on a later turn */
    publisher_close(b->pub);
    b->done = 1;
    ev_break(b->loop, EVBREAK_ALL);
}

static void drain_step(struct bridge *b, uint64_t now);

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct bridge *b = w->data;
    uint64_t now = clock_now_ms(), next;
    int r;

    b->turn_ms = now;
    if (b->exit_code || b->done)
        return;
    if (!b->eng) {
        /* Recovering: only the HTTP endpoint and the signals are served. */
        ev_timer_stop(loop, &b->wake);
        ev_timer_set(&b->wake, MAX_SLEEP_MS / 1000.0, 0.0);
        ev_timer_start(loop, &b->wake);
        return;
    }
    consumer_turn(b->cons, now);
    publisher_turn(b->pub, now);
    if (!b->ready_logged && consumer_up(b->cons) && publisher_up(b->pub)) {
        b->ready_logged = 1;
        log_info("bridge", "ready", "routes=%d", b->cfg->nroutes);
    }
    commit_and_ack(b);
    if (!b->stopping) {
        /* Draining: every message is due now, for the ingress or its target. */
        eng_advance(b->eng, b->drain.active ? DRAIN_HORIZON_MS : now);
        pump(b);
        if (b->drain.active)
            drain_step(b, now);
    }
    if (b->exit_code)
        return;
    if (b->purge.active && (r = eng_purge_step(b->eng, &b->purge.job, PURGE_STEP)) <= 0) {
        if (r < 0) {
            fatal(b, "WAL read (purge)", r);
            return;
        }
        b->purge.active = 0;
        log_info("bridge", "purge done", "route=%s removed=%" PRIu64,
                 b->cfg->routes[b->purge.job.route].name, b->purge.job.removed);
    }
    if (now - b->last_maintain >= MAINTAIN_EVERY_MS) {
        b->last_maintain = now;
        r = eng_maintain(b->eng, MAINTAIN_BUDGET);
        if (r < 0) {
            fatal(b, "WAL maintenance", r);
            return;
        }
    }
    if (b->stopping) {
        shutdown_step(b, now);
        if (b->exit_code || b->done)
            return;
    }

    /* Sleep until the next thing to do. */
    next = now + MAX_SLEEP_MS;
    if (!b->stopping)
        next = min_u64(next, eng_next_event(b->eng));
    next = min_u64(next, consumer_next_wakeup(b->cons));
    next = min_u64(next, publisher_next_wakeup(b->pub));
    if (consumer_busy(b->cons) || publisher_busy(b->pub) || b->purge.active ||
        (eng_dirty(b->eng) && !eng_committing(b->eng) && !b->disk_full))
        next = now;
    if (b->disk_full)
        next = min_u64(next, b->disk_retry_at);
    if (b->drain.done)
        next = min_u64(next, now + 50);
    if (b->stopping)
        next = min_u64(next, now + 10);
    ev_timer_stop(loop, &b->wake);
    ev_timer_set(&b->wake, next > now ? (double)(next - now) / 1000.0 : 0.0, 0.0);
    ev_timer_start(loop, &b->wake);
}

/*
 * The drain is over when nothing is held but orphans (no route to hand them
 * to: they stay in the log) and every DONE record is durable: then stop as
 * on SIGTERM, with nothing left to wait for, and exit 0.
 */
static void drain_step(struct bridge *b, uint64_t now)
{
    struct eng_stats es;

    if (!b->drain.done) {
        eng_stats(b->eng, &es);
        if (es.held > es.orphaned || eng_dirty(b->eng) || eng_committing(b->eng))
            return;
        log_info("bridge", "drain done: every held message was handed back; exiting",
                 "handed_back=%" PRIu64 " orphaned_kept=%" PRIu64 " seconds=%.3f",
                 b->drain.handed_back, es.orphaned, (double)(now - b->drain.started_ms) / 1000.0);
        b->drain.done = 1;
        b->drain.done_ms = now;
    }
    if (now - b->drain.done_ms < DRAIN_LINGER_MS)
        return;
    b->stopping = 1;
    b->stop_deadline = now + b->cfg->shutdown_timeout_ms;
    consumer_stop(b->cons);
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
    b->stop_deadline = clock_now_ms() + b->cfg->shutdown_timeout_ms;
    if (!b->eng) {
        /* still recovering: stop as soon as it is done; a standby stops waiting */
        if (b->rec.opts.log)
            wlog_cancel(b->rec.opts.log);
        return;
    }
    /* Make what was received durable, ack it, and stop consuming. */
    commit_and_ack(b);
    consumer_stop(b->cons);
}

/* ---- the HTTP endpoint ------------------------------------------------------------ */

static void api_stats(void *arg, struct db_stats *s)
{
    bridge_stats(arg, s);
}

static int route_index(void *arg, const char *name, size_t len);

static int route_by_name(const struct bridge *b, const char *name)
{
    return route_index((void *)b->cfg, name, strlen(name));
}

static int api_fail(struct json_object *out, int status, const char *why)
{
    json_object_object_add(out, "error", json_object_new_string(why));
    return status;
}

/* A held message as JSON: what browsing shows, and with its properties for one message. */
static struct json_object *message_json(struct bridge *b, const struct eng_item *it,
                                        const struct walrec_add *a, int full)
{
    struct json_object *o = json_object_new_object(), *props;
    char iso[CLOCK_ISO_LEN], id[40];

    snprintf(id, sizeof(id), "%016" PRIx64 "-%" PRIu64, b->log_id, it->id);
    json_object_object_add(o, "id", json_object_new_string(id));
    json_object_object_add(o, "due_ms", json_object_new_uint64(it->due_ms));
    json_object_object_add(o, "due", json_object_new_string(clock_iso8601(it->due_ms, iso)));
    json_object_object_add(o, "state", json_object_new_string(it->state == ENG_DUE ? "due" : "waiting"));
    json_object_object_add(o, "key", a->key ? api_json_str(a->key, a->key_len) : NULL);
    json_object_object_add(o, "routing_key", api_json_str(a->routing_key, a->routing_key_len));
    json_object_object_add(o, "size", json_object_new_uint64(a->body_len));
    json_object_object_add(o, "enqueued_ms", json_object_new_uint64(a->enqueue_ms));
    props = amqp_msg_props_json(a->props, a->props_len);
    struct json_object *mid = NULL;
    if (props && json_object_object_get_ex(props, "message_id", &mid))
        json_object_object_add(o, "message_id", json_object_get(mid));
    else
        json_object_object_add(o, "message_id", NULL);
    if (full) {
        json_object_object_add(o, "exchange", api_json_str(a->exchange, a->exchange_len));
        json_object_object_add(o, "properties", props);
        props = NULL;
    }
    json_object_put(props);
    return o;
}

static int api_pending_list(void *arg, const char *route, const char *after, unsigned limit,
                            struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), more, r;
    uint64_t after_due = 0, after_id = 0, next_due, next_id;
    struct eng_item *items;
    size_t n, i;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (after && *after) {
        char *end;
        after_due = strtoull(after, &end, 10);
        if (*end != '-' || !end[1])
            return api_fail(out, 400, "after: expected the cursor of a previous page");
        after_id = strtoull(end + 1, &end, 10);
        if (*end)
            return api_fail(out, 400, "after: expected the cursor of a previous page");
    }
    items = xmalloc(limit * sizeof(*items));
    n = eng_list(b->eng, (uint16_t)ri, after_due, after_id, items, limit, &more, &next_due,
                 &next_id);
    struct json_object *arr = json_object_new_array();
    for (i = 0; i < n; i++) {
        struct walrec_add a;
        if ((r = eng_read(b->eng, items[i].m, &a)) < 0) {
            free(items);
            json_object_put(arr);
            return api_fail(out, 500, eng_strerror(r));
        }
        json_object_array_add(arr, message_json(b, &items[i], &a, 0));
    }
    json_object_object_add(out, "route", json_object_new_string(route));
    json_object_object_add(out, "count", json_object_new_uint64(n));
    json_object_object_add(out, "messages", arr);
    if (more) {
        char cursor[48];
        snprintf(cursor, sizeof(cursor), "%" PRIu64 "-%" PRIu64, next_due, next_id);
        json_object_object_add(out, "next", json_object_new_string(cursor));
    } else {
        json_object_object_add(out, "next", NULL);
    }
    free(items);
    return 200;
}

static int api_pending_get(void *arg, const char *route, const char *key, struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;
    struct walrec_add a;
    eng_msg m;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (!(m = eng_find(b->eng, (uint16_t)ri, key, strlen(key))))
        return api_fail(out, 404, "no message with this key is pending");
    if ((r = eng_read(b->eng, m, &a)) < 0)
        return api_fail(out, 500, eng_strerror(r));
    struct eng_item it = {m, a.msg_id, a.due_ms, eng_state(b->eng, m)};
    struct json_object *msg = message_json(b, &it, &a, 1);
    json_object_object_foreach(msg, k, v) json_object_object_add(out, k, json_object_get(v));
    json_object_put(msg);
    return 200;
}

static int api_pending_cancel(void *arg, const char *route, const char *key,
                              struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    r = eng_cancel(b->eng, (uint16_t)ri, key, strlen(key));
    if (r < 0) {
        fatal(b, "WAL read (cancel)", r);
        return api_fail(out, 500, eng_strerror(r));
    }
    json_object_object_add(out, "route", api_json_str(route, strlen(route)));
    json_object_object_add(out, "key", api_json_str(key, strlen(key)));
    json_object_object_add(out, "cancelled", json_object_new_boolean(r == 1));
    if (r == 0)
        return 404; /* unknown, already published, or in flight */
    /* Durable before answering. */
    commit_and_wait(b);
    if (b->exit_code)
        return api_fail(out, 500, "WAL commit failed");
    json_object_object_add(out, "durable", json_object_new_boolean(!eng_dirty(b->eng)));
    return eng_dirty(b->eng) ? 202 : 200;
}

/*
 * POST /drain: make what was received durable and ack it, stop consuming
 * (unacked deliveries go back to the queue, to the other bridges), and from
 * the next turn on publish every held message: back to its ingress exchange
 * with what remains of its delay, or to its target if it is due.
 */
static int api_drain(void *arg, struct json_object *out)
{
    struct bridge *b = arg;
    struct eng_stats es;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (b->stopping)
        return api_fail(out, 409, "stopping");
    eng_stats(b->eng, &es);
    if (!b->drain.active) {
        commit_and_wait(b);
        if (b->exit_code)
            return api_fail(out, 500, "WAL commit failed");
        consumer_pause(b->cons);
        b->drain.active = 1;
        b->drain.started_ms = clock_now_ms();
        log_info("bridge", "drain started: consuming stopped, handing every held message back "
                 "to its ingress exchange", "held=%" PRIu64 " orphaned=%" PRIu64, es.held,
                 es.orphaned);
    }
    json_object_object_add(out, "draining", json_object_new_boolean(1));
    json_object_object_add(out, "held", json_object_new_uint64(es.held));
    json_object_object_add(out, "handed_back", json_object_new_uint64(b->drain.handed_back));
    return 202;
}

static int api_purge(void *arg, const char *route, const char *due_before,
                     struct json_object *out)
{
    struct bridge *b = arg;
    int ri = route_by_name(b, route), r;
    uint64_t before = UINT64_MAX;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    if (ri < 0)
        return api_fail(out, 404, "no such route");
    if (due_before && *due_before && clock_parse(due_before, &before) < 0)
        return api_fail(out, 400, "due_before: expected ms since the epoch or ISO 8601 UTC");
    if (b->purge.active)
        return api_fail(out, 409, "a purge is already running (see /stats)");
    eng_purge_begin(b->eng, &b->purge.job, (uint16_t)ri, before);
    b->purge.started = 1;
    b->purge.active = 1;
    log_info("bridge", "purge started", "route=%s due_before_ms=%" PRIu64, route,
             before == UINT64_MAX ? 0 : before);
    r = eng_purge_step(b->eng, &b->purge.job, PURGE_AT_ONCE);
    if (r < 0) {
        fatal(b, "WAL read (purge)", r);
        return api_fail(out, 500, eng_strerror(r));
    }
    if (r == 0) {
        b->purge.active = 0;
        commit_and_wait(b);
        log_info("bridge", "purge done", "route=%s removed=%" PRIu64, route,
                 b->purge.job.removed);
    }
    json_object_object_add(out, "route", json_object_new_string(route));
    json_object_object_add(out, "removed", json_object_new_uint64(b->purge.job.removed));
    json_object_object_add(out, "done", json_object_new_boolean(r == 0));
    return r == 0 ? 200 : 202;
}

/* GET /due: what falls due ahead, from the wheel's counters (no WAL read). */
static int api_due(void *arg, struct json_object *out)
{
    struct bridge *b = arg;
    struct duecount_view v;

    if (!b->eng)
        return api_fail(out, 503, "recovering");
    uint64_t now = clock_now_ms();
    eng_due_view(b->eng, now, &v);
    ui_due_json(&v, now, out);
    return 200;
}

static void on_http(void *arg, const struct api_request *req, struct api_response *resp)
{
    struct api_ops ops = {api_stats, api_pending_list, api_pending_get, api_pending_cancel,
                          api_purge, api_drain, arg, api_due};

    api_handle(&ops, req, resp);
}

#define HTTP_TOKEN_ENV "DELAY_BRIDGE_HTTP_TOKEN"

static int start_http(struct bridge *b)
{
    const struct config *cfg = b->cfg;
    const char *token = getenv(HTTP_TOKEN_ENV);
    struct http_opts o = {cfg->http_host, cfg->http_port, token, 0, 0};
    char err[512];

    if (!cfg->http_listen[0])
        return 0;
    if (http_start(&b->http, b->loop, &o, on_http, b, err, sizeof(err)) < 0) {
        log_error("http", "cannot start the HTTP endpoint", "listen=\"%s\" error=\"%s\"",
                  cfg->http_listen, err);
        return -1;
    }
    log_info("http", "serving", "listen=\"%s\" port=%u auth=%s", cfg->http_listen,
             (unsigned)http_port(b->http), token && *token ? "bearer" : "none");
    if (cfg->http_allow_remote && !(token && *token))
        log_warn("http", "the endpoint is reachable beyond this host without a token",
                 "hint=\"set " HTTP_TOKEN_ENV "\"");
    return 0;
}

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

/* ---- recovery ---------------------------------------------------------------------- */

/* Route names found in the log -> route index. */
static int route_index(void *arg, const char *name, size_t len)
{
    const struct config *cfg = arg;
    int i;

    for (i = 0; i < cfg->nroutes; i++)
        if (strlen(cfg->routes[i].name) == len && memcmp(cfg->routes[i].name, name, len) == 0)
            return i;
    return -1;
}

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

static void on_recovered(struct ev_loop *loop, ev_async *w, int revents)
{
    struct bridge *b = w->data;
    static const struct consumer_ops cops = {on_delivery, on_consumer_state, NULL};
    static const struct publisher_ops pops = {on_confirmed, on_route_lost, NULL};
    struct consumer_ops co = cops;
    struct publisher_ops po = pops;
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
                  eng_strerror(r));
        b->exit_code =
            r == ENG_ECORRUPT || r == ENG_ELOCKED || r == ENG_EFORMAT ? EXIT_WAL : EXIT_FATAL;
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
    co.arg = b;
    po.arg = b;
    b->cons = consumer_new(loop, b->cfg, &co);
    b->pub = publisher_new(loop, b->cfg, &po);
}

static int start_recovery(struct bridge *b, struct wlog *log)
{
    int r;

    uint32_t recent = 0;
    for (int i = 0; i < b->cfg->nroutes; i++)
        if (b->cfg->routes[i].prefetch > recent)
            recent = b->cfg->routes[i].prefetch;
    b->rec.opts = (struct eng_opts){.log = log,
                                    .nroutes = b->cfg->nroutes,
                                    .route_index = route_index,
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
    b->counts = xcalloc((size_t)cfg->nroutes, sizeof(*b->counts));
    b->snap = xcalloc((size_t)cfg->nroutes, sizeof(*b->snap));
    signal(SIGPIPE, SIG_IGN);

    ev_prepare_init(&b->prepare, on_prepare);
    b->prepare.data = b;
    ev_prepare_start(loop, &b->prepare);
    ev_timer_init(&b->wake, on_wake, 0.0, 0.0);
    b->wake.data = b;
    ev_timer_start(loop, &b->wake);
    ev_signal_init(&b->sigterm, on_signal, SIGTERM);
    b->sigterm.data = b;
    ev_signal_start(loop, &b->sigterm);
    ev_signal_init(&b->sigint, on_signal, SIGINT);
    b->sigint.data = b;
    ev_signal_start(loop, &b->sigint);
    if (start_http(b) < 0 || start_recovery(b, log) < 0) {
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

void bridge_stats(struct bridge *b, struct db_stats *s)
{
    struct eng_stats es;
    int i;

    memset(s, 0, sizeof(*s));
    memset(&es, 0, sizeof(es));
    if (b->eng)
        eng_stats(b->eng, &es);
    s->version = DB_VERSION;
    s->instance = b->cfg->instance;
    s->now_ms = clock_now_ms();
    s->start_ms = b->start_ms;
    s->loop_turn_ms = b->turn_ms;
    s->recovered = b->eng != NULL;
    if (b->eng) {
        s->recovery_seconds = es.recovery_seconds;
        s->recovery_progress = 1.0;
    } else {
        uint64_t done = atomic_load(&b->rec.progress.done);
        uint64_t total = atomic_load(&b->rec.progress.total);
        s->recovery_seconds = (double)(s->now_ms - b->start_ms) / 1000.0;
        s->recovery_progress = total ? (double)done / (double)total : 0.0;
    }
    s->consumer = b->cons && consumer_up(b->cons) ? DB_CONN_UP : DB_CONN_DOWN;
    s->publisher = !b->pub || !publisher_up(b->pub) ? DB_CONN_DOWN
                   : publisher_blocked(b->pub)      ? DB_CONN_BLOCKED
                                                    : DB_CONN_UP;
    s->stopping = b->stopping;
    s->held = es.held;
    s->orphaned = es.orphaned;
    s->drain.active = b->drain.active;
    s->drain.done = b->drain.done;
    s->drain.handed_back = b->drain.handed_back;
    s->drain.remaining = es.held - es.orphaned;
    s->next_due_ms = es.next_due_ms;
    s->ram_bytes = es.ram_bytes;
    s->rss_bytes = rss_bytes();
    s->wal.segments = es.log_segments;
    s->wal.disk_bytes = es.log_disk_bytes;
    s->wal.live_bytes = es.log_live_bytes;
    s->wal.live_records = es.log_live_records;
    s->wal.commits = es.log_commits;
    s->wal.appended_bytes = es.log_appended_bytes;
    s->wal.compacted_bytes = es.log_compacted_bytes;
    s->wal.failed = es.log_failed != 0;
    s->wal.no_space = b->disk_full || es.log_no_space;
    s->wal.writable = !s->wal.failed && !s->wal.no_space;
    s->wal.fsync = es.fsync;
    s->wal.compact_segment = es.compact_segment;
    s->wal.compact_progress =
        es.compact_total ? (double)es.compact_done / (double)es.compact_total : 0.0;
    s->wal.ckpt_state = es.ckpt_state == WLOG_CKPT_WRITING   ? "writing"
                        : es.ckpt_state == WLOG_CKPT_SEALING ? "sealing"
                                                             : "idle";
    s->wal.ckpt_progress =
        es.ckpt_total ? (double)es.ckpt_walked / (double)es.ckpt_total : 0.0;
    s->wal.ckpt_installed = es.ckpt_installed;
    s->wal.ckpt_failed = es.ckpt_failed;
    s->wal.ckpt_lsn = es.ckpt_lsn;
    s->wal.ckpt_bytes = es.ckpt_bytes;
    s->wal.ckpt_age_seconds = (double)es.ckpt_age_ms / 1000.0;
    s->wal.ckpt_seconds = es.ckpt_seconds;
    s->wal.ckpt_used_at_start = es.ckpt_loaded_lsn != 0;
    struct wlog_repl_stats rs;
    memset(&rs, 0, sizeof(rs));
    if (b->rec.opts.log && wlog_repl_stats(b->rec.opts.log, &rs)) {
        static const char *const names[] = {"off", "connecting", "standby", "importing",
                                            "owner", "failed"};
        s->wal.repl = 1;
        s->wal.repl_state = rs.state >= 0 && rs.state <= WLOG_REPL_FAILED ? names[rs.state] : "?";
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
        if (rs.state == WLOG_REPL_FAILED)
            s->wal.writable = 0;
    }
    if (b->purge.started) {
        const struct eng_purge *j = &b->purge.job;
        s->purge.started = 1;
        s->purge.done = !b->purge.active;
        s->purge.route = b->cfg->routes[j->route].name;
        s->purge.due_before = j->due_before;
        s->purge.removed = j->removed;
        s->purge.progress = j->end > 1 ? (double)(j->cursor - 1) / (double)(j->end - 1) : 1.0;
    }
    for (i = 0; i < b->cfg->nroutes; i++) {
        struct db_route_stats *r = &b->snap[i];
        const struct route_counts *n = &b->counts[i];
        struct eng_route_stats ers;

        memset(r, 0, sizeof(*r));
        r->name = b->cfg->routes[i].name;
        r->target_exchange = b->cfg->routes[i].target_exchange;
        r->received = n->received;
        r->rejected = n->rejected;
        r->invalid_delay = n->invalid_delay;
        r->invalid_key = n->invalid_key;
        r->deduplicated = n->deduplicated;
        r->key_events_sent = n->key_events_sent;
        r->key_events_received = n->key_events_received;
        r->key_events_applied = n->key_events_applied;
        r->dead_lettered = n->dead_lettered;
        if (b->pub)
            publisher_route_stats(b->pub, i, r);
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
    }
    s->nroutes = b->cfg->nroutes;
    s->routes = b->snap;
}

static void log_summary(struct bridge *b)
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
        log_summary(b);
    http_stop(b->http);
    consumer_free(b->cons);
    publisher_free(b->pub);
    if (b->eng)
        eng_set_notify(b->eng, NULL, NULL);
    ev_async_stop(b->loop, &b->rec.log_ready);
    ev_prepare_stop(b->loop, &b->prepare);
    ev_timer_stop(b->loop, &b->wake);
    ev_signal_stop(b->loop, &b->sigterm);
    ev_signal_stop(b->loop, &b->sigint);
    free(b->counts);
    free(b->snap);
    free(b->props_buf);
    free(b->hdr_scratch);
    eng_close(b->eng);
    free(b);
}
