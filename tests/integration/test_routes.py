#!/usr/bin/python3
"""Two routes, one to a direct and one to a topic target exchange: each
message arrives exactly where its route's target exchange and its routing
key send it, and nowhere else (no cross-talk between routes)."""

import harness as h
from harness import check


def test(ctx):
    direct, dq = ctx.target("direct", "direct", ["a", "b"])
    topic, tq = ctx.target("topic", "topic", ["order.*", "#.eu", "#"])
    queues = list(dq.values()) + list(tq.values())
    c = ctx.consumer(queues)
    routes = [ctx.route("to-direct", direct), ctx.route("to-topic", topic, target_type="topic")]
    b = ctx.bridge(routes)
    din, tin = routes[0]["ingress_exchange"], routes[1]["ingress_exchange"]
    p = ctx.publisher()

    # (ingress, routing key, message id, delay ms, queues it must reach)
    plan = [
        (din, "a", "d-a", 500, [dq["a"]]),
        (din, "b", "d-b", 0, [dq["b"]]),
        (din, "a", "d-a2", 1000, [dq["a"]]),
        (tin, "order.created", "t-order", 500, [tq["order.*"], tq["#"]]),
        (tin, "order.eu", "t-order-eu", 0, [tq["order.*"], tq["#.eu"], tq["#"]]),
        (tin, "stock.eu", "t-stock-eu", 1000, [tq["#.eu"], tq["#"]]),
        (tin, "a", "t-a", 500, [tq["#"]]),  # same key as a direct binding: must not reach it
        (tin, "b", "t-b", 0, [tq["#"]]),
    ]
    want = set()
    for ingress, rk, mid, ms, dests in plan:
        headers = {"x-delay": h.i32(ms)} if ms else {}
        p.publish(ingress, rk, mid.encode(), headers=headers, message_id=mid)
        for q in dests:
            want.add((q, mid))

    c.wait_count(len(want), 1 + h.late_tolerance() + 5)
    got = c.quiet(1.0)
    pairs = [(m.queue, m.message_id) for m in got]
    dup = sorted({x for x in pairs if pairs.count(x) > 1})
    check(not dup, "delivered more than once to the same queue: %s" % dup)
    missing, stray = sorted(want - set(pairs)), sorted(set(pairs) - want)
    check(not missing and not stray, "missing deliveries %s; deliveries where none belong %s" % (missing, stray))
    for m in got:
        check(m.body == m.message_id.encode(), "%s: body changed" % m.message_id)
        route = "to-direct" if m.message_id.startswith("d-") else "to-topic"
        check(m.exchange == (direct if route == "to-direct" else topic),
              "%s arrived through exchange %r" % (m.message_id, m.exchange))
    h.log("%d deliveries, each where it belongs" % len(got))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=60)
