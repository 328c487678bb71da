"""Serve the site over HTTP the way the published bucket answers: directory URLs resolve to their index page
(index.html, or index.json under a JSON root), content types and cache headers come from the site layout, and
nothing outside the site (or hidden in it) is reachable.

Requests never become filesystem paths directly: a URL is decoded and checked as a site path (layout.is_site_path),
then opened folder by folder without following symlinks (index_site.tree), so a symlink, FIFO or device in the
site, the build output's ledger.sqlite or dist/ beside it, or a NUL byte in the URL answers 404 or 400. A wheel or
.metadata whose identity moved since the index recorded it is re-hashed before its bytes are served, and refused
when they differ from what the pages state. One thread per connection, a listen backlog of REQUEST_QUEUE_SIZE, and
no handler error reaches the console: it is logged and answered 500."""

from __future__ import annotations

import logging
import os
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.core.hashing import FileIdentity, NotARegularFile, regular_identity, sha256_stream
from index_site import layout
from index_site.site import FileRecord, load_manifest
from index_site.tree import open_site_file

log = logging.getLogger(__name__)

REQUEST_QUEUE_SIZE = 1024  # the kernel caps it at net.core.somaxconn
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


class SiteServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = REQUEST_QUEUE_SIZE

    def __init__(self, site: Path, host: str, port: int, on_request: Callable[[Served], None] | None = None) -> None:
        self.site = site
        self.on_request = on_request
        self.manifest = _Manifest(site)
        super().__init__((host, port), SiteRequestHandler)

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
    timeout = 60  # seconds a connection may sit idle or trickle: a slow client cannot hold a thread for ever
    server: SiteServer

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
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
        log.info("%s %s", self.address_string(), format % args)


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
    thread = threading.Thread(target=server.serve_forever, name=f"wheelwright-serve-{server.url}", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
