"""The landing page's model: for each package version a grid of variant (torch x accelerator) by Python, each
cell built (with the install command), failed (with the ledger's reason) or absent."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.ledger import LedgerEntry
from builder.plan.facts import Accelerator, version_key
from builder.plan.job import parse_label
from index_site import layout
from index_site.catalog import Catalog
from index_site.wheels import WheelFile

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class WheelLink:
    href: str
    filename: str
    size: int


@dataclass(frozen=True, kw_only=True)
class Cell:
    python: str
    state: str  # built | failed | absent
    wheels: tuple[WheelLink, ...] = ()
    command: str = ""
    status: str = ""  # the ledger status of a failed cell: failed, quarantined, unbuildable
    phase: str = ""  # the phase it failed in
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class Variant:
    label: str
    torch: str
    accelerator: str  # cu130, rocm6.1
    accelerator_text: str  # CUDA 13.0
    findlinks: str = ""  # href of the variant's find-links page ("" when it has no wheels)
    simple: str = ""
    json: str = ""
    wheels: int = 0


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
    failures: tuple[LedgerEntry, ...]
    built: int


@dataclass(frozen=True, kw_only=True)
class Landing:
    base_url: str
    releases: tuple[Release, ...]
    variants: tuple[Variant, ...]
    torches: tuple[str, ...]
    accelerators: tuple[str, ...]
    pythons: tuple[str, ...]
    wheel_count: int
    example: str  # an install command for the page's how-to
    variant_channels: tuple[str, ...] = ()  # torch tags (pt214) of the PEP 825 variant channel, newest first

    @property
    def variant_command(self) -> str:
        return variant_command(self.base_url)


def variant_command(base_url: str, torch_tag: str | None = None) -> str:
    """The one-URL uv command of the variant channel (all torch minors, or one)."""
    root = f"variant/{torch_tag}" if torch_tag else "variant"
    return f"uv pip install --preview-features wheel-variants PACKAGE --index-url {base_url}/{root}/simple/"


def build_landing(catalog: Catalog, *, base_url: str, variant_channels: tuple[str, ...] = ()) -> Landing:
    base_url = base_url.rstrip("/")
    variants = _variants(catalog)
    failures = _failures_by_cell(catalog.failures)
    wheels: dict[tuple[str, str], list[WheelFile]] = defaultdict(list)
    for wheel in catalog.wheels:
        wheels[(wheel.name.project, wheel.name.public_version)].append(wheel)
    releases = _sorted_releases({*wheels, *((p, v) for p, v, _, _ in failures)})
    built = [_release(p, v, wheels.get((p, v), []), failures, variants, base_url) for p, v in releases]
    example = next((c.command for r in built for row in r.rows for c in row.cells if c.command), "")
    shown = [v for v in variants.values() if v.wheels]
    return Landing(
        base_url=base_url,
        releases=tuple(built),
        variants=tuple(sorted(shown, key=_variant_key)),
        torches=tuple(sorted({v.torch for v in variants.values()}, key=version_key, reverse=True)),
        accelerators=tuple(dict.fromkeys(v.accelerator for v in sorted(variants.values(), key=_variant_key))),
        pythons=tuple(sorted({c.python for r in built for row in r.rows for c in row.cells}, key=_python_key)),
        wheel_count=len(catalog.wheels),
        example=example or f"pip install PACKAGE -f {base_url}/whl/LABEL.html",
        variant_channels=variant_channels,
    )


_CellKey = tuple[str, str, str, str]  # project, version, label, python


def _release(
    project: str,
    version: str,
    wheels: list[WheelFile],
    failures: Mapping[_CellKey, LedgerEntry],
    variants: Mapping[str, Variant],
    base_url: str,
) -> Release:
    built: dict[tuple[str, str], list[WheelFile]] = defaultdict(list)
    for wheel in wheels:
        for python in wheel.name.pythons:
            built[(wheel.name.label, python)].append(wheel)
    failed = {(label, py): entry for (p, v, label, py), entry in failures.items() if (p, v) == (project, version)}
    pythons = tuple(sorted({py for _, py in (*built, *failed)}, key=_python_key))
    labels = sorted({label for label, _ in (*built, *failed)}, key=lambda label: _variant_key(variants[label]))
    rows = []
    for label in labels:
        cells = tuple(
            _cell(project, version, label, py, built.get((label, py)), failed.get((label, py)), base_url)
            for py in pythons
        )
        rows.append(Row(variant=variants[label], cells=cells))
    shown_failures = tuple(e for (label, py), e in sorted(failed.items()) if (label, py) not in built)
    summary = next((w.metadata.summary for w in wheels if w.metadata.summary), "") or ""
    return Release(
        project=project,
        version=version,
        summary=summary,
        pythons=pythons,
        rows=tuple(rows),
        failures=shown_failures,
        built=len(wheels),
    )


def _cell(
    project: str,
    version: str,
    label: str,
    python: str,
    wheels: list[WheelFile] | None,
    failure: LedgerEntry | None,
    base_url: str,
) -> Cell:
    if wheels:
        links = tuple(
            # The variant page, never the wheel: pip pointed at this page (-f <site>) must find no wheel of another
            # torch or CUDA to choose from.
            WheelLink(href=layout.href(layout.LANDING, layout.findlinks_path(label)), filename=w.filename, size=w.size)
            for w in sorted(wheels, key=lambda w: w.filename)
        )
        # Pinned, and binary only: never a source build of this or a newer upstream release from another index.
        command = f"pip install --only-binary {project} {project}=={version} -f {base_url}/{layout.findlinks_path(label)}"
        return Cell(python=python, state="built", wheels=links, command=command)
    if failure is not None:
        reason = failure.reason or "no reason recorded"
        return Cell(python=python, state="failed", status=failure.status, phase=failure.phase or "", reason=reason)
    return Cell(python=python, state="absent")


def _variants(catalog: Catalog) -> dict[str, Variant]:
    counts: dict[str, int] = defaultdict(int)
    for wheel in catalog.wheels:
        counts[wheel.name.label] += 1
    labels = set(counts) | {e.label for e in catalog.failures if _label_ok(e.label)}
    variants = {}
    for label in labels:
        torch, accelerator = parse_label(label)
        has_wheels = counts[label] > 0
        variants[label] = Variant(
            label=label,
            torch=torch,
            accelerator=accelerator.name,
            accelerator_text=accelerator_text(accelerator),
            findlinks=layout.href(layout.LANDING, layout.findlinks_path(label)) if has_wheels else "",
            simple=layout.href(layout.LANDING, f"{layout.simple_root(label)}/index.html") if has_wheels else "",
            json=layout.href(layout.LANDING, f"{layout.json_root(label)}/index.json") if has_wheels else "",
            wheels=counts[label],
        )
    return variants


def _failures_by_cell(entries: Iterable[LedgerEntry]) -> dict[_CellKey, LedgerEntry]:
    cells = {}
    for entry in entries:
        if not _label_ok(entry.label):
            log.warning("ledger row %s: label %r is not a variant label; not shown", entry.job_id, entry.label)
            continue
        cells[(canonicalize_name(entry.package), entry.version, entry.label, entry.python)] = entry
    return cells


def _label_ok(label: str) -> bool:
    try:
        parse_label(label)
    except ValueError:
        return False
    return True


def accelerator_text(accelerator: Accelerator) -> str:
    return f"{'CUDA' if accelerator.kind == 'cuda' else 'ROCm'} {accelerator.version}"


def _variant_key(variant: Variant) -> tuple:
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


def _python_key(python: str) -> tuple:
    parts = python.split(".")
    return (0, tuple(int(p) for p in parts)) if all(p.isdigit() for p in parts) else (1, python)
