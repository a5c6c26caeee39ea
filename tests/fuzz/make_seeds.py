#!/usr/bin/env python3
"""Write the seed corpora under tests/fuzz/corpus/ (run from anywhere).

The seeds are committed; this script documents how they were made and
regenerates them. Regression inputs for bugs the fuzzers found are added
by hand as corpus/<fuzzer>/regress-*.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def put(fuzzer, name, data):
    d = os.path.join(HERE, "corpus", fuzzer)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- WAL (src/wal/walrec.c has the format) ----------------------------------
def seghdr(salt, segno=1, base=1):
    b = b"DLYBRWAL" + struct.pack("<IIQQQQI", 1, salt, segno, base, 0x1122334455667788,
                                  1700000000000, 0)
    return b + struct.pack("<I", crc32c(b))


def record(rtype, lsn, payload, salt):
    h = struct.pack("<IBBHQ", len(payload), rtype, 0, 0, lsn)
    crc = crc32c(payload, crc32c(h, crc32c(struct.pack("<I", salt))))
    return h + struct.pack("<II", crc, 0) + payload


def add_payload(route=b"orders", exch=b"orders.delayed", rk=b"order.created",
                props=b"", body=b"hello", flags=0, error=0):
    p = struct.pack("<QQQHH", 7, 1700000005000, 1700000000000, flags, error)
    p += bytes([len(route)]) + route + bytes([len(exch)]) + exch + bytes([len(rk)]) + rk
    p += struct.pack("<I", len(props)) + props + struct.pack("<I", len(body)) + body
    return p


def done_payload(ids):
    return struct.pack("<I", len(ids)) + b"".join(struct.pack("<Q", i) for i in ids)


# ---- AMQP basic properties (0-9-1 wire form) ------------------------------
def sstr(s):
    s = s.encode() if isinstance(s, str) else s
    return bytes([len(s)]) + s


def lstr(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack(">I", len(s)) + s


def table(entries):
    b = b"".join(sstr(k) + v for k, v in entries)
    return struct.pack(">I", len(b)) + b


def props(content_type=None, headers=None, delivery_mode=None, correlation_id=None,
          timestamp=None, user_id=None, app_id=None, message_id=None, expiration=None):
    flags, body = 0, b""
    if content_type is not None:
        flags |= 1 << 15
        body += sstr(content_type)
    if headers is not None:
        flags |= 1 << 13
        body += table(headers)
    if delivery_mode is not None:
        flags |= 1 << 12
        body += bytes([delivery_mode])
    if correlation_id is not None:
        flags |= 1 << 10
        body += sstr(correlation_id)
    if expiration is not None:
        flags |= 1 << 8
        body += sstr(expiration)
    if message_id is not None:
        flags |= 1 << 7
        body += sstr(message_id)
    if timestamp is not None:
        flags |= 1 << 6
        body += struct.pack(">Q", timestamp)
    if user_id is not None:
        flags |= 1 << 4
        body += sstr(user_id)
    if app_id is not None:
        flags |= 1 << 3
        body += sstr(app_id)
    return struct.pack(">H", flags) + body


def opt(o, delay=0):
    return bytes([o]) + struct.pack("<Q", delay)


def main():
    # fuzz_walrec
    salt = 0x5A17C0DE
    add = add_payload(props=props(content_type="text/plain", delivery_mode=2))
    put("fuzz_walrec", "seghdr", seghdr(salt))
    put("fuzz_walrec", "seghdr+add", seghdr(salt) + record(1, 1, add, salt))
    put("fuzz_walrec", "seghdr+done", seghdr(salt) + record(2, 2, done_payload([1, 7]), salt))
    put("fuzz_walrec", "record-add-salt0", record(1, 1, add, 0))
    put("fuzz_walrec", "record-done-salt1", record(2, 9, done_payload([3]), 1))
    put("fuzz_walrec", "record-cancel", record(3, 3, b"x", 0xDEADBEEF))
    put("fuzz_walrec", "add-payload", add)
    put("fuzz_walrec", "add-payload-deadletter",
        add_payload(route=b"r", exch=b"", rk=b"", body=b"", flags=1, error=2))
    put("fuzz_walrec", "done-payload", done_payload([1, 2, 3]))
    put("fuzz_walrec", "done-empty", done_payload([]))

    # fuzz_props_roundtrip: options byte, delay, properties
    I32 = lambda v: b"I" + struct.pack(">i", v)
    put("fuzz_props_roundtrip", "xdelay-int", opt(0) + props(headers=[("x-delay", I32(5000))]))
    put("fuzz_props_roundtrip", "xdelay-text",
        opt(1) + props(content_type="application/json", headers=[("x-delay", b"S" + lstr(" 42 "))]))
    put("fuzz_props_roundtrip", "xdelay-decimal",
        opt(0) + props(headers=[("x-delay", b"D" + bytes([2]) + struct.pack(">I", 123456))]))
    put("fuzz_props_roundtrip", "xdelay-double",
        opt(4, 1 << 40) + props(headers=[("x-delay", b"d" + struct.pack(">d", 2.9))]))
    put("fuzz_props_roundtrip", "xdelay-u64-dup",
        opt(0) + props(headers=[("x-delay", b"l" + struct.pack(">q", 10)),
                                ("x-delay", b"t\x01"), ("a", b"V")]))
    put("fuzz_props_roundtrip", "until-rfc3339",
        opt(0) + props(headers=[("x-delay", I32(5000)),
                                ("x-delay-until", b"S" + lstr("2025-11-24T17:00:07.250+01:00"))]))
    put("fuzz_props_roundtrip", "until-timestamp",
        opt(0) + props(headers=[("x-opt-delivery-time", b"T" + struct.pack(">Q", 1764000030))]))
    put("fuzz_props_roundtrip", "delivery-delay",
        opt(0) + props(headers=[("x-opt-delivery-delay", b"l" + struct.pack(">q", 1500))]))
    put("fuzz_props_roundtrip", "user-id-foreign",
        opt(0, 1000) + props(user_id="alice", app_id="shop", timestamp=1700000000,
                             headers=[("x-delay", b"s" + struct.pack(">h", -5))]))
    put("fuzz_props_roundtrip", "user-id-own", opt(2, 1000) + props(user_id="bridge"))
    put("fuzz_props_roundtrip", "bridge-headers-present",
        opt(1, 3) + props(headers=[("x-delay-bridge-id", b"S" + lstr("old")), ("x-delay-error", I32(1)),
                                   ("x-delay-bridge-id", b"S" + lstr("older")),
                                   ("x-original-user-id", b"S" + lstr("u"))], user_id="eve"))
    put("fuzz_props_roundtrip", "nested",
        opt(0) + props(headers=[("t", b"F" + table([("x-delay", I32(1))])),
                                ("a", b"A" + lstr(I32(1) + b"S" + lstr("x") + b"b\x05")),
                                ("x", b"x" + lstr(b"\x00\xff")), ("f", b"f" + struct.pack(">f", 1.5)),
                                ("T", b"T" + struct.pack(">Q", 1))],
                       correlation_id="c", message_id="m", expiration="60000", delivery_mode=2))
    put("fuzz_props_roundtrip", "no-props", opt(0) + props())

    # fuzz_config
    for f in ["deploy/config.example.json", "deploy/examples/minimal.json",
              "deploy/examples/order-closing.json", "deploy/examples/production.json"]:
        with open(os.path.join(ROOT, f), "rb") as fh:
            put("fuzz_config", os.path.basename(f), fh.read())
    put("fuzz_config", "all-keys.json", """{
  "instance": "b1",
  "broker": { "uri": ["amqp://u:p@h1/%2f", "amqps://h2:5671/v"], "heartbeat_s": 0,
              "connect_timeout_ms": 100, "reconnect_min_ms": 1, "reconnect_max_ms": 2,
              "publish_retry_min_ms": 1, "publish_retry_max_ms": 2 },
  "wal": { "dir": "/tmp/w", "segment_mb": 1, "fsync": false, "max_message_bytes": 1024 },
  "http": { "listen": "127.0.0.1:9187" },
  "log": { "level": "debug" },
  "shutdown_timeout_ms": 0,
  "routes": [
    { "name": "a", "ingress_exchange": "a.d", "ingress_queue": "a.q", "target_exchange": "t",
      "queue_type": "quorum", "declare_target": true, "target_type": "topic", "prefetch": 65535,
      "max_inflight": 1, "max_delay_ms": 1, "invalid_delay": "dead-letter",
      "dead_letter_exchange": "dlx" },
    { "name": "b", "ingress_exchange": "b.d", "ingress_queue": "b.q", "target_exchange": "b" }
  ]
}
""")
    put("fuzz_config", "error-type.json",
        '{"broker":{"uri":"amqp://h"},"wal":{"dir":"/w"},"routes":[{"name":"a","prefetch":"100"}]}')
    put("fuzz_config", "error-syntax.json", b'\xef\xbb\xbf{"broker": {"uri": "amqp://h",\n  }')
    put("fuzz_config", "empty.json", " \n")
    put("fuzz_config", "templates.json", """{
  "broker": { "uri": "amqp://h/%2f" }, "wal": { "dir": "/w" }, "routes_file": "/w/r.json",
  "route_templates": {
    "delayed": { "ingress_exchange": "{name}.d", "ingress_queue": "{name}.q",
                 "target_exchange": "{name}", "vhost": "v-{name}", "routes": ["a", "b"] }
  },
  "routes": [ { "name": "c", "template": "delayed", "vhost": "/", "prefetch": 5 } ]
}
""")

    # fuzz_routes: option byte (bit 0: the configuration), then the routes file, a name and a
    # route object, separated by NUL bytes
    R = lambda k, store, name, route: bytes([k]) + store.encode() + b"\0" + name.encode() + \
        b"\0" + route.encode()
    put("fuzz_routes", "empty", R(0, "", "a", "{}"))
    put("fuzz_routes", "two-routes", R(0, """{"version": 1, "routes": [
  {"name": "pay", "ingress_exchange": "pay.x", "ingress_queue": "pay.q", "target_exchange": "pay",
   "vhost": "/", "prefetch": 10},
  {"name": "t2", "template": "delayed", "queue_type": "quorum"}
]}
""", "pay", '{"template": "retry"}'))
    put("fuzz_routes", "shadowed", R(0, '{"version":1,"routes":[{"name":"orders","template":"delayed"}]}',
                                    "orders", '{"name":"orders","ingress_exchange":"orders.x"}'))
    put("fuzz_routes", "retry-route", R(0, '{"version":1,"routes":[{"name":"r1","template":"retry",'
                                       '"retry":{"parking_exchange":"p","max_attempts":3,"queue_pattern":"w\\\\..+"}}]}',
                                       "r2", '{"ingress_exchange":"r2.x","ingress_queue":"r2.q",'
                                       '"retry":{"parking_exchange":"r2.p","queues":{"w":{}}}}'))
    put("fuzz_routes", "repl-clash", R(1, '{"version":1,"routes":[{"name":"a","ingress_exchange":"a",'
                                      '"ingress_queue":"s","target_exchange":"t"}]}', "b",
                                      '{"queue_type":"stream"}'))
    put("fuzz_routes", "loop", R(1, '{"version":1,"routes":[{"name":"a","ingress_exchange":"orders",'
                                '"ingress_queue":"a.q","target_exchange":"orders.x"}]}', "a", "{"))
    put("fuzz_routes", "bad-version", R(0, '{"version":2}', "x", '{"name":"y"}'))

    # fuzz_xdelay: kind, max (u64 LE), value
    M = struct.pack("<Q", 4294967295)
    put("fuzz_xdelay", "int", b"\x00" + M + struct.pack("<q", 5000))
    put("fuzz_xdelay", "int-neg", b"\x00" + M + struct.pack("<q", -1))
    put("fuzz_xdelay", "uint-big", b"\x01" + M + struct.pack("<Q", 1 << 63))
    put("fuzz_xdelay", "float", b"\x02" + M + struct.pack("<d", 2.9))
    put("fuzz_xdelay", "float-nan", b"\x02" + M + struct.pack("<d", float("nan")))
    put("fuzz_xdelay", "decimal", b"\x03" + M + b"\x02" + struct.pack("<i", 12345))
    put("fuzz_xdelay", "text", b"\x04" + M + b"  -20 ")
    put("fuzz_xdelay", "text-big", b"\x04" + M + b"+9223372036854775807")
    put("fuzz_xdelay", "text-min", b"\x04" + M + b"-9223372036854775808")
    put("fuzz_xdelay", "text-bad", b"\x04" + M + b"12a")
    put("fuzz_xdelay", "other", b"\x05" + M)
    put("fuzz_xdelay", "none", b"\x06" + M)
    put("fuzz_xdelay", "text-php-float", b"\x04" + M + b"7000.5")
    put("fuzz_xdelay", "text-exp", b"\x04" + M + b" 2.5e3 ")
    put("fuzz_xdelay", "text-php-big", b"\x04" + M + b"1.0E+25")
    put("fuzz_xdelay", "uint-pyamqp-neg", b"\x01" + M + struct.pack("<q", -5000))
    # fuzz_xdelay, x-delay-until (byte 0 >= 0x80): kind, max, now (u64 LE), value
    NOW = struct.pack("<Q", 1764000000000)
    put("fuzz_xdelay", "until-ms", b"\x80" + M + NOW + struct.pack("<q", 1764000001500))
    put("fuzz_xdelay", "until-seconds", b"\x80" + M + NOW + struct.pack("<q", 1764000060))
    put("fuzz_xdelay", "until-rfc3339", b"\x84" + M + NOW + b"2025-11-24T17:00:07.250+01:00")
    put("fuzz_xdelay", "until-rfc3339-frac", b"\x84" + M + NOW + b" 2025-11-24t16:00:07.0001z ")
    put("fuzz_xdelay", "until-timestamp", b"\x86" + M + NOW + struct.pack("<Q", 1764000030))
    put("fuzz_xdelay", "delivery-time-ms", b"\xc1" + M + NOW + struct.pack("<Q", 1764000009000))

    # fuzz_retry: options byte (jitter, max_attempts - 1), random number, properties
    L = lambda v: b"l" + struct.pack(">q", v)
    S = lambda v: b"S" + lstr(v)
    death = lambda q, reason: b"F" + table([("count", L(1)), ("reason", S(reason)), ("queue", S(q)),
                                            ("exchange", S("")), ("routing-keys", b"A" + lstr(S(q))),
                                            ("time", b"T" + struct.pack(">Q", 1764000000))])
    put("fuzz_retry", "first-failure",
        opt(4 << 2) + props(headers=[("x-death", b"A" + lstr(death("work", "rejected"))),
                                     ("x-first-death-queue", S("work")),
                                     ("x-first-death-reason", S("rejected"))]))
    put("fuzz_retry", "third-failure-4x",
        opt(1 | 4 << 2, 12345) + props(headers=[
            ("x-death", b"A" + lstr(death("work.b", "delivery_limit") + death("work.a", "expired"))),
            ("x-last-death-queue", S("work.b")), ("x-retry-attempt", L(3)),
            ("x-retry-history", b"A" + lstr(L(1764000000000) + L(1764000001000)))]))
    put("fuzz_retry", "handback",
        opt(2, 99) + props(headers=[("x-last-death-queue", S("q")), ("x-delay", L(250)),
                                    ("x-delay-bridge-handback", L(1)), ("x-retry-attempt", L(2))]))
    put("fuzz_retry", "no-death", opt(0) + props(headers=[("x-retry-attempt", S("7"))]))
    put("fuzz_retry", "no-props", opt(0) + props())
    # issue 39: forgeries -- an x-death naming a queue the route does not admit, the 4.x
    # header alone, a hand-back mark with and without the bridge's user-id
    put("fuzz_retry", "forged-death",
        opt(4 << 2) + props(headers=[("x-death", b"A" + lstr(death("payments.secret", "rejected")))]))
    put("fuzz_retry", "forged-last-death",
        opt(4 << 2) + props(headers=[("x-last-death-queue", S("work.retry.q")),
                                     ("x-last-death-reason", S("rejected"))]))
    put("fuzz_retry", "forged-handback",
        opt(2, 7) + props(headers=[("x-last-death-queue", S("payments.secret")),
                                   ("x-delay", L(1)), ("x-delay-bridge-handback", L(1))]))
    put("fuzz_retry", "bridge-handback",
        opt(2, 7) + props(user_id="bridge",
                          headers=[("x-death", b"A" + lstr(death("work.email", "rejected"))),
                                   ("x-delay", L(1500)), ("x-delay-bridge-handback", L(1))]))

    # fuzz_uri
    for i, u in enumerate(["amqp://guest:guest@127.0.0.1:5672/%2f", "amqps://u@[::1]:5671/vh",
                           "amqp://h", "amqp://h/", "amqp://us%3Aer:pa%40ss@host:1/v%2Fh",
                           "amqp://user:secretpw@host:99999/", "amqp://user:secretpw@[::1/x",
                           "http://x", "amqp://h?heartbeat=5"]):
        put("fuzz_uri", "uri%d" % i, u)


if __name__ == "__main__":
    main()
