"""A standard-library-only reader for the parts of an ELF shared object that decide whether it loads: its sections,
the libraries it needs (``DT_NEEDED``), the symbol versions it needs from them (``.gnu.version_r``: ``GLIBC_2.34``,
``GLIBCXX_3.4.30``), the versions a library provides (``.gnu.version_d``) and its dynamic symbol names.

The verify gate reads the same facts with pyelftools and auditwheel; this twin exists because ``doctor.py`` runs
where neither is installed, and tests check the two agree on real wheels. Only 64-bit little-endian files (x86_64,
aarch64) are read: nothing else carries a CUDA or ROCm extension. Dataclasses here stay positional-capable
(no ``kw_only``) because this module also runs inside ``doctor.py`` on Python 3.9.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from builder.core.errors import WheelError

ELF_MAGIC = b"\x7fELF"
_ELFCLASS64, _ELFDATA2LSB = 2, 1
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_DYN = struct.Struct("<qQ")
_VERNEED = struct.Struct("<HHIII")
_VERNAUX = struct.Struct("<IHHII")
_VERDEF = struct.Struct("<HHHHIII")
_VERDAUX = struct.Struct("<II")
_SYM = struct.Struct("<IBBHQQ")
_PROGRAM = struct.Struct("<IIQQQQQQ")
PT_LOAD = 1
# e_machine, read from the bytes: a file's platform is never taken from its name (state-spaces/mamba#891 shipped an
# x86_64 .so inside an aarch64 wheel)
MACHINES = {62: "x86_64", 183: "aarch64"}
MACHINE_NAMES = {62: "EM_X86_64", 183: "EM_AARCH64"}

SHT_DYNAMIC, SHT_DYNSYM = 6, 11
SHT_GNU_VERDEF, SHT_GNU_VERNEED = 0x6FFFFFFD, 0x6FFFFFFE
DT_NEEDED = 1
SHT_NOBITS = 8
# The dynamic loader's own versions say nothing about the system (auditwheel skips them the same way).
_LOADERS = ("ld64.so.2", "ld64.so.1")


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int  # index of the string table its names live in (dynamic, versions, symbols)
    info: int  # entry count for the version sections


@dataclass(frozen=True)
class ElfLinkage:
    """What one ELF file asks of, and offers to, the dynamic loader."""

    needed: tuple[str, ...]
    version_needs: dict[str, frozenset[str]]  # library -> versions: {"libc.so.6": {"GLIBC_2.34"}}
    version_definitions: frozenset[str]  # what a library provides: {"GLIBCXX_3.4.30", "CXXABI_1.3.13"}
    dynamic_symbols: tuple[str, ...]


class ElfFile:
    """An open ELF file; sections are read on demand, so a 1 GB torch library costs only its headers."""

    def __init__(self, stream: BinaryIO, *, where: str) -> None:
        self._stream, self.where = stream, where
        self.sections = self._read_sections()
        self._by_name = {s.name: s for s in self.sections}

    def _fail(self, why: str) -> WheelError:
        return WheelError(f"{self.where}: not a readable ELF file ({why})")

    def _read(self, offset: int, size: int) -> bytes:
        self._stream.seek(offset)
        data = self._stream.read(size)
        if len(data) != size:
            raise self._fail(f"{size} bytes at offset {offset} run past the end of the file")
        return data

    def _read_sections(self) -> tuple[Section, ...]:
        self._stream.seek(0)
        head = self._stream.read(_HEADER.size)
        if len(head) < _HEADER.size or head[:4] != ELF_MAGIC:
            raise self._fail("no ELF magic")
        if head[4] != _ELFCLASS64 or head[5] != _ELFDATA2LSB:
            raise self._fail("only 64-bit little-endian ELF files are read")
        fields = _HEADER.unpack(head)
        self.e_machine, self._phoff, self._phentsize, self._phnum = fields[2], fields[5], fields[9], fields[10]
        shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
        if shnum == 0:
            return ()
        if shentsize != _SECTION.size or shstrndx >= shnum:
            raise self._fail(f"section header size {shentsize}, string table index {shstrndx} of {shnum}")
        table = self._read(shoff, shnum * shentsize)
        raw = [_SECTION.unpack_from(table, i * shentsize) for i in range(shnum)]
        names = self._read(raw[shstrndx][4], raw[shstrndx][5])
        return tuple(
            Section(
                name=_cstring(names, r[0]),
                type=r[1],
                offset=r[4],
                size=r[5] if r[1] != SHT_NOBITS else 0,
                link=r[6],
                info=r[7],
            )
            for r in raw
        )

    @property
    def machine(self) -> str:
        """The CPU the file is for, from e_machine: "x86_64", "aarch64", or "e_machine 40" for any other."""
        return MACHINES.get(self.e_machine, f"e_machine {self.e_machine}")

    def load_alignments(self) -> tuple[int, ...]:
        """p_align of each PT_LOAD segment: the largest page size the file maps on (64 KiB kernels need 65536)."""
        if self._phnum == 0:
            return ()
        if self._phentsize != _PROGRAM.size:
            raise self._fail(f"program header size {self._phentsize}")
        table = self._read(self._phoff, self._phnum * self._phentsize)
        headers = (_PROGRAM.unpack_from(table, i * self._phentsize) for i in range(self._phnum))
        return tuple(header[7] for header in headers if header[0] == PT_LOAD)

    def section(self, name: str) -> Section | None:
        return self._by_name.get(name)

    def data(self, section: Section) -> bytes:
        return self._read(section.offset, section.size)

    def _of_type(self, kind: int) -> Section | None:
        return next((s for s in self.sections if s.type == kind), None)

    def _strings(self, section: Section) -> bytes:
        if section.link >= len(self.sections):
            raise self._fail(f"section {section.name} links to string table {section.link}")
        return self.data(self.sections[section.link])

    def needed(self) -> tuple[str, ...]:
        dynamic = self._of_type(SHT_DYNAMIC)
        if dynamic is None:
            return ()
        data, strings = self.data(dynamic), self._strings(dynamic)
        entries = (_DYN.unpack_from(data, i) for i in range(0, len(data) - _DYN.size + 1, _DYN.size))
        return tuple(_cstring(strings, value) for tag, value in entries if tag == DT_NEEDED)

    def version_needs(self) -> dict[str, frozenset[str]]:
        section = self._of_type(SHT_GNU_VERNEED)
        if section is None:
            return {}
        data, strings = self.data(section), self._strings(section)
        needs: dict[str, frozenset[str]] = {}
        for offset in self._chain(data, _VERNEED, section.info, next_field=4):
            _, count, file, aux, _ = _VERNEED.unpack_from(data, offset)
            library = _cstring(strings, file)
            names = set()
            for aux_offset in self._chain(data, _VERNAUX, count, next_field=4, start=offset + aux):
                names.add(_cstring(strings, _VERNAUX.unpack_from(data, aux_offset)[3]))
            if not (library.startswith("ld-linux") or library in _LOADERS):
                needs[library] = frozenset(names) | needs.get(library, frozenset())
        return dict(sorted(needs.items()))

    def version_definitions(self) -> frozenset[str]:
        section = self._of_type(SHT_GNU_VERDEF)
        if section is None:
            return frozenset()
        data, strings = self.data(section), self._strings(section)
        names = set()
        for offset in self._chain(data, _VERDEF, section.info, next_field=6):
            aux = _VERDEF.unpack_from(data, offset)[5]
            names.add(_cstring(strings, _VERDAUX.unpack_from(data, offset + aux)[0]))
        return frozenset(names)

    def dynamic_symbols(self) -> tuple[str, ...]:
        section = self._of_type(SHT_DYNSYM)
        if section is None:
            return ()
        data, strings = self.data(section), self._strings(section)
        offsets = range(_SYM.size, len(data) - _SYM.size + 1, _SYM.size)  # entry 0 is the null symbol
        return tuple(name for name in (_cstring(strings, _SYM.unpack_from(data, o)[0]) for o in offsets) if name)

    def _chain(
        self, data: bytes, record: struct.Struct, count: int, *, next_field: int, start: int = 0
    ) -> Iterator[int]:
        """Offsets of a linked list of version records: each holds the distance to the next (0 ends it)."""
        offset = start
        for _ in range(count):
            if offset < 0 or offset + record.size > len(data):
                raise self._fail(f"version record at offset {offset} runs past its section")
            yield offset
            step = record.unpack_from(data, offset)[next_field]
            if step == 0:
                return
            offset += step

    def linkage(self) -> ElfLinkage:
        return ElfLinkage(
            needed=self.needed(),
            version_needs=self.version_needs(),
            version_definitions=self.version_definitions(),
            dynamic_symbols=self.dynamic_symbols(),
        )


def _cstring(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)].decode("utf-8", "replace")


def is_elf(path: Path) -> bool:
    with path.open("rb") as stream:
        return stream.read(4) == ELF_MAGIC


def read_linkage(path: Path) -> ElfLinkage:
    """The linkage facts of the ELF file at ``path``."""
    with path.open("rb") as stream:
        return ElfFile(stream, where=str(path)).linkage()
