"""The coverage model: for each package version a matrix of variants (torch x accelerator) by Python, each cell
built, failed (with the ledger's reason, per CPU platform), not shipped by torch (n/a, from the torch facts) or not
in the plan."""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.ledger import LedgerEntry, Status
from builder.plan.accelerator import Accelerator, parse_label, version_key
from builder.plan.facts import load_facts
from builder.plan.releases import DEFAULT_PLATFORM, PLATFORMS, TorchFacts
from index_site.catalog import Catalog
from index_site.wheels import GpuArchs, WheelFile

log = logging.getLogger(__name__)

BUILT, FAILED = Status.BUILT, Status.FAILED  # a row that did not end in a wheel shows as failed, whatever its status
NOT_SHIPPED, NOT_PLANNED = "n/a", "not planned"  # what a cell without a ledger row shows
SUMMARY_SHOWN = 200  # characters of a release's Summary the landing and coverage pages show
_PYTHON = re.compile(r"^3\.\d{1,2}t?$")  # 3.13t: the free-threaded 3.13
_PROJECT = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One torch build: a row of every matrix and the first two choices of the selector."""

    label: str
    torch: str  # minor: 2.14
    accelerator: str  # cu130, rocm6.1
    accelerator_text: str  # CUDA 13.0
    pythons: tuple[str, ...]  # what torch shipped for it (the facts), plus anything the site holds for it
    shipped: frozenset[str] | None  # the Pythons torch shipped it for; None when the facts do not know the torch

    def ships(self, python: str) -> bool | None:
        """Whether torch published this variant for ``python``; None when the facts cannot say."""
        return None if self.shipped is None else python in self.shipped


class Cell(NamedTuple):
    """One Python of one variant of one release. A tuple: a farm's matrices hold tens of thousands of cells, all
    built again whenever one wheel is added."""

    python: str
    state: str  # BUILT | FAILED | NOT_SHIPPED | NOT_PLANNED
    wheels: tuple[WheelFile, ...] = ()  # a FAILED cell may hold wheels: those of the platforms that built
    failures: tuple[LedgerEntry, ...] = ()  # one per CPU platform without a wheel here, x86_64 first

    @property
    def failure(self) -> LedgerEntry | None:
        return self.failures[0] if self.failures else None


@dataclass(frozen=True, kw_only=True)
class Row:
    variant: Variant
    cells: tuple[Cell, ...]


@dataclass(frozen=True, kw_only=True)
class Release:
    project: str
    version: str
    summary: str
    pythons: tuple[str, ...]
    rows: tuple[Row, ...]
    failures: tuple[LedgerEntry, ...]  # failed cells, in matrix order
    built: int  # wheels


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """Everything the site holds, arranged for people: variants, releases newest first, the GPU archs of wheels."""

    variants: Mapping[str, Variant]  # by label, in row order
    releases: tuple[Release, ...]  # by project, newest version first
    pythons: tuple[str, ...]  # every Python column
    archs: Mapping[str, GpuArchs]  # by wheel filename
    wheel_count: int

    @property
    def projects(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.project for r in self.releases))

    def newest(self) -> tuple[Release, ...]:
        """The newest version of each project: what the landing page shows in full."""
        return tuple({r.project: r for r in reversed(self.releases)}[p] for p in self.projects)

    def older(self, project: str) -> tuple[Release, ...]:
        """The project's other versions, newest first."""
        return tuple(r for r in self.releases if r.project == project)[1:]


_CellKey = tuple[str, str, str, str]  # project, version, label, python
_Failures = dict[str, LedgerEntry]  # by CPU platform


def build_coverage(catalog: Catalog, facts: TorchFacts | None = None) -> Coverage:
    facts = facts or load_facts()
    failures = _failures_by_cell(catalog.failures)
    by_release: dict[tuple[str, str], list[WheelFile]] = defaultdict(list)
    for wheel in catalog.wheels:
        name = wheel.name
        by_release[(name.project, name.public_version)].append(wheel)
    cells = {key: _release_cells(tuple(wheels)) for key, wheels in by_release.items()}
    labels: dict[tuple[str, str], set[str]] = {key: set(built.labels) for key, built in cells.items()}
    held: set[tuple[str, str]] = set()  # (label, python) of every cell with a wheel or a failure
    for built in cells.values():
        held |= built.held
    for project, version, label, python in failures:
        labels.setdefault((project, version), set()).add(label)
        held.add((label, python))
    variants = _variants(held, facts)
    pythons = tuple(sorted({py for _, py in held}, key=python_key))
    releases = []
    empty = {label: [_cell(python, None, None, variant) for python in pythons] for label, variant in variants.items()}
    failed = {key[:2] for key in failures}
    for project, version in _sorted_releases(labels):
        release_labels = tuple(label for label in variants if label in labels[(project, version)])
        built = cells.get((project, version), _NO_CELLS)
        rows = []
        for label in release_labels:
            variant, wheels_of = variants[label], built.wheels_of
            if (project, version) in failed:
                keys = [(project, version, label, python) for python in pythons]
                cells_here = [_cell(k[3], wheels_of.get((label, k[3])), failures.get(k), variant) for k in keys]
            else:  # most releases: a cell without a wheel is one of the label's empty cells, made once a run
                cells_here = [
                    _cell(python, found, None, variant) if (found := wheels_of.get((label, python))) else blank
                    for python, blank in zip(pythons, empty[label], strict=True)
                ]
            rows.append(Row(variant=variant, cells=tuple(cells_here)))
        releases.append(_release(project, version, pythons, rows, len(built.wheels)))
    return Coverage(
        variants=variants,
        releases=tuple(releases),
        pythons=pythons,
        archs=catalog.archs,
        wheel_count=len(catalog.wheels),
    )


class _Built(NamedTuple):
    """The wheels of one release, by cell."""

    wheels: tuple[WheelFile, ...]  # in catalog order
    wheels_of: dict[tuple[str, str], list[WheelFile]]  # by (label, python)
    labels: frozenset[str]
    held: frozenset[tuple[str, str]]  # the keys of wheels_of


def _release_cells(wheels: tuple[WheelFile, ...]) -> _Built:
    """The release's wheels by cell."""
    wheels_of: dict[tuple[str, str], list[WheelFile]] = defaultdict(list)
    for wheel in wheels:
        for python in wheel.name.pythons:
            wheels_of[(wheel.name.label, python)].append(wheel)
    return _Built(wheels, dict(wheels_of), frozenset(label for label, _ in wheels_of), frozenset(wheels_of))


_NO_CELLS = _Built((), {}, frozenset(), frozenset())  # a release the ledger knows only failures of


def _release(project: str, version: str, pythons: tuple[str, ...], rows: list[Row], wheel_count: int) -> Release:
    failed = tuple(f for row in rows for c in row.cells if c.state == FAILED for f in c.failures)
    wheels = (w for row in rows for c in row.cells for w in c.wheels)
    summary = next((w.metadata.summary for w in wheels if w.metadata.summary), "") or ""
    if len(summary) > SUMMARY_SHOWN:  # METADATA may hold a megabyte of it, and each release's block shows it
        summary = summary[: SUMMARY_SHOWN - 1].rstrip() + "…"
    return Release(
        project=project,
        version=version,
        summary=summary,
        pythons=pythons,
        rows=tuple(rows),
        failures=failed,
        built=wheel_count,
    )


def _cell(python: str, wheels: list[WheelFile] | None, failures: _Failures | None, variant: Variant) -> Cell:
    """A wheel in dist/ wins over an older failure of its platform; a failure of another platform makes the cell
    failed (an x86_64 user has no wheel there, whatever aarch64 has); a ledger row wins over what the facts say."""
    ordered: tuple[WheelFile, ...] = ()
    if wheels:  # nearly always one wheel: no sort for it (this runs for every wheel of the site)
        ordered = tuple(wheels) if len(wheels) == 1 else tuple(sorted(wheels, key=_wheel_order))
    if failures:
        built = {cpu_platform(w.name.platform_tag) for w in ordered}
        unbuilt = tuple(failures[p] for p in sorted(failures, key=platform_key) if p not in built)
        if unbuilt:
            return Cell(python, FAILED, ordered, unbuilt)
    if ordered:
        return _NEW(Cell, (python, BUILT, ordered, ()))  # without the named tuple's per-call checks: every wheel
    return _empty_cell(python, NOT_SHIPPED if variant.ships(python) is False else NOT_PLANNED)


_NEW = tuple.__new__


def _wheel_order(wheel: WheelFile) -> tuple[tuple[int, str], str]:
    return platform_key(cpu_platform(wheel.name.platform_tag)), wheel.filename


@functools.lru_cache(maxsize=1024)
def _empty_cell(python: str, state: str) -> Cell:
    """A cell without wheel or failure: one shared tuple per Python and state (half of a farm's cells)."""
    return Cell(python, state)


def _variants(held: set[tuple[str, str]], facts: TorchFacts) -> dict[str, Variant]:
    pythons: dict[str, set[str]] = defaultdict(set)
    for label, python in held:
        pythons[label].add(python)
    variants = []
    for label, seen in pythons.items():
        torch, accelerator = parse_label(label)
        try:
            release = facts.release(torch)
            shipped: frozenset[str] | None = frozenset(release.python if release.has(accelerator) else ())
        except KeyError:
            shipped = None
        variants.append(
            Variant(
                label=label,
                torch=torch,
                accelerator=accelerator.name,
                accelerator_text=accelerator_text(accelerator),
                pythons=tuple(sorted(seen | (shipped or set()), key=python_key)),
                shipped=shipped,
            )
        )
    return {v.label: v for v in sorted(variants, key=_variant_key)}


def _failures_by_cell(entries: Iterable[LedgerEntry]) -> dict[_CellKey, _Failures]:
    """Failed ledger rows by cell and platform; a row whose fields could not name a page or a cell is logged and
    left out."""
    cells: dict[_CellKey, _Failures] = {}
    for entry in entries:
        problem = _unshowable(entry)
        if problem:
            log.warning("ledger row %r: %s; not shown", entry.job_id, problem)
            continue
        key = (canonicalize_name(entry.package), entry.version, entry.label, entry.python)
        cells.setdefault(key, {})[entry_platform(entry)] = entry
    return cells


def entry_platform(entry: LedgerEntry) -> str:
    """The CPU platform of a ledger row's job: its id's last part (``...-cp311-aarch64``)."""
    last = entry.job_id.rsplit("-", 1)[-1]
    return last if last in PLATFORMS else DEFAULT_PLATFORM


def cpu_platform(tag: str) -> str:
    """``manylinux_2_17_aarch64.manylinux2014_aarch64`` -> ``aarch64``; ``linux_x86_64`` -> ``x86_64``."""
    first = tag.split(".")[0]
    return next((arch for arch in PLATFORMS if first.endswith(arch)), first.rsplit("_", 1)[-1])


def platform_key(platform: str) -> tuple[int, str]:
    """x86_64 first, then the others by name: the order of every platform choice and list."""
    return (platform != DEFAULT_PLATFORM, platform)


def _unshowable(entry: LedgerEntry) -> str:
    if not _label_ok(entry.label):
        return f"label {entry.label!r} is not a variant label"
    if not _PYTHON.match(entry.python):
        return f"python {entry.python!r} is not a version like 3.11"
    if not _PROJECT.match(canonicalize_name(entry.package)):
        return f"package {entry.package!r} is not a project name"
    try:
        Version(entry.version)
    except InvalidVersion:
        return f"version {entry.version!r} is not a version"
    return ""


def _label_ok(label: str) -> bool:
    try:
        parse_label(label)
    except ValueError:
        return False
    return True


def accelerator_text(accelerator: Accelerator) -> str:
    return f"{'CUDA' if accelerator.kind == 'cuda' else 'ROCm'} {accelerator.version}"


def _variant_key(variant: Variant) -> tuple[object, ...]:
    """Newest torch first; within it CUDA before ROCm, newest toolkit first."""
    accelerator = Accelerator.parse(variant.accelerator)
    return (
        tuple(-n for n in version_key(variant.torch)),
        accelerator.kind != "cuda",
        tuple(-n for n in version_key(accelerator.version)),
    )


def _sorted_releases(releases: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Projects by name, each one's versions newest first."""
    newest_first = sorted(releases, key=lambda release: _version(release[1]), reverse=True)
    return sorted(newest_first, key=lambda release: release[0])


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:  # a ledger row from elsewhere; sorts last rather than failing the whole page
        return Version("0")


@functools.lru_cache(maxsize=256)  # a sort key of every matrix and setup page: a site has a dozen Pythons
def python_key(python: str) -> tuple[int, tuple[int, ...] | str]:
    """3.13 < 3.13t (free-threaded) < 3.14; anything that is not a version sorts after every one that is."""
    parts = python.removesuffix("t").split(".")
    if not all(p.isdigit() for p in parts):
        return (1, python)
    return (0, (*(int(p) for p in parts), *((1,) if python.endswith("t") else ())))
