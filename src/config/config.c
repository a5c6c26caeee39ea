/*
 * config.c -- read the JSON configuration into struct config.
 *
 * json-c parses the file in strict mode (no comments, no trailing commas,
 * nothing after the top-level object); then each section is read: its
 * unknown keys refused and its keys copied into the plain struct by the
 * schema's walk (config_keys.def, config_schema.c: type, range, default),
 * then the keys that need code of their own (URIs, names, the replicated
 * stream's) and the rules between keys. The first problem stops the parse
 * (a key's type or range is found before the rules that relate it to
 * others). Every message is one line:
 *
 *   <name>: <key path>: <what is wrong>, <what is expected>
 *   <name>:<line>:<col>: invalid JSON: <tokener error>
 *
 * Values are echoed back in messages as JSON ("100", 1.5, true), cut to a
 * few dozen bytes; broker URIs are echoed with the password masked.
 *
 * Checks beyond type and range, each a mistake that would otherwise show up
 * only at run time:
 *   - unknown keys (a typo must not silently fall back to a default);
 *   - names and queues unique; URIs parsed by uri.c, the parser the
 *     connection uses, so an accepted URI is a usable one;
 *   - reconnect_min_ms <= reconnect_max_ms, same for publish_retry_*;
 *   - wal.replicate: stream and lease_queue valid queue names, not "amq.",
 *     different from each other and from every route's ingress_queue (one
 *     name, two queues with different arguments: the second declare fails);
 *     its retention covers two stream checkpoints, so the stream never
 *     drops what a rebuild from the last completed one needs: max_mb (when
 *     not 0) >= 2 x checkpoint_mb + 2 x segment_mb, and max_age (when set)
 *     >= 2 x checkpoint_interval_s, which must then not be 0;
 *   - broker.tls: cert_file and key_file together; when a URI is amqps://,
 *     the files set explicitly open for reading now (the error names the
 *     key and the OS error), not at the first connect;
 *   - the "amq." prefix is reserved by RabbitMQ for exchanges and queues a
 *     client declares: refused for ingress_exchange, ingress_queue, and
 *     target_exchange when declare_target is true (likewise "");
 *   - loops: a route whose target (or dead-letter exchange) is the ingress
 *     exchange of a route that leads back (config_routes.c says how routes
 *     are followed).
 *
 * Ranges are the schema's (config_keys.def); why some are what they are:
 *   broker.heartbeat_s 0..65535 (AMQP short); wal.max_message_bytes
 *   1..536870912 (RabbitMQ's own ceiling, well under WALREC_MAX_PAYLOAD);
 *   wal.segment_mb the segment-file log's own limit; limits.max_held and
 *   routes[].max_held 0..2^32-1 (a message handle is 32 bits);
 *   wal.replicate.max_age at most 9 digits (its seconds fit in 64 bits
 *   even in years); http.listen is ""
 *   (off) by default, else host:port with IPv6 hosts in brackets
 *   ("[::1]:9187"); routes_file "" is wal.dir + "/routes.json", filled in
 *   at parse (one path for every reader), and must fit 4095 bytes.
 *
 * json-c keeps the last of two equal keys in one object, so a duplicate key
 * is not reported.
 *
 * config_load_all() reads the routes file (routes_file) after the file:
 * missing, it is no routes yet; unreadable or wrong, the load fails with
 * its name, as a file of the configuration would.
 *
 * The files of config/ call one way, down: this file (the top) calls
 * config_routes.c (the routes; route_templates in config_template.c,
 * retry routes in config_retry.c, delayed_exchanges in config_delayed.c),
 * which call the checks in config_check.c, which call the schema's walks
 * (config_schema.c) and the JSON access (config_json.c, the floor).
 * config_diff.c and config_store.c stand beside them and call only the
 * floor. config_int.h is what they share.
 */
#include "config_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/xalloc.h"
#include "delay-bridge/uri.h"

#define CONFIG_FILE_MAX (16u << 20)

/*
 * One URI into c->uris, kept as "URI\0VHOST\0": its %-decoded vhost right
 * after it in the same allocation, where config_route_vhost() finds the
 * first URI's for the routes without a vhost of their own -- a pointer
 * that lives as long as c, with no field of its own in the contract.
 */
static int add_uri(struct ctx *x, struct config *c, const char *path, const char *s, size_t n)
{
    if (c->nuris >= CONFIG_MAX_URIS)
        return cfg_fail(x, path, "too many URIs; at most %d", CONFIG_MAX_URIS);
    char *text = xstrndup(s, n);
    struct uri u;
    if (cfg_check_uri(x, path, text, &u) < 0) {
        free(text);
        return -1;
    }
    size_t vn = strlen(u.vhost);
    char *kept = xmalloc(n + 1 + vn + 1);
    memcpy(kept, text, n + 1);
    memcpy(kept + n + 1, u.vhost, vn + 1);
    free(text);
    c->uris[c->nuris++] = kept;
    return 0;
}

/* A JSON value that must be one URI string. */
static int add_uri_json(struct ctx *x, struct config *c, const char *path, json_object *v)
{
    const char *s;
    size_t n;
    if (cfg_string(x, path, v, &s, &n) < 0)
        return -1;
    return add_uri(x, c, path, s, n);
}

/* DELAY_BRIDGE_BROKER_URI: comma-separated, spaces around items ignored. */
static int uris_from_env(struct ctx *x, struct config *c, const char *env)
{
    const char *p = env;
    for (int i = 0;; i++) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && *b == ' ')
            b++;
        while (e > b && e[-1] == ' ')
            e--;
        char path[64];
        snprintf(path, sizeof path, "%s (item %d)", ENV_URI, i + 1);
        if (b == e)
            return cfg_fail(x, path, "empty URI in the comma-separated list");
        if (add_uri(x, c, path, b, (size_t)(e - b)) < 0)
            return -1;
        if (!comma)
            break;
        p = comma + 1;
    }
    c->uri_from_env = 1;
    return 0;
}


/*
 * broker.tls (b: the broker object, or NULL). The files are checked only
 * when a URI is amqps://: TLS settings are ignored for amqp:// URIs.
 */
static int parse_tls(struct ctx *x, struct config *c, json_object *b)
{
    struct config_tls *t = &c->tls;
    json_object *o = NULL;
    int have_ca = 0, have_cert = 0, have_key = 0, tls = 0;

    if (b && json_object_object_get_ex(b, "tls", &o) &&
        json_object_get_type(o) != json_type_object) {
        char got[96];
        return cfg_fail(x, "broker.tls", "expected an object, got %s", cfg_show(o, got, sizeof got));
    }
    if (o) {
        if (cfg_check_sect(x, o, "broker.tls", CONFIG_SECT_TLS) < 0 ||
            cfg_read_keys(x, CONFIG_SECT_TLS, o, "broker.tls", c) < 0)
            return -1;
        have_ca = json_object_object_get_ex(o, "ca_file", NULL);
        have_cert = json_object_object_get_ex(o, "cert_file", NULL);
        have_key = json_object_object_get_ex(o, "key_file", NULL);
    }
    if (have_cert != have_key)
        return cfg_fail(x, have_cert ? "broker.tls.key_file" : "broker.tls.cert_file",
                    "set cert_file and key_file together (a client certificate and its "
                    "private key), or neither");
    for (int i = 0; i < c->nuris; i++)
        tls |= strncmp(c->uris[i], "amqps://", 8) == 0;
    if (!tls)
        return 0;
    /* the default CA bundle is checked when the connection loads it */
    if ((have_ca && cfg_check_readable(x, "broker.tls.ca_file", t->ca_file) < 0) ||
        (have_cert && cfg_check_readable(x, "broker.tls.cert_file", t->cert_file) < 0) ||
        (have_key && cfg_check_readable(x, "broker.tls.key_file", t->key_file) < 0))
        return -1;
    return 0;
}

static int parse_broker(struct ctx *x, struct config *c, json_object *root)
{
    json_object *b;
    if (cfg_section(x, root, "broker", CONFIG_SECT_BROKER, &b) < 0)
        return -1;
    const char *env = getenv(ENV_URI);
    int use_env = env && *env;
    if (!b) {
        if (use_env)
            return uris_from_env(x, c, env) < 0 ? -1 : parse_tls(x, c, NULL);
        return cfg_fail(x, "broker.uri", "missing; expected an amqp:// URI or an array of them "
                                     "(or set " ENV_URI ")");
    }

    if (use_env) {
        /* the environment wins; the file's broker.uri is not looked at */
        if (uris_from_env(x, c, env) < 0)
            return -1;
    } else {
        json_object *u;
        char got[96];
        if (!json_object_object_get_ex(b, "uri", &u))
            return cfg_fail(x, "broker.uri", "missing; expected an amqp:// URI or an array of "
                                         "them (or set " ENV_URI ")");
        if (json_object_get_type(u) == json_type_string) {
            if (add_uri_json(x, c, "broker.uri", u) < 0)
                return -1;
        } else if (json_object_get_type(u) == json_type_array) {
            size_t n = json_object_array_length(u);
            if (n == 0 || n > CONFIG_MAX_URIS)
                return cfg_fail(x, "broker.uri", "expected 1..%d URIs, got %zu", CONFIG_MAX_URIS, n);
            for (size_t i = 0; i < n; i++) {
                char path[64];
                snprintf(path, sizeof path, "broker.uri[%zu]", i);
                if (add_uri_json(x, c, path, json_object_array_get_idx(u, i)) < 0)
                    return -1;
            }
        } else {
            return cfg_fail(x, "broker.uri", "expected a string or an array of strings, got %s",
                        cfg_show(u, got, sizeof got));
        }
    }

    if (cfg_read_keys(x, CONFIG_SECT_BROKER, b, "broker", c) < 0)
        return -1;

    if (c->reconnect_min_ms > c->reconnect_max_ms)
        return cfg_fail(x, "broker.reconnect_max_ms",
                    "%u is below reconnect_min_ms (%u); expected max >= min",
                    c->reconnect_max_ms, c->reconnect_min_ms);
    if (c->publish_retry_min_ms > c->publish_retry_max_ms)
        return cfg_fail(x, "broker.publish_retry_max_ms",
                    "%u is below publish_retry_min_ms (%u); expected max >= min",
                    c->publish_retry_max_ms, c->publish_retry_min_ms);
    return parse_tls(x, c, b);
}

static int parse_wal(struct ctx *x, struct config *c, json_object *root)
{
    json_object *w;
    if (cfg_section(x, root, "wal", CONFIG_SECT_WAL, &w) < 0)
        return -1;
    if (!w)
        return cfg_fail(x, "wal.dir", "missing; expected the directory for the write-ahead log");
    /* segment_mb's range is the segment-file log's own, so --check-config agrees with it */
    return cfg_read_keys(x, CONFIG_SECT_WAL, w, "wal", c);
}


/* wal.replicate.stream and lease_queue: each valid, defaulted from instance and stream. */
static int repl_names(struct ctx *x, struct config *c, json_object *o, const char *pre)
{
    struct config_replicate *r = &c->repl;
    char q[96];

    int have = cfg_get_str(x, o, pre, "stream", NONEMPTY, r->stream, CONFIG_NAME_MAX);
    if (have < 0)
        return -1;
    if (!have)
        snprintf(r->stream, sizeof r->stream, "delay-bridge.wal%s%s", c->instance[0] ? "." : "",
                 c->instance);
    else if (cfg_check_repl_name(x, "wal.replicate.stream", r->stream) < 0)
        return -1;
    if ((have = cfg_get_str(x, o, pre, "lease_queue", NONEMPTY, r->lease_queue, CONFIG_NAME_MAX)) < 0)
        return -1;
    size_t n = strlen(r->stream);
    if (have) {
        if (cfg_check_repl_name(x, "wal.replicate.lease_queue", r->lease_queue) < 0)
            return -1;
    } else if (n + 6 > CONFIG_NAME_MAX) {
        return cfg_fail(x, "wal.replicate.lease_queue", "the default, stream + \".lease\", would be "
                    "%zu bytes; at most %d: set lease_queue or shorten stream", n + 6,
                    CONFIG_NAME_MAX);
    } else {
        memcpy(r->lease_queue, r->stream, n);
        memcpy(r->lease_queue + n, ".lease", sizeof ".lease");
    }
    if (strcmp(r->lease_queue, r->stream) == 0)
        return cfg_fail(x, "wal.replicate.lease_queue", "same as stream %s; expected another name "
                    "(the lease is a queue of its own)",
                    cfg_quote(r->stream, strlen(r->stream), q, sizeof q));
    return 0;
}

/* wal.replicate's retention keeps everything since the last completed stream checkpoint. */
static int repl_retention(struct ctx *x, const struct config_replicate *r, uint64_t age_s)
{
    char q[96];
    uint64_t need = 2 * (r->checkpoint_bytes >> 20) + 2 * (r->segment_bytes >> 20);

    if (r->max_bytes != 0 && (r->max_bytes >> 20) < need)
        return cfg_fail(x, "wal.replicate.max_mb", "%llu is too small; must be at least 2 x "
                    "checkpoint_mb + 2 x segment_mb (%llu): the stream must keep everything "
                    "since the last completed stream checkpoint; raise it, or 0 = no size limit",
                    (unsigned long long)(r->max_bytes >> 20), (unsigned long long)need);
    if (r->max_age[0] && r->checkpoint_interval_s == 0)
        return cfg_fail(x, "wal.replicate.checkpoint_interval_s", "must not be 0 when max_age is "
                    "set: checkpoints taken by size alone may lie further apart than max_age, "
                    "and the stream would drop records a rebuild needs");
    need = 2 * (uint64_t)r->checkpoint_interval_s;
    if (r->max_age[0] && age_s < need)
        return cfg_fail(x, "wal.replicate.max_age", "%s (%llu s) is too short; must be at least "
                    "2 x checkpoint_interval_s (%llu s): the stream must keep everything "
                    "since the last completed stream checkpoint",
                    cfg_quote(r->max_age, strlen(r->max_age), q, sizeof q),
                    (unsigned long long)age_s, (unsigned long long)need);
    return 0;
}

/*
 * wal.replicate, after "instance" is known (the default stream name uses
 * it) and before routes (whose ingress queues the names are checked
 * against, in check_repl_routes). Absent: c->repl stays all zero; present,
 * it starts from the schema's defaults.
 */
static int parse_replicate(struct ctx *x, struct config *c, json_object *root)
{
    static const char pre[] = "wal.replicate";
    json_object *w, *o;
    char got[96];
    uint64_t age_s = 0;

    if (!json_object_object_get_ex(root, "wal", &w) ||
        !json_object_object_get_ex(w, "replicate", &o))
        return 0;
    if (json_object_get_type(o) != json_type_object)
        return cfg_fail(x, pre, "expected an object, got %s", cfg_show(o, got, sizeof got));
    if (cfg_check_sect(x, o, pre, CONFIG_SECT_REPL) < 0)
        return -1;
    cfg_defaults(CONFIG_SECT_REPL, c);
    c->repl.enabled = 1;
    /* segment_mb's range: a stream refuses x-stream-max-segment-size-bytes above 3,000,000,000 */
    if (repl_names(x, c, o, pre) < 0 || cfg_read_keys(x, CONFIG_SECT_REPL, o, pre, c) < 0 ||
        cfg_get_max_age(x, o, pre, "max_age", 1, c->repl.max_age, sizeof c->repl.max_age,
                        &age_s) < 0)
        return -1;
    return repl_retention(x, &c->repl, age_s);
}


/*
 * http: the endpoint, on the model of Redis's protected mode. Beyond
 * loopback it needs both the explicit "allow_remote" and a token
 * (DELAY_BRIDGE_HTTP_TOKEN, read from the environment as the broker URI
 * is): with no token anyone who reaches the port could drain, purge and
 * put routes. No opt-out: a test rig that wants no token listens on
 * loopback. allowed_hosts are names (or addresses) a request's Host may
 * carry besides loopback ones; each 1..253 bytes of letters, digits, '.',
 * '-', ':' (IPv6) and brackets, at most CONFIG_HTTP_MAX_HOSTS.
 */
#define ENV_HTTP_TOKEN "DELAY_BRIDGE_HTTP_TOKEN"

static int parse_allowed_hosts(struct ctx *x, struct config *c, json_object *h)
{
    json_object *a;
    char got[96];
    if (!json_object_object_get_ex(h, "allowed_hosts", &a))
        return 0;
    if (json_object_get_type(a) != json_type_array ||
        json_object_array_length(a) > CONFIG_HTTP_MAX_HOSTS)
        return cfg_fail(x, "http.allowed_hosts", "expected an array of at most %d host names "
                        "(e.g. [\"bridge.internal\"]), got %s", CONFIG_HTTP_MAX_HOSTS,
                        cfg_show(a, got, sizeof got));
    for (size_t i = 0; i < json_object_array_length(a); i++) {
        json_object *v = json_object_array_get_idx(a, i);
        char path[48];
        const char *s;
        size_t n;
        snprintf(path, sizeof path, "http.allowed_hosts[%zu]", i);
        if (json_object_get_type(v) != json_type_string)
            return cfg_fail(x, path, "expected a host name, got %s", cfg_show(v, got, sizeof got));
        if (cfg_string(x, path, v, &s, &n) < 0)
            return -1;
        int okc = n >= 1 && n <= 253;
        for (size_t k = 0; okc && k < n; k++)
            okc = isalnum((unsigned char)s[k]) || strchr(".-:[]", s[k]);
        if (!okc)
            return cfg_fail(x, path, "expected a host name or address of 1..253 letters, digits, "
                            "'.', '-' (or an IPv6 address), got %s",
                            cfg_quote(s, n, got, sizeof got));
        memcpy(c->http_allowed_hosts[i], s, n);
        c->http_allowed_hosts[i][n] = '\0';
        c->http_nallowed_hosts++;
    }
    return 0;
}

static int parse_http(struct ctx *x, struct config *c, json_object *root)
{
    json_object *h;
    const char *tok = getenv(ENV_HTTP_TOKEN);
    c->http_token_set = tok && *tok;
    if (cfg_section(x, root, "http", CONFIG_SECT_HTTP, &h) < 0)
        return -1;
    if (!h)
        return 0;
    if (cfg_read_keys(x, CONFIG_SECT_HTTP, h, "http", c) < 0 || parse_allowed_hosts(x, c, h) < 0)
        return -1;
    if (c->http_listen[0] &&
        cfg_parse_listen(c->http_listen, c->http_host, sizeof c->http_host, &c->http_port) < 0) {
        char q[96];
        return cfg_fail(x, "http.listen",
                    "expected \"\" (disabled), a port (loopback), or a numeric address and "
                    "port with port 1..65535 (e.g. \"9800\", \"127.0.0.1:9800\", "
                    "\"[::1]:9800\"), got %s",
                    cfg_quote(c->http_listen, strlen(c->http_listen), q, sizeof q));
    }
    if (c->http_listen[0] && !cfg_is_loopback(c->http_host) && !c->http_allow_remote)
        return cfg_fail(x, "http.listen",
                    "%s is not a loopback address; the endpoint exposes metrics and controls, "
                    "so binding it beyond this host is an explicit choice: set "
                    "\"http\": {\"allow_remote\": true} and a token in " ENV_HTTP_TOKEN,
                    c->http_host);
    if (c->http_listen[0] && !cfg_is_loopback(c->http_host) && !c->http_token_set)
        return cfg_fail(x, "http.listen",
                    "%s is beyond loopback and no token is set: anyone reaching the port could "
                    "drain, purge and change routes; set " ENV_HTTP_TOKEN " (a long random "
                    "secret, e.g. from a Kubernetes Secret), or listen on 127.0.0.1",
                    c->http_host);
    return 0;
}

/* limits: bounds a publisher cannot push past (README, "Bounds on what is held"). */
static int parse_limits(struct ctx *x, struct config *c, json_object *root)
{
    json_object *l;
    if (cfg_section(x, root, "limits", CONFIG_SECT_LIMITS, &l) < 0)
        return -1;
    return l ? cfg_read_keys(x, CONFIG_SECT_LIMITS, l, "limits", c) : 0;
}

static int parse_log(struct ctx *x, struct config *c, json_object *root)
{
    json_object *l;
    if (cfg_section(x, root, "log", CONFIG_SECT_LOG, &l) < 0)
        return -1;
    if (!l)
        return 0;
    char buf[16];
    json_object *v;
    if (!json_object_object_get_ex(l, "level", &v))
        return 0;
    enum log_level lv;
    if (json_object_get_type(v) != json_type_string ||
        (size_t)json_object_get_string_len(v) >= sizeof buf ||
        log_parse_level(json_object_get_string(v), &lv) < 0) {
        char got[96];
        return cfg_fail(x, "log.level", "expected \"debug\", \"info\", \"warn\" or \"error\", got %s",
                    cfg_show(v, got, sizeof got));
    }
    c->log_level = (int)lv;
    return 0;
}


/* "routes_file" (read): "" is WAL_DIR/routes.json, resolved here so that every reader sees one path. */
static int fill_routes_file(struct ctx *x, struct config *c)
{
    char *f = c->routes_file;
    if (f[0])
        return 0;
    size_t n = strlen(c->wal_dir);
    while (n > 1 && c->wal_dir[n - 1] == '/')
        n--;
    if (n + sizeof "/routes.json" > sizeof c->routes_file)
        return cfg_fail(x, "routes_file", "the default, wal.dir + \"/routes.json\", would be %zu "
                        "bytes; at most %zu: set routes_file or shorten wal.dir",
                        n + sizeof "/routes.json" - 1, sizeof c->routes_file - 1);
    snprintf(f, sizeof c->routes_file, "%.*s%s", (int)n, c->wal_dir,
             n == 1 && c->wal_dir[0] == '/' ? "routes.json" : "/routes.json");
    return 0;
}

/* Every default but wal.replicate's, which apply when it is present (parse_replicate). */
static void defaults(struct config *c)
{
    static const enum config_sect sects[] = {CONFIG_SECT_TOP,  CONFIG_SECT_BROKER,
                                             CONFIG_SECT_TLS,  CONFIG_SECT_WAL,
                                             CONFIG_SECT_HTTP, CONFIG_SECT_LOG,
                                             CONFIG_SECT_LIMITS};
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < sizeof sects / sizeof sects[0]; i++)
        cfg_defaults(sects[i], c);
}


int config_parse(struct config *c, const char *json, const char *name, char *err, size_t errlen)
{
    struct ctx x = {.name = name ? name : "config", .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    defaults(c);

    int rc = -1;
    json_object *root = cfg_parse_text(&x, json);
    if (!root)
        goto cleanup;

    if (cfg_check_sect(&x, root, "", CONFIG_SECT_TOP) < 0)
        goto cleanup;
    if (parse_broker(&x, c, root) < 0 || parse_wal(&x, c, root) < 0 ||
        parse_http(&x, c, root) < 0 || parse_log(&x, c, root) < 0 ||
        parse_limits(&x, c, root) < 0 || cfg_read_keys(&x, CONFIG_SECT_TOP, root, "", c) < 0 ||
        fill_routes_file(&x, c) < 0)
        goto cleanup;
    for (const char *p = c->instance; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p)) {
            char q[96]; /* quoted: a control character must not split the line */
            cfg_fail(&x, "instance", "expected letters, digits, '.', '_' or '-' (it appears in "
                 "connection names and metrics labels), got %s",
                 cfg_quote(c->instance, strlen(c->instance), q, sizeof q));
            goto cleanup;
        }
    if (parse_replicate(&x, c, root) < 0 || cfg_parse_templates(&x, c, root) < 0 ||
        cfg_parse_routes(&x, c, root) < 0)
        goto cleanup;
    rc = 0;

cleanup:
    json_object_put(root);
    if (rc < 0)
        config_free(c);
    return rc;
}


/*
 * The file at path, whole and NUL-terminated (malloc'd), its fstat in *st;
 * NULL with the reason reported, *missing set when it does not exist.
 */
static char *read_file(struct ctx *x, const char *path, struct stat *st, int *missing)
{
    *missing = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        /* ENOTDIR: a parent is a file -- for the routes file, a wal.dir that is not a
           directory, which config_check_wal_dir names; no routes file either way */
        *missing = e == ENOENT || e == ENOTDIR;
        cfg_fail(x, NULL, "cannot open: %s", strerror(e));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = xrealloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n > CONFIG_FILE_MAX) {
            cfg_fail(x, NULL, "larger than %u MiB; is this the right file?", CONFIG_FILE_MAX >> 20);
            goto fail;
        }
        if (r == 0) {
            if (ferror(f)) {
                cfg_fail(x, NULL, "cannot read: %s", strerror(errno));
                goto fail;
            }
            break;
        }
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        cfg_fail(x, NULL, "contains a NUL byte; expected a JSON text file");
        goto fail;
    }
    if (fstat(fileno(f), st) < 0)
        memset(st, 0, sizeof *st);
    fclose(f);
    return buf;
fail:
    free(buf);
    fclose(f);
    return NULL;
}

/* config_load(), and with store the routes file after it; *text (when not NULL) the file's text. */
static int load(struct config *c, const char *path, int store, char **text, char *err,
                size_t errlen)
{
    struct ctx x = {.name = path, .err = err, .errlen = errlen};
    struct stat st;
    int missing, shadowed;

    memset(c, 0, sizeof *c);
    if (err && errlen)
        err[0] = '\0';
    char *buf = read_file(&x, path, &st, &missing);
    if (!buf || config_parse(c, buf, path, err, errlen) < 0) {
        free(buf);
        return -1;
    }
    cfg_warn_loaded(c, path, &st);
    if (store) {
        struct ctx y = {.name = c->routes_file, .err = err, .errlen = errlen};
        char *routes = read_file(&y, c->routes_file, &st, &missing);
        if ((!routes && !missing) ||
            (routes && cfg_add_routes(c, routes, c->routes_file, &shadowed, 1, err, errlen) < 0)) {
            free(routes);
            free(buf);
            config_free(c);
            return -1;
        }
        free(routes);
        if (missing && err && errlen)
            err[0] = '\0'; /* no routes file yet: none put */
    }
    if (text)
        *text = buf;
    else
        free(buf);
    return 0;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
    return load(c, path, 0, NULL, err, errlen);
}

int config_load_all(struct config *c, const char *path, char **text, char *err, size_t errlen)
{
    return load(c, path, 1, text, err, errlen);
}


void config_free(struct config *c)
{
    if (!c)
        return;
    for (int i = 0; i < CONFIG_MAX_URIS; i++) {
        free(c->uris[i]);
        c->uris[i] = NULL;
    }
    for (int i = 0; c->routes && i < c->nroutes; i++)
        cfg_free_route_retry(&c->routes[i]);
    free(c->routes);
    for (int i = 0; c->templates && i < c->ntemplates; i++)
        free(c->templates[i].json);
    free(c->templates);
    memset(c, 0, sizeof *c);
}
