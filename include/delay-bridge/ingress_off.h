/*
 * ingress_off.h -- where a stream ingress is read up to, kept beside the log.
 *
 * A route whose ingress queue is a stream (queue_type "stream") acks its
 * deliveries only as credit: the stream keeps every message until its
 * retention removes it, and a reader says where to start. The bridge's
 * place is the first offset whose message is not yet in the log. It lives
 * in one small file per route in the WAL directory, rewritten in place
 * around every commit that covers deliveries of the route:
 *
 *   <wal.dir>/ingress-<route>.offset, 32 bytes, little-endian:
 *
 *     offset  size  field
 *      0      8     magic "DBSTROFF"
 *      8      4     version, 1
 *     12      8     next: the first stream offset not in the log (u64)
 *     20      8     upto: the place the commit under way reaches; = next
 *                   when none is (u64, >= next)
 *     28      4     CRC32C of bytes 0..27
 *
 * Before a commit the file says (next, upto); once the commit is durable,
 * (upto, upto). After a crash, the messages in [next, upto) may or may not
 * be in the log: the restart reads the stream from next and treats those
 * as redeliveries (the fingerprints of the last messages logged, rebuilt
 * from the log, recognise the ones it holds), so a kill -9 at any moment
 * neither loses nor duplicates a message.
 *
 * The rules that make it safe:
 *   - next is written only after the log's fsync of everything below it,
 *     so it never names a place past what the log holds: nothing read past
 *     can be lost;
 *   - the file is not fsynced per write (the loop never waits on it): a
 *     crash of the process keeps the writes (page cache); a crash of the
 *     machine may bring back an older file, and the messages between are
 *     read and logged a second time -- at-least-once, as a classic queue's
 *     lost ack would. The kernel's writeback bounds that window (about
 *     30 s with Linux's defaults, vm.dirty_expire_centisecs);
 *     ingress_off_sync() at a clean stop closes it;
 *   - a file of 0 bytes is new (created, never written): read from the
 *     stream's first retained message; any other size, magic, version or
 *     CRC is corrupt, and the daemon refuses to start rather than guess a
 *     place (it says to delete the file, which means "from the first").
 */
#ifndef DB_INGRESS_OFF_H
#define DB_INGRESS_OFF_H

#include <stddef.h>
#include <stdint.h>

#define INGRESS_OFF_SIZE 32
#define INGRESS_OFF_NONE INT64_C(-1) /* no place yet: read from the first message */

struct ingress_off {
    int fd;         /* -1: not open */
    int64_t stored; /* the last next written (or read), INGRESS_OFF_NONE */
    int64_t upto;   /* the last upto written (or read), INGRESS_OFF_NONE */
    int dirty;      /* written since the last ingress_off_sync() */
    char path[4352];
};

/* Encode / decode the 32 bytes. decode: 0, or -1 when they are not a valid record. */
void ingress_off_encode(uint8_t out[INGRESS_OFF_SIZE], uint64_t next, uint64_t upto);
int ingress_off_decode(const uint8_t in[INGRESS_OFF_SIZE], uint64_t *next, uint64_t *upto);

/*
 * Open (creating it empty if missing) <dir>/ingress-<route>.offset and read
 * the place into *next and the end of the commit that may have been under
 * way into *upto (both INGRESS_OFF_NONE for a new file). Returns 0, or
 * -errno for a system error, -EBADMSG for a corrupt file; err says which
 * file and what to do.
 */
int ingress_off_open(struct ingress_off *o, const char *dir, const char *route, int64_t *next,
                     int64_t *upto, char *err, size_t errlen);
/*
 * A commit reaching upto begins: write (the stored next, upto) if upto
 * moved. With nothing stored yet (a new file) next is written as 0, which
 * a stream reads as its first retained message, like no place at all.
 */
int ingress_off_begin(struct ingress_off *o, int64_t upto);
/* Everything below next is durable: write (next, next) if it moved. 0 or -errno. */
int ingress_off_store(struct ingress_off *o, int64_t next);
/* fdatasync if written since the last sync. 0 or -errno. */
int ingress_off_sync(struct ingress_off *o);
void ingress_off_close(struct ingress_off *o);

#endif
