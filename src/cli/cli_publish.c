/*
 * cli_publish.c -- "delay-bridge publish": send one delayed message, confirmed.
 *
 * An operator's smoke test and a scripting tool: publish one message with an
 * x-delay header to a route's ingress exchange and learn for certain whether
 * the broker took it. It speaks to the broker exactly as an application
 * would (the bridge is not involved), so a 0 exit says the path from the
 * publisher to the ingress queue works.
 *
 * THE EXCHANGE WITH THE BROKER
 *
 *   broker_conn_open()        TCP/TLS, login (bounded by --timeout)
 *   channel.open 1
 *   confirm.select          publisher confirms on the channel
 *   basic.publish           mandatory=1; headers x-delay (signed 64-bit, 'l')
 *                           and each --header k=v as a long string ('S')
 *   wait for basic.ack / basic.nack for delivery tag 1, at most --timeout ms.
 *
 * mandatory=1 makes the broker send basic.return (before the ack) when no
 * queue is bound for the routing key, which would otherwise drop the
 * message without a word: that is reported as a failure. A channel.close
 * from the broker (exchange not found, access refused) is answered and
 * reported with the broker's code and text.
 *
 * Messages name the broker by its URI with the password masked
 * (log_mask_uri); the password itself is never printed.
 *
 * Exit codes: 0 ack, 1 nack, unroutable, timeout or connection error, 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "cli.h"
#include "base/clock.h"
#include "delay-bridge/config.h"
#include "base/xalloc.h"
#include "delay-bridge/broker_conn.h"

#define PUB_OK 0
#define PUB_FAIL 1
#define PUB_USAGE 2

#define PUB_CHANNEL 1
#define DEFAULT_TIMEOUT_MS 10000

static void usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge publish --uri URI --exchange X --routing-key K --delay MS\n"
            "                            [--header k=v]... [--persistent] [--message-id ID]\n"
            "                            [--content-type T] [--timeout MS]\n"
            "                            [--ca-file F] [--cert-file F --key-file F] [BODY|-]\n"
            "\n"
            "Publish one message with an x-delay header (signed 64-bit integer) to exchange X,\n"
            "usually a route's ingress exchange, with publisher confirms, and wait for the\n"
            "broker's answer. The body is BODY, or standard input with \"-\", or empty\n"
            "(put -- before a BODY that starts with -).\n"
            "\n"
            "  --uri URI           broker, amqp://user:pass@host:port/vhost or amqps://...\n"
            "                      (default: $DELAY_BRIDGE_BROKER_URI, its first entry)\n"
            "  --exchange X        exchange to publish to (\"\" is the default exchange)\n"
            "  --routing-key K     routing key\n"
            "  --delay MS          x-delay in milliseconds\n"
            "  --header k=v        an extra header, value a long string (repeatable)\n"
            "  --persistent        delivery_mode 2\n"
            "  --message-id ID     the message-id property\n"
            "  --content-type T    the content-type property\n"
            "  --timeout MS        bound on connecting and on waiting for the confirm\n"
            "                      (default %d)\n"
            "  --ca-file F         amqps://: CA bundle (PEM) that must sign the broker's\n"
            "                      certificate, whose host name is checked too\n"
            "                      (default " CONFIG_TLS_DEFAULT_CA_FILE ")\n"
            "  --cert-file F       amqps://: client certificate (PEM), with --key-file\n"
            "  --key-file F        amqps://: its private key (PEM, no passphrase)\n"
            "  -h, --help          print this help and exit\n"
            "\n"
            "The message is published mandatory: if no queue is bound for the routing key\n"
            "the broker returns it, and that is a failure.\n"
            "Exit codes: 0 confirmed (basic.ack), 1 nacked, returned as unroutable, timed\n"
            "out or a connection error (one line on stderr, password masked), 2 usage.\n",
            DEFAULT_TIMEOUT_MS);
}

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

/* All of standard input. Returns 0 or -errno. */
static int read_stdin(char **out, size_t *n)
{
    size_t len = 0, cap = 65536;
    char *p = xrealloc(NULL, cap);

    for (;;) {
        if (len == cap) {
            cap *= 2;
            p = xrealloc(p, cap);
        }
        ssize_t r = read(STDIN_FILENO, p + len, cap - len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = -errno;
            free(p);
            return e;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    *out = p;
    *n = len;
    return 0;
}

/*
 * Wait for the confirm of delivery tag 1. Returns PUB_OK on ack, else
 * PUB_FAIL with the reason in err.
 */
static int wait_confirm(struct broker_conn *c, uint32_t timeout_ms, char *err, size_t errlen)
{
    uint64_t deadline = clock_mono_ms() + timeout_ms;
    char returned[512] = "";

    for (;;) {
        uint64_t now = clock_mono_ms();
        uint64_t left = deadline > now ? deadline - now : 0;
        struct timeval tv = {(time_t)(left / 1000), (suseconds_t)(left % 1000) * 1000};
        amqp_frame_t f;
        int r = amqp_simple_wait_frame_noblock(c->st, &f, &tv);

        if (r == AMQP_STATUS_TIMEOUT) {
            snprintf(err, errlen, "no publisher confirm from %s within %" PRIu32 " ms",
                     c->uri_masked, timeout_ms);
            return PUB_FAIL;
        }
        if (r != AMQP_STATUS_OK) {
            snprintf(err, errlen, "connection to %s lost while waiting for the confirm: %s",
                     c->uri_masked, amqp_error_string2(r));
            return PUB_FAIL;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue; /* a heartbeat, or the content of a returned message (read below) */
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD:
            if (returned[0]) {
                snprintf(err, errlen, "%s", returned);
                return PUB_FAIL;
            }
            return PUB_OK;
        case AMQP_BASIC_NACK_METHOD:
            snprintf(err, errlen, "the broker nacked the message (basic.nack: it could not "
                     "take responsibility for it, e.g. a queue is full or down)");
            return PUB_FAIL;
        case AMQP_BASIC_RETURN_METHOD: {
            amqp_basic_return_t *m = f.payload.method.decoded;
            amqp_message_t msg;
            snprintf(returned, sizeof(returned),
                     "unroutable: the broker returned the message (%u %.*s): no queue is bound "
                     "to exchange \"%.*s\" for routing key \"%.*s\"",
                     m->reply_code, (int)m->reply_text.len, (char *)m->reply_text.bytes,
                     (int)m->exchange.len, (char *)m->exchange.bytes, (int)m->routing_key.len,
                     (char *)m->routing_key.bytes);
            /* The returned content follows: read and drop it; the ack comes next. */
            amqp_rpc_reply_t rr = amqp_read_message(c->st, f.channel, &msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                snprintf(err, errlen, "%s", returned);
                return PUB_FAIL;
            }
            amqp_destroy_message(&msg);
            break;
        }
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD: {
            char why[400];
            broker_conn_answer_close(c, &f, why, sizeof(why));
            snprintf(err, errlen, "%s", why);
            return PUB_FAIL;
        }
        default:
            break;
        }
    }
}

/* What the command line asks for: the message and how to reach the broker. */
struct pub_args {
    const char *uri, *exchange, *rk, *message_id, *ctype;
    char *uri_env;              /* owned: the first entry of $DELAY_BRIDGE_BROKER_URI */
    char *body;                 /* owned when body_owned (read from stdin), else argv's */
    size_t body_len;
    int body_owned;
    int64_t delay;
    int have_delay, persistent;
    uint32_t timeout_ms;
    amqp_table_entry_t *entries; /* owned: x-delay first, then each --header */
    int nheaders;
    struct broker_conn_tls tls;
};

static const struct option pub_options[] = {
    {"uri", required_argument, NULL, 'u'},
    {"exchange", required_argument, NULL, 'x'},
    {"routing-key", required_argument, NULL, 'k'},
    {"delay", required_argument, NULL, 'd'},
    {"header", required_argument, NULL, 'H'},
    {"persistent", no_argument, NULL, 'p'},
    {"message-id", required_argument, NULL, 'm'},
    {"content-type", required_argument, NULL, 't'},
    {"timeout", required_argument, NULL, 'T'},
    {"ca-file", required_argument, NULL, 'A'},
    {"cert-file", required_argument, NULL, 'C'},
    {"key-file", required_argument, NULL, 'K'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* One --header KEY=VALUE into a's table, as a long string. 0, or -1 (said on stderr). */
static int take_header(struct pub_args *a, char *arg)
{
    char *eq = strchr(arg, '=');
    size_t klen = eq ? (size_t)(eq - arg) : 0;

    if (!eq || klen == 0 || klen > 255) {
        fprintf(stderr, "delay-bridge publish: --header %s: expected KEY=VALUE with a "
                "key of 1 to 255 bytes\n", arg);
        return -1;
    }
    if (klen == 7 && strncmp(arg, "x-delay", 7) == 0) {
        fprintf(stderr, "delay-bridge publish: --header x-delay=...: set the delay "
                "with --delay MS\n");
        return -1;
    }
    amqp_table_entry_t *e = &a->entries[a->nheaders++];
    e->key = (amqp_bytes_t){klen, arg};
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(eq + 1);
    return 0;
}

/*
 * The options, one by one, into a. 0 to go on; 1 after --help (printed:
 * exit 0); -1 on a usage error (said on stderr).
 */
static int take_options(struct pub_args *a, int argc, char **argv)
{
    int64_t v;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", pub_options, NULL)) != -1) {
        switch (c) {
        case 'u':
            a->uri = optarg;
            break;
        case 'x':
            a->exchange = optarg;
            break;
        case 'k':
            a->rk = optarg;
            break;
        case 'd':
            if (parse_i64(optarg, &a->delay) < 0) {
                fprintf(stderr, "delay-bridge publish: --delay %s: expected milliseconds, a "
                        "64-bit integer\n", optarg);
                return -1;
            }
            a->have_delay = 1;
            break;
        case 'H':
            if (take_header(a, optarg) < 0)
                return -1;
            break;
        case 'p':
            a->persistent = 1;
            break;
        case 'm':
            a->message_id = optarg;
            break;
        case 't':
            a->ctype = optarg;
            break;
        case 'T':
            if (parse_i64(optarg, &v) < 0 || v <= 0 || v > 3600000) {
                fprintf(stderr, "delay-bridge publish: --timeout %s: expected 1 to 3600000 ms\n",
                        optarg);
                return -1;
            }
            a->timeout_ms = (uint32_t)v;
            break;
        case 'A':
            a->tls.ca_file = optarg;
            break;
        case 'C':
            a->tls.cert_file = optarg;
            break;
        case 'K':
            a->tls.key_file = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* What the options leave open: the URI from the environment, then what must be given. */
static int check_options(struct pub_args *a, int argc, char **argv)
{
    if (!a->uri && getenv("DELAY_BRIDGE_BROKER_URI") && *getenv("DELAY_BRIDGE_BROKER_URI")) {
        a->uri_env = xstrdup(getenv("DELAY_BRIDGE_BROKER_URI"));
        a->uri_env[strcspn(a->uri_env, ",")] = '\0';
        a->uri = a->uri_env;
    }
    if (!a->uri || !a->exchange || !a->rk || !a->have_delay) {
        fprintf(stderr, "delay-bridge publish: missing %s\n",
                !a->uri ? "--uri (or DELAY_BRIDGE_BROKER_URI)"
                     : !a->exchange ? "--exchange" : !a->rk ? "--routing-key" : "--delay");
        usage(stderr);
        return -1;
    }
    if (!a->tls.cert_file != !a->tls.key_file) {
        fprintf(stderr, "delay-bridge publish: --cert-file and --key-file go together\n");
        return -1;
    }
    if (strlen(a->exchange) > 255 || strlen(a->rk) > 255) {
        fprintf(stderr, "delay-bridge publish: exchange and routing key are at most 255 bytes\n");
        return -1;
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "delay-bridge publish: one BODY argument at most (quote it)\n");
        return -1;
    }
    return 0;
}

/* The body: the BODY argument, standard input for "-", or empty. 0, or -1 (said). */
static int take_body(struct pub_args *a, int argc, char **argv)
{
    if (optind < argc && strcmp(argv[optind], "-") == 0) {
        int r = read_stdin(&a->body, &a->body_len);
        if (r < 0) {
            fprintf(stderr, "delay-bridge publish: cannot read the body from stdin: %s\n",
                    strerror(-r));
            return -1;
        }
        a->body_owned = 1;
    } else if (optind < argc) {
        a->body = argv[optind];
        a->body_len = strlen(a->body);
    }
    return 0;
}

/* Connect, open the channel and put it in confirm mode. 0, or -1 (said on stderr). */
static int open_confirm_channel(struct broker_conn *conn, const struct pub_args *a)
{
    char err[1024];

    if (broker_conn_open(conn, a->uri, "delay-bridge publish", &a->tls, 0, a->timeout_ms, err,
                       sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge publish: %s\n", err);
        return -1;
    }
    amqp_channel_open(conn->st, PUB_CHANNEL);
    if (broker_conn_check(conn, "channel.open", err, sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge publish: %s: %s\n", conn->uri_masked, err);
        return -1;
    }
    amqp_confirm_select(conn->st, PUB_CHANNEL);
    if (broker_conn_check(conn, "confirm.select", err, sizeof(err)) < 0) {
        fprintf(stderr, "delay-bridge publish: %s: %s\n", conn->uri_masked, err);
        return -1;
    }
    return 0;
}

/* basic.publish, mandatory, with x-delay and the properties asked for. 0, or -1 (said). */
static int publish_message(struct broker_conn *conn, struct pub_args *a)
{
    amqp_basic_properties_t props;

    a->entries[0].key = amqp_cstring_bytes("x-delay");
    a->entries[0].value.kind = AMQP_FIELD_KIND_I64;
    a->entries[0].value.value.i64 = a->delay;
    memset(&props, 0, sizeof(props));
    props._flags = AMQP_BASIC_HEADERS_FLAG;
    props.headers.num_entries = a->nheaders;
    props.headers.entries = a->entries;
    if (a->persistent) {
        props._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
        props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    }
    if (a->message_id) {
        props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        props.message_id = amqp_cstring_bytes(a->message_id);
    }
    if (a->ctype) {
        props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        props.content_type = amqp_cstring_bytes(a->ctype);
    }
    int r = amqp_basic_publish(conn->st, PUB_CHANNEL, amqp_cstring_bytes(a->exchange),
                               amqp_cstring_bytes(a->rk), 1, 0, &props,
                               (amqp_bytes_t){a->body_len, a->body_len ? a->body : NULL});
    if (r != AMQP_STATUS_OK) {
        fprintf(stderr, "delay-bridge publish: publish to %s failed: %s\n", conn->uri_masked,
                amqp_error_string2(r));
        return -1;
    }
    return 0;
}

int cli_publish_main(int argc, char **argv)
{
    struct pub_args a = {.timeout_ms = DEFAULT_TIMEOUT_MS, .tls = {NULL, NULL, NULL, 1}};
    struct broker_conn conn;
    int rc = PUB_USAGE, r;
    char err[1024];

    memset(&conn, 0, sizeof(conn));
    a.entries = xrealloc(NULL, (size_t)argc * sizeof(*a.entries)); /* x-delay + argc headers */
    a.nheaders = 1;
    if ((r = take_options(&a, argc, argv)) != 0) {
        rc = r > 0 ? PUB_OK : PUB_USAGE;
        goto cleanup;
    }
    if (check_options(&a, argc, argv) < 0)
        goto cleanup;
    rc = PUB_FAIL;
    if (take_body(&a, argc, argv) < 0 || open_confirm_channel(&conn, &a) < 0 ||
        publish_message(&conn, &a) < 0)
        goto cleanup;
    if (wait_confirm(&conn, a.timeout_ms, err, sizeof(err)) != PUB_OK) {
        fprintf(stderr, "delay-bridge publish: %s\n", err);
        goto cleanup;
    }
    printf("published and confirmed: exchange \"%s\" routing key \"%s\" x-delay %" PRId64
           " ms, %zu bytes\n", a.exchange, a.rk, a.delay, a.body_len);
    rc = PUB_OK;

cleanup:
    if (conn.st) {
        if (rc == PUB_OK)
            amqp_channel_close(conn.st, PUB_CHANNEL, AMQP_REPLY_SUCCESS);
        broker_conn_close(&conn, rc == PUB_OK);
    }
    if (a.body_owned)
        free(a.body);
    free(a.uri_env);
    free(a.entries);
    if (fflush(stdout) != 0 && rc == PUB_OK)
        rc = PUB_FAIL;
    return rc;
}
