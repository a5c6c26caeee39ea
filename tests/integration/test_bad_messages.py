#!/usr/bin/python3
"""Bad messages never crash the bridge; each one has a defined, counted outcome.

Bridge A (default wal.max_message_bytes, 128 MiB) has two routes with
max_delay_ms 10000: "pub" (invalid_delay=publish) and "dl" (dead-letter to
a fanout exchange). Every x-delay shape below goes to both:
  strings (numeric, with spaces, signs, non-numeric, empty, a decimal point,
  an int64 overflow), float32/float64 incl. 1e300 and negative (NaN and
  +-inf: RabbitMQ itself refuses them, closing the publisher's connection;
  each is tried on its own connection, and one the broker takes must be
  handled as invalid),
  decimals, a table, an array, booleans, void, bytes, a timestamp, huge and
  negative integers of every width (2^64-1, 2^63, INT64_MIN, INT64_MAX);
  x-delay-key of the wrong type (int, table, array, boolean) or 256 bytes
  long (255 and empty are fine; a byte array is taken as a string, and one of
  300 bytes is too long);
and to "pub" only: a ~100 KiB header table, a table 20 levels deep, an empty
body and a 64 MiB body (15 MiB on RabbitMQ 4.x, whose max_message_size is
16 MiB by default). Outcomes:
  valid delay      -> the target, not before its due time;
  0 / negative     -> the target at once;
  invalid / above max_delay_ms / bad key
                   -> "pub": the target at once, no x-delay-error;
                      "dl": the dead-letter exchange with x-delay-error
                      ("invalid x-delay", "x-delay above max_delay_ms",
                      "invalid x-delay-key");
  big headers, deep tables, empty and 64 MiB (4.x: 15 MiB) bodies -> delivered intact.
/metrics: invalid_delay_total, invalid_key_total, dead_lettered_total per
route equal the counts sent; rejected_total 0; received_total the number sent.

Bridge B (wal.max_message_bytes = 1 MiB): a body of exactly 1 MiB is
delivered; 1 MiB + 1 and 5 MiB are rejected (basic.reject without requeue:
on an owned broker a policy gives the ingress queue a dead-letter exchange,
and both arrive there), counted in rejected_total; a message after them is
still delivered. Both bridges are alive at the end and stop with exit 0.
"""

import hashlib
import json
import re

import harness as h
from harness import check

MAX_DELAY_MS = 10000

# id -> (x-delay, outcome): ("ok", ms) delayed; ("now",) at once;
# ("invalid",) not a delay; ("toobig",) above max_delay_ms
SHAPES = {
    "s-num": (h.lstr("1500"), ("ok", 1500)),
    "s-spaces": (h.lstr("  1200  "), ("ok", 1200)),
    "s-plus": (h.lstr("+900"), ("ok", 900)),
    "s-neg": (h.lstr("-20"), ("now",)),
    "s-zero": (h.lstr("0"), ("now",)),
    "s-inner-space": (h.lstr("12 00"), ("invalid",)),
    "s-abc": (h.lstr("abc"), ("invalid",)),
    "s-empty": (h.lstr(""), ("invalid",)),
    "s-point": (h.lstr("1500.5"), ("ok", 1500)),  # php-amqplib's float (issue 19)
    "s-exp": (h.lstr(" 1.2e3 "), ("ok", 1200)),
    "s-inf": (h.lstr("INF"), ("invalid",)),
    "s-hex": (h.lstr("0x10"), ("invalid",)),
    "s-tab": (h.lstr("\t100"), ("invalid",)),
    "s-overflow": (h.lstr("99999999999999999999999"), ("invalid",)),
    "s-int64max": (h.lstr("9223372036854775807"), ("toobig",)),
    "s-toobig": (h.lstr(str(MAX_DELAY_MS + 1)), ("toobig",)),
    "s-utf8": (h.lstr("\u0661\u0662"), ("invalid",)),  # Arabic-Indic digits
    "f64": (h.f64(1300.9), ("ok", 1300)),
    "f32": (h.f32(1100.5), ("ok", 1100)),
    "f64-neg": (h.f64(-1.5), ("now",)),
    "f64-1e300": (h.f64(1e300), ("invalid",)),
    "f64-toobig": (h.f64(MAX_DELAY_MS * 2.0), ("toobig",)),
    "dec": (h.dec(2, 140050), ("ok", 1400)),
    "dec-neg": (h.dec(1, -50), ("now",)),
    "dec-scale255": (h.dec(255, 2 ** 31 - 1), ("now",)),
    "dec-toobig": (h.dec(0, 2 ** 31 - 1), ("toobig",)),
    "table": (h.table({"ms": h.i32(1000)}), ("invalid",)),
    "array": (h.array([h.i32(1000)]), ("invalid",)),
    "bool-true": (h.boolean(True), ("invalid",)),
    "bool-false": (h.boolean(False), ("invalid",)),
    "void": (h.void(), ("invalid",)),
    "bytes": (h.raw_bytes(b"1000"), ("invalid",)),
    "timestamp": (h.tstamp(1000), ("invalid",)),
    "i8-neg": (h.i8(-1), ("now",)),
    "u8": (h.u8(255), ("ok", 255)),
    "i16-neg": (h.i16(-32768), ("now",)),
    "i32-neg": (h.i32(-2 ** 31), ("now",)),
    "u32-max": (h.u32(2 ** 32 - 1), ("toobig",)),
    "i64-min": (h.i64(-2 ** 63), ("now",)),
    "i64-max": (h.i64(2 ** 63 - 1), ("toobig",)),
    # py-amqp's 'L' is signed; rabbitmq-c reads it unsigned: read as signed again
    "u64-max": (h.u64(2 ** 64 - 1), ("now",)),
    "u64-2^63": (h.u64(2 ** 63), ("now",)),
    "u64-ok": (h.u64(700), ("ok", 700)),
}

# Floats Erlang cannot hold: RabbitMQ 3.x fails to parse the header table and closes
# the publisher's connection (541 INTERNAL_ERROR), so the bridge never sees them.
# Each is tried on a connection of its own; one the broker does take must come out
# like any other invalid x-delay (xdelay.c: NaN and inf are invalid).
NONFINITE = {
    "f64-nan": h.f64(float("nan")),
    "f32-nan": h.f32(float("nan")),
    "f64-inf": h.f64(float("inf")),
    "f64-ninf": h.f64(float("-inf")),
    "f32-inf": h.f32(float("inf")),
}

# x-delay-key shapes (with a valid x-delay of 600 ms): id -> (key, bad?)
KEYS = {
    "k-int": (h.i32(5), True),
    "k-bytes": (h.raw_bytes(b"key"), False),  # a byte array counts as a string (broker_msg.h)
    "k-bytes-300": (h.raw_bytes(b"k" * 300), True),
    "k-table": (h.table({"k": h.lstr("v")}), True),
    "k-array": (h.array([h.lstr("k")]), True),
    "k-bool": (h.boolean(True), True),
    "k-256": (h.lstr("k" * 256), True),
    "k-255": (h.lstr("k" * 255), False),
    "k-empty": (h.lstr(""), False),
}

ERRORS = {"invalid": "invalid x-delay", "toobig": "x-delay above max_delay_ms",
          "key": "invalid x-delay-key"}


free_port = h.free_port  # one copy, in harness.py


def big_table():
    """About 100 KiB of headers: 100 strings of 1000 bytes, numbers, nested tables."""
    d = {}
    for i in range(100):
        d["big-%03d" % i] = h.lstr(chr(ord("a") + i % 26) * 1000)
        d["num-%03d" % i] = h.i64(i * 1000003)
    return d


def deep_table(levels):
    t = {"leaf": h.lstr("bottom"), "n": h.i32(levels)}
    for i in range(levels - 1):
        t = {"level": h.i32(levels - 1 - i), "next": h.table(t), "arr": h.array([h.i8(i)])}
    return h.table(t)


def bridge_a(ctx):
    target, tq = ctx.target("target", "direct", ["rk"])
    dlx, dq = ctx.target("dlx", "fanout", [""])
    c = ctx.consumer([tq["rk"], dq[""]])
    port = free_port()
    routes = [
        ctx.route("pub", target, max_delay_ms=MAX_DELAY_MS, invalid_delay="publish"),
        ctx.route("dl", target, max_delay_ms=MAX_DELAY_MS, invalid_delay="dead-letter",
                  dead_letter_exchange=dlx),
    ]
    b = ctx.bridge(routes, name="a", http={"listen": "127.0.0.1:%d" % port})
    ins = {"pub": routes[0]["ingress_exchange"], "dl": routes[1]["ingress_exchange"]}
    p = ctx.publisher()

    sent = {}    # message id -> (publish time, expected outcome, expected error or None)
    bodies = {}  # message id -> sha256 of a body worth checking
    hdrs = {}    # message id -> headers to find intact on delivery
    for route in ("pub", "dl"):
        for sid, (xd, out) in SHAPES.items():
            mid = "%s-%s" % (route, sid)
            t = p.publish(ins[route], "rk", mid.encode(), headers={"x-delay": xd}, message_id=mid)
            bad = out[0] in ("invalid", "toobig")
            sent[mid] = (t, out, ERRORS[out[0]] if bad and route == "dl" else None)
        for kid, (key, bad) in KEYS.items():
            mid = "%s-%s" % (route, kid)
            t = p.publish(ins[route], "rk", mid.encode(),
                          headers={"x-delay": h.i32(600), "x-delay-key": key}, message_id=mid)
            out = ("now",) if bad else ("ok", 600)
            sent[mid] = (t, out, ERRORS["key"] if bad and route == "dl" else None)

    refused = []
    n_nonfinite = 0
    for sid, xd in NONFINITE.items():
        for route in ("pub", "dl"):
            mid = "%s-%s" % (route, sid)
            q = h.Publisher(retry_s=10)
            try:
                t = q.publish(ins[route], "rk", mid.encode(), headers={"x-delay": xd}, message_id=mid)
            except h.AMQPError as e:
                refused.append("%s (%s)" % (mid, e.__class__.__name__))
                continue
            finally:
                q.close()
            sent[mid] = (t, ("invalid",), ERRORS["invalid"] if route == "dl" else None)
            n_nonfinite += 1
    h.log("non-finite floats refused by the broker itself: %s" % (", ".join(refused) or "none"))

    big = big_table()
    size = len(h.encode_table(big))
    check(90000 <= size <= 110000, "the big header table is %d bytes, meant ~100 KiB" % size)
    hdrs["pub-big-headers"] = big
    sent["pub-big-headers"] = (p.publish(ins["pub"], "rk", b"big headers",
                                         headers=dict(big, **{"x-delay": h.i32(400)}),
                                         message_id="pub-big-headers"), ("ok", 400), None)
    deep = {"deep": deep_table(20)}
    hdrs["pub-deep-headers"] = deep
    sent["pub-deep-headers"] = (p.publish(ins["pub"], "rk", b"deep",
                                          headers=dict(deep, **{"x-delay": h.i32(400)}),
                                          message_id="pub-deep-headers"), ("ok", 400), None)
    bodies["pub-empty-body"] = hashlib.sha256(b"").hexdigest()
    sent["pub-empty-body"] = (p.publish(ins["pub"], "rk", b"", headers={"x-delay": h.i32(300)},
                                        message_id="pub-empty-body"), ("ok", 300), None)
    # 64 MiB; RabbitMQ 4.x refuses messages over its max_message_size, 16 MiB by
    # default (3.x: 128 MiB), so there 15 MiB.
    mib = 64 if h.broker_version().startswith("3.") else 15
    huge = bytes(range(256)) * (mib * 1024 * 1024 // 256)
    bodies["pub-huge"] = hashlib.sha256(huge).hexdigest()
    sent["pub-huge"] = (p.publish(ins["pub"], "rk", huge, headers={"x-delay": h.i32(500)},
                                   message_id="pub-huge"), ("ok", 500), None)
    del huge
    h.log("bridge A: %d messages published" % len(sent))

    msgs = c.wait_count(len(sent), 60)
    extra = c.quiet(1.0)[len(sent):]
    check(not extra, "unexpected extra deliveries: %s" % h.summarize(extra))
    by_id = {}
    for m in msgs:
        check(m.message_id not in by_id, "%s delivered twice" % m.message_id)
        by_id[m.message_id] = m
    missing = sorted(set(sent) - set(by_id))
    check(not missing, "never delivered: %s" % missing)

    problems = []
    for mid, (t, out, err) in sorted(sent.items()):
        m = by_id[mid]
        got_err = h.header(m.props, "x-delay-error")
        took = m.t - t
        if err:
            if m.queue != dq[""]:
                problems.append("%s: expected the dead-letter exchange, went to %s" % (mid, m.queue))
            if got_err is None or got_err != h.lstr(err):
                problems.append("%s: x-delay-error %r, expected %r" % (mid, got_err, err))
        else:
            if m.queue != tq["rk"]:
                problems.append("%s: expected the target, went to %s" % (mid, m.queue))
            if got_err is not None:
                problems.append("%s: unexpected x-delay-error %r" % (mid, got_err))
        if out[0] == "ok" and took < out[1] / 1000.0 - h.early_tolerance():
            problems.append("%s: arrived EARLY after %.3fs, due after %.3fs" % (mid, took, out[1] / 1000.0))
        if out[0] != "ok" and mid != "pub-huge" and took > 10.0:
            problems.append("%s: should go out at once, took %.3fs" % (mid, took))
        if mid in bodies and hashlib.sha256(m.body).hexdigest() != bodies[mid]:
            problems.append("%s: body changed (%d bytes arrived)" % (mid, len(m.body)))
        for k, v in hdrs.get(mid, {}).items():
            if h.header(m.props, k) != v:
                problems.append("%s: header %s did not arrive intact" % (mid, k))
        if not m.bridge_id:
            problems.append("%s: no x-delay-bridge-id" % mid)
    if problems:
        h.fail("%d problem(s):\n  " % len(problems) + "\n  ".join(problems))
    h.log("bridge A: every shape delivered or dead-lettered as specified (%d messages)" % len(sent))

    n_invalid = sum(1 for _, o in SHAPES.values() if o[0] in ("invalid", "toobig")) + n_nonfinite // 2
    n_badkey = sum(1 for _, bad in KEYS.values() if bad)
    n_pub = sum(1 for mid in sent if mid.startswith("pub-"))
    n_dl = sum(1 for mid in sent if mid.startswith("dl-"))
    want = {
        ("invalid_delay_total", "pub"): n_invalid, ("invalid_delay_total", "dl"): n_invalid,
        ("invalid_key_total", "pub"): n_badkey, ("invalid_key_total", "dl"): n_badkey,
        ("dead_lettered_total", "pub"): 0, ("dead_lettered_total", "dl"): n_invalid + n_badkey,
        ("rejected_total", "pub"): 0, ("rejected_total", "dl"): 0,
        ("received_total", "pub"): n_pub, ("received_total", "dl"): n_dl,
        ("confirmed_total", "pub"): n_pub, ("confirmed_total", "dl"): n_dl,
    }
    for (name, route), v in sorted(want.items()):
        h.wait_metric(port, "delay_bridge_" + name, route, v, 10, poll=0.2)
    h.log("bridge A /metrics: %s" % ", ".join("%s{%s}=%d" % (n, r, v) for (n, r), v in sorted(want.items())))
    b.check_alive()
    b.stop()


def bridge_b(ctx):
    target, tq = ctx.target("small-target", "direct", ["rk"])
    rejx, rq = ctx.target("rejected", "fanout", [""])
    port = free_port()
    route = ctx.route("small", target)
    policy = None
    if h.broker_dir():
        # The bridge declares its ingress queue itself; a policy adds a dead-letter
        # exchange to it, so a rejected message can be seen to arrive there.
        policy = ctx.n("rejects")
        h.rabbitmqctl("set_policy", policy, "^%s$" % re.escape(route["ingress_queue"]),
                      json.dumps({"dead-letter-exchange": rejx}), "--apply-to", "queues")
    try:
        c = ctx.consumer([tq["rk"], rq[""]])
        b = ctx.bridge([route], name="b", http={"listen": "127.0.0.1:%d" % port},
                       wal={"max_message_bytes": 1024 * 1024})
        p = ctx.publisher()
        limit = 1024 * 1024
        plan = [("at-limit", limit, True), ("over-by-1", limit + 1, False),
                ("five-MiB", 5 * limit, False), ("after", 10, True)]
        for mid, size, ok in plan:
            p.publish(route["ingress_exchange"], "rk", b"x" * size,
                      headers={"x-delay": h.i32(200)}, message_id=mid)
        want_target = sorted(mid for mid, _, ok in plan if ok)
        want_rejected = sorted(mid for mid, _, ok in plan if not ok)
        n = len(want_target) + (len(want_rejected) if policy else 0)
        msgs = c.wait_count(n, 30)
        extra = c.quiet(1.0)[n:]
        check(not extra, "unexpected deliveries: %s" % h.summarize(extra))
        got_t = sorted(m.message_id for m in msgs if m.queue == tq["rk"])
        check(got_t == want_target, "delivered to the target: %s, expected %s" % (got_t, want_target))
        for m in msgs:
            if m.message_id == "at-limit":
                check(len(m.body) == limit, "the 1 MiB body arrived with %d bytes" % len(m.body))
        if policy:
            got_r = sorted(m.message_id for m in msgs if m.queue == rq[""])
            check(got_r == want_rejected, "rejected messages dead-lettered by the broker: %s, "
                  "expected %s" % (got_r, want_rejected))
        ctx.wait_drained(route["ingress_queue"], 10, "the rejected messages to leave the queue")
        h.wait_metric(port, "delay_bridge_rejected_total", "small", len(want_rejected), 10, poll=0.2)
        h.wait_metric(port, "delay_bridge_received_total", "small", len(want_target), 10, poll=0.2)
        check("message larger than wal.max_message_bytes rejected" in b.log_text(),
              "no log line for the rejected messages")
        b.check_alive()
        b.stop()
        h.log("bridge B: %s rejected (counted%s), %s delivered" % (
            want_rejected, ", dead-lettered by the broker" if policy else "", want_target))
    finally:
        if policy:
            h.rabbitmqctl("clear_policy", policy)


def test(ctx):
    bridge_a(ctx)
    bridge_b(ctx)


if __name__ == "__main__":
    h.run(test, budget_s=240)
