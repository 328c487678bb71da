"""The variant channel (PEP 825): the variant twins the build made (``OUTPUT/variant``) served beside the
per-variant indexes, which stay. One PEP 503 index over every torch and accelerator (``variant/simple/``), one per
torch minor (``variant/pt214/simple/``), and a PEP 691 JSON twin of each (``variant/json/``, ``variant/pt214/json/``);
every project page links its wheels, their PEP 658 metadata and the ``{name}-{version}-variants.json`` that maps
each label to its properties. Pure rendering plus a small cache; the site stage places the files."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import zipfile
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import markupsafe
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from index_site import layout

log = logging.getLogger(__name__)

ROOT = layout.VARIANTS
CACHE = ".variant-index.json"  # in OUTPUT/variant: sha256 and metadata of each twin, valid while size+mtime hold
SCHEMA_URL = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
# name-version-python-abi-platform-label.whl, every part URL- and HTML-safe
_TWIN = re.compile(
    r"^(?P<dist>[A-Za-z0-9_]+)-(?P<version>[0-9][A-Za-z0-9.!_]*)-(?P<tag>[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+)"
    r"-(?P<label>pt[1-9][0-9]+(?:cu|rocm)[0-9]+)\.whl$"
)
_TORCH_TAG = re.compile(r"^pt[1-9][0-9]+")
API_VERSION = "1.1"


@dataclass(frozen=True, kw_only=True)
class VariantWheel:
    """One twin: where it is, what it is, its digests and the one variant its variant.json describes."""

    source: Path
    filename: str
    project: str
    version: str
    label: str
    sha256: str
    size: int
    metadata: bytes
    properties: Mapping[str, Mapping[str, list[str]]]
    providers: Mapping[str, object]
    provenance: bytes  # the twin's wheelwright.json, served beside it ("" for a twin without one)

    @property
    def torch_tag(self) -> str:
        """``pt214`` of ``pt214cu130``: the per-torch-minor channel the twin belongs to."""
        match = _TORCH_TAG.match(self.label)
        assert match is not None  # the filename pattern guarantees it
        return match.group(0)

    @property
    def requires_python(self) -> str | None:
        for line in self.metadata.decode("utf-8", "replace").splitlines():
            if line.startswith("Requires-Python:"):
                return line.split(":", 1)[1].strip()
        return None


# --- scanning OUTPUT/variant -----------------------------------------------------------------------------------------


def scan_twins(folder: Path) -> list[VariantWheel]:
    """Every twin in ``folder`` (none when it does not exist); unreadable or oddly named files are skipped with a
    warning, never listed."""
    if not folder.is_dir():
        return []
    cache = _load_cache(folder / CACHE)
    twins, fresh = [], {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.name.endswith(".whl") or not entry.is_file():
            continue
        stat = entry.stat()
        key = [stat.st_size, stat.st_mtime_ns]
        cached = cache.get(entry.name)
        fresh_enough = cached and cached["key"] == key and "provenance" in cached
        facts = cached if fresh_enough else _read_twin(Path(entry.path), key)
        if facts is None:
            continue
        fresh[entry.name] = facts
        twins.append(_twin(Path(entry.path), entry.name, facts))
    if fresh != cache:
        _write_cache(folder / CACHE, fresh)
    return twins


def _read_twin(path: Path, key: list[int]) -> dict[str, Any] | None:
    match = _TWIN.match(path.name)
    if match is None:
        log.warning("variant channel: %s is not a variant wheel name; not listed", path.name)
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and ".dist-info/" in n]
            dist_info = names[0].split("/", 1)[0]
            metadata = archive.read(f"{dist_info}/METADATA")
            variant = json.loads(archive.read(f"{dist_info}/variant.json"))
            record = archive.read(f"{dist_info}/wheelwright.json") if f"{dist_info}/wheelwright.json" in names else b""
    except (zipfile.BadZipFile, OSError, KeyError, IndexError, ValueError) as error:
        log.warning("variant channel: %s unreadable (%s); not listed", path.name, error)
        return None
    if list(variant.get("variants", {})) != [match["label"]]:
        log.warning("variant channel: %s: variant.json does not describe %s; not listed", path.name, match["label"])
        return None
    return {
        "key": key,
        "sha256": _sha256(path),
        "metadata": metadata.decode("utf-8", "replace"),
        "properties": variant["variants"][match["label"]],
        "providers": variant.get("providers", {}),
        "provenance": record.decode("utf-8", "replace"),
    }


def _twin(path: Path, filename: str, facts: Mapping[str, Any]) -> VariantWheel:
    match = _TWIN.match(filename)
    assert match is not None
    return VariantWheel(
        source=path,
        filename=filename,
        project=canonicalize_name(match["dist"]),
        version=match["version"],
        label=match["label"],
        sha256=facts["sha256"],
        size=facts["key"][0],
        metadata=facts["metadata"].encode(),
        properties=facts["properties"],
        providers=facts["providers"],
        provenance=facts.get("provenance", "").encode(),
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_cache(path: Path) -> dict[str, Any]:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}  # a damaged cache is rebuilt, never trusted


def _write_cache(path: Path, cache: Mapping[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(cache, sort_keys=True))
    os.replace(temporary, path)


# --- rendering -------------------------------------------------------------------------------------------------------


def torch_tags(twins: Iterable[VariantWheel]) -> tuple[str, ...]:
    """The per-torch channels, newest torch first (``pt214``, ``pt213``)."""
    return tuple(sorted({t.torch_tag for t in twins}, key=lambda tag: (int(tag[2]), int(tag[3:])), reverse=True))


def file_path(filename: str) -> str:
    return f"{ROOT}/files/{filename}"


def channel_root(torch_tag: str | None) -> str:
    return f"{ROOT}/{torch_tag}" if torch_tag else ROOT


def files(twins: Iterable[VariantWheel]) -> list[tuple[Path, str, VariantWheel]]:
    """(source, site path, twin) for every twin: placed like the per-variant wheels (hard links)."""
    return [(t.source, file_path(t.filename), t) for t in twins]


def render_channel(twins: list[VariantWheel]) -> dict[str, bytes]:
    """Every page of the variant channel, with the metadata files and variants.json documents, by site path
    (none without twins: no channel is announced that holds nothing)."""
    if not twins:
        return {}
    pages = {file_path(t.filename) + ".metadata": t.metadata for t in twins}
    pages.update({file_path(t.filename) + ".provenance.json": t.provenance for t in twins if t.provenance})
    by_torch: dict[str, list[VariantWheel]] = defaultdict(list)
    for twin in twins:
        by_torch[twin.torch_tag].append(twin)
    pages.update(_channel(None, twins))
    for torch_tag, members in by_torch.items():
        pages.update(_channel(torch_tag, members))
    return pages


def _channel(torch_tag: str | None, twins: list[VariantWheel]) -> dict[str, bytes]:
    root = channel_root(torch_tag)
    by_project: dict[str, list[VariantWheel]] = defaultdict(list)
    for twin in twins:
        by_project[twin.project].append(twin)
    projects = sorted(by_project)
    title = f"Variant index ({torch_tag})" if torch_tag else "Variant index (every torch and accelerator)"
    links = "".join(f'    <a href="{p}/">{p}</a><br>\n' for p in projects)
    pages = {
        f"{root}/simple/index.html": _html(title, links),
        f"{root}/json/index.json": _json(
            {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]}
        ),
    }
    for project, members in by_project.items():
        pages.update(_project(root, project, members))
    return pages


def _project(root: str, project: str, twins: list[VariantWheel]) -> dict[str, bytes]:
    pages: dict[str, bytes] = {}
    anchors, files_json = [], []
    by_version: dict[str, list[VariantWheel]] = defaultdict(list)
    for twin in twins:
        by_version[twin.version].append(twin)
    depth = "../" * (root.count("/") + 3)  # from ROOT[/ptXY]/simple/<project>/ back to the site root
    for version in sorted(by_version, key=_version_key):
        members = sorted(by_version[version], key=lambda t: t.filename)
        name = f"{members[0].filename.split('-', 1)[0]}-{version}-variants.json"
        document = _variants_json(members)
        for tree in ("simple", "json"):
            pages[f"{root}/{tree}/{project}/{name}"] = document
        sha = hashlib.sha256(document).hexdigest()
        anchors.append(f'    <a href="{name}#sha256={sha}">{name}</a><br>\n')
        files_json.append({"filename": name, "url": name, "hashes": {"sha256": sha}, "yanked": False})
        for twin in members:
            anchors.append(_anchor(depth + file_path(twin.filename), twin))
            files_json.append(_json_file(depth + file_path(twin.filename), twin))
    pages[f"{root}/simple/{project}/index.html"] = _html(f"Links for {project}", "".join(anchors))
    versions = sorted(by_version, key=_version_key)
    pages[f"{root}/json/{project}/index.json"] = _json(
        {"meta": {"api-version": API_VERSION}, "name": project, "versions": versions, "files": files_json}
    )
    return pages


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


def _variants_json(twins: list[VariantWheel]) -> bytes:
    return (json.dumps(variants_document(twins), indent=2, sort_keys=True) + "\n").encode()


def _anchor(href: str, twin: VariantWheel) -> str:
    escape = markupsafe.escape
    metadata = escape(f"sha256={hashlib.sha256(twin.metadata).hexdigest()}")
    python = twin.requires_python
    requires = f' data-requires-python="{escape(python)}"' if python else ""
    return (
        f'    <a href="{escape(href)}#sha256={twin.sha256}"{requires} data-core-metadata="{metadata}">'
        f"{escape(twin.filename)}</a><br>\n"
    )


def _json_file(href: str, twin: VariantWheel) -> dict[str, object]:
    metadata = {"sha256": hashlib.sha256(twin.metadata).hexdigest()}
    entry: dict[str, object] = {
        "filename": twin.filename,
        "url": href,
        "hashes": {"sha256": twin.sha256},
        "core-metadata": metadata,
        "size": twin.size,
        "yanked": False,
    }
    if twin.requires_python:
        entry["requires-python"] = twin.requires_python
    return entry


def _version_key(version: str) -> tuple[Any, ...]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _html(title: str, body: str) -> bytes:
    escaped = markupsafe.escape(title)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n  <head>\n    <meta charset="utf-8">\n'
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">\n    <title>{escaped}</title>\n'
        f"  </head>\n  <body>\n    <h1>{escaped}</h1>\n{body}  </body>\n</html>\n"
    ).encode()


def _json(document: Mapping[str, object]) -> bytes:
    return (json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n").encode()


def variant_command(base_url: str, torch_tag: str | None = None, package: str = "PACKAGE") -> str:
    """The one-URL uv command of the variant channel (all torch minors, or one)."""
    index = shlex.quote(f"{base_url}/{channel_root(torch_tag)}/simple/")
    return f"uv pip install --preview-features wheel-variants {shlex.quote(package)} --index-url {index}"


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
        "uv_command": variant_command,
        "uv_torch_command": installed_torch_command,
    }
