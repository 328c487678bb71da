"""The GPU acceptance driver's logic without a GPU or a process (scripts/gpu/): the data file and its errors, the
gpu-box profile, what the carry holds, which stages a command runs, the summary across commands and its verdict,
the builds' reports from their ledgers, the compile profile, the arguments, and what the run prints."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder.core.errors import ConfigError
from builder.core.ledger import Ledger, LedgerEntry, SlimRow, Status
from builder.plan.arch import Arch
from builder.plan.expand import load_plan
from scripts.gpu import builds, carry, detach, plan, summary, tables
from scripts.gpu.arguments import Usage, parse
from scripts.gpu.box import Box, Console, Options
from scripts.gpu.data import DTYPES, load_acceptance
from scripts.gpu.stages import arch_build_command, variants
from scripts.gpu.summary import FAILED, PASSED, PENDING, RUNNING, SKIPPED, StageResult, check
from tests.jobs import ledger_entry

ROOT = Path(__file__).resolve().parents[2]
DATA = load_acceptance()
BOX = carry.load_box()
REGISTRY = plan.registry(DATA)


# -- the data file and the profile ------------------------------------------------------------------------------


def test_the_data_file_is_complete_and_the_gpu_box_profile_plans_both_packages() -> None:
    assert set(DATA.mamba.tolerance) == {*DTYPES, "weight"} and DATA.upstream.expected["1.7.0"].passed == 9485
    assert DATA.stages[0] == "preflight" and DATA.stages[-1] == "ptx_speed"
    jobs = load_plan(ROOT / "matrix.yaml", "gpu-box").jobs
    assert {job.package for job in jobs} == set(DATA.packages) and BOX.profile == "gpu-box"
    for job in jobs:
        assert (job.torch, job.accelerator.name, job.python_tag) == ("2.11.0", "cu130", "cp312")
        assert job.archs == (Arch.parse("9.0"),)
        assert job.label == DATA.label == "pt211cu130" and job.python == BOX.python


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("bfloat16 = { rtol = 3e-2, atol = 5e-2 }", ""), "must give each of float32, float16, bfloat16"),
        (("groups = [1, 2]", "groups = [1, 3]"), "dim must divide"),
        (('"ptx_speed"]', '"ptx_speed", "bench"]'), "`stages` names a stage twice"),
        (('doctor = "ptx-jit"', 'doctor = "jit"'), r"\[arch.variants.ptx\] doctor: Input should be 'ok'"),
        (('stage = "arch_sm80"', 'stage = "arch_sm90"'), "arch.variants.sm80.stage 'arch_sm90' is not in"),
        (('module_loading = "LAZY"', 'module_loading = "lazy"'), r"\[ptx_speed\] module_loading"),
        (('label = "pt211cu130"', ""), "missing key 'label'"),
        (("seqlen = 8192", "seqlen = 0"), r"\[bench.causal_conv1d.2\] seqlen: Input should be greater than 0"),
        (('upstream = ["causal-conv1d"]', 'upstream = ["causal_conv1d"]'), "names packages not in `packages`"),
        (('bench = ["causal-conv1d", "mamba-ssm"]', 'bnech = ["mamba-ssm"]'), "not in `stages`: bnech"),
        (('stages = ["preflight",', 'stages = ["pre-flight", "preflight",'), "'pre-flight' is not an identifier"),
        (("float16 = { rtol = 1e-3, atol = 1e-2 }", "float32 = { rtol = 1e-3, atol = 1e-2 }"), "float32 compares"),
        (("sizes = [1, 2, 8, 32]", "sizes = [2, 8, 32]"), r"must hold 1 \(the reference\)"),
        (('target = "ptx"', 'target = "fat"'), "ptx_speed.target must name a PTX-only arch variant, not 'fat'"),
        (("rounds = 7", "rounds = 7\nround = 7"), r"\[ptx_speed\] unknown key 'round'"),
    ],
)
def test_data_file_errors_name_the_file_and_the_problem(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = (ROOT / "scripts" / "data" / "gpu_acceptance.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "acceptance.toml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError, match=message) as raised:
        load_acceptance(path)
    assert str(raised.value).startswith(f"{path}: ")


# -- the carry --------------------------------------------------------------------------------------------------


def _applicable(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate(BOX.marker_environment())


def test_carry_covers_every_wheelwright_dependency_the_box_lacks_and_nothing_it_has() -> None:
    requirements = carry.project_requirements()
    carried = carry.carry_closure(requirements, present=BOX.packages, environment=BOX.marker_environment())
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if not _applicable(requirement) or name in BOX.packages:
            assert name not in carried, f"{requirement} is carried but does not apply, or the box has it"
        else:
            assert carried.get(name) == carry.pinned(requirement), f"{requirement} must travel at its pin"
    for name in carried:  # closed under dependencies: whatever a carried package needs is carried too, or on the box
        for line in carry.installed_requires(name):
            needed = Requirement(line)
            assert not _applicable(needed) or canonicalize_name(needed.name) in {*carried, *BOX.packages}, (name, line)
    assert {"pydantic", "pydantic-core", "auditwheel", "pyelftools", "boto3", "botocore"} <= set(carried)
    assert not {"rich", "jinja2", "pyyaml", "packaging", "tomli", "typing-extensions"} & set(carried)


def _closure(lines: list[str], *, present: tuple[str, ...] = (), installed: dict[str, str] | None = None,
             requires: dict[str, list[str]] | None = None) -> dict[str, str]:
    return carry.carry_closure([Requirement(line) for line in lines], present=frozenset(present),
                               environment=BOX.marker_environment(), version_of=(installed or {}).get,
                               requires_of=lambda name: (requires or {}).get(name, []))


def test_closure_follows_requirements_skips_markers_extras_and_the_box_and_refuses_what_it_cannot_version() -> None:
    assert _closure(["alpha==1.0", "old-python-only==2.0; python_version < '3.11'", "onbox==3.0"],
                    present=("onbox",), installed={"alpha": "1.0", "beta": "2.5", "gamma": "0.1", "onbox": "3.0"},
                    requires={"alpha": ["beta>=2", "gamma; extra == 'docs'", "onbox"], "beta": ["alpha"]},
                    ) == {"alpha": "1.0", "beta": "2.5"}
    with pytest.raises(carry.CarryError, match="beta>=2 is needed on the box but not pinned"):
        _closure(["alpha==1.0"], installed={"alpha": "1.0"}, requires={"alpha": ["beta>=2"]})
    with pytest.raises(carry.CarryError, match="pinned, but this interpreter has alpha 0.9"):
        _closure(["alpha==1.0"], installed={"alpha": "0.9"})
    with pytest.raises(carry.CarryError, match="does not satisfy beta<2"):
        _closure(["alpha==1.0"], installed={"alpha": "1.0", "beta": "2.5"}, requires={"alpha": ["beta<2"]})
    missing, other = carry.unmet([Requirement("alpha==1.0"), Requirement("zeta; python_version < '3'")],
                                 environment=BOX.marker_environment(), version_of={"alpha": "1.1", "beta": "2.0"}.get,
                                 requires_of=lambda name: {"alpha": ["beta>=3", "gamma"]}.get(name, []))
    assert (missing, other) == (["gamma"], ["alpha==1.0 (found alpha 1.1)", "beta>=3 (found beta 2.0)"])


def test_build_requirements_are_exact_pins_and_missing_wheels_are_named(tmp_path: Path) -> None:
    pins = carry.build_requirements()
    assert pins and all(f"{n}=={v}" in (ROOT / "builder/data/build-requirements.txt").read_text().lower()
                        for n, v in pins.items())
    (tmp_path / "reqs.txt").write_text("# tools\nsetuptools>=70\n")
    with pytest.raises(carry.CarryError, match="reqs.txt:2: 'setuptools>=70' is not an exact == pin"):
        carry.build_requirements(tmp_path / "reqs.txt")
    for name in ("alpha-1.0", "beta-1.0", "beta-2.0", "junk-0.1"):
        (tmp_path / f"{name}-py3-none-any.whl").write_bytes(b"")
    assert carry.missing_wheels(tmp_path, {"alpha": "1.0", "beta": "2.0", "gamma": "3.0"}) == [
        f"{tmp_path}: want beta==2.0, found 1.0, 2.0", f"{tmp_path}: want gamma==3.0, found nothing",
        f"{tmp_path}: junk 0.1 is not wanted"]


@pytest.mark.parametrize(("edit", "message"), [
    (('"absl-py",', '"absl-py", "Absl_Py",'), "names a package twice"),
    (('python_full = "3.12.3"', 'python_full = "3.11.9"'), "is not a 3.12 release"),
    (("limit_mib = 64", "limit = 64"), r"\[carry\] missing key 'limit_mib'"),
])
def test_box_facts_are_checked_when_loaded(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    (tmp_path / "box.toml").write_text((ROOT / "scripts/data/gpu_box.toml").read_text().replace(*edit))
    with pytest.raises(carry.CarryError, match=message):
        carry.load_box(tmp_path / "box.toml")


def test_check_reports_an_incomplete_carry_and_one_over_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert carry.main(["check", "--carry", str(tmp_path), "--tree-bytes", "1000"]) == carry.EXIT_CARRY_ERROR
    err = capsys.readouterr().err
    assert "want pydantic==" in err and "want setuptools==" in err and "causal_conv1d-1.7.0.tar.gz: missing" in err
    carry.main(["check", "--carry", str(tmp_path), "--tree-bytes", str(BOX.limit_mib * 2**20 + 1)])
    assert f"over the {BOX.limit_mib} MiB limit" in capsys.readouterr().err


# -- the stages a command runs ----------------------------------------------------------------------------------


def _names(stages: list[plan.Stage]) -> list[str]:
    return [stage.name for stage in stages]


def test_a_fresh_run_plans_every_stage_and_picked_ones_bring_their_setup_stages() -> None:
    assert [s.name for s in REGISTRY if s.setup] == ["preflight", "carry", "index", "serve", "install"]
    assert _names(plan.plan(REGISTRY, selected=None, results={}, resume=False)) == list(DATA.stages)
    picked = plan.parse_selection("upstream,build", REGISTRY)
    assert picked == ("build", "upstream")
    assert _names(plan.plan(REGISTRY, selected=picked, results={}, resume=False)) == [
        "preflight", "carry", "build", "index", "serve", "install", "upstream"]
    assert _names(plan.plan(REGISTRY, selected=("build",), results={}, resume=False)) == ["preflight", "carry",
                                                                                         "build"]


@pytest.mark.parametrize(
    ("picked", "planned"),
    [
        ("arch_build,arch_slim", ["preflight", "carry", "arch_build", "arch_slim"]),
        ("build,arch_build,arch_slim", ["preflight", "carry", "build", "arch_build", "arch_slim"]),
        ("arch_slim,doctor", ["preflight", "carry", "index", "serve", "install", "doctor", "arch_slim"]),
        ("arch_sm80,ptx_speed", ["preflight", "carry", "index", "serve", "install", "arch_sm80", "ptx_speed"]),
    ],
)
def test_the_main_wheelhouse_is_set_up_only_for_a_stage_that_uses_it(picked: str, planned: list[str]) -> None:
    """The build and the arch stages build, serve and install their own: picked alone, they run without the main
    wheelhouse's index, server and venv (which would fail, or wait on a main build nobody asked for)."""
    selected = plan.parse_selection(picked, REGISTRY)
    assert _names(plan.plan(REGISTRY, selected=selected, results={}, resume=False)) == planned


def test_resume_after_the_main_stages_settled_sets_up_no_main_wheelhouse() -> None:
    results = {name: PASSED for name in DATA.stages} | {"arch_build": RUNNING, "arch_slim": PENDING}
    assert _names(plan.plan(REGISTRY, selected=None, results=results, resume=True)) == [
        "preflight", "carry", "arch_build", "arch_slim"]


def test_resume_runs_what_is_not_settled_with_the_setup_stages_again() -> None:
    results = {"preflight": PASSED, "carry": PASSED, "build": RUNNING, "index": SKIPPED, "doctor": PASSED,
               "upstream": PASSED, "mamba": FAILED, "bench": PENDING, "checklist": PENDING}
    assert _names(plan.plan(REGISTRY, selected=None, results=results, resume=True)) == [
        "preflight", "carry", "build", "index", "serve", "install", "checklist", "bench",
        "arch_build", "arch_fat", "arch_ptx", "arch_sm80", "arch_slim", "ptx_speed"]
    settled = {name: PASSED for name in DATA.stages} | {"build": summary.REUSED}
    assert plan.plan(REGISTRY, selected=None, results=settled, resume=True) == []
    again = plan.plan(REGISTRY, selected=("mamba",), results=settled, resume=True)
    assert _names(again)[-1] == "mamba" and "build" not in _names(again)  # picked: run again, even if settled


def test_unknown_stage_names_are_refused_with_a_suggestion() -> None:
    with pytest.raises(plan.SelectionError, match=r"no stage 'chekclist' \(did you mean 'checklist'\?\)"):
        plan.parse_selection("build,chekclist", REGISTRY)
    with pytest.raises(plan.SelectionError, match="names no stage"):
        plan.parse_selection(",", REGISTRY)


# -- the summary ------------------------------------------------------------------------------------------------


def test_a_stage_is_failed_skipped_or_passed_by_its_checks() -> None:
    assert summary.of_checks([check("a", True), {"name": "b", "status": SKIPPED, "detail": "x"}]).status == PASSED
    skipped = summary.of_checks([{"name": "a", "status": SKIPPED, "detail": "no CUDA device (none)"}])
    assert (skipped.status, skipped.detail) == (SKIPPED, "no CUDA device (none)")
    failed = summary.of_checks([check("a", True), check("b", False, "off by 2")])
    assert (failed.status, failed.detail) == (FAILED, "1 of 2 checks passed")


def test_the_verdict_needs_every_stage_and_a_full_run_that_built(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    for stage in DATA.stages:
        summary.record(path, stage, StageResult(status=PASSED), seconds=1.0)
    assert summary.verdict(summary.load(path), DATA.stages) == (PASSED, True)
    summary.update(path, mode="quick")
    assert summary.verdict(summary.load(path), DATA.stages) == (PASSED, False)
    summary.update(path, mode="full")
    summary.record(path, "build", StageResult(status=summary.REUSED))
    assert summary.verdict(summary.load(path), DATA.stages) == (PASSED, False)
    summary.record(path, "bench", StageResult(status=SKIPPED, detail="skipped: 10s left"))
    assert summary.verdict(summary.load(path), DATA.stages) == ("incomplete", False)
    summary.record(path, "mamba", StageResult(status=FAILED, checks=(check("suite", False, "3 failed"),)))
    ended = summary.finish(path, DATA.stages)
    text = "\n".join(summary.render(ended, DATA.stages))
    assert "FAILED suite: 3 failed" in text and "outcome: failed; acceptance: no" in text


def test_no_gpu_skips_every_stage_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    summary.record(path, "preflight", StageResult(status=SKIPPED, detail="no CUDA device (none here)",
                                                  data={"cuda_available": False}))
    summary.skip_remaining(path, DATA.stages, "no CUDA device (none here)")
    ended = summary.load(path)
    assert {entry["status"] for entry in ended["stages"].values()} == {SKIPPED}
    assert summary.verdict(ended, DATA.stages) == ("no-gpu", False)


def test_a_resumed_command_keeps_earlier_results_and_lists_every_command(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    summary.begin_command(path, command="gpu_acceptance.sh out", planned=["build", "upstream"], resume=False)
    summary.record(path, "build", StageResult(status=RUNNING, detail="still running"))
    summary.record(path, "upstream", StageResult(status=PENDING, detail="pending: 20s left"))
    summary.record(path, "mamba", StageResult(status=PASSED))
    summary.begin_command(path, command="gpu_acceptance.sh out --resume", planned=["build"], resume=True)
    summary.record(path, "build", StageResult(status=FAILED, detail="exit 1", seconds=3.0))
    summary.skip_remaining(path, DATA.stages, "pending: the build is still running", status=PENDING)
    ended = summary.load(path)
    assert ended["stages"]["build"] == {"status": FAILED, "detail": "exit 1", "seconds": 3.0}
    assert ended["stages"]["mamba"]["status"] == PASSED and ended["stages"]["checklist"]["status"] == PENDING
    assert [c["ran"] for c in ended["commands"]] == [["build", "mamba"], ["build"]]  # pending is not "ran"
    summary.begin_command(path, command="gpu_acceptance.sh out", planned=[], resume=False)
    assert summary.load(path)["stages"] == {}


# -- the builds -------------------------------------------------------------------------------------------------


def _entry(package: str, label: str, status: str, wheel: str | None = None, **fields: object) -> LedgerEntry:
    return ledger_entry(job_id=f"{package}-1+{label}", package=package, version="1", label=label, torch="2.11.0",
                        python="3.12", status=status, phase="install" if wheel else "compile",
                        timings={"compile": 300.0}, wheel=wheel, reason=None if wheel else "nvcc failed", **fields)


def _ledger(folder: Path, *entries: LedgerEntry) -> None:
    (folder / "dist").mkdir(parents=True, exist_ok=True)
    with Ledger(folder / "ledger.sqlite") as ledger:
        for entry in entries:
            if entry.wheel:
                (folder / "dist" / entry.wheel).write_bytes(b"wheel")
            ledger.put(entry)


def test_the_build_report_reads_the_ledger_of_the_label(tmp_path: Path) -> None:
    _ledger(tmp_path, _entry("causal-conv1d", "pt211cu130", "built", "a.whl"),
            _entry("causal-conv1d", "pt214cu130", "failed"))  # another profile's
    result = builds.build_report(tmp_path, DATA, exit_code=0)
    assert (result.status, result.data["wheels"]) == (PASSED, ["a.whl"])
    assert builds.build_report(tmp_path, DATA, exit_code=0, reused=True).status == summary.REUSED
    assert builds.held_packages(tmp_path, DATA) == ("causal-conv1d",)
    _ledger(tmp_path, _entry("mamba-ssm", "pt211cu130", "failed"))
    failed = builds.build_report(tmp_path, DATA, exit_code=6)
    assert failed.status == FAILED and "failed in compile: nvcc failed" in failed.checks[1]["detail"]
    empty = builds.build_report(tmp_path / "none", DATA, exit_code=1)
    assert empty.status == FAILED and "no pt211cu130 jobs in" in empty.checks[0]["detail"]


def _finished(state: Path, *, exit_code: int = 0, took: float = 410.0) -> None:
    state.mkdir(parents=True)
    now = time.time()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": now - took, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": exit_code, "ended": now}))


def test_a_detached_build_is_collected_when_finished_and_running_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "build-run"
    assert detach.status(state).state == detach.NONE
    _finished(state, exit_code=1, took=390.0)
    result = builds.detached_report(tmp_path, state, DATA)
    assert result.status == FAILED and round(result.seconds or 0) == 390 and "(exit 1)" in result.checks[0]["detail"]
    assert detach.status(state).state == detach.COLLECTED
    (state / "exit.json").unlink()
    (state / "run.json").write_text(json.dumps({"pid": 4242, "started": 1.0, "command": ["build"]}))
    assert detach.status(state).state == detach.VANISHED  # the pid is not this state's waiter: pids are reused
    monkeypatch.setattr(detach, "_is_waiter", lambda pid, state: True)
    monkeypatch.setattr(detach.time, "time", lambda: 301.0)
    running = builds.detached_report(tmp_path, state, DATA)
    assert running.status == RUNNING and "still running after 300 s (pid 4242, detached)" in running.detail


FAT_TIMES = [  # the shape nvcc --time gives: per unit, the host phases once and each arch's cicc + ptxas
    {"unit": "causal_conv1d_bwd.cu", "arch": "host", "seconds": 20.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "8.0", "seconds": 300.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "9.0", "seconds": 330.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "10.0", "seconds": 360.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "host", "seconds": 5.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "8.0", "seconds": 20.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "9.0", "seconds": 22.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "10.0", "seconds": 25.0},
]


def test_arch_build_checks_record_each_wheel_and_the_fat_builds_profile(tmp_path: Path) -> None:
    label = DATA.label
    for name in ("fat", "ptx"):
        _ledger(tmp_path / name, _entry("causal-conv1d", label, "built", f"{name}.whl", wheel_size=60 * 2**20,
                                        compile_times=json.dumps(FAT_TIMES if name == "fat" else [])))
        _finished(tmp_path / name / "build-run", exit_code=0 if name == "fat" else 1)
    fat = builds.arch_build_check(tmp_path / "fat", "fat", DATA, cores=16)
    assert fat["status"] == PASSED and fat["data"]["compile_profile"]["critical_path_s"] == 380.0
    assert fat["data"]["build_seconds"] >= 409 and fat["name"] == "fat build (gpu-box-fat)"
    assert (tmp_path / "fat" / "build-run" / "collected").exists()  # a later command sees it as taken
    assert builds.arch_build_check(tmp_path / "ptx", "ptx", DATA, cores=16)["detail"] == "exit 1"
    none = builds.arch_build_check(tmp_path / "sm80", "sm80", DATA, cores=16)
    assert none["detail"] == f"no build was started in {tmp_path / 'sm80'}"
    assert builds.main_profile(tmp_path / "fat", DATA, cores=16)["critical_path_s"] == 380.0  # type: ignore[index]


def _slim_build(folder: Path, *, slim_mib: int, slim_seconds: float) -> None:
    """A 4-arch build of 100 MiB whose phases took 400 s, its slim wheels ``slim_mib`` each and made in
    ``slim_seconds`` in all."""
    timings = {"compile": 300.0, "env": 10.0, "repair": 40.0, "verify": 50.0, "slim": slim_seconds}
    _ledger(folder, _entry("causal-conv1d", DATA.label, "built", "fat.whl", wheel_size=100 * 2**20))
    with Ledger(folder / "ledger.sqlite") as ledger:
        job = ledger.entries()[0]
        ledger.put(dataclasses.replace(job, timings=timings))
        for arch in ("8.0", "9.0", "10.0", "12.0"):
            ledger.put_slim(SlimRow(job_id=job.job_id, arch=arch, label=f"{DATA.label}sm{arch.replace('.', '')}",
                                    status=Status.BUILT, wheel_size=slim_mib * 2**20, timings={"relink": 1.0}))
    _finished(folder / "build-run")


@pytest.mark.parametrize(
    ("slim_mib", "slim_seconds", "problem"),
    [
        (26, 40.0, None),  # 0.26 of the bytes, 40 s of 400 s: 10%
        (34, 20.0, "sm_9.0 downloads 0.34 of the fat wheel's bytes, not <= 1/3"),
        (26, 40.5, "the slim wheels took 40.5 s of a 400.0 s build, not <= 10%"),
    ],
)
def test_the_slim_builds_check_states_issue_28s_two_figures_against_their_targets(
    tmp_path: Path, slim_mib: int, slim_seconds: float, problem: str | None
) -> None:
    _slim_build(tmp_path / "slim", slim_mib=slim_mib, slim_seconds=slim_seconds)
    found = builds.arch_build_check(tmp_path / "slim", "slim", DATA, cores=16)
    figures = found["data"]["slim"]
    assert (figures["fat_bytes"], figures["gpu_slim_bytes"]) == (100 * 2**20, slim_mib * 2**20)
    assert (figures["build_seconds"], figures["slim_seconds"]) == (400.0, slim_seconds)
    assert found["status"] == (PASSED if problem is None else FAILED)
    assert (problem or "slim wheels sm_8.0") in found["detail"]
    # the same build as another variant's (the fat one's slim wheels): its figures stated, never judged
    _slim_build(tmp_path / "fat", slim_mib=slim_mib, slim_seconds=slim_seconds)
    assert builds.arch_build_check(tmp_path / "fat", "fat", DATA, cores=16)["status"] == PASSED


def test_the_carried_uv_is_unpacked_once_into_the_work_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import lzma
    from types import SimpleNamespace

    from scripts.gpu import slim_stage

    carried = tmp_path / "carry" / "uv.xz"
    carried.parent.mkdir()
    carried.write_bytes(lzma.compress(b"#!/bin/sh\necho uv 0.13.9\n"))
    monkeypatch.setattr(slim_stage, "CARRIED_UV", carried)
    box = SimpleNamespace(work=tmp_path / "work")
    box.work.mkdir()
    uv = slim_stage.find_uv(box)  # type: ignore[arg-type]
    assert uv == box.work / "uv" and uv.read_bytes().startswith(b"#!/bin/sh") and uv.stat().st_mode & 0o111
    carried.unlink()
    assert slim_stage.find_uv(box) == uv  # type: ignore[arg-type]  # unpacked: the carry is not read again


def test_compile_profile_puts_the_wall_beside_the_critical_path_and_the_cores() -> None:
    profile = builds.compile_profile(FAT_TIMES, wall=400.0, cores=16)
    assert profile["sum_s"] == 1082.0 and profile["max_pair"] == {"unit": "causal_conv1d_bwd.cu", "arch": "10.0",
                                                                   "seconds": 360.0}
    assert (profile["critical_path_s"], profile["lower_bound_s"], profile["wall_over_bound"]) == (380.0, 380.0, 1.05)
    # halving the bwd unit's kernels: 20 + 180 s, then the fwd unit (30 s) and the cores bound (67.6 s) are far below
    assert profile["split_critical_halves_s"] == 200.0 and profile["split_gain_s"] == 180.0
    assert "critical path 380.0 s (causal_conv1d_bwd.cu)" in builds.describe(profile)
    # the split full-arch build: the cores bound it, and a further split must not promise a negative gain
    times = [{"unit": f"part{u}.cu", "arch": a, "seconds": 46.0} for u in range(8) for a in ("8.0", "9.0", "host")]
    cores_bound = builds.compile_profile(times, wall=130.0, cores=4)
    assert cores_bound["lower_bound_s"] == cores_bound["cores_bound_s"] and cores_bound["split_gain_s"] == 0.0
    assert "splitting it would save nothing" in builds.describe(cores_bound)
    assert builds.compile_profile([], wall=12.0, cores=16) == {"wall_s": 12.0, "pairs": 0}


def test_compile_profile_from_a_real_nvcc_time_file_of_the_fat_gencodes() -> None:
    """tests/unit/data/nvcc/fat-time.csv: nvcc 13.0 `--time` of a one-kernel unit with the fat wheel's gencodes."""
    from builder.steps.nvcc_time import read_times

    times = read_times(ROOT / "tests" / "unit" / "data" / "nvcc" / "fat-time.csv")
    by_arch = {row["arch"]: row["seconds"] for row in times}
    assert set(by_arch) == {"host", "8.0", "9.0", "10.0"}  # the PTX counts with its arch
    profile = builds.compile_profile(times, wall=None, cores=16)
    assert profile["critical_path_s"] == round(by_arch["host"] + max(by_arch[a] for a in ("8.0", "9.0", "10.0")), 1)
    assert profile["wall_over_bound"] is None


# -- the command line and the commands it starts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "OUTDIR is required"),
        (["out", "--bogus"], "unknown option: --bogus"),
        (["out", "other"], "one OUTDIR only (got 'out' and 'other')"),
        (["out", "--workers", "0"], "--workers wants a positive number, not '0'"),
        (["out", "--workers", "many"], "--workers wants a positive number, not 'many'"),
        (["out", "--port", "70000"], "--port wants 0..65535, not '70000'"),
        (["out", "--deadline", "30"], "--deadline wants seconds >= 60, not '30'"),
        (["out", "--leak-seconds", "0"], "--leak-seconds wants a positive number, not '0'"),
        (["out", "--build-limit", "10"], "--build-limit wants seconds >= 60, not '10'"),
        (["out", "--work"], "--work needs a value"),
        (["out", "--stages"], "--stages needs a value"),
        (["out", "--skip-build", "/nonexistent"], "--skip-build /nonexistent: no dist/ and ledger.sqlite there"),
        (["out", "--sass-reference", "/nonexistent.whl"], "--sass-reference /nonexistent.whl: no such wheel or folder"),
        (["out", "--variants", "ptx,sm75"], "--variants: no arch variant 'sm75' (the data file has fat,ptx,ptx90,"),
    ],
)
def test_bad_arguments_are_refused_naming_the_problem(args: list[str], message: str) -> None:
    with pytest.raises(Usage) as refused:
        parse(args, DATA)
    assert str(refused.value).startswith(message)


def test_arguments_and_the_variants_they_pick(tmp_path: Path) -> None:
    options = parse(["out", "--resume", "--workers", "8", "--variants", "ptx90,ptx", "--work", str(tmp_path)], DATA)
    assert (options.resume, options.workers, options.work, options.deadline) == (True, 8, tmp_path, 570)
    box = Box(options=options, data=DATA, console=Console(tmp_path / "log", 0.0), started=0.0)
    assert variants(box) == ["ptx", "ptx90"]  # the data file's order
    box.close()


def test_arch_builds_start_niced_each_into_its_own_folder_and_build_root(tmp_path: Path) -> None:
    box = Box(options=Options(outdir=tmp_path, work=tmp_path), data=DATA, console=Console(tmp_path / "log", 0.0),
              started=0.0)
    command, env = arch_build_command(box, "fat")
    box.close()
    assert command[:3] == ["nice", "-n", "10"] and env["WHEELWRIGHT_FIXED_ROOT"] == "/tmp/wheelwright-build-fat"
    assert command[command.index("builder.cli.main") + 1:] == [
        "build", "--profile", "gpu-box-fat", "--output", tmp_path / "arch" / "fat", "--parallel", "1", "--objcache",
        "off"]
    assert env["PYTHONPATH"].startswith(f"{tmp_path / 'ww-site'}:") and env["WHEELWRIGHT_CACHE"] == str(
        tmp_path / "cache")


# -- what the run prints ----------------------------------------------------------------------------------------


def _perf_row(name: str, **changes: float) -> dict[str, object]:
    return {"model": name, "params": 129_135_360, "batch": 8, "seqlen": 2048, "train_tokens_per_s": 412_345.6,
            "prefill_tokens_per_s": 1_234_567.8, "decode_ms_per_token_cuda_graphs": 1.234,
            "decode_ms_per_token_eager": 9.876, "train_peak_mib": 20480.0, "prefill_peak_mib": 3072.0,
            "decode_peak_mib": 512.0} | changes


def test_the_checklists_table_is_markdown_with_a_row_per_model_and_a_line_per_leak_run() -> None:
    lines = tables.checklist_lines({
        "performance": [_perf_row("130M-shaped"), _perf_row("1.4B-shaped", params=1_372_000_000.0)],
        "leak": {"training": {"ok": True, "start_mib": 1117.0, "end_mib": 1117.0, "growth_mib": 0.0,
                              "bound_mib": 16.0}}})
    assert all(line.startswith("|") for line in lines[:4]) and len({len(line) for line in lines[:4]}) == 1
    assert set(lines[1]) == {"|", "-"}
    assert [cell.strip() for cell in lines[2].strip("|").split("|")] == [
        "130M-shaped", "129M", "412,346", "1,234,568", "1.23", "9.88", "20.00 GiB", "3.00 GiB", "0.50 GiB"]
    assert lines[3].split("|")[2].strip() == "1372M"
    assert lines[4] == "leak run (training): ok; allocated 1117.0 MiB after the warm-up, 1117.0 MiB at the end, " \
                       "peak +0.0 MiB (bound +16.0)"
    assert tables.perf_table([]) == [] and tables.checklist_lines({}) == []


def test_the_closing_lines_quote_the_jit_the_ratios_the_verdict_and_the_critical_path() -> None:
    assert tables.closing_lines({"stages": {}}) == []
    speed = {"jit_s": 2.5, "target": "ptx", "isa": "ptx90", "first_call": {"ptx": {
        "CUDA_CACHE_DISABLE": "1", "CUDA_MODULE_LOADING": "LAZY"}}, "method": {"rounds": 7}, "worst_ratio": 1.16,
        "ratios": {"a": 1.16, "b": 1.0}, "worst_isa_ratio": 1.004, "worst_noise": 0.007, "verdict": "target-isa",
        "verdict_text": "PTX compute_80 is slower", "arms": {"ptx": "PTX compute_80", "ptx90": "PTX compute_90"},
        "cases": {"a fwd": {"sass_ms": 0.1, "noise": 0.007, "allowed": 0.02, "ratios": {"ptx": 1.16}}}}
    summary_ = {"stages": {"ptx_speed": {"data": speed}, "arch_build": {"data": {"fat": {
        "compile_profile": builds.compile_profile(FAT_TIMES, wall=400.0, cores=16)}}}}}
    jit, ratio, verdict, fat = tables.closing_lines(summary_)
    assert jit == "PTX JIT: 2.50 s more than SASS for the first call (CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING=LAZY)"
    assert ratio == ("PTX/SASS kernel time, once JIT-ed (median of 7 interleaved rounds): PTX compute_80 worst "
                     "1.160 over 2 cases, PTX compute_90 worst 1.004; A/A noise up to 0.7%")
    assert verdict == "verdict: target-isa: PTX compute_80 is slower"
    assert fat.startswith("fat build: compile wall 400.0 s vs sum 1082.0 s")
    table = tables.ptx_table(speed)
    assert "PTX compute_80" in table[0] and table[1].startswith("a fwd") and "1.160" in table[1]
