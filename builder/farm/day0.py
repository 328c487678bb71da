"""The day-0 stage: for each planned job no build has reached, carry the newest built wheel whose ABI window holds
its torch (builder/steps/day0.py), verify the carried wheel against that torch (import included), and record it in
dist/ and the ledger under its own row; or record in that row why nothing was published. The index serves it."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from builder.core.errors import WheelError, WheelwrightError
from builder.core.hashing import FileIdentity, sha256_of
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.symbols import TorchAbi, load_index
from builder.core.wheelhouse import Layout
from builder.farm.build import _exclusive
from builder.plan.job import Job
from builder.steps import day0
from builder.steps.abi import record_of_built
from builder.steps.verify import VerifyReport

log = logging.getLogger(__name__)

PUBLISHED, KEPT, BUILT, REFUSED = "published", "kept", "built", "refused"


class Verifier(Protocol):
    """Verify a carried wheel for its job against the job's torch (the build's verify gate, import included)."""

    def __call__(self, wheel: Path, job: Job) -> VerifyReport: ...


@dataclass(frozen=True, kw_only=True)
class Outcome:
    job: Job
    state: str  # published | kept (an earlier day-0 wheel stays) | built (a real build has it) | refused
    text: str
    wheel: str | None = None


def run_day0(jobs: Sequence[Job], layout: Layout, verifier: Verifier, *, index_dir: Path | None = None,
             ) -> list[Outcome]:
    """Day-0 for every job of ``jobs`` without a built wheel of its own, under the build's lock."""
    index, problems = load_index(index_dir)
    for problem in problems:
        log.warning("symbol index: %s", problem)
    for folder in (layout.dist, layout.tmp):
        folder.mkdir(parents=True, exist_ok=True)
    with _exclusive(layout.root / ".lock"), Ledger(layout.ledger) as ledger:
        sources = _sources(ledger.entries(), layout, index)
        return [_one(job, ledger, layout, sources, index, verifier) for job in jobs]


def _sources(entries: list[LedgerEntry], layout: Layout, index: list[TorchAbi]) -> list[day0.Source]:
    """Every really built wheel still in dist/, with its window over the index as it is now."""
    found = []
    for entry in entries:
        wheel = layout.dist / (entry.wheel or "")
        if entry.status != Status.BUILT or day0.is_day0(entry) or not entry.wheel or not wheel.is_file():
            continue
        try:
            record = record_of_built(entry, wheel, index)
        except (WheelError, OSError, ValueError) as error:
            log.warning("%s: no window, not carried: %s", entry.job_id, error)
            continue
        found.append(day0.Source(entry=entry, wheel=wheel, record=record))
    return found


def _one(job: Job, ledger: Ledger, layout: Layout, sources: list[day0.Source], index: list[TorchAbi],
         verifier: Verifier) -> Outcome:
    own, earlier = ledger.get(job.identifier), ledger.get(day0.row_id(job))
    if own is not None and own.status == Status.BUILT and own.wheel and (layout.dist / own.wheel).is_file():
        if earlier is not None and earlier.status != Status.BUILT:  # a refusal the build has made untrue
            ledger.remove(earlier.job_id)
        return Outcome(job=job, state=BUILT, text=f"built: {own.wheel}", wheel=own.wheel)
    if earlier is not None and earlier.status == Status.BUILT and (layout.dist / (earlier.wheel or "")).is_file():
        # Served once, kept as it is: a lock file may hold its hash.
        return Outcome(job=job, state=KEPT, text=f"kept: {earlier.wheel}", wheel=earlier.wheel)
    choice = day0.choose(job, sources, index)
    if choice.source is None:
        ledger.put(_row(job, Status.UNBUILDABLE, reason=choice.reason, input_hash=_digest(job, "none")))
        return Outcome(job=job, state=REFUSED, text=choice.reason)
    return _carry(job, choice.source, ledger, layout, verifier)


def _carry(job: Job, source: day0.Source, ledger: Ledger, layout: Layout, verifier: Verifier) -> Outcome:
    started = time.monotonic()
    abi = day0.day0_record(source.record, source.entry, job)
    digest = _digest(job, source.entry.wheel_sha256 or "")
    folder = layout.tmp / f"day0-{os.getpid()}"
    try:
        try:
            wheel = day0.carry(source.wheel, source.entry, job, folder, abi)
        except WheelError as error:  # a source day-0 cannot rewrite costs its label, not the run
            reason = f"day-0: {source.entry.wheel} cannot be carried to torch {job.torch}: {error}"
            ledger.put(_row(job, Status.UNBUILDABLE, reason=reason, input_hash=digest))
            return Outcome(job=job, state=REFUSED, text=reason)
        carried = time.monotonic()
        try:
            report = verifier(wheel, job)
        except WheelwrightError as error:  # no torch for the job here (another CPU, not buildable): no proof
            reason = f"day-0: {wheel.name} could not be verified against torch {job.torch}: {error}"
            ledger.put(_row(job, Status.UNBUILDABLE, reason=reason, input_hash=digest))
            return Outcome(job=job, state=REFUSED, text=reason)
        timings = {"day0": round(carried - started, 3), "verify": round(time.monotonic() - carried, 3)}
        if not report.ok:
            reason = (f"day-0: {wheel.name}, carried from {source.entry.wheel}, failed verify against torch "
                      f"{job.torch}: {'; '.join(report.reasons)}")
            ledger.put(_row(job, Status.UNBUILDABLE, reason=reason, input_hash=digest, timings=timings))
            return Outcome(job=job, state=REFUSED, text=reason)
        return _install(job, wheel, source, ledger, layout, report, abi, digest, timings)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _install(job: Job, wheel: Path, source: day0.Source, ledger: Ledger, layout: Layout, report: VerifyReport,
             abi: dict[str, object], digest: str, timings: dict[str, float]) -> Outcome:
    """Into dist/ under a name nothing there holds (a day-0 wheel never replaces a file), then its row."""
    destination = layout.dist / wheel.name
    if destination.exists():
        reason = f"day-0: dist/ already holds {wheel.name}, which no row of this label records; left as it is"
        ledger.put(_row(job, Status.UNBUILDABLE, reason=reason, input_hash=digest, timings=timings))
        return Outcome(job=job, state=REFUSED, text=reason)
    checksum, size = sha256_of(wheel), wheel.stat().st_size
    os.replace(wheel, destination)
    ledger.put(_row(
        job, Status.BUILT, input_hash=digest, timings=timings, wheel=destination.name, wheel_sha256=checksum,
        wheel_size=size, report=day0.report_json(report.as_dict()), toolchain=source.entry.toolchain,
        torch_wheel=source.entry.torch_wheel, abi=json.dumps(abi, sort_keys=True),
        wheel_identity=str(FileIdentity.of(destination.stat())), reason=day0.statement(source.entry, job)))
    return Outcome(job=job, state=PUBLISHED, text=day0.statement(source.entry, job), wheel=destination.name)


def _digest(job: Job, source_sha256: str) -> str:
    return hashlib.sha256(f"day0\0{job.identifier}\0{source_sha256}".encode()).hexdigest()


def _row(job: Job, status: Status, **fields: object) -> LedgerEntry:
    return LedgerEntry(job_id=day0.row_id(job), package=job.package, version=job.version, label=job.label,
                       torch=job.torch, accelerator=job.accelerator.name, python=job.python, status=status,
                       phase="day0", **fields)  # type: ignore[arg-type]
