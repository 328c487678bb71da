"""The standard-library ELF reader doctor.py uses (builder.core.elfread) against pyelftools and auditwheel, which
the verify gate uses, on the same real files: this system's libraries, torch's, an nvcc-built kernel library and
the session's real causal-conv1d wheel. Both must read the same needed libraries, symbol versions, version
definitions and dynamic symbols."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from auditwheel.elfutils import elf_find_versioned_symbols
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection
from elftools.elf.sections import SymbolTableSection

from builder.core.elfread import is_elf, read_linkage
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.elf import unpacked
from builder.steps.environment import runtime_env

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = [
    Path(p)
    for p in (
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1",
    )
    if Path(p).is_file()
]


def pyelftools_linkage(path: Path) -> tuple:
    with path.open("rb") as stream:
        elf = ELFFile(stream)
        dynamic = next((s for s in elf.iter_sections() if isinstance(s, DynamicSection)), None)
        needed = () if dynamic is None else tuple(t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED")
        needs: dict[str, set[str]] = {}
        for library, version in elf_find_versioned_symbols(elf):
            needs.setdefault(library, set()).add(version)
        verdef = next((s for s in elf.iter_sections() if isinstance(s, GNUVerDefSection)), None)
        defined = set() if verdef is None else {next(aux).name for _, aux in verdef.iter_versions()}
        dynsym = elf.get_section_by_name(".dynsym")
        symbols = (
            () if not isinstance(dynsym, SymbolTableSection) else tuple(s.name for s in dynsym.iter_symbols() if s.name)
        )
    return needed, {k: frozenset(v) for k, v in sorted(needs.items())}, frozenset(defined), symbols


def assert_same(path: Path) -> None:
    ours = read_linkage(path)
    needed, needs, defined, symbols = pyelftools_linkage(path)
    assert ours.needed == needed, path
    assert ours.version_needs == needs, path
    assert ours.version_definitions == defined, path
    assert ours.dynamic_symbols == symbols, path


@pytest.mark.parametrize("path", SYSTEM, ids=[p.name for p in SYSTEM])
def test_system_libraries(path: Path) -> None:
    assert_same(path)


def test_the_extension_modules_of_this_venv() -> None:
    """Built by other toolchains (Rust's pydantic-core, Cython, plain C), some of them repaired by auditwheel."""
    modules = sorted(Path(sysconfig.get_paths()["platlib"]).rglob("*.so"))[:40]
    assert len(modules) > 5
    for path in modules:
        assert_same(path)


@pytest.mark.nvcc
def test_an_nvcc_built_library(compile_cu) -> None:
    assert_same(compile_cu("twin", ["arch=compute_90,code=sm_90", "arch=compute_80,code=compute_80"]))


@pytest.mark.slow
def test_the_real_wheel(real_build: Path) -> None:
    (wheel,) = sorted((real_build / "dist").glob("causal_conv1d-*.whl"))
    with unpacked(wheel) as root:
        elves = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)]
        assert elves
        for path in elves:
            assert_same(path)


TORCH_LIBS = ("libc10.so", "libc10_cuda.so", "libshm.so", "libtorch.so", "libgomp.so.1", "libtorch_python.so")


@pytest.mark.slow
def test_torchs_own_libraries() -> None:
    """torch 2.14.1's libraries from the builder's runtime (the same torch the verify gate imports next to)."""
    runtime = runtime_env(load_plan(ROOT / "matrix.yaml", "local").jobs[0], load_facts())
    lib = runtime.site_packages / "torch" / "lib"
    for name in TORCH_LIBS:
        assert_same(lib / name)
