/*
 * wal.c -- the segmented write-ahead log: its files, writing and reading.
 *
 * Every message the bridge holds lives here until it has been published and
 * confirmed; the in-memory structures (wheel, id index) are rebuilt from this
 * log at start. The byte format is in src/wal/walrec.c; this file decides when
 * bytes are written, synced, read back, cut off and deleted.
 *
 * FILES
 *
 *   dir/00000000000000000001.wal
 *   dir/00000000000000000002.wal ...  segments, in LSN order.
 *
 * (wal_dir.c's essay has the one table of every file in the directory:
 * writer, mode, fsync and crash rule; the lock is wal_lock_dir()'s.)
 *
 * A segment is born with O_CREAT|O_EXCL; its header is written, the file is
 * fdatasync'ed and the directory fsync'ed before any record goes in, so a
 * segment with records always has a durable header. Each segment gets a
 * fresh random salt (see walrec.c: a stale record never checks out under
 * another segment's salt). base_lsn of a new segment is the next LSN, and
 * the newest segment is never deleted, so LSNs -- which double as message
 * ids -- never repeat, even once every older segment is gone.
 *
 * WRITING: GROUP COMMIT
 *
 * wal_append() only encodes the record into an in-memory write buffer, so
 * the event loop can append thousands of records per turn for the price of
 * a memcpy and a CRC. wal_commit() (Redis calls this spot beforeSleep) then
 * writes the buffer with pwrite and fdatasyncs once. When the active
 * segment would grow past segment_bytes, the next record goes to a new
 * segment; records are never split, and a record larger than a segment gets
 * a segment of its own. A rolled-to segment exists only in memory until the
 * commit that writes it: the commit first writes and syncs the older
 * segment's tail, and only then creates the new file. A durable newer
 * segment therefore always means a complete older one.
 *
 * In the daemon the fdatasync runs on a thread of its own (opts.sync_thread,
 * the wlog interface's poll/notify): the loop writes the batch into the page
 * cache and goes on; the thread syncs and wakes it; the commit completes on
 * the loop thread. Only the sync before a roll (above) stays inline.
 *
 * WRITING AHEAD
 *
 * wal_write_ahead() writes the buffer into the files without an
 * fdatasync: the records are then in the page cache, which a killed
 * process does not take with it, though a crash of the machine may. The
 * daemon writes a confirm's DONE record so at once, while its commit
 * waits for the pacing (bridge_commit.c): a kill -9 in between no longer
 * publishes the message again. Nothing is durable, acked or counted
 * durable by it (durable_lsn does not move): the segments it wrote are
 * marked unsynced, the next commit fdatasyncs them even if it writes
 * nothing to them (and before a new segment is created), and
 * wal_pending() says a commit is owed until then. It may run while a
 * commit's fdatasync is out on the sync thread: that batch then leaves
 * what was written after it unsynced (seg.ahead, batch.ahead).
 *
 * PREWRITTEN ZEROS
 *
 * A commit that appends grows the file, and an fdatasync of a file whose
 * size changed must make the size durable too: one more write in every
 * commit (ext4 without a journal writes the inode's block -- three block
 * requests per commit against two, tests/bench/growsync.py -- and a
 * journalled ext4 or xfs commits its journal), which every other writer
 * on the volume queues behind -- the broker's own queue files among them,
 * on a machine where the two share a disk. Measured on RabbitMQ 4.3.6 at 10 % of the bridge's full speed,
 * the broker's deliveries to the bridge then came up to 25-70 ms late at
 * p99 (tests/bench/README.md, "On time when traffic is light"). So the
 * active segment keeps opts.prewrite_bytes of zeros written ahead of its
 * records (prewrite(), a chunk at a time when less than half is left,
 * never past segment_bytes): a commit overwrites blocks the file already
 * has, its fdatasync writes data and flushes the device cache, and the
 * size changes once per chunk instead of once per commit. The zeros go
 * out in the commit that writes them, after its records. A segment
 * completed by a roll is cut back to its records; a crash leaves zeros
 * after the last record, which recovery (walscan.c) reads as the end of
 * the segment -- in any segment, since a record lost there would show as
 * the next segment's LSN gap. Without fsync (no_sync) there is nothing to
 * spare and nothing is prewritten.
 *
 * Any write or fsync error is final. After fsync fails, Linux may have
 * dropped the dirty pages and marked them clean, so a retry that "succeeds"
 * proves nothing (the PostgreSQL fsyncgate of 2018). The log logs the error,
 * enters a failed state, and returns that first error from every later
 * call; the process is expected to exit and let recovery start again from
 * what is really on disk.
 *
 * READING
 *
 * wal_read() preads one record by location (or copies it out of the write
 * buffer if it has not been written yet), checks it with the segment's salt
 * and that its LSN belongs to that segment. Each segment keeps one fd open.
 *
 * RECOVERY is in wal_open.c, SPACE in wal_space.c, the wlog operations
 * table (append, pending, write, read, the checkpoint's steps and has are
 * this file's functions in it) and the sync thread in wal_log.c; wal_int.h
 * holds what they share.
 *
 * WHO CALLS WHOM: wal_open.c, wal_space.c and wal_log.c call down into this
 * file; this file calls down only into wal_reserve.c (a full disk spends the
 * reserve, a durable commit looks at the volume), walckpt.c and walscan.c,
 * never back up.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/xalloc.h"
#include "base/failpoint.h"
#include "delay-bridge/walscan.h"

/* ---- small helpers ----------------------------------------------------- */

static int wal_pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = walfs_pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            return -EIO;
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

int wal_sync_fd(struct wal *w, int fd)
{
    uint64_t t0;
    int r = 0;

    if (w->no_sync)
        return 0;
    t0 = clock_mono_ns(); /* in ns, not clock_mono_ms(): an fdatasync often takes under 1 ms */
    if (walfs_fdatasync(fd) < 0)
        r = -errno;
    db_hist_observe(&w->fsync, (double)(clock_mono_ns() - t0) / 1e9);
    return r;
}

int wal_sync_dir(struct wal *w)
{
    if (w->no_sync)
        return 0;
    if (walfs_fsync(w->dirfd) < 0)
        return -errno;
    return 0;
}

struct seg *wal_seg_find(struct wal *w, uint64_t segno)
{
    size_t lo = 0, hi = w->nsegs;

    if (w->nsegs == 0)
        return NULL;
    if (segno >= w->segs[0].segno && segno - w->segs[0].segno < w->nsegs &&
        w->segs[segno - w->segs[0].segno].segno == segno)
        return &w->segs[segno - w->segs[0].segno];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (w->segs[mid].segno < segno)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < w->nsegs && w->segs[lo].segno == segno ? &w->segs[lo] : NULL;
}

struct seg *wal_seg_push(struct wal *w)
{
    if (w->nsegs == w->segcap) {
        w->segcap = w->segcap ? w->segcap * 2 : 16;
        w->segs = xrealloc(w->segs, w->segcap * sizeof(*w->segs));
    }
    struct seg *s = &w->segs[w->nsegs++];
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    return s;
}

struct seg *wal_active(struct wal *w)
{
    return &w->segs[w->nsegs - 1];
}

/* Enter the failed state: the first error sticks. */
int wal_fail(struct wal *w, int err, const char *what, uint64_t segno)
{
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, segno);
    if (!w->failed)
        w->failed = err;
    log_error("wal", "write to the log failed; it is stopped and the process must restart",
              "op=%s file=%s/%s err=\"%s\"", what, w->dir, name, wlog_strerror(err));
    return w->failed;
}

/*
 * Out of space (ENOSPC, EDQUOT) while writing, before any fsync: nothing of
 * the batch is durable, nothing of it was acknowledged, and the bytes that
 * may have reached the file were cut off again. Unlike a failed fsync this
 * leaves no doubt about what is on disk, so the log stays usable: the
 * batch stays buffered and the next commit writes it again. Logged once
 * per episode; wal_stats says no_space until a commit succeeds.
 */
static int wal_out_of_space(struct wal *w, int err, const char *what, uint64_t segno)
{
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, segno);
    if (!w->no_space)
        log_error("wal", "the log's disk is full: the batch stays in memory and is written "
                  "again when space returns", "op=%s file=%s/%s err=\"%s\" buffered_bytes=%zu",
                  what, w->dir, name, wlog_strerror(err), w->wlen);
    w->no_space = 1;
    return err;
}

static int wal_is_no_space(int err)
{
    return err == -ENOSPC || err == -EDQUOT;
}

/* Create segment s's file: header, fdatasync, directory fsync. */
int wal_seg_create(struct wal *w, struct seg *s)
{
    struct walrec_seghdr h = {WALREC_VERSION, s->salt, s->segno, s->base_lsn, w->id, clock_now_ms()};
    uint8_t buf[SEGHDR];
    char name[WALSCAN_NAME_SIZE];
    int fd, r;

    walscan_seg_name(name, s->segno);
    fd = walfs_openat(w->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, WAL_FILE_MODE);
    if (fd < 0)
        return -errno;
    FAILPOINT("wal.mid_roll"); /* an empty newest segment: recovery must delete it */
    walrec_seghdr_encode(buf, &h);
    if ((r = wal_pwrite_all(fd, buf, SEGHDR, 0)) < 0 || (r = wal_sync_fd(w, fd)) < 0 ||
        (r = wal_sync_dir(w)) < 0) {
        walfs_close(fd);
        walfs_unlinkat(w->dirfd, name, 0); /* a later commit creates it again (disk full) */
        return r;
    }
    s->fd = fd;
    s->written = SEGHDR;
    return 0;
}

/*
 * s is complete (no longer the active segment): cut its prewritten zeros,
 * so the file is its records. Not synced on its own: the zeros coming back
 * after a crash are read as the end all the same (walscan.c, compaction).
 */
static void cut_prewritten(struct seg *s)
{
    if (s->fd >= 0 && s->written > s->disk && walfs_ftruncate(s->fd, (off_t)s->disk) == 0)
        s->written = s->disk;
}

/* A new in-memory active segment starting at the next LSN; created on disk by the next commit. */
void wal_roll(struct wal *w)
{
    uint32_t prev_salt = wal_active(w)->salt;
    uint64_t segno = wal_active(w)->segno + 1;
    struct seg *s;

    if (wal_active(w)->size == wal_active(w)->disk)
        cut_prewritten(wal_active(w)); /* all of it written: complete now */
    s = wal_seg_push(w);

    s->segno = segno;
    do
        s->salt = (uint32_t)clock_rand64();
    while (s->salt == prev_salt);
    s->base_lsn = w->next_lsn;
    s->last_lsn = w->next_lsn - 1;
    s->disk = SEGHDR;
    s->size = SEGHDR;
    w->total_size += SEGHDR;
    log_info("wal", "segment rolled", "seg=%llu base_lsn=%llu", (unsigned long long)segno,
              (unsigned long long)s->base_lsn);
}


/* ---- append and commit ------------------------------------------------- */

int wal_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
               uint64_t *lsn, struct wlog_loc *loc)
{
    struct wal *w = WAL(l);
    struct walrec_hdr h;
    struct walrec_piece one;
    struct seg *s;
    size_t plen = 0, rlen;
    uint8_t *dst;

    if (w->failed)
        return w->failed;
    if (type < WALREC_ADD || type > WALREC_CANCEL)
        return -EINVAL;
    for (int i = 0; i < npieces; i++) {
        if (pieces[i].n > WALREC_MAX_PAYLOAD)
            return WLOG_ETOOBIG;
        plen += pieces[i].n;
    }
    if (plen > WALREC_MAX_PAYLOAD)
        return WLOG_ETOOBIG;
    rlen = RECHDR + plen;

    s = wal_active(w);
    if (s->size > SEGHDR && s->size + rlen > w->segment_bytes) {
        wal_roll(w);
        s = wal_active(w);
    }
    if (w->wlen + rlen > w->wcap) {
        size_t cap = w->wcap ? w->wcap : 1u << 20;
        while (cap < w->wlen + rlen)
            cap *= 2;
        w->wbuf = xrealloc(w->wbuf, cap);
        w->wcap = cap;
    }
    if (s->size == s->disk)
        s->pend_off = w->wlen;

    /* Copy first, then checksum the copy while it is in cache. */
    dst = w->wbuf + w->wlen;
    for (int i = 0, o = RECHDR; i < npieces; o += (int)pieces[i].n, i++)
        if (pieces[i].n)
            memcpy(dst + o, pieces[i].p, pieces[i].n);
    one.p = dst + RECHDR;
    one.n = plen;
    h.len = (uint32_t)plen;
    h.type = type;
    h.flags = 0;
    h.lsn = w->next_lsn;
    walrec_hdr_encode(dst, &h, s->salt, &one, 1);
    if (w->tap)
        w->tap(w->tap_arg, &h, one.p);

    if (lsn)
        *lsn = w->next_lsn;
    if (loc) {
        loc->seg = (uint32_t)s->segno;
        loc->off = (uint32_t)s->size;
        loc->len = (uint32_t)rlen;
    }
    s->last_lsn = w->next_lsn++;
    s->size += rlen;
    w->total_size += rlen;
    w->wlen += rlen;
    w->appended_bytes += rlen;
    return 0;
}

size_t wal_pending(const struct wlog *l)
{
    const struct wal *w = WAL_C(l);

    return w->wlen + (w->unsynced ? 1 : 0); /* written ahead, not synced: a commit is owed */
}

/*
 * Write what is buffered into the files now, without an fdatasync (see
 * WRITING AHEAD above): the segments written are marked unsynced, and the
 * next commit syncs them whether or not it writes to them again. Also while
 * a batch is out on the sync thread: its completion leaves these bytes
 * unsynced. 1 (written), or the log's error.
 */
int wal_write_ahead(struct wlog *l)
{
    struct wal *w = WAL(l);
    struct wal_batch b;
    int r;

    if (w->failed)
        return w->failed;
    if (!w->wlen)
        return 1;
    if ((r = wal_write_batch(w, &b)) < 0)
        return r;
    w->ahead++;
    for (int i = 0; i < b.n; i++) {
        struct seg *s = wal_seg_find(w, b.segnos[i]);
        if (s && !s->unsynced) {
            s->unsynced = 1;
            w->unsynced++;
        }
        if (s)
            s->ahead = w->ahead; /* a batch being synced now may miss these bytes */
    }
    return 1;
}


/*
 * Keep w->prewrite bytes of zeros written past the records of s, the
 * active segment (see PREWRITTEN ZEROS above): when less than half of
 * them is left, write up to a full chunk more, to a 4 KiB boundary and
 * never past segment_bytes. A failed write of zeros is no failure of the
 * log (nothing of a record is in it): the commit's own write and fdatasync
 * decide; the zeros written so far stay, read as the end by recovery.
 */
static void prewrite(struct wal *w, struct seg *s)
{
    static const uint8_t zero[64 * 1024];
    uint64_t want;

    if (!w->prewrite || w->no_sync)
        return;
    if (s->written < s->disk)
        s->written = s->disk;
    if (s->written - s->disk >= w->prewrite / 2 || s->written >= w->segment_bytes)
        return;
    want = (s->disk + w->prewrite + 4095u) & ~(uint64_t)4095u;
    if (want > w->segment_bytes)
        want = w->segment_bytes;
    while (s->written < want) {
        size_t n = want - s->written < sizeof(zero) ? (size_t)(want - s->written) : sizeof(zero);
        if (wal_pwrite_all(s->fd, zero, n, s->written) < 0)
            return;
        s->written += n;
    }
}

static int write_batch_once(struct wal *w, struct wal_batch *b)
{
    size_t first;
    int r;

    b->n = 0;
    b->lsn = w->durable_lsn;
    b->ahead = w->ahead;
    /*
     * The segments with buffered bytes are a suffix of the list, oldest
     * first -- with, perhaps, an empty one rolled to by wal_force_horizon()
     * and not created yet: it belongs to the suffix too.
     */
    first = w->nsegs;
    while (first > 0 && (w->segs[first - 1].size > w->segs[first - 1].disk ||
                         w->segs[first - 1].fd < 0))
        first--;
    /* segments written ahead and not synced since, older than the suffix: this sync is theirs */
    for (size_t i = 0; w->unsynced && i < first; i++)
        if (w->segs[i].unsynced && b->n < (int)(sizeof(b->fds) / sizeof(b->fds[0]))) {
            b->fds[b->n] = w->segs[i].fd;
            b->segnos[b->n++] = w->segs[i].segno;
        }
    int ahead = b->n;
    for (size_t i = first; i < w->nsegs; i++) {
        struct seg *s = &w->segs[i];

        if (b->n == (int)(sizeof(b->fds) / sizeof(b->fds[0])))
            break; /* a batch this large spans more segments than one commit syncs: next time */
        /*
         * A new file only after the older segments' tails are on disk, here
         * and now even when the rest of the sync runs on a thread: a durable
         * newer segment must always mean complete older ones (a torn tail
         * is only ever repaired in the newest). Rolls are rare, so this
         * inline fsync is too.
         */
        if (s->fd < 0 && b->n > 0)
            for (int k = 0; k < b->n; k++) {
                struct seg *o = wal_seg_find(w, b->segnos[k]);
                if ((r = wal_sync_fd(w, b->fds[k])) < 0)
                    return wal_fail(w, r, "fdatasync", b->segnos[k]);
                /* complete: what the file system preallocated past its end goes back (xfs) */
                if (o)
                    walfs_ftruncate(o->fd, (off_t)o->disk);
            }
        if (s->fd < 0 && (r = wal_seg_create(w, s)) < 0)
            return wal_is_no_space(r) ? wal_out_of_space(w, r, "create", s->segno)
                                  : wal_fail(w, r, "create", s->segno);
        if ((r = wal_pwrite_all(s->fd, w->wbuf + s->pend_off, (size_t)(s->size - s->disk), s->disk)) < 0) {
            if (!wal_is_no_space(r))
                return wal_fail(w, r, "write", s->segno);
            if (walfs_ftruncate(s->fd, (off_t)s->disk) < 0)
                return wal_fail(w, -errno, "truncate after a full disk", s->segno);
            s->written = s->disk;
            return wal_out_of_space(w, r, "write", s->segno);
        }
        s->disk = s->size;
        if (s == wal_active(w))
            prewrite(w, s);
        else
            cut_prewritten(s);
        b->fds[b->n] = s->fd;
        b->segnos[b->n++] = s->segno;
    }
    if (b->n == 0)
        return 0;
    if (b->n == ahead) { /* nothing new: the sync of what was written ahead */
        b->lsn = w->segs[first - 1].last_lsn;
        FAILPOINT("wal.before_fsync");
        return 0;
    }
    b->lsn = w->segs[first + (size_t)(b->n - ahead) - 1].last_lsn;
    if (first + (size_t)(b->n - ahead) == w->nsegs) {
        w->wlen = 0;
        b->lsn = w->next_lsn - 1;
    }
    FAILPOINT("wal.before_fsync");
    return 0;
}

/*
 * A full disk gives the space reserve back (wal_space.c) and writes again
 * at once: the batch may hold DONE and CANCEL records, the only ones that
 * let firing give space back, and they must not wait behind intake.
 */
int wal_write_batch(struct wal *w, struct wal_batch *b)
{
    int r = write_batch_once(w, b);

    if (r < 0 && wal_is_no_space(r) && !w->failed && wal_reserve_spend(w))
        r = write_batch_once(w, b);
    return r;
}

void wal_batch_durable(struct wal *w, const struct wal_batch *b)
{
    for (int i = 0; w->unsynced && i < b->n; i++) {
        struct seg *s = wal_seg_find(w, b->segnos[i]);
        if (s && s->unsynced && s->ahead <= b->ahead) {
            s->unsynced = 0;
            w->unsynced--;
        }
    }
    if (b->lsn > w->durable_lsn)
        w->durable_lsn = b->lsn;
    w->commits++;
    if (w->no_space) {
        log_info("wal", "space again: the buffered batch is on disk", "dir=%s", w->dir);
        w->no_space = 0;
    }
    wal_space_poll(w); /* an fstatvfs: intake can fill a segment between two maintenance steps */
    if (w->wlen == 0 && w->wcap > WBUF_KEEP) {
        free(w->wbuf);
        w->wbuf = NULL;
        w->wcap = 0;
    }
}

int wal_commit(struct wal *w)
{
    struct wal_batch b;
    int r;

    if (w->failed)
        return w->failed;
    while (w->wlen || w->unsynced) {
        if ((r = wal_write_batch(w, &b)) < 0)
            return r;
        if (b.n == 0)
            break;
        for (int i = 0; i < b.n; i++)
            if ((r = FAILPOINT_ERR("wal.fsync_error") ? -EIO : wal_sync_fd(w, b.fds[i])) < 0)
                return wal_fail(w, r, "fdatasync", b.segnos[i]);
        wal_batch_durable(w, &b);
    }
    return 0;
}

/* ---- read -------------------------------------------------------------- */

/* n bytes at off of s, from the file or the write buffer. 0 or negative. */
int wal_seg_read(struct wal *w, struct seg *s, uint64_t off, uint8_t *dst, size_t n)
{
    if (off < s->disk) {
        size_t from_disk = off + n <= s->disk ? n : (size_t)(s->disk - off);
        ssize_t got = walscan_pread(s->fd, dst, from_disk, off);
        if (got < 0)
            return (int)got;
        if ((size_t)got < from_disk)
            return WLOG_ECORRUPT; /* the file is shorter than we wrote */
        dst += from_disk;
        off += from_disk;
        n -= from_disk;
    }
    if (n)
        memcpy(dst, w->wbuf + s->pend_off + (off - s->disk), n);
    return 0;
}

/*
 * Read-ahead for wal_read(). Messages fall due mostly in the order they were
 * written (equal delays, or delays that grow with time), so the record after
 * the one just read is usually the next one wanted: one pread of RA_BYTES
 * serves a few hundred small records instead of a pread each (a profile of
 * the bridge under load put one pread per due message at 11% of its time).
 * Only bytes already on disk are cached, and segments are append-only and
 * never renumbered, so a window never goes stale; a deleted segment's
 * window is simply never asked for again. The window is filled only for a
 * read that follows the previous one closely in the same segment: a lookup
 * by key or a purge reads at random, and a pread of the record alone is
 * what those want.
 *
 * The window's size adapts, as a kernel's read-ahead does: each window is
 * judged when the next one replaces it. One that served under a quarter
 * of its bytes halves the next (down to RA_MIN), one that served half or
 * more doubles it (up to RA_BYTES), and a read counts as sequential only
 * within one window's size of the last. Due order that strides through
 * the log -- many messages due within the same few milliseconds, written
 * over many seconds: each millisecond's messages lie tens of KiB apart --
 * otherwise refilled 128 KiB for every few records (a burst of 100k due
 * within 100 ms: 26 % of the bridge's time copying them, perf 2026-11-26);
 * now the window shrinks to RA_MIN, and the reads to a pread each.
 */
#define RA_BYTES (128u << 10)
#define RA_MIN (4u << 10)

static int wal_ra_read(struct wal *w, struct seg *s, uint64_t off, uint8_t *dst, size_t n)
{
    int sequential;

    if (!w->ra_size)
        w->ra_size = RA_BYTES;
    sequential = s->segno == w->last_segno && off >= w->last_off &&
                 off - w->last_off < w->ra_size;
    w->last_segno = s->segno;
    w->last_off = off;
    if (n > RA_BYTES / 4 || off + n > s->disk)
        return wal_seg_read(w, s, off, dst, n);
    if (!(w->ra_len && w->ra_segno == s->segno && off >= w->ra_off &&
          off + n <= w->ra_off + w->ra_len)) {
        if (!sequential || n * 2 > w->ra_size)
            return wal_seg_read(w, s, off, dst, n);
        if (w->ra_len) { /* judge the window this one replaces */
            if (w->ra_served * 4 < w->ra_len && w->ra_size > RA_MIN)
                w->ra_size /= 2;
            else if (w->ra_served * 2 >= w->ra_len && w->ra_size < RA_BYTES)
                w->ra_size *= 2;
        }
        size_t want = s->disk - off < w->ra_size ? (size_t)(s->disk - off) : w->ra_size;
        ssize_t got;
        if (!w->ra)
            w->ra = xmalloc(RA_BYTES);
        w->ra_len = 0;
        got = walscan_pread(s->fd, w->ra, want, off);
        if (got < 0)
            return (int)got;
        if ((size_t)got < n)
            return WLOG_ECORRUPT; /* the file is shorter than we wrote */
        w->ra_segno = s->segno;
        w->ra_off = off;
        w->ra_len = (size_t)got;
        w->ra_served = 0;
    }
    memcpy(dst, w->ra + (off - w->ra_off), n);
    w->ra_served += n;
    return 0;
}

int wal_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
             const uint8_t **payload)
{
    struct wal *w = WAL(l);
    struct seg *s;
    char name[WALSCAN_NAME_SIZE];
    const char *why;
    int r;

    if (w->failed)
        return w->failed;
    s = wal_seg_find(w, loc.seg);
    if (!s) {
        walscan_seg_name(name, loc.seg); /* names are formatted for errors only */
        log_error("wal", "read of a record in a segment that does not exist (deleted?)", "file=%s/%s offset=%u",
                  w->dir, name, loc.off);
        return -ENOENT;
    }
    if (loc.len < RECHDR || loc.off < SEGHDR || (uint64_t)loc.off + loc.len > s->size) {
        why = "location outside the segment";
        r = WLOG_ECORRUPT;
        goto bad;
    }
    if (b->cap < loc.len) {
        b->p = xrealloc(b->p, loc.len);
        b->cap = loc.len;
    }
    if ((r = wal_ra_read(w, s, loc.off, b->p, loc.len)) < 0) {
        why = r == WLOG_ECORRUPT ? "segment shorter than expected" : "read error";
        goto bad;
    }
    if (walrec_decode(b->p, loc.len, s->salt, h, payload) != (int)loc.len) {
        why = "bad header, checksum or payload";
        r = WLOG_ECORRUPT;
        goto bad;
    }
    if (h->lsn < s->base_lsn || h->lsn > s->last_lsn) {
        why = "lsn does not belong to this segment";
        r = WLOG_ECORRUPT;
        goto bad;
    }
    return 0;
bad:
    walscan_seg_name(name, loc.seg);
    log_error("wal", "cannot read record", "file=%s/%s offset=%u len=%u reason=\"%s\" err=\"%s\"",
              w->dir, name, loc.off, loc.len, why, wlog_strerror(r));
    return r;
}


/* ---- checkpoints ------------------------------------------------------- */

/* An I/O error on the checkpoint: drop it; the log and the installed one are untouched. */
static int wal_ckpt_failed(struct wal *w, int err, const char *what)
{
    log_error("wal", "checkpoint abandoned; the previous one (if any) stays in use",
              "dir=%s step=%s err=\"%s\"", w->dir, what, wlog_strerror(err));
    walckpt_free(w->ck);
    w->ck = NULL;
    w->ck_state = WLOG_CKPT_IDLE;
    w->ck_installing = 0;
    w->ck_failed++;
    return err;
}

int wal_ckpt_begin(struct wlog *l)
{
    struct wal *w = WAL(l);
    int r;

    if (w->failed)
        return w->failed;
    if (w->ck || w->intake_paused)
        return WLOG_EBUSY; /* paused for space: a checkpoint file would take what firing needs */
    r = walckpt_create(&w->ck, w->dirfd, w->dir, w->id, w->durable_lsn + 1);
    if (r < 0)
        return wal_ckpt_failed(w, r, "create");
    w->ck_state = WLOG_CKPT_WRITING;
    w->ck_start_lsn = w->durable_lsn + 1;
    w->ck_began_mono_ms = clock_mono_ms();
    w->ck_began_ms = clock_now_ms();
    return 0;
}

int wal_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n)
{
    struct wal *w = WAL(l);
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_WRITING)
        return -EINVAL;
    FAILPOINT("wal.mid_ckpt");
    r = FAILPOINT_ERR("wal.ckpt_write_error") ? -EIO : 0;
    if (r == 0)
        r = walckpt_chunk(w->ck, kind, p, n);
    return r < 0 ? wal_ckpt_failed(w, r, "write") : 0;
}

int wal_ckpt_end(struct wlog *l)
{
    struct wal *w = WAL(l);
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_WRITING)
        return -EINVAL;
    if ((r = walckpt_finish(w->ck, w->next_lsn)) < 0)
        return wal_ckpt_failed(w, r, "finish");
    w->ck_end_lsn = w->next_lsn;
    w->ck_state = WLOG_CKPT_SEALING;
    wal_ckpt_poll(l);
    return 0;
}

void wal_ckpt_poll(struct wlog *l)
{
    struct wal *w = WAL(l);
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_SEALING)
        return;
    if (!w->ck_installing) {
        /* Install only what the log has made durable: no chunk may outlive its records. */
        if (w->durable_lsn + 1 < w->ck_end_lsn)
            return;
        if ((r = walckpt_install(w->ck, w->no_sync)) < 0) {
            wal_ckpt_failed(w, r, "install");
            return;
        }
        w->ck_installing = 1;
        return;
    }
    r = walckpt_installed(w->ck);
    if (r == 0)
        return;
    if (r < 0) {
        wal_ckpt_failed(w, r, "sync and rename");
        return;
    }
    FAILPOINT("wal.after_ckpt");
    w->ck_installed++;
    w->ck_lsn = w->ck_start_lsn;
    w->ck_lsn_ms = w->ck_began_ms;
    w->ck_bytes = walckpt_size(w->ck);
    w->ck_seconds = (double)(clock_mono_ms() - w->ck_began_mono_ms) / 1e3;
    log_info("wal", "checkpoint installed",
             "file=%s/%s bytes=%llu start_lsn=%llu end_lsn=%llu seconds=%.3f", w->dir,
             WALCKPT_NAME, (unsigned long long)w->ck_bytes, (unsigned long long)w->ck_lsn,
             (unsigned long long)w->ck_end_lsn, w->ck_seconds);
    walckpt_free(w->ck);
    w->ck = NULL;
    w->ck_state = WLOG_CKPT_IDLE;
    w->ck_installing = 0;
}

/* Does the log still have the segment of loc? */
int wal_has(const struct wlog *l, struct wlog_loc loc)
{
    return wal_seg_find((struct wal *)WAL_C(l), loc.seg) != NULL;
}

/*
 * Test hook, declared by tests only: forget the read-ahead window, so the
 * next read goes to the file (a test that damages bytes under an open log).
 */
void wal_test_drop_readahead(struct wal *w);
void wal_test_drop_readahead(struct wal *w)
{
    w->ra_len = 0;
}

/* Test hook, declared by tests only: the read-ahead window's size now. */
size_t wal_test_readahead_size(const struct wal *w);
size_t wal_test_readahead_size(const struct wal *w)
{
    return w->ra_size;
}

/*
 * Test hook, declared by tests only: make the active segment's fd fail every
 * later write (EBADF), as if the disk had gone away behind the log's back.
 */
int wal_test_break_fd(struct wal *w);
int wal_test_break_fd(struct wal *w)
{
    struct seg *s = wal_active(w);
    int fd, r = 0;

    if (s->fd < 0)
        return -EBADF;
    fd = walfs_open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (dup2(fd, s->fd) < 0)
        r = -errno;
    walfs_close(fd);
    return r;
}
