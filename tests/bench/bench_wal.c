/*
 * bench_wal.c -- WAL append (group commit, real fdatasync) and replay rates.
 *
 *   bench_wal [--dir DIR] [--append N] [--replay N1,N2,...] [--body B1,B2,...]
 *             [--cold] [--keep]
 *
 *   --dir     where to write (default /var/tmp); must not be tmpfs, or the
 *             fdatasync figures mean nothing (checked with statfs)
 *   --append  messages per append run (default 200000)
 *   --replay  log sizes in messages for the replay runs (default 1000000,10000000)
 *   --body    message body sizes for the append runs (default 256,4096)
 *   --cold    before each replay, fdatasync every segment and drop it from
 *             the page cache (POSIX_FADV_DONTNEED); on a VM the host may still
 *             cache the disk, so the residency figure is printed either way
 *   --keep    do not delete the logs afterwards
 *
 * Append runs: ADD records shaped like real ones (route, exchange, routing
 * key, AMQP properties with an x-delay header), committed every K records
 * (K = 1000, 100) or once per elapsed millisecond ("1ms"), each commit a
 * write + fdatasync. Replay runs: build a log of N ADDs, then time wal_open()
 * with a callback that does what recovery does per record: walrec_add_peek()
 * and wal_live_add().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "delay-bridge/wal.h"
#include "wal/wal_int.h" /* wal_open(), and the log's own functions the tests reach */
#include "delay-bridge/walrec.h"
#include "../unit/testkit.h"

#define TMPFS_MAGIC 0x01021994

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}


/* AMQP basic properties: content-type, headers {x-delay: long}, delivery-mode, message-id. */
static const uint8_t props[] = {
    0xb0, 0x80,                                                    /* flags */
    0x10, 'a', 'p', 'p', 'l', 'i', 'c', 'a', 't', 'i', 'o', 'n', '/', 'j', 's', 'o', 'n',
    0x00, 0x00, 0x00, 0x0d, 0x07, 'x', '-', 'd', 'e', 'l', 'a', 'y', 'I', 0x00, 0x00, 0xea, 0x60,
    0x02,                                                          /* persistent */
    0x24, '6', 'f', '1', 'd', '9', 'c', '2', 'e', '-', '7', 'a', '4', 'b', '-', '4', 'c', '3',
    'e', '-', '9', 'b', '1', 'a', '-', '2', 'f', '8', 'e', '6', 'd', '5', 'c', '4', 'b', '3',
    'a'};

struct msg {
    uint8_t head[512];
    size_t head_len;
    uint8_t *body;
    uint32_t body_len;
};

static void msg_init(struct msg *m, uint32_t body_len)
{
    m->body_len = body_len;
    m->body = malloc(body_len ? body_len : 1);
    for (uint32_t i = 0; i < body_len; i++)
        m->body[i] = (uint8_t)("{\"order\":12345,\"items\":[1,2,3]}"[i % 31]);
}

static void msg_encode(struct msg *m, uint64_t msg_id)
{
    struct walrec_add a;

    memset(&a, 0, sizeof(a));
    a.msg_id = msg_id;
    a.due_ms = 1800000000000ull + (msg_id * 7919) % 3600000;
    a.enqueue_ms = 1799999940000ull;
    a.route = "orders";
    a.route_len = 6;
    a.exchange = "orders.delayed";
    a.exchange_len = 14;
    a.routing_key = "eu.order.created.v2";
    a.routing_key_len = 19;
    a.props = props;
    a.props_len = sizeof(props);
    a.body = m->body;
    a.body_len = m->body_len;
    m->head_len = walrec_add_encode_head(m->head, &a);
}

static int append_one(struct wal *w, struct msg *m)
{
    struct walrec_piece pc[2];

    msg_encode(m, wlog_next_lsn(wal_log(w)));
    pc[0].p = m->head;
    pc[0].n = m->head_len;
    pc[1].p = m->body;
    pc[1].n = m->body_len;
    return wlog_append(wal_log(w), WALREC_ADD, pc, 2, NULL, NULL);
}

static int no_replay(void *arg, const struct walrec_hdr *h, const uint8_t *p, struct wlog_loc l)
{
    (void)arg;
    (void)h;
    (void)p;
    (void)l;
    return 0;
}

struct rstate {
    struct wal **wp;
    uint64_t records, sum;
};

/* What recovery does per record, short of the engine's own index. */
static int recover_cb(void *arg, const struct walrec_hdr *h, const uint8_t *p, struct wlog_loc l)
{
    struct rstate *st = arg;
    struct walrec_add a;

    if (h->type != WALREC_ADD)
        return 0;
    if (walrec_add_peek(p, h->len, &a) < 0)
        return -1;
    st->sum += a.msg_id ^ a.due_ms ^ a.route_len;
    st->records++;
    wlog_live(wal_log(*st->wp), l, 1);
    return 0;
}

static void die(const char *what, int r)
{
    fprintf(stderr, "bench_wal: %s: %s\n", what, wlog_strerror(r));
    exit(1);
}

static void bench_append(const char *root, uint32_t body, int k, uint64_t n, int keep)
{
    char dir[4096];
    struct wal_opts o;
    struct wal *w;
    struct msg m;
    uint64_t commits = 0;
    double t0, t1, last, worst = 0, cstart;
    int r;

    snprintf(dir, sizeof(dir), "%s/append-%u-%d", root, body, k);
    tk_rm_rf(dir);
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    if ((r = wal_open(&w, &o, no_replay, NULL)) < 0)
        die("wal_open", r);
    msg_init(&m, body);
    t0 = last = now_s();
    for (uint64_t i = 0; i < n; i++) {
        if ((r = append_one(w, &m)) < 0)
            die("wal_append", r);
        int due = k > 0 ? (i + 1) % (uint64_t)k == 0 : (i & 63) == 63 && now_s() - last >= 0.001;
        if (due) {
            cstart = now_s();
            if ((r = wal_commit(w)) < 0)
                die("wal_commit", r);
            last = now_s();
            if (last - cstart > worst)
                worst = last - cstart;
            commits++;
        }
    }
    if ((r = wal_commit(w)) < 0)
        die("wal_commit", r);
    commits++;
    t1 = now_s();
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    wlog_close(wal_log(w));
    double secs = t1 - t0;
    char kname[16];
    if (k > 0)
        snprintf(kname, sizeof(kname), "%d", k);
    else
        snprintf(kname, sizeof(kname), "1ms");
    printf("append  body=%-5u commit_every=%-5s msgs=%-8llu %9.0f msgs/s %8.1f MB/s  "
           "commits=%llu (%.0f/s, %.1f msgs each, worst %.2f ms)  record=%llu B\n",
           body, kname, (unsigned long long)n, (double)n / secs,
           (double)st.appended_bytes / secs / 1e6, (unsigned long long)commits,
           (double)commits / secs, (double)n / (double)commits, worst * 1e3,
           (unsigned long long)(st.appended_bytes / n));
    free(m.body);
    if (!keep)
        tk_rm_rf(dir);
}

/* Fraction of the log's bytes in the page cache (mincore). */
static double resident(const char *dir, int drop)
{
    char path[4200];
    uint64_t in = 0, total = 0;
    long pg = sysconf(_SC_PAGESIZE);

    for (uint64_t s = 1;; s++) {
        snprintf(path, sizeof(path), "%s/%020llu.wal", dir, (unsigned long long)s);
        int fd = open(path, O_RDONLY);
        if (fd < 0) {
            if (s > 100000)
                break;
            if (errno == ENOENT && total)
                break;
            continue;
        }
        struct stat st;
        fstat(fd, &st);
        if (drop) {
            fdatasync(fd);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        size_t len = (size_t)st.st_size;
        if (len) {
            void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
            size_t np = (len + (size_t)pg - 1) / (size_t)pg;
            unsigned char *v = malloc(np);
            if (p != MAP_FAILED && mincore(p, len, v) == 0)
                for (size_t i = 0; i < np; i++)
                    in += v[i] & 1;
            free(v);
            if (p != MAP_FAILED)
                munmap(p, len);
            total += np;
        }
        close(fd);
    }
    return total ? (double)in / (double)total : 0;
}

static void bench_replay(const char *root, uint64_t n, int cold, int keep)
{
    char dir[4096];
    struct wal_opts o;
    struct wal *w;
    struct msg m;
    double t0, t1;
    int r;

    snprintf(dir, sizeof(dir), "%s/replay-%llu", root, (unsigned long long)n);
    tk_rm_rf(dir);
    memset(&o, 0, sizeof(o));
    o.dir = dir;
    o.no_sync = 1; /* building the log; the syncs are not what is measured here */
    if ((r = wal_open(&w, &o, no_replay, NULL)) < 0)
        die("wal_open", r);
    msg_init(&m, 256);
    t0 = now_s();
    for (uint64_t i = 0; i < n; i++) {
        if ((r = append_one(w, &m)) < 0)
            die("wal_append", r);
        if (i % 4096 == 4095 && (r = wal_commit(w)) < 0)
            die("wal_commit", r);
    }
    if ((r = wal_commit(w)) < 0)
        die("wal_commit", r);
    struct wlog_stats st;
    wlog_stats(wal_log(w), &st);
    wlog_close(wal_log(w));
    t1 = now_s();
    printf("replay  built %llu ADDs of 256 B bodies: %.2f GB in %llu segments (%.1f s)\n",
           (unsigned long long)n, (double)st.disk_bytes / 1e9, (unsigned long long)st.segments,
           t1 - t0);

    double res = resident(dir, cold);
    struct wal *w2 = NULL;
    struct rstate rs = {&w2, 0, 0};
    o.no_sync = 0;
    t0 = now_s();
    if ((r = wal_open(&w2, &o, recover_cb, &rs)) < 0)
        die("wal_open (replay)", r);
    t1 = now_s();
    wlog_stats(wal_log(w2), &st);
    wlog_close(wal_log(w2));
    double secs = t1 - t0;
    printf("replay  msgs=%-9llu %6.2f s  %9.0f msgs/s  %7.1f MB/s  page cache before: %.0f%% "
           "resident (%s)%s\n",
           (unsigned long long)rs.records, secs, (double)rs.records / secs,
           (double)st.disk_bytes / secs / 1e6, res * 100,
           res > 0.9 ? "warm" : res < 0.1 ? "cold" : "partly warm",
           rs.records == n && st.live_records == n ? "" : "  MISMATCH");
    free(m.body);
    if (!keep)
        tk_rm_rf(dir);
}

static int parse_list(const char *s, uint64_t *v, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        v[n++] = strtoull(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s)
            break;
    }
    return n;
}

int main(int argc, char **argv)
{
    const char *root = "/var/tmp";
    uint64_t append_n = 200000;
    uint64_t replay_n[8] = {1000000, 10000000}, bodies[8] = {256, 4096};
    int nreplay = 2, nbodies = 2, cold = 0, keep = 0;
    char dir[2048];

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            root = argv[++i];
        else if (!strcmp(argv[i], "--append") && i + 1 < argc)
            append_n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--replay") && i + 1 < argc)
            nreplay = parse_list(argv[++i], replay_n, 8);
        else if (!strcmp(argv[i], "--body") && i + 1 < argc)
            nbodies = parse_list(argv[++i], bodies, 8);
        else if (!strcmp(argv[i], "--cold"))
            cold = 1;
        else if (!strcmp(argv[i], "--keep"))
            keep = 1;
        else {
            fprintf(stderr,
                    "usage: %s [--dir DIR] [--append N] [--replay N1,N2] [--body B1,B2] "
                    "[--cold] [--keep]\n",
                    argv[0]);
            return 2;
        }
    }
    struct statfs sf;
    if (statfs(root, &sf) != 0) {
        perror(root);
        return 1;
    }
    if (sf.f_type == TMPFS_MAGIC) {
        fprintf(stderr, "bench_wal: %s is tmpfs; fdatasync would cost nothing. Use a real disk.\n",
                root);
        return 1;
    }
    if (strlen(root) > 1000) {
        fprintf(stderr, "bench_wal: directory name too long\n");
        return 2;
    }
    snprintf(dir, sizeof(dir), "%s/bench_wal.%d", root, (int)getpid());
    if (mkdir(dir, 0755) != 0) {
        perror(dir);
        return 1;
    }
    printf("bench_wal: dir=%s fs_type=0x%lx free=%.1f GB\n", dir, (unsigned long)sf.f_type,
           (double)sf.f_bavail * (double)sf.f_bsize / 1e9);

    /* The cost of one small write + fdatasync, for scale. */
    {
        char p[4200];
        snprintf(p, sizeof(p), "%s/fsync-probe", dir);
        int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
        char b[4096] = {0};
        double t0 = now_s();
        int it = 200;
        for (int i = 0; i < it; i++)
            if (pwrite(fd, b, sizeof(b), (off_t)i * 4096) < 0 || fdatasync(fd) < 0)
                perror("probe");
        printf("fdatasync of a 4 KiB append: %.3f ms average\n", (now_s() - t0) * 1e3 / it);
        close(fd);
        unlink(p);
    }

    for (int b = 0; b < nbodies && append_n; b++) {
        int ks[3] = {1000, 100, 0};
        for (int i = 0; i < 3; i++)
            bench_append(dir, (uint32_t)bodies[b], ks[i], append_n, keep);
    }
    for (int i = 0; i < nreplay; i++)
        if (replay_n[i])
            bench_replay(dir, replay_n[i], cold, keep);
    if (!keep)
        tk_rm_rf(dir);
    return 0;
}
