"""Serve the site over HTTP the way the published bucket answers: directory URLs resolve to their index page
(index.html, or index.json under a JSON root), content types and cache headers come from the site layout, and
nothing outside the site (or hidden in it) is reachable.

Requests never become filesystem paths directly: a URL is decoded and checked as a site path (layout.is_site_path),
then opened folder by folder without following symlinks (index_site.tree), so a symlink, FIFO or device in the
site, the build output's ledger.sqlite or dist/ beside it, or a NUL byte in the URL answers 404 or 400. A wheel or
.metadata whose identity moved since the index recorded it is re-hashed before its bytes are served, and refused
when they differ from what the pages state. One thread per connection, at most MAX_CONNECTIONS of them (a
connection idle at capacity gives way to a new one; a client that sends no request head within HEAD_DEADLINE_S is
cut off), a listen backlog of REQUEST_QUEUE_SIZE, and no handler error reaches the console: it is logged and
answered 500."""

from __future__ import annotations

import logging
import os
import select
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

from builder.core.errors import WheelwrightError, one_line
from builder.core.hashing import FileIdentity, NotARegularFile, regular_identity, sha256_stream
from builder.core.settings import deadline_scale
from index_site import layout
from index_site.records import FileRecord, load_manifest
from index_site.tree import open_site_file

log = logging.getLogger(__name__)

REQUEST_QUEUE_SIZE = 1024  # the kernel caps it at net.core.somaxconn
# Connections served at once (one thread each): more wait in the listen queue. docs/hostile-input.md says why.
MAX_CONNECTIONS = 64
HEAD_DEADLINE_S = 20.0  # from a connection's start, or its previous answer, to a complete request head
IDLE_S = 20.0  # the longest wait for the next byte, either way
FULL_WAIT_S = 10.0  # how long a new connection waits for a slot when none can be freed, before a 503
_EVICT_GRACE_S = 1.0  # a connection waiting this long with nothing sent is idle, and gives way at capacity
_DIRECTORY_PAGES = ("index.html", "index.json")


@dataclass(frozen=True, kw_only=True)
class Served:
    """One answered request, for callers that want to see what clients fetched (tests, the benchmark)."""

    method: str
    path: str
    status: int
    length: int


class _Manifest:
    """The site's manifest, reloaded when the index rewrites it, and the identities already re-verified."""

    def __init__(self, site: Path) -> None:
        self._site = site
        self._lock = threading.Lock()
        self._marker: FileIdentity | None = None
        self._records: dict[str, FileRecord] = {}
        self._verified: set[tuple[str, FileIdentity]] = set()

    def record(self, relative: str) -> FileRecord | None:
        try:
            marker = regular_identity(self._site / layout.SITE_MARKER)
        except OSError:
            return None
        with self._lock:
            if marker != self._marker:
                try:
                    self._records = load_manifest(self._site)
                except WheelwrightError as error:
                    log.warning("%s", error)
                    self._records = {}
                self._marker, self._verified = marker, set()
            return self._records.get(relative)

    def holds(self, relative: str, record: FileRecord, fd: int) -> bool:
        """Whether the open file holds the recorded bytes: by identity, or by hashing it once per identity."""
        identity = FileIdentity.of(os.fstat(fd))
        if identity == record.identity or (relative, identity) in self._verified:
            return True
        with os.fdopen(os.dup(fd), "rb") as file:
            same = sha256_stream(file) == record.sha256
        os.lseek(fd, 0, os.SEEK_SET)
        if same:
            with self._lock:
                self._verified.add((relative, identity))
        return same


class _Slots:
    """The connections being served, at most ``limit``: each is waiting for a request head (since when) or
    answering. Waiting too long ends a connection; at capacity, the longest-idle waiting one gives way."""

    def __init__(self, limit: int, head_deadline: float, full_wait: float) -> None:
        self.limit, self.head_deadline, self.full_wait = limit, head_deadline, full_wait
        self._changed = threading.Condition()
        self._waiting: dict[socket.socket, float] = {}
        self._count = 0

    def take(self) -> bool:
        """A slot for a new connection, freeing an idle one if need be; False when none came free in time."""
        give_up = time.monotonic() + self.full_wait
        with self._changed:
            while self._count >= self.limit:
                self._sweep()
                if self._count < self.limit:
                    break
                left = give_up - time.monotonic()
                if left <= 0:
                    return False
                self._evict_idle()
                self._changed.wait(min(left, 0.25))
            self._count += 1
            return True

    def give_back(self, connection: socket.socket) -> None:
        with self._changed:
            self._waiting.pop(connection, None)
            self._count -= 1
            self._changed.notify_all()

    def waiting(self, connection: socket.socket) -> None:
        with self._changed:
            self._waiting[connection] = time.monotonic()

    def answering(self, connection: socket.socket) -> None:
        with self._changed:
            self._waiting.pop(connection, None)

    def sweep(self) -> None:
        with self._changed:
            self._sweep()

    def _sweep(self) -> None:
        """End every connection that has waited past the head deadline (idle, or sending its head too slowly)."""
        now = time.monotonic()
        for connection, since in list(self._waiting.items()):
            if now - since > self.head_deadline:
                log.debug("no request head within %g s: closing a connection", self.head_deadline)
                self._end(connection)

    def _evict_idle(self) -> None:
        now = time.monotonic()
        idle = [(since, c) for c, since in self._waiting.items() if now - since >= _EVICT_GRACE_S and _quiet(c)]
        if idle:
            self._end(min(idle, key=lambda pair: pair[0])[1])

    def _end(self, connection: socket.socket) -> None:
        """Shut the socket: its thread's read returns, the thread ends and gives its slot back."""
        self._waiting.pop(connection, None)
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _quiet(connection: socket.socket) -> bool:
    """Whether nothing from the client waits to be read (a request arriving is not idle)."""
    try:
        poller = select.poll()
        poller.register(connection, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class SiteServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = REQUEST_QUEUE_SIZE

    def __init__(
        self,
        site: Path,
        host: str,
        port: int,
        on_request: Callable[[Served], None] | None = None,
        *,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self.site = site
        self.on_request = on_request
        self.manifest = _Manifest(site)
        scale = deadline_scale()
        self.idle_timeout = IDLE_S * scale
        self.slots = _Slots(max_connections, HEAD_DEADLINE_S * scale, FULL_WAIT_S * scale)
        super().__init__((host, port), SiteRequestHandler)

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        """A thread for the connection once a slot is free; a 503 when none came free in time."""
        if not self.slots.take():
            log.warning("%d connections busy for %g s: answering 503", self.slots.limit, self.slots.full_wait)
            try:
                request.settimeout(1)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.give_back(request)
            raise

    def process_request_thread(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.give_back(request)

    def service_actions(self) -> None:
        """Between accepts (every half second at most): end connections past their head deadline."""
        super().service_actions()
        self.slots.sweep()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def handle_error(self, request: object, client_address: object) -> None:
        """A connection that failed outside a handler (a client gone mid-request): logged, never printed."""
        log.debug("connection from %s failed: %r", client_address, sys.exc_info()[1])


class SiteRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.0"  # an unparsable request still gets a status line, not an HTTP/0.9 body
    server: SiteServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)  # the longest wait for the next byte, either way

    def handle_one_request(self) -> None:
        self.server.slots.waiting(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.server.slots.waiting(self.connection)  # the request line came: its headers get the whole deadline
        return super().parse_request()

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        self.server.slots.answering(self.connection)
        try:
            self._serve(send_body=send_body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception:  # a bug must cost one request, not the server
            log.exception("%s %r failed", self.command, self.path)
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    def _serve(self, *, send_body: bool) -> None:
        url_path = urllib.parse.urlsplit(self.path).path
        try:
            relative = urllib.parse.unquote(url_path, errors="strict").lstrip("/")
        except UnicodeDecodeError:
            relative = "\x00"  # not UTF-8: no site path is
        if "\x00" in relative or not url_path.startswith("/"):
            self._fail(HTTPStatus.BAD_REQUEST, "bad path")
            return
        found = self._open(relative)
        if found is None:
            if not relative.endswith("/") and relative and self._open(relative + "/", probe=True) is not None:
                self._redirect(url_path + "/")
            else:
                self._fail(HTTPStatus.NOT_FOUND, "not found")
            return
        fd, page = found
        with os.fdopen(fd, "rb") as file:
            record = self.server.manifest.record(page)
            kind = layout.kind_of(page)
            if kind.immutable and record is not None and not self.server.manifest.holds(page, record, fd):
                log.error("%s: bytes differ from the sha256 the pages state; run `wheelwright index`", page)
                self._fail(HTTPStatus.SERVICE_UNAVAILABLE, "file changed since it was indexed")
                return
            size = os.fstat(fd).st_size
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", kind.content_type)
            self.send_header("Content-Length", str(size))
            self.send_header("Cache-Control", kind.cache_control)
            self.end_headers()
            if send_body:
                self.wfile.flush()
                self.connection.sendfile(file, count=size)  # in the kernel; no copy through Python
        self._record(HTTPStatus.OK, size)

    def _open(self, relative: str, *, probe: bool = False) -> tuple[int, str] | None:
        """The descriptor and site path answering ``relative``; a directory URL resolves to its index page."""
        directory = relative.endswith("/") or not relative
        candidates = [relative + page for page in _DIRECTORY_PAGES] if directory else [relative]
        for candidate in candidates:
            try:
                fd = open_site_file(self.server.site, candidate)
            except (FileNotFoundError, NotARegularFile, NotADirectoryError, PermissionError, ValueError):
                continue
            if probe:
                os.close(fd)
            return fd, candidate
        return None

    def _redirect(self, location: str) -> None:
        self.send_response(HTTPStatus.MOVED_PERMANENTLY)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self._record(HTTPStatus.MOVED_PERMANENTLY, 0)

    def _fail(self, status: HTTPStatus, reason: str) -> None:
        body = f"{status.value} {reason}\n".encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            self.close_connection = True
            return
        self._record(status, len(body))

    def _record(self, status: int, length: int) -> None:
        if self.server.on_request is not None:
            self.server.on_request(Served(method=self.command, path=self.path, status=int(status), length=length))

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s %s", self.address_string(), one_line(format % args))  # the request line is the client's


def make_server(
    site: Path, *, host: str = "127.0.0.1", port: int = 8000, on_request: Callable[[Served], None] | None = None
) -> SiteServer:
    """A server bound to ``host:port`` (0 picks a free port), not yet serving."""
    return SiteServer(site, host, port, on_request)


@contextmanager
def serving(
    site: Path, *, host: str = "127.0.0.1", port: int = 0, on_request: Callable[[Served], None] | None = None
) -> Iterator[SiteServer]:
    """Serve ``site`` on a background thread for the duration of the block."""
    server = make_server(site, host=host, port=port, on_request=on_request)
    with running(server, name=f"wheelwright-serve-{server.url}"):
        yield server


Server = TypeVar("Server", bound=socketserver.BaseServer)


@contextmanager
def running(server: Server, *, name: str | None = None) -> Iterator[Server]:
    """``server`` answering on a background thread for the block; shut down, closed and joined after it."""
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
