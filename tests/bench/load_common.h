/*
 * load_common.h -- what load_publish.c and load_consume.c share.
 *
 * The load tools talk to RabbitMQ with rabbitmq-c only (no libev, nothing of
 * the daemon), so the same tools measure the broker alone (the ceiling), the
 * broker's TTL + dead-letter path, and delay-bridge.
 *
 * Message body, little endian, then filler up to the body size:
 *
 *   offset  size  field
 *   0       4     magic "DBLD"
 *   4       4     run tag (the publisher's --tag; lets a consumer ignore strays)
 *   8       8     seq: 0 .. count-1, unique within a run
 *   16      8     intended due time, ms since the epoch (publish time + delay)
 *   24      8     publish time, us since the epoch
 *   32      ..    filler bytes
 *
 * Lateness = receive time - due time, so it includes everything between the
 * publisher and the consumer (broker queues, the bridge's ingress backlog,
 * the timing wheel, the republish), which is what a user of a delay sees.
 */
#ifndef DB_BENCH_LOAD_COMMON_H
#define DB_BENCH_LOAD_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>

#define LOAD_MAGIC 0x444c4244u /* "DBLD" little endian */
#define LOAD_HDR 32

struct load_stamp {
    uint32_t magic;
    uint32_t tag;
    uint64_t seq;
    uint64_t due_ms;
    uint64_t pub_us;
};

static inline void load_die(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static inline void load_die(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: error: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static inline uint64_t load_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline uint64_t load_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static inline void load_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t load_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void load_stamp_put(unsigned char *body, const struct load_stamp *s)
{
    load_put64(body, (uint64_t)s->magic | (uint64_t)s->tag << 32);
    load_put64(body + 8, s->seq);
    load_put64(body + 16, s->due_ms);
    load_put64(body + 24, s->pub_us);
}

/* 0 and *s, or -1 when the body is not one of ours. */
static inline int load_stamp_get(const void *body, size_t len, struct load_stamp *s)
{
    const unsigned char *p = body;
    if (len < LOAD_HDR)
        return -1;
    uint64_t w = load_get64(p);
    s->magic = (uint32_t)w;
    s->tag = (uint32_t)(w >> 32);
    if (s->magic != LOAD_MAGIC)
        return -1;
    s->seq = load_get64(p + 8);
    s->due_ms = load_get64(p + 16);
    s->pub_us = load_get64(p + 24);
    return 0;
}

/* Die with the broker's or the library's words when an RPC failed. */
static inline void load_check_reply(const char *prog, amqp_rpc_reply_t r, const char *what)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return;
    case AMQP_RESPONSE_NONE:
        load_die(prog, "%s: missing RPC reply", what);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        load_die(prog, "%s: %s", what, amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            load_die(prog, "%s: connection closed by broker: %u %.*s", what, m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        }
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            load_die(prog, "%s: channel closed by broker: %u %.*s", what, m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        }
        load_die(prog, "%s: broker error, method 0x%08x", what, r.reply.id);
    }
    load_die(prog, "%s: unknown reply type", what);
}

/* Connect, log in, open channel 1. The URI string is parsed in place (copied first). */
/*
 * basic.consume_message() met a method that is not a delivery
 * (AMQP_STATUS_UNEXPECTED_STATE): read it; the consumer's end (channel or
 * connection closed, consumer cancelled) ends the tool, anything else
 * (connection.blocked, ...) is passed over.
 */
static inline void load_other_method(const char *prog, amqp_connection_state_t c)
{
    amqp_frame_t f;
    int rc = amqp_simple_wait_frame(c, &f);

    if (rc != AMQP_STATUS_OK)
        load_die(prog, "reading a frame: %s", amqp_error_string2(rc));
    if (f.frame_type == AMQP_FRAME_METHOD &&
        (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
         f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD ||
         f.payload.method.id == AMQP_BASIC_CANCEL_METHOD))
        load_die(prog, "the broker ended the consumer (method 0x%08x)", f.payload.method.id);
}

static inline amqp_connection_state_t load_connect(const char *prog, const char *uri)
{
    struct amqp_connection_info ci;
    char *u = strdup(uri);
    if (!u || amqp_parse_url(u, &ci) != AMQP_STATUS_OK)
        load_die(prog, "bad --uri %s", uri);
    amqp_connection_state_t c = amqp_new_connection();
    amqp_socket_t *s = amqp_tcp_socket_new(c);
    if (!s)
        load_die(prog, "cannot create a socket");
    struct timeval tv = { .tv_sec = 10 };
    int rc = amqp_socket_open_noblock(s, ci.host, ci.port, &tv);
    if (rc != AMQP_STATUS_OK)
        load_die(prog, "cannot connect to %s:%d: %s", ci.host, ci.port, amqp_error_string2(rc));
    load_check_reply(prog,
                     amqp_login(c, ci.vhost, 0, 1 << 20, 0, AMQP_SASL_METHOD_PLAIN, ci.user,
                                ci.password),
                     "login");
    amqp_channel_open(c, 1);
    load_check_reply(prog, amqp_get_rpc_reply(c), "channel.open");
    free(u);
    return c;
}

static inline void load_close(amqp_connection_state_t c)
{
    amqp_channel_close(c, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(c, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c);
}

static inline uint64_t load_parse_u64(const char *prog, const char *opt, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-')
        load_die(prog, "%s: expected a non-negative integer, got \"%s\"", opt, s);
    return v;
}

/*
 * Command-line options: each tool lists what it takes in a table of
 * struct load_opt and load_parse_opts() reads argv against it, so every
 * option is read the same way (a number is a non-negative integer, a
 * missing value or an unknown option is the tool's usage()). The options
 * both tools take (LOAD_COMMON_OPTS) land in a struct load_common.
 */
#define LOAD_DEFAULT_URI "amqp://guest:guest@127.0.0.1:5672/%2f"

enum load_opt_kind {
    LOAD_OPT_FLAG,   /* --x: *(bool *)dst = true, and *(bool *)dst2 when given */
    LOAD_OPT_STR,    /* --x V: *(const char **)dst = V */
    LOAD_OPT_U64,    /* --x N: *(uint64_t *)dst = N */
    LOAD_OPT_RANGE,  /* --x MIN[-MAX]: *(uint64_t *)dst = MIN, *(uint64_t *)dst2 = MAX (or MIN) */
    LOAD_OPT_CHOICE, /* --x V, V one of choices[]: *(const char **)dst = V */
};

struct load_opt {
    const char *name;
    enum load_opt_kind kind;
    void *dst, *dst2;
    const char *const *choices; /* LOAD_OPT_CHOICE: NULL-terminated */
};

/* What load_publish and load_consume both take. */
struct load_common {
    const char *uri, *exchange, *routing_key;
    uint64_t count, tag;
};

#define LOAD_COMMON_DEFAULTS { .uri = LOAD_DEFAULT_URI, .routing_key = "bench" }
#define LOAD_COMMON_OPTS(c)                                                                       \
    { "--uri", LOAD_OPT_STR, &(c)->uri, NULL, NULL },                                             \
        { "--exchange", LOAD_OPT_STR, &(c)->exchange, NULL, NULL },                               \
        { "--routing-key", LOAD_OPT_STR, &(c)->routing_key, NULL, NULL },                         \
        { "--count", LOAD_OPT_U64, &(c)->count, NULL, NULL },                                     \
        { "--tag", LOAD_OPT_U64, &(c)->tag, NULL, NULL }

static inline void load_parse_choice(const char *prog, const struct load_opt *o, const char *v)
{
    int n = 0;
    for (; o->choices[n]; n++)
        if (!strcmp(v, o->choices[n])) {
            *(const char **)o->dst = v;
            return;
        }
    fprintf(stderr, "%s: error: %s %s: expected ", prog, o->name, v);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "%s%s", o->choices[i], i + 2 < n ? ", " : i + 1 < n ? " or " : "\n");
    exit(2);
}

static inline void load_parse_opts(const char *prog, int argc, char **argv,
                                   const struct load_opt *opts, size_t nopts, void (*usage)(void))
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct load_opt *o = NULL;
        for (size_t k = 0; k < nopts && !o; k++)
            if (!strcmp(a, opts[k].name))
                o = &opts[k];
        if (o && o->kind == LOAD_OPT_FLAG) {
            *(bool *)o->dst = true;
            if (o->dst2)
                *(bool *)o->dst2 = true;
            continue;
        }
        if (i + 1 >= argc || !o) {
            usage();
            exit(2);
        }
        const char *v = argv[++i];
        switch (o->kind) {
        case LOAD_OPT_STR:
            *(const char **)o->dst = v;
            break;
        case LOAD_OPT_U64:
            *(uint64_t *)o->dst = load_parse_u64(prog, a, v);
            break;
        case LOAD_OPT_RANGE: {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *dash = strchr(buf, '-');
            if (dash)
                *dash = 0;
            uint64_t lo = load_parse_u64(prog, a, buf);
            uint64_t hi = dash ? load_parse_u64(prog, a, dash + 1) : lo;
            if (hi < lo)
                load_die(prog, "%s %s: MAX below MIN", a, v);
            *(uint64_t *)o->dst = lo;
            *(uint64_t *)o->dst2 = hi;
            break;
        }
        case LOAD_OPT_CHOICE:
            load_parse_choice(prog, o, v);
            break;
        case LOAD_OPT_FLAG:
            break;
        }
    }
}

/* Sort n doubles ascending (for load_pct). */
static inline int load_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void load_sort(double *v, uint64_t n)
{
    qsort(v, n, sizeof *v, load_cmp_double);
}

/* Nearest-rank percentile p (0..100) of a sorted array; 0 when empty. */
static inline double load_pct(const double *v, uint64_t n, double p)
{
    if (!n)
        return 0;
    uint64_t k = (uint64_t)(p / 100.0 * (double)n + 0.999999);
    k = k < 1 ? 1 : k > n ? n : k;
    return v[k - 1];
}

/* xorshift64*: the same sequence for the same seed, so runs are comparable. */
static inline uint64_t load_rand(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return x * 0x2545F4914F6CDD1DULL;
}

#endif
