"""The index's state on disk: ``OUTPUT/index.sqlite``, beside the ledger. It catalogues every file of dist/ and of
variant/ with the full identity it had when the index checked it (inode, size, mtime, ctime), its sha256, what the
index read from it and its verdict, so that a new process trusts what it finds unchanged after one stat per file.

Only a shortcut: a row is used while its file keeps that identity, a damaged or missing state costs a cold run,
never trust, and every run's changes are one transaction (a run killed at any point leaves the last one whole)."""

from __future__ import annotations

import itertools
import logging
import operator
import sqlite3
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from typing import Self

from builder.core.errors import FileSystemError
from builder.core.sqlite import lock_timeout, sqlite_errors, write_transaction

log = logging.getLogger(__name__)

STATE_FILE = "index.sqlite"  # in the output folder, beside the ledger
SCHEMA_VERSION = 6  # PRAGMA user_version; any other version is dropped and rebuilt (a cold run)
# The rows of each table are kept by release, all of a release's files in one value: a run reads them all in one
# decode per release (0.4 of the CPU of a row per file, at 10,000 wheels), and writes back only the releases of
# the files it judged anew (docs/index.md). Each write of a release's rows gives it a new stamp (random), so that
# what a run works out of a release's rows can be kept for the next (summaries.py), and used while the stamp holds.
SCHEMA = """
CREATE TABLE IF NOT EXISTS wheels (     -- the files of dist/: WheelRow
    release TEXT PRIMARY KEY,           -- their names' project and public version: "causal_conv1d-1.7.0"
    rows    BLOB NOT NULL,              -- MessagePack: an array of rows by filename, each an array of its fields
    stamp   TEXT NOT NULL               -- new with every write of these rows
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS twins (      -- the files of variant/: TwinRow
    release TEXT PRIMARY KEY,
    rows    BLOB NOT NULL,
    stamp   TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS summaries (  -- what the passes over the rows worked out of each release (summaries.py)
    release TEXT PRIMARY KEY,
    parts   BLOB NOT NULL               -- MessagePack: {part: [the stamps it holds for, what was worked out]}
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"""
_TABLES = ("wheels", "twins", "summaries", "meta")


class WheelRow(NamedTuple):
    """What the index knows of one file of dist/ (a tuple: a farm's state holds 100,000 of them)."""

    filename: str
    inode: int  # with size, mtime_ns and ctime_ns: the identity the verdict holds for
    size: int
    mtime_ns: int
    ctime_ns: int
    stage: str  # "name": judged by its name alone; "content": its bytes were read
    verdict: str  # "" indexed, else why it is left out of the site
    sha256: str
    metadata_sha256: str
    metadata_size: int
    requires_python: str | None
    summary: str | None
    upload_time: float  # when these bytes were first indexed; stable, so pages do not churn
    twin: str | None  # why no variant twin can be made of it (None: not asked, or it has one)
    derived: str  # JSON: the twin the twin step makes of it (twins.py's TwinFacts), or ""

    @property
    def identity(self) -> tuple[int, int, int, int]:
        return (self.inode, self.size, self.mtime_ns, self.ctime_ns)


class TwinRow(NamedTuple):
    """What the index knows of one file of variant/."""

    filename: str
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int
    wheel: str  # the wheel of dist/ it was checked against
    wheel_identity: str  # that wheel's identity then (FileIdentity's text)
    verdict: str  # "" published, else why not
    sha256: str
    metadata_sha256: str
    metadata_size: int
    requires_python: str | None
    provenance_sha256: str  # "" for a twin without wheelwright.json
    provenance_size: int
    variant: str  # JSON: {"properties": ..., "providers": ...} of its variant.json

    @property
    def identity(self) -> tuple[int, int, int, int]:
        return (self.inode, self.size, self.mtime_ns, self.ctime_ns)


def columns(row: type[tuple[Any, ...]], *fields: str) -> operator.itemgetter[Any]:
    """The named ``fields`` of a row type, taken by C (itemgetter): a run takes some of every one of 100,000 rows."""
    return operator.itemgetter(*map(row._fields.index, fields))  # type: ignore[attr-defined]


ROW_IDENTITY = columns(WheelRow, "inode", "size", "mtime_ns", "ctime_ns")  # a WheelRow's or TwinRow's: see identity
FILENAME = columns(WheelRow, "filename")  # a WheelRow's or TwinRow's
WHEEL_VERDICT = columns(WheelRow, "verdict")


def accepted(rows: Mapping[str, WheelRow]) -> list[WheelRow]:
    """The rows of the wheels the index lists (no verdict), in their order: one pass in C."""
    return list(itertools.compress(rows.values(), map(operator.not_, map(WHEEL_VERDICT, rows.values()))))


class DamagedState(FileSystemError):
    """The state file turned out damaged while in use (a page that does not read, a table not of its schema): the
    run that finds it sets it aside and indexes cold (stage.build_site); found again there, it is this run's error."""


@contextmanager
def _state_errors(path: Path) -> Iterator[None]:
    """SQLite's errors on the state file: a lock held too long as the ledger's (one ERROR line: wait for the other
    run); any other is damage, DamagedState."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        if isinstance(error, sqlite3.OperationalError) and _locked(error):
            with sqlite_errors(path):
                raise
        raise DamagedState(f"{path}: the index state is damaged ({error})",
                           tip="move it aside and index again (it holds only what a cold run learns again)") from None


def set_aside(path: Path) -> None:
    """Remove the state file at ``path`` with its write-ahead log and shared memory: the next open makes it anew."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class IndexState:
    """The state file, open for one index run: read every row once, write the run's changes in one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_dir() or path.is_symlink():
            raise FileSystemError(f"{path}: not the index's state file", tip="move it aside and index again")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()
        self._loaded: dict[str, dict[str, dict[str, Any]]] = {}  # table: release: filename: row
        self._misfiled: dict[str, set[str]] = {}  # table: keys whose stored rows are not all of that release
        self._stamps: dict[str, dict[str, str]] = {}  # table: release: the stamp of the rows held for it

    def _connect(self) -> sqlite3.Connection:
        """The open database; one that is not SQLite, or is damaged, is set aside and made anew (it holds only
        what the next run can learn again from the files)."""
        try:
            with _state_errors(self.path):
                return _open(self.path)
        except DamagedState as error:  # a lock held too long is not damage: _state_errors raised it as it is
            log.warning("%s; starting a new index state", error)
            set_aside(self.path)
            with _state_errors(self.path):
                return _open(self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._db.close()

    def meta(self) -> dict[str, str]:
        with _state_errors(self.path):
            return {str(key): str(value) for key, value in self._db.execute("SELECT key, value FROM meta")}

    def wheels(self) -> dict[str, WheelRow]:
        """Every row of ``wheels`` (a release's rows that are damaged, or not of their fields' types, are left out:
        their files are checked again)."""
        return _flat(self._releases("wheels"))

    def twins(self) -> dict[str, TwinRow]:
        return _flat(self._releases("twins"))

    def wheel_releases(self) -> Mapping[str, Mapping[str, WheelRow]]:
        """The rows of ``wheels`` by release, as held (not to be changed: ``write`` changes them)."""
        return self._releases("wheels")

    def twin_releases(self) -> Mapping[str, Mapping[str, TwinRow]]:
        return self._releases("twins")

    def stamps(self, table: str) -> Mapping[str, str]:
        """The stamp of each release whose rows of ``table`` are held exactly as the state stores them (a release
        with damaged or misfiled rows has none until they are written again)."""
        self._releases(table)
        return self._stamps[table]

    def summaries(self) -> dict[str, bytes]:
        """The summaries table's value of each release (summaries.py decodes them)."""
        with _state_errors(self.path):
            return {str(release): parts for release, parts in self._db.execute("SELECT release, parts FROM summaries")
                    if isinstance(parts, bytes)}

    def write_summaries(self, parts: Mapping[str, bytes], gone: Iterable[str] = ()) -> None:
        """Replace the summaries of these releases, and drop those of the releases ``gone``."""
        dropped = [(release,) for release in gone]
        if not parts and not dropped:
            return
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO summaries VALUES (?, ?)", list(parts.items()))
            db.executemany("DELETE FROM summaries WHERE release = ?", dropped)

    def releases_with_rows(self) -> set[str]:
        """The releases that hold a row of either table now (as held: what this run wrote included)."""
        return {release for table in ("wheels", "twins") for release, rows in self._releases(table).items() if rows}

    def write(
        self,
        *,
        wheels: Iterable[WheelRow] = (),
        wheels_gone: Iterable[str] = (),
        twins: Iterable[TwinRow] = (),
        twins_gone: Iterable[str] = (),
        meta: Mapping[str, str] | None = None,
    ) -> None:
        """Write these changes in one transaction (nothing when there are none): the rows of each release they
        touch, whole."""
        changed = {"wheels": self._change("wheels", wheels, wheels_gone)}
        changed["twins"] = self._change("twins", twins, twins_gone)
        for table, releases in changed.items():
            if releases:
                releases |= self._misfiled.pop(table, set())
        self._write(changed, meta or {})

    def refresh(self, moved: Mapping[str, tuple[tuple[int, int, int, int], tuple[int, int, int, int]]]) -> None:
        """Record the new ctimes of files whose bytes did not change ({filename: (identity before, after)}, of
        wheels and twins): placing a hard link to a file moves its ctime alone. A twin's record of its wheel's
        identity moves with it. Only rows still at the identity before are changed."""
        changed: dict[str, set[str]] = {"wheels": set(), "twins": set()}
        texts = {name: (_text(before), _text(after)) for name, (before, after) in moved.items()}
        for table in ("wheels", "twins"):
            releases = self._releases(table)
            for name, (before, after) in moved.items():
                release = release_of(name)
                row = releases.get(release, {}).get(name)
                if row is not None and before[:3] == after[:3] and row.identity == before:
                    releases[release][name] = row._replace(ctime_ns=after[3])
                    changed[table].add(release)
        twins = self._releases("twins")
        for release in {release_of(name) for name in texts}:  # a twin's row sits with its wheel's
            rows = twins.get(release, {})
            for name, row in rows.items():
                text = texts.get(row.wheel)
                if text is not None and row.wheel_identity == text[0]:
                    rows[name] = row._replace(wheel_identity=text[1])
                    changed["twins"].add(release)
        self._write(changed, {}, generation=False)  # the same catalogue: the rows follow their files

    def forget_all(self, meta: Mapping[str, str]) -> None:
        """Drop every row (the checks they were judged by have changed) and record ``meta``; a state of a new id."""
        with self._transaction() as db:
            for table in _TABLES:
                db.execute(f"DELETE FROM {table}")
            fresh = {**meta, "id": uuid.uuid4().hex, "generation": "0"}
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(fresh.items()))
        self._loaded, self._misfiled, self._stamps = {"wheels": {}, "twins": {}}, {}, {"wheels": {}, "twins": {}}

    def _releases(self, table: str) -> dict[str, dict[str, Any]]:
        """The rows of ``table`` by release and filename, read on first use: each release's value decoded whole, and
        checked against the fields' types (a damaged one is left out, and written again with its files' rows)."""
        if table in self._loaded:
            return self._loaded[table]
        import msgspec  # only for a run that reads rows

        decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
            list[WheelRow] if table == "wheels" else list[TwinRow]
        )
        with _state_errors(self.path):
            stored = self._db.execute(f"SELECT release, rows, stamp FROM {table}").fetchall()
        releases: dict[str, dict[str, Any]] = {}
        stamps: dict[str, str] = {}
        mixed: set[str] = set()  # releases holding rows stored under another release's key
        for release, value, stamp in stored:
            try:
                rows = decoder.decode(value)
            except (msgspec.MsgspecError, TypeError) as error:
                log.info("%s: the %s rows of release %r are unreadable (%s); their files are checked again",
                         self.path, table, release, error)
                continue
            names = list(map(FILENAME, rows))
            if _all_of(release, names):  # as written: every row under its own release
                releases.setdefault(release, {}).update(zip(names, rows))
                if isinstance(stamp, str) and stamp:
                    stamps[release] = stamp
                continue
            for row in rows:
                releases.setdefault(release_of(row.filename), {})[row.filename] = row
                mixed.add(release_of(row.filename))
            self._misfiled.setdefault(table, set()).add(release)  # written again, as its rows' releases are
        for release in mixed:
            stamps.pop(release, None)
        self._loaded[table], self._stamps[table] = releases, stamps
        return releases

    def _change(self, table: str, rows: Iterable[Any], gone: Iterable[str]) -> set[str]:
        """Apply these changes to the rows held in memory; the releases they touch."""
        changed: set[str] = set()
        rows, gone = list(rows), list(gone)
        releases = self._releases(table) if rows or gone else {}
        for name in gone:
            release = release_of(name)
            releases.get(release, {}).pop(name, None)
            changed.add(release)
        for row in rows:
            release = release_of(row.filename)
            releases.setdefault(release, {})[row.filename] = row
            changed.add(release)
        return changed

    def _write(self, changed: Mapping[str, set[str]], meta: Mapping[str, str], *, generation: bool = True) -> None:
        """Write the rows of the ``changed`` releases of each table, and ``meta``, in one transaction: a new
        generation, where rows changed and ``generation``."""
        if not any(changed.values()) and not meta:
            return
        import msgspec

        encode = msgspec.msgpack.Encoder().encode
        stamp = uuid.uuid4().hex  # of every release this write holds
        written: dict[str, dict[str, str | None]] = {}
        with self._transaction() as db:
            for table, releases in changed.items():
                held = self._loaded.get(table, {})
                for release in sorted(releases):
                    rows = sorted(held.get(release, {}).values())
                    if rows:
                        db.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)", (release, encode(rows), stamp))
                    else:
                        db.execute(f"DELETE FROM {table} WHERE release = ?", (release,))
                    written.setdefault(table, {})[release] = stamp if rows else None
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(meta.items()))
            if generation and any(changed.values()):
                db.execute(_NEXT_GENERATION)
        for table, stamped in written.items():  # committed: the rows held are these stamps' now
            stamps = self._stamps.setdefault(table, {})
            for release, new in stamped.items():
                if new is None:
                    stamps.pop(release, None)
                else:
                    stamps[release] = new

    def generation(self) -> str:
        """Which catalogue this is: the state's id (new with every new state file) and the count of its changes
        (every write of rows adds one). Equal only while every row is as it was."""
        meta = self.meta()
        return f"{meta.get('id', '')}:{meta.get('generation', '')}"

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return write_transaction(self._db, self.path, _state_errors)


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


def release_of(filename: str) -> str:
    """The release a file's row is kept under: its name's project and public version, ``causal_conv1d-1.7.0`` of
    the wheel ``causal_conv1d-1.7.0+pt214cu130-cp311-...`` and of its twin ``causal_conv1d-1.7.0-cp311-...``. So a
    release's rows sit together in the order of their names, which is the order a run goes through them in."""
    dist, _, rest = filename.partition("-")
    return f"{dist}-{rest.partition('-')[0].partition('+')[0]}"


def _flat(releases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The rows of every release in one dict: a dict updated per release (in C), not a line of Python per row."""
    rows: dict[str, Any] = {}
    for of_release in releases.values():
        rows.update(of_release)
    return rows


def _all_of(release: str, names: list[str]) -> bool:
    """Whether each of ``names`` is kept under ``release`` (release_of), by its prefix alone: a name that begins
    with a release key of one name and one version (``causal_conv1d-1.7.0``) and a ``+`` or ``-`` is of that
    release. One call in C for all of a release's rows, not a split of each name: 100,000 rows a run."""
    if release.count("-") != 1 or "+" in release:
        return False
    return all(map(str.startswith, names, itertools.repeat((f"{release}+", f"{release}-"))))


def state_path(ledger_path: Path) -> Path:
    """Where the state of the output whose ledger is ``ledger_path`` lives."""
    return ledger_path.with_name(STATE_FILE)
