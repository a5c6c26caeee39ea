/*
 * api_routes.c -- a route as the HTTP route API shows it and takes it
 * (api.h: api_route_json, api_route_body). Pure: json-c and the config's
 * structs, no daemon.
 *
 * One object serves both ways. GET /routes/NAME renders a running route
 * with every key of the file, defaults included, plus what only the daemon
 * knows; PUT /routes/NAME takes that same object back. So the object is the
 * route's keys as config.c reads them, and four more that no file holds:
 *
 *   key                 GET shows                      PUT does with it
 *   ------------------  -----------------------------  ------------------------------
 *   source              "file" (the -c file) or "api"  dropped
 *                       (the routes file)
 *   retired             true: removed, still           dropped
 *                       publishing what it holds
 *   held                messages held; null while the  dropped
 *                       log is recovering
 *   template            the route_templates entry it   kept (a route of the routes
 *                       came from, or null             file may name one); null dropped
 *   vhost               the effective vhost: its own,  dropped when it is the broker
 *                       or the broker URI's            URI's, so that a route that
 *                                                      had none keeps none
 *   target_exchange     null on a retry route and a    null dropped
 *                       delayed_exchanges route (they
 *                       have none; the file may not
 *                       name one)
 *   ingress_exchange    null on a delayed_exchanges    null dropped
 *                       route without one
 *
 * The route's keys are the schema's ROUTE rows (config.h, struct
 * config_key; src/config/config_keys.def), in its order, each rendered by
 * its type: a key added to the schema shows here with no change. Which
 * keys a route shows follows what config.c accepts of it, so that what
 * GET shows always parses, and the rows' flags say it: a retry route
 * leaves out the NO_RETRY keys config_retry.c refuses next to "retry"
 * (its target, dead-letter and unroutable exchanges are filled from
 * retry.parking_exchange, not written), a delayed_exchanges route the
 * NO_DELAYED ones (config_delayed.c), and only a stream route shows the
 * STREAM_ONLY ones (stream_max_age, stream_max_mb). Numbers are JSON
 * numbers in the file's units (stream_max_mb in MiB).
 *
 * What the keys mean and whether a value is allowed is the config's to
 * say: api_route_body() only drops the keys above; config_add_routes()
 * then reads what is left as any route of the routes file, with key paths.
 */
#include "delay-bridge/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "base/xalloc.h"
#include "delay-bridge/config.h"

static void add(json_object *o, const char *k, json_object *v)
{
    json_object_object_add(o, k, v);
}

static void add_str(json_object *o, const char *k, const char *s)
{
    add(o, k, api_json_str(s, strlen(s)));
}

static void add_bool(json_object *o, const char *k, int v)
{
    add(o, k, json_object_new_boolean(v != 0));
}

/* The five keys of a retry policy, as the file writes them. */
static void add_policy(json_object *o, const struct config_retry_policy *p)
{
    static const char *const jitters[] = {"none", "full", "equal"};
    char num[32];

    add(o, "initial_ms", json_object_new_uint64(p->initial_ms));
    snprintf(num, sizeof num, "%.15g", p->multiplier); /* 2 stays 2, 1.5 stays 1.5 */
    add(o, "multiplier", json_object_new_double_s(p->multiplier, num));
    add(o, "max_ms", json_object_new_uint64(p->max_ms));
    add(o, "jitter", json_object_new_string(jitters[p->jitter <= RETRY_JITTER_EQUAL ? p->jitter
                                                                                   : 0]));
    add(o, "max_attempts", json_object_new_uint64(p->max_attempts));
}

static json_object *retry_json(const struct config_retry *rt)
{
    static const struct {
        unsigned bit;
        const char *name;
    } reasons[] = {{RETRY_REASON_REJECTED, "rejected"},
                   {RETRY_REASON_DELIVERY_LIMIT, "delivery_limit"},
                   {RETRY_REASON_EXPIRED, "expired"},
                   {RETRY_REASON_MAXLEN, "maxlen"}};
    json_object *o = json_object_new_object(), *a = json_object_new_array(), *qs;

    add_policy(o, &rt->policy);
    add_str(o, "parking_exchange", rt->parking_exchange);
    if (rt->parking_queue[0])
        add_str(o, "parking_queue", rt->parking_queue);
    if (rt->queue_pattern[0])
        add_str(o, "queue_pattern", rt->queue_pattern);
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (rt->reasons & reasons[i].bit)
            json_object_array_add(a, json_object_new_string(reasons[i].name));
    add(o, "reasons", a);
    qs = json_object_new_object();
    for (int i = 0; i < rt->nqueues; i++) {
        json_object *q = json_object_new_object();
        add_policy(q, &rt->queues[i].policy);
        add(qs, rt->queues[i].queue, q);
    }
    add(o, "queues", qs);
    return o;
}

/* A row of a route with a field, as the file writes it. */
static json_object *key_json(const struct config_key *k, const struct config_route *r)
{
    const char *str;

    switch (k->type) {
    case CONFIG_T_BOOL: return json_object_new_boolean(config_key_uint(k, r) != 0);
    case CONFIG_T_INT: return json_object_new_uint64(config_key_uint(k, r));
    case CONFIG_T_STR:
    case CONFIG_T_CHOICE: str = config_key_str(k, r); return api_json_str(str, strlen(str));
    default: return NULL;
    }
}

struct json_object *api_route_json(const struct config_route *r, const char *vhost,
                                   int64_t held)
{
    json_object *o = json_object_new_object();

    /* every key of the schema's ROUTE rows, but those this kind of route has not */
    for (int i = 0; i < config_nkeys; i++) {
        const struct config_key *k = &config_keys[i];
        if (k->sect != CONFIG_SECT_ROUTE || (k->flags & CONFIG_KEY_STREAM_ONLY &&
                                             r->queue_type != QUEUE_STREAM))
            continue;
        if (!strcmp(k->key, "target_exchange")) /* none: null, dropped on PUT */
            add(o, k->key, r->retry || r->delayed_exchanges ? NULL : key_json(k, r));
        else if (!strcmp(k->key, "ingress_exchange")) /* a delayed_exchanges route's may be "" */
            add(o, k->key, r->ingress_exchange[0] || !r->delayed_exchanges ? key_json(k, r)
                                                                            : NULL);
        else if (!strcmp(k->key, "vhost"))
            add_str(o, k->key, vhost ? vhost : r->vhost);
        else if (!strcmp(k->key, "template"))
            add(o, k->key, r->template_name[0] ? key_json(k, r) : NULL);
        else if (!strcmp(k->key, "retry")) {
            if (r->retry)
                add(o, k->key, retry_json(r->retry));
        } else if (!(k->flags & CONFIG_KEY_NO_RETRY && r->retry) &&
                   !(k->flags & CONFIG_KEY_NO_DELAYED && r->delayed_exchanges))
            add(o, k->key, key_json(k, r));
    }
    add(o, "source", json_object_new_string(r->source == CONFIG_SOURCE_STORE ? "api" : "file"));
    add_bool(o, "retired", r->retired);
    add(o, "held", held >= 0 ? json_object_new_int64(held) : NULL);
    return o;
}

char *api_route_body(const char *body, size_t len, const char *default_vhost, char *err,
                     size_t errlen)
{
    static const char *const shown[] = {"source", "retired", "held"};
    struct json_tokener *tok;
    json_object *o, *v;
    size_t end;
    char *text = NULL;

    if (!body || !len) {
        snprintf(err, errlen, "body: empty; expected a route object (JSON)");
        return NULL;
    }
    if (len > INT32_MAX) {
        snprintf(err, errlen, "body: too large");
        return NULL;
    }
    tok = json_tokener_new();
    if (!tok) {
        fprintf(stderr, "delay-bridge: out of memory (json tokener)\n");
        abort();
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    /* len + 1, the NUL included: it ends a top-level literal and marks the end of input */
    char *copy = xmalloc(len + 1);
    memcpy(copy, body, len);
    copy[len] = '\0';
    o = json_tokener_parse_ex(tok, copy, (int)len + 1);
    end = json_tokener_get_parse_end(tok);
    free(copy);
    if (!o) {
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        if (jerr == json_tokener_success)
            snprintf(err, errlen, "body: expected a route object, got null");
        else
            snprintf(err, errlen, "body: invalid JSON at byte %zu: %s", end,
                     jerr == json_tokener_continue ? "unexpected end (an unclosed { [ or \"?)"
                                                   : json_tokener_error_desc(jerr));
        json_tokener_free(tok);
        return NULL;
    }
    json_tokener_free(tok); /* strict: text after the value was an error already */
    if (json_object_get_type(o) != json_type_object) {
        snprintf(err, errlen, "body: expected a route object, got %s",
                 json_type_to_name(json_object_get_type(o)));
        goto cleanup;
    }
    for (size_t i = 0; i < sizeof shown / sizeof shown[0]; i++)
        json_object_object_del(o, shown[i]);
    if (default_vhost && json_object_object_get_ex(o, "vhost", &v) &&
        json_object_get_type(v) == json_type_string && !strcmp(json_object_get_string(v),
                                                                 default_vhost))
        json_object_object_del(o, "vhost");
    for (int again = 1; again;) { /* nulls: deleting while walking would skip one */
        again = 0;
        json_object_object_foreach(o, k, val) {
            if (!val) {
                json_object_object_del(o, k);
                again = 1;
                break;
            }
        }
    }
    text = xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                         JSON_C_TO_STRING_NOSLASHESCAPE));
cleanup:
    json_object_put(o);
    return text;
}
