/*
 * bridge_routes_stub.c -- STUB - drop when merging.
 *
 * Stand-ins for functions other helpers of issue 31 write, so that the
 * route API (bridge_routes_http.c) builds and runs in the "api" branch:
 *
 *   config floor ("cfg"): config_add_routes, config_load_all (over the
 *       weak one of bridge_conns.c: this one gives the text and reads the
 *       routes file), config_store_put, config_store_delete -- just
 *       enough to read and write a routes file (no templates, no checks
 *       between routes, no "vhost" or "template" keys checked, key paths
 *       "routes[0].KEY").
 *
 * Nothing here is meant to last: the real ones replace this whole file.
 */
#include "bridge_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "delay-bridge/strbuf.h"

static json_object *store_root(const char *store, char *err, size_t errlen)
{
    json_object *root;

    if (!store || !*store) {
        root = json_object_new_object();
        json_object_object_add(root, "version", json_object_new_int(1));
        json_object_object_add(root, "routes", json_object_new_array());
        return root;
    }
    root = json_tokener_parse(store);
    if (!root || !json_object_object_get_ex(root, "routes", NULL)) {
        snprintf(err, errlen, "routes file: invalid");
        json_object_put(root);
        return NULL;
    }
    return root;
}

static char *store_text(json_object *root)
{
    char *t = xstrdup(json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return t;
}

static int store_find(json_object *routes, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(routes); i++) {
        json_object *n;
        if (json_object_object_get_ex(json_object_array_get_idx(routes, i), "name", &n) &&
            !strcmp(json_object_get_string(n), name))
            return (int)i;
    }
    return -1;
}

char *config_store_put(const char *store, const char *name, const char *route_json, char *err,
                       size_t errlen)
{
    json_object *root = store_root(store, err, errlen), *routes, *r, *n, *o;

    if (!root)
        return NULL;
    r = json_tokener_parse(route_json);
    if (!r || json_object_get_type(r) != json_type_object) {
        snprintf(err, errlen, "route: expected a JSON object");
        json_object_put(r);
        json_object_put(root);
        return NULL;
    }
    if (json_object_object_get_ex(r, "name", &n) &&
        (json_object_get_type(n) != json_type_string || strcmp(json_object_get_string(n), name))) {
        snprintf(err, errlen, "name: must be %s, the name in the path", name);
        json_object_put(r);
        json_object_put(root);
        return NULL;
    }
    o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_foreach(r, k, v) if (strcmp(k, "name"))
        json_object_object_add(o, k, json_object_get(v));
    json_object_put(r);
    json_object_object_get_ex(root, "routes", &routes);
    int i = store_find(routes, name);
    if (i >= 0)
        json_object_array_put_idx(routes, (size_t)i, o);
    else
        json_object_array_add(routes, o);
    return store_text(root);
}

char *config_store_delete(const char *store, const char *name, int *found, char *err,
                          size_t errlen)
{
    json_object *root = store_root(store, err, errlen), *routes;

    *found = 0;
    if (!root)
        return NULL;
    json_object_object_get_ex(root, "routes", &routes);
    int i = store_find(routes, name);
    if (i >= 0) {
        *found = 1;
        json_object_array_del_idx(routes, (size_t)i, 1);
    }
    return store_text(root);
}

int config_add_routes(struct config *c, const char *json, const char *name, int *shadowed,
                      char *err, size_t errlen)
{
    json_object *root = store_root(json, err, errlen), *routes;
    struct config_route *all;
    int n = c->nroutes, rc = -1;

    *shadowed = 0;
    if (!root)
        return -1;
    json_object_object_get_ex(root, "routes", &routes);
    all = xmalloc(CONFIG_MAX_ROUTES * sizeof *all);
    memcpy(all, c->routes, (size_t)n * sizeof *all);
    for (size_t i = 0; i < json_object_array_length(routes); i++) {
        json_object *o = json_object_get(json_object_array_get_idx(routes, i)), *v;
        char vhost[CONFIG_NAME_MAX + 1] = "", tmpl[CONFIG_NAME_MAX + 1] = "";
        struct config t;
        if (json_object_object_get_ex(o, "vhost", &v))
            snprintf(vhost, sizeof vhost, "%s", json_object_get_string(v));
        if (json_object_object_get_ex(o, "template", &v))
            snprintf(tmpl, sizeof tmpl, "%s", json_object_get_string(v));
        json_object_object_del(o, "vhost");
        json_object_object_del(o, "template");
        json_object *doc = json_tokener_parse("{\"broker\": {\"uri\": \"amqp://localhost\"}, "
                                              "\"wal\": {\"dir\": \"/tmp\"}}");
        json_object *arr = json_object_new_array();
        json_object_array_add(arr, o);
        json_object_object_add(doc, "routes", arr);
        int r = config_parse(&t, json_object_to_json_string(doc), name, err, errlen);
        json_object_put(doc);
        if (r < 0)
            goto cleanup;
        if (config_route_index(c, t.routes[0].name, strlen(t.routes[0].name)) >= 0) {
            (*shadowed)++;
            config_free(&t);
            continue;
        }
        all[n] = t.routes[0];
        t.routes[0].retry = NULL;
        config_free(&t);
        all[n].source = CONFIG_SOURCE_STORE;
        memcpy(all[n].vhost, vhost, sizeof vhost);
        memcpy(all[n].template_name, tmpl, sizeof tmpl);
        n++;
    }
    free(c->routes);
    c->routes = all;
    all = NULL;
    c->nroutes = n;
    rc = 0;
cleanup:
    free(all); /* the stub leaks the retry objects of a failed file */
    json_object_put(root);
    return rc;
}

int config_load_all(struct config *c, const char *path, char **text, char *err, size_t errlen)
{
    char file[4200], *store = NULL;
    int shadowed;
    FILE *f;

    if (config_load(c, path, err, errlen) < 0)
        return -1;
    c->routes = xrealloc(c->routes, CONFIG_MAX_ROUTES * sizeof *c->routes); /* room to grow */
    if (text) {
        struct strbuf b = STRBUF_INIT;
        char buf[4096];
        size_t k;
        f = fopen(path, "rb");
        while (f && (k = fread(buf, 1, sizeof buf, f)) > 0)
            strbuf_append(&b, buf, k);
        if (f)
            fclose(f);
        strbuf_puts(&b, "");
        *text = strbuf_detach(&b, NULL);
    }
    if (!c->routes_file[0])
        snprintf(c->routes_file, sizeof c->routes_file, "%.4000s/routes.json", c->wal_dir);
    snprintf(file, sizeof file, "%s", c->routes_file);
    if (!(store = bridge_read_store(file)))
        return 0;
    if (config_add_routes(c, store, file, &shadowed, err, errlen) < 0) {
        free(store);
        config_free(c);
        if (text) {
            free(*text);
            *text = NULL;
        }
        return -1;
    }
    free(store);
    return 0;
}
