#!/usr/bin/python3
"""Node loss in a three-node RabbitMQ cluster while messages flow and are held.

A cluster of three nodes on loopback (tests/integration/cluster/cluster.sh:
ports DB_TEST_CLUSTER_PORT..+2, default 5711..5713, distribution ports
DB_TEST_CLUSTER_DIST_PORT..+2, default 25711..25713, state under the test's
tmp dir, one Erlang cookie, nodes 2 and 3 joined to node 1). The bridge gets
broker.uri = the three node URIs and a route with a quorum ingress queue;
the target queue is a quorum queue too, so nothing a node holds is lost with
it. A test publisher (publisher confirms, on node 2, moving to another node
if its own goes away) sends 2000 persistent messages with delays 0-8 s,
paced over a few seconds; a consumer on node 3 takes the target queue.

Two rounds, each a fresh batch: while messages are flowing and held, the
node the bridge's two connections are on (found with `rabbitmqctl
list_connections`: the bridge names them "delay-bridge consumer" /
"delay-bridge publisher") goes away -- round 1 `rabbitmqctl stop` (graceful:
the broker closes the connections with 320 CONNECTION_FORCED), round 2
SIGKILL of the node (a crash: the sockets just drop, publishes in flight
are unconfirmed). Checked in each round:

- the bridge logs the lost connections and connects and consumes again on
  another URI, and list_connections shows both connections on a node that
  is up; /readyz is 200 again;
- every message the broker confirmed to the publisher arrives (lost = 0),
  none before its due time (harness early tolerance); duplicates are
  counted by cause with harness.tally() and printed (allowed: a node loss
  means at-least-once);
- the node comes back and rejoins (3 running nodes); after both rounds the
  bridge still delivers a fresh batch published through node 1; SIGTERM
  exits 0.

Skipped (exit 77) when the cluster cannot be formed here (ports busy,
rabbitmq-server missing). Every node is stopped in a finally block.
"""

import json
import os
import random
import re
import subprocess
import threading
import time

import pika

import harness as h
from harness import check

CLUSTER_SH = os.path.join(h.HERE, "cluster", "cluster.sh")
PORT = int(os.environ.get("DB_TEST_CLUSTER_PORT", "5711"))
DIST_PORT = int(os.environ.get("DB_TEST_CLUSTER_DIST_PORT", str(PORT + 20000)))
N = 2000
MAX_DELAY_MS = 8000
PUBLISH_SPAN_S = 6.0     # the publisher paces N messages over about this long
FAULT_AFTER = N // 3     # stop the bridge's node once this many are confirmed


def cluster(cdir, *args, timeout=240, ok=(0,)):
    args = [str(a) for a in args]
    cmd = ["bash", CLUSTER_SH, args[0], cdir] + args[1:]
    h.log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    for line in r.stdout.splitlines():
        h.log("  " + line)
    check(r.returncode in ok, "cluster.sh %s failed with exit %d" % (" ".join(args), r.returncode))
    return r


def ctl(cdir, node, *args):
    r = subprocess.run(["bash", CLUSTER_SH, "ctl", cdir, str(node), "-q"] + list(args),
                       timeout=60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    check(r.returncode == 0, "rabbitmqctl %s on node %d failed: %s" % (" ".join(args), node,
                                                                      r.stderr.strip()))
    return r.stdout


def uri(node):
    return "amqp://guest:guest@127.0.0.1:%d/%%2f" % (PORT + node - 1)


def bridge_connections(cdir, node):
    """{connection name: server port} of the bridge's connections, as the
    cluster (asked through `node`) lists them."""
    out = ctl(cdir, node, "list_connections", "port", "client_properties", "--formatter", "json")
    conns = {}
    for c in json.loads(out or "[]"):
        name = h.connection_name(c.get("client_properties"))
        if name and name.startswith("delay-bridge "):
            conns[name] = int(c["port"])
    return conns


def running_nodes(cdir, node):
    st = json.loads(ctl(cdir, node, "cluster_status", "--formatter", "json"))
    return sorted(st.get("running_nodes", []))


free_port = h.free_port  # one copy, in harness.py


http_get = h.http_get  # one copy, in harness.py


class FailoverPublisher(threading.Thread):
    """Publishes the batch with publisher confirms, one message at a time,
    starting on `nodes[0]`; on a lost connection it moves to the next node.
    sent: message_id -> (time just before sending, delay ms) for the
    confirmed ones; unconfirmed: ids whose fate is unknown (connection lost
    before the confirm) or that were nacked."""

    def __init__(self, exchange, msgs, nodes, span_s):
        super().__init__(name="publisher", daemon=True)
        self.exchange = exchange
        self.msgs = msgs
        self.nodes = list(nodes)
        self.span_s = span_s
        self.sent = {}
        self.unconfirmed = set()
        self.nacked = 0
        self.reconnects = 0
        self.error = None
        self.lock = threading.Lock()

    def confirmed(self):
        with self.lock:
            return len(self.sent)

    def _connect(self):
        deadline = time.monotonic() + 30
        i = 0
        while True:
            node = self.nodes[i % len(self.nodes)]
            try:
                p = pika.URLParameters(uri(node))
                p.connection_attempts = 1
                p.socket_timeout = 5
                p.blocked_connection_timeout = 30
                conn = pika.BlockingConnection(p)
                ch = conn.channel()
                ch.confirm_delivery()
                return node, conn, ch
            except pika.exceptions.AMQPError:
                i += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def run(self):
        try:
            node, conn, ch = self._connect()
            t_start = time.monotonic()
            for k, (mid, ms) in enumerate(self.msgs):
                # pace: message k goes out no earlier than k/N of the span
                lag = t_start + self.span_s * k / len(self.msgs) - time.monotonic()
                if lag > 0:
                    time.sleep(lag)
                props = pika.BasicProperties(message_id=mid, delivery_mode=2,
                                             headers={"x-delay": h.i32(ms)})
                while True:
                    t = time.monotonic()
                    try:
                        ch.basic_publish(self.exchange, "rk", mid.encode(), props, mandatory=True)
                        with self.lock:
                            self.sent[mid] = (t, ms)
                        break
                    except pika.exceptions.NackError:
                        self.nacked += 1
                        self.unconfirmed.add(mid)
                        break
                    except pika.exceptions.UnroutableError:
                        self.unconfirmed.add(mid)
                        break
                    except pika.exceptions.AMQPError as e:
                        # the fate of this one is unknown; send it again on
                        # another node (a copy may arrive: an "unknown" id
                        # only if the first copy was never confirmed)
                        h.log("publisher: connection to node %d lost (%r) at %s; moving on"
                              % (node, e, mid))
                        self.unconfirmed.add(mid)
                        self.nodes = self.nodes[1:] + self.nodes[:1]
                        self.reconnects += 1
                        node, conn, ch = self._connect()
                        h.log("publisher: now on node %d" % node)
            conn.close()
        except Exception as e:  # reported by the test
            self.error = e


def quorum_target(ctx):
    """A direct target exchange and a quorum queue bound to it with "rk":
    (exchange, queue). The several-bridge tests consume it on node 3."""
    ex = ctx.declare_exchange(ctx.n("target"), "direct")
    tq = ctx.n("target.q")
    ctx.admin().queue_declare(tq, durable=True, arguments={"x-queue-type": "quorum"})
    ctx.queues.add(tq)
    ctx.bind(tq, ex, "rk")
    return ex, tq


def on_cluster(ctx, run):
    """Form the three-node cluster, point the harness at node 3 (declarations,
    test consumers), call run(ctx, cdir), then stop what talks to the
    cluster and every node, whatever happened. Skips (77) where no cluster
    can be formed. The scale_out test runs on it too."""
    cdir = os.path.join(ctx.tmp, "cluster")
    t_begin = time.monotonic()
    saved_env = {k: os.environ.get(k) for k in ("DB_TEST_BROKER_URI", "DB_TEST_BROKER_DIR")}
    try:
        r = cluster(cdir, "start", PORT, DIST_PORT, ok=(0, 77, 1))
        if r.returncode == 77:
            raise h.Skip("cannot form a three-node cluster on 127.0.0.1 ports %d-%d / %d-%d: %s"
                         % (PORT, PORT + 2, DIST_PORT, DIST_PORT + 2,
                            (r.stdout.strip().splitlines() or ["?"])[-1]))
        check(r.returncode == 0, "the three-node cluster did not start (exit %d; logs in %s)"
              % (r.returncode, cdir))
        h.log("cluster up in %.1fs: %s" % (time.monotonic() - t_begin, running_nodes(cdir, 1)))
        # Everything the harness connects to uses node 3; the suite's own broker is not touched.
        os.environ["DB_TEST_BROKER_URI"] = uri(3)
        os.environ.pop("DB_TEST_BROKER_DIR", None)
        run(ctx, cdir)
    finally:
        # Stop what talks to the cluster first, then every node.
        for c in ctx.consumers:
            c.close()
        for b in ctx.bridges:
            b.cleanup()
        t0 = time.monotonic()
        cluster(cdir, "stop", ok=(0, 1))
        h.log("cluster stopped in %.1fs" % (time.monotonic() - t0))
        # the queues and exchanges went with the cluster: nothing for ctx.cleanup to delete
        ctx.queues.clear()
        ctx.exchanges.clear()
        ctx.consumers[:] = []
        ctx._admin = None
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    h.log("total run time %.1fs" % (time.monotonic() - t_begin))


def test(ctx):
    on_cluster(ctx, run_test)


def find_bridge(cdir, ask, expect_ports=None, timeout=15):
    """The node both bridge connections are on (asking node `ask`)."""
    deadline = time.monotonic() + timeout
    while True:
        conns = bridge_connections(cdir, ask)
        ok = sorted(conns) == ["delay-bridge consumer", "delay-bridge publisher"] and \
            len(set(conns.values())) == 1 and \
            (expect_ports is None or set(conns.values()) <= set(expect_ports))
        if ok:
            return conns, list(conns.values())[0] - PORT + 1
        check(time.monotonic() < deadline,
              "list_connections (node %d) should show the bridge's two named connections "
              "on one node%s, got %s" % (ask, " of ports %s" % sorted(expect_ports)
                                         if expect_ports else "", conns))
        time.sleep(0.3)


def wait_rejoined(cdir, node):
    t0 = time.monotonic()
    cluster(cdir, "start-node", node)
    deadline = time.monotonic() + 60
    while len(running_nodes(cdir, node)) != 3:
        check(time.monotonic() < deadline, "node %d did not rejoin the cluster" % node)
        time.sleep(0.5)
    h.log("node %d back and clustered in %.1fs" % (node, time.monotonic() - t0))


def fault_round(ctx, cdir, b, c, route, http_port, rnd, kind, seed):
    """One batch of N messages; once a third is confirmed, `kind` ("stop":
    rabbitmqctl stop, graceful; "kill": SIGKILL, a crash) hits the node the
    bridge is on. Returns (tally, reconnect seconds, fault node)."""
    conns, fault = find_bridge(cdir, 3)
    check(fault != 3, "the bridge is on node 3, where the test consumes (expected node 1 or 2)")
    survivors = [n for n in (1, 2, 3) if n != fault]
    h.log("round %d (%s): the bridge is on node %d (%s); the test consumes on node 3"
          % (rnd, kind, fault, conns))

    rng = random.Random(seed)
    msgs = [("r%d.%04d" % (rnd, i), rng.randint(0, MAX_DELAY_MS)) for i in range(N)]
    pub = FailoverPublisher(route["ingress_exchange"], msgs,
                            [n for n in (2, 3, 1) if n != fault], PUBLISH_SPAN_S)
    t_pub = time.monotonic()
    pub.start()

    deadline = time.monotonic() + 30
    while pub.confirmed() < FAULT_AFTER:
        check(pub.is_alive(), "publisher stopped early: %r" % pub.error)
        check(time.monotonic() < deadline, "publisher confirmed only %d in 30 s" % pub.confirmed())
        time.sleep(0.05)
    h.log("round %d: %d confirmed, %d delivered in all so far: %s node %d (the bridge's)"
          % (rnd, pub.confirmed(), c.count(), "stopping" if kind == "stop" else "killing", fault))
    log_before = len(b.log_text())
    t_fault = time.monotonic()
    cluster(cdir, "stop-node" if kind == "stop" else "kill-node", fault)
    h.log("round %d: node %d %s in %.1fs" % (rnd, fault, "stopped" if kind == "stop" else "killed",
                                            time.monotonic() - t_fault))

    # The bridge moves to another URI.
    other = "|".join(str(PORT + n - 1) for n in survivors)
    pat_pub = re.compile(r'mod=publish msg="connected" broker="amqp://[^"]*:(%s)/' % other)
    pat_con = re.compile(r'mod=consume msg="consuming" broker="amqp://[^"]*:(%s)/' % other)
    deadline = time.monotonic() + 30
    while True:
        since = b.log_text()[log_before:]
        if pat_pub.search(since) and pat_con.search(since):
            break
        b.check_alive()
        check(time.monotonic() < deadline,
              "round %d: the bridge did not reconnect to another URI within 30 s; its log since "
              "the fault:\n%s" % (rnd, since[-3000:]))
        time.sleep(0.1)
    t_reconn = time.monotonic() - t_fault
    for line in since.splitlines():
        if re.search(r'msg="(publisher connection lost|consumer connection lost|connected|consuming|'
                     r'cannot connect|cannot start consuming)"', line):
            h.log("bridge: " + line)
    conns, now_on = find_bridge(cdir, survivors[-1], [PORT + n - 1 for n in survivors])
    h.log("round %d: bridge connections after the fault: %s" % (rnd, conns))
    deadline = time.monotonic() + 15
    while http_get(http_port, "/readyz")[0] != 200:
        check(time.monotonic() < deadline, "/readyz not 200 within 15 s of reconnecting: %r"
              % (http_get(http_port, "/readyz"),))
        time.sleep(0.2)
    h.log("round %d: on node %d %.1fs after the fault began; /readyz 200" % (rnd, now_on, t_reconn))

    pub.join(60)
    check(not pub.is_alive(), "publisher did not finish")
    check(pub.error is None, "publisher failed: %r" % pub.error)
    h.log("round %d: publisher done after %.1fs: %d confirmed, %d unconfirmed (%d nacked), "
          "%d reconnects" % (rnd, time.monotonic() - t_pub, len(pub.sent), len(pub.unconfirmed),
                             pub.nacked, pub.reconnects))
    check(len(pub.sent) >= N * 0.9, "only %d of %d publishes were confirmed" % (len(pub.sent), N))

    c.wait_ids(pub.sent.keys(), MAX_DELAY_MS / 1000.0 + 45)
    c.quiet(2.0)
    mine = [m for m in c.snapshot() if m.message_id.startswith("r%d." % rnd)]
    t = h.tally(pub.sent.keys(), mine)
    h.log("round %d tally: %s" % (rnd, h.tally_line(t)))
    check(not t["lost"], "%d confirmed message(s) never arrived: %s" % (len(t["lost"]), t["lost"][:20]))
    strays = set(t["unknown"]) - pub.unconfirmed
    check(not strays, "message ids arrived that were never published: %s" % sorted(strays)[:20])
    if t["unknown"]:
        h.log("%d message(s) whose publish was never confirmed arrived as well (allowed)"
              % len(t["unknown"]))

    early, late, worst = [], 0, 0.0
    for mid, (t0, ms) in pub.sent.items():
        took = min(m.t for m in t["per_id"][mid]) - t0
        if took < ms / 1000.0 - h.early_tolerance():
            early.append("%s after %.3fs, due after %.3fs" % (mid, took, ms / 1000.0))
        worst = max(worst, took - ms / 1000.0)
        late += took - ms / 1000.0 > h.late_tolerance()
    check(not early, "%d message(s) arrived EARLY: %s" % (len(early), early[:10]))
    h.log("round %d: none early; %d later than %.1fs (around the fault); worst lateness %.2fs"
          % (rnd, late, h.late_tolerance(), worst))

    wait_rejoined(cdir, fault)
    b.check_alive()
    return t, t_reconn, fault


def run_test(ctx, cdir):
    ex, tq = quorum_target(ctx)

    http_port = free_port()
    route = ctx.route("cl", ex, queue_type="quorum")
    b = ctx.bridge([route], broker={"uri": [uri(1), uri(2), uri(3)], "connect_timeout_ms": 3000},
                   http={"listen": "127.0.0.1:%d" % http_port})
    c = ctx.consumer([tq])

    results = []
    for rnd, kind in ((1, "stop"), (2, "kill")):
        results.append((kind,) + fault_round(ctx, cdir, b, c, route, http_port, rnd, kind, 10 + rnd))

    # After both faults the bridge still delivers through the returned node.
    p = ctx.publisher(uri=uri(1))
    after = {}
    for i in range(20):
        mid = "after%02d" % i
        after[mid] = p.publish(route["ingress_exchange"], "rk", b"after",
                               headers={"x-delay": h.i32(1000)}, message_id=mid, delivery_mode=2)
    p.close()
    c.wait_ids(after.keys(), 20)
    for m in c.snapshot():
        if m.message_id in after:
            h.check_on_time(m, after[m.message_id], 1.0, m.message_id, late=10.0)
    h.log("20 messages published through node 1 after both faults arrived on time")
    b.stop()
    for kind, t, t_reconn, fault in results:
        h.log("RESULT %s node %d: sent=%d delivered=%d lost=%d duplicates=%d (case1=%d case2=%d) "
              "max_copies=%d unconfirmed_arrived=%d reconnect_s=%.1f"
              % (kind, fault, t["sent"], t["delivered"], len(t["lost"]), t["duplicates"],
                 t["case1"], t["case2"], t["max_copies"], len(t["unknown"]), t_reconn))


if __name__ == "__main__":
    h.run(test, budget_s=420)
