#!/usr/bin/python3
"""SIGTERM while messages are held: the bridge exits 0 promptly and nothing
is published early; started again on the same WAL directory, every held
message arrives (once: a clean stop makes no duplicates), none before its
due time, and so does a message published while the bridge was down."""

import time

import harness as h
from harness import check

N = 50
# The SIGTERM must come before the first due time, with room for a loaded
# machine (CI, an ASan daemon).
DELAY_MS = 8000


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    b = ctx.bridge([ctx.route("term", ex)], http={"listen": "127.0.0.1:%d" % port})
    route = b.config["routes"][0]
    p = ctx.publisher()

    sent = {}
    for i in range(N):
        mid = "held-%02d" % i
        sent[mid] = (p.publish(route["ingress_exchange"], "rk", mid.encode(),
                               headers={"x-delay": h.i32(DELAY_MS + 20 * i)}, message_id=mid,
                               delivery_mode=2),
                     DELAY_MS + 20 * i)
    ctx.wait_taken(port, route["ingress_queue"], N, 20)
    time.sleep(0.3)
    check(c.count() == 0, "messages published before their due time, before the SIGTERM")
    t0 = time.monotonic()
    b.stop(expect=0, timeout=15)
    h.log("SIGTERM with %d messages held: exit 0 after %.2fs" % (N, time.monotonic() - t0))
    check(c.count() == 0, "messages published before their due time: %s" % h.summarize(c.snapshot()))

    mid = "while-down"
    sent[mid] = (p.publish(route["ingress_exchange"], "rk", mid.encode(), headers={"x-delay": h.i32(1000)},
                           message_id=mid, delivery_mode=2), 1000)
    time.sleep(0.5)
    b.start()
    c.wait_ids(sent.keys(), DELAY_MS / 1000.0 + h.late_tolerance() + 20)
    msgs = c.quiet(1.0)
    ids = [m.message_id for m in msgs]
    dups = sorted({x for x in ids if ids.count(x) > 1})
    check(not dups, "duplicates after a clean stop: %s" % dups)
    check(set(ids) == set(sent), "unexpected messages: %s" % sorted(set(ids) - set(sent)))
    for m in msgs:
        t_pub, ms = sent[m.message_id]
        took = m.t - t_pub
        check(took >= ms / 1000.0 - h.early_tolerance(),
              "%s arrived EARLY: after %.3fs, due after %.3fs" % (m.message_id, took, ms / 1000.0))
    h.log("all %d messages arrived after the restart, none early" % len(sent))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
