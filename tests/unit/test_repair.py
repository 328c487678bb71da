"""The repair decision without any ELF: the exclude list's invariants, the plan's tag, excludes, bundles and
warnings, and how recorded ELF edits become patchelf arguments."""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType

import pytest
from auditwheel.patcher import ElfUpdateInfo

from builder.core.errors import ConfigError, WheelError
from builder.steps.repair import (
    AbiFacts,
    Excludes,
    RunnerPatchelf,
    load_excludes,
    manylinux_policies,
    parse_excludes,
    patchelf_arguments,
    plan_repair,
)
from tests.jobs import local_job, rocm_job

POLICIES = manylinux_policies("x86_64")
WHEEL = "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-linux_x86_64.whl"
EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"


def facts(best: str = "manylinux_2_28_x86_64", *, needed: tuple[str, ...] = ("libc10.so", "libc.so.6"),
          grafts: dict[str, str | None] | None = None, capped_by: str = "symbol versions") -> AbiFacts:
    limits = {why: "manylinux_2_41_x86_64" for why in ("symbol versions", "blacklisted symbols", "instruction set")}
    limits[capped_by] = best
    return AbiFacts(
        wheel=WHEEL,
        needed=MappingProxyType({EXTENSION: needed}),
        best=best,
        limits=MappingProxyType(limits),
        grafts=MappingProxyType({best: MappingProxyType(grafts or {})}),
    )


# --- builder/data/repair.toml ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("soname", "kind", "pattern"),
    [
        ("libtorch.so", "cuda", "libtorch*.so*"),
        ("libtorch_cuda.so", "cuda", "libtorch*.so*"),
        ("libtorch_python.so", "rocm", "libtorch*.so*"),
        ("libc10.so", "cuda", "libc10*.so*"),
        ("libc10_cuda.so", "cuda", "libc10*.so*"),
        ("libcudart.so.13", "cuda", "libcudart.so*"),
        ("libcuda.so.1", "cuda", "libcuda.so*"),
        ("libnvrtc.so.13", "cuda", "libnvrtc*.so*"),
        ("libcublasLt.so.13", "cuda", "libcublas*.so*"),
        ("libcudnn.so.9", "cuda", "libcudnn*.so*"),
        ("libamdhip64.so.6", "rocm", "libamdhip64.so*"),
        ("libhiprtc.so.6", "rocm", "libhiprtc*.so*"),
    ],
)
def test_shipped_excludes_cover_what_torch_provides(soname: str, kind: str, pattern: str) -> None:
    assert load_excludes().match(soname, kind) == pattern


@pytest.mark.parametrize(
    ("soname", "kind"),
    [("libcudart.so.13", "rocm"), ("libamdhip64.so.6", "cuda"), ("libgomp.so.1", "cuda"), ("libstdc++.so.6", "cuda")],
)
def test_shipped_excludes_leave_the_rest_alone(soname: str, kind: str) -> None:
    assert load_excludes().match(soname, kind) is None


def raw(**groups: list[object]) -> dict:
    base: dict[str, list[object]] = {"torch": ["libtorch*.so*"], "cuda": ["libcudart.so*"], "rocm": ["libamdhip64.so*"]}
    return {"exclude": {**base, **groups}}


def test_parse_keeps_groups_in_order() -> None:
    excludes = parse_excludes(raw(), "t.toml")
    assert excludes.patterns("cuda") == ("libtorch*.so*", "libcudart.so*")
    assert excludes.patterns("rocm") == ("libtorch*.so*", "libamdhip64.so*")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({}, r"t.toml: no \[exclude\] table"),
        ({"exclude": {"torch": ["libtorch*.so*"], "cuda": ["libcudart.so*"]}}, r"missing: \['rocm'\]"),
        ({"exclude": {**raw()["exclude"], "xpu": ["libsycl.so*"]}}, r"unknown: \['xpu'\]"),
        (raw(rocm=[]), r"\[exclude\] rocm is empty"),
        (raw(cuda=["cudart.so"]), r"'cudart.so' is not a soname pattern"),
        (raw(cuda=[7]), r"7 is not a soname pattern"),
        (raw(cuda=["libtorch*.so*"]), r"\[exclude\] cuda: 'libtorch\*.so\*' is listed twice"),
        (raw(cuda=["libstdc++.so*"]), r"matches libstdc\+\+.so.6, which manylinux already allows"),
        (raw(torch=["lib*.so*"]), r"'lib\*.so\*' matches .*libc.so.6"),
    ],
)
def test_parse_rejects_broken_exclude_lists(document: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_excludes(document, "t.toml")


def test_load_reports_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "repair.toml"
    path.write_text("[exclude\n")
    with pytest.raises(ConfigError, match="repair.toml"):
        load_excludes(path)


# --- the plan ------------------------------------------------------------------------------------------------------


EXCLUDES = parse_excludes(raw(torch=["libtorch*.so*", "libc10*.so*"]), "repair.toml")


def test_plan_tags_the_best_policy_and_records_excludes() -> None:
    plan = plan_repair(facts("manylinux_2_28_x86_64"), local_job(), EXCLUDES, POLICIES)
    assert (plan.policy, plan.target, plan.tags) == ("manylinux_2_28_x86_64",) * 2 + (("manylinux_2_28_x86_64",),)
    assert dict(plan.excluded) == {"libc10.so": "libc10*.so*"}
    assert dict(plan.bundled) == {}
    assert plan.reaches_target and plan.warnings == ()


def test_plan_writes_the_policy_aliases_too() -> None:
    plan = plan_repair(facts("manylinux_2_17_x86_64"), local_job(), EXCLUDES, POLICIES)
    assert plan.tags == ("manylinux_2_17_x86_64", "manylinux2014_x86_64")
    assert plan.reaches_target  # older than the target installs on more systems: fine


def test_newer_than_target_is_a_warning_naming_both_policies() -> None:
    plan = plan_repair(facts("manylinux_2_36_x86_64"), local_job(), EXCLUDES, POLICIES)
    assert plan.policy == "manylinux_2_36_x86_64"
    assert plan.target == "manylinux_2_28_x86_64"
    assert not plan.reaches_target
    (warning,) = plan.warnings
    assert "manylinux_2_36_x86_64, newer than the target manylinux_2_28_x86_64" in warning
    assert "held back by symbol versions" in warning
    assert "manylinux_2_28 image" in warning


def test_target_alias_from_torch_facts_is_understood() -> None:
    plan = plan_repair(facts("manylinux_2_28_x86_64"), local_job(manylinux="manylinux2014"), EXCLUDES, POLICIES)
    assert plan.target == "manylinux_2_17_x86_64"
    assert plan.warnings


def test_unknown_target_names_the_job() -> None:
    job = local_job(manylinux="manylinux_9_99")
    with pytest.raises(WheelError, match=re.escape(f"{job.identifier}: manylinux 'manylinux_9_99' is not a policy")):
        plan_repair(facts(), job, EXCLUDES, POLICIES)


def test_libraries_to_graft_are_bundled_from_where_they_were_found() -> None:
    gomp = {"libgomp.so.1": "/usr/lib/x86_64-linux-gnu/libgomp.so.1"}
    plan = plan_repair(facts(grafts=gomp), local_job(), EXCLUDES, POLICIES)
    assert dict(plan.bundled) == gomp


def test_a_library_nowhere_to_be_found_fails_the_repair() -> None:
    with pytest.raises(WheelError, match=r"needs libmystery.so.2: not on this machine, not provided by torch") as error:
        plan_repair(facts(grafts={"libmystery.so.2": None}), local_job(), EXCLUDES, POLICIES)
    assert "repair.toml" in (error.value.tip or "")


def test_no_manylinux_policy_at_all_names_what_held_it_back() -> None:
    with pytest.raises(WheelError, match=r"meets no manylinux policy; held back by instruction set \(linux_x86_64\)"):
        plan_repair(facts("linux_x86_64", capped_by="instruction set"), local_job(), EXCLUDES, POLICIES)


def test_rocm_jobs_exclude_rocm_libraries_not_cuda_ones() -> None:
    needed = ("libamdhip64.so.6", "libcudart.so.13", "libtorch.so")
    plan = plan_repair(facts(needed=needed), rocm_job(), EXCLUDES, POLICIES)
    assert dict(plan.excluded) == {"libamdhip64.so.6": "libamdhip64.so*", "libtorch.so": "libtorch*.so*"}


def test_excludes_source_is_named_in_errors() -> None:
    excludes = Excludes(groups=EXCLUDES.groups, source="somewhere/else.toml")
    with pytest.raises(WheelError, match=r"somewhere/else.toml"):
        plan_repair(facts(grafts={"libx.so": None}), local_job(), excludes, POLICIES)


# --- applying ------------------------------------------------------------------------------------------------------


def test_patchelf_arguments_for_a_grafted_library() -> None:
    update = ElfUpdateInfo(soname="libgomp-1a2b3c4d.so.1", clear_rpath=True)
    assert patchelf_arguments(update) == ["--set-soname", "libgomp-1a2b3c4d.so.1", "--remove-rpath"]


def test_patchelf_arguments_for_an_extension() -> None:
    update = ElfUpdateInfo(
        remove_needed=["libpython3.11.so.1.0"],
        replace_needed=[("libgomp.so.1", "libgomp-1a2b3c4d.so.1")],
        rpath="$ORIGIN/causal_conv1d.libs",
    )
    assert patchelf_arguments(update) == [
        "--remove-needed", "libpython3.11.so.1.0",
        "--replace-needed", "libgomp.so.1", "libgomp-1a2b3c4d.so.1",
        "--force-rpath", "--set-rpath", "$ORIGIN/causal_conv1d.libs",
    ]


def test_patchelf_arguments_for_nothing_to_do() -> None:
    assert patchelf_arguments(ElfUpdateInfo()) == []


def test_patcher_records_edits_and_runs_nothing_when_there_are_none(tmp_path: Path) -> None:
    # the unit conftest makes any process start fail, so this proves a tag-only repair needs no patchelf
    patcher = RunnerPatchelf("manylinux_2_28_x86_64")
    patcher.apply_updates()
    library = tmp_path / "libx.so"
    library.write_bytes(b"")
    patcher.set_soname(library, "libx-12345678.so")
    with pytest.raises(AssertionError, match="must not start processes"):
        patcher.apply_updates()
