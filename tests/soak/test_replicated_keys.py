#!/usr/bin/python3
"""Shared keys (routes[].share_keys) with a replicated WAL: the owner and
its standby are one holder of the keys. The regression test of the second
bug chaos_soak.py found.

The bug: the key-event queue was named after the instance
(INGRESS_QUEUE.keys.INSTANCE), and an owner and its standby have different
instance names (README). So

  1. an event another bridge sent while a1 owned the log waited in
     keys.a1 (keys.a2 did not exist until a2 first owned the log); a2 took
     over holding the log's older version and never saw the event: a
     cancelled (or replaced) version fired;
  2. events an owner sends also reach the queue of its standby, which
     consumed them later, when it owned the log: a1, owner again, took
     a2's event about a version a2 had logged -- now in a1's own log, with
     the event's very time -- for another bridge's, and the tie went
     against it (instance "a1" sorts before "a2"): the newest version was
     cancelled, so nothing of the key arrived (lost).

chaos_soak.py --seed 11 --minutes 3 showed both: 2 cancelled versions
delivered, and 10 keys whose last version never arrived.

Now the queue and the origin of a replicated log's events are its stream
name (config_key_holder()): one queue for owner and standbys, which waits
for whoever owns the log next, and the log's own events are recognised
whoever sent them.

The test (a broker of its own, own_broker.py): a1 owns the log, a2 stands
by, one route with share_keys.
  Case 1: a1 takes key K1 (12 s). a2 is SIGSTOPped, b (a plain bridge)
  starts, a1 is killed: b alone consumes, and takes x-delay-cancel K1.
  a2 is continued, takes the lease and the log, and owns it past K1's due
  time. K1 must never arrive.
  Case 2: a1 restarted (standby); b stopped, so a2 alone consumes and
  takes key K2 (20 s). a2 is killed; a1 takes over. K2 must arrive.
A plain message goes along and must arrive. Without the fix K1 arrives
and K2 does not.
"""

import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness as h  # noqa: E402
from harness import check  # noqa: E402
from ha_soak import wait_state  # noqa: E402
import own_broker  # noqa: E402


def test(ctx):
    route, c, wal = ctx.replicated("rk", checkpoint_mb=64, max_mb=0, lease_renew_ms=1000)
    route["share_keys"] = True
    stream = wal["replicate"]["stream"]
    for q in ("a1", "a2", "b", stream):
        ctx.queues.add(route["ingress_queue"] + ".keys." + q)
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    port = {n: h.free_port() for n in ("a1", "a2", "b")}
    br = {}
    for n in ("a1", "a2", "b"):
        br[n] = ctx.bridge([route], name=n, instance=n, start=False,
                           wal=wal if n != "b" else {},
                           http={"listen": "127.0.0.1:%d" % port[n]}, broker={"heartbeat_s": 5})
    br["a1"].start(wait_ready=False)
    wait_state(port["a1"], "owner", 30, "a1")
    br["a2"].start(wait_ready=False)
    wait_state(port["a2"], "standby", 30, "a2")
    p = ctx.publisher()
    ing = route["ingress_exchange"]
    sent = {}

    def publish(mid, ms, key=None, cancel=False):
        hdrs = {"x-delay-cancel": h.lstr(key)} if cancel else {"x-delay": h.i32(ms)}
        if key and not cancel:
            hdrs["x-delay-key"] = h.lstr(key)
        t = p.publish(ing, "rk", b"" if cancel else mid.encode(), headers=hdrs, message_id=mid,
                      delivery_mode=2)
        if not cancel:
            sent[mid] = (t, ms)

    # Case 1: the owner's log holds K1; another bridge takes its cancel while no owner consumes.
    # K1's cancel must reach the owner before its 12 s are up: the waits
    # below read the bridges' /stats, not rabbitmqctl (seconds per call on a
    # loaded machine).
    publish("k1.v1", 12000, "K1")
    k1_due = time.monotonic() + 12.0
    publish("plain", 15000)
    ctx.wait_taken(port["a1"], route["ingress_queue"], 2, 10)
    os.kill(br["a2"].proc.pid, signal.SIGSTOP)
    br["b"].start()
    br["a1"].kill9()
    publish("k1.cancel", 0, "K1", cancel=True)
    deadline = time.monotonic() + 10
    while h.stats(port["b"])["routes"][0]["key_events_sent"] < 1:
        check(time.monotonic() < deadline, "b sent no key event for the cancel")
        time.sleep(0.1)
    os.kill(br["a2"].proc.pid, signal.SIGCONT)
    br["a2"].wait_log('msg="ready"', 60, "a2 ready after a1's kill")
    h.log("case 1: a2 owns the log that holds K1; b took the cancel")
    # K1 falls due while a2 owns the log (a1, once owner again, would see the event in its queue)
    time.sleep(max(0.0, k1_due + 2.0 - time.monotonic()))

    # Case 2: a2 alone takes K2; then a1 owns the log again.
    br["a1"].start(wait_ready=False)
    wait_state(port["a1"], "standby", 30, "a1 (restarted)")
    br["b"].stop()
    publish("k2.v1", 20000, "K2")
    ctx.wait_drained(route["ingress_queue"], 10, "a2 to take K2")
    time.sleep(1.0)
    br["a2"].kill9()
    br["a1"].wait_log('msg="ready"', 60, "a1 ready after a2's kill")
    h.log("case 2: a1 owns the log again; a2 had taken K2")

    want = {k: v for k, v in sent.items() if k != "k1.v1"}
    try:
        c.wait_ids(want.keys(), 40)
    except h.TestFailure:
        pass
    t = h.tally(want, c.quiet(8.0))
    h.log("RESULT replicated keys: %s; unknown %s" % (h.tally_line(t), t["unknown"]))
    check("k1.v1" not in t["unknown"], "K1 was cancelled (b took the cancel while a1 owned the "
          "log) yet arrived: the new owner a2 never saw b's key event")
    check(not t["lost"], "lost: %s (K2 was cancelled by its own log's event, sent by a2 and "
          "taken by a1 once it owned the log again)" % t["lost"])
    check(not t["unknown"], "unexpected: %s" % t["unknown"])
    h.check_none_early(want, t, "replicated keys")
    br["a1"].stop()


if __name__ == "__main__":
    own_broker.run(test, budget_s=150)
