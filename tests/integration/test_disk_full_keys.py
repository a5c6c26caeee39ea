#!/usr/bin/python3
"""Keys across bridges while one bridge's WAL disk is full (a regression
test: tests/soak/chaos_soak.py, seed 2, delivered three replaced versions).

Bridges A and B share a route with share_keys. B alone runs first and takes
version 1 of key K (due in 14 s); then B's WAL disk (a small tmpfs, root
only: skipped otherwise) fills with held messages, and B stops taking new
ones. A starts and takes version 2 of K, and tells B (a key event on the
route's key-event queue).

Before the fix, B closed its whole consumer connection on a full disk, so
the event waited in B's key-event queue while B fired version 1 at its due
time: a replaced version delivered. Now B cancels only its ingress
consumers: it applies the event at once (the CANCEL is written in the
room the log keeps for such records: the space reserve, wal_space.c; the
message no longer fires), and acks it once it is durable.

The volume is 10 MiB with 3 MiB of filler: the log keeps 2 MiB in reserve
and pauses intake a segment plus the in-flight window before it.

Checked: version 1 never arrives (not during the full disk, not after),
version 2 arrives once and not early, the fill messages all arrive, B
logged the disk full and the space again, and applied A's event.
"""

import os
import time

import harness as h
from harness import check

BODY = 150 * 1024


def test(ctx):
    h.on_tmpfs(ctx, 10, lambda fs, filler: run(ctx, fs, filler), filler_mb=3)


def run(ctx, fs, filler):
    ex, qs = ctx.target("dfk", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("dfk", ex, share_keys=True, prefetch=20)
    ctx.queues.update([route["ingress_queue"] + ".keys.a", route["ingress_queue"] + ".keys.b"])
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    pa, pb = h.free_port(), h.free_port()
    b = ctx.bridge([route], name="b", instance="b", http={"listen": "127.0.0.1:%d" % pb},
                   start=False)
    b.config["wal"] = {"dir": os.path.join(fs, "wal"), "segment_mb": 1, "fsync": True}
    b.rewrite_config()
    b.start()
    a = ctx.bridge([route], name="a", instance="a", http={"listen": "127.0.0.1:%d" % pa},
                   start=False)
    p = ctx.publisher()
    ing = route["ingress_exchange"]
    sent = {}

    # B alone: version 1 of K.
    sent["k.v1"] = (p.publish(ing, "rk", b"v1", headers={"x-delay": h.i32(14000),
                                                          "x-delay-key": h.lstr("K")},
                              message_id="k.v1", delivery_mode=2), 14000)
    ctx.wait_taken(pb, route["ingress_queue"], 1, 10)
    check(h.stats(pb)["held"] == 1, "B does not hold version 1")

    # Fill B's disk: more than it holds, due well after the episode.
    for i in range(30):
        mid = "fill-%02d" % i
        sent[mid] = (p.publish(ing, "rk", b"f" * BODY, headers={"x-delay": h.i32(30000)},
                               message_id=mid, delivery_mode=2), 30000)
    b.wait_log("consuming paused", 20, "a full disk")
    h.log("B's disk is full; A starts and takes version 2")

    # A takes version 2 of K (B takes nothing new) and tells B.
    a.start()
    sent["k.v2"] = (p.publish(ing, "rk", b"v2", headers={"x-delay": h.i32(6000),
                                                          "x-delay-key": h.lstr("K")},
                              message_id="k.v2", delivery_mode=2), 6000)
    h.wait_progress(lambda: h.stats(pb)["routes"][0]["key_events_applied"], 1, 15,
                    lambda n: "B applied no key event while its disk was full (A sent %d)"
                    % h.stats(pa)["routes"][0]["key_events_sent"])
    check(h.stats(pb)["wal"]["intake_paused"] is True, "B's intake is no longer paused")

    # Past version 1's due time, the disk still full: version 1 must not fire.
    due_v1 = sent["k.v1"][0] + 14.0
    while time.monotonic() < due_v1 + 2.0:
        check("k.v1" not in {m.message_id for m in c.snapshot()},
              "version 1 (replaced while B's disk was full) arrived")
        b.check_alive()
        time.sleep(0.2)
    h.log("version 1 did not fire past its due time; freeing B's disk")

    os.unlink(filler)
    b.wait_log("space again", 30, "space again")
    want = {k: v for k, v in sent.items() if k != "k.v1"}
    c.wait_ids(want.keys(), 60)
    t = h.tally(want, c.quiet(1.5))
    h.log("RESULT disk_full_keys: %s" % h.tally_line(t))
    check(not t["lost"], "lost: %s" % sorted(t["lost"])[:10])
    check("k.v1" not in t["unknown"], "version 1 arrived after the disk had room again")
    check(not t["unknown"], "unexpected: %s" % t["unknown"][:10])
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    h.check_none_early(want, t, "disk_full_keys")
    a.stop()
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=180)
