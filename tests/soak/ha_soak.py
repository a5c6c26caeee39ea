#!/usr/bin/python3
"""ha_soak -- an owner and a standby on one replicated log, for minutes,
against a broker whose consumer timeout is short, the owner killed again
and again.

What a short test never meets: RabbitMQ's delivery acknowledgement timeout
(consumer_timeout, 30 min by default) applies to the lease token a bridge
keeps unacked, and the broker checks it about once a minute. This soak
starts a broker of its own with consumer_timeout = 5000 (--consumer-
timeout-ms), two bridges A and B on one stream and one lease queue
(wal.replicate, lease_renew_ms 1000), and for --minutes:

  - publishes steadily (--rate per second) with delays of 1..40 s; a
    quarter of the messages are keyed, and each key is published again
    0.3..2 s later with a new body: the first version must never arrive;
  - every --kill-every seconds (jittered +-25 %) kill -9's whichever bridge
    owns the log, times the takeover (kill -> the other's "ready"), and
    starts the killed one again on its intact WAL directory (a standby);
  - watches that no bridge exits by itself (a lease the broker took back
    shows as "replication failed ... delivery acknowledgement timed out").

Then it waits for everything due and reports sent, delivered, lost, early,
replaced-delivered, duplicates by kind, takeovers and their times, and the
RSS of each bridge process at its start and at its end. Fails on: a loss, an
early or replaced message, an exit nobody asked for, a takeover that did not
happen, RSS of a process that ran the longest growing past 2x + 16 MiB.

Duplicates are reported, not failed: a kill -9 during firing means a message
published to its target whose DONE was not yet durable fires again from the
new owner (README "Delivery guarantees", case 1/2).

  tests/soak/ha_soak.py --minutes 10                   # the README's run
  tests/soak/ha_soak.py --minutes 2 --kill-every 50    # the suite's (ctest -L soak)
  tests/soak/ha_soak.py --minutes 30 --kill-every 1200 --rss-log rss.txt   # RSS over 30 min

--rss-log FILE writes, every --rss-every seconds (30), each bridge process's
VmRSS and its split into the main heap ([heap]), other anonymous memory
(thread arenas, stacks) and file mappings (README "RSS over 30 minutes").

Environment: DB_BRIDGE_BIN (the daemon), DB_SOAK_PORT (AMQP port of the
soak's own broker, default 5697; the distribution port is +20000).
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness as h  # noqa: E402
from harness import check  # noqa: E402

RABBITMQ_SH = os.path.join(HERE, "..", "integration", "rabbitmq.sh")


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def mem_kb(pid):
    """(VmRSS, [heap] Rss, other anonymous Rss, file Rss) of a process in KiB,
    from /proc/PID/status and /proc/PID/smaps: the main arena (brk heap) apart
    from anonymous mappings (thread arenas, stacks, large mallocs) and files."""
    rss = rss_kb(pid)
    heap = anon = fil = 0
    try:
        with open("/proc/%d/smaps" % pid) as f:
            kind = None
            for line in f:
                w = line.split()
                if "-" in w[0] and not w[0].endswith(":"):
                    name = w[5] if len(w) > 5 else ""
                    kind = "heap" if name == "[heap]" else (
                        "file" if name.startswith("/") else "anon")
                elif w[0] == "Rss:":
                    if kind == "heap":
                        heap += int(w[1])
                    elif kind == "file":
                        fil += int(w[1])
                    else:
                        anon += int(w[1])
    except (OSError, IndexError, ValueError):
        pass
    return rss, heap, anon, fil


class RssLog(threading.Thread):
    """Every `every` s, one line per live bridge process to `path`:
    seconds since the start, who, pid, VmRSS, heap, other anon, file (KiB)."""

    def __init__(self, path, every, pids):
        super().__init__(daemon=True)
        self.path, self.every, self.pids = path, every, pids
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self):
        with open(self.path, "w") as f:
            f.write("# t_s who pid vmrss_kb heap_kb anon_kb file_kb\n")
            while not self.stop.is_set():
                for who, pid in sorted(self.pids().items()):
                    r = mem_kb(pid)
                    if r[0]:
                        f.write("%.0f %s %d %d %d %d %d\n" % ((time.monotonic() - self.t0, who, pid)
                                                              + r))
                f.flush()
                self.stop.wait(self.every)


def repl_state(port):
    try:
        return h.stats(port)["wal"]["replication"]["state"]
    except Exception:
        return None


def wait_state(port, want, timeout, who):
    deadline = time.monotonic() + timeout
    while True:
        s = repl_state(port)
        if s == want:
            return
        check(time.monotonic() < deadline, "%s never became %s (state %s)" % (who, want, s))
        time.sleep(0.05)


class Load(threading.Thread):
    """Publishes at a steady rate until stopped; keyed messages get a second version."""

    def __init__(self, route, rate, rng, body_bytes=200):
        super().__init__(daemon=True)
        self.route = route
        self.rate = rate
        self.body = b"v" * body_bytes
        self.rng = rng
        self.stop = threading.Event()
        self.sent = {}        # message_id -> (time before publish, delay ms)
        self.replaced = set()  # first versions, never to arrive
        self.error = None
        self.max_delay_ms = 40000

    def run(self):
        try:
            p = h.Publisher(retry_s=10)
            seq = 0
            pending = []  # (when, key, first message id)
            t_next = time.monotonic()
            while not self.stop.is_set():
                now = time.monotonic()
                if now < t_next:
                    time.sleep(min(0.05, t_next - now))
                    continue
                t_next += 1.0 / self.rate
                seq += 1
                mid = "s%07d" % seq
                hdrs = {}
                if pending and pending[0][0] <= now:
                    _, key, first = pending.pop(0)
                    ms = self.rng.randint(1000, 20000)
                    hdrs["x-delay-key"] = h.lstr(key)
                    self.replaced.add(first)
                elif self.rng.random() < 0.25:
                    ms = self.rng.randint(10000, self.max_delay_ms)  # still held when replaced
                    key = "k%07d" % seq
                    hdrs["x-delay-key"] = h.lstr(key)
                    pending.append((now + self.rng.uniform(0.3, 2.0), key, mid))
                else:
                    ms = self.rng.randint(1000, self.max_delay_ms)
                hdrs["x-delay"] = h.i32(ms)
                self.sent[mid] = (p.publish(self.route["ingress_exchange"], "rk", self.body,
                                            headers=hdrs, message_id=mid, delivery_mode=2), ms)
            p.close()
        except BaseException as e:  # noqa: B902 -- reported by the main thread
            self.error = e


class Proc(object):
    """RSS at a bridge process's start (once it stands by or is ready) and end."""

    def __init__(self, who, pid):
        self.who, self.pid = who, pid
        self.t0 = time.monotonic()
        self.rss0 = rss_kb(pid)
        self.rss1 = self.rss0
        self.t1 = self.t0

    def sample(self):
        r = rss_kb(self.pid)
        if r:
            self.rss1, self.t1 = r, time.monotonic()


def soak(ctx, args):
    rng = random.Random(args.seed)
    route, c, wal = ctx.replicated("soak", checkpoint_mb=2, max_mb=0,
                                   lease_renew_ms=args.renew_ms)
    ports = {"a": h.free_port(), "b": h.free_port()}
    br = {}
    for who in ("a", "b"):
        br[who] = ctx.bridge([route], name=who, instance=who, start=False, wal=wal,
                             http={"listen": "127.0.0.1:%d" % ports[who]},
                             broker={"heartbeat_s": 5})
    procs = []
    br["a"].start()
    wait_state(ports["a"], "owner", 30, "A")
    procs.append(Proc("a", br["a"].proc.pid))
    br["b"].start(wait_ready=False)
    wait_state(ports["b"], "standby", 30, "B")
    procs.append(Proc("b", br["b"].proc.pid))
    h.log("A owns the log, B stands by; broker consumer_timeout %d ms, lease renewed every "
          "%d ms" % (args.consumer_timeout_ms, args.renew_ms))

    rsslog = None
    if args.rss_log:
        rsslog = RssLog(args.rss_log, args.rss_every,
                        lambda: {w: br[w].proc.pid for w in ("a", "b") if br[w].alive()})
        rsslog.start()
    load = Load(route, args.rate, rng, args.body_bytes)
    load.start()
    t_start = time.monotonic()
    t_end = t_start + args.minutes * 60.0
    next_kill = t_start + args.kill_every * rng.uniform(0.75, 1.25)
    takeovers, kills = [], 0

    def current(p):
        return [x for x in procs if x.pid == br[p].proc.pid][-1]

    while time.monotonic() < t_end:
        check(load.error is None, "publisher failed: %r" % load.error)
        for who in ("a", "b"):
            if not br[who].alive():
                errors = [ln for ln in br[who].log_text().splitlines() if "level=error" in ln]
                check(False, "%s exited by itself (code %s) after %.0f s: %s" % (
                    who.upper(), br[who].proc.returncode, time.monotonic() - t_start,
                    errors[-3:]))
            current(who).sample()
        if time.monotonic() >= next_kill:
            owner = [w for w in ("a", "b") if repl_state(ports[w]) == "owner"]
            check(len(owner) == 1, "owners: %s" % owner)
            o = owner[0]
            other = "b" if o == "a" else "a"
            current(o).sample()
            br[o].kill9()
            kills += 1
            t0 = time.monotonic()
            br[other].wait_log('msg="ready"', 60, "ready after the owner's kill")
            took = time.monotonic() - t0
            takeovers.append(took)
            h.log("kill %d: %s killed, %s ready after %.2f s" % (kills, o.upper(), other.upper(),
                                                                took))
            br[o].start(wait_ready=False)
            wait_state(ports[o], "standby", 60, o.upper())
            procs.append(Proc(o, br[o].proc.pid))
            next_kill = time.monotonic() + args.kill_every * rng.uniform(0.75, 1.25)
        time.sleep(0.2)

    load.stop.set()
    load.join(30)
    check(load.error is None, "publisher failed: %r" % load.error)
    for who in ("a", "b"):
        check(br[who].alive(), "%s exited by itself at the end" % who.upper())
        current(who).sample()
    want = {k: v for k, v in load.sent.items() if k not in load.replaced}
    h.log("published %d (%d first versions replaced); waiting for everything due"
          % (len(load.sent), len(load.replaced)))
    try:
        c.wait_ids(want.keys(), load.max_delay_ms / 1000.0 + 60)
    except h.TestFailure:
        pass  # the tally below names what is missing
    msgs = c.quiet(2.0)
    t = h.tally(want, msgs)
    replaced_delivered = sorted(set(t["unknown"]) & load.replaced)
    early = [mid for mid, (t0, ms) in want.items() if mid in t["per_id"] and
             min(m.t for m in t["per_id"][mid]) - t0 < ms / 1000.0 - h.early_tolerance()]
    for who in ("a", "b"):
        current(who).sample()
        br[who].stop()
    if rsslog:
        rsslog.stop.set()

    h.log("SOAK RESULT minutes=%.1f consumer_timeout_ms=%d lease_renew_ms=%d sent=%d "
          "delivered=%d lost=%d early=%d replaced_delivered=%d duplicates=%d (case 1 republish: "
          "%d; case 2 redelivery: %d) takeovers=%d kills=%d"
          % (args.minutes, args.consumer_timeout_ms, args.renew_ms, len(load.sent),
             t["delivered"], len(t["lost"]), len(early), len(replaced_delivered),
             t["duplicates"], t["case1"], t["case2"], len(takeovers), kills))
    if takeovers:
        h.log("SOAK takeover seconds: min %.2f median %.2f max %.2f"
              % (min(takeovers), statistics.median(takeovers), max(takeovers)))
    for p in procs:
        h.log("SOAK rss %s pid %d: %d KiB at start, %d KiB after %.0f s"
              % (p.who.upper(), p.pid, p.rss0, p.rss1, p.t1 - p.t0))
    check(not t["lost"], "%d lost: %s" % (len(t["lost"]), t["lost"][:10]))
    check(not early, "%d early: %s" % (len(early), early[:10]))
    check(not replaced_delivered, "%d replaced message(s) arrived: %s"
          % (len(replaced_delivered), replaced_delivered[:10]))
    check(not (set(t["unknown"]) - load.replaced), "unexpected: %s" % t["unknown"][:10])
    check(len(takeovers) == kills and kills >= 1, "kills %d, takeovers %d" % (kills, len(takeovers)))
    longest = max(procs, key=lambda p: p.t1 - p.t0)
    check(longest.rss1 <= 2 * longest.rss0 + 16384,
          "RSS of %s grew from %d to %d KiB in %.0f s" % (longest.who.upper(), longest.rss0,
                                                         longest.rss1, longest.t1 - longest.t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--kill-every", type=float, default=150.0, help="seconds between owner kills")
    ap.add_argument("--rate", type=float, default=40.0, help="messages per second")
    ap.add_argument("--body-bytes", type=int, default=200, help="bytes of each message's body")
    ap.add_argument("--consumer-timeout-ms", type=int, default=5000)
    ap.add_argument("--renew-ms", type=int, default=1000, help="wal.replicate.lease_renew_ms")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rss-log", default=None,
                    help="write every bridge process's RSS (VmRSS, heap, anon, file) to this file")
    ap.add_argument("--rss-every", type=float, default=30.0, help="seconds between RSS samples")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    port = int(os.environ.get("DB_SOAK_PORT", "5697"))
    bdir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "db-soak-broker-%d" % port)
    uri = "amqp://guest:guest@127.0.0.1:%d/%%2f" % port
    os.environ["DB_TEST_BROKER_URI"] = uri
    os.environ["DB_TEST_BROKER_DIR"] = bdir
    env = dict(os.environ, DB_RABBITMQ_CONF_EXTRA="consumer_timeout = %d" % args.consumer_timeout_ms)
    subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], env=env, check=False)
    subprocess.run(["rm", "-rf", os.path.join(bdir, "mnesia")], check=False)
    h.log("ha_soak: seed %d, %.1f min, kill every ~%.0f s, %.0f msg/s; broker %s"
          % (args.seed, args.minutes, args.kill_every, args.rate, uri))
    subprocess.run(["bash", RABBITMQ_SH, "start", bdir, str(port), str(port + 20000)], env=env,
                   check=True)
    ctx = h.Ctx("ha-soak")
    rc = 1
    try:
        soak(ctx, args)
        rc = 0
    except BaseException as e:  # noqa: B902
        h.report(ctx, e)
    finally:
        try:
            ctx.cleanup(rc == 0)
        finally:
            subprocess.run(["bash", RABBITMQ_SH, "stop", bdir], env=env, check=False)
    h.log("ha_soak: %s (seed %d)" % ("PASS" if rc == 0 else "FAIL", args.seed))
    sys.stdout.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
