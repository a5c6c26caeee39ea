/*
 * cli_wal.c -- "delay-bridge wal check|dump DIR": look inside a WAL directory;
 * "delay-bridge wal salvage DIR": repair one the daemon refuses (cli_wal_salvage.c).
 *
 * An operator's questions about a log are "is it sound?" and "what is in
 * it?". Both are answered by one read-only scan that follows the same rules
 * as the daemon's recovery (src/wal/wal.c, format in src/wal/walrec.c), but never
 * changes anything: files are opened O_RDONLY, no flock is taken on
 * dir/LOCK, nothing is truncated or deleted. That makes it safe to run
 * against the directory of a live daemon; what it sees is then a prefix of
 * the log as of the moment the segment files were opened.
 *
 * The files of the command (cli_wal_int.h says what they share):
 *
 *   cli_wal.c          this: the entry point and "wal check"
 *   cli_wal_scan.c     THE SCAN and LIVE MESSAGES: read-only, the daemon's
 *                      own reading rules (walscan.h)
 *   cli_wal_dump.c     "wal dump"
 *   cli_wal_salvage.c  "wal salvage" (SALVAGE: why LSNs are kept, fillers)
 *
 * Exit codes: 0 ok, 1 directory unreadable or an I/O error, 2 usage, 4
 * corrupt (also: a file name or segment header the daemon would refuse).
 */
#define _GNU_SOURCE
#include "cli_wal_int.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "delay-bridge/walrec.h"
#include "delay-bridge/walckpt.h"

/* ---- wal check --------------------------------------------------------- */

static void check_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal check DIR\n"
            "\n"
            "Verify every record of every segment of the WAL directory DIR: segment headers,\n"
            "one wal_id, contiguous segment numbers, record checksums (seeded by each\n"
            "segment's salt), LSNs +1 across records and segments. Prints a summary:\n"
            "segments, records by type (ADD, DONE: published, CANCEL: cancelled, replaced\n"
            "or purged) with the ids they remove, bytes, pending messages per route, the\n"
            "oldest enqueue time and the next due time; and whether the CHECKPOINT file\n"
            "checks out (a restart reads it instead of every segment; an unusable one is\n"
            "reported, not an error: recovery then replays every segment).\n"
            "\n"
            "Read-only and lock-free: safe on the directory of a running daemon.\n"
            "An incomplete record at the end of the newest segment is reported as a torn\n"
            "tail, not corruption (a running daemon may be writing it; a starting daemon\n"
            "cuts it off).\n"
            "\n"
            "  -h, --help   print this help and exit\n"
            "\n"
            "Exit codes: 0 sound (torn tail included), 1 directory unreadable or I/O error,\n"
            "2 usage, 4 corrupt: \"corrupt: segment N (file) offset X: reason\" on stderr.\n");
}

/* corrupt: the scan stopped at corruption; the figures cover what came before it. */
/*
 * The checkpoint is a shortcut for recovery, not part of the log: a damaged
 * one is reported, and recovery replays every segment instead.
 */
static void print_checkpoint(struct scan *s)
{
    struct walckpt_info ci;
    char why[256];
    int r = walckpt_read(s->dirfd, s->wal_id, NULL, NULL, &ci, why, sizeof(why), NULL);

    if (r == 1)
        printf("checkpoint:     none (a restart replays every segment)\n");
    else if (r == 0)
        printf("checkpoint:     ok, %" PRIu64 " bytes, replay from lsn %" PRIu64 "\n", ci.bytes,
               ci.start_lsn);
    else
        printf("checkpoint:     UNUSABLE (%s): a restart replays every segment instead\n",
               why[0] ? why : strerror(-r));
}

static void print_summary(struct scan *s, int corrupt)
{
    size_t n;
    pool_handle *v = cw_live_handles(s, &n);
    uint64_t live_bytes = 0, body_bytes = 0, oldest = UINT64_MAX, next = UINT64_MAX;
    uint64_t next_id = 0;
    uint64_t dead_letter = 0, keyed = 0;
    char t[48];

    for (size_t i = 0; i < s->nroutes; i++)
        s->routes[i].count = s->routes[i].bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct live *m = pool_at(&s->pool, v[i]);
        live_bytes += m->len;
        body_bytes += m->body_len;
        s->routes[m->route].count++;
        s->routes[m->route].bytes += m->len;
        if (m->enqueue_ms < oldest)
            oldest = m->enqueue_ms;
        if (m->due_ms < next || (m->due_ms == next && m->msg_id < next_id)) {
            next = m->due_ms;
            next_id = m->msg_id;
        }
        if (m->flags & WALREC_ADD_DEADLETTER)
            dead_letter++;
        if (m->flags & WALREC_ADD_KEYED)
            keyed++;
    }
    free(v);

    printf("wal:            %s\n", s->dir);
    if (s->nsegs == 0) {
        printf("segments:       0 (empty log)\n");
    } else {
        printf("segments:       %zu (%s .. %s), %" PRIu64 " bytes\n", s->nsegs, s->segs[0].name,
               s->segs[s->nsegs - 1].name, s->file_bytes);
        printf("wal_id:         %016" PRIx64 "\n", s->wal_id);
        if (s->next_lsn > s->first_lsn)
            printf("lsn:            %" PRIu64 " .. %" PRIu64 "\n", s->first_lsn, s->next_lsn - 1);
        else
            printf("lsn:            none (next %" PRIu64 ")\n", s->first_lsn);
    }
    printf("records:        %" PRIu64 " (add %" PRIu64 ", done %" PRIu64 ", cancel %" PRIu64 ")\n",
           s->n_add + s->n_done + s->n_cancel, s->n_add, s->n_done, s->n_cancel);
    printf("  add:          %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64
           " of them compaction copies\n", s->n_add, s->b_add, s->n_copy);
    printf("  done:         %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64 " ids (%" PRIu64
           " of messages whose ADD is in a deleted segment)\n",
           s->n_done, s->b_done, s->n_done_ids, s->n_done_unknown);
    printf("  cancel:       %" PRIu64 " records, %" PRIu64 " bytes, %" PRIu64 " ids (%" PRIu64
           " of messages whose ADD is in a deleted segment)\n",
           s->n_cancel, s->b_cancel, s->n_cancel_ids, s->n_cancel_unknown);
    printf("live messages:  %zu, %" PRIu64 " bytes of records (%" PRIu64 " bytes of bodies)",
           n, live_bytes, body_bytes);
    if (keyed)
        printf(", %" PRIu64 " with an x-delay-key", keyed);
    if (dead_letter)
        printf(", %" PRIu64 " to be dead-lettered", dead_letter);
    printf("\n");
    for (size_t i = 0; i < s->nroutes; i++)
        if (s->routes[i].count) {
            printf("  route ");
            cw_put_field(stdout, s->routes[i].name, s->routes[i].len);
            printf(": %" PRIu64 " messages, %" PRIu64 " bytes\n", s->routes[i].count,
                   s->routes[i].bytes);
        }
    if (n) {
        cw_fmt_iso(oldest, t, sizeof(t));
        printf("oldest enqueue: %s (%" PRIu64 " ms)\n", t, oldest);
        cw_fmt_iso(next, t, sizeof(t));
        printf("next due:       %s (%" PRIu64 " ms), msg_id %" PRIu64 "\n", t, next, next_id);
    } else {
        printf("oldest enqueue: -\n");
        printf("next due:       -\n");
    }
    if (corrupt)
        printf("tail:           not reached: the figures above cover the records before the "
               "corruption\n");
    else if (s->torn)
        printf("tail:           TORN TAIL in the newest segment %s offset %" PRIu64 ": %" PRIu64
               " bytes after the last valid record (%s). Not corruption: a running daemon may "
               "be writing it, a starting daemon cuts it off.\n",
               s->segs[s->nsegs - 1].name, s->torn_off, s->torn_bytes, s->torn_why);
    else
        printf("tail:           clean\n");
}

int cw_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct scan s;
    int c, rc;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            check_usage(stdout);
            return CLI_OK;
        default:
            check_usage(stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "delay-bridge wal check: expected one directory\n");
        check_usage(stderr);
        return CLI_USAGE;
    }
    rc = cw_scan_dir(&s, argv[optind], NULL);
    if (rc == CLI_OK) {
        print_summary(&s, 0);
        print_checkpoint(&s);
        printf("result:         ok%s\n", s.torn ? " (torn tail)" : "");
    } else if (rc == CLI_CORRUPT) {
        if (s.nsegs)
            print_summary(&s, 1);
        printf("result:         CORRUPT: %s\n", s.corrupt);
    }
    cw_scan_free(&s);
    fflush(stdout);
    return rc;
}


/* ---- entry ------------------------------------------------------------- */

static void wal_usage(FILE *f)
{
    fprintf(f,
            "usage: delay-bridge wal check DIR\n"
            "       delay-bridge wal dump DIR [--route R] [--key K] [--due-before T]\n"
            "                                 [--limit N] [--headers] [--json]\n"
            "       delay-bridge wal salvage DIR [--yes]\n"
            "\n"
            "check and dump inspect a WAL directory, read-only and without taking its lock\n"
            "(safe while the daemon runs). salvage repairs a log the daemon refuses as\n"
            "corrupt: it keeps every valid record (and every message's id), moves each\n"
            "damaged segment aside as NAME.damaged-<time> (nothing is deleted), writes a\n"
            "repaired NAME and reports the records, bytes and msg ids that may be lost;\n"
            "it takes the directory's lock and, without --yes, only says what it would do.\n"
            "\"delay-bridge wal COMMAND --help\" describes each command.\n"
            "\n"
            "Exit codes: 0 ok (salvage: salvaged or nothing to do), 1 directory unreadable\n"
            "or I/O error, 2 usage, 4 WAL corrupt (salvage: still corrupt, cannot salvage,\n"
            "or a dry run), 5 (salvage) locked by a running daemon.\n");
}

int cli_wal_main(int argc, char **argv)
{
    if (argc < 2) {
        wal_usage(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        wal_usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "check") == 0)
        return cw_check(argc - 1, argv + 1);
    if (strcmp(argv[1], "dump") == 0)
        return cw_dump(argc - 1, argv + 1);
    if (strcmp(argv[1], "salvage") == 0)
        return cw_salvage(argc - 1, argv + 1);
    fprintf(stderr, "delay-bridge wal: unknown command \"%s\"\n", argv[1]);
    wal_usage(stderr);
    return CLI_USAGE;
}
