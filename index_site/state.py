"""The index's state on disk: ``OUTPUT/index.sqlite``, beside the ledger. It catalogues every file of dist/ and of
variant/ with the full identity it had when the index checked it (inode, size, mtime, ctime), its sha256, what the
index read from it and its verdict, so that a new process trusts what it finds unchanged after one stat per file.

Only a shortcut: a row is used while its file keeps that identity, a damaged or missing state costs a cold run,
never trust, and every run's changes are one transaction (a run killed at any point leaves the last one whole)."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from typing import Self

from builder.core.errors import FileSystemError
from builder.core.ledger import lock_timeout, sqlite_errors, write_transaction

log = logging.getLogger(__name__)

STATE_FILE = "index.sqlite"  # in the output folder, beside ledger.sqlite
SCHEMA_VERSION = 3  # PRAGMA user_version; any other version is dropped and rebuilt (a cold run)
SCHEMA = """
CREATE TABLE IF NOT EXISTS wheels (     -- the files of dist/
    filename        TEXT PRIMARY KEY,
    inode           INTEGER NOT NULL,   -- with size, mtime_ns and ctime_ns: the identity the verdict holds for
    size            INTEGER NOT NULL,
    mtime_ns        INTEGER NOT NULL,
    ctime_ns        INTEGER NOT NULL,
    stage           TEXT NOT NULL,      -- 'name': judged by its name alone; 'content': its bytes were read
    verdict         TEXT NOT NULL,      -- '' indexed, else why it is left out of the site
    sha256          TEXT NOT NULL,
    metadata_sha256 TEXT NOT NULL,
    metadata_size   INTEGER NOT NULL,
    requires_python TEXT,
    summary         TEXT,
    upload_time     REAL NOT NULL,      -- when these bytes were first indexed; stable, so pages do not churn
    twin            TEXT,               -- why no variant twin can be made of it (NULL: not asked, or it has one)
    derived         TEXT NOT NULL       -- JSON: the twin the twin step makes of it (twins.py's TwinFacts), or ''
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS twins (      -- the files of variant/
    filename        TEXT PRIMARY KEY,
    inode           INTEGER NOT NULL,
    size            INTEGER NOT NULL,
    mtime_ns        INTEGER NOT NULL,
    ctime_ns        INTEGER NOT NULL,
    wheel           TEXT NOT NULL,      -- the wheel of dist/ it was checked against
    wheel_identity  TEXT NOT NULL,      -- that wheel's identity then (FileIdentity's text)
    verdict         TEXT NOT NULL,      -- '' published, else why not
    sha256          TEXT NOT NULL,
    metadata_sha256 TEXT NOT NULL,
    metadata_size   INTEGER NOT NULL,
    requires_python TEXT,
    provenance_sha256 TEXT NOT NULL,    -- '' for a twin without wheelwright.json
    provenance_size INTEGER NOT NULL,
    variant         TEXT NOT NULL       -- JSON: {"properties": ..., "providers": ...} of its variant.json
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS twins_by_wheel ON twins (wheel);  -- a linked wheel's new ctime reaches its twin's row
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""
_TABLES = ("wheels", "twins", "meta")


class WheelRow(NamedTuple):
    """One row of ``wheels``, in column order (a tuple: a farm's state holds 100,000 of them)."""

    filename: str
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    stage: str
    verdict: str
    sha256: str
    metadata_sha256: str
    metadata_size: int
    requires_python: str | None
    summary: str | None
    upload_time: float
    twin: str | None
    derived: str

    @property
    def identity(self) -> tuple[int, int, int, int]:
        return (self.inode, self.size, self.mtime_ns, self.ctime_ns)


class TwinRow(NamedTuple):
    """One row of ``twins``, in column order."""

    filename: str
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    wheel: str
    wheel_identity: str
    verdict: str
    sha256: str
    metadata_sha256: str
    metadata_size: int
    requires_python: str | None
    provenance_sha256: str
    provenance_size: int
    variant: str

    @property
    def identity(self) -> tuple[int, int, int, int]:
        return (self.inode, self.size, self.mtime_ns, self.ctime_ns)


class IndexState:
    """The state file, open for one index run: read every row once, write the run's changes in one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_dir() or path.is_symlink():
            raise FileSystemError(f"{path}: not the index's state file", tip="move it aside and index again")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        """The open database; one that is not SQLite, or is damaged, is set aside and made anew (it holds only
        what the next run can learn again from the files)."""
        try:
            return _open(self.path)
        except sqlite3.DatabaseError as error:
            if isinstance(error, sqlite3.OperationalError) and _locked(error):
                with sqlite_errors(self.path):
                    raise
            log.warning("%s: unusable (%s); starting a new index state", self.path, error)
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            with sqlite_errors(self.path):
                return _open(self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.close()

    def meta(self) -> dict[str, str]:
        with sqlite_errors(self.path):
            return {str(key): str(value) for key, value in self._db.execute("SELECT key, value FROM meta")}

    def wheels(self) -> dict[str, WheelRow]:
        """Every row of ``wheels`` whose values have the types of their columns (a damaged one is left out: its
        file is checked again)."""
        new = tuple.__new__
        with sqlite_errors(self.path):
            rows = self._db.execute(f"SELECT * FROM wheels WHERE {_WELL_TYPED_WHEEL}").fetchall()
        return {row[0]: new(WheelRow, row) for row in rows}

    def twins(self) -> dict[str, TwinRow]:
        new = tuple.__new__
        with sqlite_errors(self.path):
            rows = self._db.execute(f"SELECT * FROM twins WHERE {_WELL_TYPED_TWIN}").fetchall()
        return {row[0]: new(TwinRow, row) for row in rows}

    def write(
        self,
        *,
        wheels: Iterable[WheelRow] = (),
        wheels_gone: Iterable[str] = (),
        twins: Iterable[TwinRow] = (),
        twins_gone: Iterable[str] = (),
        meta: Mapping[str, str] | None = None,
    ) -> None:
        """Write these changes in one transaction (nothing when there are none)."""
        statements: list[tuple[str, list[tuple[object, ...]]]] = [
            ("DELETE FROM wheels WHERE filename = ?", [(name,) for name in wheels_gone]),
            (f"INSERT OR REPLACE INTO wheels VALUES ({_marks(WheelRow)})", list(wheels)),
            ("DELETE FROM twins WHERE filename = ?", [(name,) for name in twins_gone]),
            (f"INSERT OR REPLACE INTO twins VALUES ({_marks(TwinRow)})", list(twins)),
            ("INSERT OR REPLACE INTO meta VALUES (?, ?)", list((meta or {}).items())),
        ]
        if not any(rows for _, rows in statements):
            return
        with self._transaction() as db:
            for statement, rows in statements:
                if rows:
                    db.executemany(statement, rows)
            if any(rows for _, rows in statements[:4]):
                db.execute(_NEXT_GENERATION)

    def refresh(self, moved: Mapping[str, tuple[tuple[int, int, int, int], tuple[int, int, int, int]]]) -> None:
        """Record the new ctimes of files whose bytes did not change ({filename: (identity before, after)}, of
        wheels and twins): placing a hard link to a file moves its ctime alone. A twin's record of its wheel's
        identity moves with it. Only rows still at the identity before are changed."""
        rows = [(after[3], name, *before) for name, (before, after) in moved.items() if before[:3] == after[:3]]
        wheels = [(_text(after), name, _text(before)) for name, (before, after) in moved.items()]
        where = "filename = ? AND inode = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ?"
        with self._transaction() as db:
            for table in ("wheels", "twins"):
                db.executemany(f"UPDATE {table} SET ctime_ns = ? WHERE {where}", rows)
            db.executemany("UPDATE twins SET wheel_identity = ? WHERE wheel = ? AND wheel_identity = ?", wheels)

    def forget_all(self, meta: Mapping[str, str]) -> None:
        """Drop every row (the checks they were judged by have changed) and record ``meta``; a state of a new id."""
        with self._transaction() as db:
            for table in _TABLES:
                db.execute(f"DELETE FROM {table}")
            fresh = {**meta, "id": uuid.uuid4().hex, "generation": "0"}
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(fresh.items()))

    def generation(self) -> str:
        """Which catalogue this is: the state's id (new with every new state file) and the count of its changes
        (every write of rows adds one). Equal only while every row is as it was."""
        meta = self.meta()
        return f"{meta.get('id', '')}:{meta.get('generation', '')}"

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self.path)


def _open(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=lock_timeout(), isolation_level=None)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute("PRAGMA journal_mode=WAL")
        # no fsync per commit (WAL stays consistent; a power cut may lose the last commit): a lost row only means
        # a file is checked again
        db.execute("PRAGMA synchronous=NORMAL")
        if version != SCHEMA_VERSION:
            for table in _TABLES:
                db.execute(f"DROP TABLE IF EXISTS {table}")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.executescript(SCHEMA)
    except BaseException:
        db.close()
        raise
    return db


_NEXT_GENERATION = """
INSERT OR REPLACE INTO meta VALUES ('generation',
    CAST(COALESCE((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'generation'), 0) + 1 AS TEXT))
"""


def _text(identity: tuple[int, int, int, int]) -> str:
    """An identity as the twins table records its wheel's (FileIdentity's text form)."""
    return ":".join(str(part) for part in identity)


def _locked(error: sqlite3.OperationalError) -> bool:
    return "locked" in str(error) or "busy" in str(error)


def _marks(row: type[NamedTuple]) -> str:
    return ", ".join("?" * len(row._fields))


def _well_typed(row: type[NamedTuple], types: str) -> str:
    """A WHERE clause that keeps the rows whose values have their columns' types (``types``: one letter per column,
    t text, i integer, r real or integer, n text or null), checked by SQLite itself."""
    kinds = {"t": "('text')", "i": "('integer')", "r": "('real', 'integer')", "n": "('text', 'null')"}
    return " AND ".join(f"typeof({column}) IN {kinds[kind]}" for column, kind in zip(row._fields, types, strict=True))


_WELL_TYPED_WHEEL = _well_typed(WheelRow, "tiiiittttinnrnt")
_WELL_TYPED_TWIN = _well_typed(TwinRow, "tiiiitttttintit")


def state_path(ledger_path: Path) -> Path:
    """Where the state of the output whose ledger is ``ledger_path`` lives."""
    return ledger_path.with_name(STATE_FILE)
