"""The build ledger: one SQLite row per job under the output folder, the record of what was built from which
inputs, how long each phase took, and why a job failed. The index reads wheel hashes and failures from it."""

from __future__ import annotations

import dataclasses
import json
import math
import sqlite3
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Self

from builder.core.errors import LedgerError
from builder.core.hashing import FileIdentity
from builder.core.sqlite import TIP, lock_timeout, sqlite_errors, write_transaction

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
    toolchain    TEXT,               -- JSON: the toolkit source, its CUDA version and root, the host compiler
    compile_times TEXT,              -- JSON: [{unit, arch, seconds}] from nvcc --time (object-cache hits add none)
    wheel_identity TEXT,             -- inode:size:mtime_ns:ctime_ns of the wheel in dist/ when its hash was taken
    torch_wheel  TEXT,               -- JSON: the torch wheel built against: filename, url, sha256, index, origin
    reuse        TEXT,               -- JSON: objects and device steps reused, and from which job (compilation.py)
    stage_times  TEXT,               -- JSON: [{unit, arch, stage, cpu, wall}] of the device steps compiled
    abi          TEXT,               -- JSON: the symbols each extension imports from torch, C++ ABI, CUDA major, window
    updated_at   REAL NOT NULL
);
"""
# The slim per-arch wheels cut from a job's build (builder/steps/slim.py): a table of their own, so that every reader
# of the job rows (status, merge, the index, the benchmarks) sees jobs only. Older wheelwrights ignore it.
SLIM_SCHEMA = """
CREATE TABLE IF NOT EXISTS slim_wheels (
    job_id       TEXT NOT NULL,      -- the job whose build they were cut from
    arch         TEXT NOT NULL,      -- the SASS arch kept, e.g. 9.0
    label        TEXT NOT NULL,      -- the variant label, e.g. pt214cu130sm90
    status       TEXT NOT NULL,      -- built | failed
    wheel        TEXT,               -- the variant file in variant/
    wheel_sha256 TEXT,
    wheel_size   INTEGER,
    cut_from     TEXT,               -- the fat wheel in dist/
    timings      TEXT NOT NULL DEFAULT '{}',  -- JSON {relink, repair, verify, variant: seconds}
    reason       TEXT,
    report       TEXT,               -- JSON: the verify gate's checks
    updated_at   REAL NOT NULL,
    PRIMARY KEY (job_id, arch)
);
"""


@dataclass(frozen=True, kw_only=True)
class SlimRow:
    job_id: str
    arch: str
    label: str
    status: Status
    wheel: str | None = None
    wheel_sha256: str | None = None
    wheel_size: int | None = None
    cut_from: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    reason: str | None = None
    report: str | None = None


# Columns added after the first release of the schema, added to older ledgers on open.
MIGRATIONS = {
    "report": "ALTER TABLE jobs ADD COLUMN report TEXT",
    "toolchain": "ALTER TABLE jobs ADD COLUMN toolchain TEXT",
    "compile_times": "ALTER TABLE jobs ADD COLUMN compile_times TEXT",
    "wheel_identity": "ALTER TABLE jobs ADD COLUMN wheel_identity TEXT",
    "torch_wheel": "ALTER TABLE jobs ADD COLUMN torch_wheel TEXT",
    "reuse": "ALTER TABLE jobs ADD COLUMN reuse TEXT",
    "stage_times": "ALTER TABLE jobs ADD COLUMN stage_times TEXT",
    "abi": "ALTER TABLE jobs ADD COLUMN abi TEXT",
}
_NAMES_A_QUERY = 500  # SQLite's bound parameters a statement, at most 999 in older builds
# What the index reads of every built job, each time the ledger has changed (wheel_archs, wheel_hashes): kept in an
# index of built jobs by wheel, with the GPU code and the ABI window taken out of the JSON once, when the row is
# written. Reading them from the rows parsed each job's report and ABI record again on every read: 0.09 CPU-s at
# 10,000 built jobs, 0.008 from the index. A row whose JSON is damaged (or a BLOB) holds NULL there.
_BUILT_FACTS = {
    "sass": "CASE WHEN json_valid(report) THEN json_extract(report, '$.sass') END",
    "ptx": "CASE WHEN json_valid(report) THEN json_extract(report, '$.ptx') END",
    "window": "CASE WHEN json_valid(abi) THEN json_extract(abi, '$.window.text') END",
}
_BUILT_INDEX = f"CREATE INDEX IF NOT EXISTS jobs_built ON jobs (status, wheel, {', '.join(_BUILT_FACTS.values())})"
SCHEMA_VERSION = 2  # PRAGMA user_version; a ledger with a higher one was written by a newer wheelwright

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
    toolchain: str | None = None
    compile_times: str | None = None
    wheel_identity: str | None = None
    torch_wheel: str | None = None
    reuse: str | None = None
    stage_times: str | None = None
    abi: str | None = None  # JSON, builder/steps/abi.py: {torch, cxx11_abi, cuda_major, extensions, window}
    updated_at: float = 0.0

    @property
    def total_seconds(self) -> float:
        return sum(self.timings.values())


_COLUMNS = ", ".join(f.name for f in dataclasses.fields(LedgerEntry))
# The columns every schema had: the fields without a default.
_REQUIRED = {
    f.name
    for f in dataclasses.fields(LedgerEntry)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
}


class Ledger:
    """A thin, transactional wrapper over ``<output>/ledger.sqlite``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise LedgerError(f"{path}: a folder, not a ledger file", tip=TIP)
        with sqlite_errors(path):
            self._db = sqlite3.connect(path, timeout=lock_timeout(), isolation_level=None)
            try:
                self._open()
            except BaseException:
                self._db.close()
                raise

    def _open(self) -> None:
        self._db.row_factory = sqlite3.Row
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"{self.path}: written by a newer wheelwright "
                f"(ledger schema {version}, this one knows {SCHEMA_VERSION})",
                tip="upgrade wheelwright, or use another --output",
            )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA + SLIM_SCHEMA)
        columns = {row["name"] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for column, statement in MIGRATIONS.items():
            if column not in columns:
                self._db.execute(statement)
        if {"status", "wheel", "report", "abi"} <= columns:  # a foreign table of that name is refused where read
            self._db.execute(_BUILT_INDEX)
        if version < SCHEMA_VERSION:
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self.path)

    def _select(self, where: str = "", parameters: tuple[object, ...] = ()) -> list[LedgerEntry]:
        with sqlite_errors(self.path):
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs {where}", parameters).fetchall()
            return [_typed_entry(row, self.path) for row in rows]

    def get(self, job_id: str) -> LedgerEntry | None:
        found = self._select("WHERE job_id = ?", (job_id,))
        return found[0] if found else None

    def entries(self) -> list[LedgerEntry]:
        return self._select("ORDER BY job_id")

    def put_slim(self, row: SlimRow) -> None:
        self.replace_slims(row.job_id, [row], only=row.arch)

    def replace_slims(self, job_id: str, rows: Sequence[SlimRow], *, only: str | None = None) -> None:
        """The job's slim rows become ``rows`` (a build of the job cuts them all anew; ``only``: that arch's)."""
        with self._transaction() as db:
            db.execute("DELETE FROM slim_wheels WHERE job_id = ?" + (" AND arch = ?" if only else ""),
                       (job_id, only) if only else (job_id,))
            for row in rows:
                values = {**row.__dict__, "status": str(row.status),
                          "timings": json.dumps(row.timings, sort_keys=True), "updated_at": time.time()}
                db.execute(f"INSERT INTO slim_wheels ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                           tuple(values.values()))

    def slims(self, job_id: str | None = None) -> list[SlimRow]:
        """The slim wheels recorded (of ``job_id``), by job and arch."""
        where, parameters = ("WHERE job_id = ?", (job_id,)) if job_id else ("", ())
        with sqlite_errors(self.path):
            rows = self._db.execute(f"SELECT * FROM slim_wheels {where} ORDER BY job_id, arch", parameters).fetchall()
        fields = [f.name for f in dataclasses.fields(SlimRow)]  # a sqlite3.Row iterates its values, not its names
        return [SlimRow(**{**{k: row[k] for k in fields}, "status": Status(row["status"]),
                           "timings": json.loads(row["timings"])}) for row in rows]

    def put(self, entry: LedgerEntry) -> None:
        if entry.status not in STATUSES:  # a plain str from elsewhere must still be one of them
            raise ValueError(f"unknown ledger status {entry.status!r}")
        values = {**entry.__dict__, "timings": json.dumps(entry.timings, sort_keys=True), "updated_at": time.time()}
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        with self._transaction() as db:
            db.execute(f"INSERT OR REPLACE INTO jobs ({columns}) VALUES ({marks})", values)

    def remove(self, job_id: str) -> None:
        """Drop a row that no longer says anything true (a day-0 refusal once a real build has the label)."""
        with self._transaction() as db:
            db.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))

    def wheel_hashes(self, wheels: Collection[str]) -> dict[str, tuple[str, FileIdentity]]:
        """{wheel filename: (sha256, identity)} of those of ``wheels`` built here whose identity in dist/ was
        recorded, so the index need not re-hash a wheel still exactly as built. Found by the index of built jobs: a
        re-index asks for its few new files, not for every built job's row (a scan of the table, reports and all)."""
        names = list(wheels)
        rows = []
        with sqlite_errors(self.path):
            for start in range(0, len(names), _NAMES_A_QUERY):
                chunk = names[start : start + _NAMES_A_QUERY]
                query = ("SELECT wheel, wheel_sha256, wheel_identity FROM jobs WHERE status = 'built'"
                         f" AND wheel IN ({', '.join('?' * len(chunk))})")
                rows += self._db.execute(query, chunk).fetchall()
        known = {}
        for row in rows:
            identity = FileIdentity.parse(row["wheel_identity"])
            if identity is not None and isinstance(row["wheel_sha256"], str):
                known[row["wheel"]] = (row["wheel_sha256"], identity)
        return known

    def wheel_archs(self) -> dict[str, tuple[str, str, str | None]]:
        """{wheel filename: (SASS, PTX, ABI window)} of every built wheel whose verify report recorded its GPU code,
        each list JSON as the report holds it, the window the text its ``abi`` record holds (None where none): read
        from the index of built jobs, where SQLite extracted them from the JSON when the row was written."""
        facts = ", ".join(_BUILT_FACTS.values())  # sass, ptx, window
        query = f"SELECT wheel, {facts} FROM jobs WHERE status = 'built' AND wheel IS NOT NULL"
        with sqlite_errors(self.path):
            cursor = self._db.cursor()
            cursor.row_factory = None  # plain tuples: a row a built job
            rows = cursor.execute(query).fetchall()
        return {wheel: (sass, ptx, window) for wheel, sass, ptx, window in rows if sass is not None}

    def failures(self) -> list[LedgerEntry]:
        """The jobs that finished without a wheel, by job id: chosen by SQLite, so the rows of built jobs (their
        verify reports and ABI records, some kilobytes each) are not read at all. The index asks on every run: with
        10,000 built jobs, 0.35 CPU-s when every row was read and the built ones dropped in Python."""
        statuses = sorted(NOT_BUILT)
        return self._select(f"WHERE status IN ({', '.join('?' * len(statuses))}) ORDER BY job_id", tuple(statuses))


def read_entries(path: Path) -> list[LedgerEntry]:
    """Every row of a ledger another machine wrote (a CI artifact), opened read-only: unlike :class:`Ledger`, this
    neither migrates the file nor leaves a journal beside it. Columns an older schema lacks read as their default."""
    with _read_only(path) as db:
        present = _columns(db)
        if not _REQUIRED <= present:
            missing = ", ".join(sorted(_REQUIRED - present))
            raise LedgerError(f"{path}: not a wheelwright ledger (its jobs table lacks {missing})", tip=TIP)
        columns = ", ".join(f.name for f in dataclasses.fields(LedgerEntry) if f.name in present)
        rows = db.execute(f"SELECT {columns} FROM jobs ORDER BY job_id").fetchall()
    return [_entry(row, path) for row in rows]


def read_costs(path: Path) -> list[RecordedCosts]:
    """Each job's recorded compile costs (``compile_times``, ``stage_times``) with its package and accelerator, from
    a ledger opened read-only (as read_entries opens one); a ledger from before they were recorded has none. Only
    the columns read are checked: a wrong-typed one is a LedgerError naming the job."""
    with _read_only(path) as db:
        present = _columns(db)
        if not {"job_id", "package"} <= present:
            raise LedgerError(f"{path}: not a wheelwright ledger (no jobs table with job_id and package)", tip=TIP)
        recorded = [c for c in ("compile_times", "stage_times") if c in present]
        if not recorded:
            return []
        wanted = ["job_id", "package", *(c if c in present else f"NULL AS {c}" for c in _COST_COLUMNS)]
        rows = db.execute(f"SELECT {', '.join(wanted)} FROM jobs WHERE "
                          + " OR ".join(f"{c} IS NOT NULL" for c in recorded)).fetchall()
    found = []
    for row in rows:
        for column in ("job_id", "package", *_COST_COLUMNS):
            if not isinstance(row[column], str) and (column in ("job_id", "package") or row[column] is not None):
                raise LedgerError(f"{path}: job {str(row['job_id'])[:200]!r} has {column} {_shown(row[column])}, "
                                  "not text", tip=TIP)
        where = f"{path}: job {row['job_id']!r}"
        found.append(RecordedCosts(package=row["package"], accelerator=row["accelerator"] or "",
                                   compile_times=compile_times(row["compile_times"], where),
                                   stage_times=stage_times(row["stage_times"], where)))
    return found


_COST_COLUMNS = ("accelerator", "compile_times", "stage_times")


def holds_builds(path: Path) -> bool:
    """Whether a ledger's jobs table has the columns every build writes (a ledger of compile costs alone, as
    ``plan --estimate --ledger`` takes, has not), read-only."""
    with _read_only(path) as db:
        return _REQUIRED <= _columns(db)


@contextmanager
def _read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """``path`` opened read-only, every SQLite failure a LedgerError. A finished artifact has no -wal beside it:
    it is read as immutable, so SQLite creates no -shm beside it."""
    if path.is_dir():
        raise LedgerError(f"{path}: a folder, not a ledger file", tip=TIP)
    with sqlite_errors(path):
        live = path.with_name(path.name + "-wal").exists()
        db = sqlite3.connect(f"{path.resolve().as_uri()}?{'mode=ro' if live else 'immutable=1'}", uri=True)
        try:
            db.row_factory = sqlite3.Row
            yield db
        finally:
            db.close()


def _columns(db: sqlite3.Connection) -> set[str]:
    return {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}


def _typed_entry(row: sqlite3.Row, path: Path) -> LedgerEntry:
    """A row of our own ledger, each column checked to hold its field's type (SQLite's columns take any type; a
    hand-edited or hostile file is refused here, once, not where each field is used). ``merge`` reads a shard's
    rows loosely (read_entries) and checks them itself, naming the shard."""
    data = dict(row)
    for column, value in data.items():
        if not isinstance(value, _COLUMN_TYPES[column]):
            raise LedgerError(f"{path}: job {str(data.get('job_id'))[:200]!r} has {column} {_shown(value)}, not "
                              f"{' or '.join(_TYPE_NAMES[t] for t in _COLUMN_TYPES[column])}", tip=TIP)
    entry = _entry(row, path)
    if not all(_seconds(v) for v in entry.timings.values()):
        raise LedgerError(f"{path}: job {entry.job_id!r} has unreadable timings", tip=TIP)
    return entry


def _entry(row: sqlite3.Row, path: Path) -> LedgerEntry:
    data = dict(row)
    try:
        timings = json.loads(data["timings"] or "{}")
    except (TypeError, ValueError, RecursionError):
        timings = None
    if not isinstance(timings, dict):
        raise LedgerError(f"{path}: job {data['job_id']!r} has unreadable timings", tip=TIP)
    try:
        status = Status(data["status"])
    except ValueError:
        raise LedgerError(f"{path}: job {data['job_id']!r} has unknown status {data['status']!r}", tip=TIP) from None
    return LedgerEntry(**{**data, "timings": timings, "status": status})


# What each column of a row may hold, as SQLite hands it back.
_COLUMN_TYPES: dict[str, tuple[type, ...]] = {
    f.name: (str,) if f.name in _REQUIRED else (str, type(None)) for f in dataclasses.fields(LedgerEntry)
}
_COLUMN_TYPES.update({"wheel_size": (int, type(None)), "updated_at": (float, int)})
_TYPE_NAMES = {str: "text", int: "an integer", float: "a number", type(None): "NULL"}


def _shown(value: object) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


def _seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


@dataclass(frozen=True)
class CompileTime:
    """One (unit, arch) compile of a build, as ``nvcc --time`` measured it; arch "host" is the per-unit part."""

    unit: str
    arch: str
    seconds: float


def compile_times(text: str | None, where: str) -> list[CompileTime]:
    """A row's ``compile_times`` JSON, each entry checked: a list of {unit, arch, seconds}, seconds a finite
    number >= 0. ``where`` names the row in the LedgerError a malformed one raises."""
    entries = _timing_entries(text, where, "compile_times", ("unit", "arch"), "seconds")
    return [CompileTime(unit=e["unit"], arch=e["arch"], seconds=float(e["seconds"])) for e in entries]


def _timing_entries(
    text: str | None, where: str, column: str, texts: tuple[str, ...], number: str
) -> list[dict[str, Any]]:
    """The entries of a timing column's JSON list, each a dict whose ``texts`` keys hold text and whose ``number``
    key a finite number >= 0; a LedgerError naming ``where``, the column and the entry otherwise."""
    try:
        entries = json.loads(text or "[]")
    except (TypeError, ValueError, RecursionError):
        raise LedgerError(f"{where}: {column} is not JSON", tip=TIP) from None
    if not isinstance(entries, list):
        raise LedgerError(f"{where}: {column} is {_shown(entries)}, not a list", tip=TIP)
    for index, entry in enumerate(entries):
        if not (isinstance(entry, dict) and all(isinstance(entry.get(k), str) for k in texts)
                and _seconds(entry.get(number))):
            shape = ", ".join([*(f"{k}: text" for k in texts), f"{number}: a number >= 0"])
            raise LedgerError(f"{where}: {column} entry {index} is {_shown(entry)}, not {{{shape}}}", tip=TIP)
    return entries


@dataclass(frozen=True)
class StageTime:
    """One compiled step of a build as compilation.py measured it (wait4's CPU-seconds): a device stage (preprocess,
    cicc, ptxas) of one (unit, arch), or a unit's front end or host part (arch "")."""

    unit: str
    arch: str
    stage: str
    cpu: float


def stage_times(text: str | None, where: str) -> list[StageTime]:
    """A row's ``stage_times`` JSON, each entry checked: a list of {unit, arch, stage, cpu, ...}, cpu a finite
    number >= 0. ``where`` names the row in the LedgerError a malformed one raises."""
    entries = _timing_entries(text, where, "stage_times", ("unit", "arch", "stage"), "cpu")
    return [StageTime(unit=e["unit"], arch=e["arch"], stage=e["stage"], cpu=float(e["cpu"])) for e in entries]


@dataclass(frozen=True)
class RecordedCosts:
    """One job's recorded compile costs (read_costs): the package and accelerator (toolkit) they price."""

    package: str
    accelerator: str
    compile_times: list[CompileTime]
    stage_times: list[StageTime]
