"""The variant channel (PEP 825): the variant twins the build made (``OUTPUT/variant``) served beside the
per-variant indexes, which stay. One PEP 503 index over every torch and accelerator (``variant/simple/``), one per
torch minor (``variant/pt214/simple/``), and a PEP 691 JSON twin of each (``variant/json/``, ``variant/pt214/json/``);
every project page links its wheels, their PEP 658 metadata and the ``{name}-{version}-variants.json`` that maps
each label to its properties. Pure rendering: twins.py decides which twins are published, the site stage places
the files."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import operator
import re
import shlex
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from index_site import joined, layout
from index_site.lines import API_VERSION, Listed, ProjectLines, simple_page
from index_site.state import FILENAME, ROW_IDENTITY, TwinRow, columns

log = logging.getLogger(__name__)

ROOT = layout.VARIANTS
SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
_TORCH_TAG = re.compile(r"^pt[1-9][0-9]+")


class VariantWheel(NamedTuple):
    """One twin the site publishes (index_site/twins.py decides which): where it is, what it is, its digests and
    the one variant its variant.json describes (a tuple: a farm's site has 100,000)."""

    folder: str  # OUTPUT/variant
    identity: tuple[int, int, int, int]  # of the file there when it was checked
    filename: str
    project: str
    version: str
    label: str
    sha256: str
    size: int
    metadata_sha256: str
    requires_python: str | None
    provenance_sha256: str  # of its wheelwright.json, served beside it ("" for a twin without one)
    variant: str  # {"properties": ..., "providers": ...} of its variant.json, as JSON text with sorted keys

    @property
    def source(self) -> str:
        return f"{self.folder}/{self.filename}"

    @property
    def properties(self) -> Mapping[str, Mapping[str, list[str]]]:
        properties: Mapping[str, Mapping[str, list[str]]] = _variant(self.variant)["properties"]
        return properties

    @property
    def providers(self) -> Mapping[str, object]:
        providers: Mapping[str, object] = _variant(self.variant)["providers"]
        return providers

    @property
    def torch_tag(self) -> str:
        """``pt214`` of ``pt214cu130``: the per-torch-minor channel the twin belongs to."""
        return _torch_tag(self.label)


@functools.lru_cache(maxsize=1024)  # a pure function of a label: a site has a few dozen, its twins thousands
def _torch_tag(label: str) -> str:
    match = _TORCH_TAG.match(label)
    assert match is not None  # the filename pattern guarantees it
    return match.group(0)


@functools.lru_cache(maxsize=1024)  # a pure function of a few dozen distinct texts: one per label and arch set
def _variant(text: str) -> dict[str, Any]:
    variant: dict[str, Any] = json.loads(text)
    return variant


# --- rendering -------------------------------------------------------------------------------------------------------


def torch_tags(twins: Iterable[VariantWheel]) -> tuple[str, ...]:
    """The per-torch channels, newest torch first (``pt214``, ``pt213``)."""
    return tuple(sorted({t.torch_tag for t in twins}, key=lambda tag: (int(tag[2]), int(tag[3:])), reverse=True))


def file_path(filename: str) -> str:
    return f"{ROOT}/files/{filename}"


def placed(
    twins: Iterable[VariantWheel],
) -> tuple[list[tuple[str, str, VariantWheel]], list[tuple[str, str, str, str]]]:
    """What the site holds of the twins: (source, site path, twin) for every twin and every null (a fat twin's bytes
    under its null name, see fallback.py), placed like the per-variant wheels (hard links); and (twin, site path,
    member of its .dist-info, sha256) of the files served beside each: its METADATA (PEP 658) and its
    wheelwright.json. Each null name is placed once, from the twin the channel's pages list under it
    (fallback.null_twins)."""
    from index_site import fallback

    twins = list(twins)
    placed_files: list[tuple[str, str, VariantWheel]] = []
    found: list[tuple[str, str, str, str]] = []
    nulls = {twin.filename: name for name, twin in fallback.null_twins(twins).items()}  # twin: its null, if listed
    for twin in twins:
        source, path = twin.source, file_path(twin.filename)
        placed_files.append((source, path, twin))
        found.append((source, path + ".metadata", "METADATA", twin.metadata_sha256))
        null = nulls.get(twin.filename)
        if null is not None:
            null_path = file_path(null)
            placed_files.append((source, null_path, twin))
            found.append((source, null_path + ".metadata", "METADATA", twin.metadata_sha256))
        if twin.provenance_sha256:
            found.append((source, path + ".provenance.json", "wheelwright.json", twin.provenance_sha256))
    return placed_files, found


def by_channel(twins: Iterable[VariantWheel]) -> dict[str | None, list[VariantWheel]]:
    """The twins of each channel: every twin (None), and those of each torch minor (``pt214``)."""
    channels: dict[str | None, list[VariantWheel]] = {None: list(twins)}
    for twin in channels[None]:
        channels.setdefault(twin.torch_tag, []).append(twin)
    return channels if channels[None] else {}


def by_project(twins: Iterable[VariantWheel]) -> dict[str, list[VariantWheel]]:
    projects: dict[str, list[VariantWheel]] = defaultdict(list)
    for twin in twins:
        projects[twin.project].append(twin)
    return dict(sorted(projects.items()))


def render_channel(twins: list[VariantWheel]) -> dict[str, bytes]:
    """Every page of the variant channel, its variants.json documents and its guards, by site path (none without
    twins: no channel is announced that holds nothing)."""
    from index_site import fallback

    pages: dict[str, bytes] = {}
    guards: dict[str, list[VariantWheel]] = defaultdict(list)
    for project, twins_of_project in by_project(twins).items():
        for group in fallback.guard_groups(twins_of_project).values():
            for guard in group:
                listed, data, metadata = guard.made()
                pages.update(guard_pages(guard.filename, data, metadata))
                guards[project].append(listed)
    for torch_tag, members in by_channel(twins).items():
        pages.update(channel_root_pages(torch_tag, sorted(by_project(members))))
        for project, twins_of_project in by_project(members).items():
            shown = [guard for guard in guards[project] if torch_tag in (None, guard.torch_tag)]
            pages.update(project_pages(layout.channel_root(torch_tag), project, twins_of_project, shown))
    return pages


def guard_pages(filename: str, data: bytes, metadata: bytes) -> dict[str, bytes]:
    """A guard's files (fallback.Guard): the site writes them as pages, being made of nothing but their inputs."""
    return {file_path(filename): data, file_path(filename) + ".metadata": metadata}


def fingerprint(twin: VariantWheel) -> str:
    """Everything of a twin the channel's pages show."""
    shown = (twin.filename, twin.sha256, str(twin.size), twin.metadata_sha256, str(twin.requires_python), twin.variant)
    return "\0".join(shown)


def channel_root_pages(torch_tag: str | None, projects: list[str]) -> dict[str, bytes]:
    """A channel's project lists (PEP 503 and 691)."""
    root = layout.channel_root(torch_tag)
    title = f"Variant index ({torch_tag})" if torch_tag else "Variant index (every torch and accelerator)"
    links = "".join(f'    <a href="{p}/">{p}</a><br>\n' for p in projects)
    return {
        f"{root}/simple/index.html": simple_page(title, links),
        f"{root}/json/index.json": _json(
            {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]}
        ),
    }


def project_pages(
    root: str, project: str, twins: list[VariantWheel], guards: Sequence[VariantWheel] = ()
) -> dict[str, bytes]:
    """A project's two pages on one channel, and its variants.json files (project_pair)."""
    return joined.join(project_pair(root, project, twins, guards), joined.Nothing(), "").pages


def project_pair(
    root: str,
    project: str,
    twins: list[VariantWheel],
    guards: Sequence[VariantWheel] = (),
    digest: Callable[[list[str]], str] | None = None,
    inputs: Mapping[str, Sequence[str]] | None = None,
    guarded: Mapping[str, tuple[Sequence[str], Callable[[], list[VariantWheel]]]] | None = None,
) -> joined.Pair:
    """A project's two pages on one channel in parts, one per version: its variants.json, its variants (slim wheels
    in place of their fat twin), the nulls and ``guards`` (fallback.py, as listed: their files are pages of their own
    groups); each part with the ``digest`` of what it lists, where given (``inputs``: by version, digests of what its
    twins show, worked out for the run, that stand for their fingerprints).
    ``guarded`` stands for ``guards`` where a version's guards are worked out only if its part renders: by version,
    the digests of its guard groups (for the part's digest) and its guards as listed."""
    inputs = inputs or {}
    by_version: dict[str, tuple[list[VariantWheel], list[VariantWheel]]] = {}
    for twin in twins:
        by_version.setdefault(twin.version, ([], []))[0].append(twin)
    for guard in guards:
        by_version.setdefault(guard.version, ([], []))[1].append(guard)
    depth = "../" * (root.count("/") + 3)  # from ROOT[/ptXY]/simple/<project>/ back to the site root
    dumped: dict[str, str] = {}  # each variant's properties dumped once for the pair (variants_json)
    parts = []
    for version in sorted(by_version, key=_version_key):
        of_version, guards_of = by_version[version]
        shown = [*of_version, *guards_of]
        # a guard's name starts with the distribution name of a build of its version: none of them comes first
        name = _document_name(min(twin.filename for twin in shown), version)
        documents = (f"{root}/simple/{project}/{name}", f"{root}/json/{project}/{name}")
        listed = (inputs.get(version) or [fingerprint(twin) for twin in shown]) if digest else []
        later = guarded.get(version) if guarded else None
        shows = digest([root, project, version, *listed, *(later[0] if later else ())]) if digest else ""
        shown_now = (of_version, later[1]) if later else (of_version, guards_of)
        render = functools.partial(_version_part, root, project, depth, version, shown_now, dumped)
        parts.append(joined.Part(version, shows, render, documents))
    return joined.Pair(f"{root}/simple/{project}/index.html", f"{root}/json/{project}/index.json", project, parts)


def _version_part(
    root: str,
    project: str,
    depth: str,
    version: str,
    shown: tuple[list[VariantWheel], list[VariantWheel] | Callable[[], list[VariantWheel]]],
    dumped: dict[str, str],
) -> joined.Rendered:
    """One version's lines on a project's channel pages (its twins and guards, or what works its guards out now), its
    variants.json first, and that file."""
    from index_site import fallback

    twins, guards = shown
    listed = fallback.listing(twins, guards() if callable(guards) else guards)
    members = sorted([*listed.variants, *listed.guards], key=lambda t: t.filename)
    name = _document_name(members[0].filename, version)
    document = variants_json(members, dumped)
    lines = ProjectLines()
    lines.add(Listed(name, name, hashlib.sha256(document).hexdigest()))
    for twin in [*members, *sorted(listed.nulls, key=lambda t: t.filename)]:
        lines.add(_listed(depth, twin))
    pages = {f"{root}/{tree}/{project}/{name}": document for tree in ("simple", "json")}
    return joined.Rendered("".join(lines.anchors), ",".join(lines.entries), (version,), pages)


def _document_name(filename: str, version: str) -> str:
    """A version's variants.json, named by its first file's distribution name."""
    return f"{filename.split('-', 1)[0]}-{version}-variants.json"


def _listed(depth: str, twin: VariantWheel) -> Listed:
    """A twin as its project pages list it, ``depth`` up from the site root ("" Requires-Python: none shown)."""
    href = depth + file_path(twin.filename)
    return Listed(twin.filename, href, twin.sha256, twin.metadata_sha256, twin.requires_python or None, twin.size)


def variants_document(twins: Iterable[VariantWheel]) -> dict[str, object]:
    """``{name}-{version}-variants.json``: the union of the twins' variant.json files. Torch's static values are
    merged newest first, the order an installer without an ABI dependency provider prefers them."""
    twins = list(twins)
    providers: dict[str, object] = {}
    minors: set[str] = set()
    for twin in twins:
        providers.update({ns: p for ns, p in twin.providers.items() if ns != "abi_dependency"})
        minors.update(twin.properties.get("abi_dependency", {}).get("torch", []))
    order: list[str] = [
        ns for ns in ("abi_dependency", "nvidia", "rocm") if ns in providers or (ns == "abi_dependency" and minors)
    ]
    if minors:
        newest_first = sorted(minors, key=lambda v: tuple(int(p) for p in v.split(".")), reverse=True)
        providers["abi_dependency"] = {"static-properties": {"torch": newest_first}}
    order += sorted(set(providers) - set(order))
    return {
        "$schema": SCHEMA_URL,
        "default-priorities": {"namespace": order},
        "providers": {ns: providers[ns] for ns in order},
        "variants": {t.label: t.properties for t in sorted(twins, key=lambda t: t.label)},
    }


def variants_json(twins: list[VariantWheel], dumped: dict[str, str] | None = None) -> bytes:
    """``json.dumps(variants_document(twins), indent=2, sort_keys=True)`` and a newline, with each variant's
    properties dumped once per call of the caller (``dumped``, by the twin's variant text): ``indent`` takes the
    pure-Python encoder, and a project's versions list the same few dozen properties thousands of times."""
    dumped = {} if dumped is None else dumped
    by_label = {t.label: t for t in sorted(twins, key=lambda t: t.label)}  # as variants_document picks them
    entries = []
    for label, twin in by_label.items():
        text = dumped.get(twin.variant)
        if text is None:
            text = json.dumps(twin.properties, indent=2, sort_keys=True).replace("\n", "\n    ")
            dumped[twin.variant] = text
        entries.append(f"    {json.dumps(label)}: {text}")
    body = "{\n" + ",\n".join(entries) + "\n  }" if entries else "{}"
    # the other keys ($schema, default-priorities, providers) sort before "variants"; made of the distinct variant
    # texts alone (each providers' last occurrence decides), so dumped once per set of them ("{" starts no key)
    key = "head\0" + "\0".join(reversed(dict.fromkeys(t.variant for t in reversed(twins))))
    head = dumped.get(key)
    if head is None:
        document = {k: v for k, v in variants_document(twins).items() if k != "variants"}
        head = dumped[key] = json.dumps(document, indent=2, sort_keys=True)
    return f'{head[:-2]},\n  "variants": {body}\n}}\n'.encode()


def _version_key(version: str) -> tuple[Any, ...]:
    from packaging.version import InvalidVersion, Version  # only when pages are rendered

    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _json(document: Mapping[str, object]) -> bytes:
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


# The shell names the installed torch's channel (2.13.0+cu130 -> variant/pt213/simple/): uv 0.13.9 runs no ABI
# dependency provider (docs/variant-channel.md), so the one command a user copies finds the per-torch channel
# itself. A torch the site has no channel for gets variant/simple/, where uv refuses naming the torch it would need
# (a missing channel's 404 would read "not found in the package registry").
_INSTALLED_TORCH_CHANNEL = (
    '$(python -c \'import torch; t = "pt" + "".join(torch.__version__.split(".")[:2]); '
    'print(t + "/" if t in {TAGS} else "")\')'
)


def installed_torch_command(base_url: str, package: str, torch_tags: Iterable[str]) -> str:
    """The one uv command for any torch: the channel of the torch minor in the environment it runs in, among
    ``torch_tags`` (the site's), else the channel of every torch."""
    tags = "{" + ", ".join(f'"{tag}"' for tag in torch_tags) + "}"
    channel = f'{_INSTALLED_TORCH_CHANNEL.replace("{TAGS}", tags)}simple/"'  # closes the word's double quote
    root = f"{base_url}/{ROOT}/"
    # The $(...) must run, so that part of the word is double-quoted; a base URL holding what the shell reads
    # inside double quotes too ($ ` " \ and an interactive bash's !) goes before it in single quotes instead.
    index = f'{shlex.quote(root)}"{channel}' if _DOUBLE_QUOTE_SPECIAL.search(root) else f'"{root}{channel}'
    return f"uv pip install --preview-features wheel-variants {shlex.quote(package)} --index-url {index}"


_DOUBLE_QUOTE_SPECIAL = re.compile(r'[$`"\\!]')


def landing_channels(labels: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(torch minor, channel tag) of the CUDA builds among the site's variant labels, newest torch first: what the
    landing page's uv block lists (ROCm twins exist but no installer picks them yet)."""
    tags = {m.group(0) for label in labels if "cu" in label and (m := _TORCH_TAG.match(label))}
    ordered = sorted(tags, key=lambda tag: (int(tag[2]), int(tag[3:])), reverse=True)
    return tuple((f"{tag[2]}.{tag[3:]}", tag) for tag in ordered)


def landing_context(labels: Iterable[str]) -> dict[str, object]:
    """What the landing page's uv block needs: the channels of the site's CUDA builds and the two commands."""
    return {
        "uv_channels": landing_channels(labels),
        "uv_command": layout.variant_command,
        "uv_torch_command": installed_torch_command,
    }


def variant_wheels(folder: str, rows: Sequence[TwinRow]) -> tuple[VariantWheel, ...]:
    """The rows' twins as the channel shows them, built column by column (loops in C, and no per-call checks of
    VariantWheel: one per twin, every run that renders)."""
    names = list(map(FILENAME, rows))
    parts = list(map(_SPLIT_NAME, names))  # [dist, version, tag and label]
    labels = map(_SECOND, map(_SPLIT_LAST, map(_STEM, names)))  # the name's last part: its label
    fields = zip(
        itertools.repeat(folder), map(ROW_IDENTITY, rows), names, map(_DASHED, map(_FIRST, parts)),
        map(_SECOND, parts), labels, *(map(shown, rows) for shown in _SHOWN), strict=False,
    )  # the repeat() is endless: zip ends with the rows
    return tuple(map(tuple.__new__, itertools.repeat(VariantWheel), fields))


_SPLIT_LAST, _DASHED = operator.methodcaller("rsplit", "-", 1), operator.methodcaller("replace", "_", "-")
_SHOWN = tuple(  # a TwinRow's columns a VariantWheel takes after its name's parts
    columns(TwinRow, field)
    for field in ("sha256", "size", "metadata_sha256", "requires_python", "provenance_sha256", "variant")
)
_STEM, _SPLIT_NAME = operator.methodcaller("removesuffix", ".whl"), operator.methodcaller("split", "-", 2)
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
