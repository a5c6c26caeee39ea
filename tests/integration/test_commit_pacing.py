#!/usr/bin/python3
"""wal.commit_interval_ms paces the group commit.

A steady trickle of deliveries (one every 10 ms for 3 s) commits at most
once per interval -- 100 ms here: about 30 commits, where commit_interval_ms
0 commits after nearly every delivery (a few hundred); every message is
still delivered, and the ingress queue is left with nothing unacked (every
ack went out once its commit was durable). A burst larger than half the
prefetch does not wait for the interval: the prefetch never stalls intake.
"""
import time

import harness as h
from harness import check

N = 300


def trickle(ctx, name, interval_ms, consumer, ex, before):
    port = h.free_port()
    b = ctx.bridge([ctx.route(name, ex, prefetch=100)], name=name,
                   wal={"commit_interval_ms": interval_ms},
                   http={"listen": "127.0.0.1:%d" % port})
    b.wait_ready()
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()
    c0 = h.stats(port)["wal"]["commits"]
    t0 = time.monotonic()
    for i in range(N):
        p.publish(ingress, "rk", b"%s-%d" % (name.encode(), i), headers={"x-delay": h.i32(0)},
                  message_id="%s-%d" % (name, i))
        wait = t0 + (i + 1) * 0.010 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    consumer.wait_count(before + N, 30)
    secs = time.monotonic() - t0
    commits = h.stats(port)["wal"]["commits"] - c0
    h.log("%s: commit_interval_ms %d: %d commits for %d deliveries in %.2f s"
          % (name, interval_ms, commits, N, secs))
    return b, port, commits, secs


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])

    b, port, commits, secs = trickle(ctx, "paced", 100, c, ex, 0)
    # at most one a 100 ms, plus the one after the last message and its confirms
    check(commits <= secs * 10 + 5,
          "paced: %d commits in %.2f s with commit_interval_ms 100" % (commits, secs))
    # a burst of 4x half the prefetch at once: committed early, all arrive quickly
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()
    t0 = time.monotonic()
    for i in range(200):
        p.publish(ingress, "rk", b"burst", headers={"x-delay": h.i32(0)}, message_id="b-%d" % i)
    c.wait_count(N + 200, 30)
    h.log("paced: a burst of 200 with prefetch 100 arrived in %.2f s" % (time.monotonic() - t0))
    b.stop()
    # a clean stop acks what its last commit covered: nothing went back to the queue
    q = b.config["routes"][0]["ingress_queue"]
    check(ctx.queue_depth(q) == 0, "paced: %d messages back in the ingress queue" % ctx.queue_depth(q))

    b2, port2, commits0, secs0 = trickle(ctx, "unpaced", 0, c, ex, N + 200)
    check(commits0 > 3 * commits,
          "unpaced: %d commits, not clearly more than paced's %d: the test cannot tell them apart"
          % (commits0, commits))
    b2.stop()


if __name__ == "__main__":
    h.run(test, budget_s=120)
