#!/usr/bin/python3
"""`delay-bridge publish` into a running bridge's ingress exchange: the
message (x-delay 1500, string headers, message id, persistent, body from the
argument or from stdin) reaches the target no earlier than 1.5 s after the
command started, with its body and headers. A wrong password exits 1 with
one line that does not contain the password; so do an unroutable publish
and a missing exchange; a usage error exits 2."""

import subprocess
import time

import harness as h
from harness import check

SECRET = "wrong-Secret-pw-42"


def publish(*args, stdin=None):
    cmd = [h.bridge_bin(), "publish"] + [str(a) for a in args]
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def test(ctx):
    ex, qs = ctx.target("target", "direct", ["rk"])
    c = ctx.consumer([qs["rk"]])
    route = ctx.route("pub", ex)
    b = ctx.bridge([route])
    uri = h.broker_uri()
    ingress = route["ingress_exchange"]

    # Body from the argument.
    t0 = time.monotonic()
    rc, out, err = publish("--uri", uri, "--exchange", ingress, "--routing-key", "rk", "--delay", 1500,
                           "--header", "colour=green", "--header", "note=a b=c", "--persistent",
                           "--message-id", "cli-1", "hello from the cli")
    h.log("publish: exit %d: %s%s" % (rc, out.strip(), err.strip()))
    check(rc == 0, "delay-bridge publish exited %d: %s" % (rc, err.strip()))
    # Body from stdin.
    t1 = time.monotonic()
    rc, _, err = publish("--uri", uri, "--exchange", ingress, "--routing-key", "rk", "--delay", 300,
                         "--message-id", "cli-2", "-", stdin=b"\x00binary\xffbody")
    check(rc == 0, "delay-bridge publish with the body on stdin exited %d: %s" % (rc, err.strip()))

    got = {m.message_id: m for m in c.wait_ids(["cli-1", "cli-2"], 1.5 + h.late_tolerance() + 5)}
    m = got["cli-1"]
    h.check_on_time(m, t0, 1.5, "the message published by the cli")
    check(m.body == b"hello from the cli", "body changed: %r" % m.body)
    check(h.header_str(m.props, "colour") == "green", "header colour: %r" % h.header(m.props, "colour"))
    check(h.header_str(m.props, "note") == "a b=c", "header note: %r" % h.header(m.props, "note"))
    check(h.header(m.props, "colour").kind == "S", "a --header value should be a long string")
    check(m.props.delivery_mode == 2, "--persistent: delivery_mode %r" % m.props.delivery_mode)
    m2 = got["cli-2"]
    h.check_on_time(m2, t1, 0.3, "the message with its body from stdin")
    check(m2.body == b"\x00binary\xffbody", "stdin body changed: %r" % m2.body)
    h.log("delivered after %.3fs with body and headers" % (m.t - t0))

    # A wrong password: exit 1, one clear line, no password.
    bad = uri.replace("guest:guest@", "guest:%s@" % SECRET)
    check(bad != uri, "the test broker URI %s has no guest:guest to replace" % h.mask_uri(uri))
    rc, out, err = publish("--uri", bad, "--exchange", ingress, "--routing-key", "rk", "--delay", 10, "x")
    h.log("wrong password: exit %d: %s" % (rc, err.strip()))
    check(rc == 1, "a wrong password should exit 1, got %d" % rc)
    check(SECRET not in out + err, "the password appears in the output: %s" % (out + err))
    check(err.strip() and "***" in err, "the error does not name the (masked) broker: %r" % err)

    # Unroutable (mandatory) and a missing exchange: exit 1 with the broker's reason.
    rc, _, err = publish("--uri", uri, "--exchange", ex, "--routing-key", "nobody-binds-this",
                         "--delay", 10, "x")
    check(rc == 1 and "unroutable" in err, "an unroutable publish: exit %d: %s" % (rc, err.strip()))
    rc, _, err = publish("--uri", uri, "--exchange", ctx.n("missing"), "--routing-key", "rk",
                         "--delay", 10, "x")
    check(rc == 1 and "404" in err, "publish to a missing exchange: exit %d: %s" % (rc, err.strip()))
    # Usage.
    rc, _, _ = publish("--uri", uri, "--exchange", ingress, "--routing-key", "rk", "x")
    check(rc == 2, "publish without --delay should exit 2, got %d" % rc)
    rc, _, _ = publish("--uri", uri, "--exchange", ingress, "--routing-key", "rk", "--delay", "soon")
    check(rc == 2, "--delay soon should exit 2, got %d" % rc)
    rc, out, _ = publish("--help")
    check(rc == 0 and "--delay" in out and "Exit codes" in out, "publish --help")
    c.quiet(0.5)
    check(len([x for x in c.snapshot() if x.message_id in ("cli-1", "cli-2")]) == 2,
          "a failed publish delivered something")
    b.stop()


if __name__ == "__main__":
    h.run(test, budget_s=90)
