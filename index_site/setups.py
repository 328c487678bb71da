"""The selector's model: one setup per variant and Python (``select/pt214cu130-cp311.html``), each with its choices
of torch, accelerator and Python (links to the neighbouring setups) and, per project, the one install command for
pip and for uv, or why there is no wheel."""

from __future__ import annotations

import operator
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from builder.core.ledger import LedgerEntry
from builder.plan.accelerator import version_key
from index_site import layout
from index_site.landing import (
    BUILT,
    FAILED,
    NOT_SHIPPED,
    Cell,
    Coverage,
    Release,
    Variant,
    cpu_platform,
    entry_platform,
    platform_key,
    python_key,
)
from index_site.wheels import WheelFile

SHOWN = 4  # versions of a project a setup page details; a farm's long history would make every page heavy


class Choice(NamedTuple):  # a tuple: every setup page has a few dozen, all built again for one added wheel
    text: str
    path: str  # site path of the setup this choice leads to
    current: bool


class Record(NamedTuple):
    """What the site holds for one version of a project on one setup (a tuple: one per wheel of the site)."""

    version: str
    state: str  # BUILT | FAILED (a failed record may hold the wheels of the platforms that built)
    wheels: tuple[WheelFile, ...] = ()
    failures: tuple[LedgerEntry, ...] = ()  # one per platform without a wheel

    @property
    def failure(self) -> LedgerEntry | None:
        return self.failures[0] if self.failures else None


@dataclass(frozen=True, kw_only=True)
class Offer:
    """One project on one setup: its newest wheel here and the commands that install exactly that wheel."""

    project: str
    wheel: WheelFile | None
    pip: str = ""
    uv: str = ""
    note: str = ""  # why the newest version recorded here has no wheel, or why nothing is
    records: tuple[Record, ...] = ()  # the newest SHOWN versions recorded here, newest first
    more: int = 0  # older versions recorded here beyond those (the find-links page lists every wheel)
    # (CPU platform, wheel filename) of the installed version's wheels: one label's page serves them all, and pip
    # and uv pick by the machine they run on (x86_64, aarch64)
    platforms: tuple[tuple[str, str], ...] = ()
    missing: tuple[tuple[str, str], ...] = ()  # (CPU platform, why) of the newest version's platforms that failed

    def platform_note(self, platform: str) -> tuple[str, bool]:
        """What the selector says for this project on ``platform``, and whether it is a warning (no wheel)."""
        filename = next((f for p, f in self.platforms if p == platform), None)
        if filename is not None:
            return f"on {platform} the command installs {filename}", False
        why = next((w for p, w in self.missing if p == platform), None)
        return why or f"no {self.project} wheel for {platform} here", True

    @property
    def built_platforms(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.platforms)


@dataclass(frozen=True, kw_only=True)
class Setup:
    variant: Variant
    python: str
    path: str
    torches: tuple[Choice, ...]
    accelerators: tuple[Choice, ...]
    pythons: tuple[Choice, ...]
    offers: tuple[Offer, ...]

    @property
    def platforms(self) -> tuple[str, ...]:
        """The CPU platforms this setup's wheels are built (or failed) for; the selector offers a choice of two or
        more."""
        built = {platform for offer in self.offers for platform, _ in (*offer.platforms, *offer.missing)}
        return tuple(sorted(built, key=platform_key))

    @property
    def key(self) -> str:
        """``pt214cu130-cp311``: the page name, also the id the selector's script knows it by."""
        return self.path.rsplit("/", 1)[1].removesuffix(".html")


def build_setups(coverage: Coverage, *, base_url: str) -> dict[str, Setup]:
    """Every setup page, by site path: each Python torch shipped for a variant of the site, and any other the
    site holds a wheel or a failure for."""
    base_url = base_url.rstrip("/")
    summaries = [_summary(release) for release in coverage.releases]
    records: dict[_RecordKey, list[Record]] = {}
    for summary in summaries:  # newest version first within a project
        for key, record in summary.records:
            records.setdefault(key, []).append(record)
    navigator = _navigator(coverage, summaries)
    projects = coverage.projects
    setups = {}
    for variant in coverage.variants.values():
        for python in variant.pythons:
            path = layout.setup_path(variant.label, python)
            offers = tuple(
                _offer(project, variant, python, records.get((project, variant.label, python), []), base_url)
                for project in projects
            )
            setups[path] = _setup(variant, python, path, offers, navigator.choices(variant, python))
    return setups


def _setup(
    variant: Variant, python: str, path: str, offers: tuple[Offer, ...], choices: dict[str, tuple[Choice, ...]]
) -> Setup:
    return Setup(variant=variant, python=python, path=path, offers=offers, **choices)


class _Summary(NamedTuple):
    """What the setups take from one release: its records by (project, label, python), its wheels per label."""

    release: Release
    records: tuple[tuple[_RecordKey, Record], ...]
    labels: Counter[str]


def _summary(release: Release) -> _Summary:
    records = tuple(
        ((release.project, row.variant.label, cell.python), _record(release.version, cell))
        for row in release.rows
        for cell in row.cells
        if cell.state in (BUILT, FAILED)
    )
    # a row's cells hold wheels of its variant's label alone: counted by row, not wheel by wheel
    labels = Counter({row.variant.label: sum(map(len, map(_WHEELS, row.cells))) for row in release.rows})
    return _Summary(release, records, labels)


def _record(version: str, cell: Cell) -> Record:
    return tuple.__new__(Record, (version, *cell[1:]))  # state, wheels, failures: one per wheel, without checks


_WHEELS = operator.attrgetter("wheels")


def _navigator(coverage: Coverage, summaries: list[_Summary]) -> _Navigator:
    built: Counter[str] = Counter()
    for summary in summaries:
        built.update(summary.labels)
    return _Navigator(coverage, built)


def default_setup(coverage: Coverage, setups: Mapping[str, Setup]) -> Setup | None:
    """What the landing page shows first: the newest torch with wheels of the projects' newest versions, its
    variant with the most of them, and the Python with the most of them there (then across the site, then the
    newest)."""
    if not setups:
        return None
    per_setup = Counter((w.name.label, py) for w in _wheels(coverage, coverage.newest()) for py in w.name.pythons)
    per_label: Counter[str] = Counter()
    per_python: Counter[str] = Counter()
    for (label, python), count in per_setup.items():
        per_label[label] += count
        per_python[python] += count
    built_torches = {coverage.variants[label].torch for label in per_label}

    def rank(setup: Setup) -> tuple[object, ...]:
        variant = setup.variant
        return (
            variant.torch in built_torches,
            version_key(variant.torch),
            per_label[variant.label],
            per_setup[(variant.label, setup.python)],
            per_python[setup.python],
            python_key(setup.python),
        )

    return max(setups.values(), key=rank)


def _wheels(coverage: Coverage, releases: tuple[Release, ...] | None = None) -> list[WheelFile]:
    releases = coverage.releases if releases is None else releases
    return [w for r in releases for row in r.rows for c in row.cells for w in c.wheels]


class _Navigator:
    """Where each choice leads: change one axis, keep the others where the new variant has them."""

    def __init__(self, coverage: Coverage, built: Counter[str]) -> None:
        """``built``: the wheels of each label."""
        self._variants = list(coverage.variants.values())
        self._by_build = {(v.torch, v.accelerator): v for v in self._variants}
        self._torches = list(dict.fromkeys(v.torch for v in self._variants))
        self._main: dict[
            str, Variant
        ] = {}  # torch -> its variant with the most wheels (the first in row order on a tie)
        for variant in self._variants:
            best = self._main.get(variant.torch)
            if best is None or built[variant.label] > built[best.label]:
                self._main[variant.torch] = variant
        self.state = (tuple(self._variants), tuple(self._main.items()))  # everything choices() depends on
        self._choices: dict[tuple[str, str], dict[str, tuple[Choice, ...]]] = {}
        self._paths: dict[tuple[str, str], str] = {}  # (label, python): the setup a choice leads to

    def choices(self, variant: Variant, python: str) -> dict[str, tuple[Choice, ...]]:
        """The setup's choices, worked out once per navigator (variant labels are unique within it)."""
        key = (variant.label, python)
        choices = self._choices.get(key)
        if choices is None:
            choices = self._choices[key] = self._work_out(variant, python)
        return choices

    def _work_out(self, variant: Variant, python: str) -> dict[str, tuple[Choice, ...]]:
        siblings = [v for v in self._variants if v.torch == variant.torch]
        return {
            "torches": tuple(
                Choice(torch, self._path(self._variant(torch, variant.accelerator), python), torch == variant.torch)
                for torch in self._torches
            ),
            "accelerators": tuple(
                Choice(v.accelerator_text, self._path(v, python), v.label == variant.label) for v in siblings
            ),
            "pythons": tuple(
                Choice(text=py, path=layout.setup_path(variant.label, py), current=py == python)
                for py in variant.pythons
            ),
        }

    def _variant(self, torch: str, accelerator: str) -> Variant:
        return self._by_build.get((torch, accelerator)) or self._main[torch]

    def _path(self, variant: Variant, python: str) -> str:
        """The setup of ``variant`` nearest ``python``: a site's setups ask 7,000 times for a few hundred."""
        key = (variant.label, python)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = layout.setup_path(variant.label, _nearest(variant.pythons, python))
        return path


def _nearest(pythons: tuple[str, ...], python: str) -> str:
    """``python`` if offered, else the offered one closest to it (the same kind, free-threaded or not, first; the
    newer on a tie)."""
    if python in pythons:
        return python
    target = python_key(python.removesuffix("t"))

    def distance(candidate: str) -> tuple[int, int, int]:
        key = python_key(candidate.removesuffix("t"))
        if isinstance(key[1], str) or isinstance(target[1], str):  # not a dotted version: after every real one
            return (2, 0, 0)
        other_kind = candidate.endswith("t") != python.endswith("t")
        return (int(other_kind), abs(key[1][-1] - target[1][-1]), -key[1][-1])

    return min(pythons, key=distance)


_RecordKey = tuple[str, str, str]  # project, label, python


def _offer(project: str, variant: Variant, python: str, records: list[Record], base_url: str) -> Offer:
    built = next((r for r in records if r.wheels), None)
    note = _note(project, variant, python, records, built)
    shown, more = tuple(records[:SHOWN]), max(0, len(records) - SHOWN)
    if built is None:
        return Offer(project=project, wheel=None, note=note, records=shown, more=more)
    wheel = built.wheels[0]
    pin = shlex.quote(f"{project}=={wheel.name.version}")  # quote() leaves a plain word as it is
    findlinks = shlex.quote(f"{base_url}/{layout.findlinks_path(variant.label)}")
    return Offer(
        project=project,
        wheel=wheel,
        pip=f"pip install {pin} -f {findlinks}",
        uv=f"uv pip install {pin} -f {findlinks}",
        note=note,
        records=shown,
        more=more,
        platforms=tuple(sorted(((cpu_platform(w.name.platform_tag), w.filename) for w in built.wheels),
                               key=lambda pair: platform_key(pair[0]))),
        missing=tuple((entry_platform(f), f"{project} {built.version} {_why(f)} on {entry_platform(f)}")
                      for f in built.failures),
    )


def _note(project: str, variant: Variant, python: str, records: list[Record], built: Record | None) -> str:
    setup = f"torch {variant.torch} + {variant.accelerator_text}, Python {python}"
    failure = records[0].failure if records and not records[0].wheels else None
    if failure is not None:
        older = f"; the newest wheel here is {built.version}" if built else ""
        return f"{project} {records[0].version} {_why(failure)}{older}"
    if built is not None:
        return ""
    if variant.ships(python) is False:
        return f"no {project} wheel: torch published no build for {setup} ({NOT_SHIPPED})"
    return f"no {project} wheel for {setup}: not in the build plan"


def _why(failure: LedgerEntry) -> str:
    phase = f" in {failure.phase}" if failure.phase else ""
    return f"{failure.status}{phase}: {failure.reason or 'no reason recorded'}"
