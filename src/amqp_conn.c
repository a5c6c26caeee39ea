/*
 * amqp_conn.c -- opening and closing one rabbitmq-c connection.
 *
 * Everything here blocks, bounded by the timeout given at open: it runs
 * when a connection is (re)established, never per message.
 *
 * TLS (amqps://) goes through rabbitmq-c's OpenSSL socket, which completes
 * the handshake, then checks the chain (SSL_get_verify_result) and, when
 * asked, the host name, and closes the socket on any failure: there is no
 * path from an amqps:// URI to a plain TCP connection. Its status codes
 * carry no OpenSSL detail, so tls_error() turns each into a sentence that
 * says which setting to look at.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "delay-bridge/amqp_conn.h"
#include "delay-bridge/config.h"
#include "delay-bridge/log.h"
#include "delay-bridge/uri.h"

const char *amqp_conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len)
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

int amqp_conn_check(struct amqp_conn *c, const char *what, char *err, size_t errlen)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c->st);
    char text[512];

    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return 0;
    snprintf(err, errlen, "%s: %s", what, amqp_conn_reply_text(r, text, sizeof(text)));
    return -1;
}

int amqp_conn_buffered(const struct amqp_conn *c)
{
    return c->st && (amqp_frames_enqueued(c->st) || amqp_data_in_buffer(c->st));
}

static const char *or_null(const char *s)
{
    return s && *s ? s : NULL;
}

/* A TLS socket on c->st with tls's files loaded, or NULL with err set. */
static amqp_socket_t *tls_socket(struct amqp_conn *c, const struct amqp_conn_tls *tls,
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
static void tls_error(const struct amqp_conn *c, const char *host, const char *ca, int status,
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

int amqp_conn_open(struct amqp_conn *c, const char *uri, const char *name,
                   const struct amqp_conn_tls *tls, uint16_t heartbeat_s, uint32_t timeout_ms,
                   char *err, size_t errlen)
{
    struct uri u;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_socket_t *sock;
    amqp_table_entry_t props[2], caps[1];
    amqp_table_t ptable;
    amqp_rpc_reply_t r;
    char text[512];
    int status;

    memset(c, 0, sizeof(*c));
    c->fd = -1;
    log_mask_uri(uri, c->uri_masked, sizeof(c->uri_masked));
    if (uri_parse(uri, &u, text, sizeof(text)) < 0) {
        snprintf(err, errlen, "cannot parse broker URI %s: %s", c->uri_masked, text);
        return -1;
    }
    snprintf(c->user, sizeof(c->user), "%s", u.user);

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
    props[1].key = amqp_cstring_bytes("capabilities");
    props[1].value.kind = AMQP_FIELD_KIND_TABLE;
    props[1].value.value.table.num_entries = 1;
    props[1].value.value.table.entries = caps;
    ptable.num_entries = 2;
    ptable.entries = props;
    r = amqp_login_with_properties(c->st, u.vhost, 0, 131072, heartbeat_s, &ptable,
                                   AMQP_SASL_METHOD_PLAIN, u.user, u.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        /* TLS 1.3: a broker that wants a client certificate says so after the handshake */
        int tls_hint = u.tls && r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                       (r.library_error == AMQP_STATUS_SSL_ERROR ||
                        r.library_error == AMQP_STATUS_CONNECTION_CLOSED ||
                        r.library_error == AMQP_STATUS_SOCKET_ERROR);
        snprintf(err, errlen, "login to %s failed: %s%s", c->uri_masked,
                 amqp_conn_reply_text(r, text, sizeof(text)),
                 tls_hint ? " (TLS: the broker may require a client certificate or have "
                            "refused it: broker.tls.cert_file and key_file, --cert-file and "
                            "--key-file)"
                          : "");
        goto fail;
    }
    c->fd = amqp_get_sockfd(c->st);
    memset(&u, 0, sizeof(u)); /* the password */
    return 0;

fail:
    amqp_destroy_connection(c->st);
    c->st = NULL;
    memset(&u, 0, sizeof(u));
    return -1;
}

void amqp_conn_close(struct amqp_conn *c, int graceful)
{
    if (!c->st)
        return;
    if (graceful)
        amqp_connection_close(c->st, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(c->st);
    c->st = NULL;
    c->fd = -1;
}

void amqp_conn_answer_close(struct amqp_conn *c, const amqp_frame_t *f, char *why, size_t len)
{
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = f->payload.method.decoded;
        amqp_channel_close_ok_t ok;
        snprintf(why, len, "channel closed by broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        amqp_send_method(c->st, f->channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    } else {
        amqp_connection_close_t *m = f->payload.method.decoded;
        amqp_connection_close_ok_t ok;
        snprintf(why, len, "connection closed by broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
        amqp_send_method(c->st, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    }
}
