"""harness.py -- shared helpers for delay-bridge's integration tests.

Every test_*.py is a standalone script run against a REAL RabbitMQ:

    DB_BRIDGE_BIN=build/delay-bridge \
    DB_TEST_BROKER_URI=amqp://guest:guest@127.0.0.1:5681/%2f \
    DB_TEST_BROKER_DIR=build/rabbitmq \
    /usr/bin/python3 tests/integration/test_order.py

Exit codes: 0 pass, 1 fail, 77 skipped (ctest's SKIP_RETURN_CODE).

A test of several steps runs them as named cases (`Cases` below): each
case runs even when an earlier one failed, each is logged "case NAME: ok"
or "case NAME: FAILED ...", and the test fails at the end naming every
failed case -- so the first failure does not hide the rest. A case that
cannot mean anything without an earlier one names it (needs=...) and is
reported as not run when that one failed.

Beside it, for the tests that need them: harness_load.py (load that keeps
the broker busy: publish_pipelined, the background Feeder) and
harness_wal.py (the daemon's WAL files: segments, records, `wal dump`).
A helper two tests would share goes in one of the three, not in a test.

Environment:
  DB_BRIDGE_BIN        the delay-bridge binary (required)
  DB_TEST_BROKER_URI   broker to test against (default amqp://guest:guest@127.0.0.1:5681/%2f)
  DB_TEST_BROKER_DIR   set when the suite owns the broker (started with rabbitmq.sh in
                       that directory): only then may a test restart it or run rabbitmqctl
  DB_TEST_KEEP         keep the test's temporary directory even when it passes
  DB_TEST_LATE_S       how late a delayed message may arrive after its due time (default 2.0)
  DB_TEST_EARLY_MS     clock tolerance for "never before its due time" (default 50)

Only the python3 standard library and pika (Debian's python3-pika, for
/usr/bin/python3). pika cannot produce every AMQP field type, and its
decoder loses types (it truncates floats to ints, swaps signedness, turns
strings into str or bytes at random); so this module installs, at import,
a typed layer: a `Field(kind, value)` in a header table is encoded exactly
as that kind, and every header table of a delivered message is decoded
into `Field`s that keep their kind. Type letters are RabbitMQ's (the ones
rabbitmq-c and the broker use; RabbitMQ rejects 'U'):

    t bool   b int8   B uint8   s int16   u uint16   I int32   i uint32
    l int64  L uint64 f float32 d float64 D decimal  S long string
    x bytes  T timestamp  F table  A array  V void

Field equality compares kind and encoded bytes, so 1.5 as float32 never
equals 1.5 as float64 and NaN equals itself.
"""

import copy
import decimal
import http.client
import json
import os
import random
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

try:
    import pika
    import pika.data
    import pika.spec
    from pika.exceptions import AMQPError
except ImportError:  # pragma: no cover - reported clearly, not as a traceback
    sys.stderr.write("harness: python module 'pika' not found for %s; install python3-pika "
                     "and run the tests with /usr/bin/python3\n" % sys.executable)
    sys.exit(1)

HERE = os.path.dirname(os.path.abspath(__file__))
RABBITMQ_SH = os.path.join(HERE, "rabbitmq.sh")

SKIP = 77
DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5681/%2f"


class Skip(Exception):
    """Raised to skip a test (exit 77)."""


class TestFailure(AssertionError):
    """A check failed; the message says what a user would see go wrong."""


class BudgetExceeded(TestFailure):
    """The test's watchdog (run()'s budget_s) fired: it ends the whole test,
    whatever case is running."""


def fail(msg):
    raise TestFailure(msg)


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def log(msg):
    sys.stdout.write("[%7.2f] %s\n" % (time.monotonic() - _T0, msg))
    sys.stdout.flush()


_T0 = time.monotonic()


# --------------------------------------------------------------------------
# Typed AMQP field values
# --------------------------------------------------------------------------

_SCALAR = {
    "t": ">B", "b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
    "l": ">q", "L": ">Q", "f": ">f", "d": ">d", "T": ">Q",
}


class Field(object):
    """One AMQP field value of an explicit kind (see the module comment).

    value: int for integer kinds and T (seconds), bool for t, float for f/d,
    (scale, unscaled int) for D, bytes for S and x, dict of str -> Field for
    F, list of Field for A, None for V.
    """

    __slots__ = ("kind", "value")

    def __init__(self, kind, value=None):
        if kind == "S" and isinstance(value, str):
            value = value.encode("utf-8")
        self.kind = kind
        self.value = value

    def encode(self):
        k, v = self.kind, self.value
        if k in _SCALAR:
            if k == "t":
                v = 1 if v else 0
            return k.encode() + struct.pack(_SCALAR[k], v)
        if k == "D":
            scale, unscaled = v
            return b"D" + struct.pack(">Bi", scale, unscaled)
        if k in ("S", "x"):
            return k.encode() + struct.pack(">I", len(v)) + v
        if k == "F":
            body = encode_table(v)
            return b"F" + body
        if k == "A":
            body = b"".join(as_field(x).encode() for x in v)
            return b"A" + struct.pack(">I", len(body)) + body
        if k == "V":
            return b"V"
        raise ValueError("unknown AMQP field kind %r" % k)

    def __eq__(self, other):
        return isinstance(other, Field) and self.kind == other.kind and self.encode() == other.encode()

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((self.kind, self.encode()))

    def __repr__(self):
        return "%s(%r)" % (self.kind, self.value)

    def plain(self):
        """The value as plain python (for messages and loose checks)."""
        if self.kind == "F":
            return {k: as_field(x).plain() for k, x in self.value.items()}
        if self.kind == "A":
            return [as_field(x).plain() for x in self.value]
        if self.kind == "S":
            try:
                return self.value.decode("utf-8")
            except UnicodeDecodeError:
                return self.value
        if self.kind == "D":
            scale, unscaled = self.value
            return decimal.Decimal(unscaled).scaleb(-scale)
        return self.value


def i8(v): return Field("b", v)
def u8(v): return Field("B", v)
def i16(v): return Field("s", v)
def u16(v): return Field("u", v)
def i32(v): return Field("I", v)
def u32(v): return Field("i", v)
def i64(v): return Field("l", v)
def u64(v): return Field("L", v)
def f32(v): return Field("f", v)
def f64(v): return Field("d", v)
def dec(scale, unscaled): return Field("D", (scale, unscaled))
def lstr(v): return Field("S", v)
def raw_bytes(v): return Field("x", v)
def tstamp(v): return Field("T", v)
def boolean(v): return Field("t", bool(v))
def void(): return Field("V", None)
def table(d): return Field("F", {k: as_field(v) for k, v in d.items()})
def array(items): return Field("A", [as_field(v) for v in items])


def as_field(v):
    """Plain python -> Field, with the kinds a test would expect by default."""
    if isinstance(v, Field):
        return v
    if isinstance(v, bool):
        return Field("t", v)
    if isinstance(v, int):
        return Field("l", v)
    if isinstance(v, float):
        return Field("d", v)
    if isinstance(v, str):
        return Field("S", v)
    if isinstance(v, bytes):
        return Field("x", v)
    if isinstance(v, dict):
        return table(v)
    if isinstance(v, (list, tuple)):
        return array(v)
    if v is None:
        return Field("V", None)
    raise TypeError("no AMQP field kind for %r" % (v,))


def encode_table(d):
    body = b""
    for k, v in (d or {}).items():
        kb = k.encode("utf-8") if isinstance(k, str) else k
        body += struct.pack("B", len(kb)) + kb + as_field(v).encode()
    return struct.pack(">I", len(body)) + body


def decode_value(buf, off):
    """Decode one field value at buf[off:]: (Field, new offset)."""
    k = chr(buf[off])
    off += 1
    if k in _SCALAR:
        fmt = _SCALAR[k]
        (v,) = struct.unpack_from(fmt, buf, off)
        off += struct.calcsize(fmt)
        if k == "t":
            v = bool(v)
        return Field(k, v), off
    if k == "D":
        scale, unscaled = struct.unpack_from(">Bi", buf, off)
        return Field("D", (scale, unscaled)), off + 5
    if k in ("S", "x"):
        (n,) = struct.unpack_from(">I", buf, off)
        off += 4
        return Field(k, bytes(buf[off:off + n])), off + n
    if k == "F":
        d, off = decode_table(buf, off)
        return Field("F", d), off
    if k == "A":
        (n,) = struct.unpack_from(">I", buf, off)
        off += 4
        end = off + n
        items = []
        while off < end:
            f, off = decode_value(buf, off)
            items.append(f)
        return Field("A", items), off
    if k == "V":
        return Field("V", None), off
    raise ValueError("unknown AMQP field kind %r at offset %d" % (k, off - 1))


def decode_table(buf, off):
    """Decode a field table at buf[off:]: (dict str -> Field, new offset)."""
    (n,) = struct.unpack_from(">I", buf, off)
    off += 4
    end = off + n
    d = {}
    while off < end:
        klen = buf[off]
        key = bytes(buf[off + 1:off + 1 + klen]).decode("utf-8", "replace")
        off += 1 + klen
        d[key], off = decode_value(buf, off)
    return d, off


# Install the typed layer into pika: Field values encode as their kind; the
# headers of delivered messages decode into Fields. Everything else (server
# properties, queue arguments) keeps pika's own decoding, which pika relies on.
_pika_encode_value = pika.data.encode_value
_pika_decode_value = pika.data.decode_value
_props_decode = pika.spec.BasicProperties.decode
_typed = threading.local()


def _encode_value(pieces, value):
    if isinstance(value, Field):
        b = value.encode()
        pieces.append(b)
        return len(b)
    return _pika_encode_value(pieces, value)


def _decode_value(encoded, offset):
    if getattr(_typed, "on", False):
        return decode_value(encoded, offset)
    return _pika_decode_value(encoded, offset)


def _basic_properties_decode(self, encoded, offset=0):
    _typed.on = True
    try:
        return _props_decode(self, encoded, offset)
    finally:
        _typed.on = False


pika.data.encode_value = _encode_value
pika.data.decode_value = _decode_value
pika.spec.BasicProperties.decode = _basic_properties_decode


def header(props, key):
    """A delivered message's header as a Field, or None."""
    return (props.headers or {}).get(key)


def connection_name(client_properties):
    """A connection's name from `rabbitmqctl list_connections client_properties
    --formatter json`: [name, type, value] triples, or a dict; None without one."""
    props = client_properties or []
    if isinstance(props, dict):
        return props.get("connection_name")
    for entry in props:
        if isinstance(entry, list) and len(entry) == 3 and entry[0] == "connection_name":
            return entry[2]
    return None


def header_str(props, key):
    f = header(props, key)
    if f is None:
        return None
    if f.kind not in ("S", "x"):
        fail("header %s: expected a string, got %r" % (key, f))
    return f.value.decode("utf-8", "replace")


def header_int(props, key):
    f = header(props, key)
    if f is None:
        return None
    if f.kind not in "bBsuIilL":
        fail("header %s: expected an integer, got %r" % (key, f))
    return f.value


# --------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------

def refused(fn, uri=None, confirm=True):
    """fn(channel) on a fresh connection (as uri; default the suite's
    broker): None, or the broker's "CODE TEXT" when it closed the channel
    or the connection."""
    conn = connect(uri=uri)
    try:
        ch = conn.channel()
        if confirm:
            ch.confirm_delivery()
        fn(ch)
        return None
    except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.ConnectionClosedByBroker) as e:
        return "%s %s" % (e.reply_code, e.reply_text.split("\n")[0])
    finally:
        if conn.is_open:
            conn.close()


class BrokerUser(object):
    """with BrokerUser(name, pw, configure, write, read) as uri: a broker
    user of the owned broker (rabbitmqctl), with those permissions on vhost
    "/", deleted on the way out; uri logs in as it. Skips without an owned
    broker."""

    def __init__(self, name, pw, configure=".*", write=".*", read=".*", why="a second broker user"):
        require_owned_broker(why)
        self.name, self.pw, self.perms = name, pw, (configure, write, read)

    def __enter__(self):
        rabbitmqctl("add_user", self.name, self.pw)
        try:
            rabbitmqctl("set_permissions", "-p", "/", self.name, *self.perms)
        except BaseException:
            rabbitmqctl("delete_user", self.name)
            raise
        params = pika.URLParameters(broker_uri())
        check(params.virtual_host == "/", "BrokerUser: the default vhost only")
        return "amqp://%s:%s@%s:%d/%%2f" % (self.name, self.pw, params.host, params.port)

    def __exit__(self, *exc):
        rabbitmqctl("delete_user", self.name)
        return False


def queue_pattern(*names):
    """A retry route's retry.queue_pattern admitting exactly these queue names
    (a POSIX extended regular expression; the names of tests have no other
    special character than the dot)."""
    return "|".join(n.replace(".", "\\.") for n in names)


def broker_uri():
    return os.environ.get("DB_TEST_BROKER_URI") or DEFAULT_URI


def vhost_uri(vhost):
    """The test broker's URI with another vhost."""
    base = broker_uri()
    head = base.split("://", 1)[0] + "://" + base.split("://", 1)[1].split("/", 1)[0]
    return "%s/%s" % (head, urllib.parse.quote(vhost, safe=""))


def broker_user():
    p = pika.URLParameters(broker_uri())
    return p.credentials.username


def broker_dir():
    """The directory of the broker the suite owns, or None."""
    d = os.environ.get("DB_TEST_BROKER_DIR")
    return d if d and os.path.isfile(os.path.join(d, "node.env")) else None


def require_owned_broker(why):
    if not broker_dir():
        raise Skip("%s needs a broker this suite started (DB_TEST_BROKER_DIR unset: "
                   "testing against DB_TEST_BROKER_URI=%s)" % (why, broker_uri()))


def use_failpoint_bridge():
    """Run the daemon built with failpoints (DB_BRIDGE_FP_BIN, which tests.cmake sets) from
    here on; skip the test without it."""
    fp = os.environ.get("DB_BRIDGE_FP_BIN")
    if not fp or not os.access(fp, os.X_OK):
        raise Skip("DB_BRIDGE_FP_BIN is not set to the delay-bridge-fp binary (the daemon built "
                   "with failpoints; tests.cmake sets it)")
    os.environ["DB_BRIDGE_BIN"] = fp  # Bridge starts DB_BRIDGE_BIN


def bridge_bin():
    b = os.environ.get("DB_BRIDGE_BIN")
    if not b:
        fail("DB_BRIDGE_BIN is not set: point it at the built delay-bridge binary")
    if not os.access(b, os.X_OK):
        fail("DB_BRIDGE_BIN=%s is not an executable file (build it first: "
             "cmake -S . -B build && cmake --build build)" % b)
    return b


def bridge_cli(*args, expect=None, timeout=60, env=None, user=None):
    """Run the delay-bridge binary with args (its commands: wal, publish,
    --check-config, ...) and return (exit code, stdout, stderr). The
    environment is this one without DELAY_BRIDGE_BROKER_URI, plus env;
    user: run as that uid and gid (setpriv, no supplementary groups).
    expect: the exit code it must end with (fails with its output else)."""
    cmd = [bridge_bin()] + [str(a) for a in args]
    if user is not None:
        cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
    e = dict(os.environ)
    e.pop("DELAY_BRIDGE_BROKER_URI", None)
    e.update(env or {})
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=e)
    out, err = r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")
    if expect is not None and r.returncode != expect:
        fail("%s exited %d, expected %d\nstdout:\n%s\nstderr:\n%s" % (
            " ".join(str(a) for a in args), r.returncode, expect, out, err))
    return r.returncode, out, err


def connect(retry_s=0.0, uri=None):
    """A pika BlockingConnection to the test broker (retrying up to retry_s)."""
    uri = uri or broker_uri()
    params = pika.URLParameters(uri)
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.blocked_connection_timeout = 60
    deadline = time.monotonic() + retry_s
    while True:
        try:
            return pika.BlockingConnection(params)
        except AMQPError as e:
            if time.monotonic() >= deadline:
                fail("cannot connect to the broker at %s: %r" % (mask_uri(uri), e))
            time.sleep(0.3)


# What the project's own CLI sends on a change (POST, PUT, DELETE): the bridge
# refuses a change without it or Content-Type: application/json, which a web
# page could send cross-site (test_http_security.py).
CHANGE_HEADERS = {"X-Delay-Bridge": "1"}


def change_headers(method, headers=None):
    """headers, with X-Delay-Bridge added when method changes something."""
    out = dict(headers or {})
    if method not in ("GET", "HEAD"):
        for k, v in CHANGE_HEADERS.items():
            out.setdefault(k, v)
    return out


def http_get(port, path, method="GET", timeout=5.0):
    """One request to a bridge's HTTP endpoint on 127.0.0.1: (status, body text)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, headers=change_headers(method))
        r = c.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        c.close()


def stats(port):
    """The bridge's /stats as a dict."""
    st, body = http_get(port, "/stats")
    check(st == 200, "GET /stats answered %d: %s" % (st, body[:200]))
    return json.loads(body)


def http_req(port, method, path, timeout=10.0, headers=None, body=None):
    """One request to a bridge's HTTP endpoint on 127.0.0.1: (status,
    parsed JSON when it answered application/json, else the body text).
    body: bytes sent as the request body (a PUT's)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=change_headers(method, headers))
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        if r.getheader("Content-Type", "").startswith("application/json"):
            return r.status, json.loads(body)
        return r.status, body
    finally:
        c.close()


def url_arg(s):
    """s quoted for a path segment or a query argument (a key, a route)."""
    return urllib.parse.quote(s, safe="")


def pending_all(port, route, limit=1000, headers=None):
    """Every message the bridge lists in GET /pending?route=ROUTE, page
    after page of limit (headers: an Authorization, say)."""
    out, after = [], None
    while True:
        path = "/pending?route=%s&limit=%d" % (route, limit)
        if after:
            path += "&after=" + url_arg(after)
        st, j = http_req(port, "GET", path, headers=headers)
        check(st == 200, "GET %s: %d %r" % (path, st, j))
        out.extend(j["messages"])
        after = j["next"]
        if not after:
            return out


def readyz(port):
    """(status, body) of the bridge's /readyz; (None, "") while nothing listens."""
    try:
        return http_get(port, "/readyz")
    except OSError:
        return None, ""


def held(port):
    """How many messages the bridge holds (its /stats)."""
    return stats(port)["held"]


def wait_held(port, n, who, stall_s=30, delivered=lambda: 0):
    """Until the bridge on port holds n, less those delivered() already
    (who names it in the failure; wait_progress's stall_s)."""
    wait_progress(lambda: stats(port)["held"] + delivered(), n, stall_s,
                  lambda k: "%s holds (or delivered) %d of %d" % (who, k, n))


def replication(port, unreachable=None):
    """The bridge's /stats wal.replication. unreachable: what stands for it
    while the bridge does not listen (yet); without it, the OSError."""
    try:
        return stats(port)["wal"]["replication"]
    except OSError:
        if unreachable is None:
            raise
        return dict(unreachable)


def metrics(port, timeout=10.0):
    """The text of the bridge's /metrics (fails unless it answered 200)."""
    st, body = http_get(port, "/metrics", timeout=timeout)
    check(st == 200, "/metrics: %d" % st)
    return body


def metric_value(text, name, labels=""):
    """The value of the series name{labels} (name alone without labels) in
    a /metrics text, or None."""
    want = name + ("{%s}" % labels if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def route_metric(port, name, route=None):
    """The value of name{route="ROUTE"} (name alone without route) in the
    bridge's /metrics; fails when it has no such series."""
    labels = 'route="%s"' % route if route else ""
    v = metric_value(metrics(port), name, labels)
    check(v is not None, "/metrics lacks %s" % (name + ("{%s}" % labels if labels else "")))
    return v


def wait_metric(port, name, route, want, timeout=10, poll=0.1):
    """Until route_metric(port, name, route) == want, polling every poll
    seconds; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    v = None
    while time.monotonic() < deadline:
        v = route_metric(port, name, route)
        if v == want:
            return v
        time.sleep(poll)
    fail('%s{route="%s"} is %r, expected %r (after %.0fs)' % (name, route, v, want, timeout))


def free_port():
    """A TCP port free on 127.0.0.1 right now (for a bridge's HTTP endpoint)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def mutate(cfg, path, value=None, delete=False):
    """Set (or delete) cfg at a path like 'routes[0].prefetch'."""
    c = copy.deepcopy(cfg)
    parts = []
    for p in path.split("."):
        if "[" in p:
            name, idx = p[:-1].split("[")
            parts += [name, int(idx)]
        else:
            parts.append(p)
    o = c
    for p in parts[:-1]:
        o = o[p]
    if delete:
        del o[parts[-1]]
    else:
        o[parts[-1]] = value
    return c


def mask_uri(uri):
    if "@" in uri and "://" in uri:
        scheme, rest = uri.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return "%s://%s:***@%s" % (scheme, user, host)
    return uri


def rabbitmq_sh(*args, timeout=180):
    """Run tests/integration/rabbitmq.sh ARGS (only on a broker the suite owns)."""
    cmd = ["bash", RABBITMQ_SH] + list(args)
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    sys.stdout.write(r.stdout)
    check(r.returncode == 0, "rabbitmq.sh %s failed with exit %d" % (" ".join(args), r.returncode))


def broker_restart():
    d = broker_dir()
    check(d is not None, "broker_restart() needs DB_TEST_BROKER_DIR")
    rabbitmq_sh("restart", d)


def broker_stop():
    rabbitmq_sh("stop", broker_dir())


def broker_start():
    d = broker_dir()
    env = {}
    with open(os.path.join(d, "node.env")) as f:
        for line in f:
            if "=" in line:
                k, v = line.strip().split("=", 1)
                env[k] = v
    rabbitmq_sh("start", d, env["PORT"], env["DISTPORT"])


_BIN_DIR = []


def rabbitmq_bin_dir():
    """Where rabbitmq-server and rabbitmqctl of the broker under test are:
    $RABBITMQ_BIN_DIR, else what broker.sh says for $DB_RABBITMQ (3.10, the
    host's package; 4.0 and 4.3, wrappers that run a Debian root's under
    chroot)."""
    if os.environ.get("RABBITMQ_BIN_DIR"):
        return os.environ["RABBITMQ_BIN_DIR"]
    if not _BIN_DIR:
        r = subprocess.run(["bash", os.path.join(HERE, "broker.sh"), "bin-dir"],
                           stdout=subprocess.PIPE, universal_newlines=True)
        if r.returncode == 77:
            raise Skip("RabbitMQ %s cannot run here" % os.environ.get("DB_RABBITMQ", "3.10"))
        check(r.returncode == 0, "broker.sh bin-dir failed (%d)" % r.returncode)
        _BIN_DIR.append(r.stdout.strip())
    return _BIN_DIR[0]


def as_delivered(field):
    """A header value as the broker under test hands it to a consumer:
    RabbitMQ 4 re-encodes an unsigned 64-bit 'L' as a signed 'l' of the same
    bits (checked on 4.0.5 and 4.3.6; integration.harness); 3.x passes it."""
    if field.kind == "L" and not broker_version().startswith("3."):
        v = field.value
        return Field("l", v - (1 << 64) if v >= 1 << 63 else v)
    return field


_VERSION = {}


def broker_version(uri=None):
    """The broker's version, as it says in connection.start (e.g. "4.3.6")."""
    key = uri or broker_uri()
    if key in _VERSION:
        return _VERSION[key]
    try:
        conn = pika.BlockingConnection(pika.URLParameters(uri or broker_uri()))
        try:
            v = conn._impl.server_properties.get("version", b"?")
        finally:
            conn.close()
        _VERSION[key] = v.decode() if isinstance(v, bytes) else str(v)
        return _VERSION[key]
    except Exception as e:  # the test itself says more if the broker is down
        return "unreachable (%s)" % e.__class__.__name__


def rabbitmqctl(*args):
    """rabbitmqctl against the owned broker; returns its stdout."""
    d = broker_dir()
    check(d is not None, "rabbitmqctl() needs DB_TEST_BROKER_DIR")
    env = dict(os.environ)
    node = None
    with open(os.path.join(d, "node.env")) as f:
        for line in f:
            if line.startswith("NODE="):
                node = line.strip().split("=", 1)[1]
    env["HOME"] = os.path.abspath(d)
    env["ERL_EPMD_ADDRESS"] = "127.0.0.1"
    ctl = os.path.join(rabbitmq_bin_dir(), "rabbitmqctl")
    for attempt in range(3):
        r = subprocess.run([ctl, "-n", node, "-q"] + list(args), env=env, timeout=60,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        # 69 (EX_UNAVAILABLE): the CLI could not reach the node; seen once while other
        # tests ran beside this one on two busy CPUs, with the node up. Ask again.
        if r.returncode != 69:
            break
        time.sleep(1.0)
    check(r.returncode == 0, "rabbitmqctl %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                                  r.stderr.strip()))
    return r.stdout


# --------------------------------------------------------------------------
# Consumer: a thread with its own connection, recording every delivery
# --------------------------------------------------------------------------

class Msg(object):
    __slots__ = ("queue", "t", "exchange", "routing_key", "props", "body", "redelivered")

    def __init__(self, queue, t, method, props, body):
        self.queue = queue
        self.t = t
        self.exchange = method.exchange
        self.routing_key = method.routing_key
        self.redelivered = method.redelivered
        self.props = props
        self.body = body

    @property
    def message_id(self):
        return self.props.message_id

    @property
    def bridge_id(self):
        return header_str(self.props, "x-delay-bridge-id")

    def __repr__(self):
        return "<Msg queue=%s rk=%s id=%s body=%d bytes at %.3f>" % (
            self.queue, self.routing_key, self.props.message_id, len(self.body), self.t)


class Consumer(object):
    """Consumes queues (already declared) in a background thread.

    Messages are acked after they are recorded, so a broker restart never
    loses one (it may redeliver one: tests that restart the broker allow
    duplicates). Reconnects by itself. Msg.t is time.monotonic() on arrival.
    """

    def __init__(self, queues, name="consumer", uri=None):
        self.queues = list(queues)
        self.name = name
        self.uri = uri or broker_uri()  # another vhost: vhost_uri()
        self.msgs = []
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.stop_flag = threading.Event()
        self.ready = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        if not self.ready.wait(30):
            fail("%s: could not start consuming %s: %r" % (name, self.queues, self.error))

    def _run(self):
        while not self.stop_flag.is_set():
            conn = None
            try:
                conn = pika.BlockingConnection(pika.URLParameters(self.uri))
                ch = conn.channel()
                ch.basic_qos(prefetch_count=500)
                for q in self.queues:
                    ch.basic_consume(q, self._on_msg_for(q), auto_ack=False)
                self.ready.set()
                while not self.stop_flag.is_set():
                    conn.process_data_events(time_limit=0.05)
            except AMQPError as e:
                self.error = e
                time.sleep(0.3)
            except Exception as e:  # a bug in the harness: keep it visible
                self.error = e
                traceback.print_exc()
                time.sleep(0.3)
            finally:
                if conn is not None and conn.is_open:
                    try:
                        conn.close()
                    except Exception:
                        pass

    def _on_msg_for(self, queue):
        def cb(ch, method, props, body):
            m = Msg(queue, time.monotonic(), method, props, body)
            with self.cond:
                self.msgs.append(m)
                self.cond.notify_all()
            ch.basic_ack(method.delivery_tag)
        return cb

    def snapshot(self, queue=None):
        with self.lock:
            return [m for m in self.msgs if queue is None or m.queue == queue]

    def count(self, queue=None):
        return len(self.snapshot(queue))

    def wait_until(self, pred, timeout, what):
        """Wait until pred(list of Msg) is true; fail with `what` on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                if pred(self.msgs):
                    return list(self.msgs)
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.2))
            got = list(self.msgs)
        fail("timed out after %.1fs waiting for %s; %d message(s) arrived: %s" % (
            timeout, what, len(got), summarize(got)))

    def wait_count(self, n, timeout, queue=None):
        return self.wait_until(lambda ms: len([m for m in ms if queue is None or m.queue == queue]) >= n,
                               timeout, "%d message(s)%s" % (n, " on " + queue if queue else ""))

    def wait_ids(self, ids, timeout):
        """Wait until every message_id in ids arrived (duplicates allowed)."""
        want = set(ids)
        return self.wait_until(lambda ms: want.issubset({m.message_id for m in ms}), timeout,
                               "%d distinct message ids" % len(want))

    def quiet(self, seconds):
        """Let more messages (that should not come) arrive for `seconds`."""
        time.sleep(seconds)
        return self.snapshot()

    def close(self):
        self.stop_flag.set()
        self.thread.join(10)


def summarize(msgs, limit=8):
    s = ", ".join(repr(m) for m in msgs[:limit])
    if len(msgs) > limit:
        s += ", ... (%d more)" % (len(msgs) - limit)
    return "[" + s + "]"


# --------------------------------------------------------------------------
# Publisher
# --------------------------------------------------------------------------

class Publisher(object):
    """A pika connection with publisher confirms; publish() returns once the
    broker confirmed (or fails the test)."""

    # publish() returns the time taken just BEFORE sending: the bridge cannot
    # have received the message earlier, so "arrived >= sent + delay" is a
    # fair never-early check (a time taken after the confirm would not be).

    def __init__(self, retry_s=0.0, uri=None):
        self.conn = connect(retry_s, uri)
        self.ch = self.conn.channel()
        self.ch.confirm_delivery()

    def publish(self, exchange, routing_key, body=b"", headers=None, mandatory=True, **props):
        p = pika.BasicProperties(headers=headers, **props)
        t = time.monotonic()
        try:
            self.ch.basic_publish(exchange, routing_key, body, p, mandatory=mandatory)
        except pika.exceptions.UnroutableError:
            fail("publish to exchange %r (key %r) was unroutable: is the bridge's ingress "
                 "queue bound?" % (exchange, routing_key))
        except pika.exceptions.NackError:
            fail("broker nacked a publish to %r" % exchange)
        return t

    def close(self):
        try:
            if self.conn.is_open:
                self.conn.close()
        except Exception:
            pass


# --------------------------------------------------------------------------
# The bridge process
# --------------------------------------------------------------------------

class Bridge(object):
    """One delay-bridge daemon: a config file, a WAL dir, and a process that
    can be started several times (each run logs to its own file)."""

    def __init__(self, ctx, config, name="bridge"):
        self.ctx = ctx
        self.name = name
        self.config = config
        self.dir = os.path.join(ctx.tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.config_path = os.path.join(self.dir, "config.json")
        self.rewrite_config()
        self.proc = None
        self.runs = 0
        self.log_path = None
        self.logs = []
        ctx.bridges.append(self)

    def rewrite_config(self):
        """Write self.config to the config file (after a test changed it)."""
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=2)

    def start(self, wait_ready=True, timeout=30, env=None):
        """Start the daemon (env: extra environment variables for it)."""
        check(self.proc is None or self.proc.poll() is not None, "%s already running" % self.name)
        self.runs += 1
        self.log_path = os.path.join(self.dir, "stderr.%d.log" % self.runs)
        self.logs.append(self.log_path)
        e = dict(os.environ)
        e.pop("DELAY_BRIDGE_BROKER_URI", None)  # the config's uri is the test broker
        e.update(env or {})
        with open(self.log_path, "wb") as errf:
            self.proc = subprocess.Popen([bridge_bin(), "-c", self.config_path],
                                         stdin=subprocess.DEVNULL, stdout=errf, stderr=errf,
                                         env=e)
        log("%s: started pid %d (run %d, log %s)" % (self.name, self.proc.pid, self.runs,
                                                      self.log_path))
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def log_text(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_log(self, needle, timeout, what=None):
        """Wait until this run's log contains needle."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.log_text():
                return
            if self.proc.poll() is not None:
                fail("%s exited with code %s before logging %s" % (self.name, self.proc.returncode,
                                                                   what or needle))
            time.sleep(0.05)
        fail("%s did not log %s within %.0fs" % (self.name, what or needle, timeout))

    def wait_ready(self, timeout=30):
        t0 = time.monotonic()
        self.wait_log('msg="ready"', timeout, 'msg="ready"')
        log("%s: ready after %.2fs" % (self.name, time.monotonic() - t0))

    def wait_exit(self, timeout, what):
        """The exit code of this run, which ends by itself within timeout
        seconds; fails with what when it still runs."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            fail(what)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, expect=0, timeout=20):
        """SIGTERM; assert the exit code (0: a clean exit)."""
        check(self.alive(), "%s is not running (exit code %s)" % (
            self.name, self.proc.returncode if self.proc else None))
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            fail("%s did not exit within %ds of SIGTERM" % (self.name, timeout))
        log("%s: exited with %d after SIGTERM" % (self.name, rc))
        if expect is not None:
            check(rc == expect, "%s exited with %d after SIGTERM, expected %d" % (self.name, rc, expect))
        return rc

    def kill9(self):
        check(self.alive(), "%s is not running (exit code %s) when it was to be killed" % (
            self.name, self.proc.returncode if self.proc else None))
        self.proc.kill()
        self.proc.wait()
        log("%s: killed with SIGKILL" % self.name)

    def check_alive(self):
        check(self.alive(), "%s exited unexpectedly with code %s" % (
            self.name, self.proc.returncode if self.proc else None))

    def cleanup(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def dump(self, out, lines=150):
        for p in self.logs:
            try:
                with open(p, "rb") as f:
                    text = f.read().decode("utf-8", "replace").splitlines()
            except OSError:
                continue
            out.write("----- %s: %s (%d lines%s) -----\n" % (
                self.name, p, len(text), ", last %d" % lines if len(text) > lines else ""))
            for line in text[-lines:]:
                out.write(line + "\n")


# --------------------------------------------------------------------------
# Test context
# --------------------------------------------------------------------------

class Ctx(object):
    """Per-test state: unique names, a temp dir, broker objects to clean up,
    bridges to stop and whose logs are printed on failure."""

    def __init__(self, name):
        self.name = name
        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(6))
        self.prefix = "dbt.%s.%s" % (name, suffix)
        self.tmp = tempfile.mkdtemp(prefix="dbt-%s-" % name)
        self.bridges = []
        self.consumers = []
        self.publishers = []
        self.exchanges = set()
        self.queues = set()
        self._admin = None

    # names -----------------------------------------------------------------
    def n(self, what):
        """A broker object name unique to this test run."""
        return "%s.%s" % (self.prefix, what)

    # broker objects ----------------------------------------------------------
    def admin(self):
        """A channel for declarations (reopened if a declare closed it)."""
        if self._admin is None or not self._admin[0].is_open or not self._admin[1].is_open:
            if self._admin is not None and self._admin[0].is_open:
                conn = self._admin[0]
            else:
                conn = connect(retry_s=10)
            self._admin = (conn, conn.channel())
        return self._admin[1]

    def declare_exchange(self, name, kind="direct", durable=True):
        self.admin().exchange_declare(name, exchange_type=kind, durable=durable)
        self.exchanges.add(name)
        return name

    def declare_queue(self, name, durable=True, bind=None):
        """Declare a queue; bind is a list of (exchange, routing_key)."""
        self.admin().queue_declare(name, durable=durable)
        self.queues.add(name)
        for ex, rk in bind or []:
            self.admin().queue_bind(name, ex, routing_key=rk)
        return name

    def bind(self, queue, exchange, routing_key):
        self.admin().queue_bind(queue, exchange, routing_key=routing_key)

    def delete_exchange(self, name):
        self.admin().exchange_delete(name)

    def exchange_exists(self, name):
        conn = connect()
        try:
            conn.channel().exchange_declare(name, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False
        finally:
            if conn.is_open:
                conn.close()

    def queue_depth(self, name):
        conn = connect()
        try:
            return conn.channel().queue_declare(name, passive=True).method.message_count
        finally:
            if conn.is_open:
                conn.close()

    def target(self, name, kind="direct", bindings=()):
        """Declare a target exchange and one queue per routing key in bindings:
        returns (exchange name, {routing_key: queue name})."""
        ex = self.declare_exchange(self.n(name), kind)
        queues = {}
        for i, rk in enumerate(bindings):
            q = self.declare_queue(self.n("%s.q%d" % (name, i)), bind=[(ex, rk)])
            queues[rk] = q
        return ex, queues

    def consumer(self, queues, uri=None):
        c = Consumer(queues, name="consumer%d" % (len(self.consumers) + 1), uri=uri)
        self.consumers.append(c)
        return c

    def publisher(self, retry_s=10, uri=None):
        p = Publisher(retry_s, uri)
        self.publishers.append(p)
        return p

    def impersonator(self):
        """A publisher logged in as a user with RabbitMQ's impersonator tag, so
        it may publish any user_id (owned broker only; else Skip)."""
        require_owned_broker("publishing a user_id other than the connection's user")
        user, pw = "dbtest-impersonator", "dbtest-impersonator"
        if user not in rabbitmqctl("list_users").split():
            rabbitmqctl("add_user", user, pw)
        rabbitmqctl("set_user_tags", user, "impersonator")
        rabbitmqctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
        params = pika.URLParameters(broker_uri())
        check(params.virtual_host == "/", "impersonator(): only the default vhost is supported")
        uri = "amqp://%s:%s@%s:%d/%%2f" % (user, pw, params.host, params.port)
        return self.publisher(uri=uri)

    def wait_drained(self, queue, timeout, what="the bridge to take every message"):
        """Wait until queue holds no message, ready or (on an owned broker)
        unacknowledged: the bridge consumed and acked them all."""
        deadline = time.monotonic() + timeout
        while True:
            ready = self.queue_depth(queue)
            unacked = 0
            if ready == 0 and broker_dir():
                for line in rabbitmqctl("list_queues", "name", "messages_unacknowledged").splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[0] == queue:
                        unacked = int(parts[1])
            if ready == 0 and unacked == 0:
                return
            if time.monotonic() >= deadline:
                fail("timed out after %.0fs waiting for %s: queue %s still has %d ready and %d "
                     "unacked message(s)" % (timeout, what, queue, ready, unacked))
            time.sleep(0.1)

    def wait_taken(self, port, queue, n, timeout, what="the bridge to take every message",
                   route=0):
        """Wait until the bridge with its HTTP endpoint on port counts n
        received on its route-th route (its /stats) and queue has no ready
        message. No rabbitmqctl, which takes seconds per call on a loaded
        machine: for tests whose first due time comes a few seconds after
        publishing. Received is logged, not yet acked: a restart or a
        reconnect gets the unacked ones again, and the bridge recognises
        them as logged."""
        wait_progress(lambda: stats(port)["routes"][route]["received"], n, timeout,
                      lambda k: "%s: the bridge received %d of %d" % (what, k, n))
        deadline = time.monotonic() + timeout
        while self.queue_depth(queue):
            check(time.monotonic() < deadline, "%s: queue %s still has ready messages after "
                  "%.0fs" % (what, queue, timeout))
            time.sleep(0.05)

    def replicated(self, name, **replicate):
        """What a replicated-WAL test starts from: a target exchange with one
        queue (routing key "rk") and its consumer, a route to it, and a
        wal.replicate object (replicate's keys over a stream new to this test,
        whose stream and lease queue are deleted at the end).
        Returns (route, consumer, {"replicate": {...}})."""
        ex, qs = self.target(name, "direct", ["rk"])
        c = self.consumer([qs["rk"]])
        route = self.route(name, ex)
        stream = self.n("wal")
        self.queues.update([stream, stream + ".lease"])
        r = {"stream": stream}
        r.update(replicate)
        return route, c, {"replicate": r}

    # bridge ------------------------------------------------------------------
    def route(self, name, target_exchange, **kw):
        """A route dict with unique ingress names; kw overrides any key."""
        r = {
            "name": name,
            "ingress_exchange": self.n(name + ".delayed"),
            "ingress_queue": self.n(name + ".delayed.q"),
            "target_exchange": target_exchange,
        }
        r.update(kw)
        self.exchanges.add(r["ingress_exchange"])
        self.queues.add(r["ingress_queue"])
        return r

    def config(self, routes, wal_dir=None, **top):
        """A full config (every key the contract lists), short backoffs for tests."""
        c = {
            "broker": {
                "uri": broker_uri(),
                "heartbeat_s": 30,
                "reconnect_min_ms": 200,
                "reconnect_max_ms": 2000,
                "publish_retry_min_ms": 200,
                "publish_retry_max_ms": 2000,
            },
            "wal": {"dir": wal_dir or os.path.join(self.tmp, "wal"), "segment_mb": 64, "fsync": True},
            "log": {"level": "info"},
            "shutdown_timeout_ms": 10000,
            "routes": routes,
        }
        for k, v in top.items():
            if isinstance(v, dict) and isinstance(c.get(k), dict):
                c[k].update(v)
            else:
                c[k] = v
        return c

    def bridge(self, routes, name="bridge", start=True, **top):
        b = Bridge(self, self.config(routes, wal_dir=os.path.join(self.tmp, name + ".wal"), **top),
                   name=name)
        if start:
            b.start()
        return b

    # teardown ------------------------------------------------------------------
    def cleanup(self, passed):
        for c in self.consumers:
            c.close()
        for p in self.publishers:
            p.close()
        for b in self.bridges:
            b.cleanup()
        try:
            conn = connect()
            for q in sorted(self.queues):
                ch = conn.channel()
                try:
                    ch.queue_delete(q)
                except AMQPError:
                    pass
            for e in sorted(self.exchanges):
                ch = conn.channel()
                try:
                    ch.exchange_delete(e)
                except AMQPError:
                    pass
            conn.close()
        except Exception as e:
            log("cleanup: could not delete test queues/exchanges: %r" % e)
        if self._admin is not None and self._admin[0].is_open:
            try:
                self._admin[0].close()
            except Exception:
                pass
        if passed and not os.environ.get("DB_TEST_KEEP"):
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            log("test files kept in %s" % self.tmp)

    def dump_logs(self):
        out = sys.stdout
        for b in self.bridges:
            b.dump(out)
        out.flush()


# --------------------------------------------------------------------------
# Crash accounting
# --------------------------------------------------------------------------

def publish_killing(b, c, p, ingress, n, max_delay_ms, seed, prefix):
    """The crash tests' load: n messages with x-delay uniform in
    0..max_delay_ms (random.Random(seed)) and ids prefix%04d, published with
    confirms to ingress while the bridge b is killed with SIGKILL after n/3
    and 2n/3 publishes and restarted at once (publishing goes on while it
    recovers), then once more a second after the last publish, while
    messages are held (checked: not all have reached consumer c yet).
    Returns (sent, kills): sent maps id -> (published at, delay ms)."""
    rng = random.Random(seed)
    sent = {}
    kills = 0
    t_start = time.monotonic()
    for i in range(n):
        if i in (n // 3, 2 * n // 3):
            b.kill9()
            kills += 1
            b.start(wait_ready=False)
        if i in (n // 2, 5 * n // 6):
            b.wait_ready(60)
        ms = rng.randint(0, max_delay_ms)
        mid = "%s%04d" % (prefix, i)
        sent[mid] = (p.publish(ingress, "rk", mid.encode(), headers={"x-delay": i32(ms)},
                               message_id=mid, delivery_mode=2), ms)
    log("published %d messages in %.1fs (confirmed)" % (n, time.monotonic() - t_start))
    b.wait_ready(60)
    time.sleep(1.0)
    arrived = len({m.message_id for m in c.snapshot()})
    check(arrived < n, "all %d messages arrived within 1 s of the last publish: nothing was held "
          "when the bridge was killed" % n)
    log("%d of %d distinct messages arrived before the third kill" % (arrived, n))
    b.kill9()
    kills += 1
    b.start()
    return sent, kills


def tally(sent_ids, msgs):
    """What a crash test reports: sent (message_ids the broker confirmed to
    the publisher), delivered (deliveries), lost (sent, never delivered),
    unknown (delivered, never sent) and duplicates by cause, as README
    "Delivery guarantees" names them: case1, a republish (the same
    x-delay-bridge-id again); case2, a redelivery stored twice (another
    bridge id for the same message_id). max_copies: most deliveries of one
    message; per_id: message_id -> [Msg]."""
    per_id = {}
    for m in msgs:
        per_id.setdefault(m.message_id, []).append(m)
    sent = set(sent_ids)
    t = {"sent": len(sent), "delivered": len(msgs), "distinct": len(per_id),
         "lost": sorted(sent - set(per_id)), "unknown": sorted(set(per_id) - sent),
         "duplicates": len(msgs) - len(per_id), "case1": 0, "case2": 0, "max_copies": 0,
         "per_id": per_id}
    for ms in per_id.values():
        bids = {m.bridge_id for m in ms}
        t["case2"] += len(bids) - 1
        t["case1"] += len(ms) - len(bids)
        t["max_copies"] = max(t["max_copies"], len(ms))
    return t


def tally_line(t):
    return ("sent=%d delivered=%d lost=%d duplicates=%d (case 1 republish, same bridge id: %d; "
            "case 2 redelivery, new bridge id: %d) max_copies=%d" % (
                t["sent"], t["delivered"], len(t["lost"]), t["duplicates"], t["case1"],
                t["case2"], t["max_copies"]))


# --------------------------------------------------------------------------
# Timing checks
# --------------------------------------------------------------------------

def early_tolerance():
    return float(os.environ.get("DB_TEST_EARLY_MS", "50")) / 1000.0


def wait_progress(count, want, stall_s, what, cap_s=300):
    """Wait until count() >= want. On a loaded machine a broker takes its
    time, so give up only when count() has not grown for stall_s seconds
    (or after cap_s in all): progress, not a fixed budget, is what a slow
    machine keeps and a stuck bridge does not. what(n) names the shortfall."""
    t_end = time.monotonic() + cap_s
    best, t_best = -1, time.monotonic()
    while True:
        n = count()
        if n >= want:
            return n
        now = time.monotonic()
        if n > best:
            best, t_best = n, now
        check(now - t_best < stall_s and now < t_end,
              "%s (no progress for %.0f s)" % (what(n), now - t_best))
        time.sleep(0.2)


def wait_for(what, fn, timeout):
    """Until fn() returns something true (returned); every 0.2 s, failing
    after timeout seconds with what and the last answer."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.2)
    fail("%s: not within %.0fs (last: %r)" % (what, timeout, last))


def late_tolerance():
    return float(os.environ.get("DB_TEST_LATE_S", "2.0"))


def check_none_early(sent, t, what):
    """No message of sent (message_id -> (time just before its publish,
    delay ms)) that arrived per tally t came before its due time, less the
    clock tolerance."""
    early = [mid for mid, (t0, ms) in sent.items() if mid in t["per_id"] and
             min(m.t for m in t["per_id"][mid]) - t0 < ms / 1000.0 - early_tolerance()]
    check(not early, "%s: %d message(s) arrived early: %s" % (what, len(early), early[:10]))


def check_on_time(msg, published_at, delay_s, what, late=None):
    """A delayed message arrived no earlier than its due time (less the clock
    tolerance) and no later than a generous bound after it."""
    late = late_tolerance() if late is None else late
    took = msg.t - published_at
    check(took >= delay_s - early_tolerance(),
          "%s arrived EARLY: after %.3fs, due after %.3fs" % (what, took, delay_s))
    check(took <= delay_s + late,
          "%s arrived LATE: after %.3fs, due after %.3fs (bound +%.1fs)" % (what, took, delay_s, late))
    return took


def arrival_problem(msg, published_at, expect, wall0, restart_s=3.0):
    """What is wrong with msg's arrival, or None. published_at: monotonic
    time just before its publish; wall0: epoch seconds of the monotonic
    clock's zero. expect: ("due", epoch ms) an absolute due time (late
    bound: the tolerance + restart_s, for a restart in between); ("delay",
    ms) from its publish; ("now",) published at once (within 1 s)."""
    mid = msg.message_id
    if expect[0] == "due":
        arrived_ms = (msg.t + wall0) * 1000
        if arrived_ms < expect[1] - early_tolerance() * 1000:
            return "%s arrived EARLY: %.0f ms before its due time" % (mid, expect[1] - arrived_ms)
        if arrived_ms > expect[1] + (late_tolerance() + restart_s) * 1000:
            return "%s arrived LATE: %.0f ms after its due time" % (mid, arrived_ms - expect[1])
    elif expect[0] == "delay":
        try:
            check_on_time(msg, published_at, expect[1] / 1000.0, mid, late=late_tolerance() + restart_s)
        except TestFailure as ex:
            return str(ex)
    elif expect[0] == "now" and msg.t - published_at > 1.0:
        return "%s: not published at once (%.3f s)" % (mid, msg.t - published_at)
    return None


def fail_problems(consumer, n, failures):
    """Fail with every problem listed in failures, and any delivery beyond
    the first n (extra ones arrive within 0.5 s)."""
    extra = consumer.quiet(0.5)[n:]
    if extra:
        failures.append("extra deliveries: %s" % summarize(extra))
    if failures:
        fail("%d problem(s):\n  " % len(failures) + "\n  ".join(failures))


def check_immediate(msg, published_at, what, bound=1.0):
    took = msg.t - published_at
    check(took <= bound, "%s should have been published at once, arrived after %.3fs" % (what, took))
    return took


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

def report(ctx, e):
    """Say why a test (or a soak) failed: the message, the traceback, and the
    logs of its bridges."""
    log("%s: %s" % ("FAIL", e) if isinstance(e, TestFailure) else "ERROR: %r" % e)
    traceback.print_exc(file=sys.stdout)
    ctx.dump_logs()


class Cases(object):
    """A test's named cases, each run whatever happened to the ones before:

        cases = h.Cases()
        cases.run("added", case_added)                # fn(*args)
        cases.run("on_time", case_on_time, needs="added")
        cases.done()                                  # fails naming every failed case

    A case fails by raising (TestFailure from check(), or any error: a
    timeout, a reset connection); it is logged with its reason (and the
    traceback when it was not a check) and the next case runs. Skip in a
    case skips that case only. needs: a case name (or a list) this one
    cannot run without; when one of them failed or did not run, this one
    is reported as not run (and counts as failed). The test's budget
    (run()'s watchdog) still ends the whole test."""

    def __init__(self):
        self.results = []  # (name, "ok" | "FAILED" | "skipped" | "not run", reason)

    def _status(self, name):
        for n, st, _ in self.results:
            if n == name:
                return st
        return None

    def run(self, name, fn, *args, needs=()):
        check(self._status(name) is None, "two cases named %r" % name)
        needs = [needs] if isinstance(needs, str) else list(needs)
        missing = [n for n in needs if self._status(n) not in ("ok", "skipped")]
        if missing:
            why = "needs %s, which %s" % (", ".join(missing), "failed or did not run")
            log("case %s: NOT RUN: %s" % (name, why))
            self.results.append((name, "not run", why))
            return
        log("case %s: start" % name)
        try:
            fn(*args)
        except BudgetExceeded:
            raise
        except Skip as e:
            log("case %s: skipped: %s" % (name, e))
            self.results.append((name, "skipped", str(e)))
            return
        except Exception as e:  # noqa: B902 -- a timeout or a reset is this case's failure too
            if isinstance(e, TestFailure):
                log("case %s: FAILED: %s" % (name, e))
            else:
                log("case %s: FAILED: %r" % (name, e))
                traceback.print_exc(file=sys.stdout)
            self.results.append((name, "FAILED", str(e) or repr(e)))
            return
        log("case %s: ok" % name)
        self.results.append((name, "ok", ""))

    def failed(self):
        return [(n, st, why) for n, st, why in self.results if st in ("FAILED", "not run")]

    def done(self):
        """Log one line per case; fail naming each that failed or did not run."""
        log("cases: %s" % ", ".join("%s %s" % (n, st) for n, st, _ in self.results))
        bad = self.failed()
        check(not bad, "%d of %d case(s) failed:\n  %s" % (len(bad), len(self.results), "\n  ".join(
            "%s: %s: %s" % (n, st, why.splitlines()[0] if why else "") for n, st, why in bad)))


def on_tmpfs(ctx, size_mb, fn, filler_mb=0):
    """fn(path, filler) with path a tmpfs of size_mb MiB mounted for it,
    unmounted after whatever happened (a WAL disk that can fill), and
    filler the path of a file of filler_mb MiB already taking part of it
    (delete it to give the space back). Root only: Skip otherwise, or when
    no tmpfs can be mounted here."""
    if os.geteuid() != 0:
        raise Skip("mounting a small tmpfs for the WAL needs root")
    fs = os.path.join(ctx.tmp, "walfs")
    os.makedirs(fs)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm" % size_mb, "tmpfs", fs],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        raise Skip("cannot mount a tmpfs here: %s" % r.stdout.decode(errors="replace").strip())
    try:
        filler = os.path.join(fs, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (filler_mb * 1024 * 1024))
        return fn(fs, filler)
    finally:
        subprocess.run(["umount", "-l", fs])


def run(test_fn, budget_s=120):
    """Run test_fn(ctx) as a standalone test script and exit 0 / 1 / 77.

    budget_s: a watchdog; past it the test fails with the bridge's log (so
    ctest's TIMEOUT, which kills without a word, is never what ends it).
    """
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    if name.startswith("test_"):
        name = name[5:]
    name = name.replace("_", "-")
    ctx = Ctx(name)
    log("test %s: broker %s (RabbitMQ %s), bridge %s, tmp %s" % (
        name, mask_uri(broker_uri()), broker_version(), os.environ.get("DB_BRIDGE_BIN"), ctx.tmp))

    def on_alarm(signum, frame):
        raise BudgetExceeded("test exceeded its %ds budget" % budget_s)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(budget_s)
    rc = 1
    try:
        test_fn(ctx)
        rc = 0
    except Skip as e:
        log("SKIP: %s" % e)
        rc = SKIP
    except BaseException as e:  # noqa: B902
        report(ctx, e)
    finally:
        signal.alarm(0)
        try:
            ctx.cleanup(rc != 1)
        except Exception:
            traceback.print_exc(file=sys.stdout)
    log("test %s: %s" % (name, {0: "PASS", SKIP: "SKIPPED"}.get(rc, "FAIL")))
    sys.stdout.flush()
    os._exit(rc)  # consumer threads are daemons; do not wait for them


# --------------------------------------------------------------------------
# A WAL volume that intake alone fills (test_disk_full_self.py)
# --------------------------------------------------------------------------

def _run_quiet(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return r.returncode, r.stdout.decode(errors="replace").strip()


def on_volume(ctx, fstype, size_mb, fn):
    """fn(path) with path the mount point of a fresh file system of size_mb
    MiB (a whole number of KiB) made for it: "tmpfs", or "ext4" / "xfs"
    made with mkfs on a loop device over a file in ctx.tmp (the file
    system's defaults, as a user's would be). After whatever happened, the
    bridges are killed (their files are on it), it is unmounted and the
    loop device detached. Root only: Skip otherwise, or when mkfs, a loop
    device or the mount is missing."""
    if os.geteuid() != 0:
        raise Skip("mounting a small file system for the WAL needs root")
    mnt = os.path.join(ctx.tmp, "walfs")
    os.makedirs(mnt)
    loop = None
    if fstype == "tmpfs":
        rc, out = _run_quiet(["mount", "-t", "tmpfs", "-o", "size=%dk" % int(size_mb * 1024),
                              "tmpfs", mnt])
        if rc != 0:
            raise Skip("cannot mount a tmpfs here: %s" % out)
    else:
        mkfs = (shutil.which("mkfs." + fstype) or
                shutil.which("mkfs." + fstype, path="/sbin:/usr/sbin"))
        if not mkfs:
            raise Skip("mkfs.%s not found (apt-get install %s)" % (
                fstype, {"xfs": "xfsprogs"}.get(fstype, "e2fsprogs")))
        img = os.path.join(ctx.tmp, "walfs.img")
        with open(img, "wb") as f:
            f.truncate(int(size_mb * 1024) * 1024)
        rc, out = _run_quiet(["losetup", "--find", "--show", img])
        if rc != 0:
            raise Skip("no loop device here: %s" % out)
        loop = out.splitlines()[-1].strip()
        try:
            rc, out = _run_quiet([mkfs, "-q", "-f" if fstype == "xfs" else "-F", loop])
            check(rc == 0, "mkfs.%s %s failed: %s" % (fstype, loop, out))
            rc, out = _run_quiet(["mount", "-t", fstype, loop, mnt])
            if rc != 0:
                raise Skip("cannot mount %s (%s) here: %s" % (fstype, loop, out))
        except BaseException:
            _run_quiet(["losetup", "-d", loop])
            raise
    log("WAL volume: %s of %g MiB on %s%s" % (fstype, size_mb, mnt, " (%s)" % loop if loop else ""))
    try:
        return fn(mnt)
    finally:
        for b in ctx.bridges:
            b.cleanup()
        for _ in range(50):
            if _run_quiet(["umount", mnt])[0] == 0:
                break
            time.sleep(0.1)
        else:
            _run_quiet(["umount", "-l", mnt])
        if loop:
            rc, out = _run_quiet(["losetup", "-d", loop])
            if rc != 0:
                log("losetup -d %s: %s" % (loop, out))
            try:
                os.unlink(img)  # its file system said all it had to say while mounted
            except OSError:
                pass


def volume_df(path):
    """(total, free) bytes of the file system at path, as df sees it."""
    v = os.statvfs(path)
    return v.f_blocks * v.f_frsize, v.f_bavail * v.f_frsize


def publish_burst(ctx, exchange, items, routing_key="rk"):
    """Publish at once, without waiting for confirms (what a busy producer
    does; one confirm per publish would take seconds): items are
    (message_id, body, headers, delay_ms). Returns message_id -> (time just
    before its publish, delay_ms). The broker having them all is proven by
    their arrival, not by a confirm."""
    ch = ctx.publisher().conn.channel()
    sent = {}
    for mid, body, headers, delay_ms in items:
        t = time.monotonic()
        ch.basic_publish(exchange, routing_key, body,
                         pika.BasicProperties(headers=headers, message_id=mid, delivery_mode=2))
        sent[mid] = (t, delay_ms)
    return sent


class SpaceWatch(object):
    """Samples a bridge's /stats and /readyz, and df of its WAL's volume,
    every interval seconds in a thread, from start to stop(): what a test
    reads the paused intake, the reserve and the receipt times from.

    Each sample: t (monotonic), readyz (status or None when unreachable),
    reason, received (summed over the routes), held, confirmed, wal (the
    /stats "wal" object, or {}), df_free (bytes)."""

    def __init__(self, port, path, interval=0.1):
        self.port = port
        self.path = path
        self.interval = interval
        self.samples = []
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.t0 = time.monotonic()
        self.total = volume_df(path)[0]
        self.thread = threading.Thread(target=self._run, name="spacewatch", daemon=True)
        self.thread.start()

    def _sample(self):
        s = {"t": time.monotonic(), "readyz": None, "reason": "", "received": None, "held": None,
             "confirmed": None, "wal": {}}
        try:
            s["df_free"] = volume_df(self.path)[1]
        except OSError:
            s["df_free"] = None
        try:
            st, body = http_get(self.port, "/readyz", timeout=3.0)
            s["readyz"], s["reason"] = st, body.strip()
            st, body = http_get(self.port, "/stats", timeout=3.0)
            if st == 200:
                j = json.loads(body)
                s["received"] = sum(r["received"] for r in j["routes"])
                s["confirmed"] = sum(r["confirmed"] for r in j["routes"])
                s["held"] = j["held"]
                s["wal"] = j["wal"]
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            pass
        return s

    def _run(self):
        while not self.stop_flag.is_set():
            s = self._sample()
            with self.lock:
                self.samples.append(s)
            self.stop_flag.wait(self.interval)

    def stop(self):
        self.stop_flag.set()
        self.thread.join(10)

    def snapshot(self):
        with self.lock:
            return list(self.samples)

    def last(self):
        with self.lock:
            return self.samples[-1] if self.samples else None

    @staticmethod
    def paused(s):
        """Intake paused in sample s: wal.intake_paused where /stats has
        it, else wal.disk_full (a daemon from before the space reserve)."""
        w = s["wal"]
        return bool(w.get("intake_paused", w.get("disk_full", False)))

    def intervals(self, pred):
        """[(t_start, t_end or None)] of the samples where pred(sample) held."""
        out, start = [], None
        for s in self.snapshot():
            if s["readyz"] is None and not s["wal"]:
                continue  # unreachable: says nothing
            if pred(s) and start is None:
                start = s["t"]
            elif not pred(s) and start is not None:
                out.append((start, s["t"]))
                start = None
        if start is not None:
            out.append((start, None))
        return out

    def pauses(self):
        return self.intervals(self.paused)

    def not_ready(self):
        return self.intervals(lambda s: s["readyz"] == 503)

    def min_df_free(self):
        free = [s["df_free"] for s in self.snapshot() if s.get("df_free") is not None]
        return min(free) if free else None

    def received_after(self, n):
        """The latest time at which the bridge had received fewer than n
        messages (a lower bound of the n-th one's receipt), or None if it
        never counted n."""
        lower = self.t0
        for s in self.snapshot():
            if s["received"] is None:
                continue
            if s["received"] >= n:
                return lower
            lower = s["t"]
        return None

    def describe(self, intervals):
        return ", ".join("%.1f-%s s" % (a - self.t0, "%.1f" % (b - self.t0) if b else "...")
                         for a, b in intervals) or "none"
