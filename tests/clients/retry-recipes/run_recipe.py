#!/usr/bin/python3
"""run_recipe.py RECIPE -- one retry recipe of the README ("Retries with
backoff") against a real broker and a real bridge.

A small program written with RECIPE's framework (this directory), the way
the README's recipe shows it, declares its queue with the retry route's
ingress exchange as x-dead-letter-exchange (or, for the -policy variants,
without it: this driver sets a policy `dead-letter-exchange` on the queue
first), publishes a few messages through the framework, and consumes them:
a message named in DB_CASES as `id:k` fails its first k deliveries (the
consumer rejects it without requeue: dead-lettered to the route), then
succeeds. This driver starts the bridge with a retry route
(tests/integration/harness.py), runs the program, and checks:

- each message is delivered min(k + 1, max_attempts) times, its i-th
  delivery carrying x-retry-attempt i (absent on the first);
- the gap between a failed attempt n and the next delivery is at least
  the backoff d(n) = min(max_ms, initial_ms * multiplier^(n-1)) and at most
  d(n) + DB_TEST_LATE_S (2 s);
- a message that fails every attempt is parked once: in the route's
  parking queue, routing key = the queue, with x-retry-parked-reason
  max_attempts, x-retry-attempts = max_attempts, x-retry-queue, an
  x-delay-error line and one x-retry-history entry per failure, oldest
  first, message-id kept;
- nothing else arrives (no extra delivery, nothing parked twice).

Program protocol: environment DB_URI, DB_EXCHANGE, DB_QUEUE,
DB_RETRY_EXCHANGE ("" when a policy sets it), DB_QUEUE_TYPE, DB_CASES
("id:fails,..."); it prints `VERSION ...`, then one line a delivery:
    DELIVERY <id> <x-retry-attempt, 1 when absent> <epoch ms> ok|fail
and runs until this driver ends it (SIGTERM). Exit 77 (skip) when the
framework or its toolchain is missing, with what to install.
"""

import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
import harness as h  # noqa: E402
from harness import check  # noqa: E402
import run_client  # noqa: E402

RETRY = {"initial_ms": 400, "multiplier": 2.0, "max_ms": 1000, "jitter": "none", "max_attempts": 4}
CASES = [("ok", 0), ("once", 1), ("thrice", 3), ("poison", 99)]
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


need, work_dir = run_client.need, run_client.work_dir


def python_cmd(module, script, pkg):
    r = subprocess.run([PY, "-c", "import %s" % module], capture_output=True)
    need(r.returncode == 0, "%s cannot import %s (apt-get install %s)" % (PY, module, pkg))
    return [PY, "-u", os.path.join(HERE, script)], None


def celery_cmd():
    cmd, _ = python_cmd("celery", "celery_worker.py", "python3-celery")
    return cmd, dict(os.environ, PYTHONPATH=HERE)


NEST_PACKAGES = ["@nestjs/core@12", "@nestjs/common@12", "@nestjs/microservices@12", "amqplib@2",
                 "amqp-connection-manager@5", "reflect-metadata@0.2", "rxjs@7", "typescript@5",
                 "@types/node@20"]


def nestjs_cmd():
    """npm install NestJS 12 and its RMQ transport into the build tree, compile
    nestjs/main.ts there (ES modules, legacy decorators, as `nest new` sets up)."""
    need(shutil.which("node") and shutil.which("npm"), "node or npm not found (apt-get install nodejs npm)")
    d = work_dir("retry-nestjs")
    stamp = os.path.join(d, "installed.txt")  # what the last npm install installed
    if not os.path.exists(stamp) or open(stamp).read() != " ".join(NEST_PACKAGES):
        h.log("installing %s with npm into %s" % (" ".join(NEST_PACKAGES), d))
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", d] + NEST_PACKAGES,
                           capture_output=True, text=True, timeout=300)
        need(r.returncode == 0, "npm install of NestJS failed (no registry?): %s" % r.stderr[-300:])
        with open(stamp, "w") as f:
            f.write(" ".join(NEST_PACKAGES))
    for f in ("main.ts", "tsconfig.json"):
        shutil.copy(os.path.join(HERE, "nestjs", f), os.path.join(d, f))
    with open(os.path.join(d, "package.json")) as f:
        pkg = f.read()
    if '"type"' not in pkg:
        with open(os.path.join(d, "package.json"), "w") as f:
            f.write(pkg.replace("{", '{\n  "type": "module",', 1))
    r = subprocess.run([os.path.join(d, "node_modules", ".bin", "tsc"), "-p", d], cwd=d,
                       capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, "tsc failed:\n%s%s" % (r.stdout, r.stderr))
    return ["node", os.path.join(d, "dist", "main.js")], None


JARS = ["/usr/share/java/amqp-client.jar", "/usr/share/java/slf4j-api.jar",
        "/usr/share/java/slf4j-nop.jar"]


def java_cmd():
    need(shutil.which("java"), "java not found (apt-get install default-jdk-headless librabbitmq-client-java)")
    need(all(os.path.exists(j) for j in JARS),
         "%s missing (apt-get install librabbitmq-client-java libslf4j-java)" % " or ".join(JARS))
    return ["java", "-cp", ":".join(JARS), os.path.join(HERE, "java", "RetryConsumer.java")], None


SYMFONY_AUTOLOAD = "/usr/share/php/Symfony/Component/Messenger/autoload.php"


def symfony_cmd():
    need(shutil.which("php"), "php not found (apt-get install php-cli php-amqp php-symfony-messenger "
         "php-symfony-amqp-messenger)")
    r = subprocess.run(["php", "-r", "exit(extension_loaded('amqp') ? 0 : 1);"], capture_output=True)
    need(r.returncode == 0, "php has no amqp extension (apt-get install php-amqp)")
    need(os.path.exists("/usr/share/php/Symfony/Component/Messenger/Bridge/Amqp/Transport/Connection.php"),
         "Symfony Messenger's AMQP transport missing (apt-get install php-symfony-messenger "
         "php-symfony-amqp-messenger)")
    return ["php", os.path.join(HERE, "symfony", "worker.php")], None


# name: (command, queue type, dead-letter exchange set by "argument" or "policy")
RECIPES = {
    "kombu": (lambda: python_cmd("kombu", "kombu_worker.py", "python3-kombu"), "classic", "argument"),
    "kombu-policy": (lambda: python_cmd("kombu", "kombu_worker.py", "python3-kombu"), "quorum", "policy"),
    "celery": (celery_cmd, "classic", "argument"),
    "nestjs": (nestjs_cmd, "quorum", "argument"),
    "java": (java_cmd, "classic", "argument"),
    "symfony": (symfony_cmd, "classic", "argument"),
}


def backoff(n):
    return min(RETRY["max_ms"], RETRY["initial_ms"] * RETRY["multiplier"] ** (n - 1))


class Program(run_client.LineProgram):
    """The recipe's program: its output lines kept."""

    def __init__(self, cmd, env):
        self.lines = []
        run_client.LineProgram.__init__(self, cmd, env, "  | ")

    def on_line(self, line):
        self.lines.append(line)

    def deliveries(self):
        with self.cond:
            out = []
            for line in self.lines:
                f = line.split()
                if len(f) == 5 and f[0] == "DELIVERY":
                    out.append((f[1], int(f[2]), float(f[3]), f[4]))
            return out

    def version(self):
        with self.cond:
            return next((l.split(" ", 1)[1] for l in self.lines if l.startswith("VERSION ")), "?")



def set_policy(ctx, queue, dlx):
    h.require_owned_broker("a policy (rabbitmqctl set_policy) sets the queue's dead-letter exchange")
    name = ctx.n("retry-policy")
    h.rabbitmqctl("set_policy", name, "^%s$" % re.escape(queue), '{"dead-letter-exchange": "%s"}' % dlx,
                  "--apply-to", "queues")
    return name


def test(ctx, recipe):
    make_cmd, qtype, via = RECIPES[recipe]
    cmd, env = make_cmd()
    exchange, queue = ctx.n("orders"), ctx.n("orders.email")
    ctx.exchanges.add(exchange)
    ctx.queues.add(queue)
    parking = ctx.n("orders.parked")
    ctx.exchanges.add(parking)
    ctx.queues.add(parking)
    route = {"name": "retry-" + recipe, "ingress_exchange": ctx.n("orders.retry"),
             "ingress_queue": ctx.n("orders.retry.q"), "queue_type": "quorum",
             "retry": dict(RETRY, parking_exchange=parking, parking_queue=parking,
                           queue_pattern=h.queue_pattern(queue))}
    ctx.exchanges.add(route["ingress_exchange"])
    ctx.queues.add(route["ingress_queue"])
    ctx.bridge([route])
    policy = set_policy(ctx, queue, route["ingress_exchange"]) if via == "policy" else None
    parked = ctx.consumer([parking])
    env = dict(env or os.environ, DB_URI=h.broker_uri(), DB_EXCHANGE=exchange, DB_QUEUE=queue,
               DB_RETRY_EXCHANGE=route["ingress_exchange"] if via == "argument" else "",
               DB_QUEUE_TYPE=qtype, DB_CASES=",".join("%s:%d" % c for c in CASES))
    h.log("running %s (queue %s, %s, dead-letter exchange by %s)" % (" ".join(cmd), queue, qtype, via))
    prog = Program(cmd, env)
    try:
        expect = {mid: min(k + 1, RETRY["max_attempts"]) for mid, k in CASES}
        total = sum(expect.values())
        worst = sum(backoff(n) for n in range(1, RETRY["max_attempts"])) / 1000.0
        prog.wait(lambda: len(prog.deliveries()) >= total, 90 + worst + 3 * h.late_tolerance(),
                  "%d deliveries" % total)
        n_parked = sum(1 for mid, k in CASES if k >= RETRY["max_attempts"])
        parked.wait_count(n_parked, 10 + h.late_tolerance())
        time.sleep(1.5)  # anything more that should not come
        got = prog.deliveries()
    finally:
        prog.stop()
        if policy:
            try:
                h.rabbitmqctl("clear_policy", policy)
            except Exception as e:  # the test's verdict stands; say so
                h.log("could not clear policy %s: %r" % (policy, e))
    failures = []
    rows = []
    for mid, k in CASES:
        mine = [d for d in got if d[0] == mid]
        want = expect[mid]
        if len(mine) != want:
            failures.append("%s: %d deliveries, expected %d" % (mid, len(mine), want))
        for i, (_, attempt, t_ms, outcome) in enumerate(mine):
            gap = ""
            if attempt != i + 1:
                failures.append("%s: delivery %d carries x-retry-attempt %d" % (mid, i + 1, attempt))
            want_outcome = "fail" if i < k else "ok"
            if outcome != want_outcome:
                failures.append("%s: delivery %d was %s, the program should have said %s"
                                % (mid, i + 1, outcome, want_outcome))
            if i > 0:
                d = backoff(i)
                waited = t_ms - mine[i - 1][2]
                gap = " after %6.0f ms (backoff %4.0f)" % (waited, d)
                if waited < d - h.early_tolerance() * 1000.0:
                    failures.append("%s: attempt %d came %.0f ms after attempt %d failed: EARLY "
                                    "(backoff %.0f ms)" % (mid, i + 1, waited, i, d))
                if waited > d + h.late_tolerance() * 1000.0:
                    failures.append("%s: attempt %d came %.0f ms after attempt %d failed: LATE "
                                    "(backoff %.0f ms)" % (mid, i + 1, waited, i, d))
            rows.append("%-7s attempt %d %-4s%s" % (mid, attempt, outcome, gap))
    pm = parked.snapshot()
    poison = [mid for mid, k in CASES if k >= RETRY["max_attempts"]]
    if len(pm) != len(poison):
        failures.append("%d message(s) parked, expected %d (%s)" % (len(pm), len(poison), poison))
    for m in pm:
        hdr = {k: h.header(m.props, k) for k in ("x-retry-parked-reason", "x-retry-attempts",
                                                  "x-retry-queue", "x-retry-history", "x-delay-error")}
        plain = {k: (v.plain() if v is not None else None) for k, v in hdr.items()}
        rows.append("parked: message-id %s, routing key %s, %s" % (m.message_id, m.routing_key, plain))
        if m.routing_key != queue:
            failures.append("parked with routing key %r, expected the queue %r" % (m.routing_key, queue))
        if plain["x-retry-parked-reason"] != "max_attempts":
            failures.append("x-retry-parked-reason %r, expected 'max_attempts'" % plain["x-retry-parked-reason"])
        if plain["x-retry-attempts"] != RETRY["max_attempts"]:
            failures.append("x-retry-attempts %r, expected %d" % (plain["x-retry-attempts"], RETRY["max_attempts"]))
        if plain["x-retry-queue"] != queue:
            failures.append("x-retry-queue %r, expected %r" % (plain["x-retry-queue"], queue))
        if not isinstance(plain["x-delay-error"], str) or not plain["x-delay-error"]:
            failures.append("x-delay-error %r, expected a line of text" % plain["x-delay-error"])
        hist = plain["x-retry-history"]
        if not isinstance(hist, list) or len(hist) != RETRY["max_attempts"] or hist != sorted(hist):
            failures.append("x-retry-history %r: expected %d times, oldest first" % (hist, RETRY["max_attempts"]))
        if m.message_id is not None and m.message_id not in poison:
            failures.append("message-id %r parked, expected one of %s" % (m.message_id, poison))
    h.log("%s (%s): %d deliveries\n    %s" % (recipe, prog.version(), len(got), "\n    ".join(rows)))
    if failures:
        h.fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))
    h.log("RESULT %s %s: every message back after its backoff, the poison one parked" % (recipe, prog.version()))


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in RECIPES:
        sys.stderr.write("usage: run_recipe.py {%s}\n" % ",".join(RECIPES))
        sys.exit(2)
    name = sys.argv[1]
    sys.argv[0] = "test_retry_recipe_" + name.replace("-", "_")
    h.run(lambda ctx: test(ctx, name), budget_s=360)
