#!/usr/bin/python3
"""A broker memory alarm (connection.blocked) while messages are held and
falling due. Needs a broker this suite owns (DB_TEST_BROKER_DIR: the test
runs rabbitmqctl); skipped otherwise.

Before the alarm (it blocks every publishing connection, the test's own
too): batch A, 800 messages of 16 KiB with delays 4-14 s, is published to
the ingress exchange and taken by the bridge; batch B, 200 messages with
delays 1-4 s, goes to a staging queue with a 6 s message TTL whose
dead-letter exchange is the ingress exchange -- so batch B reaches the
ingress queue by the broker's own dead-lettering while the alarm is on
(dead-lettering is not a client publish and is not blocked).

Then `rabbitmqctl set_vm_memory_high_watermark 0.000001` raises a memory
alarm for about 14 s, and the test checks, while it lasts:

- the event loop keeps turning: /healthz answers every time, promptly
  (< 1 s), though due messages cannot be published (16 KiB bodies: a
  publisher that kept writing into the blocked socket would fill the
  socket buffers and block in send());
- /metrics delay_bridge_broker_blocked{connection="publisher"} becomes 1;
- the consumer keeps taking deliveries: batch B arrives in the ingress
  queue during the alarm and received_total reaches 1000;
- timers keep running: delay_bridge_waiting_messages falls as batch A and
  B fall due.

Then the watermark goes back to 0.4 (always, in a finally block): blocked
returns to 0, every message arrives (lost = 0), none before its due time
(batch B's due time counts from its dead-lettering, no earlier than publish
+ TTL); duplicates are counted by cause with harness.tally().

Named cases (harness.Cases: each runs and is reported even when one before
it failed): held_before_alarm, alarm, then what the alarm showed --
loop_ran, metrics_answered, blocked_reported, batch_b_taken, timers_ran --
then unblocked_after, none_lost, none_early, healthz_after, clean_stop.
"""

import http.client
import random
import threading
import time
import types

import harness as h
from harness import check

N_A = 800
N_B = 200
BODY = 16 * 1024
TTL_MS = 6000
ALARM_S = 14.0


free_port = h.free_port  # one copy, in harness.py


def http_get(port, path, timeout=2.0):
    """(status, body, seconds taken); status None when there is no answer in time."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), time.monotonic() - t0
    except (OSError, http.client.HTTPException):
        return None, "", time.monotonic() - t0
    finally:
        c.close()


class Prober(object):
    """Two threads: one asks /healthz every 0.1 s (1 s timeout), one reads
    /metrics every 0.25 s; every answer is kept with its time."""

    def __init__(self, port, route, pid):
        self.port = port
        self.pid = pid
        self.stuck_in = {}  # what the daemon's thread was doing when a probe got no answer
        self.lbl = 'route="%s"' % route
        self.stop_flag = threading.Event()
        self.health = []   # (t sent, status or None, seconds)
        self.samples = []  # (t, {name: value}) from /metrics answers
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._health, self._metrics)]
        for t in self.threads:
            t.start()

    def _health(self):
        while not self.stop_flag.is_set():
            t = time.monotonic()
            st, _, took = http_get(self.port, "/healthz", timeout=1.0)
            self.health.append((t, st, took))
            if st != 200:
                w = self.where()
                self.stuck_in[w] = self.stuck_in.get(w, 0) + 1
            self.stop_flag.wait(0.1)

    def _metrics(self):
        while not self.stop_flag.is_set():
            st, body, _ = http_get(self.port, "/metrics", timeout=1.0)
            if st == 200:
                self.samples.append((time.monotonic(), {
                    "blocked": h.metric_value(body, "delay_bridge_broker_blocked",
                                              'connection="publisher"'),
                    "received": h.metric_value(body, "delay_bridge_received_total", self.lbl),
                    "waiting": h.metric_value(body, "delay_bridge_waiting_messages", self.lbl),
                    "due": h.metric_value(body, "delay_bridge_due_messages", self.lbl),
                    "inflight": h.metric_value(body, "delay_bridge_inflight_messages", self.lbl),
                    "confirmed": h.metric_value(body, "delay_bridge_confirmed_total", self.lbl),
                }))
            self.stop_flag.wait(0.25)

    def where(self):
        """The daemon's system call (Linux x86-64 numbers) and wait channel."""
        try:
            with open("/proc/%d/syscall" % self.pid) as f:
                nr = f.read().split()[0]
            with open("/proc/%d/wchan" % self.pid) as f:
                wchan = f.read().strip()
        except (OSError, IndexError):
            return "?"
        name = {"7": "poll", "44": "sendto", "20": "writev", "1": "write", "232": "epoll_wait",
                "23": "select", "270": "pselect6", "45": "recvfrom"}.get(nr, "syscall " + nr)
        return "%s (wchan %s)" % (name, wchan)

    def between(self, t0, t1):
        return [s for t, s in self.samples if t0 <= t <= t1]

    def longest_silence(self, t0, t1):
        """The longest stretch within [t0, t1] with no /healthz answer, and
        where it began (seconds after t0)."""
        answered = [t + took for t, st, took in self.health if st == 200 and t0 <= t + took <= t1]
        marks = [t0] + answered + [t1]
        gap, at = 0.0, 0.0
        for a, b in zip(marks, marks[1:]):
            if b - a > gap:
                gap, at = b - a, a - t0
        return gap, at

    def loop_check(self, t0, t1, what):
        """Did the event loop keep turning within [t0, t1] (what: "the alarm")?
        Logs the probes; returns (longest silence in s, a problem sentence or
        None): a stretch of more than 1.5 s without a /healthz answer."""
        health = [x for x in self.health if t0 <= x[0] <= t1]
        failed = [x for x in health if x[1] != 200 or x[2] > 1.0]
        silence, silence_at = self.longest_silence(t0, t1)
        h.log("during the %.1f s of %s: %d /healthz probes, %d unanswered within 1 s; longest "
              "stretch without an answer %.1fs (from %.1fs after it began)"
              % (t1 - t0, what, len(health), len(failed), silence, silence_at))
        if silence <= 1.5:
            return silence, None
        return silence, ("the event loop stalled during %s: /healthz went unanswered for %.1f s "
                         "(from %.1f s after it began; %d of %d probes got no answer within "
                         "1 s; the daemon was then in %s)"
                         % (what, silence, silence_at, len(failed), len(health), self.stuck_in))

    def stop(self):
        self.stop_flag.set()
        for t in self.threads:
            t.join(10)


def test(ctx):
    h.require_owned_broker("raising a memory alarm with rabbitmqctl")
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    port = free_port()
    route = ctx.route("alarm", ex)
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    st, body, _ = http_get(port, "/healthz")
    check(st == 200, "/healthz before the alarm: %r %r" % (st, body))

    staging = ctx.n("staging")
    ctx.admin().queue_declare(staging, durable=True, arguments={
        "x-message-ttl": TTL_MS, "x-dead-letter-exchange": route["ingress_exchange"],
        "x-dead-letter-routing-key": "rk"})
    ctx.queues.add(staging)

    rng = random.Random(5)
    p = ctx.publisher()
    sent = {}  # message_id -> (earliest due time, delay s)
    t_a = time.monotonic()
    for i in range(N_A):
        ms = rng.randint(4000, 14000)
        mid = "a%04d" % i
        t = p.publish(route["ingress_exchange"], "rk", bytes([65 + i % 26]) * BODY,
                      headers={"x-delay": h.i32(ms)}, message_id=mid, delivery_mode=2)
        sent[mid] = (t + ms / 1000.0, ms / 1000.0)
    for i in range(N_B):
        ms = rng.randint(1000, 4000)
        mid = "b%04d" % i
        t = p.publish("", staging, b"b" * 256, headers={"x-delay": h.i32(ms)}, message_id=mid,
                      delivery_mode=2)
        sent[mid] = (t + TTL_MS / 1000.0 + ms / 1000.0, ms / 1000.0)
    p.close()
    h.log("published %d x %d KiB (delays 4-14 s) in %.1fs, and %d to the staging queue "
          "(TTL %d ms, delays 1-4 s)" % (N_A, BODY // 1024, time.monotonic() - t_a, N_B, TTL_MS))
    # What a case leaves for the later ones (each runs whatever happened before it).
    st_ = types.SimpleNamespace(t_on=None, t_off=None, during=[], silence=0.0, stalled=None,
                                delivered_in_alarm=None, ingress_depth=None, staging_depth=None,
                                t=None, msgs=[])

    def case_held_before_alarm():
        # received >= N_A: batch A, all of it (batch B reaches the ingress only after
        # its TTL, behind A in the queue)
        ctx.wait_taken(port, route["ingress_queue"], N_A, 20, "the bridge to take batch A")
        # Publishing 12.8 MB normally takes a second or two; on a loaded machine
        # (or under ASan) the first of batch A can fall due before the alarm.
        # That is fine as long as none came before its own due time (and most of
        # batch A is still held: the alarm's checks below need timers to run).
        early = [m for m in c.snapshot() if m.t < sent[m.message_id][0] - h.early_tolerance()]
        check(not early, "messages arrived before their due time: %s" % h.summarize(early))
        check(c.count() < N_A // 2, "half of batch A fell due before the alarm (%d): the machine "
              "is too slow for this test's timing" % c.count())
        if c.count():
            h.log("%d message(s) of batch A fell due before the alarm, none early" % c.count())

    prober = Prober(port, "alarm", b.proc.pid)

    def case_alarm():
        try:
            h.log("raising a memory alarm: set_vm_memory_high_watermark 0.000001")
            h.rabbitmqctl("set_vm_memory_high_watermark", "0.000001")
            st_.t_on = time.monotonic()
            delivered_at_alarm = c.count()
            deadline = st_.t_on + ALARM_S
            while time.monotonic() < deadline:
                b.check_alive()
                time.sleep(0.5)
            conns = h.rabbitmqctl("list_connections", "client_properties", "state")
            states = [line for line in conns.splitlines() if "delay-bridge" in line]
            for line in states:
                name = "publisher" if "delay-bridge publisher" in line else "consumer"
                h.log("broker's view during the alarm: bridge %s connection state %s"
                      % (name, line.split()[-1]))
            st_.delivered_in_alarm = c.count() - delivered_at_alarm
            st_.ingress_depth = ctx.queue_depth(route["ingress_queue"])
            st_.staging_depth = ctx.queue_depth(staging)
        finally:
            h.log("clearing the alarm: set_vm_memory_high_watermark 0.4")
            h.rabbitmqctl("set_vm_memory_high_watermark", "0.4")
            st_.t_off = time.monotonic()
        # What happened while the alarm was on (the cases below judge it).
        st_.silence, st_.stalled = prober.loop_check(st_.t_on, st_.t_off, "the alarm")
        st_.during = prober.between(st_.t_on, st_.t_off)
        if st_.during:
            h.log("metrics during the alarm: first %s" % st_.during[0])
            h.log("                          last  %s" % st_.during[-1])
        h.log("during the alarm: %d message(s) reached the target (the broker may route what it "
              "read before blocking), ingress queue %d, staging queue %d"
              % (st_.delivered_in_alarm, st_.ingress_depth, st_.staging_depth))

    def case_loop_ran():
        check(not st_.stalled, st_.stalled or "")

    def case_metrics_answered():
        check(st_.during, "/metrics never answered while the broker was blocked")

    def case_blocked_reported():
        during = st_.during
        check(any(x.get("blocked") == 1 for x in during),
              'delay_bridge_broker_blocked{connection="publisher"} never became 1 '
              "during a %.0f s memory alarm (values seen: %s)"
              % (ALARM_S, sorted({x.get("blocked") for x in during}, key=str)))

    def case_batch_b_taken():
        during = st_.during
        check(any((x.get("received") or 0) >= N_A + N_B for x in during),
              "the consumer did not take batch B from the ingress queue during the "
              "alarm: received_total reached %s of %d (ingress queue %d, staging queue "
              "%d at the end of the alarm)" % (
                  max((x.get("received") or 0) for x in during) if during else None,
                  N_A + N_B, st_.ingress_depth, st_.staging_depth))

    def case_timers_ran():
        waits = [x.get("waiting") for x in st_.during if x.get("waiting") is not None]
        check(waits and min(waits) < max(waits), "timers did not run during the alarm: "
              "waiting_messages %s" % (sorted(set(waits))[:5] if waits else "never read"))
        h.log("timers ran: waiting_messages went from %d to %d during the alarm"
              % (max(waits), min(waits)))

    # After the alarm: publishing resumes, blocked returns to 0, all arrive.
    def case_unblocked_after():
        deadline = time.monotonic() + 20
        while True:
            st, body, took = http_get(port, "/metrics", timeout=5)
            blocked = (h.metric_value(body, "delay_bridge_broker_blocked", 'connection="publisher"')
                       if st == 200 else None)
            if blocked == 0:
                break
            check(time.monotonic() <= deadline, 'delay_bridge_broker_blocked{connection="publisher"} '
                  "is %r 20 s after the alarm cleared" % blocked)
            time.sleep(0.2)
        h.log("after the alarm: broker_blocked{publisher}=%r %.1fs after clearing"
              % (blocked, time.monotonic() - st_.t_off))

    def case_none_lost():
        try:
            c.wait_ids(sent.keys(), 60)
        finally:  # none_early judges whatever arrived
            st_.msgs = c.quiet(1.5)
            st_.t = h.tally(sent.keys(), st_.msgs)
        t = st_.t
        h.log("tally: " + h.tally_line(t))
        check(not t["lost"], "%d message(s) never arrived: %s" % (len(t["lost"]), t["lost"][:20]))
        check(not t["unknown"], "unknown message ids arrived: %s" % t["unknown"][:20])

    def case_none_early():
        t = st_.t
        early = []
        for mid, (due, delay) in sent.items():
            if mid not in t["per_id"]:
                continue  # lost: none_lost says so
            first_t = min(m.t for m in t["per_id"][mid])
            if first_t < due - h.early_tolerance():
                early.append("%s %.3fs before its due time" % (mid, due - first_t))
            if mid.startswith("a"):
                check(all(len(m.body) == BODY for m in t["per_id"][mid]), "%s: body changed" % mid)
        check(not early, "%d message(s) arrived EARLY: %s" % (len(early), early[:10]))
        released = [m.t - st_.t_off for m in st_.msgs if m.t >= st_.t_off]
        h.log("none early; %d delivered after the alarm cleared, the last %.1fs after"
              % (len(released), max(released, default=0.0)))

    def case_healthz_after():
        st, body, took = http_get(port, "/healthz")
        check(st == 200, "/healthz after the alarm: %r" % st)

    def case_clean_stop():
        prober.stop()
        b.stop()

    cases = h.Cases()
    cases.run("held_before_alarm", case_held_before_alarm)
    cases.run("alarm", case_alarm)
    cases.run("loop_ran", case_loop_ran, needs="alarm")
    cases.run("metrics_answered", case_metrics_answered, needs="alarm")
    cases.run("blocked_reported", case_blocked_reported, needs="alarm")
    cases.run("batch_b_taken", case_batch_b_taken, needs="alarm")
    cases.run("timers_ran", case_timers_ran, needs="alarm")
    cases.run("unblocked_after", case_unblocked_after)
    cases.run("none_lost", case_none_lost)
    cases.run("none_early", case_none_early)
    cases.run("healthz_after", case_healthz_after)
    cases.run("clean_stop", case_clean_stop)
    t = st_.t or {"sent": len(sent), "delivered": 0, "lost": [], "duplicates": 0, "case1": 0,
                  "case2": 0}
    h.log("RESULT sent=%d delivered=%d lost=%d duplicates=%d (case1=%d case2=%d) "
          "healthz_longest_silence_s=%.1f problems=%d" % (
              t["sent"], t["delivered"], len(t["lost"]), t["duplicates"], t["case1"], t["case2"],
              st_.silence, len(cases.failed())))
    cases.done()

if __name__ == "__main__":
    h.run(test, budget_s=180)
