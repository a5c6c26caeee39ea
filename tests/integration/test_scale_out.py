#!/usr/bin/python3
"""Two bridges, one quorum ingress queue, three RabbitMQ nodes: a broker
node and a bridge are lost while messages flow and are held.

The three-node cluster of test_cluster.py (tests/integration/cluster/
cluster.sh, ports DB_TEST_CLUSTER_PORT..+2). Bridges A and B (instance
names "a" and "b", each its own WAL) share one route whose ingress queue is
a quorum queue: they are competing consumers, each holding about half of
the route's messages. A starts on node 1, B on node 2 (their URI lists
start there); the test consumes the quorum target queue on node 3 and
publishes through node 3 (moving on if it goes away).

3000 persistent messages with delays 0-8 s are published over ~6 s; once a
third is confirmed, node 1 is killed (SIGKILL: A's connections drop) and
bridge B is killed with SIGKILL, then restarted 2 s later on its WAL. A
reconnects to another node; B recovers what it had logged. Checked: every
confirmed message arrives, none early (harness tolerance); duplicates are
counted by cause (harness.tally) and bounded: a bridge crash republishes
at most its in-flight window (case 1, max_inflight) and redelivers at most
its unacked prefetch as new copies (case 2; the WAL tail is checked against
redeliveries, so normally 0); a node loss adds the publishes whose confirm
it swallowed. Node 1 rejoins; both bridges exit 0 on SIGTERM.

Skipped (exit 77) when the cluster cannot be formed here.
"""

import random
import time

import harness as h
from harness import check
import test_cluster as tc

N = 3000
MAX_DELAY_MS = 8000
PREFETCH = 200
MAX_INFLIGHT = 200


def test(ctx):
    tc.on_cluster(ctx, run)


def run(ctx, cdir):
    ex, tq = tc.quorum_target(ctx)
    route = ctx.route("so", ex, queue_type="quorum", prefetch=PREFETCH, max_inflight=MAX_INFLIGHT)
    pa, pb = h.free_port(), h.free_port()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   broker={"uri": [tc.uri(1), tc.uri(2), tc.uri(3)], "connect_timeout_ms": 3000})
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   broker={"uri": [tc.uri(2), tc.uri(3), tc.uri(1)], "connect_timeout_ms": 3000})
    c = ctx.consumer([tq])

    rng = random.Random(2026)
    msgs = [("s%04d" % i, rng.randint(0, MAX_DELAY_MS)) for i in range(N)]
    pub = tc.FailoverPublisher(route["ingress_exchange"], msgs, [3, 2, 1], 6.0)
    pub.start()
    deadline = time.monotonic() + 30
    while pub.confirmed() < N // 3:
        check(pub.is_alive(), "publisher stopped early: %r" % pub.error)
        check(time.monotonic() < deadline, "only %d confirmed in 30 s" % pub.confirmed())
        time.sleep(0.05)
    h.log("%d confirmed, %d delivered: killing node 1 (bridge A's) and bridge B"
          % (pub.confirmed(), c.count()))
    tc.cluster(cdir, "kill-node", 1)
    b.kill9()
    time.sleep(2.0)
    b.start(wait_ready=False)

    pub.join(90)
    check(not pub.is_alive() and pub.error is None, "publisher failed: %r" % pub.error)
    h.log("publisher done: %d confirmed, %d unconfirmed, %d reconnects"
          % (len(pub.sent), len(pub.unconfirmed), pub.reconnects))
    b.wait_ready(60)
    a.check_alive()
    c.wait_ids(pub.sent.keys(), MAX_DELAY_MS / 1000.0 + 60)
    c.quiet(2.0)
    t = h.tally(pub.sent.keys(), c.snapshot())
    h.log("RESULT scale-out (2 bridges, node 1 and bridge B killed): %s" % h.tally_line(t))
    per_bridge = {}
    for ms in t["per_id"].values():
        for m in ms:
            inst = (m.bridge_id or "?").split("-")[0]
            per_bridge[inst] = per_bridge.get(inst, 0) + 1
    h.log("deliveries per bridge log id: %s" % per_bridge)
    check(len(per_bridge) >= 2, "one bridge delivered everything: %s" % per_bridge)
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:20]))
    strays = set(t["unknown"]) - pub.unconfirmed
    check(not strays, "never published: %s" % sorted(strays)[:10])
    h.check_none_early(pub.sent, t, "scale-out")
    check(t["max_copies"] <= 2, "a message arrived %d times" % t["max_copies"])
    check(t["case1"] <= 2 * MAX_INFLIGHT + len(pub.unconfirmed),
          "%d republished duplicates" % t["case1"])
    check(t["case2"] <= PREFETCH, "%d redelivered duplicates" % t["case2"])

    tc.wait_rejoined(cdir, 1)
    a.stop()
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=420)
