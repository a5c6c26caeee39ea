/*
 * cli_wal_salvage.c -- "delay-bridge wal salvage DIR [--yes]": repair a log
 * the daemon refuses as corrupt.
 *
 *
 * "wal salvage DIR --yes" turns a log the daemon refuses (exit 4, WAL
 * corrupt) into one it accepts, keeping every record that is still valid
 * and deleting nothing. What the daemon requires at open (src/wal/wal.c,
 * walscan.h): every segment header valid with one wal_id, segment numbers
 * contiguous, and LSNs +1 per record from each segment's base_lsn, across
 * segments too.
 *
 * Why the LSNs are kept, not renumbered. A message's id is the LSN of its
 * first ADD; DONE and CANCEL records name ids, and every republished message
 * carries "<wal_id>-<msg_id>" in x-delay-bridge-id for consumers to
 * deduplicate on. New messages take the next LSN as their id. Renumbering
 * records down to close a gap would make the daemon hand out ids again that
 * were already used (a consumer that deduplicates would drop the new
 * message); renumbering the surviving ADDs would change ids already seen.
 * So every surviving record keeps its bytes, LSN and segment, and each LSN
 * whose record is lost is taken by a FILLER: an empty DONE record (count 0,
 * 28 bytes, the smallest record there is), which replay ignores. Lost
 * records were at least 28 bytes each, so a repaired segment is never
 * larger than the damaged one.
 *
 * Per damaged segment (mapped read-only): records are decoded from the
 * header on; a record that is valid with the next LSN is kept; one that is
 * not starts a damaged region, and the rest of the file is searched byte by
 * byte for the next record that is valid under the segment's salt with an
 * LSN at or beyond the expected one and below the next segment's base_lsn
 * (walscan's torn-tail search, with an upper bound). The bytes skipped are
 * dropped; the LSNs skipped (known exactly, from the record found, or from
 * the next segment's base_lsn when nothing valid follows) get fillers. In
 * the newest segment, what follows the last valid record is a torn tail and
 * is dropped like the daemon would cut it (no record after it: its LSNs
 * are unknown and are not reserved).
 *
 * A damaged segment's file is kept as NAME.damaged-<UTC time> (a hard link,
 * or a rename where links are not possible); the repaired file is written
 * as NAME.salvage-tmp, synced, given the old file's owner and mode, and
 * renamed over NAME, then the directory is synced: at every moment NAME is
 * either the old or the new file. Names not ending in ".wal" are ignored by
 * the daemon. Then the directory is checked again like "wal check" does.
 *
 * What cannot be salvaged (exit 4): a bad segment header that is not the
 * newest segment's half-written one (the salt that seeds every CRC is in
 * it), a segment of another log, a missing segment, LSNs that overlap.
 *
 * Which messages may be lost: a lost LSN L could have been the first ADD of
 * message L. If a surviving ADD carries msg id L (a compaction copy) the
 * message survives; if a surviving DONE or CANCEL names L it was already
 * published or cancelled. The rest are reported as possibly lost. A lost
 * DONE or CANCEL cannot be told: a published message may go out again, a
 * cancelled or replaced one may go out after all; that is said too.
 *
 * The directory's LOCK is taken with flock(LOCK_EX|LOCK_NB) first (the
 * daemon's lock): a running daemon makes it exit 5 before anything is read.
 */
#define _GNU_SOURCE
#include "cli_wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "delay-bridge/wal.h"
#include "delay-bridge/walrec.h"
#include "base/xalloc.h"


#define FILLER_SIZE (WALREC_HDR_SIZE + 4)
#define MAX_FILL (1ull << 26) /* LSNs one gap may fill (1.8 GB of fillers) */
#define OUTBUF (1u << 20)

struct salv_piece {
    int fill;   /* 0: copy bytes [a, a + b) of the old file; 1: b fillers from LSN a */
    uint64_t a, b;
};

struct repair {
    size_t idx;             /* index into scan.segs */
    struct walrec_seghdr h; /* its header: written again as it was */
    struct salv_piece *p;
    size_t np;
    uint64_t kept, kept_bytes, fills;
    char aside[WALSCAN_NAME_SIZE + 48];
};

struct drop {
    size_t idx;
    uint64_t off, bytes; /* the bytes dropped */
    uint64_t lsn, nrec;  /* the LSNs they held; unknown: from lsn on, count unknown */
    int unknown;
    char why[220];
};

struct lost {
    uint64_t lsn, count;
    uint8_t *st; /* per LSN: 0 unknown, 1 an ADD with that msg id survives, 2 named by DONE/CANCEL */
};

struct salv {
    struct repair *rep;
    size_t nrep;
    struct drop *drops;
    size_t ndrops;
    struct lost *lost;
    size_t nlost;
    int torn; /* the newest segment ends in a torn tail the daemon will cut */
};

static void salv_mark(struct salv *v, uint64_t id, uint8_t how)
{
    for (size_t i = 0; i < v->nlost; i++) {
        struct lost *l = &v->lost[i];
        if (id >= l->lsn && id - l->lsn < l->count && l->st[id - l->lsn] < how)
            l->st[id - l->lsn] = how;
    }
}

static void salv_note(void *arg, const struct walscan_rec *rec)
{
    struct salv *v = arg;
    uint32_t count;

    if (!v->nlost)
        return;
    if (rec->hdr.type == WALREC_ADD) {
        salv_mark(v, walrec_get64(rec->payload), 1);
        return;
    }
    walrec_done_decode(rec->payload, rec->hdr.len, &count); /* layout checked */
    for (uint32_t i = 0; i < count; i++)
        salv_mark(v, walrec_done_id(rec->payload, i), 2);
}

static void salv_free(struct salv *v)
{
    for (size_t i = 0; i < v->nrep; i++)
        free(v->rep[i].p);
    free(v->rep);
    free(v->drops);
    for (size_t i = 0; i < v->nlost; i++)
        free(v->lost[i].st);
    free(v->lost);
}

static void plan_keep(struct repair *rp, uint64_t from, uint64_t to)
{
    struct salv_piece *last = rp->np ? &rp->p[rp->np - 1] : NULL;

    if (to <= from)
        return;
    rp->kept_bytes += to - from;
    if (last && !last->fill && last->a + last->b == from) {
        last->b += to - from;
        return;
    }
    rp->p = xrealloc(rp->p, (rp->np + 1) * sizeof(*rp->p));
    rp->p[rp->np++] = (struct salv_piece){0, from, to - from};
}

/* Bytes [off, off + bytes) dropped, LSNs [lsn, lsn + nrec) lost (fillers), or from lsn on. */
static void plan_drop(struct salv *v, struct repair *rp, uint64_t off, uint64_t bytes,
                      uint64_t lsn, uint64_t nrec, int unknown, const char *why)
{
    struct drop *d;

    v->drops = xrealloc(v->drops, (v->ndrops + 1) * sizeof(*v->drops));
    d = &v->drops[v->ndrops++];
    d->idx = rp->idx;
    d->off = off;
    d->bytes = bytes;
    d->lsn = lsn;
    d->nrec = nrec;
    d->unknown = unknown;
    snprintf(d->why, sizeof(d->why), "%s", why);
    if (!nrec)
        return;
    rp->p = xrealloc(rp->p, (rp->np + 1) * sizeof(*rp->p));
    rp->p[rp->np++] = (struct salv_piece){1, lsn, nrec};
    rp->fills += nrec;
    v->lost = xrealloc(v->lost, (v->nlost + 1) * sizeof(*v->lost));
    v->lost[v->nlost].lsn = lsn;
    v->lost[v->nlost].count = nrec;
    v->lost[v->nlost].st = xcalloc(nrec, 1);
    v->nlost++;
}

/*
 * The next offset at or after from where a record valid under salt starts
 * whose LSN is >= expect and < limit (limit 0: no bound); 0 if none. Its
 * LSN in *lsn.
 */
static uint64_t resync(const uint8_t *b, uint64_t n, uint64_t from, uint32_t salt,
                       uint64_t expect, uint64_t limit, uint64_t *lsn)
{
    for (uint64_t p = from; p + WALREC_HDR_SIZE <= n; p++) {
        const uint8_t *q = b + p;
        struct walrec_hdr h;
        const uint8_t *pl;

        if (!walscan_plausible(q, n - p, expect, limit)) /* the daemon's search, bounded */
            continue;
        if (walrec_decode(q, (size_t)(n - p), salt, &h, &pl) > 0) {
            *lsn = h.lsn;
            return p;
        }
    }
    return 0;
}

/*
 * Plan the repair of segment idx (header h): what to keep, where fillers
 * go. limit: the next segment's base_lsn (0 for the newest). Records before
 * note_from were replayed already (walscan's valid prefix); bad0/why0:
 * walscan's offset and words for the first bad record. 0, CLI_CORRUPT
 * (s->corrupt set) or -errno (reported).
 */
static int plan_segment(struct scan *s, struct salv *v, size_t idx, const struct walrec_seghdr *h,
                        uint64_t limit, uint64_t note_from, uint64_t bad0, const char *why0)
{
    struct seg *g = &s->segs[idx];
    struct repair *rp;
    const uint8_t *b;
    uint64_t n = g->size, pos = WALREC_SEGHDR_SIZE, run = pos, expect = g->base_lsn;
    void *map;
    int r = 0;

    map = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, g->fd, 0);
    if (map == MAP_FAILED) {
        r = -errno;
        fprintf(stderr, "delay-bridge wal salvage: cannot map %s/%s: %s\n", s->dir, g->name,
                strerror(-r));
        return r;
    }
    b = map;
    v->rep = xrealloc(v->rep, (v->nrep + 1) * sizeof(*v->rep));
    rp = &v->rep[v->nrep++];
    memset(rp, 0, sizeof(*rp));
    rp->idx = idx;
    rp->h = *h;
    while (pos < n) {
        struct walrec_hdr rh;
        const uint8_t *pl;
        uint64_t q, found = 0;
        char why[220];
        int d = walrec_decode(b + pos, (size_t)(n - pos), g->salt, &rh, &pl);

        if (d > 0 && rh.lsn >= expect && (!limit || rh.lsn < limit)) {
            if (rh.lsn > expect) { /* LSNs skipped, no bytes missing */
                plan_keep(rp, run, pos);
                run = pos;
                plan_drop(v, rp, pos, 0, expect, rh.lsn - expect, 0,
                          "LSNs skipped between two valid records");
            }
            if (pos >= note_from) {
                struct walscan_rec rec = {rh, pl, pos, (uint32_t)d};
                cw_on_record(s, idx, &rec);
            }
            rp->kept++;
            expect = rh.lsn + 1;
            pos += (uint64_t)d;
            continue;
        }
        if (d > 0)
            snprintf(why, sizeof(why), "a valid record with lsn %" PRIu64 " where %" PRIu64
                     " was expected", rh.lsn, expect);
        else if (pos == bad0 && why0 && *why0)
            snprintf(why, sizeof(why), "%s", why0);
        else if (d == WALREC_PARTIAL)
            snprintf(why, sizeof(why), "record runs past the end of the file");
        else
            snprintf(why, sizeof(why), "bad record header, checksum or payload layout");
        plan_keep(rp, run, pos);
        q = resync(b, n, pos + 1, g->salt, expect, limit, &found);
        if (q) {
            if (found - expect > MAX_FILL)
                goto too_many;
            plan_drop(v, rp, pos, q - pos, expect, found - expect, 0, why);
            expect = found;
            pos = run = q;
        } else if (limit) {
            if (limit - expect > MAX_FILL)
                goto too_many;
            plan_drop(v, rp, pos, n - pos, expect, limit - expect, 0, why);
            expect = limit;
            pos = run = n;
        } else {
            plan_drop(v, rp, pos, n - pos, expect, 0, 1, why);
            pos = run = n;
        }
    }
    plan_keep(rp, run, pos);
    if (limit && expect < limit) {
        if (limit - expect > MAX_FILL)
            goto too_many;
        plan_drop(v, rp, n, 0, expect, limit - expect, 0,
                  "the next segment starts at a later LSN than this one ends");
    }
    goto cleanup;
too_many:
    cw_set_corrupt(s, idx, pos, "cannot salvage: more than %llu LSNs missing in one place",
                (unsigned long long)MAX_FILL);
    r = CLI_CORRUPT;
cleanup:
    munmap(map, (size_t)n);
    return r;
}

/*
 * Scan every segment; plan a repair for each one the daemon would refuse.
 * 0 (v->nrep repairs planned, maybe none), CLI_CORRUPT (cannot salvage,
 * s->corrupt set) or -errno (reported).
 */
static int salv_plan(struct scan *s, struct salv *v)
{
    struct walrec_seghdr *hs = NULL;
    size_t n;
    int r;

    if ((r = cw_open_segs(s)) != 0)
        return r;
    walscan_init(&s->sc, CHUNK, NULL, NULL);
    n = s->nsegs;
    hs = xcalloc(n ? n : 1, sizeof(*hs));
    for (size_t i = 0; i < n; i++) {
        struct seg *g = &s->segs[i];

        r = walscan_seghdr(g->fd, g->segno, g->size, i + 1 == n, &hs[i]);
        if (r == WALSCAN_HDR_CREATING) { /* the daemon deletes it */
            v->torn = 1;
            n = i;
            break;
        }
        if (r < 0) {
            fprintf(stderr, "delay-bridge wal salvage: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror(-r));
            goto cleanup;
        }
        if (r != WALSCAN_HDR_OK) {
            cw_set_corrupt(s, i, 0, "cannot salvage: bad segment header (its salt seeds every "
                        "record checksum); move the segment aside by hand");
            r = CLI_CORRUPT;
            goto cleanup;
        }
        g->salt = hs[i].salt;
        g->base_lsn = hs[i].base_lsn;
        if (i == 0) {
            s->wal_id = hs[i].wal_id;
            s->first_lsn = hs[i].base_lsn;
        } else if (hs[i].wal_id != s->wal_id) {
            cw_set_corrupt(s, i, 32, "cannot salvage: wal_id %016" PRIx64 " differs from %016" PRIx64
                        " of the first segment (a segment of another log?)", hs[i].wal_id,
                        s->wal_id);
            r = CLI_CORRUPT;
            goto cleanup;
        } else if (g->segno != s->segs[i - 1].segno + 1) {
            cw_set_corrupt(s, i, 0, "cannot salvage: segment numbers not contiguous: %" PRIu64
                        " follows %" PRIu64 " (a segment is missing)", g->segno,
                        s->segs[i - 1].segno);
            r = CLI_CORRUPT;
            goto cleanup;
        } else if (hs[i].base_lsn <= hs[i - 1].base_lsn) {
            cw_set_corrupt(s, i, 24, "cannot salvage: base_lsn %" PRIu64 " not above the previous "
                        "segment's %" PRIu64, hs[i].base_lsn, hs[i - 1].base_lsn);
            r = CLI_CORRUPT;
            goto cleanup;
        }
    }
    for (size_t i = 0; i < n; i++) {
        struct seg *g = &s->segs[i];
        struct walscan *sc = &s->sc;
        struct walscan_rec rec;
        int newest = i + 1 == n;
        uint64_t limit = newest ? 0 : hs[i + 1].base_lsn;

        walscan_start(sc, g->fd, g->size, g->salt, g->base_lsn, newest);
        while ((r = walscan_next(sc, &rec)) > 0) {
            if (limit && rec.hdr.lsn >= limit)
                break; /* runs into the next segment's LSNs */
            cw_on_record(s, i, &rec);
            g->records++;
        }
        if (r < 0) {
            fprintf(stderr, "delay-bridge wal salvage: cannot read %s/%s: %s\n", s->dir, g->name,
                    strerror(-r));
            goto cleanup;
        }
        if (r > 0) { /* stopped at a record whose LSN belongs to the next segment */
            r = plan_segment(s, v, i, &hs[i], limit, rec.off, rec.off,
                             "LSN overlaps the next segment");
        } else if (sc->end == WALSCAN_BAD_RECORD || sc->end == WALSCAN_BAD_LSN) {
            r = plan_segment(s, v, i, &hs[i], limit, sc->bad_off, sc->bad_off,
                             sc->end == WALSCAN_BAD_RECORD ? sc->reason : NULL);
        } else {
            if (sc->end == WALSCAN_TORN)
                v->torn = 1;
            r = 0;
            if (limit && sc->next_lsn != limit) /* a gap to the next segment: fillers */
                r = plan_segment(s, v, i, &hs[i], limit, g->size, 0, NULL);
        }
        if (r != 0)
            goto cleanup;
    }
    r = 0;
cleanup:
    free(hs);
    return r;
}

/* buffered writes of the repaired segment */
struct outf {
    int fd;
    uint64_t off;
    uint8_t *buf;
    size_t n;
};

static int out_flush(struct outf *o)
{
    int r = wal_dir_write_at(o->fd, o->buf, o->n, o->off);

    if (r == 0)
        o->off += o->n;
    o->n = 0;
    return r;
}

static int out_put(struct outf *o, const uint8_t *p, uint64_t len)
{
    int r;

    while (len) {
        size_t k = OUTBUF - o->n < len ? OUTBUF - o->n : (size_t)len;
        memcpy(o->buf + o->n, p, k);
        o->n += k;
        p += k;
        len -= k;
        if (o->n == OUTBUF && (r = out_flush(o)) < 0)
            return r;
    }
    return 0;
}

/* Write the repaired segment, keep the damaged one aside, swap them in. 0 or -errno (reported). */
static int salv_write(struct scan *s, struct repair *rp, const char *stamp)
{
    struct seg *g = &s->segs[rp->idx];
    struct outf o = {-1, 0, NULL, 0};
    char tmp[WALSCAN_NAME_SIZE + 16];
    const char *what = "write", *file = g->name; /* what failed, on which file */
    uint8_t zero4[4] = {0, 0, 0, 0};
    struct stat st;
    void *map = MAP_FAILED;
    int r = 0;

    snprintf(tmp, sizeof(tmp), "%s.salvage-tmp", g->name);
    if (fstat(g->fd, &st) < 0) {
        r = -errno;
        what = "stat";
        goto cleanup;
    }
    map = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, g->fd, 0);
    if (map == MAP_FAILED) {
        r = -errno;
        what = "map";
        goto cleanup;
    }
    o.buf = xrealloc(NULL, OUTBUF);
    file = tmp;
    o.fd = wal_dir_create_file(s->dirfd, tmp, st.st_mode & 0777);
    if (o.fd < 0) {
        r = o.fd;
        what = "create";
        goto cleanup;
    }
    walrec_seghdr_encode(o.buf, &rp->h);
    o.n = WALREC_SEGHDR_SIZE;
    for (size_t i = 0; i < rp->np && r == 0; i++) {
        const struct salv_piece *p = &rp->p[i];
        if (!p->fill) {
            r = out_put(&o, (const uint8_t *)map + p->a, p->b);
            continue;
        }
        for (uint64_t k = 0; k < p->b && r == 0; k++) {
            struct walrec_hdr fh = {4, WALREC_DONE, 0, p->a + k, 0};
            struct walrec_piece pc = {zero4, 4};
            uint8_t rec[FILLER_SIZE];

            walrec_hdr_encode(rec, &fh, rp->h.salt, &pc, 1);
            memcpy(rec + WALREC_HDR_SIZE, zero4, 4);
            r = out_put(&o, rec, FILLER_SIZE);
        }
    }
    if (r == 0)
        r = out_flush(&o);
    if (r < 0)
        goto cleanup;
    if ((r = wal_dir_seal_file(o.fd, &st)) < 0) { /* the damaged one's owner and mode */
        what = "sync";
        goto cleanup;
    }
    /* The damaged file stays, under another name; NAME never goes missing (wal.h). */
    struct wal_replacement rep = {g->name, s->dirfd, tmp, rp->aside};
    file = g->name;
    r = wal_replace_segments(s->dirfd, &rep, 1, 0, &what);
cleanup:
    if (r < 0)
        fprintf(stderr, "delay-bridge wal salvage: cannot %s %s/%s: %s\n", what, s->dir, file,
                strerror(-r));
    if (r < 0 && o.fd >= 0)
        wal_dir_discard_file(s->dirfd, tmp, o.fd);
    else if (o.fd >= 0)
        close(o.fd);
    if (map != MAP_FAILED)
        munmap(map, (size_t)g->size);
    free(o.buf);
    return r;
}

/* Print the ids of v's lost LSNs that nothing surviving accounts for, as ranges. */
static uint64_t print_lost_ids(const struct salv *v, uint64_t *finished, uint64_t *survived)
{
    uint64_t n = 0, ranges = 0;

    *finished = *survived = 0;
    for (size_t i = 0; i < v->nlost; i++) {
        const struct lost *l = &v->lost[i];
        for (uint64_t k = 0; k < l->count; k++) {
            if (l->st[k] == 1) {
                (*survived)++;
                continue;
            }
            if (l->st[k] == 2) {
                (*finished)++;
                continue;
            }
            uint64_t e = k;
            while (e + 1 < l->count && l->st[e + 1] == 0)
                e++;
            n += e - k + 1;
            if (ranges++ < 50) {
                if (e == k)
                    printf("%s%" PRIu64, ranges > 1 ? ", " : " ", l->lsn + k);
                else
                    printf("%s%" PRIu64 "..%" PRIu64, ranges > 1 ? ", " : " ", l->lsn + k,
                           l->lsn + e);
            }
            k = e;
        }
    }
    if (ranges > 50)
        printf(", ... (%" PRIu64 " ranges in all)", ranges);
    return n;
}

static void salvage_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal salvage DIR [--yes]\n"
            "\n"
            "Repair a WAL directory that the daemon refuses as corrupt (exit 4): keep every\n"
            "record that is still valid, drop the damaged bytes, and report what was lost.\n"
            "Each damaged segment file is kept as NAME.damaged-<UTC time> in DIR (nothing is\n"
            "deleted) and replaced by a repaired NAME: the valid records, unchanged (same\n"
            "LSNs, so every message keeps its id), with each LSN whose record was lost taken\n"
            "by an empty DONE record, so LSNs stay contiguous and no message id is ever\n"
            "handed out twice. A torn tail of the newest segment is left for the daemon to\n"
            "cut, as it always does.\n"
            "\n"
            "Reports the bytes and records dropped and the msg ids whose message may have\n"
            "been lost (an ADD among the dropped records: not accounted for by a surviving\n"
            "copy, DONE or CANCEL). A dropped DONE or CANCEL cannot be known: a published\n"
            "message may be published again, a cancelled one published after all.\n"
            "\n"
            "Takes the directory's LOCK (the daemon's lock): refuses while a daemon runs.\n"
            "Without --yes it only prints what it would do and changes nothing.\n"
            "\n"
            "  --yes        do it\n"
            "  -h, --help   print this help and exit\n"
            "\n"
            "Exit codes: 0 salvaged, or nothing to do (the log is sound); 1 I/O error;\n"
            "2 usage; 4 still corrupt: cannot be salvaged (bad header of an older segment,\n"
            "a missing segment, a segment of another log), or without --yes a corrupt log\n"
            "left as it was; 5 locked by a running daemon.\n");
}

/* The command line: DIR and --yes. -1 to go on, or the exit code (help, usage). */
static int salvage_options(int argc, char **argv, const char **dir, int *yes)
{
    static const struct option opts[] = {
        {"yes", no_argument, NULL, 'y'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "hy", opts, NULL)) != -1) {
        switch (c) {
        case 'y':
            *yes = 1;
            break;
        case 'h':
            salvage_usage(stdout);
            return CLI_OK;
        default:
            salvage_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal salvage: expected one directory\n");
        salvage_usage(stderr);
        return CLI_USAGE;
    }
    *dir = argv[optind];
    return -1;
}

/*
 * Open the directory and take the daemon's lock, held until we exit, so no
 * daemon starts meanwhile. A dry run creates nothing (no LOCK file: nobody
 * holds it). -1 to go on, or the exit code (said on stderr).
 */
static int salvage_lock(struct scan *s, const char *dir, int yes, int *lockfd)
{
    const char *op = "lock";
    int r;

    s->dirfd = wal_dir_open(dir);
    if (s->dirfd < 0) {
        fprintf(stderr, "delay-bridge wal salvage: cannot open WAL directory %s: %s\n", dir,
                strerror(-s->dirfd));
        return CLI_EIO;
    }
    r = wal_lock_dir_flags(dir, WAL_LOCK_QUIET | (yes ? 0 : WAL_LOCK_NO_CREATE), lockfd, &op);
    if (r == WLOG_ELOCKED) {
        fprintf(stderr, "delay-bridge wal salvage: %s is locked by a running daemon "
                "(%s/LOCK); stop it first\n", dir, dir);
        return CLI_LOCKED;
    }
    if (r < 0) {
        fprintf(stderr, "delay-bridge wal salvage: cannot %s %s/LOCK: %s\n", op, dir,
                strerror(-r));
        return CLI_EIO;
    }
    return -1;
}

/* Now in UTC for the damaged files' names (wall clock: a time a person reads). */
static void salvage_stamp(char *stamp, size_t n)
{
    time_t now = (time_t)(clock_now_ms() / 1000);
    struct tm tm;

    if (!gmtime_r(&now, &tm) || strftime(stamp, n, "%Y%m%dT%H%M%SZ", &tm) == 0)
        snprintf(stamp, n, "%lld", (long long)now);
}

/* What the salvage dropped in all: the report's totals. */
struct salv_totals {
    uint64_t drop_bytes, drop_recs;
    int unknown; /* a torn tail whose records cannot be counted */
};

/* One dropped span of a damaged segment, as a report line; counted into t. */
static void report_drop(const struct drop *d, struct salv_totals *t)
{
    t->drop_bytes += d->bytes;
    t->drop_recs += d->nrec;
    printf("  dropped:      offset %" PRIu64 ", %" PRIu64 " bytes: ", d->off, d->bytes);
    if (d->unknown) {
        t->unknown = 1;
        printf("a torn tail (records from lsn %" PRIu64 " on, count unknown)", d->lsn);
    } else if (d->nrec == 0) {
        printf("no record lost (no LSN missing)");
    } else if (d->nrec == 1) {
        printf("1 record, lsn %" PRIu64, d->lsn);
    } else {
        printf("%" PRIu64 " records, lsn %" PRIu64 "..%" PRIu64, d->nrec, d->lsn,
               d->lsn + d->nrec - 1);
    }
    printf(": %s\n", d->why);
}

/*
 * One damaged segment: what is dropped, kept and filled, and with --yes the
 * repair written (salv_write). 0, or a negative code (said on stderr).
 */
static int repair_segment(struct scan *s, const struct salv *v, struct repair *rp,
                          const char *dir, int yes, const char *stamp, struct salv_totals *t)
{
    const struct seg *g = &s->segs[rp->idx];

    snprintf(rp->aside, sizeof(rp->aside), "%s.damaged-%s", g->name, stamp);
    printf("segment %" PRIu64 " (%s/%s): damaged\n", g->segno, dir, g->name);
    for (size_t k = 0; k < v->ndrops; k++)
        if (v->drops[k].idx == rp->idx)
            report_drop(&v->drops[k], t);
    printf("  kept:         %" PRIu64 " records, %" PRIu64 " bytes, unchanged\n", rp->kept,
           rp->kept_bytes);
    if (rp->fills)
        printf("  fillers:      %" PRIu64 " empty DONE record(s) hold the lost LSNs (ids are "
               "never handed out twice)\n", rp->fills);
    printf("  %s%s/%s\n", yes ? "moved aside:  " : "would keep:   ", dir, rp->aside);
    printf("  %s%s/%s, %" PRIu64 " bytes\n", yes ? "replaced by:  " : "would write:  ",
           dir, g->name, (uint64_t)WALREC_SEGHDR_SIZE + rp->kept_bytes +
           rp->fills * FILLER_SIZE);
    return yes ? salv_write(s, rp, stamp) : 0;
}

/* The totals, the msg ids possibly lost, and the warning a dropped DONE or CANCEL earns. */
static void report_losses(const struct salv *v, const struct salv_totals *t)
{
    uint64_t finished, survived, maybe;

    printf("dropped:        %" PRIu64 " record(s)%s, %" PRIu64 " bytes\n", t->drop_recs,
           t->unknown ? " (and a torn tail of unknown count)" : "", t->drop_bytes);
    printf("possibly lost:  msg ids");
    maybe = print_lost_ids(v, &finished, &survived);
    if (!maybe)
        printf(" none");
    printf("\n");
    printf("                (a message is lost if its ADD was among the dropped records; %"
           PRIu64 " of the lost LSNs are ids a surviving DONE/CANCEL names, %" PRIu64
           " ids a surviving copy keeps)\n", finished, survived);
    if (t->drop_recs > finished + survived || t->unknown)
        printf("warning:        a dropped DONE or CANCEL cannot be identified: a message "
               "published before may be published again, a cancelled or replaced one may be "
               "published after all (consumers deduplicate on x-delay-bridge-id)\n");
}

/* Check the salvaged log the way the daemon will read it. Returns the exit code. */
static int check_salvaged(const char *dir)
{
    struct scan t;
    int rc = cw_scan_dir(&t, dir, NULL);

    if (rc == CLI_OK)
        printf("result:         salvaged: the log checks out, %zu pending messages\n",
               t.ids.count);
    else
        printf("result:         STILL CORRUPT after the salvage%s%s\n",
               rc == CLI_CORRUPT ? ": " : "", rc == CLI_CORRUPT ? t.corrupt : "");
    cw_scan_free(&t);
    return rc;
}

/*
 * delay-bridge wal salvage DIR [--yes]: lock, plan (salv_plan), report and,
 * with --yes, repair each damaged segment, then check the result.
 */
int cw_salvage(int argc, char **argv)
{
    struct scan s;
    struct salv v;
    struct salv_totals t = {0, 0, 0};
    const char *dir = NULL;
    char stamp[32];
    int rc, r, yes = 0, lockfd = -1;

    if ((rc = salvage_options(argc, argv, &dir, &yes)) >= 0)
        return rc;
    memset(&v, 0, sizeof(v));
    cw_scan_init(&s, dir, NULL);
    s.on_rec = salv_note;
    s.on_rec_arg = &v;
    if ((rc = salvage_lock(&s, dir, yes, &lockfd)) >= 0)
        goto cleanup;

    r = salv_plan(&s, &v);
    if (r == CLI_CORRUPT) {
        printf("wal:            %s\n", dir);
        printf("result:         CANNOT SALVAGE: %s\n", s.corrupt);
        fprintf(stderr, "corrupt: %s\n", s.corrupt);
        rc = CLI_CORRUPT;
        goto cleanup;
    }
    if (r < 0) {
        rc = CLI_EIO;
        goto cleanup;
    }
    printf("wal:            %s\n", dir);
    if (v.nrep == 0) {
        printf("result:         nothing to do: the log is sound%s\n",
               v.torn ? " (the newest segment ends in a torn tail, which the daemon cuts off "
                        "at start)" : "");
        rc = CLI_OK;
        goto cleanup;
    }
    salvage_stamp(stamp, sizeof(stamp));
    for (size_t i = 0; i < v.nrep; i++) {
        if (repair_segment(&s, &v, &v.rep[i], dir, yes, stamp, &t) < 0) {
            rc = CLI_EIO;
            goto cleanup;
        }
    }
    report_losses(&v, &t);
    if (!yes) {
        printf("result:         CORRUPT, nothing changed: would keep %" PRIu64 " pending "
               "messages; run again with --yes to salvage\n", (uint64_t)s.ids.count);
        rc = CLI_CORRUPT;
        goto cleanup;
    }
    rc = check_salvaged(dir);
cleanup:
    fflush(stdout);
    if (lockfd >= 0)
        close(lockfd);
    salv_free(&v);
    cw_scan_free(&s);
    return rc;
}
