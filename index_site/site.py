"""The index stage: turn dist/ and the ledger into the static site. It plans every file the site should hold, then
writes only what differs, in publish order (wheels, then the pages that link them), each file atomically, so a
server running over the site never sees a link to a missing file or a half-written page."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import ConfigError
from builder.core.files import write_atomic
from index_site import layout, variants
from index_site.catalog import Catalog, Rejection, ScanStats, scan
from index_site.render import render_site
from index_site.wheels import WheelFile, read_core_metadata

log = logging.getLogger(__name__)

# The only top-level names the index writes or prunes.
MANAGED = ("whl", "simple", "json", "select", "coverage", variants.ROOT, layout.MANIFEST, layout.LANDING, layout.DOCTOR)


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
    metadata_bytes: Mapping[str, bytes]  # METADATA already read from wheels this run, by filename
    pages: Mapping[str, bytes]  # only pages whose bytes differ from what is on disk
    stale: tuple[str, ...]  # managed files no longer part of the site
    kept: Mapping[str, FileRecord]  # files already right on disk, with what the manifest should say of them

    @property
    def unchanged(self) -> int:
        return len(self.kept)


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


def build_site(output: Path, site: Path, *, base_url: str) -> IndexReport:
    """Index ``output``/dist with ``output``/ledger.sqlite into ``site``."""
    _check_site(site)
    catalog = scan(output / "dist", output / "ledger.sqlite")
    twins = variants.scan_twins(output / variants.ROOT)  # the variant channel; absent until the build makes twins
    pages = render_site(catalog, base_url=base_url)
    pages.update(variants.render_channel(twins))
    manifest = load_manifest(site)
    plan = plan_site(catalog, pages, output / "dist", site, manifest, extra_files=variants.files(twins))
    written = apply_plan(plan, site, base_url=base_url)
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
    )


def plan_site(
    catalog: Catalog, pages: Mapping[str, bytes], dist: Path, site: Path, manifest: Mapping[str, FileRecord],
    extra_files: Sequence[tuple[Path, str, variants.VariantWheel]] = (),
) -> SitePlan:
    """Compare what the site should hold with what it holds; nothing is written here. ``extra_files`` are other
    immutable files to place like the wheels (the variant channel's twins)."""
    links, metadata, kept = _plan_files(catalog, dist, site, manifest)
    for source, path, twin in extra_files:
        record = _placed_wheel(os.fspath(source), os.path.join(site, path), twin.sha256)
        if record is not None:
            kept[path] = record
        else:
            links.append((source, path, twin))
    changed = {}
    for path, content in pages.items():
        if _current_bytes(site / path) == content:
            kept[path] = _record(site / path, hashlib.sha256(content).hexdigest())
        else:
            changed[path] = content
    expected = kept.keys() | changed.keys() | {path for _, path, _ in links + metadata}
    stale = tuple(sorted(p for p in _managed_files(site) if p not in expected))
    return SitePlan(
        links=tuple(links),
        metadata=tuple(metadata),
        metadata_bytes=catalog.fresh_metadata,
        pages=changed,
        stale=stale,
        kept=kept,
    )


_Placement = tuple[Path, str, WheelFile]  # (the wheel in dist/, its path in the site, what the catalog knows)


def _plan_files(
    catalog: Catalog, dist: Path, site: Path, manifest: Mapping[str, FileRecord]
) -> tuple[list[_Placement], list[_Placement], dict[str, FileRecord]]:
    """Wheels to link and .metadata files to write, and the records of those already in place."""
    links: list[_Placement] = []
    metadata: list[_Placement] = []
    kept: dict[str, FileRecord] = {}
    for wheel in catalog.wheels:
        source = dist / wheel.filename
        path = layout.wheel_path(wheel.name.label, wheel.filename)
        record = _placed_wheel(os.fspath(source), os.path.join(site, path), wheel.sha256)
        if record is not None:
            kept[path] = record
        else:
            links.append((source, path, wheel))
        path = layout.metadata_path(wheel.name.label, wheel.filename)
        record = _recorded(os.path.join(site, path), manifest.get(path))
        if record is not None and record.sha256 == wheel.metadata.sha256:
            kept[path] = record
        else:
            metadata.append((source, path, wheel))
    return links, metadata, kept


def apply_plan(plan: SitePlan, site: Path, *, base_url: str) -> tuple[str, ...]:
    """Write the plan: files first, then pages tier by tier, then prune, then the manifest; return what was written."""
    records = dict(plan.kept)
    for source, path, wheel in plan.links:
        _place_wheel(source, site / path)
        records[path] = _record(site / path, wheel.sha256)
    for source, path, wheel in plan.metadata:
        content = plan.metadata_bytes.get(wheel.filename) or read_core_metadata(source, wheel.name)
        write_atomic(site / path, content)
        records[path] = _record(site / path, wheel.metadata.sha256)
    for path in sorted(plan.pages, key=lambda p: (layout.kind_of(p).tier, p)):
        write_atomic(site / path, plan.pages[path])
        records[path] = _record(site / path, hashlib.sha256(plan.pages[path]).hexdigest())
    for path in plan.stale:
        (site / path).unlink()
        _remove_empty_parents(site, site / path)
    _write_manifest(site, records, base_url)
    written = tuple(path for path in records if path not in plan.kept)
    log.info("site %s: %d written, %d unchanged, %d deleted", site, len(written), plan.unchanged, len(plan.stale))
    return written


def load_manifest(site: Path) -> dict[str, FileRecord]:
    """What the last index run wrote into ``site``: {site path: FileRecord}."""
    raw = _read_marker(site)
    return {path: FileRecord(sha256=r[0], size=r[1], mtime_ns=r[2]) for path, r in raw.get("files", {}).items()}


def site_base_url(site: Path) -> str | None:
    """The public URL the site was indexed for (its landing page's install commands point there)."""
    return _read_marker(site).get("base_url")


def _read_marker(site: Path) -> dict[str, Any]:
    try:
        marker: dict[str, Any] = json.loads((site / layout.SITE_MARKER).read_text())
        return marker
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ConfigError(
            f"{site / layout.SITE_MARKER}: unreadable ({error})", tip="delete it and index again"
        ) from None


def _check_site(site: Path) -> None:
    """Refuse to write into (and prune) a folder the index did not create."""
    if site.exists() and not site.is_dir():
        raise ConfigError(f"{site}: not a folder", tip="pass --site with an empty or new folder")
    if site.exists() and any(site.iterdir()) and not (site / layout.SITE_MARKER).exists():
        raise ConfigError(
            f"{site}: not empty and not a wheelwright site (no {layout.SITE_MARKER})",
            tip="pass --site with an empty or new folder",
        )
    site.mkdir(parents=True, exist_ok=True)


def _write_manifest(site: Path, records: Mapping[str, FileRecord], base_url: str) -> None:
    files = {path: [r.sha256, r.size, r.mtime_ns] for path, r in sorted(records.items())}
    document = {"generator": "wheelwright", "base_url": base_url, "files": files}
    content = (json.dumps(document, separators=(",", ":")) + "\n").encode()
    if _current_bytes(site / layout.SITE_MARKER) != content:
        write_atomic(site / layout.SITE_MARKER, content)


def _recorded(path: str, record: FileRecord | None) -> FileRecord | None:
    """``record`` if the file at ``path`` still has the size and mtime it was recorded with."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    if record is None or (record.size, record.mtime_ns) != (stat.st_size, stat.st_mtime_ns):
        return None
    return record


def _placed_wheel(source: str, target: str, sha256: str) -> FileRecord | None:
    """The record of ``target`` if it is ``source`` (a hard link, or a copy with its size and mtime), else None."""
    try:
        placed = os.stat(target)
    except FileNotFoundError:
        return None
    original = os.stat(source)
    same_inode = (placed.st_ino, placed.st_dev) == (original.st_ino, original.st_dev)
    if not same_inode and (placed.st_size, placed.st_mtime_ns) != (original.st_size, original.st_mtime_ns):
        return None
    return FileRecord(sha256=sha256, size=placed.st_size, mtime_ns=placed.st_mtime_ns)


def _record(path: Path, sha256: str) -> FileRecord:
    stat = path.stat()
    return FileRecord(sha256=sha256, size=stat.st_size, mtime_ns=stat.st_mtime_ns)


def _place_wheel(source: Path, target: Path) -> None:
    """Hard-link the wheel into the site (no copy of big files); copy where the site is on another filesystem."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        os.link(source, temporary)
    except OSError:
        shutil.copy2(source, temporary)
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
