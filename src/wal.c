/*
 * wal.c -- the segmented write-ahead log.
 *
 * Every message the bridge holds lives here until it has been published and
 * confirmed; the in-memory structures (wheel, id index) are rebuilt from this
 * log at start. The byte format is in src/walrec.c; this file decides when
 * bytes are written, synced, read back, cut off and deleted.
 *
 * FILES
 *
 *   dir/LOCK                    flock(LOCK_EX|LOCK_NB) for the life of the
 *                               struct wal: a second daemon on the same
 *                               directory gets WAL_ELOCKED.
 *   dir/00000000000000000001.wal
 *   dir/00000000000000000002.wal ...  segments, in LSN order.
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
 * RECOVERY
 *
 * wal_open() checks every segment header (WAL_EFORMAT if one is bad; only a
 * newest segment that is no longer than a header and holds no valid header
 * is taken for a crash during its creation and deleted), then reads the
 * records in big chunks (4 MiB, with the partial record at the end of a
 * chunk carried over) and hands each to the caller's replay function. There
 * is no per-record system call or copy, and the next segment is read ahead
 * with POSIX_FADV_WILLNEED while the current one is parsed. LSNs must run
 * +1 per record, across segments too. The reading -- segment names and
 * headers, chunks, record checks, and telling a torn tail from corruption
 * by the rule below -- is walscan.h's, the same code "delay-bridge wal
 * check" runs; this file decides what follows: cut the tail or refuse.
 *
 * The first record that fails its checks ends the log if it is a torn tail:
 * it lies in the newest segment and no valid record (correct CRC under the
 * segment's salt, LSN beyond the last good one) follows it anywhere in that
 * segment. The file is then cut there (ftruncate + fsync) and a warning says
 * how much was cut. Anything else -- a bad record in an older segment, or
 * one followed by good data -- is corruption: wal_open() fails with
 * WAL_ECORRUPT and the error names the file and offset; an operator must
 * look (salvage tool) rather than have the daemon silently drop committed
 * messages. A limit of the rule: if the disk persisted the blocks of an
 * unfinished commit out of order, so that a later record of that batch
 * survived and an earlier one did not, this is reported as corruption
 * although no committed record was lost.
 *
 * SPACE
 *
 * The owner marks ADD records live and dead (wal_live_add/del), giving a
 * live count and byte total per segment. wal_maintain():
 *   1. deletes the oldest segments while they hold nothing live, are not the
 *      active one, have a durable successor, and every compaction copy taken
 *      from them is committed;
 *   2. when the files hold more than 2 x live bytes + one segment, walks the
 *      oldest segment from a cursor, asks the owner whether each ADD is still
 *      live at that location, and if so appends an identical copy (same
 *      payload, so the same msg_id; a new LSN) and reports the new location.
 *      Once the whole segment is walked it holds nothing live and step 1
 *      deletes it after the caller's next wal_commit().
 * On replay the owner sees the original ADD and later its copy with the same
 * msg_id; the later one is the live one.
 */
#define _GNU_SOURCE
#include "delay-bridge/wal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/clock.h"
#include "delay-bridge/failpoint.h"
#include "delay-bridge/log.h"
#include "delay-bridge/wlog.h"
#include "delay-bridge/xalloc.h"
#include "delay-bridge/walckpt.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walscan.h"

#define SEGHDR WALREC_SEGHDR_SIZE
#define RECHDR WALREC_HDR_SIZE
#define REPLAY_CHUNK (4u << 20)
#define READAHEAD_SEGS 1 /* segments read ahead during replay; more did not help */
#define COMPACT_CHUNK (1u << 20)
#define WBUF_KEEP (16u << 20) /* shrink the write buffer back after a bigger batch */
#define MIN_SEGMENT_BYTES WAL_MIN_SEGMENT_BYTES
#define MAX_SEGMENT_BYTES WAL_MAX_SEGMENT_BYTES

struct seg {
    uint64_t segno;
    uint64_t base_lsn;
    uint64_t last_lsn;   /* last record's LSN; base_lsn - 1 while empty */
    uint32_t salt;
    int fd;              /* -1: rolled to, file not created yet */
    uint64_t disk;       /* bytes in the file (header included once created) */
    uint64_t size;       /* disk + bytes still in the write buffer */
    size_t pend_off;     /* where its buffered bytes start in wbuf */
    uint64_t live_count;
    uint64_t live_bytes;
    uint64_t copy_lsn;   /* LSN of the last compaction copy taken from it */
    int scanned;         /* compaction walked all of it */
};

struct wal {
    char *dir;
    int dirfd;
    int lockfd;
    uint64_t segment_bytes;
    int no_sync;
    uint64_t id;

    struct seg *segs; /* oldest first; the last one is active */
    size_t nsegs, segcap;
    uint64_t total_size; /* sum of segs[].size */

    uint8_t *wbuf; /* appended, not yet written; spans the segments with size > disk */
    size_t wlen, wcap;

    uint64_t next_lsn;
    uint64_t durable_lsn;
    int failed; /* first write/fsync error, 0 if none */

    uint64_t live_bytes, live_records;
    uint64_t commits, appended_bytes, compacted_bytes, deleted_segments, truncated_bytes;
    struct db_hist fsync;                /* fdatasync durations */
    struct db_progress *progress;        /* replay progress for /stats, or NULL */
    uint8_t *ra;                         /* read-ahead window for wal_read() */
    uint64_t ra_segno, ra_off;           /* what it holds: segment, file offset, bytes */
    size_t ra_len;
    uint64_t last_segno, last_off;       /* the previous read: is this one sequential? */
    int no_space;                        /* the last commit found the disk full */

    uint64_t force_lsn; /* wal_force_horizon(): compact every segment below it */
    wal_tap_fn *tap;    /* wal_set_tap(): sees every record appended */
    void *tap_arg;

    uint64_t cpt_segno; /* compaction cursor: segment and offset */
    uint64_t cpt_off;
    uint8_t *cbuf;
    size_t ccap;

    /* checkpoint being written or installed (walckpt.h) */
    struct walckpt *ck;
    int ck_state;          /* WLOG_CKPT_* */
    int ck_installing;     /* its install thread runs */
    uint64_t ck_start_lsn; /* of the one being written */
    uint64_t ck_end_lsn;   /* installable once durable_lsn + 1 >= this */
    uint64_t ck_began_ns, ck_began_ms;
    uint64_t ck_installed, ck_failed, ck_lsn, ck_bytes, ck_lsn_ms, ck_loaded_lsn;
    double ck_seconds;
};

/* ---- small helpers ----------------------------------------------------- */

static uint64_t mono_ms(void)
{
    return clock_mono_ns() / 1000000u;
}

static uint64_t rand64(void)
{
    static uint64_t fallback;
    uint64_t v = 0;
    ssize_t n;

    do
        n = getrandom(&v, sizeof(v), 0);
    while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(v)) {
        /* No getrandom (old kernel): splitmix64 over time, pid and a counter. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 48;
        z += (fallback += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        v = z ^ (z >> 31);
    }
    return v;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
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

static int sync_fd(struct wal *w, int fd)
{
    uint64_t t0;
    int r = 0;

    if (w->no_sync)
        return 0;
    t0 = clock_mono_ns();
    if (fdatasync(fd) < 0)
        r = -errno;
    db_hist_observe(&w->fsync, (double)(clock_mono_ns() - t0) / 1e9);
    return r;
}

static int sync_dir(struct wal *w)
{
    if (w->no_sync)
        return 0;
    if (fsync(w->dirfd) < 0)
        return -errno;
    return 0;
}

static int mkdir_p(const char *dir)
{
    char *p = xstrdup(dir);
    int r = 0;

    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = 0;
        if (mkdir(p, 0755) < 0 && errno != EEXIST) {
            r = -errno;
            goto cleanup;
        }
        *s = '/';
    }
    if (mkdir(p, 0755) < 0 && errno != EEXIST)
        r = -errno;
cleanup:
    free(p);
    return r;
}

static struct seg *seg_find(struct wal *w, uint64_t segno)
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

static struct seg *seg_push(struct wal *w)
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

static struct seg *active(struct wal *w)
{
    return &w->segs[w->nsegs - 1];
}

/* Enter the failed state: the first error sticks. */
static int fail(struct wal *w, int err, const char *what, uint64_t segno)
{
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, segno);
    if (!w->failed)
        w->failed = err;
    log_error("wal", "write to the log failed; it is stopped and the process must restart",
              "op=%s file=%s/%s err=\"%s\"", what, w->dir, name, wal_strerror(err));
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
static int out_of_space(struct wal *w, int err, const char *what, uint64_t segno)
{
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, segno);
    if (!w->no_space)
        log_error("wal", "the log's disk is full: the batch stays in memory and is written "
                  "again when space returns", "op=%s file=%s/%s err=\"%s\" buffered_bytes=%zu",
                  what, w->dir, name, wal_strerror(err), w->wlen);
    w->no_space = 1;
    return err;
}

static int is_no_space(int err)
{
    return err == -ENOSPC || err == -EDQUOT;
}

/* Create segment s's file: header, fdatasync, directory fsync. */
static int seg_create(struct wal *w, struct seg *s)
{
    struct walrec_seghdr h = {WALREC_VERSION, s->salt, s->segno, s->base_lsn, w->id, clock_now_ms()};
    uint8_t buf[SEGHDR];
    char name[WALSCAN_NAME_SIZE];
    int fd, r;

    walscan_seg_name(name, s->segno);
    fd = openat(w->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    FAILPOINT("wal.mid_roll"); /* an empty newest segment: recovery must delete it */
    walrec_seghdr_encode(buf, &h);
    if ((r = pwrite_all(fd, buf, SEGHDR, 0)) < 0 || (r = sync_fd(w, fd)) < 0 ||
        (r = sync_dir(w)) < 0) {
        close(fd);
        unlinkat(w->dirfd, name, 0); /* a later commit creates it again (disk full) */
        return r;
    }
    s->fd = fd;
    return 0;
}

/* A new in-memory active segment starting at the next LSN; created on disk by the next commit. */
static void roll(struct wal *w)
{
    uint32_t prev_salt = active(w)->salt;
    uint64_t segno = active(w)->segno + 1;
    struct seg *s = seg_push(w);

    s->segno = segno;
    do
        s->salt = (uint32_t)rand64();
    while (s->salt == prev_salt);
    s->base_lsn = w->next_lsn;
    s->last_lsn = w->next_lsn - 1;
    s->disk = SEGHDR;
    s->size = SEGHDR;
    w->total_size += SEGHDR;
    log_info("wal", "segment rolled", "seg=%llu base_lsn=%llu", (unsigned long long)segno,
              (unsigned long long)s->base_lsn);
}

/* ---- open and replay --------------------------------------------------- */

/*
 * Open and check every segment header. A newest segment no longer than a
 * header whose header is not valid was being created when the process died:
 * delete it.
 */
static int load_segments(struct wal *w)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    char bad[256];
    int r;

    r = walscan_list(w->dirfd, &nos, &n, bad, sizeof(bad));
    if (r == WAL_EFORMAT)
        log_error("wal", "unexpected file name in the log directory; move it away",
                  "file=%s/%s", w->dir, bad);
    if (r < 0)
        return r;
    for (size_t i = 0; i < n; i++) {
        struct walrec_seghdr h;
        char name[WALSCAN_NAME_SIZE];
        struct stat st;
        int newest = i == n - 1;
        int fd;

        walscan_seg_name(name, nos[i]);
        fd = openat(w->dirfd, name, (newest ? O_RDWR : O_RDONLY) | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
            r = -errno;
            log_error("wal", "cannot open segment", "file=%s/%s err=\"%s\"", w->dir, name,
                      strerror(-r));
            if (fd >= 0)
                close(fd);
            goto cleanup;
        }
        r = walscan_seghdr(fd, nos[i], (uint64_t)st.st_size, newest, &h);
        if (r < 0) {
            close(fd);
            log_error("wal", "cannot read segment header", "file=%s/%s err=\"%s\"", w->dir,
                      name, strerror(-r));
            goto cleanup;
        }
        if (r == WALSCAN_HDR_CREATING) {
            close(fd);
            log_warn("wal", "deleting newest segment with a torn header (crash while creating it)",
                     "file=%s/%s bytes=%lld", w->dir, name, (long long)st.st_size);
            if (unlinkat(w->dirfd, name, 0) < 0 || fsync(w->dirfd) < 0) {
                r = -errno;
                goto cleanup;
            }
            /* The one before it is the newest now and must be writable. */
            if (w->nsegs) {
                struct seg *s = active(w);
                walscan_seg_name(name, s->segno);
                close(s->fd);
                s->fd = openat(w->dirfd, name, O_RDWR | O_CLOEXEC);
                if (s->fd < 0) {
                    r = -errno;
                    goto cleanup;
                }
            }
            r = 0;
            break;
        }
        if (r != WALSCAN_HDR_OK || (w->nsegs && h.wal_id != w->id)) {
            close(fd);
            log_error("wal",
                      "bad segment header (not a segment of this log, or damaged); the log "
                      "needs operator attention",
                      "file=%s/%s size=%lld", w->dir, name, (long long)st.st_size);
            r = WAL_EFORMAT;
            goto cleanup;
        }
        w->id = h.wal_id;
        struct seg *s = seg_push(w);
        s->segno = h.segno;
        s->salt = h.salt;
        s->base_lsn = h.base_lsn;
        s->last_lsn = h.base_lsn - 1;
        s->fd = fd;
        s->disk = s->size = (uint64_t)st.st_size;
        w->total_size += s->size;
        r = 0;
    }
cleanup:
    free(nos);
    return r;
}

/* The newest segment s ends in a torn tail from off: cut the file there. */
static int cut_torn_tail(struct wal *w, struct seg *s, uint64_t off, uint64_t last_good)
{
    uint64_t end = s->disk;
    char name[WALSCAN_NAME_SIZE];
    int r;

    walscan_seg_name(name, s->segno);
    if (ftruncate(s->fd, (off_t)off) < 0 || (!w->no_sync && fsync(s->fd) < 0)) {
        r = -errno;
        log_error("wal", "cannot truncate torn tail", "file=%s/%s err=\"%s\"", w->dir, name,
                  strerror(-r));
        return r;
    }
    log_warn("wal", "torn tail truncated (a write cut short by a crash)",
             "file=%s/%s offset=%llu bytes_cut=%llu last_lsn=%llu", w->dir, name,
             (unsigned long long)off, (unsigned long long)(end - off),
             (unsigned long long)last_good);
    w->truncated_bytes += end - off;
    w->total_size -= end - off;
    s->disk = s->size = off;
    return 0;
}

/* Log how the scan of s found the log corrupt; WAL_ECORRUPT. */
static int corrupt(struct wal *w, const struct seg *s, const struct walscan *sc)
{
    const char *why = sc->why == WALSCAN_WHY_SHORT_HEADER || sc->why == WALSCAN_WHY_SHORT_PAYLOAD
                          ? "record runs past end of file"
                          : "bad header, checksum or payload";
    uint64_t last_good = sc->next_lsn - 1;
    char name[WALSCAN_NAME_SIZE];

    walscan_seg_name(name, s->segno);
    if (sc->end == WALSCAN_BAD_LSN)
        log_error("wal", "record out of sequence; the log needs the salvage tool or operator attention",
                  "file=%s/%s offset=%llu lsn=%llu expected_lsn=%llu", w->dir, name,
                  (unsigned long long)sc->bad_off, (unsigned long long)sc->bad_lsn,
                  (unsigned long long)sc->next_lsn);
    else if (sc->next_valid)
        log_error("wal",
                  "corrupt record followed by valid records; the log needs the salvage tool or "
                  "operator attention",
                  "file=%s/%s offset=%llu reason=\"%s\" next_valid_offset=%llu last_lsn=%llu",
                  w->dir, name, (unsigned long long)sc->bad_off, why,
                  (unsigned long long)sc->next_valid, (unsigned long long)last_good);
    else
        log_error("wal",
                  "corrupt record in a segment that is not the newest; the log needs the salvage "
                  "tool or operator attention",
                  "file=%s/%s offset=%llu reason=\"%s\" last_lsn=%llu", w->dir, name,
                  (unsigned long long)sc->bad_off, why, (unsigned long long)last_good);
    return WAL_ECORRUPT;
}

struct replay_state {
    wal_replay_fn *fn;
    void *arg;
    uint64_t from_lsn;   /* records before it are checked, not handed out (checkpoint) */
    struct walscan scan;
    uint64_t segno;      /* segment being read */
    uint64_t records;
    uint64_t done_bytes; /* segments finished */
    uint64_t total_bytes;
    uint64_t start_ms, last_log_ms;
    struct db_progress *progress;
};

/* After each read of a segment (walscan's on_read): progress for /stats and the log. */
static void replay_progress(void *arg, uint64_t read_to)
{
    struct replay_state *st = arg;
    uint64_t now = mono_ms(), done = st->done_bytes + read_to;

    if (st->progress)
        atomic_store_explicit(&st->progress->done, done, memory_order_relaxed);
    if (now - st->last_log_ms >= 1000) {
        st->last_log_ms = now;
        log_info("wal", "replaying",
                 "percent=%.1f bytes_done=%llu bytes_total=%llu records=%llu seg=%llu",
                 st->total_bytes ? 100.0 * (double)done / (double)st->total_bytes : 100.0,
                 (unsigned long long)done, (unsigned long long)st->total_bytes,
                 (unsigned long long)st->records, (unsigned long long)st->segno);
    }
}

static int replay_segment(struct wal *w, size_t idx, struct replay_state *st, uint64_t *expect)
{
    struct seg *s = &w->segs[idx];
    struct walscan_rec rec;
    int r;

    posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    if (idx == 0)
        posix_fadvise(s->fd, 0, 0, POSIX_FADV_WILLNEED);
    for (size_t k = idx + 1; k < w->nsegs && k <= idx + READAHEAD_SEGS; k++)
        posix_fadvise(w->segs[k].fd, 0, 0, POSIX_FADV_WILLNEED);

    st->segno = s->segno;
    walscan_start(&st->scan, s->fd, s->disk, s->salt, *expect, idx == w->nsegs - 1);
    while ((r = walscan_next(&st->scan, &rec)) > 0) {
        struct wal_loc loc = {(uint32_t)s->segno, (uint32_t)rec.off, rec.len};

        if (st->fn && rec.hdr.lsn >= st->from_lsn &&
            (r = st->fn(st->arg, &rec.hdr, rec.payload, loc)) != 0)
            return r;
        s->last_lsn = rec.hdr.lsn;
        st->records++;
    }
    *expect = st->scan.next_lsn;
    if (r < 0) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, s->segno);
        log_error("wal", "cannot read segment", "file=%s/%s err=\"%s\"", w->dir, name,
                  strerror(-r));
        return r;
    }
    if (st->scan.size < s->disk) { /* shorter than fstat said: what is there is the end */
        w->total_size -= s->disk - st->scan.size;
        s->disk = s->size = st->scan.size;
    }
    switch (st->scan.end) {
    case WALSCAN_CLEAN:
        st->done_bytes += s->disk;
        return 0;
    case WALSCAN_TORN:
        return cut_torn_tail(w, s, st->scan.bad_off, *expect - 1);
    default:
        return corrupt(w, s, &st->scan);
    }
}

/*
 * Replay records from from_lsn on (1: all). A segment wholly before it (its
 * successor starts at or before from_lsn) is not read at all; base: bytes
 * already counted as done in the progress (a checkpoint's).
 */
static int replay_all(struct wal *w, wal_replay_fn *fn, void *arg, uint64_t from_lsn,
                      uint64_t base)
{
    struct replay_state st;
    uint64_t expect = w->segs[0].base_lsn, skipped = 0;
    size_t read = 0;
    int r = 0;

    memset(&st, 0, sizeof(st));
    st.fn = fn;
    st.arg = arg;
    st.from_lsn = from_lsn;
    st.done_bytes = base;
    st.total_bytes = base + w->total_size;
    st.start_ms = st.last_log_ms = mono_ms();
    st.progress = w->progress;
    if (st.progress) {
        atomic_store_explicit(&st.progress->total, st.total_bytes, memory_order_relaxed);
        atomic_store_explicit(&st.progress->done, base, memory_order_relaxed);
    }
    walscan_init(&st.scan, REPLAY_CHUNK, replay_progress, &st);
    for (size_t i = 0; i < w->nsegs; i++) {
        struct seg *s = &w->segs[i];
        if (i + 1 < w->nsegs && w->segs[i + 1].base_lsn <= from_lsn &&
            s->base_lsn == expect && w->segs[i + 1].base_lsn >= s->base_lsn) {
            /* Wholly before the checkpoint's start: what it held is in the checkpoint. */
            s->last_lsn = w->segs[i + 1].base_lsn - 1;
            expect = w->segs[i + 1].base_lsn;
            st.done_bytes += s->disk;
            skipped += s->disk;
            continue;
        }
        read++;
        if (s->base_lsn != expect) {
            char name[WALSCAN_NAME_SIZE];
            walscan_seg_name(name, s->segno);
            log_error("wal",
                      "segment does not continue the previous one (a segment is missing?); the "
                      "log needs operator attention",
                      "file=%s/%s base_lsn=%llu expected_lsn=%llu", w->dir, name,
                      (unsigned long long)s->base_lsn, (unsigned long long)expect);
            r = WAL_ECORRUPT;
            goto cleanup;
        }
        if ((r = replay_segment(w, i, &st, &expect)) != 0)
            goto cleanup;
    }
    w->next_lsn = expect;
    if (st.progress)
        atomic_store_explicit(&st.progress->done, w->total_size, memory_order_relaxed);
    uint64_t ms = mono_ms() - st.start_ms;
    log_info("wal", "log replayed",
             "dir=%s segments=%zu segments_read=%zu records=%llu bytes=%llu bytes_skipped=%llu "
             "from_lsn=%llu ms=%llu next_lsn=%llu",
             w->dir, w->nsegs, read, (unsigned long long)st.records,
             (unsigned long long)w->total_size, (unsigned long long)skipped,
             (unsigned long long)from_lsn, (unsigned long long)ms, (unsigned long long)expect);
cleanup:
    walscan_free(&st.scan);
    return r;
}

/*
 * Hand the owner dir/CHECKPOINT, if there is a usable one, and say where
 * replay starts. A damaged or foreign checkpoint is not fatal: the log
 * holds everything, so recovery falls back to a full replay (and says so).
 * A failure after chunks were handed out is: the owner's state is partial.
 */
static int load_ckpt(struct wal *w, const struct wal_opts *o, uint64_t *from_lsn, uint64_t *base)
{
    struct walckpt_info info;
    struct stat st;
    char why[256];
    int r;

    if (fstatat(w->dirfd, WALCKPT_NAME, &st, 0) < 0)
        return 0;
    if (w->progress) {
        atomic_store_explicit(&w->progress->total, 2 * (uint64_t)st.st_size + w->total_size,
                              memory_order_relaxed);
        atomic_store_explicit(&w->progress->done, 0, memory_order_relaxed);
    }
    uint64_t t0 = mono_ms();
    r = walckpt_read(w->dirfd, w->id, o->ckpt_fn, o->ckpt_arg, &info, why, sizeof(why),
                     w->progress);
    if (r == 1) {
        log_info("wal", "checkpoint not used (the owner's choice); replaying the whole log",
                 "dir=%s", w->dir);
        return 0;
    }
    if (r < 0 && info.handed == 0) {
        /* nothing was handed out: the owner's state is untouched */
        log_warn("wal", "checkpoint unusable, replaying the whole log instead",
                 "file=%s/%s reason=\"%s\"", w->dir, WALCKPT_NAME, why);
        return 0;
    }
    if (r < 0) {
        log_error("wal", "cannot read the checkpoint", "file=%s/%s err=\"%s\" reason=\"%s\"",
                  w->dir, WALCKPT_NAME, wal_strerror(r), why);
        return r;
    }
    *from_lsn = info.start_lsn;
    *base = 2 * info.bytes;
    w->ck_loaded_lsn = w->ck_lsn = info.start_lsn;
    w->ck_end_lsn = info.end_lsn;
    w->ck_bytes = info.bytes;
    w->ck_lsn_ms = info.created_ms;
    log_info("wal", "checkpoint loaded",
             "file=%s/%s bytes=%llu chunks=%llu start_lsn=%llu ms=%llu", w->dir, WALCKPT_NAME,
             (unsigned long long)info.bytes, (unsigned long long)info.chunks,
             (unsigned long long)info.start_lsn, (unsigned long long)(mono_ms() - t0));
    return 0;
}

int wal_open(struct wal **out, const struct wal_opts *o, wal_replay_fn *replay, void *arg)
{
    struct wal *w;
    int r;

    *out = NULL;
    if (!o->dir || !*o->dir)
        return -EINVAL;
    if (o->segment_bytes &&
        (o->segment_bytes < MIN_SEGMENT_BYTES || o->segment_bytes > MAX_SEGMENT_BYTES))
        return -EINVAL;

    w = xrealloc(NULL, sizeof(*w));
    memset(w, 0, sizeof(*w));
    w->dirfd = w->lockfd = -1;
    w->dir = xstrdup(o->dir);
    w->segment_bytes = o->segment_bytes ? o->segment_bytes : WAL_DEFAULT_SEGMENT_BYTES;
    w->no_sync = o->no_sync;
    w->progress = o->progress;

    if ((r = mkdir_p(o->dir)) < 0) {
        log_error("wal", "cannot create the log directory", "dir=%s err=\"%s\"", o->dir,
                  strerror(-r));
        goto fail;
    }
    w->dirfd = open(o->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->dirfd < 0) {
        r = -errno;
        log_error("wal", "cannot open the log directory", "dir=%s err=\"%s\"", o->dir,
                  strerror(-r));
        goto fail;
    }
    w->lockfd = openat(w->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->lockfd < 0) {
        r = -errno;
        log_error("wal", "cannot create the lock file", "file=%s/LOCK err=\"%s\"", o->dir,
                  strerror(-r));
        goto fail;
    }
    if (flock(w->lockfd, LOCK_EX | LOCK_NB) < 0) {
        r = errno == EWOULDBLOCK ? WAL_ELOCKED : -errno;
        log_error("wal", "the log directory is locked by another process (is a daemon already "
                  "running on it?)", "file=%s/LOCK", o->dir);
        goto fail;
    }

    if ((r = load_segments(w)) < 0)
        goto fail;
    if (w->nsegs == 0) {
        struct seg *s = seg_push(w);
        w->id = o->create_id ? o->create_id : rand64();
        if (!w->id)
            w->id = 1;
        s->segno = 1;
        s->salt = (uint32_t)rand64();
        s->base_lsn = o->create_base_lsn ? o->create_base_lsn : 1;
        s->last_lsn = s->base_lsn - 1;
        s->disk = s->size = SEGHDR;
        w->total_size = SEGHDR;
        if ((r = seg_create(w, s)) < 0) {
            log_error("wal", "cannot create the first segment", "dir=%s err=\"%s\"", o->dir,
                      wal_strerror(r));
            goto fail;
        }
        log_info("wal", "new log created", "dir=%s wal_id=%016llx", o->dir,
                 (unsigned long long)w->id);
    }

    /* The replay function may reach w through its own pointer to *out. */
    *out = w;
    uint64_t from_lsn = 1, base = 0;
    if (o->ckpt_fn && (r = load_ckpt(w, o, &from_lsn, &base)) < 0) {
        *out = NULL;
        goto fail;
    }
    if ((r = replay_all(w, replay, arg, from_lsn, base)) != 0) {
        *out = NULL;
        goto fail;
    }
    if (w->ck_loaded_lsn && w->next_lsn < w->ck_end_lsn) {
        log_error("wal",
                  "the checkpoint describes records the log does not have (segments restored "
                  "from an older backup?); restore the matching segments, or move CHECKPOINT "
                  "away to recover from the segments alone",
                  "dir=%s checkpoint_end_lsn=%llu log_next_lsn=%llu", w->dir,
                  (unsigned long long)w->ck_end_lsn, (unsigned long long)w->next_lsn);
        *out = NULL;
        r = WAL_ECORRUPT;
        goto fail;
    }
    w->ck_end_lsn = 0;
    w->durable_lsn = w->next_lsn - 1;
    return 0;

fail:
    wal_close(w);
    return r;
}

void wal_close(struct wal *w)
{
    if (!w)
        return;
    walckpt_free(w->ck);
    for (size_t i = 0; i < w->nsegs; i++)
        if (w->segs[i].fd >= 0)
            close(w->segs[i].fd);
    if (w->lockfd >= 0)
        close(w->lockfd); /* releases the flock */
    if (w->dirfd >= 0)
        close(w->dirfd);
    free(w->segs);
    free(w->wbuf);
    free(w->cbuf);
    free(w->ra);
    free(w->dir);
    free(w);
}

uint64_t wal_next_lsn(const struct wal *w)
{
    return w->next_lsn;
}

uint64_t wal_id(const struct wal *w)
{
    return w->id;
}

/* ---- append and commit ------------------------------------------------- */

int wal_append(struct wal *w, uint8_t type, const struct walrec_piece *pieces, int npieces,
               uint64_t *lsn, struct wal_loc *loc)
{
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
            return WAL_ETOOBIG;
        plen += pieces[i].n;
    }
    if (plen > WALREC_MAX_PAYLOAD)
        return WAL_ETOOBIG;
    rlen = RECHDR + plen;

    s = active(w);
    if (s->size > SEGHDR && s->size + rlen > w->segment_bytes) {
        roll(w);
        s = active(w);
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

size_t wal_pending(const struct wal *w)
{
    return w->wlen;
}

/*
 * A group commit in two halves, so that the second may run on a thread:
 * write_batch() writes every buffered byte (pwrite, into the page cache) and
 * names the files to sync; after their fdatasync, batch_durable() moves the
 * durable LSN. Between the two the bytes are readable from the files, new
 * appends go to an empty buffer, and nothing counts as durable.
 */
struct wal_batch {
    int fds[8];          /* files to fdatasync, oldest first */
    uint64_t segnos[8];
    int n;
    uint64_t lsn;        /* durable once they are synced */
};

static int write_batch(struct wal *w, struct wal_batch *b)
{
    size_t first;
    int r;

    b->n = 0;
    b->lsn = w->durable_lsn;
    /*
     * The segments with buffered bytes are a suffix of the list, oldest
     * first -- with, perhaps, an empty one rolled to by wal_force_horizon()
     * and not created yet: it belongs to the suffix too.
     */
    first = w->nsegs;
    while (first > 0 && (w->segs[first - 1].size > w->segs[first - 1].disk ||
                         w->segs[first - 1].fd < 0))
        first--;
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
            for (int k = 0; k < b->n; k++)
                if ((r = sync_fd(w, b->fds[k])) < 0)
                    return fail(w, r, "fdatasync", b->segnos[k]);
        if (s->fd < 0 && (r = seg_create(w, s)) < 0)
            return is_no_space(r) ? out_of_space(w, r, "create", s->segno)
                                  : fail(w, r, "create", s->segno);
        if ((r = pwrite_all(s->fd, w->wbuf + s->pend_off, (size_t)(s->size - s->disk), s->disk)) < 0) {
            if (!is_no_space(r))
                return fail(w, r, "write", s->segno);
            if (ftruncate(s->fd, (off_t)s->disk) < 0)
                return fail(w, -errno, "truncate after a full disk", s->segno);
            return out_of_space(w, r, "write", s->segno);
        }
        s->disk = s->size;
        b->fds[b->n] = s->fd;
        b->segnos[b->n++] = s->segno;
    }
    if (b->n == 0)
        return 0;
    b->lsn = w->segs[first + (size_t)b->n - 1].last_lsn;
    if (first + (size_t)b->n == w->nsegs) {
        w->wlen = 0;
        b->lsn = w->next_lsn - 1;
    }
    FAILPOINT("wal.before_fsync");
    return 0;
}

static void batch_durable(struct wal *w, const struct wal_batch *b)
{
    w->durable_lsn = b->lsn;
    w->commits++;
    if (w->no_space) {
        log_info("wal", "space again: the buffered batch is on disk", "dir=%s", w->dir);
        w->no_space = 0;
    }
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
    while (w->wlen) {
        if ((r = write_batch(w, &b)) < 0)
            return r;
        if (b.n == 0)
            break;
        for (int i = 0; i < b.n; i++)
            if ((r = FAILPOINT_ERR("wal.fsync_error") ? -EIO : sync_fd(w, b.fds[i])) < 0)
                return fail(w, r, "fdatasync", b.segnos[i]);
        batch_durable(w, &b);
    }
    return 0;
}

/* ---- read -------------------------------------------------------------- */

/* n bytes at off of s, from the file or the write buffer. 0 or negative. */
static int seg_read(struct wal *w, struct seg *s, uint64_t off, uint8_t *dst, size_t n)
{
    if (off < s->disk) {
        size_t from_disk = off + n <= s->disk ? n : (size_t)(s->disk - off);
        ssize_t got = walscan_pread(s->fd, dst, from_disk, off);
        if (got < 0)
            return (int)got;
        if ((size_t)got < from_disk)
            return WAL_ECORRUPT; /* the file is shorter than we wrote */
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
 */
#define RA_BYTES (128u << 10)

static int ra_read(struct wal *w, struct seg *s, uint64_t off, uint8_t *dst, size_t n)
{
    int sequential = s->segno == w->last_segno && off >= w->last_off &&
                     off - w->last_off < RA_BYTES;

    w->last_segno = s->segno;
    w->last_off = off;
    if (n > RA_BYTES / 4 || off + n > s->disk)
        return seg_read(w, s, off, dst, n);
    if (!(w->ra_len && w->ra_segno == s->segno && off >= w->ra_off &&
          off + n <= w->ra_off + w->ra_len)) {
        if (!sequential)
            return seg_read(w, s, off, dst, n);
        size_t want = s->disk - off < RA_BYTES ? (size_t)(s->disk - off) : RA_BYTES;
        ssize_t got;
        if (!w->ra)
            w->ra = xmalloc(RA_BYTES);
        w->ra_len = 0;
        got = walscan_pread(s->fd, w->ra, want, off);
        if (got < 0)
            return (int)got;
        if ((size_t)got < n)
            return WAL_ECORRUPT; /* the file is shorter than we wrote */
        w->ra_segno = s->segno;
        w->ra_off = off;
        w->ra_len = (size_t)got;
    }
    memcpy(dst, w->ra + (off - w->ra_off), n);
    return 0;
}

int wal_read(struct wal *w, struct wal_loc loc, struct wal_buf *b, struct walrec_hdr *h,
             const uint8_t **payload)
{
    struct seg *s;
    char name[WALSCAN_NAME_SIZE];
    const char *why;
    int r;

    if (w->failed)
        return w->failed;
    s = seg_find(w, loc.seg);
    if (!s) {
        walscan_seg_name(name, loc.seg); /* names are formatted for errors only */
        log_error("wal", "read of a record in a segment that does not exist (deleted?)", "file=%s/%s offset=%u",
                  w->dir, name, loc.off);
        return -ENOENT;
    }
    if (loc.len < RECHDR || loc.off < SEGHDR || (uint64_t)loc.off + loc.len > s->size) {
        why = "location outside the segment";
        r = WAL_ECORRUPT;
        goto bad;
    }
    if (b->cap < loc.len) {
        b->p = xrealloc(b->p, loc.len);
        b->cap = loc.len;
    }
    if ((r = ra_read(w, s, loc.off, b->p, loc.len)) < 0) {
        why = r == WAL_ECORRUPT ? "segment shorter than expected" : "read error";
        goto bad;
    }
    if (walrec_decode(b->p, loc.len, s->salt, h, payload) != (int)loc.len) {
        why = "bad header, checksum or payload";
        r = WAL_ECORRUPT;
        goto bad;
    }
    if (h->lsn < s->base_lsn || h->lsn > s->last_lsn) {
        why = "lsn does not belong to this segment";
        r = WAL_ECORRUPT;
        goto bad;
    }
    return 0;
bad:
    walscan_seg_name(name, loc.seg);
    log_error("wal", "cannot read record", "file=%s/%s offset=%u len=%u reason=\"%s\" err=\"%s\"",
              w->dir, name, loc.off, loc.len, why, wal_strerror(r));
    return r;
}

/* ---- space ------------------------------------------------------------- */

void wal_live_add(struct wal *w, struct wal_loc loc)
{
    struct seg *s = seg_find(w, loc.seg);

    if (!s)
        return;
    s->live_count++;
    s->live_bytes += loc.len;
    w->live_records++;
    w->live_bytes += loc.len;
}

void wal_live_del(struct wal *w, struct wal_loc loc)
{
    struct seg *s = seg_find(w, loc.seg);

    if (!s || s->live_count == 0 || s->live_bytes < loc.len)
        return;
    s->live_count--;
    s->live_bytes -= loc.len;
    w->live_records--;
    w->live_bytes -= loc.len;
}

/* Nothing live, compaction copies durable: what blocks deleting the head. */
static int head_dead(const struct wal *w)
{
    const struct seg *s = &w->segs[0];
    return w->nsegs >= 2 && (s->live_count == 0 || s->scanned);
}

static int head_deletable(const struct wal *w)
{
    const struct seg *s = &w->segs[0];
    return head_dead(w) && s->copy_lsn <= w->durable_lsn && s->size == s->disk && s->fd >= 0 &&
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
        r = unlinkat(w->dirfd, name, 0) < 0 ? -errno : sync_dir(w);
        if (r < 0) {
            log_error("wal", "cannot delete segment", "file=%s/%s err=\"%s\"", w->dir, name,
                      strerror(-r));
            return r;
        }
        close(s->fd);
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

static int over_budget(const struct wal *w)
{
    return w->total_size > 2 * w->live_bytes + w->segment_bytes;
}

/* The head lies below a horizon asked for (wal_force_horizon): copy it forward whatever its use. */
static int below_horizon(const struct wal *w)
{
    return w->segs[0].base_lsn < w->force_lsn;
}

/* Copy the live ADDs of the oldest segment forward, up to budget bytes walked. */
static int compact_head(struct wal *w, size_t budget, const struct wal_compact_ops *ops)
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
        if ((r = seg_read(w, s, w->cpt_off, w->cbuf, n)) < 0)
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
            if (r < 0 || h.lsn < w->segs[0].base_lsn || h.lsn > w->segs[0].last_lsn) {
                r = WAL_ECORRUPT;
                goto bad;
            }
            if (h.type == WALREC_ADD && walrec_add_peek(payload, h.len, &a) > 0) {
                struct wal_loc from = {(uint32_t)w->cpt_segno, (uint32_t)(w->cpt_off), (uint32_t)r};
                if (ops->is_live(ops->arg, a.msg_id, from)) {
                    struct walrec_piece pc = {payload, h.len};
                    struct wal_loc to = {0, 0, 0};
                    uint64_t lsn = 0;
                    int e = wal_append(w, WALREC_ADD, &pc, 1, &lsn, &to);
                    if (e < 0)
                        return e;
                    wal_live_del(w, from);
                    wal_live_add(w, to);
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
              wal_strerror(r));
    return r;
}

int wal_maintain(struct wal *w, size_t budget, const struct wal_compact_ops *ops)
{
    int r;

    if (w->failed)
        return w->failed;
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
        return 1; /* deletable after the next wal_commit() */
    return ops && (over_budget(w) || w->cpt_segno == w->segs[0].segno || below_horizon(w));
}

int wal_force_horizon(struct wal *w, uint64_t *lsn)
{
    if (w->failed)
        return w->failed;
    if (active(w)->last_lsn >= active(w)->base_lsn)
        roll(w); /* the active segment holds records: they are below the horizon too */
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

void wal_get_stats(const struct wal *w, struct wal_stats *s)
{
    memset(s, 0, sizeof(*s));
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

/* ---- checkpoints ------------------------------------------------------- */

/* An I/O error on the checkpoint: drop it; the log and the installed one are untouched. */
static int ckpt_failed(struct wal *w, int err, const char *what)
{
    log_error("wal", "checkpoint abandoned; the previous one (if any) stays in use",
              "dir=%s step=%s err=\"%s\"", w->dir, what, wal_strerror(err));
    walckpt_free(w->ck);
    w->ck = NULL;
    w->ck_state = WLOG_CKPT_IDLE;
    w->ck_installing = 0;
    w->ck_failed++;
    return err;
}

int wal_ckpt_begin(struct wal *w)
{
    int r;

    if (w->failed)
        return w->failed;
    if (w->ck)
        return WLOG_EBUSY;
    r = walckpt_create(&w->ck, w->dirfd, w->dir, w->id, w->durable_lsn + 1);
    if (r < 0)
        return ckpt_failed(w, r, "create");
    w->ck_state = WLOG_CKPT_WRITING;
    w->ck_start_lsn = w->durable_lsn + 1;
    w->ck_began_ns = clock_mono_ns();
    w->ck_began_ms = clock_now_ms();
    return 0;
}

int wal_ckpt_write(struct wal *w, uint8_t kind, const void *p, size_t n)
{
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_WRITING)
        return -EINVAL;
    FAILPOINT("wal.mid_ckpt");
    r = FAILPOINT_ERR("wal.ckpt_write_error") ? -EIO : 0;
    if (r == 0)
        r = walckpt_chunk(w->ck, kind, p, n);
    return r < 0 ? ckpt_failed(w, r, "write") : 0;
}

int wal_ckpt_end(struct wal *w)
{
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_WRITING)
        return -EINVAL;
    if ((r = walckpt_finish(w->ck, w->next_lsn)) < 0)
        return ckpt_failed(w, r, "finish");
    w->ck_end_lsn = w->next_lsn;
    w->ck_state = WLOG_CKPT_SEALING;
    wal_ckpt_poll(w);
    return 0;
}

void wal_ckpt_abort(struct wal *w)
{
    walckpt_free(w->ck); /* waits for an install in progress */
    w->ck = NULL;
    w->ck_state = WLOG_CKPT_IDLE;
    w->ck_installing = 0;
}

void wal_ckpt_poll(struct wal *w)
{
    int r;

    if (!w->ck || w->ck_state != WLOG_CKPT_SEALING)
        return;
    if (!w->ck_installing) {
        /* Install only what the log has made durable: no chunk may outlive its records. */
        if (w->durable_lsn + 1 < w->ck_end_lsn)
            return;
        if ((r = walckpt_install(w->ck, w->no_sync)) < 0) {
            ckpt_failed(w, r, "install");
            return;
        }
        w->ck_installing = 1;
        return;
    }
    r = walckpt_installed(w->ck);
    if (r == 0)
        return;
    if (r < 0) {
        ckpt_failed(w, r, "sync and rename");
        return;
    }
    FAILPOINT("wal.after_ckpt");
    w->ck_installed++;
    w->ck_lsn = w->ck_start_lsn;
    w->ck_lsn_ms = w->ck_began_ms;
    w->ck_bytes = walckpt_size(w->ck);
    w->ck_seconds = (double)(clock_mono_ns() - w->ck_began_ns) / 1e9;
    log_info("wal", "checkpoint installed",
             "file=%s/%s bytes=%llu start_lsn=%llu end_lsn=%llu seconds=%.3f", w->dir,
             WALCKPT_NAME, (unsigned long long)w->ck_bytes, (unsigned long long)w->ck_lsn,
             (unsigned long long)w->ck_end_lsn, w->ck_seconds);
    walckpt_free(w->ck);
    w->ck = NULL;
    w->ck_state = WLOG_CKPT_IDLE;
    w->ck_installing = 0;
}

int wal_has_segment(const struct wal *w, uint32_t segno)
{
    return seg_find((struct wal *)w, segno) != NULL;
}

const char *wal_strerror(int err)
{
    return wlog_strerror(err);
}

/* ---- the wlog interface ------------------------------------------------ */

/*
 * struct wal as a struct wlog: a thin shell that converts the location and
 * buffer types (same layout, kept separate so this file's own API and tests
 * stay as they are) and turns the synchronous wal_commit() into a commit
 * with a completion.
 */
struct wal_log {
    struct wlog base;
    struct wal_opts opts;
    struct wal *w;
    wlog_replay_fn *replay;
    void *replay_arg;

    /*
     * The sync thread (opts.sync_thread): the loop thread writes a batch
     * (write_batch) and hands the files to this thread; it fdatasyncs them
     * and says so through notify (the owner wakes its loop, which calls
     * wlog_poll: batch_durable and the completion run there). One batch at
     * a time; reclaim waits while one is out, so no file it syncs is closed
     * under it.
     */
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv, finished_cv;
    int posted, finished, quit; /* under mu */
    int result;                 /* under mu: 0 or -errno of the first failed sync */
    double seconds;             /* under mu: time of the syncs */
    struct wal_batch batch;
    int busy;                   /* loop thread: a batch is out */
    wlog_commit_fn *done;
    void *done_arg;
    void (*notify)(void *arg);
    void *notify_arg;
};

#define WAL_LOG(l) ((struct wal_log *)(l))
#define TO_WLOG_LOC(x) ((struct wlog_loc){(x).seg, (x).off, (x).len})
#define TO_WAL_LOC(x) ((struct wal_loc){(x).seg, (x).off, (x).len})

static int wl_replay(void *arg, const struct walrec_hdr *h, const uint8_t *payload,
                     struct wal_loc loc)
{
    struct wal_log *wl = arg;

    return wl->replay(wl->replay_arg, h, payload, TO_WLOG_LOC(loc));
}

static void wl_set_ckpt_fn(struct wlog *l, wlog_ckpt_fn *fn, void *arg)
{
    WAL_LOG(l)->opts.ckpt_fn = fn;
    WAL_LOG(l)->opts.ckpt_arg = arg;
}

static int wl_ckpt_begin(struct wlog *l)
{
    return wal_ckpt_begin(WAL_LOG(l)->w);
}

static int wl_ckpt_write(struct wlog *l, uint8_t kind, const void *p, size_t n)
{
    return wal_ckpt_write(WAL_LOG(l)->w, kind, p, n);
}

static int wl_ckpt_end(struct wlog *l)
{
    return wal_ckpt_end(WAL_LOG(l)->w);
}

static void wl_ckpt_abort(struct wlog *l)
{
    wal_ckpt_abort(WAL_LOG(l)->w);
}

static void wl_ckpt_poll(struct wlog *l)
{
    wal_ckpt_poll(WAL_LOG(l)->w);
}

static int wl_has(const struct wlog *l, struct wlog_loc loc)
{
    return wal_has_segment(WAL_LOG(l)->w, loc.seg);
}

static int wl_recover(struct wlog *l, wlog_replay_fn *fn, void *arg, struct db_progress *progress)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->w)
        return -EALREADY;
    wl->replay = fn;
    wl->replay_arg = arg;
    if (progress)
        wl->opts.progress = progress;
    return wal_open(&wl->w, &wl->opts, wl_replay, wl);
}

static int wl_append(struct wlog *l, uint8_t type, const struct walrec_piece *pieces, int npieces,
                     uint64_t *lsn, struct wlog_loc *loc)
{
    struct wal_loc wloc;
    int r = wal_append(WAL_LOG(l)->w, type, pieces, npieces, lsn, &wloc);

    if (r == 0 && loc)
        *loc = TO_WLOG_LOC(wloc);
    return r;
}

static size_t wl_pending(const struct wlog *l)
{
    return wal_pending(WAL_LOG(l)->w);
}

static void *sync_main(void *arg)
{
    struct wal_log *wl = arg;

    pthread_mutex_lock(&wl->mu);
    for (;;) {
        while (!wl->posted && !wl->quit)
            pthread_cond_wait(&wl->cv, &wl->mu);
        if (wl->quit)
            break;
        wl->posted = 0;
        pthread_mutex_unlock(&wl->mu);

        uint64_t t0 = clock_mono_ns();
        int r = 0;
        for (int i = 0; i < wl->batch.n && r == 0; i++) {
            if (FAILPOINT_ERR("wal.fsync_error"))
                r = -EIO;
            else if (fdatasync(wl->batch.fds[i]) < 0)
                r = -errno;
        }
        double secs = (double)(clock_mono_ns() - t0) / 1e9;

        pthread_mutex_lock(&wl->mu);
        wl->result = r;
        wl->seconds = secs;
        wl->finished = 1;
        pthread_cond_broadcast(&wl->finished_cv);
        if (wl->notify)
            wl->notify(wl->notify_arg);
    }
    pthread_mutex_unlock(&wl->mu);
    return NULL;
}

static int wl_commit(struct wlog *l, wlog_commit_fn *done, void *arg)
{
    struct wal_log *wl = WAL_LOG(l);
    struct wal *w = wl->w;
    int r;

    if (!wl->opts.sync_thread || w->no_sync) {
        if ((r = wal_commit(w)) < 0)
            return r;
        if (done)
            done(arg, 0);
        return 0;
    }
    if (wl->busy)
        return WLOG_EBUSY;
    if (w->failed)
        return w->failed;
    if (!wl->started) {
        pthread_mutex_init(&wl->mu, NULL);
        pthread_cond_init(&wl->cv, NULL);
        pthread_cond_init(&wl->finished_cv, NULL);
        if ((r = pthread_create(&wl->thread, NULL, sync_main, wl)) != 0)
            return fail(w, -r, "start the sync thread", active(w)->segno);
        wl->started = 1;
    }
    if ((r = write_batch(w, &wl->batch)) < 0)
        return r;
    wl->busy = 1;
    wl->done = done;
    wl->done_arg = arg;
    pthread_mutex_lock(&wl->mu);
    wl->finished = 0;
    wl->posted = 1;
    pthread_cond_signal(&wl->cv);
    pthread_mutex_unlock(&wl->mu);
    return 0;
}

/* On the loop thread: finish the batch the sync thread is done with, if any. */
static void wl_poll(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);
    wlog_commit_fn *done;
    int finished, r = 0;
    double secs = 0;

    if (!wl->busy)
        return;
    pthread_mutex_lock(&wl->mu);
    finished = wl->finished;
    if (finished) {
        r = wl->result;
        secs = wl->seconds;
        wl->finished = 0;
    }
    pthread_mutex_unlock(&wl->mu);
    if (!finished)
        return;
    wl->busy = 0;
    done = wl->done;
    wl->done = NULL;
    db_hist_observe(&wl->w->fsync, secs);
    if (r < 0) {
        r = fail(wl->w, r, "fdatasync", wl->batch.segnos[0]);
    } else {
        batch_durable(wl->w, &wl->batch);
    }
    if (done)
        done(wl->done_arg, r);
}

/* Wait for the batch out on the sync thread, if any, and complete it here. */
static void wl_flush(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);

    if (!wl->busy)
        return;
    pthread_mutex_lock(&wl->mu);
    while (!wl->finished)
        pthread_cond_wait(&wl->finished_cv, &wl->mu);
    pthread_mutex_unlock(&wl->mu);
    wl_poll(l);
}

static void wl_set_notify(struct wlog *l, void (*fn)(void *arg), void *arg)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->started)
        pthread_mutex_lock(&wl->mu);
    wl->notify = fn;
    wl->notify_arg = arg;
    if (wl->started)
        pthread_mutex_unlock(&wl->mu);
}

static int wl_read(struct wlog *l, struct wlog_loc loc, struct wlog_buf *b, struct walrec_hdr *h,
                   const uint8_t **payload)
{
    struct wal_buf wb = {b->p, b->cap};
    int r = wal_read(WAL_LOG(l)->w, TO_WAL_LOC(loc), &wb, h, payload);

    b->p = wb.p;
    b->cap = wb.cap;
    return r;
}

static void wl_live(struct wlog *l, struct wlog_loc loc, int live)
{
    if (live)
        wal_live_add(WAL_LOG(l)->w, TO_WAL_LOC(loc));
    else
        wal_live_del(WAL_LOG(l)->w, TO_WAL_LOC(loc));
}

struct wl_compact {
    const struct wlog_compact_ops *ops;
};

static int wl_is_live(void *arg, uint64_t msg_id, struct wal_loc loc)
{
    const struct wlog_compact_ops *ops = ((struct wl_compact *)arg)->ops;

    return ops->is_live(ops->arg, msg_id, TO_WLOG_LOC(loc));
}

static void wl_moved(void *arg, uint64_t msg_id, struct wal_loc to)
{
    const struct wlog_compact_ops *ops = ((struct wl_compact *)arg)->ops;

    ops->moved(ops->arg, msg_id, TO_WLOG_LOC(to));
}

static int wl_reclaim(struct wlog *l, size_t budget, const struct wlog_compact_ops *ops)
{
    struct wl_compact c = {ops};
    struct wal_compact_ops wops = {wl_is_live, wl_moved, &c};

    if (WAL_LOG(l)->busy)
        return 1; /* not while the sync thread holds files: it could close one under it */
    return wal_maintain(WAL_LOG(l)->w, budget, ops ? &wops : NULL);
}

static void wl_stats(const struct wlog *l, struct wlog_stats *s)
{
    struct wal_stats ws;

    memset(s, 0, sizeof(*s));
    if (!WAL_LOG(l)->w)
        return;
    wal_get_stats(WAL_LOG(l)->w, &ws);
    s->segments = ws.segments;
    s->disk_bytes = ws.disk_bytes;
    s->live_bytes = ws.live_bytes;
    s->live_records = ws.live_records;
    s->durable_lsn = ws.durable_lsn;
    s->commits = ws.commits;
    s->appended_bytes = ws.appended_bytes;
    s->compacted_bytes = ws.compacted_bytes;
    s->deleted_segments = ws.deleted_segments;
    s->truncated_bytes = ws.truncated_bytes;
    s->failed = ws.failed;
    s->no_space = ws.no_space;
    s->fsync = ws.fsync;
    s->compact_segment = ws.compact_segment;
    s->compact_done = ws.compact_done;
    s->compact_total = ws.compact_total;
    s->ckpt_state = ws.ckpt_state;
    s->ckpt_installed = ws.ckpt_installed;
    s->ckpt_failed = ws.ckpt_failed;
    s->ckpt_lsn = ws.ckpt_lsn;
    s->ckpt_bytes = ws.ckpt_bytes;
    s->ckpt_age_ms = ws.ckpt_age_ms;
    s->ckpt_seconds = ws.ckpt_seconds;
    s->ckpt_loaded_lsn = ws.ckpt_loaded_lsn;
}

static uint64_t wl_id(const struct wlog *l)
{
    return wal_id(WAL_LOG(l)->w);
}

static uint64_t wl_next_lsn(const struct wlog *l)
{
    return wal_next_lsn(WAL_LOG(l)->w);
}

static void wl_close(struct wlog *l)
{
    struct wal_log *wl = WAL_LOG(l);

    if (wl->started) {
        pthread_mutex_lock(&wl->mu);
        wl->quit = 1;
        pthread_cond_signal(&wl->cv);
        pthread_mutex_unlock(&wl->mu);
        pthread_join(wl->thread, NULL);
        pthread_mutex_destroy(&wl->mu);
        pthread_cond_destroy(&wl->cv);
        pthread_cond_destroy(&wl->finished_cv);
    }
    wal_close(wl->w);
    free((char *)wl->opts.dir);
    free(wl);
}

static const struct wlog_ops wal_log_ops = {
    "segment files", wl_recover, wl_append, wl_pending, wl_commit, wl_read,
    wl_live, wl_reclaim, wl_stats, wl_id, wl_next_lsn, wl_close, wl_poll, wl_set_notify,
    wl_flush, wl_set_ckpt_fn, wl_ckpt_begin, wl_ckpt_write, wl_ckpt_end, wl_ckpt_abort,
    wl_ckpt_poll, wl_has, NULL, NULL,
};

struct wal *wal_file_log_wal(struct wlog *l)
{
    return WAL_LOG(l)->w;
}

struct wlog *wal_file_log(const struct wal_opts *o)
{
    struct wal_log *wl = xcalloc(1, sizeof(*wl));

    wl->base.ops = &wal_log_ops;
    wl->opts = *o;
    wl->opts.dir = xstrdup(o->dir);
    return &wl->base;
}

const char *wlog_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case WLOG_ECORRUPT:
        return "corrupt log record";
    case WLOG_ELOCKED:
        return "log directory locked by another process";
    case WLOG_EFORMAT:
        return "bad segment file (name, header or version)";
    case WLOG_ETOOBIG:
        return "record too large";
    case WLOG_EBUSY:
        return "a commit is still in progress";
    case WLOG_EREPLICA:
        return "the WAL replica (stream) is lost, incomplete or refused the records";
    default:
        return err < 0 && err > -4096 ? strerror(-err) : "unknown error";
    }
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

/*
 * Test hook, declared by tests only: make the active segment's fd fail every
 * later write (EBADF), as if the disk had gone away behind the log's back.
 */
int wal_test_break_fd(struct wal *w);
int wal_test_break_fd(struct wal *w)
{
    struct seg *s = active(w);
    int fd, r = 0;

    if (s->fd < 0)
        return -EBADF;
    fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (dup2(fd, s->fd) < 0)
        r = -errno;
    close(fd);
    return r;
}
