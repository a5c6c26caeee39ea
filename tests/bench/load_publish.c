/*
 * load_publish.c -- publish N stamped messages as fast as a window of
 * publisher confirms allows, and print one key=value summary line.
 *
 *   load_publish --uri URI --count N [--mode plain|xdelay|ttl|deliverytime]
 *                [--exchange X] [--routing-key K] [--delay MIN[-MAX]]
 *                [--due-at MS --spread MS] [--size B | --mix]
 *                [--window W] [--tag T] [--transient] [--seed S] [--rate R]
 *
 * Modes (where the delay goes):
 *   plain   no delay: due = publish time (the broker's end-to-end ceiling)
 *   xdelay  header x-delay = delay ms (delay-bridge, or the plugin)
 *   deliverytime  header x-opt-delivery-time = send time + delay, epoch ms
 *           rounded up (a long): a quorum queue's own delay (rabbitmq-server's qq-vNext,
 *           the 4.4 line), published to --exchange as plain messages are
 *   ttl     property expiration = delay ms, published through the default
 *           exchange to --ttl-queue, which this tool declares with
 *           x-dead-letter-exchange = --exchange and
 *           x-dead-letter-routing-key = --routing-key (the TTL + DLX recipe)
 *
 * Delay of each message: uniform in [MIN, MAX] ms (--delay, default 0), or,
 * with --due-at, a due time uniform in [due-at, due-at + spread] and the
 * delay computed from the clock at publish (used to make a burst fall due
 * together however long publishing takes).
 *
 * --stamp (xdelay): also header timestamp_in_ms = the send time in epoch ms,
 * what RabbitMQ 3.12+ stamps on receipt with message_interceptors
 * .incoming.set_header_timestamp (a route with delay_from "broker" counts
 * the delay from it). The send time is earlier than the broker's receipt
 * by the socket's backlog, so this is the best case of that setting.
 *
 * --like-bridge: the headers and flags of delay-bridge's republish (x-delay
 * = -delay as a 32-bit integer, x-delay-bridge-id, mandatory), to tell the
 * broker's cost of those from that of the bridge's way of publishing
 * (tests/bench/hops.sh); --bridge-headers or --mandatory: one of the two;
 * --bridge-id u64|none: the id header as a 64-bit integer, or left out
 * (what a string header value costs the broker: tests/bench/README.md).
 *
 * Body: the stamp of load_common.h (seq, intended due time, publish time),
 * then filler to --size bytes (default 256); --mix draws 256 B or 4 KiB
 * with equal odds. Messages are persistent unless --transient.
 *
 * --rate R: open loop, the way real publishers load a broker: message i is
 * sent at start + i / R seconds (R msg/s), whatever the confirms do, unless
 * the window is full; a publisher that falls behind its schedule sends at
 * once to catch up and reports how far behind it fell (behind_max_ms). It
 * waits for its next slot reading confirms, to the microsecond (ppoll).
 * Without --rate it publishes as fast as the window allows (saturation).
 *
 * Confirms: at most --window (default 1000) unconfirmed publishes; the
 * delivery tags are tracked in a ring so single and multiple acks in any
 * order are counted exactly. The rate is count / (time from the first
 * publish to the last confirm): what the broker accepted, durably queued.
 *
 * Summary (stdout, one line):
 *   load_publish mode=xdelay count=N bytes=B seconds=S rate=R nacked=0 ...
 * Exit 0 when every message was confirmed (nacks are counted, not fatal),
 * 2 on any error.
 */
#define _GNU_SOURCE 1 /* ppoll */
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_common.h"

static const char *prog = "load_publish";

struct opts {
    struct load_common c; /* --uri, --exchange, --routing-key, --count, --tag */
    const char *mode;
    const char *ttl_queue;
    uint64_t delay_min, delay_max;
    uint64_t due_at, spread;
    uint64_t size;
    bool mix;
    uint64_t window;
    uint64_t seed;
    bool transient;
    bool bridge_headers, mandatory, stamp;
    uint64_t rate; /* msg/s, open loop; 0 = as fast as the window allows */
    const char *bridge_id; /* "string" (default), "u64", "none" */
};

/* Confirm window: tags (floor, next] are outstanding; done[] marks acked ones. */
struct window {
    uint64_t floor;     /* every tag <= floor is confirmed */
    uint64_t next;      /* last tag published */
    uint64_t size;
    unsigned char *done;
    uint64_t acked, nacked;
};

static void win_mark(struct window *w, uint64_t tag, bool multiple, bool nack)
{
    if (tag > w->next)
        load_die(prog, "confirm for tag %llu beyond the last published %llu",
                 (unsigned long long)tag, (unsigned long long)w->next);
    uint64_t from = multiple ? w->floor + 1 : tag;
    for (uint64_t t = from; t <= tag; t++) {
        if (t <= w->floor || w->done[t % w->size])
            continue;
        w->done[t % w->size] = 1;
        if (nack)
            w->nacked++;
        else
            w->acked++;
    }
    while (w->floor < w->next && w->done[(w->floor + 1) % w->size]) {
        w->floor++;
        w->done[w->floor % w->size] = 0;
    }
}

/* Read one frame (block up to timeout_ms, 0 = poll) and count confirms. 1 = a frame, 0 = none. */
static int read_frame(amqp_connection_state_t c, struct window *w, int timeout_ms)
{
    amqp_frame_t f;
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT)
        return 0;
    if (rc != AMQP_STATUS_OK)
        load_die(prog, "reading confirms: %s", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD)
        return 1;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        amqp_basic_ack_t *a = f.payload.method.decoded;
        win_mark(w, a->delivery_tag, a->multiple, false);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        amqp_basic_nack_t *n = f.payload.method.decoded;
        win_mark(w, n->delivery_tag, n->multiple, true);
        break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_t *m = f.payload.method.decoded;
        load_die(prog, "channel closed by broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
                 (char *)m->reply_text.bytes);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_connection_close_t *m = f.payload.method.decoded;
        load_die(prog, "connection closed by broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
    }
    case AMQP_CONNECTION_BLOCKED_METHOD:
        fprintf(stderr, "%s: broker blocked the connection (resource alarm)\n", prog);
        break;
    default:
        break;
    }
    return 1;
}

static bool socket_readable(amqp_connection_state_t c)
{
    if (amqp_data_in_buffer(c) || amqp_frames_enqueued(c))
        return true;
    struct pollfd p = { .fd = amqp_get_sockfd(c), .events = POLLIN };
    return poll(&p, 1, 0) > 0;
}

/* Until the monotonic time at_us, reading confirms as they come. */
static void wait_until(amqp_connection_state_t c, struct window *w, uint64_t at_us)
{
    for (;;) {
        uint64_t now = load_mono_us();
        if (now >= at_us)
            return;
        if (amqp_data_in_buffer(c) || amqp_frames_enqueued(c)) {
            read_frame(c, w, 0);
            continue;
        }
        struct pollfd p = { .fd = amqp_get_sockfd(c), .events = POLLIN };
        uint64_t left = at_us - now;
        struct timespec ts = { .tv_sec = (time_t)(left / 1000000u),
                               .tv_nsec = (long)(left % 1000000u) * 1000 };
        if (ppoll(&p, 1, &ts, NULL) > 0)
            read_frame(c, w, 0);
    }
}

static void usage(void)
{
    fprintf(stderr,
            "usage: %s --uri URI --count N [--mode plain|xdelay|ttl|deliverytime] [--exchange X]\n"
            "       [--routing-key K] [--ttl-queue Q] [--delay MIN[-MAX]] [--due-at MS --spread MS]\n"
            "       [--size B | --mix] [--window W] [--tag T] [--seed S] [--transient]\n"
            "       [--like-bridge | --bridge-headers | --mandatory] [--bridge-id string|u64|none]\n"
            "       [--stamp] [--rate R]\n",
            prog);
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){ .c = LOAD_COMMON_DEFAULTS, .mode = "xdelay", .ttl_queue = "bench.ttl",
                        .size = 256, .window = 1000, .seed = 1 };
    o->c.exchange = "";
    static const char *const bridge_ids[] = { "string", "u64", "none", NULL };
    const struct load_opt opts[] = {
        LOAD_COMMON_OPTS(&o->c),
        { "--mix", LOAD_OPT_FLAG, &o->mix, NULL, NULL },
        { "--transient", LOAD_OPT_FLAG, &o->transient, NULL, NULL },
        { "--like-bridge", LOAD_OPT_FLAG, &o->bridge_headers, &o->mandatory, NULL },
        { "--bridge-headers", LOAD_OPT_FLAG, &o->bridge_headers, NULL, NULL },
        { "--stamp", LOAD_OPT_FLAG, &o->stamp, NULL, NULL },
        { "--mandatory", LOAD_OPT_FLAG, &o->mandatory, NULL, NULL },
        { "--mode", LOAD_OPT_STR, &o->mode, NULL, NULL },
        { "--ttl-queue", LOAD_OPT_STR, &o->ttl_queue, NULL, NULL },
        { "--delay", LOAD_OPT_RANGE, &o->delay_min, &o->delay_max, NULL },
        { "--due-at", LOAD_OPT_U64, &o->due_at, NULL, NULL },
        { "--spread", LOAD_OPT_U64, &o->spread, NULL, NULL },
        { "--size", LOAD_OPT_U64, &o->size, NULL, NULL },
        { "--window", LOAD_OPT_U64, &o->window, NULL, NULL },
        { "--bridge-id", LOAD_OPT_CHOICE, &o->bridge_id, NULL, bridge_ids },
        { "--seed", LOAD_OPT_U64, &o->seed, NULL, NULL },
        { "--rate", LOAD_OPT_U64, &o->rate, NULL, NULL },
    };
    load_parse_opts(prog, argc, argv, opts, sizeof opts / sizeof opts[0], usage);
    o->seed |= 1;
    if (strcmp(o->mode, "plain") && strcmp(o->mode, "xdelay") && strcmp(o->mode, "ttl") &&
        strcmp(o->mode, "deliverytime"))
        load_die(prog, "--mode %s: expected plain, xdelay, ttl or deliverytime", o->mode);
    if (o->size < LOAD_HDR)
        load_die(prog, "--size %llu: at least %d bytes", (unsigned long long)o->size, LOAD_HDR);
    if (o->window < 1 || o->window > 1000000)
        load_die(prog, "--window: 1..1000000");
    if (o->c.tag > UINT32_MAX)
        load_die(prog, "--tag: at most %u", UINT32_MAX);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    bool ttl = !strcmp(o.mode, "ttl"), xdelay = !strcmp(o.mode, "xdelay");
    bool dtime = !strcmp(o.mode, "deliverytime");

    amqp_connection_state_t c = load_connect(prog, o.c.uri);

    if (ttl) {
        amqp_table_entry_t e[2];
        e[0].key = amqp_cstring_bytes("x-dead-letter-exchange");
        e[0].value.kind = AMQP_FIELD_KIND_UTF8;
        e[0].value.value.bytes = amqp_cstring_bytes(o.c.exchange);
        e[1].key = amqp_cstring_bytes("x-dead-letter-routing-key");
        e[1].value.kind = AMQP_FIELD_KIND_UTF8;
        e[1].value.value.bytes = amqp_cstring_bytes(o.c.routing_key);
        amqp_table_t args = { .num_entries = 2, .entries = e };
        amqp_queue_declare(c, 1, amqp_cstring_bytes(o.ttl_queue), 0, 1, 0, 0, args);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.declare (ttl queue)");
    }
    amqp_confirm_select(c, 1);
    load_check_reply(prog, amqp_get_rpc_reply(c), "confirm.select");

    struct window w = { .size = o.window + 1 };
    w.done = calloc(w.size, 1);
    uint64_t maxsize = o.mix ? 4096 : o.size;
    unsigned char *body = malloc(maxsize);
    if (!w.done || !body)
        load_die(prog, "out of memory");
    for (uint64_t i = 0; i < maxsize; i++)
        body[i] = (unsigned char)('a' + i % 26);

    amqp_bytes_t exchange = amqp_cstring_bytes(ttl ? "" : o.c.exchange);
    amqp_bytes_t rkey = amqp_cstring_bytes(ttl ? o.ttl_queue : o.c.routing_key);
    amqp_table_entry_t hdr[2];
    hdr[0].key = amqp_cstring_bytes("x-delay");
    hdr[0].value.kind = AMQP_FIELD_KIND_I64;
    hdr[1].key = amqp_cstring_bytes("timestamp_in_ms");
    hdr[1].value.kind = AMQP_FIELD_KIND_I64;
    amqp_table_entry_t dt;
    dt.key = amqp_cstring_bytes("x-opt-delivery-time");
    dt.value.kind = AMQP_FIELD_KIND_I64;
    amqp_table_entry_t bh[2];
    char expiration[32];

    uint64_t rng = o.seed * 0x9E3779B97F4A7C15ULL | 1;
    uint64_t bytes = 0, t0 = load_mono_us(), last_poll = 0, behind_max = 0;
    for (uint64_t seq = 0; seq < o.c.count; seq++) {
        if (o.rate) {
            uint64_t slot = t0 + seq * 1000000u / o.rate, now = load_mono_us();
            if (now < slot)
                wait_until(c, &w, slot);
            else if (now - slot > behind_max)
                behind_max = now - slot;
        }
        while (w.next - w.floor >= o.window)
            if (!read_frame(c, &w, 30000))
                load_die(prog, "no confirm within 30 s");
        if (seq - last_poll >= 64) {
            last_poll = seq;
            while (socket_readable(c) && read_frame(c, &w, 0))
                ;
            amqp_maybe_release_buffers(c);
        }
        uint64_t now_us = load_now_us(), now_ms = now_us / 1000;
        int64_t delay;
        uint64_t due;
        if (o.due_at) {
            due = o.due_at + (o.spread ? load_rand(&rng) % (o.spread + 1) : 0);
            delay = (int64_t)due - (int64_t)now_ms;
            if (delay < 0)
                delay = 0;
        } else {
            uint64_t span = o.delay_max - o.delay_min;
            delay = (int64_t)(o.delay_min + (span ? load_rand(&rng) % (span + 1) : 0));
            due = now_ms + (uint64_t)delay;
        }
        if (!strcmp(o.mode, "plain")) {
            due = now_ms;
            delay = 0;
        }
        size_t len = o.mix ? ((load_rand(&rng) >> 33) & 1 ? 4096 : 256) : o.size;
        struct load_stamp s = { .magic = LOAD_MAGIC, .tag = (uint32_t)o.c.tag, .seq = seq,
                                .due_ms = due, .pub_us = now_us };
        load_stamp_put(body, &s);

        amqp_basic_properties_t p;
        memset(&p, 0, sizeof p);
        p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.delivery_mode = o.transient ? 1 : 2;
        p.content_type = amqp_cstring_bytes("application/octet-stream");
        if (xdelay) {
            hdr[0].value.value.i64 = delay;
            hdr[1].value.value.i64 = (int64_t)now_ms;
            p._flags |= AMQP_BASIC_HEADERS_FLAG;
            p.headers.num_entries = o.stamp ? 2 : 1;
            p.headers.entries = hdr;
        } else if (dtime) {
            /* send time + delay rounded up to a whole ms: never before what
             * the consumer's stamp counts from (pub_us + delay) */
            dt.value.value.i64 = (int64_t)((now_us + (uint64_t)delay * 1000u + 999u) / 1000u);
            p._flags |= AMQP_BASIC_HEADERS_FLAG;
            p.headers.num_entries = 1;
            p.headers.entries = &dt;
        } else if (ttl) {
            snprintf(expiration, sizeof expiration, "%lld", (long long)delay);
            p._flags |= AMQP_BASIC_EXPIRATION_FLAG;
            p.expiration = amqp_cstring_bytes(expiration);
        }
        char id[48];
        if (o.bridge_headers) {
            /* what delay-bridge's republish carries: x-delay = -delay, its id */
            snprintf(id, sizeof id, "6f1c2a9e0b7d4e35-%llu", (unsigned long long)seq + 1);
            bh[0].key = amqp_cstring_bytes("x-delay");
            bh[0].value.kind = AMQP_FIELD_KIND_I32;
            bh[0].value.value.i32 = -(int32_t)(delay ? delay : 4000);
            bh[1].key = amqp_cstring_bytes("x-delay-bridge-id");
            bh[1].value.kind = AMQP_FIELD_KIND_UTF8;
            bh[1].value.value.bytes = amqp_cstring_bytes(id);
            p._flags |= AMQP_BASIC_HEADERS_FLAG;
            p.headers.num_entries = 2;
            p.headers.entries = bh;
            if (o.bridge_id && !strcmp(o.bridge_id, "u64")) {
                bh[1].value.kind = AMQP_FIELD_KIND_U64;
                bh[1].value.value.u64 = seq + 1;
            } else if (o.bridge_id && !strcmp(o.bridge_id, "none")) {
                p.headers.num_entries = 1;
            }
        }
        int rc = amqp_basic_publish(c, 1, exchange, rkey, o.mandatory, 0, &p,
                                    (amqp_bytes_t){ .len = len, .bytes = body });
        if (rc != AMQP_STATUS_OK)
            load_die(prog, "basic.publish: %s", amqp_error_string2(rc));
        w.next++;
        bytes += len;
    }
    while (w.floor < w.next)
        if (!read_frame(c, &w, 60000))
            load_die(prog, "no confirm within 60 s (%llu of %llu confirmed)",
                     (unsigned long long)w.floor, (unsigned long long)w.next);
    uint64_t t1 = load_mono_us();
    double secs = (double)(t1 - t0) / 1e6;

    printf("load_publish mode=%s count=%llu bytes=%llu size=%s window=%llu seconds=%.3f "
           "rate=%.0f mb_per_s=%.1f acked=%llu nacked=%llu end_ms=%llu target_rate=%llu "
           "behind_max_ms=%.1f\n",
           o.mode, (unsigned long long)o.c.count, (unsigned long long)bytes,
           o.mix ? "mix" : "fixed", (unsigned long long)o.window, secs,
           secs > 0 ? (double)o.c.count / secs : 0.0, secs > 0 ? (double)bytes / secs / 1e6 : 0.0,
           (unsigned long long)w.acked, (unsigned long long)w.nacked,
           (unsigned long long)(load_now_us() / 1000), (unsigned long long)o.rate,
           (double)behind_max / 1000.0);
    fflush(stdout);
    load_close(c);
    free(w.done);
    free(body);
    return 0;
}
