"""Wheel names and core metadata: what the index accepts, and hostile input it refuses before it reaches a page."""

from __future__ import annotations

from pathlib import Path

import pytest

from index_site import layout
from index_site.landing import python_key
from index_site.wheels import (
    RejectedWheel,
    accepted_names,
    check_core_metadata,
    parse_wheel_name,
    read_core_metadata,
)
from scripts.bench.wheels import WheelSpec, make_wheel, metadata_text


def test_parses_a_labelled_wheel_name() -> None:
    name = parse_wheel_name("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl")
    assert (name.project, name.version, name.public_version, name.label) == (
        "causal-conv1d",
        "1.7.0+pt214cu130",
        "1.7.0",
        "pt214cu130",
    )
    assert (name.torch, name.accelerator.name, name.pythons) == ("2.14", "cu130", ("3.11",))


def test_rocm_labels_and_compressed_python_tags() -> None:
    name = parse_wheel_name("mamba_ssm-2.3.2.post1+pt24rocm61-cp310.cp311-abi3-manylinux_2_28_x86_64.whl")
    assert (name.torch, name.accelerator.name, name.pythons) == ("2.4", "rocm6.1", ("3.10", "3.11"))


def test_an_accepted_name_split_again_is_the_name_parse_wheel_name_made() -> None:
    """accepted_names (what a re-index takes from the state's verdicts) against the full parse, field by field."""
    names = [
        "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl",
        "mamba_ssm-2.3.2.post1+pt24rocm61-cp310.cp311-abi3-manylinux_2_28_x86_64.whl",
        "causal_conv1d-1.7.0+pt214cu130-1-cp313-cp313t-manylinux_2_28_aarch64.whl",  # a build tag
        "causal_conv1d-1.7.0+pt214cu126-cp311-cp311-linux_x86_64.whl",
    ]
    assert accepted_names(names) == [parse_wheel_name(name) for name in names]


def test_a_free_threaded_wheel_is_a_python_of_its_own() -> None:
    name = parse_wheel_name("causal_conv1d-1.7.0+pt214cu130-cp314-cp314t-manylinux_2_28_x86_64.whl")
    assert (name.python_tag, name.abi_tag, name.pythons) == ("cp314", "cp314t", ("3.14t",))
    assert layout.setup_path(name.label, name.pythons[0]) == "select/pt214cu130-cp314t.html"
    assert sorted(["3.14t", "3.15", "3.14", "3"], key=python_key) == ["3", "3.14", "3.14t", "3.15"]


@pytest.mark.parametrize(
    ("filename", "why"),
    [
        ("evil<script>alert(1)</script>-1.0+pt214cu130-cp311-cp311-linux_x86_64.whl", "not a wheel filename"),
        ('causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_"onmouseover=x.whl', "not a wheel filename"),
        ("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux'x86.whl", "not a wheel filename"),
        ("..%2F..%2Fetc-1.0+pt214cu130-cp311-cp311-linux_x86_64.whl", "not a wheel filename"),
        ("../causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl", "not a wheel filename"),
        ("Causal_Conv1D-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl", "not normalised"),
        ("causal_conv1d-1.7.0+PT214CU130-cp311-cp311-linux_x86_64.whl", "not normalised"),
        ("causal_conv1d-1.7-0+pt214cu130-cp311-cp311-linux_x86_64.whl", "not a wheel filename"),
        ("causal_conv1d-1.7.0-cp311-cp311-linux_x86_64.whl", "no variant label"),
        ("causal_conv1d-1.7.0+cpu-cp311-cp311-linux_x86_64.whl", "not a variant label"),
        ("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-Linux_X86_64.whl", "not a wheel filename"),
    ],
)
def test_refuses_unsafe_or_unlabelled_names(filename: str, why: str) -> None:
    with pytest.raises(RejectedWheel, match=why):
        parse_wheel_name(filename)


def test_core_metadata_round_trip(tmp_path: Path) -> None:
    spec = WheelSpec(requires_python="<4,>=3.9")
    path = make_wheel(tmp_path, spec)
    name = parse_wheel_name(path.name)
    data = read_core_metadata(path, name)
    assert data == metadata_text(spec).encode()
    metadata = check_core_metadata(data, name)
    assert metadata.requires_python == "<4,>=3.9"
    assert metadata.size == len(data)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (WheelSpec(metadata_name="other-package"), "METADATA names project"),
        (WheelSpec(metadata_name="../../etc"), "METADATA names project"),
        (WheelSpec(requires_python='>=3.9"><script>alert(1)</script>'), "not a version specifier"),
    ],
)
def test_refuses_metadata_that_disagrees_or_is_hostile(tmp_path: Path, spec: WheelSpec, why: str) -> None:
    path = make_wheel(tmp_path, spec)
    name = parse_wheel_name(path.name)
    with pytest.raises(RejectedWheel, match=why):
        check_core_metadata(read_core_metadata(path, name), name)


def test_refuses_a_file_that_is_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(b"<html>not a wheel</html>")
    with pytest.raises(RejectedWheel, match="cannot read the wheel"):
        read_core_metadata(path, parse_wheel_name(path.name))
