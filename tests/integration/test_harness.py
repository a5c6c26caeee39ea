#!/usr/bin/python3
"""The test tools themselves, against the real broker and without the bridge:
every AMQP field type the other tests publish (x-delay of each kind, headers
of every kind) reaches a consumer with its kind and bytes intact (on
RabbitMQ 4, an unsigned 64-bit 'L' arrives as a signed 'l' of the same
bits: the one change 4.x makes), and a
1 MiB body and every basic property survive a plain queue. If this fails,
the other tests' verdicts on the bridge mean nothing."""

import os

import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("plain", "direct", ["k"])
    c = ctx.consumer([qs["k"]])
    p = ctx.publisher()
    headers = {
        "b": h.i8(-5), "B": h.u8(250), "s": h.i16(-300), "u": h.u16(65000),
        "I": h.i32(-70000), "i": h.u32(4000000000), "l": h.i64(-2 ** 40), "L": h.u64(2 ** 63 + 5),
        "f": h.f32(1500.75), "d": h.f64(1500.9), "D": h.dec(1, 15009), "S": h.lstr("h\u00e9llo"),
        "x": h.raw_bytes(b"\x00\xff"), "T": h.tstamp(1700000000), "t": h.boolean(True),
        "V": h.void(), "F": h.table({"a": h.i32(1), "n": h.table({"z": h.lstr("deep")})}),
        "A": h.array([h.i8(1), h.lstr("two"), h.f64(3.0), h.table({"k": h.u16(7)})]),
    }
    body = os.urandom(1 << 20)
    props = dict(content_type="application/x-test", content_encoding="identity",
                 delivery_mode=2, priority=7, correlation_id="corr", reply_to="replies",
                 expiration="600000", message_id="m1", timestamp=1700000000, type="t",
                 app_id="dbtest", user_id=h.broker_user())
    p.publish(ex, "k", body, headers=headers, **props)
    m = c.wait_count(1, 10)[0]
    got = m.props.headers
    want = dict(headers)
    if not h.broker_version().startswith("3."):
        # RabbitMQ 4 re-encodes 0-9-1 headers (its message containers): an
        # unsigned 64-bit 'L' arrives as a signed 'l' with the same 64 bits.
        # (py-amqp writes its signed longs as 'L': on 4.x they arrive signed.)
        want["L"] = h.i64(2 ** 63 + 5 - 2 ** 64)
    diffs = ["header %s: sent %r, want %r, got %r" % (k, headers[k], v, got.get(k))
             for k, v in want.items() if got.get(k) != v]
    for d in diffs:
        h.log(d)
    check(not diffs, "%d header(s) changed: %s" % (len(diffs), "; ".join(diffs)))
    check(set(got) == set(headers), "header names differ: %s" % sorted(set(got) ^ set(headers)))
    for k, v in props.items():
        check(getattr(m.props, k) == v, "property %s: sent %r, got %r" % (k, v, getattr(m.props, k)))
    check(m.body == body, "1 MiB body changed in a plain queue")
    # A Field differs by kind even when the number is the same.
    check(h.i32(5) != h.i64(5) and h.f32(1.5) != h.f64(1.5) and h.f64(float("nan")) == h.f64(float("nan")),
          "Field equality must compare kinds and bytes")
    h.log("every field kind and property round-tripped through the broker")


if __name__ == "__main__":
    h.run(test, budget_s=60)
