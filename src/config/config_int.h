/*
 * config_int.h -- what the files of config share (internal: only config*.c
 * include it; config.h is the contract).
 *
 *   config.c        the sections: each read by the schema's walk and the
 *                   rules between its keys (parse_broker, parse_wal, ...),
 *                   then config_parse / config_load / config_free
 *   config_keys.def the schema: every key once (name, type, range, default,
 *                   how a reload applies it, a line of description)
 *   config_schema.c its rows, and the walks over them: defaults, reading,
 *                   unknown keys, a row's value compared and copied
 *   config_routes.c the routes -- the file's, route_templates' instances,
 *                   the routes file's (config_add_routes): each route's
 *                   keys, then the rules between routes (unique names, loops)
 *   config_json.c   access to the JSON: typed, range-checked getters, the
 *                   unknown-key check, values quoted back into messages
 *   config_template.c  route_templates: their shape, kept as text, and a
 *                   route's keys made from one ("{name}" replaced)
 *   config_store.c  the routes file's text, a route put or deleted
 *                   (config_store_put, config_store_delete)
 *   config_diff.c   what differs between two loaded configurations (a reload)
 *   config_retry.c  routes[].retry: a retry route's policy, parking and
 *                   per-queue overrides, and the route keys it refuses
 *   config_check.c  the checks beyond type and range (the list in config.c's
 *                   essay): names, URIs, readable files, loops, the
 *                   replication and share_keys rules, the WAL directory
 *
 * json-c lookups return borrowed references: nothing here keeps one past
 * config_parse(). Every function that can fail returns 0 or -1 with the
 * one message of the parse in x->err (cfg_fail).
 */
#ifndef DELAY_BRIDGE_CONFIG_INT_H
#define DELAY_BRIDGE_CONFIG_INT_H

#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>

#include "delay-bridge/config.h"

#define ENV_URI "DELAY_BRIDGE_BROKER_URI" /* broker URIs from the environment */

#define CFG_PATH_MAX 320 /* a key path: a route's prefix (CFG_PRE_MAX) and a key or two */
#define CFG_PRE_MAX 304  /* "route_templates.NAME.routes[N]", "routes[NAME]" */

/* Where route i of a parse was written, for messages (config_routes.c). */
struct cfg_where {
    char pre[CFG_PRE_MAX]; /* its keys' prefix: "routes[2]", "route_templates.T", "routes[orders]" */
    char id[CFG_PRE_MAX];  /* the route: "routes[2]", "route_templates.T.routes[1]", ... */
};

/* One parse: the config's name for messages, and where its one error goes. */
struct ctx {
    const char *name;
    char *err;
    size_t errlen;
    struct cfg_where *where; /* while routes are read: one per route of c; NULL: "routes[i]" */
    int first_new;           /* routes of c before it were there before this parse */
};


/* ---- config_json.c ---- */

/* The one error of a parse: "<name>: <path>: <message>" into x->err. Returns -1. */
int cfg_fail(struct ctx *x, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* s (n bytes) as a JSON string literal, cut with "..." to fit out. */
const char *cfg_quote(const char *s, size_t n, char *out, size_t outlen);

/* A JSON value as a person would write it, for "got ..." in messages. */
const char *cfg_show(json_object *v, char *out, size_t outlen);
/* v as a JSON string without NUL characters: *s (borrowed) and *n. 0, or -1 (reported). */
int cfg_string(struct ctx *x, const char *path, json_object *v, const char **s, size_t *n);

/* Refuse keys of obj not in allowed (NULL-terminated). */
int cfg_check_keys(struct ctx *x, json_object *obj, const char *prefix,
                      const char *const *allowed);

/* The key prefix of route i in messages ("routes[i]" outside a parse of routes). */
const char *cfg_route_pre(const struct ctx *x, int i, char *buf, size_t n);

/* prefix.key (or key alone) into out: the key path of messages. */
void cfg_join(char *out, size_t outlen, const char *prefix, const char *key);

/* Optional integer key in lo..hi (hi <= INT64_MAX). Absent: *out untouched. */
int cfg_get_int(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, int64_t hi, uint64_t *out);

/* cfg_get_int() for a uint32_t field that already holds its default. */
int cfg_get_u32(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, uint32_t *field);

int cfg_get_bool(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                    int *out);

enum { OPTIONAL = 0, REQUIRED = 1, NONEMPTY = 2 };

/*
 * String key into buf (at most max bytes). REQUIRED: must be present;
 * NONEMPTY: must not be "". Returns 1 if present, 0 if absent, -1 on error.
 */
int cfg_get_str(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int flags, char *buf, size_t max);

/*
 * An optional string key of o that must be one of choices (NULL-terminated):
 * *idx is its index when present. expect lists them for the error message.
 */
int cfg_get_choice(struct ctx *x, json_object *o, const char *prefix, const char *key,
                      const char *const *choices, const char *expect, int *idx);

/* 1-based line and column of byte offset off in s. */
void cfg_line_col(const char *s, size_t off, int *line, int *col);

/*
 * text parsed strictly as one JSON value (a UTF-8 byte order mark
 * skipped). NULL on error: *why the tokener's words, or NULL when the text
 * is only white space; *line and *col where it went wrong.
 */
json_object *cfg_json_parse(const char *text, const char **why, int *line, int *col);

/* A file's text as a JSON object, or NULL with "<name>:<line>:<col>: invalid JSON: ..." (reported). */
json_object *cfg_parse_text(struct ctx *x, const char *text);

/* ---- config_schema.c: the rows of config_keys.def and the walks over them ---- */

/* How config_diff compares a row without a field (struct config_key.cmp). */
enum { CMP_NONE, CMP_URIS, CMP_HOSTS, CMP_TEMPLATES, CMP_REPLICATE, CMP_ROUTES, CMP_RETRY };

#define CFG_SECT_MAX_KEYS 32 /* rows of one section, at most */

/* Each section's key prefix, as messages and the man page name it ("routes[]" for a route). */
extern const char *const cfg_sect_pre[];

/* Section s's defaults into base (struct config, or struct config_route for a route). */
void cfg_defaults(enum config_sect s, void *base);
/* One row's key of o (a row with a field) into base; absent: base untouched. */
int cfg_read_key(struct ctx *x, const struct config_key *k, json_object *o, const char *pre,
                 void *base);
/* Section s's keys with a field and not OWN, read from o (key prefix pre) into base. */
int cfg_read_keys(struct ctx *x, enum config_sect s, json_object *o, const char *pre, void *base);
/* Section s's key names into out (room for max, NULL-terminated); returns how many. */
int cfg_sect_keys(enum config_sect s, const char **out, int max);
/* Refuse keys of o that section s does not have. */
int cfg_check_sect(struct ctx *x, json_object *o, const char *pre, enum config_sect s);
/* The optional section key of root: an object whose keys are all section s's, or absent (*out NULL). */
int cfg_section(struct ctx *x, json_object *root, const char *key, enum config_sect s,
                json_object **out);
/* Why a kind of route refuses one key (config_retry.c's, config_delayed.c's tables). */
struct cfg_refusal {
    const char *key, *why;
};
/*
 * The first key of route object o whose row carries flag (CONFIG_KEY_NO_RETRY,
 * CONFIG_KEY_NO_DELAYED), refused as "not allowed with KIND: WHY", WHY from
 * no[0..nno) or else dflt. 0 when o has none, -1 (reported) when it has one.
 */
int cfg_refuse_flagged(struct ctx *x, json_object *o, const char *pre, unsigned flag,
                       const char *kind, const struct cfg_refusal *no, size_t nno,
                       const char *dflt);

/* ---- config_routes.c ---- */

/*
 * "routes" of root, then route_templates' instances, into c->routes (room
 * for CONFIG_MAX_ROUTES), each route checked, then every rule between
 * routes and against wal.replicate and instance.
 */
int cfg_parse_routes(struct ctx *x, struct config *c, json_object *root);

/* config_add_routes(), warning (log_warn) about each route skipped when warn. */
int cfg_add_routes(struct config *c, const char *json, const char *name, int *shadowed, int warn,
                   char *err, size_t errlen);

/* ---- config_template.c ---- */

/* "route_templates" of root into c->templates (their text), each template's shape checked. */
int cfg_parse_templates(struct ctx *x, struct config *c, json_object *root);
/* The index of template name in c->templates, or -1. */
int cfg_template_find(const struct config *c, const char *name);
/* Template t parsed from its text (a new reference). */
json_object *cfg_template_json(const struct config *c, int t);
/* Template t's route keys ("routes" left out) with "{name}" replaced by name (a new object). */
json_object *cfg_template_expand(json_object *t, const char *name);

/* ---- config_check.c ---- */

/* The first broker URI's vhost, %-decoded ("/" when c has no URI): a route's without "vhost". */
const char *cfg_uri_vhost(const struct config *c);

struct uri;
/* One broker URI: amqp:// or amqps://, parsed by uri.c (as the connection will be) into *u. */
int cfg_check_uri(struct ctx *x, const char *path, const char *uri, struct uri *u);

/* The file named by key (a path) opens for reading and is not a directory. */
int cfg_check_readable(struct ctx *x, const char *path, const char *file);

/* A stream or queue name of wal.replicate: [A-Za-z0-9._:-], not "amq.". */
int cfg_check_repl_name(struct ctx *x, const char *path, const char *s);

/*
 * wal.replicate.max_age: "" or RabbitMQ's x-max-age syntax, 1..9 digits
 * and a unit (Y 365 days, M 30 days, D, h, m, s). Seconds in *secs.
 */
int cfg_parse_max_age(const char *s, uint64_t *secs);
/*
 * PREFIX.KEY, when present: an x-max-age string ("" too when allow_empty)
 * copied into out (outlen >= 11), its seconds in *secs (0 for ""). Returns
 * 1 if present, 0 if absent (out and *secs untouched), -1 on error.
 */
int cfg_get_max_age(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                    int allow_empty, char *out, size_t outlen, uint64_t *secs);

/* wal.replicate's stream and lease queue are not the ingress queue of a route in the URI's vhost. */
int cfg_check_repl_routes(struct ctx *x, const struct config *c);

/*
 * http.listen: "" (off), "PORT" (loopback), "IPv4:PORT" or "[IPv6]:PORT",
 * numeric addresses only (no name lookup at start). Fills host and port.
 */
int cfg_parse_listen(const char *s, char *host, size_t hostlen, uint16_t *port);

/* host (as parse_listen gave it) is 127.0.0.0/8 or ::1. */
int cfg_is_loopback(const char *host);

/* A route name: [A-Za-z0-9._-], 1..64 bytes. */
int cfg_valid_name(const char *s);

/* "" or the "amq." prefix RabbitMQ reserves. */
int cfg_reserved(const char *s);

/* The route in vhost whose ingress_exchange is ex, or -1 (a route publishes in its own vhost). */
int cfg_route_by_ingress(const struct config *c, const char *vhost, const char *ex);

/*
 * Follow next[] (one out-edge per route, -1 for none) from every route; a
 * walk longer than nroutes steps is on a cycle. Reports the cycle once.
 */
int cfg_check_loops(struct ctx *x, const struct config *c, const int *next, int invalid);

/*
 * routes[].share_keys: each bridge consumes its own key-event queue,
 * INGRESS_QUEUE.keys.INSTANCE, bound to INGRESS_EXCHANGE.keys: an instance
 * name is required, and both names must still be AMQP short strings.
 */
int cfg_check_share_keys(struct ctx *x, const struct config *c);
/* routes[].queue_type "stream": its retention keys and what it cannot go with. */
int cfg_parse_route_stream(struct ctx *x, struct config_route *r, json_object *o,
                           const char *pre);
int cfg_check_stream_routes(struct ctx *x, const struct config *c);

/* ---- config_retry.c ---- */

/* o (a route object) has a "retry" key: a retry route. */
int cfg_route_is_retry(json_object *o);
/*
 * routes[i].retry into r->retry (allocated; NULL when absent), after the
 * route's other keys: refuses the keys a retry route cannot have, and
 * fills target, dead-letter and unroutable exchanges for parking.
 */
int cfg_parse_route_retry(struct ctx *x, struct config_route *r, json_object *o,
                          const char *pre);
void cfg_free_route_retry(struct config_route *r);

/* ---- config_delayed.c ---- */

/*
 * routes[i].delayed_exchanges into r, before the route's names: when true,
 * refuses the keys such a route cannot have and sets the default
 * ingress_queue. cfg_check_route_delayed: the rules once its keys are read
 * (queue_type, single_active_consumer, share_keys).
 */
int cfg_parse_route_delayed(struct ctx *x, struct config_route *r, json_object *o,
                            const char *pre);
int cfg_check_route_delayed(struct ctx *x, const struct config_route *r, const char *pre);

/* uri carries a password of its own: amqp[s]://user:PASSWORD@host... */
int cfg_uri_has_password(const char *uri);

struct stat;
/* One-line warnings about a loaded configuration (st: the file's fstat). */
void cfg_warn_loaded(const struct config *c, const char *path, const struct stat *st);

#endif
