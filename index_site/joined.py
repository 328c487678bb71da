"""A project's two index pages (PEP 503 and PEP 691) joined from parts, one per version. The pages list every
version's files and one added wheel changes one version's lines, so a part whose digest holds is taken from the
pages the last run wrote, at the offsets it recorded beside its page group in the manifest (see ``entry``): a run
formats only the versions that changed. At 100,000 wheels a project's pages weigh tens of megabytes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from index_site import lines
from index_site.records import Buffer

_JSON_HEAD = b'{"files":['


class Rendered(NamedTuple):
    """One part's lines, as lines.ProjectLines formats them."""

    anchors: str  # its PEP 503 lines
    entries: str  # its PEP 691 entries, joined by ","
    versions: tuple[str, ...]  # the versions the JSON page lists for it, in page order
    pages: dict[str, bytes]  # other pages it makes: the variant channel's variants.json files


class Part(NamedTuple):
    """The lines of one version (or of versions that compare equal: 1.0 and 1.0.0 interleave)."""

    key: str
    digest: str  # of everything its lines and ``pages`` show, and the code that formats them
    render: Callable[[], Rendered]
    pages: tuple[str, ...] = ()  # the site paths of its other pages: taken as they are with its lines


class Pair(NamedTuple):
    """A project's PEP 503 page and its PEP 691 twin, listing the same files at the same depth."""

    simple: str  # site path
    json: str
    project: str
    parts: Sequence[Part]


class Reuse(Protocol):
    """What the last run left that a join may take (site.render_changed): its entries, its pages' bytes while the
    manifest's records hold, and other pages in place."""

    def entry(self, key: str) -> tuple[str, tuple[str, ...]] | None: ...

    def page(self, path: str, sha256: str) -> Buffer | None: ...

    def keep(self, paths: Sequence[str]) -> bool: ...


class Nothing:
    """A Reuse of nothing: every part rendered (a cold index, render_site)."""

    def entry(self, key: str) -> tuple[str, tuple[str, ...]] | None:
        return None

    def page(self, path: str, sha256: str) -> Buffer | None:
        return None

    def keep(self, paths: Sequence[str]) -> bool:
        return False


class Joined(NamedTuple):
    pages: dict[str, bytes]  # the pair, and the other pages of the parts rendered
    kept: tuple[str, ...]  # the other pages of the parts taken as they were
    entry: tuple[str, tuple[str, ...]]  # for the manifest's page groups: the pages' digests, each part's offsets
    digests: dict[str, str]  # the sha256 of the pair's pages, worked out for the entry


class _Kept(NamedTuple):
    digest: str
    simple: tuple[int, int]  # its bytes in the simple page
    json: tuple[int, int]
    versions: tuple[str, ...]


class _Layout:
    """Where join puts each part's lines, one part after the other: in the simple page after the shell's head, in
    the JSON page after its head, with a comma before each part's entries but the first that has any. _tiles holds
    the recorded offsets to the same rule."""

    def __init__(self, head: bytes) -> None:
        self.at, self.json_at = len(head), len(_JSON_HEAD)  # where the next part goes in each page

    def place(self, anchors: int, entries: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The offsets of a part of ``anchors`` and ``entries`` bytes, placed after the others."""
        start = self.json_at + (1 if entries and self.json_at > len(_JSON_HEAD) else 0)
        simple, json = (self.at, self.at + anchors), (start, start + entries)
        self.at, self.json_at = simple[1], json[1]
        return simple, json


def join(pair: Pair, reuse: Reuse, key: str) -> Joined:
    """The pair's pages, each part taken from the last run's pages where ``reuse`` has them under ``key`` with the
    part's digest (and its other pages in place), else rendered. The pages are gathered as pieces (a kept part a
    view into the old page, no copy) and joined once: appending to a bytearray and copying it out cost 6.4 ms a
    5.9 MB page against 0.3 ms, and a +1 at 10,000 wheels joins 17 MB."""
    head, tail = lines.simple_shell(f"Links for {pair.project}")
    before, old = _before(pair, (head, tail), reuse.entry(key), reuse)
    views = (memoryview(old[0]), memoryview(old[1])) if old is not None else None
    simple: list[bytes | memoryview] = [head]
    json: list[bytes | memoryview] = [_JSON_HEAD]
    layout = _Layout(head)
    pages: dict[str, bytes] = {}
    kept_pages: list[str] = []
    versions: list[str] = []
    spans = []
    for part in pair.parts:
        kept = before.get(part.key)
        anchors: bytes | memoryview
        entries: bytes | memoryview
        if views is not None and kept is not None and kept.digest == part.digest and reuse.keep(part.pages):
            anchors, entries, shown = views[0][slice(*kept.simple)], views[1][slice(*kept.json)], kept.versions
            kept_pages += part.pages
        else:
            rendered = part.render()
            anchors, entries, shown = rendered.anchors.encode(), rendered.entries.encode(), rendered.versions
            pages.update(rendered.pages)
        end = layout.json_at
        (s0, s1), (j0, j1) = layout.place(len(anchors), len(entries))
        if j0 > end:  # the comma before the part's entries
            json.append(b",")
        spans.append((part, s0, s1, j0, j1, shown))
        simple.append(anchors)
        json.append(entries)
        versions += shown
    simple.append(tail)
    json.append(lines.json_tail(pair.project, versions))
    pages[pair.simple], pages[pair.json] = b"".join(simple), b"".join(json)
    digests = {path: hashlib.sha256(pages[path]).hexdigest() for path in (pair.simple, pair.json)}
    return Joined(pages, tuple(kept_pages), _entry(digests[pair.simple], digests[pair.json], spans), digests)


def _entry(
    simple: str, json: str, spans: list[tuple[Part, int, int, int, int, tuple[str, ...]]]
) -> tuple[str, tuple[str, ...]]:
    """The manifest's page group entry of a joined pair: (the sha256 of each page, one text per part: its key,
    digest, offsets in each page and versions, tab-separated: versions and keys hold no whitespace)."""
    parts = tuple(
        "\t".join([part.key, part.digest, str(s0), str(s1), str(j0), str(j1), " ".join(shown)])
        for part, s0, s1, j0, j1, shown in spans
    )
    return f"{simple} {json}", parts


def _before(
    pair: Pair, shell: tuple[bytes, bytes], entry: tuple[str, tuple[str, ...]] | None, reuse: Reuse
) -> tuple[dict[str, _Kept], tuple[Buffer, Buffer] | None]:
    """The last run's parts by key, with its pages' bytes (None where either is not the page it recorded)."""
    if entry is None:
        return {}, None
    digests = entry[0].split(" ")
    if len(digests) != 2:
        return {}, None
    simple, json = reuse.page(pair.simple, digests[0]), reuse.page(pair.json, digests[1])
    if simple is None or json is None:
        return {}, None
    recorded = [kept for kept in map(_parsed, entry[1]) if kept is not None]
    if len(recorded) != len(entry[1]) or not _tiles(pair.project, shell, [kept for _, kept in recorded], simple, json):
        return {}, None
    return dict(recorded), (simple, json)


def _parsed(text: str) -> tuple[str, _Kept] | None:
    """One part's text of the entry: key, digest, offsets in each page, versions (None: not that)."""
    fields = text.split("\t")
    if len(fields) != 7 or not all(field.isdigit() for field in fields[2:6]):
        return None
    s0, s1, j0, j1 = (int(field) for field in fields[2:6])
    return fields[0], _Kept(fields[1], (s0, s1), (j0, j1), tuple(fields[6].split(" ")) if fields[6] else ())


def _tiles(project: str, shell: tuple[bytes, bytes], parts: list[_Kept], simple: Buffer, json: Buffer) -> bool:
    """Whether the recorded parts cover each page exactly, in order, between the shell join writes: offsets moved
    to other values inside the pages would otherwise cut another part's lines."""
    head, tail = shell
    layout = _Layout(head)
    for part in parts:
        anchors, entries = part.simple[1] - part.simple[0], part.json[1] - part.json[0]
        if anchors < 0 or entries < 0 or layout.place(anchors, entries) != (part.simple, part.json):
            return False
    json_tail = lines.json_tail(project, [version for part in parts for version in part.versions])
    return (
        simple[: len(head)] == head
        and simple[layout.at :] == tail
        and json[: len(_JSON_HEAD)] == _JSON_HEAD
        and json[layout.json_at :] == json_tail
    )
