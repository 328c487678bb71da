"""The one parser of GPU architecture spellings, used by the matrix, the torch facts, the recipes and the fatbin
reader."""

from __future__ import annotations

import pytest

from builder.plan.arch import Arch


@pytest.mark.parametrize(
    ("text", "kind", "sass", "number", "ptx", "plain"),
    [
        ("9.0", "cuda", "9.0", "90", False, True),
        ("9.0a", "cuda", "9.0a", "90a", False, False),
        ("10.0f", "cuda", "10.0f", "100f", False, False),
        ("12.0+PTX", "cuda", "12.0", "120", True, False),
        ("compute_90", "cuda", "9.0", "90", True, False),  # PTX only: no SASS
        ("compute_103a", "cuda", "10.3a", "103a", True, False),
        ("gfx942", "rocm", "gfx942", "", False, False),
    ],
)
def test_parse(text: str, kind: str, sass: str, number: str, ptx: bool, plain: bool) -> None:
    arch = Arch.parse(text)
    assert (arch.kind, arch.sass, arch.ptx, arch.plain) == (kind, sass, ptx, plain)
    assert str(arch) == text
    if kind == "cuda":
        assert arch.number == number


SPELLINGS = "is not a GPU architecture like '9.0', '9.0a', '12.0\\+PTX', 'compute_90' \\(PTX only\\) or 'gfx942'"


@pytest.mark.parametrize(
    "text", ["9", "sm_90", "9.0b", "9.0+ptx", "gfx", "GFX942", " 9.0", "compute_9", "compute_90+PTX"]
)
def test_anything_else_is_refused_with_the_spellings(text: str) -> None:
    with pytest.raises(ValueError, match=SPELLINGS):
        Arch.parse(text)


def test_archs_sort_numerically() -> None:
    archs = ["12.0", "9.0a", "10.0", "7.5", "9.0"]
    assert sorted(archs, key=lambda a: Arch.parse(a).sort_key) == ["7.5", "9.0", "9.0a", "10.0", "12.0"]


def test_ptx_only_has_no_sass() -> None:
    assert not Arch.parse("compute_120").has_sass
    assert Arch.parse("12.0+PTX").has_sass and Arch.parse("gfx942").has_sass
