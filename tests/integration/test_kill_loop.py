#!/usr/bin/python3
"""kill -9 at random moments, many times: nothing the broker confirmed to
the publisher is lost.

A publisher thread publishes with confirms into the ingress the whole time
(delays 0-3 s, so messages keep falling due) while the bridge is started
and, 50-400 ms later (at a random moment: recovering, connecting, consuming,
committing, publishing), killed with SIGKILL; DB_KILL_LOOP_N times (default
50). After the last kill a final clean start; once everything due has
arrived the test prints sent, delivered, lost and duplicates by cause
(README "Delivery guarantees": the same x-delay-bridge-id twice is case 1, a
republish after a crash cut off its DONE record; different bridge ids for
one message_id is case 2, a redelivery of a message committed but not
acked). Lost must be 0, and nothing may arrive before its due time.

The default keeps the test under about 90 s. A long variant, run by hand
(ctest's TIMEOUT is 300 s), e.g. 1000 kills at about 0.5 s each:

  DB_KILL_LOOP_N=1000 DB_BRIDGE_BIN=build/delay-bridge \
  DB_TEST_BROKER_URI=amqp://guest:guest@127.0.0.1:5681/%2f \
  /usr/bin/python3 tests/integration/test_kill_loop.py

(DB_KILL_LOOP_SEED=S repeats a run's random sleeps and delays.)
"""

import os
import random
import time

import harness as h
import harness_load as hl
from harness import check

N = int(os.environ.get("DB_KILL_LOOP_N", "50"))
SEED = int(os.environ.get("DB_KILL_LOOP_SEED", str(random.randrange(1 << 30))))
MAX_DELAY_MS = 3000


def message(i, rng):
    """The feeder's i-th message: due in 0..MAX_DELAY_MS."""
    ms = rng.randint(0, MAX_DELAY_MS)
    mid = "k%06d" % i
    return mid, mid.encode(), ms


def test(ctx):
    h.log("kill loop: %d kills, seed %d (DB_KILL_LOOP_SEED to repeat)" % (N, SEED))
    rng = random.Random(SEED)
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("loop", ex)
    b = ctx.bridge([route])  # started once and ready: the ingress exists before publishing
    feeder = hl.Feeder(route["ingress_exchange"], message, rng.randrange(1 << 30), pause_s=0.004)
    feeder.start()

    running_kills = 0
    t0 = time.monotonic()
    for i in range(N):
        if i:
            b.start(wait_ready=False)
        time.sleep(rng.uniform(0.05, 0.4))
        check(feeder.error is None, "publisher failed: %r" % (feeder.error,))
        running_kills += 'msg="ready"' in b.log_text()
        b.kill9()  # fails the test if the bridge died by itself
    h.log("%d kills in %.1fs (%d after the bridge was ready, %d while starting or "
          "recovering); %d messages confirmed so far" % (
              N, time.monotonic() - t0, running_kills, N - running_kills, len(feeder.snapshot())))

    b.start(timeout=60)  # the final clean start
    time.sleep(1.0)  # it takes new messages too
    feeder.stop_flag.set()
    feeder.join(30)
    check(feeder.error is None, "publisher failed: %r" % (feeder.error,))
    sent = feeder.snapshot()
    c.wait_ids(sent.keys(), MAX_DELAY_MS / 1000.0 + 90)
    t = h.tally(sent, c.quiet(1.5))
    h.log("RESULT kill loop (%d kills): %s" % (N, h.tally_line(t)))
    print("kill loop: kills=%d sent=%d delivered=%d lost=%d duplicates=%d case1_republish=%d "
          "case2_redelivery=%d" % (N, t["sent"], t["delivered"], len(t["lost"]), t["duplicates"],
                                   t["case1"], t["case2"]))
    check(not t["unknown"], "messages nobody published arrived: %s" % t["unknown"][:10])
    check(not t["lost"], "%d confirmed message(s) lost after %d kills: %s" % (
        len(t["lost"]), N, t["lost"][:20]))
    early = []
    for mid, (t_pub, ms) in sent.items():
        first = min(m.t for m in t["per_id"][mid])
        if first - t_pub < ms / 1000.0 - h.early_tolerance():
            early.append("%s after %.3fs, due %.3fs" % (mid, first - t_pub, ms / 1000.0))
    check(not early, "%d message(s) arrived before their due time: %s" % (len(early), early[:10]))
    nobid = [k for k, v in t["per_id"].items() if not all(m.bridge_id for m in v)]
    check(not nobid, "deliveries without x-delay-bridge-id: %s" % nobid[:10])
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=max(240, 90 + 2 * N))
