/*
 * wrepl_int.h -- what the five files of the replicated log share: its
 * state (struct wrepl), the broker connection's events, and the helpers
 * each of them calls. Private to src/repl/wrepl*.c; the contract is wrepl.h.
 *
 *   wrepl.c         the wlog interface: commits, the tap that turns records
 *                   into stream messages, horizons
 *   wrepl_thread.c  the replication thread: publishes each commit's
 *                   messages, waits for their confirms
 *   wrepl_lease.c   the broker connection: frames, publishes, the lease
 *                   (take it, stand by, renew it so no broker timer ends it)
 *   wrepl_import.c  reading the stream back into the local log: the
 *                   standby and the takeover, step by step
 *   wrepl_resume.c  resuming on an intact local log: the REPLICA note, the
 *                   resume sink, where the stream stands (offsets)
 *
 * Calls go one way, never back up: wrepl.c -> wrepl_thread.c ->
 * wrepl_import.c -> wrepl_resume.c -> wrepl_lease.c (a file may call any
 * file below it, never one above).
 * What two of them need goes to the lower one.
 *
 * Threads: recover (connect, lease, import) runs on the recovery thread;
 * once it returns, the connection belongs to the publishing thread
 * (repl_main) and the loop thread talks to it through mu/cv and efd.
 */
#ifndef DB_WREPL_INT_H
#define DB_WREPL_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "delay-bridge/broker_conn.h"
#include "base/clock.h"
#include "wrepl.h"
#include "delay-bridge/replrec.h"

#include "base/xalloc.h"

/*
 * CH_PUB carries the stream's messages and nothing else. RabbitMQ before
 * 4.0.x (rabbitmq-server#12236; 3.10.8's rabbit_stream_queue:resend_all/1
 * read back from its beam) resends a stream's unconfirmed messages after a
 * leader change under the channel's publish sequence number instead of the
 * stream writer's own: when the two differ, the resend makes osiris take
 * the next real message for a duplicate, which it confirms and never
 * stores (found by the fault schedule: tests/soak/README.md). Both numbers
 * count from 1 on a fresh channel, so on a channel that publishes only to
 * the stream -- every publish routed to it, mandatory; after a return
 * (the stream deleted) a fresh channel for the stream declared again --
 * they stay equal and the resend is right.
 */
#define CH_PUB 1   /* stream publishes only, with confirms (see above) */
#define CH_LEASE 2 /* the lease consumer */
#define CH_READ 3  /* the import's stream consumer */
#define CH_RENEW 4 /* lease tokens, with confirms (tags of their own) */
#define CH_READ_HINT 5 /* the import's stream consumer, started again at a horizon's time */
#define HINT_MARGIN_MS 10000 /* read from this long before the horizon: clocks differ */
#define IMPORT_DIR "import"
#define IMPORT_PREFETCH 1000 /* messages; TCP flow control bounds the bytes */
#define IMPORT_ACK_EVERY 250
#define IMPORT_COMMIT_BYTES (64u << 20)  /* taking over: few, large writes */
#define STANDBY_COMMIT_BYTES (4u << 20)  /* standing by: a small buffer, written when idle too */
#define NOTE_BYTES (8ull << 20)   /* the owner moves its REPLICA note on after this much ... */
#define NOTE_MS 30000             /* ... or this long with anything published */
#define IMPORT_IDLE_MS 60000 /* the stream sends nothing for this long: give up */
#define RETRY_MS 2000
#define RETRY_SOON_MS 300 /* the broker was there, the stream refused: again soon, doubling */
#define LEASE_DISCONNECTED_MS 100 /* 4.3+: a lost node's consumer keeps the token this long */
#define RESUME_QUIET_MS 3000 /* resuming: the fence confirmed, nothing read this long */
#define REFUSED_LINES 5 /* lines a minute about stream messages of other users, at most */
#define TAIL_SLACK_BYTES (64ull << 20) /* a standby reads again from a horizon past this */

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct wrepl {
    struct wlog base;   /* base.under is inner: what the table leaves NULL is the segment log's */
    struct wal *wal;    /* the segment log it is composed over (made here: wrepl_log) */
    struct wlog *inner; /* ... as a struct wlog (wal_log(wal)) */
    struct wal_opts wo;
    const struct config *cfg;
    const struct config_replicate *rc;
    char dir[4096];

    /* The broker connection: recover's, then the replication thread's. */
    struct broker_conn conn;
    uint64_t next_tag;  /* delivery tag of the last publish on CH_PUB */
    int fp_lose;        /* the failpoint repl.lose_message hit: the next publish is lost */
    int stream_recreated; /* under mu: the thread declared the stream again (the loop checkpoints) */
    int have_lease;
    uint64_t token;     /* this term's */
    int server_version; /* the broker's version as major * 100 + minor (0: unknown) */
    uint64_t recover_t0;  /* monotonic ms recover began */
    uint64_t lease_at;    /* ... and the lease came */
    int64_t tail_from;    /* where a standby's read starts: a stream offset, -1: "first" */
    int retry_now;        /* the last -EAGAIN wants no pause before connecting again ... */
    int retry_soon;       /* ... or soon (RETRY_SOON_MS, doubling): the stream was refused */

    /* Resuming on an intact local log after a clean stop (wrepl_resume.c). */
    int resume;             /* dir/REPLICA was taken: read from tail_from, keep the delta */
    int resume_bad;         /* what the stream holds past it does not continue the log */
    uint64_t resume_resets;
    uint64_t resume_wal_id, resume_next;
    uint64_t resume_term;   /* the owner token of the term that stopped cleanly */
    int resume_seen;        /* the read met a message of that term */
    struct buf delta;       /* [type u8][len u32][payload] from resume_next on */
    uint64_t delta_count;
    int64_t close_from;     /* at a clean stop: the stream's last chunk (-1: unknown) */
    uint64_t resume_note_next;  /* the note's next_lsn: records below it were confirmed */
    uint64_t term_max;          /* highest LSN the read took from a batch of resume_term */
    uint64_t resume_read_next;  /* LSN after the last record the read took */
    uint64_t resume_hole_from, resume_hole_to;  /* the first hole the local log fills (0, 0) */
    uint64_t resume_hole_records;               /* records in all such holes */
    int64_t fence_off;          /* stream offset of this term's fence, once read (-1) */

    /* The running note (loop thread: tap_next, commit_next; under mu: durable_next). */
    uint64_t tap_next;          /* LSN after the last record tapped */
    uint64_t commit_next;       /* ... when the commit under way began */
    uint64_t durable_next;      /* records below it are fsynced here and confirmed there */
    int64_t note_from_prev;     /* repl thread: the last chunk's offset at the previous step */
    uint64_t note_ms, note_bytes;

    /* The lease token (wrepl_lease.c): recover's thread, then repl_main's. */
    uint64_t lease_tag;      /* delivery tag of the token we hold on CH_LEASE, 0: none */
    int renew;               /* RENEW_* */
    uint64_t renew_at;       /* monotonic ms: the next renewal starts */
    uint64_t renew_deadline; /* the step under way gives up */
    uint64_t renew_tag;      /* last publish on CH_RENEW */
    uint64_t hint_lsn, hint_ms;     /* under mu: newest confirmed horizon, wall ms of its roll */
    uint64_t grant_lsn, grant_ms;   /* the hint the token we were granted carried (0: none) */
    int no_hint;                    /* a read from the hint was not whole: read from the start */
    int efd;            /* wakes the thread */

    /* Loop thread: records being gathered into stream messages. */
    struct buf build;   /* [u32 body length][body] ... */
    size_t cur;         /* offset of the open message's length word, or SIZE_MAX */
    uint32_t cur_count;
    uint64_t cur_first;
    uint64_t wal_id;
    uint64_t tapped;    /* record bytes handed to the stream, ever */

    /* Loop thread: the commit in progress. */
    int busy, local_pending, stream_pending, local_err, stream_err;
    wlog_commit_fn *done;
    void *done_arg;

    /* Loop thread: stream checkpoints (horizons). */
    uint64_t horizon_target;   /* running: the LSN asked for (0: none) */
    uint64_t horizon_began_at; /* tapped when it began */
    uint64_t last_began_at;    /* tapped when the newest completed one began */
    uint64_t last_ended_at;    /* tapped when it completed: the next one counts from here */
    uint64_t last_horizon_ms;
    int need_horizon;
    uint64_t warned_ms;
    uint64_t horizon_unsent;   /* reached, its HORIZON message waits in build */
    uint64_t horizon_in_job;   /* ... in the job out on the thread */
    uint64_t horizon_copied;   /* bytes copied for it, for the log line */
    uint64_t horizon_roll_ms;  /* wall-clock ms the running one rolled the log */
    uint64_t horizon_unsent_ms, horizon_in_job_ms;

    /* Shared with the thread, under mu. */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct buf job;
    int job_posted, job_done, job_err, quit;
    int failed;
    void (*notify)(void *arg);
    void *notify_arg;
    struct wlog_repl_stats st; /* state and cancel are the atomics below */
    _Atomic int state;
    _Atomic int cancel;

    /* Stream messages of other broker users (wrepl_from_writer; recover's thread). */
    int64_t seen_lo, seen_hi;   /* stream offsets earlier reads went through (-1: none) ... */
    int64_t pass_lo, pass_hi;   /* ... and the read under way: its refusals count once */
    uint64_t refused_log_ms;    /* monotonic ms the current minute of lines about them began */
    int refused_lines;          /* lines logged in it (REFUSED_LINES at most) */
    uint64_t refused_quiet;     /* refused and not logged since the last line */

    /* The import (recover's thread). */
    struct wal *imp;
    int impfd;
    uint64_t imp_pending;
    uint64_t imp_commit_bytes; /* IMPORT_ or STANDBY_COMMIT_BYTES */
};

#define R(l) ((struct wrepl *)(l))

/* ---- shared helpers (wrepl_lease.c) ---------------------------------------------- */

static inline void set_state(struct wrepl *r, int s)
{
    atomic_store(&r->state, s);
}

void wrepl_buf_reserve(struct buf *b, size_t n);

enum { EV_NONE, EV_DELIVER, EV_ACK, EV_NACK, EV_CANCEL, EV_RETURN };

struct event {
    int kind;
    amqp_channel_t ch;
    uint64_t tag;
    int multiple;
    amqp_message_t msg; /* EV_DELIVER: amqp_destroy_message() it */
};

/*
 * The next event within timeout_ms (0: only what has arrived); ev->kind is
 * EV_NONE when there is none. -1 with why set when the connection or a
 * channel is gone (a broker close is answered).
 */
int wrepl_next_event(struct wrepl *r, int timeout_ms, struct event *ev, char *why, size_t n);

/*
 * Publish body to the stream through the default exchange on CH_PUB
 * (persistent, mandatory: a stream deleted under the bridge makes it come
 * back, EV_RETURN), with the user-id property set to the connection's
 * broker user (RabbitMQ refuses the publish unless it is the user's own).
 * 0 or -1 + why.
 */
int wrepl_publish(struct wrepl *r, const void *body, size_t n, char *why, size_t wn);

/*
 * Whether a stream delivery is the log's writer's: its user-id property,
 * which RabbitMQ validated against the publishing connection's user, is
 * this bridge's broker user (r->conn.user; every bridge of one log
 * connects as the same user). 1 yes; 0 no: the message is refused,
 * counted in st.refused (not again when a later read of the stream, begun
 * with wrepl_read_begin(), meets it again), and logged (REFUSED_LINES a
 * minute at most). Every delivery of a read goes through it, in order.
 */
int wrepl_from_writer(struct wrepl *r, const amqp_message_t *m, int64_t offset);
void wrepl_read_begin(struct wrepl *r);

/* Declare the stream (queue.declare on CH_PUB, its arguments from wal.replicate). 0 or -1 + why. */
int wrepl_declare_stream(struct wrepl *r, char *why, size_t n);

/*
 * The stream was deleted under us: a fresh CH_PUB (its publish numbers
 * start at 1 again, as the new stream's writer does: see CH_PUB), then
 * declare the stream again. Nothing may be unconfirmed on CH_PUB. 0 or -1.
 */
int wrepl_reopen_stream(struct wrepl *r, char *why, size_t n);

/* A string / 64-bit integer table entry (arguments). */
void wrepl_arg_str(amqp_table_entry_t *e, const char *key, const char *v);
void wrepl_arg_i64(amqp_table_entry_t *e, const char *key, int64_t v);

/*
 * Connect (trying every broker URI), declare the stream and the lease
 * queue, consume the lease, put a token in it if it has none. 0; -EAGAIN
 * when no broker could be reached (worth retrying); WLOG_EREPLICA when the
 * broker refused a declaration (it will again: the operator must look).
 */
int wrepl_connect_lease(struct wrepl *r);


/*
 * Keeping the lease (the token held unacked) from being taken back by a
 * broker timer. wrepl_renew_step() starts a renewal when one is due and
 * gives up a stuck step; wrepl_renew_event() takes the events that belong
 * to it (the token's delivery, CH_RENEW's confirms) and returns 1 for
 * them. Both -1 with why when the lease is lost or cannot be renewed.
 * wrepl_renew_wait_ms(): how long the caller may sleep before the next step.
 */
enum { RENEW_IDLE, RENEW_CONFIRM, RENEW_DELIVER };
int wrepl_renew_step(struct wrepl *r, char *why, size_t n);
int wrepl_renew_event(struct wrepl *r, const struct event *ev, char *why, size_t n);
int wrepl_renew_wait_ms(const struct wrepl *r);

/* ---- the replication thread (wrepl_thread.c) ------------------------------------ */

/*
 * The thread's body (pthread_create() in wr_recover, once recover holds
 * the lease): publish each posted job, wait for its confirms; until quit.
 */
void *repl_main(void *arg);

/* ---- the import (wrepl_import.c) ------------------------------------------------- */

/*
 * Stand by reading the stream ahead into dir/import/ (a hot standby) until
 * the lease comes; then fence, read on to the fence, and make the local
 * log the stream's log. 0; -EAGAIN (nothing local changed: connect again;
 * r->retry_now: at once); or a negative code (logged).
 */
int wrepl_import(struct wrepl *r, int dirfd);

/* ---- resuming on an intact local log (wrepl_resume.c) ----------------------------- */

/* Note where the stream stands in dir/REPLICA (quiet: no info line). 0 or -errno (logged). */
int wrepl_replica_write(struct wrepl *r, uint64_t wal_id, uint64_t next_lsn, int64_t from,
                        int quiet);

/*
 * At start: read dir/REPLICA if there is one, and where the local log ends
 * (its newest segment scanned); sets r->resume when both fit. 0 or -errno.
 */
int wrepl_replica_take(struct wrepl *r, int dirfd);

/*
 * The sink a resuming import reads into (replrec.h): records the local log
 * lacks are kept in r->delta; a run that does not continue the local log
 * sets r->resume_bad; holes the local log fills are counted.
 */
struct replrec_sink wrepl_resume_sink(struct wrepl *r);

/* After the local log's recovery: append the kept records and replay them through fn. */
int wrepl_resume_apply(struct wrepl *r, wlog_replay_fn *fn, void *arg);

/* The stream offset a delivery carries (header x-stream-offset), or -1. */
int64_t wrepl_delivery_offset(const amqp_message_t *m);

/* On the replication thread at a clean stop: the first offset of the last chunk, or -1. */
int64_t wrepl_stream_last_offset(struct wrepl *r);

/* On the replication thread: move the note on when NOTE_BYTES or NOTE_MS call for it. */
void wrepl_note_step(struct wrepl *r, int force);

#endif
