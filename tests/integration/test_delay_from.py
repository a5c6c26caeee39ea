#!/usr/bin/python3
"""delay_from "broker": an x-delay counts from the broker's receipt, the
header timestamp_in_ms that RabbitMQ 3.12 and later stamp on every incoming
message when rabbitmq.conf says

    message_interceptors.incoming.set_header_timestamp.overwrite = true

RabbitMQ 3.10 (the broker of these tests) has no interceptor, so the test
stamps the header itself, as a publisher would under overwrite = false.

A route with delay_from "broker":
- stamped 2.5 s ago, x-delay 6 s: due at the stamp + 6 s exactly (/pending
  due_ms), arrives ~3.5 s after its publish, not before;
- stamped an hour ago, x-delay 5 s (a backlog): published at once;
- stamped 10 s in the future (the broker's clock ahead): counted from its
  receipt here, never later;
- no stamp: counted from its receipt, counted in /stats unstamped and
  delay_bridge_unstamped_total, and a warning names the rabbitmq.conf line;
- x-delay-until beside a stamp: the absolute time decides.
Its republish carries no timestamp_in_ms (the stamp dated this hop only;
a stamping broker adds a fresh one). The same stamped message on a route
with the default delay_from "bridge" waits its whole x-delay from receipt,
and keeps the header. A restart keeps every due time.
"""

import json
import time

import harness as h
from harness import check


def test(ctx):
    target, tq = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([tq["rk"]])
    rb = ctx.route("broker", target, delay_from="broker")
    rr = ctx.route("bridge", target)
    port = h.free_port()
    b = ctx.bridge([rb, rr], http={"listen": "127.0.0.1:%d" % port})
    p = ctx.publisher()

    wall0 = time.time() - time.monotonic()  # epoch s of the monotonic clock's zero
    now_ms = int(time.time() * 1000)
    # message id -> (route, headers, expected: ("due", epoch ms) | ("now",) | ("delay", ms) from
# the publish, which is from its receipt here give or take the hop)
    cases = {
        # (from the end of the stamp's ms, +1: the receipt lay somewhere inside it)
        "stamped": (rb, {"x-delay": h.i32(6000), "timestamp_in_ms": h.i64(now_ms - 2500)},
                    ("due", now_ms - 2500 + 1 + 6000)),
        "stamped-u64": (rb, {"x-delay": h.i32(6000), "timestamp_in_ms": h.u64(now_ms - 2000)},
                        ("due", now_ms - 2000 + 1 + 6000)),
        "backlog": (rb, {"x-delay": h.i32(5000), "timestamp_in_ms": h.i64(now_ms - 3600 * 1000)},
                    ("now",)),
        "future-stamp": (rb, {"x-delay": h.i32(4000), "timestamp_in_ms": h.i64(now_ms + 10000)},
                         ("delay", 4000)),
        "unstamped": (rb, {"x-delay": h.i32(4000)}, ("delay", 4000)),
        "until": (rb, {"x-delay-until": h.i64(now_ms + 5000), "x-delay": h.i32(100),
                       "timestamp_in_ms": h.i64(now_ms - 2500)}, ("due", now_ms + 5000)),
        "bridge-route": (rr, {"x-delay": h.i32(6000), "timestamp_in_ms": h.i64(now_ms - 2500)},
                         ("delay", 6000)),
    }
    sent = {}
    for mid, (route, hdrs, _) in cases.items():
        sent[mid] = p.publish(route["ingress_exchange"], "rk", mid.encode(), headers=hdrs,
                              message_id=mid)

    def pending():
        out = {}
        for r in (rb, rr):
            st, body = h.http_get(port, "/pending?route=%s&limit=1000" % r["name"])
            check(st == 200, "/pending: HTTP %s" % st)
            out.update({m["message_id"]: m for m in json.loads(body)["messages"]})
        return out

    held = [mid for mid, (_, _, e) in cases.items() if e[0] != "now"]
    deadline = time.monotonic() + 10
    while True:
        pend = pending()
        if all(mid in pend for mid in held) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for mid in held:
        check(mid in pend, "%s not in /pending: %s" % (mid, sorted(pend)))
        e = cases[mid][2]
        due = pend[mid]["due_ms"]
        if e[0] == "due":
            check(due == e[1], "%s: /pending due_ms %d, expected the stamp + 1 + x-delay = %d"
                  % (mid, due, e[1]))
        else:  # from the bridge's receipt: after the publish, within a generous bound
            pub_ms = (sent[mid] + wall0) * 1000
            check(pub_ms + e[1] - 50 <= due <= pub_ms + e[1] + 3000,
                  "%s: /pending due_ms %d is %+.0f ms from publish + x-delay: not counted from "
                  "its receipt" % (mid, due, due - pub_ms - e[1]))
    h.log("/pending: stamped ones due at the stamp + x-delay, the others from receipt")

    r = {x["name"]: x for x in h.stats(port)["routes"]}
    check(r[rb["name"]]["unstamped"] == 1, "route broker: unstamped %r, expected 1"
          % r[rb["name"]]["unstamped"])
    check(r[rr["name"]]["unstamped"] == 0, "route bridge: unstamped %r, expected 0"
          % r[rr["name"]]["unstamped"])
    st, metrics = h.http_get(port, "/metrics")
    want = 'delay_bridge_unstamped_total{route="%s"} 1' % rb["name"]
    check(want in metrics, "/metrics lacks %r" % want)
    check("has no timestamp_in_ms" in b.log_text() and
          "set_header_timestamp" in b.log_text(), "no warning about the missing stamp")

    # a restart keeps the due times (the WAL stores them)
    b.stop()
    b.start()
    pend2 = pending()
    for mid in held:
        if mid in pend2:
            check(pend2[mid]["due_ms"] == pend[mid]["due_ms"], "%s: due_ms %d after a restart, "
                  "%d before" % (mid, pend2[mid]["due_ms"], pend[mid]["due_ms"]))

    msgs = c.wait_ids(list(cases), 6 + h.late_tolerance() + 8)
    by_id = {m.message_id: m for m in msgs}
    failures = []
    for mid, (route, hdrs, e) in cases.items():
        m = by_id[mid]
        stamp = h.header(m.props, "timestamp_in_ms")
        if route is rb and stamp is not None:
            failures.append("%s: timestamp_in_ms forwarded on a delay_from \"broker\" route" % mid)
        if route is rr and "timestamp_in_ms" in hdrs and stamp is None:
            failures.append("%s: timestamp_in_ms not forwarded on a delay_from \"bridge\" route"
                            % mid)
        h.log("%-13s arrived %+6.0f ms after its publish" % (mid, (m.t - sent[mid]) * 1000))
        problem = h.arrival_problem(m, sent[mid], e, wall0)
        if problem:
            failures.append(problem)
    h.fail_problems(c, len(cases), failures)
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
