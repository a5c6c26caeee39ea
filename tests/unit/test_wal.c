/*
 * test_wal.c -- the segmented WAL: durability across reopen, segment roll,
 * torn tails cut and corruption refused, stale salts, reads, space reclaim
 * and compaction, the directory lock, LSNs that never repeat, the failed
 * state after a write error, and the space reserve on a full disk.
 *
 * Every test works in its own directory under a mkdtemp() base in /tmp,
 * removed at the end. Most tests run with no_sync (the file contents are
 * what is tested; fdatasync has its own test).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/wal.h"
#include "wal/wal_int.h" /* wal_open(), and the log's own functions the tests reach */
#include "delay-bridge/walrec.h"

/* Test hook in src/wal/wal.c: make the active segment's fd fail every write. */
int wal_test_break_fd(struct wal *w);
void wal_test_drop_readahead(struct wal *w);
size_t wal_test_readahead_size(const struct wal *w);

#include "check.h"
#include "testkit.h"

static char base[64];

/* A call returns want; the message names both codes. */
#define CHECK_RC(expr, want)                                                               \
    do {                                                                                   \
        int rc_ = (expr), want_ = (want);                                                  \
        if (rc_ != want_)                                                                  \
            check_failed(__FILE__, __LINE__, #expr " == " #want, "got %d (%s), want %d (%s)", \
                         rc_, wlog_strerror(rc_), want_, wlog_strerror(want_));              \
    } while (0)

/* The wal module logs warnings and errors for the damage these cases make. */
static void expect_error_lines(void)
{
    static int said;
    if (!said++) {
        printf("test_wal: error lines from the wal module are expected (corruption tests)\n");
        fflush(stdout);
    }
}

/* ---- files ------------------------------------------------------------- */


/* A path under the test's base directory; each call gets its own buffer. */
static const char *tdir(const char *name)
{
    static char buf[64][256];
    static int i;
    char *p = buf[i++ & 63];
    snprintf(p, sizeof(buf[0]), "%s/%s", base, name);
    return p;
}

/* Rotating buffers: two results may be used in one call. */
static const char *seg_path(const char *dir, uint64_t segno)
{
    static char buf[4][512];
    static int i;
    char *p = buf[i++ & 3];
    snprintf(p, sizeof(buf[0]), "%s/%020llu.wal", dir, (unsigned long long)segno);
    return p;
}

static long long fsize(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

static int exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static void file_truncate(const char *p, long long n)
{
    if (truncate(p, n) != 0)
        perror("truncate");
}

static void file_append(const char *p, const void *b, size_t n)
{
    int fd = open(p, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0 || write(fd, b, n) != (ssize_t)n)
        perror("append");
    if (fd >= 0)
        close(fd);
}

static void file_pwrite(const char *p, const void *b, size_t n, long long off)
{
    int fd = open(p, O_WRONLY);
    if (fd < 0 || pwrite(fd, b, n, off) != (ssize_t)n)
        perror("pwrite");
    if (fd >= 0)
        close(fd);
}

static void file_pread(const char *p, void *b, size_t n, long long off)
{
    int fd = open(p, O_RDONLY);
    if (fd < 0 || pread(fd, b, n, off) != (ssize_t)n)
        perror("pread");
    if (fd >= 0)
        close(fd);
}

static void zero_range(const char *p, long long off, size_t n)
{
    uint8_t *z = calloc(1, n);
    file_pwrite(p, z, n, off);
    free(z);
}

static void flip_bit(const char *p, long long off, int bit)
{
    uint8_t b;
    file_pread(p, &b, 1, off);
    b ^= (uint8_t)(1u << bit);
    file_pwrite(p, &b, 1, off);
}

static int count_segments(const char *dir)
{
    int n = 0;
    for (uint64_t s = 1; s < 10000; s++)
        n += exists(seg_path(dir, s));
    return n;
}

/* ---- payloads ---------------------------------------------------------- */

static uint8_t body_byte(uint64_t msg_id, size_t i)
{
    return (uint8_t)(msg_id * 131 + i * 7 + (i >> 8));
}

/* An ADD payload for msg_id with a body of body_len bytes; returns size. */
static size_t make_add(uint8_t **out, uint64_t msg_id, uint32_t body_len)
{
    static const uint8_t props[] = {0x90, 0x00, 0x10, 'a', 'p', 'p', 'l', 'i', 'c',
                                    'a',  't',  'i',  'o', 'n', '/', 'j', 's', 'o',
                                    'n',  0x02};
    struct walrec_add a;
    uint8_t *body = malloc(body_len + 1);
    size_t n, head;

    for (uint32_t i = 0; i < body_len; i++)
        body[i] = body_byte(msg_id, i);
    memset(&a, 0, sizeof(a));
    a.msg_id = msg_id;
    a.due_ms = 1800000000000ull + msg_id;
    a.enqueue_ms = 1700000000000ull;
    a.route = "orders";
    a.route_len = 6;
    a.exchange = "orders.delayed";
    a.exchange_len = 14;
    a.routing_key = "eu.order.created";
    a.routing_key_len = 16;
    a.props = props;
    a.props_len = sizeof(props);
    a.body = body;
    a.body_len = body_len;
    n = walrec_add_size(&a);
    *out = malloc(n);
    head = walrec_add_encode_head(*out, &a);
    if (body_len)
        memcpy(*out + head, body, body_len);
    free(body);
    return n;
}

/* Does this ADD payload carry the body make_add() gives its msg_id? */
static int add_ok(const uint8_t *p, uint32_t len, uint64_t *msg_id)
{
    struct walrec_add a;

    if (walrec_add_decode(p, len, &a) != (int)len)
        return 0;
    for (uint32_t i = 0; i < a.body_len; i++)
        if (a.body[i] != body_byte(a.msg_id, i))
            return 0;
    if (msg_id)
        *msg_id = a.msg_id;
    return a.route_len == 6 && memcmp(a.route, "orders", 6) == 0;
}

static int append_add(struct wal *w, uint32_t body_len, uint64_t *lsn, struct wlog_loc *loc)
{
    uint8_t *p;
    uint64_t id = wlog_next_lsn(wal_log(w));
    size_t n = make_add(&p, id, body_len);
    size_t head = n - body_len;
    struct walrec_piece pcs[2] = {{p, head}, {p + head, body_len}};
    int r = wlog_append(wal_log(w), WALREC_ADD, pcs, 2, lsn, loc);
    free(p);
    return r;
}

static int append_done(struct wal *w, const uint64_t *ids, uint32_t n, struct wlog_loc *loc)
{
    uint8_t buf[4 + 8 * 64];
    struct walrec_piece pc = {buf, walrec_done_encode(buf, ids, n)};
    return wlog_append(wal_log(w), WALREC_DONE, &pc, 1, NULL, loc);
}

/* ---- replay collector -------------------------------------------------- */

struct rec {
    uint64_t lsn;
    uint8_t type;
    uint64_t msg_id;   /* ADD */
    uint32_t ndone;    /* DONE */
    uint64_t done0;
    struct wlog_loc loc;
};

struct coll {
    struct rec *v;
    size_t n, cap;
    int bad_payloads;
    size_t fail_at;       /* return -1234 at this record (1-based), 0 = never */
    struct wal **wp;      /* for live accounting during replay */
    int track_live;
};

static int collect(void *arg, const struct walrec_hdr *h, const uint8_t *payload,
                   struct wlog_loc loc)
{
    struct coll *c = arg;
    struct rec r;

    memset(&r, 0, sizeof(r));
    r.lsn = h->lsn;
    r.type = h->type;
    r.loc = loc;
    if (loc.len != WALREC_HDR_SIZE + h->len)
        c->bad_payloads++;
    if (h->type == WALREC_ADD) {
        if (!add_ok(payload, h->len, &r.msg_id))
            c->bad_payloads++;
        if (c->track_live)
            wlog_live(wal_log(*c->wp), loc, 1);
    } else if (h->type == WALREC_DONE) {
        if (walrec_done_decode(payload, h->len, &r.ndone) != (int)h->len)
            c->bad_payloads++;
        else if (r.ndone)
            r.done0 = walrec_done_id(payload, 0);
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->v = realloc(c->v, c->cap * sizeof(*c->v));
    }
    c->v[c->n++] = r;
    if (c->fail_at && c->n == c->fail_at)
        return -1234;
    return 0;
}

static void coll_reset(struct coll *c)
{
    free(c->v);
    memset(c, 0, sizeof(*c));
}

static int wopen(struct wal **w, const char *dir, uint64_t seg_bytes, struct coll *c)
{
    struct wal_opts o = {.dir = dir, .segment_bytes = seg_bytes, .no_sync = 1};
    if (c)
        coll_reset(c);
    return wal_open(w, &o, collect, c ? (void *)c : (void *)&(struct coll){0});
}

static int wopen_quiet_coll(struct wal **w, const char *dir, uint64_t seg_bytes)
{
    struct coll c = {0};
    int r = wopen(w, dir, seg_bytes, &c);
    coll_reset(&c);
    return r;
}

/* Records 1..n in LSN order with ADD payloads intact. */
static int coll_is_prefix(const struct coll *c, size_t n)
{
    if (c->n != n || c->bad_payloads)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (c->v[i].lsn != i + 1)
            return 0;
    return 1;
}

/* ---- tests ------------------------------------------------------------- */

static void test_basic(void)
{
    const char *dir = tdir("basic");
    struct wal *w;
    struct coll c = {0};
    struct wlog_loc locs[200];
    uint64_t lsn, id1;
    uint64_t ids[3] = {2, 4, 6};

    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    CHECK(c.n == 0, "empty log replays nothing");
    CHECK(wlog_next_lsn(wal_log(w)) == 1, "first lsn %llu", (unsigned long long)
          wlog_next_lsn(wal_log(w)));
    id1 = wlog_id(wal_log(w));
    CHECK(id1 != 0, "wal id");
    CHECK(exists(seg_path(dir, 1)) && fsize(seg_path(dir, 1)) == WALREC_SEGHDR_SIZE,
          "segment 1 created with its header");
    for (int i = 0; i < 150; i++) {
        CHECK_RC(append_add(w, (uint32_t)(i * 13 % 700), &lsn, &locs[i]), 0);
        CHECK(lsn == (uint64_t)i + 1, "lsn");
        if (i % 37 == 36)
            CHECK_RC(wal_commit(w), 0);
    }
    CHECK_RC(append_done(w, ids, 3, &locs[150]), 0);
    CHECK(wlog_pending(wal_log(w)) > 0, "pending");
    CHECK_RC(wal_commit(w), 0);
    CHECK(wlog_pending(wal_log(w)) == 0, "nothing pending after commit");
    /* Appended but never committed: gone after close. */
    CHECK_RC(append_add(w, 10, NULL, NULL), 0);
    wlog_close(wal_log(w));

    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    CHECK(coll_is_prefix(&c, 151), "replayed %zu records, bad %d", c.n, c.bad_payloads);
    for (size_t i = 0; i < c.n && i < 151; i++) {
        CHECK(c.v[i].loc.seg == locs[i].seg && c.v[i].loc.off == locs[i].off &&
                  c.v[i].loc.len == locs[i].len,
              "loc of record %zu", i);
        if (i < 150)
            CHECK(c.v[i].type == WALREC_ADD && c.v[i].msg_id == i + 1, "ADD %zu", i);
    }
    CHECK(c.n >= 151 && c.v[150].type == WALREC_DONE && c.v[150].ndone == 3 &&
              c.v[150].done0 == 2,
          "DONE replayed");
    CHECK(wlog_next_lsn(wal_log(w)) == 152, "next lsn %llu", (unsigned long long)
          wlog_next_lsn(wal_log(w)));
    CHECK(wlog_id(wal_log(w)) == id1, "wal id stable");
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    CHECK(st.durable_lsn == 151 && st.truncated_bytes == 0 && st.segments == 1, "stats");

    /* Appends continue in the same segment after reopen. */
    CHECK_RC(append_add(w, 5, &lsn, NULL), 0);
    CHECK(lsn == 152, "lsn continues");
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));
    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    CHECK(coll_is_prefix(&c, 152), "after second session: %zu", c.n);
    wlog_close(wal_log(w));

    /* Bad arguments. */
    {
        struct wal_opts o = {.dir = dir, .segment_bytes = 100, .no_sync = 1};
        struct wal *w2 = (struct wal *)1;
        CHECK_RC(wal_open(&w2, &o, collect, &c), -EINVAL);
        CHECK(w2 == NULL, "*out cleared on failure");
    }
    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    {
        struct walrec_piece big = {"", (size_t)WALREC_MAX_PAYLOAD + 1};
        CHECK_RC(wlog_append(wal_log(w), WALREC_ADD, &big, 1, NULL, NULL), WLOG_ETOOBIG);
        CHECK_RC(wlog_append(wal_log(w), 0, NULL, 0, NULL, NULL), -EINVAL);
    }
    wlog_close(wal_log(w));
    coll_reset(&c);
}

static void test_sync(void)
{
    const char *dir = tdir("sync");
    struct wal_opts o = {.dir = dir, .segment_bytes = 8192, .no_sync = 0};
    struct coll c = {0};
    struct wal *w;

    CHECK_RC(wal_open(&w, &o, collect, &c), 0);
    for (int i = 0; i < 100; i++) {
        CHECK_RC(append_add(w, 100, NULL, NULL), 0);
        if (i % 10 == 9)
            CHECK_RC(wal_commit(w), 0);
    }
    wlog_close(wal_log(w));
    coll_reset(&c);
    CHECK_RC(wal_open(&w, &o, collect, &c), 0);
    CHECK(coll_is_prefix(&c, 100), "fdatasync'ed log replays: %zu", c.n);
    CHECK(count_segments(dir) > 1, "rolled");
    wlog_close(wal_log(w));
    coll_reset(&c);
}

/*
 * Prewritten zeros (wal.c, issue 41): the active segment's file stays at
 * least half of prewrite_bytes ahead of its records, so commits change no
 * file size; completed segments are cut back to their records; a reopen
 * (after a crash: nothing cut) reads the zeros as the end and cuts them.
 */
static void test_prewrite(void)
{
    const char *dir = tdir("prewrite");
    const uint64_t segb = 64 * 1024, pre = 16 * 1024;
    struct wal_opts o = {.dir = dir, .segment_bytes = segb, .no_sync = 0, .prewrite_bytes = pre};
    struct coll c = {0};
    struct wlog_loc loc;
    struct wal *w;
    int grew = 0, n = 0;

    CHECK_RC(wal_open(&w, &o, collect, &c), 0);
    long long last = 0;
    for (int i = 0; i < 40; i++, n++) {
        CHECK_RC(append_add(w, 100, NULL, &loc), 0);
        CHECK_RC(wal_commit(w), 0);
        long long sz = fsize(seg_path(dir, 1)), end = (long long)(loc.off + loc.len);
        CHECK(sz >= end + (long long)pre / 2 && sz % 4096 == 0,
              "commit %d: file %lld, records to %lld", i, sz, end);
        grew += sz != last;
        last = sz;
    }
    CHECK(grew <= 3, "the file grew at %d of 40 commits (a chunk at a time)", grew);
    /* on to a second segment: the first is cut back to its records */
    while (loc.seg == 1) {
        CHECK_RC(append_add(w, 100, NULL, &loc), 0);
        CHECK_RC(wal_commit(w), 0);
        n++;
    }
    CHECK(count_segments(dir) == 2, "rolled");
    long long s1 = fsize(seg_path(dir, 1));
    CHECK(s1 < (long long)segb && s1 % 4096 != 0 && s1 > 1024, "segment 1 cut to its records: %lld",
          s1);
    CHECK(fsize(seg_path(dir, 2)) >= (long long)(loc.off + loc.len + pre / 2), "segment 2 ahead");
    /* closed as a crash leaves it (close cuts nothing): a reopen ends the records at the zeros */
    wlog_close(wal_log(w));
    coll_reset(&c);
    CHECK_RC(wal_open(&w, &o, collect, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n), "all %d records replayed: %zu", n, c.n);
    CHECK(fsize(seg_path(dir, 2)) == (long long)(loc.off + loc.len), "segment 2's zeros cut");
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    CHECK_U64(st.truncated_bytes, 0);
    /* and writing goes on where the records end, ahead again after the next commit */
    CHECK_RC(append_add(w, 100, NULL, &loc), 0);
    CHECK_RC(wal_commit(w), 0);
    CHECK(fsize(seg_path(dir, 2)) >= (long long)(loc.off + loc.len + pre / 2), "ahead again");
    wlog_close(wal_log(w));
    coll_reset(&c);
    CHECK_RC(wal_open(&w, &o, collect, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n + 1), "%d records replayed: %zu", n + 1, c.n);
    wlog_close(wal_log(w));
    coll_reset(&c);
}

static void test_roll(void)
{
    const char *dir = tdir("roll");
    struct wal *w;
    struct coll c = {0};
    struct wlog_loc loc, big_loc, after_big;
    const uint64_t segb = 4096;

    CHECK_RC(wopen(&w, dir, segb, &c), 0);
    for (int i = 0; i < 300; i++) {
        CHECK_RC(append_add(w, (uint32_t)(50 + i % 200), NULL, &loc), 0);
        CHECK(loc.off + loc.len <= segb, "record fits its segment");
        if (i % 11 == 0)
            CHECK_RC(wal_commit(w), 0);
    }
    /* Several rolls without a commit: files appear only at commit. */
    int before = count_segments(dir);
    for (int i = 0; i < 60; i++)
        CHECK_RC(append_add(w, 200, NULL, &loc), 0);
    CHECK(count_segments(dir) == before, "no file before commit (%d -> %d)", before,
          count_segments(dir));
    CHECK_RC(wal_commit(w), 0);
    CHECK(count_segments(dir) == (int)loc.seg, "files after commit: %d, last seg %u",
          count_segments(dir), loc.seg);
    /* A record bigger than a segment gets a segment of its own. */
    CHECK_RC(append_add(w, 20000, NULL, &big_loc), 0);
    CHECK_RC(append_add(w, 10, NULL, &after_big), 0);
    CHECK(big_loc.seg == loc.seg + 1 && big_loc.off == WALREC_SEGHDR_SIZE, "big record alone");
    CHECK(after_big.seg == big_loc.seg + 1 && after_big.off == WALREC_SEGHDR_SIZE,
          "next record after big one in a new segment");
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));

    for (uint64_t s = 1; s < big_loc.seg; s++)
        CHECK(fsize(seg_path(dir, s)) <= (long long)segb, "segment %llu size %lld",
              (unsigned long long)s, fsize(seg_path(dir, s)));
    CHECK_RC(wopen(&w, dir, segb, &c), 0);
    CHECK(coll_is_prefix(&c, 362), "replayed %zu bad %d", c.n, c.bad_payloads);

    /* A big record when the empty active segment is the only one also stays whole. */
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    CHECK_RC(wlog_read(wal_log(w), big_loc, &b, &h, &p), 0);
    CHECK(h.type == WALREC_ADD && add_ok(p, h.len, NULL), "big record reads back");
    free(b.p);
    wlog_close(wal_log(w));
    coll_reset(&c);
}

/* Build a log of n ADD records in one segment; return the locs. */
static void build(const char *dir, int n, uint64_t segb, struct wlog_loc *locs, int commit_every)
{
    struct wal *w;
    CHECK_RC(wopen_quiet_coll(&w, dir, segb), 0);
    for (int i = 0; i < n; i++) {
        CHECK_RC(append_add(w, (uint32_t)(30 + (i * 37) % 150), NULL, &locs[i]), 0);
        if (commit_every && i % commit_every == commit_every - 1)
            CHECK_RC(wal_commit(w), 0);
    }
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));
}

static void copy_file(const char *from, const char *to)
{
    long long n = fsize(from);
    char *b = malloc((size_t)n + 1);
    file_pread(from, b, (size_t)n, 0);
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, b, (size_t)n) != n)
        perror("copy");
    if (fd >= 0)
        close(fd);
    free(b);
}

static void test_torn_tail(void)
{
    const char *dir = tdir("torn");
    char work[300];
    struct wlog_loc locs[40];
    struct coll c = {0};
    struct wal *w;
    const int n = 40;
    expect_error_lines();

    build(dir, n, 0, locs, 5);
    snprintf(work, sizeof(work), "%s/work", base);

    /* Cut at every byte of the last three records: the records before the cut survive. */
    uint32_t from = locs[n - 3].off, end = locs[n - 1].off + locs[n - 1].len;
    for (uint32_t cut = from; cut < end; cut++) {
        int whole = 0;
        tk_rm_rf(work);
        mkdir(work, 0755);
        copy_file(seg_path(dir, 1), seg_path(work, 1));
        file_truncate(seg_path(work, 1), cut);
        for (int i = 0; i < n; i++)
            whole += locs[i].off + locs[i].len <= cut;
        CHECK_RC(wopen(&w, work, 0, &c), 0);
        if (!w)
            continue;
        CHECK(coll_is_prefix(&c, (size_t)whole), "cut at %u: %zu records, want %d", cut, c.n,
              whole);
        CHECK(fsize(seg_path(work, 1)) == locs[whole - 1].off + locs[whole - 1].len,
              "cut at %u: file truncated to the last whole record", cut);
        struct wlog_stats st;
        wlog_stats(wal_log(w), &st);
        CHECK(st.truncated_bytes == cut - (locs[whole - 1].off + locs[whole - 1].len),
              "truncated_bytes %llu", (unsigned long long)st.truncated_bytes);
        /* The log goes on: append, commit, reopen. */
        CHECK_RC(append_add(w, 33, NULL, NULL), 0);
        CHECK_RC(wal_commit(w), 0);
        wlog_close(wal_log(w));
        CHECK_RC(wopen(&w, work, 0, &c), 0);
        CHECK(coll_is_prefix(&c, (size_t)whole + 1), "cut at %u then append: %zu", cut, c.n);
        wlog_close(wal_log(w));
    }

    /* Garbage, zeros, a lone partial header after the last committed record. */
    static const struct {
        const char *what;
        size_t n;
        int fill; /* -1 random */
    } tails[] = {{"zeros", 5000, 0}, {"random", 3000, -1}, {"ones", 100, 0xff},
                 {"short header", 10, -2}, {"one zero byte", 1, 0}};
    for (size_t t = 0; t < sizeof(tails) / sizeof(tails[0]); t++) {
        uint8_t junk[5000];
        uint64_t x = 88172645463325252ull;
        for (size_t i = 0; i < tails[t].n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            junk[i] = tails[t].fill == -1 ? (uint8_t)x : (uint8_t)tails[t].fill;
        }
        if (tails[t].fill == -2) { /* the start of a plausible header: len, ADD, zeros */
            memset(junk, 0, sizeof(junk));
            junk[0] = 100;
            junk[4] = WALREC_ADD;
        }
        tk_rm_rf(work);
        mkdir(work, 0755);
        copy_file(seg_path(dir, 1), seg_path(work, 1));
        file_append(seg_path(work, 1), junk, tails[t].n);
        CHECK_RC(wopen(&w, work, 0, &c), 0);
        CHECK(coll_is_prefix(&c, (size_t)n), "tail %s: %zu records", tails[t].what, c.n);
        CHECK(fsize(seg_path(work, 1)) == locs[n - 1].off + locs[n - 1].len,
              "tail %s cut", tails[t].what);
        wlog_close(wal_log(w));
    }

    /* A flipped bit in the very last record looks like a torn write: cut. */
    tk_rm_rf(work);
    mkdir(work, 0755);
    copy_file(seg_path(dir, 1), seg_path(work, 1));
    flip_bit(seg_path(work, 1), locs[n - 1].off + 30, 3);
    CHECK_RC(wopen(&w, work, 0, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n - 1), "bad last record cut: %zu", c.n);
    wlog_close(wal_log(w));
    tk_rm_rf(work);
    coll_reset(&c);
}

static void test_corrupt(void)
{
    const char *dir = tdir("corrupt");
    char work[300];
    struct wlog_loc locs[400];
    struct coll c = {0};
    struct wal *w;
    const uint64_t segb = 4096;
    int n = 0, nseg;
    expect_error_lines();

    /* About 17 segments, the newest holding 10 records. */
    CHECK_RC(wopen_quiet_coll(&w, dir, segb), 0);
    for (n = 0; n < 400; n++) {
        CHECK_RC(append_add(w, (uint32_t)(30 + (n * 37) % 150), NULL, &locs[n]), 0);
        if (n % 7 == 6)
            CHECK_RC(wal_commit(w), 0);
        if (n >= 300 && n >= 10 && locs[n - 9].seg == locs[n].seg) {
            n++;
            break;
        }
    }
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));
    nseg = (int)locs[n - 1].seg;
    CHECK(nseg >= 4, "several segments: %d", nseg);
    snprintf(work, sizeof(work), "%s/work", base);

#define FRESH()                                                                            \
    do {                                                                                   \
        tk_rm_rf(work);                                                                       \
        mkdir(work, 0755);                                                                 \
        for (int s_ = 1; s_ <= nseg; s_++)                                                 \
            copy_file(seg_path(dir, (uint64_t)s_), seg_path(work, (uint64_t)s_));          \
    } while (0)

    FRESH();
    CHECK_RC(wopen(&w, work, segb, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n), "intact copy replays: %zu", c.n);
    wlog_close(wal_log(w));

    /* A flipped bit in a middle record of the newest segment. */
    int mid = n - 1;
    while (locs[mid - 1].seg == locs[n - 1].seg)
        mid--;
    mid = (mid + n - 1) / 2; /* halfway through the newest segment */
    CHECK(locs[mid].seg == (uint32_t)nseg && mid < n - 1, "middle record of newest segment");
    for (int field = 0; field < 3; field++) {
        FRESH();
        long long off = locs[mid].off + (field == 0 ? 2 : field == 1 ? 9 : 60);
        flip_bit(seg_path(work, (uint64_t)nseg), off, 1);
        CHECK_RC(wopen(&w, work, segb, &c), WLOG_ECORRUPT);
        CHECK(w == NULL, "no log on error");
    }

    /* A flipped bit anywhere in an older segment, even its last record. */
    for (int s = 1; s < nseg; s++) {
        int last = 0;
        for (int i = 0; i < n; i++)
            if (locs[i].seg == (uint32_t)s)
                last = i;
        FRESH();
        flip_bit(seg_path(work, (uint64_t)s), locs[last].off + locs[last].len - 1, 0);
        CHECK_RC(wopen(&w, work, segb, &c), WLOG_ECORRUPT);
    }
    /* An older segment cut short. */
    FRESH();
    file_truncate(seg_path(work, 2), fsize(seg_path(work, 2)) - 5);
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_ECORRUPT);
    /* Zeros after an older segment's records: its prewritten tail (wal.c), left, no loss. */
    FRESH();
    CHECK_RC(wopen(&w, work, segb, &c), 0);
    size_t before = c.n;
    wlog_close(wal_log(w));
    w = NULL;
    FRESH();
    long long was = fsize(seg_path(work, 2));
    file_append(seg_path(work, 2), "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 26);
    CHECK_RC(wopen(&w, work, segb, &c), 0);
    CHECK(c.n == before && fsize(seg_path(work, 2)) == was + 26, "older zeros: %zu records of %zu", c.n,
          before);
    wlog_close(wal_log(w));
    w = NULL;
    /* ... but zeros in place of its last record: the next segment's LSN gap tells. */
    FRESH();
    {
        int last2 = 0;
        for (int i = 0; i < n; i++)
            if (locs[i].seg == 2u)
                last2 = i;
        zero_range(seg_path(work, 2), locs[last2].off, locs[last2].len);
    }
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_ECORRUPT);
    /* A missing middle segment. */
    FRESH();
    unlink(seg_path(work, 2));
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_ECORRUPT);
    /* Missing oldest segments are fine (that is how space is reclaimed). */
    FRESH();
    unlink(seg_path(work, 1));
    CHECK_RC(wopen(&w, work, segb, &c), 0);
    {
        int first2 = 0;
        while (locs[first2].seg == 1)
            first2++;
        CHECK(c.n == (size_t)(n - first2) && c.v[0].lsn == (uint64_t)first2 + 1,
              "replay starts at segment 2's base lsn");
    }
    wlog_close(wal_log(w));
    /* A bad header in an older segment, or in a newest one that holds records. */
    FRESH();
    flip_bit(seg_path(work, 2), 20, 0);
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_EFORMAT);
    FRESH();
    flip_bit(seg_path(work, (uint64_t)nseg), 13, 0);
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_EFORMAT);
    /* A segment from another log. */
    FRESH();
    {
        char other[300];
        struct wlog_loc ol[2];
        snprintf(other, sizeof(other), "%s/other", base);
        build(other, 2, segb, ol, 0);
        copy_file(seg_path(other, 1), seg_path(work, (uint64_t)nseg + 1));
        tk_rm_rf(other);
    }
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_EFORMAT);
    /* A file name that is not a segment's. */
    FRESH();
    file_append(tdir("work/12.wal"), "x", 1);
    CHECK_RC(wopen(&w, work, segb, &c), WLOG_EFORMAT);
    /* Other files are ignored. */
    FRESH();
    file_append(tdir("work/notes.txt"), "x", 1);
    CHECK_RC(wopen(&w, work, segb, &c), 0);
    wlog_close(wal_log(w));

    /* A newest segment whose header never made it to disk is deleted. */
    for (int len = 0; len <= WALREC_SEGHDR_SIZE; len += 8) {
        uint8_t hdr[WALREC_SEGHDR_SIZE];
        FRESH();
        file_pread(seg_path(work, (uint64_t)nseg), hdr, sizeof(hdr), 0);
        hdr[len < WALREC_SEGHDR_SIZE ? len : 52] ^= 0x40; /* damage inside what is written */
        int fd = open(seg_path(work, (uint64_t)nseg + 1), O_WRONLY | O_CREAT, 0644);
        if (len && write(fd, hdr, (size_t)len) != len)
            perror("write");
        close(fd);
        CHECK_RC(wopen(&w, work, segb, &c), 0);
        CHECK(coll_is_prefix(&c, (size_t)n), "torn header len %d: %zu records", len, c.n);
        CHECK(!exists(seg_path(work, (uint64_t)nseg + 1)), "torn header len %d: deleted", len);
        /* The previous segment is writable again. */
        CHECK_RC(append_add(w, 10, NULL, NULL), 0);
        CHECK_RC(wal_commit(w), 0);
        wlog_close(wal_log(w));
        CHECK_RC(wopen(&w, work, segb, &c), 0);
        CHECK(coll_is_prefix(&c, (size_t)n + 1), "after torn header: %zu", c.n);
        wlog_close(wal_log(w));
    }

    /* A replay callback error stops wal_open with that code. */
    FRESH();
    coll_reset(&c);
    c.fail_at = 17;
    {
        struct wal_opts o = {.dir = work, .segment_bytes = segb, .no_sync = 1};
        CHECK_RC(wal_open(&w, &o, collect, &c), -1234);
        CHECK(c.n == 17, "stopped at 17: %zu", c.n);
    }
    tk_rm_rf(work);
    coll_reset(&c);
#undef FRESH
}

/* Records copied from another segment (another salt) into the tail never replay. */
static void test_stale_salt(void)
{
    const char *dir = tdir("salt");
    struct wlog_loc locs[200];
    struct coll c = {0};
    struct wal *w;
    const uint64_t segb = 4096;
    uint8_t h1[WALREC_SEGHDR_SIZE], hl[WALREC_SEGHDR_SIZE];
    struct walrec_seghdr s1, sl;
    int n = 60, nseg;
    expect_error_lines();

    build(dir, n, segb, locs, 3);
    nseg = (int)locs[n - 1].seg;
    CHECK(nseg >= 2, "two segments at least");
    file_pread(seg_path(dir, 1), h1, sizeof(h1), 0);
    file_pread(seg_path(dir, (uint64_t)nseg), hl, sizeof(hl), 0);
    CHECK(walrec_seghdr_decode(h1, sizeof(h1), &s1) > 0 &&
              walrec_seghdr_decode(hl, sizeof(hl), &sl) > 0,
          "headers");
    CHECK(s1.salt != sl.salt, "fresh salt per segment");
    int firstl = 0;
    while (locs[firstl].seg != (uint32_t)nseg)
        firstl++;
    CHECK(s1.wal_id == sl.wal_id && sl.base_lsn == (uint64_t)firstl + 1,
          "base_lsn of the newest segment");

    /* (a) A verbatim copy of a record of segment 1. */
    uint8_t rec[512];
    file_pread(seg_path(dir, 1), rec, locs[0].len, locs[0].off);
    file_append(seg_path(dir, (uint64_t)nseg), rec, locs[0].len);
    CHECK_RC(wopen(&w, dir, segb, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n), "copied record not replayed: %zu", c.n);
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    CHECK(st.truncated_bytes == locs[0].len, "copied record cut");
    wlog_close(wal_log(w));

    /* (b) Worse: a record with exactly the next LSN, but sealed with segment 1's salt. */
    uint8_t *p;
    size_t plen = make_add(&p, (uint64_t)n + 1, 40);
    struct walrec_hdr hh = {(uint32_t)plen, WALREC_ADD, 0, (uint64_t)n + 1, 0};
    struct walrec_piece pc = {p, plen};
    walrec_hdr_encode(rec, &hh, s1.salt, &pc, 1);
    memcpy(rec + WALREC_HDR_SIZE, p, plen);
    file_append(seg_path(dir, (uint64_t)nseg), rec, WALREC_HDR_SIZE + plen);
    CHECK_RC(wopen(&w, dir, segb, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n), "stale-salt record with the right lsn not replayed: %zu",
          c.n);
    wlog_close(wal_log(w));
    /* The same record sealed with the right salt does replay (the test is sound). */
    walrec_hdr_encode(rec, &hh, sl.salt, &pc, 1);
    file_append(seg_path(dir, (uint64_t)nseg), rec, WALREC_HDR_SIZE + plen);
    CHECK_RC(wopen(&w, dir, segb, &c), 0);
    CHECK(coll_is_prefix(&c, (size_t)n + 1), "right salt replays: %zu", c.n);
    wlog_close(wal_log(w));
    free(p);
    coll_reset(&c);
}

static void test_read(void)
{
    const char *dir = tdir("read");
    struct wal *w;
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    struct wlog_loc l1, l2, l3, ld;
    uint64_t lsn1, id;
    uint64_t ids[2] = {1, 2};
    expect_error_lines();

    CHECK_RC(wopen_quiet_coll(&w, dir, 4096), 0);
    CHECK_RC(append_add(w, 100, &lsn1, &l1), 0);
    CHECK_RC(append_done(w, ids, 2, &ld), 0);
    /* Still buffered. */
    CHECK_RC(wlog_read(wal_log(w), l1, &b, &h, &p), 0);
    CHECK(h.type == WALREC_ADD && h.lsn == lsn1 && add_ok(p, h.len, &id) && id == lsn1,
          "buffered read");
    CHECK_RC(wlog_read(wal_log(w), ld, &b, &h, &p), 0);
    CHECK(h.type == WALREC_DONE && walrec_done_id(p, 1) == 2, "buffered DONE read");
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_read(wal_log(w), l1, &b, &h, &p), 0);
    CHECK(h.lsn == lsn1 && add_ok(p, h.len, NULL), "committed read");
    /* Across a roll with nothing committed yet: old and new segment both buffered. */
    for (int i = 0; i < 40; i++)
        CHECK_RC(append_add(w, 150, NULL, &l2), 0);
    CHECK(l2.seg > l1.seg, "rolled");
    CHECK_RC(append_add(w, 3000, NULL, &l3), 0);
    CHECK_RC(wlog_read(wal_log(w), l2, &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, NULL), "buffered read in uncreated segment");
    CHECK_RC(wlog_read(wal_log(w), l3, &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, NULL) && b.cap >= l3.len, "big buffered read grows the buffer");
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_read(wal_log(w), l2, &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, NULL), "read after commit");
    /* Bad locations. */
    struct wlog_loc bad = l1;
    bad.off += 1;
    CHECK_RC(wlog_read(wal_log(w), bad, &b, &h, &p), WLOG_ECORRUPT);
    bad = l1;
    bad.len -= 1;
    CHECK_RC(wlog_read(wal_log(w), bad, &b, &h, &p), WLOG_ECORRUPT);
    bad = l3;
    bad.off = 1000000;
    CHECK_RC(wlog_read(wal_log(w), bad, &b, &h, &p), WLOG_ECORRUPT);
    bad.seg = 999;
    CHECK_RC(wlog_read(wal_log(w), bad, &b, &h, &p), -ENOENT);
    wlog_close(wal_log(w));

    /* After reopen, and with the bytes damaged on disk. */
    CHECK_RC(wopen_quiet_coll(&w, dir, 4096), 0);
    CHECK_RC(wlog_read(wal_log(w), l1, &b, &h, &p), 0);
    CHECK(h.lsn == lsn1, "read after reopen");
    flip_bit(seg_path(dir, l1.seg), l1.off + 50, 2);
    wal_test_drop_readahead(w); /* else the window read before the damage answers */
    CHECK_RC(wlog_read(wal_log(w), l1, &b, &h, &p), WLOG_ECORRUPT);
    wlog_close(wal_log(w));
    free(b.p);
}

/*
 * The read-ahead window adapts: reads that stride through the log (each
 * millisecond's due messages written seconds apart) shrink it until they
 * are single preads; reads in log order grow it back to 128 KiB. Every
 * read returns its own record throughout.
 */
static void test_readahead_adapts(void)
{
    const char *dir = tdir("readahead");
    enum { N = 4000, STRIDE = 100 };
    struct wal *w;
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    struct wlog_loc *loc = calloc(N, sizeof(*loc));
    uint64_t *lsn = calloc(N, sizeof(*lsn)), id;

    CHECK_RC(wopen_quiet_coll(&w, dir, 64u << 20), 0);
    for (int i = 0; i < N; i++)
        CHECK_RC(append_add(w, 300, &lsn[i], &loc[i]), 0);
    CHECK_RC(wal_commit(w), 0);
    CHECK(loc[N - 1].seg == loc[0].seg, "one segment");
    /* strided: every STRIDE-th record, pass after pass (~34 KiB apart) */
    for (int pass = 0; pass < STRIDE; pass++)
        for (int i = pass; i < N; i += STRIDE) {
            CHECK_RC(wlog_read(wal_log(w), loc[i], &b, &h, &p), 0);
            CHECK(h.lsn == lsn[i] && add_ok(p, h.len, &id) && id == lsn[i], "strided read %d", i);
        }
    size_t strided = wal_test_readahead_size(w);
    CHECK(strided > 0 && strided <= (32u << 10), "window after strided reads: %zu", strided);
    /* in log order: back to the full window */
    for (int i = 0; i < N; i++) {
        CHECK_RC(wlog_read(wal_log(w), loc[i], &b, &h, &p), 0);
        CHECK(h.lsn == lsn[i] && add_ok(p, h.len, NULL), "sequential read %d", i);
    }
    CHECK(wal_test_readahead_size(w) == (128u << 10), "window after sequential reads: %zu",
          wal_test_readahead_size(w));
    wlog_close(wal_log(w));
    free(b.p);
    free(loc);
    free(lsn);
}

/* ---- space ------------------------------------------------------------- */

/* A model of the owner: msg_id -> current loc, live or not. */
struct model {
    struct wal **wp;
    struct wlog_loc *loc; /* by msg_id */
    uint8_t *live;
    size_t cap;
    size_t moved_calls, is_live_calls;
};

static int m_is_live(void *arg, uint64_t id, struct wlog_loc loc)
{
    struct model *m = arg;
    m->is_live_calls++;
    return id < m->cap && m->live[id] && m->loc[id].seg == loc.seg && m->loc[id].off == loc.off;
}

static void m_moved(void *arg, uint64_t id, struct wlog_loc to)
{
    struct model *m = arg;
    m->moved_calls++;
    if (id < m->cap)
        m->loc[id] = to;
}

/* Replay into a model the way the engine does it. */
static int m_replay(void *arg, const struct walrec_hdr *h, const uint8_t *payload,
                    struct wlog_loc loc)
{
    struct model *m = arg;
    struct walrec_add a;
    uint32_t n;

    if (h->type == WALREC_ADD) {
        if (walrec_add_peek(payload, h->len, &a) < 0 || a.msg_id >= m->cap)
            return -1;
        if (m->live[a.msg_id])
            wlog_live(wal_log(*m->wp), m->loc[a.msg_id], 0);
        m->live[a.msg_id] = 1;
        m->loc[a.msg_id] = loc;
        wlog_live(wal_log(*m->wp), loc, 1);
    } else if (h->type == WALREC_DONE) {
        if (walrec_done_decode(payload, h->len, &n) < 0)
            return -1;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t id = walrec_done_id(payload, i);
            if (id < m->cap && m->live[id]) {
                m->live[id] = 0;
                wlog_live(wal_log(*m->wp), m->loc[id], 0);
            }
        }
    }
    return 0;
}

static void model_init(struct model *m, struct wal **wp, size_t cap)
{
    memset(m, 0, sizeof(*m));
    m->wp = wp;
    m->cap = cap;
    m->loc = calloc(cap, sizeof(*m->loc));
    m->live = calloc(cap, 1);
}

static void model_free(struct model *m)
{
    free(m->loc);
    free(m->live);
}

static void add_live(struct wal *w, struct model *m, uint32_t body_len)
{
    uint64_t lsn;
    struct wlog_loc loc;
    CHECK_RC(append_add(w, body_len, &lsn, &loc), 0);
    m->live[lsn] = 1;
    m->loc[lsn] = loc;
    wlog_live(wal_log(w), loc, 1);
}

static void kill_ids(struct wal *w, struct model *m, const uint64_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        m->live[ids[i]] = 0;
        wlog_live(wal_log(w), m->loc[ids[i]], 0);
    }
    CHECK_RC(append_done(w, ids, n, NULL), 0);
}

/* Messages killed 64 to a DONE record: kill_one() gathers, kill_flush() writes the rest. */
struct kill_batch {
    uint64_t ids[64];
    uint32_t k;
};

static void kill_flush(struct wal *w, struct model *m, struct kill_batch *kb)
{
    if (kb->k)
        kill_ids(w, m, kb->ids, kb->k);
    kb->k = 0;
}

static void kill_one(struct wal *w, struct model *m, struct kill_batch *kb, uint64_t id)
{
    kb->ids[kb->k++] = id;
    if (kb->k == 64)
        kill_flush(w, m, kb);
}

/* Kill every live message with an id up to last. */
static void kill_live_upto(struct wal *w, struct model *m, uint64_t last)
{
    struct kill_batch kb = {.k = 0};

    for (uint64_t id = 1; id <= last && id < m->cap; id++)
        if (m->live[id])
            kill_one(w, m, &kb, id);
    kill_flush(w, m, &kb);
}

/* Kill messages first..last except every keep_every-th; returns how many stay live. */
static size_t kill_all_but(struct wal *w, struct model *m, uint64_t first, uint64_t last,
                           uint64_t keep_every)
{
    struct kill_batch kb = {.k = 0};
    size_t kept = 0;

    for (uint64_t id = first; id <= last; id++) {
        if (id % keep_every == 0)
            kept++;
        else
            kill_one(w, m, &kb, id);
    }
    kill_flush(w, m, &kb);
    return kept;
}

static void test_maintain_delete(void)
{
    const char *dir = tdir("maint");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 4096, .no_sync = 1};
    struct wlog_stats st;
    uint64_t next;

    model_init(&m, &w, 4096);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    for (int i = 0; i < 200; i++)
        add_live(w, &m, 150);
    CHECK_RC(wal_commit(w), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.segments >= 8 && st.live_records == 200, "segments %llu live %llu",
          (unsigned long long)st.segments, (unsigned long long)st.live_records);
    uint64_t nseg0 = st.segments;

    /* Nothing dead: nothing deleted; the live head segment stays. */
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    CHECK(exists(seg_path(dir, 1)), "live head kept");

    /* Kill everything in segments 1 and 2 and a bit of 4. */
    uint64_t ids[64];
    uint32_t k = 0;
    for (uint64_t id = 1; id <= 200; id++)
        if (m.loc[id].seg <= 2 || (m.loc[id].seg == 4 && k < 60))
            ids[k++] = id;
    kill_ids(w, &m, ids, k);
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    CHECK(!exists(seg_path(dir, 1)) && !exists(seg_path(dir, 2)), "dead head segments deleted");
    CHECK(exists(seg_path(dir, 3)) && exists(seg_path(dir, 4)), "live segment 3 stops deletion");
    wlog_stats(wal_log(w), &st);
    CHECK(st.segments == nseg0 - 2 && st.deleted_segments == 2, "stats after delete");

    /* Kill everything: every segment but the active one goes. */
    kill_live_upto(w, &m, 200);
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.segments == 1 && st.live_records == 0 && st.live_bytes == 0,
          "only the active segment remains: %llu", (unsigned long long)st.segments);
    CHECK(count_segments(dir) == 1, "one file: %d", count_segments(dir));
    next = wlog_next_lsn(wal_log(w));
    uint64_t id0 = wlog_id(wal_log(w));
    wlog_close(wal_log(w));

    /* LSNs continue after every old segment is gone. */
    memset(m.live, 0, m.cap);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    CHECK(wlog_next_lsn(wal_log(w)) == next, "lsn continues: %llu want %llu",
          (unsigned long long)wlog_next_lsn(wal_log(w)), (unsigned long long)next);
    CHECK(wlog_id(wal_log(w)) == id0, "same log");
    /* Even when the remaining segment holds no record at all. */
    for (int i = 0; i < 30; i++)
        add_live(w, &m, 150);
    k = 0;
    for (uint64_t id = next; id < next + 30; id++)
        ids[k++] = id;
    kill_ids(w, &m, ids, k);
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    next = wlog_next_lsn(wal_log(w));
    wlog_close(wal_log(w));
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    CHECK(wlog_next_lsn(wal_log(w)) == next, "lsn continues again");
    wlog_close(wal_log(w));
    model_free(&m);
}

/* Deleting must wait for a durable successor segment. */
static void test_maintain_waits_for_successor(void)
{
    const char *dir = tdir("succ");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 4096, .no_sync = 1};
    uint64_t ids[64];
    uint32_t k = 0;

    model_init(&m, &w, 4096);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    /* 15 records of 269 bytes fill segment 1 to 4091 of 4096 bytes. */
    for (int i = 0; i < 15; i++)
        add_live(w, &m, 150);
    CHECK(m.loc[15].seg == 1 && m.loc[15].off + m.loc[15].len == 4091, "segment 1 full");
    CHECK_RC(wal_commit(w), 0);
    for (uint64_t id = 1; id <= 15; id++)
        ids[k++] = id;
    kill_ids(w, &m, ids, k); /* the DONE lands in segment 2, not yet created */
    CHECK(!exists(seg_path(dir, 2)), "segment 2 not created before commit");
    int r = wlog_reclaim(wal_log(w), 1 << 20, NULL);
    CHECK(exists(seg_path(dir, 1)), "segment 1 kept while its successor is not on disk");
    CHECK(r == 1, "maintain says work remains: %d", r);
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    CHECK(!exists(seg_path(dir, 1)), "deleted after commit");
    wlog_close(wal_log(w));
    model_free(&m);
}

/*
 * A message dies in memory before the record that ends it (DONE, CANCEL)
 * is committed: its segment must outlive that commit, or a crash between
 * the deletion and the commit loses an ADD whose end the log never got.
 * Found by the simulator (tests/sim, seed 118).
 */
static void test_maintain_waits_for_end_records(void)
{
    const char *dir = tdir("ends");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 4096, .no_sync = 1};
    uint64_t ids[16];
    uint32_t k = 0;

    model_init(&m, &w, 4096);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    for (int i = 0; i < 15; i++) /* segment 1, full */
        add_live(w, &m, 150);
    add_live(w, &m, 150); /* segment 2 */
    CHECK_RC(wal_commit(w), 0);
    CHECK(exists(seg_path(dir, 2)), "segment 2 on disk");
    for (uint64_t id = 1; id <= 15; id++) {
        ids[k++] = id;
        m.live[id] = 0;
        wlog_live(wal_log(w), m.loc[id], 0); /* dead in memory; no DONE appended yet */
    }
    wlog_reclaim(wal_log(w), 1 << 20, NULL);
    CHECK(exists(seg_path(dir, 1)), "segment 1 kept while the records ending its ADDs are not durable");
    CHECK_RC(append_done(w, ids, k, NULL), 0);
    wlog_reclaim(wal_log(w), 1 << 20, NULL);
    CHECK(exists(seg_path(dir, 1)), "segment 1 kept while the DONE is only appended");
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, NULL), 0);
    CHECK(!exists(seg_path(dir, 1)), "deleted once the DONE is durable");
    wlog_close(wal_log(w));
    model_free(&m);
}

static void test_compaction(void)
{
    const char *dir = tdir("compact");
    struct wal *w = NULL;
    struct model m;
    const uint64_t segb = 8192;
    struct wal_opts o = {.dir = dir, .segment_bytes = segb, .no_sync = 1};
    struct wlog_stats st;
    const int n = 1500;
    size_t nlive = 0;

    model_init(&m, &w, 8192);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    /* Every 7th message stays live, the rest is confirmed: lots of garbage in every segment. */
    for (int i = 0; i < n; i++) {
        add_live(w, &m, (uint32_t)(60 + (i * 53) % 300));
        if (i % 50 == 49)
            CHECK_RC(wal_commit(w), 0);
    }
    nlive = kill_all_but(w, &m, 1, (uint64_t)n, 7);
    CHECK_RC(wal_commit(w), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.live_records == nlive, "live %llu want %zu", (unsigned long long)st.live_records,
          nlive);
    CHECK(st.disk_bytes > 2 * st.live_bytes + segb, "policy should trigger");
    uint64_t live_bytes0 = st.live_bytes;

    /* One small step: copies are made, but segment 1 stays until they are committed. */
    int r = wlog_reclaim(wal_log(w), 4096, &(struct wlog_compact_ops){m_is_live, m_moved, &m});
    CHECK(r == 1, "more work: %d", r);
    CHECK(m.moved_calls > 0, "some live records moved");
    CHECK(exists(seg_path(dir, 1)), "segment 1 kept");
    r = wlog_reclaim(wal_log(w), 1 << 20, &(struct wlog_compact_ops){m_is_live, m_moved, &m});
    CHECK(exists(seg_path(dir, 1)), "segment 1 kept until the copies are committed");
    CHECK(wlog_pending(wal_log(w)) > 0, "copies are buffered");
    CHECK_RC(wal_commit(w), 0);

    /* Run it like the event loop would. */
    int rounds = 0;
    do {
        r = wlog_reclaim(wal_log(w), 8192, &(struct wlog_compact_ops){m_is_live, m_moved, &m});
        CHECK(r >= 0, "maintain -> %d", r);
        CHECK_RC(wal_commit(w), 0);
    } while (r == 1 && ++rounds < 10000);
    CHECK(r == 0, "compaction finished after %d rounds", rounds);
    CHECK(!exists(seg_path(dir, 1)), "segment 1 deleted");
    wlog_stats(wal_log(w), &st);
    CHECK(st.live_records == nlive && st.live_bytes == live_bytes0,
          "live accounting moved with the copies: %llu %llu", (unsigned long long)st.live_records,
          (unsigned long long)st.live_bytes);
    CHECK(st.disk_bytes <= 2 * st.live_bytes + segb, "disk %llu <= 2 x live %llu + segment",
          (unsigned long long)st.disk_bytes, (unsigned long long)st.live_bytes);
    CHECK(st.compacted_bytes > 0 && st.deleted_segments > 0, "stats");
    long long on_disk = 0;
    for (uint64_t s = 1; s < 10000; s++)
        if (exists(seg_path(dir, s)))
            on_disk += fsize(seg_path(dir, s));
    CHECK(on_disk == (long long)st.disk_bytes, "files %lld = stats %llu", on_disk,
          (unsigned long long)st.disk_bytes);

    /* Every live message reads back at its new location with its payload. */
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    uint64_t id;
    for (uint64_t i = 1; i <= (uint64_t)n; i++) {
        if (!m.live[i])
            continue;
        CHECK_RC(wlog_read(wal_log(w), m.loc[i], &b, &h, &p), 0);
        CHECK(add_ok(p, h.len, &id) && id == i, "message %llu after compaction",
              (unsigned long long)i);
    }
    struct wlog_loc saved[1501];
    memcpy(saved, m.loc, sizeof(saved));
    wlog_close(wal_log(w));

    /* Reopen: the copies replay with the same ids and payloads, nothing dead comes back. */
    memset(m.live, 0, m.cap);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    size_t live_after = 0;
    for (uint64_t i = 1; i <= (uint64_t)n; i++) {
        CHECK(m.live[i] == (i % 7 == 0), "message %llu liveness after reopen",
              (unsigned long long)i);
        if (!m.live[i])
            continue;
        live_after++;
        CHECK(m.loc[i].seg == saved[i].seg && m.loc[i].off == saved[i].off,
              "message %llu at its copy", (unsigned long long)i);
        CHECK_RC(wlog_read(wal_log(w), m.loc[i], &b, &h, &p), 0);
        CHECK(add_ok(p, h.len, &id) && id == i, "payload of %llu", (unsigned long long)i);
    }
    CHECK(live_after == nlive, "live after reopen %zu", live_after);
    wlog_stats(wal_log(w), &st);
    CHECK(st.live_bytes == live_bytes0, "replayed live bytes");
    wlog_close(wal_log(w));
    free(b.p);
    model_free(&m);
}

/* Records bigger than the replay chunk (4 MiB) and the compaction buffer (1 MiB). */
/* The replication hooks: a tap sees every record, a horizon moves every live one past it. */
struct tapped {
    uint64_t n, next_lsn;
    int out_of_order;
};

static void tap_count(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct tapped *t = arg;
    (void)payload;
    if (t->n && h->lsn != t->next_lsn)
        t->out_of_order++;
    t->next_lsn = h->lsn + 1;
    t->n++;
}

static void test_horizon(void)
{
    const char *dir = tdir("horizon");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 8192, .no_sync = 1};
    struct tapped t = {0};
    uint64_t h = 0;

    model_init(&m, &w, 8192);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    wal_set_tap(w, tap_count, &t);
    /* Every 10th message stays live: far below the 2 x live policy, nothing compacts by itself. */
    for (int i = 0; i < 400; i++)
        add_live(w, &m, 100);
    kill_all_but(w, &m, 1, 400, 10);
    CHECK_RC(wal_commit(w), 0);
    CHECK(t.n == wlog_next_lsn(wal_log(w)) - 1 && !t.out_of_order, "tap saw %llu of %llu records",
          (unsigned long long)t.n, (unsigned long long)(wlog_next_lsn(wal_log(w)) - 1));
    struct wlog_compact_ops ops = {m_is_live, m_moved, &m};
    /*
     * Append without committing, then force: the roll lands behind buffered
     * bytes, and the next commit must still write them (and create the new,
     * empty, segment after them).
     */
    uint64_t x1 = wlog_next_lsn(wal_log(w));
    add_live(w, &m, 100);
    uint64_t x2 = wlog_next_lsn(wal_log(w));
    add_live(w, &m, 100);
    CHECK_RC(wal_force_horizon(w, &h), 0);
    uint64_t pending = wlog_pending(wal_log(w));
    CHECK(pending > 0, "buffered bytes before the commit");
    CHECK_RC(wal_commit(w), 0);
    CHECK(wlog_pending(wal_log(w)) == 0,
          "the commit wrote what was buffered behind the roll: %zu left", wlog_pending(wal_log(w)));
    CHECK(h == wlog_next_lsn(wal_log(w)), "the horizon is the next LSN: %llu",
          (unsigned long long)h);
    CHECK(!wal_horizon_reached(w, h), "live records lie below it");
    uint64_t tapped_before = t.n;
    for (int round = 0; round < 100 && !wal_horizon_reached(w, h); round++) {
        CHECK(wlog_reclaim(wal_log(w), 4096, &ops) >= 0, "maintain");
        CHECK_RC(wal_commit(w), 0);
    }
    CHECK(wal_horizon_reached(w, h), "horizon reached");
    CHECK(t.n - tapped_before >= 40 && !t.out_of_order, "the tap saw the copies: %llu",
          (unsigned long long)(t.n - tapped_before));
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(wlog_reclaim(wal_log(w), 1 << 20, &ops), 0);
    CHECK(wal_first_lsn(w) >= h, "every segment below the horizon deleted: first LSN %llu",
          (unsigned long long)wal_first_lsn(w));
    wlog_close(wal_log(w));
    /* What is left is everything live. */
    memset(m.live, 0, m.cap);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    for (uint64_t id = 10; id <= 400; id += 10)
        CHECK(m.live[id], "message %llu still held after the horizon", (unsigned long long)id);
    CHECK(m.live[x1] && m.live[x2], "the two appended behind the roll are held");
    wlog_close(wal_log(w));

    /* A log created for a rebuild starts at the given id and LSN. */
    const char *dir2 = tdir("horizon-create");
    struct wal_opts o2 = {.dir = dir2, .segment_bytes = 8192, .no_sync = 1,
                          .create_id = 0x1234, .create_base_lsn = 500};
    struct coll c = {0};
    CHECK_RC(wal_open(&w, &o2, collect, &c), 0);
    CHECK(wlog_id(wal_log(w)) == 0x1234 && wlog_next_lsn(wal_log(w)) == 500, "id %llx next %llu",
          (unsigned long long)wlog_id(wal_log(w)), (unsigned long long)wlog_next_lsn(wal_log(w)));
    add_live(w, &m, 10);
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));
    CHECK_RC(wal_open(&w, &o, collect, &c), 0); /* the first dir, again: unaffected */
    wlog_close(wal_log(w));
    coll_reset(&c);
    CHECK_RC(wal_open(&w, &o2, collect, &c), 0);
    CHECK(c.n == 1 && c.v[0].lsn == 500 && wlog_next_lsn(wal_log(w)) == 501,
          "reopened: %zu records", c.n);
    wlog_close(wal_log(w));
    coll_reset(&c);
    model_free(&m);
}

static void test_big_records(void)
{
    const char *dir = tdir("big");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 4096, .no_sync = 1};
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    uint64_t id, ids[16];
    uint32_t k = 0;

    model_init(&m, &w, 64);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    add_live(w, &m, 5u << 20); /* 1: 5 MiB, live, alone in segment 1 */
    add_live(w, &m, 100);      /* 2 */
    add_live(w, &m, 3u << 20); /* 3: dead */
    add_live(w, &m, 3u << 20); /* 4: dead */
    add_live(w, &m, 3u << 20); /* 5: dead */
    add_live(w, &m, 3u << 20); /* 6: dead */
    add_live(w, &m, 100);      /* 7 */
    CHECK(m.loc[1].seg == 1 && m.loc[2].seg == 2, "big record alone");
    CHECK_RC(wal_commit(w), 0);
    wlog_close(wal_log(w));

    memset(m.live, 0, m.cap);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    for (uint64_t i = 1; i <= 7; i++)
        CHECK(m.live[i], "record %llu replayed", (unsigned long long)i);
    CHECK_RC(wlog_read(wal_log(w), m.loc[1], &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, &id) && id == 1, "5 MiB record reads back");

    for (uint64_t i = 3; i <= 6; i++)
        ids[k++] = i;
    kill_ids(w, &m, ids, k);
    CHECK_RC(wal_commit(w), 0);
    struct wlog_loc old = m.loc[1];
    int r, rounds = 0;
    do {
        r = wlog_reclaim(wal_log(w), 1 << 20, &(struct wlog_compact_ops){m_is_live, m_moved, &m});
        CHECK(r >= 0, "maintain -> %d", r);
        CHECK_RC(wal_commit(w), 0);
    } while (r == 1 && ++rounds < 100);
    CHECK(m.loc[1].seg != old.seg, "5 MiB record moved");
    CHECK(!exists(seg_path(dir, 1)), "segment 1 deleted");
    CHECK_RC(wlog_read(wal_log(w), m.loc[1], &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, &id) && id == 1, "moved 5 MiB record reads back");
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    CHECK(st.disk_bytes <= 2 * st.live_bytes + 4096, "disk %llu live %llu",
          (unsigned long long)st.disk_bytes, (unsigned long long)st.live_bytes);
    wlog_close(wal_log(w));
    memset(m.live, 0, m.cap);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    CHECK(m.live[1] && m.live[2] && m.live[7] && !m.live[3] && !m.live[6], "liveness after reopen");
    CHECK_RC(wlog_read(wal_log(w), m.loc[1], &b, &h, &p), 0);
    CHECK(add_ok(p, h.len, &id) && id == 1, "copy replayed");
    wlog_close(wal_log(w));
    free(b.p);
    model_free(&m);
}

/*
 * Random sessions: appends, confirmations, commits, compaction steps, torn
 * garbage after a close. After every reopen the live set and every live
 * payload must be exactly what the owner's model says.
 */
static void test_random_sessions(void)
{
    const char *dir = tdir("random");
    struct wal *w = NULL;
    struct model m;
    struct wal_opts o = {.dir = dir, .segment_bytes = 16384, .no_sync = 1};
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    uint8_t *committed_live;
    uint64_t x = 0x853c49e6748fea9bull, id;
    const size_t cap = 200000;
    uint64_t deleted = 0, compacted = 0, truncated = 0;
    expect_error_lines();

#define RND() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    model_init(&m, &w, cap);
    committed_live = calloc(cap, 1);
    for (int session = 0; session < 25; session++) {
        memset(m.live, 0, m.cap);
        CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
        if (!w)
            break;
        for (uint64_t i = 1; i < cap; i++) {
            if (m.live[i] != committed_live[i]) {
                CHECK(0, "session %d: message %llu live=%d, want %d", session,
                      (unsigned long long)i, m.live[i], committed_live[i]);
                break;
            }
            if (m.live[i] && (i % 13 == 0)) {
                CHECK_RC(wlog_read(wal_log(w), m.loc[i], &b, &h, &p), 0);
                CHECK(add_ok(p, h.len, &id) && id == i, "payload of %llu", (unsigned long long)i);
            }
        }
        int ops = 200 + (int)(RND() % 400);
        for (int op = 0; op < ops && wlog_next_lsn(wal_log(w)) + 100 < cap; op++) {
            uint64_t r = RND() % 100;
            if (r < 55) {
                add_live(w, &m, (uint32_t)(RND() % 600));
            } else if (r < 80) {
                uint64_t ids[16];
                uint32_t k = 0;
                for (int t = 0; t < 40 && k < 16; t++) {
                    uint64_t last = wlog_next_lsn(wal_log(w)) - 1;
                    uint64_t cand = 1 + RND() % (last ? last : 1);
                    int dup = 0;
                    for (uint32_t j = 0; j < k; j++)
                        dup |= ids[j] == cand;
                    if (m.live[cand] && !dup)
                        ids[k++] = cand;
                }
                if (k)
                    kill_ids(w, &m, ids, k);
            } else if (r < 92) {
                CHECK_RC(wal_commit(w), 0);
                memcpy(committed_live, m.live, cap);
            } else {
                int mr = wlog_reclaim(wal_log(w), (size_t)(RND() % 20000),
                                      &(struct wlog_compact_ops){m_is_live, m_moved, &m});
                CHECK(mr >= 0, "maintain -> %d", mr);
            }
        }
        /* Most sessions end with a commit; some just stop (a crash after the last commit). */
        if (RND() % 4) {
            CHECK_RC(wal_commit(w), 0);
            memcpy(committed_live, m.live, cap);
        } else {
            /* Uncommitted compaction copies and appends vanish; the model must agree. */
        }
        struct wlog_stats st;
        wlog_stats(wal_log(w), &st);
        deleted += st.deleted_segments;
        compacted += st.compacted_bytes;
        truncated += st.truncated_bytes;
        wlog_close(wal_log(w));
        w = NULL;
        if (RND() % 3 == 0) { /* torn garbage after the last record */
            uint8_t junk[300];
            for (size_t i = 0; i < sizeof(junk); i++)
                junk[i] = (uint8_t)RND();
            uint64_t last = 0;
            for (uint64_t sn = 1; sn < 100000; sn++)
                if (exists(seg_path(dir, sn)))
                    last = sn;
            file_append(seg_path(dir, last), junk, 1 + RND() % sizeof(junk));
        }
    }
#undef RND
    CHECK(deleted > 0 && compacted > 0 && truncated > 0,
          "the random sessions exercised deletion %llu, compaction %llu, torn tails %llu",
          (unsigned long long)deleted, (unsigned long long)compacted,
          (unsigned long long)truncated);
    free(committed_live);
    free(b.p);
    model_free(&m);
}

static void test_lock(void)
{
    const char *dir = tdir("lock");
    struct wal *w1, *w2 = (struct wal *)1;

    CHECK_RC(wopen_quiet_coll(&w1, dir, 0), 0);
    CHECK_RC(wopen_quiet_coll(&w2, dir, 0), WLOG_ELOCKED);
    CHECK(w2 == NULL, "no second log");
    wlog_close(wal_log(w1));
    CHECK_RC(wopen_quiet_coll(&w2, dir, 0), 0);
    wlog_close(wal_log(w2));
}

static void test_failed_commit(void)
{
    const char *dir = tdir("failed");
    struct wal *w;
    struct coll c = {0};
    struct wlog_buf b = {0};
    struct walrec_hdr h;
    const uint8_t *p;
    struct wlog_loc loc;
    int err;
    expect_error_lines();

    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    for (int i = 0; i < 10; i++)
        CHECK_RC(append_add(w, 64, NULL, &loc), 0);
    CHECK_RC(wal_commit(w), 0);
    CHECK_RC(append_add(w, 64, NULL, NULL), 0);
    CHECK_RC(wal_test_break_fd(w), 0);
    err = wal_commit(w);
    CHECK(err == -EBADF, "commit fails: %d %s", err, wlog_strerror(err));
    /* Failed for good: every later call returns the same error. */
    CHECK_RC(wal_commit(w), err);
    CHECK_RC(append_add(w, 64, NULL, NULL), err);
    CHECK_RC(wlog_read(wal_log(w), loc, &b, &h, &p), err);
    CHECK_RC(wlog_reclaim(wal_log(w), 1000, NULL), err);
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    CHECK(st.durable_lsn == 10, "durable lsn stays at the last good commit");
    wlog_close(wal_log(w));
    CHECK_RC(wopen(&w, dir, 0, &c), 0);
    CHECK(coll_is_prefix(&c, 10), "recovery from what is on disk: %zu", c.n);
    wlog_close(wal_log(w));
    coll_reset(&c);
    free(b.p);
}

/* ---- the space reserve and the intake gate (wal_space.c) --------------- */

static uint64_t file_blocks_bytes(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_blocks * 512u : 0;
}

/* On any volume: RESERVE is created whole, kept across a reopen, cut to a smaller size. */
static void test_reserve_file(void)
{
    const char *dir = tdir("reserve");
    char path[512];
    struct wal *w = NULL;
    struct wlog_stats st;
    struct wal_opts o = {.dir = dir, .segment_bytes = 64 << 10, .no_sync = 1,
                         .reserve_bytes = 128 << 10};

    snprintf(path, sizeof(path), "%s/RESERVE", dir);
    CHECK_RC(wal_open(&w, &o, NULL, NULL), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.reserve_bytes == 128 << 10 && st.reserve_held == 128 << 10,
          "reserve %llu of %llu", (unsigned long long)st.reserve_held,
          (unsigned long long)st.reserve_bytes);
    CHECK(file_blocks_bytes(path) >= 128 << 10, "RESERVE allocated: %llu bytes",
          (unsigned long long)file_blocks_bytes(path));
    CHECK(!st.intake_paused, "a roomy volume: intake not paused");
    CHECK(st.free_bytes > 0, "the volume's free space is known");
    wlog_close(wal_log(w));

    o.reserve_bytes = 64 << 10; /* segment_mb lowered */
    CHECK_RC(wal_open(&w, &o, NULL, NULL), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.reserve_held == 64 << 10, "held %llu after lowering", (unsigned long long)st.reserve_held);
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && sb.st_size == 64 << 10, "RESERVE cut to 64 KiB");
    wlog_close(wal_log(w));

    /* A sparse RESERVE (a copy that dropped its blocks) counts for what it holds: filled again. */
    CHECK(truncate(path, 0) == 0 && truncate(path, 64 << 10) == 0, "make it a hole");
    CHECK_RC(wal_open(&w, &o, NULL, NULL), 0);
    CHECK(file_blocks_bytes(path) >= 64 << 10, "the hole filled: %llu",
          (unsigned long long)file_blocks_bytes(path));
    wlog_close(wal_log(w));

    /* Tools and tests open without a reserve: the file is left alone, no gate. */
    o.reserve_bytes = 0;
    CHECK_RC(wal_open(&w, &o, NULL, NULL), 0);
    wlog_stats(wal_log(w), &st);
    CHECK(st.reserve_bytes == 0 && !st.intake_paused, "no reserve, no gate");
    wlog_close(wal_log(w));
    CHECK(exists(path), "RESERVE kept by a log opened without one");
}

/*
 * A volume that intake alone fills, nobody relieving it (issue 26): on a
 * 640 KiB tmpfs (root only; skipped otherwise), the gate pauses intake
 * before the disk is full; more ADDs taken past the pause (deliveries in
 * flight), then DONEs for the older messages, make a batch the free space
 * cannot hold: the commit gives the reserve back and succeeds, the dead
 * segments go, the reserve is filled again and intake resumes -- all
 * without anything else on the volume changing. Without the reserve this
 * commit failed for good (ENOSPC, the DONEs stuck behind the ADDs).
 */
static void test_reserve_full_disk(void)
{
    char mnt[512], dir[600];
    struct wal *w = NULL;
    struct model m;
    struct wlog_stats st;
    uint64_t first_paused = 0;
    int r;

    snprintf(mnt, sizeof(mnt), "%s/rsvfs", base);
    CHECK(mkdir(mnt, 0700) == 0, "mkdir %s", mnt);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=640k tmpfs %s >/dev/null 2>&1", mnt);
    if (geteuid() != 0 || system(cmd) != 0) {
        printf("test_wal: reserve_full_disk skipped (mounting a tmpfs needs root)\n");
        return;
    }
    snprintf(dir, sizeof(dir), "%s/wal", mnt);
    struct wal_opts o = {.dir = dir, .segment_bytes = 32 << 10, .no_sync = 0,
                         .reserve_bytes = 64 << 10};
    expect_error_lines();
    model_init(&m, &w, 1 << 16);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);

    /* Intake as the daemon takes it: until the gate says pause. */
    for (int i = 0; i < 4000; i++) {
        wlog_stats(wal_log(w), &st);
        if (st.intake_paused)
            break;
        add_live(w, &m, 900);
        CHECK_RC(wal_commit(w), 0);
        CHECK(wlog_reclaim(wal_log(w), 1 << 20, NULL) >= 0, "maintain");
    }
    wlog_stats(wal_log(w), &st);
    CHECK(st.intake_paused, "intake paused before the disk is full");
    CHECK(st.reserve_held == 64 << 10, "the reserve untouched by intake: %llu",
          (unsigned long long)st.reserve_held);
    CHECK(w->intake_pauses == 1, "one pause: %llu", (unsigned long long)w->intake_pauses);
    first_paused = wlog_next_lsn(wal_log(w));

    /* Appends past the pause (another writer, or an owner ignoring the gate): more ADDs
     * than the free space holds ... */
    uint64_t buffered = 0;
    while (buffered < st.free_bytes + (16 << 10)) {
        add_live(w, &m, 900);
        buffered += 900 + 100;
    }
    /* ... and behind them the DONEs of everything taken before the pause. */
    kill_live_upto(w, &m, first_paused - 1);
    r = wal_commit(w);
    CHECK(r == 0, "the commit behind a full disk succeeds on the reserve: %d (%s)", r,
          wlog_strerror(r));
    wlog_stats(wal_log(w), &st);
    CHECK(st.reserve_spent == 1 && st.reserve_held == 0, "reserve spent %llu, held %llu",
          (unsigned long long)st.reserve_spent, (unsigned long long)st.reserve_held);
    CHECK(st.intake_paused, "intake stays paused while the reserve is not whole");

    /* Nobody frees anything: maintenance deletes the dead segments, refills, resumes. */
    for (int i = 0; i < 50 && st.intake_paused; i++) {
        CHECK(wlog_reclaim(wal_log(w), 1 << 20, NULL) >= 0, "maintain");
        CHECK_RC(wal_commit(w), 0);
        wlog_stats(wal_log(w), &st);
    }
    CHECK(!st.intake_paused, "intake resumed by itself: free %llu, reserve %llu of %llu",
          (unsigned long long)st.free_bytes, (unsigned long long)st.reserve_held,
          (unsigned long long)st.reserve_bytes);
    CHECK(st.reserve_held == 64 << 10, "the reserve whole again");
    CHECK(st.deleted_segments > 0, "dead segments deleted");

    /* Everything live is still there after a reopen. */
    uint64_t live = 0;
    for (uint64_t id = 0; id < m.cap; id++)
        live += m.live[id];
    wlog_close(wal_log(w));
    model_free(&m);
    model_init(&m, &w, 1 << 16);
    CHECK_RC(wal_open(&w, &o, m_replay, &m), 0);
    uint64_t again = 0;
    for (uint64_t id = 0; id < m.cap; id++)
        again += m.live[id];
    CHECK(again == live && live > 0, "live after reopen %llu, before %llu",
          (unsigned long long)again, (unsigned long long)live);
    wlog_close(wal_log(w));
    model_free(&m);
    snprintf(cmd, sizeof(cmd), "umount -l %s", mnt);
    if (system(cmd) != 0)
        printf("test_wal: cannot unmount %s\n", mnt);
}

static const struct check_case cases[] = {
    {"basic", test_basic},
    {"sync", test_sync},
    {"roll", test_roll},
    {"prewrite", test_prewrite},
    {"torn_tail", test_torn_tail},
    {"corrupt", test_corrupt},
    {"stale_salt", test_stale_salt},
    {"read", test_read},
    {"readahead_adapts", test_readahead_adapts},
    {"maintain_delete", test_maintain_delete},
    {"maintain_waits_for_successor", test_maintain_waits_for_successor},
    {"maintain_waits_for_end_records", test_maintain_waits_for_end_records},
    {"compaction", test_compaction},
    {"horizon", test_horizon},
    {"big_records", test_big_records},
    {"random_sessions", test_random_sessions},
    {"lock", test_lock},
    {"failed_commit", test_failed_commit},
    {"reserve_file", test_reserve_file},
    {"reserve_full_disk", test_reserve_full_disk},
};

static void remove_base(void)
{
    tk_rm_rf(base);
}

int main(int argc, char **argv)
{
    strcpy(base, "/tmp/test_wal.XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    atexit(remove_base); /* also when check.h gives up after too many failures */
    return CHECK_MAIN(argc, argv, cases);
}
