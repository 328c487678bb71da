"""The site's manifest (layout.SITE_MARKER): what the index wrote into the site. Each file's sha256 with its full
identity (inode, size, mtime, ctime), trusted only while that identity holds; the page groups with their digests;
the base URL the site was indexed for. serve and publish read it to hold every file they send to its record.

It is one JSON document on the first line, written whole, then change lines appended after it: one added wheel
changes a few hundred records of 87,000, some 100 kB where the document is 21 MB. A reader applies the lines in
order; a torn last line (a run killed while appending) is dropped, and the next write rewrites the file whole.

The files placed from dist/ and variant/ are recorded in blocks (blocks.py), each with the digest of its sources:
a run takes a block it need not change as it was read, without decoding it, and writes it back so."""

from __future__ import annotations

import errno
import json
import mmap
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, NamedTuple

from builder.core.errors import ConfigError
from builder.core.files import write_atomic
from builder.core.hashing import FileIdentity, NotARegularFile, identity_if_regular, open_regular
from index_site import layout

Buffer = bytes | mmap.mmap  # a file's bytes, read or mapped (``mapped``)


class FileRecord(NamedTuple):
    """What the manifest remembers of a site file, valid while its identity holds."""

    sha256: str
    identity: FileIdentity

    @property
    def size(self) -> int:
        return self.identity.size


def load_manifest(site: Path) -> dict[str, FileRecord]:
    """What the last index run wrote into ``site``: {site path: FileRecord}, every block's records included."""
    document = _read_marker(site)
    records = _records(document.get("files"))
    for block in _blocks(document).values():
        records.update(block.records())
    return records


def _records(files: object) -> dict[str, FileRecord]:
    # [sha256, inode, size, mtime_ns, ctime_ns]; an older manifest's [sha256, size, mtime_ns] is not trusted.
    # Damaged numbers need no check here: they never equal a real file's, so the file is verified again.
    # tuple.__new__ builds the named tuples without their per-call checks: two per file of the site, every run.
    new = tuple.__new__
    return {
        path: new(FileRecord, (raw[0], new(FileIdentity, raw[1:])))
        for path, raw in (files.items() if isinstance(files, dict) else ())
        if type(raw) in _ENTRY and len(raw) == 5 and type(raw[0]) is str
    }


_ENTRY = (tuple, list)  # as the typed decoder or a change line gives it


class Block:
    """One block of the manifest (blocks.py): the digest of its sources, how many files it holds, and their
    entries, decoded only when asked for: a block taken as it is goes back into the manifest as it was read."""

    __slots__ = ("_decoded", "_entries", "count", "digest")

    def __init__(self, digest: str, count: int, entries: object) -> None:
        self.digest, self.count, self._entries = digest, count, entries
        self._decoded: dict[str, FileRecord] | None = None

    @classmethod
    def of(cls, digest: str, records: Mapping[str, FileRecord]) -> Block:
        block = cls(digest, len(records), {path: (record[0], *record[1]) for path, record in sorted(records.items())})
        block._decoded = dict(records)
        return block

    def records(self) -> dict[str, FileRecord]:
        """Its files' records; a damaged entry is left out (its file is verified again)."""
        if self._decoded is None:
            entries = self._entries
            if not isinstance(entries, dict):
                from index_site import codec

                entries = codec.decode_entries(entries)
            self._decoded = _records(entries)
        return self._decoded

    def __eq__(self, other: object) -> bool:
        """The same digest and records (a block made again of the same files equals the one read)."""
        if self is other:
            return True
        if not isinstance(other, Block):
            return NotImplemented
        return self.digest == other.digest and self.count == other.count and self.records() == other.records()

    __hash__ = None  # type: ignore[assignment]

    def entry(self) -> tuple[str, int, object]:
        """As the manifest writes it."""
        return (self.digest, self.count, self._entries)


def _blocks(document: Mapping[str, Any]) -> dict[str, Block]:
    found = document.get("blocks")
    return {
        key: Block(raw[0], raw[1], raw[2])
        for key, raw in (found.items() if isinstance(found, dict) else ())
        if isinstance(raw, _ENTRY) and len(raw) == 3 and isinstance(raw[0], str) and type(raw[1]) is int
    }


def load_groups(site: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The page groups of the last run: {key: (digest, site paths)} (see render.PageGroup)."""
    return _groups(_read_marker(site))


def _groups(document: Mapping[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    groups = {}
    found = document.get("groups")
    for key, raw in found.items() if isinstance(found, dict) else ():
        if isinstance(raw, _ENTRY) and len(raw) == 2 and isinstance(raw[0], str) and isinstance(raw[1], _ENTRY):
            paths = raw[1]  # a tuple only from the typed decoder, which checked that each is text
            groups[key] = (raw[0], paths if type(paths) is tuple else tuple(map(str, paths)))
    return groups


def site_base_url(site: Path) -> str | None:
    """The public URL the site was indexed for (its landing page's install commands point there)."""
    base_url = _read_marker(site).get("base_url")
    return base_url if isinstance(base_url, str) else None


def _read_marker(site: Path) -> dict[str, Any]:
    return _read_marker_state(site)[0]


def _read_marker_state(site: Path) -> tuple[dict[str, Any], int | None]:
    """The manifest's document with its change lines applied, and the bytes of those lines (None where the last one
    is torn or damaged: a run killed while appending; the next write then rewrites the file whole)."""
    marker = site / layout.SITE_MARKER
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ValueError("not a regular file")
            data = mapped(file, _MAX_MANIFEST_BYTES + 1)
            newline = data.find(b"\n")
            end = len(data) if newline < 0 else newline  # the document is the first line
            document = _decoded(memoryview(data)[:end])
            changes = data[end + 1 :]
    except FileNotFoundError:
        return {}, 0
    except (OSError, ValueError, RecursionError) as error:
        raise ConfigError(f"{marker}: unreadable ({str(error)[:200]})", tip="delete it and index again") from None
    if not isinstance(document, dict) or document.get("generator") != "wheelwright":
        raise ConfigError(f"{marker}: not a wheelwright site manifest", tip="delete it and index again")
    applied = _apply_changes(document, changes)
    return document, applied if newline >= 0 else None  # a line appended to an unended document would join it


def _decoded(first: memoryview) -> object:
    """The manifest's first line, decoded: typed where it is as the index writes it (codec), else (an older or
    damaged one) as the standard library decodes any JSON, for _records and _groups to drop what they cannot
    trust."""
    from index_site import codec  # msgspec: only for a run that reads the manifest

    typed = codec.decode(first)
    if typed is not None:
        return typed
    # decoded as json.loads decodes bytes, from a view: no copy of the first line's 20 MB
    return json.loads(str(first, json.detect_encoding(bytes(first[:4])), "surrogatepass"))


def _apply_changes(document: dict[str, Any], changes: bytes) -> int | None:
    """Apply the manifest's change lines to its document, in order, up to the first that is torn or not one: its
    records and groups are then lost, which costs only work (a file without its record is verified again, a group
    without its entry is rendered again), never trust. Returns the bytes applied, or None when some were not."""
    from index_site import codec

    applied = 0
    names = ("files", "groups", "blocks")
    targets = tuple(document.setdefault(name, {}) for name in names)
    for line in changes.splitlines(keepends=True):
        change = codec.decode_line(line) if line.endswith(b"\n") else None
        parts = [change.get(name, {}) for name in names] if isinstance(change, dict) else []
        if not parts or not all(isinstance(part, dict) for part in (*parts, *targets)):
            return None
        for target, part in zip(targets, parts, strict=True):
            for key, value in part.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        applied += len(line)
    return applied


_MAX_MANIFEST_BYTES = 1 << 28  # ~2 million files; a bigger one is not ours


class Recorded(NamedTuple):
    """What a site's manifest says (its files' records, its page groups, the base URL it was indexed for), and
    where its file stood when read: its identity, the size of its document and of the change lines after it
    (None: the file must be rewritten whole before anything is appended)."""

    files: dict[str, FileRecord]  # those in no block
    groups: dict[str, tuple[str, tuple[str, ...]]]
    base_url: str | None
    marker: FileIdentity | None = None
    size: int = 0
    changes: int | None = None
    blocks: Mapping[str, Block] = MappingProxyType({})


def recorded_manifest(site: Path) -> Recorded:
    """The manifest as the run starts; the identity is taken before reading, so a change during the read shows."""
    marker = os.path.abspath(site / layout.SITE_MARKER)
    before = identity_if_regular(marker)
    document, changes = _read_marker_state(site)
    size = before.size - (changes or 0) if before is not None else 0
    files, groups, blocks = _records(document.get("files")), _groups(document), _blocks(document)
    return Recorded(files, groups, document.get("base_url"), before, size, changes, blocks)


def write_manifest(
    site: Path,
    records: Mapping[str, FileRecord],
    base_url: str,
    groups: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
    *,
    compare: bool = True,
    since: Recorded | None = None,
    blocks: Mapping[str, Block] | None = None,
) -> None:
    """Write the manifest (``records``: the files in none of ``blocks``): as one line of changes appended to the
    file when it is still the one read as ``since`` and the lines appended since it was written whole stay under
    an eighth of it (one added wheel changes a few hundred records of 87,000: some 100 kB, where the whole file is
    21 MB), else whole."""
    recorded = Recorded(dict(records), dict(groups or {}), base_url, blocks=dict(blocks or {}))
    if since is not None and _append_changes(site, since, recorded):
        return
    document = {
        "generator": "wheelwright",
        "base_url": base_url,
        "files": {path: (records[path][0], *records[path][1]) for path in sorted(records)},
        "groups": dict(sorted((groups or {}).items())),
        "blocks": {key: block.entry() for key, block in sorted(recorded.blocks.items())},
    }
    from index_site import codec

    content = codec.encode(document) + b"\n"
    if not compare or current_bytes(site / layout.SITE_MARKER) != content:
        write_atomic(site / layout.SITE_MARKER, content)


def _append_changes(site: Path, since: Recorded, recorded: Recorded) -> bool:
    """Append what differs from ``since`` to the marker, if it still has the identity it had when read as
    ``since`` and there is room; False where the manifest must be written whole instead."""
    if since.marker is None or since.changes is None or since.base_url != recorded.base_url:
        return False
    room = since.size // _CHANGES_FRACTION - since.changes
    line = _change_line(since, recorded, room)
    if line is None or len(line) > room:
        return False
    marker = os.path.abspath(site / layout.SITE_MARKER)
    fd = os.open(marker, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if _identity_of(os.fstat(fd)) != since.marker:  # rewritten behind this run
            return False
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return True


_CHANGES_FRACTION = 8  # change lines may grow to the document's size over this, then it is written whole


_MIN_ENTRY_BYTES = 80  # a record's entry at least: its sha256 in hex and four numbers


def _change_line(since: Recorded, recorded: Recorded, room: int) -> bytes | None:
    """One JSON line of the records and groups that differ from ``since`` (null: gone), in key order; None as soon
    as the records that differ could not fit in ``room`` bytes (a cold index changes all of them)."""
    old = since.files
    files: dict[str, list[object] | None] = {}
    most = room // _MIN_ENTRY_BYTES
    for path, record in recorded.files.items():  # mostly the very records read: an identity check each
        before = old.get(path)
        if before is not record and before != record:
            files[path] = [record[0], *record[1]]
            if len(files) > most:
                return None
    files.update((path, None) for path in old.keys() - recorded.files.keys())
    groups: dict[str, list[object] | None] = {
        key: [digest, list(paths)]
        for key, (digest, paths) in recorded.groups.items()
        if since.groups.get(key) != (digest, paths)
    }
    groups.update((key, None) for key in since.groups.keys() - recorded.groups.keys())
    blocks: dict[str, tuple[str, int, object] | None] = {
        key: block.entry() for key, block in recorded.blocks.items() if since.blocks.get(key) != block
    }
    blocks.update((key, None) for key in since.blocks.keys() - recorded.blocks.keys())
    change = {"files": dict(sorted(files.items())), "groups": dict(sorted(groups.items())), "blocks": blocks}
    from index_site import codec

    return codec.encode(change) + b"\n"


def _identity_of(status: os.stat_result) -> FileIdentity | None:
    return FileIdentity.of(status) if stat.S_ISREG(status.st_mode) else None


def mapped(file: BinaryIO, limit: int) -> Buffer:
    """The first ``limit`` bytes of the open regular ``file``, mapped rather than read where the filesystem allows:
    the manifest (230 MB at 100,000 wheels) and a project's pages (tens of MB) are scanned and cut into views, not
    changed, and a copy would cost the process as many pages of its own, each faulted in (a +1 at 100,000 wheels:
    0.15 CPU-s to read the manifest, 0.01 to map it; docs/runs.md). The index replaces a file it rewrites (a new
    inode) and only appends to the manifest, so a mapping it holds stays whole; a file cut short behind a run
    while it reads would end it with SIGBUS, as the site's trust model allows (nothing but the index writes the
    site)."""
    size = min(os.fstat(file.fileno()).st_size, limit)
    if size:
        try:
            if _POPULATE:  # Linux: every page mapped at once, not one fault each
                return mmap.mmap(file.fileno(), size, flags=mmap.MAP_SHARED | _POPULATE, prot=mmap.PROT_READ)
            return mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
        except OSError:  # a filesystem that cannot map its files: read them
            pass
    return file.read(limit)


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


def current_mapped(path: Path) -> Buffer | None:
    """The bytes of the regular file at ``path`` as ``mapped`` gives them, or None (as ``current_bytes``)."""
    fd = _regular_fd(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as file:
        return mapped(file, _MAX_PAGE_BYTES)


_MAX_PAGE_BYTES = 1 << 31  # past any page the index writes


def current_bytes(path: Path) -> bytes | None:
    """The bytes of the regular file at ``path``, or None (missing, or a symlink or special file to replace: never
    followed or opened blocking)."""
    fd = _regular_fd(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as file:
        return file.read()


def _regular_fd(path: Path) -> int | None:
    """A read-only descriptor of the regular file at ``path``, or None where none stands there."""
    try:
        return open_regular(path)
    except (FileNotFoundError, NotADirectoryError, NotARegularFile):
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:  # a symlink
            return None
        raise
