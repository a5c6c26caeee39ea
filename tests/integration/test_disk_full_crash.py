#!/usr/bin/python3
"""kill -9 while intake is paused for space and deliveries wait in memory
(issue 26; src/daemon/dstash.h).

When the WAL's volume runs short the bridge cancels its ingress consumers,
and the deliveries the broker had already sent wait in memory, unacked,
until the log has room. Nothing there is durable, so nothing there may be
acked: a crash must give every one of them back to the broker. The WAL is
on an 8 MiB tmpfs (root only: skipped otherwise), segment_mb 1, and a flood
of 2 KiB messages (x-delay 6-9 s) fills it; the test waits until /stats
shows intake paused with deliveries waiting, kills the bridge with SIGKILL,
twice, and restarts it on the same volume, nobody relieving it.

Checked: nothing lost (every message published arrives), nothing early,
none stored twice from a redelivery (case 2: another x-delay-bridge-id for
the same message; a republish of one in flight at the kill, case 1, is the
documented at-least-once), and the last bridge ends with intake open and
the reserve whole.
"""

import os
import time

import harness as h
from harness import check

KIB = 1024
MIB = 1024 * 1024
N = 5000
KILLS = 2


def test(ctx):
    h.on_volume(ctx, "tmpfs", 8, lambda fs: run(ctx, fs))


def wait_waiting(port, b, timeout):
    """Until intake is paused with deliveries waiting in memory."""
    deadline = time.monotonic() + timeout
    w = {}
    while time.monotonic() < deadline:
        b.check_alive()
        try:
            w = h.stats(port)["wal"]
        except Exception:
            w = {}
        if w.get("intake_paused") and w.get("intake_waiting", 0) > 0:
            return w
        time.sleep(0.02)
    h.fail("no pause with deliveries waiting in %.0f s (last /stats wal: %r)" % (timeout, w))


def run(ctx, fs):
    ex, qs = ctx.target("dfc", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("dfc", ex)
    port = h.free_port()
    wal = {"dir": os.path.join(fs, "wal"), "segment_mb": 1, "fsync": True}
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port}, wal=wal, start=False)
    b.config["wal"] = wal
    b.rewrite_config()
    b.start()
    items = [("m%05d" % i, bytes([65 + i % 26]) * (2 * KIB), {"x-delay": h.i32(6000 + i % 3000)},
              6000 + i % 3000) for i in range(N)]
    sent = h.publish_burst(ctx, route["ingress_exchange"], items)
    h.log("published %d x 2 KiB into an 8 MiB volume" % N)
    for k in range(KILLS):
        w = wait_waiting(port, b, 60)
        h.log("kill %d: intake paused, %d deliveries (%d bytes) waiting in memory, free %d B, "
              "reserve %d of %d" % (k + 1, w["intake_waiting"], w["intake_waiting_bytes"],
                                    w["free_bytes"], w["reserve_held"], w["reserve_bytes"]))
        b.kill9()
        b.start()
    msgs = c.wait_ids(sent.keys(), 120)
    msgs = c.quiet(1.0)
    t = h.tally(sent.keys(), msgs)
    h.log("RESULT disk_full_crash: %s" % h.tally_line(t))
    check(not t["lost"], "lost: %d, e.g. %s" % (len(t["lost"]), t["lost"][:10]))
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    h.check_none_early(sent, t, "disk_full_crash")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        w = h.stats(port)["wal"]
        if not w["intake_paused"] and w["reserve_held"] == w["reserve_bytes"]:
            break
        time.sleep(0.2)
    check(not w["intake_paused"] and w["reserve_held"] == w["reserve_bytes"],
          "at the end intake is paused or the reserve not whole: %r" % w)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
