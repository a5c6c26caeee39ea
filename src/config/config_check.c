/*
 * config_check.c -- the configuration's checks beyond type and range, each a
 * mistake that would otherwise show up only at run time (config.c's essay
 * lists them): route and queue names, broker URIs parsed by uri.c, files
 * that must open for reading, the replication stream's names and retention,
 * share_keys' key-event queue names, loops between routes, and the WAL
 * directory (config_check_wal_dir). Messages follow config_json.c's form.
 * Also the vhost look-ups every rule between routes needs (cfg_uri_vhost,
 * config_route_vhost). Calls only the floor (config_schema.c,
 * config_json.c), never the files that call it.
 */
#define _GNU_SOURCE
#include "config_int.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/log.h"
#include "delay-bridge/wal.h"
#include "base/xalloc.h"
#include "delay-bridge/uri.h"

/* One broker URI: amqp:// or amqps://, parsed by uri.c (as the connection will be). */
int cfg_check_uri(struct ctx *x, const char *path, const char *uri, struct uri *u)
{
    char masked[160], q[200];
    log_mask_uri(uri, masked, sizeof masked);
    cfg_quote(masked, strlen(masked), q, sizeof q);
    if (*uri == '\0')
        return cfg_fail(x, path, "must not be empty; expected amqp://user:password@host:port/vhost");
    if (strncmp(uri, "amqp://", 7) != 0 && strncmp(uri, "amqps://", 8) != 0)
        return cfg_fail(x, path, "expected a URI starting with amqp:// or amqps://, got %s", q);
    char why[160];
    if (uri_parse(uri, u, why, sizeof why) < 0)
        return cfg_fail(x, path,
                    "not a valid AMQP URI: %s: %s; expected amqp[s]://user:password@host:port/vhost "
                    "(port 1..65535, '/' in the vhost written %%2f)",
                    q, why);
    return 0;
}


/*
 * The first URI's vhost: stored right after it in the same allocation,
 * "URI\0VHOST\0", by add_uri() in config.c.
 */
const char *cfg_uri_vhost(const struct config *c)
{
    if (c->nuris == 0 || !c->uris[0])
        return "/";
    return c->uris[0] + strlen(c->uris[0]) + 1; /* add_uri() */
}

const char *config_route_vhost(const struct config *c, const struct config_route *r)
{
    return r->vhost[0] ? r->vhost : cfg_uri_vhost(c);
}

/* The file named by key (a path) opens for reading and is not a directory. */
int cfg_check_readable(struct ctx *x, const char *path, const char *file)
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
    return cfg_fail(x, path, "cannot read %s: %s; expected a readable PEM file",
                cfg_quote(file, strlen(file), q, sizeof q), strerror(e));
}


/* A stream or queue name of wal.replicate: [A-Za-z0-9._:-], not "amq.". */
int cfg_check_repl_name(struct ctx *x, const char *path, const char *s)
{
    char q[96];

    if (strncmp(s, "amq.", 4) == 0)
        return cfg_fail(x, path, "%s: the \"amq.\" prefix is reserved by RabbitMQ for its own "
                    "queues; choose another name", cfg_quote(s, strlen(s), q, sizeof q));
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("._-:", *p))
            return cfg_fail(x, path, "%s: only letters, digits, '.', '_', '-' and ':' are allowed",
                        cfg_quote(s, strlen(s), q, sizeof q));
    return 0;
}

/*
 * wal.replicate.max_age: "" or RabbitMQ's x-max-age syntax, 1..9 digits
 * and a unit (Y 365 days, M 30 days, D, h, m, s). Seconds in *secs.
 */
int cfg_parse_max_age(const char *s, uint64_t *secs)
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


int cfg_get_max_age(struct ctx *x, json_object *obj, const char *prefix, const char *key,
                    int allow_empty, char *out, size_t outlen, uint64_t *secs)
{
    char path[96], got[96];
    json_object *v;
    const char *s;
    uint64_t t = 0;

    if (!json_object_object_get_ex(obj, key, &v))
        return 0;
    s = json_object_get_string(v);
    if (json_object_get_type(v) != json_type_string ||
        strlen(s) != (size_t)json_object_get_string_len(v) || strlen(s) >= outlen ||
        (*s ? cfg_parse_max_age(s, &t) < 0 : !allow_empty)) {
        snprintf(path, sizeof path, "%s.%s", prefix, key);
        return cfg_fail(x, path, "expected %s1..9 digits and a unit Y, M, D, h, m or s "
                    "(RabbitMQ's x-max-age, e.g. \"7D\"), got %s",
                    allow_empty ? "\"\" (none) or " : "", cfg_show(v, got, sizeof got));
    }
    memcpy(out, s, strlen(s) + 1);
    *secs = t;
    return 1;
}

/*
 * wal.replicate's stream and lease queue are not the ingress queue of any
 * route in the broker URI's vhost, where the replicated log declares them.
 */
int cfg_check_repl_routes(struct ctx *x, const struct config *c)
{
    char q[96], b[32];
    const char *vhost = cfg_uri_vhost(c);

    if (!c->repl.enabled)
        return 0;
    for (int i = 0; i < c->nroutes; i++) {
        const char *iq = c->routes[i].ingress_queue;
        if (c->routes[i].retired || strcmp(config_route_vhost(c, &c->routes[i]), vhost) != 0)
            continue;
        int s = strcmp(iq, c->repl.stream) == 0;
        if (s || strcmp(iq, c->repl.lease_queue) == 0)
            return cfg_fail(x, s ? "wal.replicate.stream" : "wal.replicate.lease_queue",
                        "%s is also %s.ingress_queue; expected a name no route uses",
                        cfg_quote(iq, strlen(iq), q, sizeof q), cfg_route_pre(x, i, b, sizeof b));
    }
    return 0;
}

/*
 * http.listen: "" (off), "PORT" (loopback), "IPv4:PORT" or "[IPv6]:PORT",
 * numeric addresses only (no name lookup at start). Fills host and port.
 */
int cfg_parse_listen(const char *s, char *host, size_t hostlen, uint16_t *port)
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

int cfg_is_loopback(const char *host)
{
    return strncmp(host, "127.", 4) == 0 || strcmp(host, "::1") == 0;
}


int cfg_valid_name(const char *s)
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

int cfg_reserved(const char *s)
{
    return strncmp(s, "amq.", 4) == 0;
}


/* The route in vhost whose ingress_exchange is ex, or -1 ("": none; delayed_exchanges). */
int cfg_route_by_ingress(const struct config *c, const char *vhost, const char *ex)
{
    for (int i = 0; ex[0] && i < c->nroutes; i++)
        if (!c->routes[i].retired && strcmp(c->routes[i].ingress_exchange, ex) == 0 &&
            strcmp(config_route_vhost(c, &c->routes[i]), vhost) == 0)
            return i;
    return -1;
}

/*
 * Follow next[] (one out-edge per route, -1 for none) from every route; a
 * walk longer than nroutes steps is on a cycle. Reports the cycle once.
 */
int cfg_check_loops(struct ctx *x, const struct config *c, const int *next, int invalid)
{
    for (int s = 0; s < c->nroutes; s++) {
        int r = s, steps = 0;
        while (r >= 0 && steps <= c->nroutes) {
            r = next[r];
            steps++;
        }
        if (r < 0)
            continue;
        /*
         * r is on the cycle: describe it from its first route in the file,
         * or the first of those this parse adds (config_add_routes), whose
         * author has to change one of them
         */
        for (int k = next[r]; k != r; k = next[k])
            if ((k >= x->first_new) > (r >= x->first_new) ||
                ((k >= x->first_new) == (r >= x->first_new) && k < r))
                r = k;
        char desc[512], path[CFG_PATH_MAX], b[32];
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
        snprintf(path, sizeof path, "%s.%s", cfg_route_pre(x, r, b, sizeof b),
                 dl ? "dead_letter_exchange" : "target_exchange");
        return cfg_fail(x, path,
                    "routes form a loop (%s): %s would be republished for ever; point a route "
                    "at an exchange that is not another route's ingress_exchange",
                    desc, invalid ? "a message with an invalid x-delay" : "a message");
    }
    return 0;
}


/*
 * routes[].share_keys: each bridge consumes its own key-event queue,
 * INGRESS_QUEUE.keys.INSTANCE, bound to INGRESS_EXCHANGE.keys: an instance
 * name is required, and both names must still be AMQP short strings.
 */
int cfg_check_share_keys(struct ctx *x, const struct config *c)
{
    char path[CFG_PATH_MAX], b[32];

    for (int i = 0; i < c->nroutes; i++) {
        const struct config_route *r = &c->routes[i];
        if (!r->share_keys)
            continue;
        snprintf(path, sizeof path, "%s.share_keys", cfg_route_pre(x, i, b, sizeof b));
        if (!c->instance[0])
            return cfg_fail(x, path, "needs \"instance\" set: each bridge's key-event queue is "
                        "named after it");
        if (strlen(r->ingress_queue) + strlen(".keys.") + strlen(config_key_holder(c)) >
                CONFIG_NAME_MAX ||
            strlen(r->ingress_exchange) + strlen(".keys") > CONFIG_NAME_MAX)
            return cfg_fail(x, path, "the key-event names (ingress_queue + \".keys.\" + instance, or + "
                        "wal.replicate.stream when replicated, "
                        "ingress_exchange + \".keys\") must fit in %d bytes", CONFIG_NAME_MAX);
    }
    return 0;
}

/* uri carries a password of its own: amqp[s]://user:PASSWORD@host... */
int cfg_uri_has_password(const char *uri)
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

/* One-line warnings about a loaded configuration (st: the file's fstat). */
void cfg_warn_loaded(const struct config *c, const char *path, const struct stat *st)
{
    int pw = 0, tls = 0;

    for (int i = 0; i < c->nuris; i++) {
        pw |= cfg_uri_has_password(c->uris[i]);
        tls |= strncmp(c->uris[i], "amqps://", 8) == 0;
    }
    if (pw && !c->uri_from_env && (st->st_mode & S_IROTH))
        log_warn("config", "the configuration file holds the broker password and is readable "
                 "by other users",
                 "file=\"%s\" mode=%04o hint=\"chmod 600 the file, or pass the URI in "
                 ENV_URI "\"", path, (unsigned)(st->st_mode & 07777));
    if (tls && !c->tls.verify_hostname)
        log_warn("config", "TLS host name verification is off: any certificate from the CA is "
                 "accepted for any host",
                 "file=\"%s\" key=broker.tls.verify_hostname", path);
    for (int i = 0; i < c->nroutes; i++)
        if (c->routes[i].retry && c->routes[i].queue_type == QUEUE_QUORUM)
            log_warn("config", "a retry route with a quorum ingress queue: RabbitMQ dead-letters "
                     "at most once, and drops what a consumer rejects while that queue has no "
                     "leader (for a moment after a broker restart); a classic ingress queue is "
                     "recovered before the broker accepts connections",
                     "file=\"%s\" key=routes[%d].queue_type hint=\"queue_type classic, or "
                     "quorum work queues with x-dead-letter-strategy at-least-once (README, "
                     "Retries with backoff)\"", path, i);
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
    /*
     * The volume must hold the space reserve (WAL_RESERVE_SEGMENTS) and the
     * intake gate's two marks (wal_space.c): below that the log could never
     * take a message without reaching into what firing needs.
     */
    struct statvfs v;
    uint64_t need = WAL_MIN_VOLUME_SEGMENTS * c->segment_bytes;
    if (statvfs(p, &v) == 0 && v.f_blocks && (uint64_t)v.f_blocks * v.f_frsize < need) {
        snprintf(err, errlen, "%s: wal.segment_mb: the WAL's volume (\"%s\") holds %llu MiB, "
                 "under %d x segment_mb = %llu MiB: the log keeps %d segments in reserve that "
                 "intake never uses, takes messages only with two more free, and writes one; lower "
                 "wal.segment_mb or give the WAL a larger volume", name, p,
                 (unsigned long long)((uint64_t)v.f_blocks * v.f_frsize >> 20),
                 WAL_MIN_VOLUME_SEGMENTS, (unsigned long long)(need >> 20), WAL_RESERVE_SEGMENTS);
        return -1;
    }
    return 0;
}

/*
 * routes[].queue_type "stream" and its retention keys. A stream ingress
 * is read by one reader that keeps its own place (README, "A stream
 * ingress"): every consumer of a stream sees every message, so the
 * keys that assume competing consumers on one queue are refused --
 * single_active_consumer (a stream's single active consumer needs the
 * stream protocol), share_keys (bridges sharing the route would each
 * hold every message) -- and so is wal.replicate (cfg_check_stream_routes:
 * the place read is kept beside the log, not in it, so a standby taking
 * the log over would not know it). The retention keys are refused on
 * other queue types, where they would silently do nothing.
 */
int cfg_parse_route_stream(struct ctx *x, struct config_route *r, json_object *o,
                           const char *pre)
{
    char path[CFG_PATH_MAX];
    uint64_t age_s;

    if (r->queue_type != QUEUE_STREAM) {
        const char *k = json_object_object_get_ex(o, "stream_max_age", NULL) ? "stream_max_age"
                        : json_object_object_get_ex(o, "stream_max_mb", NULL) ? "stream_max_mb"
                                                                               : NULL;
        if (!k)
            return 0;
        snprintf(path, sizeof path, "%s.%s", pre, k);
        return cfg_fail(x, path, "only for queue_type \"stream\"; remove it, or set queue_type");
    }
    if (cfg_get_max_age(x, o, pre, "stream_max_age", 0, r->stream_max_age,
                        sizeof r->stream_max_age, &age_s) < 0)
        return -1;
    if (cfg_read_key(x, config_key_find(CONFIG_SECT_ROUTE, "stream_max_mb"), o, pre, r) < 0)
        return -1;
    snprintf(path, sizeof path, "%s.queue_type", pre);
    if (r->single_active_consumer)
        return cfg_fail(x, path, "\"stream\" cannot be combined with single_active_consumer: "
                    "a stream has no single active consumer over AMQP 0.9.1; run one bridge "
                    "per stream route, or use \"quorum\"");
    if (r->share_keys)
        return cfg_fail(x, path, "\"stream\" cannot be combined with share_keys: every reader "
                    "of a stream gets every message, so bridges sharing the route would each "
                    "hold and fire all of them; use \"classic\" or \"quorum\"");
    return 0;
}

/* A stream ingress keeps its place beside the log, which wal.replicate does not carry. */
int cfg_check_stream_routes(struct ctx *x, const struct config *c)
{
    char path[CFG_PATH_MAX], b[32];

    if (!c->repl.enabled)
        return 0;
    for (int i = 0; i < c->nroutes; i++) {
        if (c->routes[i].queue_type != QUEUE_STREAM)
            continue;
        snprintf(path, sizeof path, "%s.queue_type", cfg_route_pre(x, i, b, sizeof b));
        return cfg_fail(x, path, "\"stream\" cannot be combined with wal.replicate: the place "
                    "read in the stream is kept beside the log, and a standby taking the log "
                    "over would not have it; use \"classic\" or \"quorum\"");
    }
    return 0;
}
