/*
 * replrec.c -- the replication stream's message format, and its import.
 *
 * A replicated log (src/repl/wrepl.c) publishes the records it appends to a
 * RabbitMQ stream, which the broker cluster replicates. A stream message
 * body, every integer little-endian:
 *
 *   +--------+--------+-----------------------------------------------+
 *   | offset |  size  | field                                         |
 *   +--------+--------+-----------------------------------------------+
 *   |      0 |      4 | magic: the ASCII bytes "DBRS"                 |
 *   |      4 |      1 | version: 1                                    |
 *   |      5 |      1 | kind: 1 RECORDS, 2 FENCE, 3 HORIZON           |
 *   |      6 |      2 | reserved, must be 0                           |
 *   |      8 |      8 | wal_id: the log's random id (0 in a FENCE)    |
 *   |     16 |      8 | owner: random token of the writer's lease     |
 *   |        |        | term                                          |
 *   |     24 |      8 | lsn: RECORDS the first record's LSN; HORIZON  |
 *   |        |        | the horizon; FENCE 0                          |
 *   |     32 |      4 | count: RECORDS the number of records; else 0  |
 *   |     36 |      4 | crc: CRC-32C of bytes 0..35                   |
 *   |     40 |      . | RECORDS only: count records back to back, in  |
 *   |        |        | the WAL's record format (walrec.c, 24-byte    |
 *   |        |        | header + payload) checked with the salt       |
 *   |        |        | REPLREC_SALT; their LSNs run +1 from lsn      |
 *   +--------+--------+-----------------------------------------------+
 *
 * Nothing else follows the last record; a message is exactly as long as
 * its records. The three kinds:
 *
 *   RECORDS  what the log appended (ADD, DONE, CANCEL, and the copies that
 *            compaction makes), in LSN order, one commit's worth split at
 *            wal.replicate.batch_kb.
 *   FENCE    published by a bridge that has just taken the lease of the log,
 *            before it reads the stream: the end of what it must read, and
 *            the start of its term. A record batch of an earlier term that
 *            lands after it (published by a bridge whose lease was already
 *            gone) is a stray and is skipped.
 *   HORIZON  every record still live in the log has an LSN >= lsn (the log
 *            copied the older live ones forward and deleted what held them).
 *            Replay may start there, so retention may drop what precedes it.
 *
 * IMPORT
 *
 * A bridge that takes over reads the stream from its first retained
 * message to its own fence. The records it keeps form one run of LSNs
 * running +1; a jump (the stream lost records in the middle: replication
 * was off for a while, or a retention cut) starts a new run and drops the
 * old one. The run is the whole log when it starts at LSN 1, or when a
 * horizon follows its start: then nothing live can predate it. Otherwise
 * the stream lost records that may still be live, and the importer must
 * not pretend it has the log (replrec_import_complete() says 0).
 *
 * AMBIGUITY
 *
 * A fence tells which term is current, so a batch of another owner after
 * it is a stray. Before the first fence the stream still holds, the owner
 * is taken from the first batch; should a batch of another owner follow
 * (retention cut the stream between a new owner's fence and a stray of the
 * old one), there is no telling which is the stray. The import then calls
 * the log whole only if a horizon of a term that began with a fence it
 * read follows: every record that matters was then written after that
 * fence. Otherwise the import says the stream is not whole, rather than
 * hand over a log that may be the wrong owner's.
 */
#include "delay-bridge/replrec.h"

#include <stdio.h>
#include <string.h>

#include "base/crc32c.h"

static const uint8_t magic[4] = {'D', 'B', 'R', 'S'};

void replrec_hdr_encode(uint8_t out[REPLREC_HDR_SIZE], const struct replrec_hdr *h)
{
    memcpy(out, magic, 4);
    out[4] = 1;
    out[5] = h->kind;
    out[6] = out[7] = 0;
    walrec_put64(out + 8, h->wal_id);
    walrec_put64(out + 16, h->owner);
    walrec_put64(out + 24, h->lsn);
    walrec_put32(out + 32, h->count);
    walrec_put32(out + 36, crc32c(0, out, 36));
}

int replrec_hdr_decode(const uint8_t *buf, size_t len, struct replrec_hdr *h)
{
    if (len < REPLREC_HDR_SIZE)
        return WALREC_PARTIAL;
    if (memcmp(buf, magic, 4) != 0 || buf[4] != 1 || buf[6] || buf[7] ||
        walrec_get32(buf + 36) != crc32c(0, buf, 36))
        return WALREC_INVALID;
    h->kind = buf[5];
    if (h->kind < REPLREC_RECORDS || h->kind > REPLREC_HORIZON)
        return WALREC_INVALID;
    h->wal_id = walrec_get64(buf + 8);
    h->owner = walrec_get64(buf + 16);
    h->lsn = walrec_get64(buf + 24);
    h->count = walrec_get32(buf + 32);
    return REPLREC_HDR_SIZE;
}

void replrec_import_init(struct replrec_import *im, uint64_t mine)
{
    memset(im, 0, sizeof(*im));
    im->mine = mine;
}

static int records(struct replrec_import *im, const struct replrec_hdr *h, const uint8_t *p,
                   size_t n, const struct replrec_sink *sink, char *why, size_t whylen)
{
    size_t pos = 0;
    int r;

    if (im->wal_id && h->wal_id != im->wal_id) {
        snprintf(why, whylen,
                 "the stream holds records of two logs (wal ids %016llx and %016llx): is it "
                 "shared by two bridges with different logs?",
                 (unsigned long long)im->wal_id, (unsigned long long)h->wal_id);
        return -1;
    }
    if (h->count == 0 && n != 0) {
        snprintf(why, whylen, "%zu bytes after an empty batch", n);
        return -1;
    }
    if (im->owner && h->owner != im->owner) {
        /*
         * An earlier term's batch after a newer fence. Before any fence was
         * read, though, the owner is only the first batch's, and which of
         * the two is the stray cannot be told (see "AMBIGUITY" above).
         */
        if (!im->fenced)
            im->ambiguous = 1;
        im->strays++;
        return 0;
    }
    if (!im->owner)
        im->owner = h->owner;
    if (h->count == 0)
        return 0;
    if (im->next_lsn == 0 || h->lsn > im->next_lsn) {
        if (im->next_lsn)
            im->gaps++;
        if ((r = sink->reset(sink->arg, h->wal_id, h->lsn)) < 0)
            return r;
        im->wal_id = h->wal_id;
        im->first_lsn = im->next_lsn = h->lsn;
        im->horizon = im->horizon_fenced = 0;
    }
    for (uint32_t i = 0; i < h->count; i++) {
        struct walrec_hdr rh;
        const uint8_t *payload;
        int k = walrec_decode(p + pos, n - pos, REPLREC_SALT, &rh, &payload);

        if (k < 0 || rh.lsn != h->lsn + i) {
            snprintf(why, whylen, "record %u of a batch from LSN %llu fails its checks", i,
                     (unsigned long long)h->lsn);
            return -1;
        }
        pos += (size_t)k;
        if (rh.lsn < im->next_lsn)
            continue; /* the batch overlaps what was taken already */
        if ((r = sink->record(sink->arg, &rh, payload)) < 0)
            return r;
        im->next_lsn++;
        im->records++;
    }
    if (pos != n) {
        snprintf(why, whylen, "%zu bytes after the last record of a batch from LSN %llu",
                 n - pos, (unsigned long long)h->lsn);
        return -1;
    }
    im->last_owner = h->owner;
    im->batches++;
    return 0;
}

int replrec_import_msg(struct replrec_import *im, const uint8_t *body, size_t len,
                       const struct replrec_sink *sink, char *why, size_t whylen)
{
    struct replrec_hdr h;

    im->messages++;
    im->bytes += len;
    if (replrec_hdr_decode(body, len, &h) < 0) {
        snprintf(why, whylen, "a %zu-byte message that is not a delay-bridge stream message "
                 "(is the stream shared with something else?)", len);
        return -1;
    }
    switch (h.kind) {
    case REPLREC_RECORDS:
        return records(im, &h, body + REPLREC_HDR_SIZE, len - REPLREC_HDR_SIZE, sink, why, whylen);
    case REPLREC_FENCE:
        if (len != REPLREC_HDR_SIZE) {
            snprintf(why, whylen, "a fence with bytes after it");
            return -1;
        }
        im->fences++;
        im->owner = h.owner;
        im->fenced = 1;
        return h.owner == im->mine;
    default: /* REPLREC_HORIZON */
        if (len != REPLREC_HDR_SIZE || (im->wal_id && h.wal_id != im->wal_id)) {
            snprintf(why, whylen, "a horizon of another log, or with bytes after it");
            return -1;
        }
        if ((!im->owner || h.owner == im->owner) && im->first_lsn && h.lsn >= im->first_lsn &&
            h.lsn <= im->next_lsn) {
            im->horizon = h.lsn;
            im->horizons++;
            if (im->fenced)
                im->horizon_fenced = h.lsn;
        }
        return 0;
    }
}

int replrec_import_complete(const struct replrec_import *im)
{
    if (im->next_lsn == 0 || im->horizon_fenced)
        return 1;
    return !im->ambiguous && (im->first_lsn == 1 || im->horizon != 0);
}
