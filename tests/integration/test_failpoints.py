#!/usr/bin/python3
"""Failpoints: the bridge dies at exactly one chosen point, and a restart
loses nothing the broker confirmed to the publisher.

Runs delay-bridge-fp (DB_BRIDGE_FP_BIN, set by tests.cmake: the daemon
compiled with failpoints, src/base/failpoint.h); skipped
without it. One case per point, each on a fresh route and WAL:

  1. the bridge starts armed (DELAY_BRIDGE_FAILPOINT=NAME:N) while a
     publisher thread publishes with confirms: 3 messages in 4 due within
     1.5 s (most are published and confirmed before the crash), 1 in 4 held
     4-5 s (in the WAL at the crash);
  2. it must die at the point: SIGKILL (exit -9) and its "crashing" line
     naming the point; for wal.fsync_error, exit 1 and an error line naming
     fdatasync (a failed fsync is never retried: STYLE.md, wal.c);
  3. publishing goes on for a moment, the bridge restarts unarmed;
  4. every confirmed message arrives, none before its due time, and the
     duplicates are only those README "Delivery guarantees" allows: case 1
     (same x-delay-bridge-id: published again because its DONE record did
     not reach disk) at most the in-flight window plus one turn of confirms,
     case 2 (a new bridge id: committed, not acked, redelivered and stored
     again) at most the prefetch; no message more than twice.
Each case prints sent, delivered, lost and duplicates by cause.

  DB_FAILPOINT_CASES=wal.mid_roll,bridge.after_confirm   run only those cases
"""

import http.client
import json
import os
import subprocess
import time
import zlib

import harness as h
import harness_load as hl
from harness import check

PREFETCH = 100
MAX_INFLIGHT = 50
KB = 1024

# point, N (the N-th pass crashes), how the bridge must end, and the traffic:
# body bytes of due / held messages, ms range of due / held delays, one held
# message in held_every, WAL segment size.
DEFAULT = {"n": 1, "exit": -9, "due_body": 0, "held_body": 0, "due_ms": (0, 1500),
           "held_ms": (4000, 5000), "held_every": 4, "segment_mb": 64}
CASES = [
    # Records written, not yet fdatasync'ed: the batch is not acked, so the
    # broker redelivers it; the records are there after a SIGKILL (the page
    # cache survives the process), so this is case 2 at worst.
    {"point": "wal.before_fsync", "n": 400},
    # Durable, basic.ack not sent: README case 2.
    {"point": "bridge.before_ack", "n": 400},
    # basic.publish sent, its confirm not processed: still held, published
    # again after the restart (case 1 if the broker had routed it).
    {"point": "bridge.after_publish", "n": 150},
    # Confirmed, DONE record not committed: README case 1, at least once.
    {"point": "bridge.after_confirm", "n": 150, "min_case1": 1},
    # Copying live records forward: 1 MiB segments of 64 KiB messages due at
    # once, the held ones (1 KiB) are what compaction copies, segment after
    # segment (one per 100 ms); the 8th copy crashes with the copies of the
    # earlier segments durable and the current one's in the write buffer.
    {"point": "wal.mid_compaction", "n": 8, "segment_mb": 1, "due_body": 64 * KB,
     "held_body": KB, "due_ms": (0, 200), "held_ms": (5000, 6000), "held_every": 6},
    # The first roll (pass 1 creates segment 1 of the new log): the new file
    # exists, empty; recovery must take it for a torn creation and delete it.
    {"point": "wal.mid_roll", "n": 2, "segment_mb": 1, "due_body": 8 * KB, "held_body": 8 * KB,
     "restart_log": "deleting newest segment with a torn header"},
    # fdatasync reports EIO: exit 1 at once, nothing of the batch acked.
    {"point": "wal.fsync_error", "n": 400, "exit": 1},
    # Checkpoints every second (8 KiB messages: over 1 MiB of log a second).
    # A checkpoint has a meta, a held and an end chunk here, so the 5th chunk
    # write is in the middle of the second checkpoint: the restart must use
    # the first one and replay the log since it began, and must not take the
    # half-written CHECKPOINT.tmp for anything.
    {"point": "wal.mid_ckpt", "n": 5, "segment_mb": 1, "due_body": 8 * KB, "held_body": 8 * KB,
     "wal": {"checkpoint_interval_s": 1, "checkpoint_min_mb": 1},
     "restart_log": 'msg="checkpoint loaded"'},
    # Just after the second checkpoint was installed: recovery reads it.
    {"point": "wal.after_ckpt", "n": 2, "segment_mb": 1, "due_body": 8 * KB, "held_body": 8 * KB,
     "wal": {"checkpoint_interval_s": 1, "checkpoint_min_mb": 1},
     "restart_log": 'msg="checkpoint loaded"'},
]


free_port = h.free_port  # one copy, in harness.py


def route_stats(port):
    """The route's counters from /stats (one route), or {} if unavailable."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/stats")
        return json.loads(c.getresponse().read().decode())["routes"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return {}
    finally:
        c.close()


def case_message(c, prefix):
    """The feeder's i-th message of case c: every held_every-th held
    (held_ms, held_body), the others due soon (due_ms, due_body)."""
    def message(i, rng):
        held = i % c["held_every"] == c["held_every"] - 1
        ms = rng.randint(*(c["held_ms"] if held else c["due_ms"]))
        mid = "%s%05d" % (prefix, i)
        size = c["held_body"] if held else c["due_body"]
        body = (mid.encode() * (size // len(mid) + 1))[:size] if size else mid.encode()
        return mid, body, ms
    return message


def wal_files(d):
    return sorted((f, os.path.getsize(os.path.join(d, f))) for f in os.listdir(d)
                  if f.endswith(".wal"))


def run_case(ctx, case):
    c = dict(DEFAULT)
    c.update(case)
    point = c["point"]
    short = point.replace(".", "-").replace("_", "-")
    h.log("=== %s:%d ===" % (point, c["n"]))
    ex, qs = ctx.target("t-" + short, "direct", ["rk"])
    cons = ctx.consumer([qs["rk"]])
    route = ctx.route(short, ex, prefetch=PREFETCH, max_inflight=MAX_INFLIGHT)
    port = free_port()
    wal = dict(c.get("wal", {}), segment_mb=c["segment_mb"])
    b = ctx.bridge([route], name=short, start=False, wal=wal,
                   http={"listen": "127.0.0.1:%d" % port})
    wal_dir = b.config["wal"]["dir"]
    b.start(env={"DELAY_BRIDGE_FAILPOINT": "%s:%d" % (point, c["n"])})
    check("armed" in b.log_text() and "name=%s" % point in b.log_text(),
          "%s: the bridge did not log its armed failpoint (is DB_BRIDGE_FP_BIN a build with "
          "failpoints?)" % point)

    feeder = hl.Feeder(route["ingress_exchange"], case_message(c, short + "-"),
                       seed=zlib.crc32(point.encode()), pause_s=0.005, limit=20000,
                       name="feeder-" + short + "-")
    feeder.start()
    deadline = time.monotonic() + 60
    while b.proc.poll() is None:
        check(feeder.error is None, "%s: publisher failed: %r" % (point, feeder.error))
        check(time.monotonic() < deadline, "%s: the bridge did not reach the failpoint within "
              "60 s (%d messages published)" % (point, len(feeder.snapshot())))
        time.sleep(0.01)
    rc = b.proc.returncode
    at_death = len(feeder.snapshot())
    arrived = len({m.message_id for m in cons.snapshot()})
    time.sleep(0.5)  # a few more messages wait at the ingress while the bridge is down
    feeder.stop_flag.set()
    feeder.join(30)
    check(feeder.error is None, "%s: publisher failed: %r" % (point, feeder.error))
    sent = feeder.snapshot()
    text = b.log_text()
    h.log("%s: bridge exited with %d after %d confirmed publishes (%d distinct arrived); %d "
          "published in all" % (point, rc, at_death, arrived, len(sent)))
    check(rc == c["exit"], "%s: the bridge exited with %s, expected %d" % (point, rc, c["exit"]))
    if c["exit"] == -9:
        check('msg="crashing (SIGKILL)" name=%s' % point in text,
              "%s: the bridge was killed, but not by this failpoint (no crashing line)" % point)
    else:
        errs = [l for l in text.splitlines() if "level=error" in l and "fdatasync" in l]
        check(errs, "%s: exit %d without an error line naming fdatasync" % (point, rc))
        h.log("%s: %s" % (point, errs[0]))
    h.log("%s: WAL after the crash: %s" % (point, wal_files(wal_dir)))
    if point == "wal.mid_roll":
        newest = wal_files(wal_dir)[-1]
        check(len(wal_files(wal_dir)) >= 2 and newest[1] == 0,
              "%s: expected an empty newest segment after the crash, found %s" % (
                  point, wal_files(wal_dir)))
    if point == "wal.mid_compaction":
        h.log("%s: before the crash %d segment(s) were compacted, %d deleted" % (
            point, text.count('msg="segment compacted"'), text.count('msg="segment deleted"')))
        r = subprocess.run([h.bridge_bin(), "wal", "check", wal_dir], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
        for line in r.stdout.splitlines():
            if "compaction copies" in line or line.startswith(("segments", "records", "live")):
                h.log("%s: wal check: %s" % (point, line.strip()))

    b.start()  # unarmed
    if c.get("restart_log"):
        check(c["restart_log"] in b.log_text(), "%s: the restart did not log %r" % (
            point, c["restart_log"]))
    wait_s = max(c["held_ms"][1], c["due_ms"][1]) / 1000.0 + 60
    cons.wait_ids(sent.keys(), wait_s)
    t = h.tally(sent, cons.quiet(1.5))
    t["deduplicated"] = route_stats(port).get("deduplicated")
    h.log("RESULT %s: %s; redeliveries the restart recognised as already logged (acked, not "
          "stored again): %s" % (point, h.tally_line(t), t["deduplicated"]))
    check(not t["unknown"], "%s: messages nobody published arrived: %s" % (point, t["unknown"][:10]))
    check(not t["lost"], "%s: %d confirmed message(s) lost: %s" % (point, len(t["lost"]),
                                                                   t["lost"][:10]))
    early = []
    for mid, (t0, ms) in sent.items():
        first = min(m.t for m in t["per_id"][mid])
        if first - t0 < ms / 1000.0 - h.early_tolerance():
            early.append("%s after %.3fs, due %.3fs" % (mid, first - t0, ms / 1000.0))
    check(not early, "%s: %d message(s) arrived early: %s" % (point, len(early), early[:5]))
    nobid = [k for k, v in t["per_id"].items() if not all(m.bridge_id for m in v)]
    check(not nobid, "%s: deliveries without x-delay-bridge-id: %s" % (point, nobid[:10]))
    check(t["max_copies"] <= 2, "%s: a message arrived %d times after one crash" % (
        point, t["max_copies"]))
    check(t["case2"] <= PREFETCH, "%s: %d redelivered duplicates, more than the prefetch (%d)" % (
        point, t["case2"], PREFETCH))
    check(t["case1"] <= 2 * MAX_INFLIGHT, "%s: %d republished duplicates, more than the in-flight "
          "window and one turn of confirms (2 x %d)" % (point, t["case1"], MAX_INFLIGHT))
    check(t["case1"] >= c.get("min_case1", 0), "%s: expected at least %d republished duplicate(s) "
          "(the confirmed message whose DONE record the crash cut off), got %d" % (
              point, c.get("min_case1", 0), t["case1"]))
    b.stop()
    cons.close()
    return t


def test(ctx):
    h.use_failpoint_bridge()
    only = [x for x in os.environ.get("DB_FAILPOINT_CASES", "").split(",") if x]
    cases = [c for c in CASES if not only or c["point"] in only]
    check(cases, "DB_FAILPOINT_CASES=%s names no case; the cases: %s" % (
        ",".join(only), ", ".join(c["point"] for c in CASES)))
    results = [(c["point"], run_case(ctx, c)) for c in cases]
    for point, t in results:
        print("%-22s %s deduplicated=%s" % (point, h.tally_line(t), t["deduplicated"]))


if __name__ == "__main__":
    h.run(test, budget_s=280)
