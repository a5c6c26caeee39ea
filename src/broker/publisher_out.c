/*
 * publisher_out.c -- how the publisher writes: one buffer, one send per
 * turn, never a blocking write.
 *
 * On a plain TCP connection the publisher writes the socket itself.
 * publisher_send() encodes the publish -- basic.publish method frame,
 * content-header frame, body frames (broker_conn_encode_publish, the layout
 * is drawn in broker_conn.h) -- at the end of an output buffer, and nothing
 * more. publisher_flush(), which the owner calls after a burst of sends,
 * hands the whole buffer to the kernel in one send(MSG_DONTWAIT); what the
 * kernel does not take stays buffered, and an EV_WRITE watcher writes the
 * rest when the socket has room. A burst of a thousand publishes is one
 * system call instead of three per publish, and the broker reads whole
 * batches. publisher_ready() says no while more than OUT_HIGH_WATER bytes
 * are unwritten, so a broker that stops reading (a full socket, a resource
 * alarm it has not announced) stops the taking of due messages, never the
 * loop: consuming, acks, timers and the HTTP endpoint go on. A failed write
 * is a lost connection, as it always was; but this file only writes: it
 * returns -1 with the reason in out.why, and the caller in publisher.c
 * takes the connection down (out_lost), so calls run one way, from
 * the connection to its buffer.
 *
 * Delivery tags are still counted at send time: the broker numbers a
 * channel's publishes in the order it reads them, which is the buffer's.
 *
 * rabbitmq-c must then never write on this socket while part of a frame of
 * ours is unwritten, nor block the loop in a write. Everything it can write
 * after login, and why none of it can interleave or block:
 *
 *   heartbeats   amqp_simple_wait_frame_noblock() sends one when rabbitmq-c
 *                has written nothing for half the interval, and it writes
 *                nothing of ours. After login the publisher takes them over
 *                (broker_conn_own_heartbeats: rabbitmq-c's interval is set to
 *                0 locally, the broker keeps the negotiated one): it puts a
 *                heartbeat frame in its own buffer when it has written
 *                nothing for half the interval, and drops the connection
 *                ("missed heartbeats") when nothing came from the broker for
 *                twice the interval. Reads that rabbitmq-c swallows
 *                (heartbeat frames) are seen by a one-byte MSG_PEEK before
 *                each read once the connection has been quiet for half the
 *                interval, so a quiet broker is never mistaken for a dead
 *                one.
 *   close-ok     the answer to a channel.close or connection.close is
 *                encoded into the output buffer, behind whatever is there:
 *                the broker discards what comes on a closing channel until
 *                close-ok, so the publishes ahead of it are harmless.
 *   set-up       channel.open, confirm.select and the passive declares are
 *                not RPCs here: they are requests in the same buffer, and
 *                handle_frame() takes each answer as it comes and sends the
 *                next request (setup_next). Nothing waits for the broker.
 *   close        the only synchronous rabbitmq-c calls after login are the
 *                polite connection.close at shutdown (publisher_close) and,
 *                on TLS, every write. The close runs only when the output
 *                buffer is empty and poll() says the socket is writable --
 *                for TCP: the send queue is below its limit, so one small
 *                frame goes out at once -- and is abrupt otherwise; its wait
 *                for close-ok is bounded by connect_timeout_ms. Connecting
 *                and logging in (broker_conn_open_next) block too, bounded by
 *                connect_timeout_ms, once per (re)connection.
 *
 * TLS (amqps://): the socket carries TLS records that only rabbitmq-c's
 * OpenSSL layer may write, so there the publisher keeps amqp_basic_publish()
 * (three blocking writes per publish) and amqp_send_method(), and
 * rabbitmq-c keeps its heartbeats; connection.blocked still stops
 * publishing on a resource alarm, but a broker that stops reading without
 * it stalls the loop in a write.
 */
#include "publisher_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/xalloc.h"

/* ---- the output buffer (plain TCP) --------------------------------------------- */

/* The publisher writes the socket itself (not TLS). */
int pub_own_writes(const struct publisher *p)
{
    return p->conn.st && !p->conn.tls;
}

size_t pub_out_pending(const struct publisher *p)
{
    return p->out.len - p->out.off;
}

/* Room for need more bytes at the end of out; returns where they go. */
uint8_t *pub_out_reserve(struct publisher *p, size_t need)
{
    struct outbuf *o = &p->out;

    if (o->cap - o->len < need && o->off) {
        memmove(o->b, o->b + o->off, o->len - o->off);
        o->len -= o->off;
        o->off = 0;
    }
    if (o->cap - o->len < need) {
        size_t ncap = o->cap ? o->cap : 256 * 1024;
        while (ncap - o->len < need)
            ncap *= 2;
        o->b = xrealloc(o->b, ncap);
        o->cap = ncap;
    }
    return o->b + o->len;
}

void pub_out_reset(struct publisher *p)
{
    if (p->out.cap > OUT_KEEP_CAP) {
        free(p->out.b);
        p->out.b = NULL;
        p->out.cap = 0;
    }
    p->out.off = p->out.len = 0;
}

/*
 * One send of everything unwritten. What the kernel leaves waits for the
 * EV_WRITE watcher. Returns 0, or -1 with the reason in p->out.why.
 */
int pub_out_write(struct publisher *p)
{
    ssize_t n = 0;

    if (pub_out_pending(p)) {
        do
            n = send(p->conn.fd, p->out.b + p->out.off, pub_out_pending(p),
                     MSG_NOSIGNAL | MSG_DONTWAIT);
        while (n < 0 && errno == EINTR);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            snprintf(p->out.why, sizeof(p->out.why), "write to broker: %s", strerror(errno));
            return -1;
        }
    }
    if (n > 0) {
        p->out.off += (size_t)n;
        p->last_write_ms = clock_mono_ms();
    }
    if (pub_out_pending(p)) {
        ev_io_start(p->loop, &p->wio); /* the kernel is full: the rest when it has room */
    } else {
        if (n > 0) /* the frames encoded so far are all in the kernel: their write stage ends */
            p->out.emptied_us = clock_mono_ns() / 1000u;
        pub_out_reset(p);
        ev_io_stop(p->loop, &p->wio);
    }
    return 0;
}

/* Write what is unwritten, unless the EV_WRITE watcher is already waiting for room. */
int pub_out_kick(struct publisher *p)
{
    if (!pub_own_writes(p) || !pub_out_pending(p) || ev_is_active(&p->wio))
        return 0;
    return pub_out_write(p);
}

/*
 * Send one method (set-up requests, close-ok): behind our unwritten frames
 * on plain TCP, through rabbitmq-c on TLS. Returns 0, or -1 with the
 * reason in p->out.why.
 */
int pub_send_method(struct publisher *p, amqp_channel_t ch, amqp_method_number_t id,
                       void *decoded)
{
    enum { MAX_METHOD = 1024 }; /* exchange.declare: two short strings, an empty table */
    long n;

    if (pub_own_writes(p)) {
        n = broker_conn_encode_method(pub_out_reserve(p, MAX_METHOD), MAX_METHOD, ch, id, decoded);
        if (n >= 0) {
            p->out.len += (size_t)n;
            return pub_out_kick(p);
        }
    } else {
        n = amqp_send_method(p->conn.st, ch, id, decoded);
        if (n >= 0)
            return 0;
    }
    snprintf(p->out.why, sizeof(p->out.why), "%s", amqp_error_string2((int)n));
    return -1;
}

/*
 * May rabbitmq-c write on the socket now (the polite connection.close)?
 * Only when none of our bytes are unwritten and the kernel has room (see
 * the top of the file). 1 yes, 0 no, -1 the last write failed (p->out.why).
 */
int pub_sync_write_ok(struct publisher *p)
{
    struct pollfd pf = {p->conn.fd, POLLOUT, 0};

    if (!pub_own_writes(p))
        return p->conn.st != NULL;
    if (pub_out_kick(p) < 0)
        return -1;
    if (pub_out_pending(p))
        return 0;
    return poll(&pf, 1, 0) == 1 && (pf.revents & POLLOUT);
}

/* Bytes from the broker wait on the socket (or it was closed: drain() will tell). */
int pub_broker_spoke(const struct publisher *p)
{
    char c;
    ssize_t n = recv(p->conn.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);

    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
