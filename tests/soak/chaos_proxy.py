"""chaos_proxy -- a TCP proxy between a bridge and one broker node that a
fault schedule can make stall or black-hole.

Why a proxy: a kill -9 or a node kill ends a TCP connection cleanly (the
kernel sends FIN or RST), so the other side learns of it at once. A network
that goes wrong does not: packets stop, or stop in one direction, and each
side learns of it only through its own timers (the bridge's AMQP heartbeat,
broker.heartbeat_s; the broker's heartbeat of the same connection;
connect_timeout_ms for a connection being set up). A proxy on loopback is
the one place on one machine where that can be made to happen on purpose,
for one bridge's connections to one node, without root's iptables and
without touching the other tests on this machine.

Modes (set at any time from another thread; each connection follows the
proxy's mode from its next turn):

  pass       bytes are forwarded both ways as they come.
  stall      nothing is read from either side: bytes wait in the kernel's
             socket buffers and the sockets stay open. A stall shorter than
             the heartbeat timeouts is a slow network: when it ends
             everything flows on. A longer one ends with one side dropping
             the connection for missed heartbeats.
  blackhole  everything read from either side is thrown away, and new
             connections are accepted but never connected upstream (their
             AMQP handshake goes nowhere): a partition. When the mode
             returns to pass, every connection that lived through the
             partition is closed (they are dead: their bytes were lost, so
             neither side could continue the AMQP stream), as a partition
             that heals ends with a reset.

  upstall    the bridge's bytes wait (not read), the broker's still reach
             the bridge: the bridge receives deliveries but its acks,
             heartbeats and events do not leave (test_redelivered_key.py:
             an ack lost while the bridge runs on). New connections cannot
             finish their handshake meanwhile.

What it does not do: delay or reorder bytes, or
corrupt data (TCP would not deliver corrupted data either). One thread runs
every proxy of a Proxies set with one selector.

The tap (Proxies.tap(file)): every basic.deliver the proxy passes to a
bridge and every basic.publish it passes from one, whose properties carry
a message-id or an x-delay-key* header, is written as one line when the
proxy reads it off the socket (a bridge under SIGSTOP reads it later):

  T PROXY to|from deliver|publish tag=N ex=E rk=R mid=M [x-delay-key...=V]

T is seconds since the tap started. The AMQP frames are parsed per
connection and direction (frame = type, channel, size, payload, 0xCE);
the content header that follows the method carries the properties.
"""

import errno
import selectors
import socket
import struct
import threading
import time

BUF = 65536


class _Frames(object):
    """The AMQP 0-9-1 frames of one direction of one connection, for the tap."""

    def __init__(self, skip_header):
        self.buf = b""
        self.skip = 8 if skip_header else 0  # the client's "AMQP\0\0\9\1"
        self.method = {}  # channel -> (name, tag, exchange, routing key) awaiting its header

    def feed(self, data, emit):
        self.buf += data
        if self.skip:
            n = min(self.skip, len(self.buf))
            self.buf, self.skip = self.buf[n:], self.skip - n
        while len(self.buf) >= 7:
            typ, ch, size = struct.unpack_from(">BHI", self.buf, 0)
            if len(self.buf) < 8 + size:
                return
            payload = self.buf[7:7 + size]
            self.buf = self.buf[8 + size:]
            if typ == 1 and len(payload) >= 4:
                cls, meth = struct.unpack_from(">HH", payload, 0)
                if (cls, meth) == (60, 60):  # basic.deliver
                    self.method[ch] = ("deliver",) + _deliver_args(payload[4:])
                elif (cls, meth) == (60, 40):  # basic.publish
                    self.method[ch] = ("publish",) + _publish_args(payload[4:])
                else:
                    self.method.pop(ch, None)
            elif typ == 2 and ch in self.method:
                m = self.method.pop(ch)
                try:
                    import pika.spec
                    props = pika.spec.BasicProperties()
                    props.decode(payload[12:])
                except Exception:  # noqa: BLE001 -- not ours to judge
                    continue
                hdrs = {k: v for k, v in (props.headers or {}).items()
                        if k.startswith("x-delay-key")}
                if props.message_id or hdrs:
                    emit(m, props.message_id, hdrs)


def _shortstr(b, pos):
    n = b[pos]
    return b[pos + 1:pos + 1 + n].decode("utf-8", "replace"), pos + 1 + n


def _deliver_args(b):
    _tag, pos = _shortstr(b, 0)  # consumer tag
    (dtag,) = struct.unpack_from(">Q", b, pos)
    pos += 9  # delivery tag, redelivered bit
    ex, pos = _shortstr(b, pos)
    rk, pos = _shortstr(b, pos)
    return dtag, ex, rk


def _publish_args(b):
    ex, pos = _shortstr(b, 2)  # after reserved-1
    rk, pos = _shortstr(b, pos)
    return 0, ex, rk


class _Conn(object):
    __slots__ = ("down", "up", "out_down", "out_up", "doomed", "f_down", "f_up")

    def __init__(self, down, up):
        self.down = down          # the accepted socket (the bridge's side)
        self.up = up              # the socket to the broker node, or None
        self.out_down = b""       # bytes waiting to be written to down
        self.out_up = b""         # ... to up
        self.doomed = False       # lived through a blackhole: closed when it ends
        self.f_down = _Frames(True)   # frames from the bridge (the tap)
        self.f_up = _Frames(False)    # frames from the broker


class Proxy(object):
    """One listening port forwarding to 127.0.0.1:upstream_port."""

    def __init__(self, name, listen_port, upstream_port):
        self.name = name
        self.listen_port = listen_port
        self.upstream_port = upstream_port
        self.mode = "pass"
        self.conns = []
        self.accepted = 0
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", listen_port))
        self.lsock.listen(64)
        self.lsock.setblocking(False)

    def live(self):
        """How many connections pass through it now."""
        return len(self.conns)


class Proxies(object):
    """A set of proxies served by one thread."""

    def __init__(self):
        self.proxies = {}
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self.tap_file = None
        self.tap_t0 = 0.0

    def tap(self, f, t0=None):
        """Write the deliveries and publishes seen to file f (see the module's doc)."""
        self.tap_t0 = time.monotonic() if t0 is None else t0
        self.tap_file = f

    def _tap(self, p, c, side, d):
        def emit(m, mid, hdrs):
            self.tap_file.write("%.3f %s %s %s tag=%d ex=%s rk=%s mid=%s%s\n" % (
                time.monotonic() - self.tap_t0, p.name, "from" if side == "down" else "to",
                m[0], m[1], m[2], m[3], mid,
                "".join(" %s=%s" % (k, v.decode() if isinstance(v, bytes) else v)
                        for k, v in sorted(hdrs.items()))))
        try:
            (c.f_down if side == "down" else c.f_up).feed(d, emit)
        except Exception as e:  # noqa: BLE001 -- the tap must never stop the proxy
            self.tap_file.write("tap error on %s: %r\n" % (p.name, e))

    def add(self, name, listen_port, upstream_port):
        p = Proxy(name, listen_port, upstream_port)
        self.proxies[name] = p
        return p

    def start(self):
        self.thread.start()

    def set_mode(self, name, mode):
        assert mode in ("pass", "stall", "blackhole", "upstall")
        with self.lock:
            p = self.proxies[name]
            if mode == "blackhole":
                for c in p.conns:
                    c.doomed = True
            elif p.mode == "blackhole":
                for c in list(p.conns):
                    if c.doomed:
                        self._close(p, c)
            p.mode = mode

    def close(self):
        self.stop_flag.set()
        self.thread.join(5)
        for p in self.proxies.values():
            for c in list(p.conns):
                self._close(p, c)
            p.lsock.close()

    # ------------------------------------------------------------------
    def _close(self, p, c):
        for s in (c.down, c.up):
            if s is not None:
                try:
                    s.close()
                except OSError:
                    pass
        if c in p.conns:
            p.conns.remove(c)

    def _accept(self, p):
        while True:
            try:
                s, _ = p.lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            p.accepted += 1
            up = None
            if p.mode != "blackhole":
                up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                up.settimeout(2.0)
                try:
                    up.connect(("127.0.0.1", p.upstream_port))
                except OSError:
                    up.close()
                    s.close()  # the node is down: refused, as a direct connect would be
                    continue
                up.setblocking(False)
                up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c = _Conn(s, up)
            c.doomed = p.mode == "blackhole"
            p.conns.append(c)

    @staticmethod
    def _recv(s):
        try:
            d = s.recv(BUF)
        except (BlockingIOError, InterruptedError):
            return b"", False
        except OSError:
            return b"", True
        return d, d == b""

    @staticmethod
    def _send(s, data):
        if not data:
            return data, False
        try:
            n = s.send(data)
        except (BlockingIOError, InterruptedError):
            return data, False
        except OSError as e:
            return b"", e.errno not in (errno.EAGAIN,)
        return data[n:], False

    def _turn(self):
        sel = selectors.DefaultSelector()
        with self.lock:
            for p in self.proxies.values():
                sel.register(p.lsock, selectors.EVENT_READ, (p, None, "listen"))
                if p.mode == "stall":
                    continue
                for c in p.conns:
                    for s, out, side in ((c.down, c.out_down, "down"), (c.up, c.out_up, "up")):
                        if s is None:
                            continue
                        ev = selectors.EVENT_READ
                        if p.mode == "upstall" and side == "down":
                            ev = 0
                        if out and p.mode in ("pass", "upstall") and \
                                not (p.mode == "upstall" and side == "up"):
                            ev |= selectors.EVENT_WRITE
                        if not ev:
                            continue
                        sel.register(s, ev, (p, c, side))
        try:
            events = sel.select(0.05)
        finally:
            pass
        with self.lock:
            for key, mask in events:
                p, c, side = key.data
                if side == "listen":
                    self._accept(p)
                    continue
                if c not in p.conns or p.mode == "stall":
                    continue
                s = c.down if side == "down" else c.up
                if mask & selectors.EVENT_READ:
                    d, eof = self._recv(s)
                    if eof:
                        if p.mode == "blackhole":
                            # a partition hides the close from the other side
                            try:
                                s.close()
                            except OSError:
                                pass
                            if side == "down":
                                c.down = None
                                if c.up is not None:
                                    try:
                                        c.up.close()
                                    except OSError:
                                        pass
                                    c.up = None
                                p.conns.remove(c)
                            else:
                                c.up = None
                            continue
                        self._close(p, c)
                        continue
                    if p.mode in ("pass", "upstall"):
                        if self.tap_file is not None:
                            self._tap(p, c, side, d)
                        if side == "down":
                            c.out_up += d
                        else:
                            c.out_down += d
                if mask & selectors.EVENT_WRITE and p.mode in ("pass", "upstall"):
                    if side == "down":
                        c.out_down, err = self._send(s, c.out_down)
                    else:
                        c.out_up, err = self._send(s, c.out_up)
                    if err:
                        self._close(p, c)
            # write what is waiting without waiting for the next writable event
            for p in self.proxies.values():
                if p.mode not in ("pass", "upstall"):
                    continue
                for c in list(p.conns):
                    if c.up is None:
                        continue
                    err1 = err2 = False
                    if c.out_up and p.mode == "pass":
                        c.out_up, err1 = self._send(c.up, c.out_up)
                    if c.out_down:
                        c.out_down, err2 = self._send(c.down, c.out_down)
                    if err1 or err2:
                        self._close(p, c)
        sel.close()

    def _run(self):
        while not self.stop_flag.is_set():
            try:
                self._turn()
            except Exception as e:  # keep proxying; a bug here shows in the log
                import sys
                sys.stdout.write("chaos_proxy: %r\n" % e)
                time.sleep(0.05)
