/*
 * wrepl.h -- the write-ahead log replicated through a RabbitMQ stream.
 *
 * wrepl_log() is a struct wlog (wlog.h) that keeps the segment-file log
 * (wal.h) as its fast local copy and publishes every record it appends to
 * the stream wal.replicate.stream, with publisher confirms, so that the
 * broker cluster holds a replicated copy. Its contract on top of wlog.h's:
 *
 *  - a commit completes only when the records are both fsynced locally and
 *    confirmed by the stream: what the bridge acks to its ingress survives
 *    the loss of the bridge's disk;
 *  - exactly one bridge owns a log: recover first takes the lease (a
 *    single-active-consumer queue, wal.replicate.lease_queue) and waits,
 *    as a standby, while another bridge holds it; losing the lease (the
 *    broker connection) fails the log, and the bridge stops;
 *  - recover, once it holds the lease, reads the stream back and rebuilds
 *    the local log from it when the stream has records (the stream is the
 *    truth: a local log may be stale, lost or another owner's), then
 *    replays the local log as usual;
 *  - the stream stays bounded: after wal.replicate.checkpoint_mb published
 *    (or checkpoint_interval_s), the log copies every live record forward
 *    and then marks a horizon in the stream; what precedes the newest
 *    horizon is never needed again, so the stream's retention may drop it.
 *
 * The byte format of stream messages and the import rules are replrec.h's.
 */
#ifndef DB_WREPL_H
#define DB_WREPL_H

#include "delay-bridge/config.h"
#include "delay-bridge/wal.h"
#include "delay-bridge/wlog.h"

/*
 * A replicated log over the segment-file log with options wo (wo->dir is
 * copied). cfg must outlive the log: it gives the broker URIs, TLS,
 * heartbeat, connect timeout, instance name and wal.replicate. Nothing
 * connects until wlog_recover().
 */
struct wlog *wrepl_log(const struct wal_opts *wo, const struct config *cfg);

#endif
