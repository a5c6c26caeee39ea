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
 * Connect to uri and log in. timeout_ms bounds the TCP connect, the
 * handshake and every later synchronous RPC. Returns 0, or -1 with a
 * message in err.
 */
int amqp_conn_open(struct amqp_conn *c, const char *uri, const char *name, uint16_t heartbeat_s,
                   uint32_t timeout_ms, char *err, size_t errlen);

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
