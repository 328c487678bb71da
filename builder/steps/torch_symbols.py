"""The torch symbol index, built: for a torch wheel (in the cache, or behind a URL), the dynamic symbols its libraries
export, read from the wheel's zip without installing or downloading it: its central directory, each library's ELF
header and section table, ``.dynsym`` and the string table (builder/steps/zipranges.py reads just those ranges).
``wheelwright facts symbols`` refreshes the index for the registry's torch releases (or an index's variants)."""

from __future__ import annotations

import gzip
import json
import logging
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from builder.core.demangle import demangle
from builder.core.errors import WheelError
from builder.core.files import write_atomic
from builder.core.settings import cache_root
from builder.core.symbols import (
    NAMES_FILE,
    TORCH_LIBRARIES,
    TorchAbi,
    cache_dir,
    decode_entry,
    encode_entry,
    entry_path,
    linkage_of_tables,
    load_index,
)
from builder.steps.fetch import index_files, index_url, with_slash
from builder.steps.torch_index import torch_index_template
from builder.steps.torch_registry import cuda_of
from builder.steps.zipranges import ByteSource, HttpRanges, LocalFile, Member, MemberBytes, locate, members

log = logging.getLogger(__name__)

_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SHT_DYNSYM = 11
PREFERRED_PYTHON = "cp311"  # every torch from 2.0 to 2.15 has a cp311 wheel; one Python's libraries stand for all


@dataclass(frozen=True, kw_only=True)
class TorchWheelFile:
    """A torch wheel as an index lists it."""

    filename: str
    url: str
    sha256: str | None
    size: int | None

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.filename)[1])


def read_exports(source: ByteSource, member: Member) -> frozenset[str]:
    """The exported dynamic symbols of one ELF member of the zip."""
    where = f"{source.name}: {member.name}"
    elf = MemberBytes(source, locate(source, member))
    header = _ELF_HEADER.unpack(elf.read(0, _ELF_HEADER.size))
    ident, shoff, shentsize, shnum = header[0], header[6], header[11], header[12]
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1 or shentsize != _SECTION.size:
        raise WheelError(f"{where}: not a 64-bit little-endian ELF file")
    table = elf.read(shoff, shnum * shentsize)
    sections = [_SECTION.unpack_from(table, i * shentsize) for i in range(shnum)]
    dynsym = next((s for s in sections if s[1] == _SHT_DYNSYM), None)
    if dynsym is None:
        return frozenset()
    if dynsym[6] >= shnum:
        raise WheelError(f"{where}: .dynsym links to string table {dynsym[6]} of {shnum}")
    strings = sections[dynsym[6]]
    return linkage_of_tables(elf.read(dynsym[4], dynsym[5]), elf.read(strings[4], strings[5])).exports


def index_wheel(source: ByteSource, wheel: TorchWheelFile) -> TorchAbi:
    """The index entry of one torch wheel; ``source`` reads its bytes (and counts them)."""
    found = members(source)
    version = parse_wheel_filename(wheel.filename)[1]
    libraries = {}
    for library in TORCH_LIBRARIES:
        member = found.get(f"torch/lib/{library}")
        if member is not None:
            libraries[library] = read_exports(source, member)
    if not libraries:
        raise WheelError(f"{wheel.filename}: holds none of torch's libraries ({', '.join(TORCH_LIBRARIES)})")
    exports = frozenset().union(*libraries.values())
    return TorchAbi(
        torch=version.public,
        variant=version.local or _variant_from_metadata(source, found, wheel.filename),
        platform=_platform(wheel.filename),
        cxx11_abi=string_abi_of(exports),
        libraries=libraries,
        wheel={"filename": wheel.filename, "sha256": wheel.sha256, "size": source.size, "url": wheel.url},
        read={"bytes": source.bytes_read, "requests": source.reads, "of": source.size,
              "members": sorted(f"torch/lib/{name}" for name in libraries)},
    )


_TORCH_NAMESPACES = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch")


def string_abi_of(exports: frozenset[str]) -> bool:
    """Whether torch's own functions take the C++11 ``std::string`` (``St7__cxx11``) rather than the old one
    (``Ss``): torch 2.0.1, a pre-cxx11 build, still exports a few third-party names with ``__cxx11`` in them."""
    ours = [name for name in exports if name.startswith(_TORCH_NAMESPACES)]
    return sum("St7__cxx11" in name for name in ours) > sum("Ss" in name for name in ours)


def _variant_from_metadata(source: ByteSource, found: Mapping[str, Member], filename: str) -> str:
    """A registry wheel carries no local label: its Requires-Dist pins say the CUDA (none: a CPU build)."""
    names = [n for n in found if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        raise WheelError(f"{filename}: no single .dist-info/METADATA")
    member = locate(source, found[names[0]])
    text = MemberBytes(source, member).read(0, member.size).decode("utf-8", "replace")
    cuda = cuda_of(text)
    return f"cu{cuda.replace('.', '')}" if cuda else "cpu"


def _platform(filename: str) -> str:
    tags = parse_wheel_filename(filename)[3]
    machines = {m for tag in tags for m in ("x86_64", "aarch64") if tag.platform.endswith(m)}
    if len(machines) != 1:
        raise WheelError(f"{filename}: not a Linux x86_64 or aarch64 wheel")
    return machines.pop()


# -- which wheels, and refreshing the index ------------------------------------------------------------------------


def listed_wheels(page: str, *, platform: str, who: str) -> dict[str, TorchWheelFile]:
    """{version: the wheel whose libraries stand for that version on ``platform``} from one index page."""
    by_version: dict[str, dict[str, TorchWheelFile]] = {}
    for entry in index_files(page, who):
        filename = str(entry.get("filename", ""))
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if entry.get("yanked") or version.is_prerelease or not any(t.platform.endswith(platform) for t in tags):
            continue
        if not any("linux" in t.platform for t in tags):
            continue
        hashes = entry.get("hashes")
        wheel = TorchWheelFile(filename=filename, url=urljoin(page, str(entry.get("url", ""))),
                               sha256=hashes.get("sha256") if isinstance(hashes, dict) else None,
                               size=int(entry["size"]) if isinstance(entry.get("size"), int) else None)
        by_version.setdefault(str(version), {})[min(t.interpreter for t in tags)] = wheel
    return {version: pythons.get(PREFERRED_PYTHON) or pythons[min(pythons)]
            for version, pythons in by_version.items()}


def newest_patches(versions: Iterable[str], *, since: str) -> list[str]:
    """The newest patch of each minor from ``since`` on: 2.14.0, 2.14.1 -> 2.14.1."""
    newest: dict[tuple[int, int], Version] = {}
    for text in versions:
        version = Version(text)
        if version >= Version(since):
            key = (version.major, version.minor)
            newest[key] = max(newest.get(key, version), version)
    return [str(newest[key]) for key in sorted(newest)]


@dataclass(frozen=True, kw_only=True)
class Refreshed:
    """What refreshing did for one wheel: ``current`` (its entry is of that very wheel: nothing read), ``built``."""

    entry: TorchAbi
    outcome: str
    path: Path
    size: int  # the entry's bytes on disk


def cached_wheel(wheel: TorchWheelFile) -> Path | None:
    """The wheel in wheelwright's torch cache (``<cache>/torch-wheels/<sha256>/<filename>``), if a build left it."""
    if not wheel.sha256:
        return None
    path = cache_root() / "torch-wheels" / wheel.sha256 / wheel.filename
    return path if path.is_file() else None


def refresh_one(wheel: TorchWheelFile, directory: Path) -> Refreshed:
    """The wheel's entry: kept when the index holds one of this very wheel (by sha256), else read and written."""
    for existing in directory.glob(f"torch-{_escape(wheel.version)}-*.json.gz"):
        try:
            entry = decode_entry(existing.read_bytes(), str(existing))
        except (OSError, ValueError):
            continue
        if wheel.sha256 and entry.wheel.get("sha256") == wheel.sha256:
            return Refreshed(entry=entry, outcome="current", path=existing, size=existing.stat().st_size)
    local = cached_wheel(wheel)
    source: ByteSource = LocalFile(local) if local else HttpRanges.open(wheel.url, size=wheel.size,
                                                                        name=wheel.filename)
    log.info("indexing %s from %s", wheel.filename, local or wheel.url)
    entry = index_wheel(source, wheel)
    path = entry_path(directory, entry)
    data = encode_entry(entry)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    return Refreshed(entry=entry, outcome=f"built from {'the cached wheel' if local else 'its URL'}", path=path,
                     size=len(data))


def _escape(version: str) -> str:
    return re.sub(r"[\[\]*?]", "", version)


def torch_page(accelerator: str | None) -> str:
    """The torch project page to read: the registry's, or ``accelerator``'s on PyTorch's index (or the mirror
    ``WHEELWRIGHT_TORCH_INDEX`` names)."""
    if accelerator is None:
        return urljoin(with_slash(index_url()), "torch/")
    template = torch_index_template()
    return urljoin(with_slash(template.replace("{accelerator}", accelerator)), "torch/")


def refresh(versions: Iterable[str] | None, *, page: str | None = None, platform: str = "x86_64",
            since: str = "2.0", directory: Path | None = None) -> list[Refreshed]:
    """Refresh the index for ``versions`` (default: the newest patch of each minor from ``since``) of the torch
    wheels ``page`` lists (default: the registry's torch page)."""
    page = page or torch_page(None)
    listed = listed_wheels(page, platform=platform, who="facts symbols")
    wanted = list(versions) if versions else newest_patches(listed, since=since)
    missing = [v for v in wanted if v not in listed]
    if missing:
        raise WheelError(f"{page} lists no {platform} wheel of torch {', '.join(missing)}")
    directory = directory or cache_dir()
    refreshed = [refresh_one(listed[version], directory) for version in wanted]
    if any(r.outcome != "current" for r in refreshed) or not (directory / NAMES_FILE).is_file():
        write_names(directory)
    return refreshed


def write_names(directory: Path) -> Path:
    """``names.json.gz``: the demangled names of the symbols some indexed torch exports and another does not, the
    ones an ``undefined symbol`` line names, for a doctor on a machine without libstdc++ to demangle them."""
    entries, _ = load_index(directory)
    sets = [entry.exports() for entry in entries]
    changed = frozenset().union(*sets) - frozenset.intersection(*sets) if sets else frozenset()
    names = {symbol: demangle(symbol) for symbol in sorted(changed)}
    path = directory / NAMES_FILE
    write_atomic(path, gzip.compress(json.dumps(names, separators=(",", ":")).encode(), compresslevel=9, mtime=0))
    return path


def summary(refreshed: Refreshed) -> dict[str, Any]:
    """One row of what ``facts symbols`` prints (and writes as JSON)."""
    entry, read = refreshed.entry, refreshed.entry.read
    size = int(str(entry.wheel.get("size") or 0))
    return {"torch": entry.torch, "variant": entry.variant, "platform": entry.platform,
            "cxx11_abi": entry.cxx11_abi, "symbols": len(entry.exports()), "outcome": refreshed.outcome,
            "read_bytes": 0 if refreshed.outcome == "current" else read.get("bytes"),
            "read_requests": 0 if refreshed.outcome == "current" else read.get("requests"), "wheel_bytes": size,
            "index_bytes": refreshed.size, "path": str(refreshed.path)}
