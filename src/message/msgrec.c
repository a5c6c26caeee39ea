/*
 * msgrec.c -- a delivery as a log record, and a log record as a publish.
 *
 * The record keeps everything needed to publish the message again exactly
 * as it came: the exchange and routing key it was published with, its
 * properties in AMQP encoding (never decoded and re-encoded on the way in),
 * the body, and when it was received and is due. The due time is absolute
 * wall-clock ms, so a restart does not extend a delay. The id a consumer
 * sees (x-delay-bridge-id) is the log's random id and the message's first
 * sequence number: unique across restarts and compaction, the same on every
 * redelivery of one held message, so consumers can deduplicate.
 *
 * A delayed_exchanges route (config_delayed.c) has no target: each message
 * goes back to the exchange its record names, the one it was published to,
 * with its routing key -- unless that is the default exchange or the
 * route's own ingress exchange (msgrec.h: refused).
 */
#include "delay-bridge/msgrec.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int msgrec_from_delivery(struct walrec_add *a, const struct config_route *rc,
                         const struct msgrec_in *in, uint64_t now, enum xdelay_status xs,
                         uint64_t delay_ms)
{
    int bad_key = in->key_invalid || (in->key && in->key_len > MSGREC_KEY_MAX);
    int invalid = (xdelay_invalid(xs) ? MSGREC_INVALID_DELAY : 0) |
                  (bad_key ? MSGREC_INVALID_KEY : 0);

    memset(a, 0, sizeof(*a));
    a->enqueue_ms = now;
    a->due_ms = invalid ? now : now + delay_ms;
    if (invalid && rc->invalid_delay == INVALID_DELAY_DEAD_LETTER) {
        a->flags = WALREC_ADD_DEADLETTER;
        a->error = (uint16_t)(invalid & MSGREC_INVALID_DELAY ? xs : XDELAY_EKEY);
    }
    if (in->key && !invalid) {
        a->flags |= WALREC_ADD_KEYED;
        a->key = in->key;
        a->key_len = (uint8_t)in->key_len;
    }
    a->route = rc->name;
    a->route_len = (uint8_t)strnlen(rc->name, 255);
    /* AMQP short strings: a broker never sends more than 255 bytes */
    a->exchange = in->exchange;
    a->exchange_len = (uint8_t)(in->exchange_len > 255 ? 255 : in->exchange_len);
    a->routing_key = in->routing_key;
    a->routing_key_len = (uint8_t)(in->routing_key_len > 255 ? 255 : in->routing_key_len);
    a->props = in->props;
    a->props_len = in->props_len;
    a->body = in->body;
    a->body_len = in->body_len;
    return invalid;
}

/* A delayed_exchanges route's record: its own exchange, copied into o (NUL-ended). */
static const char *own_exchange(const struct walrec_add *a, struct msgrec_out *o)
{
    memcpy(o->exchange_buf, a->exchange, a->exchange_len);
    o->exchange_buf[a->exchange_len] = '\0';
    return o->exchange_buf;
}

/* The record's exchange may not be published to (msgrec.h, refused). */
static int refused(const struct config_route *rc, const struct msgrec_out *o)
{
    return rc->delayed_exchanges && o->exchange == o->exchange_buf &&
           (!o->exchange_buf[0] ||
            (rc->ingress_exchange[0] && strcmp(o->exchange_buf, rc->ingress_exchange) == 0));
}

void msgrec_to_publish(const struct walrec_add *a, const struct config_route *rc,
                       uint64_t log_id, int unroutable, struct msgrec_out *o)
{
    o->exchange = rc->delayed_exchanges ? own_exchange(a, o) : rc->target_exchange;
    o->original_exchange = NULL;
    o->error = NULL;
    if (a->flags & WALREC_ADD_DEADLETTER) {
        o->exchange = rc->dead_letter_exchange;
        o->error = xdelay_strerror((enum xdelay_status)a->error);
    }
    if (unroutable && rc->unroutable_exchange[0]) {
        o->original_exchange = o->exchange;
        o->exchange = rc->unroutable_exchange;
    }
    o->delay_ms = a->due_ms > a->enqueue_ms ? a->due_ms - a->enqueue_ms : 0;
    o->handback = 0;
    o->remaining_ms = 0;
    o->unmarked = 0;
    o->refused = refused(rc, o);
    o->drop_stamp = rc->delay_from == DELAY_FROM_BROKER;
    snprintf(o->id, sizeof(o->id), "%016" PRIx64 "-%" PRIu64, log_id, a->msg_id);
}

void msgrec_to_handback(const struct walrec_add *a, const struct config_route *rc,
                        uint64_t log_id, int unroutable, uint64_t now, struct msgrec_out *o)
{
    msgrec_to_publish(a, rc, log_id, unroutable, o);
    if (a->due_ms <= now || (a->flags & WALREC_ADD_DEADLETTER) || o->original_exchange)
        return; /* due, dead-lettered, or diverted (its exchange returned it) */
    /* a delayed_exchanges route's: to its own exchange, which holds it in the ingress again */
    o->exchange = rc->delayed_exchanges ? own_exchange(a, o) : rc->ingress_exchange;
    o->original_exchange = NULL;
    o->delay_ms = 0;
    o->handback = 1;
    o->remaining_ms = a->due_ms - now;
    o->unmarked = rc->delayed_exchanges;
    o->refused = refused(rc, o);
}

/* 8 bytes at a time, multiply and xor-shift: fast, and good enough to tell messages apart. */
static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t w;

    h ^= (uint64_t)n * 0xc2b2ae3d27d4eb4full;
    for (; n >= 8; n -= 8, b += 8) {
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    w = 0;
    if (n)
        memcpy(&w, b, n);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

uint64_t msgrec_fingerprint(const struct walrec_add *a)
{
    uint64_t h = 0x243f6a8885a308d3ull;

    h = mix(h, a->exchange, a->exchange_len);
    h = mix(h, a->routing_key, a->routing_key_len);
    h = mix(h, a->props, a->props_len);
    h = mix(h, a->body, a->body_len);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    return h ? h : 1;
}
