#!/usr/bin/python3
"""Keys across competing bridges (routes[].share_keys).

Bridges A and B consume one ingress queue as competing consumers (prefetch
20, so deliveries alternate between them). 300 keys are published in three
rounds -- version 1 of every key, then version 2, then version 3, 0.5 s
apart so that arrival order is publication order -- and the versions of one
key land on either bridge. Then 60 keys are cancelled with x-delay-cancel
messages, which also land on either bridge. 200 unkeyed messages go along.

Each bridge tells the other about every keyed message and cancel it takes
(key events on INGRESS_EXCHANGE.keys), and cancels its own older version.
Checked: for each key only version 3 arrives, and for a cancelled key
nothing; every unkeyed message arrives; none early; both bridges applied
the other's events (the split really happened).
"""

import time

import harness as h
from harness import check

KEYS = 300
CANCELLED = 60
PLAIN = 200
# Every version must be held before the first falls due: on a loaded machine
# (CI, ASan daemons) publishing the three rounds has taken over 15 s.
SLACK_MS = 10000


def test(ctx):
    ex, qs = ctx.target("sk", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("sk", ex, share_keys=True, prefetch=20)
    ctx.queues.update([route["ingress_queue"] + ".keys.a", route["ingress_queue"] + ".keys.b"])
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa})
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb})
    p = ctx.publisher()
    ing = route["ingress_exchange"]

    want, never = {}, set()
    for v in (1, 2, 3):
        for k in range(KEYS):
            mid = "k%03d.v%d" % (k, v)
            ms = SLACK_MS + 9000 + (k * 37) % 3000
            t = p.publish(ing, "rk", mid.encode(), headers={"x-delay": h.i32(ms),
                                                            "x-delay-key": h.lstr("k%03d" % k)},
                          message_id=mid, delivery_mode=2)
            if v == 3 and k >= CANCELLED:
                want[mid] = (t, ms)
            else:
                never.add(mid)
        # 67, 67, 66: odd rounds, so that round-robin delivery sends a key's
        # next version to the other bridge
        for i in range((67, 67, 66)[v - 1]):
            mid = "p%d.%03d" % (v, i)
            ms = SLACK_MS + 7000 + (i * 53) % 3000
            want[mid] = (p.publish(ing, "rk", mid.encode(), headers={"x-delay": h.i32(ms)},
                                   message_id=mid, delivery_mode=2), ms)
        time.sleep(0.5)
    for k in range(CANCELLED):
        p.publish(ing, "rk", b"", headers={"x-delay-cancel": h.lstr("k%03d" % k)},
                  message_id="cancel.k%03d" % k, delivery_mode=2)

    deadline = time.monotonic() + 25
    while True:
        sa, sb = h.stats(pa), h.stats(pb)
        held = sa["held"] + sb["held"]
        if held == len(want):
            break
        check(time.monotonic() < deadline, "A holds %d, B %d; %d expected" % (
            sa["held"], sb["held"], len(want)))
        time.sleep(0.1)
    ra, rb = sa["routes"][0], sb["routes"][0]
    h.log("A holds %d (received %d, events sent %d, applied %d); B holds %d (received %d, "
          "events sent %d, applied %d)" % (sa["held"], ra["received"], ra["key_events_sent"],
                                           ra["key_events_applied"], sb["held"], rb["received"],
                                           rb["key_events_sent"], rb["key_events_applied"]))
    check(ra["key_events_applied"] > 0 and rb["key_events_applied"] > 0,
          "both bridges should have cancelled versions on the other's word")

    c.wait_ids(want.keys(), 30 + SLACK_MS / 1000.0)
    t = h.tally(want, c.quiet(2.0))
    h.log("RESULT shared keys: %s" % h.tally_line(t))
    back = sorted(set(t["unknown"]) & never)
    check(not back, "%d replaced or cancelled message(s) arrived: %s" % (len(back), back[:10]))
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(want, t, "shared keys")
    a.stop()
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
