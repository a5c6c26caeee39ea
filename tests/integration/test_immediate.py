#!/usr/bin/python3
"""x-delay missing, zero or negative (of several types): published at once,
with x-delay left as it was (only a delay that was applied is negated)."""

import harness as h
from harness import check


CASES = [
    ("missing", None),
    ("zero-i32", h.i32(0)),
    ("zero-i64", h.i64(0)),
    ("neg-i32", h.i32(-1000)),
    ("neg-i8", h.i8(-5)),
    ("neg-i64", h.i64(-2 ** 40)),
    ("neg-f64", h.f64(-250.5)),
    ("zero-str", h.lstr("0")),
    ("neg-str", h.lstr("-250")),
]


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    b = ctx.bridge([ctx.route("now", ex)])
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()

    sent = {}
    for mid, xd in CASES:
        headers = {"x-delay": xd, "other": h.lstr("kept")} if xd is not None else {"other": h.lstr("kept")}
        sent[mid] = (p.publish(ingress, "rk", mid.encode(), headers=headers, message_id=mid), xd)
    msgs = c.wait_count(len(CASES), 10)
    for m in msgs:
        t0, xd = sent[m.message_id]
        took = h.check_immediate(m, t0, m.message_id)
        h.log("%s arrived after %.3fs" % (m.message_id, took))
        check(h.header(m.props, "x-delay") == xd,
              "%s: x-delay should stay %r, got %r" % (m.message_id, xd, h.header(m.props, "x-delay")))
        check(h.header_str(m.props, "other") == "kept", "%s: header 'other' lost" % m.message_id)
        check(m.bridge_id, "%s: no x-delay-bridge-id" % m.message_id)
        check(m.body == m.message_id.encode(), "%s: body changed" % m.message_id)
    extra = c.quiet(0.5)[len(CASES):]
    check(not extra, "unexpected extra deliveries: %s" % h.summarize(extra))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=60)
