/*
 * bridge_reload.c -- SIGHUP: read the configuration file again.
 *
 * The reflex of every operator, `kill -HUP`, and `systemctl reload` (the
 * unit's ExecReload) send SIGHUP. Its default action ends a process at
 * once, without a log line or a clean stop; main() ignores it until the
 * loop runs, and from then on this file handles it.
 *
 * A reload reads the file the daemon was started with (`-c FILE`), and
 * the routes file the HTTP API keeps (routes_file), and checks them
 * exactly as a start would (config_load_all). A file that does not load
 * changes nothing: the error is logged, with the key path, and the daemon
 * goes on with what it runs. A configuration that loads is made the
 * running one by bridge_config_apply() (bridge_routes.c: routes added,
 * removed and changed, and what waits for a restart); in short:
 *
 *   applied    log.level, shutdown_timeout_ms, limits.max_held; routes added (they start
 *              consuming), removed (they stop consuming and publish what
 *              they hold when due) and changed: their target, limits,
 *              policies and retry object written in place, their ingress
 *              side consumed again.
 *   waits      a stream ingress added or changed, share_keys,
 *              declare_target, target_type, a route's vhost,
 *              delayed_exchanges switched (every key of that route), and every
 *              broker, wal, http and instance key: logged by key path
 *              and counted in /stats reload.pending_changes and
 *              delay_bridge_config_pending_changes until a restart.
 *
 * The running configuration is written only on the loop thread (here and
 * by the route API);
 * the other threads (the log's recovery, replication) read route names
 * and the wal section, which no reload writes. Held messages, keys,
 * consuming and publishing never pause for a reload.
 */
#include "bridge_int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

/* The routes file's text, or NULL when there is none (or it cannot be read: logged). */
char *bridge_read_store(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *t = NULL;
    size_t n = 0, cap = 0, r;

    if (!f) {
        if (errno != ENOENT && errno != ENOTDIR)
            log_warn("routes", "cannot read the routes file", "file=\"%s\" error=\"%s\"",
                     path, strerror(errno));
        return NULL;
    }
    do {
        if (n + 4097 > cap) {
            cap = cap ? 2 * cap : 8192;
            t = realloc(t, cap);
            if (!t) {
                fclose(f);
                return NULL;
            }
        }
        r = fread(t + n, 1, cap - n - 1, f);
        n += r;
    } while (r > 0);
    t[n] = '\0';
    fclose(f);
    return t;
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct bridge *b = w->data;
    struct bridge_apply out;
    struct config c;
    char err[1024], why[256], *text = NULL;

    (void)loop;
    (void)revents;
    b->reload.count++;
    b->reload.last_ms = clock_now_ms();
    if (!b->reload.path || !b->reload.cfg) {
        log_warn("reload", "SIGHUP: no configuration file to read again; nothing changed", NULL);
        return;
    }
    if (!b->eng && !b->stopping) { /* recovering: the engine learns routes once it is done */
        b->reload.deferred = 1;
        log_info("reload", "SIGHUP while recovering: the file is read once recovery is done",
                 NULL);
        return;
    }
    if (bridge_routes_busy(b, why, sizeof(why))) {
        log_warn("reload", "SIGHUP ignored", "why=\"%s\"", why);
        return;
    }
    if (config_load_all(&c, b->reload.path, &text, err, sizeof(err)) < 0) {
        b->reload.refused++;
        snprintf(b->reload.error, sizeof(b->reload.error), "%.500s", err);
        log_error("reload", "the configuration file was not accepted: nothing changed",
                  "file=\"%s\" error=\"%s\"", b->reload.path, err);
        return;
    }
    b->reload.error[0] = '\0';
    bridge_config_apply(b, &c, "reload", NULL, &out);
    b->reload.pending = out.pending;
    free(b->reload.text);
    b->reload.text = text;
    free(b->reload.store);
    b->reload.store = bridge_read_store(c.routes_file);
    log_info("reload", out.pending ? "configuration read; some changes wait for a restart"
                                   : "configuration read; nothing waits for a restart",
             "file=\"%s\" applied=%d routes_added=%d routes_removed=%d pending_changes=%d",
             b->reload.path, out.applied, out.added, out.removed, out.pending);
    config_free(&c);
}

/*
 * --watch-config: the file is looked at every few seconds (libev's ev_stat,
 * which compares stat() results; stat follows symlinks, so a Kubernetes
 * ConfigMap volume, updated by swapping its ..data link, counts as a
 * change) and a change is read as a SIGHUP would. An editor's half-written
 * save does not load and changes nothing; the next save is read again.
 */
static void on_file(struct ev_loop *loop, ev_stat *w, int revents)
{
    struct bridge *b = w->data;

    (void)revents;
    if (!w->attr.st_nlink) /* gone for a moment: a rename in progress */
        return;
    log_info("reload", "the configuration file changed: reading it", "file=\"%s\"",
             b->reload.path);
    on_hup(loop, &b->sighup, 0);
}

void bridge_watch_config(struct bridge *b, double interval_s)
{
    if (!b->reload.path)
        return;
    ev_stat_init(&b->watch, on_file, b->reload.path, interval_s);
    b->watch.data = b;
    ev_stat_start(b->loop, &b->watch);
    log_info("reload", "watching the configuration file", "file=\"%s\" interval_s=%.1f",
             b->reload.path, interval_s);
}

void bridge_reload_init(struct bridge *b)
{
    ev_signal_init(&b->sighup, on_hup, SIGHUP);
    b->sighup.data = b;
    ev_signal_start(b->loop, &b->sighup);
}

void bridge_reload_recovered(struct bridge *b)
{
    if (b->reload.deferred) {
        b->reload.deferred = 0;
        on_hup(b->loop, &b->sighup, 0);
    }
}

void bridge_set_reload(struct bridge *b, const char *path, struct config *cfg, char *text)
{
    b->reload.path = path;
    b->reload.cfg = cfg;
    free(b->reload.text);
    b->reload.text = text;
    free(b->reload.store);
    b->reload.store = bridge_read_store(cfg->routes_file);
    if (!b->reload.store && access(cfg->routes_file, F_OK) == 0) {
        /* unreadable (logged): a PUT would write it anew, without the routes it holds */
        log_error("routes", "the route API refuses changes until a restart reads the routes "
                  "file", "file=\"%s\"", cfg->routes_file);
        free(b->reload.text);
        b->reload.text = NULL;
    }
}
