/*
 * wrepl_lease.c -- the replicated log's broker connection and its lease.
 *
 * ONE WRITER: THE LEASE
 *
 * Before it touches the stream, recover takes the lease: it consumes the
 * lease queue (a quorum queue with x-single-active-consumer, prefetch 1),
 * puts a token message in it when none is there, and waits until the
 * broker delivers a token to it. Only the single active consumer gets a
 * delivery, and it keeps the token unacked for as long as it owns the log.
 * When its connection goes (a crash, kill -9, a partition noticed by
 * heartbeats), the broker requeues the token and hands it, and the lease,
 * to the next consumer: a standby bridge waiting in recover. The lease
 * lives on the same connection as the stream publishing, so a bridge that
 * lost it can no longer write the stream either; its thread notices, fails
 * the log, and the bridge stops at its next commit or maintenance tick
 * (within 100 ms). A message already being published to its target in that
 * window may be published again by the new owner: at least once.
 *
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "delay-bridge/log.h"
#include "delay-bridge/xalloc.h"

uint64_t wrepl_rand64(void)
{
    uint64_t v = 0;

    while (v == 0)
        if (getrandom(&v, sizeof(v), 0) != sizeof(v))
            v = clock_mono_ns() ^ ((uint64_t)getpid() << 32);
    return v;
}

void wrepl_buf_reserve(struct buf *b, size_t n)
{
    if (b->len + n <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 1u << 20;
    while (cap < b->len + n)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}

/* ---- frames ------------------------------------------------------------------------ */

int wrepl_next_event(struct wrepl *r, int timeout_ms, struct event *ev, char *why, size_t n)
{
    amqp_connection_state_t st = r->conn.st;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_frame_t f;

    ev->kind = EV_NONE;
    for (;;) {
        int s = amqp_simple_wait_frame_noblock(st, &f, &tv);

        if (s == AMQP_STATUS_TIMEOUT)
            return 0;
        if (s != AMQP_STATUS_OK) {
            snprintf(why, n, "connection lost: %s", amqp_error_string2(s));
            return -1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        switch (f.payload.method.id) {
        case AMQP_BASIC_ACK_METHOD: {
            amqp_basic_ack_t *a = f.payload.method.decoded;
            ev->kind = EV_ACK;
            ev->ch = f.channel;
            ev->tag = a->delivery_tag;
            ev->multiple = a->multiple;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_NACK_METHOD: {
            amqp_basic_nack_t *a = f.payload.method.decoded;
            ev->kind = EV_NACK;
            ev->ch = f.channel;
            ev->tag = a->delivery_tag;
            ev->multiple = a->multiple;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_DELIVER_METHOD: {
            amqp_basic_deliver_t *d = f.payload.method.decoded;
            amqp_rpc_reply_t rr;
            char text[512];

            ev->ch = f.channel;
            ev->tag = d->delivery_tag;
            rr = amqp_read_message(st, f.channel, &ev->msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                snprintf(why, n, "reading a delivery: %s",
                         amqp_conn_reply_text(rr, text, sizeof(text)));
                return -1;
            }
            ev->kind = EV_DELIVER;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_CANCEL_METHOD:
            ev->kind = EV_CANCEL;
            ev->ch = f.channel;
            amqp_maybe_release_buffers(st);
            return 0;
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
            amqp_conn_answer_close(&r->conn, &f, why, n);
            return -1;
        default:
            amqp_maybe_release_buffers(st);
            continue;
        }
    }
}

int wrepl_publish(struct wrepl *r, const char *queue, const void *body, size_t n, char *why,
                   size_t wn)
{
    amqp_basic_properties_t p;
    int s;

    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.delivery_mode = 2;
    s = amqp_basic_publish(r->conn.st, CH_PUB, amqp_empty_bytes, amqp_cstring_bytes(queue), 0, 0,
                           &p, (amqp_bytes_t){n, (void *)body});
    if (s != AMQP_STATUS_OK) {
        snprintf(why, wn, "publish to %s: %s", queue, amqp_error_string2(s));
        return -1;
    }
    r->next_tag++;
    return 0;
}

int wrepl_wait_confirm(struct wrepl *r, char *why, size_t n)
{
    uint64_t tag = r->next_tag, deadline = now_ms() + r->rc->confirm_timeout_ms;
    struct event ev;

    while (now_ms() < deadline) {
        if (wrepl_next_event(r, 200, &ev, why, n) < 0)
            return -1;
        if (ev.kind == EV_DELIVER) {
            if (ev.ch == CH_LEASE && !r->have_lease)
                r->have_lease = 1;
            amqp_destroy_message(&ev.msg);
        } else if (ev.kind == EV_ACK && ev.ch == CH_PUB && ev.tag >= tag) {
            return 0;
        } else if (ev.kind == EV_NACK && ev.ch == CH_PUB) {
            snprintf(why, n, "the broker refused (nack) a publish");
            return -1;
        }
    }
    snprintf(why, n, "no publisher confirm within %u ms", r->rc->confirm_timeout_ms);
    return -1;
}

/* ---- lease and stream: connect, declare, wait ------------------------------------- */

void wrepl_arg_str(amqp_table_entry_t *e, const char *key, const char *v)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(v);
}

void wrepl_arg_i64(amqp_table_entry_t *e, const char *key, int64_t v)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_I64;
    e->value.value.i64 = v;
}

int wrepl_connect_lease(struct wrepl *r)
{
    const struct config *cfg = r->cfg;
    struct amqp_conn_tls tls = {cfg->tls.ca_file, cfg->tls.cert_file, cfg->tls.key_file,
                                cfg->tls.verify_hostname};
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};
    amqp_connection_state_t st;
    amqp_queue_declare_ok_t *ok;
    char name[300], err[1024] = "";
    int i;

    snprintf(name, sizeof(name), "delay-bridge wal-replica%s%s", cfg->instance[0] ? " " : "",
             cfg->instance);
    for (i = 0; i < cfg->nuris; i++)
        if (amqp_conn_open(&r->conn, cfg->uris[i], name, &tls, cfg->heartbeat_s,
                           cfg->connect_timeout_ms, err, sizeof(err)) == 0)
            break;
    if (i == cfg->nuris) {
        log_warn("wal-replica", "cannot reach the broker; retrying", "error=\"%s\" retry_ms=%d",
                 err, RETRY_MS);
        return -EAGAIN;
    }
    st = r->conn.st;
    r->next_tag = 0;
    r->have_lease = 0;
    amqp_channel_open(st, CH_PUB);
    if (amqp_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    amqp_confirm_select(st, CH_PUB);
    if (amqp_conn_check(&r->conn, "confirm.select", err, sizeof(err)) < 0)
        goto transient;

    wrepl_arg_str(&e[args.num_entries++], "x-queue-type", "stream");
    if (r->rc->max_bytes)
        wrepl_arg_i64(&e[args.num_entries++], "x-max-length-bytes", (int64_t)r->rc->max_bytes);
    if (r->rc->max_age[0])
        wrepl_arg_str(&e[args.num_entries++], "x-max-age", r->rc->max_age);
    wrepl_arg_i64(&e[args.num_entries++], "x-stream-max-segment-size-bytes",
            (int64_t)r->rc->segment_bytes);
    amqp_queue_declare(st, CH_PUB, amqp_cstring_bytes(r->rc->stream), 0, 1, 0, 0, args);
    if (amqp_conn_check(&r->conn, "declare the stream", err, sizeof(err)) < 0)
        goto refused;

    args.num_entries = 0;
    amqp_channel_open(st, CH_LEASE);
    if (amqp_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    wrepl_arg_str(&e[args.num_entries++], "x-queue-type", "quorum");
    e[args.num_entries].key = amqp_cstring_bytes("x-single-active-consumer");
    e[args.num_entries].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e[args.num_entries++].value.value.boolean = 1;
    ok = amqp_queue_declare(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue), 0, 1, 0, 0,
                            args);
    if (amqp_conn_check(&r->conn, "declare the lease queue", err, sizeof(err)) < 0)
        goto refused;
    uint32_t tokens = ok->message_count;
    amqp_basic_qos(st, CH_LEASE, 0, 1, 0);
    if (amqp_conn_check(&r->conn, "basic.qos", err, sizeof(err)) < 0)
        goto transient;
    amqp_basic_consume(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue),
                       amqp_cstring_bytes("wal-lease"), 0, 0, 0, amqp_empty_table);
    if (amqp_conn_check(&r->conn, "consume the lease queue", err, sizeof(err)) < 0)
        goto refused;
    if (tokens == 0) {
        static const char token[] = "delay-bridge WAL lease token";
        if (wrepl_publish(r, r->rc->lease_queue, token, sizeof(token) - 1, err, sizeof(err)) < 0 ||
            wrepl_wait_confirm(r, err, sizeof(err)) < 0)
            goto transient;
    }
    return 0;

transient:
    log_warn("wal-replica", "broker connection failed; retrying", "error=\"%s\"", err);
    amqp_conn_close(&r->conn, 0);
    return -EAGAIN;
refused:
    log_error("wal-replica", "the broker refused the replication stream or lease queue",
              "stream=%s lease_queue=%s error=\"%s\"", r->rc->stream, r->rc->lease_queue, err);
    amqp_conn_close(&r->conn, 0);
    return WLOG_EREPLICA;
}

int wrepl_wait_lease(struct wrepl *r)
{
    uint64_t since = now_ms(), said = 0;
    struct event ev;
    char why[512];

    while (!r->have_lease) {
        if (atomic_load(&r->cancel))
            return -ECANCELED;
        if (wrepl_next_event(r, 250, &ev, why, sizeof(why)) < 0) {
            log_warn("wal-replica", "lost the broker while standing by; reconnecting",
                     "error=\"%s\"", why);
            amqp_conn_close(&r->conn, 0);
            return -EAGAIN;
        }
        if (ev.kind == EV_DELIVER) {
            if (ev.ch == CH_LEASE)
                r->have_lease = 1;
            amqp_destroy_message(&ev.msg);
        } else if (ev.kind == EV_CANCEL) {
            log_warn("wal-replica", "the broker cancelled the lease consumer (queue deleted?); "
                     "reconnecting", "lease_queue=%s", r->rc->lease_queue);
            amqp_conn_close(&r->conn, 0);
            return -EAGAIN;
        }
        if (!r->have_lease && now_ms() - since >= 1000 && (said == 0 || now_ms() - said >= 60000)) {
            said = now_ms();
            log_info("wal-replica", "standing by: another bridge holds the lease of this log",
                     "stream=%s lease_queue=%s waited_s=%llu", r->rc->stream, r->rc->lease_queue,
                     (unsigned long long)((now_ms() - since) / 1000));
        }
    }
    return 0;
}

/* ---- the import ------------------------------------------------------------------ */
