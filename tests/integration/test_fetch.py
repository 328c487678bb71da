"""The fetch stage over real HTTP: a PEP 691 index on loopback, and the real registry for one small pinned sdist."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from builder.core.errors import FetchError
from builder.core.hashing import sha256_of
from builder.core.http import open_bounded
from builder.plan.job import Sdist
from builder.plan.matrix import load_matrix
from builder.steps.fetch import INDEX_PAGE, PEP691_JSON, fetch_sdist, unpack_sdist
from tests import peers


def tarball() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in {"toy_pkg-0.1/PKG-INFO": b"Version: 0.1\n", "toy_pkg-0.1/setup.py": b"# toy\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


TARBALL = tarball()
TARBALL_SHA = hashlib.sha256(TARBALL).hexdigest()


class Index(BaseHTTPRequestHandler):
    """/simple/toy-pkg/ answers PEP 691 JSON only to clients that ask for it (HTML otherwise, as real indexes do)."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requests.append(self.path)
        if self.path == "/simple/toy-pkg/":
            wants_json = PEP691_JSON in self.headers.get("Accept", "")
            files = [{"filename": "toy_pkg-0.1.tar.gz", "url": "/files/toy_pkg-0.1.tar.gz",
                      "hashes": {"sha256": TARBALL_SHA}}]
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": "toy-pkg", "files": files}).encode()
            self.answer(body if wants_json else b"<html></html>", PEP691_JSON if wants_json else "text/html")
        elif self.path == "/files/toy_pkg-0.1.tar.gz":
            self.answer(TARBALL, "application/octet-stream")
        else:
            self.send_error(404)

    def answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    Index.requests = []
    with peers.serving(ThreadingHTTPServer(("127.0.0.1", 0), Index)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"


def test_fetch_through_pep691_on_loopback_then_unpack(
    index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_INDEX_URL", index)
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / "cache"))
    sdist = Sdist(filename="toy_pkg-0.1.tar.gz", sha256=TARBALL_SHA)
    path = fetch_sdist(sdist, "Toy_Pkg")
    assert path == tmp_path / "cache" / "sdists" / "toy_pkg-0.1.tar.gz"
    assert Index.requests == ["/simple/toy-pkg/", "/files/toy_pkg-0.1.tar.gz"]
    assert (unpack_sdist(path, tmp_path / "src") / "setup.py").read_bytes() == b"# toy\n"
    fetch_sdist(sdist, "toy-pkg")
    assert len(Index.requests) == 2  # the second fetch was a cache hit


def test_unknown_project_on_loopback_names_the_package(index: str, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="other-pkg: cannot read the index page .*/simple/other-pkg/: HTTP Error 404"):
        fetch_sdist(
            Sdist(filename="other_pkg-1.0.tar.gz", sha256="0" * 64), "other-pkg", cache_dir=tmp_path, index=index
        )


def test_an_http_error_reaches_the_caller_with_its_response_closed(index: str) -> None:
    """Left open, the socket under a 404's body warns whenever the collector finds it, which under ``-W error``
    failed whichever test was running then (CI, test_real_registry_serves_a_pinned_sdist)."""
    with pytest.raises(urllib.error.HTTPError) as caught, open_bounded(f"{index}gone/", INDEX_PAGE):
        pass
    assert caught.value.code == 404
    assert caught.value.fp.closed


def test_real_registry_serves_a_pinned_sdist(tmp_path: Path) -> None:
    """The registry's own PEP 691 API: a 30 KB sdist, into an empty cache (network needed)."""
    package = load_matrix(Path(__file__).resolve().parents[2] / "matrix.yaml").package("causal-conv1d")
    pin = next(p for p in package.versions if p.version == "1.6.1")
    sdist = Sdist(filename="causal_conv1d-1.6.1.tar.gz", sha256=pin.sha256)
    assert sha256_of(fetch_sdist(sdist, "causal-conv1d", cache_dir=tmp_path)) == pin.sha256
