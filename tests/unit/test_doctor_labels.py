"""doctor's standard-library names agree with the builder's: labels with builder.plan.accelerator, the packages and
their extension modules with matrix.yaml, wheel tags with packaging; and the GPU code compatibility rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from builder.doctor.labels import (
    PACKAGES,
    highest,
    our_label,
    parse_variant,
    parse_wheel,
    platform_fits,
    ptx_covers,
    sass_runs,
    wheel_fits,
)
from builder.plan.accelerator import parse_label
from builder.plan.expand import load_plan

ROOT = Path(__file__).resolve().parents[2]


def test_every_label_of_the_release_plan_reads_the_same_as_the_builder_reads_it() -> None:
    jobs = load_plan(ROOT / "matrix.yaml", "release").jobs
    labels = {job.label: job for job in jobs}
    assert len(labels) > 10
    for label, job in labels.items():
        variant = parse_variant(label)
        torch, accelerator = parse_label(label)
        assert (variant.torch, variant.accelerator) == (torch, accelerator.name), label
        if accelerator.kind == "cuda":
            assert variant.cuda == accelerator.version
            assert our_label(job.torch + "+" + accelerator.name, accelerator.version, None) == label


def test_upstream_release_labels_carry_torch_cuda_major_and_abi() -> None:
    variant = parse_variant("cu12torch2.4cxx11abiFALSE")
    assert (variant.torch, variant.cuda, variant.cxx11_abi) == ("2.4", "12", False)
    assert parse_variant("cu12torch2.6cxx11abiTRUE").cxx11_abi is True
    assert parse_variant("local") is None and parse_variant("") is None


def test_the_packages_and_modules_are_the_matrixs_import_names() -> None:
    matrix = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    compiled = {
        p["name"]: tuple(n for n in p["recipe"]["import_names"] if n.endswith("_cuda")) for p in matrix["packages"]
    }
    assert compiled == PACKAGES


@pytest.mark.parametrize(
    ("platform", "glibc", "fits"),
    [
        ("manylinux_2_28_x86_64", "2.28", True),
        ("manylinux_2_28_x86_64", "2.27", False),
        ("manylinux2014_x86_64", "2.17", True),
        ("manylinux_2_28_aarch64", "2.36", False),
        ("linux_x86_64", "2.36", True),
        ("manylinux_2_34_x86_64", None, False),
    ],
)
def test_platform_tags_against_this_glibc(platform: str, glibc: str | None, fits: bool) -> None:
    assert platform_fits(platform, machine="x86_64", glibc=glibc) is fits


def test_wheel_filenames_and_python_tags() -> None:
    wheel = parse_wheel("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl")
    assert (wheel.project, wheel.version) == ("causal-conv1d", "1.7.0+pt214cu130")
    assert wheel_fits(wheel, python_tag="cp311", machine="x86_64", glibc="2.27")
    assert not wheel_fits(wheel, python_tag="cp312", machine="x86_64", glibc="2.36")
    abi3 = parse_wheel("x-1.0-cp39-abi3-manylinux_2_28_x86_64.whl")
    assert wheel_fits(abi3, python_tag="cp312", machine="x86_64", glibc="2.28")
    assert parse_wheel("not-a-wheel.tar.gz") is None


def test_free_threaded_wheels_fit_only_free_threaded_interpreters() -> None:
    free_threaded = parse_wheel("causal_conv1d-1.7.0+pt214cu130-cp314-cp314t-manylinux_2_28_x86_64.whl")
    ordinary = parse_wheel("causal_conv1d-1.7.0+pt214cu130-cp314-cp314-manylinux_2_28_x86_64.whl")
    assert free_threaded is not None and ordinary is not None
    assert wheel_fits(free_threaded, python_tag="cp314t", machine="x86_64", glibc="2.36")
    assert not wheel_fits(free_threaded, python_tag="cp314", machine="x86_64", glibc="2.36")
    assert not wheel_fits(ordinary, python_tag="cp314t", machine="x86_64", glibc="2.36")
    assert wheel_fits(ordinary, python_tag="cp314", machine="x86_64", glibc="2.36")


@pytest.mark.parametrize(
    ("sass", "gpu", "runs"),
    [
        ("9.0", "9.0", True),
        ("8.0", "8.6", True),
        ("8.6", "8.0", False),
        ("8.0", "9.0", False),
        ("9.0a", "9.0", True),
        ("10.0a", "10.3", False),
        ("10.0f", "10.3", True),
        ("12.0", "10.0", False),
    ],
)
def test_sass_runs_on_the_same_major_at_an_equal_or_higher_minor(sass: str, gpu: str, runs: bool) -> None:
    assert sass_runs(sass, gpu) is runs


def test_ptx_jits_forward_only_and_not_from_arch_specific_ptx() -> None:
    assert ptx_covers("8.0", "9.0") and ptx_covers("9.0", "12.0")
    assert not ptx_covers("10.0", "9.0") and not ptx_covers("9.0a", "9.0")


def test_highest_compares_numbers_not_text() -> None:
    versions = frozenset({"GLIBC_2.2.5", "GLIBC_2.17", "GLIBC_2.9", "GLIBC_PRIVATE", "GLIBCXX_3.4.30"})
    assert highest(versions, "GLIBC_") == "2.17"
    assert highest(versions, "GLIBCXX_") == "3.4.30"
    assert highest(frozenset(), "CXXABI_") is None
