/*
 * config_routes.c -- the routes: each route read alone, then the rules
 * between routes.
 *
 * Routes come from three places, appended in this order to one array
 * (room for CONFIG_MAX_ROUTES, so the running configuration grows in
 * place): the file's "routes", then each route_templates entry's instances
 * (config_template.c), then the routes file's (config_add_routes, after
 * config_parse). A route object may name a template and add keys of its
 * own. Messages name a route where its author wrote it: "routes[2]" in the
 * file, "route_templates.T" for an instance's keys and
 * "route_templates.T.routes[1]" for the instance itself, "routes[NAME]" in
 * the routes file (its index when it has no usable name) -- struct
 * cfg_where, one per route while routes are read.
 *
 * A route is read in steps: delayed_exchanges (config_delayed.c, which
 * refuses what such a route cannot have), its names, every key of the
 * schema's walk (config_keys.def: type, range and default, in the table's
 * order), the stream ingress's keys, its unroutable exchange, then "retry"
 * in config_retry.c; the first error wins, so the order of the steps is
 * the order of the messages. Then the rules between one route's keys (reserved
 * names, a target that is its own ingress, what cannot be declared), and
 * last the rules between routes, which need them all read: names unique
 * across the bridge, ingress exchanges and ingress queues unique in their
 * vhost, and no loop -- a held message is
 * republished with a negative x-delay and an invalid one keeps its x-delay,
 * so a route whose target (or dead-letter exchange) is the ingress
 * exchange of a route that leads back would circulate it for ever. Routes
 * are followed the way a message goes: with a valid delay along
 * target_exchange, with an invalid one along dead_letter_exchange when
 * invalid_delay is "dead-letter", else target_exchange. Loops through
 * exchange-to-exchange bindings on the broker are out of sight here.
 *
 * Vhosts. A route's "vhost" (default: the first broker URI's, %-decoded;
 * config_route_vhost) is where its exchanges and queues are: the same
 * names in two vhosts are two exchanges, two queues, so two routes may use
 * them -- that is the point of the key -- and a route publishes in its own
 * vhost, so a loop is followed only through routes of that vhost. The
 * replicated log declares its stream and lease queue in the URI's vhost:
 * only routes there can clash with them (cfg_check_repl_routes). A stream
 * ingress or share_keys in another vhost needs no rule of its own: a
 * stream's place file is named after the route, which is unique across
 * the bridge, and the key-event exchange and queue live beside the
 * route's own names, in its vhost.
 *
 * A route the running configuration retired (removed while it still held
 * messages) consumes nothing: the rules between routes pass it by, as if
 * it were gone.
 *
 * config.c calls cfg_parse_routes() once the sections the routes depend on
 * (wal.replicate, instance, route_templates) are read; the checks against
 * those sections (cfg_check_repl_routes, cfg_check_share_keys,
 * cfg_check_stream_routes) are config_check.c's, run here over the whole
 * set.
 */
#include "config_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/xalloc.h"

/* A route's values before its keys are read: what an absent key means (the schema's). */
static void route_defaults(struct config_route *r)
{
    cfg_defaults(CONFIG_SECT_ROUTE, r);
    r->source = CONFIG_SOURCE_FILE;
    r->retired = 0;
}

/* routes[i].name: required, [A-Za-z0-9._-]. */
static int route_name(struct ctx *x, struct config_route *r, json_object *o, const char *pre)
{
    char path[320], q[96];

    if (cfg_get_str(x, o, pre, "name", REQUIRED | NONEMPTY, r->name, CONFIG_NAME_MAX) < 0)
        return -1;
    if (!cfg_valid_name(r->name)) {
        snprintf(path, sizeof path, "%s.name", pre);
        return cfg_fail(x, path, "%s: only letters, digits, '.', '_' and '-' are allowed",
                    cfg_quote(r->name, strlen(r->name), q, sizeof q));
    }
    return 0;
}

/* routes[i]: the exchanges, queue and vhost it names (each checked alone). */
static int route_names(struct ctx *x, struct config_route *r, json_object *o, const char *pre)
{
    char path[320], q[96];

    /* a delayed_exchanges route may have neither (config_delayed.c) */
    int need = r->delayed_exchanges ? NONEMPTY : REQUIRED | NONEMPTY;
    if (cfg_get_str(x, o, pre, "ingress_exchange", need, r->ingress_exchange,
                CONFIG_NAME_MAX) < 0)
        return -1;
    if (cfg_get_str(x, o, pre, "ingress_queue", need, r->ingress_queue,
                CONFIG_NAME_MAX) < 0)
        return -1;
    /* a retry route has none: it sends back through the default exchange (config_retry.c) */
    if (!cfg_route_is_retry(o) && !r->delayed_exchanges &&
        cfg_get_str(x, o, pre, "target_exchange", REQUIRED, r->target_exchange, CONFIG_NAME_MAX) < 0)
        return -1;
    if (cfg_get_str(x, o, pre, "vhost", NONEMPTY, r->vhost, CONFIG_NAME_MAX) < 0)
        return -1;
    for (const char *p = r->vhost; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            snprintf(path, sizeof path, "%s.vhost", pre);
            return cfg_fail(x, path, "expected a vhost name without control characters, got %s",
                            cfg_quote(r->vhost, strlen(r->vhost), q, sizeof q));
        }
    return 0;
}

/* routes[i]: an unroutable message's exchange is not one it would come back or bounce from. */
static int route_side_exits(struct ctx *x, const struct config_route *r, const char *pre)
{
    char path[320];

    if (r->unroutable_exchange[0] && (strcmp(r->unroutable_exchange, r->ingress_exchange) == 0 ||
                                      strcmp(r->unroutable_exchange, r->target_exchange) == 0)) {
        snprintf(path, sizeof path, "%s.unroutable_exchange", pre);
        return cfg_fail(x, path, "must differ from ingress_exchange and target_exchange: an "
                             "unroutable message would come back or bounce again");
    }
    return 0;
}

/* routes[i]: the rules between its keys (reserved names, loops, what cannot be declared). */
static int route_check_rules(struct ctx *x, const struct config_route *r, const char *pre)
{
    char path[320], q[96];

    if (cfg_reserved(r->ingress_exchange)) {
        snprintf(path, sizeof path, "%s.ingress_exchange", pre);
        return cfg_fail(x, path, "the \"amq.\" prefix is reserved by RabbitMQ; choose another name");
    }
    if (cfg_reserved(r->ingress_queue)) {
        snprintf(path, sizeof path, "%s.ingress_queue", pre);
        return cfg_fail(x, path, "the \"amq.\" prefix is reserved by RabbitMQ; choose another name");
    }
    if (cfg_check_route_delayed(x, r, pre) < 0)
        return -1;
    if (!r->delayed_exchanges && strcmp(r->target_exchange, r->ingress_exchange) == 0) {
        snprintf(path, sizeof path, "%s.target_exchange", pre);
        return cfg_fail(x, path,
                    "same as ingress_exchange %s: messages would loop; expected the exchange "
                    "consumers read from",
                    cfg_quote(r->ingress_exchange, strlen(r->ingress_exchange), q, sizeof q));
    }
    if (r->declare_target && r->target_exchange[0] == '\0') {
        snprintf(path, sizeof path, "%s.declare_target", pre);
        return cfg_fail(x, path, "the default exchange (target_exchange \"\") cannot be declared; "
                             "set declare_target to false");
    }
    if (r->declare_target && cfg_reserved(r->target_exchange)) {
        snprintf(path, sizeof path, "%s.declare_target", pre);
        return cfg_fail(x, path, "RabbitMQ refuses to declare \"amq.\" exchanges; set declare_target "
                             "to false or rename target_exchange");
    }
    if (r->invalid_delay == INVALID_DELAY_DEAD_LETTER) {
        snprintf(path, sizeof path, "%s.dead_letter_exchange", pre);
        if (r->dead_letter_exchange[0] == '\0')
            return cfg_fail(x, path, "required when invalid_delay is \"dead-letter\"; expected a "
                                 "non-empty exchange name");
        if (strcmp(r->dead_letter_exchange, r->ingress_exchange) == 0)
            return cfg_fail(x, path, "same as ingress_exchange %s: messages would loop",
                        cfg_quote(r->ingress_exchange, strlen(r->ingress_exchange), q, sizeof q));
    }
    return 0;
}


/* A route's keys but its name, from o (its own, or merged with a template's), into r. */
static int route_read(struct ctx *x, struct config_route *r, json_object *o, const char *pre)
{
    if (cfg_parse_route_delayed(x, r, o, pre) < 0 || route_names(x, r, o, pre) < 0 ||
        cfg_read_keys(x, CONFIG_SECT_ROUTE, o, pre, r) < 0 ||
        cfg_parse_route_stream(x, r, o, pre) < 0 || route_side_exits(x, r, pre) < 0 ||
        cfg_parse_route_retry(x, r, o, pre) < 0)
        return -1;
    return route_check_rules(x, r, pre);
}

/*
 * A route object (of "routes", in the file or the routes file) into r: its
 * keys checked, the defaults set, its name; with "template", the
 * template's keys ("{name}" replaced) under its own; then the rest.
 */
static int route_object(struct ctx *x, const struct config *c, struct config_route *r,
                        json_object *o, const char *pre)
{
    char got[96], q[96], path[CFG_PATH_MAX];
    json_object *t;
    const char *s;
    size_t n;

    if (json_object_get_type(o) != json_type_object)
        return cfg_fail(x, pre, "expected an object, got %s", cfg_show(o, got, sizeof got));
    if (cfg_check_sect(x, o, pre, CONFIG_SECT_ROUTE) < 0)
        return -1;
    route_defaults(r);
    if (route_name(x, r, o, pre) < 0)
        return -1;
    if (!json_object_object_get_ex(o, "template", &t))
        return route_read(x, r, o, pre);

    cfg_join(path, sizeof path, pre, "template");
    if (cfg_string(x, path, t, &s, &n) < 0)
        return -1;
    int k = cfg_template_find(c, s);
    if (k < 0)
        return cfg_fail(x, path, "%s is not one of route_templates (%d); expected a template's "
                        "name", cfg_quote(s, n, q, sizeof q), c->ntemplates);
    json_object *tj = cfg_template_json(c, k), *m = cfg_template_expand(tj, r->name);
    json_object_put(tj);
    json_object_object_foreach(o, key, v)
        if (strcmp(key, "template") != 0)
            json_object_object_add(m, key, json_object_get(v));
    memcpy(r->template_name, c->templates[k].name, sizeof r->template_name);
    int rc = route_read(x, r, m, pre);
    json_object_put(m);
    return rc;
}

/* route_templates.T's instance name into r: the template's keys, "{name}" replaced. */
static int route_instance(struct ctx *x, const struct config_template *t, json_object *tj,
                          struct config_route *r, const char *name, const char *pre)
{
    route_defaults(r);
    snprintf(r->name, sizeof r->name, "%s", name); /* checked by cfg_parse_templates */
    memcpy(r->template_name, t->name, sizeof r->template_name);
    json_object *m = cfg_template_expand(tj, name);
    int rc = route_read(x, r, m, pre);
    json_object_put(m);
    return rc;
}

static const char *route_id(const struct ctx *x, int i, char *buf, size_t n)
{
    if (x->where)
        return x->where[i].id;
    snprintf(buf, n, "routes[%d]", i);
    return buf;
}

/* Route i against the routes before it: its name unique, its ingress names in its vhost. */
static int check_unique(struct ctx *x, const struct config *c, int i)
{
    const struct config_route *r = &c->routes[i];
    char path[2 * CFG_PATH_MAX], q[96], b1[32], b2[32], b3[32];

    for (int j = 0; j < i; j++) {
        const struct config_route *p = &c->routes[j];
        const char *what = NULL, *val = NULL;
        if (p->retired)
            continue; /* consumes nothing: as if absent */
        if (strcmp(p->name, r->name) == 0)
            what = "name", val = r->name;
        else if (strcmp(config_route_vhost(c, p), config_route_vhost(c, r)) != 0)
            continue; /* names in another vhost are other exchanges and queues */
        else if (r->ingress_exchange[0] && strcmp(p->ingress_exchange, r->ingress_exchange) == 0)
            what = "ingress_exchange", val = r->ingress_exchange;
        else if (strcmp(p->ingress_queue, r->ingress_queue) == 0)
            what = "ingress_queue", val = r->ingress_queue;
        if (!what)
            continue;
        const char *pre = cfg_route_pre(x, i, b1, sizeof b1), *id = route_id(x, i, b2, sizeof b2);
        if (val == r->name && strcmp(pre, id) != 0) /* a template's instance: its entry */
            snprintf(path, sizeof path, "%s", id);
        else
            snprintf(path, sizeof path, "%s.%s", pre, what);
        return cfg_fail(x, path, "%s is already used by %s; expected a unique %s",
                        cfg_quote(val, strlen(val), q, sizeof q), route_id(x, j, b3, sizeof b3),
                        what);
    }
    return 0;
}

/* The rules over the whole set: loops, and against wal.replicate and instance. */
static int check_set(struct ctx *x, const struct config *c)
{
    /* loops, as a delayed (then negative x-delay) and an invalid message travel */
    int *next = xmalloc((size_t)(c->nroutes ? c->nroutes : 1) * sizeof *next);
    int rc = 0;
    for (int i = 0; i < c->nroutes; i++)
        next[i] = cfg_route_by_ingress(c, config_route_vhost(c, &c->routes[i]),
                                       c->routes[i].target_exchange);
    rc = cfg_check_loops(x, c, next, 0);
    if (rc == 0) {
        for (int i = 0; i < c->nroutes; i++) {
            const struct config_route *r = &c->routes[i];
            next[i] = cfg_route_by_ingress(c, config_route_vhost(c, r),
                                           r->invalid_delay == INVALID_DELAY_DEAD_LETTER
                                               ? r->dead_letter_exchange
                                               : r->target_exchange);
        }
        rc = cfg_check_loops(x, c, next, 1);
    }
    free(next);
    if (rc < 0 || cfg_check_repl_routes(x, c) < 0 || cfg_check_share_keys(x, c) < 0 ||
        cfg_check_stream_routes(x, c) < 0)
        return -1;
    return 0;
}

/*
 * c->routes[c->nroutes] from o (a route object), or, when o is NULL, from
 * template t's instance name; counted once read, then checked against the
 * routes before it. Where it was written is x->where[c->nroutes].
 */
static int append(struct ctx *x, struct config *c, json_object *o, int t, json_object *tj,
                  const char *name, int source)
{
    struct config_route *r = &c->routes[c->nroutes];
    const char *pre = x->where[c->nroutes].pre;

    if (c->nroutes >= CONFIG_MAX_ROUTES)
        return cfg_fail(x, x->where[c->nroutes].id, "one route too many; at most %d routes in "
                        "all (routes, route_templates' routes and the routes file's)",
                        CONFIG_MAX_ROUTES);
    if (o ? route_object(x, c, r, o, pre) < 0
          : route_instance(x, &c->templates[t], tj, r, name, pre) < 0) {
        cfg_free_route_retry(r); /* not counted in nroutes yet */
        memset(r, 0, sizeof *r);
        return -1;
    }
    r->source = source;
    c->nroutes++;
    return check_unique(x, c, c->nroutes - 1);
}

/* Template t's instances appended, in the order of its "routes". */
static int append_instances(struct ctx *x, struct config *c, int t)
{
    const struct config_template *tp = &c->templates[t];
    json_object *tj = cfg_template_json(c, t), *a;
    int rc = 0;

    if (json_object_object_get_ex(tj, "routes", &a))
        for (size_t j = 0; rc == 0 && j < json_object_array_length(a); j++) {
            struct cfg_where *w = &x->where[c->nroutes]; /* room for one too many */
            snprintf(w->pre, sizeof w->pre, "route_templates.%s", tp->name);
            snprintf(w->id, sizeof w->id, "route_templates.%s.routes[%u]", tp->name, (unsigned)j);
            rc = append(x, c, NULL, t, tj, json_object_get_string(json_object_array_get_idx(a, j)),
                        CONFIG_SOURCE_FILE);
        }
    json_object_put(tj);
    return rc;
}

int cfg_parse_routes(struct ctx *x, struct config *c, json_object *root)
{
    json_object *a = NULL;
    char got[96];
    int rc = -1;

    /* room for every route the running configuration may gain (calloc: pages on first use) */
    c->routes = xcalloc(CONFIG_MAX_ROUTES, sizeof *c->routes);
    x->where = xcalloc(CONFIG_MAX_ROUTES + 1, sizeof *x->where);
    x->first_new = 0;
    if (json_object_object_get_ex(root, "routes", &a)) {
        if (json_object_get_type(a) != json_type_array) {
            cfg_fail(x, "routes", "expected an array, got %s", cfg_show(a, got, sizeof got));
            goto out;
        }
        size_t n = json_object_array_length(a);
        if ((n == 0 && c->ntemplates == 0) || n > CONFIG_MAX_ROUTES) {
            cfg_fail(x, "routes", "expected 1..%d routes, got %zu", CONFIG_MAX_ROUTES, n);
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            struct cfg_where *w = &x->where[c->nroutes];
            snprintf(w->pre, sizeof w->pre, "routes[%zu]", i);
            memcpy(w->id, w->pre, sizeof w->id);
            if (append(x, c, json_object_array_get_idx(a, i), -1, NULL, NULL,
                       CONFIG_SOURCE_FILE) < 0)
                goto out;
        }
    }
    for (int t = 0; t < c->ntemplates; t++)
        if (append_instances(x, c, t) < 0)
            goto out;
    if (c->nroutes == 0) {
        if (!a && c->ntemplates == 0)
            cfg_fail(x, "routes", "missing; expected an array of 1..%d routes", CONFIG_MAX_ROUTES);
        else
            cfg_fail(x, "routes", "no routes, here or in route_templates' routes; expected at "
                     "least one");
        goto out;
    }
    rc = check_set(x, c);
out:
    free(x->where);
    x->where = NULL;
    return rc;
}

/* The -c file's route called name (not retired), or NULL. */
static const struct config_route *file_route(const struct config *c, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (c->routes[i].source == CONFIG_SOURCE_FILE && !c->routes[i].retired &&
            strcmp(c->routes[i].name, name) == 0)
            return &c->routes[i];
    return NULL;
}

/* The routes file's top level: {"version": 1, "routes": [...]}; *a NULL when it has none. */
static int store_top(struct ctx *x, json_object *root, json_object **a)
{
    static const char *const keys[] = { "version", "routes", NULL };
    json_object *v;
    char got[96];

    *a = NULL;
    if (cfg_check_keys(x, root, "", keys) < 0)
        return -1;
    if (!json_object_object_get_ex(root, "version", &v))
        return cfg_fail(x, "version", "missing; expected 1 (the routes file's format)");
    if (json_object_get_type(v) != json_type_int || json_object_get_int64(v) != 1)
        return cfg_fail(x, "version", "expected 1, got %s; written by a newer delay-bridge?",
                        cfg_show(v, got, sizeof got));
    if (json_object_object_get_ex(root, "routes", a) &&
        json_object_get_type(*a) != json_type_array)
        return cfg_fail(x, "routes", "expected an array, got %s", cfg_show(*a, got, sizeof got));
    return 0;
}

int cfg_add_routes(struct config *c, const char *json, const char *name, int *shadowed, int warn,
                   char *err, size_t errlen)
{
    struct ctx x = {.name = name ? name : "routes file", .err = err, .errlen = errlen};
    json_object *root = NULL, *a = NULL;
    int n0 = c->nroutes, skipped = 0, rc = -1;

    if (err && errlen)
        err[0] = '\0';
    if (!json || strspn(json, " \t\r\n") == strlen(json)) {
        rc = 0; /* an empty file: no routes */
        goto done;
    }
    if (!(root = cfg_parse_text(&x, json)) || store_top(&x, root, &a) < 0)
        goto done;
    if (!c->routes)
        c->routes = xcalloc(CONFIG_MAX_ROUTES, sizeof *c->routes);
    x.where = xcalloc(CONFIG_MAX_ROUTES + 1, sizeof *x.where);
    x.first_new = n0;
    for (int i = 0; i < n0; i++) {
        snprintf(x.where[i].pre, sizeof x.where[i].pre, "routes[%s]", c->routes[i].name);
        memcpy(x.where[i].id, x.where[i].pre, sizeof x.where[i].id);
    }
    for (size_t k = 0; a && k < json_object_array_length(a); k++) {
        json_object *o = json_object_array_get_idx(a, k), *nv;
        const char *rn = json_object_object_get_ex(o, "name", &nv) &&
                                 json_object_get_type(nv) == json_type_string
                             ? json_object_get_string(nv)
                             : NULL;
        struct cfg_where *w = &x.where[c->nroutes];
        if (rn && cfg_valid_name(rn) && strlen(rn) <= CONFIG_NAME_MAX)
            snprintf(w->pre, sizeof w->pre, "routes[%s]", rn);
        else
            snprintf(w->pre, sizeof w->pre, "routes[%u]", (unsigned)k);
        memcpy(w->id, w->pre, sizeof w->id);
        if (rn && json_object_get_type(o) == json_type_object && file_route(c, n0, rn)) {
            skipped++; /* the -c file wins */
            if (warn)
                log_warn("config", "a route of the routes file has the name of a route of the "
                         "configuration file, which wins; the routes file's is not used",
                         "file=\"%s\" route=%s hint=\"delete it through the API, or rename one\"",
                         x.name, rn);
            continue;
        }
        if (append(&x, c, o, -1, NULL, NULL, CONFIG_SOURCE_STORE) < 0)
            goto done;
    }
    if (check_set(&x, c) < 0)
        goto done;
    rc = 0;
done:
    if (rc < 0) { /* c as it was */
        for (int i = n0; i < c->nroutes; i++) {
            cfg_free_route_retry(&c->routes[i]);
            memset(&c->routes[i], 0, sizeof c->routes[i]);
        }
        c->nroutes = n0;
    }
    if (shadowed)
        *shadowed = skipped;
    free(x.where);
    json_object_put(root);
    return rc;
}

int config_add_routes(struct config *c, const char *json, const char *name, int *shadowed,
                      char *err, size_t errlen)
{
    return cfg_add_routes(c, json, name, shadowed, 0, err, errlen);
}
