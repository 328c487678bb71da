"""What GPU code a shared object carries: the entries of its ``.nv_fatbin`` section (SASS per sm, PTX per
compute arch). "no kernel image is available for execution on the device" means the SASS list lacks the GPU's arch.

The layout below was worked out from nvcc 13.0 output (cross-checked with ``cuobjdump --list-elf/--list-ptx``);
all fields are little-endian. The section holds one or more *containers* back to back (nvcc emits one per
translation unit plus one for the device link step), each starting on an 8-byte boundary::

    container header (16 bytes)
      0x00 u32  magic 0xBA55ED50
      0x04 u16  container version (1)
      0x06 u16  header size (16); the first entry starts here
      0x08 u64  total size of the entries that follow the header

    entry header (64 bytes, longer when an option table follows)
      0x00 u16  kind: 1 = PTX, 2 = ELF cubin (SASS); anything else is listed as "other"
      0x02 u16  entry format version (0x0101)
      0x04 u32  header size: the payload starts this many bytes after the entry
      0x08 u64  payload size; the next entry starts at entry + header size + payload size
      0x10 u32  compressed size (0 when stored plain)
      0x14 u32  offset of an option table inside the header (0 if none)
      0x18 u16  minor, 0x1a u16 major: PTX ISA version (9.0) or cubin ELF ABI version (1.8)
      0x1c u32  sm: 10 * major + minor of the target (90 = sm_90 / compute_90, 100 = sm_100)
      0x20 u32  object name offset, 0x24 u32 object name length (0 in nvcc output)
      0x28 u64  flags, see the _FLAG_* constants
      0x38 u64  uncompressed payload size (0 when stored plain)

Only headers are read: compressed payloads still name their arch, so nothing is ever decompressed. Standard library
only: the verify gate and ``doctor.py`` (which runs on Python 3.9, hence no ``kw_only``) read GPU code with this one
implementation.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from builder.core.elfread import ElfFile
from builder.core.errors import WheelError

SECTION = ".nv_fatbin"
MAGIC = 0xBA55ED50

_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # the fixed 64 bytes; see the module docstring
_KINDS: dict[int, Literal["ptx", "sass"]] = {1: "ptx", 2: "sass"}

# Two compression schemes exist: nvcc's "-compress-mode=speed" sets 0x2000, the default and "size" modes 0x8000.
_FLAG_COMPRESSED = 0x2000 | 0x8000
_FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a: runs only on that exact arch
_FLAG_FAMILY_SPECIFIC = 0x200000  # sm_100f: runs on the family (sm_100, sm_103)


@dataclass(frozen=True)
class FatbinEntry:
    kind: Literal["sass", "ptx", "other"]
    arch: str  # "9.0", "9.0a", "10.0f"
    compressed: bool
    version: tuple[int, int]  # PTX ISA version for PTX, ELF ABI version for cubins
    payload_size: int
    kind_code: int


@dataclass(frozen=True)
class FatbinContents:
    """The archs a shared object has kernels for; ``entries`` keeps every entry for reports."""

    sass: frozenset[str] = frozenset()
    ptx: frozenset[str] = frozenset()
    entries: tuple[FatbinEntry, ...] = field(default=(), compare=False)

    @classmethod
    def from_entries(cls, entries: tuple[FatbinEntry, ...]) -> FatbinContents:
        sass = frozenset(e.arch for e in entries if e.kind == "sass")
        ptx = frozenset(e.arch for e in entries if e.kind == "ptx")
        return cls(sass=sass, ptx=ptx, entries=entries)

    @property
    def empty(self) -> bool:
        return not (self.entries or self.sass or self.ptx)

    def describe(self) -> str:
        """``SASS 7.5, 9.0; PTX 9.0`` (or ``no GPU code``), sorted by arch."""
        parts = [
            f"{label} {', '.join(sorted(archs, key=arch_key))}"
            for label, archs in (("SASS", self.sass), ("PTX", self.ptx))
            if archs
        ]
        return "; ".join(parts) or "no GPU code"


def arch_key(arch: str) -> tuple[int, int, str]:
    """Sort key for "9.0", "10.0a", "12.0f": numeric, then the variant letter.

    The same order as ``builder.plan.arch.Arch.sort_key`` (a test holds them together); spelled out here because
    this reader sits in core, below the plan, and runs inside doctor.py.
    """
    major, _, rest = arch.partition(".")
    minor = rest.rstrip("af")
    return int(major), int(minor), rest[len(minor) :]


def arch_name(sm: int, flags: int) -> str:
    """90 -> "9.0"; with the arch-specific flag "9.0a", with the family flag "10.0f"."""
    variant = "a" if flags & _FLAG_ARCH_SPECIFIC else "f" if flags & _FLAG_FAMILY_SPECIFIC else ""
    return f"{sm // 10}.{sm % 10}{variant}"


def parse_fatbin(data: bytes, *, where: str) -> tuple[FatbinEntry, ...]:
    """Every entry of every container in ``data`` (a ``.nv_fatbin`` section's bytes)."""
    return tuple(
        entry for _, start, end in _containers(data, where) for _, _, entry in _entries(data, start, end, where)
    )


def select_entries(data: bytes, keep: Callable[[FatbinEntry], bool], *, where: str) -> bytes:
    """``data`` (a ``.nv_fatbin`` section's bytes) with only the entries ``keep`` says yes to: each container's
    header with its size made that of the entries kept, which follow byte for byte (compressed or not); containers
    8-byte aligned as nvcc lays them. WheelError where a container would be left with no entry."""
    out = bytearray()
    for container, start, end in _containers(data, where):
        kept = b"".join(data[a:b] for a, b, entry in _entries(data, start, end, where) if keep(entry))
        if not kept:
            raise WheelError(f"{where}: the fatbin container at offset {container} would keep no entry")
        header = bytearray(data[container:start])
        struct.pack_into("<Q", header, 8, len(kept))
        out += header + kept
        out += bytes(-len(out) % 8)
    return bytes(out)


def _containers(data: bytes, where: str) -> Iterator[tuple[int, int, int]]:
    """(header offset, first entry offset, end offset) of each container."""
    offset = 0
    while offset < len(data):
        if not any(data[offset:]):
            return  # trailing alignment padding
        if not any(data[offset : offset + 8]):
            # padding between two objects' sections: the linker aligns each to its own alignment (256 bytes in
            # objects an aarch64 host compiler wrote), where x86_64 objects' 8 left none
            offset += 8
            continue
        if len(data) - offset < _CONTAINER.size:
            raise WheelError(f"{where}: truncated fatbin container header at offset {offset}")
        magic, _version, header_size, size = _CONTAINER.unpack_from(data, offset)
        if magic != MAGIC:
            raise WheelError(f"{where}: no fatbin magic at offset {offset} (found {magic:#010x}, want {MAGIC:#010x})")
        start, end = offset + header_size, offset + header_size + size
        if header_size < _CONTAINER.size or end > len(data):
            left = len(data) - start
            raise WheelError(f"{where}: fatbin container at offset {offset} claims {size} bytes; only {left} follow")
        yield offset, start, end
        offset = (end + 7) & ~7


def _entries(data: bytes, offset: int, end: int, where: str) -> Iterator[tuple[int, int, FatbinEntry]]:
    """(start, end, entry) of each entry between ``offset`` and ``end``."""
    while offset < end:
        if end - offset < _ENTRY.size:
            raise WheelError(f"{where}: truncated fatbin entry header at offset {offset}")
        fields = _ENTRY.unpack_from(data, offset)
        kind, _, header_size, payload_size, compressed_size, _, minor, major, sm, _, _, flags, _, _ = fields
        next_offset = offset + header_size + payload_size
        if header_size < _ENTRY.size or next_offset > end:
            sizes = f"header {header_size}, payload {payload_size}"
            raise WheelError(f"{where}: fatbin entry at offset {offset} overruns its container ({sizes})")
        yield offset, next_offset, FatbinEntry(
            kind=_KINDS.get(kind, "other"),
            arch=arch_name(sm, flags),
            compressed=bool(flags & _FLAG_COMPRESSED or compressed_size),
            version=(major, minor),
            payload_size=payload_size,
            kind_code=kind,
        )
        offset = next_offset


def fatbin_archs(path: Path) -> FatbinContents:
    """The GPU code in the shared object at ``path``; empty when it has no ``.nv_fatbin`` section."""
    with path.open("rb") as stream:
        return elf_fatbin(ElfFile(stream, where=str(path)), where=str(path))


def elf_fatbin(elf: ElfFile, *, where: str) -> FatbinContents:
    """The GPU code of an ELF file already open (``where`` names it in errors)."""
    section = elf.section(SECTION)
    data = b"" if section is None else elf.data(section)
    return FatbinContents.from_entries(parse_fatbin(data, where=f"{where} {SECTION}"))
