#!/usr/bin/python3
"""A damaged WAL: what the daemon does, and `delay-bridge wal salvage`.

  (a) Torn tail: the daemon holds messages, stops; the newest segment is cut
      in the middle of its last record (a write the disk never finished).
      The next start truncates the tail, logs it (file, offset), serves, and
      every message whose record is complete is delivered.
  (b) A flipped bit in the middle of a record of an older segment (1 MiB
      segments, ~100 KiB bodies, so the log spans several): the daemon
      refuses to start, exit code 4, a log line naming the segment file and
      the record's offset. `wal salvage` refuses while a daemon holds the
      lock (exit 5); without --yes it changes nothing (exit 4) and says what
      it would do; with --yes it keeps every valid record, moves the damaged
      segment aside (nothing deleted), reports 1 record dropped and the lost
      message's msg id; `wal check` then passes, the bridge starts on the
      salvaged directory and delivers every message whose record survived,
      exactly once, and new messages after it get fresh ids (none reused).
"""

import functools
import hashlib
import os
import time

import harness as h
import harness_wal as hw
from harness import check

# the CLI on a log of several 1 MiB segments: salvage reads and rewrites them all
run_cli = functools.partial(h.bridge_cli, timeout=120)


def snapshot(d):
    snap = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            snap[name] = hashlib.sha256(f.read()).hexdigest()
    return snap


def hold(ctx, b, p, route, rk, n, delay_ms, size, tag, port=None):
    """Publish n messages that the bridge holds; wait until they are all in its
    log: by the bridge's /stats on port when given (no rabbitmqctl, which can
    take longer than a short delay on a loaded machine), else by the queue."""
    ids = []
    for i in range(n):
        mid = "%s-%03d" % (tag, i)
        body = (mid.encode() * (size // len(mid) + 1))[:size]
        p.publish(route["ingress_exchange"], rk, body, headers={"x-delay": h.i32(delay_ms)},
                  message_id=mid)
        ids.append(mid)
    if port:
        ctx.wait_taken(port, route["ingress_queue"], n, 30)
    else:
        ctx.wait_drained(route["ingress_queue"], 30)
    return ids


def torn_tail(ctx, ex, qs):
    c = ctx.consumer(list(qs.values()))
    r = ctx.route("torn", ex)
    port = h.free_port()
    b = ctx.bridge([r], name="torn", http={"listen": "127.0.0.1:%d" % port})
    wal = b.config["wal"]["dir"]
    p = ctx.publisher()
    t0 = time.monotonic()
    ids = hold(ctx, b, p, r, "k", 12, 6000, 2000, "torn", port=port)
    b.stop()
    pend = hw.dump(wal, timeout=120)
    check(sorted(m["message_id"] for m in pend) == sorted(ids),
          "(a) the log should hold all %d messages after SIGTERM, holds %d" % (len(ids), len(pend)))
    newest = os.path.join(wal, hw.segments(wal)[-1])
    recs = hw.records(newest)
    off, ln, typ, lsn = recs[-1]
    check(typ == 1, "(a) the newest segment's last record should be an ADD (type %d)" % typ)
    victim = [m["message_id"] for m in pend if m["lsn"] == lsn]
    check(len(victim) == 1, "(a) no pending message has the last record's lsn %d" % lsn)
    cut = off + ln // 2
    with open(newest, "r+b") as f:
        f.truncate(cut)
    h.log("(a) cut %s at %d, inside the last record (offset %d, %d bytes, message %s)" % (
        newest, cut, off, ln, victim[0]))
    rc, out, _ = run_cli("wal", "check", wal)
    check(rc == 0 and "TORN TAIL" in out, "(a) wal check of a torn tail: exit %d\n%s" % (rc, out))
    rc, out, _ = run_cli("wal", "salvage", wal)
    check(rc == 0 and "nothing to do" in out, "(a) wal salvage of a torn tail should have nothing "
          "to do (exit %d)\n%s" % (rc, out))

    b.start()
    text = b.log_text()
    check("torn tail truncated" in text and os.path.basename(newest) in text and
          "offset=%d" % off in text, "(a) the daemon should log the torn tail it cut, with the "
          "file and offset %d:\n%s" % (off, text))
    want = [i for i in ids if i != victim[0]]
    c.wait_ids(want, 30)
    c.quiet(1.0)
    got = [m.message_id for m in c.snapshot()]
    check(sorted(got) == sorted(want), "(a) expected exactly the %d complete messages once each, "
          "got %s" % (len(want), sorted(got)))
    b.stop()
    h.log("(a) torn tail: cut and logged at start; the %d complete messages delivered once each"
          % len(want))


def flipped_bit(ctx, ex, qs):
    c = ctx.consumer(list(qs.values()))
    r = ctx.route("flip", ex)
    b = ctx.bridge([r], name="flip", wal={"segment_mb": 1})
    wal = b.config["wal"]["dir"]
    p = ctx.publisher()
    ids = hold(ctx, b, p, r, "k", 30, 20000, 100 * 1024, "flip")
    segs = hw.segments(wal)
    check(len(segs) >= 3, "(b) expected the 1 MiB segments to roll at least twice: %s" % segs)

    # Refused while the daemon holds the lock.
    rc, out, err = run_cli("wal", "salvage", wal, "--yes")
    check(rc == 5 and "locked" in err, "(b) salvage on a running daemon's directory: exit %d, "
          "expected 5\n%s%s" % (rc, out, err))
    b.stop()
    pend = {m["message_id"]: m for m in hw.dump(wal, timeout=120)}
    check(sorted(pend) == sorted(ids), "(b) the log should hold all %d messages" % len(ids))

    # A bit in the middle of a record of the second segment (older than the newest).
    seg = segs[1]
    path = os.path.join(wal, seg)
    recs = [x for x in hw.records(path) if x[2] == 1]
    off, ln, _, lsn = recs[len(recs) // 2]
    victim = [mid for mid, m in pend.items() if m["lsn"] == lsn]
    check(len(victim) == 1, "(b) no pending message at lsn %d" % lsn)
    victim = victim[0]
    msg_id = pend[victim]["msg_id"]
    with open(path, "r+b") as f:
        f.seek(off + ln // 2)
        byte = f.read(1)[0]
        f.seek(off + ln // 2)
        f.write(bytes([byte ^ 0x08]))
    h.log("(b) flipped a bit in %s at %d, inside the record at offset %d (message %s, msg id %d)"
          % (seg, off + ln // 2, off, victim, msg_id))

    b.start(wait_ready=False)
    rc = b.wait_exit(30, "(b) the daemon kept running on a corrupt log")
    text = b.log_text()
    check(rc == 4, "(b) the daemon on a corrupt log exited %d, expected 4\n%s" % (rc, text))
    line = [l for l in text.splitlines() if "level=error" in l and seg in l]
    check(line and "offset=%d" % off in line[0], "(b) no error line naming %s and offset %d:\n%s"
          % (seg, off, text))
    h.log("(b) daemon refused with exit 4: %s" % line[0])

    rc, out, err = run_cli("wal", "check", wal)
    check(rc == 4 and "segment %d" % int(seg[:20]) in err, "(b) wal check: exit %d\n%s" % (rc, err))

    before = snapshot(wal)
    rc, out, err = run_cli("wal", "salvage", wal)
    check(rc == 4 and "nothing changed" in out and "would keep" in out,
          "(b) salvage without --yes: exit %d, expected 4 and a plan\n%s%s" % (rc, out, err))
    check(snapshot(wal) == before, "(b) salvage without --yes changed the directory")

    rc, out, err = run_cli("wal", "salvage", wal, "--yes")
    h.log("(b) wal salvage --yes: exit %d\n%s%s" % (rc, out, err))
    check(rc == 0, "(b) salvage --yes exited %d, expected 0" % rc)
    check("dropped:        1 record(s), %d bytes" % ln in out,
          "(b) the report should say 1 record and %d bytes were dropped" % ln)
    check("possibly lost:  msg ids %d\n" % msg_id in out,
          "(b) the report should name msg id %d as possibly lost" % msg_id)
    aside = [n for n in os.listdir(wal) if n.startswith(seg + ".damaged-")]
    check(len(aside) == 1, "(b) the damaged segment should be kept aside: %s" % os.listdir(wal))
    with open(os.path.join(wal, aside[0]), "rb") as f:
        damaged = f.read()
    check(hashlib.sha256(damaged).hexdigest() == before[seg],
          "(b) the file kept aside is not the damaged segment as it was")
    check(hw.segments(wal) == segs, "(b) segment names changed: %s -> %s" % (segs, hw.segments(wal)))
    rc, out, err = run_cli("wal", "check", wal)
    check(rc == 0, "(b) wal check after salvage: exit %d\n%s%s" % (rc, out, err))
    after = {m["message_id"]: m for m in hw.dump(wal, timeout=120)}
    want = sorted(i for i in ids if i != victim)
    check(sorted(after) == want, "(b) after salvage the log should hold every message but %s" % victim)
    for mid in want:
        check(after[mid]["msg_id"] == pend[mid]["msg_id"], "(b) %s changed its msg id" % mid)
    rc, out, _ = run_cli("wal", "salvage", wal, "--yes")
    check(rc == 0 and "nothing to do" in out, "(b) a second salvage should have nothing to do")

    b.start()
    # One more message after the salvage: its id must be new.
    later = hold(ctx, b, p, r, "k", 1, 100, 10, "after")
    c.wait_ids(want + later, 20 + 15 + h.late_tolerance())
    c.quiet(1.0)
    got = c.snapshot()
    check(sorted(m.message_id for m in got) == sorted(want + later),
          "(b) expected every surviving message once, got %s" % h.summarize(got))
    bids = [m.bridge_id for m in got]
    check(len(set(bids)) == len(bids), "(b) x-delay-bridge-id reused: %s" % bids)
    new_id = int([m for m in got if m.message_id == later[0]][0].bridge_id.rsplit("-", 1)[1])
    check(new_id > max(m["msg_id"] for m in pend.values()),
          "(b) the message published after the salvage got msg id %d, not above every earlier one"
          % new_id)
    b.stop()
    h.log("(b) flipped bit: daemon exit 4; salvage kept %d of %d messages (lost %s, reported); "
          "bridge delivered them all; new ids fresh" % (len(want), len(ids), victim))


def test(ctx):
    rc, out, _ = run_cli("wal", "--help")
    check(rc == 0 and "salvage" in out, "wal --help should document salvage")
    rc, out, _ = run_cli("wal", "salvage", "--help")
    check(rc == 0 and "Exit codes" in out, "wal salvage --help: exit %d" % rc)
    check(run_cli("wal", "salvage")[0] == 2, "wal salvage without a directory should exit 2")
    rc, _, err = run_cli("wal", "salvage", os.path.join(ctx.tmp, "no-such-dir"), "--yes")
    check(rc == 1, "salvage of a missing directory should exit 1, not %d" % rc)

    ex, qs = ctx.target("target", "direct", ["k"])
    torn_tail(ctx, ex, qs)
    ctx.consumers[-1].close()
    flipped_bit(ctx, ex, qs)


if __name__ == "__main__":
    h.run(test, budget_s=240)
