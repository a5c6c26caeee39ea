#!/usr/bin/python3
"""The WAL's disk fills up: the bridge stops consuming (messages stay safe in
the broker), says so in its log and in /readyz, keeps firing and publishing
what it holds, and resumes by itself when space returns. Nothing is lost,
nothing arrives early, and no message is stored twice.

The WAL lives on a small tmpfs (root only: skipped otherwise) that a filler
file shares; the test fills the rest with held messages, checks the
paused state, then deletes the filler. (A disk that only the bridge itself
can relieve is test_disk_full_self.py.)

Since the space reserve (wal_space.c) the bridge pauses before the disk is
full to the last byte: free space under one segment, beside a reserve of
2 x segment_mb. So the volume is
10 MiB (3 MiB of filler, 2 MiB of reserve) and the pause is the log's
"WAL space low", with /stats wal.intake_paused."""

import json
import os
import time

import harness as h
from harness import check

BODY = 150 * 1024


free_port = h.free_port  # one copy, in harness.py


def test(ctx):
    h.on_tmpfs(ctx, 10, lambda fs, filler: run(ctx, fs, filler), filler_mb=3)


def run(ctx, fs, filler):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("full", ex)
    port = free_port()
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port}, start=False)
    b.config["wal"] = {"dir": os.path.join(fs, "wal"), "segment_mb": 1, "fsync": True}
    with open(b.config_path, "w") as f:
        json.dump(b.config, f)
    b.start()
    p = ctx.publisher()
    sent = {}
    # A few that fall due while the disk is full: held messages keep firing.
    for i in range(4):
        mid = "early-%d" % i
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"e" * BODY,
                               headers={"x-delay": h.i32(3000)}, message_id=mid), 3.0)
    ctx.wait_drained(route["ingress_queue"], 10)
    # Then more than the disk holds, due after the episode.
    for i in range(30):
        mid = "held-%02d" % i
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"h" * BODY,
                               headers={"x-delay": h.i32(12000)}, message_id=mid), 12.0)
    p.close()

    h.wait_for("the log saying consuming paused", lambda: "consuming paused" in b.log_text(), 20)
    st, body = h.wait_for("/readyz saying so",
                          lambda: (lambda r: r if r[0] == 503 and "WAL" in r[1] else None)(
                              h.http_get(port, "/readyz")), 10)
    h.log("/readyz: %d %s" % (st, body.strip()))
    s = json.loads(h.http_get(port, "/stats")[1])
    w = s["wal"]
    check(w["intake_paused"] is True, "/stats wal.intake_paused is %r" % w["intake_paused"])
    check(w["reserve_bytes"] == 2 << 20, "/stats wal.reserve_bytes %r, not 2 MiB" % w["reserve_bytes"])
    h.log("paused: free %d B, reserve %d of %d B, spent %d" % (
        w["free_bytes"], w["reserve_held"], w["reserve_bytes"], w["reserve_spent"]))
    # Consuming stopped: the ingress consumers are cancelled (what the bridge
    # had taken stays unacked in the broker, and may be all of it), so what
    # is published now waits in the ingress queue.
    p = ctx.publisher()
    for i in range(5):
        mid = "late-%d" % i
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"l" * BODY,
                               headers={"x-delay": h.i32(12000)}, message_id=mid), 12.0)
    p.close()
    time.sleep(1.0)
    depth = ctx.queue_depth(route["ingress_queue"])
    check(depth >= 5, "nothing left in the ingress queue while the disk is full: "
                      "the bridge kept consuming")
    h.log("disk full: %d message(s) wait in the ingress queue" % depth)
    st, _ = h.http_get(port, "/healthz")
    check(st == 200, "/healthz while the disk is full: %d" % st)
    # Held messages keep firing meanwhile.
    c.wait_ids(["early-%d" % i for i in range(4)], 15)
    b.check_alive()

    os.unlink(filler)
    h.wait_for("/readyz 200 once space returned", lambda: h.http_get(port, "/readyz")[0] == 200, 30)
    check("space again" in b.log_text(), "no log line saying the space came back")
    ctx.wait_drained(route["ingress_queue"], 30)

    msgs = c.wait_ids(sent.keys(), 40)
    msgs = c.quiet(1.0)
    t = h.tally({k: v[0] for k, v in sent.items()}, msgs)
    h.log(h.tally_line(t))
    check(not t["lost"], "lost: %s" % sorted(t["lost"])[:10])
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    per_id = {}
    for m in msgs:
        per_id.setdefault(m.message_id, []).append(m)
    for mid, (t_pub, delay) in sent.items():
        first = min(m.t for m in per_id[mid])
        check(first - t_pub >= delay - h.early_tolerance(),
              "%s arrived early: %.3fs < %.1fs" % (mid, first - t_pub, delay))
        check(all(len(m.body) == BODY for m in per_id[mid]), "%s: body changed" % mid)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=180)
