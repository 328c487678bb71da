"""The project's one wheel-filename type, on packaging's parser, with the parts as written kept beside it."""

from __future__ import annotations

import pytest
from packaging.tags import Tag

from builder.core.wheelname import InvalidWheelFilename, WheelFilename


def test_a_labelled_wheel() -> None:
    name = WheelFilename.parse("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl")
    assert (name.dist, name.name, name.version_text, name.label) == (
        "causal_conv1d", "causal-conv1d", "1.7.0+pt214cu130", "pt214cu130")
    assert name.tags == frozenset({Tag("cp311", "cp311", "manylinux_2_28_x86_64")})
    assert name.platforms == frozenset({"manylinux_2_28_x86_64"}) and name.variant is None


def test_compressed_tags_and_a_build_tag() -> None:
    name = WheelFilename.parse("pkg-1.0-2-cp310.cp311-abi3-linux_x86_64.whl")
    assert name.build == (2, "") and name.python_tag == "cp310.cp311" and len(name.tags) == 2


@pytest.mark.parametrize("filename", ["pkg-1.0.tar.gz", "pkg-cp311-cp311-linux_x86_64.whl", "pkg-1.x-py3-none-any.whl"])
def test_not_a_wheel_filename(filename: str) -> None:
    with pytest.raises(InvalidWheelFilename):
        WheelFilename.parse(filename)
