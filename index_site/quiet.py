"""What a complete index run leaves in the index state for the next run into the same site (leave), and the runs
that use it. A run that finds nothing moved (quiet_run) answers from one listing of dist/ and variant/ and one
lstat of each folder of the site: no row of the state read, no manifest read. A run that finds its inputs the same
(as_left) writes nothing. A run that renders takes the records of the files in folders no entry moved in
(settled_folders), without a stat per file.

The site is trusted by its folders' identities: an entry added, taken out or renamed moves its folder's mtime and
ctime, and no one can set a ctime back. A file the index wrote is not rewritten in place by anyone else; serve and
publish hold each one to its recorded identity anyway."""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import os
import stat
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from builder.core.hashing import FileIdentity
from builder.core.wheelhouse import Layout
from index_site import layout
from index_site.code import code_digest
from index_site.inputs import Listing, listing, read_ledger, variant_listing
from index_site.report import IndexReport, TwinReport, from_summary, summary
from index_site.state import ROW_IDENTITY, IndexState

if TYPE_CHECKING:  # a quiet run imports none of the judging, the records' blocks or the catalog
    from index_site.catalog import Judged
    from index_site.records import Block, FileRecord, Recorded


@dataclass(frozen=True)
class Settled:
    """The site's folders in which no entry was added, taken out or renamed since the last complete run recorded
    their identities (a folder's mtime and ctime move with each such change, and no one can set a ctime back),
    with the files the manifest records in each: a plan takes those records as they are, without a stat per file.
    A file the index wrote is not rewritten in place by anyone else; serve and publish hold each to its identity."""

    folders: frozenset[str] = frozenset()  # site paths: "whl/pt214cu130"
    files: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # folder: its files' site paths, inodes
    subfolders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # folder: its folders' names
    # The manifest's blocks taken as they are (blocks.kept): their files are not among ``files``.
    blocks: Mapping[str, Block] = field(default_factory=dict)

    def holds(self, path: str) -> bool:
        return path.rpartition("/")[0] in self.folders

    def with_records(self, *records: Mapping[str, FileRecord]) -> Settled:
        """These records' files among those of their folders, too, each with its recorded inode."""
        if not any(records):
            return self
        files: dict[str, dict[str, int]] = {}
        for found in records:
            for path, record in found.items():
                folder = path.rpartition("/")[0]
                listed = files.get(folder)
                if listed is None:
                    listed = files[folder] = dict(self.files.get(folder, {}))
                listed[path] = record[1][0]
        return dataclasses.replace(self, files={**self.files, **files})


def quiet_run(
    state: IndexState, wheelhouse: Layout, site: Path, base_url: str, twins: bool
) -> tuple[IndexReport | None, tuple[Listing, Listing] | None]:
    """The report of a run that finds nothing moved since the last complete run into ``site``: dist/ and variant/
    hold the files that run left, each with the identity it left (one stat each, and no row of the state read),
    the ledger shows what it showed, the state's rows, the code and the base URL are the same, and the site is as
    that run left it (as_left). None otherwise: the run judges every file by its row, as ever; with the listings of
    dist/ and variant/ where this has made them, for the run to use."""
    record = _site_record(state, site)
    kept = record.get("quiet")
    if not isinstance(kept, dict) or not isinstance(record.get("files"), int):
        return None, None
    found = listing(wheelhouse.dist), variant_listing(wheelhouse.variant)
    (dist, strays), (variant, refused) = found
    if strays or refused or kept.get("count") != len(dist) + len(variant):
        return None, found
    key = _quiet_key(state, _Files(dist), _Files(variant), read_ledger(wheelhouse.ledger, state), base_url, twins)
    if kept.get("key") != key or not _same_folders(site, record):
        return None, found
    try:
        return from_summary(site, kept["report"], record["files"]), found
    except (KeyError, TypeError, ValueError):
        return None, found


def kept_for_next(
    state: IndexState,
    judged: Judged,
    settled: TwinReport,
    linked: Mapping[str, FileIdentity],
    report: IndexReport,
    base_url: str,
    twins: bool,
) -> dict[str, Any] | None:
    """What this complete run leaves for the next one's quiet_run: the key of dist/ and variant/ as this run judged
    them (with the identities its hard links gave them), and the summary of its report. None where either folder
    holds a file the run could not judge: the next run judges again."""
    if judged.unjudged or settled.strays:
        return None
    dist, variant = _Files(judged.rows, ROW_IDENTITY, linked), _Files(settled.listing, moved=linked)
    key = _quiet_key(state, dist, variant, judged.ledger, base_url, twins)
    return {"key": key, "count": len(judged.rows) + len(settled.listing), "report": summary(report)}


class _Files(NamedTuple):
    """A folder's files for the quiet key: {name: what holds its identity}, how to take the identity from that,
    and the new identities this run's hard links gave some of them (any file's, of either folder)."""

    files: Mapping[str, Sequence[Any]]
    identity: Callable[[Sequence[Any]], Sequence[int]] | None = None
    moved: Mapping[str, Sequence[int]] = MappingProxyType({})


def _quiet_key(
    state: IndexState, dist: _Files, variant: _Files, ledger: str, base_url: str, twins: bool
) -> str:
    """One digest of the files of dist/ and variant/ with their identities, the ledger's digest, the state's
    generation, the base URL, the code that writes the site and whether twins are made. Each folder's names, then
    their identities as one array of 64-bit numbers: half the CPU of a line of text per file, or less."""
    head = [state.generation(), base_url, code_digest(), ledger, str(twins), str(len(dist.files))]
    digest = hashlib.sha256("\n".join(head).encode())
    for files, identity, moved in (dist, variant):
        names = sorted(files)  # dist/'s are listed in order: a pass
        found = list(map(files.__getitem__, names))
        identities = list(map(identity, found)) if identity else found
        for name, moved_to in moved.items():  # a few: each found by bisection, not a pass
            at = bisect.bisect_left(names, name)
            if at < len(names) and names[at] == name:
                identities[at] = moved_to
        digest.update(b"\0" + "\n".join(names).encode() + b"\0")
        try:
            digest.update(array("q", itertools.chain.from_iterable(identities)).tobytes())
        except OverflowError:  # a number past 64 bits
            digest.update(repr([tuple(numbers) for numbers in identities]).encode())
    return digest.hexdigest()


def inputs_digest(state: IndexState, catalog: Judged, base_url: str, twins: bool) -> str:
    """A digest of everything the site is made from: the catalogue's rows (the state's generation), the ledger's
    failures and GPU archs (inputs.ledger_digest), the base URL, the code that writes the site and whether the
    twin step checks the twins (without it none is published)."""
    parts = [state.generation(), base_url, code_digest(), catalog.ledger, str(twins)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _site_record(state: IndexState, site: Path) -> dict[str, Any]:
    """What the last complete run into ``site`` recorded of it (leave), or {}."""
    try:
        record = json.loads(state.meta().get(f"site:{os.path.abspath(site)}") or "{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def as_left(state: IndexState, site: Path, inputs: str) -> int | None:
    """Whether the site is as the last complete run into it left it, for these very inputs: its manifest the file
    that run wrote, and no entry of any of its folders added, taken out or renamed since (a folder's mtime and
    ctime move with each; nobody can set a ctime back). A file the index wrote there is not written again by
    anyone else: serve and publish hold each one to its recorded identity anyway. Its file count, else None."""
    record = _site_record(state, site)
    if record.get("inputs") != inputs or not _same_folders(site, record):
        return None
    files = record.get("files")
    return files if isinstance(files, int) else None


def _same_folders(site: Path, record: Mapping[str, Any]) -> bool:
    """Whether the manifest and every folder the record names still have their identities (a folder added shows as
    its parent's change; nothing is listed)."""
    folders = record.get("folders")
    return isinstance(folders, dict) and all(_same_identity(site, path, identity) for path, identity in folders.items())


def _same_identity(site: Path, path: str, identity: object) -> bool:
    """Whether ``path`` (in the site) has ``identity``: [inode, mtime, ctime], or None for absent."""
    try:
        status = os.lstat(os.path.join(site, path))
    except FileNotFoundError:
        return identity is None
    except OSError:
        return False
    return identity == [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]


def settled_folders(
    site: Path, state: IndexState, recorded: Recorded, expected: Mapping[str, str] | None = None
) -> Settled:
    """The folders the last complete run recorded that still have its identities, with their recorded files, and
    the recorded blocks still right (``expected``: the digest of each block now, blocks.expected); none where the
    manifest is no longer the file that run wrote."""
    folders = _site_record(state, site).get("folders")
    if not isinstance(folders, dict) or not _same_identity(site, layout.SITE_MARKER, folders.get(layout.SITE_MARKER)):
        return Settled()
    held = {
        path
        for path, identity in folders.items()
        if identity is not None and path != layout.SITE_MARKER and _same_identity(site, path, identity)
    }
    # a folder reached through one that moved is not the one recorded there (a folder replaced by a symlink to a copy
    # of it has its children's identities): settled only with every folder above it
    still = frozenset(path for path in held if all(map(held.__contains__, folders_above(path))))
    from index_site import blocks  # a run that renders: the quiet run returns before

    kept = blocks.kept(recorded.blocks, expected or {}, still)
    unkept = blocks.decoded(recorded.blocks, kept, pages=False)  # render_changed decides the page blocks
    subfolders: dict[str, list[str]] = {}
    for path in folders:
        parent, _, name = path.rpartition("/")
        if parent:
            subfolders.setdefault(parent, []).append(name)
    named = {folder: tuple(names) for folder, names in subfolders.items()}
    # each record's inode, by folder: one pass over the records not kept in a block
    return Settled(still, {}, named, kept).with_records(recorded.files, *unkept)


def folders_above(path: str) -> Iterator[str]:
    """The folders ``path`` is in, from the top: "whl", "whl/pt214cu130" of "whl/pt214cu130/simple"."""
    at = path.find("/")
    while at >= 0:
        yield path[:at]
        at = path.find("/", at + 1)


def unsettled_folders(state: IndexState, site: Path, settled: Settled) -> list[str] | None:
    """The folders the last complete run into ``site`` recorded that are not ``settled`` now (moved, gone, or
    standing under one that did), from the top; None where no run recorded any."""
    folders = _site_record(state, site).get("folders")
    if not isinstance(folders, dict):
        return None
    files = {layout.SITE_MARKER, *layout.FILES_AT_TOP}
    return sorted(path for path in folders if path not in files and path not in settled.folders)


def leave(state: IndexState, site: Path, inputs: str, files: int, quiet: Mapping[str, Any] | None) -> None:
    """Record how this complete run left ``site`` (its ``files``), for the next run's as_left and quiet_run."""
    record: dict[str, Any] = {"inputs": inputs, "folders": _folders(site, _left_folders(state, site)), "files": files}
    if quiet is not None:
        record["quiet"] = quiet
    state.write(meta={f"site:{os.path.abspath(site)}": json.dumps(record, sort_keys=True)})


def _left_folders(state: IndexState, site: Path) -> dict[str, tuple[list[int], list[str]]]:
    """The folders the last complete run recorded: {path: (identity, names of its folders)}."""
    folders = _site_record(state, site).get("folders")
    if not isinstance(folders, dict):
        return {}
    children: dict[str, list[str]] = {path: [] for path in folders}
    for path in folders:
        parent, _, name = path.rpartition("/")
        if parent in children:
            children[parent].append(name)
    return {path: (identity, children[path]) for path, identity in folders.items() if isinstance(identity, list)}


def _folders(site: Path, left: Mapping[str, tuple[list[int], list[str]]]) -> dict[str, list[int] | None]:
    """The identity (inode, mtime, ctime) of the manifest, of each managed name at the top (None: absent) and of
    every folder under them: one lstat each, a few hundred for a farm's site. A folder that still has the identity
    ``left`` records has the folders it records (an entry added, taken out or renamed moves its mtime and ctime),
    so only the others are listed (a variant's folder holds thousands of files)."""
    found: dict[str, list[int] | None] = {}
    for name in (layout.SITE_MARKER, *layout.MANAGED):
        try:
            status = os.lstat(site / name)
        except FileNotFoundError:
            found[name] = None
            continue
        found[name] = [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]
        if stat.S_ISDIR(status.st_mode):
            _subfolders(os.path.join(site, name), name, status.st_nlink, found, left)
    return found


def _subfolders(
    folder: str,
    prefix: str,
    links: int,
    found: dict[str, list[int] | None],
    left: Mapping[str, tuple[list[int], list[str]]],
) -> None:
    for name, status in _subfolder_stats(folder, prefix, links, found, left).items():
        path = f"{prefix}/{name}"
        found[path] = [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]
        _subfolders(f"{folder}/{name}", path, status.st_nlink, found, left)


def _subfolder_stats(
    folder: str,
    prefix: str,
    links: int,
    found: Mapping[str, list[int] | None],
    left: Mapping[str, tuple[list[int], list[str]]],
) -> dict[str, os.stat_result]:
    """``folder``'s folders, each with its lstat: those ``left`` records while the folder keeps its identity, or
    while its link count says it holds as many folders as recorded and each recorded one is still a folder (ext4 and
    XFS count a folder's subfolders in its links; a filesystem that gives folders one link has it listed). So a
    folder this run only added files to is not listed again: variant/files holds some 65,000."""
    recorded = left.get(prefix)
    stats: dict[str, os.stat_result] = {}
    if recorded is not None:
        stats = _folder_stats(folder, recorded[1])
        if recorded[0] == found[prefix] or (links == 2 + len(recorded[1]) and len(stats) == len(recorded[1])):
            return stats
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return {}
    fresh = _folder_stats(folder, [name for name in names if name not in stats])  # the recorded ones are lstat'd
    return {name: stats.get(name) or fresh[name] for name in names if name in stats or name in fresh}


def _folder_stats(folder: str, names: Iterable[str]) -> dict[str, os.stat_result]:
    """The lstat of each of ``names`` in ``folder`` that is (still) a folder."""
    stats = {}
    for name in names:
        try:
            status = os.lstat(f"{folder}/{name}")
        except OSError:
            continue
        if stat.S_ISDIR(status.st_mode):
            stats[name] = status
    return stats
