#!/usr/bin/python3
"""Drain: two bridges share one route (one ingress queue, competing
consumers), 10,000 messages with delays of 20-45 s are spread over them,
200 of them with an x-delay-key. `delay-bridge drain` against bridge A:
A stops consuming, hands every held message back to the ingress exchange
with what remains of its delay, and exits 0; the tool exits 0 once it has.
Then bridge B holds everything A held; 100 keys are cancelled through B's
endpoint (they were held by either bridge before the drain, so the keys
must have survived the hand-back). Every other message arrives exactly once
(no duplicates: each was confirmed before A logged it done), none lost,
none before its due time (the harness's early tolerance: the remaining
delay is computed when A republishes, so B can only be later)."""

import subprocess
import time

import harness as h
import harness_load as hl
import pika
from harness import check

N = 10000
KEYED = 200


def received(port):
    return sum(r["received"] for r in h.stats(port)["routes"])


def test(ctx):
    ex, qs = ctx.target("drain", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("drain", ex, prefetch=200)
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa})
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb})

    # The bridges declared the route; with them stopped, the burst waits in
    # the ingress queue, so however slowly a loaded broker takes it, no
    # delay starts before the bridges read it (a due time counts from then).
    a.stop()
    b.stop()
    sent, keys, items = {}, [], []
    t0 = time.monotonic()  # before every publish: "fell due" and "never early" count from here
    for i in range(N):
        ms = 20000 + (i * 7919) % 25000
        mid = "d%05d" % i
        hdrs = {"x-delay": h.i32(ms)}
        if i % (N // KEYED) == 0:
            hdrs["x-delay-key"] = h.lstr("key-%05d" % i)
            keys.append((mid, "key-%05d" % i))
        items.append(("rk", mid.encode(),
                      pika.BasicProperties(headers=hdrs, message_id=mid, delivery_mode=2)))
        sent[mid] = (t0, ms)
    hl.publish_pipelined(route["ingress_exchange"], items)
    h.log("published %d in %.1f s" % (N, time.monotonic() - t0))
    a.start(wait_ready=False)
    b.start(wait_ready=False)
    a.wait_ready()
    b.wait_ready()
    h.wait_progress(lambda: received(pa) + received(pb), N, 20,
                    lambda n: "the bridges took %d + %d of %d" % (received(pa), received(pb), N))
    ha, hb = h.held(pa), h.held(pb)
    h.log("before the drain: A holds %d, B holds %d" % (ha, hb))
    check(ha > N // 10 and hb > N // 10, "the two bridges did not share the queue: %d / %d" % (
        ha, hb))

    t1 = time.monotonic()
    r = subprocess.run([h.bridge_bin(), "drain", "--url", "http://127.0.0.1:%d" % pa,
                        "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=180)
    h.log("drain tool (exit %d, %.1f s):\n%s" % (r.returncode, time.monotonic() - t1,
                                                 r.stdout.strip()))
    check(r.returncode == 0, "delay-bridge drain exited %d" % r.returncode)
    a.proc.wait(30)
    check(a.proc.returncode == 0, "bridge A exited %s after the drain" % a.proc.returncode)
    check("drain done" in a.log_text(), "bridge A did not log the end of the drain")
    now_held = h.held(pb)
    h.log("after the drain: B holds %d" % now_held)
    check(now_held >= ha + hb - (N // 10), "B holds %d, A and B held %d + %d" % (now_held, ha, hb))

    # Keys survived the hand-back: cancel half of them through B.
    cancelled = set()
    late = []
    for mid, key in keys[: KEYED // 2]:
        st, body = h.http_get(pb, "/pending/drain/%s" % key, method="DELETE", timeout=10)
        if st == 404 and time.monotonic() > sent[mid][0] + sent[mid][1] / 1000.0:
            late.append(mid)  # fell due before the cancel (a slow machine): it must arrive
            continue
        check(st in (200, 202), "cancel %s on B: %d %s" % (key, st, body))
        cancelled.add(mid)
    if late:
        h.log("%d keyed message(s) fell due before their cancel; they count as sent" % len(late))

    want = {k: v for k, v in sent.items() if k not in cancelled}
    c.wait_ids(want.keys(), 45 + 60)
    t = h.tally(want, c.quiet(2.0))
    h.log("RESULT drain: %s" % h.tally_line(t))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    back = [m for m in t["unknown"] if m in cancelled]
    check(not back, "%d cancelled message(s) arrived: %s" % (len(back), back[:10]))
    check(not t["unknown"], "unexpected messages: %s" % t["unknown"][:10])
    check(t["duplicates"] == 0, "%d duplicates" % t["duplicates"])
    h.check_none_early(want, t, "drain")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=300)
