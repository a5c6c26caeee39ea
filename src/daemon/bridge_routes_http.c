/*
 * bridge_routes_http.c -- the HTTP route API: GET /routes, GET, PUT and
 * DELETE /routes/NAME (api.h), and the routes file it keeps.
 *
 * Two files make the routes: the -c file, the operator's, which only a
 * person edits (and SIGHUP reads again), and the routes file (config.h
 * routes_file, WAL_DIR/routes.json by default), which only this API
 * writes. A route of the -c file is never changed here (409: edit the file
 * and reload); a route put here lives in the routes file and survives a
 * restart, because the start reads both (config_load_all).
 *
 * A PUT or DELETE is all or nothing, and stores only what runs at once:
 *
 *   1  refused early      started without -c, or bridge_routes_busy
 *                         (recovering, draining, stopping): 503; a route
 *                         of the -c file: 409
 *   2  the new text       config_store_put / config_store_delete over the
 *                         routes file's text as last written (b->reload.store)
 *   3  the candidate      the -c file's text as last loaded (b->reload.text,
 *                         never the file on disk: an edit not yet reloaded
 *                         must not slip in through the API), then the new
 *                         routes file's routes (config_add_routes): any
 *                         error is 400 with its key path, nothing changed
 *   4  the dry run        bridge_config_pending: a change that would wait
 *                         for a restart (a route's vhost, say) is 409 with
 *                         its key paths, nothing stored
 *   5  the file           NAME.tmp written, fsync'ed, renamed over the
 *                         routes file, the directory fsync'ed
 *                         (wal_dir_replace_file); a failure is 500 and
 *                         nothing is applied
 *   6  applied            bridge_config_apply (origin "api"); the answer
 *                         shows the route as it now runs
 *
 * Step 5 before 6: a crash between them leaves the change stored and not
 * yet run, and the next start runs it; the other order could run a route
 * that a crash then forgets, with messages held for it. The file is
 * written on the loop (one small file, one fsync): the API is an
 * operator's tool, not a path messages take.
 *
 * The JSON of a route is api_routes.c's (status floor): what GET shows is
 * what PUT takes back.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/log.h"
#include "delay-bridge/api.h"
#include "delay-bridge/wal.h"

#define ROUTES_FILE_DEFAULT "routes.json" /* in wal.dir, when routes_file is "" */

static int fail(struct json_object *out, int status, const char *why)
{
    json_object_object_add(out, "error", json_object_new_string(why));
    return status;
}

/* The routes file of c: routes_file, or WAL_DIR/routes.json. */
static void store_path(const struct config *c, char *out, size_t n)
{
    if (c->routes_file[0])
        snprintf(out, n, "%s", c->routes_file);
    else
        snprintf(out, n, "%s/%s", c->wal_dir, ROUTES_FILE_DEFAULT);
}

/* path split for wal_dir.c's small-file calls: its directory into dir, its name returned. */
static const char *split(const char *path, char *dir, size_t n)
{
    const char *slash = strrchr(path, '/');

    if (!slash) {
        snprintf(dir, n, ".");
        return path;
    }
    snprintf(dir, n, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    return slash + 1;
}

static int64_t held(const struct bridge *b, int i)
{
    struct eng_route_stats ers;

    if (!b->eng)
        return -1; /* recovering: not known yet */
    eng_route_stats(b->eng, (uint16_t)i, &ers);
    return (int64_t)ers.held;
}

static struct json_object *route_json(const struct bridge *b, int i)
{
    const struct config_route *r = &b->cfg->routes[i];

    return api_route_json(r, config_route_vhost(b->cfg, r), held(b, i));
}

/* Move the keys of o (taken over) into out. */
static void fill(struct json_object *out, struct json_object *o)
{
    json_object_object_foreach(o, k, v) json_object_object_add(out, k, json_object_get(v));
    json_object_put(o);
}

static int routes_list(struct bridge *b, struct json_object *out)
{
    struct json_object *a = json_object_new_array();

    for (int i = 0; i < b->cfg->nroutes; i++)
        json_object_array_add(a, route_json(b, i));
    json_object_object_add(out, "routes", a);
    return 200;
}

static int route_get(struct bridge *b, const char *name, struct json_object *out)
{
    int i = bridge_route_index((void *)b->cfg, name, strlen(name));

    if (i < 0)
        return fail(out, 404, "no such route");
    fill(out, route_json(b, i));
    return 200;
}

/*
 * Step 1 of a change: 0 if name may change now, else the status, with the
 * reason in out. *idx: the running route called name, or -1.
 */
static int may_change(struct bridge *b, const char *name, int *idx, struct json_object *out)
{
    char why[512];

    *idx = bridge_route_index((void *)b->cfg, name, strlen(name));
    if (!b->reload.text || !b->reload.path) /* bridge_set_reload: none, or unreadable */
        return fail(out, 503, "the daemon was started without -c, or could not read its "
                    "routes file at start (see its log)");
    if (bridge_routes_busy(b, why, sizeof why))
        return fail(out, 503, why);
    if (*idx >= 0 && !b->cfg->routes[*idx].retired &&
        b->cfg->routes[*idx].source == CONFIG_SOURCE_FILE) {
        snprintf(why, sizeof why, "route %s is defined in the -c file; edit the file and reload",
                 name);
        return fail(out, 409, why);
    }
    return 0;
}

/*
 * Steps 3 to 5: the candidate configuration with store as the routes file
 * into *c, checked, dry-run and stored. 0 (the caller applies c and frees
 * it), or the status with the reason in out (c then freed).
 */
static int stage(struct bridge *b, const char *name, const char *store, struct config *c,
                 struct json_object *out)
{
    char why[1024], keys[512], path[4200], dir[4200];
    int shadowed = 0, i, r;

    if (config_parse(c, b->reload.text, b->reload.path, why, sizeof why) < 0)
        return fail(out, 500, why); /* it loaded at start or at the last reload */
    store_path(c, path, sizeof path);
    if (config_add_routes(c, store, path, &shadowed, why, sizeof why) < 0) {
        config_free(c);
        return fail(out, 400, why);
    }
    i = config_route_index(c, name, strlen(name));
    if (i >= 0 && c->routes[i].source == CONFIG_SOURCE_FILE) { /* shadowed by the file */
        config_free(c);
        snprintf(why, sizeof why, "route %s is defined in the -c file; edit the file and reload",
                 name);
        return fail(out, 409, why);
    }
    if (bridge_config_pending(b, c, name, keys, sizeof keys) > 0) {
        config_free(c);
        snprintf(why, sizeof why, "the change would wait for a restart (%s); the API stores "
                 "only what it can run now: change these keys in a new route, or edit the "
                 "routes file and restart", keys);
        json_object_object_add(out, "pending", json_object_new_string(keys));
        return fail(out, 409, why);
    }
    const char *file = split(path, dir, sizeof dir);
    if ((r = wal_dir_replace_file(dir, file, store, strlen(store))) < 0) {
        config_free(c);
        log_error("routes", "cannot write the routes file; nothing changed",
                  "file=\"%s\" err=\"%s\"", path, strerror(-r));
        snprintf(why, sizeof why, "cannot write %.900s: %s; nothing changed", path, strerror(-r));
        return fail(out, 500, why);
    }
    return 0;
}

/* Step 6: c applied, store (taken over) the routes file's text from now on. */
static void apply(struct bridge *b, const char *name, const char *what, char *store,
                  struct config *c)
{
    struct bridge_apply ao;

    memset(&ao, 0, sizeof ao);
    bridge_config_apply(b, c, "api", name, &ao);
    config_free(c);
    free(b->reload.store);
    b->reload.store = store;
    b->reload.api_changes++;
    log_info("routes", "a route changed through the HTTP API", "route=%s change=%s added=%d "
             "removed=%d applied=%d", name, what, ao.added, ao.removed, ao.applied);
}

static int route_put(struct bridge *b, const char *name, const char *body, size_t len,
                     struct json_object *out)
{
    static const struct config_route none; /* vhost "": the broker URI's */
    char why[1024];
    char *entry = NULL, *store = NULL;
    struct config c;
    int i, existed, status;

    if ((status = may_change(b, name, &i, out)))
        return status;
    existed = i >= 0 && !b->cfg->routes[i].retired;
    entry = api_route_body(body, len, config_route_vhost(b->cfg, &none), why, sizeof why);
    if (entry)
        store = config_store_put(b->reload.store, name, entry, why, sizeof why);
    free(entry);
    if (!store)
        return fail(out, 400, why);
    if ((status = stage(b, name, store, &c, out))) {
        free(store);
        return status;
    }
    /* the route as the candidate has it, in case apply moves it out of c */
    struct json_object *shown = NULL;
    int ci = config_route_index(&c, name, strlen(name));
    if (ci >= 0)
        shown = api_route_json(&c.routes[ci], config_route_vhost(&c, &c.routes[ci]), 0);
    apply(b, name, existed ? "replaced" : "added", store, &c);
    i = bridge_route_index((void *)b->cfg, name, strlen(name));
    if (i >= 0 && !b->cfg->routes[i].retired) {
        json_object_put(shown);
        shown = route_json(b, i);
    }
    if (shown)
        fill(out, shown);
    return existed ? 200 : 201;
}

static int route_delete(struct bridge *b, const char *name, struct json_object *out)
{
    char why[1024];
    char *store;
    struct config c;
    int i, found = 0, status;
    int64_t n;

    if ((status = may_change(b, name, &i, out)))
        return status;
    if (!(store = config_store_delete(b->reload.store, name, &found, why, sizeof why)))
        return fail(out, 500, why); /* the routes file as written does not read back */
    if (!found) {
        free(store);
        return fail(out, 404, "no route of this name was put through the API");
    }
    if ((status = stage(b, name, store, &c, out))) {
        free(store);
        return status;
    }
    if (i >= 0 && b->cfg->routes[i].retired)
        i = -1; /* in the routes file, never running: nothing of it to retire */
    n = i >= 0 ? held(b, i) : 0;
    apply(b, name, "removed", store, &c);
    json_object_object_add(out, "removed", json_object_new_string(name));
    json_object_object_add(out, "retired",
                           json_object_new_boolean(i >= 0 && b->cfg->routes[i].retired));
    json_object_object_add(out, "held", json_object_new_int64(n > 0 ? n : 0));
    return 200;
}

int bridge_routes_http(void *arg, const char *method, const char *name, const char *body,
                       size_t len, struct json_object *out)
{
    struct bridge *b = arg;

    if (!name)
        return routes_list(b, out);
    if (!strcmp(method, "PUT"))
        return route_put(b, name, body, len, out);
    if (!strcmp(method, "DELETE"))
        return route_delete(b, name, out);
    return route_get(b, name, out);
}
