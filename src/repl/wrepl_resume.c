/*
 * wrepl_resume.c -- a restart on an intact local log reads only the stream
 * past its own last record.
 *
 * The stream is the truth, and a bridge that starts cannot in general tell
 * whether its local log is the stream's: it may have been killed with a
 * commit the stream never confirmed, or another bridge may have owned the
 * log since. After a clean stop it can: every record it appended was
 * confirmed by the stream before the stop (the bridge flushes before it
 * closes the log), and nobody but the next owner writes after it. So at a
 * clean stop the owner writes down what it knows, in dir/REPLICA:
 *
 *   +--------+------+-----------------------------------------------------+
 *   | offset | size | field (integers little-endian)                      |
 *   +--------+------+-----------------------------------------------------+
 *   |      0 |    4 | magic "DBRP"                                        |
 *   |      4 |    4 | version: 1                                          |
 *   |      8 |    8 | wal_id of the log                                   |
 *   |     16 |    8 | next_lsn: the LSN its next record would have had    |
 *   |     24 |    8 | from: a stream offset at or before its last message |
 *   |     32 |    8 | term: the owner token of its lease term (FENCE and  |
 *   |        |      | RECORDS headers carry it)                           |
 *   |     40 |    4 | CRC-32C of bytes 0..39                              |
 *   +--------+------+-----------------------------------------------------+
 *
 * "from" is the first offset of the stream's last chunk, read at the stop
 * (a consumer at x-stream-offset "last"): the bridge's own last message
 * is in that chunk or after it.
 *
 * The owner keeps the note true while it runs, not only at a clean stop.
 * Its claim: records below next_lsn are durable here and confirmed by the
 * stream, and every record of this log from next_lsn on is in the stream
 * after offset "from", where a message of the owner's term also is. At the
 * takeover it writes (next_lsn of the recovered log, the offset of its own
 * fence); then, every NOTE_BYTES published or NOTE_MS with traffic, the
 * replication thread asks for the offset of the stream's last chunk and
 * writes the note with the offset it got at the step before and the
 * durable next_lsn of now: whatever was published after that earlier
 * question lies after its offset, and everything below the durable next_lsn
 * is durable and confirmed. At a clean stop the note is exact (next_lsn is
 * the log's end, from the last chunk's offset at the stop).
 *
 * At start the note is read and the local log's end (its last durable LSN
 * L, by a scan of the newest segment: the torn tail a crash left does not
 * count) is found. The stream is read from "from" instead of from the
 * start, and the read counts only if
 *
 *   - it meets a message of the noted term (then this is still the log's
 *     stream: not deleted and declared again, not another log's);
 *   - its records, for the same log id, run from the note's next_lsn (or
 *     before) through L + 1, with no hole past L (records neither here nor
 *     there);
 *   - every local record the stream may lack was confirmed: L < next_lsn,
 *     or L <= the highest LSN the read took from a batch of the noted term
 *     (a crash between the local fsync and the stream's confirm leaves
 *     local records a new owner may have written differently).
 *
 * A hole at or below L -- records from the note's next_lsn on that the
 * stream lacks although a later batch of the same term is there -- is
 * the broker's: it confirmed a batch it did not store (wrepl_int.h, CH_PUB,
 * on the resend bug of RabbitMQ before 4.0.x). Nobody else can have
 * written those LSNs (a later owner reads through L first, the third
 * rule), and the local log holds them durably, so the bridge resumes on
 * it -- a rebuild from the stream would refuse the hole -- and starts a
 * stream checkpoint at once: the live records are copied forward, and
 * the stream is whole again from its horizon on (need_horizon). Until
 * then the replication stats say complete=false, and a standby granted the
 * lease refuses to build its log from the stream rather than lose them.
 *
 * Records up to L are the local log's own and are skipped; records from
 * L + 1 on (confirmed but not yet fsynced here, or another owner's since)
 * are kept in memory (at most RESUME_MAX_BYTES) and appended to the local
 * log after its own recovery, before the tap that would publish them again
 * is set. Otherwise the whole stream is read, as without a note.
 */
#define _GNU_SOURCE
#include "wrepl_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/log.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walscan.h"
#include "base/xalloc.h"

#define REPLICA_NAME "REPLICA"
#define REPLICA_SIZE 44
#define RESUME_MAX_BYTES (32ull << 20) /* held in memory: a standby reads the rest to disk */

static const uint8_t magic[4] = {'D', 'B', 'R', 'P'};

int wrepl_replica_write(struct wrepl *r, uint64_t wal_id, uint64_t next_lsn, int64_t from,
                        int quiet)
{
    uint8_t b[REPLICA_SIZE];
    int e;

    memcpy(b, magic, 4);
    walrec_put32(b + 4, 1);
    walrec_put64(b + 8, wal_id);
    walrec_put64(b + 16, next_lsn);
    walrec_put64(b + 24, (uint64_t)from);
    walrec_put64(b + 32, r->token);
    walrec_put32(b + 40, crc32c(0, b, 40));
    /* REPLICA.tmp, fsync, rename, directory fsync: the old note or the new one */
    e = wal_dir_replace_file(r->dir, REPLICA_NAME, b, sizeof(b));
    if (e < 0)
        log_warn("wal-replica", "cannot note where the stream stands; the next start reads the "
                 "whole stream", "dir=%s error=\"%s\"", r->dir, strerror(-e));
    else if (!quiet)
        log_info("wal-replica", "clean stop noted: the next start reads only the stream past "
                 "this log's end", "next_lsn=%llu from_offset=%lld",
                 (unsigned long long)next_lsn, (long long)from);
    return e;
}

/*
 * Where the log in dirfd ends: its id and the LSN after its last durable
 * record, from a scan of the newest segment with a valid header (what
 * recovery will find, less the torn tail it truncates). 0, or -1 when it
 * cannot tell (no segment, a bad one: then the whole stream is read).
 */
static int local_end(int dirfd, uint64_t *wal_id, uint64_t *next)
{
    return walscan_log_end(dirfd, wal_id, next); /* the log layer's reading rule */
}

int wrepl_replica_take(struct wrepl *r, int dirfd)
{
    uint8_t b[REPLICA_SIZE];
    uint64_t id = 0, next = 0;
    ssize_t n = wal_dir_read_file(r->dir, REPLICA_NAME, b, sizeof(b));

    r->resume = 0;
    if (n < 0)
        return n == -ENOENT ? 0 : (int)n;
    if (n != (ssize_t)sizeof(b) || memcmp(b, magic, 4) != 0 || walrec_get32(b + 4) != 1 ||
        walrec_get32(b + 40) != crc32c(0, b, 40)) {
        log_warn("wal-replica", "ignoring a damaged REPLICA note; reading the whole stream",
                 "dir=%s", r->dir);
        return 0;
    }
    if (local_end(dirfd, &id, &next) < 0 || id != walrec_get64(b + 8) || next < 2) {
        log_info("wal-replica", "the local log does not match its REPLICA note (or cannot be "
                 "scanned); reading the whole stream", "dir=%s", r->dir);
        return 0;
    }
    r->resume = 1;
    r->resume_wal_id = id;
    r->resume_next = next; /* L + 1 */
    r->resume_note_next = walrec_get64(b + 16);
    r->tail_from = (int64_t)walrec_get64(b + 24);
    r->resume_term = walrec_get64(b + 32);
    r->resume_seen = 0;
    r->term_max = 0;
    return 0;
}

/* ---- the records the local log lacks ----------------------------------------------- */

/*
 * The resume sink's runs: from the note's next_lsn on, every record must
 * be there, so the first run starts by it; a later run starts where the
 * read left off. A run that starts past the local log, or another log's,
 * spoils the resume; a hole below L + 1 is one the local log fills.
 */
static int resume_reset(void *arg, uint64_t wal_id, uint64_t base_lsn)
{
    struct wrepl *r = arg;

    /* From the note's next_lsn on, every record must be there: the first run starts by it. */
    uint64_t from = r->resume_resets++ == 0 ? r->resume_note_next : r->resume_read_next;

    if (from > r->resume_next)
        from = r->resume_next;
    if (base_lsn > r->resume_next || wal_id != r->resume_wal_id) {
        r->resume_bad = 1; /* records past the local log are missing, or not this log */
    } else if (base_lsn > from) {
        /* A hole the local log fills: its records are here, durable (see the essay). */
        if (!r->resume_hole_to)
            r->resume_hole_from = from;
        r->resume_hole_to = base_lsn;
        r->resume_hole_records += base_lsn - from;
    }
    r->resume_read_next = base_lsn;
    return 0;
}

/* The records: keep those from resume_next on (L + 1), in order, up to RESUME_MAX_BYTES. */
static int wrepl_resume_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct wrepl *r = arg;
    struct buf *d = &r->delta;

    r->resume_read_next = h->lsn + 1;
    if (h->lsn < r->resume_next)
        return 0; /* the local log has it */
    if (h->lsn != r->resume_next + r->delta_count || d->len > RESUME_MAX_BYTES) {
        r->resume_bad = 1; /* not the continuation (or too much of it): read everything */
        return 0;
    }
    wrepl_buf_reserve(d, 5 + h->len);
    d->p[d->len] = h->type;
    walrec_put32(d->p + d->len + 1, h->len);
    memcpy(d->p + d->len + 5, payload, h->len);
    d->len += 5 + h->len;
    r->delta_count++;
    return 0;
}

struct replrec_sink wrepl_resume_sink(struct wrepl *r)
{
    return (struct replrec_sink){resume_reset, wrepl_resume_record, r};
}

int wrepl_resume_apply(struct wrepl *r, wlog_replay_fn *fn, void *arg)
{
    struct buf *d = &r->delta;
    uint64_t want = r->resume_next, lsn = 0;
    int e = 0;

    if (wlog_id(r->inner) != r->resume_wal_id || wlog_next_lsn(r->inner) != want) {
        log_error("wal-replica", "the local log does not end where its clean stop said: it "
                  "changed since; start again to rebuild it from the stream",
                  "next_lsn=%llu expected=%llu", (unsigned long long)wlog_next_lsn(r->inner),
                  (unsigned long long)want);
        return WLOG_EREPLICA;
    }
    for (size_t off = 0; e == 0 && off < d->len;) {
        uint8_t type = d->p[off];
        uint32_t len = walrec_get32(d->p + off + 1);
        const uint8_t *payload = d->p + off + 5;
        struct walrec_piece pc = {payload, len};
        struct walrec_hdr h;
        struct wlog_loc loc;

        if ((e = wlog_append(r->inner, type, &pc, 1, &lsn, &loc)) < 0)
            break;
        if (lsn != want++) {
            e = WLOG_ECORRUPT;
            break;
        }
        memset(&h, 0, sizeof(h));
        h.type = type;
        h.len = len;
        h.lsn = lsn;
        e = fn(arg, &h, payload, loc);
        off += 5 + (size_t)len;
    }
    if (e == 0)
        log_info("wal-replica", "resumed on the intact local log: only the stream past it was "
                 "read", "records_appended=%llu bytes=%zu", (unsigned long long)r->delta_count,
                 d->len);
    free(d->p);
    memset(d, 0, sizeof(*d));
    r->delta_count = 0;
    return e;
}

/* ---- where the stream stands ------------------------------------------------------ */

int64_t wrepl_delivery_offset(const amqp_message_t *m)
{
    const amqp_table_t *t = &m->properties.headers;

    if (!(m->properties._flags & AMQP_BASIC_HEADERS_FLAG))
        return -1;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == 15 && memcmp(e->key.bytes, "x-stream-offset", 15) == 0) {
            if (e->value.kind == AMQP_FIELD_KIND_I64)
                return e->value.value.i64;
            if (e->value.kind == AMQP_FIELD_KIND_U64)
                return (int64_t)e->value.value.u64;
        }
    }
    return -1;
}

/*
 * At a clean stop, on the replication thread: the first offset of the
 * stream's last chunk (a consumer at "last" gets that chunk first), or -1.
 */
int64_t wrepl_stream_last_offset(struct wrepl *r)
{
    amqp_connection_state_t st = r->conn.st;
    amqp_table_entry_t e[1];
    amqp_table_t args = {1, e};
    uint64_t deadline = clock_mono_ms() + 2000;
    int64_t off = -1;
    char why[512];

    amqp_channel_open(st, CH_READ);
    if (broker_conn_check(&r->conn, "channel.open", why, sizeof(why)) < 0)
        return -1;
    amqp_basic_qos(st, CH_READ, 0, 1, 0);
    wrepl_arg_str(&e[0], "x-stream-offset", "last");
    amqp_basic_consume(st, CH_READ, amqp_cstring_bytes(r->rc->stream),
                       amqp_cstring_bytes("wal-last"), 0, 0, 0, args);
    if (broker_conn_check(&r->conn, "consume the stream at its last chunk", why, sizeof(why)) < 0)
        return -1;
    while (off < 0 && clock_mono_ms() < deadline) {
        struct event ev;
        if (wrepl_next_event(r, 200, &ev, why, sizeof(why)) < 0)
            return -1;
        /*
         * The lease's events go on meanwhile: a renewal's confirm or the
         * next token, dropped here, would leave the renewal waiting until
         * it gives up and the log fails (found by the soak in the suite).
         */
        if (wrepl_renew_event(r, &ev, why, sizeof(why)) != 0)
            continue;
        if (ev.kind != EV_DELIVER)
            continue;
        if (ev.ch == CH_READ)
            off = wrepl_delivery_offset(&ev.msg);
        amqp_destroy_message(&ev.msg);
    }
    amqp_channel_close(st, CH_READ, AMQP_REPLY_SUCCESS);
    return off;
}

void wrepl_note_step(struct wrepl *r, int force)
{
    uint64_t now = clock_mono_ms(), published, durable;

    pthread_mutex_lock(&r->mu);
    published = r->st.published_bytes;
    durable = r->durable_next;
    pthread_mutex_unlock(&r->mu);
    if (published == r->note_bytes ||
        (!force && published - r->note_bytes < NOTE_BYTES && now - r->note_ms < NOTE_MS))
        return;
    /* Published after the previous step's question: after its offset. Durable below durable. */
    if (r->note_from_prev >= 0)
        wrepl_replica_write(r, r->wal_id, durable, r->note_from_prev, 1);
    r->note_from_prev = wrepl_stream_last_offset(r);
    r->note_bytes = published;
    r->note_ms = now;
}
