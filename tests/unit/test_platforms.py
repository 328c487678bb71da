"""The platform axis (issue 29): matrix.yaml's `platforms`, torch.toml's `aarch64` facts, job identifiers ending in
the platform, and the farm's rows and estimate per platform."""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path
from typing import Any

import pytest

from builder.core.errors import ConfigError, FactsError, PlanError
from builder.core.files import read_toml
from builder.core.resources import TORCH_FACTS
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.plan.estimate import by_platform, estimate, group_name, seed_model
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts, parse_facts
from builder.plan.shards import shard

ROOT = Path(__file__).resolve().parents[2]

MATRIX = """\
torch: ["2.14"]
accelerators: [cu130]
python: ["3.11"]
packages:
  - name: causal-conv1d
    versions:
      - version: 1.7.0
        sha256: 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b
    recipe:
      import_names: [causal_conv1d]
profiles:
  local: {}
  both:
    platforms: [x86_64, aarch64]
  old:
    torch: ["2.6"]
    accelerators: [cu124]
    platforms: [aarch64]
"""


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    return path


def test_a_profile_without_platforms_builds_x86_64_alone(matrix: Path) -> None:
    assert [job.identifier for job in load_plan(matrix).jobs] == ["causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"]


def test_each_platform_is_a_job_of_its_own_ending_in_the_platform(matrix: Path) -> None:
    jobs = load_plan(matrix, "both").jobs
    assert [job.identifier for job in jobs] == [
        "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64",
        "causal-conv1d-1.7.0+pt214cu130-cp311-aarch64",
    ]
    assert jobs[1].platform == "aarch64" and jobs[1].as_matrix_entry()["platform"] == "aarch64"
    assert jobs[0].label == jobs[1].label  # one variant, two platforms: the same pages serve both


def test_a_platform_no_torch_of_the_profile_shipped_is_an_error_at_its_line(matrix: Path) -> None:
    with pytest.raises(PlanError, match=r"matrix.yaml:18: profiles.old.platforms.0: no torch of profile 'old' has "
                                        r"aarch64 wheels: torch 2.6 has no aarch64 wheels for cu124"):
        load_plan(matrix, "old")


def test_an_unknown_platform_is_refused_by_name(matrix: Path) -> None:
    matrix.write_text(MATRIX + "  typo:\n    platforms: [arm64]\n")
    with pytest.raises(ConfigError, match=r"matrix.yaml:20: profiles.typo.platforms.0: platform 'arm64' is not one "
                                          r"wheelwright builds \(did you mean 'aarch64'\?\); known: x86_64, aarch64"):
        load_plan(matrix, "typo")


def test_the_release_plans_aarch64_only_where_torch_shipped_it() -> None:
    plan = load_plan(ROOT / "matrix.yaml", "release")
    facts = load_facts()
    arm = [job for job in plan.jobs if job.platform == "aarch64"]
    assert arm, "the release profile builds aarch64"
    for job in arm:
        release = facts.release(job.torch)
        assert job.accelerator.kind == "cuda" and job.accelerator.version in release.aarch64, job.identifier
    labels = {job.label for job in arm}
    assert "pt214cu130" in labels and "pt26cu124" not in labels and not any("rocm" in label for label in labels)
    dropped = {d.identifier: d.reason for d in plan.dropped}
    assert dropped["causal-conv1d-1.7.0+pt214rocm72-cp311-aarch64"].startswith("torch 2.14 has no aarch64 wheels")


def test_the_aarch64_profile_is_the_issues_acceptance() -> None:
    jobs = load_plan(ROOT / "matrix.yaml", "aarch64").jobs
    assert [job.identifier for job in jobs] == [  # with the x86_64 twins one index serves beside them
        "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64",
        "causal-conv1d-1.7.0+pt214cu130-cp311-aarch64",
        "mamba-ssm-2.3.2.post1+pt214cu130-cp311-x86_64",
        "mamba-ssm-2.3.2.post1+pt214cu130-cp311-aarch64",
    ]
    nine = (Arch.parse("9.0"),)
    assert all(job.torch == "2.14.1" and job.archs == nine and job.manylinux == "manylinux_2_28" for job in jobs)


def _raw() -> dict[str, Any]:
    return copy.deepcopy(read_toml(TORCH_FACTS, what="the torch facts", error=FactsError))


def test_the_facts_say_which_variants_ship_aarch64() -> None:
    facts = load_facts()
    cu130 = Accelerator.parse("cu130")
    assert facts.release("2.14").has_platform(cu130, "aarch64")
    assert facts.release("2.14").has_platform(cu130, "x86_64")
    assert not facts.release("2.6").has_platform(Accelerator.parse("cu124"), "aarch64")
    assert not facts.release("2.14").has_platform(Accelerator.parse("rocm7.2"), "aarch64")


def test_the_registrys_aarch64_wheel_is_a_variant_of_its_own() -> None:
    facts = load_facts()
    assert facts.release("2.14").registry_variant_for("aarch64") == Accelerator.parse("cu130")
    assert facts.release("2.9").registry_variant_for("aarch64") is None  # a CPU build; cu128 is PyTorch's index's
    assert facts.release("2.9").has_platform(Accelerator.parse("cu128"), "aarch64")


def test_pypi_aarch64_must_be_an_aarch64_variant() -> None:
    raw = _raw()
    next(r for r in raw["release"] if r["torch"] == "2.14")["pypi_aarch64"] = "12.9"
    with pytest.raises(FactsError, match=r"pypi_aarch64 12.9 is not one of its aarch64 variants"):
        parse_facts(raw, "torch.toml")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["12.9"], r"aarch64 lists CUDA 12.9, not one of its variants"),
        (["12.6", "13.2"], r"pypi_aarch64 13.0 is not one of its aarch64 variants"),
        (["13.0", "12.6"], r"aarch64 must be sorted ascending"),
        (["13"], r"aarch64 '13' is not a CUDA version"),
        ("13.0", r"aarch64: must be a list, got '13.0'"),
    ],
)
def test_bad_aarch64_facts_are_refused(value: object, message: str) -> None:
    raw = _raw()
    next(r for r in raw["release"] if r["torch"] == "2.14")["aarch64"] = value
    with pytest.raises(FactsError, match=message):
        parse_facts(raw, "torch.toml")


def test_aarch64_groups_run_natively_on_the_arm_runner_in_the_aarch64_image() -> None:
    jobs = load_plan(ROOT / "matrix.yaml", "release").jobs
    rows = [row for matrix in shard(jobs, seed_model())["matrices"] for row in matrix["include"]]
    for row in rows:
        members = row["jobs"].split()
        # the row's selector picks exactly its own jobs: never the other platform's of the same label
        assert [j.identifier for j in jobs if fnmatch.fnmatchcase(j.identifier, row["select"])] == members
        platform = row["platform"]
        assert all(member.endswith(f"-{platform}") for member in members)
        assert (row["runner"], row["base"]) == {
            "x86_64": ("ubuntu-latest", "manylinux_2_28"),
            "aarch64": ("ubuntu-24.04-arm", "manylinux_2_28_aarch64"),
        }[platform]
    assert {row["platform"] for row in rows} == {"x86_64", "aarch64"}


def test_the_estimate_prices_each_platform_and_they_add_up() -> None:
    jobs = load_plan(ROOT / "matrix.yaml", "release").jobs
    model = seed_model()
    whole, _ = estimate(jobs, model, runners=20, cores=4)
    parts = by_platform(jobs, model, runners=20, cores=4)
    assert list(parts) == ["x86_64", "aarch64"]
    assert sum(p.cpu_hours for p in parts.values()) == pytest.approx(whole.cpu_hours)
    assert len({group_name(j) for j in jobs}) == sum(len(p.items) for p in parts.values())


def test_the_variant_channels_twin_keeps_the_platform_tag() -> None:
    from builder.steps.variant import variant_filename

    arm = "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    twin = variant_filename(arm, "pt214cu130")
    assert twin == "causal_conv1d-1.7.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64-pt214cu130.whl"
    x86 = variant_filename(arm.replace("manylinux_2_17_aarch64.manylinux2014_aarch64", "linux_x86_64"), "pt214cu130")
    assert x86 != twin  # one label, two platforms: two twins, never one overwriting the other
