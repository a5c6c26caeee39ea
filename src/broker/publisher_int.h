/*
 * publisher_int.h -- the publisher's state, shared by its files (internal:
 * only publisher*.c include it; publisher.h is the contract).
 *
 *   publisher.c      the connection, the route channels and their set-up,
 *                    confirms and returns, the in-flight window, the owner's
 *                    calls
 *   publisher_out.c  the output buffer: encoded frames written without ever
 *                    blocking the loop (plain TCP), and the methods sent
 *                    through rabbitmq-c
 *
 * struct publisher owns the connection, its buffers and every route's
 * window; publisher_free() releases them.
 */
#ifndef DELAY_BRIDGE_PUBLISHER_INT_H
#define DELAY_BRIDGE_PUBLISHER_INT_H

#include <stdint.h>

#include <amqp.h>
#include <ev.h>

#include "delay-bridge/publisher.h"
#include "delay-bridge/broker_conn.h"
#include "base/backoff.h"
#include "delay-bridge/stats.h"

#define FRAMES_PER_TURN 4096
#define HEARTBEAT_POLL_MS 500
#define OUT_HIGH_WATER (1u << 20) /* unwritten bytes above which publisher_ready() says no */
#define OUT_KEEP_CAP (8u << 20)   /* a buffer grown past this (large bodies) is freed when empty */

enum settle { UNSETTLED = 0, ACKED = 1, NACKED = 2 };

struct unconfirmed {
    uint64_t tag;
    uint64_t msg_id; /* to match a basic.return by its x-delay-bridge-id */
    uint32_t ref;
    uint8_t settle;   /* enum settle */
    uint8_t returned; /* basic.return came for it */
    /* monotonic us: handed to publisher_send, its last byte sent; 0 = not (yet) */
    uint64_t handed_us, written_us;
};

struct route_pub {
    const struct config_route *cfg;
    int on;                      /* this publisher serves the route (publisher_route_add) */
    amqp_channel_t ch;
    int open;
    int opening;                 /* set-up requests under way */
    amqp_method_number_t await;  /* ... the answer expected next */
    int ex_next;                 /* ... the next exchange to check (setup_exchange) */
    int unchecked;               /* a passive declare got 403: exchanges are no longer checked */
    int fp_403;                  /* failpoint publish.passive_403 armed this route's 404 */
    uint64_t setup_deadline;     /* ... monotonic ms */
    uint64_t next_tag;
    struct unconfirmed *win; /* ring in tag order */
    size_t head, n, cap;
    size_t unwritten;        /* the last entries pushed since the output buffer was last empty */
    struct db_hist st_write, st_confirm; /* the firing stages timed here (stats.h) */
    struct backoff bo;       /* reopening the channel after an error */
    uint64_t published, nacked, retries, returned;
    /*
     * A delayed_exchanges route: the exchanges a publish found gone (404)
     * or refused (403), each remembered for PUB_GONE_MS, so that their
     * messages are reported returned without a publish rather than close
     * the channel every other exchange's messages share
     * (publisher_gone.c). NULL until one is met.
     */
    struct pub_gone *gone;
};

#define PUB_GONE_MAX 8
#define PUB_GONE_MS 30000
struct pub_gone {
    char name[CONFIG_NAME_MAX + 1]; /* "" unused */
    uint64_t until;                 /* monotonic ms */
};

/* A basic.return being read: its properties name the publish; the body is skipped. */
struct returning {
    int active;
    struct route_pub *r;
    uint64_t body_size, got;
};

/* What is encoded and not yet written: b[off, len). */
struct outbuf {
    uint8_t *b;
    size_t off, len, cap;
    uint64_t emptied_us; /* a send emptied it then (monotonic us); publisher.c takes it, 0 */
    char why[128]; /* the last failed write or send, for the "connection lost" line */
};

struct publisher {
    struct ev_loop *loop;
    const struct config *cfg;
    char vhost[CONFIG_NAME_MAX + 1]; /* logged in to this vhost; "" = the URI's */
    struct publisher_ops ops;
    struct broker_conn conn;
    ev_io io;  /* readable */
    ev_io wio; /* writable: only while the kernel left part of out unwritten */
    struct outbuf out;
    uint32_t frame_max;
    uint64_t hb_ms;                    /* heartbeats we keep (plain TCP); 0: none */
    uint64_t last_read_ms, last_write_ms; /* monotonic */
    int up, blocked;
    unsigned uri_next; /* broker_conn_open_next()'s place in broker.uris */
    struct backoff bo;
    uint64_t last_poll_ms; /* monotonic, as every time here */
    struct route_pub *routes;
    int nroutes;
    struct returning ret;
    amqp_pool_t pool; /* per publish: decoded and rewritten properties */
};

/*
 * publisher_out.c (called from publisher.c only; it calls nothing back: a
 * failed write returns -1 with the reason in out.why, and publisher.c takes
 * the connection down)
 */
/* The publisher writes the socket itself (not TLS). */
int pub_own_writes(const struct publisher *p);
/* Bytes encoded and not yet written. */
size_t pub_out_pending(const struct publisher *p);
/* Room for need more bytes at the end of out; returns where they go. */
uint8_t *pub_out_reserve(struct publisher *p, size_t need);
/*
 * Everything was written (or the connection is gone): empty out, and free
 * it when it grew past OUT_KEEP_CAP.
 */
void pub_out_reset(struct publisher *p);
/*
 * One send of everything unwritten. What the kernel leaves waits for the
 * EV_WRITE watcher. Returns 0, or -1 when the write failed (out.why).
 */
int pub_out_write(struct publisher *p);
/* Write what is unwritten, unless the EV_WRITE watcher is already waiting for room (0 or -1). */
int pub_out_kick(struct publisher *p);
/*
 * Send one method (set-up requests, close-ok): behind our unwritten frames
 * on plain TCP, through rabbitmq-c on TLS. Returns 0, or -1 when it failed
 * (out.why).
 */
int pub_send_method(struct publisher *p, amqp_channel_t ch, amqp_method_number_t id,
                    void *decoded);
/*
 * May rabbitmq-c write on the socket now (the polite connection.close)?
 * Only when none of our bytes are unwritten and the kernel has room.
 * 1 yes, 0 no, -1 a write failed (out.why).
 */
int pub_sync_write_ok(struct publisher *p);
/* Bytes from the broker wait on the socket (or it was closed: drain() will tell). */
int pub_broker_spoke(const struct publisher *p);

/* ---- publisher.c, for publisher_gone.c's caller ---- */

/* Route r's settled confirms from the head of its window, in tag order, to the owner. */
void pub_win_report(struct publisher *p, struct route_pub *r);

/* ---- publisher_gone.c ---- */

/*
 * A delayed_exchanges route's channel closed (cm, why: its text) for a
 * publish to an exchange that is gone (404) or refused (403): the name
 * remembered, logged; 1, or 0 for any other close.
 */
int pub_note_gone(struct route_pub *r, const amqp_channel_close_t *cm, const char *why);
/* exchange was remembered by pub_note_gone less than PUB_GONE_MS ago. */
int pub_is_gone(const struct route_pub *r, const char *exchange);

#endif
