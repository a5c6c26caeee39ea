/*
 * sim.c -- the deterministic simulator: the engine, the timing wheel, the
 * segment log, its checkpoints, compaction and keys, run on a simulated
 * clock over a simulated file layer (simfs.c), against a model kept beside
 * them, from one seed.
 *
 * ONE SEED, ONE RUN
 *
 * A seed fixes everything: the configuration (segment size 1-8 KiB so that
 * rolls and compaction come every few dozen messages, checkpoint interval
 * and step, three routes, a colliding key hash for some seeds, which faults
 * are on) and then a workload of a few hundred operations, each drawn from
 * the seed:
 *
 *   add          a message, delay 0 to ~3 years (log-uniform, mostly short),
 *                keyed (8 keys per route: replacements) or not;
 *   cancel       by key (eng_cancel);
 *   purge        a route, all or due before a time (eng_purge_*, small budget);
 *   commit       group commit; the commit's adds are acked when it succeeds;
 *   time         the clock moves 0-2 s, or jumps hours to a year;
 *   fire         eng_advance to now, eng_take, then confirm, nack (eng_unsent),
 *                divert, or a lost channel (eng_unsent_route);
 *   maintain     eng_maintain (compaction, checkpoint walk and install),
 *                eng_checkpoint;
 *   restart      commit, close, open: a clean stop;
 *   kill         power loss between two calls.
 *
 * Beside that, the file layer crashes the process at the n-th mutating call
 * (n from the seed, re-armed after every recovery), fails fsyncs, fills the
 * disk, and the driver flips a bit of synced data after some crashes. After
 * every crash or stop: recovery (which itself may crash), then the check.
 *
 * THE MODEL AND WHAT MUST HOLD
 *
 * Each message the driver added has: its route, due time, key; whether its
 * ADD record was ever handed to a commit (it may then be on disk), and was
 * acked (a commit of it succeeded); likewise its end record (DONE after a
 * confirm, CANCEL after a cancel, replacement or purge). Checked:
 *
 *   on every take   the message is held, committed, not cancelled, not in
 *                   flight, due at or before now (none fires early), and the
 *                   first of its route in (due, id) order among the due ones
 *                   (none fires late, FIFO among equal due times); nothing is
 *                   taken when nothing is due;
 *   on every op     per route, held, pending and in-flight counts agree with
 *                   the model; cancel and replacement hit exactly when the
 *                   model says a pending message holds the key; a purge
 *                   removes exactly the model's set;
 *   after recovery  every acked message without an end record that may be on
 *                   disk is held (nothing acked is lost); nothing is held
 *                   whose ADD never reached a commit (no phantom), whose DONE
 *                   or CANCEL was acked (none comes back, a cancelled or
 *                   replaced one never fires), twice, or with another due
 *                   time, route or body; the held count of eng_stats is the
 *                   listed one; eng_find(route, key) returns the newest held
 *                   message with that key.
 *   corruption      recovery, a take or a compaction that meets damage must
 *                   refuse (WLOG_ECORRUPT with "offset=" in its log line, or
 *                   WLOG_EFORMAT naming the file): the run then ends, counted
 *                   as refused. A refusal is a failure unless a bit was
 *                   flipped or the last crash kept unsynced writes out of
 *                   order (wal_open.c documents that as reported corruption).
 *                   One documented limit is accepted: a flip in the last
 *                   record of the newest segment reads as a torn tail and is
 *                   cut (the run ends there, counted).
 *   fsync failure   the log fails and stays failed (every later commit
 *                   returns the first error); the driver then exits the
 *                   process (a crash), as the daemon does.
 *
 * NOT COVERED
 *
 * The log's sync thread (wal_log.c, opts.sync_thread): the simulator drives
 * wal_log(wal_new()) with synchronous commits, so the completion of a commit on
 * another thread, and eng_poll/notify, are not exercised here (test_engine's
 * sync_thread and async cases cover them). The checkpoint install thread
 * runs inline (walfs.h). The replicated log is simulated in part only
 * (simrepl.c): one seed in six publishes every commit's records to a
 * simulated stream and, at its end, loses the disk and rebuilds the log
 * from the stream (replrec.c's import, a batch lost or duplicated), without
 * crashes; the lease, horizons, retention and resuming are not. Neither is
 * the bridge (consumer, publisher, redelivery detection by fingerprint,
 * x-delay parsing), salvage, or anything in another directory than the WAL's.
 *
 * REPLICATED SEEDS
 *
 * After the import: a stream that lost a batch in the middle must be
 * reported as not whole (the bridge refuses, WLOG_EREPLICA: counted as
 * "stream holes refused"); a whole one (maybe with a duplicated batch) must
 * give back a log that passes every check of a recovery above.
 *
 * LIVENESS SEEDS (simlive.c, which shares this file's state through
 * sim_int.h): about one seed in five runs on a small disk, takes messages
 * only while the log's intake gate is open, and ends with a phase, faults
 * stopped, that must drain everything and take messages again within a
 * bound: a full disk must never stop the bridge for good.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/engine.h"
#include "delay-bridge/wal.h"
#include "base/log.h"
#include "sim_int.h"
#include "simfs.h"
#include "simrepl.h"

static const char *const route_names[NROUTES] = {"alpha", "beta", "gamma"};

struct sim_opt opt;
struct sim_state G;

/* ---- log: the code under test logs here (log.c is not linked) ---------------------------- */

static enum log_level g_level = LOG_LEVEL_WARN;

void log_set_level(enum log_level l)
{
    g_level = l;
}

enum log_level log_get_level(void)
{
    return g_level;
}

void log_at(enum log_level l, const char *mod, const char *msg, const char *fmt, ...)
{
    char kv[400] = "";
    va_list ap;

    if (l < g_level && !opt.verbose)
        return;
    if (fmt) {
        va_start(ap, fmt);
        vsnprintf(kv, sizeof(kv), fmt, ap);
        va_end(ap);
    }
    if (opt.verbose)
        fprintf(stderr, "  log %s %s: %s %s\n", l == LOG_LEVEL_ERROR ? "error" : l == LOG_LEVEL_WARN ? "warn" : "info", mod, msg, kv);
    if (l == LOG_LEVEL_ERROR)
        snprintf(G.last_err, sizeof(G.last_err), "%s: %s %s", mod, msg, kv);
    if (l == LOG_LEVEL_WARN && strstr(msg, "torn tail truncated")) {
        const char *f = strstr(kv, "file="), *o = strstr(kv, "offset=");
        if (f && o) {
            const char *slash = strrchr(SIMFS_DIR "/", '/');
            (void)slash;
            f += 5 + strlen(SIMFS_DIR) + 1;
            snprintf(G.torn_file, sizeof(G.torn_file), "%.*s", (int)strcspn(f, " "), f);
            G.torn_off = strtoull(o + 7, NULL, 10);
            G.torn_seen = 1;
        }
    }
}

/* ---- failing -------------------------------------------------------------------------- */

void failf(const char *fmt, ...)
{
    va_list ap;

    if (G.fail[0])
        return;
    va_start(ap, fmt);
    vsnprintf(G.fail, sizeof(G.fail), fmt, ap);
    va_end(ap);
}

/* ---- messages ------------------------------------------------------------------------- */

static int route_index(void *arg, const char *name, size_t len)
{
    for (int i = 0; i < NROUTES; i++)
        if (strlen(route_names[i]) == len && memcmp(route_names[i], name, len) == 0)
            return i;
    return -1;
}

static const char *route_name(void *arg, int i)
{
    return route_names[i];
}

static uint64_t collide_hash(uint16_t route, const char *key, size_t len)
{
    return 42; /* every key the same: hits are confirmed against the record */
}

static char g_keys[NKEYS][8] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"};

/* The body of message i: its token, then bytes that follow from it. */
static size_t make_body(int i, uint8_t *out)
{
    size_t n = (size_t)snprintf((char *)out, 16, "T%06d|", i);
    size_t pad = (size_t)((unsigned)i * 37u % 211u);

    for (size_t j = 0; j < pad; j++)
        out[n + j] = (uint8_t)('a' + (i + j) % 26);
    return n + pad;
}

/* The token of a body, after checking all of it; -1 if it is not one of ours. */
static int body_token(const struct walrec_add *a)
{
    uint8_t want[512];
    int i;

    if (a->body_len < 8 || a->body[0] != 'T' || sscanf((const char *)a->body + 1, "%6d", &i) != 1 ||
        i < 0 || i >= G.n)
        return -1;
    if (make_body(i, want) != a->body_len || memcmp(want, a->body, a->body_len) != 0)
        return -1;
    return i;
}

static void fill_add(struct walrec_add *a, int i, uint8_t *body)
{
    const struct mmsg *m = &G.m[i];

    memset(a, 0, sizeof(*a));
    a->due_ms = m->due;
    a->enqueue_ms = G.now;
    a->route = route_names[m->route];
    a->route_len = (uint8_t)strlen(a->route);
    a->exchange = "ex";
    a->exchange_len = 2;
    a->routing_key = "rk";
    a->routing_key_len = 2;
    if (m->key >= 0) {
        a->flags = WALREC_ADD_KEYED;
        a->key = g_keys[m->key];
        a->key_len = 2;
    }
    a->body = body;
    a->body_len = (uint32_t)make_body(i, body);
}

/* ---- the engine's life ----------------------------------------------------------------- */

static int refusal_ok(int r)
{
    return (G.flipped || G.reordered) && (r == WLOG_ECORRUPT || r == WLOG_EFORMAT);
}

/* A refusal: the run ends. Checked: it may happen, and its log line names the place. */
void refuse(const char *where, int r)
{
    if (!refusal_ok(r)) {
        failf("%s failed: %s (no bit flipped, no reordered crash); log: %s", where,
              wlog_strerror(r), G.last_err);
        return;
    }
    if (r == WLOG_ECORRUPT && !strstr(G.last_err, "offset=") && !strstr(G.last_err, "lsn="))
        failf("%s refused corruption without naming its offset; log: %s", where, G.last_err);
    else if (r == WLOG_EFORMAT && !strstr(G.last_err, "file="))
        failf("%s refused a bad file without naming it; log: %s", where, G.last_err);
    G.refused = 1;
}

/* Power loss, now: what the disk kept is decided, the engine of this life is abandoned. */
static void lose_power_model(void)
{
    G.e = NULL; /* abandoned mid-call: never touched again (its memory is the process's) */
    G.crashes++;
    simrepl_drop_pending();
    G.reordered = simfs_last_crash_reordered();
    for (int i = 0; i < G.n; i++) {
        struct mmsg *m = &G.m[i];
        m->live = m->committed = m->inflight = m->taken = 0;
        m->h = 0;
        if (m->end == E_APPENDED) {
            m->end = E_NONE; /* never reached a commit: lost with the process */
            m->kind = K_NONE;
        }
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* After a recovery: the engine's held set against the model. */
static void reconcile(void)
{
    static uint8_t held[MAXMSG];
    static eng_msg hh[MAXMSG];
    struct eng_item items[64];
    struct eng_stats st;
    uint64_t listed = 0;

    memset(held, 0, sizeof(held));
    for (uint16_t r = 0; r < NROUTES && !FAILED(); r++) {
        uint64_t ad = 0, ai = 0;
        int more = 1;
        while (more && !FAILED()) {
            uint64_t nd = 0, ni = 0;
            size_t k = eng_list(G.e, r, ad, ai, items, 64, &more, &nd, &ni);
            for (size_t j = 0; j < k && !FAILED(); j++) {
                struct walrec_add a;
                int rr = eng_read(G.e, items[j].m, &a), t;
                listed++;
                if (rr < 0) {
                    refuse("read after recovery", rr);
                    return;
                }
                t = body_token(&a);
                if (t < 0) {
                    failf("recovered a message that was never added or has another body "
                          "(route %u, id %" PRIu64 ")", r, items[j].id);
                    return;
                }
                if (held[t])
                    failf("message %d held twice after recovery", t);
                held[t] = 1;
                hh[t] = items[j].m;
                G.m[t].msg_id = a.msg_id;
                if (G.m[t].route != r || G.m[t].due != items[j].due_ms || a.due_ms != G.m[t].due)
                    failf("message %d recovered with route %u due %" PRIu64 ", added route %u due %" PRIu64,
                          t, r, items[j].due_ms, G.m[t].route, G.m[t].due);
            }
            ad = nd;
            ai = ni;
        }
    }
    if (FAILED())
        return;
    eng_stats(G.e, &st);
    if (st.held != listed)
        failf("eng_stats says %" PRIu64 " held, the listing shows %" PRIu64, st.held, listed);
    for (int i = 0; i < G.n && !FAILED(); i++) {
        struct mmsg *m = &G.m[i];
        if (m->gone) {
            if (held[i])
                failf("message %d came back after it was gone (end %d)", i, m->kind);
            continue;
        }
        if (held[i]) {
            if (m->add == A_NEW)
                failf("message %d is held but its ADD never reached a commit", i);
            else if (m->end == E_ACKED)
                failf("message %d came back after its %s was acked", i,
                      m->kind == K_DONE ? "DONE" : m->kind == K_REPLACE ? "replacement" :
                      m->kind == K_PURGE ? "purge" : "CANCEL");
            TRACE("recovered %d (add %d end %d kind %d) h %u", i, m->add, m->end, m->kind, hh[i]);
            m->add = A_ACKED; /* it is on disk now, whatever the commit said */
            m->end = E_NONE;
            m->kind = K_NONE;
            m->live = m->committed = 1;
            m->h = hh[i];
        } else {
            if (m->add == A_ACKED && m->end != E_TRIED && m->end != E_ACKED)
                failf("message %d lost: its ADD was acked (route %u due %" PRIu64 ")", i,
                      m->route, m->due);
            if (m->add != A_NEW || m->end != E_NONE)
                TRACE("gone %d (add %d end %d kind %d)", i, m->add, m->end, m->kind);
            m->gone = 1;
        }
    }
    /* the key table: eng_find gives the newest held message with the key */
    for (uint16_t r = 0; r < NROUTES && !FAILED(); r++)
        for (int k = 0; k < NKEYS && !FAILED(); k++) {
            int want = -1;
            for (int i = G.n - 1; i >= 0; i--)
                if (G.m[i].live && G.m[i].route == r && G.m[i].key == k) {
                    want = i;
                    break;
                }
            eng_msg f = eng_find(G.e, r, g_keys[k], 2);
            if ((want < 0 && f != 0) || (want >= 0 && f != G.m[want].h))
                failf("after recovery eng_find(%s, %s) is %u, the newest held with that key is "
                      "message %d (handle %u)", route_names[r], g_keys[k], f, want,
                      want >= 0 ? G.m[want].h : 0);
        }
    (void)cmp_u64;
}

/* Open (recover) the engine; 0, or -1 when the run ends (refused, failed). */
static int recover(void)
{
    struct wal_opts wo = {.dir = SIMFS_DIR, .segment_bytes = G.seg_bytes};
#ifdef WAL_RESERVE_SEGMENTS
    /* the daemon's space reserve (main.c); the log before issue 26 has none (no
     * intake window either: what arrives during a pause waits in the daemon's
     * stash, src/daemon/dstash.h, not in the log) */
    wo.reserve_bytes = WAL_RESERVE_SEGMENTS * G.seg_bytes;
#endif
#ifdef WAL_DEFAULT_PREWRITE
    /*
     * Zeros written ahead of the records (wal.c, issue 41) in two seeds of
     * three, 256 B - 4 KiB: crashes then tear records written over them.
     * Drawn from the seed, not the generator, so the regression seeds
     * replay the runs that found their bugs.
     */
    {
        uint64_t x = G.seed * 0x9E3779B97F4A7C15ull;
        wo.prewrite_bytes = (x >> 62) % 3 ? 256 + ((x >> 20) % 3841) : 0;
    }
#endif
    struct eng_opts o = {.nroutes = NROUTES, .route_index = route_index, .route_name = route_name,
                         .now_ms = G.now, .checkpoint_interval_ms = G.ck_interval,
                         .checkpoint_min_bytes = G.ck_min, .checkpoint_step = G.ck_step,
                         .wheel_split = G.wheel_split, .key_hash = G.collide ? collide_hash : NULL};
    int r, tries = 0;

    for (;;) {
        G.torn_seen = 0;
        G.last_err[0] = 0;
        struct wal *w = wal_new(&wo);
        o.log = wal_log(w);
        o.now_ms = G.now;
        r = eng_open(&G.e, &o);
        G.recoveries++;
        if (r == 0) {
            if (G.repl)
                wal_set_tap(w, simrepl_tap, NULL);
            break;
        }
        G.e = NULL;
        if (r == WLOG_ECORRUPT || r == WLOG_EFORMAT) {
            refuse("recovery", r);
            return -1;
        }
        /* an I/O error (a failed fsync of the torn-tail cut): the process exits, restarts */
        if (++tries > 20) {
            failf("recovery keeps failing: %s; log: %s", wlog_strerror(r), G.last_err);
            return -1;
        }
        simfs_crash_state();
        lose_power_model();
    }
    if (G.flipped && G.torn_seen && strcmp(G.torn_file, G.flip_name) == 0 && G.torn_off <= G.flip_off) {
        /* the documented limit: a damaged last record of the newest segment is a torn tail */
        G.flip_torn = 1;
        return -1;
    }
    reconcile();
    if (FAILED() || G.refused)
        return -1;
    eng_advance(G.e, G.now);
    live_new_life();
    return 0;
}

/* ---- checks on every operation ----------------------------------------------------------- */

void check_counts(const char *after)
{
    for (uint16_t r = 0; r < NROUTES; r++) {
        struct eng_route_stats rs;
        uint64_t held = 0, pending = 0, inflight = 0;
        for (int i = 0; i < G.n; i++)
            if (G.m[i].live && G.m[i].route == r) {
                held++;
                pending += !G.m[i].committed;
                inflight += G.m[i].inflight;
            }
        eng_route_stats(G.e, r, &rs);
        if (rs.held != held || rs.pending != pending || rs.inflight != inflight) {
            failf("after %s, route %s: engine held/pending/inflight %" PRIu64 "/%" PRIu64 "/%" PRIu64
                  ", model %" PRIu64 "/%" PRIu64 "/%" PRIu64, after, route_names[r], rs.held,
                  rs.pending, rs.inflight, held, pending, inflight);
            return;
        }
    }
}

/* ---- operations --------------------------------------------------------------------------- */

static uint64_t draw_delay(void)
{
    struct simrng *g = &G.rng;
    switch (sim_below(g, 10)) {
    case 0:
        return 0;
    case 1:
    case 2:
    case 3:
        return sim_below(g, 2000);
    case 4:
    case 5:
        return sim_below(g, 60000);
    case 6:
        return sim_below(g, 3600000);
    case 7:
        return sim_below(g, 24 * 3600000ull);
    case 8:
        return sim_below(g, YEAR_MS);
    default:
        return sim_below(g, 3 * YEAR_MS);
    }
}

/* The model's pending (findable) message with route's key k: live, not taken. */
static int key_holder(uint16_t route, int k)
{
    for (int i = G.n - 1; i >= 0; i--)
        if (G.m[i].live && !G.m[i].taken && G.m[i].route == route && G.m[i].key == k)
            return i;
    return -1;
}

static void end_msg(int i, int kind)
{
    struct mmsg *m = &G.m[i];
    m->live = 0;
    m->inflight = 0;
    m->end = E_APPENDED;
    m->kind = (uint8_t)kind;
    m->h = 0;
}

uint64_t sim_add_bytes(void)
{
    uint8_t body[512];
    return 96 + make_body(G.n, body); /* header, ids, route, exchange, key: about 96 bytes */
}

void sim_add(int keyed, uint64_t max_delay)
{
    struct walrec_add a;
    struct eng_route_stats before, after;
    uint8_t body[512];
    struct mmsg *m;
    int i, holder = -1, r;

    if (G.n >= MAXMSG)
        return;
    i = G.n++;
    m = &G.m[i];
    memset(m, 0, sizeof(*m));
    m->route = (uint16_t)sim_below(&G.rng, NROUTES);
    m->key = keyed ? (int8_t)sim_below(&G.rng, NKEYS) : -1;
    m->due = G.now + (max_delay ? sim_below(&G.rng, max_delay) : draw_delay());
    if (keyed)
        holder = key_holder(m->route, m->key);
    fill_add(&a, i, body);
    eng_route_stats(G.e, m->route, &before);
    r = eng_add(G.e, m->route, &a, &m->h);
    if (r < 0) {
        G.n--;
        failf("eng_add: %s", wlog_strerror(r));
        return;
    }
    m->msg_id = a.msg_id;
    m->live = 1;
    eng_route_stats(G.e, m->route, &after);
    if (after.replaced != before.replaced + (holder >= 0))
        failf("add of keyed message %d: the engine replaced %" PRIu64 ", the model expected %d "
              "(holder %d)", i, after.replaced - before.replaced, holder >= 0, holder);
    TRACE("add %d route %u key %d due %+" PRId64 " id %" PRIu64 " h %u%s%d", i, m->route, m->key,
          (int64_t)(m->due - G.now), m->msg_id, m->h, holder >= 0 ? " replaces " : "", holder);
    if (holder >= 0)
        end_msg(holder, K_REPLACE);
}

static void op_cancel(void)
{
    uint16_t route = (uint16_t)sim_below(&G.rng, NROUTES);
    int k = (int)sim_below(&G.rng, NKEYS), holder = key_holder(route, k);
    int r = eng_cancel(G.e, route, g_keys[k], 2);

    if (r < 0) {
        refuse("cancel", r);
        return;
    }
    if (r != (holder >= 0))
        failf("eng_cancel(%s, %s) = %d, the model's holder is message %d", route_names[route],
              g_keys[k], r, holder);
    TRACE("cancel route %u key %d: %d (holder %d)", route, k, r, holder);
    if (holder >= 0)
        end_msg(holder, K_CANCEL);
}

static void op_purge(void)
{
    uint16_t route = (uint16_t)sim_below(&G.rng, NROUTES);
    uint64_t before = sim_chance(&G.rng, 1, 2) ? UINT64_MAX : G.now + draw_delay();
    struct eng_purge p;
    uint64_t want = 0;
    int r;

    for (int i = 0; i < G.n; i++)
        if (G.m[i].live && !G.m[i].inflight && G.m[i].route == route && G.m[i].due < before)
            want++;
    eng_purge_begin(G.e, &p, route, before);
    while ((r = eng_purge_step(G.e, &p, 1 + (size_t)sim_below(&G.rng, 40))) > 0)
        ;
    if (r < 0) {
        refuse("purge", r);
        return;
    }
    TRACE("purge route %u before %+" PRId64 ": %" PRIu64, route, (int64_t)(before - G.now), p.removed);
    if (p.removed != want) {
        failf("purge of %s before %" PRIu64 " removed %" PRIu64 ", the model expected %" PRIu64,
              route_names[route], before, p.removed, want);
        return;
    }
    for (int i = 0; i < G.n; i++)
        if (G.m[i].live && !G.m[i].inflight && G.m[i].route == route && G.m[i].due < before)
            end_msg(i, K_PURGE);
}

static void on_commit(void *arg, int err)
{
    *(int *)arg = err + 1000000; /* 1000000 = called with 0 */
}

/* What is appended may reach the disk from now on: its ADD and end records are tried. */
static void mark_tried(void)
{
    for (int i = 0; i < G.n; i++) {
        if (!G.m[i].gone && G.m[i].add == A_NEW)
            G.m[i].add = A_TRIED; /* a replaced or cancelled one's ADD is written too */
        if (G.m[i].end == E_APPENDED)
            G.m[i].end = E_TRIED;
    }
}

/*
 * After a confirm, as the daemon does while its commit waits for the
 * pacing (bridge_commit.c): the DONE records, and whatever else is
 * appended, into the files without an fdatasync (eng_write_ahead). A
 * crash may keep or drop them; the next commit makes them durable. 0, or
 * -1 when the process exits (the log failed).
 */
static int op_write_ahead(void)
{
    int r;

    mark_tried();
    r = eng_write_ahead(G.e);
    TRACE("write ahead: %d", r);
    return r < 0 && r != -ENOSPC && r != -EDQUOT ? -1 : 0;
}

/* Commit; 0, or -1 when the process exits (the log failed). */
int op_commit(void)
{
    int called = 0, r;

    mark_tried();
    r = eng_commit(G.e, on_commit, &called);
    G.commits++;
    TRACE("commit: %d", r);
    live_committed(r);
    if (r == -ENOSPC || r == -EDQUOT) {
        if (called)
            failf("eng_commit returned %d and called its completion", r);
        return 0; /* nothing acked; everything stays PENDING and is tried again */
    }
    if (r < 0) {
        if (called)
            failf("eng_commit returned %d and called its completion", r);
        /* the log is failed for good: check it, then exit as the daemon does */
        struct walrec_add a;
        uint8_t body[512];
        int again = eng_commit(G.e, on_commit, &called);
        if (again != r && !FAILED())
            failf("after a failed commit (%s) the next one returned %s, not the first error",
                  wlog_strerror(r), wlog_strerror(again));
        (void)a, (void)body;
        return -1;
    }
    if (called != 1000000) {
        failf("eng_commit returned 0 but its completion was %s", called ? "an error" : "not called");
        return -1;
    }
    if (G.repl)
        simrepl_commit(eng_log_id(G.e));
    for (int i = 0; i < G.n; i++) {
        struct mmsg *m = &G.m[i];
        if (m->add == A_TRIED) {
            m->add = A_ACKED;
            m->committed = m->live;
        }
        if (m->end == E_TRIED) {
            m->end = E_ACKED;
            m->gone = 1;
        }
    }
    return 0;
}

/* The first due message of route in (due, id) order, per the model; -1 if none. */
static int model_first_due(uint16_t route, uint64_t now)
{
    int best = -1;
    for (int i = 0; i < G.n; i++) {
        const struct mmsg *m = &G.m[i];
        if (!m->live || !m->committed || m->inflight || m->route != route || m->due > now)
            continue;
        if (best < 0 || m->due < G.m[best].due ||
            (m->due == G.m[best].due && m->msg_id < G.m[best].msg_id))
            best = i;
    }
    return best;
}

int sim_fire(uint16_t route)
{
    uint64_t adv = G.now + (opt.plant_early ? 1000 : 0);
    struct walrec_add a;
    eng_msg h = 0;
    int r, t, want;

    eng_advance(G.e, adv);
    want = model_first_due(route, G.now);
    r = eng_take(G.e, route, &h, &a);
    if (r < 0) {
        refuse("take", r);
        return -1;
    }
    if (r == 0) {
        if (want >= 0)
            failf("nothing taken on %s, but message %d is due (due %" PRIu64 ", now %" PRIu64 ")",
                  route_names[route], want, G.m[want].due, G.now);
        return want >= 0 ? -1 : 0;
    }
    G.takes++;
    t = body_token(&a);
    if (t < 0) {
        failf("took a message that was never added (route %s)", route_names[route]);
        return -1;
    }
    struct mmsg *m = &G.m[t];
    if (!m->live || m->inflight || !m->committed || m->route != route) {
        failf("took message %d: live %d inflight %d committed %d route %u (end %d)", t, m->live,
              m->inflight, m->committed, m->route, m->kind);
        return -1;
    }
    if (m->due > G.now) {
        failf("message %d fired early: due %" PRIu64 ", now %" PRIu64, t, m->due, G.now);
        return -1;
    }
    if (t != want && !(want >= 0 && G.m[want].due == m->due && G.m[want].msg_id == m->msg_id)) {
        failf("took message %d (due %" PRIu64 " id %" PRIu64 "), the first due is %d (due %" PRIu64
              " id %" PRIu64 ")", t, m->due, m->msg_id, want, want >= 0 ? G.m[want].due : 0,
              want >= 0 ? G.m[want].msg_id : 0);
        return -1;
    }
    TRACE("take %d route %u", t, route);
    m->inflight = 1;
    m->taken = 1;
    m->h = h;
    return 1;
}

static void op_fire(void)
{
    sim_fire((uint16_t)sim_below(&G.rng, NROUTES));
}

void sim_confirm(int i)
{
    eng_confirm(G.e, G.m[i].h, G.now);
    G.confirms++;
    end_msg(i, K_DONE);
}

/* Settle one in-flight message: confirm (mostly), nack, divert; or the route's channel is lost. */
static void op_settle(void)
{
    int cand[MAXMSG], n = 0;

    for (int i = 0; i < G.n; i++)
        if (G.m[i].inflight)
            cand[n++] = i;
    if (n == 0)
        return;
    int i = cand[sim_below(&G.rng, (uint64_t)n)];
    struct mmsg *m = &G.m[i];
    uint64_t how = sim_below(&G.rng, 10);
    TRACE("settle %d: %s", i, how == 0 ? "nack" : how == 1 ? "divert" : how == 2 ? "channel lost" : "confirm");
    switch (how) {
    case 0:
        eng_unsent(G.e, m->h);
        m->inflight = 0;
        break;
    case 1:
        eng_divert(G.e, m->h);
        m->inflight = 0;
        break;
    case 2: {
        size_t k = eng_unsent_route(G.e, m->route), want = 0;
        for (int j = 0; j < G.n; j++)
            if (G.m[j].inflight && G.m[j].route == m->route) {
                G.m[j].inflight = 0;
                want++;
            }
        if (k != want)
            failf("eng_unsent_route put back %zu, the model had %zu in flight", k, want);
        break;
    }
    default:
        sim_confirm(i);
        break;
    }
}

static void op_time(void)
{
    if (sim_chance(&G.rng, 1, 30))
        G.now += 3600000ull + sim_below(&G.rng, YEAR_MS); /* a jump: hours to a year */
    else
        G.now += sim_below(&G.rng, 2000);
    sim_clock_set(G.now);
    eng_advance(G.e, G.now + (opt.plant_early ? 1000 : 0));
}

static void op_maintain(void)
{
    int r;

    if (sim_chance(&G.rng, 1, 8)) {
        r = eng_checkpoint(G.e);
        TRACE("checkpoint: %d", r);
        if (r < 0 && r != WLOG_EBUSY && r != -ENOTSUP && !(r == -EIO || r == -ENOSPC))
            failf("eng_checkpoint: %s", wlog_strerror(r));
        return;
    }
    r = eng_maintain(G.e, 64 + (size_t)sim_below(&G.rng, 8192));
    TRACE("maintain: %d", r);
    if (r == WLOG_ECORRUPT || r == WLOG_EFORMAT)
        refuse("maintain", r);
    else if (r < 0)
        G.exit_now = 1; /* an I/O error: the daemon stops (bridge_fatal) and restarts */
}

/* ---- one seed --------------------------------------------------------------------------- */

static void configure(uint64_t seed)
{
    struct simrng *g = &G.rng;

    memset(&G, 0, sizeof(G));
    G.seed = seed;
    G.rng.s = seed ^ 0xD1B54A32D192ED03ull;
    sim_rand(g);
    G.seg_bytes = 1024 + sim_below(g, 7 * 1024);
    /* half the seeds write DONE records ahead (issue 41); from the seed, not the generator */
    G.write_ahead = ((seed * 0xD6E8FEB86659FD93ull) >> 63) != 0;
    G.ck_interval = sim_chance(g, 1, 5) ? 0 : 1 + sim_below(g, 20000);
    G.ck_min = sim_below(g, 4096);
    G.ck_step = 1 + (uint32_t)sim_below(g, 40);
    G.collide = sim_chance(g, 1, 8);
    G.nops = 100 + (int)sim_below(g, 250);
    G.crash_every = 20 + (int)sim_below(g, 400);
    G.flip_den = 50;
    G.faults.fsync_fail_ppm = sim_chance(g, 1, 4) ? (uint32_t)sim_below(g, 20000) : 0;
    G.faults.enospc_ppm = sim_chance(g, 1, 4) ? (uint32_t)sim_below(g, 30000) : 0;
    G.faults.enospc_calls = 1 + (uint32_t)sim_below(g, 20);
    G.faults.reorder = sim_chance(g, 1, 4);
    G.now = T0 + sim_below(g, YEAR_MS);
    /* replicated seeds: from the seed alone, so the other seeds' draws stay as they were */
    struct simrng h = {seed ^ 0x5EED5EED5EEDull};
    G.repl = sim_below(&h, 6) == 0;
    live_configure(seed); /* a liveness seed is never a replicated one: its small disk fills */
    if (G.repl) /* a failed commit then a stop leaves the local log ahead of the stream: not here */
        G.faults.fsync_fail_ppm = G.faults.enospc_ppm = 0;
    simrepl_reset(sim_rand(&h), G.seg_bytes);
    /* the wheel's split size: four seeds in five split slots of a few entries */
    struct simrng k = {seed ^ 0x5B117u};
    static const uint32_t splits[] = {0, 1, 2, 3, 8};
    G.wheel_split = splits[sim_below(&k, 5)];
    simfs_reset(seed, G.now, &G.faults);
    simfs_set_plant_nosync(opt.plant_nosync);
    simfs_set_plant_reserve_stuck(opt.plant_stuck);
    simfs_set_capacity(G.live.capacity);
    simfs_set_block(G.live.block);
    simfs_set_fallocate(!G.live.no_fallocate);
}

/*
 * At the end of a run: commit, and maintain until compaction says it is
 * done; the log must then be within its space rule (wal.h: about 2 x live
 * bytes + one segment; here with a segment's slack for the active one).
 */
static void check_space(void)
{
    struct eng_stats st;
    int r = 1, guard = 0;

    G.faults.fsync_fail_ppm = G.faults.enospc_ppm = 0;
    simfs_reset_faults(&G.faults);
    simfs_arm_crash(0, NULL);
    while (r > 0 && guard++ < 10000) {
        if (op_commit() < 0)
            return; /* the log failed: nothing more to say here */
        r = eng_maintain(G.e, 1 << 20);
    }
    if (op_commit() < 0 || r < 0)
        return;
    eng_stats(G.e, &st);
    if (r != 0)
        failf("compaction never finished (%d rounds): %" PRIu64 " bytes on disk, %" PRIu64 " live",
              guard, st.log_disk_bytes, st.log_live_bytes);
    else if (st.log_disk_bytes > 2 * st.log_live_bytes + 2 * G.seg_bytes + 4096)
        failf("the log holds %" PRIu64 " bytes in %" PRIu64 " segments for %" PRIu64
              " live bytes after compaction (segment %" PRIu64 ")", st.log_disk_bytes,
              st.log_segments, st.log_live_bytes, G.seg_bytes);
}

/* After a crash: maybe a bit flip, then recovery. 0 go on, -1 the run ends. */
static int after_crash(void)
{
    lose_power_model();
    if (sim_chance(&G.rng, 1, (uint64_t)G.flip_den) && simfs_flip_bit(G.flip_name, sizeof(G.flip_name), &G.flip_off) == 0) {
        G.flipped = 1;
        if (opt.verbose)
            fprintf(stderr, "  flip %s offset %" PRIu64 "\n", G.flip_name, G.flip_off);
    }
    return recover();
}

static void arm(void)
{
    uint64_t n = sim_chance(&G.rng, 1, 3) ? 1 + sim_below(&G.rng, (uint64_t)G.crash_every) : 0;
    simfs_arm_crash(G.repl ? 0 : n, &G.jb);
}

/*
 * A replicated seed's end: the disk is lost and the log rebuilt from the
 * stream, perhaps with a batch lost or duplicated; then the usual checks.
 */
static void repl_phase(void)
{
    char why[256];
    int complete = 0, lost = 0, r;
    size_t n = simrepl_messages();

    eng_close(G.e);
    G.e = NULL;
    switch (sim_below(&G.rng, 3)) {
    case 1:
        if (n >= 2) {
            size_t i = (size_t)sim_below(&G.rng, n - 1); /* not the last: a hole */
            simrepl_lose(i);
            lost = 1;
            TRACE("stream: message %zu of %zu lost", i, n);
        }
        break;
    case 2:
        if (n >= 1) {
            size_t i = (size_t)sim_below(&G.rng, n), at = i + 1 + (size_t)sim_below(&G.rng, n - i);
            simrepl_duplicate(i, at);
            TRACE("stream: message %zu of %zu again at %zu", i, n, at);
        }
        break;
    }
    r = simrepl_import(sim_rand(&G.rng) | 1, &complete, why, sizeof(why));
    if (r < 0) {
        failf("the import from the stream failed: %s (%s)", why, wlog_strerror(r));
        return;
    }
    if (lost && opt.plant_hole)
        complete = 1, lost = 0; /* the planted bug: a stream with a hole taken for the log */
    if (lost) {
        if (complete)
            failf("the import took a stream with a batch lost in the middle for the whole log");
        G.repl_refused++;
        return;
    }
    if (!complete) {
        failf("the import says the stream is not whole, though nothing was lost");
        return;
    }
    G.repl_imported++;
    lose_power_model();
    recover();
}

/* Run one seed; 0 passed, 1 failed (G.fail says why). */
static int run_seed(uint64_t seed)
{
    configure(seed);
    if (setjmp(G.jb)) {
        if (after_crash() < 0)
            goto end;
    } else if (recover() < 0) {
        goto end;
    }
    while (G.ops < (uint64_t)G.nops && !FAILED() && !G.refused) {
        if (setjmp(G.jb)) {
            /* a crash inside the file layer: the process is gone */
            if (opt.verbose)
                fprintf(stderr, "  crash at mutation %" PRIu64 "\n", simfs_mutations());
            if (after_crash() < 0)
                break;
            arm();
            continue;
        }
        if (simfs_mutations() == 0 || sim_chance(&G.rng, 1, 40))
            arm();
        G.ops++;
        uint64_t w = sim_below(&G.rng, 100);
        if (w < 22) {
            if (live_may_add())
                sim_add(0, 0);
        } else if (w < 36) {
            if (live_may_add())
                sim_add(1, 0);
        }
        else if (w < 41)
            op_cancel();
        else if (w < 42)
            op_purge();
        else if (w < 58) {
            if (op_commit() < 0 && !FAILED()) {
                simfs_crash_state(); /* the daemon exits on a failed log */
                if (after_crash() < 0)
                    break;
                arm();
                continue;
            }
        } else if (w < 68)
            op_time();
        else if (w < 80)
            op_fire();
        else if (w < 88) {
            op_settle();
            if (G.write_ahead && op_write_ahead() < 0 && !FAILED()) {
                simfs_crash_state(); /* the daemon exits on a failed log */
                if (after_crash() < 0)
                    break;
                arm();
                continue;
            }
        }
        else if (w < 96)
            op_maintain();
        else if (w < 98) {
            /* a clean stop and start */
            if (op_commit() < 0 && !FAILED()) {
                simfs_crash_state();
                if (after_crash() < 0)
                    break;
                continue;
            }
            eng_close(G.e);
            G.e = NULL;
            if (!G.repl)
                simfs_crash_state(); /* a stop is a power loss too: only what was synced counts */
            lose_power_model();
            if (recover() < 0)
                break;
        } else if (!G.repl) {
            simfs_crash_state(); /* power lost between two calls */
            if (after_crash() < 0)
                break;
            continue;
        }
        if (G.exit_now && !FAILED()) {
            G.exit_now = 0;
            simfs_crash_state();
            if (after_crash() < 0)
                break;
            arm();
            continue;
        }
        if (!FAILED() && !G.refused && G.e)
            check_counts("an operation");
    }
    if (!FAILED() && !G.refused && !G.flip_torn && G.e && G.live.on)
        live_phase();
    if (!FAILED() && !G.refused && G.e)
        check_space();
    if (!FAILED() && !G.refused && G.e && G.live.steps)
        live_space_check();
    if (!FAILED() && !G.refused && G.e && G.repl)
        repl_phase();
end:
    /* the engines of crashed lives are abandoned; the last one is closed */
    if (G.e && !FAILED())
        eng_close(G.e);
    G.e = NULL;
    return FAILED() ? 1 : 0;
}

/* ---- main ------------------------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr, "usage: sim [--seeds N] [--from S] [--seed S] [--verbose] [--no-fork] [--liveness]\n"
                    "           [--disk SEGMENTS]\n"
                    "           [--plant early-fire|fsync-lie|stream-hole|reserve-stuck]\n");
    exit(2);
}

struct result {
    int failed;
    uint64_t ops, calls, crashes, recoveries, takes, refused, flip_torn, repl_imported, repl_refused;
    uint64_t live, live_phase, live_full, live_paused, live_steps, live_stops, live_bound;
    char why[512];
};

static void one(uint64_t seed, struct result *res)
{
    memset(res, 0, sizeof(*res));
    res->failed = run_seed(seed);
    res->ops = G.ops;
    res->calls = simfs_calls();
    res->crashes = G.crashes;
    res->recoveries = G.recoveries;
    res->takes = G.takes;
    res->refused = G.refused;
    res->flip_torn = G.flip_torn;
    res->repl_imported = G.repl_imported;
    res->repl_refused = G.repl_refused;
    res->live = G.live.on;
    res->live_phase = G.live.phase;
    res->live_full = G.live.reached_full;
    res->live_steps = G.live.steps;
    res->live_stops = G.live.stops;
    res->live_paused = G.live.stops > 0;
    res->live_bound = G.live.bound;
    snprintf(res->why, sizeof(res->why), "%s", G.fail);
}

/* A seed in a child process, so a crash of the code under test is one failing seed. */
static void one_forked(uint64_t seed, struct result *res)
{
    int p[2], st = 0;
    pid_t pid;

    if (opt.no_fork || pipe(p) < 0) {
        one(seed, res);
        return;
    }
    pid = fork();
    if (pid == 0) {
        close(p[0]);
        one(seed, res);
        if (write(p[1], res, sizeof(*res)) != (ssize_t)sizeof(*res))
            _exit(3);
        _exit(0);
    }
    close(p[1]);
    memset(res, 0, sizeof(*res));
    ssize_t k = read(p[0], res, sizeof(*res));
    close(p[0]);
    waitpid(pid, &st, 0);
    if (k != (ssize_t)sizeof(*res) || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        res->failed = 1;
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGXCPU)
            snprintf(res->why, sizeof(res->why), "the seed used up its CPU limit (run.sh --cpu-limit): "
                     "it never ends");
        else
            snprintf(res->why, sizeof(res->why), "the simulated process died: %s %d",
                     WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    }
}

int main(int argc, char **argv)
{
    uint64_t nseeds = 100, from = 1, passed = 0, failed = 0;
    uint64_t ops = 0, calls = 0, crashes = 0, recoveries = 0, takes = 0, refused = 0, flip_torn = 0;
    uint64_t repl_imported = 0, repl_refused = 0, live = 0, live_full = 0, live_steps = 0;
    uint64_t live_max = 0, live_stops = 0, live_phase = 0, live_paused = 0;
    double live_share = 0; /* the largest share of its bound a drained phase used */
    int single = 0;
    const char *self = argv[0];
    double t0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc)
            nseeds = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
            from = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            from = strtoull(argv[++i], NULL, 10);
            nseeds = 1;
            single = 1;
        } else if (strcmp(argv[i], "--verbose") == 0)
            opt.verbose = 1;
        else if (strcmp(argv[i], "--no-fork") == 0)
            opt.no_fork = 1;
        else if (strcmp(argv[i], "--liveness") == 0)
            opt.liveness = 1;
        else if (strcmp(argv[i], "--disk") == 0 && i + 1 < argc)
            opt.disk_segs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--plant") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "early-fire") == 0)
                opt.plant_early = 1;
            else if (strcmp(argv[i], "fsync-lie") == 0)
                opt.plant_nosync = 1;
            else if (strcmp(argv[i], "stream-hole") == 0)
                opt.plant_hole = 1;
            else if (strcmp(argv[i], "reserve-stuck") == 0)
                opt.plant_stuck = 1;
            else
                usage();
        } else
            usage();
    }
    if (single)
        opt.no_fork = 1;
    /*
     * Big allocations straight from mmap, always: the engine's pool chunks
     * are callocs of megabytes, and below glibc's (sliding) threshold each
     * costs a memset of all of it at every recovery. From mmap the pages
     * are zero already and only those touched cost anything.
     */
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    t0 = now_s();
    for (uint64_t s = from; s < from + nseeds; s++) {
        struct result res;
        one_forked(s, &res);
        ops += res.ops;
        calls += res.calls;
        crashes += res.crashes;
        recoveries += res.recoveries;
        takes += res.takes;
        refused += res.refused;
        flip_torn += res.flip_torn;
        repl_imported += res.repl_imported;
        repl_refused += res.repl_refused;
        live += res.live;
        live_phase += res.live_phase;
        live_full += res.live_full;
        live_steps += res.live_steps;
        live_max = res.live_steps > live_max ? res.live_steps : live_max;
        live_stops += res.live_stops;
        live_paused += res.live_paused;
        if (res.live_steps && (double)res.live_steps / (double)res.live_bound > live_share)
            live_share = (double)res.live_steps / (double)res.live_bound;
        if (res.failed) {
            failed++;
            char disk[32] = "";
            if (opt.disk_segs)
                snprintf(disk, sizeof(disk), " --disk %d", opt.disk_segs);
            printf("FAIL seed %" PRIu64 ": %s -- replay: %s --seed %" PRIu64 "%s%s%s%s\n", s, res.why,
                   self, s, opt.liveness ? " --liveness" : "", disk, opt.plant_early ? " --plant early-fire" : "",
                   opt.plant_nosync ? " --plant fsync-lie" : opt.plant_hole ? " --plant stream-hole" :
                   opt.plant_stuck ? " --plant reserve-stuck" : "");
            fflush(stdout);
        } else {
            passed++;
        }
    }
    double secs = now_s() - t0, cpu = 0;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        cpu += (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        cpu += (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec / 1e6;
    printf("%" PRIu64 " passed, %" PRIu64 " failed\n", passed, failed);
    printf("seeds %" PRIu64 "..%" PRIu64 " in %.1f s (cpu %.1f s): %" PRIu64 " operations (%.0f/s, "
           "%.0f per cpu s), %" PRIu64 " file-layer calls (%.0f/s), %" PRIu64 " crashes, %" PRIu64
           " recoveries, %" PRIu64 " takes; ended by a refused corruption %" PRIu64
           ", by a flip read as a torn tail %" PRIu64 "; logs rebuilt from the stream %" PRIu64
           ", stream holes refused %" PRIu64 "; liveness seeds %" PRIu64 " (phase run in %" PRIu64 ", disk full before it in %" PRIu64
           ", intake stopped in %" PRIu64 " (%" PRIu64 " stops), drained in %" PRIu64 " steps, at most %" PRIu64
           ", at most %.0f%% of its bound)\n",
           from, from + nseeds - 1, secs, cpu, ops, secs > 0 ? (double)ops / secs : 0,
           cpu > 0 ? (double)ops / cpu : 0, calls, secs > 0 ? (double)calls / secs : 0, crashes,
           recoveries, takes, refused, flip_torn, repl_imported, repl_refused, live, live_phase, live_full,
           live_paused, live_stops, live_steps, live_max, 100 * live_share);
    /*
     * _exit: the engines of crashed lives were abandoned mid-call on purpose
     * (a dead process frees nothing); a leak checker at exit would report them.
     */
    fflush(stdout);
    _exit(failed ? 1 : 0);
}
