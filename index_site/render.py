"""Render the catalog into pages: per variant a find-links page, a PEP 503 simple index and a PEP 691 JSON index,
the same two indexes over all variants, and the pages for people (pages.py). Pure: catalog in, {site path: bytes}
out.

Pages come in groups (PageGroup), each made from one part of the catalog only (one variant's wheels, one project's,
the project names, everything for the pages for people) and carrying a digest of that part and of the code and
templates that render it, so the index renders again only the groups whose digest moved: one added wheel does not
re-render 10,000."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import re
import shlex
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import jinja2
import markupsafe
from packaging.version import Version

from builder.core import resources
from builder.core.hashing import FileIdentity, sha256_of
from builder.core.settings import cache_root
from index_site import fallback, joined, layout, variants
from index_site.catalog import Catalog
from index_site.code import code_digest
from index_site.landing import accelerator_text
from index_site.lines import API_VERSION, Listed, ProjectLines, simple_page
from index_site.manifest import release_manifest
from index_site.pages import columns_fingerprint, coverage_pages, people, render_pages, setup_fingerprints
from index_site.state import WHEEL_VERDICT, release_of
from index_site.summaries import Summaries, text_map
from index_site.wheels import GpuArchs, WheelFile

_AFTER_PATH_SLASH = re.compile(r"(?<=[^:/]/)(?=[^/])")  # after a path's slashes, not inside "://"


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """The templates compiled once, kept in the cache folder for the next process: jinja2 otherwise compiles each
    template again in every new process (0.11 CPU-s of a re-index that renders, docs/runs.md). jinja2 keys each by
    the template's name and the checksum of its source and writes it atomically; a cache folder that cannot be read
    or written only costs the compile. The folder is trusted as the rest of the cache is (the build envs run from
    it): whoever can write there can change what a build runs anyway."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, TypeError):  # a damaged file: compiled again, and replaced
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _compiled_templates() -> jinja2.BytecodeCache | None:
    folder = cache_root() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _CompiledTemplates(str(folder))


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader(resources.TEMPLATE_PACKAGE, resources.TEMPLATE_FOLDER),
        bytecode_cache=_compiled_templates(),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["filesize"] = _filesize
    environment.filters["wbr"] = _breakable
    environment.filters["shell"] = shlex.quote  # a value in a command people paste into a shell
    return environment


@functools.lru_cache(maxsize=4096)
def _breakable(command: str) -> markupsafe.Markup:
    """Escaped ``command`` that wraps between words and after a URL's slashes, never inside a name like
    ``causal-conv1d==1.7.0``; it still copies as one line."""
    words = []
    for word in command.split(" "):
        if "/" in word:
            words.append(
                markupsafe.Markup("<wbr>").join(markupsafe.escape(part) for part in _AFTER_PATH_SLASH.split(word))
            )
        else:
            words.append(markupsafe.Markup('<span class="nowrap">%s</span>') % word)
    return markupsafe.Markup(" ").join(words)


def _filesize(size: float) -> str:
    for unit in ("B", "kB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


@dataclass(frozen=True, kw_only=True)
class PageGroup:
    """Pages made from one part of the catalog: ``render()`` gives the same bytes while ``digest`` holds."""

    key: str  # "variant:pt214cu130", "project:causal-conv1d", "projects", "pages", "pages/select/..."
    digest: str
    render: Callable[[], dict[str, bytes]]
    # Finer groups, keyed "<key>/...", that together make the same pages: when this digest moves, each of them is
    # rendered again only if its own digest moved (the pages for people: one setup page of hundreds changes).
    parts: Callable[[], list[PageGroup]] | None = None
    # The same pages joined from parts (joined.py), some taken from the pages the last run wrote: the bytes of
    # render(). Its entry goes into the manifest's page groups as "<key>/parts".
    join: Callable[[joined.Reuse], joined.Joined] | None = None


def render_site(catalog: Catalog, *, base_url: str) -> dict[str, bytes]:
    """Every page of the site, keyed by its path under the site root."""
    pages: dict[str, bytes] = {}
    for group in page_groups(catalog, base_url=base_url):
        pages.update(group.render())
    return pages


def page_groups(catalog: Catalog, *, base_url: str, summaries: Summaries | None = None) -> list[PageGroup]:
    """The site's pages in groups, none rendered yet. Each group's digest is made from the digests of its cells
    (one release's wheels of one label, _cells): each wheel's fingerprint is hashed once a run, not once for each
    group that shows it (five of them), and a cell's digest is kept for the next run (``summaries``)."""
    cells = _cells(catalog.wheels, catalog.archs, summaries)
    by_label: dict[str, list[_Cell]] = defaultdict(list)
    by_project: dict[str, list[_Cell]] = defaultdict(list)
    by_release: dict[tuple[str, str], list[_Cell]] = defaultdict(list)
    for cell in cells.values():  # a few per release, in catalog order
        by_label[cell.label].append(cell)
        by_project[cell.project].append(cell)
        by_release[(cell.project, cell.version)].append(cell)
    groups = [
        PageGroup(
            key=f"variant:{label}",
            digest=_digest(map(_CELL_DIGEST, of_label)),
            render=functools.partial(_variant_pages, label, _wheels_of(of_label)),
        )
        for label, of_label in by_label.items()
    ]
    releases = {release: "\n".join(map(_CELL_DIGEST, of_release)) for release, of_release in by_release.items()}
    groups += [
        PageGroup(
            key=f"project:{project}",
            digest=_digest(map(_CELL_DIGEST, of_project)),
            render=functools.partial(_project_pages, None, project, _wheels_of(of_project)),
            join=_joining(
                functools.partial(_project_pair, None, project, _wheels_of(of_project), releases), f"project:{project}"
            ),
        )
        for project, of_project in by_project.items()
    ]
    groups += [
        _release_group(project, version, _wheels_of(of_release), releases[(project, version)], catalog.archs, base_url)
        for (project, version), of_release in by_release.items()
    ]
    projects = sorted(by_project)
    groups.append(PageGroup(key="projects", digest=_digest(projects), render=functools.partial(_roots, None, projects)))
    failures = sorted(repr(entry) for entry in catalog.failures)
    channel = [repr(size) for size in catalog.channel]  # the landing page shows the channel's sizes
    digest = _digest([base_url, *failures, *channel, *releases.values()])  # a cell's digest holds its wheels' archs
    of_projects: dict[str, list[str]] = defaultdict(list)
    for (project, _), of_release in releases.items():
        of_projects[project].append(of_release)
    shown = _Shown(failures, of_projects)
    groups.append(_people_group(catalog, digest, base_url, shown))
    groups.append(_doctor_group(base_url))
    return groups


class _Cell(NamedTuple):
    """One release's wheels of one label, in catalog order, and the digest of what the pages show of them."""

    project: str
    version: str
    label: str
    wheels: list[WheelFile]
    digest: str


_CELL_DIGEST, _CELL_WHEELS = operator.attrgetter("digest"), operator.attrgetter("wheels")
_FILENAME, _WHEEL_FILENAME = operator.attrgetter("filename"), operator.attrgetter("name.filename")  # in C


def _cells(
    wheels: Sequence[WheelFile], archs: Mapping[str, GpuArchs], summaries: Summaries | None = None
) -> dict[tuple[str, str, str], _Cell]:
    """The catalog's wheels by (project, version, label), in catalog order (by filename: a release's wheels, and a
    label's among them, are neighbours), each cell with the digest of its wheels' fingerprints and GPU archs: as
    ``summaries`` kept them for the cell's release while its rows and its wheels' archs are the same."""
    found: dict[tuple[str, str, str], list[WheelFile]] = defaultdict(list)
    for wheel in wheels:
        name = wheel.name
        found[(name.project, name.public_version, name.label)].append(wheel)
    shown = dict(zip(archs, map(functools.cache(repr), archs.values())))  # a farm's wheels share a few records
    kept = _release_cell_digests(wheels, shown, summaries) if summaries is not None else {}
    cells = {}
    for key, of_cell in found.items():
        release = release_of(of_cell[0].filename) if kept else ""
        digest = kept.get(release, {}).get(key[2])
        if digest is None or release_of(of_cell[-1].filename) != release:  # of two releases' rows: two spellings
            digest = _cell_digest(of_cell, shown)
        cells[key] = _Cell(*key, of_cell, digest)
    return cells


def _release_cell_digests(
    wheels: Sequence[WheelFile], shown: Mapping[str, str], summaries: Summaries
) -> dict[str, dict[str, str]]:
    """{release: {label: its cell's digest}}, as kept while the release's rows and its wheels' archs (``shown``, as
    the cells show them: the ledger holds them, not the rows) are the ones they were worked out from."""
    by_name = dict(zip(map(_WHEEL_FILENAME, wheels), wheels, strict=True))
    digests = {}
    for release, rows in summaries.releases("wheels").items():
        accepted = itertools.compress(rows, map(operator.not_, map(WHEEL_VERDICT, rows.values())))
        names = sorted(filter(by_name.__contains__, accepted))  # sorted as read: one pass
        held = "\n".join(map(shown.get, names, itertools.repeat(""))) if shown else ""
        key = summaries.key("wheels", release, hashlib.sha256(held.encode()).hexdigest() if held else "")
        work = functools.partial(_cells_of, names, by_name, shown)
        digests[release] = summaries.part(release, "cells", key, work, text_map)
    return digests


def _cells_of(names: list[str], by_name: Mapping[str, WheelFile], shown: Mapping[str, str]) -> dict[str, str]:
    """The digest of each label's cell of one release's wheels (``names``, in order)."""
    by_label: dict[str, list[WheelFile]] = defaultdict(list)
    for name in names:
        wheel = by_name[name]
        by_label[wheel.name.label].append(wheel)
    return {label: _cell_digest(of_label, shown) for label, of_label in by_label.items()}


def _cell_digest(wheels: list[WheelFile], archs: Mapping[str, str]) -> str:
    """The digest of the cell's wheels' fingerprints and their GPU archs (``archs``: as text, by filename)."""
    shown = [f"{w.filename}\0{archs[w.filename]}" for w in wheels if w.filename in archs] if archs else ()
    return hashlib.sha256("\n".join([*map(_fingerprint, wheels), *shown]).encode()).hexdigest()


def _wheels_of(cells: Iterable[_Cell]) -> list[WheelFile]:
    """The wheels of ``cells``, in their order: catalog order, for the cells of one label, project or release."""
    return list(itertools.chain.from_iterable(map(_CELL_WHEELS, cells)))


def _joining(pair: Callable[[], joined.Pair], key: str) -> Callable[[joined.Reuse], joined.Joined]:
    """A group's join: its pair made (its parts' digests worked out) only when the group's digest moved."""
    return lambda reuse: joined.join(pair(), reuse, f"{key}/parts")


def _doctor_group(base_url: str) -> PageGroup:
    """doctor.py, made from the doctor's modules and the base URL: its digest is theirs, so a run that need not
    write it does not make it (a tenth of a second)."""
    from builder.doctor import standalone

    root = Path(standalone.__file__).parents[2]
    sources = [root / f"{name.replace('.', '/')}.py" for name in standalone.MODULES] + [Path(standalone.__file__)]
    digest = _digest(["doctor", base_url, *(sha256_of(path) for path in sources)])
    return PageGroup(
        key="doctor", digest=digest, render=lambda: {layout.DOCTOR: standalone.standalone_source(base_url).encode()}
    )


def channel_groups(
    twins: Sequence[variants.VariantWheel],
    records: Mapping[str, tuple[str, FileIdentity]] | None = None,
    summaries: Summaries | None = None,
) -> list[PageGroup]:
    """The variant channel's pages (variants.py): the guards of each project's builds in groups of their own (one per
    version and torch minor), then for every torch's channel and each torch minor's, its project list, and one
    group per project (its two pages and its variants.json documents). ``records`` (sha256 and identity by site
    path) are what the manifest says of the files of the guard groups that are not rendered again: the site lists
    them by those digests, found in place by render_changed before any project group renders. A guard group's digest
    is that of the builds it is made from (fallback.guard_facts), so its guards are worked out only where it renders
    or a channel page lists them again. A group holds the guards of every wheel tag of its version and torch minor
    (fallback.guarded's groups), as a farm's job builds them: at 10,000 twins 561 groups, not 2,732, each worked out
    and settled on every run that renders (docs/runs.md). The digests are made of each release's (_ChannelParts),
    kept in ``summaries`` for the next run."""
    groups = []
    made = _Guards(records or {})
    parts = _ChannelParts(twins, summaries, made.seen)
    shown: dict[tuple[str, str | None], dict[str, list[tuple[str, _Guarded]]]] = defaultdict(dict)
    for project, of_project in variants.by_project(twins).items():
        by_torch: dict[str, list[list[variants.VariantWheel]]] = {}
        for key, members in fallback.guarded(of_project).items():
            by_torch.setdefault(key.rpartition("/")[0], []).append(members)  # "1.7.0/pt214/cp311-..." -> "1.7.0/pt214"
        for key, of_torch in by_torch.items():
            version, torch = key.split("/")
            digest = parts.guards(project, version, key) or _guard_digest(project, key, of_torch, made.seen)
            groups.append(PageGroup(key=_guard_key(project, key), digest=digest,
                                    render=functools.partial(made.render, of_torch)))
            for channel in (None, torch):  # by version on every torch's channel and on its torch minor's
                shown[(project, channel)].setdefault(version, []).append((digest, of_torch))
    for torch_tag, members in variants.by_channel(twins).items():
        root = layout.channel_root(torch_tag)
        projects = variants.by_project(members)
        roots = functools.partial(variants.channel_root_pages, torch_tag, list(projects))
        groups.append(PageGroup(key=f"{root}:projects", digest=_digest([root, *projects]), render=roots))
        for project, twins_of_project in projects.items():
            key = f"{root}:{project}"
            cells = parts.cells[project]
            of_channel = cells if torch_tag is None else {torch_tag: cells[torch_tag]}
            digest = _digest([key, *(f"{tag}\0{cell}" for tag, cell in sorted(of_channel.items()))])
            pair = made.pair(root, project, twins_of_project, shown[(project, torch_tag)],
                             parts.inputs(project, torch_tag))
            render = functools.partial(_joined_pages, pair)
            groups.append(PageGroup(key=key, digest=digest, render=render, join=_joining(pair, key)))
    return groups


def _guard_key(project: str, key: str) -> str:
    return f"{variants.ROOT}:guards:{project}/{key}"


def _guard_digest(project: str, key: str, of_torch: _Guarded, seen: fallback.Seen) -> str:
    """A guard group's digest: of the builds its guards are made from (fallback.guard_facts)."""
    facts = (fact for members in of_torch for fact in fallback.guard_facts(members, seen))
    return _digest([_guard_key(project, key), *facts])


class _ChannelParts:
    """What the channel's digests take of each release's twins (_channel_part), by (project, version): kept in
    ``summaries`` while the release's rows hold, so a run works out only the parts of the releases it changed, not a
    fingerprint of every twin."""

    def __init__(
        self, twins: Sequence[variants.VariantWheel], summaries: Summaries | None, seen: fallback.Seen
    ) -> None:
        self.by_version: dict[str, dict[str, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
        by_tag: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))  # project: tag: parts
        for _, part in sorted(_channel_parts(twins, summaries, seen).items()):
            self.by_version[part["project"]][part["version"]].append(part)
            for name, digest in part.items():
                if name.startswith("tag:"):
                    by_tag[part["project"]][name.removeprefix("tag:")].append(digest)
        # the digest of each project's twins of each torch minor: of its releases' parts of that channel
        self.cells = {project: {tag: _sha256_lines(parts) for tag, parts in tags.items()}
                      for project, tags in by_tag.items()}

    def guards(self, project: str, version: str, key: str) -> str | None:
        """The digest of a guard group of a version of one release (of two, the group's own is worked out)."""
        found = self.by_version[project].get(version, [])
        return found[0].get(f"guards:{key}") if len(found) == 1 else None

    def inputs(self, project: str, channel: str | None) -> dict[str, list[str]]:
        """What a project's part of each version lists on ``channel`` (every torch's: None), as digests, by version
        (variants.project_pair)."""
        name = "all" if channel is None else f"tag:{channel}"
        of_project = self.by_version[project]
        return {version: [part[name] for part in parts if name in part] for version, parts in of_project.items()}


def _channel_parts(
    twins: Sequence[variants.VariantWheel], summaries: Summaries | None, seen: fallback.Seen
) -> dict[str, dict[str, str]]:
    """_channel_part of each release's twins among ``twins``, by release: as ``summaries`` kept it while the release's
    rows are the same (its twins as published and their facts are theirs), else worked out."""
    by_name = dict(zip(map(_FILENAME, twins), twins, strict=True))
    if summaries is not None:
        found, covered = {}, 0
        for release, rows in summaries.releases("twins").items():
            names = sorted(filter(by_name.__contains__, rows))
            if names:
                work = functools.partial(_channel_part_of, names, by_name, seen)
                key = summaries.key("twins", release)
                found[release] = summaries.part(release, "channel", key, work, _channel_kind)
                covered += len(names)
        if covered == len(by_name):  # every twin published is of a release the state holds: as it should be
            return found
    grouped: dict[str, list[variants.VariantWheel]] = defaultdict(list)
    for twin in twins:
        grouped[release_of(twin.filename)].append(twin)
    return {release: _channel_part(of_release, seen) for release, of_release in grouped.items()}


def _channel_kind(value: object) -> bool:
    """Whether a kept value is a _channel_part (a damaged state's is worked out again)."""
    return isinstance(value, dict) and text_map(value) and {"project", "version", "all"} <= value.keys()


def _channel_part_of(
    names: list[str], by_name: Mapping[str, variants.VariantWheel], seen: fallback.Seen
) -> dict[str, str]:
    return _channel_part([by_name[name] for name in names], seen)


def _channel_part(twins: list[variants.VariantWheel], seen: fallback.Seen) -> dict[str, str]:
    """What the channel's digests take of one release's twins (in the order of their names): its project and
    version, the digest of their fingerprints ("all") and of those of each torch minor ("tag:pt214"), and the digest
    of each of its guard groups ("guards:1.7.0/pt214")."""
    prints = list(map(variants.fingerprint, twins))
    part = {"project": twins[0].project, "version": twins[0].version, "all": _sha256_lines(prints)}
    by_tag: dict[str, list[str]] = defaultdict(list)
    for twin, shown in zip(twins, prints, strict=True):
        by_tag[twin.torch_tag].append(shown)
    part.update((f"tag:{tag}", _sha256_lines(of_tag)) for tag, of_tag in by_tag.items())
    by_torch: dict[str, list[list[variants.VariantWheel]]] = {}
    for key, members in fallback.guarded(twins).items():
        by_torch.setdefault(key.rpartition("/")[0], []).append(members)
    part.update((f"guards:{key}", _guard_digest(twins[0].project, key, of_torch, seen))
                for key, of_torch in by_torch.items())
    return part


def _sha256_lines(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


_Guarded = list[list[variants.VariantWheel]]  # a guard group's builds: those of each wheel tag (fallback.guarded)


class _Guards:
    """The guards of one run: made (their bytes) only where their group renders, else listed by what the manifest
    recorded of their files (``records``), which render_changed has found in place."""

    def __init__(self, records: Mapping[str, tuple[str, FileIdentity]]) -> None:
        self.records = records
        self.made: dict[str, variants.VariantWheel] = {}
        self.seen = fallback.Seen()

    def render(self, groups: _Guarded) -> dict[str, bytes]:
        pages = {}
        for members in groups:
            for guard in fallback.guards_of(members, self.seen):
                listed, data, metadata = guard.made()
                self.made[guard.filename] = listed
                pages.update(variants.guard_pages(guard.filename, data, metadata))
        return pages

    def listed(self, guard: fallback.Guard) -> variants.VariantWheel:
        made = self.made.get(guard.filename)
        if made is not None:
            return made
        path = variants.file_path(guard.filename)
        (sha256, identity), (metadata_sha256, _) = self.records[path], self.records[f"{path}.metadata"]
        return guard.listed(sha256, identity.size, metadata_sha256)

    def pair(
        self,
        root: str,
        project: str,
        twins: list[variants.VariantWheel],
        groups: Mapping[str, list[tuple[str, _Guarded]]],
        inputs: Mapping[str, Sequence[str]],
    ) -> Callable[[], joined.Pair]:
        """The project's pages on one channel, as parts: made only when its group's digest moved. ``groups``: the
        digest and builds of each guard group the pages list, by version; each part's digest takes the digests, and
        the digests of its twins' fingerprints (``inputs``, by version: _ChannelParts.inputs)."""
        guarded = {
            version: ([digest for digest, _ in of_version], functools.partial(self.shown, of_version))
            for version, of_version in groups.items()
        }
        return lambda: variants.project_pair(root, project, twins, digest=_digest, inputs=inputs, guarded=guarded)

    def shown(self, groups: Sequence[tuple[str, _Guarded]]) -> list[variants.VariantWheel]:
        """The guards of ``groups`` as listed."""
        return [
            self.listed(guard)
            for _, of_group in groups
            for members in of_group
            for guard in fallback.guards_of(members, self.seen)
        ]


def _joined_pages(pair: Callable[[], joined.Pair]) -> dict[str, bytes]:
    return joined.join(pair(), joined.Nothing(), "").pages


def _release_group(
    project: str, version: str, wheels: list[WheelFile], cells: str, archs: Mapping[str, GpuArchs], base_url: str
) -> PageGroup:
    """The file of wheels.json that lists one release's wheels: one added wheel rewrites its release's file
    (``cells``: the digests of the release's cells, which hold its wheels' archs)."""
    key = f"wheels:{project}/{version}"
    return PageGroup(
        key=key,
        digest=_digest([key, base_url, cells]),
        render=lambda: {
            layout.release_manifest_path(project, version): release_manifest(
                project, version, wheels, archs, base_url=base_url
            )
        },
    )


class _Shown(NamedTuple):
    """What the pages for people are made from, worked out for page_groups: the failures, and the digests of each
    project's releases (their cells', which hold their wheels' fingerprints and GPU archs)."""

    failures: Sequence[str]
    releases: Mapping[str, Sequence[str]]  # by project

    def coverage_digest(self, base_url: str, path: str, columns: str, project: str) -> str:
        """The digest of a project's older versions' page: its wheels and their archs, every failure (a project
        of failures alone has a page too), and the matrices' rows and columns (pages.columns_fingerprint)."""
        return _digest([base_url, path, columns, *self.failures, *self.releases.get(project, ())])


def _people_group(catalog: Catalog, digest: str, base_url: str, shown: _Shown) -> PageGroup:
    """The pages for people: one group for the whole catalog, in parts of one setup page each, one older versions'
    page each (a project's page does not change with another project's wheel: a +1 at 10,000 wheels rendered 15
    matrices of the other project's page again) plus the rest (the landing page and wheels.json, which show every
    project or every release)."""
    model = functools.cache(lambda: people(catalog, base_url=base_url))

    def pages(only: Collection[str] | None = None) -> dict[str, bytes]:
        return render_pages(catalog, base_url=base_url, render=_render_page, model=model(), only=only)

    def parts() -> list[PageGroup]:
        setups = setup_fingerprints(model())
        groups = [
            PageGroup(key=f"pages/{path}", digest=_digest([base_url, text]), render=functools.partial(pages, {path}))
            for path, text in setups.items()
        ]
        columns = columns_fingerprint(model())
        groups += [
            PageGroup(
                key=f"pages/{path}",
                digest=shown.coverage_digest(base_url, path, columns, project),
                render=functools.partial(pages, {path}),
            )
            for project, path in coverage_pages(model()).items()
        ]
        rest = {layout.LANDING, layout.MANIFEST}
        return [*groups, PageGroup(key="pages/rest", digest=digest, render=functools.partial(pages, rest))]

    return PageGroup(key="pages", digest=digest, render=pages, parts=parts)


def _fingerprint(wheel: WheelFile) -> str:
    """Everything of a wheel any page shows."""
    metadata = wheel.metadata
    return (
        f"{wheel.filename}\0{wheel.sha256}\0{wheel.size}\0{wheel.upload_time!r}\0{metadata.sha256}\0"
        f"{metadata.size}\0{metadata.requires_python}\0{metadata.summary}"
    )


def _digest(parts: Iterable[str]) -> str:
    """A page group's digest: of ``parts`` and the code that writes the site (index_site.code), so a wheelwright
    that writes a page otherwise renders it again."""
    digest = hashlib.sha256(f"{API_VERSION}\0{code_digest()}".encode())
    digest.update("\n".join(parts).encode())
    return digest.hexdigest()


def _variant_pages(label: str, wheels: list[WheelFile]) -> dict[str, bytes]:
    return {layout.findlinks_path(label): _findlinks_page(label, wheels), **_indexes(label, wheels)}


def _render_page(template: str, **context: object) -> bytes:
    return _render(template, api_version=API_VERSION, **context)


def _indexes(label: str | None, wheels: Iterable[WheelFile]) -> dict[str, bytes]:
    """The simple (HTML) and JSON indexes of one variant, or of all of them when ``label`` is None."""
    by_project: dict[str, list[WheelFile]] = defaultdict(list)
    for wheel in wheels:
        by_project[wheel.name.project].append(wheel)
    pages = _roots(label, sorted(by_project))
    for project, files in by_project.items():
        pages.update(_project_pages(label, project, files))
    return pages


def _roots(label: str | None, projects: list[str]) -> dict[str, bytes]:
    simple, json_root = layout.simple_root(label), layout.json_root(label)
    return {
        f"{simple}/index.html": _simple_root_page(f"{simple}/index.html", projects, label),
        f"{json_root}/index.json": _json_bytes(
            {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]}
        ),
    }


def _project_pages(label: str | None, project: str, files: list[WheelFile]) -> dict[str, bytes]:
    return joined.join(_project_pair(label, project, files), joined.Nothing(), "").pages


def _project_pair(
    label: str | None, project: str, files: list[WheelFile], releases: Mapping[tuple[str, str], str] | None = None
) -> joined.Pair:
    """A project's two pages in parts, one per version (by page order: versions that compare equal, 1.0 and 1.0.0,
    interleave, so they make one part), each with the digest of its releases' cells (``releases``) where given."""
    simple_page = f"{layout.simple_root(label)}/{project}/index.html"
    by_version: dict[str, list[WheelFile]] = defaultdict(list)
    for wheel in files:
        by_version[wheel.name.public_version].append(wheel)
    parts = []
    for versions in _equal_runs(sorted(by_version, key=_version)):
        versions.sort()  # one key for the same versions, whichever came first
        wheels = [wheel for version in versions for wheel in by_version[version]]
        key = " ".join(versions)
        shown = [releases[(project, version)] for version in versions] if releases is not None else None
        digest = _digest([simple_page, key, *shown]) if shown is not None else ""
        parts.append(joined.Part(key, digest, functools.partial(_version_lines, simple_page, wheels)))
    return joined.Pair(simple_page, f"{layout.json_root(label)}/{project}/index.json", project, parts)


def _equal_runs(versions: list[str]) -> list[list[str]]:
    """``versions`` (sorted) in runs of those that compare equal."""
    runs: list[list[str]] = []
    previous = None
    for text in versions:
        version = _version(text)
        if runs and version == previous:
            runs[-1].append(text)
        else:
            runs.append([text])
        previous = version
    return runs


def _version_lines(page: str, wheels: list[WheelFile]) -> joined.Rendered:
    ordered = _sorted(wheels)
    lines = _lines(page, ordered)
    shown = tuple(dict.fromkeys(w.name.version for w in ordered))  # in page order: by version already
    return joined.Rendered("".join(lines.anchors), ",".join(lines.entries), shown, {})


def _findlinks_page(label: str, wheels: list[WheelFile]) -> bytes:
    page = layout.findlinks_path(label)
    first = wheels[0].name
    title = f"Wheels for torch {first.torch} + {accelerator_text(first.accelerator)} ({label})"
    return simple_page(title, "".join(_lines(page, _ordered(wheels)).anchors))


def _simple_root_page(page: str, projects: list[str], label: str | None) -> bytes:
    links = [{"href": layout.href(page, f"{layout.simple_root(label)}/{p}/index.html"), "name": p} for p in projects]
    title = f"Simple index ({label})" if label else "Simple index (all variants)"
    return _render("simple_root.html", page=page, title=title, projects=links, api_version=API_VERSION)


def _lines(page: str, ordered: Iterable[WheelFile]) -> ProjectLines:
    """Each wheel's anchor and JSON entry, in page order (lines.py). Each upload time is formatted once."""
    lines = ProjectLines()
    times: dict[float, str] = {}
    for wheel in ordered:
        uploaded = times.get(wheel.upload_time)
        if uploaded is None:
            uploaded = times[wheel.upload_time] = _iso_time(wheel.upload_time)
        metadata = wheel.metadata
        href = layout.wheel_href(page, wheel.name.label, wheel.filename)
        lines.add(
            Listed(wheel.filename, href, wheel.sha256, metadata.sha256, metadata.requires_python, wheel.size, uploaded)
        )
    return lines


def _ordered(wheels: Iterable[WheelFile]) -> list[WheelFile]:
    """By project, version and filename. Each distinct version is ranked once (equal versions such as 1.0 and
    1.0.0 share a rank, as they compare equal), so the sort compares strings and integers, not Version objects:
    a project's page sorts thousands of wheels."""
    return _sorted(list(wheels))


def _sorted(wheels: list[WheelFile]) -> list[WheelFile]:
    rank: dict[str, int] = {}
    previous, current = None, -1
    for text in sorted({w.name.version for w in wheels}, key=_version):
        version = _version(text)
        if version != previous:
            previous, current = version, current + 1
        rank[text] = current
    return sorted(wheels, key=lambda w: (w.name.project, rank[w.name.version], w.filename))


@functools.lru_cache(maxsize=4096)
def _version(text: str) -> Version:
    return Version(text)


def _iso_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _json_bytes(document: Mapping[str, object]) -> bytes:
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _render(template: str, **context: object) -> bytes:
    return _environment().get_template(template).render(**context).encode()
