/*
 * wrepl_thread.c -- the replication thread: it publishes each commit's
 * stream messages and waits for the stream's confirms.
 *
 * At a commit the loop thread closes the open message and posts the batch
 * (r->job, under mu) and wakes this thread through efd; the local log
 * fsyncs on its own sync thread meanwhile. repl_main() takes the job,
 * publishes every message on CH_PUB (wrepl_int.h says why that channel
 * carries nothing else) and counts the confirms; when all came, it tells
 * the loop (job_done, then notify), which completes the commit once the
 * local half is done too. Between jobs it keeps the lease renewed
 * (wrepl_lease.c) and moves the REPLICA note on (wrepl_resume.c).
 *
 * Failures are final. A nack, a confirm that does not come within
 * confirm_timeout_ms, a cancelled lease consumer or a lost connection
 * fail the log (thread_fail()): the connection is closed at once, so the
 * lease goes back to the broker and a standby may take over, and the
 * thread only waits for quit. The one exception is the stream deleted
 * under us (every publish returned, then confirmed): it is declared again
 * and the batch published again, at most three times for one batch
 * (redeclare_stream()).
 *
 * The thread's own state is one struct repl_run; one turn of its loop is
 * repl_turn(): publish what was taken, sleep, renew, take the events,
 * settle the job.
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/failpoint.h"
#include "base/log.h"

/* The log failed on this thread: keep the first error, end the job with it, tell the loop. */
static void thread_fail(struct wrepl *r, const char *why)
{
    void (*fn)(void *);
    void *arg;

    pthread_mutex_lock(&r->mu);
    if (!r->failed) {
        r->failed = WLOG_EREPLICA;
        log_error("wal-replica", "replication failed: the log stops (the lease goes with the "
                  "connection)", "stream=%s error=\"%s\"", r->rc->stream, why);
    }
    r->job_err = WLOG_EREPLICA;
    r->job_done = 1;
    fn = r->notify;
    arg = r->notify_arg;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    set_state(r, WLOG_REPL_FAILED);
    if (fn)
        fn(arg);
}

/* Publish every message of a job (CH_PUB); their tags follow r->next_tag. 0 or -1 + why. */
static int publish_job(struct wrepl *r, const struct buf *job, size_t *nmsg, uint64_t *bytes,
                       char *why, size_t wn)
{
    *nmsg = 0;
    *bytes = 0;
    for (size_t off = 0; off < job->len;) {
        uint32_t n = walrec_get32(job->p + off);
        r->fp_lose = FAILPOINT_ERR("repl.lose_message");
        if (wrepl_publish(r, job->p + off + 4, n, why, wn) < 0)
            return -1;
        off += 4 + (size_t)n;
        (*nmsg)++;
        *bytes += n;
    }
    return 0;
}

struct repl_run {
    struct wrepl *r;
    struct buf job;      /* the messages out, taken from r->job */
    uint8_t *acked;      /* one per message of the job: its confirm came */
    size_t nmsg, nacked; /* the job's messages; how many are confirmed */
    uint64_t first_tag;  /* the publish tag of its first message on CH_PUB */
    uint64_t deadline;   /* monotonic ms: no confirm by then fails the log */
    uint64_t t0;         /* monotonic ns the job was taken: the confirm histogram */
    uint64_t bytes;      /* the job's message bytes */
    int inflight;        /* published, not all confirmed yet */
    int returned;        /* a publish came back unroutable: the stream was deleted */
    int redeclared;      /* times the stream was declared again for this job */
    int resend;          /* publish the job again: the stream was declared again */
    int dead;            /* failed: the connection is gone; wait for quit */
    char why[1024];
};

/* Take the job the loop posted, unless one is out. 1 taken, 0 not, -1: quit. */
static int take_job(struct repl_run *t)
{
    struct wrepl *r = t->r;
    int take = 0;

    pthread_mutex_lock(&r->mu);
    if (r->quit) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    if (!t->inflight && r->job_posted && !t->dead) {
        struct buf b = t->job;
        t->job = r->job;
        r->job = b;
        r->job.len = 0;
        r->job_posted = 0;
        take = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return take;
}

/* Publish a job just taken, or taken again for a stream declared again. 0 or -1 + why. */
static int send_job(struct repl_run *t, int take)
{
    struct wrepl *r = t->r;

    if (!take && !t->resend)
        return 0;
    if (take) {
        t->redeclared = 0;
        t->t0 = clock_mono_ns();
    }
    t->resend = 0;
    t->first_tag = r->next_tag + 1;
    if (publish_job(r, &t->job, &t->nmsg, &t->bytes, t->why, sizeof(t->why)) < 0)
        return -1;
    t->acked = xrealloc(t->acked, t->nmsg ? t->nmsg : 1);
    memset(t->acked, 0, t->nmsg ? t->nmsg : 1);
    t->nacked = 0;
    t->returned = 0;
    t->inflight = 1;
    t->deadline = clock_mono_ms() + r->rc->confirm_timeout_ms;
    return 0;
}

/* Sleep until the loop or the broker has something, a confirm is due or the lease needs renewing. */
static void wait_for_work(struct repl_run *t)
{
    struct wrepl *r = t->r;

    if (!t->dead && !broker_conn_buffered(&r->conn)) {
        struct pollfd p[2] = {{r->efd, POLLIN, 0}, {r->conn.fd, POLLIN, 0}};
        int timeout = wrepl_renew_wait_ms(r);
        if (t->inflight) {
            uint64_t now = clock_mono_ms();
            int ms = now >= t->deadline
                         ? 0
                         : (int)(t->deadline - now < 1000 ? t->deadline - now : 1000);
            timeout = ms < timeout ? ms : timeout;
            if (r->conn.tls && timeout > 20)
                timeout = 20; /* TLS may hold a record rabbitmq-c has not seen yet */
        }
        poll(p, 2, timeout);
    } else if (t->dead) {
        struct pollfd p = {r->efd, POLLIN, 0};
        poll(&p, 1, 1000);
    }
}

/* Take every event that has come: the lease's, the job's confirms, a return. 0 or -1 + why. */
static int take_events(struct repl_run *t)
{
    struct wrepl *r = t->r;

    for (;;) {
        struct event ev;
        int mine;
        if (wrepl_next_event(r, 0, &ev, t->why, sizeof(t->why)) < 0)
            return -1;
        if (ev.kind == EV_NONE)
            return 0;
        if ((mine = wrepl_renew_event(r, &ev, t->why, sizeof(t->why))) < 0)
            return -1;
        if (mine)
            continue;
        if (ev.kind == EV_DELIVER) {
            amqp_destroy_message(&ev.msg);
        } else if (ev.kind == EV_NACK && ev.ch == CH_PUB) {
            snprintf(t->why, sizeof(t->why), "the stream refused (nack) a batch");
            return -1;
        } else if (ev.kind == EV_CANCEL) {
            snprintf(t->why, sizeof(t->why), "the broker cancelled the lease consumer");
            return -1;
        } else if (ev.kind == EV_RETURN && ev.ch == CH_PUB) {
            t->returned = 1; /* the stream is gone; the confirm of the message follows */
        } else if (ev.kind == EV_ACK && ev.ch == CH_PUB && t->inflight) {
            uint64_t lo = ev.multiple ? t->first_tag : ev.tag;
            for (uint64_t g = lo; g <= ev.tag; g++)
                if (g >= t->first_tag && g < t->first_tag + t->nmsg && !t->acked[g - t->first_tag]) {
                    t->acked[g - t->first_tag] = 1;
                    t->nacked++;
                }
        }
    }
}

/*
 * The stream was deleted under us, and the broker confirmed the publishes
 * it could not route. Declare it again and publish the whole batch again
 * (an importer skips what overlaps); the loop then starts a stream
 * checkpoint at once, since the new stream starts in the middle of the
 * log. Stopping instead would hand the lease to a standby, which would
 * take its own local log for the log on the new, empty stream. 0 or -1.
 */
static int redeclare_stream(struct repl_run *t)
{
    struct wrepl *r = t->r;

    if (++t->redeclared > 3) {
        snprintf(t->why, sizeof(t->why), "the stream %s keeps vanishing: deleted again each "
                 "time it is declared", r->rc->stream);
        return -1;
    }
    log_warn("wal-replica", "the stream was deleted while in use: declaring it again and "
             "publishing the batch again; a stream checkpoint follows at once",
             "stream=%s messages=%zu", r->rc->stream, t->nmsg);
    if (wrepl_reopen_stream(r, t->why, sizeof(t->why)) < 0)
        return -1;
    pthread_mutex_lock(&r->mu);
    r->stream_recreated = 1;
    pthread_mutex_unlock(&r->mu);
    r->note_from_prev = -1; /* the old stream's offsets mean nothing now */
    t->resend = 1;
    return 0;
}

/* Every message of the job confirmed: the commit's stream half is done; tell the loop. */
static void job_confirmed(struct repl_run *t)
{
    struct wrepl *r = t->r;
    void (*fn)(void *);
    void *narg;

    t->inflight = 0;
    t->job.len = 0;
    pthread_mutex_lock(&r->mu);
    r->job_done = 1;
    r->job_err = 0;
    r->st.published_messages += t->nmsg;
    r->st.confirmed_messages += t->nmsg;
    r->st.published_bytes += t->bytes;
    db_hist_observe(&r->st.confirm, (double)(clock_mono_ns() - t->t0) / 1e9);
    fn = r->notify;
    narg = r->notify_arg;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (fn)
        fn(narg);
}

/*
 * One turn: publish what was taken, sleep, renew the lease and move the
 * note, take the events, then settle the job (declared again, confirmed,
 * or out of time). 0, or -1 with why: the log fails.
 */
static int repl_turn(struct repl_run *t, int take)
{
    struct wrepl *r = t->r;
    uint64_t v;

    if (send_job(t, take) < 0)
        return -1;
    wait_for_work(t);
    if (read(r->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        return 0;
    if (t->dead)
        return 0;
    if (wrepl_renew_step(r, t->why, sizeof(t->why)) < 0)
        return -1;
    if (!t->inflight)
        wrepl_note_step(r, 0);
    if (take_events(t) < 0)
        return -1;
    if (t->inflight && t->nacked == t->nmsg && t->returned)
        return redeclare_stream(t);
    if (t->inflight && t->nacked == t->nmsg) {
        job_confirmed(t);
    } else if (t->inflight && clock_mono_ms() >= t->deadline) {
        snprintf(t->why, sizeof(t->why), "no confirm from the stream within %u ms",
                 r->rc->confirm_timeout_ms);
        return -1;
    }
    return 0;
}

void *repl_main(void *arg)
{
    struct repl_run t = {.r = arg};
    struct wrepl *r = t.r;
    int take;

    while ((take = take_job(&t)) >= 0) {
        if (repl_turn(&t, take) < 0) {
            /* Drop the connection at once: the lease goes back to the broker. */
            broker_conn_close(&r->conn, 0);
            t.dead = 1;
            t.inflight = 0;
            thread_fail(r, t.why);
        }
    }
    if (!t.dead && !t.inflight)
        r->close_from = wrepl_stream_last_offset(r);
    if (!t.dead)
        broker_conn_close(&r->conn, 1);
    free(t.job.p);
    free(t.acked);
    return NULL;
}
