/*
 * config.h -- the daemon's configuration, read from a JSON file with json-c.
 *
 * config_load() fills plain structs: nothing here refers to json-c after it
 * returns. Every error names the file, the key path ("routes[1].target_exchange")
 * and what is wrong; unknown keys are errors too, so a typo never silently
 * falls back to a default. DELAY_BRIDGE_BROKER_URI, when set and not empty,
 * replaces broker.uri (a comma-separated list gives failover URIs).
 *
 * Every key is written once, in the schema src/config/config_keys.def
 * (name, type, range, default, how a reload applies it, a line of
 * description): the parser, the defaults, the reload diff and GET /routes
 * walk it (struct config_key below), and tests/deploy/test_manpages.py
 * holds README.md's "Configuration reference" and delay-bridge.json(5) to
 * it.
 */
#ifndef DB_CONFIG_H
#define DB_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <regex.h>

#define CONFIG_MAX_URIS 8
#define CONFIG_MAX_ROUTES 256
#define CONFIG_HTTP_MAX_HOSTS 16 /* http.allowed_hosts */
#define CONFIG_NAME_MAX 255 /* AMQP short string */
/* The queue the x-delayed-message exchanges route delayed messages to (deploy/plugin). */
#define CONFIG_DELAYED_QUEUE "delay-bridge.delayed"

#define CONFIG_TLS_DEFAULT_CA_FILE "/etc/ssl/certs/ca-certificates.crt"

enum queue_type { QUEUE_CLASSIC, QUEUE_QUORUM, QUEUE_STREAM };

/*
 * broker.tls: used for amqps:// URIs only (accepted, and ignored, with
 * amqp:// ones). When any URI is amqps://, the files set explicitly must be
 * readable at load time. verify_hostname false is allowed, with a warning
 * at start (config_load); the certificate chain is always verified.
 */
struct config_tls {
    char ca_file[4096];   /* "ca_file": CONFIG_TLS_DEFAULT_CA_FILE; CA bundle (PEM) */
    char cert_file[4096]; /* "cert_file": "" (none); client certificate (PEM), with key_file */
    char key_file[4096];  /* "key_file": "" (none); its private key (PEM, no passphrase) */
    int verify_hostname;  /* "verify_hostname": true; the certificate must name the URI's host */
};

/* When a relative delay (x-delay) starts (README, "When the delay starts"). */
enum delay_from {
    DELAY_FROM_BRIDGE, /* "bridge" (default): when the bridge receives the message */
    DELAY_FROM_BROKER, /* "broker": the broker's receipt, header timestamp_in_ms (RabbitMQ
                          >= 3.12, message_interceptors.incoming.set_header_timestamp);
                          a message without it counts from the bridge's receipt */
};

/*
 * routes[].retry: a retry route (README, "Retries with backoff"). Consumers'
 * queues name its ingress exchange as their dead-letter exchange; each
 * message they reject comes back to the queue it failed in after the
 * policy's delay (retry.h), and is parked after its last attempt.
 */
enum retry_jitter {
    RETRY_JITTER_NONE,  /* "none": the delay d */
    RETRY_JITTER_FULL,  /* "full": uniform in [0, d] */
    RETRY_JITTER_EQUAL, /* "equal": ceil(d/2) + uniform in [0, floor(d/2)] */
};

/* x-death reasons a retry route retries ("reasons"); the others are parked. */
#define RETRY_REASON_REJECTED 0x1u       /* "rejected": basic.reject / nack, requeue false */
#define RETRY_REASON_DELIVERY_LIMIT 0x2u /* "delivery_limit": a quorum queue's x-delivery-limit */
#define RETRY_REASON_EXPIRED 0x4u        /* "expired": message or queue TTL */
#define RETRY_REASON_MAXLEN 0x8u         /* "maxlen": x-max-length overflow (reject-publish-dlx) */

#define CONFIG_RETRY_MAX_ATTEMPTS 10000
#define CONFIG_RETRY_MAX_QUEUES 1024 /* entries of retry.queues */
#define CONFIG_PATTERN_MAX 1024      /* bytes of retry.queue_pattern */

/* The five keys of a policy, for the route and for one queue (retry.queues.NAME). */
struct config_retry_policy {
    uint64_t initial_ms;    /* "initial_ms": 1000, 1..max_delay_ms: the delay after the first failure */
    double multiplier;      /* "multiplier": 2.0, 1.0..100.0 */
    uint64_t max_ms;        /* "max_ms": 3600000, initial_ms..max_delay_ms: the longest one delay */
    enum retry_jitter jitter; /* "jitter": "none" | "full" | "equal" */
    uint32_t max_attempts;  /* "max_attempts": 5, 1..10000: deliveries in all, the first included */
};

struct config_retry_queue {
    char queue[CONFIG_NAME_MAX + 1];    /* the key of retry.queues */
    struct config_retry_policy policy;  /* the route's, with this entry's keys over it */
};

struct config_retry {
    struct config_retry_policy policy;
    char parking_exchange[CONFIG_NAME_MAX + 1]; /* "parking_exchange": required */
    char parking_queue[CONFIG_NAME_MAX + 1];    /* "parking_queue": "" = not declared; else the
                                                   bridge declares parking_exchange (topic) and
                                                   this queue bound to it with "#" */
    unsigned reasons;                           /* "reasons": RETRY_REASON_REJECTED |
                                                   RETRY_REASON_DELIVERY_LIMIT */
    struct config_retry_queue *queues;          /* "queues": {} ; owned, malloc'd */
    int nqueues;
    /*
     * Where a message may be sent back (retry.h, retry_admits): a queue named
     * in "queues", or one whose whole name matches "queue_pattern" (a POSIX
     * extended regular expression). A route needs one of the two: x-death is
     * a header any publisher can write, so the queue it names is a claim.
     */
    char queue_pattern[CONFIG_PATTERN_MAX + 1]; /* "queue_pattern": "" = none */
    regex_t *queue_re;                          /* "^(" queue_pattern ")$" compiled; owned */
};

enum invalid_delay_policy {
    INVALID_DELAY_PUBLISH,     /* publish at once, like the plugin (default) */
    INVALID_DELAY_DEAD_LETTER, /* publish to dead_letter_exchange with x-delay-error */
};

struct config_route {
    char name[CONFIG_NAME_MAX + 1];             /* required, unique, [A-Za-z0-9._-]+ */
    char ingress_exchange[CONFIG_NAME_MAX + 1]; /* required ("" only with delayed_exchanges) */
    char ingress_queue[CONFIG_NAME_MAX + 1];    /* required (delayed_exchanges: defaults to
                                                   CONFIG_DELAYED_QUEUE) */
    char target_exchange[CONFIG_NAME_MAX + 1];  /* required; "" (default exchange) allowed;
                                                   "" and unused with delayed_exchanges */
    /*
     * "delayed_exchanges": false; true: each message goes, when due, to the
     * exchange it was published to (its record's exchange) with its routing
     * key -- one route for every x-delayed-message exchange of the vhost
     * (config_delayed.c). No target, no retry; no ingress exchange unless
     * named (nothing declared or bound then); a classic ingress queue.
     */
    int delayed_exchanges;
    enum queue_type queue_type;                 /* "queue_type": "classic" (default) | "quorum"
                                                   | "stream" (README, "A stream ingress") */
    char stream_max_age[16];                    /* "stream_max_age": "7D" -> x-max-age (stream only) */
    uint64_t stream_max_bytes;                  /* "stream_max_mb": 0 (no limit) -> x-max-length-bytes,
                                                   in bytes (stream only) */
    int single_active_consumer;                 /* "single_active_consumer": false; true: one
                                                   bridge consumes the ingress queue at a time,
                                                   the others stand by (keys stay with one) */
    int share_keys;                             /* "share_keys": false; true: bridges sharing
                                                   the route tell each other about keyed
                                                   messages and cancels (needs "instance") */
    int declare_target;                         /* "declare_target": false */
    char target_type[16];                       /* "target_type": "direct" | "topic" | "fanout" | "headers" */
    uint16_t prefetch;                          /* "prefetch": 1000, 1..65535 */
    uint32_t max_inflight;                      /* "max_inflight": 1000 unconfirmed publishes */
    uint64_t max_delay_ms;                      /* "max_delay_ms": 4294967295 */
    uint64_t max_held;                          /* "max_held": 0, 0..CONFIG_MAX_HELD: at this
                                                   many held the route stops consuming
                                                   (README, "Bounds on what is held");
                                                   0 = no bound of its own, only
                                                   limits.max_held */
    enum delay_from delay_from;                 /* "delay_from": "bridge" | "broker" */
    enum invalid_delay_policy invalid_delay;    /* "invalid_delay": "publish" | "dead-letter" */
    char dead_letter_exchange[CONFIG_NAME_MAX + 1]; /* required when invalid_delay is dead-letter */
    char unroutable_exchange[CONFIG_NAME_MAX + 1];  /* "": a returned (unroutable) message is
                                                       counted and logged; else it goes there */
    /*
     * "retry": NULL for a delayed route; owned, malloc'd. A retry route has
     * target_exchange "" (messages go back through the default exchange,
     * routing key = their queue), invalid_delay "dead-letter" and both
     * dead_letter_exchange and unroutable_exchange set to
     * retry->parking_exchange: config_parse fills them, the file may not.
     */
    struct config_retry *retry;

    /*
     * "vhost": "" = the broker URI's vhost (config_route_vhost()). Each vhost
     * in use gets its own consumer and publisher connection; names
     * (ingress_exchange, ingress_queue) are unique per vhost, route names
     * across the whole bridge.
     */
    char vhost[CONFIG_NAME_MAX + 1];
    /* "template": the route_templates entry it was made from ("" none). */
    char template_name[CONFIG_NAME_MAX + 1];
    /* Where it was read: CONFIG_SOURCE_FILE (the -c file) or CONFIG_SOURCE_STORE (routes_file). */
    int source;
    /*
     * Run time only, never read from a file: the route was removed by a
     * reload or DELETE /routes while it still held messages. It consumes
     * nothing; what it holds is published when due; its index stays (the
     * engine's, the metrics') until the process ends. config_diff and
     * config_route_index skip it.
     */
    int retired;
};

enum { CONFIG_SOURCE_FILE = 0, CONFIG_SOURCE_STORE = 1 };

/*
 * route_templates.NAME: many look-alike routes from one entry. json is the
 * template object as written (route keys whose string values may hold
 * "{name}", replaced by each instance's name), kept as text so that a
 * route put through the API later can name the template too. The
 * template's "routes" array (instance names) becomes routes at load.
 */
struct config_template {
    char name[CONFIG_NAME_MAX + 1];
    char *json; /* owned, malloc'd */
};
#define CONFIG_MAX_TEMPLATES 64

/*
 * wal.replicate: present = every WAL record is also published to a
 * RabbitMQ stream, so a bridge whose disk is lost can be rebuilt from it
 * (README, "Scaling and high availability"). Absent: replication is off
 * and the whole struct is zero. Sizes are given in MiB/KiB in the file and
 * held here in bytes. config_parse guarantees: stream and lease_queue are
 * 1..255 bytes of [A-Za-z0-9._:-], not "amq.", different from each other
 * and from every route's ingress_queue; when max_bytes != 0, max_bytes >=
 * 2 x checkpoint_bytes + 2 x segment_bytes; when max_age is set,
 * checkpoint_interval_s != 0 and max_age >= 2 x checkpoint_interval_s
 * (the stream keeps everything since the last completed stream checkpoint).
 */
struct config_replicate {
    int enabled;                 /* the "wal.replicate" object is present */
    char stream[CONFIG_NAME_MAX + 1];      /* "stream": "delay-bridge.wal" + ("." + instance when instance is set) */
    char lease_queue[CONFIG_NAME_MAX + 1]; /* "lease_queue": stream + ".lease" */
    uint64_t max_bytes;          /* "max_mb": 20480 (MiB) -> x-max-length-bytes; 0 = no size limit */
    char max_age[32];            /* "max_age": "" (none) -> x-max-age, e.g. "7D": digits then one of Y M D h m s */
    uint64_t segment_bytes;      /* "segment_mb": 64 (MiB), 1..2861 -> x-stream-max-segment-size-bytes
                                    (a stream refuses more than 3,000,000,000 bytes) */
    uint64_t checkpoint_bytes;   /* "checkpoint_mb": 1024 (MiB), 1..1048576 */
    uint32_t checkpoint_interval_s; /* "checkpoint_interval_s": 3600, 0..31536000 (0 = by size only) */
    uint32_t batch_bytes;        /* "batch_kb": 1024 (KiB), 4..65536: most bytes per stream message */
    uint32_t confirm_timeout_ms; /* "confirm_timeout_ms": 10000, 100..600000 */
    uint32_t lease_renew_ms;     /* "lease_renew_ms": 10000, 100..600000: the owner acks its lease
                                    token and takes a fresh one this often, so that no broker
                                    consumer timeout or delivery limit ever takes it back */
};

#define CONFIG_STREAM_SEGMENT_MAX_MB 2861 /* 2861 MiB <= 3,000,000,000 bytes < 2862 MiB */

/*
 * max_held, of a route and in all: the most messages held before consuming
 * pauses. A message handle is 32 bits (engine.h), so no bound above it
 * means anything; the default in all, CONFIG_MAX_HELD_DEFAULT, is about
 * 400 MB of RAM at 40 B a message (README, "Bounds on what is held").
 */
#define CONFIG_MAX_HELD 4294967295ull
#define CONFIG_MAX_HELD_DEFAULT 10000000ull

struct config {
    /* broker */
    char *uris[CONFIG_MAX_URIS]; /* "uri": string or array of strings; owned, malloc'd */
    int nuris;
    int uri_from_env;            /* 1 if DELAY_BRIDGE_BROKER_URI supplied the URIs */
    uint16_t heartbeat_s;        /* "heartbeat_s": 30 (0 disables) */
    uint32_t connect_timeout_ms; /* "connect_timeout_ms": 5000 */
    uint32_t reconnect_min_ms;   /* "reconnect_min_ms": 500 */
    uint32_t reconnect_max_ms;   /* "reconnect_max_ms": 30000 */
    uint32_t publish_retry_min_ms; /* "publish_retry_min_ms": 1000, backoff after a channel error */
    uint32_t publish_retry_max_ms; /* "publish_retry_max_ms": 60000 */
    struct config_tls tls;       /* "tls": {...} */

    /* wal */
    char wal_dir[4096];          /* "dir": required */
    uint64_t segment_bytes;      /* "segment_mb": 64 */
    int fsync;                   /* "fsync": true; false is for tests on tmpfs only */
    uint32_t commit_interval_ms; /* "commit_interval_ms": 10 -- the shortest time between the
                                    starts of two commits; 0 = as soon as the last is durable */
    uint32_t max_message_bytes;  /* "max_message_bytes": 134217728 */
    uint64_t prewrite_bytes;     /* "prewrite_kb": 1024 -- zeros written ahead of the records
                                    (wal.h); 0 = none */
    uint32_t checkpoint_interval_s; /* "checkpoint_interval_s": 60; 0 = no checkpoints */
    uint32_t checkpoint_min_mb;  /* "checkpoint_min_mb": 64 -- and at least this much
                                    log appended since the last one began */
    struct config_replicate repl; /* "replicate": {...}; absent = off (all zero) */

    /* top level */
    char instance[65];           /* "instance": "" -- names this bridge in logs, connection
                                    names and metrics (several bridges per queue) */

    /* http */
    char http_listen[256];       /* "listen": "" = disabled; "PORT" = loopback */
    int http_allow_remote;       /* "allow_remote": false; required for non-loopback */
    char http_host[64];          /* parsed from listen: numeric address */
    uint16_t http_port;
    /* "allowed_hosts": [] -- names the endpoint answers to besides loopback ones,
       when no token is set: the Host (and an Origin's host) of a request must be
       one of them (against DNS rebinding); e.g. a reverse proxy's name */
    char http_allowed_hosts[CONFIG_HTTP_MAX_HOSTS][256];
    int http_nallowed_hosts;
    int http_token_set;          /* DELAY_BRIDGE_HTTP_TOKEN is set and not "" (read here,
                                    never stored: bridge_http.c reads it again) */

    /* log */
    int log_level;               /* "level": "info" (enum log_level) */

    uint32_t shutdown_timeout_ms; /* top-level "shutdown_timeout_ms": 10000 */

    /* limits */
    uint64_t max_held;           /* "max_held": CONFIG_MAX_HELD_DEFAULT, 0..CONFIG_MAX_HELD:
                                    at this many held in all (orphans included) every route
                                    stops consuming; 0 = no bound (only when written) */

    /*
     * "routes_file": "" = WAL_DIR/routes.json. The routes put through the
     * HTTP API (PUT /routes/NAME), kept across restarts; config_load_all()
     * appends them after the file's. Format: {"version": 1, "routes": [ROUTE...]}.
     */
    char routes_file[4096];

    struct config_template *templates; /* "route_templates": {} ; owned, malloc'd */
    int ntemplates;

    /*
     * "routes": at least one (with route_templates and the routes file:
     * at least one in all); owned, malloc'd, room for CONFIG_MAX_ROUTES
     * always, so that the running configuration grows in place (a route
     * added at run time never moves the others: threads reading route
     * names keep valid pointers).
     */
    struct config_route *routes;
    int nroutes;
};

/*
 * The schema: one row per key of the file (src/config/config_keys.def), in
 * the order of the file's key lists. A row with a field (has_field) is read,
 * defaulted, compared and shown from that field alone: base is struct
 * config, or struct config_route for CONFIG_SECT_ROUTE.
 */
enum config_sect {
    CONFIG_SECT_TOP, CONFIG_SECT_BROKER, CONFIG_SECT_TLS, CONFIG_SECT_WAL, CONFIG_SECT_REPL,
    CONFIG_SECT_HTTP, CONFIG_SECT_LOG, CONFIG_SECT_LIMITS, CONFIG_SECT_ROUTE, CONFIG_SECT_RETRY,
    CONFIG_SECT_POLICY,
};
enum config_type {
    CONFIG_T_BOOL, CONFIG_T_INT, CONFIG_T_STR, CONFIG_T_CHOICE, /* held in a field */
    CONFIG_T_NUMBER, CONFIG_T_OBJECT, CONFIG_T_ARRAY, CONFIG_T_SECTION, /* read by their own code */
};
#define CONFIG_KEY_REQUIRED 0x01    /* must be present */
#define CONFIG_KEY_NONEMPTY 0x02    /* a string that must not be "" */
#define CONFIG_KEY_OWN 0x04         /* read by code of its own, not by the walk */
#define CONFIG_KEY_LIVE 0x08        /* a reload writes it into the running route */
#define CONFIG_KEY_RECONSUME 0x10   /* a reload applies it by consuming the ingress again */
#define CONFIG_KEY_NO_RETRY 0x20    /* a retry route has none (refused beside "retry") */
#define CONFIG_KEY_NO_DELAYED 0x40  /* a delayed_exchanges route has none */
#define CONFIG_KEY_STREAM_ONLY 0x80 /* only a stream ingress has it */

struct config_key {
    enum config_sect sect;
    const char *key;            /* as in the file */
    enum config_type type;
    int has_field;
    size_t off, size;           /* the field in the section's struct */
    int64_t lo, hi;             /* CONFIG_T_INT: the range, in the file's units */
    uint64_t def;               /* BOOL, INT (file units), CHOICE held as an index */
    const char *sdef;           /* STR, CHOICE held as a string; NULL: none */
    unsigned shift;             /* INT held as value << shift (10: KiB, 20: MiB) */
    unsigned flags;             /* CONFIG_KEY_* */
    const char *const *choices; /* CHOICE: NULL-terminated */
    int cmp;                    /* no field: how config_diff compares it */
    const char *diff;           /* the path a reload names it by; NULL: its own */
};
extern const struct config_key config_keys[];
extern const int config_nkeys;

/* The row of key in section s, or NULL. */
const struct config_key *config_key_find(enum config_sect s, const char *key);
/* The row of a key of the file's sections (not a route's) named by its own diff path, or NULL. */
const struct config_key *config_key_by_path(const char *path);
/* A BOOL, INT (in the file's units) or CHOICE (its index) row's value in base. */
uint64_t config_key_uint(const struct config_key *k, const void *base);
/* A STR row's value in base, or a CHOICE row's name. */
const char *config_key_str(const struct config_key *k, const void *base);
/* A row with a field: its value differs from a to b. */
int config_key_differs(const struct config_key *k, const void *a, const void *b);
/* A row with a field: its value copied from b to a. */
void config_key_copy(const struct config_key *k, void *a, const void *b);

/* A route's vhost: its "vhost", or the first broker URI's. */
const char *config_route_vhost(const struct config *c, const struct config_route *r);

/*
 * The routes of a routes file (json: its text; name: for messages) appended
 * to c, each read as a route of the file is read (key paths
 * "NAME: routes[ROUTE].key"), then every rule between routes checked again
 * over the whole set. A route whose name the -c file already has is
 * skipped, and *shadowed counts it (the file wins; the caller warns).
 * 0, or -1 with the reason in err (c then unchanged).
 */
int config_add_routes(struct config *c, const char *json, const char *name, int *shadowed,
                      char *err, size_t errlen);

/*
 * config_load, then the routes file (c->routes_file) if it exists. *text,
 * when not NULL, gets the -c file's text (malloc'd; the caller frees):
 * what a PUT re-reads, so that an API change never picks up an unreloaded
 * edit of the file.
 */
int config_load_all(struct config *c, const char *path, char **text, char *err, size_t errlen);

/*
 * The routes file's text with route name put (route_json: a route object;
 * its "name", when present, must be name) or deleted. New text, malloc'd,
 * or NULL with the reason in err (bad JSON, name mismatch); store NULL or
 * "" is an empty file. *found (delete): whether it was there.
 */
char *config_store_put(const char *store, const char *name, const char *route_json, char *err,
                       size_t errlen);
char *config_store_delete(const char *store, const char *name, int *found, char *err,
                          size_t errlen);

/*
 * routes[].share_keys: whom key events speak for -- the origin they carry
 * and the name of the key-event queue (INGRESS_QUEUE.keys.HOLDER). With a
 * replicated WAL it is the log's stream: the owner and its standbys are one
 * holder of the keys, taking turns, so they share one queue (events wait
 * in it for whoever owns the log next) and ignore the events their own log
 * sent, whichever of them sent it. Without, it is the instance.
 */
static inline const char *config_key_holder(const struct config *c)
{
    return c->repl.enabled ? c->repl.stream : c->instance;
}

/*
 * Load path into *c. Returns 0, or -1 with a one-line message (file, key
 * path, problem) in err. On error *c holds nothing to free.
 * On success it warns (log_warn, one line each) when the file is readable by
 * others and holds a broker password, and when an amqps:// URI is used with
 * broker.tls.verify_hostname false.
 */
int config_load(struct config *c, const char *path, char *err, size_t errlen);

/* Same, from a JSON string (tests); name is used in messages. */
int config_parse(struct config *c, const char *json, const char *name, char *err, size_t errlen);

void config_free(struct config *c);

/*
 * What differs from a to b (a reload: a running, b the file read again),
 * one call of cb per difference: what is "added", "removed" or "changed",
 * path the key path -- "broker.uri", "wal.fsync", ..., or "routes[NAME]"
 * for a whole route (routes are matched by name). cb may be NULL. Returns
 * the number of differences (0: the same configuration).
 */
int config_diff(const struct config *a, const struct config *b,
                void (*cb)(void *arg, const char *what, const char *path), void *arg);

/* The index of the route called name (len bytes, not NUL-terminated) in c, or -1. */
int config_route_index(const struct config *c, const char *name, size_t len);

/* Routes a and b have the same name and the same value of every key. */
int config_route_same(const struct config_route *a, const struct config_route *b);

/*
 * Each key of a route that differs from a to b, one call of cb with its
 * name as in the file ("prefetch", "retry" for the whole retry object, ...;
 * the retry route's filled dead_letter_exchange and unroutable_exchange
 * follow retry.parking_exchange). Returns how many.
 */
int config_route_keys_diff(const struct config_route *a, const struct config_route *b,
                           void (*cb)(void *arg, const char *key), void *arg);

/*
 * Before the daemon touches the WAL: wal.dir, or its nearest existing
 * parent when it does not exist yet (the WAL creates it), must be a
 * directory this process can write to and search (access W_OK|X_OK; the
 * directory itself also R_OK). Returns 0, or -1 with a one-line message
 * naming wal.dir in err ("NAME: wal.dir: ..."). Not part of config_parse or
 * --check-config: it depends on the machine and user it runs as, not on
 * the file (a config may be checked elsewhere, by another user).
 */
int config_check_wal_dir(const struct config *c, const char *name, char *err, size_t errlen);

#endif
