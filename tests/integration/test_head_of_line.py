#!/usr/bin/python3
"""No head-of-line blocking: a 20 s message, then a 1 s message on the same
route: the 1 s one arrives at about 1 s, and the 20 s one is still held
then (the test stops there rather than wait 20 s)."""

import time

import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    b = ctx.bridge([ctx.route("hol", ex)])
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()

    t_long = p.publish(ingress, "rk", b"long", headers={"x-delay": h.i32(20000)}, message_id="long")
    t_short = p.publish(ingress, "rk", b"short", headers={"x-delay": h.i32(1000)}, message_id="short")
    m = c.wait_count(1, 1 + h.late_tolerance() + 5)[0]
    check(m.message_id == "short", "first arrival is %r, expected the 1 s message" % m.message_id)
    took = h.check_on_time(m, t_short, 1.0, "the 1 s message (published after a 20 s one)")
    h.log("1 s message arrived after %.3fs" % took)
    c.quiet(1.0)
    ids = [x.message_id for x in c.snapshot()]
    check(ids == ["short"], "the 20 s message must still be held %.1fs after it was published; got %s"
          % (time.monotonic() - t_long, ids))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=60)
