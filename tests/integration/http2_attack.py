#!/usr/bin/python3
"""HTTP/2 attacks on a heft h2c listener, written with raw frames (Debian's
python3-hyperframe and python3-hpack), for tests/integration/http2_test.cc.

    http2_attack.py PORT ATTACK

Runs one attack on 127.0.0.1:PORT and prints one line saying how the server
answered: "goaway CODE" (a GOAWAY with that error code), "reset N" (N streams
reset), "closed" (the connection closed without a GOAWAY), or "open" (it was
still open when the attack was over). Exit 0 once the attack ran; every step
has a deadline (the script ends within about 60 s whatever the server does).
"""
import socket
import sys
import time

from hpack import Decoder, Encoder
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame, WindowUpdateFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DEADLINE = time.monotonic() + 60


class Conn:
    def __init__(self, port, settings=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.inbuf = b""
        self.goaway = None
        self.resets = 0
        self.closed = False
        self.frames = []
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.reset_streams = set()
        self.statuses = {}
        self.send(PREFACE + SettingsFrame(0, settings=settings or {}).serialize())

    def send(self, data):
        if self.closed:
            return False
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def pump(self, wait=0.0):
        """Reads what the server sent (waiting up to `wait` seconds for it)."""
        if self.closed:
            return
        self.sock.settimeout(wait if wait > 0 else 0.0001)
        try:
            while True:
                chunk = self.sock.recv(1 << 20)
                if not chunk:
                    self.closed = True
                    break
                self.inbuf += chunk
                self.sock.settimeout(0.0001)
        except (socket.timeout, BlockingIOError):
            pass
        except OSError:
            self.closed = True
        while len(self.inbuf) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(self.inbuf[:9]))
            if len(self.inbuf) < 9 + length:
                break
            frame.parse_body(memoryview(self.inbuf[9:9 + length]))
            self.inbuf = self.inbuf[9 + length:]
            if isinstance(frame, GoAwayFrame):
                self.goaway = frame.error_code
            elif isinstance(frame, RstStreamFrame):
                self.resets += 1
                self.reset_streams.add(frame.stream_id)
            elif isinstance(frame, HeadersFrame):
                for name, value in self.decoder.decode(frame.data):
                    if name in (b":status", ":status"):
                        self.statuses[frame.stream_id] = int(value)
            elif isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                self.send(SettingsFrame(0, flags=["ACK"]).serialize())
            self.frames.append(type(frame).__name__)
            del self.frames[:-100]

    def headers(self, stream_id, path="/", end_stream=True, method="GET", extra=()):
        block = self.encoder.encode([(":method", method), (":scheme", "http"), (":path", path),
                                     (":authority", "127.0.0.1")] + list(extra))
        flags = ["END_HEADERS"] + (["END_STREAM"] if end_stream else [])
        return HeadersFrame(stream_id, data=block, flags=flags).serialize()

    def outcome(self):
        self.pump(0.5)
        if self.goaway is not None:
            return f"goaway {self.goaway}"
        if self.closed:
            return "closed"
        if self.resets:
            return f"reset {self.resets}"
        return "open"


def in_batches(conn, frames, batch=200):
    """Sends `frames` (bytes each), reading the server's answers between batches."""
    for i in range(0, len(frames), batch):
        if time.monotonic() > DEADLINE or not conn.send(b"".join(frames[i:i + batch])):
            break
        conn.pump()
        if conn.goaway is not None or conn.closed:
            break


def rapid_reset(port):
    conn = Conn(port)
    frames = []
    for i in range(10000):
        sid = 1 + 2 * i
        frames.append(conn.headers(sid) + RstStreamFrame(sid, error_code=8).serialize())
    in_batches(conn, frames)
    return conn


def continuation_flood(port):
    conn = Conn(port)
    block = conn.encoder.encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                 (":authority", "127.0.0.1")])
    frames = [HeadersFrame(1, data=block).serialize()]
    for i in range(10000):
        frames.append(ContinuationFrame(1, data=conn.encoder.encode([(f"x-flood-{i % 50}", "y" * 100)])).serialize())
    in_batches(conn, frames, 100)
    return conn


def hpack_bomb(port):
    # One 4000-byte field in the dynamic table, then header blocks that name it
    # by index (one byte each) 16,000 times: 64 MB of fields per block decoded.
    conn = Conn(port)
    first = conn.encoder.encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                 (":authority", "127.0.0.1"), ("x-bomb", "b" * 4000)])
    conn.send(HeadersFrame(1, data=first, flags=["END_HEADERS", "END_STREAM"]).serialize())
    conn.pump(0.5)
    index = 62  # the newest entry of the dynamic table
    for i in range(20):
        sid = 3 + 2 * i
        block = conn.encoder.encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                     (":authority", "127.0.0.1")])
        block += bytes([0x80 | index]) * 16000
        if not conn.send(HeadersFrame(sid, data=block, flags=["END_HEADERS", "END_STREAM"]).serialize()):
            break
        conn.pump(0.05)
        if conn.goaway is not None or conn.closed:
            break
    return conn


def settings_flood(port):
    conn = Conn(port)
    in_batches(conn, [SettingsFrame(0, settings={SettingsFrame.MAX_CONCURRENT_STREAMS: 100}).serialize()] * 10000)
    return conn


def ping_flood(port):
    conn = Conn(port)
    in_batches(conn, [PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize() for i in range(10000)])
    return conn


def empty_data_flood(port):
    conn = Conn(port)
    conn.send(conn.headers(1, "/echo", end_stream=False, method="POST"))
    in_batches(conn, [DataFrame(1, data=b"").serialize()] * 10000)
    return conn


def window_zero_reader(port):
    # Asks for 64 MiB with a window of 0, never opens it, and holds on while
    # the test measures heft's memory.
    conn = Conn(port, settings={SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    conn.send(conn.headers(1, "/bytes/67108864"))
    end = time.monotonic() + 3
    while time.monotonic() < end and not conn.closed:
        conn.pump(0.2)
    return conn


def violations(port):
    # RFC 9113 8.2 and 8.3: each request is malformed, to be reset without
    # reaching a backend; then a well-formed one, to be served.
    base = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "127.0.0.1")]
    cases = {
        "connection": base + [("connection", "keep-alive")],
        "keep-alive": base + [("keep-alive", "timeout=5")],
        "transfer-encoding": base + [("transfer-encoding", "chunked")],
        "upgrade": base + [("upgrade", "h2c")],
        "te other than trailers": base + [("te", "gzip")],
        "uppercase name": base + [("X-Upper", "1")],
        "no :path": base[:2] + base[3:],
        "pseudo-header after a field": base[:3] + [("x-a", "1"), (":authority", "127.0.0.1")],
        "unknown pseudo-header": base + [(":protocol-x", "1")],
        "two :path": base + [(":path", "/again")],
    }
    conn = Conn(port)
    conn.pump(0.3)
    sid = 1
    expected = {}
    for name, fields in cases.items():
        block = conn.encoder.encode(fields)
        conn.send(HeadersFrame(sid, data=block, flags=["END_HEADERS", "END_STREAM"]).serialize())
        expected[sid] = name
        sid += 2
    # content-length against the DATA received: less, and more.
    for declared, sent in ((10, 5), (5, 10)):
        block = conn.encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", "/echo"),
                                     (":authority", "127.0.0.1"), ("content-length", str(declared))])
        conn.send(HeadersFrame(sid, data=block, flags=["END_HEADERS"]).serialize() +
                  DataFrame(sid, data=b"x" * sent, flags=["END_STREAM"]).serialize())
        expected[sid] = f"content-length {declared} with {sent} bytes"
        sid += 2
    end = time.monotonic() + 10
    while time.monotonic() < end and not set(expected) <= conn.reset_streams and not conn.closed:
        conn.pump(0.2)
    missing = [expected[s] for s in expected if s not in conn.reset_streams]
    print("violations reset: " + ("all" if not missing else "missing " + ", ".join(missing)))
    conn.send(conn.headers(sid))
    end = time.monotonic() + 10
    while time.monotonic() < end and sid not in conn.statuses and not conn.closed:
        conn.pump(0.2)
    print(f"control: {conn.statuses.get(sid, 'none')}")
    return conn


ATTACKS = {f.__name__: f for f in (rapid_reset, continuation_flood, hpack_bomb, settings_flood, ping_flood,
                                   empty_data_flood, window_zero_reader, violations)}

if __name__ == "__main__":
    port, attack = int(sys.argv[1]), sys.argv[2]
    conn = ATTACKS[attack](port)
    print(conn.outcome(), flush=True)
