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
 * one, walking the schema (config_keys.def), and named as in the file
 * ("broker.uri", "wal.fsync", ...) or by the diff path rows share
 * ("broker.tls", "wal.replicate", "http", "broker.reconnect_*_ms"); a
 * route's keys are the schema's ROUTE rows. route_templates is one path,
 * the templates' text (a template's change also shows in the routes made
 * from it).
 *
 * A route the running configuration retired (removed while it still held
 * messages, config.h) is as good as absent: config_route_index does not
 * find it, and a diff neither matches nor reports it, so the file naming
 * that route again adds it anew. Where a route was read (its source, the
 * -c file or the routes file) is not one of its keys.
 *
 * Pure: no I/O, no allocation. Every key of the file is compared: a row
 * with a field by its value (config_key_differs), a row without one by its
 * compare (CMP_*: URIs, allowed hosts, templates, wal.replicate's presence,
 * retry). test_config_diff changes each key alone and expects exactly its
 * path; a new row with a field needs nothing here.
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
    int n = 0;

    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect != CONFIG_SECT_ROUTE)
            continue;
        int differs = k->has_field ? config_key_differs(k, a, b)
                      : k->cmp == CMP_RETRY ? !same_retry(a->retry, b->retry)
                                            : 0;
        if (differs) {
            n++;
            if (cb)
                cb(arg, k->key);
        }
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

static int hosts_differ(const struct config *a, const struct config *b)
{
    return a->http_nallowed_hosts != b->http_nallowed_hosts ||
           memcmp(a->http_allowed_hosts, b->http_allowed_hosts, sizeof a->http_allowed_hosts);
}

/* A row of the file's sections (not of a route) differs from a to b. */
static int row_differs(const struct config_key *k, const struct config *a, const struct config *b)
{
    if (k->has_field)
        return config_key_differs(k, a, b);
    switch (k->cmp) {
    case CMP_URIS: return uris_differ(a, b);
    case CMP_HOSTS: return hosts_differ(a, b);
    case CMP_TEMPLATES: return templates_differ(a, b);
    case CMP_REPLICATE: return a->repl.enabled != b->repl.enabled;
    default: return 0; /* a section (its rows follow) or the routes (below) */
    }
}

int config_diff(const struct config *a, const struct config *b,
                void (*cb)(void *arg, const char *what, const char *path), void *arg)
{
    struct diff d = {cb, arg, 0};
    char path[CONFIG_NAME_MAX + 16];

    /* the rows in the table's order; neighbours sharing a diff path report once */
    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect >= CONFIG_SECT_ROUTE || k->type == CONFIG_T_SECTION)
            continue;
        int differs = row_differs(k, a, b);
        if (k->diff) {
            while (i + 1 < config_nkeys && config_keys[i + 1].diff &&
                   strcmp(config_keys[i + 1].diff, k->diff) == 0)
                differs |= row_differs(&config_keys[++i], a, b);
            say(&d, differs, k->diff);
        } else {
            cfg_join(path, sizeof path, cfg_sect_pre[k->sect], k->key);
            say(&d, differs, path);
        }
    }

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
