/*
 * bridge_keys.c -- keys across bridges (routes[].share_keys): the key-event
 * protocol.
 *
 * Bridges that share a route are competing consumers, so a replacement or a
 * cancel for a key may reach a bridge that does not hold the key's message.
 * With share_keys, each bridge tells the others: for every keyed message
 * and every x-delay-cancel it takes from the ingress, it publishes a key
 * event (an empty message with the headers below) to the route's fanout
 * INGRESS_EXCHANGE.keys, where every bridge of the route has its own
 * durable queue INGRESS_QUEUE.keys.HOLDER. HOLDER is the instance, or with
 * a replicated WAL the log's stream (config_key_holder()): an owner and
 * its standbys share one queue and one origin. Before, each had its own:
 * an event sent while one owned the log waited in that one's queue, never
 * seen by the standby that took over (a replaced or cancelled version
 * fired), and an owner applied its own log's events sent by the previous
 * owner (the newer version it held was cancelled: lost).
 *
 *   x-delay-key-event   "replace" (a newer message with this key arrived)
 *                       or "cancel"
 *   x-delay-key         the key
 *   x-delay-key-origin  the sending bridge's instance name
 *   x-delay-key-at      when it took the message, ms since the epoch
 *
 * A bridge that holds the key's message (pending, waiting or due) and
 * took it before `at` (or at the same ms, with an instance name that sorts
 * before the origin's) cancels it: of the versions held across the
 * bridges, the one that arrived last survives, and a cancel removes what
 * arrived before it. "Last" is by the bridges' clocks (keep them in NTP
 * sync) and by arrival at a bridge, not by publication.
 *
 * Reliability: the event goes out on the consumer's channel before the
 * ack of the delivery that caused it, so an acked delivery's event reached
 * the broker; a delivery whose ack was lost comes back, is recognised as
 * logged, and its event is sent again. A bridge acks an event like a
 * delivery: once the CANCEL it caused is durable. An event the broker
 * loses in a crash before it stored it lets both versions fire.
 */
#include "bridge_int.h"

#include <string.h>

#include "delay-bridge/msgrec.h"

void bridge_key_event_out(struct bridge *b, int route, const char *kind, const char *key,
                          size_t key_len, uint64_t at)
{
    if (!b->cfg->routes[route].share_keys)
        return;
    if (consumer_publish_key_event(bridge_cons(b, route), route, kind, key, key_len, config_key_holder(b->cfg),
                                   at) == 0)
        b->counts[route].key_events_sent++;
}

/*
 * The event of a logged keyed message whose ack was lost (a crash, a dropped
 * connection, an event the broker never confirmed), recognised when the
 * broker redelivered it: sent again, since the first may have been lost
 * with the ack. It carries the time the logged copy was first taken -- not
 * the time of the redelivery, which is later than a version another bridge
 * took meanwhile and would make that bridge cancel a newer version than
 * ours (the key then lost everywhere: ours is cancelled by that bridge's
 * event).
 *
 * That time comes from eng_seen (first_ms), which knows it for every
 * message the ring remembers since the daemon started. Then the event goes
 * out even if the message is no longer held here -- published or
 * cancelled since: the other bridges' older versions must still go (seed 3
 * of the fault schedule: version 2 fired here before its lost event was
 * noticed, and version 1 fired there). An older date than the truth is
 * never sent, so a newer version elsewhere is safe.
 *
 * When it is not known (the ring came from a checkpoint), the held
 * version's ADD record gives it; nothing is sent when the key's held
 * version here is another message (a newer one, which sent its own event)
 * or none.
 */
void bridge_key_event_again(struct bridge *b, int route, const struct walrec_add *a,
                            uint64_t first_ms)
{
    struct walrec_add held;
    eng_msg m;
    int r;

    if (!b->cfg->routes[route].share_keys)
        return;
    if (first_ms) {
        bridge_key_event_out(b, route, "replace", a->key, a->key_len, first_ms);
        return;
    }
    if (!(m = eng_find(b->eng, (uint16_t)route, a->key, a->key_len)))
        return;
    if ((r = eng_read(b->eng, m, &held)) < 0) {
        bridge_fatal(b, "WAL read (key event)", r);
        return;
    }
    if (msgrec_fingerprint(&held) != msgrec_fingerprint(a))
        return;
    bridge_key_event_out(b, route, "replace", a->key, a->key_len, held.enqueue_ms);
}

/* Another bridge's key event: cancel our older version of the key, if we hold one. */
void bridge_key_event_in(struct bridge *b, const struct delivery *d)
{
    struct route_counts *n = &b->counts[d->route];
    const char *key = d->ev.key, *origin = d->ev.origin;
    size_t key_len = d->ev.key_len, origin_len = d->ev.origin_len;
    int64_t at = d->ev.at;
    eng_msg m;
    int r;

    bridge_logged(b, d); /* acked with the next commit, after the CANCEL it may cause */
    n->key_events_received++;
    if (!d->ev.ok || key_len > MSGREC_KEY_MAX) {
        log_warn("keys", "malformed key event dropped", "route=%s", b->cfg->routes[d->route].name);
        return;
    }
    const char *holder = config_key_holder(b->cfg);
    size_t mine = strlen(holder);
    if (origin_len == mine && memcmp(origin, holder, mine) == 0)
        return; /* our own (or our log's, sent by an earlier owner of it) */
    if (!(m = eng_find(b->eng, (uint16_t)d->route, key, key_len)))
        return;
    struct walrec_add a;
    if ((r = eng_read(b->eng, m, &a)) < 0) {
        bridge_fatal(b, "WAL read (key event)", r);
        return;
    }
    int cmp = strncmp(holder, origin, origin_len);
    if (cmp == 0 && mine != origin_len)
        cmp = mine < origin_len ? -1 : 1;
    if (a.enqueue_ms > (uint64_t)at || (a.enqueue_ms == (uint64_t)at && cmp > 0))
        return; /* ours is the newer one: the other bridge cancels its copy */
    if ((r = eng_cancel(b->eng, (uint16_t)d->route, key, key_len)) < 0) {
        bridge_fatal(b, "WAL read (cancel)", r);
        return;
    }
    if (r > 0)
        n->key_events_applied++;
}
