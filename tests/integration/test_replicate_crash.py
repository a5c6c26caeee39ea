#!/usr/bin/python3
"""A replicating bridge killed again and again under load, each start
resuming on its log from the running REPLICA note when it may.

One bridge with wal.replicate; a publisher thread sends as fast as its
confirms come back, with delays of 0.5-6 s (a fifth keyed with 5-6 s, each
key sent again 0.2 s later: the first version never to arrive). The bridge is killed with SIGKILL eight times at
random moments 1.5-4 s apart and started again each time on its intact
WAL directory. A kill lands between a local fsync and the stream's
confirm as often as not: then the local log has records the stream never
confirmed, and the start must read the whole stream instead of resuming
(the log line says which). Both kinds of start are counted.

Checked: nothing acked is lost, none early, no replaced version arrives.
Duplicates are reported by kind: a message being published to its target
when the bridge was killed is published again (case 1), a delivery the
bridge had logged but not acked comes back from the ingress (case 2).
"""

import random
import threading
import time

import harness as h
from harness import check

KILLS = 8


def test(ctx):
    rng = random.Random()
    route, c, wal = ctx.replicated("rc", max_mb=0, checkpoint_mb=1)
    a = ctx.bridge([route], name="a", instance="a", wal=wal, broker={"heartbeat_s": 5})

    sent, replaced, stop = {}, set(), threading.Event()
    errors = []

    def load():
        try:
            p = h.Publisher(retry_s=10)
            i, pending = 0, []
            while not stop.is_set():
                i += 1
                mid = "c%06d" % i
                ms = rng.randint(500, 6000)
                hdrs = {"x-delay": h.i32(ms)}
                now = time.monotonic()
                if pending and pending[0][0] <= now:  # the second version of a key
                    _, key, first = pending.pop(0)
                    hdrs["x-delay-key"] = h.lstr(key)
                    replaced.add(first)
                elif i % 5 == 0:  # long enough to be held still when replaced, kills or not
                    ms = rng.randint(5000, 6000)
                    hdrs = {"x-delay": h.i32(ms), "x-delay-key": h.lstr("k%06d" % i)}
                    pending.append((now + 0.2, "k%06d" % i, mid))
                sent[mid] = (p.publish(route["ingress_exchange"], "rk", b"c" * 100, headers=hdrs,
                                       message_id=mid, delivery_mode=2), ms)
            p.close()
        except BaseException as e:  # noqa: B902
            errors.append(e)

    th = threading.Thread(target=load, daemon=True)
    th.start()
    resumed = rebuilt = 0
    for k in range(KILLS):
        time.sleep(rng.uniform(1.5, 4.0))
        check(not errors, "publisher: %r" % errors)
        a.kill9()
        a.start(wait_ready=True, timeout=60)
        text = a.log_text()
        if "resumed on the intact local log" in text:
            resumed += 1
        elif "local log rebuilt from the stream" in text:
            rebuilt += 1
        h.log("kill %d: %s" % (k + 1, "resumed" if "resumed on the intact" in text else "rebuilt"))
    time.sleep(1.0)
    stop.set()
    th.join(20)
    check(not errors, "publisher: %r" % errors)
    want = {m: v for m, v in sent.items() if m not in replaced}
    c.wait_ids(want.keys(), 6 + 60)
    t = h.tally(want, c.quiet(2.0))
    h.log("RESULT replicate_crash: %d kills, %d starts resumed on the log, %d rebuilt from the "
          "stream; %s" % (KILLS, resumed, rebuilt, h.tally_line(t)))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    back = sorted(set(t["unknown"]) & replaced)
    check(not back, "%d replaced message(s) arrived: %s" % (len(back), back[:10]))
    check(not (set(t["unknown"]) - replaced), "unexpected: %s" % t["unknown"][:10])
    h.check_none_early(want, t, "replicate_crash")
    check(resumed + rebuilt == KILLS, "starts: %d resumed + %d rebuilt of %d" % (resumed, rebuilt,
                                                                                 KILLS))
    a.stop()


if __name__ == "__main__":
    h.run(test, budget_s=200)
