#!/usr/bin/python3
"""The replicated WAL (wal.replicate): an owner and a standby on one log,
the owner's disk lost, the log rebuilt from the RabbitMQ stream.

Bridges A and B share one route and one replication stream (and so one
lease). A starts first and owns the log; B waits as a standby (/readyz
"standby ..."). 4000 messages with delays 25-37 s go to A, 20% keyed, each
key published twice so that the second replaces the first. A publishes
every record to the stream; with checkpoint_mb 1 it also completes stream
checkpoints (horizons) while it holds them.

Then A's disk is lost: A is killed with SIGKILL and its WAL directory
deleted. B gets the lease, reads the stream back into its own (empty) WAL
directory and fires everything A held. A starts again on an empty
directory and stands by. B is stopped with SIGTERM (a clean hand-over: the
lease goes back at once) and A, rebuilt from the stream a second time,
fires the rest.

Checked: every message arrives, replaced ones never, none early
(harness tolerance), no duplicates; the takeovers rebuilt the held set
(imported records > 0, held as expected); horizons were completed and the
stream was whole at each import.
"""

import os
import shutil
import time

import pika

import harness as h
from harness import check

N = 4000


def wait_standby(port, who, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        st, body = h.readyz(port)
        if st == 503 and "standby" in body:
            return
        check(time.monotonic() < deadline, "%s never stood by: %s %s" % (who, st, body.strip()))
        time.sleep(0.1)


def test(ctx):
    route, c, wal = ctx.replicated("repl", checkpoint_mb=1, max_mb=0)
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   wal=wal, broker={"heartbeat_s": 5})
    check(h.replication(pa)["state"] == "owner",
          "A should own the log: %s" % h.replication(pa))
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   wal=wal, broker={"heartbeat_s": 5}, start=False)
    b.start(wait_ready=False)
    wait_standby(pb, "B")
    h.log("A owns the log, B stands by")

    # Without publisher confirms (a fraction of a second for N, where one
    # confirm per publish took 35 s beside two CPU burners and let the first
    # messages fall due before A held the last): A holding them all is the
    # proof they arrived. The publish time recorded is before the send, so
    # the early check below stays a lower bound.
    ch = ctx.publisher().conn.channel()
    sent, replaced = {}, set()
    body = b"r" * 256
    t_first = time.monotonic()
    for i in range(N):
        mid = "r%05d" % i
        ms = 25000 + (i * 7919) % 12000
        hdrs = {"x-delay": h.i32(ms)}
        if i % 10 < 2:
            hdrs["x-delay-key"] = h.lstr("k%04d" % (i // 10))
            if i % 10 == 1:
                replaced.add("r%05d" % (i - 1))
        sent[mid] = (time.monotonic(), ms)
        ch.basic_publish(route["ingress_exchange"], "rk", body,
                         pika.BasicProperties(headers=hdrs, message_id=mid, delivery_mode=2))
    want = {k: v for k, v in sent.items() if k not in replaced}
    h.wait_progress(lambda: h.stats(pa)["held"], len(want), 20,
                    lambda n: "A holds %d of %d" % (n, len(want)))
    check(time.monotonic() < t_first + 25 - 5, "A took %.1fs to hold all %d: the first "
          "message is due 25 s after its publish" % (time.monotonic() - t_first, len(want)))
    ra = h.replication(pa)
    h.log("A holds %d; replication: published %d messages / %d bytes, %d horizons, confirm "
          "%.2f ms avg" % (h.stats(pa)["held"], ra["published_messages"], ra["published_bytes"],
                           ra["horizons"], 1000.0 * ra["confirm"]["sum_seconds"] /
                           max(1, ra["confirm"]["count"])))
    check(ra["published_bytes"] > N * 256, "too little published: %s" % ra)
    check(ra["complete"], "the stream should hold the whole log: %s" % ra)
    deadline = time.monotonic() + 20
    while h.replication(pa)["horizons"] < 1:
        check(time.monotonic() < deadline,
              "no stream checkpoint completed: %s" % h.replication(pa))
        time.sleep(0.1)
    check(c.count() == 0, "%d delivered before the earliest due time" % c.count())

    # A's disk is lost.
    a.kill9()
    t0 = time.monotonic()
    shutil.rmtree(a.config["wal"]["dir"])
    b.wait_ready(60)
    takeover = time.monotonic() - t0
    rb = h.replication(pb)
    held_b = h.stats(pb)["held"]
    h.log("TAKEOVER after disk loss: B ready %.2fs after A was killed; imported %d records / %d "
          "bytes in %.3fs; holds %d" % (takeover, rb["imported_records"], rb["imported_bytes"],
                                       rb["import_seconds"], held_b))
    check(rb["state"] == "owner" and rb["imported_records"] > 0, "B did not import: %s" % rb)
    check(held_b + c.count() >= len(want), "B holds %d, %d delivered, of %d"
          % (held_b, c.count(), len(want)))

    # A comes back on an empty disk: a standby now. B hands over cleanly.
    a.start(wait_ready=False)
    wait_standby(pa, "A")
    time.sleep(2.0)
    b.stop()
    t1 = time.monotonic()
    a.wait_ready(60)
    ra = h.replication(pa)
    h.log("HAND-OVER: A ready %.2fs after B's SIGTERM; imported %d records; holds %d"
          % (time.monotonic() - t1, ra["imported_records"], h.stats(pa)["held"]))
    check(ra["state"] == "owner" and ra["complete"], "A after the hand-over: %s" % ra)

    c.wait_ids(want.keys(), 37 + 60)
    t = h.tally(want, c.quiet(1.5))
    h.log("RESULT replicate: %s" % h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    back = sorted(set(t["unknown"]) & replaced)
    check(not back, "%d replaced message(s) arrived: %s" % (len(back), back[:10]))
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(want, t, "replicate")
    a.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
