#!/usr/bin/python3
"""run_client.py CLIENT -- one row of the client matrix (README "Clients").

A small program written with CLIENT's own library (tests/clients/<dir>/),
the way its documentation shows, publishes delayed messages to a bridge's
ingress exchange with that client's natural types and its confirm mode.
This driver starts the bridge (tests/integration/harness.py), runs the
program, and checks every message on arrival: the right queue (target, or
the dead-letter exchange with the expected x-delay-error), routing key and
headers kept, never before its due time, not much later.

The program gets DB_URI, DB_EXCHANGE, DB_RK in its environment and prints
one line per message it published (and the broker confirmed):

    SENT <message_id> <epoch ms taken just before publishing> <expect>
    expect: delay:<ms> | due:<epoch ms> | now | dlx:<x-delay-error text>

and, first, `VERSION <client library version>`. Exit 77 (skip) when the
client's toolchain or library is missing, with the package to install.

    run_client.py shim CLIENT

runs the same program as an application written for the delayed-message
plugin, unchanged (DB_MODE=x-delayed-message; shim_test() below says what
is checked): through the shim (deploy/plugin) and one delayed_exchanges
route, on a node of the test's own with the shim enabled.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness as h  # noqa: E402
import harness_plugin as hp  # noqa: E402
from harness import check  # noqa: E402

MAX_DELAY_MS = 3600000


class LineProgram(object):
    """A client program in a session of its own, its output read line by
    line in a thread: each line is echoed with prefix and handed to
    on_line() under self.cond, which wait() sleeps on. The retry tests'
    consumers and recipes (tests/clients/retry-*) are its subclasses."""

    def __init__(self, cmd, env, prefix):
        self.cond = threading.Condition()
        self.prefix = prefix
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            sys.stdout.write(self.prefix + line)
            with self.cond:
                self.on_line(line.rstrip("\n"))
                self.cond.notify_all()

    def on_line(self, line):
        pass

    def wait(self, pred, timeout, what):
        """Until pred() (called under self.cond); fails when the program exits or timeout passes."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred():
                check(self.p.poll() is None, "the program exited (%s) before %s" % (
                    self.p.returncode, what))
                left = deadline - time.monotonic()
                check(left > 0, "timed out after %.0fs waiting for %s" % (timeout, what))
                self.cond.wait(min(left, 0.2))

    def stop(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(10)
        self.t.join(5)


def have(cmd):
    return shutil.which(cmd) is not None


def need(cond, what):
    if not cond:
        raise h.Skip(what)


def work_dir(name):
    """A per-client directory for tool caches (node_modules, GOCACHE): the build tree's when known."""
    base = os.environ.get("DB_CLIENTS_WORK") or os.path.join(
        os.path.dirname(os.environ.get("DB_BRIDGE_BIN", "/tmp/x")), "clients")
    d = os.path.join(base, name)
    os.makedirs(d, exist_ok=True)
    return d


def node_cmd(script=os.path.join(HERE, "node", "publish.js")):
    """node running script with amqplib (npm-installed into the build tree once)."""
    need(have("node"), "node not found (apt-get install nodejs npm)")
    d = work_dir("node")
    env = dict(os.environ, NODE_PATH=os.path.join(d, "node_modules"))
    probe = ["node", "-e", "require('amqplib')"]
    if subprocess.run(probe, env=env, capture_output=True).returncode != 0:
        need(have("npm"), "amqplib not installed and npm not found (apt-get install npm)")
        h.log("installing amqplib with npm into %s" % d)
        spec = "amqplib@" + os.environ.get("DB_AMQPLIB_VERSION", "2")
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", d, spec],
                           capture_output=True, text=True, timeout=180)
        need(r.returncode == 0, "npm install amqplib failed (no registry?): %s" % r.stderr[-300:])
    return ["node", script], env


def php_cmd():
    need(have("php"), "php not found (apt-get install php-cli php-amqplib)")
    need(os.path.exists("/usr/share/php/PhpAmqpLib/autoload.php"),
         "php-amqplib not found (apt-get install php-amqplib)")
    return ["php", os.path.join(HERE, "php", "publish.php")], None


def ruby_cmd():
    need(have("ruby"), "ruby not found (apt-get install ruby-bunny)")
    r = subprocess.run(["ruby", "-e", "require 'bunny'"], capture_output=True)
    need(r.returncode == 0, "ruby cannot load bunny (apt-get install ruby-bunny)")
    return ["ruby", os.path.join(HERE, "ruby", "publish.rb")], None


GOPATH = "/usr/share/gocode"


def go_cmd(src=os.path.join(HERE, "go", "publish.go"), exe_name="publish"):
    """src built against Debian's amqp091-go into the build tree: [executable]."""
    need(have("go"), "go not found (apt-get install golang-go golang-github-rabbitmq-amqp091-go-dev)")
    need(os.path.isdir(os.path.join(GOPATH, "src/github.com/rabbitmq/amqp091-go")),
         "amqp091-go not found (apt-get install golang-github-rabbitmq-amqp091-go-dev)")
    d = work_dir("go")
    env = dict(os.environ, GO111MODULE="off", GOPATH=GOPATH, GOCACHE=os.path.join(d, "cache"))
    exe = os.path.join(d, exe_name)
    r = subprocess.run(["go", "build", "-o", exe, src],
                       env=env, capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "go build failed:\n%s" % r.stderr)
    return [exe], env


JARS = ["/usr/share/java/amqp-client.jar", "/usr/share/java/slf4j-api.jar",
        "/usr/share/java/slf4j-nop.jar"]


def java_cmd():
    need(have("java"), "java not found (apt-get install default-jdk-headless librabbitmq-client-java)")
    need(all(os.path.exists(j) for j in JARS),
         "%s missing (apt-get install librabbitmq-client-java libslf4j-java)" % " or ".join(JARS))
    # Java 11+ runs a single source file directly
    return ["java", "-cp", ":".join(JARS), os.path.join(HERE, "java", "Publish.java")], None


def python_cmd(module, script, pkg):
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    r = subprocess.run([py, "-c", "import %s" % module], capture_output=True)
    need(r.returncode == 0, "%s cannot import %s (apt-get install %s)" % (py, module, pkg))
    return [py, os.path.join(HERE, "python", script)], None


def amqp10_cmd():
    """AMQP 1.0 is a core protocol from RabbitMQ 4.0 on, and only there does the
    broker hand x- message annotations to a 0-9-1 consumer (the bridge) as
    headers; 3.x needs the rabbitmq_amqp1_0 plugin and puts them in
    x-amqp-1.0-message-annotations, which the bridge does not read."""
    v = h.broker_version()
    need(not v.startswith("3."), "AMQP 1.0 publishers need RabbitMQ 4.x (this broker is %s: AMQP 1.0 "
         "is a plugin there, and annotations are not handed over as headers); run with "
         "DB_RABBITMQ=4.0 or 4.3" % v)
    cmd, env = python_cmd("proton", "publish.py", "python3-qpid-proton")
    return [cmd[0], os.path.join(HERE, "amqp10", "publish.py")], env


CLIENTS = {
    "amqplib": node_cmd,
    "php-amqplib": php_cmd,
    "bunny": ruby_cmd,
    "amqp091-go": go_cmd,
    "java": java_cmd,
    "pika": lambda: python_cmd("pika", "publish_pika.py", "python3-pika"),
    "kombu": lambda: python_cmd("kombu", "publish_kombu.py", "python3-kombu"),
    "celery": lambda: python_cmd("celery", "publish_celery.py", "python3-celery"),
    "amqp10": amqp10_cmd,
}


def parse(out):
    version, sent = "?", {}
    for line in out.splitlines():
        f = line.split(" ", 3)
        if f[0] == "VERSION" and len(f) >= 2:
            version = line.split(" ", 1)[1]
        elif f[0] == "SENT" and len(f) == 4:
            sent[f[1]] = (int(f[2]), f[3])
    return version, sent


def test(ctx, client):
    cmd, env = CLIENTS[client]()
    target, tq = ctx.target("target", "direct", ["rk"])
    dlx, dq = ctx.target("dlx", "fanout", [""])
    c = ctx.consumer([tq["rk"], dq[""]])
    route = ctx.route(client, target, max_delay_ms=MAX_DELAY_MS, invalid_delay="dead-letter",
                      dead_letter_exchange=dlx)
    ctx.bridge([route])
    wall0 = time.time() - time.monotonic()
    env = dict(env or os.environ, DB_URI=h.broker_uri(), DB_EXCHANGE=route["ingress_exchange"],
               DB_RK="rk")
    h.log("running %s" % " ".join(cmd))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr[-3000:])
    check(r.returncode == 0, "%s publisher exited %d" % (client, r.returncode))
    version, sent = parse(r.stdout)
    check(len(sent) >= 5, "%s publisher reported only %d message(s)" % (client, len(sent)))
    last_due = max((t + int(e.split(":")[1])) if e.startswith("delay:") else
                   int(e.split(":")[1]) if e.startswith("due:") else t for t, e in sent.values())
    wait = max(0.0, last_due / 1000.0 - time.time()) + h.late_tolerance() + 5
    msgs = c.wait_ids(list(sent), wait)
    extra = c.quiet(0.5)
    by_id = {}
    failures = []
    for m in extra:
        if m.message_id in by_id:
            failures.append("%s delivered twice" % m.message_id)
        by_id[m.message_id] = m
    unknown = set(by_id) - set(sent)
    if unknown:
        failures.append("unexpected deliveries: %s" % sorted(unknown))
    rows = []
    for mid, (t_ms, expect) in sorted(sent.items()):
        m = by_id[mid]
        arrived = (m.t + wall0) * 1000.0
        err = h.header(m.props, "x-delay-error")
        err = err.value.decode() if err is not None else None
        app = h.header(m.props, "x-client")
        where = "dlx" if m.queue == dq[""] else "target"
        rows.append("%-24s %-40s -> %-6s after %6.0f ms%s" % (
            mid, expect, where, arrived - t_ms, ", x-delay-error: %s" % err if err else ""))
        if app is None or app.value.decode() != client:
            failures.append("%s: header x-client not kept: %r" % (mid, app))
        if m.routing_key != "rk":
            failures.append("%s: routing key %r, sent with 'rk'" % (mid, m.routing_key))
        kind, _, arg = expect.partition(":")
        if kind == "dlx":
            if where != "dlx" or err != arg:
                failures.append("%s: expected the dead-letter exchange with x-delay-error %r; got %s, %r"
                                % (mid, arg, where, err))
            continue
        if where != "target" or err is not None:
            failures.append("%s: expected the target without x-delay-error; got %s, %r" % (mid, where, err))
        if kind == "now":
            due, late = t_ms, 1000.0
        else:
            due = t_ms + int(arg) if kind == "delay" else int(arg)
            late = h.late_tolerance() * 1000.0
        if arrived < due - h.early_tolerance() * 1000.0:
            failures.append("%s arrived EARLY: %.0f ms before its due time" % (mid, due - arrived))
        if arrived > due + late:
            failures.append("%s arrived LATE: %.0f ms after its due time" % (mid, arrived - due))
    h.log("%s %s: %d messages\n    %s" % (client, version, len(sent), "\n    ".join(rows)))
    if failures:
        h.fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))
    h.log("RESULT %s %s: %d messages, all as expected" % (client, version, len(sent)))


# --------------------------------------------------------------------------
# run_client.py shim CLIENT: an unchanged x-delayed-message application
# --------------------------------------------------------------------------

SHIM_CLIENTS = ["pika", "amqplib", "java", "kombu", "bunny", "amqp091-go"]

# What every program in DB_MODE=x-delayed-message declares (its own copy of
# this table): per x-delayed-type the exchange <DB_EXCHANGE>.<type>, queue
# <exchange>.q bound as the application's and <exchange>.decoy that must get
# nothing, and the routing key it publishes with; every message carries the
# header kind=a.
# x-delayed-type -> (routing key, binding of .q, binding of .decoy); a dict: headers, x-match all
SHIM_TYPES = {
    "direct": ("rk", "rk", "other"),
    "topic": ("order.eu", "*.eu", "*.us"),
    "fanout": ("rk", "", None),
    "headers": ("rk", {"kind": "a"}, {"kind": "b"}),
}


def shim_test(ctx, client):
    """CLIENT's program, DB_MODE=x-delayed-message, as an application written
    for the plugin: it declares an x-delayed-message exchange per
    x-delayed-type (SHIM_TYPES), its queues and bindings, and publishes to
    each, with confirms, x-delay values as its library types them, each
    line naming the check of test_plugin_compat.DELAYS whose type and value
    it sends:

        SENT <type>/<case> <epoch ms just before publishing> <check>:<delay ms>

    On a node of the suite's broker line with the shim (test_shim.build,
    harness_plugin.PluginNode) and a bridge with the one route
    {"name": "delayed", "delayed_exchanges": true}, every message must
    arrive once, in its type's .q only (never .decoy), with its exchange,
    routing key and headers; what the plugin delayed (test_shim.delay_cases:
    the plugin's column of plugin_compat, and where the shim documentedly
    differs) through the bridge (x-delay-bridge-id set) never before publish
    time + delay (no clock tolerance) and at most DB_TEST_LATE_S late; what
    it routed at once, at once, not through the bridge."""
    import test_shim as ts
    cmd, env = CLIENTS[client]()
    line = hp.suite_line()
    ez = ts.build(line)
    node = hp.PluginNode(ctx, line, [ez], [ts.APP])
    try:
        with hp.OnNode(ctx, node):
            shim_run(ctx, node, line, client, cmd, env, ts)
    finally:
        node.stop()


def shim_run(ctx, node, line, client, cmd, env, ts):
    h.log("shim node: RabbitMQ %s at %s" % (h.broker_version(node.uri), h.mask_uri(node.uri)))
    prefix = ctx.n(client)
    queues = {}
    for t, (_rk, _main, decoy) in SHIM_TYPES.items():
        x = "%s.%s" % (prefix, t)
        queues[t] = (ctx.declare_queue(x + ".q"), ctx.declare_queue(x + ".decoy") if decoy is not None
                     else None)
    c = ctx.consumer([q for pair in queues.values() for q in pair if q])
    ctx.bridge([{"name": "delayed", "delayed_exchanges": True}])
    wall0 = time.time() - time.monotonic()
    env = dict(env or os.environ, DB_URI=node.uri, DB_EXCHANGE=prefix, DB_RK="rk",
               DB_MODE="x-delayed-message")
    h.log("running DB_MODE=x-delayed-message %s" % " ".join(cmd))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr[-3000:])
    check(r.returncode == 0, "%s publisher exited %d" % (client, r.returncode))
    version, sent = parse(r.stdout)
    want = {mid: w for mid, _xd, w in ts.delay_cases(line)}
    differs = ts.shim_differs(line)
    plan = {}  # message id -> (type, check, delayed?, due epoch ms)
    for mid, (t_ms, expect) in sent.items():
        kind, chk, ms = mid.split("/", 1)[0], expect.split(":")[0], int(expect.split(":")[1])
        check(kind in SHIM_TYPES and chk in want, "%s: unknown type or check in %r" % (mid, expect))
        delayed = want[chk] == "delayed"
        plan[mid] = (kind, chk, delayed, t_ms + ms if delayed else t_ms)
    types = {p[0] for p in plan.values()}
    check(types == set(SHIM_TYPES) and len(plan) >= 4 * 4,
          "%s publisher reported %d message(s) of types %s" % (client, len(plan), sorted(types)))
    last_due = max(p[3] for p in plan.values())
    c.wait_ids(list(plan), max(0.0, last_due / 1000.0 - time.time()) + h.late_tolerance() + 10)
    msgs = c.quiet(1.0)
    late = h.late_tolerance() * 1000.0
    failures, rows, seen = [], [], {}
    for m in msgs:
        seen.setdefault(m.message_id, []).append(m)
    for mid in sorted(set(seen) - set(plan)):
        failures.append("unexpected delivery %s: %s" % (mid, seen[mid]))
    for mid, (kind, chk, delayed, due) in sorted(plan.items()):
        rk = SHIM_TYPES[kind][0]
        got = seen.get(mid, [])
        if len(got) != 1:
            failures.append("%s delivered %d times: %s" % (mid, len(got), got))
            continue
        m = got[0]
        arrived = (m.t + wall0) * 1000.0
        xd = h.header(m.props, "x-delay")
        rows.append("%-20s %-16s %-8s %6.0f ms after publish, %+5.0f ms vs due; x-delay on delivery %s%s"
                    % (mid, chk, "delayed" if delayed else "at once", arrived - sent[mid][0],
                       arrived - due, "absent" if xd is None else "%s %r" % (xd.kind, xd.value),
                       " (differs from the plugin: %s)" % differs[chk][1] if chk in differs else ""))
        ex = "%s.%s" % (prefix, kind)
        if (m.queue, m.exchange, m.routing_key) != (queues[kind][0], ex, rk):
            failures.append("%s: arrived in %s from exchange %r with key %r; expected %s from %r with %r"
                            % (mid, m.queue, m.exchange, m.routing_key, queues[kind][0], ex, rk))
        app = h.header(m.props, "x-client")
        if app is None or app.value.decode() != client:
            failures.append("%s: header x-client not kept: %r" % (mid, app))
        if (m.bridge_id is not None) != delayed:
            failures.append("%s: %s, but x-delay-bridge-id is %r" % (
                mid, "delayed" if delayed else "routed at once", m.bridge_id))
        if arrived < due:
            failures.append("%s arrived EARLY: %.1f ms before its due time" % (mid, due - arrived))
        if arrived > due + late:
            failures.append("%s arrived LATE: %.0f ms after its due time" % (mid, arrived - due))
    left = ctx.queue_depth(ts.QUEUE)
    if left:
        failures.append("%s still holds %d message(s)" % (ts.QUEUE, left))
    h.log("%s %s through the shim on RabbitMQ %s: %d messages\n    %s" % (
        client, version, h.broker_version(node.uri), len(plan), "\n    ".join(rows)))
    if failures:
        h.fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))
    h.log("RESULT shim %s %s on RabbitMQ %s: %d messages (%d delayed), all as the plugin routes them"
          % (client, version, h.broker_version(node.uri), len(plan),
             sum(1 for p in plan.values() if p[2])))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "shim" and sys.argv[2] in SHIM_CLIENTS:
        name = sys.argv[2]
        sys.argv[0] = "test_client_shim_" + name.replace("-", "_")
        h.run(lambda ctx: shim_test(ctx, name), budget_s=150)
    if len(sys.argv) != 2 or sys.argv[1] not in CLIENTS:
        sys.stderr.write("usage: run_client.py {%s}\n       run_client.py shim {%s}\n"
                         % (",".join(CLIENTS), ",".join(SHIM_CLIENTS)))
        sys.exit(2)
    name = sys.argv[1]
    sys.argv[0] = "test_client_" + name.replace("-", "_")
    h.run(lambda ctx: test(ctx, name), budget_s=300)
