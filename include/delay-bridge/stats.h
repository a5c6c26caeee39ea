/*
 * stats.h -- one snapshot of everything the daemon counts.
 *
 * Plain structs, no functions but the histogram helpers: the bridge fills a
 * struct db_stats from its parts (engine, consumer, publisher, WAL) with
 * bridge_stats(), and every reader -- the HTTP endpoint's /metrics and
 * /stats, the shutdown summary, tests -- reads the same snapshot. Producing
 * one is O(routes): every value is a counter kept as events happen, never a
 * scan of the held messages.
 *
 * Counters ("_total" in Prometheus terms) only grow during a process's
 * life and restart from 0 with it; gauges ("pending", "inflight", ...) are
 * the state at the moment of the snapshot.
 *
 * Ownership: name strings and the routes array belong to whoever filled the
 * snapshot and stay valid until its next bridge_stats() call or its end.
 */
#ifndef DB_STATS_H
#define DB_STATS_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

/*
 * A fixed-bucket histogram in the Prometheus style: le[i] are the upper
 * bounds in seconds (cumulative when rendered), the last bucket is +Inf.
 */
#define DB_HIST_BUCKETS 16

struct db_hist {
    uint64_t count[DB_HIST_BUCKETS]; /* per bucket, NOT cumulative */
    uint64_t n;                      /* observations */
    double sum;                      /* seconds */
};

/* Upper bounds (seconds) shared by every histogram; le[DB_HIST_BUCKETS-1] is +Inf. */
extern const double db_hist_le[DB_HIST_BUCKETS];

/* Add one observation of v seconds (negative counts as 0). */
void db_hist_observe(struct db_hist *h, double v);

/*
 * The stages of a firing, each timed by the bridge itself, which add up
 * to the lateness the broker's confirm closes (fire_lateness):
 *
 *   wake     due time -> the loop turn that takes the message begins
 *            (the wall clock: due times are wall-clock ms)
 *   read     that turn begins -> the payload is read back from the log
 *            and handed to the publisher (the turn's earlier work, the
 *            earlier messages of the burst and the pread)
 *   write    handed to the publisher -> the send() that put the last byte
 *            of its frames in the kernel returned (encoding, the rest of
 *            the burst, a socket that had no room)
 *   confirm  written -> the broker's confirm was read (the broker's
 *            routing, its queue's fsync for a persistent message, the
 *            loop's turn that reads it)
 *
 * /metrics: delay_bridge_fire_stage_seconds{route,stage}; /stats:
 * routes[].fire_stages.
 */
enum db_fire_stage { DB_STAGE_WAKE, DB_STAGE_READ, DB_STAGE_WRITE, DB_STAGE_CONFIRM, DB_STAGES };
extern const char *const db_stage_names[DB_STAGES];

struct db_stats;
/*
 * Progress of a long job (WAL replay at start) written by the thread doing
 * it and read by the loop thread for /stats: plain atomics, no lock.
 */
struct db_progress {
    _Atomic uint64_t done;  /* bytes done */
    _Atomic uint64_t total; /* bytes in all, 0 while unknown */
};

enum db_conn_state {
    DB_CONN_DOWN = 0,       /* not connected; retrying with backoff */
    DB_CONN_UP = 1,         /* connected and serving */
    DB_CONN_BLOCKED = 2,    /* connected, broker sent connection.blocked */
};

struct db_route_stats {
    const char *name;
    const char *target_exchange;
    const char *vhost;        /* the vhost its connections are in */
    int retired;              /* removed at run time: consumes nothing, publishes what it holds */
    int consume_refused;      /* added at run time, its declares refused by the broker: retried */

    /* counters */
    uint64_t received;        /* deliveries taken from the ingress queue and logged */
    uint64_t rejected;        /* deliveries rejected (larger than wal.max_message_bytes) */
    uint64_t invalid_delay;   /* x-delay not a number we accept, or above max_delay_ms */
    uint64_t invalid_key;     /* x-delay-key or x-delay-cancel not a string of <= 255 bytes */
    uint64_t deduplicated;    /* redeliveries recognised as already logged: acked, not stored */
    uint64_t unstamped;       /* delay_from "broker": x-delay without timestamp_in_ms, from receipt */
    uint64_t dead_lettered;   /* published to dead_letter_exchange with x-delay-error */
    uint64_t refused;         /* delayed_exchanges: deliveries not taken (from the default or
                                 the route's ingress exchange, or a bridge's republish):
                                 rejected, requeue false */
    uint64_t published;       /* basic.publish sent (a republish after a nack counts again) */
    uint64_t confirmed;       /* broker confirmed: the message is done */
    uint64_t nacked;          /* broker nacked: published again */
    uint64_t publish_retries; /* route channel reopened after an error */
    uint64_t returned;        /* basic.return: no queue bound at the target */
    uint64_t cancelled;       /* removed by x-delay-cancel, replaced, or purged */
    uint64_t cancel_missed;   /* cancel for a key not pending (unknown, published, in flight) */
    uint64_t key_events_sent;     /* share_keys: events published for keyed messages and cancels */
    uint64_t key_events_received; /* share_keys: events from the route's key-event queue */
    uint64_t key_events_applied;  /* ... that cancelled an older version held here */

    /* gauges: every held message of the route is in exactly one of these */
    uint64_t waiting;  /* durable, in the timing wheel */
    uint64_t due;      /* due, not yet published */
    uint64_t inflight; /* published, confirm not yet received */
    uint64_t pending;  /* waiting + due + inflight (+ not yet durable) */
    uint64_t oldest_due_ms; /* due time of the route's oldest due, unpublished message; 0 = none */

    int64_t stream_offset;  /* queue_type "stream": the next offset read (all below are in
                               the log or its running commit); -1 = from the first; other
                               queue types: -2, not shown */
    int channel_open;       /* the route's publish channel is open */
    struct db_hist lateness; /* confirm time minus due time, seconds */
    struct db_hist stage[DB_STAGES]; /* enum db_fire_stage: where the lateness went */
    /* max_held (README, "Bounds on what is held") */
    uint64_t max_held;          /* routes[].max_held; 0 = none of its own */
    uint64_t held_limit_paused; /* 1: not consuming, its max_held or limits.max_held reached */
    uint64_t held_limit_pauses; /* times its own max_held paused it */
};

struct db_wal_stats {
    uint64_t segments;       /* segment files on disk */
    uint64_t disk_bytes;     /* their total size */
    uint64_t live_bytes;     /* bytes of live ADD records */
    uint64_t live_records;
    uint64_t commits;        /* group commits that wrote */
    uint64_t appended_bytes;
    uint64_t compacted_bytes;
    int failed;              /* a write or fsync failed: the daemon is stopping */
    int writable;            /* 1 unless failed or out of space */
    int no_space;            /* the disk is full: consuming paused until space returns */
    int intake_paused;       /* space low (or full): consuming paused, firing goes on */
    uint64_t intake_pauses;  /* times it paused for space */
    uint64_t free_bytes;     /* the WAL volume's free space, the reserve excluded */
    uint64_t reserve_bytes;  /* the space reserve (dir/RESERVE) when whole */
    uint64_t reserve_held;   /* what it holds now */
    uint64_t reserve_spent;  /* times it was given back to a commit on a full disk */
    uint64_t intake_waiting; /* deliveries taken off the wire while paused, not yet logged */
    uint64_t intake_waiting_bytes;
    uint64_t compact_segment; /* segment being compacted, 0 if none */
    double compact_progress;  /* 0..1 through it */
    struct db_hist fsync;    /* fdatasync duration, seconds */
    /* checkpoints (wlog.h) */
    const char *ckpt_state;   /* "idle", "writing", "sealing" */
    double ckpt_progress;     /* 0..1 through the walk while writing */
    uint64_t ckpt_installed;  /* since start */
    uint64_t ckpt_failed;
    uint64_t ckpt_lsn;        /* the installed one's replay start, 0 = none */
    uint64_t ckpt_bytes;
    double ckpt_age_seconds;  /* since the installed one began */
    double ckpt_seconds;      /* begin to installed, the last one */
    int ckpt_used_at_start;   /* recovery read a checkpoint */
    /* replication to a RabbitMQ stream (wal.replicate; wlog.h's wlog_repl_stats) */
    int repl;                 /* replication is configured */
    const char *repl_state;   /* "connecting", "standby", "importing", "owner", "failed": a name to print */
    int repl_waiting;         /* connecting or standby: not recovering yet (status/ready.c) */
    int repl_owner;           /* holds the lease and replicates every commit */
    const char *repl_stream;
    int repl_complete;        /* the stream holds the whole log */
    uint64_t repl_imported_records, repl_imported_bytes;
    double repl_import_seconds, repl_standby_seconds;
    uint64_t repl_published_messages, repl_published_bytes;
    uint64_t repl_horizons, repl_horizon_lsn, repl_needed_bytes;
    uint64_t repl_max_bytes;  /* wal.replicate.max_mb in bytes, 0 = no limit */
    int repl_horizon_running;
    struct db_hist repl_confirm; /* stream confirm latency per commit, seconds */
    uint64_t repl_lease_renewals;
    int repl_resumed;
    uint64_t repl_refused;    /* stream messages not of the log's broker user: not imported */
};

/*
 * Retry routes (routes[].retry): one row per (route, queue the message
 * failed in), in the order first seen; at most DB_RETRY_QUEUES_MAX queues
 * a route, the rest counted together under queue "_other", so a client
 * inventing queue names cannot grow the metrics without bound.
 */
#define DB_RETRY_QUEUES_MAX 256
#define DB_RETRY_BUCKETS 9 /* failed attempt n: le 1, 2, 3, 5, 10, 20, 50, 100, +Inf */
extern const uint32_t db_retry_le[DB_RETRY_BUCKETS - 1];

struct db_retry_stats {
    const char *route;
    const char *queue;
    uint64_t retries;             /* dead-letters held for another attempt */
    uint64_t parked[6];           /* parked, by reason: retry.h's retry_park_reasons order
                                     (RETRY_PARK_REASONS) */
    uint64_t attempts[DB_RETRY_BUCKETS]; /* failed attempt number, per bucket, NOT cumulative */
    uint64_t attempts_sum, attempts_n;
};

/*
 * delayed_exchanges routes: messages published to their own exchange, one
 * row per (route, exchange) in the order first seen; at most
 * DB_EXCHANGES_MAX exchanges a route, the rest counted under "_other".
 */
#define DB_EXCHANGES_MAX 64

struct db_exchange_stats {
    const char *route;
    const char *exchange;
    uint64_t published;           /* publishes to it (a hand-back and a republish count) */
};

struct db_stats {
    const char *version;
    const char *instance;       /* instance name from the config, "" if none */
    uint64_t now_ms;            /* wall clock of the snapshot */
    uint64_t start_ms;          /* process start */
    uint64_t loop_turn_ms;      /* wall clock of the last event-loop turn */

    /* recovery (WAL replay at start) */
    int recovered;              /* 1 once the held set is rebuilt */
    double recovery_seconds;
    double recovery_progress;   /* 0..1 while replaying, 1 after */

    /* connections: every vhost's pair taken together (up: all up; blocked: any blocked) */
    enum db_conn_state consumer;
    enum db_conn_state publisher;
    /* ... and each vhost's pair (routes[].vhost): one per vhost in use */
    struct db_vhost_conn {
        const char *vhost;
        enum db_conn_state consumer, publisher;
        int routes;             /* routes it serves, retired ones included */
    } *vhosts;
    int nvhosts;
    int stopping;               /* SIGTERM received: draining */

    /* held messages, all routes */
    uint64_t held;              /* every message the WAL holds live */
    /* limits.max_held, and why consuming is paused for a held bound (README, "Bounds on
     * what is held"): reason names the key path; NULL when no bound holds consuming */
    struct {
        uint64_t max_held;      /* limits.max_held; 0 = none */
        int paused;             /* limits.max_held reached: every route paused */
        uint64_t pauses;        /* times it paused every route */
        const char *reason;     /* "held limit reached ...": /readyz's reason; NULL = none */
    } held_limit;
    uint64_t orphaned;          /* held for a route missing from the config: never published */
    uint64_t next_due_ms;       /* earliest due time of a waiting message, 0 = none; exact, or
                                   a lower bound when over 65536 messages share its wheel slot */
    uint64_t ram_bytes;         /* engine structures (pool, index, wheel) */
    uint64_t rss_bytes;         /* process resident set, 0 if unknown */

    struct db_wal_stats wal;

    /* The purge job (POST /purge): the last one started, if any. */
    struct {
        int started;         /* a job ran since start */
        int done;            /* it finished */
        const char *route;
        const char *queue;   /* only the messages with this routing key; NULL: all */
        const char *exchange; /* only those published to this exchange; NULL: all */
        uint64_t due_before; /* UINT64_MAX: everything */
        uint64_t removed;
        double progress;     /* 0..1 of the message table walked */
    } purge;

    /* Drain (POST /drain): hand every held message back to its ingress, then exit 0. */
    struct {
        int active;           /* draining: not consuming, not ready */
        int done;             /* nothing left: the process exits in a moment */
        uint64_t handed_back; /* republished to an ingress exchange and confirmed */
        uint64_t remaining;   /* still held */
    } drain;

    /* SIGHUP: the configuration file read again (bridge_reload.c) */
    struct {
        uint64_t count;     /* SIGHUPs taken */
        uint64_t refused;   /* ... whose file did not load: nothing changed */
        uint64_t last_ms;   /* wall clock of the last, 0 = none */
        int pending;        /* changes the last accepted file has that wait for a restart */
        const char *error;  /* why the last one was refused; "" when it was not */
    } reload;

    int nroutes;
    struct db_route_stats *routes;
    int nretry;
    const struct db_retry_stats *retry; /* every retry route's rows (above) */
    int nexchanges;
    const struct db_exchange_stats *exchanges; /* delayed_exchanges routes' rows (above) */
};

#endif
