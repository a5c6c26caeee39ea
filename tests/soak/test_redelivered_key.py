#!/usr/bin/python3
"""A keyed message whose ack was lost comes back to the bridge that logged
it; the key event it sends again carries the time the message was first
taken. The regression test of the third bug found while reading the code
behind chaos_soak.py's key failures.

The bug: a redelivery recognised as logged (README "Delivery guarantees")
sends its key event again, since the first may have been lost with the
ack -- but dated by the redelivery, not by the first delivery: the record
built from the redelivery carries "now". Another bridge holding a newer
version, taken between the two deliveries, compared that later date with
its own and cancelled its newer version; the older one here had already
been cancelled by that bridge's own event: the key was lost everywhere.

Now (bridge_key_event_again()) the event is sent only if the key's held
version here is this very message, dated by its ADD record.

The test (a broker of its own, own_broker.py; share_keys; two plain
bridges): x reaches the broker through chaos_proxy.py, with prefetch 1
and heartbeat_s 2; y directly.
  1. x alone. The proxy holds x's bytes to the broker (upstall): x receives
     K v1 (40 s) and logs it, but its ack and its key event stay behind.
  2. y starts and takes K v2 (25 s) -- x's one prefetch slot is taken by
     the unacked v1 -- and tells x, which cancels v1. y is killed.
  3. The broker drops x for missed heartbeats and requeues v1; the proxy
     passes again; x reconnects, gets v1 again and recognises it.
  4. y restarts on its log (v2) and reads its key-event queue.
v2 must arrive, v1 not. Without the fix y reads x's event dated after v2
and cancels it: nothing of K arrives.
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import harness as h  # noqa: E402
from harness import check  # noqa: E402
from chaos_proxy import Proxies  # noqa: E402
import own_broker  # noqa: E402


def wait(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while not fn():
        check(time.monotonic() < deadline, "timed out waiting for %s" % what)
        time.sleep(0.1)


def test(ctx):
    ex, qs = ctx.target("t", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("rdk", ex, share_keys=True)
    for q in ("x", "y"):
        ctx.queues.add(route["ingress_queue"] + ".keys." + q)
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    broker_port = int(os.environ["DB_TEST_BROKER_URI"].rsplit(":", 1)[1].split("/")[0])
    proxies = Proxies()
    pport = h.free_port()
    proxies.add("x", pport, broker_port)
    proxies.start()
    px, py = h.free_port(), h.free_port()
    x = ctx.bridge([dict(route, prefetch=1)], name="x", instance="x",
                   http={"listen": "127.0.0.1:%d" % px},
                   broker={"uri": "amqp://guest:guest@127.0.0.1:%d/%%2f" % pport,
                           "heartbeat_s": 2})
    y = ctx.bridge([route], name="y", instance="y", start=False,
                   http={"listen": "127.0.0.1:%d" % py}, broker={"heartbeat_s": 5})
    p = ctx.publisher()
    ing = route["ingress_exchange"]
    try:
        proxies.set_mode("x", "upstall")
        t1 = p.publish(ing, "rk", b"v1", headers={"x-delay": h.i32(40000),
                                                  "x-delay-key": h.lstr("K")},
                       message_id="k.v1", delivery_mode=2)
        wait("x to log v1", lambda: h.stats(px)["held"] == 1, 10)
        y.start()
        t2 = p.publish(ing, "rk", b"v2", headers={"x-delay": h.i32(25000),
                                                  "x-delay-key": h.lstr("K")},
                       message_id="k.v2", delivery_mode=2)
        wait("y to log v2", lambda: h.stats(py)["held"] == 1, 10)
        wait("x to cancel v1 on y's event", lambda: h.stats(px)["held"] == 0, 10)
        y.kill9()
        x.wait_log("lost", 30, "x losing its connection (missed heartbeats)")
        proxies.set_mode("x", "pass")
        wait("x to recognise the redelivered v1",
             lambda: h.stats(px)["routes"][0]["deduplicated"] >= 1, 30)
        h.log("x recognised v1 again (deduplicated); y restarts on its log")
        y.start()
        try:
            c.wait_ids(["k.v2"], 40)
        except h.TestFailure:
            pass  # said below
        t = h.tally({"k.v2": t2}, c.quiet(3.0))
        h.log("RESULT redelivered key: %s; unknown %s" % (h.tally_line(t), t["unknown"]))
        check(not t["lost"], "v2 lost: y cancelled it on x's repeated event for v1")
        check(not t["unknown"], "v1 arrived: %s" % t["unknown"])
        h.check_none_early({"k.v2": (t2, 25000)}, t, "redelivered key")
        del t1
        x.stop()
        y.stop()
    finally:
        proxies.close()


if __name__ == "__main__":
    own_broker.run(test, budget_s=120)
