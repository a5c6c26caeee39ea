#!/usr/bin/python3
"""x-delay of every AMQP type the bridge accepts is honoured (signed and
unsigned 8/16/32/64-bit integers, float32, float64 and decimal truncated,
a string holding an integer); an invalid x-delay ("abc", a boolean, a byte
array) or one above max_delay_ms is published at once under the default
policy ("publish") and goes to the dead-letter exchange with an
x-delay-error header under "dead-letter"."""

import harness as h
from harness import check

MAX_DELAY_MS = 10000

# message id -> (x-delay as sent, delay in ms the bridge must apply)
VALID = {
    "i8": (h.i8(120), 120),
    "u8": (h.u8(200), 200),
    "i16": (h.i16(1500), 1500),
    "u16": (h.u16(1500), 1500),
    "i32": (h.i32(1500), 1500),
    "u32": (h.u32(1500), 1500),
    "i64": (h.i64(1500), 1500),
    "u64": (h.u64(1500), 1500),
    "f32": (h.f32(1500.75), 1500),
    "f64": (h.f64(1500.9), 1500),
    "decimal": (h.dec(1, 15009), 1500),     # 1500.9
    "decimal3": (h.dec(3, 1500000), 1500),  # 1500.000
    "string": (h.lstr("1500"), 1500),
}

INVALID = {
    "str-abc": h.lstr("abc"),
    "bool": h.boolean(True),
    "bytes": h.raw_bytes(b"1500"),
}
TOO_BIG = {
    "too-big-i32": h.i32(MAX_DELAY_MS + 10000),
    "too-big-str": h.lstr(str(MAX_DELAY_MS * 1000)),
}


def test(ctx):
    target, tq = ctx.target("target", "direct", ["rk"])
    dlx, dq = ctx.target("dlx", "fanout", [""])
    c = ctx.consumer([tq["rk"], dq[""]])
    routes = [
        ctx.route("pub", target, max_delay_ms=MAX_DELAY_MS, invalid_delay="publish"),
        ctx.route("dl", target, max_delay_ms=MAX_DELAY_MS, invalid_delay="dead-letter",
                  dead_letter_exchange=dlx),
    ]
    b = ctx.bridge(routes)
    pub_in, dl_in = routes[0]["ingress_exchange"], routes[1]["ingress_exchange"]
    p = ctx.publisher()

    sent = {}
    for mid, (xd, ms) in VALID.items():
        sent[mid] = p.publish(pub_in, "rk", mid.encode(), headers={"x-delay": xd}, message_id=mid)
    for mid, xd in list(INVALID.items()) + list(TOO_BIG.items()):
        sent["pub-" + mid] = p.publish(pub_in, "rk", mid.encode(), headers={"x-delay": xd},
                                       message_id="pub-" + mid)
        sent["dl-" + mid] = p.publish(dl_in, "rk", mid.encode(), headers={"x-delay": xd},
                                      message_id="dl-" + mid)
    sent["dl-valid"] = p.publish(dl_in, "rk", b"valid", headers={"x-delay": h.i32(1000)},
                                 message_id="dl-valid")

    n = len(sent)
    msgs = c.wait_count(n, 1.5 + h.late_tolerance() + 5)
    by_id = {}
    for m in msgs:
        check(m.message_id not in by_id, "%s delivered twice" % m.message_id)
        by_id[m.message_id] = m
    missing = sorted(set(sent) - set(by_id))
    check(not missing, "never arrived: %s; arrived instead: %s" % (missing, sorted(set(by_id) - set(sent))))
    failures = []

    def expect(cond, msg):
        if not cond:
            failures.append(msg)

    for mid, (xd, ms) in VALID.items():
        m = by_id[mid]
        try:
            took = h.check_on_time(m, sent[mid], ms / 1000.0, "x-delay %r (%s)" % (xd, mid))
            h.log("%-9s x-delay %-18r arrived after %.3fs, x-delay now %r" % (
                mid, xd, took, h.header(m.props, "x-delay")))
        except h.TestFailure as e:
            failures.append(str(e))
        expect(m.queue == tq["rk"], "%s went to %s, not the target" % (mid, m.queue))
        xo = h.header(m.props, "x-delay")
        expect(xo is not None and xo.kind in "Il" and xo.value == -ms,
               "%s: outgoing x-delay should be %d (signed int), got %r" % (mid, -ms, xo))
        expect(h.header(m.props, "x-delay-error") is None, "%s: has x-delay-error" % mid)

    for mid, xd in list(INVALID.items()) + list(TOO_BIG.items()):
        # Default policy: published at once to the target, no x-delay-error.
        m = by_id["pub-" + mid]
        took = m.t - sent["pub-" + mid]
        h.log("pub-%-12s x-delay %-22r -> %s after %.3fs, x-delay now %r" % (
            mid, xd, m.queue, took, h.header(m.props, "x-delay")))
        expect(m.queue == tq["rk"], "pub-%s (invalid_delay=publish) went to %s, not the target" % (mid, m.queue))
        expect(took <= 1.0, "pub-%s (invalid_delay=publish) not published at once: %.3fs" % (mid, took))
        expect(h.header(m.props, "x-delay-error") is None, "pub-%s: has x-delay-error" % mid)
        if mid in INVALID:
            expect(h.header(m.props, "x-delay") == xd,
                   "pub-%s: invalid x-delay should be kept as %r, got %r" % (mid, xd, h.header(m.props, "x-delay")))
        # Dead-letter policy: to the dead-letter exchange with x-delay-error.
        m = by_id["dl-" + mid]
        took = m.t - sent["dl-" + mid]
        err = h.header(m.props, "x-delay-error")
        h.log("dl-%-13s x-delay %-22r -> %s after %.3fs, x-delay-error %r" % (mid, xd, m.queue, took, err))
        expect(m.queue == dq[""], "dl-%s (invalid_delay=dead-letter) went to %s, not the DLX" % (mid, m.queue))
        expect(took <= 1.0, "dl-%s not dead-lettered at once: %.3fs" % (mid, took))
        expect(err is not None and err.kind == "S" and len(err.value) > 0,
               "dl-%s: x-delay-error should be a non-empty string, got %r" % (mid, err))
        expect(m.routing_key == "rk", "dl-%s: routing key %r" % (mid, m.routing_key))
        expect(m.bridge_id, "dl-%s: no x-delay-bridge-id" % mid)

    m = by_id["dl-valid"]
    expect(m.queue == tq["rk"], "dl-valid (a valid delay on the dead-letter route) went to %s" % m.queue)
    try:
        h.check_on_time(m, sent["dl-valid"], 1.0, "dl-valid")
    except h.TestFailure as e:
        failures.append(str(e))

    extra = c.quiet(0.5)[n:]
    expect(not extra, "unexpected extra deliveries: %s" % h.summarize(extra))
    if failures:
        h.fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
