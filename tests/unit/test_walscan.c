/*
 * test_walscan.c -- the read-only segment reader shared by recovery and
 * "delay-bridge wal check|dump".
 *
 * Segments are built byte by byte with the walrec encoders, written to
 * files under a mkdtemp() directory and scanned: a clean segment returns
 * every record with its offset and LSN; a cut anywhere in the last records
 * is a torn tail in the newest segment and corruption in an older one; a
 * damaged record with valid ones after it is corruption, with the next
 * valid offset; each reason is told apart; an LSN break; a record far
 * larger than the read buffer (and a torn one that claims a gigabyte,
 * which must not make the buffer grow past the file); an empty segment;
 * a file that shrinks under the scan; the directory listing and the
 * segment header verdicts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/walrec.h"
#include "delay-bridge/wlog.h"
#include "delay-bridge/walscan.h"

#include "check.h"
#include "testkit.h"

#define SEGHDR WALREC_SEGHDR_SIZE
#define RECHDR WALREC_HDR_SIZE
#define SALT 0x5a17c0deu
#define WAL_ID 0x1122334455667788ull

static char base[64];

/* ---- building segments --------------------------------------------------- */

struct seg {
    uint8_t *p;
    size_t n, cap;
    uint32_t salt;
    uint64_t next_lsn;
    size_t off[64];  /* offset of each record */
    size_t len[64];  /* bytes of each record */
    uint64_t lsn[64];
    int nrec;
};

static void put(struct seg *s, const void *p, size_t n)
{
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2;
        s->p = realloc(s->p, s->cap);
        if (!s->p)
            abort();
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
}

static void seg_begin(struct seg *s, uint64_t segno, uint64_t base_lsn)
{
    struct walrec_seghdr h = {WALREC_VERSION, SALT, segno, base_lsn, WAL_ID, 1795400000000ull};
    uint8_t b[SEGHDR];

    memset(s, 0, sizeof(*s));
    s->salt = SALT;
    s->next_lsn = base_lsn;
    walrec_seghdr_encode(b, &h);
    put(s, b, sizeof(b));
}

/* Append a record of type with payload (n bytes) and the given lsn. */
static void add_raw(struct seg *s, uint8_t type, const void *payload, size_t n, uint64_t lsn)
{
    struct walrec_hdr h = {(uint32_t)n, type, 0, lsn, 0};
    struct walrec_piece pc = {payload, n};
    uint8_t b[RECHDR];

    walrec_hdr_encode(b, &h, s->salt, &pc, 1);
    s->off[s->nrec] = s->n;
    s->len[s->nrec] = RECHDR + n;
    s->lsn[s->nrec] = lsn;
    s->nrec++;
    put(s, b, sizeof(b));
    put(s, payload, n);
}

/* A DONE (or CANCEL) record naming count ids, with the next LSN. */
static void add_ids(struct seg *s, uint8_t type, uint32_t count)
{
    size_t n = walrec_done_size(count);
    uint64_t *ids = calloc(count ? count : 1, sizeof(*ids));
    uint8_t *p = malloc(n);

    for (uint32_t i = 0; i < count; i++)
        ids[i] = 1000 + i;
    walrec_done_encode(p, ids, count);
    add_raw(s, type, p, n, s->next_lsn++);
    free(ids);
    free(p);
}

/* An ADD record with a body of body_len bytes, with the next LSN. */
static void add_add(struct seg *s, uint32_t body_len)
{
    struct walrec_add a;
    uint8_t *p, *body = malloc(body_len ? body_len : 1);
    size_t n;

    for (uint32_t i = 0; i < body_len; i++)
        body[i] = (uint8_t)(i * 13 + 7);
    memset(&a, 0, sizeof(a));
    a.msg_id = s->next_lsn;
    a.due_ms = 1800000000000ull;
    a.route = "r";
    a.route_len = 1;
    a.flags = WALREC_ADD_KEYED;
    a.key = "k1";
    a.key_len = 2;
    a.body = body;
    a.body_len = body_len;
    n = walrec_add_size(&a);
    p = malloc(n);
    memcpy(p + walrec_add_encode_head(p, &a), body, body_len);
    add_raw(s, WALREC_ADD, p, n, s->next_lsn++);
    free(p);
    free(body);
}

/* The segment as a file (the first n bytes; n = s->n for all); an fd open on it. */
static int seg_file(const struct seg *s, size_t n, const char *name)
{
    char path[256];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", base, name);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, s->p, n) != (ssize_t)n) {
        perror(path);
        exit(1);
    }
    return fd;
}

/* ---- scanning ------------------------------------------------------------- */

struct result {
    int rc;         /* last walscan_next() return */
    int nrec;
    uint64_t off[64], lsn[64];
    uint32_t len[64];
    uint64_t reads, last_read_to;
};

static void on_read(void *arg, uint64_t read_to)
{
    struct result *r = arg;

    if (read_to < r->last_read_to)
        r->reads = UINT64_MAX; /* progress went backwards */
    else if (r->reads != UINT64_MAX)
        r->reads++;
    r->last_read_to = read_to;
}

/* Scan the first n bytes of s as a file: fills *res, leaves the outcome in *sc. */
static void scan(struct walscan *sc, struct result *res, const struct seg *s, size_t n,
                 size_t chunk, int newest)
{
    int fd = seg_file(s, n, "seg.wal");
    struct walscan_rec rec;

    memset(res, 0, sizeof(*res));
    walscan_init(sc, chunk, on_read, res);
    walscan_start(sc, fd, n, s->salt, s->lsn[0] ? s->lsn[0] : s->next_lsn, newest);
    while ((res->rc = walscan_next(sc, &rec)) > 0 && res->nrec < 64) {
        int i = res->nrec++;
        res->off[i] = rec.off;
        res->lsn[i] = rec.hdr.lsn;
        res->len[i] = rec.len;
        /* The payload is the one written, in place. */
        if (rec.len != RECHDR + rec.hdr.len ||
            memcmp(rec.payload, s->p + rec.off + RECHDR, rec.hdr.len) != 0)
            res->len[i] = 0;
    }
    CHECK(walscan_next(sc, &rec) == res->rc, "a finished scan stays finished");
    close(fd);
}

/* The first k records of s came back, whole and in order. */
static int prefix_ok(const struct result *res, const struct seg *s, int k)
{
    if (res->nrec != k)
        return 0;
    for (int i = 0; i < k; i++)
        if (res->off[i] != s->off[i] || res->lsn[i] != s->lsn[i] || res->len[i] != s->len[i])
            return 0;
    return 1;
}

/* A segment of 12 records of assorted sizes, LSNs from 100. */
static void sample(struct seg *s)
{
    seg_begin(s, 3, 100);
    for (int i = 0; i < 12; i++) {
        if (i % 3 == 0)
            add_add(s, (uint32_t)(i * 50));
        else
            add_ids(s, i % 3 == 1 ? WALREC_DONE : WALREC_CANCEL, (uint32_t)i);
    }
}

/* ---- cases ----------------------------------------------------------------- */

static void test_clean(void)
{
    struct seg s;
    struct walscan sc;
    struct result res;
    size_t chunks[] = {64, 100, 4096, 4u << 20};

    sample(&s);
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        for (int newest = 0; newest <= 1; newest++) {
            scan(&sc, &res, &s, s.n, chunks[c], newest);
            CHECK(res.rc == 0, "chunk %zu: rc %d", chunks[c], res.rc);
            CHECK(prefix_ok(&res, &s, s.nrec), "chunk %zu: %d of %d records", chunks[c],
                  res.nrec, s.nrec);
            CHECK(sc.end == WALSCAN_CLEAN, "chunk %zu: end %d", chunks[c], sc.end);
            CHECK_U64(sc.next_lsn, 112);
            CHECK_U64(sc.size, s.n);
            CHECK(res.reads != UINT64_MAX && res.reads >= 1, "progress reported, forward only");
            CHECK_U64(res.last_read_to, s.n);
            walscan_free(&sc);
        }
    }
    free(s.p);
}

static void test_torn_tail(void)
{
    struct seg s;
    struct walscan sc;
    struct result res;

    sample(&s);
    /* Every cut inside the last three records. */
    for (size_t cut = s.off[s.nrec - 3]; cut < s.n; cut++) {
        int whole = 0;
        while (whole < s.nrec && s.off[whole] + s.len[whole] <= cut)
            whole++;
        for (size_t chunk = 64; chunk <= 4096; chunk *= 64) {
            scan(&sc, &res, &s, cut, chunk, 1);
            CHECK(res.rc == 0 && prefix_ok(&res, &s, whole), "cut %zu chunk %zu: %d records, want %d",
                  cut, chunk, res.nrec, whole);
            if (cut == s.off[whole]) {
                CHECK(sc.end == WALSCAN_CLEAN, "cut %zu on a record boundary: end %d", cut, sc.end);
            } else {
                CHECK(sc.end == WALSCAN_TORN, "cut %zu chunk %zu: end %d", cut, chunk, sc.end);
                CHECK_U64(sc.bad_off, s.off[whole]);
                CHECK(sc.why == (cut - s.off[whole] < RECHDR ? WALSCAN_WHY_SHORT_HEADER
                                                             : WALSCAN_WHY_SHORT_PAYLOAD),
                      "cut %zu: why %d (%s)", cut, sc.why, sc.reason);
                CHECK(strstr(sc.reason, "past the end of the file") != NULL, "reason: %s",
                      sc.reason);
            }
            CHECK_U64(sc.next_lsn, 100 + (uint64_t)whole);
            walscan_free(&sc);
            /* The same cut in a segment that is not the newest: corruption. */
            if (cut != s.off[whole]) {
                scan(&sc, &res, &s, cut, chunk, 0);
                CHECK(sc.end == WALSCAN_BAD_RECORD && sc.next_valid == 0,
                      "cut %zu in an older segment: end %d", cut, sc.end);
                walscan_free(&sc);
            }
        }
    }

    /* Zeros after the last record: the prewritten tail (wal.c), a clean end there. */
    {
        struct seg t = s;
        t.p = calloc(1, s.n + 3000);
        t.cap = s.n + 3000;
        memcpy(t.p, s.p, s.n);
        t.n = s.n + 3000;
        for (int newest = 0; newest <= 1; newest++) {
            scan(&sc, &res, &t, t.n, 4096, newest);
            CHECK(sc.end == WALSCAN_CLEAN && sc.size == s.n && sc.zero_tail == 3000 &&
                      prefix_ok(&res, &s, s.nrec),
                  "zeros (newest %d): end %d size %llu zeros %llu", newest, sc.end,
                  (unsigned long long)sc.size, (unsigned long long)sc.zero_tail);
            walscan_free(&sc);
        }
        /* one nonzero byte far into the zeros: torn in the newest, as before */
        t.p[t.n - 7] = 1;
        scan(&sc, &res, &t, t.n, 4096, 1);
        CHECK(sc.end == WALSCAN_TORN && sc.bad_off == s.n, "zeros, then a 1: end %d", sc.end);
        walscan_free(&sc);
        free(t.p);
    }

    /* Garbage after the last record: ones. */
    for (int fill = 0xff; fill <= 0xff; fill += 0xff) {
        struct seg t = s;
        t.p = malloc(s.n + 3000);
        t.cap = s.n + 3000;
        memcpy(t.p, s.p, s.n);
        memset(t.p + s.n, fill, 3000);
        t.n = s.n + 3000;
        scan(&sc, &res, &t, t.n, 4096, 1);
        CHECK(sc.end == WALSCAN_TORN && sc.bad_off == s.n && prefix_ok(&res, &s, s.nrec),
              "fill %#x: end %d at %llu", fill, sc.end, (unsigned long long)sc.bad_off);
        CHECK(sc.why == WALSCAN_WHY_TYPE, "fill %#x: why %d (%s)",
              fill, sc.why, sc.reason);
        walscan_free(&sc);
        free(t.p);
    }
    free(s.p);
}

static void test_corrupt_middle(void)
{
    struct seg s;
    struct walscan sc;
    struct result res;
    int mid;

    sample(&s);
    mid = s.nrec / 2;
    /* A flipped bit in the payload: a checksum mismatch with valid records after it. */
    for (size_t chunk = 64; chunk <= (4u << 20); chunk *= 64) {
        struct seg t = s;
        t.p = malloc(s.n);
        memcpy(t.p, s.p, s.n);
        t.p[t.off[mid] + RECHDR + 3] ^= 0x10;
        scan(&sc, &res, &t, t.n, chunk, 1);
        CHECK(res.rc == 0 && prefix_ok(&res, &s, mid), "chunk %zu: %d records", chunk, res.nrec);
        CHECK(sc.end == WALSCAN_BAD_RECORD, "chunk %zu: end %d", chunk, sc.end);
        CHECK_U64(sc.bad_off, s.off[mid]);
        CHECK_U64(sc.next_valid, s.off[mid + 1]);
        CHECK(sc.why == WALSCAN_WHY_CRC && strstr(sc.reason, "checksum mismatch"), "why %d (%s)",
              sc.why, sc.reason);
        CHECK_U64(sc.next_lsn, s.lsn[mid]);
        walscan_free(&sc);
        /* In an older segment: corruption, no search for what follows. */
        scan(&sc, &res, &t, t.n, chunk, 0);
        CHECK(sc.end == WALSCAN_BAD_RECORD && sc.next_valid == 0 && sc.bad_off == s.off[mid],
              "older segment: end %d next_valid %llu", sc.end, (unsigned long long)sc.next_valid);
        walscan_free(&sc);
        free(t.p);
    }

    /* Each reason, in the middle of the newest segment (valid records follow). */
    static const struct {
        const char *what;
        int at, mask, why;
        const char *words;
    } cases[] = {
        {"type", 4, 0x40, WALSCAN_WHY_TYPE, "unknown record type"},
        {"reserved byte 6", 6, 0x01, WALSCAN_WHY_RESERVED, "reserved header bytes"},
        {"reserved word 20", 21, 0x80, WALSCAN_WHY_RESERVED, "reserved header bytes"},
        {"length", 3, 0x80, WALSCAN_WHY_TOO_LONG, "exceeds the 1 GiB limit"},
        {"lsn field", 9, 0x01, WALSCAN_WHY_CRC, "checksum mismatch"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct seg t = s;
        t.p = malloc(s.n);
        memcpy(t.p, s.p, s.n);
        t.p[t.off[mid] + cases[i].at] ^= (uint8_t)cases[i].mask;
        scan(&sc, &res, &t, t.n, 64, 1);
        CHECK(sc.end == WALSCAN_BAD_RECORD && sc.bad_off == s.off[mid] &&
                  sc.next_valid == s.off[mid + 1],
              "%s: end %d at %llu, next valid %llu", cases[i].what, sc.end,
              (unsigned long long)sc.bad_off, (unsigned long long)sc.next_valid);
        CHECK(sc.why == cases[i].why && strstr(sc.reason, cases[i].words), "%s: why %d (%s)",
              cases[i].what, sc.why, sc.reason);
        walscan_free(&sc);
        free(t.p);
    }

    /* A CANCEL whose CRC is right but whose payload is not an id list. */
    {
        struct seg t;
        static const uint8_t junk[2] = {0xde, 0xad};
        seg_begin(&t, 1, 1);
        add_ids(&t, WALREC_DONE, 1);
        add_raw(&t, WALREC_CANCEL, junk, sizeof(junk), t.next_lsn++);
        add_ids(&t, WALREC_DONE, 2);
        scan(&sc, &res, &t, t.n, 64, 1);
        CHECK(sc.end == WALSCAN_BAD_RECORD && sc.bad_off == t.off[1] && sc.next_valid == t.off[2],
              "bad CANCEL layout: end %d", sc.end);
        CHECK(sc.why == WALSCAN_WHY_LAYOUT && strstr(sc.reason, "CANCEL payload layout"),
              "why %d (%s)", sc.why, sc.reason);
        walscan_free(&sc);
        free(t.p);
    }

    /* A valid record with the wrong LSN. */
    {
        struct seg t;
        seg_begin(&t, 1, 1);
        add_ids(&t, WALREC_DONE, 1);
        add_ids(&t, WALREC_DONE, 1);
        t.next_lsn++; /* skip one */
        add_ids(&t, WALREC_DONE, 1);
        scan(&sc, &res, &t, t.n, 4096, 1);
        CHECK(res.nrec == 2 && sc.end == WALSCAN_BAD_LSN && sc.bad_off == t.off[2],
              "lsn break: %d records, end %d", res.nrec, sc.end);
        CHECK_U64(sc.bad_lsn, 4);
        CHECK_U64(sc.next_lsn, 3);
        walscan_free(&sc);
        free(t.p);
    }
    free(s.p);
}

static void test_big_record(void)
{
    struct seg s;
    struct walscan sc;
    struct result res;

    /* Records of 100 KiB and 1 MiB between small ones, read 64 bytes at a time. */
    seg_begin(&s, 1, 1);
    add_ids(&s, WALREC_DONE, 1);
    add_add(&s, 100 * 1024);
    add_ids(&s, WALREC_CANCEL, 3);
    add_add(&s, 1024 * 1024);
    add_ids(&s, WALREC_DONE, 1);
    scan(&sc, &res, &s, s.n, 64, 1);
    CHECK(res.rc == 0 && sc.end == WALSCAN_CLEAN && prefix_ok(&res, &s, s.nrec),
          "big records: %d of %d, end %d", res.nrec, s.nrec, sc.end);
    CHECK(sc.cap >= s.len[3] && sc.cap <= s.n, "buffer grew to the big record: %zu", sc.cap);
    walscan_free(&sc);

    /* Cut inside the 1 MiB record: a torn tail; in an older segment, corruption. */
    scan(&sc, &res, &s, s.off[3] + s.len[3] / 2, 64, 1);
    CHECK(sc.end == WALSCAN_TORN && sc.bad_off == s.off[3] && prefix_ok(&res, &s, 3),
          "big torn: end %d at %llu, %d records", sc.end, (unsigned long long)sc.bad_off, res.nrec);
    walscan_free(&sc);

    /* A damaged big record followed by a big valid one: found beyond the window. */
    {
        struct seg t = s;
        t.p = malloc(s.n);
        memcpy(t.p, s.p, s.n);
        t.p[t.off[1] + RECHDR + 5000] ^= 1;
        scan(&sc, &res, &t, t.n, 64, 1);
        CHECK(sc.end == WALSCAN_BAD_RECORD && sc.bad_off == s.off[1] &&
                  sc.next_valid == s.off[2],
              "damaged big record: end %d next_valid %llu", sc.end,
              (unsigned long long)sc.next_valid);
        walscan_free(&sc);
        t.p[t.off[1] + RECHDR + 5000] ^= 1;
        t.p[t.off[3] + RECHDR + 5000] ^= 1; /* the 1 MiB one: next is the small DONE */
        scan(&sc, &res, &t, t.n, 64, 1);
        CHECK(sc.end == WALSCAN_BAD_RECORD && sc.bad_off == s.off[3] &&
                  sc.next_valid == s.off[4],
              "damaged 1 MiB record: end %d next_valid %llu", sc.end,
              (unsigned long long)sc.next_valid);
        walscan_free(&sc);
        free(t.p);
    }

    /* A torn header claiming a payload of 1 GiB: torn, and no gigabyte allocated. */
    {
        struct seg t;
        uint8_t hdr[RECHDR] = {0};
        seg_begin(&t, 1, 1);
        add_ids(&t, WALREC_DONE, 1);
        walrec_put32(hdr, WALREC_MAX_PAYLOAD);
        hdr[4] = WALREC_ADD;
        walrec_put64(hdr + 8, 2);
        put(&t, hdr, sizeof(hdr));
        put(&t, "some bytes of the payload", 25);
        scan(&sc, &res, &t, t.n, 64, 1);
        CHECK(sc.end == WALSCAN_TORN && sc.bad_off == t.off[0] + t.len[0] &&
                  sc.why == WALSCAN_WHY_SHORT_PAYLOAD,
              "1 GiB claim: end %d why %d (%s)", sc.end, sc.why, sc.reason);
        CHECK(sc.cap <= t.n, "buffer %zu for a %zu-byte file", sc.cap, t.n);
        walscan_free(&sc);
        free(t.p);
    }
    free(s.p);
}

static void test_empty(void)
{
    struct seg s;
    struct walscan sc;
    struct result res;

    seg_begin(&s, 7, 42);
    for (int newest = 0; newest <= 1; newest++) {
        scan(&sc, &res, &s, s.n, 64, newest);
        CHECK(res.rc == 0 && res.nrec == 0 && sc.end == WALSCAN_CLEAN, "empty: %d records, end %d",
              res.nrec, sc.end);
        CHECK_U64(sc.next_lsn, 42);
        CHECK_U64(res.reads, 0);
        walscan_free(&sc);
    }
    /* One zero byte after the header: the prewritten tail, a clean end. */
    put(&s, "\0", 1);
    scan(&sc, &res, &s, s.n, 64, 1);
    CHECK(sc.end == WALSCAN_CLEAN && sc.size == SEGHDR && sc.zero_tail == 1,
          "one zero byte: end %d", sc.end);
    walscan_free(&sc);
    s.n--;
    /* One other byte after the header: a torn record header. */
    put(&s, "\x01", 1);
    scan(&sc, &res, &s, s.n, 64, 1);
    CHECK(sc.end == WALSCAN_TORN && sc.bad_off == SEGHDR && sc.why == WALSCAN_WHY_SHORT_HEADER,
          "one byte: end %d why %d", sc.end, sc.why);
    walscan_free(&sc);
    free(s.p);
}

/* The size given is larger than the file: the short read is the end. */
static void test_shrunk(void)
{
    struct seg s;
    struct walscan sc;
    struct walscan_rec rec;
    int fd, n = 0, r;

    sample(&s);
    fd = seg_file(&s, s.off[5] + 10, "shrunk.wal");
    walscan_init(&sc, 64, NULL, NULL);
    walscan_start(&sc, fd, s.n, s.salt, 100, 1);
    while ((r = walscan_next(&sc, &rec)) > 0)
        n++;
    CHECK(r == 0 && n == 5 && sc.end == WALSCAN_TORN && sc.bad_off == s.off[5],
          "shrunk: %d records, end %d", n, sc.end);
    CHECK_U64(sc.size, s.off[5] + 10);
    /* A second segment through the same scanner reuses its buffer. */
    close(fd);
    fd = seg_file(&s, s.n, "again.wal");
    walscan_start(&sc, fd, s.n, s.salt, 100, 0);
    n = 0;
    while ((r = walscan_next(&sc, &rec)) > 0)
        n++;
    CHECK(r == 0 && n == s.nrec && sc.end == WALSCAN_CLEAN, "again: %d records, end %d", n, sc.end);
    /* A read error. */
    walscan_start(&sc, -1, s.n, s.salt, 100, 1);
    CHECK(walscan_next(&sc, &rec) == -EBADF, "bad fd gives -EBADF");
    walscan_free(&sc);
    close(fd);
    free(s.p);
}

static void touch(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (n && write(fd, p, n) != (ssize_t)n))
        perror(path);
    if (fd >= 0)
        close(fd);
}

static void test_list(void)
{
    char dir[128], bad[64], name[WALSCAN_NAME_SIZE];
    uint64_t *v;
    size_t n;
    int dfd;

    snprintf(dir, sizeof(dir), "%s/list", base);
    mkdir(dir, 0755);
    dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK(walscan_list(dfd, &v, &n, bad, sizeof(bad)) == 0 && n == 0 && v == NULL, "empty dir");
    walscan_seg_name(name, 1);
    CHECK_STR(name, "00000000000000000001.wal");
    for (uint64_t k = 12; k >= 9; k--) {
        walscan_seg_name(name, k);
        touch(dir, name, "", 0);
    }
    touch(dir, "LOCK", "", 0);
    touch(dir, "notes.txt", "x", 1);
    CHECK(walscan_list(dfd, &v, &n, bad, sizeof(bad)) == 0, "list");
    CHECK(n == 4 && v[0] == 9 && v[1] == 10 && v[2] == 11 && v[3] == 12, "sorted: %zu", n);
    free(v);
    static const char *misnamed[] = {"12.wal", "0000000000000000000x.wal",
                                     "00000000000000000000.wal", "99999999999999999999.wal",
                                     "000000000000000000001.wal"};
    for (size_t i = 0; i < sizeof(misnamed) / sizeof(misnamed[0]); i++) {
        char path[512];
        touch(dir, misnamed[i], "", 0);
        CHECK(walscan_list(dfd, &v, &n, bad, sizeof(bad)) == WLOG_EFORMAT, "%s refused",
              misnamed[i]);
        CHECK_STR(bad, misnamed[i]);
        snprintf(path, sizeof(path), "%s/%s", dir, misnamed[i]);
        unlink(path);
    }
    close(dfd);
}

static void test_seghdr(void)
{
    struct seg s;
    struct walrec_seghdr h;
    int fd;

    sample(&s);
    fd = seg_file(&s, s.n, "hdr.wal");
    CHECK(walscan_seghdr(fd, 3, s.n, 1, &h) == WALSCAN_HDR_OK && h.base_lsn == 100 &&
              h.salt == SALT && h.wal_id == WAL_ID,
          "good header");
    CHECK(walscan_seghdr(fd, 4, s.n, 0, &h) == WALSCAN_HDR_SEGNO && h.segno == 3, "segno");
    CHECK(walscan_seghdr(fd, 3, 5ull << 30, 0, &h) == WALSCAN_HDR_TOO_BIG, "4 GiB");
    close(fd);
    /* Short: being created when newest, corrupt otherwise. */
    fd = seg_file(&s, 20, "short.wal");
    CHECK(walscan_seghdr(fd, 3, 20, 1, &h) == WALSCAN_HDR_CREATING, "short newest");
    CHECK(walscan_seghdr(fd, 3, 20, 0, &h) == WALSCAN_HDR_SHORT, "short older");
    close(fd);
    /* Damaged: being created only if no longer than a header. */
    s.p[13] ^= 1;
    fd = seg_file(&s, SEGHDR, "bad.wal");
    CHECK(walscan_seghdr(fd, 3, SEGHDR, 1, &h) == WALSCAN_HDR_CREATING, "bad header, header only");
    close(fd);
    fd = seg_file(&s, s.n, "bad2.wal");
    CHECK(walscan_seghdr(fd, 3, s.n, 1, &h) == WALSCAN_HDR_BAD, "bad header with records");
    close(fd);
    s.p[13] ^= 1;
    free(s.p);
    /* base_lsn 0. */
    seg_begin(&s, 3, 0);
    fd = seg_file(&s, s.n, "zero.wal");
    CHECK(walscan_seghdr(fd, 3, s.n, 1, &h) == WALSCAN_HDR_BASE_LSN, "base_lsn 0");
    close(fd);
    CHECK(walscan_seghdr(-1, 3, s.n, 1, &h) == -EBADF, "read error");
    free(s.p);
}

static const struct check_case cases[] = {
    {"clean", test_clean},
    {"torn_tail", test_torn_tail},
    {"corrupt_middle", test_corrupt_middle},
    {"big_record", test_big_record},
    {"empty", test_empty},
    {"shrunk", test_shrunk},
    {"list", test_list},
    {"seghdr", test_seghdr},
};

int main(int argc, char **argv)
{
    int rc;

    snprintf(base, sizeof(base), "/tmp/test_walscan.XXXXXX");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    rc = CHECK_MAIN(argc, argv, cases);
    tk_rm_rf(base);
    return rc;
}
