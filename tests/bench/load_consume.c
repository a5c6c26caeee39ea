/*
 * load_consume.c -- consume the stamped messages of load_publish and print
 * their lateness (receive time - intended due time) as one key=value line.
 *
 *   load_consume --uri URI --queue Q --count N [--exchange X --routing-key K]
 *                [--exchange-type T [--delayed-type D]] [--purge] [--tag T]
 *                [--ready-file F] [--first-wait S] [--idle S] [--dump FILE]
 *                [--manual-ack N [--prefetch P]] [--queue-type T] [--queue-version V]
 *
 * With --exchange, declares X (durable; direct, or of --exchange-type T,
 * with argument x-delayed-type D when --delayed-type D is given: the
 * delayed-message plugin's exchange, run.sh's plugin rows) and Q (durable;
 * with x-queue-type T and x-queue-version V when given), binds Q to X with K;
 * --purge empties Q before consuming. Then consumes with automatic acks
 * (the broker's fastest path, so the consumer is never the bottleneck of a
 * figure) -- or, with --manual-ack N, the way delay-bridge takes its
 * ingress: basic.qos prefetch P (default 1000) and one multiple ack every
 * N messages and when the queue goes quiet (tests/bench/hops.sh compares
 * the two); with --ack-every-ms T as well, the quiet queue no longer acks
 * at once: one multiple ack once T ms passed since the last (or N were
 * taken), as the bridge acks after each paced commit (wal.commit_interval_ms,
 * ontime.sh's "both hops, the bridge's timing") -- touches --ready-file once basic.consume-ok arrived, and
 * stops when N distinct messages of --tag arrived, or when nothing arrived
 * for --idle seconds (default 30) once the first message came, or for
 * --first-wait seconds (default 600) before it.
 *
 * Summary (stdout, one line; lateness in ms, negative = early):
 *   load_consume queue=Q expected=N received=N unique=N dup=0 foreign=0
 *     early=0 seconds=S rate=R first_recv_ms=.. last_recv_ms=..
 *     min_due_ms=.. max_due_ms=.. lat_min_ms=.. lat_p50_ms=.. lat_p90_ms=..
 *     lat_p99_ms=.. lat_p999_ms=.. lat_max_ms=.. lat_mean_ms=..
 *   rate = unique / (last receive - first receive).
 *   Lateness is to the microsecond, against the publisher's send time +
 *   delay (the stamp keeps the due time in whole ms and the send time in us:
 *   due_us = due_ms * 1000 + send_us % 1000, because the delay it sent was
 *   due_ms - floor(send_us / 1000)). Nothing that delays from its own
 *   receipt, later than the send, may deliver before it: early counts the
 *   messages that did, lat_min_ms says by how much (3 decimals).
 * Exit 0 when all N arrived, 1 when some are missing, 2 on an error.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load_common.h"

static const char *prog = "load_consume";

struct opts {
    struct load_common c; /* --uri, --exchange, --routing-key, --count, --tag */
    const char *queue, *ready_file, *dump, *queue_type, *exchange_type, *delayed_type;
    uint64_t first_wait, idle, manual_ack, prefetch, queue_version, ack_every_ms;
    bool purge;
};

static void usage(void)
{
    fprintf(stderr,
            "usage: %s --uri URI --queue Q --count N [--exchange X --routing-key K]\n"
            "       [--exchange-type T [--delayed-type D]] [--purge] [--tag T] [--ready-file F]\n"
            "       [--first-wait S] [--idle S] [--dump FILE] [--manual-ack N [--prefetch P]]\n"
            "       [--ack-every-ms T] [--queue-type T] [--queue-version V]\n",
            prog);
    exit(2);
}

static void parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){ .c = LOAD_COMMON_DEFAULTS, .queue = "bench.out", .first_wait = 600,
                        .idle = 30, .prefetch = 1000, .exchange_type = "direct" };
    const struct load_opt opts[] = {
        LOAD_COMMON_OPTS(&o->c),
        { "--purge", LOAD_OPT_FLAG, &o->purge, NULL, NULL },
        { "--queue", LOAD_OPT_STR, &o->queue, NULL, NULL },
        { "--ready-file", LOAD_OPT_STR, &o->ready_file, NULL, NULL },
        { "--dump", LOAD_OPT_STR, &o->dump, NULL, NULL },
        { "--first-wait", LOAD_OPT_U64, &o->first_wait, NULL, NULL },
        { "--idle", LOAD_OPT_U64, &o->idle, NULL, NULL },
        { "--manual-ack", LOAD_OPT_U64, &o->manual_ack, NULL, NULL },
        { "--prefetch", LOAD_OPT_U64, &o->prefetch, NULL, NULL },
        { "--ack-every-ms", LOAD_OPT_U64, &o->ack_every_ms, NULL, NULL },
        { "--queue-type", LOAD_OPT_STR, &o->queue_type, NULL, NULL },
        { "--exchange-type", LOAD_OPT_STR, &o->exchange_type, NULL, NULL },
        { "--delayed-type", LOAD_OPT_STR, &o->delayed_type, NULL, NULL },
        { "--queue-version", LOAD_OPT_U64, &o->queue_version, NULL, NULL },
    };
    load_parse_opts(prog, argc, argv, opts, sizeof opts / sizeof opts[0], usage);
    if (!o->c.count)
        load_die(prog, "--count N (N >= 1) is required");
    if (o->ack_every_ms && !o->manual_ack)
        load_die(prog, "--ack-every-ms needs --manual-ack N");
}

int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    amqp_connection_state_t c = load_connect(prog, o.c.uri);
    amqp_bytes_t q = amqp_cstring_bytes(o.queue);

    if (o.c.exchange) {
        amqp_table_entry_t xa[1];
        amqp_table_t xargs = {0, xa};
        if (o.delayed_type) {
            xa[0].key = amqp_cstring_bytes("x-delayed-type");
            xa[0].value.kind = AMQP_FIELD_KIND_UTF8;
            xa[0].value.value.bytes = amqp_cstring_bytes(o.delayed_type);
            xargs.num_entries = 1;
        }
        amqp_exchange_declare(c, 1, amqp_cstring_bytes(o.c.exchange),
                              amqp_cstring_bytes(o.exchange_type), 0, 1, 0, 0, xargs);
        load_check_reply(prog, amqp_get_rpc_reply(c), "exchange.declare");
        amqp_table_entry_t qa[2];
        amqp_table_t qargs = {0, qa};
        if (o.queue_type) {
            qa[qargs.num_entries].key = amqp_cstring_bytes("x-queue-type");
            qa[qargs.num_entries].value.kind = AMQP_FIELD_KIND_UTF8;
            qa[qargs.num_entries++].value.value.bytes = amqp_cstring_bytes(o.queue_type);
        }
        if (o.queue_version) {
            qa[qargs.num_entries].key = amqp_cstring_bytes("x-queue-version");
            qa[qargs.num_entries].value.kind = AMQP_FIELD_KIND_I64;
            qa[qargs.num_entries++].value.value.i64 = (int64_t)o.queue_version;
        }
        amqp_queue_declare(c, 1, q, 0, 1, 0, 0, qargs);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.declare");
        amqp_queue_bind(c, 1, q, amqp_cstring_bytes(o.c.exchange),
                        amqp_cstring_bytes(o.c.routing_key), amqp_empty_table);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.bind");
    }
    if (o.purge) {
        amqp_queue_purge(c, 1, q);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.purge");
    }
    if (o.manual_ack) {
        amqp_basic_qos(c, 1, 0, (uint16_t)(o.prefetch > 65535 ? 65535 : o.prefetch), 0);
        load_check_reply(prog, amqp_get_rpc_reply(c), "basic.qos");
    }
    amqp_basic_consume(c, 1, q, amqp_empty_bytes, 0, o.manual_ack ? 0 : 1 /* no_ack */, 0,
                       amqp_empty_table);
    load_check_reply(prog, amqp_get_rpc_reply(c), "basic.consume");
    if (o.ready_file) {
        FILE *f = fopen(o.ready_file, "w");
        if (!f)
            load_die(prog, "cannot write %s: %s", o.ready_file, strerror(errno));
        fclose(f);
    }

    double *lat = malloc(o.c.count * sizeof *lat);
    unsigned char *seen = calloc((o.c.count + 7) / 8, 1);
    if (!lat || !seen)
        load_die(prog, "out of memory");
    uint64_t received = 0, unique = 0, dup = 0, foreign = 0, early = 0;
    uint64_t first_us = 0, last_us = 0, min_due = UINT64_MAX, max_due = 0;
    uint64_t last_activity = load_mono_us(), unacked = 0, last_tag = 0, last_ack = 0;

    while (unique < o.c.count) {
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = 1 }, quick = { .tv_usec = 0 };
        uint64_t mono = load_mono_us(), next_ack = last_ack + o.ack_every_ms * 1000u;
        if (unacked && o.ack_every_ms) /* wait for a delivery no longer than the next ack */
            quick.tv_usec = next_ack > mono ? (long)(next_ack - mono) : 0;
        if (unacked && o.ack_every_ms && mono >= next_ack) {
            amqp_basic_ack(c, 1, last_tag, 1); /* the paced commit's ack */
            unacked = 0;
            last_ack = mono;
            continue;
        }
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, unacked ? &quick : &tv, 0);
        if (unacked && !o.ack_every_ms && r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT) {
            /* nothing more buffered: settle what was taken, as the bridge does per commit */
            amqp_basic_ack(c, 1, last_tag, 1);
            unacked = 0;
            continue;
        }
        if (unacked && r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT)
            continue; /* --ack-every-ms: the ack is due at the top of the loop */
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            uint64_t now = load_now_us();
            struct load_stamp s;
            received++;
            if (load_stamp_get(env.message.body.bytes, env.message.body.len, &s) < 0 ||
                s.tag != o.c.tag || s.seq >= o.c.count) {
                foreign++;
            } else if (seen[s.seq / 8] & (1u << (s.seq % 8))) {
                dup++;
            } else {
                seen[s.seq / 8] |= (unsigned char)(1u << (s.seq % 8));
                uint64_t due_us = s.due_ms * 1000u + s.pub_us % 1000u;
                double l = ((double)now - (double)due_us) / 1000.0;
                if (l < 0)
                    early++;
                lat[unique++] = l;
                if (!first_us)
                    first_us = now;
                last_us = now;
                if (s.due_ms < min_due)
                    min_due = s.due_ms;
                if (s.due_ms > max_due)
                    max_due = s.due_ms;
            }
            if (o.manual_ack) {
                last_tag = env.delivery_tag;
                if (++unacked >= o.manual_ack) {
                    amqp_basic_ack(c, 1, last_tag, 1);
                    unacked = 0;
                    last_ack = load_mono_us();
                }
            }
            amqp_destroy_envelope(&env);
            last_activity = load_mono_us();
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT) {
            uint64_t quiet = (load_mono_us() - last_activity) / 1000000u;
            if (quiet >= (received ? o.idle : o.first_wait)) {
                fprintf(stderr, "%s: nothing for %llu s: stopping with %llu of %llu\n", prog,
                        (unsigned long long)quiet, (unsigned long long)unique,
                        (unsigned long long)o.c.count);
                break;
            }
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            load_other_method(prog, c); /* connection.blocked, channel.close, ... */
            continue;
        }
        load_check_reply(prog, r, "consume");
    }

    if (o.dump) {
        FILE *f = fopen(o.dump, "w");
        if (f) {
            for (uint64_t i = 0; i < unique; i++)
                fprintf(f, "%.3f\n", lat[i]);
            fclose(f);
        }
    }
    double mean = 0;
    for (uint64_t i = 0; i < unique; i++)
        mean += lat[i];
    mean = unique ? mean / (double)unique : 0;
    load_sort(lat, unique);
    double secs = (double)(last_us - first_us) / 1e6;
    printf("load_consume queue=%s expected=%llu received=%llu unique=%llu dup=%llu foreign=%llu "
           "early=%llu seconds=%.3f rate=%.0f first_recv_ms=%llu last_recv_ms=%llu "
           "min_due_ms=%llu max_due_ms=%llu lat_min_ms=%.3f lat_p50_ms=%.1f lat_p90_ms=%.1f "
           "lat_p99_ms=%.1f lat_p999_ms=%.1f lat_max_ms=%.1f lat_mean_ms=%.1f\n",
           o.queue, (unsigned long long)o.c.count, (unsigned long long)received,
           (unsigned long long)unique, (unsigned long long)dup, (unsigned long long)foreign,
           (unsigned long long)early, secs, secs > 0 ? (double)unique / secs : 0.0,
           (unsigned long long)(first_us / 1000), (unsigned long long)(last_us / 1000),
           (unsigned long long)(unique ? min_due : 0), (unsigned long long)max_due,
           unique ? lat[0] : 0.0, load_pct(lat, unique, 50), load_pct(lat, unique, 90),
           load_pct(lat, unique, 99), load_pct(lat, unique, 99.9),
           unique ? lat[unique - 1] : 0.0, mean);
    fflush(stdout);
    if (unacked)
        amqp_basic_ack(c, 1, last_tag, 1);
    load_close(c);
    free(lat);
    free(seen);
    return unique == o.c.count ? 0 : 1;
}
