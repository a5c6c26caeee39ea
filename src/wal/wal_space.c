/*
 * wal_space.c -- the segment log's space: what is live where, and giving
 * back what is not.
 *
 * SPACE
 *
 * The owner marks ADD records live and dead (wal_live, the wlog live
 * operation), giving a live count and byte total per segment. wal_maintain()
 * (the reclaim operation):
 *   1. deletes the oldest segments while they hold nothing live, are not the
 *      active one, have a durable successor, and every compaction copy taken
 *      from them is committed;
 *   2. when the files hold more than 2 x live bytes + one segment, walks the
 *      oldest segment from a cursor, asks the owner whether each ADD is still
 *      live at that location, and if so appends an identical copy (same
 *      payload, so the same msg_id; a new LSN) and reports the new location.
 *      Once the whole segment is walked it holds nothing live and step 1
 *      deletes it after the caller's next commit.
 * On replay the owner sees the original ADD and later its copy with the same
 * msg_id; the later one is the live one.
 *
 * wal_force_horizon() asks for every segment below the next LSN to be
 * compacted away (the replication stream's checkpoint uses it), and
 * wal_stats() reports the figures /stats and /metrics show.
 *
 * WHO CALLS WHOM
 *
 * This file sits above the log's writing: maintenance appends compaction's
 * copies, rolls and creates segments and fails the log through wal.c
 * (wal_append, wal_roll, wal_seg_create, wal_fail, ...), and asks the space
 * reserve and intake gate (wal_reserve.c: wal_space_poll, wal_reserve_spend,
 * wal_resume_mark) like wal.c does. Nothing in wal.c or wal_reserve.c calls
 * back here; the owner reaches wal_maintain() through the table in wal_log.c.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "base/failpoint.h"
#include "delay-bridge/walscan.h"

/* ---- space ------------------------------------------------------------- */

static void live_add(struct wal *w, struct wlog_loc loc)
{
    struct seg *s = wal_seg_find(w, loc.seg);

    if (!s)
        return;
    s->live_count++;
    s->live_bytes += loc.len;
    w->live_records++;
    w->live_bytes += loc.len;
}

/* One live ADD less in loc's segment; returns the segment (NULL if none or nothing live). */
static struct seg *live_del(struct wal *w, struct wlog_loc loc)
{
    struct seg *s = wal_seg_find(w, loc.seg);

    if (!s || s->live_count == 0 || s->live_bytes < loc.len)
        return NULL;
    s->live_count--;
    s->live_bytes -= loc.len;
    w->live_records--;
    w->live_bytes -= loc.len;
    return s;
}

/*
 * The owner's: an ADD is live, or its message died (its DONE or
 * CANCEL comes with the next commit).
 */
void wal_live(struct wlog *l, struct wlog_loc loc, int live)
{
    struct wal *w = WAL(l);
    struct seg *s;

    if (live) {
        live_add(w, loc);
    } else if ((s = live_del(w, loc)) != NULL) {
        s->dead_lsn = w->next_lsn;
    }
}

/*
 * Nothing live, compaction copies durable, and the records that ended its
 * ADDs durable too: what blocks deleting the head. A message dies in memory
 * (a confirm, a cancel) before its DONE or CANCEL record is committed; were
 * its segment deleted in between, a crash would lose the ADD while the
 * record ending it was lost too -- an acknowledged message gone without a
 * durable end (found by the simulator, tests/sim). The ending record is
 * appended by the commit that follows the death, so "durable_lsn has
 * reached the LSN that was next at the death" means it is on disk.
 */
static int head_dead(const struct wal *w)
{
    const struct seg *s = &w->segs[0];
    return w->nsegs >= 2 && (s->live_count == 0 || s->scanned);
}

static int head_deletable(const struct wal *w)
{
    const struct seg *s = &w->segs[0];
    return head_dead(w) && s->copy_lsn <= w->durable_lsn && s->dead_lsn <= w->durable_lsn &&
           s->size == s->disk && s->fd >= 0 &&
           w->segs[1].fd >= 0;
}

static int delete_head(struct wal *w)
{
    while (head_deletable(w)) {
        struct seg *s = &w->segs[0];
        char name[WALSCAN_NAME_SIZE];
        int r;

        walscan_seg_name(name, s->segno);
        if (s->live_count)
            log_warn("wal", "compaction found no live record where the live count says some remain; "
                     "deleting the segment", "file=%s/%s live_count=%llu", w->dir, name,
                     (unsigned long long)s->live_count);
        r = walfs_unlinkat(w->dirfd, name, 0) < 0 ? -errno : wal_sync_dir(w);
        if (r < 0) {
            log_error("wal", "cannot delete segment", "file=%s/%s err=\"%s\"", w->dir, name,
                      strerror(-r));
            return r;
        }
        walfs_close(s->fd);
        w->live_records -= s->live_count;
        w->live_bytes -= s->live_bytes;
        w->total_size -= s->size;
        w->deleted_segments++;
        log_info("wal", "segment deleted", "file=%s/%s bytes=%llu", w->dir, name,
                 (unsigned long long)s->size);
        memmove(&w->segs[0], &w->segs[1], (w->nsegs - 1) * sizeof(*w->segs));
        w->nsegs--;
    }
    return 0;
}

/*
 * Compact the head when the files hold more than 2 x live + one segment;
 * and while intake is paused for space, as soon as they hold a segment's
 * worth of dead bytes: then compaction is how firing gives space back when
 * every segment still holds a live message.
 */
static int over_budget(const struct wal *w)
{
    if (w->intake_paused && w->total_size > w->live_bytes + 2 * w->segment_bytes)
        return 1;
    return w->total_size > 2 * w->live_bytes + w->segment_bytes;
}

/* The head lies below a horizon asked for (wal_force_horizon): copy it forward whatever its use. */
static int below_horizon(const struct wal *w)
{
    return w->segs[0].base_lsn < w->force_lsn;
}

/*
 * 1 if the head segment holds only zeros from off to its end: its
 * prewritten tail (wal.c), left by a crash or by a start that read it from
 * a checkpoint without scanning it. 0 if not, negative on a read error.
 */
static int zeros_from(struct wal *w, struct seg *s, uint64_t off)
{
    uint8_t buf[4096];

    while (off < s->disk) {
        size_t n = s->disk - off < sizeof(buf) ? (size_t)(s->disk - off) : sizeof(buf);
        int r = wal_seg_read(w, s, off, buf, n);
        if (r < 0)
            return r;
        for (size_t i = 0; i < n; i++)
            if (buf[i])
                return 0;
        off += n;
    }
    return s->size == s->disk; /* nothing buffered after it either */
}

/* Copy the live ADDs of the oldest segment forward, up to budget bytes walked. */
static int compact_head(struct wal *w, size_t budget, const struct wlog_compact_ops *ops)
{
    size_t scanned = 0;
    char name[WALSCAN_NAME_SIZE];
    int r;

    if (w->cpt_segno != w->segs[0].segno) {
        w->cpt_segno = w->segs[0].segno;
        w->cpt_off = SEGHDR;
    }
    walscan_seg_name(name, w->cpt_segno);
    while (scanned < budget && w->cpt_off < w->segs[0].size) {
        struct seg *s = &w->segs[0];
        size_t n = (size_t)(s->size - w->cpt_off), pos = 0;

        if (!w->cbuf) {
            w->ccap = COMPACT_CHUNK;
            w->cbuf = xrealloc(NULL, w->ccap);
        }
        if (n > w->ccap)
            n = w->ccap;
        if ((r = wal_seg_read(w, s, w->cpt_off, w->cbuf, n)) < 0)
            goto bad;
        while (pos < n && scanned < budget) {
            struct walrec_hdr h;
            const uint8_t *payload;
            struct walrec_add a;

            r = walrec_decode(w->cbuf + pos, n - pos, w->segs[0].salt, &h, &payload);
            if (r == WALREC_PARTIAL && w->cpt_off + (n - pos) < w->segs[0].size) {
                if (pos == 0) {
                    /* A record bigger than the buffer: grow and read again. */
                    w->ccap = RECHDR + (size_t)walrec_get32(w->cbuf);
                    w->cbuf = xrealloc(w->cbuf, w->ccap);
                }
                break;
            }
            if (r < 0 && w->nsegs > 1 && zeros_from(w, &w->segs[0], w->cpt_off) == 1) {
                /* its prewritten zeros: the records end here */
                w->total_size -= w->segs[0].size - w->cpt_off;
                w->segs[0].size = w->segs[0].disk = w->cpt_off;
                break;
            }
            if (r < 0 || h.lsn < w->segs[0].base_lsn || h.lsn > w->segs[0].last_lsn) {
                r = WLOG_ECORRUPT;
                goto bad;
            }
            if (h.type == WALREC_ADD && walrec_add_peek(payload, h.len, &a) > 0) {
                struct wlog_loc from = {(uint32_t)w->cpt_segno, (uint32_t)(w->cpt_off), (uint32_t)r};
                if (ops->is_live(ops->arg, a.msg_id, from)) {
                    struct walrec_piece pc = {payload, h.len};
                    struct wlog_loc to = {0, 0, 0};
                    uint64_t lsn = 0;
                    int e = wal_append(&w->log, WALREC_ADD, &pc, 1, &lsn, &to);
                    if (e < 0)
                        return e;
                    live_del(w, from); /* moved, not dead: the copy's durability is copy_lsn */
                    live_add(w, to);
                    w->segs[0].copy_lsn = lsn; /* wal_append may have moved segs */
                    w->compacted_bytes += (uint64_t)r;
                    ops->moved(ops->arg, a.msg_id, to);
                    FAILPOINT("wal.mid_compaction"); /* copies so far in the buffer or durable */
                }
            }
            pos += (size_t)r;
            w->cpt_off += (uint64_t)r;
            scanned += (size_t)r;
        }
    }
    if (w->cpt_off >= w->segs[0].size) {
        w->segs[0].scanned = 1;
        log_info("wal", "segment compacted", "file=%s/%s live_copies_lsn=%llu", w->dir, name,
                 (unsigned long long)w->segs[0].copy_lsn);
    }
    return 0;
bad:
    log_error("wal", "compaction hit a bad record; the log needs operator attention",
              "file=%s/%s offset=%llu err=\"%s\"", w->dir, name, (unsigned long long)w->cpt_off,
              wlog_strerror(r));
    return r;
}

/*
 * Under space pressure the newest segment must not keep dead bytes for
 * good: it is never deleted, and an idle log (nothing appended, nothing
 * live) would keep up to a segment of DONE records and fired ADDs on a
 * volume that needs them back to resume intake (found by the simulator's
 * liveness mode on volumes of 4-5 segments, and on a 5 MiB ext4). So while
 * paused, or with less than three segments free (the daemon's gate resumes
 * at two, bridge_intake.c; one more of margin), once it holds an
 * eighth of a segment that is dead, roll to a new
 * one and create its file now (an idle log commits nothing that would); the
 * old one is then deleted as the head, or compacted, like any other. And
 * give back what the file system preallocated past its end (xfs's
 * speculative preallocation held 108 MiB for a 58 MiB segment).
 */
static int roll_dead_active(struct wal *w)
{
    struct seg *a = wal_active(w), *s;
    size_t prev;
    int r;

    /* paused, or short of the room the daemon resumes at (resume_mark) and a segment more */
    if (!(w->intake_paused ||
          (w->reserve_fd >= 0 && w->free_bytes < wal_resume_mark(w) + w->segment_bytes)) ||
        a->fd < 0 || a->size != a->disk || a->size <= SEGHDR ||
        a->size - a->live_bytes - SEGHDR < w->segment_bytes / 8)
        return 0;
    if (a->unsynced) { /* written ahead: on disk before a newer segment exists */
        if ((r = wal_sync_fd(w, a->fd)) < 0)
            return wal_fail(w, r, "fdatasync", a->segno);
        a->unsynced = 0;
        w->unsynced--;
    }
    wal_roll(w);
    prev = w->nsegs - 2;
    s = wal_active(w);
    r = wal_seg_create(w, s);
    if ((r == -ENOSPC || r == -EDQUOT) && wal_reserve_spend(w))
        r = wal_seg_create(w, s);
    if (r < 0)
        return r == -ENOSPC || r == -EDQUOT ? 0 : wal_fail(w, r, "create", s->segno);
    walfs_ftruncate(w->segs[prev].fd, (off_t)w->segs[prev].disk); /* preallocation back */
    return 0;
}

int wal_maintain(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    struct wal *w = WAL(l);
    int r;

    if (w->sync.busy)
        return 1; /* not while the sync thread holds files: it could close one under it */
    if (w->failed)
        return w->failed;
    if ((r = delete_head(w)) < 0)
        return r;
    wal_space_poll(w);
    if ((r = roll_dead_active(w)) < 0)
        return r;
    if ((r = delete_head(w)) < 0)
        return r;
    if (ops && w->nsegs >= 2 && !w->segs[0].scanned && !head_dead(w) &&
        (over_budget(w) || w->cpt_segno == w->segs[0].segno || below_horizon(w))) {
        if ((r = compact_head(w, budget, ops)) < 0)
            return r;
        if ((r = delete_head(w)) < 0)
            return r;
    }
    if (w->nsegs < 2)
        return 0;
    if (head_dead(w))
        return 1; /* deletable after the next commit */
    return ops && (over_budget(w) || w->cpt_segno == w->segs[0].segno || below_horizon(w));
}

int wal_force_horizon(struct wal *w, uint64_t *lsn)
{
    if (w->failed)
        return w->failed;
    if (wal_active(w)->last_lsn >= wal_active(w)->base_lsn)
        wal_roll(w); /* the active segment holds records: they are below the horizon too */
    w->force_lsn = w->next_lsn;
    *lsn = w->force_lsn;
    return 0;
}

uint64_t wal_first_lsn(const struct wal *w)
{
    return w->segs[0].base_lsn;
}

int wal_horizon_reached(const struct wal *w, uint64_t lsn)
{
    for (size_t i = 0; i < w->nsegs && w->segs[i].base_lsn < lsn; i++) {
        const struct seg *s = &w->segs[i];
        if (i == w->nsegs - 1 || (s->live_count && !s->scanned) || s->copy_lsn > w->durable_lsn)
            return 0;
    }
    return 1;
}

void wal_set_tap(struct wal *w, wal_tap_fn *fn, void *arg)
{
    w->tap = fn;
    w->tap_arg = arg;
}

void wal_stats(const struct wlog *l, struct wlog_stats *s)
{
    const struct wal *w = WAL_C(l);

    memset(s, 0, sizeof(*s));
    if (!w->open)
        return;
    s->segments = w->nsegs;
    s->disk_bytes = w->total_size;
    s->live_bytes = w->live_bytes;
    s->live_records = w->live_records;
    s->durable_lsn = w->durable_lsn;
    s->commits = w->commits;
    s->appended_bytes = w->appended_bytes;
    s->compacted_bytes = w->compacted_bytes;
    s->deleted_segments = w->deleted_segments;
    s->truncated_bytes = w->truncated_bytes;
    s->failed = w->failed;
    s->no_space = w->no_space;
    s->intake_paused = w->intake_paused;
    s->free_bytes = w->free_bytes;
    s->reserve_bytes = w->reserve_bytes;
    s->reserve_held = w->reserve_held;
    s->reserve_spent = w->reserve_spent;
    s->fsync = w->fsync;
    if (w->nsegs && w->cpt_segno == w->segs[0].segno && w->cpt_off < w->segs[0].size) {
        s->compact_segment = w->cpt_segno;
        s->compact_done = w->cpt_off;
        s->compact_total = w->segs[0].size;
    }
    s->ckpt_state = w->ck_state;
    s->ckpt_installed = w->ck_installed;
    s->ckpt_failed = w->ck_failed;
    s->ckpt_lsn = w->ck_lsn;
    s->ckpt_bytes = w->ck_bytes;
    s->ckpt_age_ms = w->ck_lsn ? clock_now_ms() - w->ck_lsn_ms : 0;
    s->ckpt_seconds = w->ck_seconds;
    s->ckpt_loaded_lsn = w->ck_loaded_lsn;
}
