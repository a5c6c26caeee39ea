/*
 * bridge_commit.c -- the one place the log commits, and the acks it lets
 * out.
 *
 * commit_and_ack. Once per loop turn, before the loop sleeps (bridge.c's
 * ev_prepare, like Redis's beforeSleep), bridge_commit_and_ack() covers
 * every delivery appended so far and every confirm; when the commit
 * completes (on_committed), basic.ack (multiple) goes out up to the last
 * delivery it covered. Nothing is acked before the log holds it. The ack
 * stays below the oldest delivery still in the stash (ack_tag), so a crash
 * gives the stash back to the broker (bridge_intake.c).
 *
 * A stream ingress. A route whose ingress queue is a stream is read from
 * a place (consumer.h), not acked away: the place each commit covers is
 * taken with the commit's ack tag (take_places), written to the route's
 * place file (ingress_off.h) as "upto" before the commit and as the place
 * once it is durable, where a classic queue would be acked. A restart
 * reads the file and consumes from the place, so nothing read past is
 * missing from the log, and takes what lies below upto as redeliveries
 * (eng_seen), so nothing is logged twice either.
 *
 * Pacing. A commit is an fdatasync -- and, were the log's file growing, a
 * write of its size too (wal.c, "PREWRITTEN ZEROS"). Started as soon as the last one was
 * durable, commits ran back to back: about 1,000 a second at 11k msg/s on
 * this project's virtual disk (one per 3.5 messages), and the broker's own
 * queues, on the same disk beside the bridge, waited behind them: its
 * deliveries to the bridge stalled for up to 300 ms, and a message counts
 * its delay from the moment the bridge receives it. So a commit starts at
 * most every wal.commit_interval_ms (10 by default; 100 a second), sooner
 * when the deliveries waiting for it reach half the smallest prefetch (at
 * the prefetch the broker stops delivering), and at once when stopping,
 * draining, or asked for a durable answer. What it costs: the ack of a
 * delivery waits up to that much longer; no due time moves
 * (tests/bench/README.md, "Lateness at the loads people run", has the
 * runs). A confirm's DONE record does not wait in memory: a message
 * whose DONE record a kill -9 loses is published again, and paced, 50
 * kills of a bridge under load delivered 52-60 messages twice
 * (integration.kill_loop, issue 41). While the pacing holds the commit,
 * (or a commit runs), the DONE records are written into the log's files at once (not with a
 * stream ingress: write_ahead() says why) without an
 * fdatasync (eng_write_ahead, wal.c "WRITING AHEAD"): the page cache
 * outlives a killed process, and the paced commit makes them durable.
 * Committing them unpaced instead cut the duplicates as well but ran
 * 800 fdatasyncs a second, which the broker's lateness paid for.
 *
 * A full disk. A commit that meets ENOSPC or EDQUOT is no failure of the
 * log (nothing of the batch was made durable): consuming pauses and the
 * commit is tried again every DISK_RETRY_MS, measured on the monotonic
 * clock. Any other failure of the commit is fatal (bridge_fatal).
 *
 * A durable answer. An operator's request that answers "durable" (DELETE
 * /pending, POST /purge, POST /drain) waits for one commit
 * (bridge_commit_and_wait).
 *
 * Floors: a completed commit may reopen the intake gate
 * (bridge_intake.c), so this file stands above intake and below bridge.c
 * and bridge_http.c, which call it.
 */
#include "bridge_int.h"

#include <errno.h>
#include <string.h>

#include "base/clock.h"
#include "base/failpoint.h"
#include "base/log.h"
#include "delay-bridge/consumer.h"
#include "delay-bridge/engine.h"
#include "delay-bridge/ingress_off.h"

/*
 * Stream ingresses: write each route's place file, before a commit (begin:
 * "the commit under way reaches next") or once it is durable ("everything
 * below next is in the log"). A failed write is fatal, like the log's.
 */
static int write_places(struct bridge *b, const int64_t *next, int begin)
{
    int r;

    for (int i = 0; b->ioff && i < b->cfg->nroutes; i++) {
        r = begin ? ingress_off_begin(&b->ioff[i], next[i])
                  : ingress_off_store(&b->ioff[i], next[i]);
        if (r < 0) {
            log_error("bridge", "cannot write a stream ingress's place", "file=\"%s\" error=\"%s\"",
                      b->ioff[i].path, strerror(-r));
            bridge_fatal(b, "stream ingress place", r);
            return -1;
        }
    }
    return 0;
}

/* The place of each stream ingress now: everything before it is appended (the stash is not). */
static void take_places(struct bridge *b, int64_t *next)
{
    for (int i = 0; b->ioff && i < b->cfg->nroutes; i++) {
        next[i] = b->ioff[i].fd >= 0 ? consumer_stream_next(bridge_cons(b, i), i) : -1;
        if (next[i] >= 0 && b->stash.n) {
            int64_t low = dstash_min_offset(&b->stash, i);
            if (low < next[i])
                next[i] = low;
        }
    }
}

/* The highest tag an ack of v may cover: what was logged, below anything still in the stash. */
static uint64_t ack_tag(const struct bridge *b, const struct vconn *v)
{
    uint64_t low = b->stash.n ? dstash_min_tag(&b->stash, v->logged_gen) : UINT64_MAX;

    return v->logged_tag < low ? v->logged_tag : low - 1;
}

/* Each pair acked up to what the commit covered (commit 1) or what was logged (0). */
static void ack_all(struct bridge *b, int commit)
{
    for (int k = 0; k < b->nvc; k++) {
        struct vconn *v = &b->vc[k];
        if (commit)
            consumer_ack(v->cons, v->commit_gen, v->commit_tag);
        else
            consumer_ack(v->cons, v->logged_gen, ack_tag(b, v));
    }
}

static void on_committed(void *arg, int err)
{
    struct bridge *b = arg;

    if (err < 0) {
        bridge_fatal(b, "WAL commit", err);
        return;
    }
    if (b->ioff && write_places(b, b->commit_next, 0) < 0)
        return;
    bridge_intake_gate(b);
    if (b->disk_full) {
        b->disk_full = 0;
        log_info("bridge", "WAL commit has space again", NULL);
        if (!b->space_paused && !b->stopping && !b->drain.active)
            bridge_consumers(b, CONSUMERS_RELEASE);
    }
    FAILPOINT("bridge.before_ack");
    ack_all(b, 1);
}

/* Deliveries appended since the running or last commit began: what waits for an ack. */
static uint64_t unacked_since_commit(const struct bridge *b)
{
    uint64_t n = 0;

    for (int k = 0; k < b->nvc; k++) {
        const struct vconn *v = &b->vc[k];
        if (v->logged_gen != v->commit_gen)
            n += v->logged_tag;
        else if (v->logged_tag > v->commit_tag)
            n += v->logged_tag - v->commit_tag;
    }
    return n;
}

uint64_t bridge_commit_early_at(const struct config *cfg)
{
    uint64_t at = UINT16_MAX;

    for (int i = 0; i < cfg->nroutes; i++)
        if (cfg->routes[i].prefetch / 2u < at)
            at = cfg->routes[i].prefetch / 2u;
    return at ? at : 1;
}

uint64_t bridge_commit_wait_us(struct bridge *b, uint64_t mono_us)
{
    uint64_t gap = (uint64_t)b->cfg->commit_interval_ms * 1000u;

    if (!gap || b->stopping || b->drain.active || mono_us - b->commit_began_us >= gap)
        return 0;
    if (unacked_since_commit(b) >= b->commit_early_at)
        return 0;
    return b->commit_began_us + gap - mono_us;
}

/*
 * The one place the log commits: everything appended and confirmed so far
 * becomes durable, then the broker is acked up to the last delivery that
 * commit covered. A commit still running (an asynchronous log) just means
 * this turn's work goes into the next one; so does a commit the pacing
 * holds back (force: not held back).
 */
/*
 * Confirms' DONE records into the log's files now, while a commit runs or
 * the pacing holds the next one (see "Pacing" above): a kill -9 then does
 * not publish their messages again.
 */
static void write_ahead(struct bridge *b)
{
    int r;

    /*
     * Not with a stream ingress: writing ahead also puts the deliveries
     * appended since the last commit in the files, past the place the
     * stream's file says the log holds ("upto"); after a kill -9 they are
     * read again from the stream, unflagged, and would be stored twice
     * (integration.stream_crash). A classic or quorum queue redelivers
     * them flagged, and a redelivery already logged is recognised.
     */
    if (b->ioff)
        return;
    if ((r = eng_write_ahead(b->eng)) < 0 && r != -ENOSPC &&
        r != -EDQUOT)
        bridge_fatal(b, "WAL write", r);
}

static void commit_and_ack(struct bridge *b, int force)
{
    uint64_t mono_us;
    int r;

    if (b->exit_code)
        return;
    if (eng_committing(b->eng)) {
        write_ahead(b);
        return;
    }
    if (!eng_dirty(b->eng)) {
        /* Everything appended is durable: the acks, and the places, may go out. */
        if (b->ioff) {
            take_places(b, b->commit_next);
            if (write_places(b, b->commit_next, 0) < 0)
                return;
        }
        ack_all(b, 0);
        return;
    }
    if (b->disk_full && clock_mono_ms() < b->disk_retry_at)
        return;
    mono_us = clock_mono_ns() / 1000u;
    if (!force && bridge_commit_wait_us(b, mono_us) > 0) {
        write_ahead(b);
        return;
    }
    b->commit_began_us = mono_us;
    for (int k = 0; k < b->nvc; k++) {
        b->vc[k].commit_gen = b->vc[k].logged_gen;
        b->vc[k].commit_tag = ack_tag(b, &b->vc[k]);
    }
    take_places(b, b->commit_next);
    if (write_places(b, b->commit_next, 1) < 0)
        return;
    r = eng_commit(b->eng, on_committed, b);
    if (r == -ENOSPC || r == -EDQUOT) {
        /*
         * Disk full: the ingress consumers stop (consumer_hold_ingress());
         * what was received stays unacked on the open channel, in the
         * log's batch, until a commit gets space; key events from the other
         * bridges are still taken and applied (a CANCEL waits in the same
         * batch, the message it cancels no longer fires). Held messages
         * keep firing, and their segments are deleted as they are
         * confirmed, which is how space usually comes back. Try again
         * every second.
         */
        b->disk_retry_at = clock_mono_ms() + DISK_RETRY_MS;
        if (!b->disk_full) {
            b->disk_full = 1;
            log_error("bridge", "WAL disk full: consuming paused, messages stay in the broker; "
                      "held messages keep firing; resumes by itself when space returns",
                      "wal_dir=\"%s\"", b->cfg->wal_dir);
            bridge_consumers(b, CONSUMERS_HOLD);
        }
        return;
    }
    if (r < 0 && r != WLOG_EBUSY)
        bridge_fatal(b, "WAL commit", r);
}

void bridge_commit_and_ack(struct bridge *b)
{
    commit_and_ack(b, 0);
}

/*
 * Commit now and wait for it: for an operator's request that answers
 * "durable" (DELETE /pending, POST /purge). The loop waits one fsync.
 */
void bridge_commit_and_wait(struct bridge *b)
{
    eng_flush(b->eng);  /* the commit already out, if any */
    commit_and_ack(b, 1); /* one with everything so far, paced or not */
    eng_flush(b->eng);
}
