/*
 * sim_int.h -- what the simulator's driver files share: sim.c (the seed's
 * configuration, the workload, the model and its checks, main) and
 * simlive.c (the liveness mode: a small disk, intake that stops when the
 * log asks, and the phase that must drain it). Only these two include it;
 * tests/sim/README.md describes what they do together.
 */
#ifndef DB_SIM_SIM_INT_H
#define DB_SIM_SIM_INT_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>

#include "delay-bridge/engine.h"
#include "simfs.h"

#define NROUTES 3
#define NKEYS 8
#define T0 1700000000000ull
#define MAXMSG 1024
#define YEAR_MS (365ull * 24 * 3600 * 1000)

enum { A_NEW = 0, A_TRIED, A_ACKED };                    /* the ADD record */
enum { E_NONE = 0, E_APPENDED, E_TRIED, E_ACKED };        /* the end record */
enum { K_NONE = 0, K_DONE, K_CANCEL, K_REPLACE, K_PURGE }; /* what the end is */

/* The model of one message the driver added. */
struct mmsg {
    uint16_t route;
    int8_t key;        /* -1: none */
    uint8_t add, end, kind;
    uint8_t live;      /* held by the engine of this life */
    uint8_t committed; /* WAITING or later in this life (not PENDING) */
    uint8_t inflight;
    uint8_t taken;     /* taken in this life: its key is no longer findable */
    uint8_t gone;      /* known to be out of the log */
    uint64_t due, msg_id;
    eng_msg h;
};

/* Options of the whole run (command line). */
struct sim_opt {
    int verbose;
    int plant_early;  /* --plant early-fire: the driver lets the engine fire 1 s early */
    int plant_nosync; /* --plant fsync-lie: fdatasync of segments reports success, syncs nothing */
    int plant_hole;   /* --plant stream-hole: the import's "not whole" is ignored */
    int plant_stuck;  /* --plant reserve-stuck: truncating RESERVE gives no space back */
    int liveness;     /* --liveness: every seed is a liveness seed */
    int disk_segs;    /* --disk N: a liveness seed's disk is N segments, not 6-16 from the seed */
    int no_fork;
};

/* A liveness seed's state (simlive.c). */
struct sim_live {
    int on;               /* this seed runs on a small disk and ends with the liveness phase */
    uint64_t capacity;    /* the volume, bytes: 6-16 segments (rounded up to blocks) */
    uint32_t block;       /* 1 or 4096 */
    uint32_t overshoot;   /* K: adds that still arrive after intake stops (a prefetch) */
    uint32_t over_left;   /* of K, in this stop */
    int stopped;          /* intake was stopped at the last add */
    int last_nospc;       /* the last commit met a full disk (reset by a restart) */
    int adds;             /* the liveness phase's own adds, still to make */
    uint64_t steps, bound;
    uint64_t stops, held_back; /* intake stops seen; adds not made because of them */
    int phase;            /* the liveness phase ran */
    int reached_full;     /* a call was refused for capacity before the phase */
    int no_fallocate;     /* any seed: the file system has no fallocate (one in four) */
};

/* One seed's state. */
struct sim_state {
    uint64_t seed;
    struct simrng rng;
    struct engine *e;
    struct mmsg m[MAXMSG];
    int n;
    uint64_t now;
    jmp_buf jb;
    /* configuration from the seed */
    uint64_t seg_bytes, ck_interval, ck_min;
    int write_ahead; /* eng_write_ahead after each settle (issue 41) */
    uint32_t ck_step, wheel_split;
    int collide, nops, crash_every;
    int flip_den;         /* a bit flip after one crash in flip_den */
    struct simfs_faults faults;
    /* what happened */
    int flipped;          /* a bit was flipped in synced data (stays until the run ends) */
    char flip_name[64];
    uint64_t flip_off;
    int reordered;        /* the last crash kept unsynced writes out of order */
    int refused, flip_torn;
    int exit_now;         /* the daemon would exit here: power loss, then recovery */
    int repl;             /* a replicated seed: a stream beside the log, no crashes (simrepl.c) */
    uint64_t repl_refused, repl_imported;
    struct sim_live live;
    char fail[512];
    uint64_t ops, crashes, recoveries, takes, confirms, commits;
    /* log capture */
    char last_err[512];
    char torn_file[64];
    uint64_t torn_off;
    int torn_seen;
};

extern struct sim_opt opt;
extern struct sim_state G;

#define FAILED() (G.fail[0] != 0)
#define TRACE(...) do { if (opt.verbose) { fprintf(stderr, "  [%" PRIu64 "] ", G.ops); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---- sim.c: the model's operations, each checked as it goes ---- */

/* The seed fails with this reason (the first one sticks). */
void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A refusal (WLOG_ECORRUPT, WLOG_EFORMAT) ends the run; checked: it may happen, it names its place. */
void refuse(const char *where, int r);
/* Per route, held / pending / in-flight counts of the engine against the model. */
void check_counts(const char *after);
/* About how long the next add's record is (the intake gate's question). */
uint64_t sim_add_bytes(void);
/* Add a message, keyed or not, due within max_delay ms (0: the workload's delays). */
void sim_add(int keyed, uint64_t max_delay);
/* Commit; 0 (a full disk included: nothing acked), or -1 when the log failed for good. */
int op_commit(void);
/* Take the first due message of route and check it; 1 taken, 0 none, -1 failed or refused. */
int sim_fire(uint16_t route);
/* Confirm message i, in flight. */
void sim_confirm(int i);

/* ---- simlive.c: the liveness mode ---- */

/*
 * From the seed alone (the other draws stay as they were): is this a
 * liveness seed (then not a replicated one), its disk and its overshoot;
 * for every seed, whether fallocate works. configure() hands the disk to simfs.
 */
void live_configure(uint64_t seed);
/* May the workload add now? (always outside liveness seeds) */
int live_may_add(void);
/* A commit returned r. */
void live_committed(int r);
/* A new process: recovery done, nothing stopped yet. */
void live_new_life(void);
/* The faults stop; the log must drain the disk and take messages again, within the bound. */
void live_phase(void);
void live_space_check(void);

#endif
