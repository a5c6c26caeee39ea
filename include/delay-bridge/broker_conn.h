/*
 * broker_conn.h -- opening and closing one rabbitmq-c connection, and the
 * frames a caller writes on its own.
 *
 * rabbitmq-c has no asynchronous API; the bridge uses it from one event
 * loop, reading frames with amqp_simple_wait_frame_noblock() when the
 * socket is readable. This module hides the synchronous part: resolving a
 * URI, TCP or TLS, login with a connection name, and turning library and
 * server errors into one line of text. Every side of the daemon that talks
 * to the broker (consumer, publisher, the replicated log) opens its
 * connection with broker_conn_open_next(): the same failover over
 * broker.uris, the same naming, TLS settings, heartbeat and timeout; each
 * side keeps only its channels and what it declares on them.
 *
 * For a caller that writes the socket itself (the publisher, on plain TCP),
 * it encodes whole AMQP frames into the caller's memory with rabbitmq-c's
 * own method and property encoders (broker_conn_encode_*), and hands the
 * heartbeats over to the caller (broker_conn_own_heartbeats) so that
 * rabbitmq-c never writes on its own between two of the caller's writes.
 */
#ifndef DB_BROKER_CONN_H
#define DB_BROKER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>
#include <amqp_framing.h>

struct broker_conn {
    amqp_connection_state_t st; /* NULL when closed */
    int fd;
    int tls;                    /* amqps://: the fd carries TLS records */
    char user[256];             /* broker user, for the user-id check */
    char uri_masked[512];       /* for logs: password replaced by *** */
};

/*
 * TLS settings for amqps:// URIs (not looked at for amqp://). The strings
 * are borrowed for the call to broker_conn_open() only. NULL or "" ca_file:
 * CONFIG_TLS_DEFAULT_CA_FILE, the system bundle; cert_file and key_file
 * (PEM, key without passphrase) both set, or both NULL/"". The server's
 * certificate chain is always verified against ca_file; verify_hostname
 * also requires it to name the URI's host.
 */
struct broker_conn_tls {
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    int verify_hostname;
};

/*
 * Connect to uri and log in. timeout_ms bounds the TCP connect, the TLS
 * handshake, the AMQP handshake and every later synchronous RPC. tls: NULL
 * for the defaults (system CA bundle, host name verified). An amqps://
 * URI is TLS or nothing: a failed handshake or verification is an error,
 * never a fallback to plain TCP. Returns 0, or -1 with a message in err
 * (the password masked), or BROKER_CONN_NOBODY with one when nothing
 * answered at the TCP level (connection refused, host unreachable or
 * unknown, connect timed out): a node that is down or restarting, which a
 * caller may try again soon at no cost to anyone (backoff_fail_within).
 */
#define BROKER_CONN_NOBODY (-2)
/* How soon, at most, a connection that found nobody tries again: the
 * consumer's and the publisher's backoff_fail_within() cap. */
#define BROKER_NOBODY_RETRY_MS 1000
int broker_conn_open(struct broker_conn *c, const char *uri, const char *name,
                   const struct broker_conn_tls *tls, uint16_t heartbeat_s, uint32_t timeout_ms,
                   char *err, size_t errlen);

struct config;

/*
 * One side of the daemon opens its connection: to the URI after the one
 * *next last tried (broker.uris in turn; *next is advanced whatever the
 * outcome, so a broker that fails hands over to the next URI at the next
 * attempt), named "delay-bridge <role>", then " <instance>" when
 * broker.instance is set (what `rabbitmqctl list_connections` shows), with
 * cfg's TLS settings, heartbeat and connect_timeout_ms. c->uri_masked
 * names the URI tried, on success and failure alike. 0, or -1 or
 * BROKER_CONN_NOBODY with the reason in err (broker_conn_open).
 */
int broker_conn_open_next(struct broker_conn *c, const struct config *cfg, const char *role,
                        unsigned *next, char *err, size_t errlen);

/*
 * The same, logged in to vhost (NULL: the URI's) instead of the URI's: a
 * route's "vhost" (config.h). The connection's name, and c->uri_masked,
 * then end with " vhost=VHOST".
 */
int broker_conn_open_vhost(struct broker_conn *c, const struct config *cfg, const char *role,
                         const char *vhost, unsigned *next, char *err, size_t errlen);

/* Close politely (graceful != 0: connection.close handshake) and free. */
void broker_conn_close(struct broker_conn *c, int graceful);

/* Text for an RPC reply that was not AMQP_RESPONSE_NORMAL. Returns buf. */
const char *broker_conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len);

/* 0 if the last RPC on c succeeded, else -1 with the reason in err. */
int broker_conn_check(struct broker_conn *c, const char *what, char *err, size_t errlen);

/*
 * After the broker refused an RPC on channel ch (its channel.close): answer
 * with channel.close-ok and open ch again. 0, or -1 with the reason in err.
 */
int broker_conn_reopen(struct broker_conn *c, amqp_channel_t ch, char *err, size_t errlen);

/*
 * queue.declare of name with args, whose last `optional` entries an existing
 * queue may refuse (406: declared without them): on a refusal the last one is
 * dropped and the declare tried again. It runs on channel scratch, opened
 * for it and closed after, so a refusal never closes a channel in use.
 * args->num_entries is left at what was accepted. 0, or -1 with err; -3
 * with err: refused for good, the scratch channel closed and answered
 * (the connection and its other channels are fine).
 */
int broker_conn_declare_queue(struct broker_conn *c, amqp_channel_t scratch, amqp_bytes_t name,
                            amqp_table_t *args, int optional, char *err, size_t errlen);

/* The broker's version, from connection.start's "version": major * 100 + minor (4.3.6: 403;
 * 0: unknown). */
int broker_conn_server_version(const struct broker_conn *c);

/*
 * f is a channel.close or connection.close from the broker: answer it with
 * the matching close-ok and put "channel closed by broker: CODE TEXT" in why.
 */
void broker_conn_answer_close(struct broker_conn *c, const amqp_frame_t *f, char *why, size_t len);

/*
 * The same without answering: "channel closed by broker: CODE TEXT" (or
 * "connection closed ...") in why; returns the close-ok method to answer
 * with (AMQP_CHANNEL_CLOSE_OK_METHOD or AMQP_CONNECTION_CLOSE_OK_METHOD).
 */
amqp_method_number_t broker_conn_describe_close(const amqp_frame_t *f, char *why, size_t len);

/*
 * After login on a plain TCP connection, the caller takes over heartbeats:
 * rabbitmq-c is told locally (amqp_tune_connection) that there are none,
 * so it neither writes a heartbeat from inside a read nor gives up on a
 * quiet broker, while the broker keeps the interval negotiated at login.
 * The caller must then write a heartbeat frame when it has written nothing
 * for half the interval, and give up on the broker when it has read nothing
 * for twice the interval. Returns the negotiated interval in seconds (0:
 * none), or a negative AMQP_STATUS_* when rabbitmq-c is in the middle of a
 * frame (never right after login; the connection must then be dropped).
 */
int broker_conn_own_heartbeats(struct broker_conn *c);

/*
 * Frame encoders (pure: no connection, no allocation). An AMQP 0-9-1 frame
 * on the wire, every integer big-endian:
 *
 *   offset  size  field
 *   0       1     type: 1 method, 2 content header, 3 content body, 8 heartbeat
 *   1       2     channel (0 for the connection and for heartbeats)
 *   3       4     payload size, n
 *   7       n     payload
 *   7+n     1     frame end, 0xCE
 *
 *   method payload:          class-id(2) method-id(2) arguments (amqp_encode_method)
 *   content-header payload:  class-id(2) weight(2) = 0, body-size(8),
 *                            property flags and list (amqp_encode_properties)
 *   content-body payload:    the next at most frame_max - 8 bytes of the body
 *   heartbeat payload:       none (08 0000 00000000 CE)
 *
 * A publish is a basic.publish method frame, one content-header frame and
 * ceil(body / (frame_max - 8)) body frames (none for an empty body), all on
 * the publish's channel, written back to back: no other frame of the same
 * channel may come between them (frames of other channels may).
 */

/* Bytes broker_conn_encode_publish() may need: never less than it uses. */
size_t broker_conn_publish_bound(size_t exchange_len, size_t routing_key_len, size_t body_len,
                               uint32_t frame_max);

/*
 * Encode a publish (m, props, body) on channel ch into buf, which has
 * len >= broker_conn_publish_bound() bytes. Returns the bytes used, or a
 * negative AMQP_STATUS_*: the properties do not fit one frame of frame_max
 * bytes, a field does not encode, len is short, or frame_max < 4096.
 * m and props are not changed (rabbitmq-c's encoders take them non-const).
 */
long broker_conn_encode_publish(void *buf, size_t len, amqp_channel_t ch,
                              amqp_basic_publish_t *m, amqp_basic_properties_t *props,
                              amqp_bytes_t body, uint32_t frame_max);

/* One method frame (id with its decoded arguments) into buf: bytes used, or < 0. */
long broker_conn_encode_method(void *buf, size_t len, amqp_channel_t ch, amqp_method_number_t id,
                             void *decoded);

/* Frames are waiting in rabbitmq-c's buffers (the socket may be quiet). */
int broker_conn_buffered(const struct broker_conn *c);

#endif
