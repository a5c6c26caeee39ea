/*
 * bridge_routes.c -- the running configuration made what a new one says,
 * without a restart: a SIGHUP (bridge_reload.c reads the file again) and
 * the HTTP route API (bridge_routes_http.c puts or deletes one route) both
 * end here.
 *
 * Routes are matched by name. For each difference:
 *
 *   added      appended to the running routes, at the next index: the
 *              engine learns it (eng_route_added, which adopts the orphans
 *              the log holds for that name), its vhost's connection pair
 *              is made if new (bridge_conns.c), its publisher channel
 *              opens and its ingress is declared -- on a scratch channel
 *              first, so a broker that refuses it never stops the other
 *              routes -- and consumed. A route removed earlier and added
 *              back gets its old index again.
 *   removed    retired: its ingress consumer is cancelled, and nothing
 *              else changes. What it holds is published to its target
 *              when due, through the channel it had; its keys can still be
 *              cancelled, its messages browsed and purged, and /stats
 *              shows it, "retired", until the process ends. Why not hand
 *              them back, as a drain does? A drain hands back to the
 *              route's ingress exchange for another bridge to take; a
 *              route being removed is usually one whose ingress is going
 *              away, and a message handed back there would be dropped by
 *              an exchange without a queue. The messages were accepted
 *              with a promise of a time and a target: they keep it. The
 *              ingress queue stays in the broker with whatever was
 *              published after the removal (the bridge never deletes a
 *              queue).
 *   changed    each key that can change live (its schema row is LIVE,
 *              config_keys.def) is written in the running configuration
 *              (read where it is used: the next delivery or publish sees
 *              it); the keys of the ingress side (RECONSUME: exchange,
 *              queue, type, prefetch, single active consumer) are applied
 *              by consuming again: basic.cancel, the new declares, the new
 *              basic.consume -- deliveries taken before are acked as ever,
 *              and the old queue keeps what it holds. The rest waits for a
 *              restart, logged by key path and counted.
 *
 * What waits for a restart: a stream ingress added, or a change to or
 * from one (its place file is opened at start); share_keys and anything
 * a route with share_keys names (its key-event queue is named after the
 * ingress); declare_target and target_type; a route's vhost (its index is
 * tied to its vhost's connections: delete it and add it under a new name);
 * a prefetch above the redelivery memory sized at start; more routes than
 * CONFIG_MAX_ROUTES in a process's life; every broker, wal, http and
 * instance key. The dry run (bridge_config_pending) answers the same
 * question without changing anything: the API refuses rather than store
 * a route it cannot run.
 *
 * The running routes array has room for CONFIG_MAX_ROUTES (config.h), so a
 * route is appended in place and the count raised after it is whole: the
 * other threads read route names of indexes they were given, which never
 * move. Everything here runs on the loop thread.
 */
#include "bridge_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

struct apply {
    struct bridge *b;
    struct config *now, *next;
    const char *origin;
    const char *only; /* one route's name: the API; NULL: everything (a reload) */
    int dry;
    struct bridge_apply *out;
};

/* The running route called name, retired ones too (names stay unique: one added back
 * takes its old index); -1 if none. */
static int find_any(const struct config *c, const char *name)
{
    return bridge_route_index((void *)c, name, strlen(name));
}

static int find_live(const struct config *c, const char *name)
{
    int i = find_any(c, name);

    return i >= 0 && !c->routes[i].retired ? i : -1;
}

static void note_key(struct apply *x, const char *path)
{
    size_t n = strlen(x->out->pending_keys);

    if (n + strlen(path) + 3 < sizeof(x->out->pending_keys))
        snprintf(x->out->pending_keys + n, sizeof(x->out->pending_keys) - n, "%s%s",
                 n ? ", " : "", path);
}

static void pend(struct apply *x, const char *path, const char *what, const char *why)
{
    x->out->pending++;
    note_key(x, path);
    if (!x->dry)
        log_warn(x->origin, "a change that takes effect at the next start: not applied now",
                 "key=%s change=%s why=\"%s\"", path, what, why);
}

static void applied(struct apply *x, const char *path)
{
    x->out->applied++;
    if (!x->dry)
        log_info(x->origin, "applied", "key=%s", path);
}

/* ---- keys of a route that stays ------------------------------------------------- */

enum how { KEY_WAITS, KEY_WRITE, KEY_RECONSUME };

/*
 * How key of route r (running) changes to n's, or why it waits: the
 * schema's row says (CONFIG_KEY_LIVE, CONFIG_KEY_RECONSUME); the conditions
 * below are where a live key still waits.
 */
static enum how how_key(const struct apply *x, const struct config_route *r,
                        const struct config_route *n, const char *key, const char **why)
{
    const struct config_key *k = config_key_find(CONFIG_SECT_ROUTE, key);
    unsigned flags = k ? k->flags : 0;

    if (r->delayed_exchanges != n->delayed_exchanges) { /* all its keys: a route anew */
        *why = "a route becoming or ceasing to be a delayed_exchanges route";
        return KEY_WAITS;
    }
    if (!strcmp(key, "target_exchange")) {
        *why = "the target of a declared target or of a retry route";
        return !r->declare_target && !n->declare_target && !r->retry && !n->retry ? KEY_WRITE
                                                                                 : KEY_WAITS;
    }
    if (!strcmp(key, "retry")) {
        *why = "a route becoming or ceasing to be a retry route";
        return r->retry && n->retry ? KEY_WRITE : KEY_WAITS;
    }
    if (flags & CONFIG_KEY_LIVE)
        return KEY_WRITE;
    if (flags & CONFIG_KEY_RECONSUME) {
        *why = "a stream ingress, or a route with share_keys";
        if (r->queue_type == QUEUE_STREAM || n->queue_type == QUEUE_STREAM || r->share_keys ||
            n->share_keys)
            return KEY_WAITS;
        if (!strcmp(key, "prefetch") && x->b->eng && n->prefetch > x->b->rec.opts.recent) {
            *why = "a prefetch above the redelivery memory sized at start";
            return KEY_WAITS;
        }
        return KEY_RECONSUME;
    }
    *why = "this key is read at start only";
    return KEY_WAITS;
}

/* Key of r made n's (the held gate weighs max_held at the next turn). */
static void write_key(struct config_route *r, struct config_route *n, const char *key)
{
    const struct config_key *k = config_key_find(CONFIG_SECT_ROUTE, key);

    if (!strcmp(key, "retry")) { /* swapped: the new configuration frees the old one */
        struct config_retry *t = r->retry;
        r->retry = n->retry;
        n->retry = t;
    } else if (k && k->has_field) {
        config_key_copy(k, r, n);
    }
}

struct keys {
    const char *key[40];
    int n;
};

static void collect(void *arg, const char *key)
{
    struct keys *k = arg;

    if (k->n < 40)
        k->key[k->n++] = key;
}

static void route_changed(struct apply *x, int i, struct config_route *n)
{
    struct config_route *r = &x->now->routes[i];
    enum how how[40];
    struct keys k = {{0}, 0};
    char path[CONFIG_NAME_MAX + 64];
    const char *why = "";
    int reconsume = 0;

    config_route_keys_diff(r, n, collect, &k);
    for (int j = 0; j < k.n; j++) {
        how[j] = how_key(x, r, n, k.key[j], &why);
        if (how[j] == KEY_WAITS) {
            snprintf(path, sizeof(path), "routes[%s].%s", r->name, k.key[j]);
            pend(x, path, "changed", why);
        }
        reconsume |= how[j] == KEY_RECONSUME;
    }
    if (x->dry)
        return;
    if (reconsume) /* the old consumer goes before the new ingress is declared */
        consumer_route_remove(bridge_cons(x->b, i), i);
    for (int j = 0; j < k.n; j++) {
        if (how[j] == KEY_WAITS)
            continue;
        write_key(r, n, k.key[j]);
        snprintf(path, sizeof(path), "routes[%s].%s", r->name, k.key[j]);
        applied(x, path);
    }
    if (reconsume) {
        x->b->commit_early_at = bridge_commit_early_at(x->now);
        consumer_route_add(bridge_cons(x->b, i), i);
    }
}

/* ---- routes added and removed --------------------------------------------------- */

static void route_added(struct apply *x, struct config_route *n)
{
    struct bridge *b = x->b;
    char path[CONFIG_NAME_MAX + 16];
    int i = find_any(x->now, n->name), vh_new = 1, r = 0;

    snprintf(path, sizeof(path), "routes[%s]", n->name);
    if (n->queue_type == QUEUE_STREAM) {
        pend(x, path, "added", "a stream ingress (its place file is opened at start)");
        return;
    }
    if (i < 0 && x->now->nroutes >= CONFIG_MAX_ROUTES) {
        pend(x, path, "added", "no room: CONFIG_MAX_ROUTES routes in a process's life");
        return;
    }
    if (n->prefetch > b->rec.opts.recent) {
        pend(x, path, "added", "a prefetch above the redelivery memory sized at start");
        return;
    }
    for (int k = 0; k < b->nvc; k++)
        if (!strcmp(b->vc[k].vhost, config_route_vhost(x->next, n)))
            vh_new = 0;
    if (i >= 0 && strcmp(config_route_vhost(x->now, &x->now->routes[i]),
                         config_route_vhost(x->next, n))) {
        pend(x, path, "added", "removed earlier from another vhost: add it under a new name");
        return;
    }
    if (vh_new && b->nvc >= BRIDGE_MAX_VHOSTS) {
        pend(x, path, "added", "too many vhosts");
        return;
    }
    x->out->added++;
    if (x->dry)
        return;
    if (i >= 0) { /* added back: its index, its engine state, its pair */
        struct config_route *old = &x->now->routes[i];
        struct config_retry *t = old->retry;
        memcpy(old, n, sizeof(*old));
        n->retry = t; /* the new configuration frees the old one */
        old->retired = 0;
        consumer_route_add(bridge_cons(b, i), i);
    } else {
        i = x->now->nroutes;
        memcpy(&x->now->routes[i], n, sizeof(*n));
        n->retry = NULL; /* the running configuration owns it now */
        x->now->routes[i].retired = 0;
        __atomic_store_n(&x->now->nroutes, i + 1, __ATOMIC_RELEASE);
        if (b->eng && (r = eng_route_added(b->eng, i)) < 0) {
            bridge_fatal(b, "adopt a route's orphans (WAL read)", r);
            return;
        }
        if (r > 0)
            log_info(x->origin, "messages held for the route before it was configured "
                     "(orphans) are scheduled again", "route=%s adopted=%d", n->name, r);
        if (bridge_route_attach(b, i, 1) < 0)
            return;
    }
    b->commit_early_at = bridge_commit_early_at(x->now);
    log_info(x->origin, "route added", "route=%s vhost=\"%s\" ingress_exchange=\"%s\" "
             "ingress_queue=\"%s\" target_exchange=\"%s\"", n->name,
             config_route_vhost(x->now, &x->now->routes[i]), n->ingress_exchange,
             n->ingress_queue, n->target_exchange);
}

static void route_removed(struct apply *x, int i)
{
    struct config_route *r = &x->now->routes[i];
    struct eng_route_stats s;

    if (r->queue_type == QUEUE_STREAM) {
        char path[CONFIG_NAME_MAX + 16];
        snprintf(path, sizeof(path), "routes[%s]", r->name);
        pend(x, path, "removed", "a stream ingress (its place file is kept until a restart)");
        return;
    }
    x->out->removed++;
    if (x->dry)
        return;
    consumer_route_remove(bridge_cons(x->b, i), i);
    r->retired = 1;
    memset(&s, 0, sizeof(s));
    if (x->b->eng)
        eng_route_stats(x->b->eng, (uint16_t)i, &s);
    log_info(x->origin, "route removed: no longer consumed; what it holds is published when due",
             "route=%s held=%" PRIu64 " ingress_queue=\"%s\"", r->name, s.held, r->ingress_queue);
}

/* ---- the whole configuration ------------------------------------------------------ */

static void note_other(void *arg, const char *what, const char *path)
{
    struct apply *x = arg;

    if (!strncmp(path, "routes[", 7) || !strncmp(path, "route_templates", 15) ||
        !strcmp(path, "log.level"))
        return; /* routes are matched here; templates live in their routes; log.level below */
    /* a live key (shutdown_timeout_ms; limits.max_held, which the held gate weighs at the
       next turn) is written in place */
    const struct config_key *k = config_key_by_path(path);
    if (k && (k->flags & CONFIG_KEY_LIVE)) {
        if (!x->dry)
            config_key_copy(k, x->now, x->next);
        applied(x, path);
        return;
    }
    pend(x, path, what, "read at start only");
}

static void run(struct apply *x)
{
    struct config *now = x->now, *next = x->next;
    int nnow = now->nroutes; /* routes added below are not looked at for removal */

    memset(x->out, 0, sizeof(*x->out));
    if (!x->only) {
        config_diff(now, next, note_other, x);
        if (next->log_level != now->log_level) {
            if (!x->dry) {
                now->log_level = next->log_level;
                log_set_level((enum log_level)next->log_level);
            }
            applied(x, "log.level");
        }
    }
    for (int j = 0; j < next->nroutes && !x->b->exit_code; j++) {
        struct config_route *n = &next->routes[j];
        int i;

        if (x->only && strcmp(n->name, x->only))
            continue;
        i = find_live(now, n->name);
        if (i < 0)
            route_added(x, n);
        else if (!config_route_same(&now->routes[i], n))
            route_changed(x, i, n);
    }
    for (int i = 0; i < nnow && !x->b->exit_code; i++) {
        const struct config_route *r = &now->routes[i];
        if (r->retired || (x->only && strcmp(r->name, x->only)))
            continue;
        if (config_route_index(next, r->name, strlen(r->name)) < 0)
            route_removed(x, i);
    }
}

void bridge_config_apply(struct bridge *b, struct config *next, const char *origin,
                         const char *only, struct bridge_apply *out)
{
    struct apply x = {b, b->reload.cfg, next, origin, only, 0, out};

    run(&x);
}

int bridge_config_pending(struct bridge *b, struct config *next, const char *only,
                          char *keys, size_t len)
{
    struct bridge_apply out;
    struct apply x = {b, b->reload.cfg, next, "api", only, 1, &out};

    run(&x);
    if (keys && len)
        snprintf(keys, len, "%s", out.pending_keys);
    return out.pending;
}

int bridge_routes_busy(struct bridge *b, char *why, size_t len)
{
    const char *w = !b->reload.cfg ? "the daemon was started without a configuration file"
                    : !b->eng       ? "recovering the WAL: routes can change once it is done"
                    : b->drain.active ? "draining"
                    : b->stopping   ? "stopping"
                    : b->exit_code  ? "stopping after an error"
                                    : NULL;

    if (w && why && len)
        snprintf(why, len, "%s", w);
    return w != NULL;
}
