"""What the index knows about one wheel in dist/: its parsed, validated name and the facts read from its bytes
(sha256, size, core metadata). Anything that would be unsafe to put in a URL, a path or a page is refused here."""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import operator
import os
import re
import zipfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NamedTuple

from builder.core.archive import RATIO_FLOOR, WHEEL, Archive, ArchiveError
from builder.core.hashing import open_regular
from builder.core.wheelname import InvalidWheelFilename, WheelFilename
from builder.plan.accelerator import parse_label

if TYPE_CHECKING:
    from builder.plan.accelerator import Accelerator
    from builder.plan.releases import TorchFacts

# Stricter than the wheel spec on purpose: every character of a filename ends up in hrefs, S3 keys and HTML.
_SAFE_FILENAME = re.compile(
    r"^[A-Za-z0-9_]+-[A-Za-z0-9.+!_]+(?:-[0-9][A-Za-z0-9_]*)?-[a-z0-9_.]+-[a-z0-9_.]+-[a-z0-9_.]+\.whl$"
)
_PROJECT_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_GPU_ARCH = re.compile(r"^(?:[1-9]\d?\.\d{1,2}[af]?|gfx[0-9a-f]{2,6}[a-z]?)$")  # 9.0, 9.0a, 12.0f, gfx942
# Bounds on what one wheel may make the index read: METADATA is a few KB (it is served beside every wheel), and a
# wheel is a few thousand members. A zip bomb's METADATA is refused at its stated size, or at the cap while reading.
MAX_METADATA_BYTES = 1 << 20
MAX_PROVENANCE_BYTES = 8 << 20  # a full-arch wheel's record lists a few hundred payload digests: ~100 kB
MAX_FILENAME = 200  # a site file's name adds up to 31 characters to it (.provenance.json and a temporary's suffix)
METADATA, PROVENANCE, VARIANT_JSON = "METADATA", "wheelwright.json", "variant.json"


class RejectedWheel(ValueError):
    """A file in dist/ the index refuses to list; the message says why."""


class WheelName(NamedTuple):
    """A wheel filename, parsed: ``causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl``. A tuple: the
    index builds one per wheel of dist/ on every run, 100,000 in a farm's."""

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


class CoreMetadata(NamedTuple):
    """The fields of a wheel's METADATA the index shows, plus the digest of the file served beside the wheel."""

    sha256: str
    size: int
    requires_python: str | None
    summary: str | None


class WheelFile(NamedTuple):
    """A wheel the index lists: its name, the digest and size of its bytes and its core metadata."""

    name: WheelName
    sha256: str
    size: int
    metadata: CoreMetadata
    upload_time: float  # when the index first saw these bytes (seconds since the epoch)

    @property
    def filename(self) -> str:
        return self.name[0]


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
        except (ValueError, RecursionError):
            return None
        if not isinstance(value, list) or not all(isinstance(a, str) and _GPU_ARCH.match(a) for a in value):
            return None
        lists.append(tuple(value))
    window = abi_window if isinstance(abi_window, str) and abi_window else None
    return GpuArchs(sass=lists[0], ptx=lists[1], abi_window=window)


def parse_wheel_name(filename: str) -> WheelName:
    """Parse and validate ``filename``; raise :class:`RejectedWheel` with the reason."""
    if len(filename) > MAX_FILENAME:
        raise RejectedWheel(
            f"{filename[:40]}...: a name of {len(filename)} characters; the index takes at most {MAX_FILENAME} "
            "(the files it makes of it add to the name, and a file system allows 255)"
        )
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


def accepted_names(filenames: list[str]) -> list[WheelName]:
    """The parsed names of ``filenames``, which parse_wheel_name and check_variant accepted under the same checks
    (the index state's verdicts): split into their parts, not judged again, column by column (loops in C, and no
    per-call checks of WheelName: 100,000 on every run that renders). Each label is parsed once."""
    parts = list(map(_SPLIT_PARTS, map(_STEM, filenames)))  # [dist, version, *build tag, python, abi, platform]
    versions = list(map(_SECOND, parts))
    public_and_label = list(map(_SPLIT_LABEL, versions))  # a name parse_wheel_name accepted has a label
    labels = list(map(_SECOND, public_and_label))
    parsed = {label: parse_label(label) for label in set(labels)}  # (torch minor, accelerator): a few dozen
    releases = list(map(parsed.__getitem__, labels))
    columns = zip(
        filenames,
        map(_DASHED, map(_FIRST, parts)),  # in normal form: the project is the lower-case dist with '-' for '_'
        versions, map(_FIRST, public_and_label), labels, map(_FIRST, releases), map(_SECOND, releases),
        *(map(operator.itemgetter(index), parts) for index in (-3, -2, -1)),
        strict=True,
    )
    return list(map(tuple.__new__, itertools.repeat(WheelName), columns))


_STEM, _SPLIT_PARTS = operator.methodcaller("removesuffix", ".whl"), operator.methodcaller("split", "-")
_SPLIT_LABEL, _DASHED = operator.methodcaller("split", "+", 1), operator.methodcaller("replace", "_", "-")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


# WheelFilename.parse (packaging's parse_wheel_filename) checks the name and version part and the tags part of a
# name without a build tag independently of each other, so a name passes it exactly when both halves pass it
# with a neutral other half. A farm's 10,000 names have a few hundred of each: parsing every name whole was most
# of a re-index's time to read dist/.
@functools.lru_cache(maxsize=4096)
def _check_name_version(dist: str, version: str) -> None:
    WheelFilename.parse(f"{dist}-{version}-py3-none-any.whl")


@functools.lru_cache(maxsize=4096)
def _check_tags(tags: str) -> None:
    WheelFilename.parse(f"x-0-{tags}.whl")


@functools.lru_cache(maxsize=4096)
def _release_of(dist: str, raw_version: str) -> tuple[str, str, str, str, str, Accelerator]:
    """Project, version, public version, label, torch minor and accelerator of a name-version pair (thousands of
    wheels share one), each required to be written in normal form already; ValueError says what is wrong."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

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


def check_variant(name: WheelName, facts: TorchFacts | None = None, released: Collection[str] = ()) -> None:
    """A label is a variant only if torch shipped it (builder/data/torch.toml): ``pt214cu118`` parses, but torch
    2.14 was never built for CUDA 11.8, so no one could install that wheel beside a torch it matches. ``released``:
    the variants the facts list (released_variants), which spare reading them for a known one."""
    if variant_key(name.torch, name.accelerator) in released:
        return
    if facts is None:
        problem = _known_variant_problem(name.torch, name.accelerator)
    else:
        problem = _variant_problem(name.torch, name.accelerator, facts)
    if problem is not None:
        raise RejectedWheel(f"{name.filename}: not a known variant: {problem}")


@functools.lru_cache(maxsize=1024)
def _known_variant_problem(torch: str, accelerator: Accelerator) -> str | None:
    from builder.plan.facts import load_facts

    return _variant_problem(torch, accelerator, load_facts())


def released_variants(facts: TorchFacts) -> list[str]:
    """Every variant torch shipped, as check_variant looks them up: ``2.14 cu130``."""
    return sorted(variant_key(release.minor, accelerator) for release in facts.releases for accelerator in
                  release.accelerators)


def variant_key(torch: str, accelerator: Accelerator) -> str:
    return f"{torch} {accelerator.name}"


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
    return read_dist_info(source, name.filename, {METADATA: MAX_METADATA_BYTES}, required=(METADATA,))[METADATA]


def read_dist_info(
    source: Path | BinaryIO, filename: str, wanted: Mapping[str, int], *, required: Collection[str] = ()
) -> dict[str, bytes]:
    """The files of the wheel's one ``.dist-info`` folder named in ``wanted``, each with the most bytes it may
    have; those it lacks are left out (RejectedWheel if one of ``required`` is missing). The archive is opened
    through builder.core.archive: its names and sizes are checked before anything inflates, and nothing inflates
    past its caps."""
    if isinstance(source, Path):
        try:
            with os.fdopen(open_regular(source), "rb") as file:
                return open_dist_info(file, filename, wanted, required=required)[1]
        except OSError as error:
            raise RejectedWheel(f"{filename}: cannot read the wheel: {error.strerror or error}") from None
    return open_dist_info(source, filename, wanted, required=required)[1]


def open_dist_info(
    file: BinaryIO, filename: str, wanted: Mapping[str, int], *, required: Collection[str] = ()
) -> tuple[Archive, dict[str, bytes]]:
    """read_dist_info of an open wheel, with the archive it opened (for more bounded reads of it)."""
    try:
        archive = Archive(file, os.fstat(file.fileno()).st_size, filename, WHEEL)
        return archive, _dist_info(archive, filename, wanted, required)
    except ArchiveError as error:
        raise RejectedWheel(f"{filename}: cannot read the wheel: {str(error).removeprefix(filename + ': ')}") from None
    except OSError as error:
        raise RejectedWheel(f"{filename}: cannot read the wheel: {error.strerror or error}") from None


def _dist_info(
    archive: Archive, filename: str, wanted: Mapping[str, int], required: Collection[str]
) -> dict[str, bytes]:
    members = archive.files
    folders = {info.filename.split("/", 1)[0] for info in members if "/" in info.filename}
    dist_info = sorted(folder for folder in folders if folder.endswith(".dist-info"))
    if len(dist_info) != 1:
        raise RejectedWheel(f"{filename}: expected one .dist-info/METADATA, found {len(dist_info)} .dist-info folders")
    by_name = {info.filename: info for info in members}
    found = {}
    for member, most in wanted.items():
        info = by_name.get(f"{dist_info[0]}/{member}")
        if info is None:
            if member in required:
                raise RejectedWheel(f"{filename}: no {dist_info[0]}/{member}")
            continue
        if info.file_size > most:
            raise RejectedWheel(_too_big(filename, member, info.file_size, most))
        data = bytearray()
        for chunk in archive.chunks(info):  # the stated size may lie; the read is capped regardless
            data += chunk
            if len(data) > most:
                raise RejectedWheel(_too_big(filename, member, len(data), most))
        found[member] = bytes(data)
    _check_declared(members, filename)
    return found


def _check_declared(members: Iterable[zipfile.ZipInfo], filename: str) -> None:
    """Every member's stated sizes within the caps for our wheels (zipfile never inflates a member past its stated
    size), so that a wheel the index accepts is one the twin step can read whole within them."""
    total = 0
    for info in members:
        where = f"{filename}: member {info.filename!r}"
        if info.file_size > WHEEL.member_bytes:
            raise RejectedWheel(f"{where} declares {info.file_size:,} bytes; a member may have {WHEEL.member_bytes:,}")
        if info.file_size > RATIO_FLOOR and info.file_size > WHEEL.ratio * max(info.compress_size, 1):
            raise RejectedWheel(
                f"{where} declares {info.file_size:,} bytes from {info.compress_size:,} compressed: more than "
                f"{WHEEL.ratio}:1 (a zip bomb?)"
            )
        total += info.file_size
        if total > WHEEL.total_bytes:
            raise RejectedWheel(
                f"{filename}: its members declare more than {WHEEL.total_bytes:,} bytes (at {info.filename!r})"
            )


def _too_big(filename: str, member: str, size: int, most: int) -> str:
    return f"{filename}: {member} is {size:,}+ bytes; the index accepts at most {most:,}"


def check_provenance(data: bytes, name: WheelName) -> None:
    """A wheel's wheelwright.json, where it has one: a JSON object that names the filename's label and public
    version, with the fields the variant twin is made from of their types (the twin step reads them); else
    RejectedWheel. Whether it agrees with the payload is the verify gate's question, and the twin check's."""
    where = f"{name.filename}: {PROVENANCE}"
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise RejectedWheel(f"{where} is not JSON ({str(error)[:200]})") from None
    if not isinstance(record, dict):
        raise RejectedWheel(f"{where} is not a JSON object")
    problem = provenance_problem(record, name.label, name.public_version)
    if problem:
        raise RejectedWheel(f"{where}: {problem}")


def provenance_problem(record: Mapping[str, object], label: str, version: str) -> str:
    """What is wrong with a provenance record's fields the index and the twin step read; "" when nothing."""
    if record.get("label") != label or record.get("version") != version:
        return f"records {record.get('label')!r} {record.get('version')!r}, the filename {label!r} {version!r}"
    archs, files, torch = record.get("archs"), record.get("files"), record.get("torch", {})
    if not isinstance(archs, dict) or not all(_strings(archs.get(kind, [])) for kind in ("sass", "ptx")):
        return "'archs' is not {'sass': [...], 'ptx': [...]} of arch names"
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        return "'files' is not {name: sha256}"
    if not isinstance(torch, dict) or not isinstance(torch.get("requirement"), str | None):
        return "'torch' is not {'requirement': text, ...}"
    return ""


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def check_core_metadata(data: bytes, name: WheelName) -> CoreMetadata:
    """Validate METADATA against the filename; return what the index shows of it."""
    return check_metadata(data, name.filename, name.project, name.version)


def check_metadata(data: bytes, filename: str, project: str, version: str) -> CoreMetadata:
    """Validate METADATA against the project and version its filename names (RejectedWheel says what is wrong)."""
    from packaging.metadata import parse_email  # packaging's parsers: only for a file read this run
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import canonicalize_name

    raw, _unparsed = parse_email(data)
    stated, stated_version = raw.get("name"), raw.get("version")
    if stated is None or stated_version is None:
        raise RejectedWheel(f"{filename}: METADATA lacks Name or Version")
    if not _PROJECT_NAME.match(canonicalize_name(stated)) or canonicalize_name(stated) != project:
        raise RejectedWheel(f"{filename}: METADATA names project {stated!r}, the filename {project!r}")
    if stated_version != version:
        raise RejectedWheel(f"{filename}: METADATA says version {stated_version!r}, the filename {version!r}")
    requires_python = raw.get("requires_python")
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise RejectedWheel(f"{filename}: Requires-Python {requires_python!r} is not a version specifier") from None
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
