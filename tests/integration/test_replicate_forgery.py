#!/usr/bin/python3
"""Forged records in the replicated log's stream (issue 39, item 3): a
client that may write the stream, not the bridge, cannot make a takeover
lose the owner's batches or deliver a message of its own.

Bridge A owns a replicated log, B stands by. 150 real messages (delays
20-30 s) go to A. Then a second broker user, with write access to the
stream like any client with write on amq.default, reads the stream (the
wal id, the owner's term token and the next sequence number are all in
it) and publishes, without a user-id:
  (a) a RECORDS batch that continues A's run with A's own term token: an
      ADD of a copied real message, its message_id changed to FAKE-...,
      due in 12 s (before any real one);
  (b) a FENCE with the real wal id and a term of its own, after which
      A's later batches would read as strays;
and a user with RabbitMQ's impersonator tag publishes (c) a FENCE with the
user-id "dbtest-mallory" (not the bridge's user). Then 150 more real
messages go to A, A is killed with SIGKILL, and B takes over.

Checked: the forged message is never delivered; every real message of
both batches is delivered once and none early; B counts exactly the three
forgeries as refused (/stats wal.replication.refused and the metric
delay_bridge_wal_replication_refused_total) and logs the refusal. Before
the change (014b15b) B imported (a) and took (b)/(c) for the newest term:
FAKE-... was delivered and the second batch was lost.
"""

import secrets
import struct
import time

import pika

import harness as h
import harness_wal
from harness import check

N1 = N2 = 150
SALT = 0x5245504C  # REPLREC_SALT (include/delay-bridge/replrec.h)
RECORDS, FENCE = 1, 2


def crc32c(data, crc=0):
    """CRC-32C, chained like src/base/crc32c.c's crc32c(crc, buf, len)."""
    return harness_wal.crc32c(crc, data)


def batch_header(kind, wal_id, owner, lsn, count):
    """A stream message's 40-byte header (src/wal/replrec.c)."""
    head = b"DBRS" + bytes([1, kind, 0, 0]) + struct.pack("<QQQI", wal_id, owner, lsn, count)
    return head + struct.pack("<I", crc32c(head))


def record(rtype, flags, lsn, payload):
    """One record in the WAL's format (src/wal/walrec.c), checked with REPLREC_SALT."""
    head = struct.pack("<IBBHQ", len(payload), rtype, flags, 0, lsn)
    crc = crc32c(payload, crc32c(head, crc32c(struct.pack("<I", SALT))))
    return head + struct.pack("<II", crc, 0) + payload


def read_stream(uri, stream, idle_s=1.5, cap_s=30):
    """Every message of the stream from its first: [(props, body)]."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=500)
    msgs = []

    def on_msg(c, m, props, body):
        msgs.append((props, body))
        c.basic_ack(m.delivery_tag)

    ch.basic_consume(stream, on_msg, arguments={"x-stream-offset": "first"})
    t0 = last = time.monotonic()
    n = 0
    while time.monotonic() - t0 < cap_s:
        conn.process_data_events(time_limit=0.2)
        if len(msgs) != n:
            n, last = len(msgs), time.monotonic()
        elif n and time.monotonic() - last > idle_s:
            break
    conn.close()
    return msgs


def forge_records(msgs, real_prefix, fake_prefix):
    """From what the stream holds: (wal_id, the newest batch's owner, a
    RECORDS message that continues its run with one forged ADD)."""
    last = None
    for props, body in msgs:
        if body[:4] == b"DBRS" and body[5] == RECORDS:
            last = body
    check(last is not None, "no record batch in the stream to copy")
    wal_id, owner, lsn, count = struct.unpack_from("<QQQI", last, 8)
    nxt = lsn + count
    # The batch's first ADD whose properties hold a real message id.
    pos = 40
    for _ in range(count):
        plen, rtype, rflags = struct.unpack_from("<IBB", last, pos)
        payload = bytes(last[pos + 24:pos + 24 + plen])
        pos += 24 + plen
        if rtype == 1 and real_prefix in payload:
            break
    else:
        h.fail("no ADD of a real message in the newest batch")
    due_ms = int(time.time() * 1000) + 12000
    fake = struct.pack("<QQ", nxt, due_ms) + payload[16:].replace(real_prefix, fake_prefix, 1)
    body = batch_header(RECORDS, wal_id, owner, nxt, 1) + record(1, rflags, nxt, fake)
    return wal_id, owner, nxt, body


def publish_batch(ch, ingress, prefix, n, sent):
    for i in range(n):
        mid = "%s%04d" % (prefix, i)
        ms = 20000 + (i * 7919) % 10000
        sent[mid] = (time.monotonic(), ms)
        ch.basic_publish(ingress, "rk", b"payload-" * 8,
                         pika.BasicProperties(headers={"x-delay": h.i32(ms)}, message_id=mid,
                                              delivery_mode=2))


def test(ctx):
    with h.BrokerUser("dbtest-forger-" + secrets.token_hex(3), "Pw" + secrets.token_hex(12),
                      why="adding a second broker user") as forger_uri:
        run(ctx, forger_uri)


def run(ctx, forger_uri):
    route, c, wal = ctx.replicated("forge", max_mb=0)
    stream = wal["replicate"]["stream"]
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   wal=wal, broker={"heartbeat_s": 5})
    check(h.replication(pa)["state"] == "owner", "A should own the log: %s" % h.replication(pa))
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   wal=wal, broker={"heartbeat_s": 5}, start=False)
    b.start(wait_ready=False)
    h.wait_for("B to stand by", lambda: "standby" in h.readyz(pb)[1], 30)

    ch = ctx.publisher().conn.channel()
    sent = {}
    publish_batch(ch, route["ingress_exchange"], "real-1-", N1, sent)
    h.wait_progress(lambda: h.stats(pa)["held"], N1, 20, lambda n: "A holds %d of %d" % (n, N1))

    # The forger reads the stream and writes it, with no user-id (its own would be checked).
    msgs = read_stream(forger_uri, stream)
    wal_id, owner, nxt, forged = forge_records(msgs, b"real-1-", b"FAKE-1-")
    h.log("stream: %d messages; forging LSN %d of wal %016x in term %016x"
          % (len(msgs), nxt, wal_id, owner))
    fconn = pika.BlockingConnection(pika.URLParameters(forger_uri))
    fch = fconn.channel()
    fch.confirm_delivery()
    fch.basic_publish("", stream, forged, pika.BasicProperties(delivery_mode=2))
    fch.basic_publish("", stream, batch_header(FENCE, wal_id, secrets.randbits(64), 0, 0),
                      pika.BasicProperties(delivery_mode=2))
    fconn.close()
    # An impersonator may publish any user-id; one that is not the bridge's is refused too.
    imp = ctx.impersonator()
    ich = imp.conn.channel()
    ich.confirm_delivery()
    ich.basic_publish("", stream, batch_header(FENCE, 0, secrets.randbits(64), 0, 0),
                      pika.BasicProperties(delivery_mode=2, user_id="dbtest-mallory"))

    publish_batch(ch, route["ingress_exchange"], "real-2-", N2, sent)
    h.wait_progress(lambda: h.stats(pa)["held"], N1 + N2, 20,
                    lambda n: "A holds %d of %d" % (n, N1 + N2))
    check(c.count() == 0, "%d delivered before the earliest due time" % c.count())
    time.sleep(1.0)  # B reads ahead (not needed: the takeover reads on to its fence)

    a.kill9()
    t0 = time.monotonic()
    b.wait_ready(60)
    rb = h.replication(pb)
    h.log("TAKEOVER: B ready %.2fs after A was killed; imported %d records; holds %d; "
          "refused %s" % (time.monotonic() - t0, rb["imported_records"], h.stats(pb)["held"],
                          rb.get("refused")))

    # Every real message is due within 30 s of its publish; the forged one 12 s after forging.
    deadline = time.monotonic() + 30 + 60
    while time.monotonic() < deadline:
        if set(sent) <= {m.message_id for m in c.snapshot()}:
            break
        time.sleep(0.2)
    t = h.tally(sent, c.quiet(2.0))
    h.log("RESULT replicate_forgery: %s" % h.tally_line(t))
    fakes = [m for m in t["unknown"] if m.startswith("FAKE")]
    check(not fakes, "a forged message was delivered: %s" % fakes)
    check(not t["lost"], "%d real message(s) lost (%d of the batch after the forged fence): %s"
          % (len(t["lost"]), len([m for m in t["lost"] if m.startswith("real-2-")]),
             t["lost"][:10]))
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(sent, t, "replicate_forgery")

    rb = h.replication(pb)
    check(rb.get("refused") == 3, "B should have refused the 3 forgeries: %s" % rb)
    metric = h.metric_value(h.metrics(pb), "delay_bridge_wal_replication_refused_total")
    check(metric == 3, "delay_bridge_wal_replication_refused_total: %r" % metric)
    b.wait_log("refused a stream message not published by this log's broker user", 5)
    check('user_id="dbtest-mallory"' in b.log_text(), "the impersonated user-id is not logged")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
