"""Serve the site over HTTP the way the published bucket answers: directory URLs resolve to their index page
(index.html, or index.json under a JSON root), content types and cache headers come from the site layout, and
nothing outside the site (or hidden in it) is reachable."""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from index_site import layout

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Served:
    """One answered request, for callers that want to see what clients fetched (tests, the benchmark)."""

    method: str
    path: str
    status: int
    length: int


class SiteServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, site: Path, host: str, port: int, on_request: Callable[[Served], None] | None = None) -> None:
        self.site = site
        self.on_request = on_request
        super().__init__((host, port), SiteRequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class SiteRequestHandler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: SiteServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._status = 0
        self._length = 0
        super().__init__(*args, directory=os.fspath(args[2].site), **kwargs)

    def translate_path(self, path: str) -> str:
        """Hidden names are not served; a JSON root's directory URL resolves to its index.json."""
        url_path = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
        if any(part.startswith(".") for part in url_path.split("/")):
            return os.path.join(self.directory, ".hidden-not-served")
        translated = super().translate_path(path)
        if url_path.endswith("/") and os.path.isdir(translated):
            for index in ("index.html", "index.json"):
                if os.path.isfile(os.path.join(translated, index)):
                    return os.path.join(translated, index)
        return translated

    def list_directory(self, path: str | os.PathLike[str]) -> None:
        """A directory without an index page is not found, as in a bucket: no listings of the site's files."""
        self.send_error(HTTPStatus.NOT_FOUND, "No index page here")

    def guess_type(self, path: str | os.PathLike[str]) -> str:
        relative = Path(os.path.relpath(path, self.directory)).as_posix()
        return layout.kind_of(relative).content_type

    def send_response(self, code: int, message: str | None = None) -> None:
        self._status, self._length = code, 0
        super().send_response(code, message)

    def send_header(self, keyword: str, value: str) -> None:
        if keyword.lower() == "content-length":
            self._length = int(value)
        super().send_header(keyword, value)

    def end_headers(self) -> None:
        if self._status == HTTPStatus.OK:
            relative = posixpath.normpath(urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)).lstrip("/")
            self.send_header("Cache-Control", layout.kind_of(relative or layout.LANDING).cache_control)
        super().end_headers()
        if self.server.on_request is not None:
            self.server.on_request(
                Served(method=self.command, path=self.path, status=self._status, length=self._length)
            )

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
