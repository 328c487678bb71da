"""What the index knows about one wheel in dist/: its parsed, validated name and the facts read from its bytes
(sha256, size, core metadata). Anything that would be unsafe to put in a URL, a path or a page is refused here."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import parse_email
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.wheelname import InvalidWheelFilename, WheelFilename
from builder.plan.facts import Accelerator
from builder.plan.job import parse_label

# Stricter than the wheel spec on purpose: every character of a filename ends up in hrefs, S3 keys and HTML.
_SAFE_FILENAME = re.compile(
    r"^[A-Za-z0-9_]+-[A-Za-z0-9.+!_]+(?:-[0-9][A-Za-z0-9_]*)?-[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+\.whl$"
)
_PROJECT_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_GPU_ARCH = re.compile(r"^(?:[1-9]\d?\.\d{1,2}[af]?|gfx[0-9a-f]{2,6}[a-z]?)$")  # 9.0, 9.0a, 12.0f, gfx942


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
        """Python versions the wheel's interpreter tags name: cp311 -> 3.11, py3 -> 3."""
        return tuple(_python_of(tag) for tag in self.python_tag.split("."))


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

    @property
    def filename(self) -> str:
        return self.name.filename


@dataclass(frozen=True, kw_only=True)
class GpuArchs:
    """The GPU code a built wheel carries, as the verify gate recorded it: kernel images (SASS) and PTX."""

    sass: tuple[str, ...]
    ptx: tuple[str, ...]


def parse_gpu_archs(sass: str, ptx: str | None) -> GpuArchs | None:
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
    return GpuArchs(sass=lists[0], ptx=lists[1])


def parse_wheel_name(filename: str) -> WheelName:
    """Parse and validate ``filename``; raise :class:`RejectedWheel` with the reason."""
    if not _SAFE_FILENAME.match(filename):
        raise RejectedWheel(
            f"{filename!r}: not a wheel filename "
            "(name-version+label-python-abi-platform.whl, of letters, digits and ._+!)"
        )
    try:
        parsed = WheelFilename.parse(filename)
    except InvalidWheelFilename as error:
        raise RejectedWheel(f"{filename}: {error}") from None
    project, version = _normalised(filename, parsed.dist, parsed.version_text)
    if version.local is None:
        raise RejectedWheel(f"{filename}: no variant label (expected a version like {version}+pt214cu130)")
    try:
        torch, accelerator = parse_label(version.local)
    except ValueError as error:
        raise RejectedWheel(f"{filename}: {error}") from None
    return WheelName(
        filename=filename,
        project=project,
        version=str(version),
        public_version=version.public,
        label=version.local,
        torch=torch,
        accelerator=accelerator,
        python_tag=parsed.python_tag,
        abi_tag=parsed.abi_tag,
        platform_tag=parsed.platform_tag,
    )


def _normalised(filename: str, dist: str, raw_version: str) -> tuple[str, Version]:
    """The canonical project name and the version, both required to be written in normal form already."""
    try:
        version = Version(raw_version)
    except InvalidVersion:
        raise RejectedWheel(f"{filename}: {raw_version!r} is not a version") from None
    project = canonicalize_name(dist)
    if "__" in dist or dist != project.replace("-", "_"):
        raise RejectedWheel(
            f"{filename}: project name {dist!r} is not normalised (expected {project.replace('-', '_')!r})"
        )
    if str(version) != raw_version:
        raise RejectedWheel(f"{filename}: version {raw_version!r} is not normalised (expected {version})")
    return project, version



def read_core_metadata(path: Path, name: WheelName) -> bytes:
    """The bytes of the wheel's ``.dist-info/METADATA``, served unchanged beside it (PEP 658)."""
    try:
        with zipfile.ZipFile(path) as archive:
            dist_info = {
                entry.split("/", 1)[0] for entry in archive.namelist() if entry.endswith(".dist-info/METADATA")
            }
            if len(dist_info) != 1:
                raise RejectedWheel(f"{name.filename}: expected one .dist-info/METADATA, found {len(dist_info)}")
            data = archive.read(f"{dist_info.pop()}/METADATA")
    except (OSError, zipfile.BadZipFile, KeyError) as error:
        raise RejectedWheel(f"{name.filename}: cannot read the wheel: {error}") from None
    return data


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
def _python_of(tag: str) -> str:
    match = re.match(r"^(?:cp|py|pp)(\d)(\d*)$", tag)
    if match is None:
        return tag
    return f"{match[1]}.{match[2]}" if match[2] else match[1]
