"""What an index run reports (IndexReport), and the summary of it a complete run keeps in the index state so that
the next run, finding nothing moved, reports the same without judging a file (site.py's quiet run)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from index_site.catalog import Rejection, ScanStats
from index_site.twins import TwinReport


@dataclass(frozen=True, kw_only=True)
class IndexReport:
    site: Path
    wheels: int
    variants: tuple[str, ...]
    stats: ScanStats
    rejected: tuple[Rejection, ...]
    failures: int
    written: tuple[str, ...]  # site paths written this run (wheels linked, metadata, pages)
    deleted: tuple[str, ...]
    unchanged: int
    twins: TwinReport = field(default_factory=TwinReport)
    twins_published: int = 0  # the variant twins the site publishes


def summary(report: IndexReport) -> dict[str, Any]:
    """What the site holds, as the report says it: a quiet run's report is made from it (from_summary)."""
    twins = report.twins
    return {
        "wheels": report.wheels,
        "variants": list(report.variants),
        "rejected": [[r.filename, r.reason] for r in report.rejected],
        "failures": report.failures,
        "twins": {
            "folder": twins.folder,
            "published": report.twins_published,
            "refused": [[r.filename, r.reason] for r in twins.refused],
            "without": {why: list(wheels) for why, wheels in twins.without.items()},
        },
    }


def from_summary(site: Path, kept: Mapping[str, Any], unchanged: int) -> IndexReport:
    """The report of a run that found nothing moved since the run that kept ``kept``: the same wheels, refusals
    and twins, each accepted wheel cached, nothing written; KeyError, TypeError or ValueError where ``kept`` is not
    a summary."""
    twins = kept["twins"]
    return IndexReport(
        site=site,
        wheels=int(kept["wheels"]),
        variants=tuple(str(label) for label in kept["variants"]),
        stats=ScanStats(cached=int(kept["wheels"])),
        rejected=_rejections(kept["rejected"]),
        failures=int(kept["failures"]),
        written=(),
        deleted=(),
        unchanged=unchanged,
        twins=TwinReport(
            folder=str(twins["folder"]),
            refused=_rejections(twins["refused"]),
            without={str(why): tuple(str(wheel) for wheel in wheels) for why, wheels in twins["without"].items()},
        ),
        twins_published=int(twins["published"]),
    )


def _rejections(raw: list[list[str]]) -> tuple[Rejection, ...]:
    return tuple(Rejection(filename=str(filename), reason=str(reason)) for filename, reason in raw)
