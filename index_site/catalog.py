"""The catalog: every wheel in dist/ with its digest and core metadata, plus the failed builds from the ledger.

Digests come from the build ledger for wheels it built and from the index's own cache table (``index_wheels`` in
the same SQLite file) for everything else, each reused only while the file's full identity (inode, size, mtime,
ctime) is the one recorded with it; anything else is hashed again. Only regular files are catalogued: a symlink,
FIFO or device named like a wheel is skipped with a warning, never followed or read."""

from __future__ import annotations

import functools
import logging
import os
import re
import sqlite3
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Self

from builder.core.hashing import FileIdentity, holds_identity, open_regular, sha256_stream
from builder.core.ledger import Ledger, LedgerEntry, lock_timeout, sqlite_errors
from index_site.memo import Memo
from index_site.wheels import (
    CoreMetadata,
    GpuArchs,
    RejectedWheel,
    WheelFile,
    WheelName,
    check_core_metadata,
    check_variant,
    parse_gpu_archs,
    parse_wheel_name,
    read_core_metadata,
)

log = logging.getLogger(__name__)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# The table of an older release, keyed by (size, mtime) only: dropped, so nothing is trusted on that alone.
CACHE_SCHEMA = """
DROP TABLE IF EXISTS index_files;
CREATE TABLE IF NOT EXISTS index_wheels (
    filename        TEXT PRIMARY KEY,
    inode           INTEGER NOT NULL,  -- with size, mtime_ns and ctime_ns: the file's identity when hashed
    size            INTEGER NOT NULL,
    mtime_ns        INTEGER NOT NULL,
    ctime_ns        INTEGER NOT NULL,
    sha256          TEXT NOT NULL,
    metadata_sha256 TEXT NOT NULL,
    metadata_size   INTEGER NOT NULL,
    requires_python TEXT,
    summary         TEXT,
    upload_time     REAL NOT NULL   -- when these bytes were first indexed; stable, so pages do not churn
);
"""


@dataclass(frozen=True, kw_only=True)
class Rejection:
    filename: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ScanStats:
    hashed: int = 0  # read and hashed in full
    from_ledger: int = 0  # digest taken from the build ledger
    cached: int = 0  # unchanged since the last index run


@dataclass(frozen=True, kw_only=True)
class Catalog:
    wheels: tuple[WheelFile, ...]
    rejected: tuple[Rejection, ...]
    failures: tuple[LedgerEntry, ...]
    stats: ScanStats
    fresh_metadata: Mapping[str, bytes] = field(default_factory=dict)  # METADATA read this run, by wheel filename
    identities: Mapping[str, FileIdentity] = field(default_factory=dict)  # of each wheel when its hash held
    archs: Mapping[str, GpuArchs] = field(default_factory=dict)  # by wheel filename, where the ledger recorded them


@dataclass(frozen=True, kw_only=True)
class _Cached:
    wheel: WheelFile
    identity: FileIdentity


class HashCache:
    """Digests and metadata of wheels already indexed, keyed by filename and valid while the identity holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite_errors(path):
            self._db = sqlite3.connect(path, timeout=lock_timeout(), isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # no fsync per commit (WAL stays consistent; a power cut may lose the last commits): a lost row only
            # means a wheel is hashed again, and each +1 re-index commits twice (new digests, new identities)
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(CACHE_SCHEMA)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.close()

    def load(self, names: Collection[str]) -> tuple[dict[str, _Cached], set[str]]:
        """The entries of the rows of ``names``, and the filenames of every row (to drop those gone)."""
        cached, rows = {}, set()
        with sqlite_errors(self.path):
            for (filename,) in self._db.execute("SELECT filename FROM index_wheels"):
                rows.add(filename)
        cached = self.entries([filename for filename in rows if filename in names])
        return cached, rows

    def entries(self, filenames: list[str]) -> dict[str, _Cached]:
        """The entries of the rows of ``filenames`` that are well formed."""
        cached = {}
        with sqlite_errors(self.path):
            for start in range(0, len(filenames), _BATCH):
                batch = filenames[start : start + _BATCH]
                marks = ",".join("?" * len(batch))
                for row in self._db.execute(f"SELECT * FROM index_wheels WHERE filename IN ({marks})", batch):
                    entry = _row_to_cached(row)
                    if entry is not None:
                        cached[entry.wheel.filename] = entry
        return cached

    def update(self, changed: Iterable[_Cached], gone: Iterable[str]) -> None:
        """Write the entries hashed this run and drop the rows of files no longer catalogued, in one transaction."""
        self._write(
            ("DELETE FROM index_wheels WHERE filename = ?", [(name,) for name in gone]),
            (
                "INSERT OR REPLACE INTO index_wheels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [_cached_to_row(e) for e in changed],
            ),
        )

    def refresh(self, identities: Mapping[str, FileIdentity]) -> None:
        """Record new identities of unchanged bytes (placing a hard link changes the file's ctime)."""
        rows: list[tuple[object, ...]] = [(*identity, filename) for filename, identity in identities.items()]
        statement = "UPDATE index_wheels SET inode = ?, size = ?, mtime_ns = ?, ctime_ns = ? WHERE filename = ?"
        self._write((statement, rows))

    def _write(self, *statements: tuple[str, list[tuple[object, ...]]]) -> None:
        if not any(rows for _, rows in statements):
            return
        with sqlite_errors(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for statement, rows in statements:
                    self._db.executemany(statement, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")


# {dist folder: (the identity of its hash cache's file, {filename: entry})}: what this process catalogued in each
# folder last, each entry with the identity the file had (its row's, since this process wrote or read that row).
# Where a file still has that identity its bytes are the ones described, so the next scan of the folder reads no
# row for it: the 10,000 rows of a re-index are read only by a process's first scan of a folder, or when the cache
# file is no longer as this process left it (written by another, or deleted and made again: its rows are read).
_KNOWN: Memo[str, tuple[tuple[int, ...] | None, dict[str, _Cached]]] = Memo(8)  # a test run scans hundreds
_BATCH = 500  # parameters per query, well under SQLite's limit


def scan(dist: Path, ledger_path: Path) -> Catalog:
    """Catalogue ``dist`` using the ledger and the hash cache at ``ledger_path``; update the cache."""
    names, rejected = _parse_names(dist)
    folder = os.path.abspath(dist)
    remembered = _KNOWN.pop(folder, None)  # out while the cache may change: back once it holds what it says
    with Ledger(ledger_path) as ledger:
        built = ledger.wheel_hashes()
        failures = tuple(ledger.failures())
        recorded_archs = ledger.wheel_archs()
    cache_file = _cache_file(ledger_path)
    known = remembered[1] if remembered is not None and cache_file is not None and remembered[0] == cache_file else None
    with HashCache(ledger_path) as cache:
        if known is None:
            previous, rows = cache.load(names)
        else:
            previous, rows = known, set(known)  # every entry this process knows has its row
        entries, stats, more_rejected, fresh = _catalogue(
            dist, names, built, previous, None if known is None else cache
        )
        catalogued = {entry.wheel.filename: entry for entry in entries}
        changed = [e for e in entries if previous.get(e.wheel.filename) is not e]
        cache.update(changed, rows - catalogued.keys())
    _KNOWN.keep(folder, (_cache_file(ledger_path), catalogued))  # as this process leaves it
    wheels = tuple(entry.wheel for entry in entries)
    log.info("catalogued %d wheels (%s); rejected %d", len(wheels), stats, len(rejected) + len(more_rejected))
    return Catalog(
        wheels=wheels,
        rejected=tuple(rejected + more_rejected),
        failures=failures,
        stats=stats,
        fresh_metadata=fresh,
        identities={entry.wheel.filename: entry.identity for entry in entries},
        archs=_archs(catalogued, recorded_archs),
    )


def refresh_identities(ledger_path: Path, identities: Mapping[str, FileIdentity], dist: Path | None = None) -> None:
    """See HashCache.refresh; the entries this process keeps for ``dist`` take the new identities too."""
    with HashCache(ledger_path) as cache:
        cache.refresh(identities)
    folder = os.path.abspath(dist) if dist is not None else None
    remembered = _KNOWN.get(folder) if folder is not None else None
    if folder is None or remembered is None:
        return
    known = remembered[1]
    _KNOWN[folder] = (_cache_file(ledger_path), known)  # as this process leaves it
    for filename, identity in identities.items():
        entry = known.get(filename)
        # a hard link moves the ctime alone: the same inode, size and mtime are the same bytes
        if entry is not None and entry.identity[:3] == identity[:3]:
            known[filename] = _Cached(wheel=entry.wheel, identity=identity)


def _cache_file(path: Path) -> tuple[int, ...] | None:
    """The cache file's device, inode, size, mtime and ctime (SQLite writes it when a connection closes)."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def _archs(wheels: Collection[str], recorded: Mapping[str, tuple[str, str, str | None]]) -> dict[str, GpuArchs]:
    """The GPU archs of the wheels named in ``wheels`` whose ledger row holds a readable record of them (the rows
    walked, not the wheels: a farm's ledger records a few hundred, dist/ may hold 10,000 wheels it did not build)."""
    archs = {}
    for filename, raw in recorded.items():
        parsed = parse_gpu_archs(*raw) if filename in wheels else None
        if parsed is not None:
            archs[filename] = parsed
    return archs


def _parse_names(dist: Path) -> tuple[dict[str, WheelName], list[Rejection]]:
    names: dict[str, WheelName] = {}
    rejected = []
    wheels = {entry.name: entry for entry in os.scandir(dist) if entry.name.endswith(".whl")} if dist.is_dir() else {}
    for filename in sorted(wheels):  # names, not entries by a key: 10,000 of them on every run
        entry = wheels[filename]
        if entry.is_file(follow_symlinks=False):
            name, reason = _checked_name(entry.name)
        else:
            name, reason = None, f"{entry.name}: {_not_regular(entry)}, not a wheel file; skipped"
        if name is not None:
            names[entry.name] = name
        else:
            log.info("not indexed: %s", reason)
            rejected.append(Rejection(filename=entry.name, reason=reason))
    return names, rejected


@functools.lru_cache(maxsize=1 << 17)
def _checked_name(filename: str) -> tuple[WheelName | None, str]:
    """The parsed name of a wheel, or None and why it is refused: a pure function of the filename (and of the
    torch facts, fixed for a process), so a long-lived process re-indexing the same 10,000 names parses each once."""
    try:
        name = parse_wheel_name(filename)
        check_variant(name)
    except RejectedWheel as error:
        return None, str(error)
    return name, ""


def _not_regular(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "a symbolic link (never followed)"
    return "a folder" if entry.is_dir(follow_symlinks=False) else "a special file (FIFO, socket or device)"


def _catalogue(
    dist: Path,
    names: Mapping[str, WheelName],
    built: Mapping[str, tuple[str, FileIdentity]],
    previous: Mapping[str, _Cached],
    cache: HashCache | None = None,
) -> tuple[list[_Cached], ScanStats, list[Rejection], dict[str, bytes]]:
    """Each file's entry: ``previous``'s while the file has its identity, else its row's (read here from
    ``cache`` when given: ``previous`` is then this process's own entries, not the rows) or else hashed."""
    entries: list[_Cached | None] = []
    misses: list[tuple[int, str]] = []  # (place in entries, filename)
    folder = os.fspath(dist) + "/"
    for filename in names:
        old = previous.get(filename)
        if old is not None and holds_identity(folder + filename, old.identity):  # one lstat per wheel every run
            entries.append(old)
            continue
        misses.append((len(entries), filename))
        entries.append(None)
    rows = cache.entries([filename for _, filename in misses]) if cache is not None and misses else {}
    rejected, fresh = [], {}
    counts = {"hashed": 0, "from_ledger": 0, "cached": len(entries) - len(misses)}
    for place, filename in misses:
        try:
            entry, source, data = _index_one(
                dist / filename, names[filename], built.get(filename), rows.get(filename) or previous.get(filename)
            )
        except (RejectedWheel, OSError) as error:
            reason = str(error) if isinstance(error, RejectedWheel) else f"{filename}: {error.strerror or error}"
            log.info("not indexed: %s", reason)
            rejected.append(Rejection(filename=filename, reason=reason))
            continue
        counts[source] += 1
        entries[place] = entry
        if data is not None:
            fresh[filename] = data
    return [entry for entry in entries if entry is not None], ScanStats(**counts), rejected, fresh


def _index_one(
    path: Path, name: WheelName, known: tuple[str, FileIdentity] | None, old: _Cached | None
) -> tuple[_Cached, str, bytes | None]:
    """The row's entry ``old`` if the file has its identity (a row this process did not know: another process
    wrote it), else METADATA and the digest read from one open descriptor, so both describe the same inode."""
    with os.fdopen(open_regular(path), "rb") as file:
        identity = FileIdentity.of(os.fstat(file.fileno()))
        if old is not None and old.identity == identity:
            return old, "cached", None
        data = read_core_metadata(file, name)
        metadata = check_core_metadata(data, name)
        if known is not None and known[1] == identity and _SHA256.match(known[0]):
            sha256, source = known[0], "from_ledger"
        else:
            file.seek(0)
            sha256, source = sha256_stream(file), "hashed"
            if FileIdentity.of(os.fstat(file.fileno())) != identity:
                raise RejectedWheel(f"{name.filename}: changed while it was being read; index again when it is written")
    first_seen = old.wheel.upload_time if old is not None and old.wheel.sha256 == sha256 else identity.mtime_ns / 1e9
    wheel = WheelFile(name=name, sha256=sha256, size=identity.size, metadata=metadata, upload_time=first_seen)
    return _Cached(wheel=wheel, identity=identity), source, data


@functools.lru_cache(maxsize=1 << 17)
def _row_to_cached(row: tuple[Any, ...]) -> _Cached | None:
    """The entry a row describes: a pure function of the row (the name is parsed from its filename), so a
    long-lived process re-indexing the same dist/ builds each entry once."""
    filename, inode, size, mtime_ns, ctime_ns, sha256, meta_sha, meta_size, requires_python, summary, upload_time = row
    name = _checked_name(filename)[0]
    if name is None or not isinstance(sha256, str) or not _SHA256.match(sha256):
        return None  # a damaged row is simply not trusted: the file is hashed again
    metadata = CoreMetadata(sha256=meta_sha, size=meta_size, requires_python=requires_python, summary=summary)
    wheel = WheelFile(name=name, sha256=sha256, size=size, metadata=metadata, upload_time=upload_time)
    return _Cached(wheel=wheel, identity=FileIdentity(inode, size, mtime_ns, ctime_ns))


def _cached_to_row(entry: _Cached) -> tuple[object, ...]:
    wheel, metadata = entry.wheel, entry.wheel.metadata
    return (
        wheel.filename,
        *entry.identity,
        wheel.sha256,
        metadata.sha256,
        metadata.size,
        metadata.requires_python,
        metadata.summary,
        wheel.upload_time,
    )
