#!/usr/bin/python3
"""kill -9 loses nothing the bridge acknowledged. 3000 messages with delays
spread over 0..5 s are published (with publisher confirms) while the bridge
runs; the bridge is killed with SIGKILL after 1000 and after 2000 publishes
and once more while messages are held, and restarted on the same WAL
directory each time. Every published message arrives, none stored twice
from a redelivery (duplicates allowed only under the same id:
delivery is at-least-once; they are counted and must carry the same
x-delay-bridge-id), none before its due time."""

import collections

import harness as h
from harness import check

N = 3000
MAX_DELAY_MS = 5000


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    b = ctx.bridge([ctx.route("crash", ex, prefetch=500)])
    ingress = b.config["routes"][0]["ingress_exchange"]
    p = ctx.publisher()
    sent, kills = h.publish_killing(b, c, p, ingress, N, MAX_DELAY_MS, 20261122, "c")

    c.wait_ids(sent.keys(), MAX_DELAY_MS / 1000.0 + 60)
    msgs = c.quiet(1.0)
    per_id = collections.defaultdict(list)
    for m in msgs:
        per_id[m.message_id].append(m)
    unknown = sorted(set(per_id) - set(sent))
    check(not unknown, "messages nobody published arrived: %s" % unknown[:10])
    missing = sorted(set(sent) - set(per_id))
    check(not missing, "%d published message(s) never arrived: %s" % (len(missing), missing[:20]))

    dups = {k: v for k, v in per_id.items() if len(v) > 1}
    ndup = sum(len(v) - 1 for v in dups.values())
    h.log("%d deliveries for %d messages after %d kills: %d duplicate(s) of %d message(s)" % (
        len(msgs), N, kills, ndup, len(dups)))
    early = []
    for mid, ms in ((k, v[1]) for k, v in sent.items()):
        first = min(m.t for m in per_id[mid])
        if first - sent[mid][0] < ms / 1000.0 - h.early_tolerance():
            early.append("%s after %.3fs, due %.3fs" % (mid, first - sent[mid][0], ms / 1000.0))
    check(not early, "%d message(s) arrived before their due time: %s" % (len(early), early[:10]))
    diff_id = ["%s: %s" % (k, sorted({m.bridge_id for m in v})) for k, v in dups.items()
               if len({m.bridge_id for m in v}) != 1]
    # README "Delivery guarantees": a copy under the SAME bridge id is case 1
    # (crash between the broker's confirm and the DONE record: published
    # again, at least once). A copy under a DIFFERENT id would be a redelivery
    # stored twice (case 2), which the bridge recognises by fingerprint and
    # acks without storing: there must be none.
    same_id = ndup - sum(len({m.bridge_id for m in v}) - 1 for v in dups.values())
    h.log("duplicates by cause: %d republished after confirm (case 1, same id), %d stored "
          "twice from a redelivery (case 2, must be 0)" % (same_id, len(diff_id)))
    check(not diff_id, "%d redelivered message(s) stored twice under different ids: %s" % (
        len(diff_id), diff_id[:5]))
    missing_bid = [k for k, v in per_id.items() if not all(m.bridge_id for m in v)]
    check(not missing_bid, "deliveries without x-delay-bridge-id: %s" % missing_bid[:10])
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
