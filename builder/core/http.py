"""Bounded HTTP reads: each request has a connect, an idle (between bytes) and a total deadline and a size cap
(docs/hostile-input.md, "Deadlines and caps"); a peer that passes one is an OSError saying which limit, never a
hang. Standard library only, Python 3.9 and up: the standalone doctor.py carries this module."""

from __future__ import annotations

import dataclasses
import functools
import http.client
import math
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from builder.core.settings import deadline_scale

_READ_CHUNK = 1 << 16


@dataclass(frozen=True)
class Limits:
    """How long one kind of request may take (seconds) and how much it may send (bytes)."""

    connect: float  # TCP and TLS handshake of each connection
    idle: float  # the longest wait for the next byte
    total: float  # from the first connection attempt to the last byte, redirects included
    cap: int  # body bytes

    def scaled(self) -> Limits:
        factor = deadline_scale()
        return dataclasses.replace(
            self, connect=self.connect * factor, idle=self.idle * factor, total=self.total * factor
        )


class PeerTimeout(OSError):
    """A peer passed one of its deadlines."""


class PeerTooLarge(OSError):
    """A peer sent more than the cap."""


class PeerGarbled(OSError):
    """A peer answered something that is not HTTP."""


def size_text(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


class _Watch:
    """One request's clock: which connection is up, and a timer that shuts every socket at the total deadline (a
    blocked read then returns), since a peer sending a byte a second never trips the idle deadline."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.connected = False
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(limits.total, self._expire)
        self._timer.daemon = True

    def connecting(self) -> None:
        self.connected = False

    def adopt(self, sock: socket.socket) -> None:
        sock.settimeout(self.limits.idle)
        with self._lock:
            self._sockets.append(sock)
            self.connected = True
            if self.expired:
                self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: a TLS socket's would unwrap first
        except OSError:
            pass

    @contextmanager
    def running(self) -> Iterator[None]:
        self._timer.start()
        try:
            yield
        finally:
            self._timer.cancel()

    def explain(self, error: BaseException) -> BaseException:
        """The error to raise for ``error``: which deadline passed, if one did."""
        limits = self.limits
        if self.expired:
            return PeerTimeout(f"not done within {limits.total:g} s (total deadline)")
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        if isinstance(reason, (socket.timeout, TimeoutError)):
            if not self.connected:
                return PeerTimeout(f"no connection within {limits.connect:g} s (connect deadline)")
            return PeerTimeout(f"no byte for {limits.idle:g} s (idle deadline)")
        if isinstance(error, http.client.HTTPException) and not isinstance(error, http.client.IncompleteRead):
            return PeerGarbled(f"not an HTTP answer ({type(error).__name__}: {str(error)[:80]!r})")
        if isinstance(error, http.client.IncompleteRead):
            return OSError(f"the connection closed {error.expected or 'some'} bytes before the end")
        return error


class _WatchedHTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, watch: _Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watch = watch

    def connect(self) -> None:
        self._watch.connecting()
        super().connect()
        self._watch.adopt(self.sock)


class _WatchedHTTPS(http.client.HTTPSConnection):
    def __init__(self, *args: Any, watch: _Watch, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._watch = watch

    def connect(self) -> None:
        self._watch.connecting()
        super().connect()  # the TLS handshake too, under the connect deadline
        self._watch.adopt(self.sock)


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self._watch = watch

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> http.client.HTTPResponse:
        return super().do_open(functools.partial(_WatchedHTTP, watch=self._watch), req, **kwargs)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watch: _Watch) -> None:
        super().__init__()
        self._watch = watch

    def do_open(self, http_class: Any, req: Any, **kwargs: Any) -> http.client.HTTPResponse:
        return super().do_open(functools.partial(_WatchedHTTPS, watch=self._watch), req, **kwargs)


class BoundedResponse:
    """A response whose reads keep to the request's limits."""

    def __init__(self, response: http.client.HTTPResponse, watch: _Watch) -> None:
        self._response, self._watch = response, watch
        self.headers = response.headers
        self.status = response.status
        self.url = response.geturl()
        self._count = 0

    def read(self, amount: int = -1) -> bytes:
        """Up to ``amount`` bytes (all, when negative), fewer only at the end, as a file's read."""
        parts, wanted = [], amount if amount is not None and amount >= 0 else math.inf
        got = 0
        while got < wanted and (data := self.read1(int(min(wanted - got, _READ_CHUNK)))):
            parts.append(data)
            got += len(data)
        return b"".join(parts)

    def read1(self, amount: int = _READ_CHUNK) -> bytes:
        """What one receive brings, at most ``amount`` bytes; b"" at the end."""
        try:
            data = self._response.read1(amount)
        except (OSError, http.client.HTTPException) as error:
            raise self._watch.explain(error) from None
        if not data and amount:
            self._at_end()
        self._count += len(data)
        if self._count > self._watch.limits.cap:
            raise PeerTooLarge(f"more than {size_text(self._watch.limits.cap)} (size cap)")
        return data

    def _at_end(self) -> None:
        if self._watch.expired:
            raise self._watch.explain(EOFError())
        missing = self._response.length
        if missing:
            raise OSError(f"the connection closed {missing} bytes before the end")


@contextmanager
def open_bounded(
    request: str | urllib.request.Request, limits: Limits, headers: dict[str, str] | None = None
) -> Iterator[BoundedResponse]:
    """Open ``request`` under ``limits`` (scaled by $WHEELWRIGHT_DEADLINE_SCALE); the response's reads keep to them.

    Errors are OSErrors (urllib's HTTPError for an HTTP error status, URLError, PeerTimeout, PeerTooLarge,
    PeerGarbled) whose text says which limit passed; the caller names the URL. Only http and https are opened
    (a page listing a file: URL reads no local file), redirects included."""
    if isinstance(request, str):
        request = urllib.request.Request(request, headers=headers or {})
    watch = _Watch(limits.scaled())
    with watch.running():
        try:
            response = _opener(watch).open(request, timeout=watch.limits.connect)
        except urllib.error.HTTPError as error:
            error.close()  # its code and headers stay; the socket under its body is not left to the collector
            raise
        except (OSError, http.client.HTTPException) as error:
            raise watch.explain(error) from None
        with response:
            declared = response.headers.get("Content-Length", "")
            if declared.isdigit() and int(declared) > watch.limits.cap:
                raise PeerTooLarge(f"{declared} bytes announced, more than {size_text(watch.limits.cap)} (size cap)")
            yield BoundedResponse(response, watch)


def _opener(watch: _Watch) -> urllib.request.OpenerDirector:
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTPHandler(watch),
        _HTTPSHandler(watch),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
    ):
        opener.add_handler(handler)
    return opener


def peer_of(url: str) -> str:
    """The host (and port) a URL names, for messages."""
    return urlsplit(url).netloc or url
