"""Merging build outputs: the wheelhouses of many runners (CI artifacts, each with dist/, logs/, ledger.sqlite)
into one, so `wheelwright index` sees every wheel and every failure. A wheel's bytes are checked against its
ledger row; one filename with two different contents is refused rather than silently picked."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry
from builder.farm.build import Layout

# A built wheel outranks a failure of the same job (a retried job), which outranks nothing.
_RANK = {"built": 3, "quarantined": 2, "failed": 1, "unbuildable": 1, "running": 0}


@dataclass(frozen=True, kw_only=True)
class Merged:
    sources: int
    jobs: int
    wheels: int


def merge_outputs(sources: Sequence[Path], layout: Layout) -> Merged:
    for folder in (layout.dist, layout.logs):
        folder.mkdir(parents=True, exist_ok=True)
    wheels = jobs = 0
    with Ledger(layout.ledger) as ours:
        for source in sources:
            ledger = source / "ledger.sqlite"
            if not ledger.is_file():
                raise WheelwrightError(f"{source} has no ledger.sqlite; is it a wheelhouse (a build's --output)?")
            with Ledger(ledger) as theirs:
                for entry in theirs.entries():
                    if _better(entry, ours.get(entry.job_id)):
                        wheels += _take(entry, Layout(root=source), layout)
                        ours.put(dataclasses.replace(entry, log_path=str(layout.logs / f"{entry.job_id}.log")))
                        jobs += 1
    return Merged(sources=len(sources), jobs=jobs, wheels=wheels)


def _better(entry: LedgerEntry, current: LedgerEntry | None) -> bool:
    if current is None:
        return True
    return (_RANK.get(entry.status, 0), entry.updated_at) > (_RANK.get(current.status, 0), current.updated_at)


def _take(entry: LedgerEntry, source: Layout, layout: Layout) -> int:
    """Copy the job's log and, for a built job, its wheel (checked against the row's sha256)."""
    log = source.logs / f"{entry.job_id}.log"
    if log.is_file():
        shutil.copyfile(log, layout.logs / log.name)
    if entry.status != "built" or not entry.wheel:
        return 0
    wheel = source.dist / entry.wheel
    if not wheel.is_file() or sha256_of(wheel) != entry.wheel_sha256:
        raise WheelwrightError(
            f"{wheel}: missing or not the wheel its ledger row records (sha256 {entry.wheel_sha256})"
        )
    destination = layout.dist / entry.wheel
    if destination.is_file() and sha256_of(destination) != entry.wheel_sha256:
        raise WheelwrightError(
            f"{entry.wheel} comes in two different builds ({wheel} and {destination}); refusing to pick one"
        )
    shutil.copyfile(wheel, destination)
    return 1
