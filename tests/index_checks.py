"""Checks the index tests share: crawl a published index over HTTP from its entry pages and report every link
that does not resolve or whose bytes do not match the digest the page gave for it."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin

ENTRY_PAGES = ("", "index.html", "simple/", "json/")


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
