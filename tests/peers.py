"""Network peers that misbehave, on loopback, for the deadline tests: each is a real listening socket, served by a
thread per connection until the test ends. One accepts and never answers, one trickles ten bytes a second (never
idle long enough to trip an idle deadline), one sends more than any cap, one answers what is not HTTP, and one
never completes a connection (its accept queue is full). serving() runs a test's own well-behaved stub the same
way."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from index_site.serve import running

serving = running  # a test's well-behaved stub runs as the site's own server does
Behaviour = Callable[[socket.socket, threading.Event], None]
DRIP_S = 0.1  # a trickling peer's pause between two bytes


def _request(conn: socket.socket) -> None:
    """Read what the client sends first (its request head), so the client is past connecting and sending."""
    conn.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return
        data += chunk


def silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accepts, reads the request, never answers."""
    _request(conn)
    stop.wait()


def trickle(conn: socket.socket, stop: threading.Event) -> None:
    """A valid answer announcing a megabyte, then its body a byte at a time: never idle, never done."""
    _request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
    _drip(conn, stop, b"[")


def trickle_head(conn: socket.socket, stop: threading.Event) -> None:
    """The answer's head itself, a byte at a time (an endless header line)."""
    _request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    _drip(conn, stop, b"a")


def _drip(conn: socket.socket, stop: threading.Event, byte: bytes) -> None:
    while not stop.wait(DRIP_S):
        try:
            conn.sendall(byte)
        except OSError:
            return


def flood(conn: socket.socket, stop: threading.Event) -> None:
    """An answer with no length that never ends, as fast as the client reads."""
    _request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n")
    block = b" " * (1 << 16)
    while not stop.is_set():
        try:
            conn.sendall(block)
        except OSError:
            return


def announced(size: int) -> Behaviour:
    """An answer whose Content-Length says ``size`` bytes (none follow)."""

    def behave(conn: socket.socket, stop: threading.Event) -> None:
        _request(conn)
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
        conn.sendall(head.encode())
        stop.wait()

    return behave


def not_http(conn: socket.socket, stop: threading.Event) -> None:
    """Another protocol's greeting instead of an HTTP status line."""
    _request(conn)
    conn.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n\xff\xfe\x00garbage\r\n\r\n")
    stop.wait()


class Peer:
    """A listening socket on loopback; each connection gets ``behaviour`` on a thread of its own."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections.append(conn)
            thread = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self.behaviour(conn, self.stop)
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        for conn in self.connections:
            conn.close()
        self.listener.close()


@contextmanager
def peer(behaviour: Behaviour) -> Iterator[Peer]:
    server = Peer(behaviour)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.close()
        thread.join(timeout=5)


@contextmanager
def blackhole() -> Iterator[str]:
    """A URL whose connections are never completed: a listener that never accepts, its queue already full, so the
    kernel drops each new handshake (as a firewall that drops packets would)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    unanswered = 0
    while unanswered < 2:  # connect until two handshakes in a row are not completed: the queue is full
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.settimeout(0.5)
        fillers.append(filler)
        try:
            filler.connect(("127.0.0.1", port))
            unanswered = 0
        except TimeoutError:
            unanswered += 1
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
