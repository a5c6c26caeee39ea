/*
 * load_retry.c -- the retry benchmark's consumer that fails chosen messages,
 * its topology and its queue-depth watcher (tests/bench/retry.sh).
 *
 *   load_retry declare SPEC...
 *   load_retry consume --queue Q --count N [--tag T] [--fail-every K --fail-times F]
 *                      [--backoff MS[,MS...]] [--prefetch P] [--attempt-header] [--requeue]
 *                      [--ready-file F] [--first-wait S] [--idle S] [--deadline S]
 *   load_retry watch --queues Q1[,Q2...] [--interval-ms MS] [--once]
 *
 * declare: one AMQP connection, each SPEC in order (all durable):
 *   x:NAME[:TYPE]                 exchange, TYPE direct (default), fanout, topic,
 *                                 x-delayed-message (the plugin's, x-delayed-type direct)
 *   q:NAME[:k=v,...]              queue; ttl=MS (x-message-ttl), dlx=X
 *                                 (x-dead-letter-exchange; "dlx=" the default
 *                                 exchange), dlk=K (x-dead-letter-routing-key),
 *                                 type=T (x-queue-type); a quorum queue's own
 *                                 delayed retry (RabbitMQ 4.3+): drt=TYPE
 *                                 (x-delayed-retry-type: failed, returned,
 *                                 all), drmin=MS, drmax=MS
 *                                 (x-delayed-retry-min, -max), limit=N
 *                                 (x-delivery-limit)
 *   b:QUEUE:EXCHANGE:KEY          binding
 *   p:QUEUE                       purge
 *
 * consume: the stamped messages of load_publish (load_common.h) from Q,
 * manual acks, one basic.ack or basic.reject per message (what client
 * libraries do: pika, kombu, Spring), prefetch P (default 200). A message
 * whose seq is a multiple of K (--fail-every; 0, the default: none) is
 * rejected without requeue on its first F deliveries (--fail-times,
 * default 1), so the queue's dead-letter exchange takes it (with --requeue:
 * rejected with requeue, so the queue itself holds it back: a quorum
 * queue's x-delayed-retry-type failed), and acked on
 * delivery F + 1; every other message is acked at once. Attempts are
 * counted here per seq, so the same consumer serves a retry route and a TTL
 * ladder; with --attempt-header the header x-retry-attempt (absent = 1) is
 * checked against that count (attempt_mismatch=). It stops when N distinct
 * messages of --tag were acked, or when nothing arrived for --idle seconds
 * (default 30) after the first message or --first-wait (default 600)
 * before it, or --deadline seconds (default none) after it started.
 *
 * --backoff: the delay expected before retry n (the n-th value; the last
 * one repeats): 100,200,400. Two figures use it:
 *   retry lateness = redelivery - reject - backoff(n), per retry; early
 *     counts the negative ones (a retry sooner than its backoff);
 *   lag = ack - (due + the backoffs of the message's failures), per
 *     message, due being the publisher's stamp (its send time + x-delay):
 *     how far behind its schedule a message completed.
 *
 * Summary (stdout, one line):
 *   load_retry queue=Q expected=N completed=N deliveries=D rejected=R dup=0
 *     foreign=0 early=0 attempt_mismatch=0 seconds=S rate=R first_recv_ms=..
 *     last_recv_ms=.. lag_p50_ms=.. lag_p99_ms=.. lag_max_ms=.. retry_late_min_ms=..
 *     retry_late_p50_ms=.. retry_late_p99_ms=.. retry_late_max_ms=..
 *   rate = completed / (last ack - first receipt).
 * Exit 0 when all N were acked, 1 when some were not, 2 on an error.
 *
 * watch: every --interval-ms (default 500) a passive queue.declare of each
 * queue, one line "EPOCH_MS READY1 READY2 ..." (ready messages, as the
 * broker counts them), flushed, until killed; --once: one line, then exit.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "load_common.h"

static const char *prog = "load_retry";

static void usage(void)
{
    fprintf(stderr,
            "usage: %s declare SPEC...   (x:NAME[:TYPE] q:NAME[:ttl=MS,dlx=X,dlk=K,type=T,drt=T,drmin=MS,drmax=MS,limit=N] "
            "b:QUEUE:EXCHANGE:KEY p:QUEUE)\n"
            "       %s consume --queue Q --count N [--tag T] [--fail-every K --fail-times F]\n"
            "                  [--backoff MS[,MS...]] [--prefetch P] [--attempt-header] [--requeue]\n"
            "                  [--ready-file F] [--first-wait S] [--idle S] [--deadline S] [--uri URI]\n"
            "       %s watch --queues Q1[,Q2...] [--interval-ms MS] [--once] [--uri URI]\n",
            prog, prog, prog);
    exit(2);
}

/* ------------------------------------------------------------------ declare */

static amqp_table_entry_t *qarg(amqp_table_t *t, const char *key)
{
    amqp_table_entry_t *e = &t->entries[t->num_entries++];
    e->key = amqp_cstring_bytes(key);
    return e;
}

static void declare_one(amqp_connection_state_t c, char *spec)
{
    char *kind = strtok(spec, ":"), *name = strtok(NULL, ":"), *rest = strtok(NULL, "");
    if (!kind || !name)
        load_die(prog, "declare: bad spec (x:NAME[:TYPE], q:NAME[:k=v,..], b:Q:X:KEY, p:Q)");
    if (!strcmp(kind, "x")) {
        /* the delayed-message plugin's exchange routes as a direct one */
        amqp_table_entry_t xt = { .key = amqp_cstring_bytes("x-delayed-type"),
                                  .value = { .kind = AMQP_FIELD_KIND_UTF8,
                                             .value.bytes = amqp_cstring_bytes("direct") } };
        amqp_table_t xargs = { 0, &xt };
        if (rest && !strcmp(rest, "x-delayed-message"))
            xargs.num_entries = 1;
        amqp_exchange_declare(c, 1, amqp_cstring_bytes(name),
                              amqp_cstring_bytes(rest ? rest : "direct"), 0, 1, 0, 0, xargs);
        load_check_reply(prog, amqp_get_rpc_reply(c), "exchange.declare");
    } else if (!strcmp(kind, "q")) {
        amqp_table_entry_t e[8];
        amqp_table_t args = { 0, e };
        for (char *kv = rest ? strtok(rest, ",") : NULL; kv; kv = strtok(NULL, ",")) {
            char *v = strchr(kv, '=');
            if (!v)
                load_die(prog, "declare %s: %s: expected k=v", name, kv);
            *v++ = 0;
            if (args.num_entries == 8)
                load_die(prog, "declare %s: too many arguments", name);
            const char *ikey = !strcmp(kv, "ttl")     ? "x-message-ttl"
                               : !strcmp(kv, "drmin") ? "x-delayed-retry-min"
                               : !strcmp(kv, "drmax") ? "x-delayed-retry-max"
                               : !strcmp(kv, "limit") ? "x-delivery-limit"
                                                      : NULL;
            if (ikey) {
                amqp_table_entry_t *a = qarg(&args, ikey);
                a->value.kind = AMQP_FIELD_KIND_I64;
                a->value.value.i64 = (int64_t)load_parse_u64(prog, kv, v);
                continue;
            }
            const char *key = !strcmp(kv, "dlx")    ? "x-dead-letter-exchange"
                              : !strcmp(kv, "dlk")  ? "x-dead-letter-routing-key"
                              : !strcmp(kv, "type") ? "x-queue-type"
                              : !strcmp(kv, "drt")  ? "x-delayed-retry-type"
                                                    : NULL;
            if (!key)
                load_die(prog, "declare %s: unknown argument %s (ttl, dlx, dlk, type, drt, drmin, "
                               "drmax, limit)", name, kv);
            amqp_table_entry_t *a = qarg(&args, key);
            a->value.kind = AMQP_FIELD_KIND_UTF8;
            a->value.value.bytes = amqp_cstring_bytes(v);
        }
        amqp_queue_declare(c, 1, amqp_cstring_bytes(name), 0, 1, 0, 0, args);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.declare");
    } else if (!strcmp(kind, "b")) {
        char *x = rest ? strtok(rest, ":") : NULL, *key = x ? strtok(NULL, "") : NULL;
        if (!x)
            load_die(prog, "declare: b:QUEUE:EXCHANGE:KEY");
        amqp_queue_bind(c, 1, amqp_cstring_bytes(name), amqp_cstring_bytes(x),
                        amqp_cstring_bytes(key ? key : ""), amqp_empty_table);
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.bind");
    } else if (!strcmp(kind, "p")) {
        amqp_queue_purge(c, 1, amqp_cstring_bytes(name));
        load_check_reply(prog, amqp_get_rpc_reply(c), "queue.purge");
    } else {
        load_die(prog, "declare: unknown kind %s (x, q, b, p)", kind);
    }
}

/* ------------------------------------------------------------------ watch */

static void watch(amqp_connection_state_t c, char *queues, uint64_t interval_ms, bool once)
{
    const char *q[64];
    int n = 0;
    for (char *s = strtok(queues, ","); s && n < 64; s = strtok(NULL, ","))
        q[n++] = s;
    if (!n)
        load_die(prog, "watch: --queues is empty");
    for (;;) {
        printf("%llu", (unsigned long long)(load_now_us() / 1000));
        for (int i = 0; i < n; i++) {
            amqp_queue_declare_ok_t *ok = amqp_queue_declare(c, 1, amqp_cstring_bytes(q[i]), 1, 0,
                                                             0, 0, amqp_empty_table);
            load_check_reply(prog, amqp_get_rpc_reply(c), q[i]);
            printf(" %u", ok->message_count);
        }
        printf("\n");
        fflush(stdout);
        if (once)
            return;
        amqp_maybe_release_buffers(c);
        usleep((useconds_t)(interval_ms * 1000));
    }
}

/* ------------------------------------------------------------------ consume */

struct copts {
    const char *queue, *ready_file, *backoff;
    uint64_t count, tag, fail_every, fail_times, prefetch, first_wait, idle, deadline;
    bool attempt_header;
    bool requeue; /* reject with requeue: the queue's own delayed retry */
};

/* x-retry-attempt of a delivery: its integer value, 1 when absent, -1 when not an integer. */
static int64_t attempt_header(const amqp_basic_properties_t *p)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 1;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != 15 || memcmp(e->key.bytes, "x-retry-attempt", 15))
            continue;
        const amqp_field_value_t *v = &e->value;
        switch (v->kind) {
        case AMQP_FIELD_KIND_I8: return v->value.i8;
        case AMQP_FIELD_KIND_U8: return v->value.u8;
        case AMQP_FIELD_KIND_I16: return v->value.i16;
        case AMQP_FIELD_KIND_U16: return v->value.u16;
        case AMQP_FIELD_KIND_I32: return v->value.i32;
        case AMQP_FIELD_KIND_U32: return v->value.u32;
        case AMQP_FIELD_KIND_I64: return v->value.i64;
        case AMQP_FIELD_KIND_U64: return (int64_t)v->value.u64;
        default: return -1;
        }
    }
    return 1;
}

static int consume(amqp_connection_state_t c, const struct copts *o)
{
    uint64_t backoff[16], nb = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", o->backoff ? o->backoff : "0");
    for (char *s = strtok(buf, ","); s && nb < 16; s = strtok(NULL, ","))
        backoff[nb++] = load_parse_u64(prog, "--backoff", s);
    if (o->fail_times > 250)
        load_die(prog, "--fail-times: at most 250");
#define BACKOFF_MS(n) (backoff[(n) - 1 < nb ? (n) - 1 : nb - 1]) /* before retry n >= 1 */

    amqp_bytes_t q = amqp_cstring_bytes(o->queue);
    amqp_basic_qos(c, 1, 0, (uint16_t)(o->prefetch > 65535 ? 65535 : o->prefetch), 0);
    load_check_reply(prog, amqp_get_rpc_reply(c), "basic.qos");
    amqp_basic_consume(c, 1, q, amqp_empty_bytes, 0, 0 /* manual acks */, 0, amqp_empty_table);
    load_check_reply(prog, amqp_get_rpc_reply(c), "basic.consume");
    if (o->ready_file) {
        FILE *f = fopen(o->ready_file, "w");
        if (!f)
            load_die(prog, "cannot write %s: %s", o->ready_file, strerror(errno));
        fclose(f);
    }

    uint64_t n = o->count, retries_max = o->fail_every ? (n / o->fail_every + 1) * o->fail_times : 0;
    unsigned char *attempts = calloc(n, 1); /* deliveries so far; 255 = acked */
    uint64_t *rejected_us = calloc(n, sizeof *rejected_us);
    double *lag = malloc(n * sizeof *lag), *late = malloc((retries_max + 1) * sizeof *late);
    if (!attempts || !rejected_us || !lag || !late)
        load_die(prog, "out of memory");
    uint64_t completed = 0, deliveries = 0, rejected = 0, dup = 0, foreign = 0, early = 0,
             mismatch = 0, nlate = 0, first_us = 0, last_us = 0;
    uint64_t start = load_mono_us(), last_activity = start;

    while (completed < n) {
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = 1 };
        amqp_maybe_release_buffers(c);
        amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            uint64_t now = load_now_us();
            struct load_stamp s;
            bool ack = true;
            deliveries++;
            if (!first_us)
                first_us = now;
            if (load_stamp_get(env.message.body.bytes, env.message.body.len, &s) < 0 ||
                s.tag != o->tag || s.seq >= n) {
                foreign++;
            } else if (attempts[s.seq] == 255) {
                dup++;
            } else {
                unsigned a = ++attempts[s.seq]; /* this delivery's attempt number */
                if (o->attempt_header && attempt_header(&env.message.properties) != (int64_t)a)
                    mismatch++;
                if (a > 1) { /* a retry: how long after its reject */
                    double l = ((double)now - (double)rejected_us[s.seq]) / 1000.0 -
                               (double)BACKOFF_MS(a - 1);
                    if (l < 0)
                        early++;
                    if (nlate <= retries_max)
                        late[nlate++] = l;
                }
                if (o->fail_every && s.seq % o->fail_every == 0 && a <= o->fail_times) {
                    ack = false;
                    rejected_us[s.seq] = now;
                } else {
                    double sched = (double)(s.due_ms * 1000u + s.pub_us % 1000u);
                    for (unsigned k = 1; k < a; k++)
                        sched += (double)BACKOFF_MS(k) * 1000.0;
                    lag[completed++] = ((double)now - sched) / 1000.0;
                    attempts[s.seq] = 255;
                    last_us = now;
                }
            }
            if (ack) {
                amqp_basic_ack(c, 1, env.delivery_tag, 0);
            } else {
                /* no requeue: dead-letter it; --requeue: the queue holds it back itself */
                amqp_basic_reject(c, 1, env.delivery_tag, o->requeue);
                rejected++;
            }
            amqp_destroy_envelope(&env);
            last_activity = load_mono_us();
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_TIMEOUT) {
            uint64_t mono = load_mono_us(), quiet = (mono - last_activity) / 1000000u;
            if (quiet >= (deliveries ? o->idle : o->first_wait) ||
                (o->deadline && mono - start >= o->deadline * 1000000u)) {
                fprintf(stderr, "%s: %s: stopping with %llu of %llu acked\n", prog,
                        quiet >= (deliveries ? o->idle : o->first_wait) ? "nothing arrives"
                                                                        : "deadline",
                        (unsigned long long)completed, (unsigned long long)n);
                break;
            }
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
            r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            load_other_method(prog, c);
            continue;
        }
        load_check_reply(prog, r, "consume");
    }

    load_sort(lag, completed);
    load_sort(late, nlate);
    double secs = last_us > first_us ? (double)(last_us - first_us) / 1e6 : 0;
    printf("load_retry queue=%s expected=%llu completed=%llu deliveries=%llu rejected=%llu "
           "dup=%llu foreign=%llu early=%llu attempt_mismatch=%llu seconds=%.3f rate=%.0f "
           "first_recv_ms=%llu last_recv_ms=%llu lag_p50_ms=%.1f lag_p99_ms=%.1f "
           "lag_max_ms=%.1f retries=%llu retry_late_min_ms=%.1f retry_late_p50_ms=%.1f "
           "retry_late_p99_ms=%.1f retry_late_max_ms=%.1f\n",
           o->queue, (unsigned long long)n, (unsigned long long)completed,
           (unsigned long long)deliveries, (unsigned long long)rejected, (unsigned long long)dup,
           (unsigned long long)foreign, (unsigned long long)early, (unsigned long long)mismatch,
           secs, secs > 0 ? (double)completed / secs : 0.0,
           (unsigned long long)(first_us / 1000), (unsigned long long)(last_us / 1000),
           load_pct(lag, completed, 50), load_pct(lag, completed, 99),
           completed ? lag[completed - 1] : 0.0,
           (unsigned long long)nlate, nlate ? late[0] : 0.0, load_pct(late, nlate, 50),
           load_pct(late, nlate, 99), nlate ? late[nlate - 1] : 0.0);
    fflush(stdout);
    free(attempts);
    free(rejected_us);
    free(lag);
    free(late);
    return completed == n ? 0 : 1;
#undef BACKOFF_MS
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *mode = argv[1];
    struct load_common com = LOAD_COMMON_DEFAULTS;
    if (!strcmp(mode, "declare")) {
        int i = 2;
        if (argc > 3 && !strcmp(argv[2], "--uri")) {
            com.uri = argv[3];
            i = 4;
        }
        amqp_connection_state_t c = load_connect(prog, com.uri);
        for (; i < argc; i++)
            declare_one(c, argv[i]);
        load_close(c);
        return 0;
    }
    if (!strcmp(mode, "watch")) {
        char *queues = NULL;
        uint64_t interval = 500;
        bool once = false;
        const struct load_opt opts[] = {
            LOAD_COMMON_OPTS(&com),
            { "--queues", LOAD_OPT_STR, &queues, NULL, NULL },
            { "--interval-ms", LOAD_OPT_U64, &interval, NULL, NULL },
            { "--once", LOAD_OPT_FLAG, &once, NULL, NULL },
        };
        load_parse_opts(prog, argc - 1, argv + 1, opts, sizeof opts / sizeof opts[0], usage);
        if (!queues)
            usage();
        signal(SIGPIPE, SIG_DFL);
        amqp_connection_state_t c = load_connect(prog, com.uri);
        watch(c, queues, interval, once);
        load_close(c);
        return 0;
    }
    if (strcmp(mode, "consume"))
        usage();
    struct copts o = { .queue = "bench.work", .fail_times = 1, .prefetch = 200,
                       .first_wait = 600, .idle = 30 };
    const struct load_opt opts[] = {
        LOAD_COMMON_OPTS(&com),
        { "--queue", LOAD_OPT_STR, &o.queue, NULL, NULL },
        { "--ready-file", LOAD_OPT_STR, &o.ready_file, NULL, NULL },
        { "--backoff", LOAD_OPT_STR, &o.backoff, NULL, NULL },
        { "--fail-every", LOAD_OPT_U64, &o.fail_every, NULL, NULL },
        { "--fail-times", LOAD_OPT_U64, &o.fail_times, NULL, NULL },
        { "--prefetch", LOAD_OPT_U64, &o.prefetch, NULL, NULL },
        { "--first-wait", LOAD_OPT_U64, &o.first_wait, NULL, NULL },
        { "--idle", LOAD_OPT_U64, &o.idle, NULL, NULL },
        { "--deadline", LOAD_OPT_U64, &o.deadline, NULL, NULL },
        { "--attempt-header", LOAD_OPT_FLAG, &o.attempt_header, NULL, NULL },
        { "--requeue", LOAD_OPT_FLAG, &o.requeue, NULL, NULL },
    };
    load_parse_opts(prog, argc - 1, argv + 1, opts, sizeof opts / sizeof opts[0], usage);
    if (!com.count)
        load_die(prog, "--count N (N >= 1) is required");
    o.count = com.count;
    o.tag = com.tag;
    amqp_connection_state_t c = load_connect(prog, com.uri);
    int rc = consume(c, &o);
    load_close(c);
    return rc;
}
