"""Variant labels: pt{major}{minor}{accelerator}, a PEP 440 local version that parses back to one variant."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from builder.plan.accelerator import Accelerator, format_label, parse_label
from builder.plan.expand import Plan, load_plan
from builder.plan.facts import load_facts

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def release_plan() -> Plan:
    return load_plan(ROOT / "matrix.yaml", "release")


def test_every_release_job_label_round_trips(release_plan: Plan) -> None:
    for job in release_plan.jobs:
        assert job.label == format_label(job.torch, job.accelerator)
        assert parse_label(job.label) == (job.torch_minor, job.accelerator)


def test_every_release_job_label_is_a_pep440_local_version(release_plan: Plan) -> None:
    for job in release_plan.jobs:
        version = Version(f"1.0+{job.label}")
        assert version.local == job.label
        assert Version(job.local_version).local == job.label


def test_every_variant_torch_ever_built_round_trips() -> None:
    """Beyond the release profile: every (minor, accelerator) in the facts, ROCm 5.x and CUDA 13.2 included."""
    labels = set()
    for release in load_facts().releases:
        for accelerator in release.accelerators:
            label = format_label(release.latest, accelerator)
            assert parse_label(label) == (release.minor, accelerator)
            labels.add(label)
    assert len(labels) == sum(len(r.accelerators) for r in load_facts().releases)  # no two variants share a label


@pytest.mark.parametrize(
    ("torch", "accelerator", "label"),
    [
        ("2.14.1", "cu130", "pt214cu130"),
        ("2.4", "rocm6.1", "pt24rocm61"),
        ("2.6.0", "rocm6.2.4", "pt26rocm624"),
        ("2.10.0", "cu126", "pt210cu126"),
        ("2.1.2", "cu118", "pt21cu118"),
    ],
)
def test_known_labels(torch: str, accelerator: str, label: str) -> None:
    assert format_label(torch, Accelerator.parse(accelerator)) == label


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "pt214",
        "cu130",
        "pt214cu130+",
        "pt214cu130\n",
        " pt214cu130",
        "PT214CU130",
        "pt2014cu130",
        "pt0214cu130",
        "pt214cu0130",
        "pt214cu1300",
        "pt214rocm",
        "pt214rocm06",
        "pt214cpu",
        "pt214cu130.post1",
        "pt2.14cu130",
        "1.7.0+pt214cu130",
    ],
)
def test_parse_rejects_garbage(garbage: str) -> None:
    with pytest.raises(ValueError, match="is not a variant label"):
        parse_label(garbage)


def test_format_refuses_a_two_digit_torch_major() -> None:
    with pytest.raises(ValueError, match="one-digit major"):
        format_label("10.0", Accelerator.parse("cu130"))
