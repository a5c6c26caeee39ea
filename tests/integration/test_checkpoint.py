#!/usr/bin/python3
"""A restart reads the WAL checkpoint instead of the whole log, and loses
nothing: with checkpoints every second (wal.checkpoint_interval_s 1,
checkpoint_min_mb 1, 1 MiB segments), 4000 messages of 1 KiB are held for
8-12 s; once /stats shows a checkpoint installed (and /metrics counts it),
400 more are published (the tail the restart must replay) and the bridge is
killed with SIGKILL. `delay-bridge wal check` reports the checkpoint ok;
the restart logs "checkpoint loaded", reads fewer
segments than the log has, /stats says wal.checkpoint.used_at_start, and
every confirmed message arrives once, none early."""

import re
import subprocess
import time

import harness as h
from harness import check

N = 4000
TAIL = 400


def checkpoint(port):
    return h.stats(port)["wal"]["checkpoint"]


def test(ctx):
    ex, qs = ctx.target("ckpt", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    route = ctx.route("ckpt", ex, prefetch=500)
    b = ctx.bridge([route], name="ckpt", http={"listen": "127.0.0.1:%d" % port},
                   wal={"segment_mb": 1, "checkpoint_interval_s": 1, "checkpoint_min_mb": 1})
    ingress = route["ingress_exchange"]
    p = ctx.publisher()
    body = b"x" * 1024

    sent = {}
    for i in range(N + TAIL):
        if i == N:
            # Wait for a checkpoint that covers most of what is held.
            deadline = time.monotonic() + 30
            while True:
                ck = checkpoint(port)
                if ck["installed"] >= 1 and ck["state"] == "idle" and ck["lsn"] > N // 2:
                    break
                check(time.monotonic() < deadline, "no checkpoint within 30 s: %r" % ck)
                time.sleep(0.2)
            h.log("checkpoint installed: %r" % ck)
            check(ck["bytes"] > 0 and ck["failed"] == 0 and not ck["used_at_start"],
                  "odd checkpoint figures: %r" % ck)
            m = re.search(r"^delay_bridge_wal_checkpoints_total (\d+)$",
                          h.http_get(port, "/metrics")[1], re.M)
            check(m and int(m.group(1)) >= 1, "/metrics does not count the checkpoint")
        ms = 8000 + (i * 7919) % 4000
        mid = "k%05d" % i
        sent[mid] = (p.publish(ingress, "rk", body, headers={"x-delay": h.i32(ms)},
                               message_id=mid, delivery_mode=2), ms)
    time.sleep(0.3)
    b.kill9()
    r = subprocess.run([h.bridge_bin(), "wal", "check", b.config["wal"]["dir"]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                       timeout=60)
    line = [l for l in r.stdout.splitlines() if l.startswith("checkpoint:")]
    check(r.returncode == 0 and line and " ok, " in line[0],
          "wal check after the kill: %s" % r.stdout[-600:])
    h.log("wal check: %s" % line[0])
    b.start()
    text = b.log_text()
    check('msg="checkpoint loaded"' in text, "the restart did not load the checkpoint")
    m = re.search(r'msg="log replayed" .*segments=(\d+) segments_read=(\d+)', text)
    check(m and int(m.group(2)) < int(m.group(1)),
          "the restart read every segment: %s" % (m.group(0) if m else "no replay line"))
    h.log("restart: %s" % m.group(0))
    ck = checkpoint(port)
    check(ck["used_at_start"], "/stats: wal.checkpoint.used_at_start is false: %r" % ck)
    held = h.stats(port)["held"]
    h.log("held after the restart: %d (some may have fired already)" % held)

    c.wait_ids(sent.keys(), 12 + 60)
    t = h.tally(sent, c.quiet(1.0))
    h.log("RESULT checkpoint restart: %s" % h.tally_line(t))
    check(not t["lost"], "%d message(s) lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(not t["unknown"], "messages nobody published: %s" % t["unknown"][:10])
    check(t["case2"] == 0, "%d redelivered duplicates" % t["case2"])
    h.check_none_early(sent, t, "checkpoint restart")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=180)
