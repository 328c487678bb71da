"""Merging build outputs: the wheelhouses of many runners (CI artifacts, each with dist/, logs/, ledger.sqlite)
into one, so `wheelwright index` sees every wheel and every failure. Every shard is untrusted input: all rows of
all shards are checked (builder.farm.shardcheck) and the whole merge planned before anything is written. Each file
is copied into tmp/merge/ and renamed into place before its row is recorded, so a merge killed at any point leaves
every file whole (a wheel hard-linked into a site keeps its bytes) and the next merge finishes the work."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry, Status, read_entries
from builder.core.wheelhouse import Layout
from builder.farm.shardcheck import check_row

# A built wheel outranks a failure of the same job (a retried job), which outranks nothing.
_RANK = {Status.BUILT: 3, Status.QUARANTINED: 2, Status.FAILED: 1, Status.UNBUILDABLE: 1, Status.RUNNING: 0}


@dataclass(frozen=True, kw_only=True)
class Merged:
    sources: int
    jobs: int
    wheels: int


@dataclass(frozen=True, kw_only=True)
class Take:
    """One row to copy from a shard, with its log and (for a built job) its wheel."""

    entry: LedgerEntry
    shard: Layout

    @property
    def wheel(self) -> str | None:
        return self.entry.wheel if self.entry.status is Status.BUILT else None


def merge_outputs(sources: Sequence[Path], layout: Layout) -> Merged:
    shards = [(source, _read_shard(source)) for source in sources]
    takes = _plan(shards, layout)
    _apply(takes, layout)
    return Merged(sources=len(sources), jobs=len(takes), wheels=sum(t.wheel is not None for t in takes))


def _read_shard(source: Path) -> list[LedgerEntry]:
    ledger = Layout(root=source).ledger
    if not ledger.is_file():
        raise WheelwrightError(f"{source} has no ledger.sqlite; is it a wheelhouse (a build's --output)?")
    entries = read_entries(ledger)
    for entry in entries:
        check_row(entry, source)
    return entries


def _plan(shards: Sequence[tuple[Path, list[LedgerEntry]]], layout: Layout) -> list[Take]:
    """The rows to take, in order, as one pass over the shards would: a later shard's row replaces an earlier one
    only where it is better. Refuses one wheel filename with two contents before anything is written."""
    ours = {e.job_id: e for e in read_entries(layout.ledger)} if layout.ledger.is_file() else {}
    takes: list[Take] = []
    for source, entries in shards:
        for entry in entries:
            if _better(entry, ours.get(entry.job_id)):
                takes.append(Take(entry=entry, shard=Layout(root=source)))
                ours[entry.job_id] = dataclasses.replace(entry, updated_at=time.time())  # as put() stamps it
    _refuse_two_builds(takes, layout)
    return takes


def _better(entry: LedgerEntry, current: LedgerEntry | None) -> bool:
    if current is None:
        return True
    return (_RANK.get(entry.status, 0), entry.updated_at) > (_RANK.get(current.status, 0), current.updated_at)


def _refuse_two_builds(takes: Sequence[Take], layout: Layout) -> None:
    claimed: dict[str, tuple[str | None, Path]] = {}  # wheel filename: (sha256, where those bytes are)
    for take in takes:
        if take.wheel is None:
            continue
        here = take.shard.dist / take.wheel
        if take.wheel not in claimed:
            destination = layout.dist / take.wheel
            known = (sha256_of(destination), destination) if destination.is_file() else None
            claimed[take.wheel] = known or (take.entry.wheel_sha256, here)
        sha256, there = claimed[take.wheel]
        if sha256 != take.entry.wheel_sha256:
            raise WheelwrightError(
                f"{take.wheel} comes in two different builds ({here} and {there}); refusing to pick one"
            )


def _apply(takes: Sequence[Take], layout: Layout) -> None:
    staging = layout.tmp / "merge"
    shutil.rmtree(staging, ignore_errors=True)  # what a killed merge left half-copied
    for folder in (layout.dist, layout.logs, staging):
        folder.mkdir(parents=True, exist_ok=True)
    with Ledger(layout.ledger) as ours:
        for take in takes:
            log = take.shard.logs / f"{take.entry.job_id}.log"
            if log.is_file():
                _place(log, layout.logs / log.name, staging)
            if take.wheel is not None:
                _place(take.shard.dist / take.wheel, layout.dist / take.wheel, staging)
            ours.put(dataclasses.replace(take.entry, log_path=str(layout.logs / f"{take.entry.job_id}.log")))
    shutil.rmtree(staging, ignore_errors=True)


def _place(source: Path, destination: Path, staging: Path) -> None:
    """Copy ``source`` whole into ``staging``, then rename it onto ``destination``: a reader, or a merge killed
    midway, sees the old file or the new one, never part of one; and an old file's inode (a site's hard link to a
    wheel in dist/) is never rewritten."""
    part = staging / destination.name
    shutil.copyfile(source, part)
    os.replace(part, destination)
