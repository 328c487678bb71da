"""The build ledger: one SQLite row per job under the output folder, the record of what was built from which
inputs, how long each phase took, and why a job failed. The index reads wheel hashes and failures from it."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id       TEXT PRIMARY KEY,   -- Job.identifier, e.g. causal-conv1d-1.7.0+pt214cu130-cp311-x86_64
    package      TEXT NOT NULL,
    version      TEXT NOT NULL,      -- the upstream version, without the label
    label        TEXT NOT NULL,      -- pt214cu130
    torch        TEXT NOT NULL,
    accelerator  TEXT NOT NULL,      -- cu130, rocm6.1
    python       TEXT NOT NULL,      -- 3.11
    input_hash   TEXT NOT NULL,      -- sha256 over sdist hash, recipe, torch, toolkit, flags
    status       TEXT NOT NULL,      -- running | built | failed | quarantined | unbuildable
    phase        TEXT,               -- the phase reached (fetch, env, patch, compile, repair, verify, publish)
    timings      TEXT NOT NULL DEFAULT '{}',  -- JSON {phase: seconds}
    log_path     TEXT,
    wheel        TEXT,               -- filename in dist/ (status built) or quarantine/ (quarantined)
    wheel_sha256 TEXT,
    wheel_size   INTEGER,
    reason       TEXT,               -- why it failed, was quarantined, or cannot be built here
    report       TEXT,               -- JSON: the verify gate's checks and recorded facts (GLIBC, NEEDED, archs)
    updated_at   REAL NOT NULL
);
"""
# Columns added after the first release of the schema, added to older ledgers on open.
MIGRATIONS = {"report": "ALTER TABLE jobs ADD COLUMN report TEXT"}

class Status(str, Enum):
    """A job's row: in flight, or how it ended. A str, so rows, JSON and comparisons with text keep working."""

    RUNNING = "running"
    BUILT = "built"  # a verified wheel in dist/
    FAILED = "failed"
    QUARANTINED = "quarantined"  # built, but the verify gate refused it
    UNBUILDABLE = "unbuildable"  # this machine lacks the toolkit, interpreter or torch

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(Status)
NOT_BUILT = frozenset({Status.FAILED, Status.QUARANTINED, Status.UNBUILDABLE})  # finished without a wheel


@dataclass(frozen=True, kw_only=True)
class LedgerEntry:
    job_id: str
    package: str
    version: str
    label: str
    torch: str
    accelerator: str
    python: str
    input_hash: str
    status: Status
    phase: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    log_path: str | None = None
    wheel: str | None = None
    wheel_sha256: str | None = None
    wheel_size: int | None = None
    reason: str | None = None
    report: str | None = None
    updated_at: float = 0.0

    @property
    def total_seconds(self) -> float:
        return sum(self.timings.values())


class Ledger:
    """A thin, transactional wrapper over ``<output>/ledger.sqlite``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for column, statement in MIGRATIONS.items():
            if column not in columns:
                self._db.execute(statement)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def get(self, job_id: str) -> LedgerEntry | None:
        row = self._db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
        return _entry(row) if row else None

    def entries(self) -> list[LedgerEntry]:
        return [_entry(row) for row in self._db.execute("SELECT * FROM jobs ORDER BY job_id")]

    def put(self, entry: LedgerEntry) -> None:
        if entry.status not in STATUSES:  # a plain str from elsewhere must still be one of them
            raise ValueError(f"unknown ledger status {entry.status!r}")
        values = {**entry.__dict__, "timings": json.dumps(entry.timings, sort_keys=True), "updated_at": time.time()}
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        with self._transaction() as db:
            db.execute(f"INSERT OR REPLACE INTO jobs ({columns}) VALUES ({marks})", values)

    def wheel_hashes(self) -> dict[str, tuple[str, int]]:
        """{wheel filename: (sha256, size)} of every built wheel, so the index need not re-hash them."""
        rows = self._db.execute(
            "SELECT wheel, wheel_sha256, wheel_size FROM jobs WHERE status = 'built' AND wheel IS NOT NULL"
        )
        return {row["wheel"]: (row["wheel_sha256"], row["wheel_size"]) for row in rows}

    def wheel_archs(self) -> dict[str, tuple[str, str]]:
        """{wheel filename: (SASS, PTX)} of every built wheel whose verify report recorded its GPU code, each a JSON
        list as the report holds it; SQLite extracts them, so a big ledger's reports are not parsed in Python."""
        rows = self._db.execute(
            "SELECT wheel, json_extract(report, '$.sass') AS sass, json_extract(report, '$.ptx') AS ptx FROM jobs"
            " WHERE status = 'built' AND wheel IS NOT NULL AND json_valid(report)"
        )
        return {row["wheel"]: (row["sass"], row["ptx"]) for row in rows if row["sass"] is not None}

    def failures(self) -> list[LedgerEntry]:
        return [e for e in self.entries() if e.status in NOT_BUILT]


def _entry(row: sqlite3.Row) -> LedgerEntry:
    data = dict(row)
    data["timings"] = json.loads(data["timings"] or "{}")
    data["status"] = Status(data["status"])
    return LedgerEntry(**data)
