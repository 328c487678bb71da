"""The standard-library ELF reader's refusals: each names the file and says what is wrong, as one WheelError.
(tests/integration/test_elfread_twin.py holds it to pyelftools and auditwheel on real files.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.elfread import read_linkage
from builder.core.errors import WheelError
from tests.synth import elf_with_sections


def test_sections_without_dynamic_linking_read_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "plain.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 16}))
    linkage = read_linkage(path)
    assert (linkage.needed, linkage.version_needs, linkage.version_definitions, linkage.dynamic_symbols) == (
        (),
        {},
        frozenset(),
        (),
    )


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not an ELF file", "no ELF magic"),
        (b"\x7fELF\x01\x01" + b"\0" * 60, "only 64-bit little-endian ELF files are read"),
    ],
)
def test_what_is_not_a_64_bit_elf_file(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "x.so"
    path.write_bytes(content)
    with pytest.raises(WheelError, match=f"x.so: not a readable ELF file \\({why}\\)"):
        read_linkage(path)


def test_a_truncated_file_says_where_it_ends(tmp_path: Path) -> None:
    path = tmp_path / "cut.so"
    path.write_bytes(elf_with_sections({".text": b"\x90" * 16})[:80])
    with pytest.raises(WheelError, match="cut.so: not a readable ELF file .*run past the end of the file"):
        read_linkage(path)
