/*
 * amqp_conn.c -- opening and closing one rabbitmq-c connection.
 *
 * Everything here blocks, bounded by the timeout given at open: it runs
 * when a connection is (re)established, never per message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include "delay-bridge/amqp_conn.h"
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

int amqp_conn_open(struct amqp_conn *c, const char *uri, const char *name, uint16_t heartbeat_s,
                   uint32_t timeout_ms, char *err, size_t errlen)
{
    struct uri u;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    amqp_socket_t *sock;
    amqp_table_entry_t props[1];
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
        sock = amqp_ssl_socket_new(c->st);
        if (sock) {
            amqp_ssl_socket_set_verify_peer(sock, 1);
            amqp_ssl_socket_set_verify_hostname(sock, 1);
            if (amqp_ssl_socket_set_cacert(sock, "/etc/ssl/certs/ca-certificates.crt") !=
                AMQP_STATUS_OK) {
                snprintf(err, errlen, "cannot load CA certificates for %s", c->uri_masked);
                goto fail;
            }
        }
    } else {
        sock = amqp_tcp_socket_new(c->st);
    }
    if (!sock) {
        snprintf(err, errlen, "cannot create socket");
        goto fail;
    }
    status = amqp_socket_open_noblock(sock, u.host, u.port, &tv);
    if (status != AMQP_STATUS_OK) {
        snprintf(err, errlen, "cannot connect to %s: %s", c->uri_masked,
                 amqp_error_string2(status));
        goto fail;
    }
    amqp_set_handshake_timeout(c->st, &tv);
    amqp_set_rpc_timeout(c->st, &tv);

    props[0].key = amqp_cstring_bytes("connection_name");
    props[0].value.kind = AMQP_FIELD_KIND_UTF8;
    props[0].value.value.bytes = amqp_cstring_bytes(name);
    ptable.num_entries = 1;
    ptable.entries = props;
    r = amqp_login_with_properties(c->st, u.vhost, 0, 131072, heartbeat_s, &ptable,
                                   AMQP_SASL_METHOD_PLAIN, u.user, u.password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        snprintf(err, errlen, "login to %s failed: %s", c->uri_masked,
                 amqp_conn_reply_text(r, text, sizeof(text)));
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
