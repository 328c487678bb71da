"""A project page's lines (PEP 503 and PEP 691): each listed file's anchor and its JSON entry, formatted directly
from one small record with the bytes markupsafe.escape and json.dumps(sort_keys=True) give them, since a project's
pages list thousands of files. The per-variant and all-variants indexes (render.py) and the variant channel
(variants.py) both list their files through it."""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring_ascii as _json_text  # json.dumps's encoding of a str
from typing import NamedTuple

import markupsafe

API_VERSION = "1.1"  # PEP 700: size, upload-time and versions in the JSON form


class Listed(NamedTuple):
    """One file as a project page lists it."""

    filename: str
    href: str  # from the page
    sha256: str
    metadata_sha256: str | None = None  # its PEP 658/714 core metadata's; None: none is served
    requires_python: str | None = None  # None: no data-requires-python and no "requires-python"
    size: int | None = None  # PEP 700
    upload_time: str | None = None  # PEP 700, as ISO 8601 text


class ProjectLines:
    """The anchors and JSON entries of one project page pair, in the order the files are added. Requires-Python is
    escaped and encoded once per distinct value (a page's thousands of files share a few)."""

    def __init__(self) -> None:
        self.anchors: list[str] = []
        self.entries: list[str] = []
        self._pythons: dict[str | None, tuple[str, str]] = {None: ("", "")}

    def add(self, listed: Listed) -> None:
        python = self._pythons.get(listed.requires_python)
        if python is None:
            value = listed.requires_python or ""
            python = self._pythons[value] = (
                f' data-requires-python="{markupsafe.escape(value)}"',
                f'"requires-python":{_json_text(value)},',
            )
        self.anchors.append(_anchor(listed, python[0]))
        self.entries.append(_entry(listed, python[1]))


def _anchor(listed: Listed, requires: str) -> str:
    """The PEP 503 anchor, the hash in the URL fragment. PEP 714's name only for the metadata: pip 22.3-23.1 read
    the legacy data-dist-info-metadata and compare its Name unnormalised, and then download the wheel instead."""
    filename, href, metadata = listed.filename, listed.href, listed.metadata_sha256
    if _HTML_SPECIAL.search(filename) or _HTML_SPECIAL.search(href) or (metadata and _HTML_SPECIAL.search(metadata)):
        escape = markupsafe.escape
        filename, href = str(escape(filename)), str(escape(href))
        metadata = str(escape(metadata)) if metadata is not None else None
    core = f' data-core-metadata="sha256={metadata}"' if metadata is not None else ""
    return f'    <a href="{href}#sha256={listed.sha256}"{requires}{core}>{filename}</a><br>\n'


def _entry(listed: Listed, requires: str) -> str:
    """The PEP 691 entry as json.dumps(sort_keys=True) writes it."""
    metadata = listed.metadata_sha256
    core = f'"core-metadata":{{"sha256":{_json_text(metadata)}}},' if metadata is not None else ""
    size = f'"size":{int(listed.size)},' if listed.size is not None else ""
    uploaded = f'"upload-time":{_json_text(listed.upload_time)},' if listed.upload_time is not None else ""
    return (
        f'{{{core}"filename":{_json_text(listed.filename)},"hashes":{{"sha256":{_json_text(listed.sha256)}}},'
        f'{requires}{size}{uploaded}"url":{_json_text(listed.href)},"yanked":false}}'
    )


_HTML_SPECIAL = re.compile("[&<>\"']")  # what markupsafe.escape replaces


def simple_page(title: str, links: str) -> bytes:
    """templates/simple_project.html's bytes, written out here: compiling a template costs a new process more than
    formatting this (tests/unit/test_index_render.py holds the two to the same bytes)."""
    head, tail = simple_shell(title)
    return head + links.encode() + tail


def simple_shell(title: str) -> tuple[bytes, bytes]:
    """A PEP 503 project page's bytes before its links and after them."""
    escaped = markupsafe.escape(title)
    head = (
        f'<!DOCTYPE html>\n<html lang="en">\n  <head>\n    <meta charset="utf-8">\n'
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">\n    <title>{escaped}</title>\n'
        f"  </head>\n  <body>\n    <h1>{escaped}</h1>\n"
    )
    return head.encode(), b"  </body>\n</html>\n"


def json_page(project: str, entries: list[str], versions: list[str]) -> bytes:
    """A PEP 691 project page of ``entries`` (in page order), the bytes json.dumps(sort_keys=True) gives the whole
    document: "files" is the first key in sorted order."""
    return b'{"files":[' + ",".join(entries).encode() + json_tail(project, versions)


def json_tail(project: str, versions: list[str]) -> bytes:
    """A PEP 691 project page's bytes after its entries."""
    document = {"meta": {"api-version": API_VERSION}, "name": project, "versions": versions}
    rest = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return b"]," + rest[1:].encode() + b"\n"
