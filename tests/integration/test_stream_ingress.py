#!/usr/bin/python3
"""A route whose ingress queue is a RabbitMQ stream (queue_type "stream")
behaves as a classic ingress does, and keeps its place in the stream in
<wal.dir>/ingress-<route>.offset:

  - the bridge declares the ingress as a durable stream with the route's
    retention (stream_max_age "2D" -> x-max-age, stream_max_mb 64 ->
    x-max-length-bytes 67108864), seen with rabbitmqctl list_queues;
  - 300 messages with x-delay spread over 0..3 s all arrive, each exactly
    once, none before its due time; the place file exists and is 32 bytes;
  - after SIGTERM (exit 0) the place file says 300 (offsets of a new stream
    start at 0); 100 messages published while the bridge is down all arrive
    after it starts again, and none of the first 300 arrives a second time
    (the place, not "first", is where it read from); /stats
    routes[0].stream_offset is then 400;
  - a 10 KB body over wal.max_message_bytes (4096) cannot be rejected on a
    stream: it is counted in routes[0].rejected, logged, skipped, never
    delivered, and the messages after it arrive (stream_offset 411);
  - routes added by SIGHUP beside it: a classic one consumes and delivers
    at once (the place files' table has room for routes added at run time;
    under ASan an overrun of it would stop the daemon), a second stream
    route waits for a restart (pending_changes 1); the stream route's place
    moves on (stream_offset 416);
  - a corrupt place file (a flipped byte: bad CRC; 7 bytes: bad size) stops
    the start (exit code not 0, before "ready") with a log line naming the
    file and saying to delete it, and is left as it was; once deleted, the
    bridge starts, reads the stream from its first message again (its
    duplicates are expected and only counted) and new messages arrive.

The configuration errors of stream routes (share_keys, stream_max_age on a
classic route, ...) are cases of test_bad_config.py.

Named cases (harness.Cases: each runs and is reported even when one before
it failed): is_a_stream, running (1), clean_restart (2), oversized_skipped
(3), route_added_beside (3b), corrupt_place_file, place_file_deleted (4),
clean_stop."""

import os
import random
import signal
import struct
import time
import types

import harness as h
from harness import check

N1 = 300          # published while the bridge runs
N2 = 100          # published while it is stopped
MAX_DELAY_MS = 3000
MAX_BYTES = 4096  # wal.max_message_bytes
PLACE_SIZE = 32


def read_place(path):
    """The place file: (size, next, upto), next/upto None unless it is a
    well-formed 32-byte record (magic DBSTROFF, version 1, ingress_off.h)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != PLACE_SIZE or data[:8] != b"DBSTROFF" or struct.unpack_from("<I", data, 8)[0] != 1:
        return len(data), None, None
    nxt, upto = struct.unpack_from("<QQ", data, 12)
    return len(data), nxt, upto


def wait_stat(port, key, want, timeout, what):
    """Wait until /stats routes[0][key] == want."""
    deadline = time.monotonic() + timeout
    while True:
        got = h.stats(port)["routes"][0].get(key, "<absent>")
        if got == want:
            return got
        if time.monotonic() >= deadline:
            h.fail("%s: /stats routes[0].%s is %r, expected %r" % (what, key, got, want))
        time.sleep(0.1)


def publish_batch(p, ingress, prefix, n, rng, max_delay_ms):
    sent = {}
    for i in range(n):
        ms = rng.randint(0, max_delay_ms)
        mid = "%s%03d" % (prefix, i)
        sent[mid] = (p.publish(ingress, "rk", mid.encode(), headers={"x-delay": h.i32(ms)},
                               message_id=mid, delivery_mode=2), ms)
    return sent


def exactly_once(c, sent, what):
    """Every message of sent arrived, once, none early; returns the tally of
    everything the consumer got so far."""
    t = h.tally(sent.keys(), [m for m in c.snapshot() if m.message_id in sent])
    h.log("%s: %s" % (what, h.tally_line(t)))
    check(not t["lost"], "%s: %d message(s) never arrived: %s" % (what, len(t["lost"]), t["lost"][:10]))
    dups = sorted(k for k, v in t["per_id"].items() if len(v) > 1)
    check(not dups, "%s: %d message(s) arrived more than once: %s" % (what, len(dups), dups[:10]))
    h.check_none_early(sent, t, what)
    return t


def test(ctx):
    rng = random.Random(20261126)
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    route = ctx.route("strm", ex, queue_type="stream", stream_max_age="2D", stream_max_mb=64)
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port},
                   wal={"max_message_bytes": MAX_BYTES})
    ingress, queue = route["ingress_exchange"], route["ingress_queue"]
    place = os.path.join(b.config["wal"]["dir"], "ingress-%s.offset" % route["name"])
    p = ctx.publisher()

    # What a case leaves for the later ones (each runs whatever happened before it).
    st_ = types.SimpleNamespace(total=N1 + N2, sent1={})

    # The ingress really is a stream, with the route's retention.
    def case_is_a_stream():
        if h.broker_dir():
            rows = [l.split("\t") for l in h.rabbitmqctl("list_queues", "name", "type", "durable",
                                                         "arguments").splitlines()]
            row = [r for r in rows if r and r[0] == queue]
            check(len(row) == 1, "rabbitmqctl list_queues does not list %s: %s" % (queue, rows[:5]))
            h.log("ingress queue: %s" % " | ".join(row[0]))
            name, qtype, durable, args = (row[0] + ["", "", ""])[:4]
            check(qtype == "stream", "the ingress queue %s is of type %r, not stream" % (queue, qtype))
            check(durable == "true", "the ingress stream %s is not durable (%r)" % (queue, durable))
            check('{"x-max-age","2D"}' in args, "x-max-age is not 2D: %s" % args)
            check('{"x-max-length-bytes",67108864}' in args, "x-max-length-bytes is not 64 MiB: %s" % args)
        else:
            h.log("not the suite's own broker: the queue type is not checked with rabbitmqctl")
        st = h.stats(port)["routes"][0]
        check("stream_offset" in st, "/stats routes[0] has no stream_offset: %s" % sorted(st))

    # 1. 300 messages, delays over 0..3 s, with the bridge running.
    def case_running():
        t0 = time.monotonic()
        st_.sent1 = sent1 = publish_batch(p, ingress, "a", N1, rng, MAX_DELAY_MS)
        h.log("published %d messages in %.1fs (confirmed)" % (N1, time.monotonic() - t0))
        c.wait_ids(sent1.keys(), MAX_DELAY_MS / 1000.0 + h.late_tolerance() + 20)
        c.quiet(1.0)
        exactly_once(c, sent1, "first %d, bridge running" % N1)
        check(os.path.isfile(place), "no place file %s" % place)
        size, nxt, upto = read_place(place)
        h.log("place file %s: %d bytes, next=%s upto=%s" % (place, size, nxt, upto))
        check(size == PLACE_SIZE, "the place file is %d bytes, not %d" % (size, PLACE_SIZE))
        wait_stat(port, "stream_offset", N1, 5, "after %d messages" % N1)

    # 2. Clean stop; 100 published while down; start again: the place holds.
    def case_clean_restart():
        b.stop(expect=0)
        size, nxt, upto = read_place(place)
        h.log("after SIGTERM: place file %d bytes, next=%s upto=%s" % (size, nxt, upto))
        check(size == PLACE_SIZE and nxt == N1 and upto == N1,
              "after a clean stop the place file should say next=upto=%d: %d bytes, next=%s upto=%s"
              % (N1, size, nxt, upto))
        sent2 = publish_batch(p, ingress, "b", N2, rng, MAX_DELAY_MS)
        h.log("published %d messages while the bridge was down" % N2)
        b.start()
        b.wait_log("reading the stream ingress", 10, "the place it reads the stream from")
        line = [l for l in b.log_text().splitlines() if "reading the stream ingress" in l][0]
        h.log("bridge: %s" % line)
        check("from=%d" % N1 in line, "after a clean stop the bridge should read from %d: %s" % (N1, line))
        c.wait_ids(sent2.keys(), MAX_DELAY_MS / 1000.0 + h.late_tolerance() + 20)
        c.quiet(1.5)
        exactly_once(c, sent2, "%d published while down" % N2)
        again = exactly_once(c, st_.sent1, "first %d, after the clean restart" % N1)
        check(again["delivered"] == N1, "the first %d were delivered %d times in all" % (N1, again["delivered"]))
        wait_stat(port, "stream_offset", N1 + N2, 5, "after the clean restart")
        h.log("stream_offset %d after the clean restart: nothing read twice" % (N1 + N2))

    # 3. A body over wal.max_message_bytes between normal ones: skipped, counted.
    def case_oversized_skipped():
        rejected0 = h.stats(port)["routes"][0]["rejected"]
        check(rejected0 == 0, "rejected is %d before any oversized message" % rejected0)
        sent3 = publish_batch(p, ingress, "c", 5, rng, 500)
        p.publish(ingress, "rk", b"x" * 10240, headers={"x-delay": h.i32(0)}, message_id="big",
                  delivery_mode=2)
        sent3.update(publish_batch(p, ingress, "d", 5, rng, 500))
        c.wait_ids(sent3.keys(), 0.5 + h.late_tolerance() + 20)
        c.quiet(1.0)
        exactly_once(c, sent3, "the 10 around the oversized one")
        check("big" not in {m.message_id for m in c.snapshot()}, "the oversized message was delivered")
        wait_stat(port, "rejected", 1, 5, "the oversized message")
        wait_stat(port, "stream_offset", N1 + N2 + 11, 5, "after the oversized message")
        check("larger than wal.max_message_bytes skipped" in b.log_text(),
              "no log line says the oversized message was skipped")
        line = [l for l in b.log_text().splitlines() if "larger than wal.max_message_bytes" in l][0]
        h.log("bridge: %s" % line)
        check("offset=%d" % (N1 + N2 + 5) in line, "the skip's log line should name offset %d: %s"
              % (N1 + N2 + 5, line))
        st_.total = N1 + N2 + 11

    # 3b. Routes added at run time beside the stream route: a classic one consumes at once
    # (the place files' table has room for it), a second stream waits for a restart.
    def case_route_added_beside():
        try:
            ex2, qs2 = ctx.target("added", "direct", ["rk"])
            c2 = ctx.consumer([qs2["rk"]])
            added = ctx.route("added", ex2)
            strm2 = ctx.route("strm2", ex2, queue_type="stream", stream_max_age="1D")
            b.config["routes"] += [added, strm2]
            b.rewrite_config()
            before = h.stats(port)["reload"]["count"]
            b.proc.send_signal(signal.SIGHUP)
            h.wait_for("the reload", lambda: h.stats(port)["reload"]["count"] == before + 1, 10)
            r = h.stats(port)["reload"]
            check(r["pending_changes"] == 1 and r["error"] is None, "added beside a stream: %r" % r)
            b.wait_log('msg="route added" route=added', 5)
            b.wait_log("key=routes[strm2] change=added", 5)
            h.wait_for("the added route's ingress exchange", lambda: ctx.exchange_exists(
                added["ingress_exchange"]), 10)
            sent4 = {}
            for i in range(5):
                mid = "e%d" % i
                sent4[mid] = p.publish(added["ingress_exchange"], "rk", mid.encode(), message_id=mid,
                                       delivery_mode=2, headers={"x-delay": h.i32(300)})
            sent5 = publish_batch(p, ingress, "f", 5, rng, 300)
            st_.total += 5
            c2.wait_ids(sent4.keys(), 0.3 + h.late_tolerance() + 10)
            c.wait_ids(sent5.keys(), 0.3 + h.late_tolerance() + 10)
            c.quiet(1.0)
            exactly_once(c, sent5, "the stream route's, after a route was added")
            wait_stat(port, "stream_offset", st_.total, 5, "after a route was added beside it")
        finally:  # the stream route alone again, for the restarts below
            b.config["routes"] = [route]
            b.rewrite_config()

    # 4. A corrupt place file stops the start; deleting it reads from the first.
    def case_corrupt_place_file():
        b.stop(expect=0)
        size, nxt, upto = read_place(place)
        check(nxt == st_.total and upto == st_.total, "after the second clean stop the place file says next=%s "
              "upto=%s, expected %d" % (nxt, upto, st_.total))
        with open(place, "rb") as f:
            good = f.read()
        for what, bad in (("a flipped byte (bad CRC)", good[:16] + bytes([good[16] ^ 0x40]) + good[17:]),
                          ("7 bytes of garbage (bad size)", b"garbage")):
            with open(place, "wb") as f:
                f.write(bad)
            b.start(wait_ready=False)
            rc = b.wait_exit(30, "the bridge still runs 30 s after starting on a place file with %s" % what)
            text = b.log_text()
            lines = [l for l in text.splitlines() if place in l]
            h.log("place file with %s: exit %d; %s" % (what, rc, lines[0] if lines else "(no line names it)"))
            check(rc != 0, "the bridge exited 0 on a place file with %s" % what)
            check('msg="ready"' not in text, "the bridge got ready on a place file with %s" % what)
            check(lines, "no log line names the corrupt place file %s" % place)
            check("delete" in lines[0] and "first" in lines[0],
                  "the log line does not say to delete the file to read from the first message: %s"
                  % lines[0])
            with open(place, "rb") as f:
                check(f.read() == bad, "the bridge changed the corrupt place file it refused")

    # ... and deleting it reads from the first
    def case_place_file_deleted():
        os.remove(place)
        before = len(c.snapshot())
        b.start()
        b.wait_log("reading the stream ingress from its first message", 10)
        sent4 = publish_batch(p, ingress, "e", 3, rng, 500)
        c.wait_ids(sent4.keys(), 0.5 + h.late_tolerance() + 20)
        wait_stat(port, "stream_offset", st_.total + 3, 10, "after reading the stream again from the first")
        c.quiet(MAX_DELAY_MS / 1000.0 + 1.0)
        exactly_once(c, sent4, "3 published after the place file was deleted")
        reread = len(c.snapshot()) - before - len(sent4)
        h.log("place file deleted: the bridge started, read the stream from the first again "
              "(%d earlier messages delivered again, expected) and the new ones arrived" % reread)

    cases = h.Cases()
    cases.run("is_a_stream", case_is_a_stream)
    cases.run("running", case_running)
    cases.run("clean_restart", case_clean_restart)
    cases.run("oversized_skipped", case_oversized_skipped)
    cases.run("route_added_beside", case_route_added_beside)
    cases.run("corrupt_place_file", case_corrupt_place_file)
    cases.run("place_file_deleted", case_place_file_deleted)
    cases.run("clean_stop", lambda: b.stop(expect=0))
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=150)
