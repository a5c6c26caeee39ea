/*
 * cli_wal_dump.c -- "delay-bridge wal dump DIR": the pending messages of a
 * WAL directory in due order, as text or JSON.
 *
 * Runs the read-only scan (cli_wal_scan.c), sorts the pending messages by
 * due time then msg id, and reads each one printed back from its still-open
 * segment file, checking the record again (a live daemon may have compacted
 * it away meanwhile: the fd keeps the bytes). The AMQP properties stored in
 * the record are decoded with rabbitmq-c (--headers); the JSON form shares
 * api.h's field names with the HTTP endpoint's GET /pending.
 */
#define _GNU_SOURCE
#include "cli_wal_int.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <json-c/json.h>

#include "delay-bridge/broker_msg.h"
#include "delay-bridge/api.h"
#include "delay-bridge/walrec.h"
#include "base/xalloc.h"

/* ---- wal dump ---------------------------------------------------------- */

static void dump_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal dump DIR [--route R] [--key K] [--due-before T]\n"
            "                             [--limit N] [--headers] [--json]\n"
            "\n"
            "List the pending messages of the WAL directory DIR in due order (due time,\n"
            "then msg id): due time (ISO-8601 UTC and ms since the epoch), route, exchange\n"
            "and routing key it was published with, body size, message-id property, msg id,\n"
            "x-delay-key (- when none; JSON: \"key\", null when none).\n"
            "Strings are printed with spaces and non-printable bytes as \\xNN.\n"
            "\n"
            "  --route R        only messages of route R\n"
            "  --key K          only messages held with x-delay-key K\n"
            "  --due-before T   only messages due before T: ms since the epoch or ISO-8601\n"
            "                   (2026-11-23T10:00:00Z, 2026-11-23T10:00:00.250+01:00)\n"
            "  --limit N        at most N messages (the first N in due order)\n"
            "  --headers        decode the stored AMQP properties and show the header table\n"
            "                   (strings and numbers; other types by name)\n"
            "  --json           a JSON array of objects instead of text\n"
            "  -h, --help       print this help and exit\n"
            "\n"
            "Read-only and lock-free: safe on the directory of a running daemon.\n"
            "Exit codes: 0 ok (a torn tail of the newest segment included), 1 directory\n"
            "unreadable or I/O error, 2 usage, 4 corrupt (nothing is listed).\n");
}

struct dump_opts {
    const char *route;
    const char *key;     /* NULL: any */
    uint64_t due_before; /* 0: no limit */
    uint64_t limit;      /* 0: all */
    int headers, json;
};

static const char *kind_name(uint8_t k)
{
    switch (k) {
    case AMQP_FIELD_KIND_BOOLEAN: return "bool";
    case AMQP_FIELD_KIND_I8: return "int8";
    case AMQP_FIELD_KIND_U8: return "uint8";
    case AMQP_FIELD_KIND_I16: return "int16";
    case AMQP_FIELD_KIND_U16: return "uint16";
    case AMQP_FIELD_KIND_I32: return "int32";
    case AMQP_FIELD_KIND_U32: return "uint32";
    case AMQP_FIELD_KIND_I64: return "int64";
    case AMQP_FIELD_KIND_U64: return "uint64";
    case AMQP_FIELD_KIND_F32: return "float";
    case AMQP_FIELD_KIND_F64: return "double";
    case AMQP_FIELD_KIND_DECIMAL: return "decimal";
    case AMQP_FIELD_KIND_UTF8: return "string";
    case AMQP_FIELD_KIND_ARRAY: return "array";
    case AMQP_FIELD_KIND_TIMESTAMP: return "timestamp";
    case AMQP_FIELD_KIND_TABLE: return "table";
    case AMQP_FIELD_KIND_VOID: return "void";
    case AMQP_FIELD_KIND_BYTES: return "bytes";
    default: return "unknown";
    }
}

static void field_text(FILE *f, const amqp_field_value_t *v)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: fputs(v->value.boolean ? "true" : "false", f); break;
    case AMQP_FIELD_KIND_I8: fprintf(f, "%d", v->value.i8); break;
    case AMQP_FIELD_KIND_U8: fprintf(f, "%u", v->value.u8); break;
    case AMQP_FIELD_KIND_I16: fprintf(f, "%d", v->value.i16); break;
    case AMQP_FIELD_KIND_U16: fprintf(f, "%u", v->value.u16); break;
    case AMQP_FIELD_KIND_I32: fprintf(f, "%" PRId32, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: fprintf(f, "%" PRIu32, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: fprintf(f, "%" PRId64, v->value.i64); break;
    case AMQP_FIELD_KIND_U64: fprintf(f, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_TIMESTAMP: fprintf(f, "%" PRIu64, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: fprintf(f, "%.9g", v->value.f32); break;
    case AMQP_FIELD_KIND_F64: fprintf(f, "%.17g", v->value.f64); break;
    case AMQP_FIELD_KIND_UTF8:
        cw_put_field(f, v->value.bytes.bytes, v->value.bytes.len);
        break;
    case AMQP_FIELD_KIND_BYTES:
        fprintf(f, "(bytes, %zu)", v->value.bytes.len);
        return;
    default:
        fprintf(f, "(%s)", kind_name(v->kind));
        return;
    }
    fprintf(f, " (%s)", kind_name(v->kind));
}

static json_object *str_json(const void *p, size_t n)
{
    return api_json_str(p, n); /* AMQP strings are bytes: keep the JSON valid */
}

static void props_text(FILE *f, const amqp_basic_properties_t *p)
{
#define PROP_STR(flag, field, key)                                                          \
    if (p->_flags & (flag)) {                                                              \
        fputs("    " key " ", f);                                                          \
        cw_put_field(f, p->field.bytes, p->field.len);                                        \
        fputc('\n', f);                                                                    \
    }
    PROP_STR(AMQP_BASIC_CONTENT_TYPE_FLAG, content_type, "content_type")
    PROP_STR(AMQP_BASIC_CONTENT_ENCODING_FLAG, content_encoding, "content_encoding")
    PROP_STR(AMQP_BASIC_CORRELATION_ID_FLAG, correlation_id, "correlation_id")
    PROP_STR(AMQP_BASIC_REPLY_TO_FLAG, reply_to, "reply_to")
    PROP_STR(AMQP_BASIC_EXPIRATION_FLAG, expiration, "expiration")
    PROP_STR(AMQP_BASIC_TYPE_FLAG, type, "type")
    PROP_STR(AMQP_BASIC_USER_ID_FLAG, user_id, "user_id")
    PROP_STR(AMQP_BASIC_APP_ID_FLAG, app_id, "app_id")
#undef PROP_STR
    if (p->_flags & AMQP_BASIC_DELIVERY_MODE_FLAG)
        fprintf(f, "    delivery_mode %u\n", p->delivery_mode);
    if (p->_flags & AMQP_BASIC_PRIORITY_FLAG)
        fprintf(f, "    priority %u\n", p->priority);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        fprintf(f, "    timestamp %" PRIu64 "\n", p->timestamp);
}

/* One pending message read back: its ADD record, decoded properties and its times as text. */
struct dumped {
    struct walrec_add a;             /* points into the scan's buffer */
    amqp_basic_properties_t *props;  /* in the pool; NULL: none, or they do not decode */
    char due[48], enq[48], bid[48];  /* due and enqueue time (ISO 8601), x-delay-bridge-id */
    int has_mid, has_hdr;            /* props carry a message-id, headers */
};

/*
 * Read m's record back from the open segment, check it again and decode it
 * into d (its properties into pool). 0, or CLI_EIO (reported).
 */
static int read_back(struct scan *s, const struct live *m, amqp_pool_t *pool, struct dumped *d)
{
    struct seg *g = &s->segs[m->seg];
    struct walrec_hdr h;
    const uint8_t *pl;
    ssize_t got;

    if (m->len > s->cap) {
        s->buf = xrealloc(s->buf, m->len);
        s->cap = m->len;
    }
    got = walscan_pread(g->fd, s->buf, m->len, m->off);
    if (got < 0 || (size_t)got != m->len ||
        walrec_decode(s->buf, m->len, g->salt, &h, &pl) != (int)m->len ||
        walrec_add_decode(pl, h.len, &d->a) != (int)h.len) {
        fprintf(stderr, "delay-bridge wal dump: cannot read back the record at %s/%s offset %"
                PRIu32 ": %s\n", s->dir, g->name, m->off,
                got < 0 ? strerror((int)-got) : "it changed since the scan");
        return CLI_EIO;
    }
    recycle_amqp_pool(pool);
    d->props = NULL;
    if (d->a.props_len &&
        amqp_decode_properties(AMQP_BASIC_CLASS, pool,
                               (amqp_bytes_t){d->a.props_len, (void *)d->a.props},
                               (void **)&d->props) < 0) {
        d->props = NULL;
        fprintf(stderr, "delay-bridge wal dump: msg_id %" PRIu64 ": stored AMQP properties do "
                "not decode\n", m->msg_id);
    }
    cw_fmt_iso(m->due_ms, d->due, sizeof(d->due));
    cw_fmt_iso(m->enqueue_ms, d->enq, sizeof(d->enq));
    snprintf(d->bid, sizeof(d->bid), "%016" PRIx64 "-%" PRIu64, s->wal_id, m->msg_id);
    d->has_mid = d->props && (d->props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG);
    d->has_hdr = d->props && (d->props->_flags & AMQP_BASIC_HEADERS_FLAG);
    return 0;
}

/* One message as an element of the --json array (first: no comma before it). */
static void dump_json(const struct dump_opts *o, const struct live *m, uint64_t segno,
                      const struct dumped *d, int first)
{
    const struct walrec_add *a = &d->a;
    json_object *j = json_object_new_object();

    json_object_object_add(j, "due", json_object_new_string(d->due));
    json_object_object_add(j, "due_ms", json_object_new_uint64(m->due_ms));
    json_object_object_add(j, "enqueue", json_object_new_string(d->enq));
    json_object_object_add(j, "enqueue_ms", json_object_new_uint64(m->enqueue_ms));
    json_object_object_add(j, "route", str_json(a->route, a->route_len));
    json_object_object_add(j, "exchange", str_json(a->exchange, a->exchange_len));
    json_object_object_add(j, "routing_key", str_json(a->routing_key, a->routing_key_len));
    json_object_object_add(j, "size", json_object_new_int64(a->body_len));
    json_object_object_add(j, "message_id",
                           d->has_mid ? str_json(d->props->message_id.bytes,
                                                 d->props->message_id.len)
                                      : NULL);
    json_object_object_add(j, "msg_id", json_object_new_uint64(m->msg_id));
    json_object_object_add(j, "key", (a->flags & WALREC_ADD_KEYED) ? str_json(a->key, a->key_len)
                                                                    : NULL);
    json_object_object_add(j, "bridge_id", json_object_new_string(d->bid));
    json_object_object_add(j, "lsn", json_object_new_uint64(m->lsn));
    json_object_object_add(j, "segment", json_object_new_uint64(segno));
    json_object_object_add(j, "offset", json_object_new_int64(m->off));
    json_object_object_add(j, "dead_letter",
                           json_object_new_boolean((a->flags & WALREC_ADD_DEADLETTER) != 0));
    if (a->flags & WALREC_ADD_DEADLETTER)
        json_object_object_add(j, "error", json_object_new_int64(a->error));
    if (o->headers) {
        /* the daemon's own rendering (broker_msg.c), headers lifted beside the rest */
        json_object *pj = broker_msg_props_json(a->props, a->props_len), *hj = NULL;
        if (!pj)
            pj = json_object_new_object();
        if (json_object_object_get_ex(pj, "headers", &hj)) {
            json_object_get(hj);
            json_object_object_del(pj, "headers");
        }
        json_object_object_add(j, "headers", hj ? hj : json_object_new_object());
        json_object_object_add(j, "properties", pj);
    }
    printf("%s  %s", first ? "" : ",\n",
           json_object_to_json_string_ext(j, JSON_C_TO_STRING_SPACED |
                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(j);
}

/* One message as a line of text, with --headers its headers and properties below it. */
static void dump_text(const struct dump_opts *o, const struct live *m, const struct dumped *d)
{
    const struct walrec_add *a = &d->a;
    const amqp_basic_properties_t *props = d->props;

    printf("%s %" PRIu64 " ", d->due, m->due_ms);
    cw_put_field(stdout, a->route, a->route_len);
    putchar(' ');
    cw_put_field(stdout, a->exchange, a->exchange_len);
    putchar(' ');
    cw_put_field(stdout, a->routing_key, a->routing_key_len);
    printf(" %" PRIu32 " ", a->body_len);
    if (d->has_mid)
        cw_put_field(stdout, props->message_id.bytes, props->message_id.len);
    else
        putchar('-');
    printf(" %" PRIu64 " ", m->msg_id);
    if (a->flags & WALREC_ADD_KEYED)
        cw_put_field(stdout, a->key, a->key_len);
    else
        putchar('-');
    printf("%s\n", (a->flags & WALREC_ADD_DEADLETTER) ? " dead-letter" : "");
    if (!o->headers)
        return;
    if (d->has_hdr)
        for (int i = 0; i < props->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &props->headers.entries[i];
            fputs("    header ", stdout);
            cw_put_field(stdout, e->key.bytes, e->key.len);
            fputs(" = ", stdout);
            field_text(stdout, &e->value);
            putchar('\n');
        }
    if (props)
        props_text(stdout, props);
}

/*
 * Print one pending message. Reads its record back from the open segment
 * and checks it again. 0, or CLI_EIO (reported).
 */
static int dump_one(struct scan *s, const struct dump_opts *o, const struct live *m,
                    amqp_pool_t *pool, int first)
{
    struct dumped d;

    if (read_back(s, m, pool, &d) != 0)
        return CLI_EIO;
    if (o->json)
        dump_json(o, m, s->segs[m->seg].segno, &d, first);
    else
        dump_text(o, m, &d);
    return 0;
}

/* The command line into o. -1 to go on, or the exit code (help, usage). */
static int dump_options(int argc, char **argv, struct dump_opts *o)
{
    static const struct option opts[] = {
        {"route", required_argument, NULL, 'r'},
        {"key", required_argument, NULL, 'k'},
        {"due-before", required_argument, NULL, 'b'},
        {"limit", required_argument, NULL, 'n'},
        {"headers", no_argument, NULL, 'H'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            o->route = optarg;
            break;
        case 'k':
            o->key = optarg;
            break;
        case 'b':
            if (cw_parse_time(optarg, &o->due_before) < 0) {
                fprintf(stderr, "delay-bridge wal dump: --due-before %s: expected ms since the "
                        "epoch or ISO-8601 like 2026-11-23T10:00:00Z\n", optarg);
                return CLI_USAGE;
            }
            break;
        case 'n':
            errno = 0;
            o->limit = strtoull(optarg, &end, 10);
            if (errno || *end || !*optarg || optarg[0] == '-' || o->limit == 0) {
                fprintf(stderr, "delay-bridge wal dump: --limit %s: expected a positive count\n",
                        optarg);
                return CLI_USAGE;
            }
            break;
        case 'H':
            o->headers = 1;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            dump_usage(stdout);
            return CLI_OK;
        default:
            dump_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal dump: expected one directory\n");
        dump_usage(stderr);
        return CLI_USAGE;
    }
    return -1;
}

/*
 * delay-bridge wal dump DIR: scan, sort the pending messages by due time,
 * print those that match, then a footer.
 */
int cw_dump(int argc, char **argv)
{
    struct dump_opts o = {NULL, NULL, 0, 0, 0, 0};
    struct scan s;
    pool_handle *v;
    amqp_pool_t pool;
    size_t n, shown = 0, matched = 0;
    int rc;

    if ((rc = dump_options(argc, argv, &o)) >= 0)
        return rc;
    rc = cw_scan_dir(&s, argv[optind], o.key);
    if (rc != CLI_OK) {
        cw_scan_free(&s);
        return rc;
    }
    v = cw_live_handles(&s, &n);
    cw_sort_due(&s, v, n);
    init_amqp_pool(&pool, 4096);
    if (o.json)
        printf("[\n");
    else
        printf("# DUE DUE_MS ROUTE EXCHANGE ROUTING_KEY SIZE MESSAGE_ID MSG_ID KEY\n");
    for (size_t i = 0; i < n && rc == CLI_OK; i++) {
        const struct live *m = pool_at(&s.pool, v[i]);
        const struct route_stat *r = &s.routes[m->route];

        if (o.route && (strlen(o.route) != r->len || memcmp(o.route, r->name, r->len) != 0))
            continue;
        if (o.key && !m->key_match)
            continue;
        if (o.due_before && m->due_ms >= o.due_before)
            break; /* sorted by due time: nothing later matches */
        matched++;
        if (o.limit && shown >= o.limit)
            continue;
        rc = dump_one(&s, &o, m, &pool, shown == 0);
        shown++;
    }
    if (o.json)
        printf("%s]\n", shown ? "\n" : "");
    else
        printf("# %zu shown, %zu matching, %zu pending in all%s\n", shown, matched, n,
               s.torn ? "; the newest segment ends in a torn tail" : "");
    if (s.torn)
        fprintf(stderr, "delay-bridge wal dump: note: torn tail in the newest segment %s at "
                "offset %" PRIu64 " (%s); not corruption\n", s.segs[s.nsegs - 1].name,
                s.torn_off, s.torn_why);
    empty_amqp_pool(&pool);
    free(v);
    cw_scan_free(&s);
    if (fflush(stdout) != 0 && rc == CLI_OK) {
        fprintf(stderr, "delay-bridge wal dump: cannot write output: %s\n", strerror(errno));
        rc = CLI_EIO;
    }
    return rc;
}

