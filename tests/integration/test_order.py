#!/usr/bin/python3
"""Messages come out in order of due time, not of arrival: x-delay 3 s, 1 s,
2 s published in that order arrive 1 s, 2 s, 3 s, each no earlier than its
due time and within a generous bound after it; each once, with x-delay
negated and an x-delay-bridge-id. Messages with the same x-delay published
back to back keep their publish order (FIFO among equal delays)."""

import harness as h
from harness import check


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["order.close"])
    c = ctx.consumer([qs["order.close"]])
    b = ctx.bridge([ctx.route("orders", ex)])
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()

    sent = {}
    for ms in (3000, 1000, 2000):
        mid = "due-%d" % ms
        sent[mid] = (p.publish(ingress, "order.close", ("close in %d ms" % ms).encode(),
                               headers={"x-delay": h.i32(ms)}, message_id=mid, delivery_mode=2), ms)
    msgs = c.wait_count(3, 3 + h.late_tolerance() + 5)
    order = [m.message_id for m in msgs]
    check(order == ["due-1000", "due-2000", "due-3000"],
          "arrival order %s, expected due-1000, due-2000, due-3000" % order)
    for m in msgs:
        t0, ms = sent[m.message_id]
        took = h.check_on_time(m, t0, ms / 1000.0, m.message_id)
        h.log("%s arrived after %.3fs" % (m.message_id, took))
        check(m.body == ("close in %d ms" % ms).encode(), "%s: body changed" % m.message_id)
        check(m.routing_key == "order.close", "%s: routing key %r" % (m.message_id, m.routing_key))
        check(h.header_int(m.props, "x-delay") == -ms,
              "%s: x-delay should be %d, got %r" % (m.message_id, -ms, h.header(m.props, "x-delay")))
        check(m.bridge_id, "%s: no x-delay-bridge-id header" % m.message_id)
    check(len({m.bridge_id for m in msgs}) == 3, "x-delay-bridge-id not unique per message")
    extra = c.quiet(1.0)[3:]
    check(not extra, "unexpected extra deliveries: %s" % h.summarize(extra))

    fifo = ["fifo-%02d" % i for i in range(20)]
    for mid in fifo:
        p.publish(ingress, "order.close", mid.encode(), headers={"x-delay": h.i32(1500)}, message_id=mid)
    msgs = c.wait_count(3 + len(fifo), 1.5 + h.late_tolerance() + 5)[3:]
    got = [m.message_id for m in msgs]
    check(got == fifo, "20 messages with the same x-delay arrived out of publish order: %s" % got)
    h.log("20 messages with equal x-delay arrived in publish order")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
