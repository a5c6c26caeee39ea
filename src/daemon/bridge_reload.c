/*
 * bridge_reload.c -- SIGHUP: read the configuration file again.
 *
 * The reflex of every operator, `kill -HUP`, and `systemctl reload` (the
 * unit's ExecReload) send SIGHUP. Its default action ends a process at
 * once, without a log line or a clean stop; main() ignores it until the
 * loop runs, and from then on this file handles it.
 *
 * A reload reads the file the daemon was started with (`-c FILE`) and
 * checks it exactly as a start would (config_load). A file that does not
 * load changes nothing: the error is logged, with the key path, and the
 * daemon goes on with what it runs. A file that loads is compared with the
 * running configuration key by key (config_diff.c), and each difference
 * is either applied at once or logged as waiting for a restart:
 *
 *   applied    log.level, shutdown_timeout_ms; and of a route that stays
 *              (matched by name): target_exchange (unless declare_target),
 *              max_inflight, max_delay_ms, delay_from, invalid_delay,
 *              dead_letter_exchange, unroutable_exchange, and a retry
 *              route's whole retry object (policy, per-queue policies,
 *              reasons, parking). Each is read where it is used, for the
 *              next delivery or the next publish, so writing it in the
 *              running configuration is applying it: held messages go to
 *              the new target when they fall due, the next delivery is
 *              judged by the new policy, a retry already waiting keeps the
 *              due time it was given.
 *   waits      everything else: a route added or removed, a route's
 *              ingress (exchange, queue, type, stream retention, single
 *              active consumer, share_keys), prefetch, declare_target and
 *              target_type, a route becoming or ceasing to be a retry
 *              route, and every broker, wal, http and instance key. Each is
 *              logged by key path ("routes[orders].prefetch") and counted
 *              in /stats reload.pending_changes and
 *              delay_bridge_config_pending_changes until a restart.
 *
 * The running configuration is written only here, on the loop thread;
 * the other threads (the log's recovery, replication) read route names
 * and the wal section, which no reload writes. Held messages, keys,
 * consuming and publishing never pause for a reload.
 */
#include "bridge_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

struct reload {
    struct bridge *b;
    struct config *now; /* the running configuration, written in place */
    struct config *file;
    int pending, applied;
};

static struct config_route *route_named(struct config *c, const char *name)
{
    int i = config_route_index(c, name, strlen(name));

    return i < 0 ? NULL : &c->routes[i];
}

/* Key key of route r can be written in the running configuration now. */
static int live(const struct config_route *r, const struct config_route *n, const char *key)
{
    static const char *const keys[] = {"max_inflight", "max_delay_ms", "delay_from",
                                       "invalid_delay", "dead_letter_exchange",
                                       "unroutable_exchange", NULL};

    for (int i = 0; keys[i]; i++)
        if (!strcmp(key, keys[i]))
            return 1;
    if (!strcmp(key, "target_exchange"))
        return !r->declare_target && !n->declare_target && !r->retry && !n->retry;
    if (!strcmp(key, "retry"))
        return r->retry && n->retry; /* a policy changed, not the kind of route */
    return 0;
}

static void apply(struct config_route *r, struct config_route *n, const char *key)
{
    if (!strcmp(key, "target_exchange"))
        memcpy(r->target_exchange, n->target_exchange, sizeof(r->target_exchange));
    else if (!strcmp(key, "max_inflight"))
        r->max_inflight = n->max_inflight;
    else if (!strcmp(key, "max_delay_ms"))
        r->max_delay_ms = n->max_delay_ms;
    else if (!strcmp(key, "delay_from"))
        r->delay_from = n->delay_from;
    else if (!strcmp(key, "invalid_delay"))
        r->invalid_delay = n->invalid_delay;
    else if (!strcmp(key, "dead_letter_exchange"))
        memcpy(r->dead_letter_exchange, n->dead_letter_exchange, sizeof(r->dead_letter_exchange));
    else if (!strcmp(key, "unroutable_exchange"))
        memcpy(r->unroutable_exchange, n->unroutable_exchange, sizeof(r->unroutable_exchange));
    else if (!strcmp(key, "retry")) { /* swapped: the file's config frees the old one */
        struct config_retry *t = r->retry;
        r->retry = n->retry;
        n->retry = t;
    }
}

struct route_keys {
    const char *key[32];
    int n;
};

static void collect(void *arg, const char *key)
{
    struct route_keys *k = arg;
    if (k->n < 32)
        k->key[k->n++] = key;
}

/* A route in both: each changed key applied or left waiting. */
static void route_changed(struct reload *x, const char *name)
{
    struct config_route *r = route_named(x->now, name), *n = route_named(x->file, name);
    struct route_keys k = {{0}, 0};

    config_route_keys_diff(r, n, collect, &k);
    for (int i = 0; i < k.n; i++) {
        if (live(r, n, k.key[i])) {
            apply(r, n, k.key[i]);
            x->applied++;
            log_info("reload", "applied", "key=routes[%s].%s file=\"%s\"", name, k.key[i],
                     x->b->reload.path);
        } else {
            x->pending++;
            log_warn("reload", "a change that takes effect at the next start: not applied now",
                     "key=routes[%s].%s change=changed file=\"%s\"", name, k.key[i],
                     x->b->reload.path);
        }
    }
}

static void note(void *arg, const char *what, const char *path)
{
    struct reload *x = arg;
    char name[CONFIG_NAME_MAX + 1];

    if (!strcmp(path, "log.level"))
        return; /* applied by the caller */
    if (!strcmp(path, "shutdown_timeout_ms")) {
        x->now->shutdown_timeout_ms = x->file->shutdown_timeout_ms;
        x->applied++;
        log_info("reload", "applied", "key=shutdown_timeout_ms file=\"%s\"", x->b->reload.path);
        return;
    }
    if (!strcmp(what, "changed") && !strncmp(path, "routes[", 7) &&
        sscanf(path + 7, "%255[^]]", name) == 1) {
        route_changed(x, name);
        return;
    }
    x->pending++;
    log_warn("reload", "a change that takes effect at the next start: not applied now",
             "key=%s change=%s file=\"%s\"", path, what, x->b->reload.path);
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct bridge *b = w->data;
    struct config c;
    struct reload x = {b, b->reload.cfg, &c, 0, 0};
    char err[1024];

    (void)loop;
    (void)revents;
    b->reload.count++;
    b->reload.last_ms = clock_now_ms();
    if (!b->reload.path || !b->reload.cfg) {
        log_warn("reload", "SIGHUP: no configuration file to read again; nothing changed", NULL);
        return;
    }
    if (config_load(&c, b->reload.path, err, sizeof(err)) < 0) {
        b->reload.refused++;
        snprintf(b->reload.error, sizeof(b->reload.error), "%.500s", err);
        log_error("reload", "the configuration file was not accepted: nothing changed",
                  "file=\"%s\" error=\"%s\"", b->reload.path, err);
        return;
    }
    b->reload.error[0] = '\0';
    config_diff(b->reload.cfg, &c, note, &x);
    if (c.log_level != b->reload.cfg->log_level) {
        b->reload.cfg->log_level = c.log_level;
        log_set_level((enum log_level)c.log_level);
        x.applied++;
        log_info("reload", "applied", "key=log.level file=\"%s\"", b->reload.path);
    }
    b->reload.pending = x.pending;
    log_info("reload", x.pending ? "configuration read; some changes wait for a restart"
                                 : "configuration read; nothing waits for a restart",
             "file=\"%s\" applied=%d pending_changes=%d", b->reload.path, x.applied, x.pending);
    config_free(&c);
}

void bridge_reload_init(struct bridge *b)
{
    ev_signal_init(&b->sighup, on_hup, SIGHUP);
    b->sighup.data = b;
    ev_signal_start(b->loop, &b->sighup);
}

void bridge_set_reload(struct bridge *b, const char *path, struct config *cfg)
{
    b->reload.path = path;
    b->reload.cfg = cfg;
}
