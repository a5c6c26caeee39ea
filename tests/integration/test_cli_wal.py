#!/usr/bin/python3
"""`delay-bridge wal check` and `wal dump` on a WAL directory, read-only.

A daemon with two routes and 1 MiB segments holds messages with various
delays (big bodies, so the log spans several segments); the short ones are
delivered. Then:
  Before that, hand-made logs written by an independent encoder of the
format (src/wal/walrec.c) check the replay rules: a compaction copy supersedes
its original, a CANCEL removes its ids from the pending set like a DONE
(counted apart), DONE or CANCEL of an unknown id is harmless, a keyed ADD
shows its x-delay-key in `wal dump` (text, JSON "key", null when none) and
`--key K` lists only the messages held with that key; a foreign wal_id, a
segment gap, an LSN break, a stray file name, a bad record followed by a
valid one and a CANCEL whose payload is not an id list are corruption
(exit 4); a newest segment with a half-written header is a torn tail
(exit 0).

  (a) while the daemon runs, `wal check` passes and `wal dump --json` lists
      exactly the pending messages, in due order, with route, exchange,
      routing key, size, message-id and (--headers) the header table; the
      directory is byte-identical before and after (no lock taken, nothing
      written), and a copy without the LOCK file gets none;
  (b) after kill -9, the same;
  (c) one byte flipped in the middle of a record that is not the last:
      `wal check` exits 4 naming the segment and the record's offset;
      the newest segment's last record cut in half: reported as a torn
      tail, exit 0.
"""

import hashlib
import json
import os
import shutil
import struct
import time

import harness as h
import harness_wal as hw
from harness import check


# ---- an independent writer of the on-disk format (src/wal/walrec.c) ----------

crc32c = hw.crc32c


def seg_header(segno, base_lsn, wal_id, salt):
    b = b"DLYBRWAL" + struct.pack("<IIQQQQI", 1, salt, segno, base_lsn, wal_id, 1795400000000, 0)
    return b + struct.pack("<I", crc32c(0, b))


def record(rtype, lsn, payload, salt):
    hdr = struct.pack("<IBBHQ", len(payload), rtype, 0, 0, lsn)
    crc = crc32c(crc32c(crc32c(0, struct.pack("<I", salt)), hdr), payload)
    return hdr + struct.pack("<II", crc, 0) + payload


def add_payload(msg_id, due, route, mid, body=b"body", rk=b"rk", ex=b"ex", key=None):
    """An ADD payload; key (bytes): a keyed ADD (flags bit 1, the key after the routing key)."""
    # AMQP basic properties: flags (headers 0x2000, message-id 0x0080), then the fields.
    props = struct.pack(">H", 0x2000 | 0x0080) + h.encode_table({"k": h.lstr("v")}) + \
        struct.pack("B", len(mid)) + mid
    flags = 0 if key is None else 0x0002
    keyed = b"" if key is None else struct.pack("B", len(key)) + key
    return (struct.pack("<QQQHH", msg_id, due, 1795400000000, flags, 0) +
            struct.pack("B", len(route)) + route + struct.pack("B", len(ex)) + ex +
            struct.pack("B", len(rk)) + rk + keyed + struct.pack("<I", len(props)) + props +
            struct.pack("<I", len(body)) + body)


def done_payload(ids):
    """The DONE payload, and CANCEL's (the same layout): a count, then the message ids."""
    return struct.pack("<I", len(ids)) + b"".join(struct.pack("<Q", i) for i in ids)


cancel_payload = done_payload


def write_log(d, segs):
    """segs: [(segno, base_lsn, wal_id, salt, [(type, lsn, payload)], tail bytes)]."""
    os.makedirs(d)
    for segno, base, wal_id, salt, recs, tail in segs:
        data = seg_header(segno, base, wal_id, salt)
        for rtype, lsn, payload in recs:
            data += record(rtype, lsn, payload, salt)
        with open(os.path.join(d, "%020d.wal" % segno), "wb") as f:
            f.write(data + tail)


def crafted(ctx):
    W = 0x1122334455667788
    a1 = add_payload(1, 3000, b"r1", b"m1")
    a2 = add_payload(2, 2000, b"r2", b"m2")
    a3 = add_payload(3, 2000, b"r1", b"m3")
    a4 = add_payload(4, 2500, b"r1", b"m4", key=b"order-4")  # cancelled (lsn 5)
    a9 = add_payload(9, 2500, b"r2", b"m9", key=b"order-9")  # keyed, pending
    cancel = cancel_payload([4, 77])  # 77: an ADD in a deleted segment
    seg1 = (1, 1, W, 111, [(1, 1, a1), (1, 2, a2), (1, 3, a3), (1, 4, a4), (3, 5, cancel),
                           (2, 6, done_payload([1]))], b"")
    seg2 = (2, 7, W, 222, [(1, 7, a2), (2, 8, done_payload([99])), (1, 9, a9)], b"")

    d = os.path.join(ctx.tmp, "crafted-ok")
    write_log(d, [seg1, seg2])
    _, out, _ = h.bridge_cli("wal", "check", d, expect=0)
    for want in ("records:        9 (add 6, done 2, cancel 1)", "1 of them compaction copies",
                 "  done:         2 records, %d bytes, 2 ids (1 of messages whose ADD is in a deleted "
                 "segment)" % (2 * (hw.RECHDR + 12)),
                 "  cancel:       1 records, %d bytes, 2 ids (1 of messages whose ADD is in a "
                 "deleted segment)" % (hw.RECHDR + len(cancel)),
                 "live messages:  3,", "1 with an x-delay-key", "route r1: 1 messages",
                 "route r2: 2 messages", "lsn:            1 .. 9",
                 "wal_id:         1122334455667788", "tail:           clean"):
        check(want in out, "crafted log: wal check does not say %r:\n%s" % (want, out))
    got = hw.dump(d, "--headers")
    check([(m["message_id"], m["segment"], m["offset"], m["key"]) for m in got] ==
          [("m2", 2, hw.SEGHDR, None),
           ("m3", 1, hw.SEGHDR + 2 * hw.RECHDR + len(a1) + len(a2), None),
           ("m9", 2, hw.SEGHDR + 2 * hw.RECHDR + len(a2) + 12, "order-9")],
          "crafted log: dump should list m2 (its compaction copy in segment 2), m3, then the keyed "
          "m9 with its key, and not the cancelled m4: %s" % got)
    check(got[0]["headers"] == {"k": "v"} and got[0]["due_ms"] == 2000 and
          got[0]["due"] == "1970-01-01T00:00:02.000Z", "crafted log: dump fields %s" % got[0])
    # --key: only what is held with that key; a cancelled message's key lists nothing.
    for key, want_ids in (("order-9", ["m9"]), ("order-4", []), ("nope", [])):
        _, out, _ = h.bridge_cli("wal", "dump", d, "--json", "--key", key, expect=0)
        ids = [m["message_id"] for m in json.loads(out)]
        check(ids == want_ids, "crafted log: dump --key %s lists %s, expected %s" % (key, ids, want_ids))
    _, out, _ = h.bridge_cli("wal", "dump", d, "--key", "order-9", "--route", "r1", expect=0)
    check("# 0 shown, 0 matching, 3 pending in all" in out,
          "crafted log: --key order-9 --route r1 should match nothing:\n%s" % out)
    _, out, _ = h.bridge_cli("wal", "dump", d, expect=0)
    lines = [l for l in out.splitlines() if not l.startswith("#")]
    check(len(lines) == 3 and lines[0].endswith(" 2 -") and lines[2].endswith(" 9 order-9"),
          "crafted log: the text dump should end each line with msg id and key (- when none):\n%s"
          % out)

    def bad(name, segs, needle, rc=4, extra=None):
        dd = os.path.join(ctx.tmp, "crafted-" + name)
        write_log(dd, segs)
        if extra:
            extra(dd)
        code, out, err = h.bridge_cli("wal", "check", dd)
        check(code == rc and needle in out + err, "crafted log %s: wal check exit %d (want %d), "
              "output lacks %r:\n%s%s" % (name, code, rc, needle, out, err))

    bad("wal-id", [seg1, (2, 7, W + 1, 222, [], b"")], "corrupt: segment 2")
    bad("gap", [seg1, (3, 7, W, 222, [], b"")], "not contiguous")
    bad("base-lsn", [seg1, (2, 8, W, 222, [], b"")], "does not continue")
    bad("lsn", [(1, 1, W, 111, [(1, 1, a1), (1, 3, a2)], b"")], "out of sequence")
    bad("name", [seg1], "unexpected file",
        extra=lambda dd: open(os.path.join(dd, "junk.wal"), "wb").close())
    # A bad record followed by a valid one in the newest segment: corruption, not a torn tail.
    broken = bytearray(record(1, 2, a2, 111))
    broken[30] ^= 1
    bad("valid-after", [(1, 1, W, 111, [(1, 1, a1)], bytes(broken) + record(1, 3, a3, 111))],
        "a valid record follows")
    # A CANCEL whose payload is not the id-list layout is a bad record.
    bad("cancel-layout", [(1, 1, W, 111, [(1, 1, a1)],
                           record(3, 2, b"\xde\xad", 111) + record(1, 3, a3, 111))],
        "CANCEL payload layout does not add up")
    # The same in an older segment: corruption too.
    bad("older", [(1, 1, W, 111, [(1, 1, a1)], bytes(broken)), (2, 2, W, 222, [], b"")],
        "not the newest")
    # A half-written record, or a half-written newest segment header: torn tail, exit 0.
    bad("torn-record", [(1, 1, W, 111, [(1, 1, a1)], bytes(broken)[:40])], "TORN TAIL", rc=0)
    bad("torn-header", [seg1, (2, 7, W, 222, [], b"")], "TORN TAIL", rc=0,
        extra=lambda dd: os.truncate(os.path.join(dd, "%020d.wal" % 2), 20))
    h.log("crafted logs: replay rules, corruption and torn tails as specified")


def snapshot(d):
    """name -> (size, sha256, mtime_ns) of every file in d."""
    snap = {}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        st = os.stat(p)
        with open(p, "rb") as f:
            snap[name] = (st.st_size, hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns)
    return snap


def check_listing(got, want, what):
    """got: wal dump --json; want: (message id, route, routing key, size) in due order."""
    ids = [m["message_id"] for m in got]
    check(ids == [w[0] for w in want], "%s: wal dump lists %s, expected the pending %s in due order"
          % (what, ids, [w[0] for w in want]))
    dues = [(m["due_ms"], m["msg_id"]) for m in got]
    check(dues == sorted(dues), "%s: wal dump is not in due order: %s" % (what, dues))
    for m, (mid, route, ex, rk, size) in zip(got, want):
        check((m["route"], m["exchange"], m["routing_key"], m["size"]) == (route, ex, rk, size),
              "%s: %s listed as route=%r exchange=%r rk=%r size=%r, expected %r %r %r %r" % (
                  what, mid, m["route"], m["exchange"], m["routing_key"], m["size"],
                  route, ex, rk, size))
        check(m["headers"].get("colour") == "blue-" + mid,
              "%s: %s: header colour shown as %r" % (what, mid, m["headers"].get("colour")))
        check(isinstance(m["headers"].get("x-delay"), int),
              "%s: %s: x-delay not shown as a number: %r" % (what, mid, m["headers"].get("x-delay")))
        check(m["headers"].get("nested") == {"n": 1},
              "%s: %s: a table header should be shown as its content, got %r" % (
                  what, mid, m["headers"].get("nested")))
        check(m["due"].endswith("Z") and "T" in m["due"], "%s: due %r is not ISO-8601 UTC" % (what, m["due"]))


def check_summary(d, want, what):
    _, out, _ = h.bridge_cli("wal", "check", d, expect=0)
    h.log("%s: wal check:\n%s" % (what, out.rstrip()))
    check("live messages:  %d," % len(want) in out, "%s: wal check does not count %d live messages"
          % (what, len(want)))
    for route in sorted({w[1] for w in want}):
        n = len([w for w in want if w[1] == route])
        check("route %s: %d messages" % (route, n) in out,
              "%s: wal check does not show %d live messages on route %s" % (what, n, route))
    check("tail:           clean" in out, "%s: wal check reports an unclean tail" % what)
    check("next due:" in out and "oldest enqueue:" in out, "%s: no next due / oldest enqueue" % what)
    return out


def read_only_checks(ctx, d, want, what):
    before = snapshot(d)
    check_summary(d, want, what)
    check_listing(hw.dump(d, "--headers"), want, what)
    # Filters.
    first_route = want[0][1]
    _, out, _ = h.bridge_cli("wal", "dump", d, "--json", "--route", first_route, expect=0)
    check([m["message_id"] for m in json.loads(out)] == [w[0] for w in want if w[1] == first_route],
          "%s: --route %s lists the wrong messages" % (what, first_route))
    _, out, _ = h.bridge_cli("wal", "dump", d, "--json", "--limit", 2, expect=0)
    check([m["message_id"] for m in json.loads(out)] == [w[0] for w in want[:2]],
          "%s: --limit 2 does not list the first two due" % what)
    full = hw.dump(d, "--headers")
    cut = full[2]["due_ms"]
    _, out, _ = h.bridge_cli("wal", "dump", d, "--json", "--due-before", cut, expect=0)
    check(len(json.loads(out)) == 2, "%s: --due-before (ms) did not cut at the third message" % what)
    _, out, _ = h.bridge_cli("wal", "dump", d, "--due-before", "2000-01-01T00:00:00Z", expect=0)
    check("# 0 shown" in out, "%s: --due-before 2000 (ISO) should list nothing: %s" % (what, out))
    _, out, _ = h.bridge_cli("wal", "dump", d, "--headers", expect=0)
    check("header colour = blue-" in out, "%s: text dump --headers shows no header line" % what)
    after = snapshot(d)
    check(before == after, "%s: the WAL directory changed while wal check/dump ran:\nbefore %s\nafter  %s"
          % (what, before, after))

    # A copy without the LOCK file: the tools must not create one.
    copy = os.path.join(ctx.tmp, "copy-" + what.replace(" ", "-"))
    shutil.copytree(d, copy)
    if os.path.exists(os.path.join(copy, "LOCK")):
        os.unlink(os.path.join(copy, "LOCK"))
    h.bridge_cli("wal", "check", copy, expect=0)
    check_listing(hw.dump(copy, "--headers"), want, what + " (copy)")
    # The daemon's space reserve (RESERVE) comes along with the copy; the tools add nothing.
    made = sorted(n for n in os.listdir(copy) if n != "RESERVE")
    check(made == hw.segments(copy), "%s: wal check/dump created files: %s" % (what, made))


def test(ctx):
    bin_ = h.bridge_bin()
    # --help and usage errors.
    for sub in (["wal", "check"], ["wal", "dump"], ["publish"]):
        rc, out, _ = h.bridge_cli(*(sub + ["--help"]))
        check(rc == 0 and "Exit codes" in out, "%s --help: exit %d, no exit codes listed" % (sub, rc))
    check(h.bridge_cli("wal")[0] == 2, "wal without a command should exit 2")
    check(h.bridge_cli("wal", "check")[0] == 2, "wal check without a directory should exit 2")
    check(h.bridge_cli("wal", "dump", ctx.tmp, "--limit", "x")[0] == 2, "--limit x should exit 2")
    check(h.bridge_cli("wal", "dump", ctx.tmp, "--due-before", "tomorrow")[0] == 2,
          "--due-before tomorrow should exit 2")
    rc, _, err = h.bridge_cli("wal", "check", os.path.join(ctx.tmp, "no-such-dir"))
    check(rc == 1 and "no-such-dir" in err, "an unreadable directory should exit 1 naming it (%d)" % rc)
    h.log("usage checks pass (%s)" % bin_)
    crafted(ctx)

    ex, qs = ctx.target("target", "direct", ["ka", "kb"])
    c = ctx.consumer(list(qs.values()))
    ra, rb = ctx.route("alpha", ex), ctx.route("beta", ex)
    b = ctx.bridge([ra, rb], wal={"segment_mb": 1})
    wal_dir = b.config["wal"]["dir"]
    p = ctx.publisher()

    big = 300 * 1024
    # (message id, ingress, routing key, delay ms, body size)
    plan = [
        ("a-short1", ra, "ka", 300, 10),
        ("b-short1", rb, "kb", 500, 20),
        ("a-short2", ra, "ka", 700, big),
        ("a-600", ra, "ka", 600000, big),
        ("b-610", rb, "kb", 610000, big),
        ("a-620", ra, "ka", 620000, 30),
        ("b-630", rb, "kb", 630000, big),
        ("a-640", ra, "ka", 640000, big),
        ("b-650", rb, "kb", 650000, 5),
    ]
    for mid, route, rk, ms, size in plan:
        headers = {"x-delay": h.i32(ms), "colour": h.lstr("blue-" + mid), "nested": h.table({"n": h.i32(1)})}
        p.publish(route["ingress_exchange"], rk, (mid.encode() * (size // len(mid) + 1))[:size],
                  headers=headers, message_id=mid)
    want = [(mid, route["name"], route["ingress_exchange"], rk, size)
            for mid, route, rk, ms, size in plan if ms >= 600000]
    c.wait_ids([mid for mid, _, _, ms, _ in plan if ms < 600000], 10 + h.late_tolerance())
    for r in (ra, rb):
        ctx.wait_drained(r["ingress_queue"], 15)
    check(len(hw.segments(wal_dir)) >= 2,
          "expected the 1 MiB segments to roll, have %s" % hw.segments(wal_dir))

    # The DONE records of the delivered ones reach the log at the next commit: wait for them.
    deadline = time.monotonic() + 10
    while True:
        got = hw.dump(wal_dir, "--headers")
        if [m["message_id"] for m in got] == [w[0] for w in want] or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    # (a) daemon running.
    read_only_checks(ctx, wal_dir, want, "running daemon")
    b.check_alive()
    h.log("(a) running daemon: check and dump agree with what is pending; directory untouched")

    # (b) after kill -9.
    b.kill9()
    read_only_checks(ctx, wal_dir, want, "after kill -9")
    h.log("(b) after kill -9: the same")

    # (c1) a flipped byte in the middle of a record that is not the last one.
    segs = hw.segments(wal_dir)
    bad = os.path.join(ctx.tmp, "flipped")
    shutil.copytree(wal_dir, bad)
    victim = hw.dump(bad, "--headers")[0]  # the first due: its record has records after it
    seg_name = "%020d.wal" % victim["segment"]
    recs = dict(r[:2] for r in hw.records(os.path.join(bad, seg_name)))
    off = victim["offset"]
    check(off in recs, "the dump's offset %d is not a record boundary of %s" % (off, seg_name))
    size = os.path.getsize(os.path.join(bad, seg_name))
    check(off + recs[off] < size or seg_name != segs[-1],
          "the first due record is the last of the newest segment; cannot test corruption there")
    with open(os.path.join(bad, seg_name), "r+b") as f:
        f.seek(off + recs[off] // 2)
        byte = f.read(1)
        f.seek(off + recs[off] // 2)
        f.write(bytes([byte[0] ^ 0x40]))
    rc, out, err = h.bridge_cli("wal", "check", bad)
    h.log("(c) flipped byte in %s at offset %d: exit %d: %s" % (seg_name, off + recs[off] // 2, rc,
                                                              err.strip()))
    check(rc == 4, "wal check of a corrupt log exited %d, expected 4\n%s%s" % (rc, out, err))
    want_text = "corrupt: segment %d (%s/%s) offset %d:" % (victim["segment"], bad, seg_name, off)
    check(want_text in err, "wal check does not say %r:\n%s" % (want_text, err))
    rc, _, _ = h.bridge_cli("wal", "dump", bad)
    check(rc == 4, "wal dump of a corrupt log exited %d, expected 4" % rc)

    # (c1') the same in the newest segment, in a record that has valid ones after it.
    newest_recs = hw.records(os.path.join(wal_dir, segs[-1]))
    check(len(newest_recs) >= 2, "the newest segment should hold several records")
    bad2 = os.path.join(ctx.tmp, "flipped-newest")
    shutil.copytree(wal_dir, bad2)
    off, n = newest_recs[0][:2]
    with open(os.path.join(bad2, segs[-1]), "r+b") as f:
        f.seek(off + n // 2)
        byte = f.read(1)
        f.seek(off + n // 2)
        f.write(bytes([byte[0] ^ 0x01]))
    rc, out, err = h.bridge_cli("wal", "check", bad2)
    want_text = "corrupt: segment %d (%s/%s) offset %d:" % (int(segs[-1][:20]), bad2, segs[-1], off)
    check(rc == 4 and want_text in err, "flipped byte in the newest segment: exit %d, expected 4 "
          "and %r:\n%s" % (rc, want_text, err))

    # (c2) the newest segment's last record cut in half: a torn tail, not corruption.
    torn = os.path.join(ctx.tmp, "torn")
    shutil.copytree(wal_dir, torn)
    newest = os.path.join(torn, segs[-1])
    last_off, last_len = hw.records(newest)[-1][:2]
    os.truncate(newest, last_off + last_len // 2)
    rc, out, err = h.bridge_cli("wal", "check", torn)
    h.log("(c) last record cut at %d of %s: exit %d" % (last_off + last_len // 2, segs[-1], rc))
    check(rc == 0, "wal check of a log with a torn tail exited %d, expected 0\n%s%s" % (rc, out, err))
    check("TORN TAIL" in out and ("offset %d" % last_off) in out,
          "wal check does not report the torn tail at offset %d:\n%s" % (last_off, out))
    h.bridge_cli("wal", "dump", torn, expect=0)
    h.log("(c) corruption exits 4 naming segment and offset; a torn tail exits 0")


if __name__ == "__main__":
    h.run(test, budget_s=120)
