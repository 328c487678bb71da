"""The output folder a build writes and the index reads (a wheelhouse): where each of its parts lives, named once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

DIST = "dist"  # verified wheels only
VARIANT = "variant"  # their PEP 825 variant twins, verified again
QUARANTINE = "quarantine"  # built, refused by the verify gate
LOGS = "logs"  # one log (and compile timeline) a job
TMP = "tmp"  # work in flight
LEDGER = "ledger.sqlite"  # one row a job: what was built, from what, and how it ended
SITE = "site"  # the index `wheelwright index` writes, unless --site names another folder


class Identified(Protocol):
    @property
    def identifier(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class Layout:
    """The output folder: dist/, variant/, quarantine/, logs/, ledger.sqlite, tmp/, and the index's site/."""

    root: Path

    @property
    def dist(self) -> Path:
        return self.root / DIST

    @property
    def variant(self) -> Path:
        return self.root / VARIANT

    @property
    def quarantine(self) -> Path:
        return self.root / QUARANTINE

    @property
    def logs(self) -> Path:
        return self.root / LOGS

    @property
    def tmp(self) -> Path:
        return self.root / TMP

    @property
    def ledger(self) -> Path:
        return self.root / LEDGER

    @property
    def site(self) -> Path:
        return self.root / SITE

    def log_for(self, job: Identified) -> Path:
        return self.logs / f"{job.identifier}.log"

    def timeline_for(self, job: Identified) -> Path:
        """The job's compile timeline (builder/steps/timeline.py), kept beside its log."""
        return self.logs / f"{job.identifier}.timeline.jsonl"
