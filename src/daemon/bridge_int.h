/*
 * bridge_int.h -- the bridge's state, shared by its files (internal: only
 * bridge*.c include it; bridge.h is the contract main.c sees).
 *
 *   bridge.c         orchestration: publishes out, the loop turn,
 *                    recovery, signals, life
 *   bridge_http.c    the HTTP endpoint's handlers (api.c renders)
 *   bridge_routes_http.c  the route API (/routes) and the routes file it keeps
 *   bridge_commit.c  the one commit per turn and the acks it lets out
 *   bridge_intake.c  deliveries in: the intake gate, the stash, the log
 *   bridge_keys.c    the key-event protocol between bridges (share_keys)
 *   bridge_stats.c   the /stats snapshot and the summary logged at exit
 *   bridge_core.c    the fatal stop and the route lookup
 *   bridge_conns.c   the connections: a consumer and a publisher per vhost
 *   bridge_routes.c  routes added, changed and removed at run time
 *   bridge_reload.c  SIGHUP: the file read again
 *
 * The floors. A file calls only files on a floor below its own, never one
 * above, and none calls back into bridge.c; what two floors both need
 * goes down, not up:
 *
 *   5  bridge.c          -> every file below
 *   4  bridge_http.c     -> routes_http, commit, stats, core
 *   3  bridge_routes_http.c -> routes (bridge_config_apply and its dry run), core
 *   3  bridge_commit.c   -> intake (a durable commit reopens the gate), core
 *   2  bridge_intake.c   -> keys, core
 *   1  bridge_keys.c     -> core
 *      bridge_stats.c    -> conns
 *   0  bridge_core.c     -> conns
 *      bridge_conns.c    -> nothing of the bridge
 *
 * A new function goes on the lowest floor whose files it calls; a file that
 * would need one from above has found something that belongs lower down
 * (or in the caller, which can pass it in).
 *
 * struct bridge owns the parts (consumer, publisher, engine, http) and every
 * buffer in it; bridge_free() releases them. Everything runs on the loop
 * thread but the recovery thread (rec), which touches only rec.
 */
#ifndef DELAY_BRIDGE_BRIDGE_INT_H
#define DELAY_BRIDGE_BRIDGE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "dstash.h"
#include "duewake.h"
#include "bridge.h"
#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "http.h"
#include "base/log.h"
#include "delay-bridge/publisher.h"


#define PURGE_STEP 65536            /* message-table entries a purge looks at per turn */
#define PURGE_AT_ONCE (1u << 20)    /* ... and in the request itself, before answering 202 */
#define MAINTAIN_BUDGET (8u << 20)
#define MAINTAIN_EVERY_MS 100
/* Draining: the engine's clock jumps here, so every held message is due. */
#define DRAIN_HORIZON_MS (UINT64_MAX / 4)
#define DRAIN_LINGER_MS 1000 /* after the drain, /stats reports it this long before the exit */
#define DISK_RETRY_MS 1000
#define MAX_SLEEP_MS 1000
#define PUBLISH_BURST 1024 /* per route per round, so routes take turns */

#define BRIDGE_MAX_VHOSTS 64 /* vhosts in use at once: a consumer and a publisher each */

/* One vhost's connections, and where its acks stand (bridge_conns.c). */
struct vconn {
    char vhost[CONFIG_NAME_MAX + 1]; /* its name (config_route_vhost) */
    struct consumer *cons;
    struct publisher *pub;
    /* The last delivery appended, and the last one the running commit covers. */
    uint32_t logged_gen, commit_gen;
    uint64_t logged_tag, commit_tag;
};

/* What the bridge itself counts per route (the parts count the rest). */
struct route_counts {
    uint64_t received, rejected, invalid_delay, invalid_key, dead_lettered, deduplicated;
    uint64_t key_events_sent, key_events_received, key_events_applied, unstamped, refused;
    struct log_ratelimit rl_delay, rl_return, rl_stamp, rl_refused[4]; /* bridge_dx.c's reasons */
    int held_paused;      /* its max_held reached: not consuming (bridge_held_gate) */
    uint64_t held_pauses; /* times it paused so */
    struct db_hist wake, read; /* a firing's first two stages (stats.h); the publisher times the rest */
};

struct bridge {
    struct ev_loop *loop;
    const struct config *cfg;
    struct engine *eng;
    /* The connections, one pair per vhost in use (bridge_conns.c), and each route's pair. */
    struct vconn vc[BRIDGE_MAX_VHOSTS];
    int nvc;
    int16_t route_vc[CONFIG_MAX_ROUTES];
    struct consumer_ops cops;  /* what every pair reports to */
    struct publisher_ops pops;
    struct http_server *http;
    struct route_counts *counts; /* CONFIG_MAX_ROUTES */
    uint64_t log_id;
    uint64_t commit_began_us; /* when the running or last commit began (monotonic) */
    uint64_t commit_early_at; /* deliveries that start a commit before the interval */
    /*
     * Stream ingresses (queue_type "stream"): each route's place file
     * (ingress_off.h; fd -1 for other routes; its stored/upto are what the
     * file says, read at start, then last written), and the place each
     * running commit covers, written to the file once the commit is durable.
     * NULL when no route reads a stream.
     */
    struct ingress_off *ioff;
    int64_t *commit_next;


    ev_prepare prepare;
    ev_timer wake;        /* the monotonic waits: retries, heartbeats, the longest sleep */
    struct duewake due;   /* the wheel's next due time, on the wall clock (duewake.h) */
    ev_signal sigterm, sigint, sighup;
    ev_stat watch;        /* --watch-config: the -c file, looked at every few seconds */
    /* SIGHUP (bridge_reload.c): the file read again, what it changed and what waits */
    struct {
        const char *path;   /* the -c file; NULL: nothing to read again */
        struct config *cfg; /* b->cfg, writable: the one writer is the reload, on the loop */
        uint64_t count, refused, last_ms;
        int pending;        /* changes in the file not applied until a restart */
        char error[512];    /* why the last reload was refused; "" */
        char *text;         /* the -c file's text as last loaded (config_load_all) */
        char *store;        /* the routes file's text as last read or written; NULL: none */
        uint64_t api_changes; /* routes put or deleted through the API */
        int deferred;       /* a SIGHUP came while recovering: read once recovered */
    } reload;
    /*
     * Clocks: start_ms and turn_ms are wall-clock times /stats shows;
     * every duration, deadline and retry below is on the monotonic clock
     * (clock_mono_ms: a step of the wall clock must not fire or stall it).
     */
    uint64_t start_ms, turn_ms;
    uint64_t turn_us; /* turn_ms to the microsecond: the "wake" stage ends there (stats.h) */
    uint64_t start_mono_ms, last_maintain;
    int ready_logged;
    int disk_full;          /* the last commit found no space: consuming paused */
    int space_paused;       /* the log asks for no new messages: consuming paused */
    uint64_t space_pauses;  /* times consuming paused so (/stats wal.intake_pauses) */
    struct dstash stash;    /* deliveries taken while paused, not yet in the log */
    /* limits.max_held reached: every route paused (bridge_held_gate); times it did */
    int held_all_paused;
    uint64_t held_all_pauses;
    char held_reason[CONFIG_NAME_MAX + 160]; /* why a held bound pauses consuming, for
                                                /readyz (bridge_held_gate); "" = none */
    uint64_t disk_retry_at; /* when to try the commit again (monotonic) */
    int stopping;
    uint64_t stop_deadline; /* monotonic */
    int exit_code, done;

    struct db_route_stats *snap; /* bridge_stats() output */
    struct db_vhost_conn vsnap[BRIDGE_MAX_VHOSTS]; /* ... its connections per vhost */
    struct bridge_dx *dx;        /* delayed_exchanges routes' counts per exchange
                                    (bridge_dx.c); NULL until one publishes */
    struct bridge_retry *retry;  /* retry routes' counts per queue (bridge_retry.c); NULL
                                    until the first is counted */

    /* The purge job (POST /purge), a bounded step per loop turn. */
    struct {
        int started, active;
        struct eng_purge job;
    } purge;

    /*
     * The drain (POST /drain): every held message handed back, then exit 0.
     * Once done it lingers DRAIN_LINGER_MS with /stats saying so, so that
     * `delay-bridge drain` (polling every 200 ms) can tell a finished drain
     * from a daemon that died.
     */
    struct {
        int active, done;
        uint64_t handed_back, started_ms, done_ms; /* started, done: monotonic */
    } drain;

    /* Recovery on a thread: the loop learns it is over through `recovered`. */
    struct {
        pthread_t thread;
        int running;
        ev_async recovered;
        ev_async log_ready; /* the log's sync thread finished a commit */
        struct eng_opts opts;
        struct db_progress progress;
        struct engine *eng;
        int result;
    } rec;
};


/* bridge_conns.c: the connections, per vhost */
/* Serve route by its vhost's pair (made on first use): publish, and consume when consume. */
int bridge_route_attach(struct bridge *b, int route, int consume);
static inline struct vconn *bridge_vc(struct bridge *b, int route)
{
    return &b->vc[b->route_vc[route]];
}
static inline struct consumer *bridge_cons(const struct bridge *b, int route)
{
    return b->vc[b->route_vc[route]].cons;
}
static inline struct publisher *bridge_pub(const struct bridge *b, int route)
{
    return b->vc[b->route_vc[route]].pub;
}
/* d was appended: its pair's acks may cover it once committed. */
void bridge_logged(struct bridge *b, const struct delivery *d);
void bridge_conns_turn(struct bridge *b, uint64_t mono);
int bridge_conns_up(const struct bridge *b);      /* every consumer and publisher */
int bridge_consumers_up(const struct bridge *b);
uint64_t bridge_conns_wait_ms(const struct bridge *b, uint64_t mono);
int bridge_conns_busy(const struct bridge *b);
enum bridge_consumers_do {
    CONSUMERS_HOLD, CONSUMERS_RELEASE, CONSUMERS_PAUSE, CONSUMERS_STOP, CONSUMERS_ABORT
};
void bridge_consumers(struct bridge *b, enum bridge_consumers_do what);
size_t bridge_pubs_inflight(const struct bridge *b);
int bridge_pubs_up(const struct bridge *b);
void bridge_pubs_flush(struct bridge *b, int force);
void bridge_pubs_close(struct bridge *b);
void bridge_conns_free(struct bridge *b);

/* bridge_core.c */
/* A failed log write, fsync or read: stop without acking anything more (exit 1). */
void bridge_fatal(struct bridge *b, const char *what, int err);
/* Route names found in the log -> route index (arg: the struct config). -1: unknown. */
int bridge_route_index(void *arg, const char *name, size_t len);

/* bridge_keys.c */
/* Tell the route's other bridges of a keyed message or a cancel ("replace" or "cancel"). */
void bridge_key_event_out(struct bridge *b, int route, const char *kind, const char *key,
                          size_t key_len, uint64_t at);
/* Another bridge's key event: cancel our older version of the key, if we hold one. */
void bridge_key_event_in(struct bridge *b, const struct delivery *d);
/* A keyed delivery recognised as a redelivery of a logged message: its event again, dated
 * when the logged copy was first taken (first_ms, from eng_seen; 0 = not known). */
void bridge_key_event_again(struct bridge *b, int route, const struct walrec_add *a,
                            uint64_t first_ms);

/* bridge_intake.c: deliveries in. */
/* The consumer's delivery callback: into the log, or the stash while the gate is closed. */
void bridge_on_delivery(void *arg, const struct delivery *d);

/* bridge_retry.c: a retry route's delivery d, logged as a (held or parked). */
void bridge_retry_taken(struct bridge *b, const struct delivery *d, const struct walrec_add *a,
                        uint64_t mono);
/* A retry sent back to a queue that is gone (returned): parked now. */
void bridge_retry_gone(struct bridge *b, int route, const struct walrec_add *a);
/*
 * bridge_dx.c, delayed_exchanges routes: d refused on intake (rejected,
 * counted, logged: from the default or the route's ingress exchange, or a
 * bridge's republish come back); 1 when it was. A publish to a message's
 * own exchange counted; refusing a record at publish time; the rows for
 * the snapshot (valid until the next call).
 */
int bridge_dx_refuse(struct bridge *b, const struct delivery *d);
void bridge_dx_published(struct bridge *b, int route, const char *exchange);
void bridge_dx_refused_record(struct bridge *b, int route, const struct walrec_add *a);
const struct db_exchange_stats *bridge_dx_rows(struct bridge *b, int *n);
void bridge_dx_free(struct bridge *b);

/* Every retry row, for the snapshot (valid until the next call). */
const struct db_retry_stats *bridge_retry_rows(struct bridge *b, int *n);
void bridge_retry_free(struct bridge *b);

/* bridge_reload.c: handle SIGHUP (read the configuration again). */
void bridge_reload_init(struct bridge *b);
/* Recovery is over: a SIGHUP that came meanwhile is handled now. */
void bridge_reload_recovered(struct bridge *b);
/* The routes file's text (malloc'd), or NULL when there is none. */
char *bridge_read_store(const char *path);

/*
 * bridge_routes.c: the running routes made what a new configuration says,
 * without a restart (a SIGHUP, or the HTTP route API). Routes added start
 * consuming; routes removed stop consuming and retire (what they hold is
 * published when due, config_route.retired); routes changed apply each
 * key that can change live. origin ("reload", "api") goes in the log
 * lines. next is left holding what was not moved into the running
 * configuration; the caller frees it.
 */
struct bridge_apply {
    int applied, pending, added, removed;
    char pending_keys[512]; /* the key paths that wait for a restart, ", "-separated */
};
void bridge_config_apply(struct bridge *b, struct config *next, const char *origin,
                         const char *only, struct bridge_apply *out);
/*
 * Dry run of bridge_config_apply (nothing changes): how many changes would
 * wait for a restart, their key paths in keys. The API refuses those
 * (409) rather than store what it cannot run. only: one route's name (an
 * API change looks at that route alone, not at edits of the file that
 * wait for a reload); NULL: everything.
 */
int bridge_config_pending(struct bridge *b, struct config *next, const char *only, char *keys,
                          size_t len);
/* Routes may change now: recovered, not draining or stopping. 0 = yes, else why in why. */
int bridge_routes_busy(struct bridge *b, char *why, size_t len);
/* The consumer's state callback: a lost connection drops the stash. */
void bridge_on_consumer_state(void *arg, int up);
/* Follow the log's intake gate: cancel or restore the ingress consumers. */
void bridge_intake_gate(struct bridge *b);
/* The gate is open: append the stash, oldest first, while the log has room. */
void bridge_stash_drain(struct bridge *b);
/*
 * The held gate: each route's consuming paused at its max_held, every
 * route's at limits.max_held, resumed below 95 % of the bound (logged both
 * ways). Cheap (O(routes)): called every loop turn and at recovery's end.
 */
void bridge_held_gate(struct bridge *b);
/* At start: warn when limits.max_held is 0, or needs more RAM than the process's cgroup allows. */
void bridge_held_start(struct bridge *b);

/* bridge_commit.c */
/* Commit what was appended and confirmed (unless a commit runs); ack what it covers. */
void bridge_commit_and_ack(struct bridge *b);
/* Half the smallest prefetch (at least 1): the deliveries that start a commit early. */
uint64_t bridge_commit_early_at(const struct config *cfg);
/* us until the pacing lets the next commit start (wal.commit_interval_ms); 0 = now. */
uint64_t bridge_commit_wait_us(struct bridge *b, uint64_t mono_us);
/* Commit now and wait for it (an operator's request that answers "durable"). */
void bridge_commit_and_wait(struct bridge *b);

/* bridge_stats.c */
/* The totals per route and of the WAL, one log line each, at a clean exit. */
void bridge_log_summary(struct bridge *b);

/* bridge_http.c */
/* Start the HTTP endpoint if http.listen is set. 0, or -1 (logged). */
int bridge_start_http(struct bridge *b);

/* bridge_routes_http.c */
struct json_object;
/* api_ops.routes (api.h): GET /routes, GET, PUT and DELETE /routes/NAME. */
int bridge_routes_http(void *arg, const char *method, const char *name, const char *body,
                       size_t len, struct json_object *out);

#endif
