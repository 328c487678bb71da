"""The catalog: every wheel in dist/ with its digest and core metadata, plus the failed builds from the ledger.

Digests come from the build ledger for wheels it built and from the index's own cache table (``index_files`` in
the same SQLite file) for everything else, so re-indexing hashes only the wheels it has not seen in that form."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.hashing import sha256_of as sha256_file
from builder.core.ledger import Ledger, LedgerEntry
from index_site.wheels import (
    CoreMetadata,
    GpuArchs,
    RejectedWheel,
    WheelFile,
    WheelName,
    check_core_metadata,
    parse_gpu_archs,
    parse_wheel_name,
    read_core_metadata,
)

log = logging.getLogger(__name__)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")

CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS index_files (
    filename        TEXT PRIMARY KEY,
    size            INTEGER NOT NULL,
    mtime_ns        INTEGER NOT NULL,
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
    archs: Mapping[str, GpuArchs] = field(default_factory=dict)  # by wheel filename, where the ledger recorded them


@dataclass(frozen=True, kw_only=True)
class _Cached:
    wheel: WheelFile
    mtime_ns: int


class HashCache:
    """Digests and metadata of wheels already indexed, keyed by filename and valid while size and mtime hold."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(CACHE_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def load(self, names: Mapping[str, WheelName]) -> dict[str, _Cached]:
        cached = {}
        for row in self._db.execute("SELECT * FROM index_files"):
            name = names.get(row[0])
            if name is not None:
                cached[name.filename] = _row_to_cached(row, name)
        return cached

    def replace(self, entries: Iterable[_Cached]) -> None:
        """Make the table hold exactly ``entries`` (files gone from dist/ drop out)."""
        rows = [_cached_to_row(entry) for entry in entries]
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("DELETE FROM index_files")
            self._db.executemany("INSERT INTO index_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")


def scan(dist: Path, ledger_path: Path) -> Catalog:
    """Catalogue ``dist`` using the ledger and the hash cache at ``ledger_path``; update the cache."""
    names, rejected = _parse_names(dist)
    with Ledger(ledger_path) as ledger:
        built = ledger.wheel_hashes()
        failures = tuple(ledger.failures())
        recorded_archs = ledger.wheel_archs()
    cache = HashCache(ledger_path)
    try:
        previous = cache.load(names)
        entries, stats, more_rejected, fresh = _catalogue(dist, names, built, previous)
        cache.replace(entries)
    finally:
        cache.close()
    wheels = tuple(entry.wheel for entry in entries)
    log.info("catalogued %d wheels (%s); rejected %d", len(wheels), stats, len(rejected) + len(more_rejected))
    return Catalog(
        wheels=wheels,
        rejected=tuple(rejected + more_rejected),
        failures=failures,
        stats=stats,
        fresh_metadata=fresh,
        archs=_archs(wheels, recorded_archs),
    )


def _archs(wheels: Iterable[WheelFile], recorded: Mapping[str, tuple[str, str]]) -> dict[str, GpuArchs]:
    """The GPU archs of the listed wheels whose ledger row holds a readable record of them."""
    archs = {}
    for wheel in wheels:
        raw = recorded.get(wheel.filename)
        parsed = parse_gpu_archs(*raw) if raw is not None else None
        if parsed is not None:
            archs[wheel.filename] = parsed
    return archs


def _parse_names(dist: Path) -> tuple[dict[str, WheelName], list[Rejection]]:
    names: dict[str, WheelName] = {}
    rejected = []
    filenames = sorted(entry.name for entry in os.scandir(dist) if entry.name.endswith(".whl")) if dist.is_dir() else []
    for filename in filenames:
        try:
            names[filename] = parse_wheel_name(filename)
        except RejectedWheel as error:
            log.info("not indexed: %s", error)
            rejected.append(Rejection(filename=filename, reason=str(error)))
    return names, rejected


def _catalogue(
    dist: Path, names: Mapping[str, WheelName], built: Mapping[str, tuple[str, int]], previous: Mapping[str, _Cached]
) -> tuple[list[_Cached], ScanStats, list[Rejection], dict[str, bytes]]:
    entries, rejected, fresh = [], [], {}
    counts = {"hashed": 0, "from_ledger": 0, "cached": 0}
    for filename, name in names.items():
        path = dist / filename
        stat = path.stat()
        old = previous.get(filename)
        if old is not None and (old.wheel.size, old.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
            entries.append(old)
            counts["cached"] += 1
            continue
        try:
            fresh[filename] = read_core_metadata(path, name)
            metadata = check_core_metadata(fresh[filename], name)
        except RejectedWheel as error:
            log.info("not indexed: %s", error)
            rejected.append(Rejection(filename=filename, reason=str(error)))
            continue
        known = built.get(filename)
        if known is not None and known[1] == stat.st_size and _SHA256.match(known[0] or ""):
            sha256, source = known[0], "from_ledger"
        else:
            sha256, source = sha256_file(path), "hashed"
        counts[source] += 1
        first_seen = old.wheel.upload_time if old is not None and old.wheel.sha256 == sha256 else stat.st_mtime
        wheel = WheelFile(name=name, sha256=sha256, size=stat.st_size, metadata=metadata, upload_time=first_seen)
        entries.append(_Cached(wheel=wheel, mtime_ns=stat.st_mtime_ns))
    return entries, ScanStats(**counts), rejected, fresh


def _row_to_cached(row: tuple[Any, ...], name: WheelName) -> _Cached:
    _filename, size, mtime_ns, sha256, meta_sha, meta_size, requires_python, summary, upload_time = row
    metadata = CoreMetadata(sha256=meta_sha, size=meta_size, requires_python=requires_python, summary=summary)
    wheel = WheelFile(name=name, sha256=sha256, size=size, metadata=metadata, upload_time=upload_time)
    return _Cached(wheel=wheel, mtime_ns=mtime_ns)


def _cached_to_row(entry: _Cached) -> tuple[object, ...]:
    wheel, metadata = entry.wheel, entry.wheel.metadata
    return (
        wheel.filename,
        wheel.size,
        entry.mtime_ns,
        wheel.sha256,
        metadata.sha256,
        metadata.size,
        metadata.requires_python,
        metadata.summary,
        wheel.upload_time,
    )
