"""The fatbin reader on shared objects compiled by the real nvcc, cross-checked against the real cuobjdump."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.core.fatbin import FatbinContents, fatbin_archs
from builder.core.runner import run

from .conftest import CompileCu

pytestmark = pytest.mark.nvcc

_LISTED = re.compile(r"^(?P<kind>ELF|PTX) file\s+\d+: .*\.sm_(?P<sm>\d+)(?P<variant>[af]?)\.(?:cubin|ptx)$")


def cuobjdump_archs(cuobjdump: Path, library: Path) -> FatbinContents:
    """What cuobjdump lists, in the reader's spelling ("9.0", "9.0a")."""
    found: dict[str, set[str]] = {"ELF": set(), "PTX": set()}
    for option in ("--list-elf", "--list-ptx"):
        output = run([cuobjdump, option, library], step="cuobjdump", capture=True).output
        for match in map(_LISTED.match, output.splitlines()):
            if match:
                sm = int(match["sm"])
                found[match["kind"]].add(f"{sm // 10}.{sm % 10}{match['variant']}")
    return FatbinContents(sass=frozenset(found["ELF"]), ptx=frozenset(found["PTX"]))


CASES = {
    "sm90": (["arch=compute_90,code=sm_90"], FatbinContents(sass=frozenset({"9.0"}))),
    "sm75_sm90": (
        ["arch=compute_75,code=sm_75", "arch=compute_90,code=sm_90"],
        FatbinContents(sass=frozenset({"7.5", "9.0"})),
    ),
    "sm80_ptx80": (
        ["arch=compute_80,code=sm_80", "arch=compute_80,code=compute_80"],
        FatbinContents(sass=frozenset({"8.0"}), ptx=frozenset({"8.0"})),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_reader_reports_exactly_the_compiled_archs(name: str, compile_cu: CompileCu, cuobjdump: Path) -> None:
    gencodes, expected = CASES[name]
    library = compile_cu(name, gencodes)
    found = fatbin_archs(library)
    assert found == expected
    assert found == cuobjdump_archs(cuobjdump, library)
    assert not any(e.compressed for e in found.entries if e.kind == "sass")


def test_compress_all_entries_still_report_their_arch(compile_cu: CompileCu, cuobjdump: Path) -> None:
    gencodes = ["arch=compute_75,code=sm_75", "arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"]
    library = compile_cu("compressed", gencodes, "-Xfatbin", "-compress-all")
    found = fatbin_archs(library)
    assert found == FatbinContents(sass=frozenset({"7.5", "9.0"}), ptx=frozenset({"9.0"}))
    assert found == cuobjdump_archs(cuobjdump, library)
    assert found.entries and all(entry.compressed for entry in found.entries)


def test_speed_compression_mode_is_recognised(compile_cu: CompileCu) -> None:
    speed = ("-Xfatbin", "-compress-all", "-Xfatbin", "-compress-mode=speed")
    library = compile_cu("speed", ["arch=compute_90,code=sm_90"], *speed)
    found = fatbin_archs(library)
    assert found.sass == {"9.0"}
    assert all(entry.compressed for entry in found.entries)


def test_arch_and_family_specific_variants(compile_cu: CompileCu, cuobjdump: Path) -> None:
    gencodes = ["arch=compute_90a,code=sm_90a", "arch=compute_100f,code=sm_100f", "arch=compute_100a,code=compute_100a"]
    library = compile_cu("variants", gencodes)
    found = fatbin_archs(library)
    assert found == FatbinContents(sass=frozenset({"9.0a", "10.0f"}), ptx=frozenset({"10.0a"}))
    # cuobjdump names family-specific cubins by their base arch (sm_100), so compare without the "f"
    listed = cuobjdump_archs(cuobjdump, library)
    assert {arch.removesuffix("f") for arch in found.sass} == listed.sass
    assert found.ptx == listed.ptx


def test_host_only_shared_object_has_no_gpu_code(tmp_path: Path) -> None:
    source = tmp_path / "host.c"
    source.write_text("int answer() { return 42; }\n")
    output = tmp_path / "host.so"
    run(["cc", "-shared", "-fPIC", source, "-o", output], step="cc host")
    assert fatbin_archs(output).empty
