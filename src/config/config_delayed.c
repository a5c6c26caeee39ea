/*
 * config_delayed.c -- routes[].delayed_exchanges: one route for every
 * x-delayed-message exchange of a vhost.
 *
 * The project's x-delayed-message exchange type (deploy/plugin, "the
 * shim") stores nothing: it routes every message that asks for a delay
 * into the one queue "delay-bridge.delayed" of its vhost, and everything
 * else as its x-delayed-type would. A route with "delayed_exchanges": true
 * consumes that queue and publishes each message, when due, to the
 * exchange it was published to (the delivery's exchange, which the log
 * record keeps) with its routing key: so a team that declares a new
 * delayed exchange needs no bridge change (README, "One route for every
 * delayed exchange").
 *
 *   {"name": "delayed", "delayed_exchanges": true}          -- the whole route
 *
 * What such a route has and has not:
 *   ingress_queue      defaults to "delay-bridge.delayed" (what the shim
 *                      routes to); may be named, e.g. for a test
 *   ingress_exchange   optional: absent, the bridge declares no exchange and
 *                      binds nothing (the shim routes straight to the queue)
 *   queue_type         classic only: the shim declares the queue classic,
 *                      with x-queue-type "classic" as its only argument,
 *                      exactly as the bridge does (consumer_declare.c), so
 *                      neither side meets a 406; quorum and stream would
 *                      differ, and so would single_active_consumer
 *   target_exchange, declare_target, target_type, retry   refused by name
 *                      (the schema's NO_DELAYED rows): the target is each
 *                      message's own exchange
 *   share_keys         needs an ingress_exchange (its key-event exchange is
 *                      named after it)
 * Everything else (limits, delay_from, invalid_delay and
 * dead_letter_exchange, unroutable_exchange, vhost, keys) is as on any
 * route. One such route per vhost: ingress queues are unique in a vhost.
 */
#include "config_int.h"

#include <stdio.h>
#include <string.h>

int cfg_parse_route_delayed(struct ctx *x, struct config_route *r, json_object *o,
                            const char *pre)
{
    static const struct cfg_refusal no[] = {
        {"target_exchange", "each message is published to the exchange it was published to "
                            "(its delivery's exchange); leave target_exchange out"},
        {"declare_target", "the applications declare their x-delayed-message exchanges; the "
                           "bridge has no target to declare"},
        {"target_type", "the bridge has no target exchange of its own"},
        {"retry", "a retry route sends messages back to queues, this one to their "
                  "exchanges: make them two routes"},
    };

    r->delayed_exchanges = 0;
    if (cfg_get_bool(x, o, pre, "delayed_exchanges", &r->delayed_exchanges) < 0)
        return -1;
    if (!r->delayed_exchanges)
        return 0;
    /* the schema's NO_DELAYED rows, each with its reason (or a plain one) */
    if (cfg_refuse_flagged(x, o, pre, CONFIG_KEY_NO_DELAYED, "delayed_exchanges", no,
                           sizeof no / sizeof no[0], "a delayed_exchanges route has no such key") < 0)
        return -1;
    snprintf(r->ingress_queue, sizeof r->ingress_queue, "%s", CONFIG_DELAYED_QUEUE);
    return 0;
}

int cfg_check_route_delayed(struct ctx *x, const struct config_route *r, const char *pre)
{
    char path[320];

    if (!r->delayed_exchanges)
        return 0;
    if (r->queue_type != QUEUE_CLASSIC) {
        cfg_join(path, sizeof path, pre, "queue_type");
        return cfg_fail(x, path, "a delayed_exchanges route's ingress is a classic queue: the "
                        "x-delayed-message exchanges declare \"" CONFIG_DELAYED_QUEUE "\" "
                        "classic, and both declares must agree; leave queue_type out");
    }
    if (r->single_active_consumer) {
        cfg_join(path, sizeof path, pre, "single_active_consumer");
        return cfg_fail(x, path, "not allowed with delayed_exchanges: the x-delayed-message "
                        "exchanges declare the queue without x-single-active-consumer, and a "
                        "queue's arguments must agree");
    }
    if (r->share_keys && !r->ingress_exchange[0]) {
        cfg_join(path, sizeof path, pre, "share_keys");
        return cfg_fail(x, path, "needs ingress_exchange on a delayed_exchanges route: the "
                        "key-event exchange is named after it");
    }
    return 0;
}
