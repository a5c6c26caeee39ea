#!/usr/bin/python3
"""A replicated log's stream written without user-id (as a bridge before
the user-id check wrote it, or a forger): the upgrade order the README
gives works, and the wrong one refuses to start instead of losing the log.

Bridge A owns a log and holds 60 messages (delays 25-35 s); it stops
cleanly (SIGTERM). Its stream's messages are copied, in order, into a
second stream by the same broker user but without the user-id property:
the stream an older bridge leaves. Then, on that stream:
  - bridge C on an empty disk (a standby upgraded before its owner) finds
    only records of other broker users, which its disk does not hold: it
    exits 1 and says so (before the change it took them: a stream any
    client wrote was imported as the log);
  - A on the new version, on a copy of its own disk, refuses the same
    records, finds its local log holds them all, takes it as the log and
    checkpoints the stream at once (complete), and fires all 60 on time.
"""

import shutil
import time

import pika

import harness as h
import test_replicate_forgery as forgery
from harness import check

N = 60


def test(ctx):
    route, c, wal = ctx.replicated("legacy", max_mb=0)
    s1 = wal["replicate"]["stream"]
    pa = h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   wal=wal)
    ch = ctx.publisher().conn.channel()
    sent = {}
    for i in range(N):
        mid = "l%03d" % i
        ms = 25000 + (i * 7919) % 10000
        sent[mid] = (time.monotonic(), ms)
        ch.basic_publish(route["ingress_exchange"], "rk", b"legacy" * 10,
                         pika.BasicProperties(headers={"x-delay": h.i32(ms)}, message_id=mid,
                                              delivery_mode=2))
    h.wait_progress(lambda: h.stats(pa)["held"], N, 20, lambda n: "A holds %d of %d" % (n, N))
    a.stop()

    # The stream an older bridge leaves: the same messages, no user-id.
    msgs = forgery.read_stream(h.broker_uri(), s1)
    s2 = ctx.n("wal-legacy")
    ctx.queues.update([s2, s2 + ".lease"])
    conn = pika.BlockingConnection(pika.URLParameters(h.broker_uri()))
    lch = conn.channel()
    lch.queue_declare(s2, durable=True, arguments={"x-queue-type": "stream",
                                                  "x-stream-max-segment-size-bytes": 64 << 20})
    lch.confirm_delivery()
    for props, body in msgs:
        check(props.user_id == h.broker_user(), "A published without user-id: %r" % props)
        lch.basic_publish("", s2, body, pika.BasicProperties(delivery_mode=2))
    conn.close()
    h.log("copied %d stream messages into %s without user-id" % (len(msgs), s2))
    wal2 = {"replicate": {"stream": s2, "max_mb": 0}}

    # A standby upgraded first, on an empty disk, would take over from them alone: it refuses.
    b = ctx.bridge([route], name="c", instance="c", http={"listen": "127.0.0.1:%d" % h.free_port()},
                   wal=wal2, start=False)
    b.start(wait_ready=False)
    rc = b.wait_exit(60, "C (empty disk, only records without user-id) should refuse to start")
    check(rc == 1, "C exited with %s, expected 1" % rc)
    check("only records of other broker users" in b.log_text(), "C does not say why")

    # The old owner on the new version, on its own disk: its log holds them all.
    shutil.copytree(a.config["wal"]["dir"], ctx.tmp + "/a2.wal")
    pa2 = h.free_port()
    a2 = ctx.bridge([route], name="a2", instance="a", http={"listen": "127.0.0.1:%d" % pa2},
                    wal=wal2)
    r = h.replication(pa2)
    h.log("A on the legacy stream: %s" % r)
    check(r["state"] == "owner" and r["refused"] == len(msgs),
          "A2 should own the log, %d refused: %s" % (len(msgs), r))
    h.wait_for("A2 to checkpoint the stream", lambda: h.replication(pa2)["complete"], 30)
    c.wait_ids(sent.keys(), 35 + 60)
    t = h.tally(sent, c.quiet(1.5))
    h.log("RESULT replicate_legacy: %s" % h.tally_line(t))
    check(not t["lost"] and not t["unknown"], "lost %s, unexpected %s" % (t["lost"], t["unknown"]))
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(sent, t, "replicate_legacy")
    a2.stop()


if __name__ == "__main__":
    h.run(test, budget_s=200)
