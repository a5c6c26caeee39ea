#!/usr/bin/python3
"""chaos_soak -- the whole system under a random fault schedule drawn from
a seed, for minutes, then a checker over everything sent and received.

The system. A three-node RabbitMQ cluster on loopback (tests/integration/
cluster/cluster.sh, the checked recipe of /work/shared/RABBITMQ-NOTES.md).
One route, "chaos": a quorum ingress queue, share_keys on, a quorum target
queue. Three bridge processes in two groups that compete for the ingress:

  a1, a2   one replicated log (wal.replicate: one stream, one lease queue):
           whichever holds the lease owns the log and consumes; the other
           is its hot standby, tailing the stream. Different instance
           names, as the README asks (so two key-event queues, keys.a1 and
           keys.a2).
  b        a plain bridge with its own log (instance b).

Why this shape and not two replicated owners with a standby each: it needs
three processes instead of four on two shared CPUs, and it still has every
interaction the issue names -- key events between bridges (a's group and b
hold versions of one key), a lease changing hands (a1 <-> a2) while b's
events keep coming, a plain log beside a replicated one, and redeliveries
that cross from one log to another. Every bridge connects to the cluster
through proxies of its own (one per node, URIs in a different order per
bridge), so that the network between one bridge and one node can fail.

The workload (--rate messages per second, publisher confirms, failing over
between the nodes): plain messages with delays of 1..30 s; a quarter start
a key: version 1 with a delay of 60..80 s, then --key-gap (40) .. +5 s
later either a version 2 (delay 1..15 s, three in four) or an
x-delay-cancel. Why so far apart: across competing bridges "the newest
version" means the one a bridge took last (README, share_keys: "by arrival
at a bridge, not by publication"), and under this schedule a delivery can
reach a bridge up to about 35 s after the broker sent it (a SIGSTOP of 20 s
with the delivery in the bridge's socket; a partition until the heartbeat
gives up, then a redelivery to another bridge). Versions closer than that
race, and the first run of this soak showed it (seed 11, versions 0.3..2 s
apart, b's proxy stalled 4.2 s: version 1 reached b after version 2 had
reached a1, so version 1 was delivered and version 2 cancelled). That is
the documented rule, not a bug of the code; --key-gap 0.3 shows it again.
Version 1 is still far from due when its successor goes out, so no fault
makes its firing legitimate.

The schedule (all drawn from --seed before the run starts, printed, and
printed again event by event as it happens, so a failure is replayed with
--seed S --minutes N): about every --every seconds (exponential, at least
4 s) one bridge fault on a role -- "owner" (whichever of a1/a2 owns the log
at that moment), "standby", or "b":

  kill9      kill -9, restarted 0..5 s later on its intact WAL directory
  sigstop    SIGSTOP for 2..20 s, then SIGCONT (an owner stopped past its
             heartbeat loses the lease while frozen: a zombie owner)
  stall      the proxy carrying the bridge's connections stops forwarding
             for 3..15 s, sockets kept (chaos_proxy.py)
  blackhole  that proxy drops every byte for 5..25 s, new connections
             included; the connections are reset when it heals
  diskfull   the bridge's wal.dir (a tmpfs of its own) is filled for
             5..25 s, then the filler is deleted

and about every 60 s (from 40 s on) one node fault: kill -9 of a node's
whole process group, restarted 5..30 s later (one node at a time, so the
cluster keeps its majority; the stream's and queues' leaders may move). A
fault whose target is still under an earlier fault is skipped and said so.
Bridges that exit by themselves are restarted at once, as a supervisor
would; each such exit is recorded with its reason (an owner that lost its
lease stops with exit 1 by design).

The checker, over every publish and every delivery: sent (confirmed by the
broker), delivered, lost, early (before its due time less
DB_TEST_EARLY_MS, 50 ms by default), replaced-delivered and
cancelled-delivered (a version that a confirmed later version or cancel of
its key superseded), unknown, and duplicates by kind, each with why it can
happen:

  consumer-redelivery   same x-delay-bridge-id, the later copy marked
                        redelivered on the target queue: the test
                        consumer's ack died with its node or connection
  republish             same x-delay-bridge-id, not redelivered: a bridge
                        published, the broker had it, and the DONE record
                        was not durable (kill -9, a lost publisher
                        connection, a zombie owner publishing before it
                        learnt of its lost lease): at least once (README
                        "Delivery guarantees", case 1)
  cross-log-redelivery  another log's id: a delivery logged by one group
                        whose ingress ack was lost (kill -9, connection
                        drop) was redelivered to the other group, which
                        cannot recognise it (README failure table, N
                        bridges, case 2)
  same-log-twice        same log, another message id: one log stored one
                        delivery twice. Never explained: a failure.

Keys whose operations were not all confirmed (the publisher's connection
died before a confirm) are ambiguous and are only counted. Fails on: lost,
early, replaced- or cancelled-delivered, unknown, same-log-twice, a bridge
exit not by design (see EXPECTED below), a bridge not running at the end,
RSS of a bridge process growing past 2x + 16 MiB. RSS of
every bridge process at its start and at its end is reported.

--plant KIND proves the checker fails: it doctors the record before the
check ("lost": forgets one delivery of a sent message; "early": moves one
delivery 5 s earlier; "replaced": adds a delivery of a replaced version;
"dup": adds a copy under another message id of the same log).

--record FILE writes everything sent and received; --recheck FILE runs no
system, only the checker over such a file (with --plant, doctored). A
failed run keeps its directory: bridge logs, record.json, copies of the WAL
disks. Every superseded version delivered is traced (CHAOS TRACE lines,
trace_superseded()): when each version was published and delivered, via
which log, and when the successor's log took it, bracketed by its
neighbours' ids. --keep-wal DIR copies every WAL segment as it grows, so
the records compaction deletes can still be read (wal_history.py);
the proxies' tap (chaos_proxy.py) writes each delivery to and publish from
a bridge as its proxy passes it (ingress deliveries, target publishes, key
events with their x-delay-key-at), with the same t, to tap.txt of the run
(or --tap FILE); the trace reads the key events from it. A superseded
version whose successor the trace proves was taken only after the old
version had been delivered is counted apart (successor_late), not failed.

  tests/soak/chaos_soak.py --minutes 10 --seed 1   # the README's table
  tests/soak/chaos_soak.py --minutes 3             # a new seed, printed
  tests/soak/chaos_soak.py --recheck REC.json --plant lost

Environment: DB_BRIDGE_BIN (the daemon); ports, each overridable:
DB_CHAOS_PORT (AMQP of nodes 1..3, default 5751..5753), DB_CHAOS_DIST_PORT
(Erlang distribution, default 25751..25753), DB_CHAOS_PROXY_PORT (nine
proxies, default 5760..5768), DB_CHAOS_HTTP_PORT (the three bridges' HTTP,
default 5770..5772). Root is needed for the tmpfs mounts (exit 77 otherwise).
"""

import argparse
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

PORT = int(os.environ.get("DB_CHAOS_PORT", "5751"))
DIST_PORT = int(os.environ.get("DB_CHAOS_DIST_PORT", str(PORT + 20000)))
PROXY_PORT = int(os.environ.get("DB_CHAOS_PROXY_PORT", "5760"))
HTTP_PORT = int(os.environ.get("DB_CHAOS_HTTP_PORT", "5770"))
# test_cluster reads these at import: its cluster(), uri(), ctl() then speak to our nodes
os.environ["DB_TEST_CLUSTER_PORT"] = str(PORT)
os.environ["DB_TEST_CLUSTER_DIST_PORT"] = str(DIST_PORT)

import pika  # noqa: E402
from pika.exceptions import AMQPError  # noqa: E402

import harness as h  # noqa: E402
import test_cluster as tc  # noqa: E402
import ha_soak  # noqa: E402
from ha_soak import repl_state, rss_kb  # noqa: E402
from chaos_proxy import Proxies  # noqa: E402

BRIDGES = ("a1", "a2", "b")
NODE_ORDER = {"a1": (1, 2, 3), "a2": (2, 3, 1), "b": (3, 1, 2)}
BODY = b"c" * 200
V1_MS = (60000, 80000)
MAX_DELAY_MS = V1_MS[1]
FAULT_MAX_S = 30


class Proc(ha_soak.Proc):
    """ha_soak's RSS record of one process, its start figure taken once the
    process has run 5 s (a process just exec'd has not mapped its heap)."""

    def __init__(self, who, pid):
        super().__init__(who, pid)
        self.rss0 = 0

    def sample(self):
        r = rss_kb(self.pid)
        if not r:
            return
        if not self.rss0 and time.monotonic() - self.t0 >= 5.0:
            self.rss0 = r
        self.rss1, self.t1 = r, time.monotonic()


def node_uri(i):
    return "amqp://guest:guest@127.0.0.1:%d/%%2f" % (PORT + i - 1)


def client_connect(nodes):
    """A pika connection to the first node of nodes that answers (or None)."""
    for i in nodes:
        p = pika.URLParameters(node_uri(i))
        p.connection_attempts = 1
        p.socket_timeout = 5
        p.blocked_connection_timeout = 60
        p.heartbeat = 10
        try:
            return pika.BlockingConnection(p), i
        except Exception:
            continue
    return None, None


# --------------------------------------------------------------------------
# The workload and the record
# --------------------------------------------------------------------------

class Load(threading.Thread):
    """Publishes at a steady rate with publisher confirms, failing over
    between the nodes. msgs: message_id -> dict(t0 (monotonic time just
    before the publish), ms, key, op ("plain", "v1".."v3", "cancel"),
    confirmed). keys: key -> [message_id, ...] in publication order."""

    def __init__(self, exchange, rate, rng, key_gap):
        super().__init__(daemon=True, name="load")
        self.key_gap = key_gap
        self.exchange = exchange
        self.rate = rate
        self.rng = rng
        self.stop = threading.Event()
        self.msgs = {}
        self.keys = {}
        self.reconnects = 0
        self.lock = threading.Lock()

    def _publish(self, ch, mid, ms, key=None, cancel=False, op="plain"):
        hdrs = {}
        if cancel:
            hdrs["x-delay-cancel"] = h.lstr(key)
        else:
            hdrs["x-delay"] = h.i32(ms)
            if key:
                hdrs["x-delay-key"] = h.lstr(key)
        rec = {"t0": time.monotonic(), "ms": ms, "key": key, "op": op, "confirmed": False}
        with self.lock:
            self.msgs[mid] = rec
            if key:
                self.keys.setdefault(key, []).append(mid)
        ch.basic_publish(self.exchange, "rk", b"" if cancel else BODY,
                         pika.BasicProperties(headers=hdrs, message_id=mid, delivery_mode=2),
                         mandatory=True)
        rec["confirmed"] = True

    def run(self):
        conn, ch, node = None, None, None
        order = [1, 2, 3]
        seq = 0
        pending = []  # (when, key, [ops still to send])
        t_next = time.monotonic()
        while not self.stop.is_set() or pending:
            if conn is None or not conn.is_open:
                conn, node = client_connect(order)
                if conn is None:
                    time.sleep(0.5)
                    continue
                ch = conn.channel()
                ch.confirm_delivery()
                order = order[1:] + order[:1]
            now = time.monotonic()
            if now < t_next:
                time.sleep(min(0.05, t_next - now))
                continue
            t_next = max(t_next + 1.0 / self.rate, now - 1.0)
            try:
                if pending and pending[0][0] <= now:
                    when, key, ops = pending.pop(0)
                    op = ops.pop(0)
                    seq += 1
                    if op == "cancel":
                        self._publish(ch, "x%07d" % seq, 0, key, cancel=True, op="cancel")
                    else:
                        self._publish(ch, "m%07d" % seq, self.rng.randint(1000, 15000), key, op=op)
                    continue
                if self.stop.is_set():
                    continue  # only the keys' later operations, at their times
                seq += 1
                mid = "m%07d" % seq
                if self.rng.random() < 0.25:
                    key = "k%07d" % seq
                    self._publish(ch, mid, self.rng.randint(*V1_MS), key, op="v1")
                    ops = ["v2"] if self.rng.random() < 0.75 else ["cancel"]
                    pending.append((now + self.rng.uniform(self.key_gap, self.key_gap + 5),
                                    key, ops))
                    pending.sort()
                else:
                    self._publish(ch, mid, self.rng.randint(1000, 30000))
            except (AMQPError, OSError, AttributeError) as e:
                # unconfirmed (connection lost, nacked, unroutable): fate unknown
                h.log("load: publish on node %s failed (%r); reconnecting" % (node, e))
                self.reconnects += 1
                try:
                    conn.close()
                except Exception:
                    pass
                conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


class Sink(threading.Thread):
    """Consumes the target queue, failing over between the nodes; every
    delivery is recorded (harness.Msg) before it is acked."""

    def __init__(self, queue):
        super().__init__(daemon=True, name="sink")
        self.queue = queue
        self.msgs = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reconnects = 0

    def run(self):
        order = [3, 1, 2]
        while not self.stop.is_set():
            conn, node = client_connect(order)
            order = order[1:] + order[:1]
            if conn is None:
                time.sleep(0.5)
                continue
            try:
                ch = conn.channel()
                ch.basic_qos(prefetch_count=500)

                def cb(c, method, props, body):
                    m = h.Msg(self.queue, time.monotonic(), method, props, body)
                    with self.lock:
                        self.msgs.append(m)
                    c.basic_ack(method.delivery_tag)
                ch.basic_consume(self.queue, cb, auto_ack=False)
                while not self.stop.is_set():
                    conn.process_data_events(time_limit=0.05)
            except Exception as e:
                self.reconnects += 1
                h.log("sink: consuming on node %s failed (%r); reconnecting" % (node, e))
                time.sleep(0.3)
            finally:
                try:
                    if conn.is_open:
                        conn.close()
                except Exception:
                    pass

    def snapshot(self):
        with self.lock:
            return list(self.msgs)


# --------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------

DUP_REASONS = {
    "consumer-redelivery": "the test consumer's ack died with its node or connection; the "
                           "target queue delivered the same message again (redelivered flag)",
    "republish": "published, stored by the broker, DONE not durable: a bridge killed or its "
                 "publisher connection lost between the confirm and the DONE record, or a "
                 "zombie owner (SIGSTOP'd past its lease) firing before it learnt it had lost "
                 "the lease; the same x-delay-bridge-id (at least once, case 1)",
    "cross-log-redelivery": "a delivery logged by one group (a1/a2 or b) whose ingress ack was "
                            "lost (kill -9, a dropped connection, or read from the socket buffer "
                            "of a connection the broker had already closed, after a SIGSTOP "
                            "past the heartbeat) went back to the queue and reached the other "
                            "group, which cannot recognise it: up to prefetch copies per lost "
                            "connection (case 2 across bridges, README failure table)",
    "same-log-twice": "one log stored one delivery twice: NOT explained, a failure",
}


def split_bid(bid):
    if not bid or "-" not in bid:
        return bid, None
    return tuple(bid.rsplit("-", 1))


# A node crash could lose key events while they were published without
# confirms; since fix 6 (tests/soak/README.md) they are confirmed before the
# ack, and only a broker that loses a confirmed event lets both versions
# fire (README, share_keys). The window is kept: a superseded version
# delivered is put down to that when the operation that superseded it was
# published from 1 s before a node kill to NODE_KILL_WINDOW_S after it.
NODE_KILL_WINDOW_S = 10.0


def check_run(msgs, deliveries, node_kills=(), verdicts=None):
    """msgs: Load.msgs; deliveries: [harness.Msg]; node_kills: monotonic
    times of the node kills; verdicts: trace_superseded()'s. Returns
    (report dict, [failure strings])."""
    early_tol = h.early_tolerance()
    per_id = {}
    for m in deliveries:
        per_id.setdefault(m.message_id, []).append(m)
    keys = {}
    for mid, r in msgs.items():
        if r["key"]:
            keys.setdefault(r["key"], []).append(mid)
    for k in keys:
        keys[k].sort()
    must, never, ambiguous_keys = set(), {}, 0
    for mid, r in msgs.items():
        if r["op"] == "plain" and r["confirmed"]:
            must.add(mid)
    for k, mids in keys.items():
        if not all(msgs[m]["confirmed"] for m in mids):
            ambiguous_keys += 1
            continue
        last = mids[-1]
        for m in mids[:-1]:
            never[m] = "cancelled-delivered" if msgs[last]["op"] == "cancel" else \
                "replaced-delivered"
        if msgs[last]["op"] != "cancel":
            must.add(last)
    lost = sorted(must - set(per_id))
    early = []
    for mid, ms in per_id.items():
        r = msgs.get(mid)
        if r is None:
            continue
        first = min(m.t for m in ms)
        if first - r["t0"] < r["ms"] / 1000.0 - early_tol:
            early.append((mid, round(first - r["t0"], 3), r["ms"] / 1000.0))
    superseded = {"replaced-delivered": [], "cancelled-delivered": []}
    event_lost, late = [], []
    for mid, kind in never.items():
        if mid in per_id:
            later = keys[msgs[mid]["key"]][-1]
            tl = msgs[later]["t0"]
            if (verdicts or {}).get(mid) == "late":
                late.append(mid)
            elif any(k - 1.0 <= tl <= k + NODE_KILL_WINDOW_S for k in node_kills):
                event_lost.append(mid)
            else:
                superseded[kind].append(mid)
    unknown = sorted(mid for mid in per_id if mid not in msgs or msgs[mid]["op"] == "cancel")
    unconfirmed = [mid for mid, r in msgs.items() if not r["confirmed"]]
    dups = {k: 0 for k in DUP_REASONS}
    dup_examples = {k: [] for k in DUP_REASONS}
    for mid, ms in per_id.items():
        if len(ms) < 2:
            continue
        ms = sorted(ms, key=lambda m: m.t)
        seen_bid = {}
        logs = {}
        for m in ms:
            bid = m.bridge_id
            log_id, num = split_bid(bid)
            if bid in seen_bid:
                kind = "consumer-redelivery" if m.redelivered else "republish"
            elif log_id in logs:
                kind = "same-log-twice"
            elif logs:
                kind = "cross-log-redelivery"
            else:
                kind = None
            seen_bid[bid] = True
            logs.setdefault(log_id, num)
            if kind:
                dups[kind] += 1
                if len(dup_examples[kind]) < 5:
                    dup_examples[kind].append(mid)
    rep = {
        "published": len(msgs),
        "sent": sum(1 for r in msgs.values() if r["confirmed"]),
        "unconfirmed": len(unconfirmed),
        "unconfirmed_delivered": sum(1 for m in unconfirmed if m in per_id),
        "expected": len(must),
        "last_due": max([msgs[m]["t0"] + msgs[m]["ms"] / 1000.0 for m in must] or [0]),
        "delivered": len(deliveries),
        "distinct": len(per_id),
        "lost": lost,
        "early": early,
        "replaced_delivered": superseded["replaced-delivered"],
        "cancelled_delivered": superseded["cancelled-delivered"],
        "superseded": len(never),
        "event_lost_in_node_kill": sorted(event_lost),
        "successor_late": sorted(late),
        "ambiguous_keys": ambiguous_keys,
        "unknown": unknown,
        "dups": dups,
        "dup_examples": dup_examples,
    }
    fails = []
    if lost:
        fails.append("%d lost: %s" % (len(lost), lost[:10]))
    if early:
        fails.append("%d early (beyond %.0f ms): %s" % (len(early), early_tol * 1000, early[:10]))
    for kind in ("replaced-delivered", "cancelled-delivered"):
        if superseded[kind]:
            fails.append("%d %s: %s" % (len(superseded[kind]), kind, sorted(superseded[kind])[:10]))
    if unknown:
        fails.append("%d delivered that were never published (or cancels): %s"
                     % (len(unknown), unknown[:10]))
    if dups["same-log-twice"]:
        fails.append("%d unexplained duplicates (same log, another message id): %s"
                     % (dups["same-log-twice"], dup_examples["same-log-twice"]))
    return rep, fails


TAP_EVENT = re.compile(r"^(\S+) (\S+) from publish .*x-delay-key=S\(b'([^']*)'\) "
                       r"x-delay-key-at=l\((\d+)\) x-delay-key-event=S\(b'(\w+)'\)")


def tap_key_events(path):
    """The key events the bridges published, from a --tap file: key ->
    [(x-delay-key-at in epoch s: when the sending bridge took the delivery,
    proxy, "replace" or "cancel")]."""
    ev = {}
    with open(path) as f:
        for line in f:
            m = TAP_EVENT.match(line)
            if m:
                ev.setdefault(m.group(3), []).append((int(m.group(4)) / 1000.0, m.group(2),
                                                      m.group(5)))
    return ev


def trace_superseded(msgs, deliveries, t_start=None, events=None, t_start_wall=None):
    """For every superseded version that was delivered, the events that
    decide whether a bridge missed its replacement: when each version of the
    key was published and delivered, through which log (x-delay-bridge-id:
    log id and msg id, the LSN of its ADD, so ids of one log run in the
    order it took them), and when a bridge took the successor:

      taken_after   the latest publication of a message the successor's log
                    took before it (a lower msg id): nothing is taken
                    before it is published;
      taken_before  the earliest (delivery - delay) of a message the same
                    log took after it (a higher msg id): a bridge never
                    fires early, so each was taken at most its delay before
                    it arrived;
      key event     with --tap (events: tap_key_events()), the time the
                    bridge that took the successor (a version 2 or a
                    cancel) wrote in its key event (x-delay-key-at): when
                    it took it, to the ms.

    The old version cannot have fired before its due time (published + its
    delay) and had fired by the time it arrived. So a successor taken after
    the old version arrived came too late to replace it ("late": not a
    miss), and one held while the old version was still to fire proves a
    miss ("miss"). Returns (text lines, {old message id: "late" | "miss" |
    "undecided"}); times are seconds from t_start."""
    t_start = t_start if t_start is not None else min(r["t0"] for r in msgs.values())
    per_id, per_log = {}, {}
    for m in deliveries:
        per_id.setdefault(m.message_id, []).append(m)
        log_id, num = split_bid(m.bridge_id)
        if num is not None and m.message_id in msgs:
            per_log.setdefault(log_id, []).append((int(num), m.message_id, m.t))
    for v in per_log.values():
        v.sort()
    keys = {}
    for mid, r in msgs.items():
        if r["key"]:
            keys.setdefault(r["key"], []).append(mid)
    out, verdicts = [], {}

    def rel(t):
        return "%.2f" % (t - t_start) if t is not None else "-"

    for k, mids in sorted(keys.items()):
        mids.sort()
        if not all(msgs[m]["confirmed"] for m in mids):
            continue
        for old in [m for m in mids[:-1] if m in per_id]:
            new = mids[-1]
            ro, rn = msgs[old], msgs[new]
            do = min(per_id[old], key=lambda m: m.t)
            due = ro["t0"] + ro["ms"] / 1000.0
            out.append("key %s: old %s published %s delay %.1f s (due >= %s), delivered %s "
                       "via %s" % (k, old, rel(ro["t0"]), ro["ms"] / 1000.0, rel(due), rel(do.t),
                                   do.bridge_id))
            lo = hi = None
            if new in per_id:
                dn = min(per_id[new], key=lambda m: m.t)
                log_id, num = split_bid(dn.bridge_id)
                num = int(num)
                ids = per_log.get(log_id, [])
                before = [msgs[x]["t0"] for n, x, t in ids if n < num]
                after = [(t - msgs[x]["ms"] / 1000.0, n, x) for n, x, t in ids if n > num]
                lo = max(before) if before else None
                hi = min(after) if after else None
                same = split_bid(do.bridge_id)[0] == log_id
                out.append("  successor %s published %s delay %.1f s, delivered %s via %s (%s "
                           "log); its log took it after %s and before %s (%s)"
                           % (new, rel(rn["t0"]), rn["ms"] / 1000.0, rel(dn.t), dn.bridge_id,
                              "the same" if same else "another", rel(lo),
                              rel(hi[0] if hi else None),
                              "next id %d, %s" % (hi[1], hi[2]) if hi else "no later id"))
                hi = hi[0] if hi else None
            else:
                out.append("  successor %s (%s) published %s, not delivered"
                           % (new, rn["op"], rel(rn["t0"])))
            if events is not None and t_start_wall is not None:
                want = "cancel" if rn["op"] == "cancel" else "replace"
                ats = sorted((at - t_start_wall + t_start, proxy) for at, proxy, kind in
                             events.get(k, []) if kind == want and
                             at - t_start_wall + t_start >= rn["t0"] - 0.5)
                for t, proxy in ats:
                    out.append("  key event %s sent through %s: taken at %s" % (want, proxy, rel(t)))
                if ats:  # the first event: when the first bridge took it, exactly
                    lo = hi = ats[0][0]
            if lo is not None and lo > do.t:
                verdicts[old] = "late"
                out.append("  => taken %.2f s after the old version arrived: it came too late "
                           "to replace it (not a miss)" % (lo - do.t))
            elif hi is not None and hi < due:
                verdicts[old] = "miss"
                out.append("  => taken %.2f s before the old version could fire: a MISS"
                           % (due - hi))
            else:
                verdicts[old] = "undecided"
                out.append("  => undecided by the record: read the logs' WAL history "
                           "(--keep-wal, wal_history.py) and the tap (--tap)")
    return out, verdicts


def trace_wal(msgs, deliveries, keep, wall0):
    """Each superseded version delivered: its key's records in every
    bridge's kept WAL history (--keep-wal), times also as t= seconds."""
    import wal_history
    got = {m.message_id for m in deliveries}
    keys = {}
    for mid, r in msgs.items():
        if r["key"]:
            keys.setdefault(r["key"], []).append(mid)
    hist = {}
    for k, mids in sorted(keys.items()):
        mids.sort()
        if not any(m in got for m in mids[:-1]) or not all(msgs[m]["confirmed"] for m in mids):
            continue
        for bname in BRIDGES:
            if bname not in hist:
                hist[bname] = wal_history.load([os.path.join(keep, bname)])
            for ln in wal_history.lines(hist[bname], key=k, wall0=wall0):
                h.log("CHAOS WAL %s %s: %s" % (bname, k, ln))


def plant(kind, msgs, deliveries, rng):
    """Doctor the record so that the checker must fail (proof it can)."""
    sent = [m for m in deliveries if m.message_id in msgs and msgs[m.message_id]["confirmed"]
            and msgs[m.message_id]["op"] in ("plain", "v2", "v3")]
    if kind == "lost":
        victim = rng.choice(sent).message_id
        deliveries[:] = [m for m in deliveries if m.message_id != victim]
        h.log("PLANT: forgot every delivery of %s" % victim)
    elif kind == "early":
        m = rng.choice(sent)
        m.t -= 5.0
        h.log("PLANT: moved %s 5 s earlier" % m.message_id)
    elif kind == "replaced":
        v1 = [mid for mid, r in msgs.items() if r["op"] == "v1" and r["confirmed"]]
        mid = rng.choice(v1)
        src = rng.choice(sent)
        fake = h.Msg(src.queue, time.monotonic(), _Method(src), _props(src, mid), src.body)
        deliveries.append(fake)
        h.log("PLANT: a delivery of replaced version %s" % mid)
    elif kind == "dup":
        src = rng.choice(sent)
        log_id, num = split_bid(src.bridge_id)
        props = _props(src, src.message_id, "%s-%d" % (log_id, int(num) + 10 ** 9))
        deliveries.append(h.Msg(src.queue, src.t + 1, _Method(src), props, src.body))
        h.log("PLANT: a second copy of %s under another message id of its log" % src.message_id)


class _Method(object):
    def __init__(self, m):
        self.exchange = m.exchange if m else "target"
        self.routing_key = m.routing_key if m else "rk"
        self.redelivered = False


def _props(src, mid, bid=None):
    hdrs = dict(src.props.headers or {})
    if bid:
        hdrs["x-delay-bridge-id"] = h.lstr(bid)
    return pika.BasicProperties(message_id=mid, headers=hdrs)


# --------------------------------------------------------------------------
# The fault schedule
# --------------------------------------------------------------------------

BRIDGE_FAULTS = (("kill9", 3), ("sigstop", 2), ("stall", 2), ("blackhole", 2), ("diskfull", 2))
ROLES = (("owner", 3), ("standby", 1), ("b", 2))


def wchoice(rng, pairs):
    total = sum(w for _, w in pairs)
    x = rng.uniform(0, total)
    for v, w in pairs:
        x -= w
        if x <= 0:
            return v
    return pairs[-1][0]


def draw_schedule(rng, seconds, every):
    """[(t seconds after the load started, kind, target, duration s)]."""
    ev = []
    t = 15.0
    while True:
        t += max(4.0, rng.expovariate(1.0 / every))
        if t > seconds - 10:
            break
        kind = wchoice(rng, BRIDGE_FAULTS)
        role = wchoice(rng, ROLES)
        dur = {"kill9": rng.uniform(0, 5), "sigstop": rng.uniform(2, 20),
               "stall": rng.uniform(3, 15), "blackhole": rng.uniform(5, 25),
               "diskfull": rng.uniform(5, 25)}[kind]
        ev.append((round(t, 1), kind, role, round(dur, 1)))
    t = rng.uniform(40, 60)
    while t < seconds - 20:
        ev.append((round(t, 1), "nodekill", rng.randint(1, 3), round(rng.uniform(5, FAULT_MAX_S), 1)))
        t += rng.uniform(50, 75)
    ev.sort(key=lambda e: e[0])
    return ev


class Chaos(object):
    """The system under test and the hands that hurt it."""

    def __init__(self, ctx, cdir, args):
        self.ctx, self.cdir, self.args = ctx, cdir, args
        self.busy = {}             # target -> until (monotonic) / True while a node is down
        self.lock = threading.Lock()
        self.held_down = set()     # bridges killed on purpose, waiting for their restart
        self.stopped = set()       # bridges under SIGSTOP
        self.procs = []            # Proc per bridge process
        self.exits = []            # (t, bridge, code, reason, expected)
        self.injected = {}         # kind -> count
        self.skipped = []
        self.timers = []
        self.fill = {}             # bridge -> filler path
        self.freed = {}            # bridge -> when its disk was last freed
        self.t_start = time.monotonic()
        self.restarted = {}        # bridge -> when the supervisor last restarted it
        self.node_kills = []       # monotonic times of the node kills

    # setup ---------------------------------------------------------------
    def setup(self):
        ctx, args = self.ctx, self.args
        self.proxies = Proxies()
        pp = PROXY_PORT
        for bname in BRIDGES:
            for node in (1, 2, 3):
                self.proxies.add("%s.n%d" % (bname, node), pp, PORT + node - 1)
                pp += 1
        self.proxies.start()
        ex, tq = tc.quorum_target(ctx)
        self.target_queue = tq
        self.route = ctx.route("chaos", ex, queue_type="quorum", share_keys=True, prefetch=200)
        self.mounts = []
        self.br = {}
        self.http = {}
        for i, bname in enumerate(BRIDGES):
            fs = os.path.join(ctx.tmp, "fs-" + bname)
            os.makedirs(fs)
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % args.tmpfs_mb, "tmpfs",
                                fs], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            h.check(r.returncode == 0, "cannot mount a tmpfs: %s" % r.stdout)
            self.mounts.append(fs)
            self.http[bname] = HTTP_PORT + i
            uris = ["amqp://guest:guest@127.0.0.1:%d/%%2f"
                    % self.proxies.proxies["%s.n%d" % (bname, n)].listen_port
                    for n in NODE_ORDER[bname]]
            wal = {"dir": os.path.join(fs, "wal"), "segment_mb": 1, "fsync": True,
                   "checkpoint_interval_s": 20, "checkpoint_min_mb": 1}
            if bname.startswith("a"):
                wal["replicate"] = {"stream": ctx.n("wal"), "max_mb": 0, "checkpoint_mb": 2,
                                    "checkpoint_interval_s": 30, "segment_mb": 1,
                                    "lease_renew_ms": 1000, "confirm_timeout_ms": 10000}
            b = ctx.bridge([self.route], name=bname, instance=bname, start=False, wal=wal,
                           http={"listen": "127.0.0.1:%d" % self.http[bname]},
                           broker={"uri": uris, "heartbeat_s": 5, "connect_timeout_ms": 3000,
                                   "reconnect_min_ms": 200, "reconnect_max_ms": 2000})
            self.br[bname] = b
        self.start_bridge("a1")
        wait_for(lambda: repl_state(self.http["a1"]) == "owner", 60, "a1 to own the log")
        self.start_bridge("a2")
        wait_for(lambda: repl_state(self.http["a2"]) == "standby", 60, "a2 to stand by")
        self.start_bridge("b")
        self.br["b"].wait_ready(60)
        h.log("a1 owns the log, a2 stands by, b is ready")

    def start_bridge(self, bname):
        b = self.br[bname]
        b.start(wait_ready=False)
        self.procs.append(Proc(bname, b.proc.pid))

    def cur(self, bname):
        pid = self.br[bname].proc.pid
        return [p for p in self.procs if p.pid == pid][-1]

    def t(self):
        return time.monotonic() - self.t_start

    def say(self, msg):
        h.log("CHAOS t=%6.1f %s" % (self.t(), msg))

    # roles -----------------------------------------------------------------
    def resolve(self, role):
        if role == "b":
            return "b"
        states = {}
        for bname in ("a1", "a2"):
            if bname in self.stopped or not self.br[bname].alive():
                states[bname] = None
            else:
                states[bname] = repl_state(self.http[bname])
        want = "owner" if role == "owner" else "standby"
        for bname, s in states.items():
            if s == want:
                return bname
        return None

    def is_busy(self, target):
        with self.lock:
            until = self.busy.get(target)
            return until is not None and (until is True or until > time.monotonic())

    def mark(self, target, seconds):
        with self.lock:
            self.busy[target] = True if seconds is True else time.monotonic() + seconds

    def later(self, seconds, fn):
        tm = threading.Timer(seconds, fn)
        tm.daemon = True
        tm.start()
        self.timers.append(tm)

    def count(self, kind):
        self.injected[kind] = self.injected.get(kind, 0) + 1

    # faults --------------------------------------------------------------------
    def inject(self, ev):
        t, kind, target, dur = ev
        if kind == "nodekill":
            node = "node%d" % target
            if any(self.is_busy("node%d" % i) for i in (1, 2, 3)):
                self.skipped.append(ev)
                self.say("SKIP %s node %d: a node is still down or rejoining" % (kind, target))
                return
            self.mark(node, True)
            self.count(kind)
            self.node_kills.append(time.monotonic())
            self.say("FAULT nodekill node %d for %.1f s" % (target, dur))
            tc.cluster(self.cdir, "kill-node", target)

            def back():
                self.say("HEAL node %d: starting" % target)
                tc.cluster(self.cdir, "start-node", target)
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline:
                    try:
                        if len(tc.running_nodes(self.cdir, target)) == 3:
                            break
                    except Exception:
                        pass
                    time.sleep(1.0)
                self.say("HEAL node %d: back in the cluster" % target)
                self.mark(node, 10)  # let queues catch up before the next node fault
            self.later(dur, lambda: _guard(back, self))
            return
        bname = self.resolve(target)
        if bname is None or self.is_busy(bname) or bname in self.held_down:
            self.skipped.append(ev)
            self.say("SKIP %s on %s (%s): target busy or not in that role now"
                     % (kind, target, bname))
            return
        self.count(kind)
        b = self.br[bname]
        if kind == "kill9":
            self.mark(bname, dur + 1)
            self.cur(bname).sample()
            self.held_down.add(bname)
            self.stopped.discard(bname)
            b.proc.kill()
            b.proc.wait()
            self.say("FAULT kill9 %s (%s); restart in %.1f s" % (bname, target, dur))

            def restart():
                self.start_bridge(bname)
                self.held_down.discard(bname)
                self.say("HEAL %s restarted (pid %d)" % (bname, b.proc.pid))
            self.later(dur, lambda: _guard(restart, self))
        elif kind == "sigstop":
            self.mark(bname, dur + 1)
            self.cur(bname).sample()
            os.kill(b.proc.pid, signal.SIGSTOP)
            self.stopped.add(bname)
            pid = b.proc.pid
            self.say("FAULT sigstop %s (%s, pid %d) for %.1f s" % (bname, target, pid, dur))

            def cont():
                self.stopped.discard(bname)
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                self.say("HEAL sigcont %s (pid %d)" % (bname, pid))
            self.later(dur, lambda: _guard(cont, self))
        elif kind in ("stall", "blackhole"):
            pname = self.live_proxy(bname)
            self.mark(bname, dur + 1)
            self.proxies.set_mode(pname, kind)
            self.say("FAULT %s proxy %s (%s, %d connection(s)) for %.1f s"
                     % (kind, pname, target, self.proxies.proxies[pname].live(), dur))

            def heal():
                self.proxies.set_mode(pname, "pass")
                self.say("HEAL proxy %s passes again" % pname)
            self.later(dur, lambda: _guard(heal, self))
        elif kind == "diskfull":
            self.mark(bname, dur + 1)
            path = self.fill_disk(bname)
            self.say("FAULT diskfull %s (%s) for %.1f s: %s" % (bname, target, dur, path))

            def free():
                self.free_disk(bname)
                self.say("HEAL disk of %s freed" % bname)
            self.later(dur, lambda: _guard(free, self))

    def live_proxy(self, bname):
        names = ["%s.n%d" % (bname, n) for n in NODE_ORDER[bname]]
        live = [n for n in names if self.proxies.proxies[n].live()]
        return live[0] if live else names[0]

    def fill_disk(self, bname):
        fs = self.mounts[BRIDGES.index(bname)]
        path = os.path.join(fs, "filler")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 4096, 512):  # to the last block
                chunk = b"\0" * size
                try:
                    while True:
                        os.write(fd, chunk)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        self.fill[bname] = path
        return path

    def free_disk(self, bname):
        path = self.fill.pop(bname, None)
        if path and os.path.exists(path):
            os.unlink(path)
        self.freed[bname] = time.monotonic()

    # the supervisor --------------------------------------------------------------
    def supervise(self):
        for bname, b in self.br.items():
            if bname in self.held_down:
                continue
            if b.alive():
                if bname not in self.stopped:
                    self.cur(bname).sample()
                continue
            if time.monotonic() - self.restarted.get(bname, 0) < 2.0:
                continue  # a bridge that keeps exiting is restarted every 2 s, not in a loop
            self.restarted[bname] = time.monotonic()
            code = b.proc.returncode
            text = b.log_text().splitlines()
            errors = [ln for ln in text if "level=error" in ln][-3:]
            reason = " | ".join(errors) if errors else (text[-1] if text else "")
            expected = code == 1 and ("replication failed" in reason or (
                "No space left on device" in reason and
                (bname in self.fill or time.monotonic() - self.freed.get(bname, 0) < 3.0)))
            self.exits.append((round(self.t(), 1), bname, code, reason, expected))
            self.say("EXIT %s by itself with code %s (%s): %s"
                     % (bname, code, "by design" if expected else "UNEXPLAINED", reason[:400]))
            self.stopped.discard(bname)
            self.start_bridge(bname)
            self.say("HEAL %s restarted by the supervisor (pid %d)" % (bname, b.proc.pid))

    def heal_all(self):
        for tm in self.timers:
            tm.cancel()
        for pname in self.proxies.proxies:
            self.proxies.set_mode(pname, "pass")
        for bname in list(self.fill):
            self.free_disk(bname)
        for bname in list(self.stopped):
            try:
                os.kill(self.br[bname].proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.stopped.discard(bname)
        for i in (1, 2, 3):
            if not node_up(self.cdir, i):
                self.say("HEAL node %d: starting (end of the schedule)" % i)
                tc.cluster(self.cdir, "start-node", i)
        for bname in list(self.held_down):
            if not self.br[bname].alive():
                self.start_bridge(bname)
            self.held_down.discard(bname)
        self.say("healed everything")


# EXPECTED: exits that are the bridge's design, not a failure (Chaos.supervise):
#  - "replication failed": an owner that lost its lease (its connection died,
#    its token was taken back, a confirm did not come in time) stops rather
#    than fire what a new owner holds (README, replicated WAL);
#  - ENOSPC while the schedule has its disk full: a bridge granted the lease
#    that must append the stream's newer records to its log cannot, exits 1
#    ("cannot open the WAL") and so gives the lease up for another bridge;
#    restarted, it tries again until space returns.


class WalKeeper(threading.Thread):
    """--keep-wal DIR: every 0.5 s, a copy of each segment file of each
    bridge's WAL that grew since the last look, into DIR/BRIDGE/, so that
    the records compaction deletes stay readable (wal_history.py)."""

    def __init__(self, out, fs):
        super().__init__(daemon=True, name="walkeeper")
        self.out, self.fs = out, fs  # fs: bridge -> its tmpfs
        self.stop = threading.Event()
        self.sizes = {}

    def look(self):
        for bname, fs in self.fs.items():
            src = os.path.join(fs, "wal")
            dst = os.path.join(self.out, bname)
            os.makedirs(dst, exist_ok=True)
            try:
                names = [n for n in os.listdir(src) if n.endswith(".wal")]
            except OSError:
                continue
            for n in names:
                try:
                    size = os.stat(os.path.join(src, n)).st_size
                    if self.sizes.get((bname, n)) == size:
                        continue
                    if size < self.sizes.get((bname, n), 0):  # created again: keep the old one
                        os.rename(os.path.join(dst, n), os.path.join(dst, "%s.%d" % (n, time.time())))
                    shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))
                    self.sizes[(bname, n)] = size
                except OSError:
                    pass  # deleted meanwhile, or the disk is full: the next look

    def run(self):
        while not self.stop.wait(0.5):
            self.look()


def node_up(cdir, i):
    pidf = os.path.join(cdir, "n%d" % i, "node.pid")
    try:
        with open(pidf) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


def _guard(fn, chaos):
    try:
        fn()
    except Exception as e:
        chaos.say("ERROR in a fault's timer: %r" % e)
        traceback.print_exc(file=sys.stdout)


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        h.check(time.monotonic() < deadline, "timed out waiting for %s" % what)
        time.sleep(0.1)


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

def run(ctx, cdir, args):
    rng = random.Random(args.seed)
    seconds = args.minutes * 60.0
    schedule = draw_schedule(random.Random(args.seed * 7919 + 1), seconds, args.every)
    h.log("CHAOS schedule (seed %d, %.1f min, %d events):" % (args.seed, args.minutes,
                                                              len(schedule)))
    for ev in schedule:
        h.log("CHAOS   at %6.1f s  %-9s %-7s %5.1f s" % ev)
    ch = Chaos(ctx, cdir, args)
    ch.setup()
    keeper = None
    if args.keep_wal:
        keeper = WalKeeper(args.keep_wal, {b: os.path.join(ctx.tmp, "fs-" + b) for b in BRIDGES})
        keeper.start()
    sink = Sink(ch.target_queue)
    sink.start()
    load = Load(ch.route["ingress_exchange"], args.rate, rng, args.key_gap)
    load.start()
    ch.t_start, ch.t_start_wall = time.monotonic(), time.time()
    tap_path = args.tap or os.path.join(ctx.tmp, "tap.txt")  # kept with a failed run
    ch.proxies.tap(open(tap_path, "w", buffering=1), ch.t_start)
    t_end = ch.t_start + seconds
    todo = list(schedule)
    try:
        while time.monotonic() < t_end:
            while todo and todo[0][0] <= ch.t():
                ch.inject(todo.pop(0))
            ch.supervise()
            time.sleep(0.2)
    finally:
        ch.heal_all()
    load.stop.set()
    load.join(args.key_gap + 30)  # the keys' last operations go out at their times
    h.log("CHAOS load stopped: %d published; waiting for everything due (up to %d s)"
          % (len(load.msgs), MAX_DELAY_MS // 1000 + 90))
    # Every bridge must come back and stay up; everything due must arrive.
    deadline = time.monotonic() + MAX_DELAY_MS / 1000.0 + 90
    msgs = load.msgs
    while time.monotonic() < deadline:
        ch.supervise()
        rep, fails = check_run(msgs, sink.snapshot(), ch.node_kills)
        if not rep["lost"] and time.monotonic() > rep["last_due"] + 2:
            break
        time.sleep(1.0)
    time.sleep(3.0)
    ch.supervise()
    for bname in BRIDGES:
        ch.cur(bname).sample()
    if keeper:
        keeper.stop.set()
        keeper.join()
        keeper.look()
    alive = {bname: ch.br[bname].alive() for bname in BRIDGES}
    deliveries = sink.snapshot()
    if args.plant:
        plant(args.plant, msgs, deliveries, random.Random(args.seed))
    ch.proxies.tap_file.flush()
    events = tap_key_events(tap_path)
    trace, verdicts = trace_superseded(msgs, deliveries, ch.t_start, events, ch.t_start_wall)
    rep, fails = check_run(msgs, deliveries, ch.node_kills, verdicts)
    dump_record(args.record or os.path.join(ctx.tmp, "record.json"), msgs, deliveries,
                ch.node_kills, ch.t_start, ch.t_start_wall)
    report(ch, load, sink, rep, args)
    for line in trace:
        h.log("CHAOS TRACE " + line)
    if args.keep_wal:
        trace_wal(msgs, deliveries, args.keep_wal, ch.t_start_wall)
    unexplained_exits = [e for e in ch.exits if not e[4]]
    if unexplained_exits:
        fails.append("%d bridge exit(s) not by design: %s" % (len(unexplained_exits),
                                                             unexplained_exits[:5]))
    dead = [bname for bname, up in alive.items() if not up]
    if dead:
        fails.append("not running at the end: %s" % dead)
    for p in ch.procs:
        if p.t1 - p.t0 > 60 and p.rss1 > 2 * p.rss0 + 16384:
            fails.append("RSS of %s pid %d grew from %d to %d KiB in %.0f s"
                         % (p.who, p.pid, p.rss0, p.rss1, p.t1 - p.t0))
    sink.stop.set()
    for bname in BRIDGES:
        if ch.br[bname].alive():
            ch.br[bname].stop(expect=None)
    ch.proxies.close()
    for fs in ch.mounts:
        if fails:  # the logs, for `delay-bridge wal dump` in the post-mortem
            shutil.copytree(fs, fs + ".copy", ignore=shutil.ignore_patterns("filler"),
                            dirs_exist_ok=True)
        subprocess.run(["umount", "-l", fs])
    if fails:
        h.fail("; ".join(fails))


def dump_record(path, msgs, deliveries, node_kills=(), t_start=None, t_start_wall=None):
    """Everything sent and received (--record, or record.json with the kept
    files), for a post-mortem or a --recheck. Times are time.monotonic();
    t_start_wall is the wall clock (epoch s) at t_start."""
    with open(path, "w") as f:
        json.dump({"sent": msgs, "node_kills": list(node_kills), "t_start": t_start,
                   "t_start_wall": t_start_wall,
                   "delivered": [{"id": m.message_id, "t": m.t, "bid": m.bridge_id,
                                  "redelivered": m.redelivered} for m in deliveries]}, f)


def recheck(args):
    """--recheck FILE: the checker over a recorded run (with --plant: doctored)."""
    with open(args.recheck) as f:
        r = json.load(f)
    msgs = r["sent"]
    deliveries = []
    for d in r["delivered"]:
        props = pika.BasicProperties(message_id=d["id"],
                                     headers={"x-delay-bridge-id": h.lstr(d["bid"])})
        m = h.Msg("target", d["t"], _Method(None), props, b"")
        m.redelivered = d["redelivered"]
        deliveries.append(m)
    if args.plant:
        plant(args.plant, msgs, deliveries, random.Random(args.seed))
    events = tap_key_events(args.tap) if args.tap else None
    trace, verdicts = trace_superseded(msgs, deliveries, r.get("t_start"), events,
                                       r.get("t_start_wall"))
    rep, fails = check_run(msgs, deliveries, r.get("node_kills", ()), verdicts)
    h.log("CHAOS RECHECK %s: sent=%d expected=%d delivered=%d lost=%d early=%d "
          "replaced_delivered=%d cancelled_delivered=%d successor_late=%d unknown=%d "
          "duplicates %s"
          % (args.recheck, rep["sent"], rep["expected"], rep["delivered"], len(rep["lost"]),
             len(rep["early"]), len(rep["replaced_delivered"]), len(rep["cancelled_delivered"]),
             len(rep["successor_late"]), len(rep["unknown"]), rep["dups"]))
    for line in trace:
        h.log("CHAOS TRACE " + line)
    for f in fails:
        h.log("CHAOS RECHECK FAIL: %s" % f)
    h.log("chaos_soak: recheck %s" % ("FAIL" if fails else "PASS"))
    sys.exit(1 if fails else 0)


def report(ch, load, sink, rep, args):
    L = h.log
    L("CHAOS RESULT seed=%d minutes=%.1f rate=%.0f published=%d sent=%d (confirmed) "
      "unconfirmed=%d (of which delivered %d) expected=%d delivered=%d distinct=%d lost=%d "
      "early=%d replaced_delivered=%d cancelled_delivered=%d superseded=%d ambiguous_keys=%d "
      "unknown=%d" % (args.seed, args.minutes, args.rate, rep["published"], rep["sent"],
                      rep["unconfirmed"], rep["unconfirmed_delivered"], rep["expected"],
                      rep["delivered"], rep["distinct"], len(rep["lost"]), len(rep["early"]),
                      len(rep["replaced_delivered"]), len(rep["cancelled_delivered"]),
                      rep["superseded"], rep["ambiguous_keys"], len(rep["unknown"])))
    L("CHAOS superseded versions delivered whose successor was published around a node kill "
      "(key event lost with the node; README: a broker crash that loses the event lets both "
      "versions fire): %d %s" % (len(rep["event_lost_in_node_kill"]),
                                 rep["event_lost_in_node_kill"][:5]))
    L("CHAOS superseded versions delivered whose successor reached a bridge only after they "
      "had been delivered (too late to replace them: CHAOS TRACE proves it): %d %s"
      % (len(rep["successor_late"]), rep["successor_late"][:5]))
    for kind, n in rep["dups"].items():
        L("CHAOS duplicates %-21s %5d  e.g. %s -- %s" % (kind, n, rep["dup_examples"][kind][:3],
                                                        DUP_REASONS[kind]))
    L("CHAOS faults injected: %s; skipped %d; publisher reconnects %d, consumer reconnects %d"
      % (", ".join("%s %d" % kv for kv in sorted(ch.injected.items())), len(ch.skipped),
         load.reconnects, sink.reconnects))
    for e in ch.exits:
        L("CHAOS exit t=%.1f %s code %s %s: %s" % (e[0], e[1], e[2],
                                                   "by design" if e[4] else "UNEXPLAINED",
                                                   e[3][:300]))
    for bname in BRIDGES:
        ps = [p for p in ch.procs if p.who == bname]
        longest = max(ps, key=lambda p: p.t1 - p.t0)
        L("CHAOS rss %s: %d processes; first %d KiB at start, last %d KiB at end; longest-lived "
          "pid %d %d -> %d KiB over %.0f s" % (bname, len(ps), ps[0].rss0, ps[-1].rss1,
                                               longest.pid, longest.rss0, longest.rss1,
                                               longest.t1 - longest.t0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--rate", type=float, default=30.0, help="messages per second")
    ap.add_argument("--every", type=float, default=12.0, help="mean seconds between bridge faults")
    ap.add_argument("--key-gap", type=float, default=40.0,
                    help="seconds between the versions (or cancel) of one key")
    ap.add_argument("--tmpfs-mb", type=int, default=48, help="size of each bridge's WAL tmpfs")
    ap.add_argument("--plant", choices=("lost", "early", "replaced", "dup"), default=None,
                    help="doctor the record so that the checker must fail")
    ap.add_argument("--record", default=None, help="write everything sent and received here")
    ap.add_argument("--keep-wal", default=None, metavar="DIR",
                    help="copy every WAL segment of every bridge as it grows into DIR/BRIDGE/ "
                    "(wal_history.py reads them)")
    ap.add_argument("--tap", default=None, metavar="FILE",
                    help="write every delivery to and publish from a bridge that the proxies "
                    "pass (message-id, x-delay-key* headers) to FILE instead of the run's "
                    "tap.txt; with --recheck, read the key events from FILE")
    ap.add_argument("--recheck", default=None, metavar="FILE",
                    help="run no system: only the checker, over a --record file")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    if args.recheck:
        recheck(args)
    if os.geteuid() != 0:
        h.log("chaos_soak: SKIP: the WAL tmpfs mounts need root")
        sys.exit(h.SKIP)
    h.log("chaos_soak: seed %d, %.1f min, %.0f msg/s, a bridge fault every ~%.0f s; nodes "
          "%d-%d (dist %d-%d), proxies %d-%d, http %d-%d; replay: --seed %d --minutes %g"
          % (args.seed, args.minutes, args.rate, args.every, PORT, PORT + 2, DIST_PORT,
             DIST_PORT + 2, PROXY_PORT, PROXY_PORT + 8, HTTP_PORT, HTTP_PORT + 2, args.seed,
             args.minutes))
    ctx = h.Ctx("chaos")
    cdir = os.path.join(ctx.tmp, "cluster")
    rc = 1
    try:
        r = tc.cluster(cdir, "start", PORT, DIST_PORT, ok=(0, 77, 1))
        if r.returncode == 77:
            h.log("chaos_soak: SKIP: no cluster here: %s" % r.stdout.strip()[-200:])
            rc = h.SKIP
        else:
            h.check(r.returncode == 0, "the cluster did not start (logs in %s)" % cdir)
            os.environ["DB_TEST_BROKER_URI"] = node_uri(3)
            os.environ.pop("DB_TEST_BROKER_DIR", None)
            run(ctx, cdir, args)
            rc = 0
    except BaseException as e:  # noqa: B902
        h.report(ctx, e)
    finally:
        for b in ctx.bridges:
            b.cleanup()
        for fs in [os.path.join(ctx.tmp, "fs-" + n) for n in BRIDGES]:
            if os.path.ismount(fs):
                subprocess.run(["umount", "-l", fs])
        tc.cluster(cdir, "stop", ok=(0, 1))
        if rc != 1 and not os.environ.get("DB_TEST_KEEP"):
            shutil.rmtree(ctx.tmp, ignore_errors=True)
        else:
            h.log("files kept in %s" % ctx.tmp)
    h.log("chaos_soak: %s (seed %d; replay: --seed %d --minutes %g%s)"
          % ({0: "PASS", h.SKIP: "SKIPPED"}.get(rc, "FAIL"), args.seed, args.seed, args.minutes,
             " --plant " + args.plant if args.plant else ""))
    sys.stdout.flush()
    os._exit(rc)


if __name__ == "__main__":
    main()
