#!/usr/bin/python3
"""Configuration mistakes stop the DAEMON itself (not only --check-config,
which test_config.py covers) with exit code 3 and one line on stderr that
names the file and the key path, before anything touches the WAL: the WAL
directory is never created. Mistakes: a missing required key, a wrong type,
an unknown key, an out-of-range value, a bad broker URI, a stream ingress
combined with what it cannot have (share_keys, single_active_consumer,
wal.replicate) or its retention keys on another queue type or malformed, a
wal.dir whose path runs through a regular file, and a wal.dir this user
cannot create or write (as root the daemon runs as nobody via setpriv for
that case, where root could write anywhere). --check-config agrees (exit 3)
on every mistake that is in the file itself; the two wal.dir cases depend on
the machine and user and are the daemon's check at start only
(config_check_wal_dir).

Each mistake is a named case (harness.Cases), run and reported whatever
happened to the ones before; the two unwritable wal.dir cases are skipped
(alone) where they cannot run (root without setpriv, or a user that cannot
run the binary)."""

import json
import os
import shutil
import subprocess

import harness as h
from harness import check, mutate

NOBODY = 65534


def stream(cfg):
    """cfg with its first route's ingress a stream."""
    return mutate(cfg, "routes[0].queue_type", "stream")


def test(ctx):
    n = [0]

    def case_dir():
        n[0] += 1
        d = os.path.join(ctx.tmp, "case-%02d" % n[0])
        os.makedirs(d)
        return d

    def base(d):
        return ctx.config([ctx.route("orders", "orders")], wal_dir=os.path.join(d, "wal"))

    def write(d, cfg, owner=None):
        p = os.path.join(d, "config.json")
        with open(p, "w") as f:
            json.dump(cfg, f, indent=2)
        os.chmod(p, 0o600)  # no "password readable by others" warning: one line is all
        if owner is not None:
            os.chown(p, owner, owner)
        return p

    def expect_refused(what, d, cfg, key, check_config=True, user=None, wal=None):
        p = write(d, cfg, owner=user)
        wal = wal or os.path.join(d, "wal")
        files = sorted(os.listdir(d))
        rc, out, err = h.bridge_cli("-c", p, user=user, timeout=20)
        lines = [l for l in err.splitlines() if l.strip()]
        shown = " | ".join(lines)[:300]
        problems = []
        if rc != 3:
            problems.append("exit %d, expected 3" % rc)
        if len(lines) != 1:
            problems.append("%d lines on stderr, expected one" % len(lines))
        elif key not in lines[0] or "config.json" not in lines[0]:
            problems.append("the line does not name config.json and %r" % key)
        if out.strip():
            problems.append("printed on stdout: %r" % out[:200])
        if os.path.lexists(wal):
            problems.append("the WAL directory %s was created" % wal)
        if sorted(os.listdir(d)) != files:
            problems.append("files appeared: %s" % sorted(set(os.listdir(d)) - set(files)))
        if check_config:
            rc2, _, err2 = h.bridge_cli("--check-config", "-c", p, user=user, timeout=20)
            if rc2 != 3 or key not in err2:
                problems.append("--check-config: exit %d (%s)" % (rc2, err2.strip()[:200]))
        h.log("%s %-44s exit %d: %s" % ("ok  " if not problems else "BAD ", what, rc, shown))
        check(not problems, "%s (stderr: %s)" % ("; ".join(problems), shown))

    table = [
        # missing required keys
        ("missing broker.uri", lambda c: mutate(c, "broker.uri", delete=True), "broker.uri"),
        ("missing wal.dir", lambda c: mutate(c, "wal.dir", delete=True), "wal.dir"),
        ("missing wal section", lambda c: mutate(c, "wal", delete=True), "wal.dir"),
        ("missing routes[0].target_exchange",
         lambda c: mutate(c, "routes[0].target_exchange", delete=True), "routes[0].target_exchange"),
        ("missing routes", lambda c: mutate(c, "routes", delete=True), "routes"),
        # wrong types
        ("heartbeat_s a string", lambda c: mutate(c, "broker.heartbeat_s", "30"), "broker.heartbeat_s"),
        ("segment_mb a string", lambda c: mutate(c, "wal.segment_mb", "64"), "wal.segment_mb"),
        ("segment_mb a float", lambda c: mutate(c, "wal.segment_mb", 1.5), "wal.segment_mb"),
        ("fsync a string", lambda c: mutate(c, "wal.fsync", "true"), "wal.fsync"),
        ("wal.dir a number", lambda c: mutate(c, "wal.dir", 42), "wal.dir"),
        ("prefetch a string", lambda c: mutate(c, "routes[0].prefetch", "100"), "routes[0].prefetch"),
        ("routes an object", lambda c: mutate(c, "routes", {"name": "x"}), "routes"),
        ("broker a string", lambda c: mutate(c, "broker", "amqp://localhost"), "broker"),
        ("http.listen a number", lambda c: mutate(c, "http", {"listen": 9800}), "http.listen"),
        # unknown keys
        ("unknown top-level key", lambda c: mutate(c, "rotues", []), "rotues"),
        ("unknown wal key", lambda c: mutate(c, "wal.segments_mb", 64), "wal.segments_mb"),
        ("unknown route key", lambda c: mutate(c, "routes[0].ingres_queue", "q"), "routes[0].ingres_queue"),
        # out of range
        ("segment_mb 0", lambda c: mutate(c, "wal.segment_mb", 0), "wal.segment_mb"),
        ("segment_mb 4096", lambda c: mutate(c, "wal.segment_mb", 4096), "wal.segment_mb"),
        ("max_message_bytes 0", lambda c: mutate(c, "wal.max_message_bytes", 0), "wal.max_message_bytes"),
        ("max_message_bytes 1 GiB", lambda c: mutate(c, "wal.max_message_bytes", 1 << 30),
         "wal.max_message_bytes"),
        ("heartbeat_s 70000", lambda c: mutate(c, "broker.heartbeat_s", 70000), "broker.heartbeat_s"),
        ("prefetch -1", lambda c: mutate(c, "routes[0].prefetch", -1), "routes[0].prefetch"),
        ("max_delay_ms 2^63", lambda c: mutate(c, "routes[0].max_delay_ms", 2 ** 63), "routes[0].max_delay_ms"),
        ("shutdown_timeout_ms -5", lambda c: mutate(c, "shutdown_timeout_ms", -5), "shutdown_timeout_ms"),
        # bad URIs
        ("uri http://", lambda c: mutate(c, "broker.uri", "http://127.0.0.1/"), "broker.uri"),
        ("uri empty", lambda c: mutate(c, "broker.uri", ""), "broker.uri"),
        ("uri bad port", lambda c: mutate(c, "broker.uri", "amqp://guest:guest@127.0.0.1:notaport/%2f"),
         "broker.uri"),
        ("uri unclosed [", lambda c: mutate(c, "broker.uri", "amqp://[::1/%2f"), "broker.uri"),
        ("uri list with a bad one", lambda c: mutate(c, "broker.uri", [h.broker_uri(), "amqp//x"]),
         "broker.uri"),
        # a stream ingress: its own keys only on a stream, and not with the keys that
        # assume competing consumers of one queue, nor with wal.replicate
        ("stream with share_keys", lambda c: stream(mutate(c, "routes[0].share_keys", True)),
         "routes[0].queue_type"),
        ("stream with single_active_consumer",
         lambda c: stream(mutate(c, "routes[0].single_active_consumer", True)), "routes[0].queue_type"),
        ("stream with wal.replicate", lambda c: stream(mutate(c, "wal.replicate", {})),
         "routes[0].queue_type"),
        ("stream_max_age on a classic route",
         lambda c: mutate(mutate(c, "routes[0].queue_type", "classic"), "routes[0].stream_max_age", "7D"),
         "routes[0].stream_max_age"),
        ("stream_max_mb on a default route", lambda c: mutate(c, "routes[0].stream_max_mb", 64),
         "routes[0].stream_max_mb"),
        ("stream_max_age \"7 days\"", lambda c: stream(mutate(c, "routes[0].stream_max_age", "7 days")),
         "routes[0].stream_max_age"),
        ("stream_max_mb -1", lambda c: stream(mutate(c, "routes[0].stream_max_mb", -1)),
         "routes[0].stream_max_mb"),
    ]
    cases = h.Cases()

    def table_case(what, fn, key):
        d = case_dir()
        expect_refused(what, d, fn(base(d)), key)

    for what, fn, key in table:
        cases.run(what, table_case, what, fn, key)

    # wal.dir through a regular file: cannot be a directory, whoever runs it.
    d_file = case_dir()
    afile = os.path.join(d_file, "a-file")
    with open(afile, "w") as f:
        f.write("not a directory\n")
    cases.run("wal.dir under a regular file", expect_refused, "wal.dir under a regular file", d_file,
              mutate(base(d_file), "wal.dir", os.path.join(afile, "wal")), "wal.dir", False)
    cases.run("wal.dir is a regular file", lambda: expect_refused(
        "wal.dir is a regular file", d_file, mutate(base(d_file), "wal.dir", afile), "wal.dir",
        check_config=False, wal=os.path.join(d_file, "never")))

    # /etc/passwd/x, the classic
    def case_etc_passwd():
        d = case_dir()
        expect_refused("wal.dir /etc/passwd/x", d, mutate(base(d), "wal.dir", "/etc/passwd/x"),
                       "wal.dir", check_config=False)
    cases.run("wal.dir /etc/passwd/x", case_etc_passwd)

    # An unwritable parent, and an existing WAL directory that is not writable.
    user = None
    if os.geteuid() == 0:
        if shutil.which("setpriv"):
            user = NOBODY
            r = subprocess.run(["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups",
                                h.bridge_bin(), "--version"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            if r.returncode != 0:
                user = "user %d cannot run %s" % (user, h.bridge_bin())
        else:
            user = "running as root without setpriv: cannot test an unwritable wal.dir"
    d_ro = case_dir()
    ro = os.path.join(d_ro, "read-only")
    existing = os.path.join(ro, "existing")

    def case_read_only_parent():
        if isinstance(user, str):
            raise h.Skip(user)
        d = d_ro
        os.chmod(d, 0o755)
        os.chmod(ctx.tmp, 0o755)
        os.makedirs(ro)
        os.chmod(ro, 0o555)
        expect_refused("wal.dir under a read-only directory", d,
                       mutate(base(d), "wal.dir", os.path.join(ro, "wal")), "wal.dir",
                       check_config=False, user=user)

    def case_existing_read_only():
        if isinstance(user, str):
            raise h.Skip(user)
        d = d_ro
        if not os.path.isdir(ro):  # the case before did not get that far
            os.chmod(d, 0o755)
            os.chmod(ctx.tmp, 0o755)
            os.makedirs(ro)
        os.chmod(ro, 0o755)
        os.makedirs(existing)
        os.chmod(existing, 0o555)
        os.chmod(ro, 0o555)
        before = sorted(os.listdir(existing))
        p = write(d, mutate(base(d), "wal.dir", existing), owner=user)
        rc, _, err = h.bridge_cli("-c", p, user=user, timeout=20)
        lines = [l for l in err.splitlines() if l.strip()]
        ok = rc == 3 and len(lines) == 1 and "wal.dir" in lines[0] and \
            sorted(os.listdir(existing)) == before
        h.log("%s %-44s exit %d: %s" % ("ok  " if ok else "BAD ", "existing read-only wal.dir", rc,
                                         " | ".join(lines)[:300]))
        os.chmod(ro, 0o755)
        os.chmod(existing, 0o755)
        check(ok, "existing read-only wal.dir: exit %d, %d line(s), LOCK created: %s (%s)"
              % (rc, len(lines), "LOCK" in os.listdir(existing), err.strip()[:300]))

    cases.run("wal.dir under a read-only directory", case_read_only_parent)
    cases.run("existing read-only wal.dir", case_existing_read_only)

    # And the good config runs: the mistakes above are what stopped it.
    def case_good_config():
        d = case_dir()
        rc, out, err = h.bridge_cli("--check-config", "-c", write(d, base(d)), timeout=20)
        check(rc == 0, "the unmodified config fails --check-config: %s" % err)
    cases.run("the unmodified config passes", case_good_config)
    cases.done()


if __name__ == "__main__":
    h.run(test, budget_s=180)
