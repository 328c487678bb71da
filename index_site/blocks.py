"""The site's files placed from dist/ and variant/, in blocks the manifest records whole: a label's wheels (each in
``whl/<label>/`` with its .metadata) and a label's twins (each in ``variant/files/`` with its null, their .metadata
and its wheelwright.json). Each block carries the digest of the files it was placed from: their names, sha256s and
full identities (inode, size, mtime, ctime) as the catalog holds them, and the code that places them.

A run whose catalog gives a block the digest it was recorded with, while the block's folder is settled (no entry
added, taken out or renamed since the last complete run: quiet.Settled), takes the block's records as they are,
undecoded: every source file still has the identity it had when its files were placed, so they are still the
files it placed. A file of a block is held to its record one by one again only where its folder moved or its
block's digest did.

The pages of a page group that renders its pages itself (render.PageGroup without parts or a join: a variant's
pages, a release's file of wheels.json, a group of the variant channel's guards, ...) are a block too, keyed by the
group and with the group's digest: render_changed takes it whole where the group's digest holds and all its
folders are settled. At 10,000 wheels with twins some 3,000 blocks hold all but 1,700 of the manifest's 87,000
records; one added wheel writes five of them (its label's wheels and twins, its variant's pages, its release's
file of wheels.json, its guards: some 1,300 records) and a dozen records outside them."""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
from array import array
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from builder.core.hashing import FileIdentity
from index_site import layout
from index_site.records import Block, FileRecord
from index_site.state import release_of
from index_site.summaries import Summaries, text_map

if TYPE_CHECKING:
    from index_site.variants import VariantWheel
    from index_site.wheels import WheelFile

WHEELS = "wheels:"  # + label
TWINS = "twins:"  # + label
PAGES = "group:"  # + the page group's key
_TWIN_FOLDER = f"{layout.VARIANTS}/files"  # variants.file_path's folder


def folder(key: str) -> str:
    """The site folder that holds the files of block ``key``."""
    if key.startswith(WHEELS):
        return f"whl/{key.removeprefix(WHEELS)}"
    return _TWIN_FOLDER


def expected(
    wheels: Iterable[WheelFile],
    twins: Iterable[VariantWheel],
    identities: Mapping[str, Sequence[int]],
    code: str,
    summaries: Summaries | None = None,
) -> dict[str, str]:
    """The digest every block should have now: {key: digest} (``identities``: each file's, by filename, as the
    catalog checked it or this run's links left it; a twin not there carries its own). A block's digest is made of
    its releases' parts (the digest of one release's sources of the block), each of the sources taken column by
    column (names, sha256s, identities), not as a line of text each: a quarter less CPU. ``summaries``, where the
    identities are the catalog's (its rows'), keeps each release's parts for the next run, which takes them while
    the release's rows are the same: no source of such a release is looked at."""
    wheels, twins = list(wheels), list(twins)
    if summaries is None:
        parts: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for key, of_release in _release_parts(WHEELS, wheels, identities).items():
            parts[key] += of_release.items()
        for key, of_release in _release_parts(TWINS, twins, identities).items():
            parts[key] += of_release.items()
        return {key: _combined(code, of_block) for key, of_block in parts.items()}
    parts = defaultdict(list)
    for prefix, table, sources, names in ((WHEELS, "wheels", wheels, map(_FIRST, map(_FIRST, wheels))),
                                          (TWINS, "twins", twins, map(_TWIN_NAME, twins))):
        by_name = dict(zip(names, sources, strict=True))
        if not by_name:
            continue
        work = functools.partial(_parts_of, prefix, by_name=by_name, identities=identities)
        for release, of_release in summaries.by_release(table, table, work, text_map).items():
            for key, part in of_release.items():
                parts[prefix + key].append((release, part))
    return {key: _combined(code, of_block) for key, of_block in parts.items()}


def _parts_of(
    prefix: str, rows: Mapping[str, object], *, by_name: Mapping[str, Any], identities: Mapping[str, Sequence[int]]
) -> dict[str, str]:
    """One release's part of each block of ``prefix`` it has sources in: {label: part} (of its rows, the sources
    among ``by_name``, in the order of their names, as a catalog holds them)."""
    sources = [by_name[name] for name in sorted(rows) if name in by_name]
    found = _release_parts(prefix, sources, identities)
    return {key.removeprefix(prefix): part for key, of_release in found.items() for part in of_release.values()}


def _release_parts(
    prefix: str, sources: list[Any], identities: Mapping[str, Sequence[int]]
) -> dict[str, dict[str, str]]:
    """{block key: {release: its part}} of ``sources`` (WheelFiles where ``prefix`` is WHEELS, else twins, in the
    order of their names). They are grouped by the label, project and version their names give (taken in C), and a
    group's release worked out from its first name and its last: the same unless two spellings of one project's name
    hold its version (each name's release then)."""
    name_of = _WHEEL_NAME if prefix == WHEELS else _TWIN_NAME
    by_part: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for source, key in zip(sources, map(_WHEEL_PART if prefix == WHEELS else _TWIN_PART, sources), strict=True):
        by_part[key].append(source)
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)  # (label, release): sources, in their order
    for (label, _, _), of_part in by_part.items():
        release = release_of(name_of(of_part[0]))
        if release == release_of(name_of(of_part[-1])):  # in the order of names, a release's are neighbours
            groups[(label, release)] += of_part
            continue
        for source in of_part:
            groups[(label, release_of(name_of(source)))].append(source)
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for (label, release), of_part in groups.items():
        part = _digest(prefix, of_part, identities)
        if part:
            found[prefix + label][release] = part
    return found


def _combined(code: str, parts: list[tuple[str, str]]) -> str:
    """A block's digest: the code's and its releases' parts, in the releases' order."""
    shown = [code, *(f"{release} {part}" for release, part in sorted(parts))]
    return hashlib.sha256("\n".join(shown).encode()).hexdigest()


def _digest(key: str, sources: list[Any], identities: Mapping[str, Sequence[int]]) -> str:
    """The digest of one release's sources of a block: their names, sha256s, metadata's sha256s (and a twin's
    provenance's), and identities. A wheel without an identity (not placed from a file the catalog checked) is left
    out: its records stay out of any block ("": no source is left)."""
    if key.startswith(WHEELS):
        names = list(map(_FIRST, map(_FIRST, sources)))
        found: list[Any] = list(map(identities.get, names))
        if None in found:
            sources = [source for source, identity in zip(sources, found, strict=True) if identity is not None]
            if not sources:
                return ""
            names = list(map(_FIRST, map(_FIRST, sources)))
            found = [identity for identity in found if identity is not None]  # in the sources' order still
        digests = [*map(_WHEEL_SHA, sources), *map(_FIRST, map(_WHEEL_METADATA, sources))]
    else:
        names = list(map(_TWIN_NAME, sources))
        found = list(map(_TWIN_IDENTITY, sources))
        if not identities.keys().isdisjoint(names):  # what this run's links left
            found = [identities.get(name) or identity for name, identity in zip(names, found, strict=True)]
        digests = [*map(_TWIN_SHA, sources), *map(_TWIN_METADATA_SHA, sources), *map(_TWIN_PROVENANCE, sources)]
    digest = hashlib.sha256("\n".join([*names, *digests]).encode())
    try:
        digest.update(array("q", itertools.chain.from_iterable(found)).tobytes())
    except OverflowError:  # a number past 64 bits
        digest.update(repr([tuple(numbers) for numbers in found]).encode())
    return digest.hexdigest()


# The columns of WheelFile (name, sha256, size, metadata, ...) and VariantWheel taken by C, not a Python line each.
_FIRST = operator.itemgetter(0)  # a WheelFile's name, a WheelName's filename, a CoreMetadata's sha256
_WHEEL_SHA, _WHEEL_METADATA = operator.itemgetter(1), operator.itemgetter(3)
_TWIN_NAME, _TWIN_SHA = operator.attrgetter("filename"), operator.attrgetter("sha256")
_TWIN_IDENTITY = operator.attrgetter("identity")
_TWIN_METADATA_SHA, _TWIN_PROVENANCE = operator.attrgetter("metadata_sha256"), operator.attrgetter("provenance_sha256")
_WHEEL_PART = operator.attrgetter("name.label", "name.project", "name.public_version")
_TWIN_PART = operator.attrgetter("label", "project", "version")
_WHEEL_NAME = operator.attrgetter("name.filename")


def kept(recorded: Mapping[str, Block], now: Mapping[str, str], settled: frozenset[str]) -> dict[str, Block]:
    """The recorded blocks still right as they are: the same digest now, in a settled folder."""
    return {
        key: block
        for key, block in recorded.items()
        if now.get(key) == block.digest and not key.startswith(PAGES) and folder(key) in settled
    }


def unpacked(files: Mapping[str, FileRecord], recorded: Mapping[str, Block], keep: Mapping[str, Block]) -> dict[
    str, FileRecord
]:
    """The records of every file outside the kept blocks and the page blocks (render_changed decides those): ``files``
    (those in no block) and those of the other blocks, decoded."""
    records = dict(files)
    for found in decoded(recorded, keep, pages=False):
        records.update(found)
    return records


def pages_left(recorded: Mapping[str, Block], keep: Mapping[str, Block]) -> dict[str, FileRecord]:
    """The records of the page blocks render_changed did not take whole, decoded."""
    records: dict[str, FileRecord] = {}
    for found in decoded(recorded, keep, pages=True):
        records.update(found)
    return records


def decoded(
    recorded: Mapping[str, Block], keep: Mapping[str, Block], *, pages: bool
) -> Iterator[dict[str, FileRecord]]:
    """The records of each recorded block not in ``keep``: of the page blocks (``pages``), or of the others."""
    for key, block in recorded.items():
        if key not in keep and key.startswith(PAGES) == pages:
            yield block.records()


class Lookup(Mapping[str, FileRecord]):
    """The records a run that renders looks up by path: those unpacked, else those of a page block, decoded when
    one of its paths is first asked for (which block holds a path: the page groups' entries say)."""

    def __init__(
        self,
        records: Mapping[str, FileRecord],
        recorded: Mapping[str, Block],
        groups: Mapping[str, tuple[str, Sequence[str]]],
    ) -> None:
        self.records, self.recorded, self.groups = records, recorded, groups
        self._holder: dict[str, str] | None = None

    def __getitem__(self, path: str) -> FileRecord:
        record = self.records.get(path)
        if record is not None:
            return record
        if self._holder is None:  # built on the first miss: a run that takes every page block whole has none
            self._holder = {
                path: PAGES + key
                for key, (_, paths) in self.groups.items()
                if PAGES + key in self.recorded
                for path in paths
            }
        holder = self._holder.get(path)
        if holder is None:
            raise KeyError(path)
        return self.recorded[holder].records()[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)


def members(
    wheels: Iterable[WheelFile], placed: Iterable[tuple[str, str, VariantWheel]], extracted: Iterable[tuple[str, str]]
) -> dict[str, list[str]]:
    """The site paths of each block the run places anew: {key: paths}. ``placed``: (source, path, twin) of
    variants.placed; ``extracted``: (source, path) of the files taken out of those twins."""
    paths: dict[str, list[str]] = {}
    for wheel in wheels:
        label = wheel.name.label
        paths.setdefault(WHEELS + label, []).extend(
            (layout.wheel_path(label, wheel.filename), layout.metadata_path(label, wheel.filename))
        )
    label_of: dict[str, str] = {}
    for source, path, twin in placed:
        label_of[source] = twin.label
        paths.setdefault(TWINS + twin.label, []).append(path)
    for source, path in extracted:
        paths.setdefault(TWINS + label_of[source], []).append(path)
    return paths


def packed(
    records: dict[str, FileRecord], keep: Mapping[str, Block], fresh: Mapping[str, tuple[str, Sequence[str]]]
) -> dict[str, Block]:
    """Every block of the site as this run leaves it: the kept ones, and ``fresh`` ({key: (digest, paths)}) made
    from ``records``, which gives their records up (what remains there is in no block)."""
    blocks = dict(keep)
    for key, (digest, paths) in fresh.items():
        found = {path: records.pop(path) for path in paths if path in records}
        if found:
            blocks[key] = Block.of(digest, found)
    return blocks


def identities_after(
    identities: Mapping[str, FileIdentity], linked: Mapping[str, FileIdentity]
) -> Mapping[str, FileIdentity]:
    """Each source file's identity after this run's hard links moved their ctimes: what the next run's catalog
    holds, so what a block's digest is made from."""
    return {**identities, **linked} if linked else identities


@dataclass(frozen=True)
class Placing:
    """What a run places of the blocks: the blocks it keeps as they are, and the wheels and twins of the others,
    placed (or found in place) one by one, whose files make those blocks anew."""

    kept: Mapping[str, Block] = field(default_factory=dict)
    wheels: Sequence[WheelFile] = ()
    twins: Sequence[VariantWheel] = ()
    paths: Mapping[str, list[str]] = field(default_factory=dict)  # block key: the site paths of its files
    code: str = ""
    pages: Mapping[str, tuple[str, Sequence[str]]] = field(default_factory=dict)  # page block: (digest, paths)

    @property
    def count(self) -> int:
        """How many files the kept blocks hold."""
        return sum(block.count for block in self.kept.values())

    def packed(self, records: dict[str, FileRecord], identities: Mapping[str, Sequence[int]]) -> dict[str, Block]:
        """The site's blocks once placed (``identities``: of the sources, as this run's links left them), their
        records taken out of ``records``."""
        digests = expected(self.wheels, self.twins, identities, self.code) if self.paths else {}
        fresh = {key: (digests[key], paths) for key, paths in self.paths.items() if key in digests}
        return packed(records, self.kept, {**fresh, **self.pages})
