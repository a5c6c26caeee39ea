/*
 * simfs.c -- the deterministic simulator's file layer, clock and randomness.
 *
 * WHAT IS SIMULATED
 *
 * One directory, SIMFS_DIR, the WAL directory. The log layer (src/wal*.c,
 * walckpt.c, walscan.c) reaches it through src/wal/walfs.h, which under
 * -DDB_SIM spells every system call it makes on the directory simfs_NAME;
 * the rest of the process (the simulator, its model) never touches a real
 * file. The clock (clock_now_ms, clock_mono_ns) and the random numbers
 * (clock_rand64: segment salts, the log id) come from here too, so that a
 * run is a function of its seed and nothing else.
 *
 * Each file (an inode: several names may point at one) keeps two images:
 *
 *   current   what reads see: the page cache;
 *   durable   what a power loss keeps for sure;
 *
 * and, between them, the list of unsynced operations in the order they
 * were made: writes (offset, bytes) and truncations. fsync/fdatasync of the
 * file applies the list to the durable image and empties it. The directory
 * keeps two name tables the same way (current and durable) and a list of
 * unsynced name operations (create, unlink, rename, link); an fsync of the
 * directory makes them durable.
 *
 * THE FAULT MODEL
 *
 *   crash      simfs_arm_crash(n): at the n-th mutating call (write, writev,
 *              truncate, fsync, fdatasync, create, unlink, rename, link) the
 *              call is made not at all, halfway (a write: a prefix of it) or
 *              wholly, and the process dies there (longjmp to the driver).
 *              The driver never returns into the engine it abandoned.
 *   power loss simfs_crash_state(): a random prefix of the directory's
 *              unsynced name operations survives (a journalled file system
 *              keeps them in order); of each surviving file's unsynced
 *              operations a random prefix survives, the last of it torn at
 *              any byte -- or, with faults.reorder, any subset, each write
 *              perhaps torn (blocks reaching the disk out of order: a later
 *              write kept, an earlier one lost, leaving a hole of zeros).
 *   fsync EIO  faults.fsync_fail_ppm: fsync or fdatasync fails with EIO and,
 *              as Linux does (fsyncgate), the dirty data is dropped from the
 *              list: reads still see it, a later fsync succeeds without
 *              making it durable, and a power loss loses it.
 *   ENOSPC     faults.enospc_ppm: a growing write or a create starts a
 *              full-disk episode of faults.enospc_calls mutating calls:
 *              a growing write writes a prefix (maybe nothing) and then
 *              fails with ENOSPC; a create fails with ENOSPC.
 *   bit flip   simfs_flip_bit(): one bit of one file's durable bytes
 *              (segment or checkpoint), chosen from the seed, between a
 *              crash and the recovery that follows.
 *
 * CAPACITY
 *
 * simfs_set_capacity(bytes) gives the volume a size (0, the default: no
 * limit, and nothing below draws a random number or changes what a seed
 * does). The bytes used are the sum, over the files that still exist (a
 * name in the current table, or an open descriptor: an unlinked file open
 * somewhere keeps its blocks, as on Linux), of what each has allocated: its
 * current size -- unsynced writes count, the page cache holds them for the
 * disk -- or more where fallocate (FALLOC_FL_KEEP_SIZE) took more, rounded
 * up to the block (simfs_set_block; 4096 unless set: the liveness seeds
 * use 1 byte or a power of two up to 1/16 segment). Then:
 *
 *   write      one that would grow the usage past capacity writes the
 *              prefix that fits and returns its length (a short write), or
 *              fails with ENOSPC when nothing fits -- what the episode model
 *              above does, but decided by the bytes, not by a draw;
 *   create     of a new name fails with ENOSPC when not one block is free;
 *   fallocate  (mode 0: the size grows too; FALLOC_FL_KEEP_SIZE) takes all
 *              it asks or fails with ENOSPC taking nothing; with
 *              simfs_set_fallocate(0) it fails with EOPNOTSUPP, as on a file
 *              system without it (the caller writes zeros instead);
 *   truncate   and unlink give the space back at once (the last name gone
 *              and no descriptor open, for unlink); a truncate that grows a
 *              file takes its bytes unchecked (files are dense here, and
 *              the log only ever shrinks one);
 *   fstatvfs   f_bsize = f_frsize = the block size, f_blocks the capacity,
 *              f_bfree = f_bavail what is free (2^40 blocks of each without
 *              a limit); fstat's st_blocks counts the allocated 512-byte
 *              units, so that a reserve really taken is told from a hole.
 *
 * A power loss keeps what it keeps (above) and the usage is then
 * recomputed from it: "used" is always what the surviving files hold. A
 * fallocate past the size becomes durable with the file's next sync, like
 * its writes. A crash can thus bring back a truncation's blocks that a
 * later, synced write used meanwhile, and leave the volume over capacity
 * (every growing call then fails until something is given back) -- a
 * state a journalled file system avoids by not reusing freed blocks before
 * the freeing commits; it is kept because it is harder on the log, not
 * easier. The planted bug --plant reserve-stuck: a truncation of the file
 * named RESERVE gives none of its blocks back -- they stay taken for the
 * rest of the run, crashes included, as if an old descriptor of an
 * unlinked copy held them -- while the file is as short as asked (its
 * refill takes new blocks).
 *
 * NOT SIMULATED
 *
 * Other directories (the replicated log's dir/import, wal_replace_segments
 * into it: simfs_mkdirat refuses with EPERM), file modes, short reads, EINTR, flock between processes (one
 * simulated process owns the directory at a time), a directory entry made
 * durable by an fsync of the file alone (the log never relies on it), and
 * media errors on read (EIO from pread). Metadata other than names and
 * sizes is not kept.
 */
#define _GNU_SOURCE
#include "simfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/clock.h"
#include "wal/walfs.h" /* the prototypes the log layer calls, under DB_SIM */
#include "../unit/testkit.h" /* tk_rand: the generator */

#define NAME_MAX_SIM 64
#define MAX_NAMES 1024
#define MAX_FDS 512
#define FD_BASE 1000

/* ---- randomness ---------------------------------------------------------------- */

uint64_t sim_rand(struct simrng *r)
{
    return tk_rand(&r->s);
}

uint64_t sim_below(struct simrng *r, uint64_t n)
{
    return n ? sim_rand(r) % n : 0;
}

int sim_chance(struct simrng *r, uint64_t num, uint64_t den)
{
    return sim_below(r, den) < num;
}

/* ---- state ------------------------------------------------------------------------ */

enum { OP_WRITE = 1, OP_TRUNC = 2 };
struct op {
    int kind;
    uint64_t off; /* a write's offset; a truncation's new size */
    size_t n;
    uint8_t *p;
};

struct buf {
    uint8_t *p;
    size_t len, cap;
};

struct inode {
    struct buf cur, dur;
    struct op *ops;
    size_t nops, opcap;
    uint64_t falloc, falloc_dur; /* blocks taken past the size (FALLOC_FL_KEEP_SIZE, the plant) */
    uint64_t mark;               /* the usage walk: reachable in walk number mark */
    struct inode *next; /* every inode of the run, freed at reset */
};

struct dent {
    char name[NAME_MAX_SIM];
    struct inode *ino;
};

struct names {
    struct dent v[MAX_NAMES];
    size_t n;
};

enum { D_CREATE = 1, D_UNLINK, D_RENAME, D_LINK };
struct dop {
    int kind;
    char a[NAME_MAX_SIM], b[NAME_MAX_SIM];
    struct inode *ino;
};

struct sfd {
    int used, isdir;
    struct inode *ino;
    uint64_t pos;
};

struct simfs_dir {
    int fd;
    size_t i, n;
    char (*names)[NAME_MAX_SIM];
    struct dirent ent;
};

static struct {
    struct simrng rng;
    struct simfs_faults f;
    uint64_t now_ms;
    struct names cur, dur;
    struct dop *dops;
    size_t ndops, dopcap;
    struct inode *inodes;
    struct sfd fds[MAX_FDS];
    uint64_t mutations, calls, crash_at;
    jmp_buf *crash_jb;
    uint32_t full_left; /* mutating calls left in a full-disk episode */
    int reordered;
    int plant_nosync;
    /* capacity (simfs_set_capacity); 0 = no limit */
    uint64_t capacity, walk;
    uint32_t block;      /* allocation unit (0: 4096, the default) */
    int no_fallocate;    /* fallocate fails with EOPNOTSUPP */
    int plant_stuck;     /* --plant reserve-stuck */
    uint64_t refusals;   /* calls refused for capacity */
    uint64_t leaked;     /* --plant reserve-stuck: blocks the reserve never gave back */
} S;

void simfs_set_plant_nosync(int on)
{
    S.plant_nosync = on;
}

void simfs_set_plant_reserve_stuck(int on)
{
    S.plant_stuck = on;
}

struct simrng *simfs_rng(void)
{
    return &S.rng;
}

/* ---- clock and randomness for the code under test (clock.h, built with DB_SIM) ---- */

void sim_clock_set(uint64_t now_ms)
{
    S.now_ms = now_ms;
}

uint64_t sim_clock_get(void)
{
    return S.now_ms;
}

uint64_t clock_now_ms(void)
{
    return S.now_ms;
}

uint64_t clock_now_us(void)
{
    return S.now_ms * 1000u;
}

uint64_t clock_mono_ns(void)
{
    return S.now_ms * 1000000u;
}

uint64_t clock_rand64(void)
{
    return sim_rand(&S.rng);
}

/* ---- buffers -------------------------------------------------------------------- */

static void buf_size(struct buf *b, size_t len)
{
    if (len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < len)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    if (len > b->len)
        memset(b->p + b->len, 0, len - b->len);
    b->len = len;
}

static void buf_apply(struct buf *b, const struct op *o, size_t n)
{
    if (o->kind == OP_TRUNC) {
        buf_size(b, o->off);
        return;
    }
    if (n == 0)
        return; /* an empty write (or a torn one that kept nothing) changes nothing */
    if (o->off + n > b->len)
        buf_size(b, o->off + n);
    memcpy(b->p + o->off, o->p, n);
}

static void op_push(struct inode *ino, int kind, uint64_t off, const void *p, size_t n)
{
    struct op *o;

    if (ino->nops == ino->opcap) {
        ino->opcap = ino->opcap ? ino->opcap * 2 : 16;
        ino->ops = realloc(ino->ops, ino->opcap * sizeof(*ino->ops));
    }
    o = &ino->ops[ino->nops++];
    o->kind = kind;
    o->off = off;
    o->n = n;
    o->p = NULL;
    if (n) {
        o->p = malloc(n);
        memcpy(o->p, p, n);
    }
    buf_apply(&ino->cur, o, n);
}

static void ops_clear(struct inode *ino)
{
    for (size_t i = 0; i < ino->nops; i++)
        free(ino->ops[i].p);
    ino->nops = 0;
}

static void ino_sync(struct inode *ino)
{
    for (size_t i = 0; i < ino->nops; i++)
        buf_apply(&ino->dur, &ino->ops[i], ino->ops[i].n);
    ops_clear(ino);
    ino->falloc_dur = ino->falloc;
}

static struct inode *ino_new(void)
{
    struct inode *ino = calloc(1, sizeof(*ino));
    ino->next = S.inodes;
    S.inodes = ino;
    return ino;
}

/* ---- names ---------------------------------------------------------------------- */

static struct dent *names_find(struct names *t, const char *name)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, name) == 0)
            return &t->v[i];
    return NULL;
}

static void names_del(struct names *t, const char *name)
{
    struct dent *d = names_find(t, name);
    if (d)
        *d = t->v[--t->n];
}

static void names_set(struct names *t, const char *name, struct inode *ino)
{
    struct dent *d = names_find(t, name);

    if (!d) {
        if (t->n == MAX_NAMES)
            abort();
        d = &t->v[t->n++];
        snprintf(d->name, sizeof(d->name), "%s", name);
    }
    d->ino = ino;
}

static void dop_apply(struct names *t, const struct dop *d)
{
    struct dent *e;

    switch (d->kind) {
    case D_CREATE:
        names_set(t, d->a, d->ino);
        break;
    case D_UNLINK:
        names_del(t, d->a);
        break;
    case D_RENAME:
        if ((e = names_find(t, d->a)) != NULL) {
            struct inode *ino = e->ino;
            names_del(t, d->a);
            names_set(t, d->b, ino);
        }
        break;
    case D_LINK:
        if ((e = names_find(t, d->a)) != NULL)
            names_set(t, d->b, e->ino);
        break;
    }
}

static void dop_push(int kind, const char *a, const char *b, struct inode *ino)
{
    struct dop *d;

    if (S.ndops == S.dopcap) {
        S.dopcap = S.dopcap ? S.dopcap * 2 : 32;
        S.dops = realloc(S.dops, S.dopcap * sizeof(*S.dops));
    }
    d = &S.dops[S.ndops++];
    memset(d, 0, sizeof(*d));
    d->kind = kind;
    snprintf(d->a, sizeof(d->a), "%s", a);
    if (b)
        snprintf(d->b, sizeof(d->b), "%s", b);
    d->ino = ino;
    dop_apply(&S.cur, d);
}

/* ---- reset, crash ------------------------------------------------------------------ */

void simfs_reset(uint64_t seed, uint64_t now_ms, const struct simfs_faults *f)
{
    while (S.inodes) {
        struct inode *n = S.inodes->next;
        ops_clear(S.inodes);
        free(S.inodes->ops);
        free(S.inodes->cur.p);
        free(S.inodes->dur.p);
        free(S.inodes);
        S.inodes = n;
    }
    free(S.dops);
    memset(&S, 0, sizeof(S));
    S.rng.s = seed * 0x2545F4914F6CDD1Dull + 0x1234567;
    S.now_ms = now_ms;
    if (f)
        S.f = *f;
}

void simfs_wipe(void)
{
    S.cur.n = 0;
    S.dur.n = 0;
    S.ndops = 0;
    memset(S.fds, 0, sizeof(S.fds));
}

void simfs_reset_faults(const struct simfs_faults *f)
{
    S.f = *f;
    S.full_left = 0;
}

void simfs_arm_crash(uint64_t n, jmp_buf *jb)
{
    S.crash_at = n ? S.mutations + n : 0;
    S.crash_jb = jb;
}

uint64_t simfs_mutations(void)
{
    return S.mutations;
}

uint64_t simfs_calls(void)
{
    return S.calls;
}

int simfs_last_crash_reordered(void)
{
    return S.reordered;
}

/* What one file keeps of its unsynced operations at a power loss. */
static void ino_crash(struct inode *ino)
{
    struct simrng *r = &S.rng;

    if (S.f.reorder && ino->nops > 1 && sim_chance(r, 1, 4)) {
        int dropped = 0;
        for (size_t i = 0; i < ino->nops; i++) {
            struct op *o = &ino->ops[i];
            if (sim_chance(r, 1, 2)) {
                dropped = 1;
                continue;
            }
            if (dropped && o->kind == OP_WRITE)
                S.reordered = 1;
            size_t n = o->kind == OP_WRITE && sim_chance(r, 1, 4) ? (size_t)sim_below(r, o->n + 1) : o->n;
            if (n < o->n)
                dropped = 1;
            buf_apply(&ino->dur, o, n);
        }
    } else {
        size_t k = (size_t)sim_below(r, ino->nops + 1);
        for (size_t i = 0; i < k && i < ino->nops; i++)
            buf_apply(&ino->dur, &ino->ops[i], ino->ops[i].n);
        if (k < ino->nops && ino->ops[k].kind == OP_WRITE && sim_chance(r, 1, 2))
            buf_apply(&ino->dur, &ino->ops[k], (size_t)sim_below(r, ino->ops[k].n + 1));
    }
    ops_clear(ino);
}

void simfs_crash_state(void)
{
    size_t k = (size_t)sim_below(&S.rng, S.ndops + 1);

    S.reordered = 0;
    for (size_t i = 0; i < k; i++)
        dop_apply(&S.dur, &S.dops[i]);
    S.ndops = 0;
    for (struct inode *ino = S.inodes; ino; ino = ino->next) {
        int reachable = 0;
        for (size_t i = 0; i < S.dur.n && !reachable; i++)
            reachable = S.dur.v[i].ino == ino;
        if (reachable)
            ino_crash(ino);
        else
            ops_clear(ino);
        /* after the power loss the page cache is the disk */
        ino->falloc = ino->falloc_dur;
        ino->cur.len = 0;
        buf_size(&ino->cur, ino->dur.len);
        if (ino->dur.len)
            memcpy(ino->cur.p, ino->dur.p, ino->dur.len);
    }
    S.cur = S.dur;
    memset(S.fds, 0, sizeof(S.fds));
    S.full_left = 0;
    S.crash_at = 0;
}

static void die(void)
{
    jmp_buf *jb = S.crash_jb;

    simfs_crash_state();
    longjmp(*jb, 1);
}

/* Count a mutating call; 0 go on, 1 make it halfway then die, 2 make it then die (die() for "not at all"). */
static int mutation(void)
{
    S.calls++;
    S.mutations++;
    if (S.full_left)
        S.full_left--;
    if (!S.crash_at || S.mutations != S.crash_at || !S.crash_jb)
        return 0;
    switch (sim_below(&S.rng, 3)) {
    case 0:
        die();
        return 0;
    case 1:
        return 1;
    default:
        return 2;
    }
}

/* ---- descriptors ---------------------------------------------------------------------- */

static struct sfd *fd_get(int fd)
{
    if (fd < FD_BASE || fd >= FD_BASE + MAX_FDS || !S.fds[fd - FD_BASE].used) {
        errno = EBADF;
        return NULL;
    }
    return &S.fds[fd - FD_BASE];
}

static int fd_new(struct inode *ino, int isdir)
{
    for (int i = 0; i < MAX_FDS; i++)
        if (!S.fds[i].used) {
            S.fds[i].used = 1;
            S.fds[i].isdir = isdir;
            S.fds[i].ino = ino;
            S.fds[i].pos = 0;
            return FD_BASE + i;
        }
    errno = EMFILE;
    return -1;
}

int simfs_open_fds(void)
{
    int n = 0;
    for (int i = 0; i < MAX_FDS; i++)
        n += S.fds[i].used;
    return n;
}

/* ---- capacity ------------------------------------------------------------------------- */

void simfs_set_capacity(uint64_t bytes)
{
    S.capacity = bytes;
}

void simfs_set_block(uint32_t block)
{
    S.block = block;
}

void simfs_set_fallocate(int on)
{
    S.no_fallocate = !on;
}

static uint64_t block_size(void)
{
    return S.block ? S.block : 4096;
}

/* Bytes a file of size len with extra blocks taken past it holds. */
static uint64_t alloc_of(uint64_t len, uint64_t falloc)
{
    uint64_t b = block_size(), n = len > falloc ? len : falloc;
    return (n + b - 1) / b * b;
}

static uint64_t ino_alloc(const struct inode *ino)
{
    return alloc_of(ino->cur.len, ino->falloc);
}

uint64_t simfs_used(void)
{
    uint64_t used = 0;

    S.walk++;
    for (size_t i = 0; i < S.cur.n; i++)
        S.cur.v[i].ino->mark = S.walk;
    for (int i = 0; i < MAX_FDS; i++)
        if (S.fds[i].used && S.fds[i].ino)
            S.fds[i].ino->mark = S.walk;
    for (struct inode *ino = S.inodes; ino; ino = ino->next)
        if (ino->mark == S.walk)
            used += ino_alloc(ino);
    return used + S.leaked;
}

/* Is ino the file named RESERVE (the log's space reserve)? */
static int is_reserve(const struct inode *ino)
{
    struct dent *e = names_find(&S.cur, "RESERVE");
    return e && e->ino == ino;
}

int64_t simfs_file_size(const char *name)
{
    struct dent *e = names_find(&S.cur, name);
    return e ? (int64_t)e->ino->cur.len : -1;
}

uint64_t simfs_unnamed(void)
{
    uint64_t named = 0, used = simfs_used();

    S.walk++;
    for (size_t i = 0; i < S.cur.n; i++)
        if (S.cur.v[i].ino->mark != S.walk) {
            S.cur.v[i].ino->mark = S.walk;
            named += ino_alloc(S.cur.v[i].ino);
        }
    return used - named;
}

uint64_t simfs_capacity(void)
{
    return S.capacity;
}

uint64_t simfs_refusals(void)
{
    return S.refusals;
}

/* Whole blocks free, in bytes; UINT64_MAX without a limit. */
static uint64_t free_bytes(void)
{
    uint64_t used, b = block_size();

    if (!S.capacity)
        return UINT64_MAX;
    used = simfs_used();
    return used < S.capacity ? (S.capacity - used) / b * b : 0;
}

/*
 * How many of n bytes at off fit in ino before the volume is full: n when
 * there is no limit or the write allocates nothing new.
 */
static size_t room_for(const struct inode *ino, uint64_t off, size_t n)
{
    uint64_t have, fits;

    if (!S.capacity || alloc_of(off + n, ino->falloc) <= ino_alloc(ino))
        return n;
    have = ino_alloc(ino);
    fits = have + free_bytes(); /* the largest size the file can reach */
    if (fits <= off)
        return 0;
    return fits - off < n ? (size_t)(fits - off) : n;
}

/* ---- the calls ------------------------------------------------------------------------- */

int simfs_openat(int dirfd, const char *name, int flags, ...)
{
    struct sfd *d = fd_get(dirfd);
    struct dent *e;
    int m;

    S.calls++;
    if (!d)
        return -1;
    if (!d->isdir) {
        errno = ENOTDIR;
        return -1;
    }
    if (strcmp(name, ".") == 0)
        return fd_new(NULL, 1);
    if (strchr(name, '/') || strlen(name) >= NAME_MAX_SIM) {
        errno = ENOENT;
        return -1;
    }
    e = names_find(&S.cur, name);
    if (e && (flags & O_CREAT) && (flags & O_EXCL)) {
        errno = EEXIST;
        return -1;
    }
    if (!e && !(flags & O_CREAT)) {
        errno = ENOENT;
        return -1;
    }
    if (!e) {
        if (S.full_left || (S.f.enospc_ppm && sim_chance(&S.rng, S.f.enospc_ppm, 1000000))) {
            if (!S.full_left)
                S.full_left = S.f.enospc_calls;
            S.calls--;
            mutation();
            errno = ENOSPC;
            return -1;
        }
        if (S.capacity && free_bytes() == 0) {
            S.refusals++;
            S.calls--;
            if (mutation())
                die();
            errno = ENOSPC;
            return -1;
        }
        S.calls--;
        m = mutation();
        dop_push(D_CREATE, name, NULL, ino_new());
        e = names_find(&S.cur, name);
        if (m)
            die();
    } else if ((flags & O_TRUNC) && e->ino->cur.len) {
        S.calls--;
        m = mutation();
        op_push(e->ino, OP_TRUNC, 0, NULL, 0);
        if (m)
            die();
    }
    return fd_new(e->ino, 0);
}

int simfs_open(const char *path, int flags, ...)
{
    size_t n = strlen(SIMFS_DIR);

    if (strcmp(path, SIMFS_DIR) == 0) {
        S.calls++;
        return fd_new(NULL, 1);
    }
    if (strncmp(path, SIMFS_DIR, n) == 0 && path[n] == '/') {
        int dfd = fd_new(NULL, 1), fd;
        if (dfd < 0)
            return -1;
        fd = simfs_openat(dfd, path + n + 1, flags, 0644);
        S.fds[dfd - FD_BASE].used = 0;
        return fd;
    }
    S.calls++;
    errno = ENOENT;
    return -1;
}

int simfs_close(int fd)
{
    struct sfd *d = fd_get(fd);

    S.calls++;
    if (!d)
        return -1;
    d->used = 0;
    return 0;
}

/* A write the disk refuses: its first k bytes land (a short write), or none (ENOSPC). */
static ssize_t land_prefix(struct sfd *d, const void *p, size_t k, uint64_t off, int m)
{
    if (k > 0)
        op_push(d->ino, OP_WRITE, off, p, k);
    if (m)
        die();
    if (k > 0)
        return (ssize_t)k;
    errno = ENOSPC;
    return -1;
}

static ssize_t do_write(struct sfd *d, const void *p, size_t n, uint64_t off)
{
    int m;

    if (d->isdir) {
        errno = EISDIR;
        return -1;
    }
    if (off + n > d->ino->cur.len &&
        (S.full_left || (S.f.enospc_ppm && sim_chance(&S.rng, S.f.enospc_ppm, 1000000)))) {
        int first = !S.full_left;
        m = mutation();
        if (first) {
            /* the episode begins: part of this write may land first */
            S.full_left = S.f.enospc_calls ? S.f.enospc_calls : 1;
            size_t room = off < d->ino->cur.len ? (size_t)(d->ino->cur.len - off) : 0;
            size_t k = room + (size_t)sim_below(&S.rng, n - room + 1);
            return land_prefix(d, p, k < n ? k : 0, off, m);
        }
        return land_prefix(d, p, 0, off, m);
    }
    if (S.capacity) {
        size_t k = room_for(d->ino, off, n);
        if (k < n) {
            /* the volume is full: the prefix that fits lands (a short write), or ENOSPC */
            S.refusals++;
            m = mutation();
            return land_prefix(d, p, k, off, m);
        }
    }
    m = mutation();
    if (m == 1) {
        op_push(d->ino, OP_WRITE, off, p, (size_t)sim_below(&S.rng, n + 1));
        die();
    }
    op_push(d->ino, OP_WRITE, off, p, n);
    if (m)
        die();
    return (ssize_t)n;
}

ssize_t simfs_pwrite(int fd, const void *p, size_t n, off_t off)
{
    struct sfd *d = fd_get(fd);

    if (!d) {
        S.calls++;
        return -1;
    }
    return do_write(d, p, n, (uint64_t)off);
}

ssize_t simfs_writev(int fd, const struct iovec *v, int n)
{
    struct sfd *d = fd_get(fd);
    size_t total = 0, o = 0;
    uint8_t *tmp;
    ssize_t r;

    if (!d) {
        S.calls++;
        return -1;
    }
    for (int i = 0; i < n; i++)
        total += v[i].iov_len;
    tmp = malloc(total ? total : 1);
    for (int i = 0; i < n; i++) {
        memcpy(tmp + o, v[i].iov_base, v[i].iov_len);
        o += v[i].iov_len;
    }
    r = do_write(d, tmp, total, d->pos);
    free(tmp);
    if (r > 0)
        d->pos += (uint64_t)r;
    return r;
}

ssize_t simfs_pread(int fd, void *p, size_t n, off_t off)
{
    struct sfd *d = fd_get(fd);

    S.calls++;
    if (!d)
        return -1;
    if (d->isdir) {
        errno = EISDIR;
        return -1;
    }
    if ((uint64_t)off >= d->ino->cur.len)
        return 0;
    if ((uint64_t)off + n > d->ino->cur.len)
        n = (size_t)(d->ino->cur.len - (uint64_t)off);
    memcpy(p, d->ino->cur.p + off, n);
    return (ssize_t)n;
}

static int do_sync(int fd)
{
    struct sfd *d = fd_get(fd);
    int m;

    if (!d) {
        S.calls++;
        return -1;
    }
    m = mutation();
    if (S.f.fsync_fail_ppm && sim_chance(&S.rng, S.f.fsync_fail_ppm, 1000000)) {
        /* fsyncgate: the dirty data is dropped, never to be written */
        if (d->ino)
            ops_clear(d->ino);
        if (m)
            die();
        errno = EIO;
        return -1;
    }
    if (m == 1) {
        /* halfway: some of it reached the disk -- what a crash now keeps anyway */
        die();
    }
    if (S.plant_nosync && !d->isdir) {
        /* the planted bug: success, and nothing made durable */
    } else if (d->isdir) {
        for (size_t i = 0; i < S.ndops; i++)
            dop_apply(&S.dur, &S.dops[i]);
        S.ndops = 0;
    } else {
        ino_sync(d->ino);
    }
    if (m)
        die();
    return 0;
}

int simfs_fdatasync(int fd)
{
    return do_sync(fd);
}

int simfs_fsync(int fd)
{
    return do_sync(fd);
}

int simfs_ftruncate(int fd, off_t len)
{
    struct sfd *d = fd_get(fd);
    uint64_t had;
    int m;

    if (!d) {
        S.calls++;
        return -1;
    }
    m = mutation();
    had = ino_alloc(d->ino);
    if (d->ino->falloc > (uint64_t)len)
        d->ino->falloc = (uint64_t)len; /* blocks past the new size are freed too */
    op_push(d->ino, OP_TRUNC, (uint64_t)len, NULL, 0);
    if (S.plant_stuck && is_reserve(d->ino) && had > ino_alloc(d->ino))
        S.leaked += had - ino_alloc(d->ino); /* the planted bug: the blocks are never given back */
    if (m)
        die();
    return 0;
}

int simfs_fallocate(int fd, int mode, off_t off, off_t len)
{
    struct sfd *d = fd_get(fd);
    uint64_t end = (uint64_t)off + (uint64_t)len, have, need;
    int m;

    if (!d) {
        S.calls++;
        return -1;
    }
    if (d->isdir || off < 0 || len <= 0 || (mode & ~FALLOC_FL_KEEP_SIZE) || S.no_fallocate) {
        S.calls++;
        errno = d->isdir ? EISDIR : off < 0 || len <= 0 ? EINVAL : EOPNOTSUPP;
        return -1;
    }
    have = ino_alloc(d->ino);
    need = alloc_of(end, d->ino->falloc) > have ? alloc_of(end, d->ino->falloc) - have : 0;
    if (need) {
        int episode = S.full_left ||
                      (S.f.enospc_ppm && sim_chance(&S.rng, S.f.enospc_ppm, 1000000));
        int full = S.capacity && need > free_bytes();
        if (episode || full) {
            /* all or nothing: a full disk takes none of it */
            S.refusals += !episode;
            m = mutation();
            if (episode && !S.full_left)
                S.full_left = S.f.enospc_calls ? S.f.enospc_calls : 1;
            if (m)
                die();
            errno = ENOSPC;
            return -1;
        }
    }
    m = mutation();
    if (mode & FALLOC_FL_KEEP_SIZE) {
        if (end > d->ino->falloc)
            d->ino->falloc = end;
    } else if (end > d->ino->cur.len) {
        op_push(d->ino, OP_TRUNC, end, NULL, 0); /* the size grows, zeros read back */
    }
    if (m)
        die();
    return 0;
}

static int dir_ok(int dirfd)
{
    struct sfd *d = fd_get(dirfd);
    if (!d)
        return 0;
    if (!d->isdir) {
        errno = ENOTDIR;
        return 0;
    }
    return 1;
}

int simfs_unlinkat(int dirfd, const char *name, int flags)
{
    int m;

    if (!dir_ok(dirfd)) {
        S.calls++;
        return -1;
    }
    if (!names_find(&S.cur, name)) {
        S.calls++;
        errno = ENOENT;
        return -1;
    }
    m = mutation();
    dop_push(D_UNLINK, name, NULL, NULL);
    if (m)
        die();
    return 0;
}

int simfs_renameat(int olddirfd, const char *oldname, int newdirfd, const char *newname)
{
    int m;

    if (!dir_ok(olddirfd) || !dir_ok(newdirfd)) {
        S.calls++;
        return -1;
    }
    if (!names_find(&S.cur, oldname)) {
        S.calls++;
        errno = ENOENT;
        return -1;
    }
    m = mutation();
    dop_push(D_RENAME, oldname, newname, NULL);
    if (m)
        die();
    return 0;
}

int simfs_linkat(int olddirfd, const char *oldname, int newdirfd, const char *newname, int flags)
{
    int m;

    if (!dir_ok(olddirfd) || !dir_ok(newdirfd)) {
        S.calls++;
        return -1;
    }
    if (!names_find(&S.cur, oldname) || names_find(&S.cur, newname)) {
        S.calls++;
        errno = names_find(&S.cur, newname) ? EEXIST : ENOENT;
        return -1;
    }
    m = mutation();
    dop_push(D_LINK, oldname, newname, NULL);
    if (m)
        die();
    return 0;
}

int simfs_mkdir(const char *path, mode_t mode)
{
    S.calls++;
    errno = EEXIST; /* "/", "/sim" and SIMFS_DIR always exist */
    return -1;
}

/* One directory only (NOT SIMULATED): the log never makes another; wal_dir_open_sub() would. */
int simfs_mkdirat(int dirfd, const char *name, mode_t mode)
{
    (void)dirfd;
    (void)name;
    (void)mode;
    S.calls++;
    errno = EPERM;
    return -1;
}

static void fill_stat(struct stat *st, const struct inode *ino)
{
    memset(st, 0, sizeof(*st));
    st->st_mode = ino ? S_IFREG | 0644 : S_IFDIR | 0755;
    st->st_size = ino ? (off_t)ino->cur.len : 4096;
    st->st_blocks = (blkcnt_t)((ino ? ino_alloc(ino) : 4096) + 511) / 512;
    st->st_blksize = (blksize_t)block_size();
    st->st_nlink = 1;
}

int simfs_fstatvfs(int fd, struct statvfs *st)
{
    uint64_t b = block_size();

    S.calls++;
    if (!fd_get(fd))
        return -1;
    memset(st, 0, sizeof(*st));
    st->f_bsize = st->f_frsize = (unsigned long)b;
    st->f_namemax = NAME_MAX_SIM - 1;
    st->f_files = st->f_ffree = st->f_favail = MAX_NAMES;
    if (!S.capacity) {
        st->f_blocks = st->f_bfree = st->f_bavail = (fsblkcnt_t)1 << 40;
        return 0;
    }
    st->f_blocks = (fsblkcnt_t)(S.capacity / b);
    st->f_bfree = st->f_bavail = (fsblkcnt_t)(free_bytes() / b);
    return 0;
}

int simfs_fstat(int fd, struct stat *st)
{
    struct sfd *d = fd_get(fd);

    S.calls++;
    if (!d)
        return -1;
    fill_stat(st, d->ino);
    return 0;
}

/* Owners and modes: the simulated directory has none; the log never reads them. */
int simfs_fchmod(int fd, mode_t mode)
{
    S.calls++;
    return fd_get(fd) ? 0 : -1;
}

int simfs_fchown(int fd, uid_t uid, gid_t gid)
{
    S.calls++;
    return fd_get(fd) ? 0 : -1;
}

int simfs_fstatat(int dirfd, const char *name, struct stat *st, int flags)
{
    struct dent *e;

    S.calls++;
    if (!dir_ok(dirfd))
        return -1;
    if (!(e = names_find(&S.cur, name))) {
        errno = ENOENT;
        return -1;
    }
    fill_stat(st, e->ino);
    return 0;
}

int simfs_flock(int fd, int op)
{
    S.calls++;
    return fd_get(fd) ? 0 : -1;
}

int simfs_posix_fadvise(int fd, off_t off, off_t len, int advice)
{
    S.calls++;
    return 0;
}

simfs_dir *simfs_fdopendir(int fd)
{
    struct sfd *d = fd_get(fd);
    simfs_dir *dir;

    S.calls++;
    if (!d)
        return NULL;
    dir = calloc(1, sizeof(*dir));
    dir->fd = fd;
    dir->n = S.cur.n + 2;
    dir->names = calloc(dir->n, sizeof(*dir->names));
    strcpy(dir->names[0], ".");
    strcpy(dir->names[1], "..");
    for (size_t i = 0; i < S.cur.n; i++)
        strcpy(dir->names[i + 2], S.cur.v[i].name);
    return dir;
}

struct dirent *simfs_readdir(simfs_dir *d)
{
    S.calls++;
    if (d->i >= d->n)
        return NULL;
    memset(&d->ent, 0, sizeof(d->ent));
    snprintf(d->ent.d_name, sizeof(d->ent.d_name), "%s", d->names[d->i++]);
    return &d->ent;
}

int simfs_closedir(simfs_dir *d)
{
    simfs_close(d->fd);
    free(d->names);
    free(d);
    return 0;
}

int simfs_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    memset(t, 0, sizeof(*t));
    fn(arg); /* at once, on this thread: a run is one sequence of calls */
    return 0;
}

int simfs_thread_join(pthread_t t, void **ret)
{
    if (ret)
        *ret = NULL;
    return 0;
}

/* ---- faults and reports ------------------------------------------------------------------ */

int simfs_flip_bit(char *name, size_t namesz, uint64_t *off)
{
    struct dent *cand[MAX_NAMES];
    size_t n = 0;

    for (size_t i = 0; i < S.dur.n; i++) {
        const char *nm = S.dur.v[i].name;
        size_t l = strlen(nm);
        if (S.dur.v[i].ino->dur.len == 0)
            continue;
        if ((l > 4 && strcmp(nm + l - 4, ".wal") == 0) || strcmp(nm, "CHECKPOINT") == 0)
            cand[n++] = &S.dur.v[i];
    }
    if (n == 0)
        return -1;
    struct dent *e = cand[sim_below(&S.rng, n)];
    struct inode *ino = e->ino;
    uint64_t o = sim_below(&S.rng, ino->dur.len);
    uint8_t bit = (uint8_t)(1u << sim_below(&S.rng, 8));
    ino->dur.p[o] ^= bit;
    if (o < ino->cur.len)
        ino->cur.p[o] ^= bit;
    snprintf(name, namesz, "%s", e->name);
    *off = o;
    return 0;
}

void simfs_dump(void (*fn)(const char *name, uint64_t size, uint64_t durable, int pending))
{
    for (size_t i = 0; i < S.cur.n; i++)
        fn(S.cur.v[i].name, S.cur.v[i].ino->cur.len, S.cur.v[i].ino->dur.len,
           (int)S.cur.v[i].ino->nops);
}
