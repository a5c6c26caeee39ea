#!/usr/bin/python3
"""clusterloss.py -- delayed messages on a three-node cluster that loses a node
(issue 43): RabbitMQ's own delays (qq-vNext) beside delay-bridge.

    clusterloss.py [--count N] [--spread MIN,MAX] [--kill-at S] [--cases qq,bridge]
                   [--wait S] [--keep]

A three-node cluster on loopback (tests/integration/cluster/cluster.sh, the
broker DB_RABBITMQ names, default qq-delay: rabbitmq-server's qq-vNext branch,
whose quorum queues hold a message published with header x-opt-delivery-time,
epoch ms, until then). AMQP ports CLUSTERLOSS_PORT..+2 (default 5965..5967),
distribution ports CLUSTERLOSS_DIST_PORT..+2 (default 25965..25967), state in
CLUSTERLOSS_DIR (default /var/tmp/clusterloss-PORT; fresh: removed at the start,
and at the end unless --keep, with the node directories inside the broker's
root). Two cases, each on quorum queues of three members:

  qq      RabbitMQ's own delay: quorum queue cl.qq.<run> (declared through
          node 1, so its leader is node 1 as a rule); N persistent messages,
          publisher confirms, header x-opt-delivery-time = the send time + a
          delay drawn uniformly from MIN..MAX s (default 10..20).
  bridge  delay-bridge (BENCH_BRIDGE_BIN, default build/delay-bridge):
          broker.uri = nodes 1, 2, 3 (it connects to node 1), one route with a
          quorum ingress queue and target exchange cl.bt.<run> bound to the
          quorum queue cl.bq.<run> (declared through node 1); N persistent
          messages with x-delay drawn the same way, through node 1, confirmed;
          every one held (/stats held = N) before the clock below starts.

The node that matters is found with rabbitmqctl through another node: in qq
the queue's leader (list_queues name leader), in bridge the node of the
bridge's connections (list_connections: "delay-bridge consumer/publisher"),
which also leads its ingress and target queues as a rule (the line says
where the leaders were). A consumer (manual acks, prefetch 500) on a node
that is not that one subscribes before the publish. --kill-at S (default 15)
after the first publish, in the middle of the due times, that node is killed
(SIGKILL of its process group, as cluster.sh kill-node; the clock starts at
the signal); the case waits until every message arrived or --wait S
(default 90) past the last due time, then starts the node again.

Figures per case, each line naming the broker and the mechanism: sent
(confirmed), delivered (distinct), lost, duplicates, early (arrived before
its due time: the receive time on this machine's clock against the due time
in epoch ms; the bridge's due is its own receive time + x-delay, never before
this script's send time + x-delay), lateness p50/p99/max over all, the same
over the messages due after the kill, kill -> the first delivery after it
(the new leader, or the bridge on its new connection, delivering), and the
longest gap between two deliveries after the kill. One line per figure, then
the table. Never asserts on a time.

Exit 0 when every confirmed message arrived in every case; 1 when one was lost
(or arrived early); 2 on a usage or setup error; 77 when the cluster cannot be
formed here.
"""
import argparse
import calendar
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pika

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402  (connection_name: one reading of rabbitmqctl's client_properties)
CLUSTER_SH = os.path.join(ROOT, "tests", "integration", "cluster", "cluster.sh")
BROKER_SH = os.path.join(ROOT, "tests", "integration", "broker.sh")
PORT = int(os.environ.get("CLUSTERLOSS_PORT", "5965"))
DIST = int(os.environ.get("CLUSTERLOSS_DIST_PORT", str(PORT + 20000)))
CDIR = os.environ.get("CLUSTERLOSS_DIR", "/var/tmp/clusterloss-%d" % PORT)
RUN = "%d" % time.time()


def say(msg):
    sys.stderr.write("[clusterloss %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


class SetupError(Exception):
    pass


def now_ms():
    return time.time() * 1000.0


def uri(node):
    return "amqp://guest:guest@127.0.0.1:%d/%%2f" % (PORT + node - 1)


def cluster(*args, ok=(0,), timeout=300):
    cmd = ["bash", CLUSTER_SH, args[0], CDIR] + [str(a) for a in args[1:]]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=timeout)
    if r.returncode not in ok:
        sys.stderr.write(r.stdout)
        if r.returncode == 77:
            say("the cluster cannot be formed here: skipping")
            sys.exit(77)
        raise SetupError("cluster.sh %s: exit %d" % (" ".join(map(str, args)), r.returncode))
    return r


def ctl_json(node, *args):
    r = subprocess.run(["bash", CLUSTER_SH, "ctl", CDIR, str(node), "-q"] + list(args) +
                       ["--formatter", "json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if r.returncode != 0:
        raise SetupError("rabbitmqctl %s on node %d: %s" % (" ".join(args), node, r.stderr.strip()))
    return json.loads(r.stdout or "[]")


def node_of(erlang_node):
    for i in (1, 2, 3):
        if ("dbtest%d@" % (PORT + i - 1)) in (erlang_node or ""):
            return i
    return None


def leaders(via, names):
    """{queue name: node 1..3 of its leader}, asked through node `via`."""
    out = {}
    for q in ctl_json(via, "list_queues", "name", "leader"):
        if q.get("name") in names:
            out[q["name"]] = node_of(q.get("leader"))
    return out


def bridge_node(via):
    nodes = set()
    for c in ctl_json(via, "list_connections", "port", "client_properties"):
        name = harness.connection_name(c.get("client_properties"))
        if name and name.startswith("delay-bridge "):
            nodes.add(int(c["port"]) - PORT + 1)
    return nodes


def connect(node, tries=30):
    p = pika.URLParameters(uri(node))
    p.connection_attempts = 1
    p.socket_timeout = 5
    p.heartbeat = 0
    last = None
    for _ in range(tries):
        try:
            return pika.BlockingConnection(p)
        except pika.exceptions.AMQPError as e:
            last = e
            time.sleep(1)
    raise SetupError("cannot connect to node %d: %r" % (node, last))


class Consumer(threading.Thread):
    """Consumes `queue` on `node`, acking each message after noting its
    arrival (epoch ms) by message id; resubscribes (and reconnects) when the
    broker cancels it or the connection goes."""

    def __init__(self, node, queue):
        super().__init__(name="consumer", daemon=True)
        self.node, self.queue = node, queue
        self.got = {}          # id -> [arrival ms, ...]
        self.order = []        # arrival ms of every delivery
        self.stop_flag = threading.Event()
        self.ready = threading.Event()
        self.resubscribes = 0
        self.lock = threading.Lock()

    def run(self):
        while not self.stop_flag.is_set():
            try:
                conn = connect(self.node)
                ch = conn.channel()
                ch.basic_qos(prefetch_count=500)
                while not self.stop_flag.is_set():
                    self.ready.set()
                    for method, props, body in ch.consume(self.queue, inactivity_timeout=0.1):
                        if self.stop_flag.is_set():
                            break
                        if method is None:
                            continue
                        t = now_ms()
                        with self.lock:
                            self.got.setdefault(props.message_id, []).append(t)
                            self.order.append(t)
                        ch.basic_ack(method.delivery_tag)
                    else:
                        self.resubscribes += 1  # cancelled by the broker
                        continue
                    break
                try:
                    ch.cancel()
                    conn.close()
                except Exception:
                    pass
            except Exception as e:  # connection lost: connect again
                self.resubscribes += 1
                say("consumer on node %d: %r; again" % (self.node, e))
                time.sleep(0.5)

    def count(self):
        with self.lock:
            return len(self.got)


def publish(node, exchange, rk, n, spread, header):
    """Sends n persistent messages with publisher confirms; returns
    {id: due ms} of the confirmed ones and the first send time."""
    conn = connect(node)
    ch = conn.channel()
    ch.confirm_delivery()
    due = {}
    t_first = None
    for i in range(n):
        mid = "%s-%d" % (RUN, i)
        delay = random.randint(spread[0], spread[1])
        t = now_ms()
        if t_first is None:
            t_first = t
        if header == "x-opt-delivery-time":
            headers = {"x-opt-delivery-time": int(t) + delay}
            d = int(t) + delay
        else:
            headers = {"x-delay": delay}
            d = t + delay
        try:
            ch.basic_publish(exchange, rk, json.dumps({"id": mid, "due": d}).encode(),
                             pika.BasicProperties(delivery_mode=2, message_id=mid, headers=headers),
                             mandatory=False)
            due[mid] = d
        except pika.exceptions.NackError:
            pass
    conn.close()
    return due, t_first


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def finish(case, broker, due, cons, t_kill, killed, extra):
    """The figures of one case."""
    got = dict(cons.got)
    lost = [m for m in due if m not in got]
    dups = sum(len(v) - 1 for v in got.values())
    late = [got[m][0] - due[m] for m in due if m in got]
    late_after = [got[m][0] - due[m] for m in due if m in got and due[m] >= t_kill]
    early = [x for x in late if x < 0]
    after = sorted(t for t in cons.order if t >= t_kill)
    first_after = (after[0] - t_kill) if after else None
    gaps = [b - a for a, b in zip([t_kill] + after, after)]
    return {
        "case": case, "broker": broker, "sent": len(due), "delivered": len(got),
        "lost": len(lost), "dups": dups, "early": len(early),
        "min_late": min(late) if late else None,
        "p50": pct(late, 50), "p99": pct(late, 99), "max": max(late) if late else None,
        "n_after": len(late_after), "p50_after": pct(late_after, 50),
        "p99_after": pct(late_after, 99), "max_after": max(late_after) if late_after else None,
        "first_after": first_after, "max_gap": max(gaps) if gaps else None,
        "killed": killed, "extra": extra, "lost_ids": lost[:5],
    }


def wait_all(cons, due, wait_s):
    deadline = time.time() + (max(due.values()) / 1000.0 - time.time()) + wait_s
    while time.time() < deadline:
        if all(m in cons.got for m in due):
            return True
        time.sleep(0.2)
    return all(m in cons.got for m in due)


def kill_at(t_first, kill_s, node):
    wait = t_first / 1000.0 + kill_s - time.time()
    if wait > 0:
        time.sleep(wait)
    return kill_node(node, t_first)


def kill_node(node, t_first):
    """SIGKILL to node's process group (what cluster.sh kill-node does, here
    so that the clock starts at the signal); returns that time."""
    pidfile = os.path.join(CDIR, "n%d" % node, "node.pid")
    with open(pidfile) as f:
        pid = int(f.read().strip())
    t = now_ms()
    os.killpg(pid, signal.SIGKILL)
    for _ in range(200):  # gone, or a zombie nobody reaps
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(") ")[-1].startswith("Z"):
                    break
        except OSError:
            break
        time.sleep(0.05)
    os.unlink(pidfile)
    say("node %d killed %.0f ms after the first publish (SIGKILL to process group %d)"
        % (node, t - t_first, pid))
    return t


def other(nodes_out):
    for i in (3, 2, 1):
        if i not in nodes_out:
            return i
    raise SetupError("no node left")


def case_qq(args, broker):
    q = "cl.qq." + RUN
    conn = connect(1)
    ch = conn.channel()
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()
    lead = leaders(2, {q}).get(q)
    if lead is None:
        raise SetupError("no leader for %s" % q)
    cnode = other({lead})
    say("qq: queue %s, leader on node %d; consumer on node %d" % (q, lead, cnode))
    cons = Consumer(cnode, q)
    cons.start()
    cons.ready.wait(30)
    due, t_first = publish(1, "", q, args.count, args.spread, "x-opt-delivery-time")
    say("qq: %d of %d confirmed in %.0f ms" % (len(due), args.count, now_ms() - t_first))
    t_kill = kill_at(t_first, args.kill_at, lead)
    ok = wait_all(cons, due, args.wait)
    after = leaders(cnode, {q}).get(q)
    cons.stop_flag.set()
    r = finish("qq", broker + ", quorum queue x-opt-delivery-time", due, cons, t_kill,
               "node %d (queue leader)" % lead,
               "leader after: node %s; consumer resubscribed %d" % (after, cons.resubscribes))
    say("qq: %s" % ("all delivered" if ok else "NOT all delivered"))
    cluster("start-node", lead)
    return r


def http_json(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as f:
        return json.loads(f.read().decode())


def readyz(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % port, timeout=2) as f:
            return f.status == 200
    except Exception:
        return False


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def case_bridge(args, broker, work):
    bridge = os.environ.get("BENCH_BRIDGE_BIN",
                            os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")),
                                         "delay-bridge"))
    if not os.access(bridge, os.X_OK):
        raise SetupError("%s not found: build first" % bridge)
    tex, tq = "cl.bt." + RUN, "cl.bq." + RUN
    ingress = "cl.in." + RUN
    conn = connect(1)
    ch = conn.channel()
    ch.exchange_declare(tex, "direct", durable=True)
    ch.queue_declare(tq, durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind(tq, tex, "rk")
    conn.close()
    http = free_port()
    cfg = {
        "broker": {"uri": [uri(1), uri(2), uri(3)], "connect_timeout_ms": 3000},
        "instance": "clusterloss",
        "wal": {"dir": os.path.join(work, "wal"), "fsync": True},
        "http": {"listen": "127.0.0.1:%d" % http},
        "log": {"level": "info"},
        "routes": [{"name": "cl", "ingress_exchange": ingress, "ingress_queue": ingress + ".q",
                    "queue_type": "quorum", "target_exchange": tex}],
    }
    os.makedirs(cfg["wal"]["dir"])
    with open(os.path.join(work, "bridge.json"), "w") as f:
        json.dump(cfg, f)
    log = open(os.path.join(work, "bridge.log"), "w")
    proc = subprocess.Popen([bridge, "--config", os.path.join(work, "bridge.json")],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        t0 = time.time()
        while not readyz(http):
            if proc.poll() is not None or time.time() - t0 > 60:
                raise SetupError("the bridge did not become ready (log %s)" % log.name)
            time.sleep(0.1)
        bn = bridge_node(2)
        lead = leaders(2, {tq, ingress + ".q"})
        if len(bn) != 1:
            raise SetupError("the bridge's connections are on nodes %s" % sorted(bn))
        kill = bn.pop()
        cnode = other({kill})
        say("bridge: connections on node %d; leaders: target %s, ingress %s; consumer on node %d"
            % (kill, lead.get(tq), lead.get(ingress + ".q"), cnode))
        cons = Consumer(cnode, tq)
        cons.start()
        cons.ready.wait(30)
        due, t_first = publish(1, ingress, "rk", args.count, args.spread, "x-delay")
        say("bridge: %d of %d confirmed in %.0f ms" % (len(due), args.count, now_ms() - t_first))
        while http_json(http, "/stats").get("held", 0) + cons.count() < len(due):
            if now_ms() - t_first > args.kill_at * 1000:
                break
            time.sleep(0.05)
        say("bridge: %d held %.0f ms after the first publish" %
            (http_json(http, "/stats").get("held", 0), now_ms() - t_first))
        t_kill = kill_at(t_first, args.kill_at, kill)
        ok = wait_all(cons, due, args.wait)
        cons.stop_flag.set()
        try:
            conns = sorted(bridge_node(cnode))
        except SetupError:
            conns = "?"
        say("bridge: %s" % ("all delivered" if ok else "NOT all delivered"))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    ev = bridge_events(log.name, t_kill)
    r = finish("bridge", broker + ", delay-bridge x-delay (quorum ingress and target)", due, cons,
               t_kill,
               "node %d (bridge's connections; leader of target: node %s, ingress: node %s)"
               % (kill, lead.get(tq), lead.get(ingress + ".q")),
               "bridge after the kill: connection lost +%s ms, publisher connected +%s ms, "
               "consuming +%s ms (connections then on node(s) %s); route totals: %s; "
               "consumer resubscribed %d"
               % (ev.get("lost"), ev.get("connected"), ev.get("consuming"), conns,
                  ev.get("totals", "?"), cons.resubscribes))
    cluster("start-node", kill)
    return r


def bridge_events(path, t_kill):
    """ms after t_kill of the bridge's first log lines saying it lost a
    connection, connected its publisher and consumed again; its route totals."""
    ev = {}
    with open(path, errors="replace") as f:
        for line in f:
            ts = line.split(" ", 1)[0]
            try:
                t = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) * 1000.0 \
                    + float(ts[19:-1] or 0) * 1000.0
            except ValueError:
                continue
            for key, what in (("lost", 'connection lost"'), ("connected", 'mod=publish msg="connected"'),
                              ("consuming", 'msg="consuming"')):
                if t >= t_kill and key not in ev and what in line:
                    ev[key] = "%.0f" % (t - t_kill)
            if 'msg="route totals"' in line:
                ev["totals"] = " ".join(w for w in line.split() if w.split("=")[0] in
                                        ("received", "published", "confirmed", "nacked"))
    return ev


def wipe_cdir(also=()):
    """Removes the cluster's state: CDIR and, for a broker in a root
    (rabbitmq.sh makes CDIR/nI a symlink into it), what the links point at,
    so that the next run starts from empty nodes."""
    for i in (1, 2, 3):
        n = os.path.join(CDIR, "n%d" % i)
        if os.path.islink(n):
            inside = os.path.realpath(n)
            subprocess.run(["rm", "-rf", inside])
            try:
                os.rmdir(os.path.dirname(inside))  # once the three are gone
            except OSError:
                pass
    subprocess.run(["rm", "-rf", CDIR] + list(also))


def fmt(x):
    return "-" if x is None else "%.0f" % x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--spread", default="10,20", help="MIN,MAX delay, s")
    ap.add_argument("--kill-at", type=float, default=15.0)
    ap.add_argument("--cases", default="qq,bridge")
    ap.add_argument("--wait", type=float, default=90.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    try:
        lo, hi = (float(x) for x in args.spread.split(","))
        args.spread = (int(lo * 1000), int(hi * 1000))
        assert 0 < lo <= hi
    except Exception:
        say("--spread: MIN,MAX in seconds")
        return 2
    cases = args.cases.split(",")
    if any(c not in ("qq", "bridge") for c in cases):
        say("--cases: qq, bridge")
        return 2
    version = os.environ.get("DB_RABBITMQ", "qq-delay")
    os.environ["DB_RABBITMQ"] = version
    work = tempfile.mkdtemp(prefix="delay-bridge-clusterloss.", dir=os.environ.get("BENCH_TMP", "/var/tmp"))
    results = []
    rc = 0
    cluster("stop", ok=(0, 1))
    wipe_cdir()
    try:
        t0 = time.time()
        cluster("start", PORT, DIST)
        say("cluster up in %.0f s on 127.0.0.1:%d-%d" % (time.time() - t0, PORT, PORT + 2))
        c = connect(1)
        broker = "RabbitMQ %s" % c._impl.server_properties.get("version", b"?").decode() \
            if isinstance(c._impl.server_properties.get("version"), bytes) \
            else "RabbitMQ %s" % c._impl.server_properties.get("version", "?")
        c.close()
        broker += " (DB_RABBITMQ=%s), 3 nodes" % version
        say("broker: %s; %d messages, delays %g-%g s, kill at +%g s"
            % (broker, args.count, args.spread[0] / 1000.0, args.spread[1] / 1000.0, args.kill_at))
        for case in cases:
            if case == "qq":
                results.append(case_qq(args, broker))
            else:
                results.append(case_bridge(args, broker, work))
    except SetupError as e:
        say("error: %s" % e)
        rc = 2
    finally:
        cluster("stop", ok=(0, 1))
        if not args.keep:
            wipe_cdir([work])
        else:
            say("kept: cluster state %s (stopped), work %s" % (CDIR, work))
    hdr = ("| system | killed | sent | delivered | lost | dup | early | late p50/p99/max ms | "
           "due after the kill: n, late p50/p99/max ms | kill -> 1st delivery ms | longest gap ms |")
    print()
    print("clusterloss, %s UTC, %d CPUs, load %s" % (time.strftime("%FT%T", time.gmtime()), os.cpu_count(),
                                                   open("/proc/loadavg").read().split()[:3]))
    print()
    print(hdr)
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        print("| %s | %s | %d | %d | %d | %d | %d | %s / %s / %s | %d: %s / %s / %s | %s | %s |" % (
            r["broker"], r["killed"], r["sent"], r["delivered"], r["lost"], r["dups"], r["early"],
            fmt(r["p50"]), fmt(r["p99"]), fmt(r["max"]), r["n_after"], fmt(r["p50_after"]),
            fmt(r["p99_after"]), fmt(r["max_after"]), fmt(r["first_after"]), fmt(r["max_gap"])))
    for r in results:
        print("RESULT %s | %s: %s; earliest %s ms from due%s" % (
            r["case"], r["broker"], r["extra"], fmt(r["min_late"]),
            "; lost e.g. %s" % r["lost_ids"] if r["lost"] else ""))
        if r["lost"] or r["early"]:
            rc = rc or 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
