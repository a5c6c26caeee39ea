/*
 * failpoint.h -- crash, or fail an operation, at a named point (fault tests).
 *
 *   FAILPOINT("wal.before_fsync");                 a crash here
 *   if (FAILPOINT_ERR("wal.fsync_error")) r = -EIO; an error here
 *
 * Both compile to nothing (FAILPOINT_ERR to the constant 0) unless the build
 * defines DB_FAILPOINTS: `cmake -DDB_FAILPOINTS=ON` for every target, or the
 * delay-bridge-fp binary that the integration tests run (never installed).
 *
 * With DB_FAILPOINTS, the process reads DELAY_BRIDGE_FAILPOINT=NAME[:N] once,
 * at start (before main). The N-th time (default the 1st) execution reaches
 * point NAME:
 *   FAILPOINT      logs one line (mod=failpoint name=NAME hit=N) and raises
 *                  SIGKILL: the crash kill -9 would be, at exactly that point;
 *   FAILPOINT_ERR  logs one line and returns 1, once; the caller turns that
 *                  into the error the operation would report.
 * Every other pass returns at the cost of a string compare. An unknown NAME
 * or a bad N stops the process at start (exit 2), so a typo in a test never
 * arms nothing.
 *
 * The points, one line each where the risk is:
 *   wal.before_fsync      wal_commit: records written, not yet fdatasync'ed
 *   wal.fsync_error       (ERR) wal_commit: fdatasync reports EIO
 *   wal.mid_roll          seg_create: a rolled-to segment's file exists
 *                         (O_CREAT|O_EXCL), empty, its header not yet written
 *                         (on a new log, pass 1 is segment 1's creation)
 *   wal.mid_compaction    compact_head: a live record was just copied
 *                         forward; the old segment is still there
 *   wal.ckpt_write_error  (ERR) a checkpoint chunk cannot be written (EIO)
 *   wal.mid_ckpt          wal_ckpt_write: a checkpoint half written, not
 *                         installed (CHECKPOINT.tmp left behind)
 *   wal.after_ckpt        a checkpoint was just installed (renamed, synced)
 *   bridge.before_ack     on_committed: the commit is durable, basic.ack not sent
 *   bridge.after_publish  pump: basic.publish sent, its confirm not processed
 *   bridge.after_confirm  on_confirmed: eng_confirm done, its DONE record
 *                         not yet committed
 *   publish.passive_403   (ERR) a route's passive exchange.declare is answered
 *                         as RabbitMQ 4.2.6/4.3.0 answer a user without
 *                         configure permission (403); simulated by declaring
 *                         an exchange that does not exist, whose 404 the
 *                         route then reads as that 403
 *   keys.event_unconfirmed (ERR) consumer_publish_key_event: the N-th key
 *                         event is lost as a broker loses one: published
 *                         where nothing is bound (so it keeps its sequence
 *                         number) and its confirm never counted: the
 *                         confirm timeout drops the connection and the
 *                         event goes out again
 * Pure: no broker, no event loop; thread-safe (the count is atomic).
 */
#ifndef DB_FAILPOINT_H
#define DB_FAILPOINT_H

#ifdef DB_FAILPOINTS
/* 1 when this pass is the armed one (logged), else 0. */
int failpoint_hit(const char *name);
/* If this pass is the armed one: log and raise(SIGKILL); never returns then. */
void failpoint_crash(const char *name);
#define FAILPOINT(name) failpoint_crash(name)
#define FAILPOINT_ERR(name) failpoint_hit(name)
#else
#define FAILPOINT(name) ((void)0)
#define FAILPOINT_ERR(name) 0
#endif

#endif
