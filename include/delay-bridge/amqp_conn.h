/*
 * amqp_conn.h -- opening and closing one rabbitmq-c connection.
 *
 * rabbitmq-c has no asynchronous API; the bridge uses it from one event
 * loop, reading frames with amqp_simple_wait_frame_noblock() when the
 * socket is readable. This module hides the synchronous part: resolving a
 * URI, TCP or TLS, login with a connection name, and turning library and
 * server errors into one line of text.
 */
#ifndef DB_AMQP_CONN_H
#define DB_AMQP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <amqp.h>
#include <amqp_framing.h>

struct amqp_conn {
    amqp_connection_state_t st; /* NULL when closed */
    int fd;
    char user[256];             /* broker user, for the user-id check */
    char uri_masked[512];       /* for logs: password replaced by *** */
};

/*
 * TLS settings for amqps:// URIs (not looked at for amqp://). The strings
 * are borrowed for the call to amqp_conn_open() only. NULL or "" ca_file:
 * CONFIG_TLS_DEFAULT_CA_FILE, the system bundle; cert_file and key_file
 * (PEM, key without passphrase) both set, or both NULL/"". The server's
 * certificate chain is always verified against ca_file; verify_hostname
 * also requires it to name the URI's host.
 */
struct amqp_conn_tls {
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
 * (the password masked).
 */
int amqp_conn_open(struct amqp_conn *c, const char *uri, const char *name,
                   const struct amqp_conn_tls *tls, uint16_t heartbeat_s, uint32_t timeout_ms,
                   char *err, size_t errlen);

/* Close politely (graceful != 0: connection.close handshake) and free. */
void amqp_conn_close(struct amqp_conn *c, int graceful);

/* Text for an RPC reply that was not AMQP_RESPONSE_NORMAL. Returns buf. */
const char *amqp_conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len);

/* 0 if the last RPC on c succeeded, else -1 with the reason in err. */
int amqp_conn_check(struct amqp_conn *c, const char *what, char *err, size_t errlen);

/*
 * f is a channel.close or connection.close from the broker: answer it with
 * the matching close-ok and put "channel closed by broker: CODE TEXT" in why.
 */
void amqp_conn_answer_close(struct amqp_conn *c, const amqp_frame_t *f, char *why, size_t len);

/* Frames are waiting in rabbitmq-c's buffers (the socket may be quiet). */
int amqp_conn_buffered(const struct amqp_conn *c);

#endif
