"""The catalog: every wheel in dist/ with its digest and core metadata, every file there the index refuses with
why, plus the failed builds from the ledger.

What the index learnt of each file lives in the index state (state.py) with the full identity (inode, size, mtime,
ctime) the file had then: a file that keeps it costs one stat, anything else is judged again (its name, then its
bytes, read from one open descriptor). Digests come from the build ledger for wheels it built and still holds to
the same identity, else from hashing. Only regular files are catalogued: a symlink, FIFO or device named like a
wheel is refused, never followed or read."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

from builder.core import resources
from builder.core.archive import Archive
from builder.core.hashing import FileIdentity, open_regular, sha256_stream
from builder.core.ledger import Ledger, LedgerEntry
from index_site.inputs import Listing, ledger_digest, ledger_identity, ledger_meta, listing
from index_site.report import Rejection, ScanStats

if TYPE_CHECKING:
    from builder.plan.releases import TorchFacts
from index_site.state import (
    FILENAME,
    ROW_IDENTITY,
    WHEEL_VERDICT,
    IndexState,
    WheelRow,
    accepted,
    columns,
    state_path,
)
from index_site.wheels import (
    MAX_METADATA_BYTES,
    MAX_PROVENANCE_BYTES,
    METADATA,
    PROVENANCE,
    CoreMetadata,
    GpuArchs,
    RejectedWheel,
    WheelFile,
    WheelName,
    accepted_names,
    check_core_metadata,
    check_provenance,
    check_variant,
    open_dist_info,
    parse_gpu_archs,
    parse_wheel_name,
    released_variants,
)

log = logging.getLogger(__name__)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What the index checks of a wheel's bytes: a new version judges every file of dist/ again (its name alone is
# judged again whenever the torch facts change).
CHECKS_VERSION = "1"
NAME, CONTENT = "name", "content"  # how far a file was judged: by its name alone, or by its bytes too
# Why a wheel gets no variant twin, known as soon as its .dist-info is read: nothing to make one from.
NO_PROVENANCE = "no wheelwright.json (built before provenance was recorded, or not by wheelwright)"


@dataclass(frozen=True, kw_only=True)
class Catalog:
    wheels: tuple[WheelFile, ...]
    rejected: tuple[Rejection, ...]
    failures: tuple[LedgerEntry, ...]
    stats: ScanStats
    fresh_metadata: Mapping[str, bytes] = field(default_factory=dict)  # METADATA read this run, by wheel filename
    identities: Mapping[str, FileIdentity] = field(default_factory=dict)  # of each wheel when its hash held
    archs: Mapping[str, GpuArchs] = field(default_factory=dict)  # by wheel filename, where the ledger recorded them
    rows: Mapping[str, WheelRow] = field(default_factory=dict)  # the state's row of every file judged, by filename
    channel: tuple[Any, ...] = ()  # fallback.ChannelSize of each build with slim wheels on the variant channel
    facts: TorchFacts | None = None  # the torch facts the pages for people show (None: read them from the file)


@dataclass(frozen=True, kw_only=True)
class Judged:
    """Every file of dist/ judged, as the state's rows, before any of them is made into a WheelFile: a re-index
    that finds nothing moved needs no more."""

    rows: Mapping[str, WheelRow]  # by filename: accepted ("" verdict) or refused with why
    unjudged: tuple[Rejection, ...]  # files that have no row: not regular files, or unreadable while read
    failures: tuple[LedgerEntry, ...]
    archs: Mapping[str, GpuArchs]  # of accepted wheels, where the ledger recorded them
    stats: ScanStats
    fresh_metadata: Mapping[str, bytes]  # METADATA read this run, by wheel filename
    fresh_twins: Mapping[tuple[str, str], bytes] = field(default_factory=dict)  # (twin, member): derived this run
    ledger: str = ""  # ledger_digest of the ledger read

    @property
    def rejected(self) -> tuple[Rejection, ...]:
        refusals = itertools.compress(self.rows.values(), map(WHEEL_VERDICT, self.rows.values()))  # a few: C's pass
        refused = [Rejection(filename=row.filename, reason=row.verdict) for row in refusals]
        return tuple(sorted([*refused, *self.unjudged], key=lambda rejection: rejection.filename))


def scan(dist: Path, ledger_path: Path, state: IndexState | None = None) -> Catalog:
    """Catalogue ``dist`` using the ledger at ``ledger_path`` and the index state (by default beside the ledger);
    the state is brought up to date."""
    if state is None:
        with IndexState(state_path(ledger_path)) as opened:
            return scan(dist, ledger_path, opened)
    return catalog_of(judge(dist, ledger_path, state))


# What a wheel's twin is, worked out from the wheel while the catalog reads it (twins.py's deriver): the text its
# row keeps in ``derived``, and the twin's files read this run, by (twin, member); None where it has none.
Deriver = Callable[[BinaryIO, Archive, WheelName], "tuple[str, Mapping[tuple[str, str], bytes]] | None"]


def judge(
    dist: Path, ledger_path: Path, state: IndexState, derive: Deriver | None = None, listed: Listing | None = None
) -> Judged:
    """Judge every file of ``dist`` (``listed``: as listing() found it, if this run has listed it already): by its
    state row while it keeps the row's identity, else by its name and bytes (and ``derive`` works out the twin of a
    wheel with provenance from the same read); the state is brought up to date."""
    found, unjudged = listed or listing(dist)
    listed_files, unjudged = dict(found), list(unjudged)
    known, releases = _known_rows(state)
    identity = ledger_identity(ledger_path)  # before the read: a commit after it moves it (read_ledger)
    with Ledger(ledger_path) as ledger:
        failures = tuple(ledger.failures())
        recorded_archs = ledger.wheel_archs()
        judging = _Judging(dist, listed_files, known, releases)
        rows, stats, fresh, changed = judging.judge(ledger, derive, RecordedFacts(state))
    digest = ledger_digest(failures, recorded_archs)
    state.write(wheels=changed, wheels_gone=known.keys() - rows.keys(), meta=ledger_meta(identity, digest))
    unjudged += [Rejection(filename=name, reason=reason) for name, reason in fresh.items() if isinstance(reason, str)]
    indexed = list(map(WHEEL_VERDICT, rows.values())).count("")
    log.info("judged %d files (%s); refused %d", len(rows), stats, len(rows) - indexed + len(unjudged))
    read = [data for data in fresh.values() if not isinstance(data, str)]
    return Judged(
        rows=rows,
        unjudged=tuple(unjudged),
        ledger=digest,
        failures=failures,
        archs=_archs(rows, recorded_archs),
        stats=stats,
        fresh_metadata={name: data.metadata for name, data in fresh.items() if not isinstance(data, str)},
        fresh_twins={key: content for data in read for key, content in data.twin.items()},
    )


class _Read(NamedTuple):
    """What judging a wheel read of it: its METADATA, and its twin's files as derived."""

    metadata: bytes
    twin: Mapping[tuple[str, str], bytes]


def catalog_of(judged: Judged) -> Catalog:
    """The catalog of the accepted wheels, each made from its row: column by column (loops in C, and no per-call
    checks of the named tuples: four per wheel, every run that renders)."""
    listed = accepted(judged.rows)
    filenames = list(map(FILENAME, listed))
    build = functools.partial(map, tuple.__new__)
    metadata = build(itertools.repeat(CoreMetadata), map(_METADATA, listed))
    shown = zip(accepted_names(filenames), map(_SHA256_OF, listed), map(_SIZE, listed), metadata,
                map(_UPLOADED, listed), strict=True)
    identities = build(itertools.repeat(FileIdentity), map(ROW_IDENTITY, listed))
    return Catalog(
        wheels=tuple(build(itertools.repeat(WheelFile), shown)),
        rejected=judged.rejected,
        failures=judged.failures,
        stats=judged.stats,
        fresh_metadata=judged.fresh_metadata,
        identities=dict(zip(filenames, identities, strict=True)),
        archs=judged.archs,
        rows=judged.rows,
    )


_SHA256_OF, _SIZE, _UPLOADED = (columns(WheelRow, field) for field in ("sha256", "size", "upload_time"))
_METADATA = columns(WheelRow, "metadata_sha256", "metadata_size", "requires_python", "summary")  # CoreMetadata's


def _known_rows(state: IndexState) -> tuple[dict[str, WheelRow], Mapping[str, Mapping[str, WheelRow]]]:
    """The state's rows, each still judged by today's checks, and by release where none was judged again: a new
    CHECKS_VERSION forgets them all; new torch facts judge each name again (a name refused now keeps its row's
    identity, so it costs one stat next time)."""
    meta = state.meta()
    facts = _facts_digest()
    if meta.get("checks") != CHECKS_VERSION:
        state.forget_all({"checks": CHECKS_VERSION, "facts": facts})
        return {}, {}
    rows = state.wheels()
    if meta.get("facts") == facts:
        return rows, state.wheel_releases()
    judged = {}
    for filename, row in rows.items():
        if row.stage == NAME:
            continue  # its bytes were never read: judged anew
        reason = _name_problem(filename)
        judged[filename] = row._replace(stage=NAME, verdict=reason) if reason else row
    state.write(wheels=judged.values(), wheels_gone=rows.keys() - judged.keys(), meta={"facts": facts})
    return judged, {}


def _name_problem(filename: str) -> str:
    try:
        check_variant(parse_wheel_name(filename))
    except RejectedWheel as error:
        return str(error)
    return ""


class RecordedFacts:
    """The torch facts, kept in the state as JSON with the digest of the file they were read from: a run that
    judges a new wheel's name or renders the pages for people reads no facts file then (its pydantic models cost a
    tenth of a second to import). Facts the state does not hold for today's file are read from it, and kept."""

    def __init__(self, state: IndexState) -> None:
        self.state = state
        self.found: TorchFacts | None = None
        self.released: frozenset[str] = frozenset()

    def facts(self) -> TorchFacts:
        if self.found is None:
            self.found = self._read()
            self.released = frozenset(released_variants(self.found))
        return self.found

    def variants(self) -> frozenset[str]:
        """The variants torch shipped (wheels.released_variants)."""
        self.facts()
        return self.released

    def _read(self) -> TorchFacts:
        from builder.plan.releases import TorchFacts

        digest = _facts_digest()
        try:
            recorded = json.loads(self.state.meta().get("torch facts", "null"))
            if isinstance(recorded, dict) and recorded.get("digest") == digest:
                return TorchFacts.from_json(str(recorded["facts"]))
        except (ValueError, KeyError, TypeError):
            pass  # damaged: read the file again
        from builder.plan.facts import load_facts

        facts = load_facts()
        self.state.write(meta={"torch facts": json.dumps({"digest": digest, "facts": facts.to_json()})})
        return facts


def _facts_digest() -> str:
    return hashlib.sha256(resources.TORCH_FACTS.read_bytes()).hexdigest()


class _Judging:
    """Judging the listed files of dist/ against the state's rows (``known``, and by release in ``releases``)."""

    def __init__(
        self,
        dist: Path,
        listed: Mapping[str, FileIdentity],
        known: Mapping[str, WheelRow],
        releases: Mapping[str, Mapping[str, WheelRow]],
    ) -> None:
        self.dist, self.listed, self.known, self.releases = dist, listed, known, releases

    def held(self) -> tuple[dict[str, WheelRow], list[str]]:
        """The rows whose files keep their identities, and the listed files that have none. A release whose every
        file keeps its row's identity is taken whole, its identities compared as two lists (in C): at 100,000
        wheels a line of Python per file took a tenth of a CPU-second."""
        listed, known = self.listed, self.known
        rows: dict[str, WheelRow] = {}
        for of_release in self.releases.values():
            if list(map(listed.get, of_release)) == list(map(ROW_IDENTITY, of_release.values())):
                rows.update(of_release)
        misses = []
        for filename in sorted(listed.keys() - rows.keys()):  # in a release with a file moved, added or gone
            row = known.get(filename)
            if row is not None and ROW_IDENTITY(row) == listed[filename]:
                rows[filename] = row
            else:
                misses.append(filename)
        return rows, misses

    def judge(
        self, ledger: Ledger, derive: Deriver | None, released: RecordedFacts
    ) -> tuple[dict[str, WheelRow], ScanStats, dict[str, _Read | str], list[WheelRow]]:
        """The row of every listed file: its known row while the file keeps the row's identity, else judged again.
        Also what this run read: {filename: _Read} for wheels read, {filename: reason} for files that could not
        be judged (gone or unreadable while being read: no row, so they are judged again next time); and the rows
        judged again."""
        rows, misses = self.held()
        fresh: dict[str, _Read | str] = {}
        changed = []
        built = ledger.wheel_hashes(misses) if misses else {}
        counts = {"hashed": 0, "from_ledger": 0, "cached": list(map(WHEEL_VERDICT, rows.values())).count("")}
        for filename in misses:
            try:
                row, source, data = _judge_one(
                    self.dist / filename, self.listed[filename], self.known.get(filename), built.get(filename),
                    derive, released,
                )
            except OSError as error:
                reason = f"{filename}: {error.strerror or error}"
                log.info("not indexed: %s", reason)
                fresh[filename] = reason
                continue
            rows[filename] = row
            changed.append(row)
            if source:
                counts[source] += 1
            if data is not None:
                fresh[filename] = data
        return {name: rows[name] for name in sorted(rows)}, ScanStats(**counts), fresh, changed  # keys alone: 5x


def _judge_one(
    path: Path,
    listed: FileIdentity,
    old: WheelRow | None,
    built: tuple[str, FileIdentity] | None,
    derive: Deriver | None,
    released: RecordedFacts,
) -> tuple[WheelRow, str, _Read | None]:
    """The file's row (accepted, or refused with why), how its digest was had ("hashed", "from_ledger", or "" for
    none) and what was read of it. A refusal by name reads nothing; METADATA, the twin and the digest are read
    from one open descriptor, so all describe the same inode."""
    filename = path.name
    try:
        name = parse_wheel_name(filename)
        check_variant(name, released=released.variants())
    except RejectedWheel as error:
        log.info("not indexed: %s", error)
        return _refused(filename, listed, NAME, str(error)), "", None
    with os.fdopen(open_regular(path), "rb") as file:
        identity = FileIdentity.of(os.fstat(file.fileno()))
        try:
            archive, data, metadata, has_provenance = _read_checked(file, name)
        except RejectedWheel as error:
            log.info("not indexed: %s", error)
            return _refused(filename, identity, CONTENT, str(error)), "", None
        derived = derive(file, archive, name) if derive is not None and has_provenance else None
        if built is not None and built[1] == identity and _SHA256.match(built[0]):
            sha256, source = built[0], "from_ledger"
        else:
            file.seek(0)
            sha256, source = sha256_stream(file), "hashed"
        if FileIdentity.of(os.fstat(file.fileno())) != identity:
            raise OSError("changed while it was being read; index again when it is written")
    same_bytes = old is not None and old.sha256 == sha256 and not old.verdict
    upload_time = old.upload_time if old is not None and same_bytes else identity.mtime_ns / 1e9
    row = WheelRow(
        filename, *identity, CONTENT, "", sha256, metadata.sha256, metadata.size, metadata.requires_python,
        metadata.summary, upload_time, None if has_provenance else NO_PROVENANCE, derived[0] if derived else "",
    )
    return row, source, _Read(data, derived[1] if derived else {})


def _read_checked(file: BinaryIO, name: WheelName) -> tuple[Archive, bytes, CoreMetadata, bool]:
    """The wheel's archive, its METADATA, checked against the name, and the provenance record where the wheel has
    one (bounded reads); whether it has one."""
    wanted = {METADATA: MAX_METADATA_BYTES, PROVENANCE: MAX_PROVENANCE_BYTES}
    archive, found = open_dist_info(file, name.filename, wanted, required=(METADATA,))
    metadata = check_core_metadata(found[METADATA], name)
    if PROVENANCE in found:
        check_provenance(found[PROVENANCE], name)
    return archive, found[METADATA], metadata, PROVENANCE in found


def _refused(filename: str, identity: tuple[int, int, int, int], stage: str, reason: str) -> WheelRow:
    return WheelRow(filename, *identity, stage, reason, "", "", 0, None, None, 0.0, None, "")


def _archs(rows: Mapping[str, WheelRow], recorded: Mapping[str, tuple[str, str, str | None]]) -> dict[str, GpuArchs]:
    """The GPU archs of the accepted wheels among ``rows`` whose ledger row holds a readable record of them (the
    ledger's rows walked, not the wheels: a farm's ledger records a few hundred, dist/ may hold 10,000 wheels it did
    not build)."""
    archs = {}
    parse = functools.cache(parse_gpu_archs)  # a farm's builds share a few records: each parsed once
    for filename, raw in recorded.items():
        row = rows.get(filename)
        if row is None or row.verdict:
            continue
        parsed = parse(*raw)
        if parsed is not None:
            archs[filename] = parsed
    return archs
