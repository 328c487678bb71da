"""The platform proven from the bytes (issue 29): e_machine of every ELF file, the extension suffix of the target's
CPython, the PT_LOAD alignment a 64 KiB-page ARM kernel needs; and the platform facts those checks read."""

from __future__ import annotations

import dataclasses
import io
from types import MappingProxyType

import pytest

from builder.core.elfread import ElfFile
from builder.core.errors import ConfigError, WheelError
from builder.core.fatbin import FatbinContents
from builder.steps.elf import ElfFacts
from builder.steps.platform import Cross, load_platforms, parse_platforms
from builder.steps.programs.objcache import cache_key
from builder.steps.verify import WheelFacts, check_elf_machine, check_extension_suffix, check_load_alignment
from tests.jobs import local_job
from tests.synth import elf_with_segments

ARM = dataclasses.replace(local_job(), platform="aarch64")
X86 = local_job()
ARM_SO = "causal_conv1d_cuda.cpython-311-aarch64-linux-gnu.so"
X86_SO = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"


def elf(path: str, machine: str, alignments: tuple[int, ...] = (0x10000, 0x10000)) -> ElfFacts:
    return ElfFacts(path=path, needed=("libc.so.6",), symbol_versions=MappingProxyType({}),
                    gpu=FatbinContents(sass=frozenset({"9.0"})), machine=machine, load_alignments=alignments)


def wheel(*elves: ElfFacts) -> WheelFacts:
    return WheelFacts(filename="causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_aarch64.whl",
                      metadata="", files=tuple(e.path for e in elves), elves=elves)


def test_an_aarch64_wheel_of_aarch64_files_passes_every_platform_check() -> None:
    facts = wheel(elf(ARM_SO, "aarch64"), elf("causal_conv1d.libs/libfoo.so.1", "aarch64"))
    for check in (check_elf_machine(facts, ARM), check_extension_suffix(facts, ARM), check_load_alignment(facts, ARM)):
        assert check.ok and not check.skipped, check


def test_an_x86_64_so_planted_in_an_aarch64_wheel_is_refused_by_name() -> None:
    # state-spaces/mamba#891: the filename says aarch64, the bytes say x86_64
    planted = elf("selective_scan_cuda.cpython-311-aarch64-linux-gnu.so", "x86_64", (0x1000,))
    check = check_elf_machine(wheel(elf(ARM_SO, "aarch64"), planted), ARM)
    assert not check.ok
    assert check.detail.startswith("selective_scan_cuda.cpython-311-aarch64-linux-gnu.so is x86_64")
    assert ARM_SO not in check.detail


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        (ARM_SO, True),
        (X86_SO, False),                                               # what setup.py on x86 names it
        ("causal_conv1d_cuda.cpython-312-aarch64-linux-gnu.so", False),  # another Python's
        ("causal_conv1d_cuda.cpython-311-aarch64-linux-musl.so", False),
    ],
)
def test_the_extension_suffix_is_the_targets(name: str, ok: bool) -> None:
    check = check_extension_suffix(wheel(elf(name, "aarch64")), ARM)
    assert check.ok is ok
    if not ok:
        assert check.detail == f"{name}: CPython 3.11 on aarch64 imports *.cpython-311-aarch64-linux-gnu.so"


def test_a_library_without_an_extension_suffix_is_not_judged_by_it() -> None:
    check = check_extension_suffix(wheel(elf("causal_conv1d.libs/libgomp.so.1", "aarch64")), ARM)
    assert check.skipped


@pytest.mark.parametrize(
    ("alignments", "ok"),
    [
        ((0x10000, 0x10000), True),
        ((0x20000,), True),         # more than a page is fine
        ((0x10000, 0x1000), False),  # one 4 KiB-aligned segment is enough to fail on a 64 KiB kernel
        ((0x18000,), False),         # not a multiple of the page
        ((), True),                 # no PT_LOAD: nothing to map
    ],
)
def test_every_load_segment_is_aligned_to_64_kib_on_aarch64(alignments: tuple[int, ...], ok: bool) -> None:
    check = check_load_alignment(wheel(elf(ARM_SO, "aarch64", alignments)), ARM)
    assert check.ok is ok, check.detail
    if not ok:
        assert check.detail.startswith(f"PT_LOAD segments aligned below 0x10000: {ARM_SO} (")


def test_x86_64_asks_for_4_kib_pages_only() -> None:
    assert check_load_alignment(wheel(elf(X86_SO, "x86_64", (0x1000,))), X86).ok
    assert not check_elf_machine(wheel(elf(X86_SO, "aarch64")), X86).ok


@pytest.mark.parametrize(
    ("machine", "alignments", "name"),
    [(183, (0x10000, 0x10000), "aarch64"), (62, (0x1000,), "x86_64"), (40, (0x10000,), "e_machine 40")],
)
def test_the_stdlib_reader_reads_machine_and_alignment(machine: int, alignments: tuple[int, ...], name: str) -> None:
    reader = ElfFile(io.BytesIO(elf_with_segments(machine, alignments)), where="x.so")
    assert reader.machine == name
    assert reader.load_alignments() == alignments


def test_only_load_segments_count() -> None:
    reader = ElfFile(io.BytesIO(elf_with_segments(183, (0x8, 0x8), loads=False)), where="x.so")
    assert reader.load_alignments() == ()


def test_a_truncated_program_header_table_is_a_wheel_error() -> None:
    data = elf_with_segments(183, (0x10000, 0x10000))[:-10]
    with pytest.raises(WheelError, match=r"x.so: not a readable ELF file \(112 bytes at offset 64 run past"):
        ElfFile(io.BytesIO(data), where="x.so").load_alignments()


def test_the_platform_facts_describe_each_platform_the_plan_knows() -> None:
    platforms = load_platforms()
    assert platforms["aarch64"].extension_suffix("3.11") == ".cpython-311-aarch64-linux-gnu.so"
    assert (platforms["aarch64"].elf_machine, platforms["aarch64"].page_size) == (183, 65536)
    cross = platforms["aarch64"].cross
    assert isinstance(cross, Cross) and platforms["x86_64"].cross is None
    assert cross.wheel_platforms("aarch64")[:2] == ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64")
    assert cross.wheel_platforms("aarch64")[-1] == "manylinux2014_aarch64"
    assert cross.packages_for("3.11") == ("python3.11", "libpython3.11-dev")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw["platform"].pop("aarch64"), r"must describe exactly x86_64, aarch64"),
        (lambda raw: raw["platform"]["aarch64"].__setitem__("page_size", 60000),
         r"\[platform\.aarch64\] page_size: 60000 is not a power of two"),
        (lambda raw: raw["platform"]["aarch64"]["cross"].pop("qemu"),
         r"\[platform\.aarch64\.cross\] missing key 'qemu'"),
        (lambda raw: raw["platform"]["aarch64"]["cross"].__setitem__("glibc", "2"),
         r"\[platform\.aarch64\.cross\] glibc: '2' is not a version"),
    ],
)
def test_bad_platform_facts_are_refused(change, message: str) -> None:
    import copy

    from builder.core.files import read_toml
    from builder.core.resources import PLATFORM_FACTS

    raw = copy.deepcopy(read_toml(PLATFORM_FACTS, what="the platform facts"))
    change(raw)
    with pytest.raises(ConfigError, match=message):
        parse_platforms(raw, "platforms.toml")


def test_an_objects_key_holds_its_platform() -> None:
    same = ("command-digest", "source-digest", "nvcc-digest")
    assert cache_key(same[0], "x86_64", *same[1:]) != cache_key(same[0], "aarch64", *same[1:])
