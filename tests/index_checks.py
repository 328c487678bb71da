"""What the index tests (and the index benchmark) share: real pip run hermetically, and a crawl of a published
index over HTTP from its entry pages that reports every link that does not resolve or whose bytes do not match
the digest the page gave for it."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin

from builder.core.runner import run
from index_site.layout import SITE_MARKER  # the manifest, which records inodes

ENTRY_PAGES = ("", "index.html", "simple/", "json/")


def site_files(site: Path) -> dict[str, bytes]:
    """Every file of a site but its manifest, by site path: what a re-index and a cold index of the same folders
    must write alike."""
    files = (path for path in sorted(site.rglob("*")) if path.is_file() and path.name != SITE_MARKER)
    return {path.relative_to(site).as_posix(): path.read_bytes() for path in files}


def installer_environment(uv_cache: Path) -> dict[str, str]:
    """pip and uv without user or machine configuration (no extra find-links or indexes), with a fresh uv cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", UV_NO_CONFIG="1", UV_CACHE_DIR=str(uv_cache)
    )
    return env


def pip_install(python: Path, env: dict[str, str], *args: str | Path) -> str:
    """This environment's pip (a current release) installing into ``python``'s environment, without dependencies."""
    command = [sys.executable, "-m", "pip", "--python", python, "install", "--no-cache-dir", "--no-deps", *args]
    return run(command, step="pip install", env=env, capture=True).output


@dataclass
class Crawl:
    pages: dict[str, bytes] = field(default_factory=dict)  # url -> body of every page visited
    files: dict[str, str] = field(default_factory=dict)  # url -> sha256 of every wheel / metadata file fetched
    problems: list[str] = field(default_factory=list)


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def fetch(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        error.close()  # the socket under its body, now rather than when the collector finds it
        return error.code, "", b""


def crawl(base: str, entries: tuple[str, ...] = ENTRY_PAGES) -> Crawl:
    """Follow every link under ``base`` from ``entries``; check each file against the digests pages gave for it."""
    result = Crawl()
    expected: dict[str, set[str]] = {}
    queue = [urljoin(base, entry) for entry in entries]
    while queue:
        url = queue.pop()
        if url in result.pages or url in result.files:
            continue
        status, content_type, body = fetch(url)
        if status != 200:
            result.problems.append(f"{url}: HTTP {status}")
            continue
        if url.endswith((".whl", ".metadata")):
            result.files[url] = hashlib.sha256(body).hexdigest()
            continue
        result.pages[url] = body
        links = _json_links(url, body) if "json" in content_type else _html_links(url, body)
        for target, digest in links:
            if digest:
                expected.setdefault(target, set()).add(digest)
            if target.startswith(base):
                queue.append(target)
    for url, digests in expected.items():
        if url in result.files and {result.files[url]} != digests:
            result.problems.append(f"{url}: sha256 {result.files[url]}, pages say {sorted(digests)}")
    return result


def _html_links(page: str, body: bytes) -> list[tuple[str, str | None]]:
    parser = _Anchors()
    parser.feed(body.decode())
    links = []
    for anchor in parser.anchors:
        target, fragment = urldefrag(urljoin(page, anchor.get("href") or ""))
        links.append((target, fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None))
        metadata = anchor.get("data-core-metadata")
        if metadata:
            links.append((target + ".metadata", metadata.removeprefix("sha256=")))
    return links


def _json_links(page: str, body: bytes) -> list[tuple[str, str | None]]:
    document = json.loads(body)
    links: list[tuple[str, str | None]] = [(urljoin(page, p["name"] + "/"), None) for p in document.get("projects", ())]
    for file in document.get("files", ()):
        target = urljoin(page, file["url"])
        links.append((target, file["hashes"]["sha256"]))
        if file.get("core-metadata"):
            links.append((target + ".metadata", file["core-metadata"]["sha256"]))
    return links
