/*
 * bridge_reload.c -- SIGHUP: read the configuration file again.
 *
 * The reflex of every operator, `kill -HUP`, and `systemctl reload` (the
 * unit's ExecReload) send SIGHUP. Its default action ends a process at
 * once, without a log line or a clean stop; the daemon handles it from the
 * moment it starts (bridge_new, before the log is recovered).
 *
 * A reload reads the file the daemon was started with (`-c FILE`) and
 * checks it exactly as a start would (config_load). A file that does not
 * load changes nothing: the error is logged, with the key path, and the
 * daemon goes on with what it runs. A file that loads is compared with the
 * running configuration key by key (config_diff.c):
 *
 *   log.level   applied at once;
 *   the rest    logged, one warning per key path ("routes[NAME]" added,
 *               removed or changed; "broker.uri", ...), and not applied:
 *               they take effect at the next start. /stats "reload" and
 *               delay_bridge_config_pending_changes count them, so a
 *               reload that left something waiting for a restart is seen
 *               and can be alerted on.
 *
 * Held messages, keys, consuming and publishing never pause for a reload:
 * the file is read on the loop (a small file, read once), and nothing the
 * running parts hold is touched.
 */
#include "bridge_int.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"

struct reload_note {
    struct bridge *b;
    int pending;
};

static void note(void *arg, const char *what, const char *path)
{
    struct reload_note *n = arg;

    if (!strcmp(path, "log.level"))
        return; /* applied */
    n->pending++;
    log_warn("reload", "a change that takes effect at the next start: not applied now",
             "key=%s change=%s file=\"%s\"", path, what, n->b->reload.path);
}

static void on_hup(struct ev_loop *loop, ev_signal *w, int revents)
{
    struct bridge *b = w->data;
    struct reload_note n = {b, 0};
    struct config c;
    char err[1024];

    (void)loop;
    (void)revents;
    b->reload.count++;
    b->reload.last_ms = clock_now_ms();
    if (!b->reload.path) {
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
    config_diff(b->cfg, &c, note, &n);
    if ((enum log_level)c.log_level != log_get_level()) {
        log_set_level((enum log_level)c.log_level);
        log_info("reload", "applied", "key=log.level file=\"%s\"", b->reload.path);
    }
    b->reload.pending = n.pending;
    log_info("reload", n.pending ? "configuration read; some changes wait for a restart"
                                 : "configuration read; nothing waits for a restart",
             "file=\"%s\" pending_changes=%d", b->reload.path, n.pending);
    config_free(&c);
}

void bridge_reload_init(struct bridge *b)
{
    ev_signal_init(&b->sighup, on_hup, SIGHUP);
    b->sighup.data = b;
    ev_signal_start(b->loop, &b->sighup);
}

void bridge_set_config_path(struct bridge *b, const char *path)
{
    b->reload.path = path;
}
