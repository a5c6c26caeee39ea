/*
 * config_diff.c -- what differs between two loaded configurations.
 *
 * A reload (SIGHUP) reads the file again into a second struct config and
 * asks this file what changed, one key path per difference, so that the
 * daemon can apply what it can apply live and say, by key path, what it
 * did not. Routes are matched by name, not by place, so moving a route in
 * the array changes nothing: "routes[NAME]" is added, removed or changed
 * (one line for a route, whichever of its keys differ; its retry policy
 * and per-queue overrides included). The other keys are compared one by
 * one and named as in the file ("broker.uri", "wal.fsync", ...);
 * route_templates is one path, the templates' text (a template's change
 * also shows in the routes made from it).
 *
 * A route the running configuration retired (removed while it still held
 * messages, config.h) is as good as absent: config_route_index does not
 * find it, and a diff neither matches nor reports it, so the file naming
 * that route again adds it anew. Where a route was read (its source, the
 * -c file or the routes file) is not one of its keys.
 *
 * Pure: no I/O, no allocation. Every key of the file is compared;
 * test_config_diff changes each one alone and expects exactly its path, so
 * a key added to the file must be added here and there.
 */
#include "config_int.h"

#include <string.h>

static int same_policy(const struct config_retry_policy *a, const struct config_retry_policy *b)
{
    return a->initial_ms == b->initial_ms && a->multiplier == b->multiplier &&
           a->max_ms == b->max_ms && a->jitter == b->jitter &&
           a->max_attempts == b->max_attempts;
}

static int same_retry(const struct config_retry *a, const struct config_retry *b)
{
    if (!a || !b)
        return a == b;
    if (!same_policy(&a->policy, &b->policy) || a->reasons != b->reasons ||
        strcmp(a->parking_exchange, b->parking_exchange) ||
        strcmp(a->parking_queue, b->parking_queue) || a->nqueues != b->nqueues ||
        strcmp(a->queue_pattern, b->queue_pattern))
        return 0;
    for (int i = 0; i < a->nqueues; i++)
        if (strcmp(a->queues[i].queue, b->queues[i].queue) ||
            !same_policy(&a->queues[i].policy, &b->queues[i].policy))
            return 0;
    return 1;
}

int config_route_keys_diff(const struct config_route *a, const struct config_route *b,
                           void (*cb)(void *arg, const char *key), void *arg)
{
    const struct {
        const char *key;
        int differs;
    } k[] = {
        {"name", strcmp(a->name, b->name) != 0},
        {"ingress_exchange", strcmp(a->ingress_exchange, b->ingress_exchange) != 0},
        {"ingress_queue", strcmp(a->ingress_queue, b->ingress_queue) != 0},
        {"target_exchange", strcmp(a->target_exchange, b->target_exchange) != 0},
        {"queue_type", a->queue_type != b->queue_type},
        {"stream_max_age", strcmp(a->stream_max_age, b->stream_max_age) != 0},
        {"stream_max_mb", a->stream_max_bytes != b->stream_max_bytes},
        {"single_active_consumer", a->single_active_consumer != b->single_active_consumer},
        {"share_keys", a->share_keys != b->share_keys},
        {"declare_target", a->declare_target != b->declare_target},
        {"target_type", strcmp(a->target_type, b->target_type) != 0},
        {"prefetch", a->prefetch != b->prefetch},
        {"max_inflight", a->max_inflight != b->max_inflight},
        {"max_delay_ms", a->max_delay_ms != b->max_delay_ms},
        {"max_held", a->max_held != b->max_held},
        {"delay_from", a->delay_from != b->delay_from},
        {"invalid_delay", a->invalid_delay != b->invalid_delay},
        {"dead_letter_exchange", strcmp(a->dead_letter_exchange, b->dead_letter_exchange) != 0},
        {"unroutable_exchange", strcmp(a->unroutable_exchange, b->unroutable_exchange) != 0},
        {"retry", !same_retry(a->retry, b->retry)},
        {"delayed_exchanges", a->delayed_exchanges != b->delayed_exchanges},
        {"vhost", strcmp(a->vhost, b->vhost) != 0},
        {"template", strcmp(a->template_name, b->template_name) != 0},
    };
    int n = 0;

    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].differs) {
            n++;
            if (cb)
                cb(arg, k[i].key);
        }
    return n;
}

int config_route_same(const struct config_route *a, const struct config_route *b)
{
    return config_route_keys_diff(a, b, NULL, NULL) == 0;
}

int config_route_index(const struct config *c, const char *name, size_t len)
{
    for (int i = 0; i < c->nroutes; i++)
        if (!c->routes[i].retired && strlen(c->routes[i].name) == len &&
            memcmp(c->routes[i].name, name, len) == 0)
            return i;
    return -1;
}

static const struct config_route *route_named(const struct config *c, const char *name)
{
    int i = config_route_index(c, name, strlen(name));

    return i < 0 ? NULL : &c->routes[i];
}

struct diff {
    void (*cb)(void *arg, const char *what, const char *path);
    void *arg;
    int n;
};

static void say(struct diff *d, int differs, const char *path)
{
    if (!differs)
        return;
    d->n++;
    if (d->cb)
        d->cb(d->arg, "changed", path);
}

static int templates_differ(const struct config *a, const struct config *b)
{
    if (a->ntemplates != b->ntemplates)
        return 1;
    for (int i = 0; i < a->ntemplates; i++)
        if (strcmp(a->templates[i].name, b->templates[i].name) ||
            strcmp(a->templates[i].json, b->templates[i].json))
            return 1;
    return 0;
}

static int uris_differ(const struct config *a, const struct config *b)
{
    if (a->nuris != b->nuris || a->uri_from_env != b->uri_from_env)
        return 1;
    for (int i = 0; i < a->nuris; i++)
        if (strcmp(a->uris[i], b->uris[i]))
            return 1;
    return 0;
}

int config_diff(const struct config *a, const struct config *b,
                void (*cb)(void *arg, const char *what, const char *path), void *arg)
{
    struct diff d = {cb, arg, 0};
    const struct config_tls *ta = &a->tls, *tb = &b->tls;
    const struct config_replicate *ra = &a->repl, *rb = &b->repl;
    char path[CONFIG_NAME_MAX + 16];

    say(&d, uris_differ(a, b), "broker.uri");
    say(&d, a->heartbeat_s != b->heartbeat_s, "broker.heartbeat_s");
    say(&d, a->connect_timeout_ms != b->connect_timeout_ms, "broker.connect_timeout_ms");
    say(&d, a->reconnect_min_ms != b->reconnect_min_ms ||
                a->reconnect_max_ms != b->reconnect_max_ms, "broker.reconnect_*_ms");
    say(&d, a->publish_retry_min_ms != b->publish_retry_min_ms ||
                a->publish_retry_max_ms != b->publish_retry_max_ms, "broker.publish_retry_*_ms");
    say(&d, strcmp(ta->ca_file, tb->ca_file) || strcmp(ta->cert_file, tb->cert_file) ||
                strcmp(ta->key_file, tb->key_file) || ta->verify_hostname != tb->verify_hostname,
        "broker.tls");
    say(&d, strcmp(a->wal_dir, b->wal_dir), "wal.dir");
    say(&d, a->segment_bytes != b->segment_bytes, "wal.segment_mb");
    say(&d, a->fsync != b->fsync, "wal.fsync");
    say(&d, a->commit_interval_ms != b->commit_interval_ms, "wal.commit_interval_ms");
    say(&d, a->prewrite_bytes != b->prewrite_bytes, "wal.prewrite_kb");
    say(&d, a->max_message_bytes != b->max_message_bytes, "wal.max_message_bytes");
    say(&d, a->checkpoint_interval_s != b->checkpoint_interval_s ||
                a->checkpoint_min_mb != b->checkpoint_min_mb, "wal.checkpoint_*");
    say(&d, ra->enabled != rb->enabled || strcmp(ra->stream, rb->stream) ||
                strcmp(ra->lease_queue, rb->lease_queue) || ra->max_bytes != rb->max_bytes ||
                strcmp(ra->max_age, rb->max_age) || ra->segment_bytes != rb->segment_bytes ||
                ra->checkpoint_bytes != rb->checkpoint_bytes ||
                ra->checkpoint_interval_s != rb->checkpoint_interval_s ||
                ra->batch_bytes != rb->batch_bytes ||
                ra->confirm_timeout_ms != rb->confirm_timeout_ms ||
                ra->lease_renew_ms != rb->lease_renew_ms, "wal.replicate");
    say(&d, strcmp(a->instance, b->instance), "instance");
    say(&d, strcmp(a->http_listen, b->http_listen) || a->http_allow_remote != b->http_allow_remote ||
                a->http_nallowed_hosts != b->http_nallowed_hosts ||
                memcmp(a->http_allowed_hosts, b->http_allowed_hosts, sizeof a->http_allowed_hosts),
        "http");
    say(&d, a->log_level != b->log_level, "log.level");
    say(&d, a->shutdown_timeout_ms != b->shutdown_timeout_ms, "shutdown_timeout_ms");
    say(&d, a->max_held != b->max_held, "limits.max_held");
    say(&d, strcmp(a->routes_file, b->routes_file), "routes_file");
    say(&d, templates_differ(a, b), "route_templates");

    for (int i = 0; i < b->nroutes; i++) {
        if (b->routes[i].retired)
            continue;
        const struct config_route *old = route_named(a, b->routes[i].name);
        snprintf(path, sizeof path, "routes[%s]", b->routes[i].name);
        if (!old) {
            d.n++;
            if (cb)
                cb(arg, "added", path);
        } else {
            say(&d, !config_route_same(old, &b->routes[i]), path);
        }
    }
    for (int i = 0; i < a->nroutes; i++)
        if (!a->routes[i].retired && !route_named(b, a->routes[i].name)) {
            snprintf(path, sizeof path, "routes[%s]", a->routes[i].name);
            d.n++;
            if (cb)
                cb(arg, "removed", path);
        }
    return d.n;
}
