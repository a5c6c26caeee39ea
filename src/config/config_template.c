/*
 * config_template.c -- "route_templates": many look-alike routes from one
 * entry.
 *
 *   "route_templates": {
 *     "delayed": {
 *       "ingress_exchange": "{name}.delayed", "ingress_queue": "{name}.delayed.q",
 *       "target_exchange": "{name}", "queue_type": "quorum",
 *       "routes": ["orders", "billing"]
 *     }
 *   }
 *
 * A template is a route without its name: any key a route takes but
 * "name" (and "template": templates do not nest), plus "routes", the
 * names of the routes made from it. Each string in it -- nested ones too,
 * such as retry.parking_exchange -- may hold "{name}", replaced by the
 * route's name; any other "{" is refused here, by key path, so that a
 * typo ("{nmae}") never becomes part of a queue's name. Each instance
 * becomes a route named after it, read as if it had been written out
 * (config_routes.c); a route object may also name a template
 * ("template": "delayed") and give keys of its own, which replace the
 * template's whole: {"name": "orders", "template": "delayed"} is a route.
 * The merge is shallow: a route's "retry" replaces the template's "retry"
 * object, it is not merged key by key.
 *
 * Templates are kept as their JSON text (struct config_template), as
 * written, "routes" included: the routes file and the HTTP API name them
 * after config_parse() has returned, when no json_object of the file is
 * left, so every use parses the text again (cfg_template_json). What this
 * file checks is the template's own shape -- its keys, its placeholders,
 * its instance names; the values are checked when a route made from it is
 * read, with the template's key path for its instances.
 */
#include "config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

static const char placeholder[] = "{name}";

/* Every "{" in the strings of v (path: its key path) begins "{name}". */
static int check_placeholders(struct ctx *x, json_object *v, const char *path)
{
    char sub[CFG_PATH_MAX], q[96];

    switch (json_object_get_type(v)) {
    case json_type_string: {
        const char *s = json_object_get_string(v);
        for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{'))
            if (strncmp(p, placeholder, sizeof placeholder - 1) != 0)
                return cfg_fail(x, path, "%s: only \"{name}\" may stand in braces (replaced by "
                                "each route's name)",
                                cfg_quote(s, (size_t)json_object_get_string_len(v), q, sizeof q));
        return 0;
    }
    case json_type_object: {
        json_object_object_foreach(v, key, val) {
            snprintf(sub, sizeof sub, "%.200s.%.80s", path, key);
            if (check_placeholders(x, val, sub) < 0)
                return -1;
        }
        return 0;
    }
    case json_type_array:
        for (size_t i = 0; i < json_object_array_length(v); i++) {
            snprintf(sub, sizeof sub, "%.200s[%zu]", path, i);
            if (check_placeholders(x, json_object_array_get_idx(v, i), sub) < 0)
                return -1;
        }
        return 0;
    default:
        return 0;
    }
}

/* route_templates.T.routes: an array of route names. */
static int check_instances(struct ctx *x, json_object *t, const char *pre)
{
    json_object *a;
    char path[CFG_PATH_MAX + 32], got[96];

    if (!json_object_object_get_ex(t, "routes", &a))
        return 0;
    cfg_join(path, sizeof path, pre, "routes");
    if (json_object_get_type(a) != json_type_array)
        return cfg_fail(x, path, "expected an array of route names, got %s",
                        cfg_show(a, got, sizeof got));
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        const char *s = json_object_get_type(v) == json_type_string ? json_object_get_string(v)
                                                                     : NULL;
        snprintf(path, sizeof path, "%s.routes[%zu]", pre, i);
        if (!s || strlen(s) != (size_t)json_object_get_string_len(v) || !cfg_valid_name(s) ||
            strlen(s) > CONFIG_NAME_MAX)
            return cfg_fail(x, path, "expected a route name (1..%d letters, digits, '.', '_' or "
                            "'-'), got %s", CONFIG_NAME_MAX, cfg_show(v, got, sizeof got));
    }
    return 0;
}

int cfg_parse_templates(struct ctx *x, struct config *c, json_object *root)
{
    /* a route's keys but "name" and "template", then "routes" */
    const char *route_keys[CFG_SECT_MAX_KEYS + 1], *keys[CFG_SECT_MAX_KEYS + 2];
    int nk = 0;
    cfg_sect_keys(CONFIG_SECT_ROUTE, route_keys, CFG_SECT_MAX_KEYS + 1);
    for (const char *const *k = route_keys; *k; k++)
        if (strcmp(*k, "name") != 0 && strcmp(*k, "template") != 0)
            keys[nk++] = *k;
    keys[nk++] = "routes";
    keys[nk] = NULL;
    json_object *o;
    char pre[CFG_PATH_MAX], got[96], q[96];

    if (!json_object_object_get_ex(root, "route_templates", &o))
        return 0;
    if (json_object_get_type(o) != json_type_object)
        return cfg_fail(x, "route_templates", "expected an object of template name: template, "
                        "got %s", cfg_show(o, got, sizeof got));
    int n = json_object_object_length(o);
    if (n > CONFIG_MAX_TEMPLATES)
        return cfg_fail(x, "route_templates", "%d templates; at most %d", n, CONFIG_MAX_TEMPLATES);
    c->templates = xcalloc((size_t)(n ? n : 1), sizeof *c->templates);
    json_object_object_foreach(o, name, t) {
        if (!cfg_valid_name(name) || strlen(name) > CONFIG_NAME_MAX)
            return cfg_fail(x, "route_templates", "template name %s: expected 1..%d letters, "
                            "digits, '.', '_' or '-'",
                            cfg_quote(name, strlen(name), q, sizeof q), CONFIG_NAME_MAX);
        snprintf(pre, sizeof pre, "route_templates.%s", name);
        if (json_object_get_type(t) != json_type_object)
            return cfg_fail(x, pre, "expected an object of route keys, got %s",
                            cfg_show(t, got, sizeof got));
        if (cfg_check_keys(x, t, pre, keys) < 0 || check_instances(x, t, pre) < 0)
            return -1;
        json_object_object_foreach(t, key, v) {
            char path[CFG_PATH_MAX];
            cfg_join(path, sizeof path, pre, key);
            if (strcmp(key, "routes") != 0 && check_placeholders(x, v, path) < 0)
                return -1;
        }
        struct config_template *e = &c->templates[c->ntemplates++];
        memcpy(e->name, name, strlen(name) + 1);
        e->json = xstrdup(json_object_to_json_string_ext(t, JSON_C_TO_STRING_PLAIN |
                                                                JSON_C_TO_STRING_NOSLASHESCAPE));
    }
    return 0;
}

int cfg_template_find(const struct config *c, const char *name)
{
    for (int i = 0; i < c->ntemplates; i++)
        if (strcmp(c->templates[i].name, name) == 0)
            return i;
    return -1;
}

json_object *cfg_template_json(const struct config *c, int t)
{
    json_object *o = json_tokener_parse(c->templates[t].json);
    if (!o) { /* the text json-c wrote itself */
        fprintf(stderr, "delay-bridge: route_templates.%s: cannot read back its own text\n",
                c->templates[t].name);
        abort();
    }
    return o;
}

/* v with "{name}" replaced by name in every string (a new reference). */
static json_object *subst(json_object *v, const char *name)
{
    switch (json_object_get_type(v)) {
    case json_type_string: {
        const char *s = json_object_get_string(v), *p, *hit;
        /* with a NUL it stays as it is, for the route's reader to refuse */
        if (!strstr(s, placeholder) || strlen(s) != (size_t)json_object_get_string_len(v))
            return json_object_get(v);
        size_t nn = strlen(name), k = sizeof placeholder - 1, hits = 0;
        for (p = strstr(s, placeholder); p; p = strstr(p + k, placeholder))
            hits++;
        size_t len = strlen(s) - hits * k + hits * nn;
        char *out = xmalloc(len + 1), *o = out;
        for (p = s; (hit = strstr(p, placeholder)) != NULL; p = hit + k) {
            memcpy(o, p, (size_t)(hit - p));
            o += hit - p;
            memcpy(o, name, nn);
            o += nn;
        }
        memcpy(o, p, strlen(p) + 1);
        json_object *r = json_object_new_string_len(out, (int)len);
        free(out);
        return r;
    }
    case json_type_object: {
        json_object *r = json_object_new_object();
        json_object_object_foreach(v, key, val)
            json_object_object_add(r, key, subst(val, name));
        return r;
    }
    case json_type_array: {
        json_object *r = json_object_new_array();
        for (size_t i = 0; i < json_object_array_length(v); i++)
            json_object_array_add(r, subst(json_object_array_get_idx(v, i), name));
        return r;
    }
    default:
        return json_object_get(v);
    }
}

json_object *cfg_template_expand(json_object *t, const char *name)
{
    json_object *r = json_object_new_object();

    json_object_object_foreach(t, key, v)
        if (strcmp(key, "routes") != 0)
            json_object_object_add(r, key, subst(v, name));
    return r;
}
