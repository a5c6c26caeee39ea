#!/usr/bin/python3
"""A redelivery recognised on a connection that is then lost before its ack
is recognised again (a regression test: integration.broker4, disk_full on
RabbitMQ 4.3.6, stored 918 messages twice. A quorum queue's consumer
timeout redelivered deliveries that had waited in the stash on the same
connection; the bridge recognised them as logged, then the queue's cancel
dropped the connection before their acks; delivered once more, they
matched nothing: eng_seen had used their fingerprints up for good.)

The same shape, made certain with two failpoints on one route with
share_keys (a recognised keyed redelivery sends its key event again and
holds its ack until the broker confirms it):

1. run 1, armed with bridge.before_ack:1, logs one keyed message (due in
   1 s) and dies before its ack: the broker delivers it again;
2. run 2, armed with keys.event_unconfirmed:1, recognises the redelivery
   (deduplicated 1); its key event is lost, so its ack waits; the message
   fires; 5 s later the event's confirm timeout drops the consumer
   connection, and the broker delivers the message a third time.

Before the fix run 2 stored it again (received 1) and the target got it
twice, under two bridge ids. Now run 2 recognises it again (deduplicated
2, received 0) and the target gets it once.
"""

import time

import harness as h
from harness import check


def test(ctx):
    h.use_failpoint_bridge()
    ex, qs = ctx.target("srec", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("srec", ex, share_keys=True, prefetch=50)
    ctx.queues.add(route["ingress_queue"] + ".keys.s")
    ctx.exchanges.add(route["ingress_exchange"] + ".keys")
    port = h.free_port()
    b = ctx.bridge([route], name="s", instance="s", http={"listen": "127.0.0.1:%d" % port},
                   start=False)
    b.start(env={"DELAY_BRIDGE_FAILPOINT": "bridge.before_ack:1"})
    p = ctx.publisher()
    p.publish(route["ingress_exchange"], "rk", b"once", message_id="m1", delivery_mode=2,
              headers={"x-delay": h.i32(1000), "x-delay-key": h.lstr("K")})
    rc = b.wait_exit(20, "run 1 did not reach bridge.before_ack")
    check(rc == -9, "run 1 exited with %s, not by its failpoint's SIGKILL" % rc)
    h.log("run 1 logged the message and died before its ack")

    b.start(env={"DELAY_BRIDGE_FAILPOINT": "keys.event_unconfirmed:1"})
    b.wait_log("a key event went unconfirmed", 20, "the lost key event noticed")
    h.wait_progress(lambda: sum(h.stats(port)["routes"][0][k] for k in ("deduplicated",
                                                                        "received")), 2, 20,
                    lambda n: "the third delivery not taken (%d of 2)" % n)
    r = h.stats(port)["routes"][0]
    h.log("run 2: deduplicated %d, received %d" % (r["deduplicated"], r["received"]))
    c.wait_ids(["m1"], 20)
    time.sleep(2.0)  # a copy stored again would be due 1 s after its receipt
    t = h.tally(["m1"], c.quiet(1.0))
    h.log("RESULT seen_reconnect: %s" % h.tally_line(t))
    check(not t["lost"], "lost: %s" % t["lost"])
    check(t["case2"] == 0, "%d message(s) stored twice from a redelivery" % t["case2"])
    check(r["received"] == 0 and r["deduplicated"] == 2, "run 2 stored a redelivery of a "
          "logged message (received %d, deduplicated %d)" % (r["received"], r["deduplicated"]))
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
