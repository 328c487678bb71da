"""What an index run reports (IndexReport: the files refused and why, how each was judged, the twins published),
and the summary of it a complete run keeps in the index state so that the next run, finding nothing moved, reports
the same without judging a file (quiet.py). A run that finds nothing moved imports this and not the judging."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from index_site.state import TwinRow
    from index_site.variants import VariantWheel


@dataclass(frozen=True, kw_only=True)
class Rejection:
    filename: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class ScanStats:
    hashed: int = 0  # read and hashed in full
    from_ledger: int = 0  # digest taken from the build ledger
    cached: int = 0  # unchanged since the last index run (one stat)


@dataclass(frozen=True, kw_only=True)
class TwinReport:
    folder: str = ""  # OUTPUT/variant
    published: tuple[TwinRow, ...] = ()  # the rows of the twins published, by filename
    made: tuple[str, ...] = ()  # twins made this run
    remade: tuple[Rejection, ...] = ()  # twins that were not their wheel's, made again
    refused: tuple[Rejection, ...] = ()  # files of variant/ not published, and why
    without: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # {why no twin: wheels of dist/}
    fresh: Mapping[tuple[str, str], bytes] = field(default_factory=dict)  # (twin, member): bytes read this run
    listing: Mapping[str, Sequence[int]] = field(default_factory=dict)  # variant/'s twins, with identities as left
    strays: bool = False  # variant/ holds something not named like a twin, or not a regular file

    @functools.cached_property
    def twins(self) -> tuple[VariantWheel, ...]:
        """The twins published, as the channel's pages show them (made only for a run that renders)."""
        from index_site.variants import variant_wheels  # only for a run that renders

        return variant_wheels(self.folder, self.published)


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
