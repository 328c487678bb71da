"""The index stage: turn dist/ and the ledger into the static site. It plans every file the site should hold, then
writes only what differs, in publish order (wheels, then the pages that link them), each file atomically, so a
server running over the site never sees a link to a missing file or a half-written page."""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import ConfigError

from . import layout
from .catalog import Catalog, Rejection, ScanStats, scan
from .render import render_site
from .wheels import WheelFile, read_core_metadata, sha256_file

log = logging.getLogger(__name__)

MANAGED = ("whl", "simple", "json", layout.LANDING)  # the only top-level names the index writes or prunes


@dataclass(frozen=True, kw_only=True)
class FileRecord:
    """What the manifest remembers of a site file, valid while its size and mtime hold."""

    sha256: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, kw_only=True)
class SitePlan:
    links: tuple[tuple[Path, str, WheelFile], ...]  # (wheel in dist/, site path, wheel): link or copy
    metadata: tuple[tuple[Path, str, WheelFile], ...]  # (wheel in dist/, site path of its .metadata, wheel)
    pages: Mapping[str, bytes]  # only pages whose bytes differ from what is on disk
    stale: tuple[str, ...]  # managed files no longer part of the site
    unchanged: int
    expected: Mapping[str, str | None]  # every site path -> its sha256 when already known (wheels, metadata)


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
    manifest: Mapping[str, FileRecord] = field(default_factory=dict)


def build_site(output: Path, site: Path, *, base_url: str) -> IndexReport:
    """Index ``output``/dist with ``output``/ledger.sqlite into ``site``."""
    _check_site(site)
    catalog = scan(output / "dist", output / "ledger.sqlite")
    pages = render_site(catalog, base_url=base_url)
    manifest = load_manifest(site)
    plan = plan_site(catalog, pages, output / "dist", site, manifest)
    written, manifest = apply_plan(plan, site, manifest)
    return IndexReport(
        site=site,
        wheels=len(catalog.wheels),
        variants=tuple(sorted({w.name.label for w in catalog.wheels})),
        stats=catalog.stats,
        rejected=catalog.rejected,
        failures=len(catalog.failures),
        written=written,
        deleted=plan.stale,
        unchanged=plan.unchanged,
        manifest=manifest,
    )


def plan_site(catalog: Catalog, pages: Mapping[str, bytes], dist: Path, site: Path, manifest: Mapping[str, FileRecord]) -> SitePlan:
    links, metadata, expected = [], [], {}
    unchanged = 0
    for wheel in catalog.wheels:
        source = dist / wheel.filename
        path = layout.wheel_path(wheel.name.label, wheel.filename)
        meta_path = layout.metadata_path(wheel.name.label, wheel.filename)
        expected[path], expected[meta_path] = wheel.sha256, wheel.metadata.sha256
        if _same_file(source, site / path):
            unchanged += 1
        else:
            links.append((source, path, wheel))
        if _recorded(site, meta_path, manifest) == wheel.metadata.sha256:
            unchanged += 1
        else:
            metadata.append((source, meta_path, wheel))
    changed = {}
    for path, content in pages.items():
        expected[path] = None
        if _current_bytes(site / path) == content:
            unchanged += 1
        else:
            changed[path] = content
    stale = tuple(sorted(p for p in _managed_files(site) if p not in expected))
    return SitePlan(links=tuple(links), metadata=tuple(metadata), pages=changed, stale=stale, unchanged=unchanged, expected=expected)


def apply_plan(plan: SitePlan, site: Path, manifest: Mapping[str, FileRecord]) -> tuple[tuple[str, ...], dict[str, FileRecord]]:
    """Write the plan: files first, then pages tier by tier, then prune; return what was written and the manifest."""
    written: list[str] = []
    for source, path, wheel in plan.links:
        _place_wheel(source, site / path)
        written.append(path)
    for source, path, wheel in plan.metadata:
        _write_atomic(site / path, read_core_metadata(source, wheel.name))
        written.append(path)
    for path in sorted(plan.pages, key=lambda p: (layout.kind_of(p).tier, p)):
        _write_atomic(site / path, plan.pages[path])
        written.append(path)
    for path in plan.stale:
        (site / path).unlink()
        _remove_empty_parents(site, site / path)
    records = _manifest_records(site, plan.expected, manifest, set(written))
    _write_manifest(site, records)
    log.info("site %s: %d written, %d unchanged, %d deleted", site, len(written), plan.unchanged, len(plan.stale))
    return tuple(written), records


def load_manifest(site: Path) -> dict[str, FileRecord]:
    try:
        raw = json.loads((site / layout.SITE_MARKER).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ConfigError(f"{site / layout.SITE_MARKER}: unreadable ({error})", tip="delete it and index again") from None
    return {path: FileRecord(sha256=r[0], size=r[1], mtime_ns=r[2]) for path, r in raw.get("files", {}).items()}


def _check_site(site: Path) -> None:
    """Refuse to write into (and prune) a folder the index did not create."""
    if site.exists() and any(site.iterdir()) and not (site / layout.SITE_MARKER).exists():
        raise ConfigError(
            f"{site}: not empty and not a wheelwright site (no {layout.SITE_MARKER})",
            tip="pass --site with an empty or new folder",
        )
    site.mkdir(parents=True, exist_ok=True)


def _manifest_records(site: Path, expected: Mapping[str, str | None], old: Mapping[str, FileRecord], written: set[str]) -> dict[str, FileRecord]:
    records = {}
    for path, sha256 in expected.items():
        stat = (site / path).stat()
        previous = old.get(path)
        if path not in written and previous and (previous.size, previous.mtime_ns) == (stat.st_size, stat.st_mtime_ns):
            records[path] = previous
            continue
        digest = sha256 if sha256 is not None else sha256_file(site / path)
        records[path] = FileRecord(sha256=digest, size=stat.st_size, mtime_ns=stat.st_mtime_ns)
    return records


def _write_manifest(site: Path, records: Mapping[str, FileRecord]) -> None:
    files = {path: [r.sha256, r.size, r.mtime_ns] for path, r in sorted(records.items())}
    content = (json.dumps({"generator": "wheelwright", "files": files}, separators=(",", ":")) + "\n").encode()
    if _current_bytes(site / layout.SITE_MARKER) != content:
        _write_atomic(site / layout.SITE_MARKER, content)


def _recorded(site: Path, path: str, manifest: Mapping[str, FileRecord]) -> str | None:
    """The sha256 the manifest holds for ``path`` if the file on disk still matches it, else None."""
    record = manifest.get(path)
    try:
        stat = (site / path).stat()
    except FileNotFoundError:
        return None
    if record is None or (record.size, record.mtime_ns) != (stat.st_size, stat.st_mtime_ns):
        return None
    return record.sha256


def _same_file(source: Path, target: Path) -> bool:
    try:
        if os.path.samefile(source, target):
            return True
        a, b = source.stat(), target.stat()
    except FileNotFoundError:
        return False
    return (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)  # a copy made by _place_wheel


def _place_wheel(source: Path, target: Path) -> None:
    """Hard-link the wheel into the site (no copy of big files); copy where the site is on another filesystem."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copy2(source, temporary)
    os.replace(temporary, target)


def _write_atomic(target: Path, content: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temporary.write_bytes(content)
    os.replace(temporary, target)


def _current_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _managed_files(site: Path) -> Iterator[str]:
    for top in MANAGED:
        root = site / top
        if root.is_file():
            yield top
            continue
        for directory, _dirs, files in os.walk(root):
            relative = Path(directory).relative_to(site).as_posix()
            yield from (f"{relative}/{name}" for name in files)


def _remove_empty_parents(site: Path, path: Path) -> None:
    parent = path.parent
    while parent != site and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent

