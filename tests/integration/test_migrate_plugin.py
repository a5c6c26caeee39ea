#!/usr/bin/python3
"""The migration out of the delayed-message plugin (issue 40, item 3):
deploy/plugin/migrate/delay-bridge-migrate-plugin on a RabbitMQ 4.0.5 node.

    test_migrate_plugin.py reference [COUNT]   the real plugin 4.0.7 holds the messages
    test_migrate_plugin.py fixture [COUNT]     tests/integration/migrate_fixture.erl
                                               writes the plugin's table instead

COUNT messages (default 20,000; 100,000 in the .100k tests, label
migrate_long) are held by the plugin: a twentieth due 2-15 s after they
were published (while the migration runs: the plugin fires them, or the
migration moves them, never both), a tenth due after 15-40 s, the rest
from 10 minutes to 30 days. The reference publishes
them to an x-delayed-message exchange (x-delayed-type direct) in pipelined
chunks and reports the plugin's publish rate; the fixture writes them with
the plugin's record shapes, in a table of the plugin's name (for a machine
without the plugin's source: CI). Then, with a bridge running and a
publisher still publishing to the plugin's exchange (the fixture: still
writing entries):

  1. the migration is started (--rate: about a twentieth a second) and
     killed with SIGKILL at its first progress report (its process group:
     the script and rabbitmqctl; the node-side process dies with them);
  2. it is started again at full speed; as it begins moving, the bridge is
     killed with SIGKILL and started again; this run must finish (exit 0);
  3. the publisher stops; a last run moves what it left (exit 0), and the
     plugin's table and the migration's journal are empty.

Then every message published is either delivered exactly once (by the
plugin, which kept firing what fell due before it was moved, or by the
bridge) or pending in the bridge exactly once (GET /pending), never both,
by message_id -- a delivery repeated with the same x-delay-bridge-id is the
bridge's own at-least-once after its SIGKILL (README "Delivery
guarantees": consumers deduplicate on it), counted and reported, not two
messages; none early; a moved message carries x-delay-until = the
plugin's due time, which lies between the publish and its confirm plus the
delay; the long ones are checked by their due time in /pending, not by
waiting; and the lateness of delivered messages is reported (moved and
fired separately), bounded except for messages that fell due while the
bridge was down (and, with the fixture, which fires nothing, for those due
before the migration reached them: they go out at once when moved).

The bridge consumes delay-bridge.delayed with a route {"delayed_exchanges":
true} when the bridge accepts that key (--check-config), else with a plain
route whose ingress_queue is delay-bridge.delayed and whose target is the
test's exchange (one exchange: the same thing for this test).

What would fail: the step that takes entries out of the plugin's table
run outside the plugin's process (a copy of delay_bridge_migrate.erl with
take/1's `case whereis(rabbit_delayed_message) of` made `case undefined
of`, passed in DELAY_BRIDGE_MIGRATE_ERL): on 2026-12-06 the reference run
of 20,000 failed with "m7841: from the plugin at 3678.970,
dcf2ae016924dd91-480 at 3679.004", fired by the plugin between the step's
read and its commit, and moved. A SIGKILL of the migration that stopped
its node-side process between a delivery and the journal's delete
(before in_worker/1) delivered an overdue message twice (m1241).

Skips (77) without the 4.0 root; the reference mode also without the
plugin's source (plugin_node.py says where it looks).
"""

import base64
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pika

import harness as h
import harness_load as hl
from harness import check
from plugin_node import PLUGIN_VSN, RABBITMQ_VSN, PluginNode

ROOT = os.path.dirname(os.path.dirname(h.HERE))
MIGRATE = os.path.join(ROOT, "deploy", "plugin", "migrate", "delay-bridge-migrate-plugin")
FIXTURE = os.path.join(h.HERE, "migrate_fixture.erl")
QUEUE = "delay-bridge.delayed"
RK = "rk"  # harness_load.Feeder's routing key
DURING = (2000, 15000)   # ms: what falls due while it moves: the plugin's timer and the
                         # migration both after the earliest entries
SHORT = (15000, 40000)   # ms: what falls due after the move
LONG = (600000, 30 * 86400000)


def wall_ms(mono):
    """A time.monotonic() value as epoch ms."""
    return (time.time() - time.monotonic() + mono) * 1000.0


def delay_for(i, rng):
    if i % 20 == 1:
        return rng.randint(*DURING)
    return rng.randint(*SHORT) if i % 10 == 0 else rng.randint(*LONG)


def load_module(node, path):
    """Compile and load an Erlang module on the node from its text, as
    delay-bridge-migrate-plugin does (no macros, no include files)."""
    b64 = base64.b64encode(open(path, "rb").read()).decode()
    node.ctl("eval", (
        'Text = binary_to_list(base64:decode(<<"%s">>)), {ok, Toks, _} = erl_scan:string(Text), '
        'Split = fun Split([], [], Acc) -> lists:reverse(Acc); '
        'Split([{dot, _} = D | R], Cur, Acc) -> Split(R, [], [lists:reverse([D | Cur]) | Acc]); '
        'Split([T | R], Cur, Acc) -> Split(R, [T | Cur], Acc) end, '
        'Forms = [begin {ok, F} = erl_parse:parse_form(Ts), F end || Ts <- Split(Toks, [], [])], '
        '{ok, Mod, Bin} = compile:forms(Forms, [binary, report_errors]), '
        '{module, Mod} = code:load_binary(Mod, "%s", Bin), ok.') % (b64, os.path.basename(path)))


def held(node):
    """(entries in the plugin's table, entries in the migration's journal)."""
    out = node.ctl("eval", (
        'T = list_to_atom("rabbit_delayed_message" ++ atom_to_list(node())), '
        'S = fun(Tab) -> case lists:member(Tab, mnesia:system_info(tables)) of '
        'true -> mnesia:table_info(Tab, size); false -> 0 end end, '
        'io:format("~b ~b~n", [S(T), S(delay_bridge_migration)]), ok.'))
    a, b = out.split()[:2]
    return int(a), int(b)


class Sent(object):
    """Every message the plugin was given: message_id -> (lo, hi), the
    bounds of its due time in epoch ms (publish .. confirm, plus its delay)."""

    def __init__(self):
        self.due = {}
        self.lock = threading.Lock()

    def add(self, mid, lo, hi):
        with self.lock:
            check(mid not in self.due, "message id %s used twice by the test" % mid)
            self.due[mid] = (lo, hi)


def populate_reference(ctx, x, n, sent, seed):
    """n messages through the plugin, in pipelined chunks; the plugin's publish rate."""
    rng = random.Random(seed)
    chunk, i, t_start = 2000, 0, time.monotonic()
    while i < n:
        items, delays = [], []
        for j in range(i, min(n, i + chunk)):
            d = delay_for(j, rng)
            delays.append(("m%d" % j, d))
            items.append((RK, b"m%d" % j, pika.BasicProperties(
                message_id="m%d" % j, delivery_mode=2, headers={"x-delay": d})))
        t0 = time.time() * 1000.0
        hl.publish_pipelined(x, items, timeout=300)
        t1 = time.time() * 1000.0
        for mid, d in delays:
            sent.add(mid, t0 + d, t1 + d)
        i += len(items)
    took = time.monotonic() - t_start
    h.log("the plugin %s took %d messages in %.1f s: %.0f msg/s (pipelined confirms, chunks of %d)"
          % (PLUGIN_VSN, n, took, n / took, chunk))


def fixture_fill(node, x, items, sent):
    """items: [(message_id, delay ms)] written into the plugin's table now."""
    path = "/tmp/dbt-migrate-fill.%d.%d.terms" % (os.getpid(), threading.get_ident())
    now = int(time.time() * 1000)
    with open(node.in_root(path), "w") as f:
        for mid, d in items:
            f.write('{<<"/">>, <<"%s">>, <<"%s">>, <<"%s">>, %d, %d}.\n' % (x, RK, mid, now + d, d))
    try:
        node.ctl("eval", 'migrate_fixture:fill("%s").' % path, timeout=600)
    finally:
        os.unlink(node.in_root(path))
    for mid, d in items:
        sent.add(mid, now + d, now + d)


def populate_fixture(node, x, n, sent, seed):
    rng = random.Random(seed)
    t = time.monotonic()
    for i in range(0, n, 20000):
        fixture_fill(node, x, [("m%d" % j, delay_for(j, rng)) for j in range(i, min(n, i + 20000))], sent)
    h.log("fixture: %d entries written in %.1f s" % (n, time.monotonic() - t))


class Publishing(threading.Thread):
    """Keeps giving the plugin messages while the migration runs: the
    reference publishes to its exchange (one at a time, confirmed), the
    fixture writes 40 entries per rabbitmqctl eval."""

    def __init__(self, mode, node, x, sent, seed):
        threading.Thread.__init__(self, name="publishing", daemon=True)
        self.mode, self.node, self.x, self.sent = mode, node, x, sent
        self.rng = random.Random(seed)
        self.stop_flag = threading.Event()
        self.error = None
        self.count = 0

    def run(self):
        try:
            if self.mode == "reference":
                p = h.Publisher(retry_s=10)
                i = 0
                while not self.stop_flag.is_set():
                    mid, d = "feed%d" % i, delay_for(i, self.rng)
                    t = p.publish(self.x, RK, mid.encode(), headers={"x-delay": d},
                                  mandatory=False, message_id=mid, delivery_mode=2)
                    t1 = time.monotonic()
                    self.sent.add(mid, wall_ms(t) + d, wall_ms(t1) + d)
                    self.count += 1
                    i += 1
                    time.sleep(0.01)
                p.close()
            else:
                i = 0
                while not self.stop_flag.is_set():
                    items = [("feed%d" % j, delay_for(j, self.rng)) for j in range(i, i + 40)]
                    fixture_fill(self.node, self.x, items, self.sent)
                    self.count += len(items)
                    i += 40
        except BaseException as e:  # reported by the test thread
            self.error = e


class Migration(object):
    """delay-bridge migrate-plugin (which runs delay-bridge-migrate-plugin)
    against the node, in a process group of its own; its output lines kept
    with the time each came."""

    def __init__(self, node, batch, name, rate=0):
        cmd, env = node.ctl_cmd()
        self.name = name
        self.lines = []
        env = dict(env, DELAY_BRIDGE_MIGRATE_PLUGIN=MIGRATE)
        self.proc = subprocess.Popen([h.bridge_bin(), "migrate-plugin", "-n", cmd[2], "--rabbitmqctl", cmd[0],
                                      "--batch", str(batch), "--rate", str(rate)],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     universal_newlines=True, start_new_session=True)
        self.t0 = time.monotonic()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            h.log("%s: %s" % (self.name, line.rstrip("\n")))

    def said(self, prefix):
        return any(l.startswith(prefix) for _, l in self.lines)

    def wait_progress(self, prefix="progress:", timeout=300):
        """True once a line starting with prefix came, False if it ended first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.said(prefix):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        h.fail("%s: no progress report in %d s" % (self.name, timeout))

    def kill9(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.reader.join(5)
        h.log("%s: killed with SIGKILL (its process group)" % self.name)

    def wait(self, timeout=900):
        rc = self.proc.wait(timeout)
        self.reader.join(5)
        return rc

    def rate(self):
        """The msg/s of its last report (its own count over its own time)."""
        for _, l in reversed(self.lines):
            if l.startswith(("done:", "progress:")):
                return l
        return None


def bridge_route(ctx, x):
    """{"delayed_exchanges": true} if this bridge accepts it, else the plain
    route that does the same for the one exchange x."""
    cfg = ctx.config([{"name": "delayed", "delayed_exchanges": True}])
    path = os.path.join(ctx.tmp, "check-delayed-exchanges.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    rc, out, err = h.bridge_cli("-c", path, "--check-config")
    if rc == 0:
        h.log("the bridge accepts delayed_exchanges: route {name: delayed, delayed_exchanges: true}")
        return {"name": "delayed", "delayed_exchanges": True}
    h.log("the bridge does not accept delayed_exchanges yet (%s): a plain route from %s to %s"
          % ((out + err).strip().splitlines()[-1:] or "?", QUEUE, x))
    return {"name": "delayed", "ingress_exchange": ctx.n("migrated"), "ingress_queue": QUEUE,
            "target_exchange": x}


def test(ctx, mode, n):
    node = PluginNode(ctx, plugin=(mode == "reference"))
    suite_uri = os.environ.get("DB_TEST_BROKER_URI")
    os.environ["DB_TEST_BROKER_URI"] = node.uri
    os.environ.pop("DB_TEST_BROKER_DIR", None)
    try:
        run(ctx, mode, n, node)
    finally:
        for cons in ctx.consumers:
            cons.close()
        ctx.consumers, ctx.queues, ctx.exchanges = [], set(), set()
        for b in getattr(ctx, "bridges", []):
            b.cleanup()
        if ctx._admin is not None and ctx._admin[0].is_open:
            ctx._admin[0].close()
        ctx._admin = None
        node.stop()
        if suite_uri is None:
            os.environ.pop("DB_TEST_BROKER_URI", None)
        else:
            os.environ["DB_TEST_BROKER_URI"] = suite_uri


def run(ctx, mode, n, node):
    check(h.broker_version(node.uri) == RABBITMQ_VSN, "the node is not RabbitMQ %s" % RABBITMQ_VSN)
    h.log("%s: %d messages held by %s on RabbitMQ %s at %s" % (
        mode, n, "the delayed-message plugin %s" % PLUGIN_VSN if mode == "reference"
        else "tests/integration/migrate_fixture.erl (the plugin's table format)",
        RABBITMQ_VSN, h.mask_uri(node.uri)))
    x = ctx.n("orders")
    a = ctx.admin()
    if mode == "reference":
        a.exchange_declare(x, exchange_type="x-delayed-message", durable=True,
                           arguments={"x-delayed-type": "direct"})
    else:
        load_module(node, FIXTURE)
        node.ctl("eval", "migrate_fixture:setup().")
        a.exchange_declare(x, exchange_type="direct", durable=True)
    out = ctx.n("out")
    a.queue_declare(out, durable=True)
    a.queue_bind(out, x, RK)
    c = ctx.consumer([out])

    sent = Sent()
    seed = int(os.environ.get("DB_TEST_SEED", "40"))
    if mode == "reference":
        populate_reference(ctx, x, n, sent, seed)
    else:
        populate_fixture(node, x, n, sent, seed)
    h.log("held: %d in the plugin's table" % held(node)[0])

    port = h.free_port()
    route = bridge_route(ctx, x)
    b = ctx.bridge([route], http={"listen": "127.0.0.1:%d" % port})
    ctx.bridges = [b]
    batch = max(500, n // 20)

    feeder = Publishing(mode, node, x, sent, seed + 1)
    feeder.start()
    time.sleep(1.0)

    # 1. the migration killed at its first progress report (--rate: about a
    # twentieth of them moved by then, however fast this machine is)
    m1 = Migration(node, max(100, n // 40), "migrate-1", rate=max(200, n // 20))
    check(m1.wait_progress(), "migrate-1 ended before its first progress report (rc %s): "
          "nothing to kill mid-way" % m1.proc.returncode)
    m1.kill9()
    h.log("after migrate-1's SIGKILL: %d in the plugin's table, %d in the journal" % held(node))

    # 2. again, at full speed; the bridge killed as it starts moving, started again
    m2 = Migration(node, batch, "migrate-2")
    check(m2.wait_progress("migrating") and m2.proc.poll() is None,
          "migrate-2 ended before it began moving (rc %s)" % m2.proc.returncode)
    if True:
        t_kill = time.monotonic()
        b.kill9()
        time.sleep(2.0)
        b.start()
        outage = (wall_ms(t_kill), wall_ms(time.monotonic()))
        h.log("the bridge was down %.1f s" % ((outage[1] - outage[0]) / 1000.0))
    rc = m2.wait()
    check(rc == 0, "migrate-2 exited %d" % rc)
    moved_by = wall_ms(time.monotonic())

    # 3. the publisher stops; a last run moves what it left
    feeder.stop_flag.set()
    feeder.join(120)
    check(feeder.error is None, "the publisher failed: %r" % (feeder.error,))
    h.log("published while moving: %d" % feeder.count)
    t3 = time.monotonic()
    m3 = Migration(node, batch, "migrate-3")
    rc = m3.wait()
    check(rc == 0, "migrate-3 exited %d" % rc)
    left, journal = held(node)
    check(left == 0 and journal == 0, "after the last run: %d in the plugin's table, %d in the journal"
          % (left, journal))
    h.log("the plugin's table and the journal are empty (%.1f s for the last run)" % (time.monotonic() - t3))

    # every message: delivered once, or pending once, never both, never early
    with sent.lock:
        due = dict(sent.due)
    now = time.time() * 1000.0
    short_end = max(hi for lo, hi in due.values() if hi < now + SHORT[1] + 60000)
    wait_s = max(0.0, (short_end - time.time() * 1000.0) / 1000.0) + h.late_tolerance() + 10
    h.log("waiting %.0f s for the messages due in the next %.0f s" % (wait_s, wait_s))
    end = time.monotonic() + wait_s
    want_now = {mid for mid, (lo, hi) in due.items() if hi <= short_end}
    while time.monotonic() < end:
        if len({m.message_id for m in c.snapshot()} & want_now) == len(want_now):
            break
        time.sleep(0.5)
    got = c.quiet(2.0)
    pend = h.pending_all(port, "delayed")
    problems, by_id = [], {}
    for m in got:
        by_id.setdefault(m.message_id, []).append(m)
    pend_ids = {}
    for p in pend:
        pend_ids.setdefault(p["message_id"], []).append(p)
    # twice: two messages in the end for one message_id (another x-delay-bridge-id, or one
    # from the plugin and one from the bridge). The same x-delay-bridge-id twice is the
    # bridge's own at-least-once after its SIGKILL (README "Delivery guarantees": a republish
    # confirmed before its DONE record was on disk; consumers deduplicate on that id).
    twice = ["%s: %s" % (mid, ", ".join("%s at %.3f" % (m.bridge_id or "from the plugin", m.t) for m in ms))
             for mid, ms in by_id.items() if len({m.bridge_id for m in ms}) > 1]
    republished = sum(len(ms) - len({m.bridge_id for m in ms}) for ms in by_id.values())
    if twice:
        problems.append("%d delivered twice: %s" % (len(twice), sorted(twice)[:10]))
    ptwice = [mid for mid, ps in pend_ids.items() if len(ps) > 1]
    if ptwice:
        problems.append("%d pending more than once: %s" % (len(ptwice), sorted(ptwice)[:10]))
    both = set(by_id) & set(pend_ids)
    if both:
        problems.append("%d both delivered and pending: %s" % (len(both), sorted(both)[:10]))
    unknown = (set(by_id) | set(pend_ids)) - set(due)
    if unknown:
        problems.append("%d not published by the test: %s" % (len(unknown), sorted(unknown)[:10]))
    lost = set(due) - set(by_id) - set(pend_ids)
    if lost:
        problems.append("%d neither delivered nor pending: %s" % (
            len(lost), ", ".join("%s (due %+.1f s from now)" % (mid, (due[mid][0] - time.time() * 1000) / 1000.0)
                                 for mid in sorted(lost)[:10])))
    # pending: the due time the plugin had
    bad_due = []
    for mid, ps in pend_ids.items():
        if mid in due:
            lo, hi = due[mid]
            if not (int(lo) - 1 <= ps[0]["due_ms"] <= int(hi) + 1):
                bad_due.append("%s due_ms %d not in [%d, %d]" % (mid, ps[0]["due_ms"], lo, hi))
    if bad_due:
        problems.append("%d pending with a due time not the plugin's: %s" % (len(bad_due), bad_due[:5]))
    # delivered: none early; lateness, moved and fired apart
    late_moved, late_fired, early, bad_until = [], [], [], []
    for mid, ms in by_id.items():
        if mid not in due:
            continue
        m, (lo, hi) = ms[0], due[mid]
        arrived = wall_ms(m.t)
        if arrived < lo - h.early_tolerance() * 1000:
            early.append("%s %.0f ms early" % (mid, lo - arrived))
        until = h.header_int(m.props, "x-delay-until")
        if h.header(m.props, "x-delay-bridge-migrated") is not None:
            if until is None or not (int(lo) - 1 <= until <= int(hi) + 1):
                bad_until.append("%s x-delay-until %r not in [%d, %d]" % (mid, until, lo, hi))
                continue
            lateness = arrived - until
            late_moved.append((lateness, mid, until))
        else:
            late_fired.append((arrived - hi, mid, hi))
    if early:
        problems.append("%d delivered early: %s" % (len(early), early[:5]))
    if bad_until:
        problems.append("%d moved with a wrong x-delay-until: %s" % (len(bad_until), bad_until[:5]))
    # bounded lateness, except what fell due while the bridge was down
    bound = (h.late_tolerance() + 3.0) * 1000
    too_late = []
    for lateness, mid, d in late_moved + late_fired:
        if outage[0] - bound <= d <= outage[1] + 10000:
            continue
        if mode == "fixture" and d < moved_by:
            # nothing fires the fixture's entries: one due before the migration reached it
            # waited for it, and went out at once (x-delay-until in the past)
            lateness -= moved_by - d
        if lateness > bound:
            too_late.append("%s %.0f ms late" % (mid, lateness))
    if too_late:
        problems.append("%d later than %.0f ms (outside the bridge's outage): %s"
                        % (len(too_late), bound, too_late[:8]))

    def dist(xs):
        if not xs:
            return "none"
        v = sorted(l for l, _, _ in xs)
        return "%d: p50 %.0f ms, p99 %.0f ms, max %.0f ms" % (len(v), v[len(v) // 2],
                                                              v[min(len(v) - 1, int(len(v) * 0.99))], v[-1])
    calm = [x for x in late_moved if not (outage[0] - bound <= x[2] <= outage[1] + 10000)]
    h.log("lateness of the moved messages due outside the bridge's outage: %s" % dist(calm))
    h.log("delivered %d (moved by the migration %s; fired by the plugin before it was moved %s), "
          "pending %d; %d delivery(ies) again with the same x-delay-bridge-id (the bridge's "
          "republish after its SIGKILL)" % (len(by_id), dist(late_moved), dist(late_fired), len(pend_ids),
                                             republished))
    h.log("migration: %s | %s | %s" % (m1.rate(), m2.rate(), m3.rate()))
    if problems:
        h.fail("%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems)))


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "fixture"
    if mode not in ("fixture", "reference"):
        sys.stderr.write("usage: test_migrate_plugin.py fixture|reference [COUNT]\n")
        sys.exit(2)
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    sys.argv[0] = "test_migrate_plugin_%s" % mode
    h.run(lambda ctx: test(ctx, mode, n), budget_s=1500 if n > 20000 else 420)
