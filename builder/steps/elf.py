"""What the ELF files inside a wheel declare: the libraries they need, the symbol versions they need from them, and
the GPU code they carry. Read once here; repair decides and verify judges on these facts. The GPU code is read by
builder.core.fatbin through the standard-library ELF reader that doctor.py shares; the linking facts by pyelftools
and auditwheel, which tests/integration/test_elfread_twin.py holds that reader to."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from types import MappingProxyType

from auditwheel.elfutils import elf_find_versioned_symbols
from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from builder.core.archive import open_archive
from builder.core.elfread import ElfFile, is_elf
from builder.core.errors import WheelError
from builder.core.fatbin import FatbinContents, elf_fatbin
from builder.steps.cxxabi import AbiEvidence, classify

log = logging.getLogger(__name__)



@dataclass(frozen=True, kw_only=True)
class ElfFacts:
    path: str  # inside the wheel: "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
    needed: tuple[str, ...] = ()
    # the library that defines them -> versions needed: {"libc.so.6": {"GLIBC_2.2.5", "GLIBC_2.34"}}
    symbol_versions: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    gpu: FatbinContents = field(default_factory=FatbinContents)
    abi: AbiEvidence = field(default_factory=AbiEvidence)  # C++ ABI of the symbols shared with torch
    machine: str = ""  # the CPU from e_machine: "x86_64", "aarch64" ("" where not read: gpu=False)
    load_alignments: tuple[int, ...] = ()  # p_align of each PT_LOAD segment

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def read_elf(path: Path, *, name: str, gpu: bool = True) -> ElfFacts:
    """The facts of one ELF file on disk; ``name`` is how reports call it (its path inside the wheel).

    ``gpu=False`` skips the fatbin, for callers that only need the dynamic linking facts (repair).
    """
    try:
        with path.open("rb") as stream:
            elf = ELFFile(stream)
            dynamic = elf.get_section_by_name(".dynamic")
            needed = [] if not isinstance(dynamic, DynamicSection) else [
                tag.needed  # type: ignore[attr-defined]  # pyelftools sets it on DT_NEEDED tags only
                for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"
            ]
            versions: dict[str, set[str]] = {}
            for library, version in elf_find_versioned_symbols(elf):
                versions.setdefault(library, set()).add(version)
            abi = classify(_dynamic_symbols(elf)) if gpu else AbiEvidence()
    except ELFError as error:
        raise WheelError(f"{name}: not a readable ELF file ({error})") from None
    frozen = MappingProxyType({lib: frozenset(v) for lib, v in sorted(versions.items())})
    if not gpu:
        return ElfFacts(path=name, needed=tuple(needed), symbol_versions=frozen)
    kernels, machine, alignments = _stdlib_facts(path, name)
    return ElfFacts(path=name, needed=tuple(needed), symbol_versions=frozen, gpu=kernels, abi=abi,
                    machine=machine, load_alignments=alignments)


def _dynamic_symbols(elf: ELFFile) -> Iterator[str]:
    """Names in .dynsym, defined and undefined: what the dynamic linker matches against torch's libraries."""
    table = elf.get_section_by_name(".dynsym")
    if not isinstance(table, SymbolTableSection):
        return
    for symbol in table.iter_symbols():
        if symbol.name:
            yield symbol.name


def _stdlib_facts(path: Path, name: str) -> tuple[FatbinContents, str, tuple[int, ...]]:
    """The GPU code, the CPU and the segments' alignment, read by the standard-library reader doctor.py shares."""
    with path.open("rb") as stream:
        elf = ElfFile(stream, where=name)
        return elf_fatbin(elf, where=name), elf.machine, elf.load_alignments()


def tree_elf_facts(root: Path, *, gpu: bool = True) -> tuple[ElfFacts, ...]:
    """Every ELF file under ``root`` (an unpacked wheel), whatever its name: ``.so``, ``.so.1`` or none."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    return tuple(read_elf(p, name=p.relative_to(root).as_posix(), gpu=gpu) for p in files if is_elf(p))


@contextmanager
def unpacked(wheel: Path) -> Iterator[Path]:
    """The wheel's files in a temporary directory, removed afterwards (unpacked within the archive caps)."""
    with TemporaryDirectory(prefix="wheelwright-unpack-") as tmp:
        try:
            with open_archive(wheel) as archive:
                archive.extract(Path(tmp))
        except OSError as error:
            raise WheelError(f"{wheel}: cannot unpack ({error})") from None
        yield Path(tmp)


def wheel_elf_facts(wheel: Path, *, gpu: bool = True) -> tuple[ElfFacts, ...]:
    with unpacked(wheel) as root:
        return tree_elf_facts(root, gpu=gpu)
