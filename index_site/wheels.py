"""What the index knows about one wheel in dist/: its parsed, validated name and the facts read from its bytes
(sha256, size, core metadata). Anything that would be unsafe to put in a URL, a path or a page is refused here."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from packaging.metadata import parse_email
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.hashing import open_regular
from builder.core.wheelname import InvalidWheelFilename, WheelFilename
from builder.plan.facts import Accelerator, TorchFacts, load_facts
from builder.plan.job import parse_label

# Stricter than the wheel spec on purpose: every character of a filename ends up in hrefs, S3 keys and HTML.
_SAFE_FILENAME = re.compile(
    r"^[A-Za-z0-9_]+-[A-Za-z0-9.+!_]+(?:-[0-9][A-Za-z0-9_]*)?-[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+\.whl$"
)
_PROJECT_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_GPU_ARCH = re.compile(r"^(?:[1-9]\d?\.\d{1,2}[af]?|gfx[0-9a-f]{2,6}[a-z]?)$")  # 9.0, 9.0a, 12.0f, gfx942
# Bounds on what one wheel may make the index read: METADATA is a few KB (it is served beside every wheel), and a
# wheel is a few thousand members. A zip bomb's METADATA is refused at its stated size, or at the cap while reading.
MAX_METADATA_BYTES = 1 << 20
MAX_MEMBERS = 100_000


class RejectedWheel(ValueError):
    """A file in dist/ the index refuses to list; the message says why."""


@dataclass(frozen=True, kw_only=True)
class WheelName:
    """A wheel filename, parsed: ``causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl``."""

    filename: str
    project: str  # canonical: causal-conv1d
    version: str  # with the label: 1.7.0+pt214cu130
    public_version: str  # 1.7.0
    label: str  # pt214cu130
    torch: str  # torch minor: 2.14
    accelerator: Accelerator
    python_tag: str  # cp311, or a compressed set like cp310.cp311
    abi_tag: str
    platform_tag: str

    @property
    def pythons(self) -> tuple[str, ...]:
        """Python versions the wheel's tags name: cp311 -> 3.11, py3 -> 3; the free-threaded ABI (cp313-cp313t)
        -> 3.13t, a Python of its own (it cannot load a cp313 wheel, nor the other way round)."""
        return _pythons_of(self.python_tag, self.abi_tag)


@dataclass(frozen=True, kw_only=True)
class CoreMetadata:
    """The fields of a wheel's METADATA the index shows, plus the digest of the file served beside the wheel."""

    sha256: str
    size: int
    requires_python: str | None
    summary: str | None


@dataclass(frozen=True, kw_only=True)
class WheelFile:
    """A wheel the index lists: its name, the digest and size of its bytes and its core metadata."""

    name: WheelName
    sha256: str
    size: int
    metadata: CoreMetadata
    upload_time: float  # when the index first saw these bytes (seconds since the epoch)
    # name.filename, kept as a field: read some 150,000 times a re-index, where a property costs a call each time
    filename: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "filename", self.name.filename)


@dataclass(frozen=True, kw_only=True)
class GpuArchs:
    """The GPU code a built wheel carries, as the verify gate recorded it: kernel images (SASS) and PTX."""

    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    # and the torch releases it loads on, as the build recorded them (issue 30, docs/abi.md): "loads on torch
    # 2.12-2.12 (checked 2.9-2.15); breaks on 2.13: missing `c10::...`"
    abi_window: str | None = None


def parse_gpu_archs(sass: str, ptx: str | None, abi_window: object = None) -> GpuArchs | None:
    """The archs a ledger report holds (two JSON lists of names like "9.0"); None unless both are well formed."""
    lists = []
    for text in (sass, ptx or "[]"):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, list) or not all(isinstance(a, str) and _GPU_ARCH.match(a) for a in value):
            return None
        lists.append(tuple(value))
    window = abi_window if isinstance(abi_window, str) and abi_window else None
    return GpuArchs(sass=lists[0], ptx=lists[1], abi_window=window)


def parse_wheel_name(filename: str) -> WheelName:
    """Parse and validate ``filename``; raise :class:`RejectedWheel` with the reason."""
    if not _SAFE_FILENAME.match(filename):
        raise RejectedWheel(
            f"{filename!r}: not a wheel filename "
            "(name-version+label-python-abi-platform.whl, of letters, digits and ._+!)"
        )
    parts = filename[: -len(".whl")].split("-")
    try:
        if len(parts) == 5:  # no build tag: the usual case, checked in two halves that thousands of names share
            _check_name_version(parts[0], parts[1])
            _check_tags("-".join(parts[2:]))
        else:
            WheelFilename.parse(filename)
    except InvalidWheelFilename as error:
        raise RejectedWheel(f"{filename}: {error}") from None
    dist, version_text, *_, python_tag, abi_tag, platform_tag = parts
    try:
        project, version, public_version, label, torch, accelerator = _release_of(dist, version_text)
    except ValueError as error:
        raise RejectedWheel(f"{filename}: {error}") from None
    return WheelName(
        filename=filename,
        project=project,
        version=version,
        public_version=public_version,
        label=label,
        torch=torch,
        accelerator=accelerator,
        python_tag=python_tag,
        abi_tag=abi_tag,
        platform_tag=platform_tag,
    )


# WheelFilename.parse (packaging's parse_wheel_filename) checks the name and version part and the tags part of a
# name without a build tag independently of each other, so a name passes it exactly when both halves pass it
# with a neutral other half. A farm's 10,000 names have a few hundred of each: parsing every name whole was most
# of a re-index's time to read dist/.
@functools.lru_cache(maxsize=65536)
def _check_name_version(dist: str, version: str) -> None:
    WheelFilename.parse(f"{dist}-{version}-py3-none-any.whl")


@functools.lru_cache(maxsize=65536)
def _check_tags(tags: str) -> None:
    WheelFilename.parse(f"x-0-{tags}.whl")


@functools.lru_cache(maxsize=65536)
def _release_of(dist: str, raw_version: str) -> tuple[str, str, str, str, str, Accelerator]:
    """Project, version, public version, label, torch minor and accelerator of a name-version pair (thousands of
    wheels share one), each required to be written in normal form already; ValueError says what is wrong."""
    try:
        version = Version(raw_version)
    except InvalidVersion:
        raise ValueError(f"{raw_version!r} is not a version") from None
    project = canonicalize_name(dist)
    if "__" in dist or dist != project.replace("-", "_"):
        raise ValueError(f"project name {dist!r} is not normalised (expected {project.replace('-', '_')!r})")
    if str(version) != raw_version:
        raise ValueError(f"version {raw_version!r} is not normalised (expected {version})")
    if version.local is None:
        raise ValueError(f"no variant label (expected a version like {version}+pt214cu130)")
    torch, accelerator = parse_label(version.local)
    return project, str(version), version.public, version.local, torch, accelerator


def check_variant(name: WheelName, facts: TorchFacts | None = None) -> None:
    """A label is a variant only if torch shipped it (builder/data/torch.toml): ``pt214cu118`` parses, but torch
    2.14 was never built for CUDA 11.8, so no one could install that wheel beside a torch it matches."""
    if facts is None:
        problem = _known_variant_problem(name.torch, name.accelerator)
    else:
        problem = _variant_problem(name.torch, name.accelerator, facts)
    if problem is not None:
        raise RejectedWheel(f"{name.filename}: not a known variant: {problem}")


@functools.lru_cache(maxsize=1024)
def _known_variant_problem(torch: str, accelerator: Accelerator) -> str | None:
    return _variant_problem(torch, accelerator, load_facts())


def _variant_problem(torch: str, accelerator: Accelerator, facts: TorchFacts) -> str | None:
    try:
        release = facts.release(torch)
    except KeyError as error:
        return str(error.args[0])
    if not release.has(accelerator):
        shipped = ", ".join(a.name for a in release.accelerators)
        return f"torch {torch} was not released for {accelerator.name} (it was for {shipped})"
    return None


def read_core_metadata(source: Path | BinaryIO, name: WheelName) -> bytes:
    """The bytes of the wheel's ``.dist-info/METADATA``, served unchanged beside it (PEP 658); from a regular file
    only (a path is opened without following a symlink), and never more than MAX_METADATA_BYTES of it."""
    try:
        if isinstance(source, Path):
            with os.fdopen(open_regular(source), "rb") as file, zipfile.ZipFile(file) as archive:
                return _bounded_metadata(archive, name)
        with zipfile.ZipFile(source) as archive:
            return _bounded_metadata(archive, name)
    except (OSError, zipfile.BadZipFile, KeyError, EOFError, NotImplementedError, RuntimeError) as error:
        raise RejectedWheel(f"{name.filename}: cannot read the wheel: {error}") from None


def _bounded_metadata(archive: zipfile.ZipFile, name: WheelName) -> bytes:
    members = archive.infolist()
    if len(members) > MAX_MEMBERS:
        raise RejectedWheel(f"{name.filename}: {len(members):,} members; a wheel may have at most {MAX_MEMBERS:,}")
    found = [m for m in members if m.filename.endswith(".dist-info/METADATA") and m.filename.count("/") == 1]
    if len(found) != 1:
        raise RejectedWheel(f"{name.filename}: expected one .dist-info/METADATA, found {len(found)}")
    info = found[0]
    if info.file_size > MAX_METADATA_BYTES:
        raise RejectedWheel(_too_big(name, info.file_size))
    with archive.open(info) as member:
        data = member.read(MAX_METADATA_BYTES + 1)  # the stated size may lie; the read is capped regardless
    if len(data) > MAX_METADATA_BYTES:
        raise RejectedWheel(_too_big(name, len(data)))
    return data


def _too_big(name: WheelName, size: int) -> str:
    return f"{name.filename}: METADATA is {size:,}+ bytes; the index accepts at most {MAX_METADATA_BYTES:,}"


def check_core_metadata(data: bytes, name: WheelName) -> CoreMetadata:
    """Validate METADATA against the filename; return what the index shows of it."""
    raw, _unparsed = parse_email(data)
    project, version = raw.get("name"), raw.get("version")
    if project is None or version is None:
        raise RejectedWheel(f"{name.filename}: METADATA lacks Name or Version")
    if not _PROJECT_NAME.match(canonicalize_name(project)) or canonicalize_name(project) != name.project:
        raise RejectedWheel(f"{name.filename}: METADATA names project {project!r}, the filename {name.project!r}")
    if version != name.version:
        raise RejectedWheel(f"{name.filename}: METADATA says version {version!r}, the filename {name.version!r}")
    requires_python = raw.get("requires_python")
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise RejectedWheel(
                f"{name.filename}: Requires-Python {requires_python!r} is not a version specifier"
            ) from None
    return CoreMetadata(
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        requires_python=requires_python,
        summary=raw.get("summary"),
    )


@functools.lru_cache(maxsize=256)  # a site has a handful of distinct tags and asks for them per wheel
def _pythons_of(python_tag: str, abi_tag: str) -> tuple[str, ...]:
    if re.fullmatch(r"cp3\d+t", abi_tag) and python_tag == abi_tag[:-1]:
        return (_python_of(python_tag) + "t",)
    return tuple(_python_of(tag) for tag in python_tag.split("."))


def _python_of(tag: str) -> str:
    match = re.match(r"^(?:cp|py|pp)(\d)(\d*)$", tag)
    if match is None:
        return tag
    return f"{match[1]}.{match[2]}" if match[2] else match[1]
