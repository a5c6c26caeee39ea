#!/usr/bin/python3
"""A stream that lacks records the broker confirmed, and a stream deleted in use.

RabbitMQ before 4.0.x (rabbitmq-server#12236) resends a stream's unconfirmed
messages after a leader change under the channel's publish sequence number;
when that differs from the stream writer's, the next real message is taken
for a duplicate: confirmed, never stored. The fault schedule met it once in
a ten-minute run (tests/soak/README.md): an owner acked records the stream
did not hold, and a restart resumed on its local log without noticing, so
a standby could not rebuild the log until a stream checkpoint happened to
cover the hole. The daemon built with failpoints reproduces the broker's
half: repl.lose_message:1 sends the owner's first stream message after its
fence to no queue, which the broker confirms without storing -- the shape
the soak met: fence, then a batch from a later LSN.

1. A (the first owner of a new stream, no stream checkpoint by size or
   time) holds N messages; its first batch was lost, yet confirmed.
   A is killed -9 within its running note's first 30 s (the note still
   says: from the fence on, everything is in the stream).
2. Restarted, A resumes on its local log, finds the hole ("the stream
   lacks records of this log that the local log holds") and starts a
   stream checkpoint at once; replication reports complete again after it.
   Without the fix A resumed silently, reported complete, and step 3 failed.
3. A stops cleanly; B, on an empty disk, is granted the lease and rebuilds
   the whole log from the stream: it holds N.
4. The stream is deleted while B owns it. The next stream publish comes
   back unroutable (published mandatory; before, the broker confirmed it
   and B went on replicating into nothing): B declares the stream again,
   publishes the batch again and checkpoints its log into the new stream
   at once, keeping the lease (stopping would hand it to a standby that
   would take its own local log for the log on an empty stream). Then a
   bridge C on an empty disk rebuilds all N + 1 from the new stream.

Every message arrives once, none early.
"""

import functools
import time

import harness as h
from harness import check

N = 200

# /stats' wal.replication, or this while the bridge does not listen yet
repl = functools.partial(h.replication, unreachable={"state": None, "complete": None})


def wait_repl(port, pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        r = repl(port)
        if pred(r):
            return r
        check(time.monotonic() < deadline, "%s within %ds: %s" % (what, timeout, r))
        time.sleep(0.1)


def test(ctx):
    h.use_failpoint_bridge()
    route, c, wal = ctx.replicated("rh", max_mb=0, checkpoint_mb=1024, checkpoint_interval_s=0)
    stream = wal["replicate"]["stream"]
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   wal=wal, broker={"heartbeat_s": 5}, start=False)
    t_a = time.monotonic()
    a.start(env={"DELAY_BRIDGE_FAILPOINT": "repl.lose_message:1"})
    p = ctx.publisher()
    sent = {}
    for burst in range(8):  # several commits, so several stream messages
        for i in range(burst * N // 8, (burst + 1) * N // 8):
            mid = "m%04d" % i
            ms = 25000 + (i * 7919) % 5000
            sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"h" * 100,
                                   headers={"x-delay": h.i32(ms)}, message_id=mid,
                                   delivery_mode=2), ms)
        time.sleep(0.2)
    h.wait_held(pa, N, "A")
    check("name=repl.lose_message" in a.log_text(), "the failpoint was not reached")
    check(repl(pa)["complete"], "A knows of the loss before a restart: %s" % repl(pa))
    check(time.monotonic() - t_a < 25, "too slow: the running note may have moved on")

    # 2. The restart finds the hole and makes the stream whole again.
    a.kill9()
    a.start(wait_ready=True)
    log = a.log_text()
    check("resumed on the intact local log" in log, "A did not resume on its local log")
    check("the stream lacks records of this log that the local log holds" in log,
          "A did not see the hole in the stream")
    line = [ln for ln in log.splitlines() if "the stream lacks records" in ln][-1]
    h.log("A: %s" % line[line.index("first_missing_lsn"):])
    r = wait_repl(pa, lambda r: r.get("complete") and r.get("horizons", 0) >= 1, 20,
                  "no stream checkpoint completed")
    h.log("A after the checkpoint: horizons=%d horizon_lsn=%d" % (r["horizons"],
                                                                  r["horizon_lsn"]))
    check(h.stats(pa)["held"] == N, "A holds %d of %d" % (h.stats(pa)["held"], N))
    a.stop()

    # 3. A bridge on an empty disk rebuilds the whole log from the stream.
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   wal=wal, broker={"heartbeat_s": 5})
    check("local log rebuilt from the stream" in b.log_text(), "B did not rebuild")
    check(h.stats(pb)["held"] == N, "B holds %d of %d" % (h.stats(pb)["held"], N))

    # 4. The stream deleted under its owner: declared again, checkpointed, whole again.
    horizons = repl(pb)["horizons"]
    ctx.admin().queue_delete(stream)
    sent["late"] = (p.publish(route["ingress_exchange"], "rk", b"late",
                              headers={"x-delay": h.i32(5000)}, message_id="late",
                              delivery_mode=2), 5000)
    b.wait_log("the stream was deleted while in use", 20)
    wait_repl(pb, lambda r: r.get("complete") and r.get("horizons", 0) > horizons, 20,
              "no stream checkpoint into the new stream")
    b.check_alive()
    h.wait_held(pb, N + 1, "B")
    b.stop()
    c_wal = dict(wal)
    cb = ctx.bridge([route], name="c", instance="c", http={"listen": "127.0.0.1:%d" % pa},
                    wal=c_wal, broker={"heartbeat_s": 5})
    check("local log rebuilt from the stream" in cb.log_text(), "C did not rebuild")
    check(h.stats(pa)["held"] == N + 1, "C rebuilt %d of %d from the new stream"
          % (h.stats(pa)["held"], N + 1))

    c.wait_ids(sent.keys(), 60)
    t = h.tally(sent, c.quiet(1.5))
    h.log("RESULT replicate_hole: %s" % h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(sent, t, "replicate_hole")
    cb.stop()


if __name__ == "__main__":
    h.run(test, budget_s=180)
