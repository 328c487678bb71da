"""The index stage: turn dist/ and the ledger into the static site. It plans every file the site should hold, then
writes only what differs, in publish order (wheels, then the pages that link them), each file atomically, so a
server running over the site never sees a link to a missing file or a half-written page.

The manifest (records.py) records each file's sha256 with its full identity (inode, size, mtime, ctime); a
record is trusted only while that identity holds. What a complete run leaves for the next (quiet.py) lets a run
that finds nothing moved answer without reading a row or the manifest. Wheels are hard links into dist/ where
possible: placing one re-checks that the file in dist/ is still the one hashed, and the catalog re-checks it on
every run. The marker is written before anything else, so a killed run leaves a folder the next run recognises and
finishes."""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import itertools
import logging
import operator
import os
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from builder.core.errors import FileSystemError
from builder.core.files import write_atomic
from builder.core.hashing import FileIdentity, holds_identity, identity_if_regular, regular_identity
from builder.core.wheelhouse import Layout
from index_site import blocks, fallback, layout, variants
from index_site.catalog import Catalog, Judged, RecordedFacts, catalog_of, judge
from index_site.code import code_digest
from index_site.inputs import Listing
from index_site.quiet import (
    Settled,
    as_left,
    folders_above,
    inputs_digest,
    kept_for_next,
    leave,
    settled_folders,
    unsettled_folders,
)
from index_site.records import (
    Block,
    Buffer,
    FileRecord,
    Recorded,
    current_bytes,
    current_mapped,
    recorded_manifest,
    write_manifest,
)
from index_site.report import IndexReport, TwinReport
from index_site.state import FILENAME, IndexState, accepted
from index_site.summaries import Summaries
from index_site.twins import TwinMaker, deriver, settle_twins

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

# (the file to place, its path in the site, what is known of it): a wheel of dist/ or a variant twin
_Link = tuple["Path | str", str, "WheelFile | variants.VariantWheel"]


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
    placing: blocks.Placing = field(default_factory=blocks.Placing)  # the blocks kept whole; how the others are made

    @property
    def unchanged(self) -> int:
        return len(self.kept) + self.placing.count


def index_changed(
    state: IndexState,
    wheelhouse: Layout,
    site: Path,
    base_url: str,
    twins: TwinMaker | None,
    found: tuple[Listing, Listing] | None,
) -> IndexReport:
    """Index a site in which something moved since the last complete run (stage.build_site asked quiet.py first):
    judge every file of dist/ by its row (``found``: the listings of dist/ and variant/ where the quiet run made
    them), settle the twins, render and place what changed, and leave what the next run needs."""
    derive = deriver(twins, wheelhouse.variant)
    judged = judge(wheelhouse.dist, wheelhouse.ledger, state, derive, found and found[0])
    summaries = Summaries(state, code_digest())  # what the last run worked out of each release, for this one
    settled = settle_twins(judged, wheelhouse.dist, wheelhouse.variant, state, twins, found and found[1], summaries)
    inputs = inputs_digest(state, judged, base_url, twins is not None)
    files = as_left(state, site, inputs)
    if files is not None:  # nothing moved since the last complete run: nothing to do
        report = _report(site, judged, settled, written=(), deleted=(), unchanged=files)
        linked: Mapping[str, FileIdentity] = {}
    else:
        channel = fallback.channel_sizes(settled.twins)
        catalog = dataclasses.replace(catalog_of(judged), channel=channel, facts=RecordedFacts(state).facts())
        recorded = recorded_manifest(site)
        expected = _expected(wheelhouse.dist, site, recorded, catalog, settled, summaries)
        still = settled_folders(site, state, recorded, expected)
        report, linked = _index(wheelhouse.root, site, base_url, state, recorded, catalog, settled, still, summaries)
    summaries.save()
    kept = kept_for_next(state, judged, settled, linked, report, base_url, twins is not None)
    leave(state, site, inputs, report.unchanged + len(report.written), kept)
    return report


def _expected(
    dist: Path, site: Path, recorded: Recorded, catalog: Catalog, twins: TwinReport, summaries: Summaries | None = None
) -> dict[str, str]:
    """The digest each of the manifest's blocks of wheels and twins should have now (none to work out where it
    records none: a cold index). A site on another filesystem than dist/ holds copies of its wheels: their blocks are
    never taken whole, each copy is held to its identity every run."""
    if not recorded.blocks:
        return {}
    linkable = catalog.wheels if _device(dist) == os.stat(site).st_dev else ()
    # a twin carries its identity; the catalog's are its rows': the parts of both are kept in ``summaries``
    return blocks.expected(linkable, twins.twins, catalog.identities, code_digest(), summaries)


def _index(
    output: Path,
    site: Path,
    base_url: str,
    state: IndexState,
    recorded: Recorded,
    catalog: Catalog,
    twins: TwinReport,
    settled: Settled | None = None,
    summaries: Summaries | None = None,
) -> tuple[IndexReport, dict[str, FileIdentity]]:
    """Render and place what changed; the report, and the new identities of the files the site's hard links
    moved (their ctimes)."""
    from index_site.render import channel_groups  # jinja2 and the page models: only for a run that renders

    still = settled or Settled()
    manifest, previous_groups = blocks.unpacked(recorded.files, recorded.blocks, still.blocks), recorded.groups
    _not_folders_removed(site, _unchecked_folders(state, site, still, manifest, previous_groups))
    placing = _placing(catalog, twins, still)
    extra_files, extracted = variants.placed(placing.twins)
    lookup = blocks.Lookup(manifest, recorded.blocks, previous_groups)
    pages, reused, groups, digests, page_blocks = render_changed(
        catalog, site, lookup, previous_groups,
        base_url=base_url,
        extra=channel_groups(twins.twins, lookup, summaries),
        settled=settled,
        recorded_blocks=recorded.blocks,
        summaries=summaries,
    )
    left = blocks.pages_left(recorded.blocks, page_blocks.kept)  # their files are planned one by one
    manifest.update(left)
    placing = dataclasses.replace(
        placing,
        kept={**placing.kept, **page_blocks.kept},
        paths=blocks.members(placing.wheels, extra_files, [entry[:2] for entry in extracted]),
        pages=page_blocks.fresh,
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
        settled=still.with_records(left),
        fresh=twins.fresh,
        digests=digests,
        placing=placing,
    )
    identities = dict(catalog.identities)  # and each twin's, made in C (FileIdentity's checks skipped): 10,000 a run
    twin_identities = map(tuple.__new__, itertools.repeat(FileIdentity), map(_IDENTITY, twins.twins))
    identities.update(zip(map(_FILENAME_OF, twins.twins), twin_identities, strict=True))
    written, linked = apply_plan(plan, site, base_url=base_url, identities=identities, recorded=recorded)
    if linked:
        state.refresh({name: (identities[name], identity) for name, identity in linked.items()})
    return _report(site, catalog, twins, written=written, deleted=plan.stale, unchanged=plan.unchanged), linked


def _placing(catalog: Catalog, twins: TwinReport, settled: Settled) -> blocks.Placing:
    """The blocks this run keeps as they are, and the wheels and twins it places one by one."""
    kept = settled.blocks
    return blocks.Placing(
        kept=kept,
        wheels=[wheel for wheel in catalog.wheels if blocks.WHEELS + wheel.name.label not in kept] if kept else
        catalog.wheels,
        twins=[twin for twin in twins.twins if blocks.TWINS + twin.label not in kept] if kept else twins.twins,
        code=code_digest(),
    )


def _report(
    site: Path,
    catalog: Catalog | Judged,
    twins: TwinReport,
    *,
    written: tuple[str, ...],
    deleted: tuple[str, ...],
    unchanged: int,
) -> IndexReport:
    listed = list(map(FILENAME, accepted(catalog.rows)))
    versions = set(map(_VERSION, map(_SPLIT_NAME, listed)))  # "1.7.0+pt214cu130": a few per label
    return IndexReport(
        site=site,
        wheels=len(listed),
        variants=tuple(sorted({version.split("+", 1)[1] for version in versions})),
        stats=catalog.stats,
        rejected=catalog.rejected,
        failures=len(catalog.failures),
        written=written,
        deleted=deleted,
        unchanged=unchanged,
        twins=twins,
        twins_published=len(twins.published),
    )


_SPLIT_NAME, _VERSION = operator.methodcaller("split", "-", 2), operator.itemgetter(1)
_FILENAME_OF, _IDENTITY = operator.attrgetter("filename"), operator.attrgetter("identity")


class PageBlocks(NamedTuple):
    """The page blocks of one run (blocks.py): those taken whole, and those made anew ({key: (digest, paths)})."""

    kept: dict[str, Block]
    fresh: dict[str, tuple[str, tuple[str, ...]]]


def render_changed(
    catalog: Catalog,
    site: Path,
    manifest: Mapping[str, FileRecord],
    previous: Mapping[str, tuple[str, tuple[str, ...]]],
    *,
    base_url: str,
    extra: Sequence[PageGroup] = (),
    settled: Settled | None = None,
    recorded_blocks: Mapping[str, Block] | None = None,
    summaries: Summaries | None = None,
) -> tuple[dict[str, bytes], dict[str, FileRecord], dict[str, tuple[str, tuple[str, ...]]], dict[str, str], PageBlocks]:
    """Render only the page groups whose inputs moved since the last run, or whose pages are no longer exactly
    as recorded; a group in parts settles each part the same way, a joined group takes the parts that did not move
    from its pages as they are. A group that renders its pages itself keeps them as one block of the manifest
    (``recorded_blocks``: those recorded), taken whole where its digest holds and its folders are settled. Returns the
    rendered pages, the records of pages reused as they are, every group's entry, the digests of rendered pages
    worked out while rendering, and the page blocks."""
    pages: dict[str, bytes] = {}
    digests: dict[str, str] = {}
    reused: dict[str, FileRecord] = {}
    groups: dict[str, tuple[str, tuple[str, ...]]] = {}
    page_blocks = PageBlocks({}, {})
    still = settled or Settled()
    reuse = _Reuse(site, manifest, previous, still, reused)
    recorded = recorded_blocks or {}
    below = functools.cache(lambda: _below(previous))

    def settle(group: PageGroup, top: bool = False) -> tuple[str, ...]:
        digest, paths = previous.get(group.key, ("", ()))
        key = _page_block(group, top)
        block = recorded.get(key) if key is not None else None
        if key is not None and block is not None and _whole(block, digest, group.digest, paths, still):
            page_blocks.kept[key] = block
        elif digest == group.digest and paths and reuse.keep(paths):
            if group.parts is not None or group.join is not None:  # their entries stay for the run in which one moves
                groups.update((child, previous[child]) for child in below().get(group.key, ()))
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
        if key is not None and key not in page_blocks.kept:
            page_blocks.fresh[key] = (group.digest, paths)
        return paths

    from index_site.render import page_groups

    for group in [*page_groups(catalog, base_url=base_url, summaries=summaries), *extra]:
        settle(group, top=True)
    return pages, reused, groups, digests, page_blocks


def _below(entries: Iterable[str]) -> dict[str, list[str]]:
    """The keys of ``entries`` under each key ("<key>/..."), worked out once for the run's groups: a key of a group
    may hold slashes itself, so every one of them is a place the key of a group above may end."""
    found: dict[str, list[str]] = {}
    for key in entries:
        at = key.find("/")
        while at >= 0:
            found.setdefault(key[:at], []).append(key)
            at = key.find("/", at + 1)
    return found


def _whole(block: Block, recorded: str, digest: str, paths: Sequence[str], settled: Settled) -> bool:
    """Whether a group's page block is as it was recorded: the group's digest now is the one it was recorded with
    (``recorded``, the block's), and every folder of its pages is settled."""
    return digest == recorded == block.digest and bool(paths) and all(map(settled.holds, paths))


def _page_block(group: PageGroup, top: bool) -> str | None:
    """The key of the block of ``group``'s pages: a group of the top that renders its pages itself has one (the
    parts of a group are settled, and recorded, page by page)."""
    return blocks.PAGES + group.key if top and group.parts is None and group.join is None else None


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

    def page(self, path: str, sha256: str) -> Buffer | None:
        record = self.record(path)
        if record is None or record.sha256 != sha256:
            return None
        content = current_mapped(self.site / path)
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
    placing: blocks.Placing | None = None,
) -> SitePlan:
    """Compare what the site should hold with what it holds; nothing is written here. ``reused`` are pages known
    to be in place without rendering them (see render_changed); ``extra_files`` are other immutable files to place
    like the wheels (the variant channel's twins), ``extracted`` files taken out of them; ``digests`` are the sha256
    of pages already worked out."""
    still = settled or Settled()
    placing = placing or blocks.Placing(wheels=catalog.wheels)
    entries = _managed_files(site, _device(dist), still)
    links, metadata, kept = _plan_files(catalog, placing.wheels, dist, site, manifest, entries, still)
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
        placing=placing,
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
    wheels: Iterable[WheelFile],
    dist: Path,
    site: Path,
    manifest: Mapping[str, FileRecord],
    entries: Mapping[str, int | None],
    settled: Settled,
) -> tuple[list[_Link], list[Extract], dict[str, FileRecord]]:
    """Wheels to link and .metadata files to write, and the records of those already in place (of ``wheels``, the
    catalog's not in a block kept whole). ``entries``: the site's files with the inode numbers of those that may be
    hard links into dist/ (see _managed_files)."""
    links: list[_Link] = []
    metadata: list[Extract] = []
    kept: dict[str, FileRecord] = {}
    root = os.fspath(site) + "/"  # string paths, checks inline: this loop runs for every wheel on every index
    folder = os.fspath(dist) + "/"
    identities = catalog.identities
    for wheel in wheels:
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
    recorded: Recorded | None = None,
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
    packed = plan.placing.packed(records, blocks.identities_after(identities or {}, linked))
    if recorded is None or (*recorded[:3], recorded.blocks) != (records, plan.groups, base_url, packed):
        write_manifest(site, records, base_url, plan.groups, compare=False, since=recorded, blocks=packed)
    written = (*(path for _, path, _ in plan.links), *(extract.path for extract in plan.metadata), *pages)
    log.info("site %s: %d written, %d unchanged, %d deleted", site, len(written), plan.unchanged, len(plan.stale))
    return written, linked


def _not_folders_removed(site: Path, folders: Iterable[str]) -> None:
    """Remove what stands where a folder of the site was (a symlink, a file), as the prune would at the end of the
    run: before anything is checked in place, since a check reaches a file through the folders above it, and a
    folder replaced by a symlink to a copy of it (moved to another disk, linked back) would hold every file as
    recorded until the prune took the link away, their records kept for files no longer there. From the top: a
    folder under one removed is gone with it."""
    for folder in folders:
        full = os.path.join(site, folder)
        try:
            if stat.S_ISDIR(os.lstat(full).st_mode):
                continue
            os.unlink(full)
        except OSError:  # gone, or under something removed: nothing there to reach through
            continue
        log.info("site %s: %s was not a folder (a symlink or a file); removed, its files placed again", site, folder)


def _unchecked_folders(
    state: IndexState,
    site: Path,
    settled: Settled,
    records: Mapping[str, FileRecord],
    groups: Mapping[str, tuple[str, tuple[str, ...]]],
) -> list[str]:
    """The folders of the site this run has not found as they were, from the top: those the last complete run
    recorded and ``settled`` does not hold; where none recorded any, every folder a record or a page is in."""
    folders = unsettled_folders(state, site, settled)
    if folders is not None:
        return folders
    paths = itertools.chain(records, (path for _, of_group in groups.values() for path in of_group))
    return sorted({folder for path in paths for folder in folders_above(path)})


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
    if current_bytes(site / path) == content:
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
    for top in layout.MANAGED:
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
