#!/usr/bin/env python3
"""test_secrets.py -- the broker password never leaks.

With a user of its own and a distinctive password (needs the broker the
suite owns, for rabbitmqctl add_user; skipped otherwise), every text the
bridge produces is searched for the password:

  - the log of a bridge that connects, and its HTTP endpoint (/healthz,
    /readyz, /stats, /metrics) after a delayed message went through;
  - the log and the endpoint of a bridge with a wrong password (login
    errors, retries, readiness reasons);
  - the log of a bridge given the URI in DELAY_BRIDGE_BROKER_URI;
  - --check-config on bad configurations that hold the password;
  - `delay-bridge publish` with a wrong password, and with the right one
    to a missing exchange (a channel error).

And the permissions warning: a configuration file readable by others
(0644) that holds a password in broker.uri gets one warning line at start
naming the file and the fix; none at 0600, none without a password in the
URI, none when the URI comes from the environment.
"""

import json
import os
import secrets
import time
import urllib.parse

import pika

import harness
from harness import check, log

WARNING = "holds the broker password and is readable by other users"


free_port = harness.free_port  # one copy, in harness.py


class Secrets(object):
    """The strings that must never appear, and the check."""

    def __init__(self, *words):
        self.words = [w for w in words if w]

    def check(self, what, text):
        for w in self.words:
            check(w not in text, "%s shows a broker password (%s...): %s" % (
                what, w[:4], text.replace(w, "<PASSWORD>")[:2000]))
        log("%s: no password in %d bytes" % (what, len(text)))


def endpoint_texts(port):
    out = []
    for path in ("/healthz", "/readyz", "/stats", "/metrics"):
        st, body = harness.http_get(port, path)
        out.append((path, st, body))
    return out


def test(ctx):
    harness.require_owned_broker("creating a user with a password of its own")
    params = pika.URLParameters(harness.broker_uri())
    host, port = params.host, params.port

    user = "dbtest-secrets-" + secrets.token_hex(3)
    # '/' and '@' are written %2F and %40 in the URI: neither form may show
    core = "Pw" + secrets.token_hex(12)
    pw = core + "/@x"
    wrong = "Wrong" + secrets.token_hex(12)
    harness.rabbitmqctl("add_user", user, pw)
    try:
        harness.rabbitmqctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
        run_checks(ctx, user, core, pw, wrong, host, port)
    finally:
        harness.rabbitmqctl("delete_user", user)


def run_checks(ctx, user, core, pw_plain, wrong, host, port):
    pw = urllib.parse.quote(pw_plain, safe="")
    S = Secrets(core, pw, pw_plain, wrong)
    uri = "amqp://%s:%s@%s:%d/%%2f" % (user, pw, host, port)
    bad_uri = "amqp://%s:%s@%s:%d/%%2f" % (user, wrong, host, port)

    # 1. a working bridge, its endpoint; its config file 0644 holds the password
    target, queues = ctx.target("target", bindings=["k"])
    consumer = ctx.consumer(queues.values())
    route = ctx.route("sec", target)
    http_port = free_port()
    b = ctx.bridge([route], name="good", start=False, broker={"uri": uri},
                   http={"listen": "127.0.0.1:%d" % http_port})
    os.chmod(b.config_path, 0o644)
    b.start()
    t = ctx.publisher().publish(route["ingress_exchange"], "k", b"m", headers={"x-delay": 300})
    consumer.wait_count(1, 10)
    harness.check_on_time(consumer.snapshot()[0], t, 0.3, "the delayed message")
    for path, st, body in endpoint_texts(http_port):
        check(st == 200, "GET %s on a ready bridge: %d %s" % (path, st, body[:200]))
        S.check("GET %s" % path, body)
    b.stop()
    text = b.log_text()
    S.check("the log of a bridge that connected", text)
    warn = [l for l in text.splitlines() if WARNING in l]
    check(len(warn) == 1, "a 0644 config file holding a password should get one warning at start, "
          "got %d: %r" % (len(warn), warn))
    check(b.config_path in warn[0] and "chmod 600" in warn[0] and
          "DELAY_BRIDGE_BROKER_URI" in warn[0] and "level=warn" in warn[0],
          "the warning should name the file, chmod 600 and DELAY_BRIDGE_BROKER_URI: %s" % warn[0])
    log("warning at start: %s" % warn[0])

    # the same file at 0600: no warning
    os.chmod(b.config_path, 0o600)
    rc, out, err = harness.bridge_cli("-c", b.config_path, "--check-config")
    check(rc == 0 and WARNING not in err, "--check-config at 0600: rc %d, stderr %r" % (rc, err))
    # 0644 again, warned by --check-config too
    os.chmod(b.config_path, 0o644)
    rc, out, err = harness.bridge_cli("-c", b.config_path, "--check-config")
    check(rc == 0 and err.count(WARNING) == 1, "--check-config at 0644: rc %d, stderr %r" % (rc, err))
    S.check("--check-config of a good config", out + err)

    # 2. the URI from the environment: connects, no warning, nothing leaks
    b2 = ctx.bridge([ctx.route("env", target)], name="env", start=False,
                    broker={"uri": "amqp://nobody@127.0.0.1:1/%2f"})
    os.chmod(b2.config_path, 0o644)
    b2.start(env={"DELAY_BRIDGE_BROKER_URI": uri})
    b2.stop()
    text = b2.log_text()
    S.check("the log of a bridge with DELAY_BRIDGE_BROKER_URI", text)
    check(WARNING not in text, "no file warning when the URI comes from the environment")

    # a URI without a password in a 0644 file: no warning
    nopw = ctx.bridge([ctx.route("nopw", target)], name="nopw", start=False,
                      broker={"uri": "amqp://%s:%d/%%2f" % (host, port)})
    os.chmod(nopw.config_path, 0o644)
    rc, out, err = harness.bridge_cli("-c", nopw.config_path, "--check-config")
    check(rc == 0 and WARNING not in err, "no password, no warning: rc %d, stderr %r" % (rc, err))

    # 3. a wrong password: connection errors, readiness reasons
    http_port2 = free_port()
    bb = ctx.bridge([ctx.route("bad", target)], name="badpw", start=False,
                    broker={"uri": bad_uri}, http={"listen": "127.0.0.1:%d" % http_port2})
    bb.start(wait_ready=False)
    bb.wait_log('msg="cannot start consuming"', 20, "a login error")
    deadline = time.monotonic() + 10
    while 'msg="cannot connect"' not in bb.log_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # a few retries
    for path, st, body in endpoint_texts(http_port2):
        S.check("GET %s while the login fails (%d)" % (path, st), body)
    bb.stop()
    text = bb.log_text()
    check('msg="ready"' not in text, "a bridge with a wrong password became ready")
    S.check("the log of a bridge with a wrong password", text)
    log("login error as logged: %s" % [l for l in text.splitlines()
                                       if "cannot start consuming" in l][0][:300])

    # 4. --check-config on bad configurations holding the password
    bad = {
        "bad port": {"broker": {"uri": "amqp://%s:%s@%s:99999/%%2f" % (user, pw, host)}},
        "bad vhost": {"broker": {"uri": "amqp://%s:%s@%s:%d/a/b" % (user, pw, host, port)}},
        "bad scheme": {"broker": {"uri": "http://%s:%s@%s:%d/" % (user, pw, host, port)}},
        "bad array": {"broker": {"uri": [uri, "amqp://%s:%s@h:0/" % (user, wrong)]}},
        "bad key": {"broker": {"uri": uri, "tls": {"cert_file": "/nonexistent"}}},
        "bad route": {"broker": {"uri": uri}, "routes": [dict(route, prefetch="many")]},
    }
    for what, top in bad.items():
        top = dict(top)
        cfg = ctx.config(top.pop("routes", [route]), **top)
        path = os.path.join(ctx.tmp, "bad-%s.json" % what.replace(" ", "-"))
        with open(path, "w") as f:
            json.dump(cfg, f)
        rc, out, err = harness.bridge_cli("-c", path, "--check-config")
        check(rc == 3, "--check-config on %s: expected exit 3, got %d (%s)" % (what, rc, err))
        S.check("--check-config on a config with a %s" % what, out + err)
        log("  %s: %s" % (what, err.strip()[:200]))

    # 5. delay-bridge publish: a wrong password, and a channel error with the right one
    rc, out, err = harness.bridge_cli("publish", "--uri", bad_uri, "--exchange",
                                      route["ingress_exchange"], "--routing-key", "k", "--delay",
                                      "0", "--timeout", "5000", "x")
    check(rc == 1, "publish with a wrong password: exit %d, expected 1 (%s)" % (rc, err))
    S.check("delay-bridge publish with a wrong password", out + err)
    log("  publish, wrong password: %s" % err.strip()[:200])
    rc, out, err = harness.bridge_cli("publish", "--exchange", ctx.n("no-such-exchange"),
                                      "--routing-key", "k", "--delay", "0", "x",
                                      env={"DELAY_BRIDGE_BROKER_URI": uri})
    check(rc == 1, "publish to a missing exchange: exit %d, expected 1 (%s)" % (rc, err))
    S.check("delay-bridge publish to a missing exchange", out + err)
    log("  publish, missing exchange: %s" % err.strip()[:200])
    rc, out, err = harness.bridge_cli("publish", "--uri",
                                      "amqp://%s:%s@%s:%d/a/b" % (user, pw, host, port),
                                      "--exchange", "x", "--routing-key", "k", "--delay", "0", "x")
    check(rc != 0, "publish with an invalid URI should fail")
    S.check("delay-bridge publish with an invalid URI", out + err)


if __name__ == "__main__":
    harness.run(test, budget_s=180)
