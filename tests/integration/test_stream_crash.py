#!/usr/bin/python3
"""kill -9 loses nothing on a stream ingress (queue_type "stream"), where
the broker keeps every message and the bridge's place file
(<wal.dir>/ingress-<route>.offset) says where to read on. 3000 messages
with delays spread over 0..5 s are published (with publisher confirms)
while the bridge runs with prefetch 500; the bridge is killed with SIGKILL
after 1000 and after 2000 publishes and once more while messages are held,
and restarted on the same WAL directory each time (publishing goes on
while it recovers). Every published message arrives, none before its due
time, no message nobody published, and none stored twice: a kill between
the log's fsync and the place file's write reads those messages again, and
the restart recognises them (the place file's "upto"), so the only
duplicates allowed are republishes under the same x-delay-bridge-id
(delivery is at-least-once, as in test_crash). At the end /stats
routes[0].stream_offset is 3000 (every offset read, none past the stream's
end) and the place file is 32 bytes."""

import os

import harness as h
from harness import check

N = 3000
MAX_DELAY_MS = 5000
PREFETCH = 500


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = h.free_port()
    route = ctx.route("scrash", ex, queue_type="stream", prefetch=PREFETCH)
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    ingress = route["ingress_exchange"]
    place = os.path.join(b.config["wal"]["dir"], "ingress-%s.offset" % route["name"])
    p = ctx.publisher()
    sent, kills = h.publish_killing(b, c, p, ingress, N, MAX_DELAY_MS, 20261126, "s")

    c.wait_ids(sent.keys(), MAX_DELAY_MS / 1000.0 + 60)
    msgs = c.quiet(1.5)
    t = h.tally(sent.keys(), msgs)
    h.log("after %d kills: %s" % (kills, h.tally_line(t)))
    check(not t["unknown"], "messages nobody published arrived: %s" % t["unknown"][:10])
    check(not t["lost"], "%d published message(s) never arrived: %s" % (len(t["lost"]), t["lost"][:20]))
    h.check_none_early(sent, t, "after %d kills" % kills)
    missing_bid = [k for k, v in t["per_id"].items() if not all(m.bridge_id for m in v)]
    check(not missing_bid, "deliveries without x-delay-bridge-id: %s" % missing_bid[:10])
    dups = sorted(k for k, v in t["per_id"].items() if len(v) > 1)
    if dups:
        h.log("duplicated: %s%s" % (", ".join("%s x%d" % (k, len(t["per_id"][k])) for k in dups[:20]),
                                     " ..." if len(dups) > 20 else ""))
    stored_twice = [k for k in dups if len({m.bridge_id for m in t["per_id"][k]}) > 1]
    check(not stored_twice, "%d message(s) stored twice (different x-delay-bridge-id): %s -- a "
          "message read again after a kill was not recognised" % (len(stored_twice), stored_twice[:10]))
    h.log("%d duplicate(s), all republishes under the same x-delay-bridge-id" % t["duplicates"])

    # What each restart read from (the place file) and whether a commit was cut short.
    for n, path in enumerate(b.logs, 1):
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                if "reading the stream ingress" in line or "may have been cut short" in line:
                    h.log("run %d: %s" % (n, line[line.index("msg="):]))

    off = h.stats(port)["routes"][0].get("stream_offset", "<absent>")
    check(off == N, "/stats routes[0].stream_offset is %r after all %d were read, expected %d"
          % (off, N, N))
    check(os.path.getsize(place) == 32, "the place file is %d bytes, not 32" % os.path.getsize(place))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=240)
