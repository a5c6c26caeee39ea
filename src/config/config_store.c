/*
 * config_store.c -- the routes file's text, edited: a route put or deleted.
 *
 * The routes file (routes_file, default WAL_DIR/routes.json) holds the
 * routes put through the HTTP API, so that they outlive the process:
 *
 *   {
 *     "version": 1,
 *     "routes": [
 *       {
 *         "name": "orders",
 *         "template": "delayed"
 *       }
 *     ]
 *   }
 *
 * config_store_put() and config_store_delete() are text to text: the
 * caller holds the file's text, asks for the new one, checks it as a
 * whole (config_add_routes over the -c file's configuration) and writes
 * it. So these two check only what they need to edit -- the text is a JSON
 * object whose "routes" is an array, a put's route is an object whose
 * "name", when given, is the one it is put as -- and never a route's keys:
 * one reader (config_routes.c) says what a route may hold, with key paths.
 *
 * Routes keep their order: a put replaces the entry of that name where it
 * stands, or appends; a delete removes it. The entry always starts with
 * "name". Every other value is kept as json-c read it, which keeps a
 * number's text but clamps an integer beyond 64 bits (a value no route key
 * accepts anyway). The output is json-c's pretty print, two spaces, "/"
 * not escaped (a vhost of "/" reads as written), and a final newline.
 */
#include "config_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

/* The one line of a failed edit into err (which may be NULL). */
static void say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* text as a JSON object, or NULL with "<what>: ..." in err. */
static json_object *parse_object(const char *what, const char *text, char *err, size_t errlen)
{
    const char *why;
    int line, col;
    json_object *o = cfg_json_parse(text, &why, &line, &col);
    char got[96];

    if (!o) {
        if (!why)
            say(err, errlen, "%s: empty; expected a JSON object", what);
        else
            say(err, errlen, "%s: invalid JSON at %d:%d: %s", what, line, col, why);
        return NULL;
    }
    if (json_object_get_type(o) != json_type_object) {
        say(err, errlen, "%s: expected a JSON object, got %s", what,
                 cfg_show(o, got, sizeof got));
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* The routes file's text (NULL or blank: none yet) as an object, and its "routes" array. */
static json_object *store_open(const char *store, json_object **routes, char *err, size_t errlen)
{
    json_object *root;
    char got[96];

    if (!store || strspn(store, " \t\r\n") == strlen(store)) {
        root = json_object_new_object();
        json_object_object_add(root, "version", json_object_new_int(1));
    } else if (!(root = parse_object("routes file", store, err, errlen))) {
        return NULL;
    }
    if (!json_object_object_get_ex(root, "routes", routes)) {
        *routes = json_object_new_array();
        json_object_object_add(root, "routes", *routes);
    } else if (json_object_get_type(*routes) != json_type_array) {
        say(err, errlen, "routes file: routes: expected an array, got %s",
                 cfg_show(*routes, got, sizeof got));
        json_object_put(root);
        return NULL;
    }
    return root;
}

/* The index in routes of the first object whose "name" is name, or -1. */
static int entry_index(json_object *routes, const char *name)
{
    for (size_t i = 0; i < json_object_array_length(routes); i++) {
        json_object *n;
        if (json_object_object_get_ex(json_object_array_get_idx(routes, i), "name", &n) &&
            json_object_get_type(n) == json_type_string && strcmp(json_object_get_string(n), name) == 0)
            return (int)i;
    }
    return -1;
}

/* root as the file's text (malloc'd); root released. */
static char *store_text(json_object *root)
{
    const char *s = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
                                                             JSON_C_TO_STRING_SPACED |
                                                             JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(s);
    char *out = xmalloc(n + 2);

    memcpy(out, s, n);
    memcpy(out + n, "\n", 2);
    json_object_put(root);
    return out;
}

char *config_store_put(const char *store, const char *name, const char *route_json, char *err,
                       size_t errlen)
{
    json_object *route, *root, *routes, *n;
    char q1[96], q2[96];

    if (err && errlen)
        err[0] = '\0';
    if (!(route = parse_object("route", route_json ? route_json : "", err, errlen)))
        return NULL;
    if (json_object_object_get_ex(route, "name", &n) &&
        (json_object_get_type(n) != json_type_string || strcmp(json_object_get_string(n), name))) {
        say(err, errlen, "route: name: %s differs from the name it is put as, %s",
                 cfg_show(n, q1, sizeof q1), cfg_quote(name, strlen(name), q2, sizeof q2));
        json_object_put(route);
        return NULL;
    }
    if (!(root = store_open(store, &routes, err, errlen))) {
        json_object_put(route);
        return NULL;
    }
    json_object *entry = json_object_new_object();
    json_object_object_add(entry, "name", json_object_new_string(name));
    json_object_object_foreach(route, key, v)
        if (strcmp(key, "name") != 0)
            json_object_object_add(entry, key, json_object_get(v));
    json_object_put(route);
    int i = entry_index(routes, name);
    if (i >= 0)
        json_object_array_put_idx(routes, (size_t)i, entry);
    else
        json_object_array_add(routes, entry);
    return store_text(root);
}

char *config_store_delete(const char *store, const char *name, int *found, char *err,
                          size_t errlen)
{
    json_object *root, *routes;
    int i;

    if (err && errlen)
        err[0] = '\0';
    *found = 0;
    if (!(root = store_open(store, &routes, err, errlen)))
        return NULL;
    while ((i = entry_index(routes, name)) >= 0) {
        json_object_array_del_idx(routes, (size_t)i, 1);
        *found = 1;
    }
    return store_text(root);
}
