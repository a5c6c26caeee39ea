/*
 * simrepl.c -- the simulator's replication stream and the import from it.
 *
 * WHAT IS SIMULATED
 *
 * A replicated seed (one in six) publishes, like src/repl/wrepl.c, every record
 * the segment log appends (the wal tap: the engine's ADD, DONE and CANCEL
 * records and compaction's copies) to a stream: at each successful commit,
 * the commit's records become one RECORDS message in the stream's format
 * (src/wal/replrec.c: header, records under REPLREC_SALT). At the end of the
 * seed the disk is lost (every file of the WAL directory gone) and the log
 * is rebuilt from the stream: the messages are read from the first with
 * replrec_import_msg() up to the importer's own FENCE, the records written
 * into a new log with the same id and LSNs (wal_open with create_id and
 * create_base_lsn, wal_append, wal_commit), and replrec_import_complete()
 * decides whether the stream held the whole log. Then the engine recovers
 * from the rebuilt log and the model checks it like any recovery.
 *
 * FAULTS
 *
 *   lost batch        a RECORDS message in the middle of the stream is gone
 *                     (the broker lost confirmed data, or retention cut
 *                     inside the log): the import must say the stream is not
 *                     whole (the bridge refuses, WLOG_EREPLICA), never hand
 *                     over a log with a hole;
 *   duplicated batch  a message published twice (a re-publish after a lost
 *                     confirm), the copy anywhere later: harmless.
 *
 * NOT SIMULATED
 *
 * The lease, fences of other owners and strays, horizons and the stream
 * checkpoint (wal_force_horizon), retention, resuming on an intact local
 * log (wrepl_resume.c), the import directory dir/import and
 * wal_replace_segments() (the rebuilt log is written straight into the
 * emptied directory), and crashes, failed fsyncs and a full disk in
 * replicated seeds: each can leave the local log with records the stream
 * never got (a failed commit whose older segment was already synced), which
 * the real bridge reconciles by resuming (wrepl_resume.c), not simulated
 * here. The glue below (reset, record) is a copy of wrepl_import.c's
 * imp_reset and imp_record, which live with rabbitmq-c; replrec.c and the
 * log are the project's own code.
 */
#define _GNU_SOURCE
#include "simrepl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delay-bridge/wal.h"
#include "wal/wal_int.h" /* wal_open(), and the log's own functions the tests reach */
#include "delay-bridge/walrec.h"
#include "delay-bridge/replrec.h"
#include "simfs.h"

struct msg {
    uint8_t *p;
    size_t n;
};

static struct {
    struct msg *v;
    size_t n, cap;
    uint8_t *pend; /* records tapped since the last commit, REPLREC_SALT */
    size_t pend_n, pend_cap;
    uint64_t pend_first;
    uint32_t pend_count;
    uint64_t owner;
    struct wal *imp; /* the log being rebuilt */
    uint64_t seg_bytes;
} R;

static void push_msg(const uint8_t *p, size_t n)
{
    if (R.n == R.cap) {
        R.cap = R.cap ? 2 * R.cap : 64;
        R.v = realloc(R.v, R.cap * sizeof(*R.v));
    }
    R.v[R.n].p = malloc(n);
    memcpy(R.v[R.n].p, p, n);
    R.v[R.n++].n = n;
}

void simrepl_reset(uint64_t owner, uint64_t seg_bytes)
{
    for (size_t i = 0; i < R.n; i++)
        free(R.v[i].p);
    free(R.v);
    free(R.pend);
    memset(&R, 0, sizeof(R));
    R.owner = owner;
    R.seg_bytes = seg_bytes;
}

void simrepl_tap(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct walrec_hdr c = *h;
    struct walrec_piece pc = {payload, h->len};
    size_t need = WALREC_HDR_SIZE + h->len;

    if (R.pend_count == 0)
        R.pend_first = h->lsn;
    if (R.pend_n + need > R.pend_cap) {
        R.pend_cap = (R.pend_n + need) * 2;
        R.pend = realloc(R.pend, R.pend_cap);
    }
    walrec_hdr_encode(R.pend + R.pend_n, &c, REPLREC_SALT, &pc, 1);
    memcpy(R.pend + R.pend_n + WALREC_HDR_SIZE, payload, h->len);
    R.pend_n += need;
    R.pend_count++;
}

void simrepl_commit(uint64_t wal_id)
{
    struct replrec_hdr h = {REPLREC_RECORDS, wal_id, R.owner, R.pend_first, R.pend_count};
    uint8_t *m;

    if (R.pend_count == 0)
        return;
    m = malloc(REPLREC_HDR_SIZE + R.pend_n);
    replrec_hdr_encode(m, &h);
    memcpy(m + REPLREC_HDR_SIZE, R.pend, R.pend_n);
    push_msg(m, REPLREC_HDR_SIZE + R.pend_n);
    free(m);
    R.pend_n = 0;
    R.pend_count = 0;
}

void simrepl_drop_pending(void)
{
    R.pend_n = 0;
    R.pend_count = 0;
}

size_t simrepl_messages(void)
{
    return R.n;
}

void simrepl_lose(size_t i)
{
    free(R.v[i].p);
    memmove(&R.v[i], &R.v[i + 1], (R.n - i - 1) * sizeof(*R.v));
    R.n--;
}

void simrepl_duplicate(size_t i, size_t at)
{
    struct msg copy;

    push_msg(R.v[i].p, R.v[i].n);
    copy = R.v[R.n - 1];
    memmove(&R.v[at + 1], &R.v[at], (R.n - 1 - at) * sizeof(*R.v));
    R.v[at] = copy;
}

/* ---- the import (wrepl_import.c's imp_reset and imp_record, into SIMFS_DIR) ---- */

static int imp_reset(void *arg, uint64_t wal_id, uint64_t base_lsn)
{
    struct wal_opts o;

    if (R.imp) {
        wlog_close(wal_log(R.imp));
        R.imp = NULL;
    }
    simfs_wipe();
    memset(&o, 0, sizeof(o));
    o.dir = SIMFS_DIR;
    o.segment_bytes = R.seg_bytes;
    o.create_id = wal_id;
    o.create_base_lsn = base_lsn;
    return wal_open(&R.imp, &o, NULL, NULL);
}

static int imp_record(void *arg, const struct walrec_hdr *h, const uint8_t *payload)
{
    struct walrec_piece pc = {payload, h->len};
    uint64_t lsn = 0;
    int e = wlog_append(wal_log(R.imp), h->type, &pc, 1, &lsn, NULL);

    if (e < 0)
        return e;
    if (lsn != h->lsn)
        return WLOG_ECORRUPT;
    return wlog_pending(wal_log(R.imp)) >= 4096 ? wal_commit(R.imp) : 0;
}

int simrepl_import(uint64_t mine, int *complete, char *why, size_t whylen)
{
    struct replrec_import im;
    struct replrec_sink sink = {imp_reset, imp_record, NULL};
    struct replrec_hdr fence = {REPLREC_FENCE, 0, mine, 0, 0};
    uint8_t f[REPLREC_HDR_SIZE];
    int r = 0;

    replrec_hdr_encode(f, &fence);
    push_msg(f, sizeof(f)); /* the importer's fence: the end of what it reads */
    simfs_wipe();           /* the disk is lost */
    replrec_import_init(&im, mine);
    why[0] = 0;
    for (size_t i = 0; i < R.n && r == 0; i++)
        r = replrec_import_msg(&im, R.v[i].p, R.v[i].n, &sink, why, whylen);
    if (r == 1)
        r = 0;
    else if (r == 0) {
        snprintf(why, whylen, "the importer's own fence was not found");
        r = -1;
    }
    *complete = r == 0 && replrec_import_complete(&im);
    if (R.imp) {
        int c = wal_commit(R.imp);
        if (r == 0)
            r = c;
        wlog_close(wal_log(R.imp));
        R.imp = NULL;
    }
    return r;
}
