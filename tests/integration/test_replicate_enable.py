#!/usr/bin/python3
"""Turning wal.replicate on for a bridge that already holds messages.

A bridge runs without replication and holds 1000 messages (delays 12-20 s).
It is stopped and started again with wal.replicate and a new stream: the
stream holds none of the old records, so /stats says the stream is not
whole ("complete": false) until the stream checkpoint that starts at once
has copied every live record forward and published its horizon. Then the
bridge is killed with SIGKILL and its WAL directory deleted; restarted on
the empty directory, it rebuilds everything from the stream.

Checked: "complete" goes false -> true; after the disk loss the rebuilt
bridge holds all 1000; every message arrives once, none early.
"""

import shutil
import time

import harness as h
from harness import check

N = 1000


def test(ctx):
    ex, qs = ctx.target("ren", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("ren", ex)
    port = h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()
    sent = {}
    for i in range(N):
        mid = "e%04d" % i
        ms = 12000 + (i * 7919) % 8000
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"e" * 200,
                               headers={"x-delay": h.i32(ms)}, message_id=mid,
                               delivery_mode=2), ms)
    deadline = time.monotonic() + 15
    while h.stats(port)["held"] < N:
        check(time.monotonic() < deadline, "held %d" % h.stats(port)["held"])
        time.sleep(0.1)
    a.stop()

    stream = ctx.n("wal")
    ctx.queues.update([stream, stream + ".lease"])
    a.config["wal"]["replicate"] = {"stream": stream, "max_mb": 0}
    a.rewrite_config()
    a.start()
    r = h.stats(port)["wal"]["replication"]
    h.log("replication turned on: complete=%s horizons=%d" % (r["complete"], r["horizons"]))
    deadline = time.monotonic() + 15
    while not r["complete"]:
        check(r["horizons"] == 0, "horizon published but not complete: %s" % r)
        check(time.monotonic() < deadline, "the first stream checkpoint did not complete: %s" % r)
        time.sleep(0.1)
        r = h.stats(port)["wal"]["replication"]
    h.log("stream whole after its first checkpoint: horizon_lsn=%d, %d bytes published"
          % (r["horizon_lsn"], r["published_bytes"]))
    check(r["horizons"] == 1 and r["published_bytes"] > N * 200, "checkpoint: %s" % r)
    check("a stream checkpoint starts at once" in a.log_text(), "the bridge did not say why")

    a.kill9()
    shutil.rmtree(a.config["wal"]["dir"])
    a.start()
    r = h.stats(port)["wal"]["replication"]
    held = h.stats(port)["held"]
    h.log("rebuilt from the stream: %d records imported, holds %d" % (r["imported_records"], held))
    check(held + c.count() >= N, "holds %d (+%d delivered) of %d" % (held, c.count(), N))

    c.wait_ids(sent.keys(), 40)
    t = h.tally(sent, c.quiet(1.0))
    h.log("RESULT replicate-enable: %s" % h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(t["duplicates"] == 0 and not t["unknown"], "duplicates or strays: %s" % h.tally_line(t))
    h.check_none_early(sent, t, "replicate-enable")
    a.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
