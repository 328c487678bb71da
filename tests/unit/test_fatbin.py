"""The fatbin reader on hand-built containers: kinds, archs and their variants, compression, and malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.errors import WheelError
from builder.core.fatbin import FatbinContents, arch_key, arch_name, fatbin_archs, parse_fatbin
from tests.synth import (
    ARCH_SPECIFIC,
    COMPRESSED_DEFAULT,
    COMPRESSED_SPEED,
    FAMILY_SPECIFIC,
    FLAGS_64BIT_LINUX,
    PTX,
    SASS,
    elf_with_sections,
    fatbin_container,
    fatbin_entry,
)


def contents(data: bytes) -> FatbinContents:
    return FatbinContents.from_entries(parse_fatbin(data, where="test"))


def test_single_sass_entry() -> None:
    assert contents(fatbin_container(fatbin_entry(SASS, 90))) == FatbinContents(sass=frozenset({"9.0"}))


def test_sass_and_ptx_are_told_apart() -> None:
    data = fatbin_container(fatbin_entry(SASS, 80), fatbin_entry(PTX, 80), fatbin_entry(SASS, 75))
    found = contents(data)
    assert found.sass == {"7.5", "8.0"}
    assert found.ptx == {"8.0"}
    assert [e.kind for e in found.entries] == ["sass", "ptx", "sass"]
    assert found.entries[1].version == (9, 0)
    assert found.entries[0].version == (1, 8)


def test_several_containers_with_alignment_padding_between_and_after() -> None:
    first = fatbin_container(fatbin_entry(SASS, 75, payload=b"x" * 5))
    first += b"\0" * (-len(first) % 8)
    second = fatbin_container(fatbin_entry(SASS, 90), fatbin_entry(PTX, 90))
    found = contents(first + second + b"\0" * 16)
    assert (found.sass, found.ptx) == ({"7.5", "9.0"}, {"9.0"})
    assert len(found.entries) == 3


def test_containers_padded_to_256_bytes_as_an_aarch64_link_lays_them() -> None:
    # causal-conv1d cross-built for aarch64: four objects' sections, each aligned to 256 in .nv_fatbin
    first = fatbin_container(fatbin_entry(SASS, 90, payload=b"x" * 40))
    first += b"\0" * (-len(first) % 256)
    second = fatbin_container(fatbin_entry(SASS, 90))
    found = contents(first + second + b"\0" * 200)
    assert (found.sass, len(found.entries)) == ({"9.0"}, 2)


def test_garbage_after_zero_padding_still_names_its_offset() -> None:
    data = fatbin_container(fatbin_entry(SASS, 90)) + b"\0" * 8 + b"\x01\x02\x03\x04" + b"\0" * 12
    with pytest.raises(WheelError, match=r"no fatbin magic at offset 112"):
        parse_fatbin(data, where="x.so .nv_fatbin")


def test_empty_container_is_allowed() -> None:
    # nvcc emits an empty device-link container when only PTX is requested
    data = fatbin_container() + fatbin_container(fatbin_entry(PTX, 90))
    assert contents(data) == FatbinContents(ptx=frozenset({"9.0"}))


@pytest.mark.parametrize("flag", [COMPRESSED_DEFAULT, COMPRESSED_SPEED])
def test_compressed_entries_still_report_their_arch(flag: int) -> None:
    data = fatbin_container(fatbin_entry(SASS, 90, flags=FLAGS_64BIT_LINUX | flag, compressed=True))
    (entry,) = contents(data).entries
    assert (entry.arch, entry.compressed) == ("9.0", True)


def test_plain_entries_are_not_compressed() -> None:
    (entry,) = contents(fatbin_container(fatbin_entry(SASS, 90))).entries
    assert entry.compressed is False


def test_arch_and_family_variants() -> None:
    data = fatbin_container(
        fatbin_entry(SASS, 90, flags=FLAGS_64BIT_LINUX | ARCH_SPECIFIC),
        fatbin_entry(SASS, 100, flags=FLAGS_64BIT_LINUX | FAMILY_SPECIFIC, extra_header=b"\x48\0\0\0\x10" + b"\0" * 27),
        fatbin_entry(PTX, 120, flags=FLAGS_64BIT_LINUX | ARCH_SPECIFIC),
    )
    found = contents(data)
    assert found.sass == {"9.0a", "10.0f"}
    assert found.ptx == {"12.0a"}


def test_entry_with_longer_header_is_skipped_correctly() -> None:
    data = fatbin_container(fatbin_entry(SASS, 100, extra_header=b"\x01" * 48), fatbin_entry(SASS, 120))
    assert contents(data).sass == {"10.0", "12.0"}


def test_unknown_kind_is_listed_as_other() -> None:
    found = contents(fatbin_container(fatbin_entry(4, 90), fatbin_entry(SASS, 90)))
    assert found.sass == {"9.0"} and not found.ptx
    assert [(e.kind, e.kind_code) for e in found.entries] == [("other", 4), ("sass", 2)]


def test_arch_names_and_order() -> None:
    assert arch_name(75, 0) == "7.5"
    assert arch_name(103, FAMILY_SPECIFIC) == "10.3f"
    assert sorted(["12.0", "9.0a", "10.0", "9.0", "7.5"], key=arch_key) == ["7.5", "9.0", "9.0a", "10.0", "12.0"]


def test_describe() -> None:
    found = contents(fatbin_container(fatbin_entry(SASS, 100), fatbin_entry(SASS, 90), fatbin_entry(PTX, 90)))
    assert found.describe() == "SASS 9.0, 10.0; PTX 9.0"
    assert FatbinContents().describe() == "no GPU code"


def test_bad_magic_names_the_offset() -> None:
    data = fatbin_container(fatbin_entry(SASS, 90)) + b"\x01\x02\x03\x04" + b"\0" * 12
    with pytest.raises(WheelError, match=r"no fatbin magic at offset 104"):
        parse_fatbin(data, where="x.so .nv_fatbin")


def test_container_size_beyond_the_section() -> None:
    data = fatbin_container(fatbin_entry(SASS, 90))[:-8]
    with pytest.raises(WheelError, match="claims 88 bytes; only 80 follow"):
        parse_fatbin(data, where="x.so")


def test_entry_overrunning_its_container() -> None:
    entry = fatbin_entry(SASS, 90)
    body = entry[:8] + (4096).to_bytes(8, "little") + entry[16:]
    with pytest.raises(WheelError, match="overruns its container"):
        parse_fatbin(fatbin_container(body), where="x.so")


def test_truncated_entry_header() -> None:
    with pytest.raises(WheelError, match="truncated fatbin entry header"):
        parse_fatbin(fatbin_container(b"\x02\0" * 10), where="x.so")


def test_reads_the_section_of_an_elf_file(tmp_path: Path) -> None:
    fatbin = fatbin_container(fatbin_entry(SASS, 80), fatbin_entry(PTX, 80))
    path = tmp_path / "kernels.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 16, ".nv_fatbin": fatbin}))
    assert fatbin_archs(path) == FatbinContents(sass=frozenset({"8.0"}), ptx=frozenset({"8.0"}))


def test_elf_without_the_section_has_no_gpu_code(tmp_path: Path) -> None:
    path = tmp_path / "plain.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 16}))
    assert fatbin_archs(path).empty


def test_not_an_elf_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.so"
    path.write_text("not an ELF")
    with pytest.raises(WheelError, match="notes.so: not a readable ELF file"):
        fatbin_archs(path)


def test_arch_order_is_the_plans() -> None:
    """core's reader sorts archs itself (it may not import the plan); the order must be builder.plan.arch's."""
    from builder.plan.arch import Arch

    archs = ["12.0f", "9.0", "10.0a", "7.5", "10.0", "8.6", "12.0", "9.0a", "10.3f"]
    assert sorted(archs, key=arch_key) == sorted(archs, key=lambda a: Arch.parse(a).sort_key)
