"""The index stage: turn dist/ and the ledger into the static site. It plans every file the site should hold, then
writes only what differs, in publish order (wheels, then the pages that link them), each file atomically, so a
server running over the site never sees a link to a missing file or a half-written page.

The manifest (layout.SITE_MARKER) records each file's sha256 with its full identity (inode, size, mtime, ctime);
a record is trusted only while that identity holds. Wheels are hard links into dist/ where possible: placing one
re-checks that the file in dist/ is still the one hashed, and the catalog re-checks it on every run. The marker
is written before anything else, so a killed run leaves a folder the next run recognises and finishes."""

from __future__ import annotations

import dataclasses
import errno
import gc
import hashlib
import json
import logging
import os
import shutil
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from builder.core.errors import ConfigError, FileSystemError
from builder.core.files import write_atomic
from builder.core.hashing import FileIdentity, holds_identity, identity_if_regular, regular_identity
from builder.core.wheelhouse import Layout
from index_site import fallback, layout, variants
from index_site.catalog import (
    Catalog,
    Judged,
    Listing,
    RecordedFacts,
    catalog_of,
    judge,
    listing,
    read_ledger,
)
from index_site.report import IndexReport, from_summary, summary
from index_site.state import IndexState, state_path
from index_site.twins import TwinMaker, TwinReport, deriver, settle_twins
from index_site.twins import listing as twin_listing

if TYPE_CHECKING:
    from index_site.render import PageGroup
from index_site.wheels import (
    MAX_METADATA_BYTES,
    MAX_PROVENANCE_BYTES,
    METADATA,
    RejectedWheel,
    WheelFile,
    read_dist_info,
)

log = logging.getLogger(__name__)

MANAGED = layout.MANAGED
# (the file to place, its path in the site, what is known of it): a wheel of dist/ or a variant twin
_Link = tuple["Path | str", str, "WheelFile | variants.VariantWheel"]


class FileRecord(NamedTuple):
    """What the manifest remembers of a site file, valid while its identity holds."""

    sha256: str
    identity: FileIdentity

    @property
    def size(self) -> int:
        return self.identity.size


@dataclass(frozen=True)
class Settled:
    """The site's folders in which no entry was added, taken out or renamed since the last complete run recorded
    their identities (a folder's mtime and ctime move with each such change, and no one can set a ctime back),
    with the files the manifest records in each: a plan takes those records as they are, without a stat per file.
    A file the index wrote is not rewritten in place by anyone else; serve and publish hold each to its identity."""

    folders: frozenset[str] = frozenset()  # site paths: "whl/pt214cu130"
    files: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # folder: its files' site paths, inodes
    subfolders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # folder: its folders' names

    def holds(self, path: str) -> bool:
        return path.rpartition("/")[0] in self.folders


@dataclass(frozen=True, kw_only=True)
class SitePlan:
    links: tuple[_Link, ...]  # (wheel in dist/ or variant/, site path, wheel): link or copy
    metadata: tuple[Extract, ...]  # files taken out of a wheel or twin: .metadata, .provenance.json
    metadata_bytes: Mapping[tuple[str, str], bytes]  # (wheel or twin, member): bytes already read this run
    pages: Mapping[str, bytes]  # only pages whose bytes differ from what is on disk
    digests: Mapping[str, str] = field(default_factory=dict)  # sha256 of those pages, worked out while planning
    groups: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)  # key: (digest, its pages)
    stale: tuple[str, ...]  # managed files no longer part of the site
    kept: Mapping[str, FileRecord]  # files already right on disk, with what the manifest should say of them

    @property
    def unchanged(self) -> int:
        return len(self.kept)


def build_site(output: Path, site: Path, *, base_url: str, twins: TwinMaker | None = None) -> IndexReport:
    """Index ``output``/dist with ``output``/ledger.sqlite into ``site``; ``twins`` makes and checks the variant
    twins of ``output``/variant (without it none is published)."""
    with _cycle_collection_paused():
        return _build_site(output, site, base_url=base_url, twins=twins)


@contextmanager
def _cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cycle collector for one index run. A run builds some hundred thousand objects that live
    until it ends (the catalog, the coverage model); every collection the allocations trigger walks all of them
    again, a fifth of a re-index's time. What the run frees without a cycle is still freed at once. When it ends,
    what it allocated is moved out of the collector's young generation (gc.freeze): else the first allocation
    after gc.enable() walks all of it (0.13 CPU-s at 10,000 wheels). The next run hands it back (gc.unfreeze),
    so a process that indexes many times still collects the cycles of the earlier runs, in a full collection."""
    if not gc.isenabled():
        yield
        return
    gc.unfreeze()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _build_site(output: Path, site: Path, *, base_url: str, twins: TwinMaker | None) -> IndexReport:
    _check_site(site, base_url)
    wheelhouse = Layout(root=output)
    with IndexState(state_path(wheelhouse.ledger)) as state:
        quiet, found = _quiet(state, wheelhouse, site, base_url, twins is not None)
        if quiet is not None:  # nothing moved since the last complete run, not even a file of dist/: no row read
            return quiet
        judged = judge(wheelhouse.dist, wheelhouse.ledger, state, deriver(twins), found and found[0])
        settled = settle_twins(judged, wheelhouse.dist, wheelhouse.variant, state, twins, found and found[1])
        inputs = _inputs(state, judged, base_url)
        files = _as_left(state, site, inputs)
        if files is not None:  # nothing moved since the last complete run: nothing to do
            report = _report(site, judged, settled, written=(), deleted=(), unchanged=files)
            linked: Mapping[str, FileIdentity] = {}
        else:
            channel = fallback.channel_sizes(settled.twins)
            catalog = dataclasses.replace(catalog_of(judged), channel=channel, facts=RecordedFacts(state).facts())
            recorded = _recorded_manifest(site)
            still = _settled(site, state, recorded)
            report, linked = _index(output, site, base_url, state, recorded, catalog, settled, still)
        kept = _kept(state, judged, settled, linked, report, base_url, twins is not None)
        _leave(state, site, inputs, report.unchanged + len(report.written), kept)
        return report


def _quiet(
    state: IndexState, wheelhouse: Layout, site: Path, base_url: str, twins: bool
) -> tuple[IndexReport | None, tuple[Listing, Listing] | None]:
    """The report of a run that finds nothing moved since the last complete run into ``site``: dist/ and variant/
    hold the files that run left, each with the identity it left (one stat each, and no row of the state read),
    the ledger shows what it showed, the state's rows, the code and the base URL are the same, and the site is as
    that run left it (_as_left). None otherwise: the run judges every file by its row, as ever; with the listings of
    dist/ and variant/ where this has made them, for the run to use."""
    record = _site_record(state, site)
    kept = record.get("quiet")
    if not isinstance(kept, dict) or not isinstance(record.get("files"), int):
        return None, None
    found = listing(wheelhouse.dist), twin_listing(wheelhouse.variant)
    (dist, strays), (variant, refused) = found
    if strays or refused or kept.get("count") != len(dist) + len(variant):
        return None, found
    key = _quiet_key(state, dist, variant, read_ledger(wheelhouse.ledger), base_url, twins)
    if kept.get("key") != key or not _same_folders(site, record):
        return None, found
    try:
        return from_summary(site, kept["report"], record["files"]), found
    except (KeyError, TypeError, ValueError):
        return None, found


def _kept(
    state: IndexState,
    judged: Judged,
    settled: TwinReport,
    linked: Mapping[str, FileIdentity],
    report: IndexReport,
    base_url: str,
    twins: bool,
) -> dict[str, Any] | None:
    """What this complete run leaves for the next one's _quiet: the key of dist/ and variant/ as this run judged
    them (with the identities its hard links gave them), and the summary of its report. None where either folder
    holds a file the run could not judge: the next run judges again."""
    if judged.unjudged or settled.strays:
        return None
    dist = {name: linked.get(name, row.identity) for name, row in judged.rows.items()}
    variant = {name: linked.get(name, identity) for name, identity in settled.listing.items()}
    key = _quiet_key(state, dist, variant, judged.ledger, base_url, twins)
    return {"key": key, "count": len(dist) + len(variant), "report": summary(report)}


def _quiet_key(
    state: IndexState,
    dist: Mapping[str, Sequence[int]],
    variant: Mapping[str, Sequence[int]],
    ledger: str,
    base_url: str,
    twins: bool,
) -> str:
    """One digest of the files of dist/ and variant/ with their identities, the ledger's digest, the state's
    generation, the base URL, the code that writes the site and whether twins are made."""
    head = [state.generation(), base_url, _code_digest(), ledger, str(twins)]
    files = [f"{name}\0{i[0]}:{i[1]}:{i[2]}:{i[3]}" for folder in (dist, variant) for name, i in sorted(folder.items())]
    return hashlib.sha256("\n".join([*head, *files, str(len(dist))]).encode()).hexdigest()


def _inputs(state: IndexState, catalog: Judged, base_url: str) -> str:
    """A digest of everything the site is made from: the catalogue's rows (the state's generation), the ledger's
    failures and GPU archs (catalog.ledger_digest), the base URL and the code that writes the site."""
    parts = [state.generation(), base_url, _code_digest(), catalog.ledger]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _code_digest() -> str:
    """The code that writes the site: every module of index_site and its templates, and what doctor.py and the
    coverage model are made from (what a complete run left is used again only while this is the same)."""
    package = Path(__file__).parent
    builder = package.parent / "builder"
    paths = [*package.glob("*.py"), *(package / "templates").rglob("*"), *(builder / "doctor").glob("*.py")]
    paths += [*(builder / "core").glob("*.py"), builder / "plan" / "facts.py", builder / "data" / "torch.toml"]
    digest = hashlib.sha256()
    for path in sorted(paths):
        if path.is_file():
            digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _site_record(state: IndexState, site: Path) -> dict[str, Any]:
    """What the last complete run into ``site`` recorded of it (_leave), or {}."""
    try:
        record = json.loads(state.meta().get(f"site:{os.path.abspath(site)}") or "{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


def _as_left(state: IndexState, site: Path, inputs: str) -> int | None:
    """Whether the site is as the last complete run into it left it, for these very inputs: its manifest the file
    that run wrote, and no entry of any of its folders added, taken out or renamed since (a folder's mtime and
    ctime move with each; nobody can set a ctime back). A file the index wrote there is not written again by
    anyone else: serve and publish hold each one to its recorded identity anyway. Its file count, else None."""
    record = _site_record(state, site)
    if record.get("inputs") != inputs or not _same_folders(site, record):
        return None
    files = record.get("files")
    return files if isinstance(files, int) else None


def _same_folders(site: Path, record: Mapping[str, Any]) -> bool:
    """Whether the manifest and every folder the record names still have their identities (a folder added shows as
    its parent's change; nothing is listed)."""
    folders = record.get("folders")
    return isinstance(folders, dict) and all(_same_identity(site, path, identity) for path, identity in folders.items())


def _same_identity(site: Path, path: str, identity: object) -> bool:
    """Whether ``path`` (in the site) has ``identity``: [inode, mtime, ctime], or None for absent."""
    try:
        status = os.lstat(os.path.join(site, path))
    except FileNotFoundError:
        return identity is None
    except OSError:
        return False
    return identity == [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]


def _settled(site: Path, state: IndexState, recorded: _Recorded) -> Settled:
    """The folders the last complete run recorded that still have its identities, with their recorded files;
    none where the manifest is no longer the file that run wrote."""
    folders = _site_record(state, site).get("folders")
    if not isinstance(folders, dict) or not _same_identity(site, layout.SITE_MARKER, folders.get(layout.SITE_MARKER)):
        return Settled()
    still = {
        path
        for path, identity in folders.items()
        if identity is not None and path != layout.SITE_MARKER and _same_identity(site, path, identity)
    }
    files: dict[str, dict[str, int]] = {}
    for path, record in recorded.files.items():  # each record's inode, by folder: one pass over 87,000
        files.setdefault(path.rpartition("/")[0], {})[path] = record[1][0]
    subfolders: dict[str, list[str]] = {}
    for path in folders:
        parent, _, name = path.rpartition("/")
        if parent:
            subfolders.setdefault(parent, []).append(name)
    return Settled(frozenset(still), files, {folder: tuple(names) for folder, names in subfolders.items()})


def _leave(state: IndexState, site: Path, inputs: str, files: int, quiet: Mapping[str, Any] | None) -> None:
    """Record how this complete run left ``site`` (its ``files``), for the next run's _as_left and _quiet."""
    record: dict[str, Any] = {"inputs": inputs, "folders": _folders(site, _left_folders(state, site)), "files": files}
    if quiet is not None:
        record["quiet"] = quiet
    state.write(meta={f"site:{os.path.abspath(site)}": json.dumps(record, sort_keys=True)})


def _left_folders(state: IndexState, site: Path) -> dict[str, tuple[list[int], list[str]]]:
    """The folders the last complete run recorded: {path: (identity, names of its folders)}."""
    folders = _site_record(state, site).get("folders")
    if not isinstance(folders, dict):
        return {}
    children: dict[str, list[str]] = {path: [] for path in folders}
    for path in folders:
        parent, _, name = path.rpartition("/")
        if parent in children:
            children[parent].append(name)
    return {path: (identity, children[path]) for path, identity in folders.items() if isinstance(identity, list)}


def _folders(site: Path, left: Mapping[str, tuple[list[int], list[str]]]) -> dict[str, list[int] | None]:
    """The identity (inode, mtime, ctime) of the manifest, of each managed name at the top (None: absent) and of
    every folder under them: one lstat each, a few hundred for a farm's site. A folder that still has the identity
    ``left`` records has the folders it records (an entry added, taken out or renamed moves its mtime and ctime),
    so only the others are listed (a variant's folder holds thousands of files)."""
    found: dict[str, list[int] | None] = {}
    for name in (layout.SITE_MARKER, *MANAGED):
        try:
            status = os.lstat(site / name)
        except FileNotFoundError:
            found[name] = None
            continue
        found[name] = [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]
        if stat.S_ISDIR(status.st_mode):
            _subfolders(os.path.join(site, name), name, status.st_nlink, found, left)
    return found


def _subfolders(
    folder: str,
    prefix: str,
    links: int,
    found: dict[str, list[int] | None],
    left: Mapping[str, tuple[list[int], list[str]]],
) -> None:
    for name, status in _subfolder_stats(folder, prefix, links, found, left).items():
        path = f"{prefix}/{name}"
        found[path] = [status.st_ino, status.st_mtime_ns, status.st_ctime_ns]
        _subfolders(f"{folder}/{name}", path, status.st_nlink, found, left)


def _subfolder_stats(
    folder: str,
    prefix: str,
    links: int,
    found: Mapping[str, list[int] | None],
    left: Mapping[str, tuple[list[int], list[str]]],
) -> dict[str, os.stat_result]:
    """``folder``'s folders, each with its lstat: those ``left`` records while the folder keeps its identity, or
    while its link count says it holds as many folders as recorded and each recorded one is still a folder (ext4 and
    XFS count a folder's subfolders in its links; a filesystem that gives folders one link has it listed). So a
    folder this run only added files to is not listed again: variant/files holds some 65,000."""
    recorded = left.get(prefix)
    stats: dict[str, os.stat_result] = {}
    if recorded is not None:
        stats = _folder_stats(folder, recorded[1])
        if recorded[0] == found[prefix] or (links == 2 + len(recorded[1]) and len(stats) == len(recorded[1])):
            return stats
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return {}
    fresh = _folder_stats(folder, [name for name in names if name not in stats])  # the recorded ones are lstat'd
    return {name: stats.get(name) or fresh[name] for name in names if name in stats or name in fresh}


def _folder_stats(folder: str, names: Iterable[str]) -> dict[str, os.stat_result]:
    """The lstat of each of ``names`` in ``folder`` that is (still) a folder."""
    stats = {}
    for name in names:
        try:
            status = os.lstat(f"{folder}/{name}")
        except OSError:
            continue
        if stat.S_ISDIR(status.st_mode):
            stats[name] = status
    return stats


def _index(
    output: Path,
    site: Path,
    base_url: str,
    state: IndexState,
    recorded: _Recorded,
    catalog: Catalog,
    twins: TwinReport,
    settled: Settled | None = None,
) -> tuple[IndexReport, dict[str, FileIdentity]]:
    """Render and place what changed; the report, and the new identities of the files the site's hard links
    moved (their ctimes)."""
    from index_site.render import channel_groups  # jinja2 and the page models: only for a run that renders

    manifest, previous_groups = recorded.files, recorded.groups
    extra_files, extracted = variants.placed(twins.twins)
    pages, reused, groups, digests = render_changed(
        catalog,
        site,
        manifest,
        previous_groups,
        base_url=base_url,
        extra=channel_groups(twins.twins, manifest),
        settled=settled,
    )
    plan = plan_site(
        catalog,
        pages,
        Layout(root=output).dist,
        site,
        manifest,
        reused=reused,
        groups=groups,
        extra_files=extra_files,
        extracted=[Extract(*entry) for entry in extracted],
        settled=settled,
        fresh=twins.fresh,
        digests=digests,
    )
    identities = {**catalog.identities, **{twin.filename: FileIdentity(*twin.identity) for twin in twins.twins}}
    written, linked = apply_plan(plan, site, base_url=base_url, identities=identities, recorded=recorded)
    if linked:
        state.refresh({name: (identities[name], identity) for name, identity in linked.items()})
    return _report(site, catalog, twins, written=written, deleted=plan.stale, unchanged=plan.unchanged), linked


def _report(
    site: Path,
    catalog: Catalog | Judged,
    twins: TwinReport,
    *,
    written: tuple[str, ...],
    deleted: tuple[str, ...],
    unchanged: int,
) -> IndexReport:
    accepted = [filename for filename, row in catalog.rows.items() if not row.verdict]
    return IndexReport(
        site=site,
        wheels=len(accepted),
        variants=tuple(sorted({filename.split("-", 2)[1].split("+", 1)[1] for filename in accepted})),
        stats=catalog.stats,
        rejected=catalog.rejected,
        failures=len(catalog.failures),
        written=written,
        deleted=deleted,
        unchanged=unchanged,
        twins=twins,
        twins_published=len(twins.published),
    )


def render_changed(
    catalog: Catalog,
    site: Path,
    manifest: Mapping[str, FileRecord],
    previous: Mapping[str, tuple[str, tuple[str, ...]]],
    *,
    base_url: str,
    extra: Sequence[PageGroup] = (),
    settled: Settled | None = None,
) -> tuple[dict[str, bytes], dict[str, FileRecord], dict[str, tuple[str, tuple[str, ...]]], dict[str, str]]:
    """Render only the page groups whose inputs moved since the last run, or whose pages are no longer exactly
    as recorded; a group in parts settles each part the same way, a joined group takes the parts that did not move
    from its pages as they are. Returns the rendered pages, the records of pages reused as they are, every group's
    entry, and the digests of rendered pages worked out while rendering."""
    pages: dict[str, bytes] = {}
    digests: dict[str, str] = {}
    reused: dict[str, FileRecord] = {}
    groups: dict[str, tuple[str, tuple[str, ...]]] = {}
    still = settled or Settled()
    reuse = _Reuse(site, manifest, previous, still, reused)

    def settle(group: PageGroup) -> tuple[str, ...]:
        digest, paths = previous.get(group.key, ("", ()))
        if digest == group.digest and paths and reuse.keep(paths):
            if group.parts is not None or group.join is not None:  # their entries stay for the run in which one moves
                groups.update((key, entry) for key, entry in previous.items() if key.startswith(f"{group.key}/"))
        elif group.parts is not None:
            paths = tuple(sorted(path for part in group.parts() for path in settle(part)))
        elif group.join is not None:
            made = group.join(reuse)
            pages.update(made.pages)
            digests.update(made.digests)
            groups[f"{group.key}/parts"] = made.entry
            paths = tuple(sorted([*made.pages, *made.kept]))
        else:
            rendered = group.render()
            pages.update(rendered)
            paths = tuple(sorted(rendered))
        groups[group.key] = (group.digest, paths)
        return paths

    from index_site.render import page_groups

    for group in [*page_groups(catalog, base_url=base_url), *extra]:
        settle(group)
    return pages, reused, groups, digests


class _Reuse:
    """What a joined page group may take from the last run (joined.Reuse): the manifest's page group entries, the
    bytes of its pages while their records hold, and the records of other pages still in place."""

    def __init__(
        self,
        site: Path,
        manifest: Mapping[str, FileRecord],
        previous: Mapping[str, tuple[str, tuple[str, ...]]],
        settled: Settled,
        reused: dict[str, FileRecord],
    ) -> None:
        self.site, self.manifest, self.previous, self.settled, self.reused = site, manifest, previous, settled, reused

    def record(self, path: str) -> FileRecord | None:
        """The manifest's record of ``path`` while the file still has the identity it records."""
        if self.settled.holds(path):
            return self.manifest.get(path)
        return _recorded(os.path.join(self.site, path), self.manifest.get(path))

    def entry(self, key: str) -> tuple[str, tuple[str, ...]] | None:
        return self.previous.get(key)

    def page(self, path: str, sha256: str) -> bytes | None:
        record = self.record(path)
        if record is None or record.sha256 != sha256:
            return None
        content = _current_bytes(self.site / path)
        return content if content is not None and len(content) == record.size else None

    def keep(self, paths: Sequence[str]) -> bool:
        """Whether every one of ``paths`` is still as recorded; if so their records count as reused."""
        records = [self.record(path) for path in paths]
        if not all(records):
            return False
        self.reused.update((path, record) for path, record in zip(paths, records, strict=True) if record is not None)
        return True


def plan_site(
    catalog: Catalog,
    pages: Mapping[str, bytes],
    dist: Path,
    site: Path,
    manifest: Mapping[str, FileRecord],
    *,
    reused: Mapping[str, FileRecord] | None = None,
    groups: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
    extra_files: Sequence[tuple[str, str, variants.VariantWheel]] = (),
    extracted: Sequence[Extract] = (),
    settled: Settled | None = None,
    fresh: Mapping[tuple[str, str], bytes] | None = None,
    digests: Mapping[str, str] | None = None,
) -> SitePlan:
    """Compare what the site should hold with what it holds; nothing is written here. ``reused`` are pages known
    to be in place without rendering them (see render_changed); ``extra_files`` are other immutable files to place
    like the wheels (the variant channel's twins), ``extracted`` files taken out of them; ``digests`` are the sha256
    of pages already worked out."""
    still = settled or Settled()
    entries = _managed_files(site, _device(dist), still)
    links, metadata, kept = _plan_files(catalog, dist, site, manifest, entries, still)
    kept.update(reused or {})
    root = os.fspath(site) + "/"
    for source, path, twin in extra_files:
        record = manifest.get(path)
        if not (still.holds(path) and record is not None and record == (twin.sha256, twin.identity)):
            record = _placed_wheel(root + path, twin.sha256, FileIdentity(*twin.identity), record)
        if record is not None:
            kept[path] = record
        else:
            links.append((source, path, twin))
    for extract in extracted:
        record = _extracted_in_place(root, extract, manifest, entries, still)
        if record is not None:
            kept[extract.path] = record
        else:
            metadata.append(extract)
    changed, known = {}, dict(digests or {})
    for path, content in pages.items():
        record, known[path] = _page_in_place(site, path, content, manifest.get(path), known.get(path))
        if record is not None:
            kept[path] = record
        else:
            changed[path] = content
    placed = {path for _, path, _ in links} | {extract.path for extract in metadata}
    stale = tuple(sorted(entries.keys() - kept.keys() - changed.keys() - placed))
    return SitePlan(
        links=tuple(links),
        metadata=tuple(metadata),
        metadata_bytes={**{(name, METADATA): data for name, data in catalog.fresh_metadata.items()}, **(fresh or {})},
        pages=changed,
        digests={path: known[path] for path in changed},
        stale=stale,
        kept=kept,
        groups=dict(groups or {}),
    )


class Extract(NamedTuple):
    """A file of the site taken out of a wheel or twin: its ``.metadata`` or ``.provenance.json``."""

    source: Path | str  # the wheel in dist/ or the twin in variant/
    path: str  # its path in the site
    member: str  # the file of the archive's .dist-info folder: METADATA or wheelwright.json
    sha256: str  # of those bytes, as the catalog or the twin check read them


def _extracted_in_place(
    root: str,
    extract: Extract,
    manifest: Mapping[str, FileRecord],
    entries: Mapping[str, int | None],
    settled: Settled,
) -> FileRecord | None:
    """The manifest's record of ``extract`` if the site's file is still the one it records with that digest."""
    record = manifest.get(extract.path)
    if (
        record is not None
        and record[0] == extract.sha256
        and extract.path in entries  # else not there
        and (settled.holds(extract.path) or holds_identity(root + extract.path, record[1]))
    ):
        return record
    return None


def _plan_files(
    catalog: Catalog,
    dist: Path,
    site: Path,
    manifest: Mapping[str, FileRecord],
    entries: Mapping[str, int | None],
    settled: Settled,
) -> tuple[list[_Link], list[Extract], dict[str, FileRecord]]:
    """Wheels to link and .metadata files to write, and the records of those already in place. ``entries``: the
    site's files with the inode numbers of those that may be hard links into dist/ (see _managed_files)."""
    links: list[_Link] = []
    metadata: list[Extract] = []
    kept: dict[str, FileRecord] = {}
    root = os.fspath(site) + "/"  # string paths, checks inline: this loop runs for every wheel on every index
    folder = os.fspath(dist) + "/"
    identities = catalog.identities
    for wheel in catalog.wheels:
        filename = wheel.filename
        path = layout.wheel_path(wheel.name.label, filename)
        hashed = identities.get(filename)
        if hashed is not None and entries.get(path) == hashed[0]:
            # The site's entry is a regular file with the inode number of the file of dist/ the catalog has just
            # held to its full identity, in a folder on the same filesystem: the same inode, so the same
            # identity, known without a stat of its own (10,000 on every run). Only a mount over that one file
            # could make the name lead elsewhere, and whoever can mount can change any file anyway.
            kept[path] = FileRecord(wheel.sha256, hashed)
        else:
            record = _placed_wheel(root + path, wheel.sha256, hashed, manifest.get(path))
            if record is not None:
                kept[path] = record
            else:
                links.append((folder + filename, path, wheel))
        extract = Extract(folder + filename, path + ".metadata", METADATA, wheel.metadata.sha256)
        record = _extracted_in_place(root, extract, manifest, entries, settled)
        if record is not None:
            kept[extract.path] = record
        else:
            metadata.append(extract)
    return links, metadata, kept


def apply_plan(
    plan: SitePlan,
    site: Path,
    *,
    base_url: str,
    identities: Mapping[str, FileIdentity] | None = None,
    recorded: _Recorded | None = None,
) -> tuple[tuple[str, ...], dict[str, FileIdentity]]:
    """Write the plan: files first, then pages tier by tier, then prune, then the manifest (unless it would say
    what ``recorded``, the manifest read at the start, says). Returns what was written, and the new identities of
    the wheels in dist/ that were hard-linked (a link changes their ctime)."""
    records = dict(plan.kept)
    linked: dict[str, FileIdentity] = {}
    targets = [*(path for _, path, _ in plan.links), *(extract.path for extract in plan.metadata), *plan.pages]
    replaced = _real_folders(site, targets)  # nothing is written through a symlink out of the site
    for source, path, wheel in plan.links:
        # a file placed twice (a twin and its null name) is expected as the first link left it
        expected = linked.get(wheel.filename) or (identities or {}).get(wheel.filename)
        placed = _place_wheel(source, site / path, expected)
        records[path] = FileRecord(sha256=wheel.sha256, identity=placed)
        if expected is not None and placed.inode == expected.inode:
            linked[wheel.filename] = placed
    _relinked(plan.links, records, linked)
    for extract in plan.metadata:
        content = _extract(extract, plan.metadata_bytes)
        records[extract.path] = FileRecord(sha256=extract.sha256, identity=_write_atomic(site / extract.path, content))
    pages = sorted(plan.pages, key=lambda p: (layout.kind_of(p).tier, p))
    for path in pages:
        content = plan.pages[path]
        identity = _write_atomic(site / path, content)
        sha256 = plan.digests.get(path) or hashlib.sha256(content).hexdigest()
        records[path] = FileRecord(sha256=sha256, identity=identity)
    for path in plan.stale:
        if path in replaced:  # a folder of the site now, holding what this run wrote
            continue
        (site / path).unlink(missing_ok=True)
        _remove_empty_parents(site, site / path)
    if recorded is None or recorded[:3] != (records, plan.groups, base_url):  # its bytes differ too: not read
        _write_manifest(site, records, base_url, plan.groups, compare=False, since=recorded)
    written = (*(path for _, path, _ in plan.links), *(extract.path for extract in plan.metadata), *pages)
    log.info("site %s: %d written, %d unchanged, %d deleted", site, len(written), plan.unchanged, len(plan.stale))
    return written, linked


def _real_folders(site: Path, paths: Iterable[str]) -> set[str]:
    """Make each folder ``paths`` are written into a real folder of the site, from the top down: an entry standing
    where one belongs (a symlink, which would carry the writes out of the site; a file; a FIFO) is removed first,
    as the prune would remove it at the end of the run. A folder is never followed out of the site, nor removed.
    Returns the site paths of the entries removed."""
    made: set[str] = set()
    replaced: set[str] = set()
    for parent in sorted({path.rpartition("/")[0] for path in paths} - {""}):  # a few hundred for 87,000 files
        parts = parent.split("/")
        for depth in range(1, len(parts) + 1):
            folder = "/".join(parts[:depth])
            if folder in made:
                continue
            full = os.path.join(site, folder)
            try:
                if not stat.S_ISDIR(os.lstat(full).st_mode):
                    os.unlink(full)
                    replaced.add(folder)
                    os.mkdir(full)
            except FileNotFoundError:
                os.mkdir(full)
            made.add(folder)
    return replaced


def _relinked(links: Sequence[_Link], records: dict[str, FileRecord], linked: Mapping[str, FileIdentity]) -> None:
    """A file placed twice (a twin and its null name) moved its ctime with its second link: the first's record is
    given the identity the file has after the last (the state's row has it too), so that the next run finds every
    record right rather than rewriting thousands after a cold index."""
    for _, path, wheel in links:
        final = linked.get(wheel.filename)
        record = records[path]
        if final is not None and record.identity.inode == final.inode and record.identity != final:
            records[path] = FileRecord(sha256=wheel.sha256, identity=final)


def _extract(extract: Extract, read: Mapping[tuple[str, str], bytes]) -> bytes:
    """The member's bytes (as the catalog or the twin check read them this run, else from the archive), which
    must still have the digest they recorded."""
    source = Path(extract.source)
    content = read.get((source.name, extract.member))
    if content is None:
        try:
            most = {METADATA: MAX_METADATA_BYTES}.get(extract.member, MAX_PROVENANCE_BYTES)
            found = read_dist_info(source, source.name, {extract.member: most}, required=(extract.member,))
            content = found[extract.member]
        except RejectedWheel:
            raise _changed(source) from None
    if hashlib.sha256(content).hexdigest() != extract.sha256:
        raise _changed(source)
    return content


def load_manifest(site: Path) -> dict[str, FileRecord]:
    """What the last index run wrote into ``site``: {site path: FileRecord}."""
    return _records(_read_marker(site))


def _records(document: Mapping[str, Any]) -> dict[str, FileRecord]:
    # [sha256, inode, size, mtime_ns, ctime_ns]; an older manifest's [sha256, size, mtime_ns] is not trusted.
    # Damaged numbers need no check here: they never equal a real file's, so the file is verified again.
    # tuple.__new__ builds the named tuples without their per-call checks: two per file of the site, every run.
    new = tuple.__new__
    files = document.get("files")
    return {
        path: new(FileRecord, (raw[0], new(FileIdentity, raw[1:])))
        for path, raw in (files.items() if isinstance(files, dict) else ())
        if type(raw) in _ENTRY and len(raw) == 5 and type(raw[0]) is str
    }


_ENTRY = (tuple, list)  # as the typed decoder or a change line gives it


def load_groups(site: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The page groups of the last run: {key: (digest, site paths)} (see render.PageGroup)."""
    return _groups(_read_marker(site))


def _groups(document: Mapping[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    groups = {}
    found = document.get("groups")
    for key, raw in found.items() if isinstance(found, dict) else ():
        if isinstance(raw, _ENTRY) and len(raw) == 2 and isinstance(raw[0], str) and isinstance(raw[1], _ENTRY):
            groups[key] = (raw[0], tuple(str(path) for path in raw[1]))
    return groups


def site_base_url(site: Path) -> str | None:
    """The public URL the site was indexed for (its landing page's install commands point there)."""
    base_url = _read_marker(site).get("base_url")
    return base_url if isinstance(base_url, str) else None


def _read_marker(site: Path) -> dict[str, Any]:
    return _read_marker_state(site)[0]


def _read_marker_state(site: Path) -> tuple[dict[str, Any], int | None]:
    """The manifest's document with its change lines applied, and the bytes of those lines (None where the last one
    is torn or damaged: a run killed while appending; the next write then rewrites the file whole)."""
    marker = site / layout.SITE_MARKER
    try:
        fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                raise ValueError("not a regular file")
            data = file.read(_MAX_MANIFEST_BYTES + 1)
            newline = data.find(b"\n")
            end = len(data) if newline < 0 else newline  # the document is the first line
            document = _decoded(memoryview(data)[:end])
            changes = data[end + 1 :]
    except FileNotFoundError:
        return {}, 0
    except (OSError, ValueError, RecursionError) as error:
        raise ConfigError(f"{marker}: unreadable ({str(error)[:200]})", tip="delete it and index again") from None
    if not isinstance(document, dict) or document.get("generator") != "wheelwright":
        raise ConfigError(f"{marker}: not a wheelwright site manifest", tip="delete it and index again")
    applied = _apply_changes(document, changes)
    return document, applied if newline >= 0 else None  # a line appended to an unended document would join it


def _decoded(first: memoryview) -> object:
    """The manifest's first line, decoded: typed where it is as the index writes it (codec), else (an older or
    damaged one) as the standard library decodes any JSON, for _records and _groups to drop what they cannot
    trust."""
    from index_site import codec  # msgspec: only for a run that reads the manifest

    typed = codec.decode(first)
    if typed is not None:
        return typed
    # decoded as json.loads decodes bytes, from a view: no copy of the first line's 20 MB
    return json.loads(str(first, json.detect_encoding(bytes(first[:4])), "surrogatepass"))


def _apply_changes(document: dict[str, Any], changes: bytes) -> int | None:
    """Apply the manifest's change lines to its document, in order, up to the first that is torn or not one: its
    records and groups are then lost, which costs only work (a file without its record is verified again, a group
    without its entry is rendered again), never trust. Returns the bytes applied, or None when some were not."""
    applied = 0
    targets = document.setdefault("files", {}), document.setdefault("groups", {})
    for line in changes.splitlines(keepends=True):
        try:
            change = json.loads(line) if line.endswith(b"\n") else None
        except (ValueError, RecursionError):
            change = None
        parts = [change.get(name, {}) for name in ("files", "groups")] if isinstance(change, dict) else []
        if not parts or not all(isinstance(part, dict) for part in (*parts, *targets)):
            return None
        for target, part in zip(targets, parts, strict=True):
            for key, value in part.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        applied += len(line)
    return applied


_MAX_MANIFEST_BYTES = 1 << 28  # ~2 million files; a bigger one is not ours


class _Recorded(NamedTuple):
    """What a site's manifest says (its files' records, its page groups, the base URL it was indexed for), and
    where its file stood when read: its identity, the size of its document and of the change lines after it
    (None: the file must be rewritten whole before anything is appended)."""

    files: dict[str, FileRecord]
    groups: dict[str, tuple[str, tuple[str, ...]]]
    base_url: str | None
    marker: FileIdentity | None = None
    size: int = 0
    changes: int | None = None


def _recorded_manifest(site: Path) -> _Recorded:
    """The manifest as the run starts; the identity is taken before reading, so a change during the read shows."""
    marker = os.path.abspath(site / layout.SITE_MARKER)
    before = identity_if_regular(marker)
    document, changes = _read_marker_state(site)
    size = before.size - (changes or 0) if before is not None else 0
    return _Recorded(_records(document), _groups(document), document.get("base_url"), before, size, changes)


def _check_site(site: Path, base_url: str) -> None:
    """Refuse to write into (and prune) a folder the index did not create. A new or empty folder gets the marker
    before anything else is written, so that a run killed part-way is finished by the next, not refused."""
    if site.exists() and not site.is_dir():
        raise ConfigError(f"{site}: not a folder", tip="pass --site with an empty or new folder")
    marker = site / layout.SITE_MARKER
    if site.exists() and not (marker.exists() or marker.is_symlink()) and any(site.iterdir()):
        raise ConfigError(
            f"{site}: not empty and not a wheelwright site (no {layout.SITE_MARKER})",
            tip="pass --site with an empty or new folder",
        )
    site.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        _write_manifest(site, {}, base_url)


def _write_manifest(
    site: Path,
    records: Mapping[str, FileRecord],
    base_url: str,
    groups: Mapping[str, tuple[str, tuple[str, ...]]] | None = None,
    *,
    compare: bool = True,
    since: _Recorded | None = None,
) -> None:
    """Write the manifest: as one line of changes appended to the file when it is still the one read as ``since``
    and the lines appended since it was written whole stay under an eighth of it (one added wheel changes a dozen
    records of 20,000: a few kB, where the whole file is 4 MB), else whole."""
    recorded = _Recorded(dict(records), dict(groups or {}), base_url)
    if since is not None and _append_changes(site, since, recorded):
        return
    document = {
        "generator": "wheelwright",
        "base_url": base_url,
        "files": {path: (records[path][0], *records[path][1]) for path in sorted(records)},
        "groups": dict(sorted((groups or {}).items())),
    }
    from index_site import codec

    content = codec.encode(document) + b"\n"
    if not compare or _current_bytes(site / layout.SITE_MARKER) != content:
        write_atomic(site / layout.SITE_MARKER, content)


def _append_changes(site: Path, since: _Recorded, recorded: _Recorded) -> bool:
    """Append what differs from ``since`` to the marker, if it still has the identity it had when read as
    ``since`` and there is room; False where the manifest must be written whole instead."""
    if since.marker is None or since.changes is None or since.base_url != recorded.base_url:
        return False
    room = since.size // _CHANGES_FRACTION - since.changes
    line = _change_line(since, recorded, room)
    if line is None or len(line) > room:
        return False
    marker = os.path.abspath(site / layout.SITE_MARKER)
    fd = os.open(marker, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if _identity_of(os.fstat(fd)) != since.marker:  # rewritten behind this run
            return False
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return True


_CHANGES_FRACTION = 8  # change lines may grow to the document's size over this, then it is written whole
_MIN_ENTRY_BYTES = 80  # a record's entry at least: its sha256 in hex and four numbers


def _change_line(since: _Recorded, recorded: _Recorded, room: int) -> bytes | None:
    """One JSON line of the records and groups that differ from ``since`` (null: gone), in key order; None as soon
    as the records that differ could not fit in ``room`` bytes (a cold index changes all of them)."""
    old = since.files
    files: dict[str, list[object] | None] = {}
    most = room // _MIN_ENTRY_BYTES
    for path, record in recorded.files.items():  # mostly the very records read: an identity check each
        before = old.get(path)
        if before is not record and before != record:
            files[path] = [record[0], *record[1]]
            if len(files) > most:
                return None
    files.update((path, None) for path in old.keys() - recorded.files.keys())
    groups: dict[str, list[object] | None] = {
        key: [digest, list(paths)]
        for key, (digest, paths) in recorded.groups.items()
        if since.groups.get(key) != (digest, paths)
    }
    groups.update((key, None) for key in since.groups.keys() - recorded.groups.keys())
    change = {"files": dict(sorted(files.items())), "groups": dict(sorted(groups.items()))}
    from index_site import codec

    return codec.encode(change) + b"\n"


def _identity_of(status: os.stat_result) -> FileIdentity | None:
    if not stat.S_ISREG(status.st_mode):
        return None
    return FileIdentity(status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _recorded(path: str, record: FileRecord | None) -> FileRecord | None:
    """``record`` if the file at ``path`` still has the identity it was recorded with."""
    if record is None or identity_if_regular(path) != record.identity:
        return None
    return record


def _page_in_place(
    site: Path, path: str, content: bytes, record: FileRecord | None, sha256: str | None = None
) -> tuple[FileRecord | None, str]:
    """The record of the page at ``path`` if it already holds ``content`` (else None), and the digest of
    ``content`` (``sha256`` where worked out already). While the file's identity holds, the manifest's digest says
    whether it does (a page that changed is not read back: the landing page's neighbours weigh megabytes); else the
    file is read."""
    sha256 = sha256 or hashlib.sha256(content).hexdigest()
    if record is not None and _recorded(os.path.join(site, path), record):
        return (record if record.sha256 == sha256 else None), sha256
    if _current_bytes(site / path) == content:
        return FileRecord(sha256=sha256, identity=regular_identity(site / path)), sha256
    return None, sha256


def _placed_wheel(
    target: str, sha256: str, hashed: FileIdentity | None, record: FileRecord | None
) -> FileRecord | None:
    """The record of ``target`` if it already holds the bytes hashed as ``sha256``: the hard link to the very
    file of dist/ the catalog just verified, or a copy whose identity the manifest recorded with that digest."""
    placed = identity_if_regular(target)
    if placed is None:
        return None
    if hashed is not None and placed == hashed:
        return FileRecord(sha256=sha256, identity=placed)
    if (
        record is not None
        and record.sha256 == sha256
        and record.identity == placed
        and placed.inode != getattr(hashed, "inode", None)
    ):
        return record
    return None


def _place_wheel(source: Path | str, target: Path, expected: FileIdentity | None) -> FileIdentity:
    """Hard-link the wheel into the site (no copy of big files); copy where the site is on another filesystem.
    Either way the file of dist/ must still be the one the catalog hashed, before and after. Its folder is a real
    folder of the site already (apply_plan's _real_folders)."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    if expected is not None and identity_if_regular(source) != expected:
        raise _changed(source)
    try:
        linked = _link_or_copy(source, temporary)
        placed = regular_identity(temporary)
        if expected is not None and not _still_hashed(source, placed, expected, linked=linked):
            raise _changed(source)
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)  # a full disk must not leave half a wheel behind
        raise
    return regular_identity(target)


def _still_hashed(source: Path | str, placed: FileIdentity, expected: FileIdentity, *, linked: bool) -> bool:
    """A link is the hashed inode with its size and mtime (the link itself moved its ctime); a copy was taken
    from a source whose whole identity still holds."""
    if linked:
        return (placed.inode, placed.size, placed.mtime_ns) == (expected.inode, expected.size, expected.mtime_ns)
    return identity_if_regular(source) == expected and placed.size == expected.size


def _changed(source: Path | str) -> FileSystemError:
    return FileSystemError(f"{source}: changed while being indexed", tip="run `wheelwright index` again")


def _link_or_copy(source: Path | str, temporary: Path) -> bool:
    """True if hard-linked, False if copied (another filesystem, or one without hard links)."""
    try:
        os.link(source, temporary, follow_symlinks=False)
        return True
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
    shutil.copyfile(source, temporary, follow_symlinks=False)
    return False


def _write_atomic(target: Path, content: bytes) -> FileIdentity:
    """Write ``content`` whole or not at all (a full disk leaves no half page behind); its identity."""
    write_atomic(target, content)
    return regular_identity(target)


def _current_bytes(path: Path) -> bytes | None:
    """The bytes of the regular file at ``path``, or None (missing, or a symlink or special file to replace)."""
    if identity_if_regular(path) is None:
        return None
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _device(folder: Path) -> int | None:
    try:
        return os.stat(folder).st_dev
    except OSError:
        return None


def _managed_files(
    site: Path,
    device: int | None = None,
    settled: Settled | None = None,
) -> dict[str, int | None]:
    """Everything but folders under the managed names (files, leftover temporaries, symlinks, special files), each
    with the inode number its directory entry gives when it is a regular file in a folder on filesystem ``device``
    (an inode number means something only within one filesystem), else None. A settled folder is not listed: its
    entries are the files the manifest records there, with their recorded inodes."""
    files: dict[str, int | None] = {}
    for top in MANAGED:
        root = site / top
        if root.is_symlink() or root.is_file() or (root.exists() and not root.is_dir()):
            files[top] = None
        elif root.is_dir():
            _files_under(os.fspath(root), top + "/", device, files, settled or Settled())
    return files


def _files_under(
    folder: str,
    prefix: str,
    device: int | None,
    files: dict[str, int | None],
    settled: Settled,
) -> None:
    """Site paths of everything under ``folder`` but real folders (a symlink to one is listed, never entered):
    os.scandir's entry types and inode numbers, without a stat or a Path per file, since the site holds two files
    per wheel; one lstat per folder, for its filesystem."""
    try:
        status = os.lstat(folder)
    except OSError:  # as os.walk did: a folder that cannot be listed is left as it is
        return
    relative = prefix.rstrip("/")
    found: Mapping[str, int | None]
    if relative in settled.folders:
        found = settled.files.get(relative, {})
        folders = list(settled.subfolders.get(relative, ()))
    else:
        listing = _listing(folder, prefix)
        if listing is None:
            return
        found, folders = listing
    files.update(found if device is not None and status.st_dev == device else dict.fromkeys(found))
    for name in folders:
        _files_under(f"{folder}/{name}", f"{prefix}{name}/", device, files, settled)


def _listing(folder: str, prefix: str) -> tuple[dict[str, int | None], list[str]] | None:
    """What ``folder`` holds: {site path: inode number of a regular file, else None} and its real folders' names;
    None when it cannot be listed."""
    found: dict[str, int | None] = {}
    folders = []
    try:
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                found[prefix + entry.name] = entry.inode() if entry.is_file(follow_symlinks=False) else None
    except OSError:
        return None
    return found, folders


def _remove_empty_parents(site: Path, path: Path) -> None:
    parent = path.parent
    while parent != site and _empty(parent):
        parent.rmdir()
        parent = parent.parent


def _empty(folder: Path) -> bool:
    """Whether ``folder`` has no entry, from its first one alone (a variant's folder holds thousands)."""
    with os.scandir(folder) as entries:
        return next(entries, None) is None
