/*
 * broker_conn.c -- opening and closing one rabbitmq-c connection.
 *
 * Everything here blocks, bounded by the timeout given at open: it runs
 * when a connection is (re)established, never per message.
 *
 * broker_conn_open_next() is the daemon's one way to a broker: the consumer,
 * the publisher and the replicated log's thread each keep a counter, and
 * each attempt takes the next of broker.uris, so a side whose broker went
 * away tries the next one on its next attempt, without the three agreeing
 * on anything. The connection's name ("delay-bridge consumer", ...
 * "publisher", "wal-replica", then the instance) is how an operator, and
 * the tests, tell them apart in the broker's list of connections.
 *
 * TLS (amqps://) goes through rabbitmq-c's OpenSSL socket, which completes
 * the handshake, then checks the chain (SSL_get_verify_result) and, when
 * asked, the host name, and closes the socket on any failure: there is no
 * path from an amqps:// URI to a plain TCP connection. Its status codes
 * carry no OpenSSL detail, so tls_error() turns each into a sentence that
 * says which setting to look at.
 *
 * The frame encoders at the end write what amqp_basic_publish() and
 * amqp_send_method() would put on the socket, byte for byte: the same
 * rabbitmq-c encoders fill the payloads (amqp_encode_method,
 * amqp_encode_properties), and the frame layout around them is the one
 * the header draws. A content-header frame is bounded by frame_max like
 * any other, so a publish needs at most: the method frame (its two short
 * strings and 7 fixed bytes, plus 8 of framing), one frame_max for the
 * header, and the body plus 8 bytes per body frame; the caller reserves
 * that and the encoder never grows anything.
 *
 * Heartbeats: rabbitmq-c sends one from inside amqp_simple_wait_frame*()
 * when it has written nothing for a while, with a blocking write. A caller
 * that writes the socket itself cannot let that happen (the heartbeat
 * could land in the middle of one of its frames, or block the loop), so
 * broker_conn_own_heartbeats() sets rabbitmq-c's own interval to 0 with
 * amqp_tune_connection(). That call only changes the library's timers
 * (next send and next expected receive become "never") and reallocates
 * its output buffer to the same frame_max; nothing goes to the broker,
 * which keeps the interval of connection.tune-ok. amqp_tune_connection()
 * aborts the process unless the connection's reader is between frames
 * (CONNECTION_STATE_IDLE), which amqp_release_buffers_ok() tells: right
 * after login it always is, since login returns on a whole frame.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "delay-bridge/config.h"
#include "base/log.h"
#include "delay-bridge/broker_conn.h"
#include "delay-bridge/uri.h"

const char *broker_conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        snprintf(buf, len, "ok");
        break;
    case AMQP_RESPONSE_NONE:
        snprintf(buf, len, "no reply");
        break;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        snprintf(buf, len, "%s", amqp_error_string2(r.library_error));
        break;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            amqp_connection_close_t *m = r.reply.decoded;
            snprintf(buf, len, "connection closed by broker: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            amqp_channel_close_t *m = r.reply.decoded;
            snprintf(buf, len, "channel closed by broker: %u %.*s", m->reply_code,
                     (int)m->reply_text.len, (char *)m->reply_text.bytes);
        } else {
            snprintf(buf, len, "unexpected method 0x%08x", r.reply.id);
        }
        break;
    }
    return buf;
}

int broker_conn_check(struct broker_conn *c, const char *what, char *err, size_t errlen)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c->st);
    char text[512];

    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    snprintf(err, errlen, "%s: %s", what, broker_conn_reply_text(r, text, sizeof(text)));
    return -1;
}

int broker_conn_reopen(struct broker_conn *c, amqp_channel_t ch, char *err, size_t errlen)
{
    amqp_channel_close_ok_t ok;

    if (amqp_send_method(c->st, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) != AMQP_STATUS_OK) {
        snprintf(err, errlen, "channel.close-ok: connection lost");
        return -1;
    }
    amqp_channel_open(c->st, ch);
    return broker_conn_check(c, "channel.open", err, errlen);
}

int broker_conn_declare_queue(struct broker_conn *c, amqp_channel_t scratch, amqp_bytes_t name,
                            amqp_table_t *args, int optional, char *err, size_t errlen)
{
    amqp_channel_open(c->st, scratch);
    if (broker_conn_check(c, "channel.open", err, errlen) < 0)
        return -1;
    while (!amqp_queue_declare(c->st, scratch, name, 0, 1, 0, 0, *args) && optional-- > 0) {
        amqp_bytes_t k = args->entries[args->num_entries - 1].key;
        if (broker_conn_reopen(c, scratch, err, errlen) < 0)
            return -1;
        /* An existing queue keeps what it was declared with: say what it goes without. */
        log_warn("consume", "the queue exists with other arguments: declared without this one",
                 "queue=\"%.*s\" argument=%.*s hint=\"for x-delivery-limit, a policy with "
                 "delivery-limit -1 lifts the broker's limit of 20 returns (README, Supported "
                 "brokers)\"", (int)name.len, (const char *)name.bytes, (int)k.len,
                 (const char *)k.bytes);
        args->num_entries--;
    }
    if (broker_conn_check(c, "declare ingress queue", err, errlen) < 0) {
        amqp_rpc_reply_t r = amqp_get_rpc_reply(c->st);
        amqp_channel_close_ok_t ok;
        /* Refused for good: answer the broker's channel.close, so the scratch channel is free */
        if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
            r.reply.id == AMQP_CHANNEL_CLOSE_METHOD &&
            amqp_send_method(c->st, scratch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) == AMQP_STATUS_OK)
            return -3;
        return -1;
    }
    amqp_channel_close(c->st, scratch, AMQP_REPLY_SUCCESS);
    return broker_conn_check(c, "channel.close", err, errlen);
}

int broker_conn_server_version(const struct broker_conn *c)
{
    const amqp_table_t *t = amqp_get_server_properties(c->st);

    for (int i = 0; t && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == 7 && memcmp(e->key.bytes, "version", 7) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_UTF8) {
            const char *v = e->value.value.bytes.bytes;
            size_t k = 0, len = e->value.value.bytes.len;
            int major = 0, minor = 0;
            for (; k < len && v[k] >= '0' && v[k] <= '9'; k++)
                major = major * 10 + (v[k] - '0');
            if (k < len && v[k] == '.')
                for (k++; k < len && v[k] >= '0' && v[k] <= '9'; k++)
                    minor = minor * 10 + (v[k] - '0');
            return major * 100 + (minor < 100 ? minor : 99);
        }
    }
    return 0;
}

int broker_conn_buffered(const struct broker_conn *c)
{
    return c->st && (amqp_frames_enqueued(c->st) || amqp_data_in_buffer(c->st));
}

static const char *or_null(const char *s)
{
    return s && *s ? s : NULL;
}

/* A TLS socket on c->st with tls's files loaded, or NULL with err set. */
static amqp_socket_t *tls_socket(struct broker_conn *c, const struct broker_conn_tls *tls,
                                 char *err, size_t errlen)
{
    const char *ca = tls && or_null(tls->ca_file) ? tls->ca_file : CONFIG_TLS_DEFAULT_CA_FILE;
    const char *cert = tls ? or_null(tls->cert_file) : NULL;
    const char *key = tls ? or_null(tls->key_file) : NULL;
    amqp_socket_t *sock = amqp_ssl_socket_new(c->st);

    if (!sock) {
        snprintf(err, errlen, "cannot create a TLS socket for %s (OpenSSL initialisation failed)",
                 c->uri_masked);
        return NULL;
    }
    amqp_ssl_socket_set_verify_peer(sock, 1);
    amqp_ssl_socket_set_verify_hostname(sock, !tls || tls->verify_hostname);
    if (amqp_ssl_socket_set_cacert(sock, ca) != AMQP_STATUS_OK) {
        snprintf(err, errlen, "TLS: cannot load CA certificates from \"%s\" "
                 "(broker.tls.ca_file, --ca-file): missing, unreadable or not PEM", ca);
        return NULL;
    }
    if (!cert != !key) {
        snprintf(err, errlen, "TLS: set cert_file and key_file together");
        return NULL;
    }
    if (cert) {
        /* an encrypted key fails to load instead of prompting on a terminal */
        amqp_ssl_socket_set_key_passwd(sock, "");
        if (amqp_ssl_socket_set_key(sock, cert, key) != AMQP_STATUS_OK) {
            snprintf(err, errlen, "TLS: cannot load the client certificate \"%s\" and key "
                     "\"%s\" (broker.tls.cert_file and key_file, --cert-file and --key-file): "
                     "unreadable, not PEM, an encrypted key, or a key that does not match the "
                     "certificate", cert, key);
            return NULL;
        }
    }
    return sock;
}

/* err: why a TLS connection to host failed (status from amqp_socket_open_noblock). */
static void tls_error(const struct broker_conn *c, const char *host, const char *ca, int status,
                      char *err, size_t errlen)
{
    switch (status) {
    case AMQP_STATUS_SSL_PEER_VERIFY_FAILED:
        snprintf(err, errlen, "cannot connect to %s: TLS: certificate verify failed: the "
                 "broker's certificate does not chain to a CA in \"%s\" (broker.tls.ca_file, "
                 "--ca-file), or it has expired", c->uri_masked, ca);
        break;
    case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED:
        snprintf(err, errlen, "cannot connect to %s: TLS: host name verification failed: the "
                 "broker's certificate does not name \"%s\"; connect by a DNS name it lists "
                 "(IP address entries are not matched) (broker.tls.verify_hostname)",
                 c->uri_masked, host);
        break;
    case AMQP_STATUS_SSL_CONNECTION_FAILED:
        snprintf(err, errlen, "cannot connect to %s: TLS handshake failed (is the port a TLS "
                 "listener? does the broker require a client certificate, "
                 "broker.tls.cert_file and key_file, --cert-file and --key-file?)",
                 c->uri_masked);
        break;
    default:
        snprintf(err, errlen, "cannot connect to %s: %s", c->uri_masked,
                 amqp_error_string2(status));
        break;
    }
}

/*
 * Log in on c's open socket as u says, with the connection's name and the
 * capabilities the daemon relies on. 0, or -1 with the reason in err.
 */
static int login(struct broker_conn *c, const struct uri *u, const char *name,
                 uint16_t heartbeat_s, char *err, size_t errlen)
{
    amqp_table_entry_t props[2], caps[2];
    amqp_table_t ptable;
    amqp_rpc_reply_t r;
    char text[512];

    props[0].key = amqp_cstring_bytes("connection_name");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes(name);
    /*
     * RabbitMQ tells a client about a resource alarm (connection.blocked)
     * only if the client says it understands it; rabbitmq-c merges this with
     * its own capabilities. Without it the publisher would write into a
     * connection the broker no longer reads, and block.
     */
    caps[0].key = amqp_cstring_bytes("connection.blocked");
    caps[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[0].value.value.boolean = 1;
    /*
     * basic.cancel for a consumer the broker ends (queue deleted; from 4.3
     * also a delivery acknowledgement timeout on a quorum queue, which
     * otherwise closes the whole channel). Every consumer here handles it.
     */
    caps[1].key = amqp_cstring_bytes("consumer_cancel_notify");
    caps[1].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[1].value.value.boolean = 1;
    props[1].key = amqp_cstring_bytes("capabilities");
    props[1].value.kind = AMQP_FIELD_KIND_TABLE;
    props[1].value.value.table.num_entries = 2;
    props[1].value.value.table.entries = caps;
    ptable.num_entries = 2;
    ptable.entries = props;
    r = amqp_login_with_properties(c->st, u->vhost, 0, 131072, heartbeat_s, &ptable,
                                   AMQP_SASL_METHOD_PLAIN, u->user, u->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        /* TLS 1.3: a broker that wants a client certificate says so after the handshake */
        int tls_hint = u->tls && r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                       (r.library_error == AMQP_STATUS_SSL_ERROR ||
                        r.library_error == AMQP_STATUS_CONNECTION_CLOSED ||
                        r.library_error == AMQP_STATUS_SOCKET_ERROR);
        snprintf(err, errlen, "login to %s failed: %s%s", c->uri_masked,
                 broker_conn_reply_text(r, text, sizeof(text)),
                 tls_hint ? " (TLS: the broker may require a client certificate or have "
                            "refused it: broker.tls.cert_file and key_file, --cert-file and "
                            "--key-file)"
                          : "");
        return -1;
    }
    return 0;
}

/* broker_conn_open(), logging in to vhost instead of the URI's when vhost is not NULL. */
static int open_uri(struct broker_conn *c, const char *uri, const char *vhost, const char *name,
                    const struct broker_conn_tls *tls, uint16_t heartbeat_s, uint32_t timeout_ms,
                    char *err, size_t errlen)
{
    struct uri u;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_socket_t *sock;
    char text[512];
    int status, rc = -1;

    memset(c, 0, sizeof(*c));
    c->fd = -1;
    log_mask_uri(uri, c->uri_masked, sizeof(c->uri_masked));
    if (uri_parse(uri, &u, text, sizeof(text)) < 0) {
        snprintf(err, errlen, "cannot parse broker URI %s: %s", c->uri_masked, text);
        return -1;
    }
    snprintf(c->user, sizeof(c->user), "%s", u.user);
    if (vhost)
        snprintf(u.vhost, sizeof(u.vhost), "%s", vhost);

    c->st = amqp_new_connection();
    if (u.tls) {
        sock = tls_socket(c, tls, err, errlen);
        if (!sock)
            goto fail;
    } else {
        sock = amqp_tcp_socket_new(c->st);
        if (!sock) {
            snprintf(err, errlen, "cannot create socket");
            goto fail;
        }
    }
    status = amqp_socket_open_noblock(sock, u.host, u.port, &tv);
    if (status != AMQP_STATUS_OK) {
        /* Nobody answered at the TCP level (refused, unreachable, timed out,
         * no such host): trying again soon costs the broker nothing. */
        if (status == AMQP_STATUS_SOCKET_ERROR || status == AMQP_STATUS_TCP_ERROR ||
            status == AMQP_STATUS_TIMEOUT || status == AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED)
            rc = BROKER_CONN_NOBODY;
        if (u.tls)
            tls_error(c, u.host, tls && or_null(tls->ca_file) ? tls->ca_file
                                                             : CONFIG_TLS_DEFAULT_CA_FILE,
                      status, err, errlen);
        else
            snprintf(err, errlen, "cannot connect to %s: %s", c->uri_masked,
                     amqp_error_string2(status));
        goto fail;
    }
    amqp_set_handshake_timeout(c->st, &tv);
    amqp_set_rpc_timeout(c->st, &tv);
    if (login(c, &u, name, heartbeat_s, err, errlen) < 0)
        goto fail;
    c->fd = amqp_get_sockfd(c->st);
    c->tls = u.tls;
    memset(&u, 0, sizeof(u)); /* the password */
    return 0;

fail:
    amqp_destroy_connection(c->st);
    c->st = NULL;
    memset(&u, 0, sizeof(u));
    return rc;
}

int broker_conn_open(struct broker_conn *c, const char *uri, const char *name,
                   const struct broker_conn_tls *tls, uint16_t heartbeat_s, uint32_t timeout_ms,
                   char *err, size_t errlen)
{
    return open_uri(c, uri, NULL, name, tls, heartbeat_s, timeout_ms, err, errlen);
}

int broker_conn_open_vhost(struct broker_conn *c, const struct config *cfg, const char *role,
                         const char *vhost, unsigned *next, char *err, size_t errlen)
{
    const char *uri = cfg->uris[*next % (unsigned)cfg->nuris];
    struct broker_conn_tls tls = {cfg->tls.ca_file, cfg->tls.cert_file, cfg->tls.key_file,
                                cfg->tls.verify_hostname};
    char name[sizeof("delay-bridge ") + 32 + sizeof(cfg->instance) + 8 + CONFIG_NAME_MAX];
    int n, r;

    (*next)++;
    n = snprintf(name, sizeof(name), "delay-bridge %s%s%s", role, cfg->instance[0] ? " " : "",
                 cfg->instance);
    if (vhost && n > 0 && (size_t)n < sizeof(name))
        snprintf(name + n, sizeof(name) - (size_t)n, " vhost=%s", vhost);
    if ((r = open_uri(c, uri, vhost, name, &tls, cfg->heartbeat_s, cfg->connect_timeout_ms, err,
                      errlen)) < 0)
        return r;
    if (vhost) /* logs name the vhost the connection is in, not the URI's */
        snprintf(c->uri_masked + strlen(c->uri_masked),
                 sizeof(c->uri_masked) - strlen(c->uri_masked), " vhost=%s", vhost);
    return 0;
}

int broker_conn_open_next(struct broker_conn *c, const struct config *cfg, const char *role,
                        unsigned *next, char *err, size_t errlen)
{
    return broker_conn_open_vhost(c, cfg, role, NULL, next, err, errlen);
}

void broker_conn_close(struct broker_conn *c, int graceful)
{
    if (!c->st)
        return;
    if (graceful)
        amqp_connection_close(c->st, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c->st);
    c->st = NULL;
    c->fd = -1;
}

amqp_method_number_t broker_conn_describe_close(const amqp_frame_t *f, char *why, size_t len)
{
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = f->payload.method.decoded;
        snprintf(why, len, "channel closed by broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        return AMQP_CHANNEL_CLOSE_OK_METHOD;
    }
    amqp_connection_close_t *m = f->payload.method.decoded;
    snprintf(why, len, "connection closed by broker: %u %.*s", m->reply_code,
             (int)m->reply_text.len, (char *)m->reply_text.bytes);
    return AMQP_CONNECTION_CLOSE_OK_METHOD;
}

void broker_conn_answer_close(struct broker_conn *c, const amqp_frame_t *f, char *why, size_t len)
{
    /* Both close-ok methods have no arguments. */
    amqp_channel_close_ok_t ok;

    amqp_send_method(c->st, f->channel, broker_conn_describe_close(f, why, len), &ok);
}

int broker_conn_own_heartbeats(struct broker_conn *c)
{
    int hb = amqp_get_heartbeat(c->st), r;

    if (!amqp_release_buffers_ok(c->st))
        return AMQP_STATUS_BAD_AMQP_DATA; /* mid-frame: amqp_tune_connection would abort */
    r = amqp_tune_connection(c->st, amqp_get_channel_max(c->st), amqp_get_frame_max(c->st), 0);
    return r < 0 ? r : hb;
}

/* ---- frames ------------------------------------------------------------------------ */

#define FRAME_HEAD 7 /* type, channel, size */
#define FRAME_END_LEN 1

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, (uint16_t)(v >> 16));
    put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

/* Frame head and end around a payload of n bytes already at p + 7; returns the frame's size. */
static size_t frame_wrap(uint8_t *p, uint8_t type, amqp_channel_t ch, size_t n)
{
    p[0] = type;
    put16(p + 1, ch);
    put32(p + 3, (uint32_t)n);
    p[FRAME_HEAD + n] = AMQP_FRAME_END;
    return FRAME_HEAD + n + FRAME_END_LEN;
}

long broker_conn_encode_method(void *buf, size_t len, amqp_channel_t ch, amqp_method_number_t id,
                             void *decoded)
{
    uint8_t *p = buf;
    int r;

    if (len < FRAME_HEAD + 4 + FRAME_END_LEN)
        return AMQP_STATUS_INVALID_PARAMETER;
    put32(p + FRAME_HEAD, id);
    r = amqp_encode_method(id, decoded,
                           (amqp_bytes_t){len - FRAME_HEAD - 4 - FRAME_END_LEN,
                                          p + FRAME_HEAD + 4});
    if (r < 0)
        return r;
    return (long)frame_wrap(p, AMQP_FRAME_METHOD, ch, 4 + (size_t)r);
}

size_t broker_conn_publish_bound(size_t exchange_len, size_t routing_key_len, size_t body_len,
                               uint32_t frame_max)
{
    size_t chunk = frame_max > 8 ? frame_max - 8 : 1;

    /* method: id(4) ticket(2) exchange(1+n) routing key(1+n) bits(1), framed */
    return 8 + 4 + 2 + 1 + exchange_len + 1 + routing_key_len + 1 + frame_max + body_len +
           8 * ((body_len + chunk - 1) / chunk);
}

long broker_conn_encode_publish(void *buf, size_t len, amqp_channel_t ch,
                              amqp_basic_publish_t *m, amqp_basic_properties_t *props,
                              amqp_bytes_t body, uint32_t frame_max)
{
    uint8_t *p = buf;
    size_t used, off, chunk;
    long r;
    int n;

    if (frame_max < 4096 ||
        len < broker_conn_publish_bound(m->exchange.len, m->routing_key.len, body.len, frame_max))
        return AMQP_STATUS_INVALID_PARAMETER;
    r = broker_conn_encode_method(p, len, ch, AMQP_BASIC_PUBLISH_METHOD, m);
    if (r < 0)
        return r;
    used = (size_t)r;

    /* content header: class-id, weight 0, body size, properties; one frame at most */
    uint8_t *h = p + used;
    put16(h + FRAME_HEAD, AMQP_BASIC_CLASS);
    put16(h + FRAME_HEAD + 2, 0);
    put64(h + FRAME_HEAD + 4, body.len);
    n = amqp_encode_properties(AMQP_BASIC_CLASS, props,
                               (amqp_bytes_t){frame_max - FRAME_HEAD - FRAME_END_LEN - 12,
                                              h + FRAME_HEAD + 12});
    if (n < 0)
        return n;
    used += frame_wrap(h, AMQP_FRAME_HEADER, ch, 12 + (size_t)n);

    chunk = frame_max - FRAME_HEAD - FRAME_END_LEN;
    for (off = 0; off < body.len; off += chunk) {
        size_t k = body.len - off < chunk ? body.len - off : chunk;
        memcpy(p + used + FRAME_HEAD, (const uint8_t *)body.bytes + off, k);
        used += frame_wrap(p + used, AMQP_FRAME_BODY, ch, k);
    }
    return (long)used;
}
