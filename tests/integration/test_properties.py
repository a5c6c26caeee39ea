#!/usr/bin/python3
"""A delayed message is republished as it was sent: routing key, a 1 MiB
random body byte for byte, every basic property, and headers of every type
(nested table, array, bytes, timestamp, bool, integers, floats, decimal,
void), except that x-delay is negated and x-delay-bridge-id is added; a
user_id equal to the bridge's broker user is kept, a different one is moved
to the header x-original-user-id (RabbitMQ would refuse it)."""

import os

import harness as h
from harness import check

HEADERS = {
    "x-delay": h.i32(1000),
    "nested": h.table({"level": h.i32(1), "inner": h.table({"deep": h.lstr("yes"), "n": h.i64(-7)}),
                       "list": h.array([h.i8(1), h.lstr("x")])}),
    "array": h.array([h.i32(1), h.lstr("two"), h.f64(3.5), h.boolean(False), h.table({"k": h.u16(9)}),
                      h.array([h.u8(1)]), h.void()]),
    "bytes": h.raw_bytes(bytes(range(256))),
    "when": h.tstamp(1700000000),
    "yes": h.boolean(True),
    "no": h.boolean(False),
    "i8": h.i8(-128), "u8": h.u8(255), "i16": h.i16(-32768), "u16": h.u16(65535),
    "i32": h.i32(-2 ** 31), "u32": h.u32(2 ** 32 - 1), "i64": h.i64(-2 ** 63), "u64": h.u64(2 ** 64 - 1),
    "decimal": h.dec(3, -123456),
    "utf8": h.lstr("gr\u00fc\u00df \u2603"),
    "empty": h.lstr(""),
    "void": h.void(),
}

PROPS = dict(content_type="application/octet-stream", content_encoding="x-test-enc",
             delivery_mode=2, priority=7, correlation_id="corr-42", reply_to="replies.q",
             expiration="600000", message_id="full", timestamp=1700000000, type="order.closed",
             app_id="dbtest-app")


def check_headers(mid, got, sent, added):
    """got == sent with x-delay negated (any signed int kind) plus `added`."""
    got = dict(got or {})
    problems = []
    xd = sent.get("x-delay")
    if xd is not None and xd.value > 0:
        g = got.pop("x-delay", None)
        if g is None or g.kind not in "Il" or g.value != -xd.value:
            problems.append("x-delay: expected %d as a signed int, got %r" % (-xd.value, g))
    bid = got.pop("x-delay-bridge-id", None)
    if bid is None or bid.kind != "S" or not bid.value:
        problems.append("x-delay-bridge-id: expected a non-empty string, got %r" % (bid,))
    for k, v in list(sent.items()) + list(added.items()):
        if k == "x-delay" and xd is not None and xd.value > 0:
            continue
        g = got.pop(k, None)
        if g != h.as_delivered(v):
            problems.append("header %s: sent %r, got %r" % (k, v, g))
    if got:
        problems.append("unexpected headers added: %r" % got)
    check(not problems, "%s: %s" % (mid, "; ".join(problems)))


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["props.rk"])
    c = ctx.consumer([qs["props.rk"]])
    b = ctx.bridge([ctx.route("props", ex)])
    ingress = b.config["routes"][0]["ingress_exchange"]
    user = h.broker_user()
    p = ctx.publisher()

    big = os.urandom(1 << 20)
    expected = {}  # id -> (body, props sent, headers sent, headers added, props expected)
    full = dict(PROPS, user_id=user)
    p.publish(ingress, "props.rk", big, headers=HEADERS, **full)
    expected["full"] = (big, full, HEADERS, {}, full)

    minimal_headers = {"x-delay": h.i64(500)}
    minimal = dict(message_id="minimal", delivery_mode=1)
    p.publish(ingress, "props.rk", b"", headers=minimal_headers, **minimal)
    expected["minimal"] = (b"", minimal, minimal_headers, {}, minimal)

    try:
        imp = ctx.impersonator()
    except h.Skip as e:
        h.log("part skipped: user_id different from the bridge's user (%s)" % e)
        imp = None
    if imp is not None:
        other = dict(message_id="other-user", user_id="alice", delivery_mode=2, app_id="dbtest-app")
        other_headers = {"x-delay": h.u16(800), "keep": h.lstr("me")}
        body = os.urandom(4096)
        imp.publish(ingress, "props.rk", body, headers=other_headers, **other)
        want = dict(other)
        del want["user_id"]
        expected["other-user"] = (body, other, other_headers, {"x-original-user-id": h.lstr("alice")}, want)

    msgs = c.wait_count(len(expected), 1 + h.late_tolerance() + 10)
    seen = set()
    for m in msgs:
        mid = m.message_id
        check(mid in expected and mid not in seen, "unexpected or repeated delivery %r" % m)
        seen.add(mid)
        body, sent_props, sent_headers, added, want_props = expected[mid]
        check(m.routing_key == "props.rk", "%s: routing key %r" % (mid, m.routing_key))
        check(len(m.body) == len(body), "%s: body is %d bytes, sent %d" % (mid, len(m.body), len(body)))
        check(m.body == body, "%s: body differs from what was sent (same length %d)" % (mid, len(body)))
        for name in ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                     "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
                     "cluster_id"):
            g, w = getattr(m.props, name), want_props.get(name)
            check(g == w, "%s: property %s: expected %r, got %r" % (mid, name, w, g))
        check_headers(mid, m.props.headers, sent_headers, added)
        h.log("%s: body (%d bytes), properties and headers as expected" % (mid, len(body)))
    check(len({m.bridge_id for m in msgs}) == len(msgs), "x-delay-bridge-id not unique per message")
    extra = c.quiet(0.5)[len(expected):]
    check(not extra, "unexpected extra deliveries: %s" % h.summarize(extra))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
