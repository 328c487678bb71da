"""One proof across several commands, for real on a machine without a GPU: the acceptance driver's stage loop with
--detach, --resume, the deadline and --stages, the build started in a process session of its own and collected by
a later command (a stand-in build that sleeps, then leaves wheels and a ledger), the detached process's own
bookkeeping (exit status, time limit, stop, a waiter that vanished), the carried wheels installed once, and the
seed checklist's comparisons on the CPU with a real torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.steps.environment import RuntimeEnv
from scripts.gpu import bootstrap, builds, detach, stages
from scripts.gpu.box import Box
from scripts.gpu.summary import PASSED, StageResult
from tests.integration.acceptance_wheelhouse import DATA, Stage, drive, stand_in, standing_in

ROOT = Path(__file__).resolve().parents[2]
FAKE_BUILD = ROOT / "tests" / "integration" / "acceptance_fake_build.py"
EXIT_PENDING = 4
SETUP = ("preflight", "carry", "index", "serve", "install", "doctor")


def statuses(out: Path) -> dict[str, str]:
    return {name: entry["status"] for name, entry in json.loads((out / "summary.json").read_text())["stages"].items()}


def ran(work: Path) -> list[str]:
    path = work / "ran.txt"
    lines = path.read_text().split() if path.is_file() else []
    path.unlink(missing_ok=True)
    return lines


def saying_it_ran(name: str, variant: str | None = None) -> Stage:
    """A stage that only says it ran; an arch stage first waits for its own build (not_ready, for real)."""

    def stage(box: Box) -> StageResult:
        waiting = builds.not_ready(box, variant) if variant else None
        if waiting is not None:
            return waiting
        with (box.work / "ran.txt").open("a") as log:
            log.write(f"{name}\n")
        return StageResult(status=PASSED)

    return stage


@dataclass
class Harness:
    work: Path
    seconds: dict[str, float]  # how long the stand-in builds take: "main", "arch"


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    """The real loop, plan, summary, deadline and detached builds; stand-in builds (``seconds`` long) and stand-in
    stages for what needs the GPU machine."""
    seconds = {"main": 2.0, "arch": 2.0}
    monkeypatch.setattr(stages, "build_command", lambda box: [
        sys.executable, FAKE_BUILD, box.wheelhouse, DATA.label, str(seconds["main"])])
    monkeypatch.setattr(stages, "arch_build_command", lambda box, name: ([
        sys.executable, FAKE_BUILD, box.arch(name), DATA.label, str(seconds["arch"]), "causal-conv1d"],
        box.environ()))
    stand_in(monkeypatch, {**{name: standing_in(name) for name in SETUP},
                           **{name: saying_it_ran(name) for name in ("checklist", "upstream", "mamba", "bench")}},
             arch={"arch_fat": saying_it_ran("arch_fat", "fat"), "arch_ptx": saying_it_ran("arch_ptx", "ptx"),
                   "arch_sm80": saying_it_ran("arch_sm80", "sm80"), "arch_slim": saying_it_ran("arch_slim", "slim"),
                   "ptx_speed": saying_it_ran("ptx_speed", "ptx")})
    folder = tmp_path / "work"
    yield Harness(work=folder, seconds=seconds)
    detach.stop(folder / "build-run")  # nothing this test started outlives it
    for name in DATA.arch.variants:
        detach.stop(folder / "arch" / name / "build-run")


def test_a_proof_across_commands_detached_build_then_deadline_then_the_rest(
    tmp_path: Path, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    work = harness.work
    # 1: start the build and return at once
    assert drive(tmp_path / "out1", work, "--detach") == EXIT_PENDING
    got = statuses(tmp_path / "out1")
    assert got["build"] == "running" and {got[s] for s in ("index", "checklist", "bench")} == {"pending"}
    assert ran(work) == [] and "run the same command again with --resume" in capsys.readouterr().out
    # 2: collect it and the arch builds; 270 s are left of the 570 s deadline, too few for the checklist (it needs
    # 370) and ptx_speed (300), enough for the rest
    assert drive(tmp_path / "out2", work, "--resume", started_ago=300) == EXIT_PENDING
    got, out = statuses(tmp_path / "out2"), capsys.readouterr().out
    assert (got["build"], got["checklist"], got["arch_build"]) == ("passed", "pending", "passed")
    assert ran(work) == ["upstream", "mamba", "bench", "arch_fat", "arch_ptx", "arch_sm80", "arch_slim"]
    assert "collecting the build an earlier command started" in out and "fake build: done" in out
    assert out == (tmp_path / "out2" / "acceptance.log").read_text()
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == [
        "acceptance.log", "build-status.txt", "details.tar.gz", "summary.json"]
    with tarfile.open(tmp_path / "out2" / "details.tar.gz") as details:  # the arch builds' logs, not their wheels
        names = details.getnames()
    assert "arch/fat/build-console.log" in names and not [n for n in names if n.endswith((".whl", ".sqlite"))]
    # 3: the checklist and ptx_speed, after the setup stages again; the proof is whole
    assert drive(tmp_path / "out3", work, "--resume") == 0
    summary = json.loads((tmp_path / "out3" / "summary.json").read_text())
    assert ran(work) == ["checklist", "ptx_speed"] and (summary["outcome"], summary["acceptance"]) == ("passed", True)
    assert [c["ran"] for c in summary["commands"]] == [
        ["preflight", "carry", "build"],
        ["preflight", "carry", "build", "index", "serve", "install", "doctor", "upstream", "mamba", "bench",
         "arch_build", "arch_fat", "arch_ptx", "arch_sm80", "arch_slim"],
        ["preflight", "carry", "index", "serve", "install", "checklist", "ptx_speed"],
    ]
    assert summary["commands"][1]["command"].endswith("--resume") and summary["stages"]["build"]["seconds"] >= 2
    # 4: nothing left: the verdict stands without running a stage
    capsys.readouterr()
    assert drive(tmp_path / "out4", work, "--resume") == 0
    assert ran(work) == [] and "=== stage" not in capsys.readouterr().out


def test_picked_stages_and_a_fresh_run_stop_an_earlier_detached_build(
    tmp_path: Path, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    work, harness.seconds["main"] = harness.work, 60
    assert drive(tmp_path / "out1", work, "--stages", "build", "--detach") == EXIT_PENDING
    assert set(statuses(tmp_path / "out1")) >= {"preflight", "carry", "build"}
    pid = detach.status(work / "build-run").pid
    harness.seconds["main"] = 1
    # a fresh run does not share the wheelhouse with a build still at work: it stops it and starts its own
    assert drive(tmp_path / "out2", work, "--stages", "upstream,build") == EXIT_PENDING  # the rest was not picked
    assert f"stopped the detached command (pid {pid})" in capsys.readouterr().out
    assert statuses(tmp_path / "out2") == {
        name: "passed" for name in ("preflight", "carry", "build", "index", "serve", "install", "upstream")}
    assert ran(work) == ["upstream"]


def test_an_arch_build_still_running_holds_up_only_its_own_stages(
    tmp_path: Path, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    work, harness.seconds["arch"] = harness.work, 60
    # picked without the build stage, arch_build starts the arch builds itself; 35 s are left: it waits 5 s of them
    assert drive(tmp_path / "out1", work, "--stages", "arch_build,arch_fat", started_ago=535) == EXIT_PENDING
    got = statuses(tmp_path / "out1")
    assert (got["arch_build"], got["arch_fat"]) == ("running", "pending") and "build" not in got
    assert capsys.readouterr().out.count("started detached") == len(DATA.arch.variants)
    assert {detach.status(work / "arch" / name / "build-run").state for name in DATA.arch.variants} == {"running"}
    # with time to spare, the arch stages find their builds still at work: pending, and the command goes on
    assert drive(tmp_path / "out2", work, "--resume", "--stages", "arch_fat,arch_sm80") == EXIT_PENDING
    entries = json.loads((tmp_path / "out2" / "summary.json").read_text())["stages"]
    assert entries["arch_fat"]["status"] == entries["arch_sm80"]["status"] == "pending"
    assert "the sm80 build is still running" in entries["arch_sm80"]["detail"] and ran(work) == []


def test_resume_without_an_earlier_run_and_unknown_stages_are_refused(
    tmp_path: Path, harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    work = harness.work
    assert drive(tmp_path / "out", work, "--resume") == 2
    assert "ERROR --resume: no earlier run's summary" in capsys.readouterr().err
    assert drive(tmp_path / "out", work, "--stages", "mamba,chekclist") == 2
    assert "no stage 'chekclist' (did you mean 'checklist'?)" in capsys.readouterr().err


# -- the detached process itself --------------------------------------------------------------------------------


def test_detached_command_records_its_exit_status_and_time(tmp_path: Path) -> None:
    state, log = tmp_path / "state", tmp_path / "log"
    started = detach.start(state, ["sh", "-c", "echo working; sleep 1; exit 3"], log=log, limit_s=30)
    assert started.state in (detach.RUNNING, detach.FINISHED) and started.pid
    with pytest.raises(detach.DetachError, match="still running"):
        detach.start(state, ["true"], log=log, limit_s=30)
    ended = detach.wait(state, seconds=20)
    assert (ended.state, ended.exit_code) == (detach.FINISHED, 3) and 1 <= ended.seconds() < 10
    assert "working" in log.read_text()
    # its own session: not in this process's group, so a command that ends does not take it along
    assert detach.start(state, ["sleep", "30"], log=log, limit_s=60).pid != os.getpgrp()
    waiter = detach.status(state).pid
    assert waiter is not None and os.getpgid(waiter) == waiter
    stopped = detach.stop(state)
    assert stopped.state == detach.FINISHED and stopped.exit_code == -signal.SIGTERM


def test_detached_command_is_stopped_at_its_limit_and_a_killed_waiter_is_noticed(tmp_path: Path) -> None:
    state, log = tmp_path / "state", tmp_path / "log"
    detach.start(state, ["sleep", "60"], log=log, limit_s=1)
    ended = detach.wait(state, seconds=30)
    assert ended.exit_code == detach.EXIT_TIMED_OUT and "ran past its limit of 1 s" in log.read_text()
    detach.start(state, ["sleep", "60"], log=log, limit_s=60)
    os.killpg(detach.status(state).pid or 0, signal.SIGKILL)  # the machine's reaper, say: nothing records the end
    deadline = time.monotonic() + 10
    while detach.status(state).state == detach.RUNNING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert detach.status(state).state == detach.VANISHED


def test_wait_gives_up_at_its_time_and_ticks_meanwhile(tmp_path: Path) -> None:
    state = tmp_path / "state"
    detach.start(state, ["sleep", "30"], log=tmp_path / "log", limit_s=60)
    ticks: list[detach.Detached] = []
    started = time.monotonic()
    progress = detach.wait(state, seconds=1.5, poll_s=0.1, tick=ticks.append, tick_every_s=0.5)
    assert progress.state == detach.RUNNING and 1.5 <= time.monotonic() - started < 5 and len(ticks) >= 2
    detach.stop(state)


# -- the carry, installed once per set of wheels ----------------------------------------------------------------


def _wheel(folder: Path) -> Path:
    """A minimal pure wheel, standing in for the carried ones."""
    import zipfile

    folder.mkdir(parents=True)
    path = folder / "demo-1.0-py3-none-any.whl"
    files = {"demo/__init__.py": "", "demo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
             "demo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        record = "".join(f"{name},,\n" for name in [*files, "demo-1.0.dist-info/RECORD"])
        archive.writestr("demo-1.0.dist-info/RECORD", record)
    return path


def test_the_carried_wheels_are_installed_once_and_a_build_still_using_them_keeps_them(tmp_path: Path) -> None:
    carry, site = tmp_path / "carry", tmp_path / "work" / "ww-site"
    bootstrap.install(carry, site)  # nothing carried: nothing installed
    assert not site.exists()
    _wheel(carry / "wheels")
    bootstrap.install(carry, site)
    (site / "in-use-by-the-build").touch()
    bootstrap.install(carry, site)
    assert (site / "in-use-by-the-build").is_file() and (site / "demo" / "__init__.py").is_file()
    assert bootstrap.installed(site) == bootstrap.carried(carry) == ["demo-1.0-py3-none-any.whl"]


# -- the seed checklist, on the CPU -----------------------------------------------------------------------------


def test_the_seed_checklist_without_a_gpu_says_so() -> None:
    run = [sys.executable, "-m", "scripts.seed_checklist"]
    done = subprocess.run([*run, "--parts", "seed"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 3 and "ERROR no CUDA device" in done.stderr
    wrong = subprocess.run([*run, "--parts", "speed"], capture_output=True, text=True, check=False, cwd=ROOT)
    assert wrong.returncode == 2 and "unknown checklist part speed; the parts are seed, batch" in wrong.stderr


CPU_COMPARISONS = r"""
import json, torch
from scripts.gpu.data import Tolerance
from tests.gpu.checklist import batch_comparisons
from tests.gpu.numerics import compare_tokens
torch.manual_seed(0)
inputs = torch.randn(32, 16, 8)
linear = torch.nn.Linear(8, 8)
per_sample = batch_comparisons(linear, inputs, (1, 2, 8, 32), Tolerance(rtol=1e-4, atol=1e-4))
mixing = batch_comparisons(lambda x: linear(x - x.mean(dim=0)), inputs, (1, 2, 8, 32), Tolerance(rtol=1e-2, atol=1e-2))
half = batch_comparisons(linear.to(torch.bfloat16), inputs.to(torch.bfloat16), (1, 8), Tolerance(rtol=5e-2, atol=5e-2))
tokens = torch.tensor([[5, 6, 7], [1, 2, 3]])
same, off = compare_tokens("t", tokens, tokens.clone()), compare_tokens("t", tokens, tokens.flip(1))
print(json.dumps({"per_sample": [c.ok for c in per_sample], "mixing": [c.ok for c in mixing],
                  "half": [c.ok for c in half], "mixing_worst": mixing[-1].worst,
                  "tokens": [same.ok, off.ok, off.bound]}))
"""


@pytest.mark.slow
def test_batch_comparisons_catch_a_model_that_mixes_samples(torch_runtime: RuntimeEnv) -> None:
    done = subprocess.run([sys.executable, "-c", CPU_COMPARISONS], capture_output=True, check=False, text=True,
                          env={**os.environ, "PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"},
                          timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["per_sample"] == [True, True, True, True]  # a per-sample model: every size agrees with batch 1
    assert found["mixing"] == [True, False, False, False] and found["mixing_worst"] > 1  # batch statistics leak in
    assert found["half"] == [True, True] and found["tokens"] == [True, False, "equal (4 of 6 differ)"]


@pytest.mark.slow
def test_checklist_runs_upstreams_models_end_to_end_on_the_cpu(
    tmp_path: Path, torch_runtime: RuntimeEnv, reference_sources: dict[str, Path]
) -> None:
    out = tmp_path / "checklist.json"
    harness = Path(__file__).parent / "checklist_cpu_harness.py"
    done = subprocess.run(
        [sys.executable, "-W", "ignore", harness, reference_sources["mamba-ssm"], reference_sources["causal-conv1d"],
         out], capture_output=True, check=False, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    for name, result in found["checks"].items():
        if not name.startswith("performance"):  # timings on a shared CPU are noise; the GPU run judges them
            assert result["ok"], (name, result)
    assert [c["tensor"] for c in found["checks"]["decode MambaLMHeadModel Mamba1 float32"]["comparisons"]] == [
        "greedy tokens without CUDA graphs vs forward", "greedy tokens with CUDA graphs vs forward",
        "greedy tokens with vs without CUDA graphs"]
    perf = found["checks"]["performance"]["data"]
    assert perf["params"] > 0 and perf["loss"] > 0 and perf["train_tokens_per_s"] > 0
    assert found["table"][2].strip("|").split("|")[0].strip() == "130M-shaped"
    leak = found["checks"]["leak training"]["data"]
    assert leak["steps"] == 6 and leak["ok"] and leak["growth_mib"] <= leak["bound_mib"]
