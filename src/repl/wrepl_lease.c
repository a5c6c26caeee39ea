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
 * to the next consumer: a standby bridge waiting in recover (from 4.3, when
 * the owner's node is lost, only after the queue's disconnected-consumer
 * timeout: new lease queues get a short one, see declare_lease_queue). The lease
 * lives on the same connection as the stream publishing, so a bridge that
 * lost it can no longer write the stream either; its thread notices, fails
 * the log, and the bridge stops at its next commit or maintenance tick
 * (within 100 ms). A message already being published to its target in that
 * window may be published again by the new owner: at least once.
 *
 * ONE WRITER'S RECORDS: THE USER-ID
 *
 * The lease keeps bridges from writing the stream at once; it does not
 * keep anybody else out of it. Any client that may publish to the stream
 * (through the default exchange, or an exchange bound to it) could put a
 * FENCE there (the owner's later batches would read as strays and be
 * dropped at the next takeover), or RECORDS or a HORIZON that a standby
 * imports as the log. So every message the bridge publishes to the stream
 * carries the AMQP user-id property set to its broker user, which RabbitMQ
 * checks against the connection's authenticated user (a mismatch closes
 * the channel, 406), and the import takes only messages whose user-id is
 * that user (wrepl_from_writer): one without user-id, or with another
 * user's, is refused -- not imported, never a fence -- and counted in
 * /stats wal.replication.refused and delay_bridge_wal_replication_refused_total.
 * Every bridge of one log therefore connects as the same broker user, and
 * every URI of broker.uri names it (checked at start). What this does not
 * cover: a user with RabbitMQ's "impersonator" tag may publish any
 * user-id, and so may the administrator's tools; such users must not have
 * write access to the stream's vhost. Messages an older bridge published
 * carry no user-id and are refused too (README, "Upgrade").
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"


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

/* A publisher confirm (basic.ack or basic.nack) as an event. */
static void confirm_event(struct event *ev, int kind, amqp_channel_t ch, uint64_t tag,
                          int multiple)
{
    ev->kind = kind;
    ev->ch = ch;
    ev->tag = tag;
    ev->multiple = multiple;
}

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
            confirm_event(ev, EV_ACK, f.channel, a->delivery_tag, a->multiple);
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_NACK_METHOD: {
            amqp_basic_nack_t *a = f.payload.method.decoded;
            confirm_event(ev, EV_NACK, f.channel, a->delivery_tag, a->multiple);
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
                         broker_conn_reply_text(rr, text, sizeof(text)));
                return -1;
            }
            ev->kind = EV_DELIVER;
            amqp_maybe_release_buffers(st);
            return 0;
        }
        case AMQP_BASIC_RETURN_METHOD: {
            /* Only CH_PUB publishes mandatory: the stream is gone (its confirm follows). */
            amqp_message_t m;
            amqp_rpc_reply_t rr = amqp_read_message(st, f.channel, &m, 0);

            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                snprintf(why, n, "reading a returned message: connection lost");
                return -1;
            }
            amqp_destroy_message(&m);
            ev->kind = EV_RETURN;
            ev->ch = f.channel;
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
            broker_conn_answer_close(&r->conn, &f, why, n);
            return -1;
        default:
            amqp_maybe_release_buffers(st);
            continue;
        }
    }
}

int wrepl_publish(struct wrepl *r, const void *body, size_t n, char *why, size_t wn)
{
    amqp_basic_properties_t p;
    const char *queue = r->rc->stream;
    int s, mandatory = 1;

    if (r->fp_lose) {
        /*
         * The failpoint repl.lose_message (wrepl.c): to no queue, unroutable
         * and not mandatory, so the broker confirms a message it never
         * stores, as rabbitmq-server#12236 does (see CH_PUB).
         */
        r->fp_lose = 0;
        queue = "delay-bridge.failpoint.nowhere";
        mandatory = 0;
    }
    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_USER_ID_FLAG;
    p.delivery_mode = 2;
    p.user_id = amqp_cstring_bytes(r->conn.user); /* validated here, checked on import */
    s = amqp_basic_publish(r->conn.st, CH_PUB, amqp_empty_bytes, amqp_cstring_bytes(queue),
                           mandatory, 0, &p, (amqp_bytes_t){n, (void *)body});
    if (s != AMQP_STATUS_OK) {
        snprintf(why, wn, "publish to %s: %s", queue, amqp_error_string2(s));
        return -1;
    }
    r->next_tag++;
    return 0;
}

/* v as a log value: printable ASCII as is, but " and \ and every other byte as \xHH; 64 bytes. */
static void log_escape(const uint8_t *v, size_t n, char *out, size_t cap)
{
    size_t o = 0;

    for (size_t i = 0; i < n && i < 64 && o + 5 < cap; i++) {
        if (v[i] >= 0x20 && v[i] < 0x7f && v[i] != '"' && v[i] != '\\')
            out[o++] = (char)v[i];
        else
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", v[i]);
    }
    if (n > 64 && o + 4 < cap)
        o += (size_t)snprintf(out + o, cap - o, "...");
    out[o] = '\0';
}

/* m's user-id, which the broker validated, is this connection's user. */
static int from_us(const struct wrepl *r, const amqp_message_t *m)
{
    const amqp_basic_properties_t *p = &m->properties;
    size_t un = strlen(r->conn.user);

    return (p->_flags & AMQP_BASIC_USER_ID_FLAG) && p->user_id.len == un &&
           (un == 0 || memcmp(p->user_id.bytes, r->conn.user, un) == 0);
}

/*
 * A read goes through the stream in order, so what reads went through is
 * kept as one range of offsets: the read that ended joins it when the two
 * touch, else replaces it (a refusal it forgets may count twice).
 */
void wrepl_read_begin(struct wrepl *r)
{
    if (r->pass_lo >= 0) {
        if (r->seen_lo < 0 || r->pass_hi + 1 < r->seen_lo || r->pass_lo > r->seen_hi + 1) {
            r->seen_lo = r->pass_lo;
            r->seen_hi = r->pass_hi;
        } else {
            r->seen_lo = r->pass_lo < r->seen_lo ? r->pass_lo : r->seen_lo;
            r->seen_hi = r->pass_hi > r->seen_hi ? r->pass_hi : r->seen_hi;
        }
    }
    r->pass_lo = r->pass_hi = -1;
}

int wrepl_from_writer(struct wrepl *r, const amqp_message_t *m, int64_t offset)
{
    const amqp_basic_properties_t *p = &m->properties;
    int has = (p->_flags & AMQP_BASIC_USER_ID_FLAG) != 0;
    uint64_t now, total;
    char claimed[300], expected[300];

    if (offset >= 0) {
        if (r->pass_lo < 0)
            r->pass_lo = offset;
        r->pass_hi = offset;
    }
    if (from_us(r, m))
        return 1;
    /* Read again (a standby starting over, a resume given up): counted already. */
    if (offset >= 0 && r->seen_lo >= 0 && offset >= r->seen_lo && offset <= r->seen_hi)
        return 0;
    pthread_mutex_lock(&r->mu);
    total = ++r->st.refused;
    pthread_mutex_unlock(&r->mu);
    now = clock_mono_ms();
    if (total == 1 || now - r->refused_log_ms >= 60000) {
        r->refused_log_ms = now;
        r->refused_lines = 0;
    }
    if (r->refused_lines >= REFUSED_LINES) {
        r->refused_quiet++;
        return 0;
    }
    if (has)
        log_escape(p->user_id.bytes, p->user_id.len, claimed, sizeof(claimed));
    log_escape((const uint8_t *)r->conn.user, strlen(r->conn.user), expected, sizeof(expected));
    log_warn("wal-replica", "refused a stream message not published by this log's broker user "
             "(forged, or written by another user or an older bridge): not imported",
             "stream=%s offset=%lld user_id=%s%s%s expected_user=\"%s\" body_bytes=%zu "
             "refused_total=%llu not_logged_since=%llu", r->rc->stream, (long long)offset,
             has ? "\"" : "", has ? claimed : "(none)", has ? "\"" : "", expected,
             m->body.len, (unsigned long long)total, (unsigned long long)r->refused_quiet);
    r->refused_lines++;
    r->refused_quiet = 0;
    return 0;
}

int wrepl_declare_stream(struct wrepl *r, char *why, size_t n)
{
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};

    wrepl_arg_str(&e[args.num_entries++], "x-queue-type", "stream");
    if (r->rc->max_bytes)
        wrepl_arg_i64(&e[args.num_entries++], "x-max-length-bytes", (int64_t)r->rc->max_bytes);
    if (r->rc->max_age[0])
        wrepl_arg_str(&e[args.num_entries++], "x-max-age", r->rc->max_age);
    wrepl_arg_i64(&e[args.num_entries++], "x-stream-max-segment-size-bytes",
                  (int64_t)r->rc->segment_bytes);
    amqp_queue_declare(r->conn.st, CH_PUB, amqp_cstring_bytes(r->rc->stream), 0, 1, 0, 0, args);
    return broker_conn_check(&r->conn, "declare the stream", why, n);
}

int wrepl_reopen_stream(struct wrepl *r, char *why, size_t n)
{
    amqp_connection_state_t st = r->conn.st;

    amqp_channel_close(st, CH_PUB, AMQP_REPLY_SUCCESS);
    if (broker_conn_check(&r->conn, "close the stream's channel", why, n) < 0)
        return -1;
    amqp_channel_open(st, CH_PUB);
    if (broker_conn_check(&r->conn, "channel.open", why, n) < 0)
        return -1;
    amqp_confirm_select(st, CH_PUB);
    if (broker_conn_check(&r->conn, "confirm.select", why, n) < 0)
        return -1;
    r->next_tag = 0;
    return wrepl_declare_stream(r, why, n);
}

static const char TOKEN[] = "delay-bridge WAL lease token";

/* Publish a lease token (persistent) on CH_RENEW; r->renew_tag is its tag. 0 or -1 + why. */
static int publish_token(struct wrepl *r, const char *body, size_t len, char *why, size_t n)
{
    amqp_basic_properties_t p;

    memset(&p, 0, sizeof(p));
    p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_USER_ID_FLAG;
    p.delivery_mode = 2;
    p.user_id = amqp_cstring_bytes(r->conn.user); /* its hint is taken only then: token_hint */
    if (amqp_basic_publish(r->conn.st, CH_RENEW, amqp_empty_bytes,
                           amqp_cstring_bytes(r->rc->lease_queue), 0, 0, &p,
                           (amqp_bytes_t){len, (void *)body}) != AMQP_STATUS_OK) {
        snprintf(why, n, "publishing a lease token: connection lost");
        return -1;
    }
    r->renew_tag++;
    return 0;
}

/*
 * A spare token, for a lease queue that has none: on CH_RENEW (CH_PUB is
 * the stream's alone), confirmed before going on. The token itself may
 * arrive meanwhile (this bridge the only consumer): wrepl_renew_event()
 * takes it.
 */
static int publish_spare(struct wrepl *r, char *why, size_t n)
{
    uint64_t deadline = clock_mono_ms() + r->rc->confirm_timeout_ms;
    struct event ev;

    if (publish_token(r, TOKEN, sizeof(TOKEN) - 1, why, n) < 0)
        return -1;
    while (clock_mono_ms() < deadline) {
        if (wrepl_next_event(r, 200, &ev, why, n) < 0)
            return -1;
        if (ev.ch == CH_RENEW && ev.kind == EV_ACK && ev.tag >= r->renew_tag)
            return 0;
        if (ev.ch == CH_RENEW && ev.kind == EV_NACK) {
            snprintf(why, n, "the broker refused (nack) a lease token");
            return -1;
        }
        if (wrepl_renew_event(r, &ev, why, n) == 0 && ev.kind == EV_DELIVER)
            amqp_destroy_message(&ev.msg);
    }
    snprintf(why, n, "no publisher confirm for a lease token within %u ms",
             r->rc->confirm_timeout_ms);
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

/*
 * The lease queue: an existing one is used as it is (its arguments cannot
 * change: a declaration that differs is refused with 406); a new one is a
 * quorum queue with single active consumer, and on RabbitMQ 4.x no
 * delivery limit (x-delivery-limit -1; 4.0 made it 20 by default, and the
 * token, returned at each hand-over, would be dropped after about 20 of
 * them). 3.x has no default limit and reads -1 differently, so it gets none.
 * On 4.3 and later also x-consumer-disconnected-timeout: from 4.3.0 a
 * quorum queue keeps what a consumer on a lost node holds for 60 s
 * (consumer_disconnected_timeout) before returning it, and a single active
 * consumer on a lost node stays the active one as long, so a standby waited
 * 59 s for the token after the owner's node was killed (against 0.4 s on
 * 3.10, which returns it at once). LEASE_DISCONNECTED_MS makes it about
 * 3.10's behaviour again; it is safe for the same reason 3.10's was: an
 * owner cut off from the majority can no longer confirm a stream publish or
 * a fresh token, and stops (README, "Broker settings that matter").
 * Sets *ready to the tokens waiting. 0, or -1 (refused: err) / -2 (transient).
 */
static int declare_lease_queue(struct wrepl *r, uint32_t *ready, char *err, size_t n)
{
    amqp_connection_state_t st = r->conn.st;
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};
    amqp_queue_declare_ok_t *ok;
    amqp_rpc_reply_t rr;

    ok = amqp_queue_declare(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue), 1, 0, 0, 0,
                            amqp_empty_table);
    if (ok) {
        *ready = ok->message_count;
        return 0;
    }
    rr = amqp_get_rpc_reply(st);
    if (!(rr.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
          rr.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
          ((amqp_channel_close_t *)rr.reply.decoded)->reply_code == AMQP_NOT_FOUND)) {
        broker_conn_check(&r->conn, "look for the lease queue", err, n);
        return rr.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION ? -1 : -2;
    }
    if (broker_conn_reopen(&r->conn, CH_LEASE, err, n) < 0)
        return -2;
    wrepl_arg_str(&e[args.num_entries++], "x-queue-type", "quorum");
    e[args.num_entries].key = amqp_cstring_bytes("x-single-active-consumer");
    e[args.num_entries].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e[args.num_entries++].value.value.boolean = 1;
    if (r->server_version >= 400)
        wrepl_arg_i64(&e[args.num_entries++], "x-delivery-limit", -1);
    if (r->server_version >= 403)
        wrepl_arg_i64(&e[args.num_entries++], "x-consumer-disconnected-timeout",
                      LEASE_DISCONNECTED_MS);
    ok = amqp_queue_declare(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue), 0, 1, 0, 0,
                            args);
    if (broker_conn_check(&r->conn, "declare the lease queue", err, n) < 0)
        return -1;
    *ready = ok->message_count;
    return 0;
}

/*
 * A token's body: TOKEN, then, once the owner completed a stream
 * checkpoint, "; horizon_lsn=H horizon_ms=T" -- T the wall-clock time the
 * log rolled at H. A bridge granted the lease on an empty disk reads the
 * stream from T - HINT_MARGIN_MS (x-stream-offset as a timestamp) instead
 * of from its first message, so its import follows the live data.
 */
static size_t token_body(struct wrepl *r, char *out, size_t n)
{
    uint64_t lsn, ms;

    pthread_mutex_lock(&r->mu);
    lsn = r->hint_lsn;
    ms = r->hint_ms;
    pthread_mutex_unlock(&r->mu);
    if (!lsn)
        return (size_t)snprintf(out, n, "%s", TOKEN);
    return (size_t)snprintf(out, n, "%s; horizon_lsn=%llu horizon_ms=%llu", TOKEN,
                            (unsigned long long)lsn, (unsigned long long)ms);
}

/*
 * The hint a granted token carries, if a bridge of this log published it
 * (its user-id): anyone who may write the lease queue can add tokens, and
 * a hint only speeds the read up, so a stranger's is ignored.
 */
static void token_hint(struct wrepl *r, const amqp_message_t *m)
{
    const amqp_bytes_t *body = &m->body;
    char s[200];
    unsigned long long lsn, ms;
    size_t n = body->len < sizeof(s) - 1 ? body->len : sizeof(s) - 1;
    const char *p;

    memcpy(s, body->bytes, n);
    s[n] = '\0';
    r->grant_lsn = r->grant_ms = 0;
    if (from_us(r, m) && (p = strstr(s, "; horizon_lsn=")) && sscanf(p, "; horizon_lsn=%llu horizon_ms=%llu",
                                                    &lsn, &ms) == 2) {
        r->grant_lsn = lsn;
        r->grant_ms = ms;
    }
}

int wrepl_connect_lease(struct wrepl *r)
{
    const struct config *cfg = r->cfg;
    amqp_table_entry_t e[4];
    amqp_table_t args = {0, e};
    amqp_connection_state_t st;
    uint32_t tokens = 0;
    unsigned next = 0; /* every attempt tries broker.uris from the first */
    char err[1024] = "";
    int i;

    for (i = 0; i < cfg->nuris; i++)
        if (broker_conn_open_next(&r->conn, cfg, "wal-replica", &next, err, sizeof(err)) == 0)
            break;
    if (i == cfg->nuris) {
        log_warn("wal-replica", "cannot reach the broker; retrying", "error=\"%s\" retry_ms=%d",
                 err, RETRY_MS);
        return -EAGAIN;
    }
    st = r->conn.st;
    r->next_tag = 0;
    r->have_lease = 0;
    r->lease_tag = 0;
    r->renew = RENEW_IDLE;
    r->renew_tag = 0;
    r->server_version = broker_conn_server_version(&r->conn);
    amqp_channel_open(st, CH_PUB);
    if (broker_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    amqp_confirm_select(st, CH_PUB);
    if (broker_conn_check(&r->conn, "confirm.select", err, sizeof(err)) < 0)
        goto transient;
    amqp_channel_open(st, CH_RENEW);
    if (broker_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    amqp_confirm_select(st, CH_RENEW);
    if (broker_conn_check(&r->conn, "confirm.select", err, sizeof(err)) < 0)
        goto transient;

    if (wrepl_declare_stream(r, err, sizeof(err)) < 0)
        goto refused;

    amqp_channel_open(st, CH_LEASE);
    if (broker_conn_check(&r->conn, "channel.open", err, sizeof(err)) < 0)
        goto transient;
    if ((i = declare_lease_queue(r, &tokens, err, sizeof(err))) < 0) {
        if (i == -1)
            goto refused;
        goto transient;
    }
    amqp_basic_qos(st, CH_LEASE, 0, 1, 0);
    if (broker_conn_check(&r->conn, "basic.qos", err, sizeof(err)) < 0)
        goto transient;
    /*
     * x-consumer-timeout: where the broker reads it (a quorum queue's own
     * timeout, RabbitMQ 4.3) it replaces the broker-wide consumer_timeout
     * for this consumer, so an operator's short timeout for their workers
     * cannot end the lease between renewals; older brokers ignore it and
     * need consumer_timeout above lease_renew_ms (README).
     */
    uint64_t timeout = 6ull * r->rc->lease_renew_ms;
    args.num_entries = 0;
    wrepl_arg_i64(&e[args.num_entries++], "x-consumer-timeout",
                  (int64_t)(timeout > 60000 ? timeout : 60000));
    amqp_basic_consume(st, CH_LEASE, amqp_cstring_bytes(r->rc->lease_queue),
                       amqp_cstring_bytes("wal-lease"), 0, 0, 0, args);
    if (broker_conn_check(&r->conn, "consume the lease queue", err, sizeof(err)) < 0)
        goto refused;
    if (tokens == 0) {
        /* While another bridge holds the token this adds a spare; renewals use spares up. */
        if (publish_spare(r, err, sizeof(err)) < 0)
            goto transient;
    }
    return 0;

transient:
    log_warn("wal-replica", "broker connection failed; retrying", "error=\"%s\"", err);
    broker_conn_close(&r->conn, 0);
    return -EAGAIN;
refused:
    log_error("wal-replica", "the broker refused the replication stream or lease queue",
              "stream=%s lease_queue=%s error=\"%s\"", r->rc->stream, r->rc->lease_queue, err);
    broker_conn_close(&r->conn, 0);
    return WLOG_EREPLICA;
}

/*
 * RENEWING THE LEASE
 *
 * Holding the lease means being the queue's single active consumer; the
 * token is how a bridge learns that it became one. Kept unacked forever,
 * the token would meet two broker timers: the delivery acknowledgement
 * timeout (consumer_timeout, 30 min by default since 3.8.15; 4.3 enforces
 * it in the quorum queue itself) closes the channel, or cancels the
 * consumer, and the lease moves; and the delivery limit (20 by default
 * since 4.0) drops a token returned too often. So every lease_renew_ms the
 * owner trades its token for a fresh one:
 *
 *     IDLE --due--> passive declare: tokens ready?
 *        none: publish a fresh token on CH_RENEW --confirm--> ack the held one
 *        some: ack the held one (a spare comes next: spares are used up)
 *     DELIVER --the broker delivers the next token to us--> IDLE
 *
 * The fresh token is confirmed before the held one is acked, so the queue
 * never lacks a token for the next owner. While the token is acked and the
 * next one not yet here the bridge is still the active consumer: no other
 * consumer gets a delivery. If the next token does not come within
 * confirm_timeout_ms, another consumer may have it: the lease is lost.
 */
int wrepl_renew_wait_ms(const struct wrepl *r)
{
    uint64_t now = clock_mono_ms(), at;

    if (!r->have_lease)
        return 1000;
    at = r->renew == RENEW_IDLE ? r->renew_at : r->renew_deadline;
    return at <= now ? 0 : at - now > 1000 ? 1000 : (int)(at - now);
}

static int ack_token(struct wrepl *r, char *why, size_t n)
{
    if (r->lease_tag && amqp_basic_ack(r->conn.st, CH_LEASE, r->lease_tag, 0) != AMQP_STATUS_OK) {
        snprintf(why, n, "acking the lease token: connection lost");
        return -1;
    }
    r->lease_tag = 0;
    r->renew = RENEW_DELIVER;
    r->renew_deadline = clock_mono_ms() + r->rc->confirm_timeout_ms;
    return 0;
}

int wrepl_renew_step(struct wrepl *r, char *why, size_t n)
{
    uint64_t now = clock_mono_ms();

    if (!r->have_lease)
        return 0;
    if (r->renew != RENEW_IDLE && now >= r->renew_deadline) {
        snprintf(why, n, r->renew == RENEW_CONFIRM
                             ? "no confirm for a fresh lease token within %u ms"
                             : "the fresh lease token did not come within %u ms (another "
                               "bridge may hold the lease)",
                 r->rc->confirm_timeout_ms);
        return -1;
    }
    if (r->renew != RENEW_IDLE || now < r->renew_at)
        return 0;
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(
        r->conn.st, CH_RENEW, amqp_cstring_bytes(r->rc->lease_queue), 1, 0, 0, 0, amqp_empty_table);
    if (broker_conn_check(&r->conn, "renewing the lease: look at the lease queue", why, n) < 0)
        return -1;
    if (ok->message_count > 0)
        return ack_token(r, why, n);
    char body[200];
    if (publish_token(r, body, token_body(r, body, sizeof(body)), why, n) < 0)
        return -1;
    r->renew = RENEW_CONFIRM;
    r->renew_deadline = now + r->rc->confirm_timeout_ms;
    return 0;
}

int wrepl_renew_event(struct wrepl *r, const struct event *ev, char *why, size_t n)
{
    if (ev->kind == EV_DELIVER && ev->ch == CH_LEASE) {
        if (!r->have_lease)
            token_hint(r, &ev->msg);
        amqp_destroy_message((amqp_message_t *)&ev->msg);
        if (r->lease_tag) /* cannot happen with prefetch 1; keep one token, not two */
            amqp_basic_ack(r->conn.st, CH_LEASE, r->lease_tag, 0);
        r->lease_tag = ev->tag;
        if (!r->have_lease)
            r->renew_at = clock_mono_ms(); /* a fresh token at once: it carries its deliveries */
        r->have_lease = 1;
        if (r->renew == RENEW_DELIVER) {
            r->renew = RENEW_IDLE;
            pthread_mutex_lock(&r->mu);
            r->st.lease_renewals++; /* completed: a fresh token is held */
            pthread_mutex_unlock(&r->mu);
            r->renew_at = clock_mono_ms() + r->rc->lease_renew_ms;
        }
        return 1;
    }
    if (ev->ch != CH_RENEW || (ev->kind != EV_ACK && ev->kind != EV_NACK))
        return 0;
    if (r->renew != RENEW_CONFIRM || ev->tag < r->renew_tag)
        return 1;
    if (ev->kind == EV_NACK) {
        log_warn("wal-replica", "the broker refused (nack) a fresh lease token; the held one "
                 "stays, trying again in 1 s", "lease_queue=%s", r->rc->lease_queue);
        r->renew = RENEW_IDLE;
        r->renew_at = clock_mono_ms() + 1000;
        return 1;
    }
    return ack_token(r, why, n) < 0 ? -1 : 1;
}
