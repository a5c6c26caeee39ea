#!/usr/bin/python3
"""Key events are confirmed before the ingress ack (a regression test:
tests/soak/chaos_soak.py, seed 3, delivered 11 replaced and 2 cancelled
versions: key events sent 11-15 s after a node kill, when the broker also
nacked the target publishes, were dropped without a confirm, while the
deliveries that caused them were acked).

Bridges A and B share a route with share_keys. A alone takes version 1 of
ten keys (due in 30 s), then stops cleanly (its held messages stay in its
log, its durable key-event queue collects what B sends). B starts armed
with the failpoint keys.event_unconfirmed (its first key event is counted
as sent but never sent: what the broker dropped in seed 3) and takes
version 2 of nine keys and a cancel of the tenth. A restarts.

Before the fix, B acked every delivery after its commit: the lost event
was gone, and A fired version 1 of key 0 at its due time. Now B holds its
acks until its events are confirmed; the event that never is drops B's
connection after 5 s, the deliveries come back, B recognises them as
logged and sends their events again.

Checked: B logged the unconfirmed event; A applied an event for every key;
no version 1 arrives (past its due time); every version 2 arrives once, not
early; nothing is stored twice.
"""

import time

import harness as h
from harness import check

KEYS = 10
V1_DELAY = 30000


def test(ctx):
    h.use_failpoint_bridge()
    ex, qs = ctx.target("kec", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("kec", ex, share_keys=True, prefetch=50)
    ctx.queues.update([route["ingress_queue"] + ".keys.a", route["ingress_queue"] + ".keys.b"])
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa})
    p = ctx.publisher()
    ing = route["ingress_exchange"]
    sent = {}

    for k in range(KEYS):
        mid = "k%d.v1" % k
        sent[mid] = (p.publish(ing, "rk", b"v1", headers={"x-delay": h.i32(V1_DELAY),
                                                         "x-delay-key": h.lstr("K%d" % k)},
                               message_id=mid, delivery_mode=2), V1_DELAY)
    ctx.wait_drained(route["ingress_queue"], 10)
    check(h.stats(pa)["held"] == KEYS, "A does not hold the ten versions 1")
    a.stop()
    h.log("A holds version 1 of %d keys and stopped; B starts, its first key event lost" % KEYS)

    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   start=False)
    b.start(env={"DELAY_BRIDGE_FAILPOINT": "keys.event_unconfirmed:1"})
    for k in range(KEYS - 1):
        mid = "k%d.v2" % k
        sent[mid] = (p.publish(ing, "rk", b"v2", headers={"x-delay": h.i32(3000),
                                                         "x-delay-key": h.lstr("K%d" % k)},
                               message_id=mid, delivery_mode=2), 3000)
    p.publish(ing, "rk", b"", headers={"x-delay-cancel": h.lstr("K%d" % (KEYS - 1))},
              message_id="cancel", delivery_mode=2)
    b.wait_log("a key event went unconfirmed", 20, "the unconfirmed key event noticed")
    b.wait_log("consuming", 10)
    h.wait_progress(lambda: h.stats(pb)["routes"][0]["key_events_sent"], KEYS + 1, 20,
                    lambda n: "B sent %d key events, not its lost one again" % n)
    h.log("B sent %d key events (the first one lost)" % h.stats(pb)["routes"][0]["key_events_sent"])

    a.start()
    h.wait_progress(lambda: h.stats(pa)["routes"][0]["key_events_applied"], KEYS, 20,
                    lambda n: "A applied %d key events of %d keys" % (n, KEYS))
    h.log("A applied %d key events" % h.stats(pa)["routes"][0]["key_events_applied"])

    # Past version 1's due time: none of them may fire.
    due_v1 = max(t for mid, (t, _) in sent.items() if mid.endswith(".v1")) + V1_DELAY / 1000.0
    while time.monotonic() < due_v1 + 2.0:
        got = {m.message_id for m in c.snapshot()}
        check(not [m for m in got if m.endswith(".v1")], "a version 1 arrived: %s" % sorted(
            m for m in got if m.endswith(".v1")))
        a.check_alive()
        b.check_alive()
        time.sleep(0.2)
    want = {mid: v for mid, v in sent.items() if mid.endswith(".v2")}
    c.wait_ids(want.keys(), 30)
    t = h.tally(want, c.quiet(1.5))
    h.log("RESULT key_event_confirm: %s" % h.tally_line(t))
    check(not t["lost"], "lost: %s" % sorted(t["lost"])[:10])
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    h.check_none_early(want, t, "key_event_confirm")
    a.stop()
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=150)
