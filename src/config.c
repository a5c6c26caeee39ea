/*
 * config.c -- read the JSON configuration into struct config.
 *
 * json-c parses the file in strict mode (no comments, no trailing commas,
 * nothing after the top-level object); then one walk per section copies
 * each key into the plain struct, checking its type and range as it goes,
 * and stops at the first problem. Every message is one line:
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
 *   - loops: a held message is republished with a negative x-delay, and an
 *     invalid one keeps its x-delay; if a route's target (or dead-letter
 *     exchange) is the ingress exchange of a route that leads back, the
 *     message would circulate for ever. Routes are followed the way a
 *     message would go: with a valid delay along target_exchange, with an
 *     invalid one along dead_letter_exchange when invalid_delay is
 *     "dead-letter", else target_exchange. Loops through exchange-to-exchange
 *     bindings on the broker are out of sight here.
 *
 * Ranges the header leaves open, chosen here:
 *   broker.heartbeat_s 0..65535 (AMQP short); connect_timeout_ms,
 *   reconnect_*_ms, publish_retry_*_ms 1..2^32-1; shutdown_timeout_ms
 *   0..2^32-1; wal.max_message_bytes 1..536870912 (RabbitMQ's own ceiling,
 *   well under WALREC_MAX_PAYLOAD); wal.checkpoint_interval_s 0 (off)..604800;
 *   wal.checkpoint_min_mb 1..1048576; wal.replicate.max_age at most 9
 *   digits (its seconds fit in 64 bits even in years); http.listen is ""
 *   (off) by default, else host:port with IPv6 hosts in brackets
 *   ("[::1]:9187").
 *
 * json-c keeps the last of two equal keys in one object, so a duplicate key
 * is not reported.
 */
#include "delay-bridge/config.h"

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

#include "delay-bridge/log.h"
#include "delay-bridge/uri.h"
#include "delay-bridge/wal.h"
#include "delay-bridge/xalloc.h"

#define CONFIG_FILE_MAX (16u << 20)
#define ENV_URI "DELAY_BRIDGE_BROKER_URI"

struct ctx {
    const char *name;
    char *err;
    size_t errlen;
};

static int fail(struct ctx *x, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(struct ctx *x, const char *path, const char *fmt, ...)
{
    if (!x->err || x->errlen == 0)
        return -1;
    int n = path && *path ? snprintf(x->err, x->errlen, "%s: %s: ", x->name, path)
                          : snprintf(x->err, x->errlen, "%s: ", x->name);
    if (n >= 0 && (size_t)n < x->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->err + n, x->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* s (n bytes) as a JSON string literal, cut with "..." to fit out. */
static const char *quote(const char *s, size_t n, char *out, size_t outlen)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0, max = outlen - 5; /* room for "...\"" and NUL */
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[6];
        size_t k = 0;
        if (ch == '"' || ch == '\\') {
            e[k++] = '\\';
            e[k++] = (char)ch;
        } else if (ch < 0x20 || ch == 0x7f) {
            e[k++] = '\\';
            e[k++] = 'u';
            e[k++] = '0';
            e[k++] = '0';
            e[k++] = hex[ch >> 4];
            e[k++] = hex[ch & 15];
        } else {
            e[k++] = (char)ch;
        }
        if (o + k > max) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(out + o, e, k);
        o += k;
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

/* A JSON value as a person would write it, for "got ..." in messages. */
static const char *show(json_object *v, char *out, size_t outlen)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return json_object_get_boolean(v) ? "true" : "false";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string:
        return quote(json_object_get_string(v), (size_t)json_object_get_string_len(v), out,
                     outlen);
    case json_type_int:
        /* json-c clamps what does not fit in 64 bits */
        if (json_object_get_uint64(v) == UINT64_MAX || json_object_get_int64(v) == INT64_MIN)
            return "a number out of range";
        snprintf(out, outlen, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return out;
    default:
        snprintf(out, outlen, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        return out;
    }
}

/* Refuse keys of obj not in allowed (NULL-terminated). */
static int check_keys(struct ctx *x, json_object *obj, const char *prefix,
                      const char *const *allowed)
{
    json_object_object_foreach(obj, key, val) {
        (void)val;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++) {
            if (strcmp(key, *a) == 0) {
                ok = 1;
                break;
            }
        }
        if (ok)
            continue;
        char list[512], q[96], path[320];
        size_t o = 0;
        list[0] = '\0';
        for (const char *const *a = allowed; *a && o < sizeof list; a++) {
            int n = snprintf(list + o, sizeof list - o, "%s%s", a == allowed ? "" : ", ", *a);
            if (n < 0)
                break;
            o += (size_t)n;
        }
        quote(key, strlen(key), q, sizeof q);
        snprintf(path, sizeof path, "%s%s%.*s", prefix, *prefix ? "." : "",
                 (int)strlen(q) - 2, q + 1);
        return fail(x, path, "unknown key %s; expected one of: %s", q, list);
    }
    return 0;
}

static void join(char *out, size_t outlen, const char *prefix, const char *key)
{
    snprintf(out, outlen, "%s%s%s", prefix, *prefix ? "." : "", key);
}

/* Optional integer key in lo..hi (hi <= INT64_MAX). Absent: *out untouched. */
static int get_int(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, int64_t hi, uint64_t *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    char path[320], got[96];
    join(path, sizeof path, prefix, key);
    if (json_object_get_type(v) == json_type_int) {
        int64_t i = json_object_get_int64(v);
        int big = json_object_get_uint64(v) > (uint64_t)INT64_MAX;
        if (!big && i >= lo && i <= hi) {
            *out = (uint64_t)i;
            return 0;
        }
    }
    return fail(x, path, "expected an integer %lld..%lld, got %s", (long long)lo,
                (long long)hi, show(v, got, sizeof got));
}

/* get_int() for a uint32_t field that already holds its default. */
static int get_u32(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int64_t lo, uint32_t *field)
{
    uint64_t v = *field;

    if (get_int(x, obj, prefix, key, lo, UINT32_MAX, &v) < 0)
        return -1;
    *field = (uint32_t)v;
    return 0;
}

static int get_bool(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                    int *out)
{
    json_object *v;
    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    if (json_object_get_type(v) == json_type_boolean) {
        *out = json_object_get_boolean(v) ? 1 : 0;
        return 0;
    }
    char path[320], got[96];
    join(path, sizeof path, prefix, key);
    return fail(x, path, "expected true or false, got %s", show(v, got, sizeof got));
}

enum { OPTIONAL = 0, REQUIRED = 1, NONEMPTY = 2 };

/*
 * String key into buf (at most max bytes). REQUIRED: must be present;
 * NONEMPTY: must not be "". Returns 1 if present, 0 if absent, -1 on error.
 */
static int get_str(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                   int flags, char *buf, size_t max)
{
    json_object *v;
    char path[320], got[96];
    join(path, sizeof path, prefix, key);
    if (!json_object_object_get_ex(obj, key, &v)) {
        if (flags & REQUIRED)
            return fail(x, path, "missing; expected a string");
        return 0;
    }
    if (json_object_get_type(v) != json_type_string)
        return fail(x, path, "expected a string, got %s", show(v, got, sizeof got));
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (strlen(s) != n)
        return fail(x, path, "must not contain a NUL character (\\u0000)");
    if (n == 0 && (flags & NONEMPTY))
        return fail(x, path, "must not be empty");
    if (n > max)
        return fail(x, path, "too long (%zu bytes); at most %zu bytes", n, max);
    memcpy(buf, s, n + 1);
    return 1;
}

/*
 * An optional string key of o that must be one of choices (NULL-terminated):
 * *idx is its index when present. expect lists them for the error message.
 */
static int get_choice(struct ctx *x, json_object *o, const char *prefix, const char *key,
                      const char *const *choices, const char *expect, int *idx)
{
    char buf[64], path[300], q[96];
    int have = get_str(x, o, prefix, key, OPTIONAL, buf, sizeof buf - 1);

    if (have <= 0)
        return have;
    for (int i = 0; choices[i]; i++)
        if (strcmp(buf, choices[i]) == 0) {
            *idx = i;
            return 1;
        }
    snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
    return fail(x, path, "expected %s, got %s", expect, quote(buf, strlen(buf), q, sizeof q));
}

/* One broker URI: amqp:// or amqps://, parsed by uri.c (as the connection will be). */
static int check_uri(struct ctx *x, const char *path, const char *uri)
{
    char masked[160], q[200];
    log_mask_uri(uri, masked, sizeof masked);
    quote(masked, strlen(masked), q, sizeof q);
    if (*uri == '\0')
        return fail(x, path, "must not be empty; expected amqp://user:password@host:port/vhost");
    if (strncmp(uri, "amqp://", 7) != 0 && strncmp(uri, "amqps://", 8) != 0)
        return fail(x, path, "expected a URI starting with amqp:// or amqps://, got %s", q);
    struct uri u;
    char why[160];
    if (uri_parse(uri, &u, why, sizeof why) < 0)
        return fail(x, path,
                    "not a valid AMQP URI: %s: %s; expected amqp[s]://user:password@host:port/vhost "
                    "(port 1..65535, '/' in the vhost written %%2f)",
                    q, why);
    return 0;
}

static int add_uri(struct ctx *x, struct config *c, const char *path, const char *s, size_t n)
{
    if (c->nuris >= CONFIG_MAX_URIS)
        return fail(x, path, "too many URIs; at most %d", CONFIG_MAX_URIS);
    char *u = xstrndup(s, n);
    if (check_uri(x, path, u) < 0) {
        free(u);
        return -1;
    }
    c->uris[c->nuris++] = u;
    return 0;
}

/* A JSON value that must be one URI string. */
static int add_uri_json(struct ctx *x, struct config *c, const char *path, json_object *v)
{
    char got[96];
    if (json_object_get_type(v) != json_type_string)
        return fail(x, path, "expected a string, got %s", show(v, got, sizeof got));
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (strlen(s) != n)
        return fail(x, path, "must not contain a NUL character (\\u0000)");
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
            return fail(x, path, "empty URI in the comma-separated list");
        if (add_uri(x, c, path, b, (size_t)(e - b)) < 0)
            return -1;
        if (!comma)
            break;
        p = comma + 1;
    }
    c->uri_from_env = 1;
    return 0;
}

/* The optional section key of root: an object whose keys are all in keys, or absent (*out NULL). */
static int section(struct ctx *x, json_object *root, const char *key, const char *const *keys,
                   json_object **out)
{
    *out = NULL;
    json_object *v;
    if (!json_object_object_get_ex(root, key, &v))
        return 0;
    if (json_object_get_type(v) != json_type_object) {
        char got[96];
        return fail(x, key, "expected an object, got %s", show(v, got, sizeof got));
    }
    if (check_keys(x, v, key, keys) < 0)
        return -1;
    *out = v;
    return 0;
}

/* The file named by key (a path) opens for reading and is not a directory. */
static int check_readable(struct ctx *x, const char *path, const char *file)
{
    char q[200];
    int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    int e = errno;
    struct stat st;

    if (fd >= 0) {
        e = fstat(fd, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
        close(fd);
    }
    if (e == 0)
        return 0;
    return fail(x, path, "cannot read %s: %s; expected a readable PEM file",
                quote(file, strlen(file), q, sizeof q), strerror(e));
}

/*
 * broker.tls (b: the broker object, or NULL). The files are checked only
 * when a URI is amqps://: TLS settings are ignored for amqp:// URIs.
 */
static int parse_tls(struct ctx *x, struct config *c, json_object *b)
{
    static const char *const keys[] = { "ca_file", "cert_file", "key_file", "verify_hostname",
                                        NULL };
    struct config_tls *t = &c->tls;
    json_object *o = NULL;
    int have_ca = 0, have_cert = 0, have_key = 0, tls = 0;

    if (b && json_object_object_get_ex(b, "tls", &o) &&
        json_object_get_type(o) != json_type_object) {
        char got[96];
        return fail(x, "broker.tls", "expected an object, got %s", show(o, got, sizeof got));
    }
    if (o) {
        if (check_keys(x, o, "broker.tls", keys) < 0)
            return -1;
        if ((have_ca = get_str(x, o, "broker.tls", "ca_file", NONEMPTY, t->ca_file,
                               sizeof t->ca_file - 1)) < 0 ||
            (have_cert = get_str(x, o, "broker.tls", "cert_file", NONEMPTY, t->cert_file,
                                 sizeof t->cert_file - 1)) < 0 ||
            (have_key = get_str(x, o, "broker.tls", "key_file", NONEMPTY, t->key_file,
                                sizeof t->key_file - 1)) < 0)
            return -1;
        if (get_bool(x, o, "broker.tls", "verify_hostname", &t->verify_hostname) < 0)
            return -1;
    }
    if (have_cert != have_key)
        return fail(x, have_cert ? "broker.tls.key_file" : "broker.tls.cert_file",
                    "set cert_file and key_file together (a client certificate and its "
                    "private key), or neither");
    for (int i = 0; i < c->nuris; i++)
        tls |= strncmp(c->uris[i], "amqps://", 8) == 0;
    if (!tls)
        return 0;
    /* the default CA bundle is checked when the connection loads it */
    if ((have_ca && check_readable(x, "broker.tls.ca_file", t->ca_file) < 0) ||
        (have_cert && check_readable(x, "broker.tls.cert_file", t->cert_file) < 0) ||
        (have_key && check_readable(x, "broker.tls.key_file", t->key_file) < 0))
        return -1;
    return 0;
}

static int parse_broker(struct ctx *x, struct config *c, json_object *root)
{
    static const char *const keys[] = { "uri", "heartbeat_s", "connect_timeout_ms",
                                        "reconnect_min_ms", "reconnect_max_ms",
                                        "publish_retry_min_ms", "publish_retry_max_ms", "tls",
                                        NULL };
    json_object *b;
    if (section(x, root, "broker", keys, &b) < 0)
        return -1;
    const char *env = getenv(ENV_URI);
    int use_env = env && *env;
    if (!b) {
        if (use_env)
            return uris_from_env(x, c, env) < 0 ? -1 : parse_tls(x, c, NULL);
        return fail(x, "broker.uri", "missing; expected an amqp:// URI or an array of them "
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
            return fail(x, "broker.uri", "missing; expected an amqp:// URI or an array of "
                                         "them (or set " ENV_URI ")");
        if (json_object_get_type(u) == json_type_string) {
            if (add_uri_json(x, c, "broker.uri", u) < 0)
                return -1;
        } else if (json_object_get_type(u) == json_type_array) {
            size_t n = json_object_array_length(u);
            if (n == 0 || n > CONFIG_MAX_URIS)
                return fail(x, "broker.uri", "expected 1..%d URIs, got %zu", CONFIG_MAX_URIS, n);
            for (size_t i = 0; i < n; i++) {
                char path[64];
                snprintf(path, sizeof path, "broker.uri[%zu]", i);
                if (add_uri_json(x, c, path, json_object_array_get_idx(u, i)) < 0)
                    return -1;
            }
        } else {
            return fail(x, "broker.uri", "expected a string or an array of strings, got %s",
                        show(u, got, sizeof got));
        }
    }

    uint64_t v;
    v = c->heartbeat_s;
    if (get_int(x, b, "broker", "heartbeat_s", 0, 65535, &v) < 0)
        return -1;
    c->heartbeat_s = (uint16_t)v;
    if (get_u32(x, b, "broker", "connect_timeout_ms", 1, &c->connect_timeout_ms) < 0)
        return -1;
    if (get_u32(x, b, "broker", "reconnect_min_ms", 1, &c->reconnect_min_ms) < 0)
        return -1;
    if (get_u32(x, b, "broker", "reconnect_max_ms", 1, &c->reconnect_max_ms) < 0)
        return -1;
    if (get_u32(x, b, "broker", "publish_retry_min_ms", 1, &c->publish_retry_min_ms) < 0)
        return -1;
    if (get_u32(x, b, "broker", "publish_retry_max_ms", 1, &c->publish_retry_max_ms) < 0)
        return -1;

    if (c->reconnect_min_ms > c->reconnect_max_ms)
        return fail(x, "broker.reconnect_max_ms",
                    "%u is below reconnect_min_ms (%u); expected max >= min",
                    c->reconnect_max_ms, c->reconnect_min_ms);
    if (c->publish_retry_min_ms > c->publish_retry_max_ms)
        return fail(x, "broker.publish_retry_max_ms",
                    "%u is below publish_retry_min_ms (%u); expected max >= min",
                    c->publish_retry_max_ms, c->publish_retry_min_ms);
    return parse_tls(x, c, b);
}

static int parse_wal(struct ctx *x, struct config *c, json_object *root)
{
    static const char *const keys[] = { "dir", "segment_mb", "fsync", "max_message_bytes",
                                        "checkpoint_interval_s", "checkpoint_min_mb",
                                        "replicate", NULL };
    json_object *w;
    if (section(x, root, "wal", keys, &w) < 0)
        return -1;
    if (!w)
        return fail(x, "wal.dir", "missing; expected the directory for the write-ahead log");
    if (get_str(x, w, "wal", "dir", REQUIRED | NONEMPTY, c->wal_dir, sizeof c->wal_dir - 1) < 0)
        return -1;
    uint64_t v = c->segment_bytes >> 20;
    /* the segment-file log's own limits, so --check-config agrees with it */
    if (get_int(x, w, "wal", "segment_mb", 1, WAL_MAX_SEGMENT_BYTES >> 20, &v) < 0)
        return -1;
    c->segment_bytes = v << 20;
    if (get_bool(x, w, "wal", "fsync", &c->fsync) < 0)
        return -1;
    /* RabbitMQ's own ceiling for max_message_size is 512 MiB */
    v = c->max_message_bytes;
    if (get_int(x, w, "wal", "max_message_bytes", 1, 512u << 20, &v) < 0)
        return -1;
    c->max_message_bytes = (uint32_t)v;
    v = c->checkpoint_interval_s;
    if (get_int(x, w, "wal", "checkpoint_interval_s", 0, 7 * 86400, &v) < 0)
        return -1;
    c->checkpoint_interval_s = (uint32_t)v;
    v = c->checkpoint_min_mb;
    if (get_int(x, w, "wal", "checkpoint_min_mb", 1, 1u << 20, &v) < 0)
        return -1;
    c->checkpoint_min_mb = (uint32_t)v;
    return 0;
}

/* A stream or queue name of wal.replicate: [A-Za-z0-9._:-], not "amq.". */
static int check_repl_name(struct ctx *x, const char *path, const char *s)
{
    char q[96];

    if (strncmp(s, "amq.", 4) == 0)
        return fail(x, path, "%s: the \"amq.\" prefix is reserved by RabbitMQ for its own "
                    "queues; choose another name", quote(s, strlen(s), q, sizeof q));
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-:", *p))
            return fail(x, path, "%s: only letters, digits, '.', '_', '-' and ':' are allowed",
                        quote(s, strlen(s), q, sizeof q));
    return 0;
}

/*
 * wal.replicate.max_age: "" or RabbitMQ's x-max-age syntax, 1..9 digits
 * and a unit (Y 365 days, M 30 days, D, h, m, s). Seconds in *secs.
 */
static int parse_max_age(const char *s, uint64_t *secs)
{
    static const char units[] = "YMDhms";
    static const uint64_t unit_s[] = { 365 * 86400, 30 * 86400, 86400, 3600, 60, 1 };
    size_t n = strlen(s), i;
    uint64_t v = 0;

    if (n < 2 || n > 10 || !strchr(units, s[n - 1]))
        return -1;
    for (i = 0; i + 1 < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *secs = v * unit_s[strchr(units, s[n - 1]) - units];
    return 0;
}

/*
 * wal.replicate, after "instance" is known (the default stream name uses
 * it) and before routes (whose ingress queues the names are checked
 * against, in check_repl_routes). Absent: c->repl stays all zero.
 */
static int parse_replicate(struct ctx *x, struct config *c, json_object *root)
{
    static const char *const keys[] = { "stream", "lease_queue", "max_mb", "max_age",
                                        "segment_mb", "checkpoint_mb", "checkpoint_interval_s",
                                        "batch_kb", "confirm_timeout_ms", "lease_renew_ms", NULL };
    static const char pre[] = "wal.replicate";
    struct config_replicate *r = &c->repl;
    json_object *w, *o, *v;
    char got[96], q[96];
    uint64_t u, age_s = 0;

    if (!json_object_object_get_ex(root, "wal", &w) ||
        !json_object_object_get_ex(w, "replicate", &o))
        return 0;
    if (json_object_get_type(o) != json_type_object)
        return fail(x, pre, "expected an object, got %s", show(o, got, sizeof got));
    if (check_keys(x, o, pre, keys) < 0)
        return -1;
    r->enabled = 1;

    int have = get_str(x, o, pre, "stream", NONEMPTY, r->stream, CONFIG_NAME_MAX);
    if (have < 0)
        return -1;
    if (!have)
        snprintf(r->stream, sizeof r->stream, "delay-bridge.wal%s%s", c->instance[0] ? "." : "",
                 c->instance);
    else if (check_repl_name(x, "wal.replicate.stream", r->stream) < 0)
        return -1;
    if ((have = get_str(x, o, pre, "lease_queue", NONEMPTY, r->lease_queue, CONFIG_NAME_MAX)) < 0)
        return -1;
    size_t n = strlen(r->stream);
    if (have) {
        if (check_repl_name(x, "wal.replicate.lease_queue", r->lease_queue) < 0)
            return -1;
    } else if (n + 6 > CONFIG_NAME_MAX) {
        return fail(x, "wal.replicate.lease_queue", "the default, stream + \".lease\", would be "
                    "%zu bytes; at most %d: set lease_queue or shorten stream", n + 6,
                    CONFIG_NAME_MAX);
    } else {
        memcpy(r->lease_queue, r->stream, n);
        memcpy(r->lease_queue + n, ".lease", sizeof ".lease");
    }
    if (strcmp(r->lease_queue, r->stream) == 0)
        return fail(x, "wal.replicate.lease_queue", "same as stream %s; expected another name "
                    "(the lease is a queue of its own)",
                    quote(r->stream, strlen(r->stream), q, sizeof q));

    u = 20480;
    if (get_int(x, o, pre, "max_mb", 0, 16777216, &u) < 0)
        return -1;
    r->max_bytes = u << 20;

    if (json_object_object_get_ex(o, "max_age", &v)) {
        const char *s = json_object_get_string(v);
        if (json_object_get_type(v) != json_type_string ||
            strlen(s) != (size_t)json_object_get_string_len(v) ||
            (*s && parse_max_age(s, &age_s) < 0))
            return fail(x, "wal.replicate.max_age", "expected \"\" (none) or 1..9 digits and a "
                        "unit Y, M, D, h, m or s (RabbitMQ's x-max-age, e.g. \"7D\"), got %s",
                        show(v, got, sizeof got));
        memcpy(r->max_age, s, strlen(s) + 1); /* at most 10 bytes */
    }

    u = 64;
    /* a stream refuses x-stream-max-segment-size-bytes above 3,000,000,000 */
    if (get_int(x, o, pre, "segment_mb", 1, CONFIG_STREAM_SEGMENT_MAX_MB, &u) < 0)
        return -1;
    r->segment_bytes = u << 20;
    u = 1024;
    if (get_int(x, o, pre, "checkpoint_mb", 1, 1048576, &u) < 0)
        return -1;
    r->checkpoint_bytes = u << 20;
    u = 3600;
    if (get_int(x, o, pre, "checkpoint_interval_s", 0, 31536000, &u) < 0)
        return -1;
    r->checkpoint_interval_s = (uint32_t)u;
    u = 1024;
    if (get_int(x, o, pre, "batch_kb", 4, 65536, &u) < 0)
        return -1;
    r->batch_bytes = (uint32_t)u << 10;
    u = 10000;
    if (get_int(x, o, pre, "confirm_timeout_ms", 100, 600000, &u) < 0)
        return -1;
    r->confirm_timeout_ms = (uint32_t)u;
    u = 10000;
    if (get_int(x, o, pre, "lease_renew_ms", 100, 600000, &u) < 0)
        return -1;
    r->lease_renew_ms = (uint32_t)u;

    /* retention: everything since the last completed stream checkpoint stays */
    uint64_t need = 2 * (r->checkpoint_bytes >> 20) + 2 * (r->segment_bytes >> 20);
    if (r->max_bytes != 0 && (r->max_bytes >> 20) < need)
        return fail(x, "wal.replicate.max_mb", "%llu is too small; must be at least 2 x "
                    "checkpoint_mb + 2 x segment_mb (%llu): the stream must keep everything "
                    "since the last completed stream checkpoint; raise it, or 0 = no size limit",
                    (unsigned long long)(r->max_bytes >> 20), (unsigned long long)need);
    if (r->max_age[0] && r->checkpoint_interval_s == 0)
        return fail(x, "wal.replicate.checkpoint_interval_s", "must not be 0 when max_age is "
                    "set: checkpoints taken by size alone may lie further apart than max_age, "
                    "and the stream would drop records a rebuild needs");
    need = 2 * (uint64_t)r->checkpoint_interval_s;
    if (r->max_age[0] && age_s < need)
        return fail(x, "wal.replicate.max_age", "%s (%llu s) is too short; must be at least "
                    "2 x checkpoint_interval_s (%llu s): the stream must keep everything "
                    "since the last completed stream checkpoint",
                    quote(r->max_age, strlen(r->max_age), q, sizeof q),
                    (unsigned long long)age_s, (unsigned long long)need);
    return 0;
}

/* wal.replicate's stream and lease queue are not any route's ingress queue. */
static int check_share_keys(struct ctx *x, const struct config *c);

static int check_repl_routes(struct ctx *x, const struct config *c)
{
    char q[96];

    if (!c->repl.enabled)
        return 0;
    for (int i = 0; i < c->nroutes; i++) {
        const char *iq = c->routes[i].ingress_queue;
        int s = strcmp(iq, c->repl.stream) == 0;
        if (s || strcmp(iq, c->repl.lease_queue) == 0)
            return fail(x, s ? "wal.replicate.stream" : "wal.replicate.lease_queue",
                        "%s is also routes[%d].ingress_queue; expected a name no route uses",
                        quote(iq, strlen(iq), q, sizeof q), i);
    }
    return 0;
}

/*
 * http.listen: "" (off), "PORT" (loopback), "IPv4:PORT" or "[IPv6]:PORT",
 * numeric addresses only (no name lookup at start). Fills host and port.
 */
static int parse_listen(const char *s, char *host, size_t hostlen, uint16_t *port)
{
    const char *colon = strrchr(s, ':'), *p;
    long v = 0;

    if (!colon) {
        snprintf(host, hostlen, "127.0.0.1");
        p = s;
    } else {
        size_t n = (size_t)(colon - s);
        if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
            s++;
            n -= 2;
        } else if (memchr(s, ':', n)) {
            return -1; /* a bare IPv6 address needs brackets */
        }
        if (n == 0 || n >= hostlen)
            return -1;
        memcpy(host, s, n);
        host[n] = '\0';
        struct in6_addr a6;
        struct in_addr a4;
        if (inet_pton(AF_INET, host, &a4) != 1 && inet_pton(AF_INET6, host, &a6) != 1)
            return -1;
        p = colon + 1;
    }
    if (*p == '\0' || strlen(p) > 5)
        return -1;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        v = v * 10 + (*p - '0');
    }
    if (v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static int is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0;
}

static int parse_http(struct ctx *x, struct config *c, json_object *root)
{
    static const char *const keys[] = { "listen", "allow_remote", NULL };
    json_object *h;
    if (section(x, root, "http", keys, &h) < 0)
        return -1;
    if (!h)
        return 0;
    if (get_str(x, h, "http", "listen", OPTIONAL, c->http_listen, sizeof c->http_listen - 1) < 0)
        return -1;
    if (get_bool(x, h, "http", "allow_remote", &c->http_allow_remote) < 0)
        return -1;
    if (c->http_listen[0] &&
        parse_listen(c->http_listen, c->http_host, sizeof c->http_host, &c->http_port) < 0) {
        char q[96];
        return fail(x, "http.listen",
                    "expected \"\" (disabled), a port (loopback), or a numeric address and "
                    "port with port 1..65535 (e.g. \"9800\", \"127.0.0.1:9800\", "
                    "\"[::1]:9800\"), got %s",
                    quote(c->http_listen, strlen(c->http_listen), q, sizeof q));
    }
    if (c->http_listen[0] && !is_loopback(c->http_host) && !c->http_allow_remote)
        return fail(x, "http.listen",
                    "%s is not a loopback address; the endpoint exposes metrics and controls, "
                    "so binding it beyond this host is an explicit choice: set "
                    "\"http\": {\"allow_remote\": true} (and a DELAY_BRIDGE_HTTP_TOKEN)",
                    c->http_host);
    return 0;
}

static int parse_log(struct ctx *x, struct config *c, json_object *root)
{
    static const char *const keys[] = { "level", NULL };
    json_object *l;
    if (section(x, root, "log", keys, &l) < 0)
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
        return fail(x, "log.level", "expected \"debug\", \"info\", \"warn\" or \"error\", got %s",
                    show(v, got, sizeof got));
    }
    c->log_level = (int)lv;
    return 0;
}

static int valid_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++) {
        char ch = *s;
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

static int reserved(const char *s)
{
    return strncmp(s, "amq.", 4) == 0;
}

static int parse_route(struct ctx *x, struct config_route *r, json_object *o, int idx)
{
    static const char *const keys[] = {
        "name", "ingress_exchange", "ingress_queue", "target_exchange", "queue_type",
        "declare_target", "target_type", "prefetch", "max_inflight", "max_delay_ms",
        "invalid_delay", "dead_letter_exchange", "unroutable_exchange",
        "single_active_consumer", "share_keys", NULL
    };
    char pre[32], path[64], got[96], q[96];
    snprintf(pre, sizeof pre, "routes[%d]", idx);
    if (json_object_get_type(o) != json_type_object)
        return fail(x, pre, "expected an object, got %s", show(o, got, sizeof got));
    if (check_keys(x, o, pre, keys) < 0)
        return -1;

    /* defaults */
    r->queue_type = QUEUE_CLASSIC;
    r->declare_target = 0;
    snprintf(r->target_type, sizeof r->target_type, "direct");
    r->prefetch = 1000;
    r->max_inflight = 1000;
    r->max_delay_ms = 4294967295u;
    r->invalid_delay = INVALID_DELAY_PUBLISH;
    r->dead_letter_exchange[0] = '\0';
    r->unroutable_exchange[0] = '\0';

    if (get_str(x, o, pre, "name", REQUIRED | NONEMPTY, r->name, CONFIG_NAME_MAX) < 0)
        return -1;
    if (!valid_name(r->name)) {
        snprintf(path, sizeof path, "%s.name", pre);
        return fail(x, path, "%s: only letters, digits, '.', '_' and '-' are allowed",
                    quote(r->name, strlen(r->name), q, sizeof q));
    }
    if (get_str(x, o, pre, "ingress_exchange", REQUIRED | NONEMPTY, r->ingress_exchange,
                CONFIG_NAME_MAX) < 0)
        return -1;
    if (get_str(x, o, pre, "ingress_queue", REQUIRED | NONEMPTY, r->ingress_queue,
                CONFIG_NAME_MAX) < 0)
        return -1;
    if (get_str(x, o, pre, "target_exchange", REQUIRED, r->target_exchange, CONFIG_NAME_MAX) < 0)
        return -1;

    static const char *const queue_types[] = { "classic", "quorum", NULL };
    int choice = -1;
    if (get_choice(x, o, pre, "queue_type", queue_types, "\"classic\" or \"quorum\"", &choice) < 0)
        return -1;
    if (choice >= 0)
        r->queue_type = choice == 0 ? QUEUE_CLASSIC : QUEUE_QUORUM;

    if (get_bool(x, o, pre, "declare_target", &r->declare_target) < 0)
        return -1;
    r->single_active_consumer = 0;
    if (get_bool(x, o, pre, "single_active_consumer", &r->single_active_consumer) < 0)
        return -1;
    r->share_keys = 0;
    if (get_bool(x, o, pre, "share_keys", &r->share_keys) < 0)
        return -1;

    static const char *const types[] = { "direct", "topic", "fanout", "headers", NULL };
    choice = -1;
    if (get_choice(x, o, pre, "target_type", types,
                   "\"direct\", \"topic\", \"fanout\" or \"headers\"", &choice) < 0)
        return -1;
    if (choice >= 0)
        memcpy(r->target_type, types[choice], strlen(types[choice]) + 1);

    uint64_t v = r->prefetch;
    if (get_int(x, o, pre, "prefetch", 1, 65535, &v) < 0)
        return -1;
    r->prefetch = (uint16_t)v;
    v = r->max_inflight;
    if (get_int(x, o, pre, "max_inflight", 1, 1000000, &v) < 0)
        return -1;
    r->max_inflight = (uint32_t)v;
    v = r->max_delay_ms;
    if (get_int(x, o, pre, "max_delay_ms", 1, INT64_MAX, &v) < 0)
        return -1;
    r->max_delay_ms = v;

    static const char *const policies[] = { "publish", "dead-letter", NULL };
    choice = -1;
    if (get_choice(x, o, pre, "invalid_delay", policies, "\"publish\" or \"dead-letter\"",
                   &choice) < 0)
        return -1;
    if (choice >= 0)
        r->invalid_delay = choice == 0 ? INVALID_DELAY_PUBLISH : INVALID_DELAY_DEAD_LETTER;
    if (get_str(x, o, pre, "dead_letter_exchange", OPTIONAL, r->dead_letter_exchange,
                CONFIG_NAME_MAX) < 0)
        return -1;
    if (get_str(x, o, pre, "unroutable_exchange", OPTIONAL, r->unroutable_exchange,
                CONFIG_NAME_MAX) < 0)
        return -1;
    if (r->unroutable_exchange[0] && (strcmp(r->unroutable_exchange, r->ingress_exchange) == 0 ||
                                      strcmp(r->unroutable_exchange, r->target_exchange) == 0)) {
        snprintf(path, sizeof path, "%s.unroutable_exchange", pre);
        return fail(x, path, "must differ from ingress_exchange and target_exchange: an "
                             "unroutable message would come back or bounce again");
    }

    /* rules between keys of one route */
    if (reserved(r->ingress_exchange)) {
        snprintf(path, sizeof path, "%s.ingress_exchange", pre);
        return fail(x, path, "the \"amq.\" prefix is reserved by RabbitMQ; choose another name");
    }
    if (reserved(r->ingress_queue)) {
        snprintf(path, sizeof path, "%s.ingress_queue", pre);
        return fail(x, path, "the \"amq.\" prefix is reserved by RabbitMQ; choose another name");
    }
    if (strcmp(r->target_exchange, r->ingress_exchange) == 0) {
        snprintf(path, sizeof path, "%s.target_exchange", pre);
        return fail(x, path,
                    "same as ingress_exchange %s: messages would loop; expected the exchange "
                    "consumers read from",
                    quote(r->ingress_exchange, strlen(r->ingress_exchange), q, sizeof q));
    }
    if (r->declare_target && r->target_exchange[0] == '\0') {
        snprintf(path, sizeof path, "%s.declare_target", pre);
        return fail(x, path, "the default exchange (target_exchange \"\") cannot be declared; "
                             "set declare_target to false");
    }
    if (r->declare_target && reserved(r->target_exchange)) {
        snprintf(path, sizeof path, "%s.declare_target", pre);
        return fail(x, path, "RabbitMQ refuses to declare \"amq.\" exchanges; set declare_target "
                             "to false or rename target_exchange");
    }
    if (r->invalid_delay == INVALID_DELAY_DEAD_LETTER) {
        snprintf(path, sizeof path, "%s.dead_letter_exchange", pre);
        if (r->dead_letter_exchange[0] == '\0')
            return fail(x, path, "required when invalid_delay is \"dead-letter\"; expected a "
                                 "non-empty exchange name");
        if (strcmp(r->dead_letter_exchange, r->ingress_exchange) == 0)
            return fail(x, path, "same as ingress_exchange %s: messages would loop",
                        quote(r->ingress_exchange, strlen(r->ingress_exchange), q, sizeof q));
    }
    return 0;
}

/* Route whose ingress_exchange is ex, or -1. */
static int route_by_ingress(const struct config *c, const char *ex)
{
    for (int i = 0; i < c->nroutes; i++)
        if (strcmp(c->routes[i].ingress_exchange, ex) == 0)
            return i;
    return -1;
}

/*
 * Follow next[] (one out-edge per route, -1 for none) from every route; a
 * walk longer than nroutes steps is on a cycle. Reports the cycle once.
 */
static int check_loops(struct ctx *x, const struct config *c, const int *next, int invalid)
{
    for (int s = 0; s < c->nroutes; s++) {
        int r = s, steps = 0;
        while (r >= 0 && steps <= c->nroutes) {
            r = next[r];
            steps++;
        }
        if (r < 0)
            continue;
        /* r is on the cycle: describe it from its first route in the file */
        for (int k = next[r]; k != r; k = next[k])
            if (k < r)
                r = k;
        char desc[512], path[64];
        size_t o = 0;
        int k = r;
        do {
            int n = snprintf(desc + o, sizeof desc - o, "%s -> ", c->routes[k].name);
            if (n < 0 || (size_t)n >= sizeof desc - o)
                break;
            o += (size_t)n;
            k = next[k];
        } while (k != r);
        snprintf(desc + o, sizeof desc - o, "%s", c->routes[r].name);
        const struct config_route *rr = &c->routes[r];
        int dl = invalid && rr->invalid_delay == INVALID_DELAY_DEAD_LETTER;
        snprintf(path, sizeof path, "routes[%d].%s", r,
                 dl ? "dead_letter_exchange" : "target_exchange");
        return fail(x, path,
                    "routes form a loop (%s): %s would be republished for ever; point a route "
                    "at an exchange that is not another route's ingress_exchange",
                    desc, invalid ? "a message with an invalid x-delay" : "a message");
    }
    return 0;
}

static int parse_routes(struct ctx *x, struct config *c, json_object *root)
{
    json_object *a;
    char got[96], q[96], path[64];
    if (!json_object_object_get_ex(root, "routes", &a))
        return fail(x, "routes", "missing; expected an array of 1..%d routes", CONFIG_MAX_ROUTES);
    if (json_object_get_type(a) != json_type_array)
        return fail(x, "routes", "expected an array, got %s", show(a, got, sizeof got));
    size_t n = json_object_array_length(a);
    if (n == 0 || n > CONFIG_MAX_ROUTES)
        return fail(x, "routes", "expected 1..%d routes, got %zu", CONFIG_MAX_ROUTES, n);
    c->routes = xmalloc(n * sizeof *c->routes);
    memset(c->routes, 0, n * sizeof *c->routes);
    for (size_t i = 0; i < n; i++) {
        struct config_route *r = &c->routes[i];
        if (parse_route(x, r, json_object_array_get_idx(a, i), (int)i) < 0)
            return -1;
        c->nroutes = (int)i + 1;
        for (size_t j = 0; j < i; j++) {
            const struct config_route *p = &c->routes[j];
            const char *what = NULL, *val = NULL;
            if (strcmp(p->name, r->name) == 0)
                what = "name", val = r->name;
            else if (strcmp(p->ingress_exchange, r->ingress_exchange) == 0)
                what = "ingress_exchange", val = r->ingress_exchange;
            else if (strcmp(p->ingress_queue, r->ingress_queue) == 0)
                what = "ingress_queue", val = r->ingress_queue;
            if (what) {
                snprintf(path, sizeof path, "routes[%zu].%s", i, what);
                return fail(x, path, "%s is already used by routes[%zu]; expected a unique %s",
                            quote(val, strlen(val), q, sizeof q), j, what);
            }
        }
    }

    /* loops, as a delayed (then negative x-delay) and an invalid message travel */
    int *next = xmalloc((size_t)c->nroutes * sizeof *next);
    int rc = 0;
    for (int i = 0; i < c->nroutes; i++)
        next[i] = route_by_ingress(c, c->routes[i].target_exchange);
    rc = check_loops(x, c, next, 0);
    if (rc == 0) {
        for (int i = 0; i < c->nroutes; i++) {
            const struct config_route *r = &c->routes[i];
            next[i] = route_by_ingress(c, r->invalid_delay == INVALID_DELAY_DEAD_LETTER
                                              ? r->dead_letter_exchange
                                              : r->target_exchange);
        }
        rc = check_loops(x, c, next, 1);
    }
    free(next);
    return rc;
}

static void defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    c->heartbeat_s = 30;
    c->connect_timeout_ms = 5000;
    c->reconnect_min_ms = 500;
    c->reconnect_max_ms = 30000;
    c->publish_retry_min_ms = 1000;
    c->publish_retry_max_ms = 60000;
    memcpy(c->tls.ca_file, CONFIG_TLS_DEFAULT_CA_FILE, sizeof CONFIG_TLS_DEFAULT_CA_FILE);
    c->tls.verify_hostname = 1;
    c->segment_bytes = 64ull << 20;
    c->fsync = 1;
    c->max_message_bytes = 134217728u;
    c->checkpoint_interval_s = 60;
    c->checkpoint_min_mb = 64;
    /* http_listen "": the endpoint is off unless configured (README) */
    c->log_level = LOG_LEVEL_INFO;
    c->shutdown_timeout_ms = 10000;
}

/* 1-based line and column of byte offset off in s. */
static void line_col(const char *s, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && s[i]; i++) {
        if (s[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

int config_parse(struct config *c, const char *json, const char *name, char *err, size_t errlen)
{
    struct ctx x = { name ? name : "config", err, errlen };
    if (err && errlen)
        err[0] = '\0';
    defaults(c);

    /* a UTF-8 byte order mark, as some editors write, is not an error */
    const char *text = strncmp(json, "\xef\xbb\xbf", 3) == 0 ? json + 3 : json;
    size_t len = strlen(text);
    if (len >= (size_t)INT32_MAX)
        return fail(&x, NULL, "too large");
    struct json_tokener *tok = json_tokener_new();
    if (!tok) {
        fprintf(stderr, "delay-bridge: out of memory (json tokener)\n");
        abort();
    }
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    /* len + 1: the NUL ends a top-level number and marks the end of input */
    json_object *root = json_tokener_parse_ex(tok, text, (int)len + 1);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);

    int rc = -1;
    if (jerr != json_tokener_success || !root) {
        size_t ws = 0;
        while (ws < len && strchr(" \t\r\n", text[ws]))
            ws++;
        if (ws == len) {
            fail(&x, NULL, "the file is empty; expected a JSON object");
            goto cleanup;
        }
        int line, col;
        const char *what = json_tokener_error_desc(jerr);
        if (jerr == json_tokener_continue || jerr == json_tokener_error_parse_eof) {
            end = len;
            what = "unexpected end of file (an unclosed { [ or \"?)";
        }
        line_col(text, end, &line, &col);
        /* "name:line:col: ..." like a compiler, so editors can jump to it */
        if (err && errlen)
            snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", x.name, line, col, what);
        goto cleanup;
    }
    if (json_object_get_type(root) != json_type_object) {
        fail(&x, NULL, "expected a JSON object at the top level");
        goto cleanup;
    }

    static const char *const keys[] = { "instance", "broker", "wal", "http", "log",
                                        "shutdown_timeout_ms", "routes", NULL };
    if (check_keys(&x, root, "", keys) < 0)
        goto cleanup;
    if (parse_broker(&x, c, root) < 0 || parse_wal(&x, c, root) < 0 ||
        parse_http(&x, c, root) < 0 || parse_log(&x, c, root) < 0)
        goto cleanup;
    if (get_u32(&x, root, "", "shutdown_timeout_ms", 0, &c->shutdown_timeout_ms) < 0)
        goto cleanup;
    if (get_str(&x, root, "", "instance", OPTIONAL, c->instance, sizeof c->instance - 1) < 0)
        goto cleanup;
    for (const char *p = c->instance; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-", *p)) {
            char q[96]; /* quoted: a control character must not split the line */
            fail(&x, "instance", "expected letters, digits, '.', '_' or '-' (it appears in "
                 "connection names and metrics labels), got %s",
                 quote(c->instance, strlen(c->instance), q, sizeof q));
            goto cleanup;
        }
    if (parse_replicate(&x, c, root) < 0 || parse_routes(&x, c, root) < 0 ||
        check_repl_routes(&x, c) < 0 || check_share_keys(&x, c) < 0)
        goto cleanup;
    rc = 0;

cleanup:
    json_object_put(root);
    if (rc < 0)
        config_free(c);
    return rc;
}

/*
 * routes[].share_keys: each bridge consumes its own key-event queue,
 * INGRESS_QUEUE.keys.INSTANCE, bound to INGRESS_EXCHANGE.keys: an instance
 * name is required, and both names must still be AMQP short strings.
 */
static int check_share_keys(struct ctx *x, const struct config *c)
{
    char path[64];

    for (int i = 0; i < c->nroutes; i++) {
        const struct config_route *r = &c->routes[i];
        if (!r->share_keys)
            continue;
        snprintf(path, sizeof path, "routes[%d].share_keys", i);
        if (!c->instance[0])
            return fail(x, path, "needs \"instance\" set: each bridge's key-event queue is "
                        "named after it");
        if (strlen(r->ingress_queue) + strlen(".keys.") + strlen(c->instance) > CONFIG_NAME_MAX ||
            strlen(r->ingress_exchange) + strlen(".keys") > CONFIG_NAME_MAX)
            return fail(x, path, "the key-event names (ingress_queue + \".keys.\" + instance, "
                        "ingress_exchange + \".keys\") must fit in %d bytes", CONFIG_NAME_MAX);
    }
    return 0;
}

/* uri carries a password of its own: amqp[s]://user:PASSWORD@host... */
static int uri_has_password(const char *uri)
{
    const char *p = strstr(uri, "://");
    if (!p)
        return 0;
    p += 3;
    size_t auth = strcspn(p, "/?#"), at = auth;
    while (at > 0 && p[at - 1] != '@')
        at--;
    if (at == 0)
        return 0;
    const char *colon = memchr(p, ':', at - 1);
    return colon && colon + 1 < p + at - 1;
}

/* One-line warnings about a loaded configuration (f: the open file). */
static void warn_loaded(const struct config *c, const char *path, FILE *f)
{
    struct stat st;
    int pw = 0, tls = 0;

    for (int i = 0; i < c->nuris; i++) {
        pw |= uri_has_password(c->uris[i]);
        tls |= strncmp(c->uris[i], "amqps://", 8) == 0;
    }
    if (pw && !c->uri_from_env && fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH))
        log_warn("config", "the configuration file holds the broker password and is readable "
                 "by other users",
                 "file=\"%s\" mode=%04o hint=\"chmod 600 the file, or pass the URI in "
                 ENV_URI "\"", path, (unsigned)(st.st_mode & 07777));
    if (tls && !c->tls.verify_hostname)
        log_warn("config", "TLS host name verification is off: any certificate from the CA is "
                 "accepted for any host",
                 "file=\"%s\" key=broker.tls.verify_hostname", path);
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
    struct ctx x = { path, err, errlen };
    memset(c, 0, sizeof *c);
    if (err && errlen)
        err[0] = '\0';
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(&x, NULL, "cannot open: %s", strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = -1;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = xrealloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n > CONFIG_FILE_MAX) {
            fail(&x, NULL, "larger than %u MiB; is this the right file?", CONFIG_FILE_MAX >> 20);
            goto cleanup;
        }
        if (r == 0) {
            if (ferror(f)) {
                fail(&x, NULL, "cannot read: %s", strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        fail(&x, NULL, "contains a NUL byte; expected a JSON text file");
        goto cleanup;
    }
    rc = config_parse(c, buf, path, err, errlen);
    if (rc == 0)
        warn_loaded(c, path, f);

cleanup:
    free(buf);
    fclose(f);
    return rc;
}

int config_check_wal_dir(const struct config *c, const char *name, char *err, size_t errlen)
{
    char p[sizeof c->wal_dir];
    struct stat st;
    size_t n;
    int self = 1, mode;

    snprintf(p, sizeof p, "%s", c->wal_dir);
    for (;;) {
        n = strlen(p);
        while (n > 1 && p[n - 1] == '/')
            p[--n] = '\0';
        if (stat(p, &st) == 0)
            break;
        if (errno != ENOENT) {
            snprintf(err, errlen, "%s: wal.dir: cannot use \"%s\": %s%s", name, c->wal_dir,
                     strerror(errno),
                     errno == ENOTDIR ? " (a component of the path is a file)" : "");
            return -1;
        }
        char *slash = strrchr(p, '/');
        if (!slash)
            snprintf(p, sizeof p, ".");
        else if (slash == p)
            p[1] = '\0';
        else
            *slash = '\0';
        self = 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: wal.dir: \"%s\" is not a directory", name, p);
        return -1;
    }
    mode = W_OK | X_OK | (self ? R_OK : 0);
    if (access(p, mode) != 0) {
        int e = errno;
        if (self)
            snprintf(err, errlen, "%s: wal.dir: the directory \"%s\" is not readable and "
                     "writable by this process (uid %u): %s", name, p, (unsigned)geteuid(),
                     strerror(e));
        else
            snprintf(err, errlen, "%s: wal.dir: \"%s\" does not exist and cannot be created: "
                     "\"%s\" is not writable by this process (uid %u): %s", name, c->wal_dir, p,
                     (unsigned)geteuid(), strerror(e));
        return -1;
    }
    return 0;
}

void config_free(struct config *c)
{
    if (!c)
        return;
    for (int i = 0; i < CONFIG_MAX_URIS; i++) {
        free(c->uris[i]);
        c->uris[i] = NULL;
    }
    free(c->routes);
    memset(c, 0, sizeof *c);
}
