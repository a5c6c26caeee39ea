/*
 * simlive.c -- the simulator's liveness mode: a full disk must never stop
 * the bridge for good (issue 26).
 *
 * The rest of the simulator checks safety: nothing acked is lost, nothing
 * fires early or twice. A log can keep all of that and still stop for
 * good: on a small volume filled by intake alone, the commit that met the
 * full disk keeps its batch (ADDs not yet acked to the broker) in the
 * write buffer; the DONE records of messages that fire afterwards sit
 * behind it in LSN order and cannot be written either; a dead segment is
 * deleted only once the log is durable past the records that ended its
 * messages (wal_space.c, dead_lsn) -- so no space ever comes back. Every
 * safety check passes; the bridge holds its messages forever. Only a run
 * that demands progress sees it.
 *
 * A LIVENESS SEED
 *
 * One seed in four of those that are not replicated (chosen from the seed
 * alone, by a generator of its own, so the other seeds draw as before:
 * about one in five in all; --liveness makes every seed one, a replicated
 * one then not replicated) runs on a small disk: simfs_set_capacity() of 6
 * to 16 segments (each rounded up to the block: in one seed in four the
 * largest power of two up to 1/16 segment -- a real volume's 4 KiB blocks
 * under segments of 1-64 MiB round far less -- else 1 byte).
 *
 * Its workload takes messages as the daemon does: an add is made only
 * while the log's intake gate is open for its record (eng_intake(); what
 * the broker sends meanwhile waits in the daemon's stash, outside the log,
 * so for the log it is a delivery not yet made) and the last commit did
 * not fail with ENOSPC; a failed commit is retried later (the workload's
 * next commit). Built against a log with only a pause flag
 * (eng_intake_paused(), or the log before the fix, whose daemon stopped
 * only after a full disk), the deliveries on the wire when intake stops
 * are appended: K of them, K from the seed, 0 to seg/256, as a consumer's
 * prefetch would. Crashes, power cuts, failed fsyncs, ENOSPC episodes and
 * bit flips happen as in any seed (flips as rare per seed: the workload is
 * longer, so that intake alone can fill the disk twice over).
 *
 * THE LIVENESS PHASE
 *
 * Then the faults stop. The disk is left exactly as small (nothing
 * relieves it), and the phase runs steps of what the daemon's loop does:
 *
 *   settle   every message in flight is confirmed (DONE);
 *   intake   1-3 new messages, due within 30 s, keyed or not, while the
 *            intake gate above allows it, until the phase's own 8-47 adds
 *            are made: "intake resumes" is proven by adds accepted, then
 *            committed and fired;
 *   commit   when the engine has anything to commit;
 *   maintain eng_maintain (compaction, deletion, the log's look at the
 *            volume, checkpoints);
 *   fire     eng_advance and eng_take on every route while anything is due,
 *            each take checked as everywhere else (none early, FIFO);
 *   time     when nothing was taken, the clock jumps to the next due time
 *            of a committed message (or 1 s, the daemon's retry after a
 *            full disk, when none is waiting).
 *
 * It passes once nothing is held (every acked message fired and was
 * confirmed, the phase's adds too), nothing waits for a commit, the last
 * commit succeeded and intake is no longer paused. It fails ("liveness:
 * ...", with the held count, the disk's bytes used of its capacity, the
 * segments and the reserve's size) if that has not happened within
 *
 *   bound = 2 x M + 8 x S + 64 steps,
 *
 * M the messages to drain (held at the start plus the phase's adds), S the
 * disk in segments. Why it is enough for a log that makes progress: a step
 * fires at least one message, or moves the clock to the next due time
 * (and the step after it fires), so firing takes at most 2 x M steps; the
 * others are steps where a commit waits a second for space, or
 * maintenance compacts or deletes a segment, gives space back or refills
 * the reserve -- a few per segment the disk can hold. Measured, a drained
 * phase used at most about half its bound (README); a log that never gets
 * space back never finishes at any bound.
 *
 * After the phase and the run's end-of-run compaction (sim.c check_space)
 * one more: the space of everything deleted came back -- every byte used is
 * held by a file of the log's directory (simfs_unnamed(): a file deleted
 * while still open, or blocks given to nobody, keep space no one can free).
 *
 * What is not modelled: the broker side (the overshoot is K adds, not
 * deliveries on a channel), the log's sync thread, other files on the
 * volume (the disk is the WAL's alone), and a volume that is relieved.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "delay-bridge/engine.h"
#include "delay-bridge/wlog.h"
#include "sim_int.h"
#include "simfs.h"

#define PHASE_DELAY_MS 30000 /* the phase's adds fall due within 30 s */
#define PHASE_TAKES 64       /* takes per route per step, at most */

#ifdef WLOG_INTAKE_OK
/*
 * The gate is asked per delivery, with its record's size (bridge_intake.c);
 * what the broker sends once it is closed waits in the daemon's stash
 * (dstash.h), outside the log, and is appended only when it opens again:
 * for the log, the same as a delivery not yet made. No overshoot.
 */
#define GATE_CLOSED(bytes) (eng_intake(G.e, (bytes)) != WLOG_INTAKE_OK)
#define OVERSHOOT_IN_LOG 0
#else
/*
 * A log with only a pause flag (and the log before issue 26, whose
 * daemon stopped only after a commit met the full disk: there the
 * simulator is built with eng_intake_paused() answering 0): the deliveries
 * on the wire when intake stops are appended.
 */
#define GATE_CLOSED(bytes) ((void)(bytes), eng_intake_paused(G.e) != 0)
#define OVERSHOOT_IN_LOG 1
#endif

/* Is a delivery of a record this long (0: any) stopped now, by the gate or a full disk? */
static int intake_stopped(uint64_t bytes)
{
    return GATE_CLOSED(bytes) || G.live.last_nospc;
}

void live_configure(uint64_t seed)
{
    struct simrng l = {seed ^ 0x11FE5EEDull};
    uint64_t seg;
    int more;

    sim_rand(&l);
    memset(&G.live, 0, sizeof(G.live));
    G.live.no_fallocate = sim_below(&l, 4) == 0;
    G.live.on = (sim_below(&l, 4) == 0 && !G.repl) || opt.liveness;
    if (!G.live.on)
        return;
    G.repl = 0;
    G.live.block = 1;
    if (sim_chance(&l, 1, 4)) /* blocks up to 1/16 segment (4 KiB under 1-64 MiB: far less) */
        while (G.live.block * 32 <= G.seg_bytes)
            G.live.block *= 2;
    seg = (G.seg_bytes + G.live.block - 1) / G.live.block * G.live.block;
    G.live.capacity = (6 + sim_below(&l, 11)) * seg;
    if (opt.disk_segs)
        G.live.capacity = (uint64_t)opt.disk_segs * seg;
    G.live.overshoot = (uint32_t)sim_below(&l, 1 + G.seg_bytes / 256) * OVERSHOOT_IN_LOG;
    G.live.adds = 8 + (int)sim_below(&l, 40);
    /*
     * Enough operations that the adds (a third of them, ~200 bytes each)
     * could fill the disk twice; bit flips as rare per seed as in any
     * other (a flip found ends the run, before the phase).
     */
    more = (int)(G.live.capacity / 32);
    G.flip_den = (int)((int64_t)G.flip_den * (G.nops + more) / G.nops);
    G.nops += more;
}

int live_may_add(void)
{
    if (!G.live.on)
        return 1;
    if (!intake_stopped(sim_add_bytes())) {
        G.live.stopped = 0;
        return 1;
    }
    if (!G.live.stopped) {
        G.live.stopped = 1;
        G.live.stops++;
        G.live.over_left = G.live.overshoot;
    }
    if (G.live.over_left) {
        G.live.over_left--;
        return 1;
    }
    G.live.held_back++;
    return 0;
}

void live_committed(int r)
{
    if (r == 0)
        G.live.last_nospc = 0;
    else if (r == -ENOSPC || r == -EDQUOT)
        G.live.last_nospc = 1;
}

/* A new process: its consumer starts only if intake is open (bridge.c), so no overshoot if not. */
void live_new_life(void)
{
    G.live.last_nospc = 0;
    G.live.stopped = G.live.on && intake_stopped(0);
    G.live.over_left = 0;
}

/* The first due time of a committed message not in flight, after now; 0 if none. */
static uint64_t next_due(void)
{
    uint64_t best = 0;

    for (int i = 0; i < G.n; i++) {
        const struct mmsg *m = &G.m[i];
        if (m->live && m->committed && !m->inflight && m->due > G.now && (!best || m->due < best))
            best = m->due;
    }
    return best;
}

static void fail_figures(const char *what, uint64_t step)
{
    struct eng_stats st;
    int64_t reserve = simfs_file_size("RESERVE");

    eng_stats(G.e, &st);
    failf("liveness: %s after %" PRIu64 " steps (bound %" PRIu64 "): held %" PRIu64
          " (pending %" PRIu64 ", in flight %" PRIu64 "), phase adds left %d, intake %s, last "
          "commit %s; disk %" PRIu64 " of %" PRIu64 " bytes used, %" PRIu64
          " segments of %" PRIu64 ", RESERVE %" PRId64 " bytes",
          what, step, G.live.bound, st.held, st.pending, st.inflight, G.live.adds,
          GATE_CLOSED(0) ? "paused" : "open", G.live.last_nospc ? "ENOSPC" : "ok",
          simfs_used(), simfs_capacity(), st.log_segments, G.seg_bytes, reserve);
}

/*
 * After the phase and the end-of-run compaction (check_space): with nothing
 * held, the volume holds only the log's fixed files.
 */
/*
 * After the phase and the end-of-run compaction (check_space): the space of
 * what was deleted came back -- no file deleted while still open, no blocks
 * given to nobody.
 */
void live_space_check(void)
{
    uint64_t lost = simfs_unnamed();

    if (lost)
        failf("liveness: space never came back: %" PRIu64 " of %" PRIu64 " bytes used are held by "
              "no file of the log's directory (deleted but still open, or lost); RESERVE %" PRId64
              " bytes", lost, simfs_used(), simfs_file_size("RESERVE"));
}

void live_phase(void)
{
    struct eng_stats st;
    uint64_t segs = G.live.capacity / G.seg_bytes, msgs = 0;
    int r;

    G.faults.fsync_fail_ppm = G.faults.enospc_ppm = 0;
    simfs_reset_faults(&G.faults);
    simfs_arm_crash(0, NULL);
    G.live.phase = 1;
    G.live.reached_full = simfs_refusals() > 0;
    eng_stats(G.e, &st);
    if (G.n + G.live.adds > MAXMSG)
        G.live.adds = MAXMSG - G.n;
    msgs = st.held + (uint64_t)G.live.adds;
    G.live.bound = 2 * msgs + 8 * segs + 64;
    TRACE("liveness phase: held %" PRIu64 ", %d adds, bound %" PRIu64 " steps, disk %" PRIu64
          " of %" PRIu64, st.held, G.live.adds, G.live.bound, simfs_used(), simfs_capacity());
    for (uint64_t step = 0;; step++) {
        int taken = 0;

        if (FAILED() || G.refused)
            return;
        if (step == G.live.bound) {
            fail_figures(GATE_CLOSED(0) || G.live.adds ? "intake never resumed" :
                         "the disk never drained", step);
            return;
        }
        for (int i = 0; i < G.n; i++)
            if (G.m[i].inflight)
                sim_confirm(i);
        for (int k = 1 + (int)sim_below(&G.rng, 3); k > 0 && G.live.adds > 0; k--) {
            if (!live_may_add())
                break;
            sim_add(sim_chance(&G.rng, 1, 3), PHASE_DELAY_MS);
            G.live.adds--;
        }
        if (FAILED())
            return;
        if (eng_dirty(G.e) && op_commit() < 0) {
            if (!FAILED())
                fail_figures("the log failed", step);
            return;
        }
        r = eng_maintain(G.e, 1u << 20);
        if (r == WLOG_ECORRUPT || r == WLOG_EFORMAT) {
            refuse("maintain", r);
            return;
        }
        if (r < 0) {
            char what[128];
            snprintf(what, sizeof(what), "maintenance failed (%s)", wlog_strerror(r));
            fail_figures(what, step);
            return;
        }
        for (uint16_t route = 0; route < NROUTES; route++)
            for (int k = 0; k < PHASE_TAKES; k++) {
                int t = sim_fire(route);
                if (t < 0)
                    return;
                if (t == 0)
                    break;
                taken++;
            }
        check_counts("a liveness step");
        if (FAILED())
            return;
        eng_stats(G.e, &st);
        if (st.held == 0 && G.live.adds == 0 && !eng_dirty(G.e) && !intake_stopped(0)) {
            G.live.steps = step + 1;
            TRACE("liveness phase done in %" PRIu64 " steps", G.live.steps);
            return;
        }
        if (!taken) {
            uint64_t due = next_due();
            G.now = due ? due : G.now + 1000;
            sim_clock_set(G.now);
        }
    }
}
