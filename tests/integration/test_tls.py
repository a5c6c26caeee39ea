#!/usr/bin/env python3
"""test_tls.py -- amqps:// verifies the broker and fails closed.

A node of its own (tls/rabbitmq-tls.sh: plain AMQP for the test's own
declarations and reads, a TLS listener for the bridge) with certificates
made by tls/make-certs.sh: a test CA that signed the server's certificate
(DNS:localhost, IP:127.0.0.1) and a client certificate, and an unrelated CA.

  1. the right CA: the bridge connects over TLS (RabbitMQ lists its
     connections with ssl=true) and a delayed message goes through;
     `delay-bridge publish --ca-file` works too; a route in a second vhost
     gets its own two connections, TLS too, named for the vhost, and
     delivers;
  2. the wrong CA: the bridge never connects, says "certificate verify
     failed", keeps retrying, never falls back to plain AMQP;
  3. a host name the certificate does not list: refused with
     verify_hostname true; accepted with false, which warns at start;
  4. the node restarted with fail_if_no_peer_cert = true: with
     cert_file/key_file the bridge connects and delivers; without, it
     never becomes ready and says why.

Skips (77) when openssl is missing. The node is stopped at the end,
whatever happens.
"""

import os
import shutil
import socket
import subprocess
import time

import pika

import harness
from harness import check, log

HERE = os.path.dirname(os.path.abspath(__file__))
TLS_SH = os.path.join(HERE, "tls", "rabbitmq-tls.sh")
MAKE_CERTS = os.path.join(HERE, "tls", "make-certs.sh")


def port_free(port):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_ports(wanted):
    """The wanted ports when all are free, else free ones from the kernel."""
    if all(port_free(p) for p in wanted):
        return list(wanted)
    got, socks = [], []
    for _ in wanted:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        got.append(s.getsockname()[1])
    for s in socks:
        s.close()
    log("ports %s busy: using %s" % (wanted, got))
    return got


def sh(*cmd, timeout=180):
    log("$ " + " ".join(cmd))
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=timeout)
    for line in r.stdout.splitlines():
        log("  " + line)
    check(r.returncode == 0, "%s exited with %d" % (" ".join(cmd), r.returncode))
    return r.stdout


class Node(object):
    """The test's own RabbitMQ node with a TLS listener."""

    def __init__(self, ctx, certs):
        self.dir = os.path.join(ctx.tmp, "node")
        self.certs = certs
        self.plain, self.tls, self.dist = pick_ports((5684, 5685, 25684))
        self.started = False

    def start(self, client_cert):
        self.started = True
        sh("bash", TLS_SH, "start", self.dir, str(self.plain), str(self.dist), str(self.tls),
           self.certs, client_cert)

    def stop(self):
        if self.started:
            subprocess.run(["bash", TLS_SH, "stop", self.dir], timeout=120)
            self.started = False

    def ctl(self, *args):
        env = dict(os.environ)
        env["HOME"] = self.dir
        env["ERL_EPMD_ADDRESS"] = "127.0.0.1"
        ctl = os.path.join(harness.rabbitmq_bin_dir(),
                           "rabbitmqctl")
        r = subprocess.run([ctl, "-n", "dbtest%d@localhost" % self.plain, "-q"] + list(args),
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        check(r.returncode == 0, "rabbitmqctl %s: %s" % (" ".join(args), r.stderr.strip()))
        return r.stdout

    def bridge_connections(self):
        """[(name, ssl)] of the bridge's connections to this node."""
        out = []
        for line in self.ctl("list_connections", "client_properties", "ssl").splitlines():
            if "delay-bridge" in line:
                out.append((line, line.rstrip().endswith("true")))
        return out

    def plain_uri(self):
        return "amqp://guest:guest@127.0.0.1:%d/%%2f" % self.plain

    def connect(self):
        params = pika.URLParameters(self.plain_uri())
        params.socket_timeout = 5
        return pika.BlockingConnection(params)


def tls_config(ctx, node, host, **tls):
    return {"uri": "amqps://guest:guest@%s:%d/%%2f" % (host, node.tls),
            "connect_timeout_ms": 3000, "tls": tls}


def wrong_host_name():
    """A name that reaches 127.0.0.1 but that the server certificate does not list."""
    name = socket.gethostname()
    try:
        if name and name != "localhost" and socket.gethostbyname(name) == "127.0.0.1":
            return name
    except OSError:
        pass
    # rabbitmq-c matches DNS names only, so the certificate's IP entry does not count
    return "127.0.0.1"


def node_route(ctx, name, target):
    """ctx.route(), for this node: nothing for ctx.cleanup() to delete on the suite's broker."""
    r = ctx.route(name, target)
    ctx.exchanges.discard(r["ingress_exchange"])
    ctx.queues.discard(r["ingress_queue"])
    return r


def deliver_one(ctx, node, bridge_name, broker, publish_cli=None):
    """Start a bridge with broker settings; one delayed message must arrive."""
    conn = node.connect()
    ch = conn.channel()
    target = ctx.n(bridge_name + ".target")
    ch.exchange_declare(target, "direct", durable=False, auto_delete=False)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, target, routing_key="k")
    route = node_route(ctx, bridge_name, target)
    b = ctx.bridge([route], name=bridge_name, broker=broker)

    conns = node.bridge_connections()
    check(len(conns) == 2 and all(ssl for _, ssl in conns),
          "the bridge should have 2 TLS connections to the node, RabbitMQ lists: %r" % conns)

    delay_ms = 1500
    t0 = time.monotonic()
    if publish_cli:
        r = subprocess.run([harness.bridge_bin(), "publish", "--uri", broker["uri"],
                            "--exchange", route["ingress_exchange"], "--routing-key", "k",
                            "--delay", str(delay_ms)] + publish_cli + ["hello over TLS"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30)
        check(r.returncode == 0, "delay-bridge publish over TLS failed (%d): %s"
              % (r.returncode, r.stdout.strip()))
    else:
        ch.confirm_delivery()
        ch.basic_publish(route["ingress_exchange"], "k", b"hello over TLS",
                         pika.BasicProperties(headers={"x-delay": delay_ms}), mandatory=True)
    deadline = t0 + delay_ms / 1000.0 + harness.late_tolerance() + 3
    while True:
        m, props, body = ch.basic_get(q, auto_ack=True)
        if m:
            took = time.monotonic() - t0
            break
        check(time.monotonic() < deadline, "the delayed message never arrived through the "
              "TLS-connected bridge")
        time.sleep(0.05)
    check(body == b"hello over TLS", "wrong body %r" % body)
    check(took >= delay_ms / 1000.0 - harness.early_tolerance(),
          "the message arrived early, after %.3fs" % took)
    log("%s: delayed message arrived after %.2fs over TLS" % (bridge_name, took))
    conn.close()
    b.stop()
    return b


def deliver_vhost(ctx, node, broker):
    """A route in a second vhost over TLS: its own pair of connections, TLS as the first's."""
    vh = "tls-vhost"
    node.ctl("add_vhost", vh)
    node.ctl("set_permissions", "-p", vh, "guest", ".*", ".*", ".*")
    conn = pika.BlockingConnection(pika.URLParameters(
        "amqp://guest:guest@127.0.0.1:%d/%s" % (node.plain, vh)))
    ch = conn.channel()
    target = ctx.n("vh.target")
    ch.exchange_declare(target, "direct", durable=False, auto_delete=False)
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, target, routing_key="k")
    route = node_route(ctx, "vh", target)
    route["vhost"] = vh
    b = ctx.bridge([node_route(ctx, "default", ctx.n("unused.target")), route], name="tls-vhost",
                   broker=broker)
    conns = node.bridge_connections()
    check(len(conns) == 4 and all(ssl for _, ssl in conns) and
          sum("vhost=%s" % vh in line for line, _ in conns) == 2,
          "two vhosts: 4 TLS connections, 2 named for %s; RabbitMQ lists: %r" % (vh, conns))
    ch.confirm_delivery()
    t0 = time.monotonic()
    ch.basic_publish(route["ingress_exchange"], "k", b"vhost over TLS",
                     pika.BasicProperties(headers={"x-delay": 500}), mandatory=True)
    while True:
        m, props, body = ch.basic_get(q, auto_ack=True)
        if m:
            break
        check(time.monotonic() < t0 + 0.5 + harness.late_tolerance() + 3,
              "the delayed message never arrived in vhost %s over TLS" % vh)
        time.sleep(0.05)
    check(body == b"vhost over TLS" and time.monotonic() - t0 >= 0.5 - harness.early_tolerance(),
          "vhost over TLS: %r after %.3fs" % (body, time.monotonic() - t0))
    log("a route in vhost %s over TLS: its own 2 TLS connections, delivered on time" % vh)
    conn.close()
    b.stop()


def refused(ctx, node, bridge_name, broker, needle, settle_s=4):
    """Start a bridge that must fail closed: logs needle, never ready, no connection."""
    route = node_route(ctx, bridge_name, ctx.n("unused.target"))
    b = ctx.bridge([route], name=bridge_name, start=False, broker=broker)
    b.start(wait_ready=False)
    b.wait_log(needle, 20, repr(needle))
    time.sleep(settle_s)  # some retries
    text = b.log_text()
    check('msg="ready"' not in text, "%s became ready: it must not connect" % bridge_name)
    check('msg="consuming"' not in text and 'msg="connected"' not in text,
          "%s logged a connection" % bridge_name)
    check(text.count(needle) >= 1, "expected %r in the log" % needle)
    conns = node.bridge_connections()
    check(conns == [], "RabbitMQ lists connections of a bridge that should be refused: %r" % conns)
    b.check_alive()  # it keeps retrying (the CA may be fixed on the broker side)
    line = [l for l in text.splitlines() if needle in l][0]
    log("%s: refused as expected: %s" % (bridge_name, line[:300]))
    b.stop()
    return b


def test(ctx):
    if not shutil.which("openssl"):
        raise harness.Skip("openssl not found (apt-get install openssl): cannot make test "
                           "certificates")
    if not os.path.exists(os.path.join(harness.rabbitmq_bin_dir(),
                                       "rabbitmq-server")):
        raise harness.Skip("rabbitmq-server not installed: this test starts a TLS node of its own")
    certs = os.path.join(ctx.tmp, "certs")
    sh("bash", MAKE_CERTS, certs)
    ca, other_ca = os.path.join(certs, "ca.pem"), os.path.join(certs, "other-ca.pem")
    cert, key = os.path.join(certs, "client.pem"), os.path.join(certs, "client.key")

    node = Node(ctx, certs)
    try:
        node.start("optional")

        # 1. the right CA
        deliver_one(ctx, node, "right-ca", tls_config(ctx, node, "localhost", ca_file=ca),
                    publish_cli=["--ca-file", ca])

        # 1b. a route in a second vhost: its own connections, with the same TLS settings
        deliver_vhost(ctx, node, tls_config(ctx, node, "localhost", ca_file=ca))

        # 2. the wrong CA: fail closed
        refused(ctx, node, "wrong-ca", tls_config(ctx, node, "localhost", ca_file=other_ca),
                "certificate verify failed")

        # 3. a name the certificate does not list
        name = wrong_host_name()
        log("connecting as %r, a name the server certificate does not list" % name)
        refused(ctx, node, "wrong-name", tls_config(ctx, node, name, ca_file=ca),
                "host name verification failed")
        b = deliver_one(ctx, node, "no-verify-name",
                        tls_config(ctx, node, name, ca_file=ca, verify_hostname=False))
        check("TLS host name verification is off" in open(b.logs[0]).read(),
              "verify_hostname false should log a warning at start")
        # the plain port is not a TLS port: no fallback either
        br = tls_config(ctx, node, "localhost", ca_file=ca)
        br["uri"] = "amqps://guest:guest@localhost:%d/%%2f" % node.plain
        refused(ctx, node, "plain-port", br, "TLS handshake failed", settle_s=1)

        # 4. the broker requires a client certificate
        node.stop()
        node.start("required")
        deliver_one(ctx, node, "client-cert",
                    tls_config(ctx, node, "localhost", ca_file=ca, cert_file=cert, key_file=key),
                    publish_cli=["--ca-file", ca, "--cert-file", cert, "--key-file", key])
        refused(ctx, node, "no-client-cert", tls_config(ctx, node, "localhost", ca_file=ca),
                "client certificate")
        r = subprocess.run([harness.bridge_bin(), "publish", "--uri",
                            "amqps://guest:guest@localhost:%d/%%2f" % node.tls, "--ca-file", ca,
                            "--exchange", "", "--routing-key", "x", "--delay", "0", "x"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30)
        check(r.returncode == 1 and "client certificate" in r.stdout,
              "publish without a client certificate: expected exit 1 naming the client "
              "certificate, got %d: %s" % (r.returncode, r.stdout.strip()))
    finally:
        node.stop()


if __name__ == "__main__":
    harness.run(test, budget_s=240)
