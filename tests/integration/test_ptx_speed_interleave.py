"""ptx_speed's plumbing for real but for the GPU (issue #13): the interleaved rounds with real worker processes that
stand in for the GPU timers (one arm times at a time, in rotated order; a worker that dies or hangs is named), the
SASS reference chosen by reading a real nvcc-compiled wheel's fatbin (compute_90, the control's spelling, embeds
PTX 9.0 and no SASS), and the box script's ptx_speed stage installing each PTX wheel from its own index, the SASS
reference into a venv of its own, and starting a kernel worker per arm, which without a GPU each say so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags
from scripts import gpu_acceptance
from scripts.acceptance import interleave
from tests.integration.acceptance_wheelhouse import CONFIG, HARNESS, built_causal_conv1d
from tests.integration.conftest import CompileCu

ROOT = Path(__file__).resolve().parents[2]

# -- the interleaving, with real worker processes ---------------------------------------------------------------

FAKE_WORKER = textwrap.dedent("""
    import json, sys, time
    from scripts.acceptance import interleave

    name, trace = sys.argv[1], sys.argv[2]
    print("a library's banner on stdout", flush=True)

    class Timer:
        def facts(self):
            return {"name": name}

        def round(self):
            with open(trace, "a") as log:
                log.write(json.dumps([name, "start", time.monotonic()]) + "\\n")
            time.sleep(0.05)
            with open(trace, "a") as log:
                log.write(json.dumps([name, "end", time.monotonic()]) + "\\n")
            return {"a fwd": len(name) * 0.1}

    sys.exit(interleave.serve(Timer, sys.stdin, sys.stdout))
""")


def fake_arms(tmp_path: Path, names: list[str], script: str = FAKE_WORKER) -> list[interleave.Arm]:
    worker = tmp_path / "worker.py"
    worker.write_text(script)
    env = {"PYTHONPATH": str(ROOT)}
    return [interleave.Arm(name=n, command=(sys.executable, str(worker), n, str(tmp_path / "trace")), env=env)
            for n in names]


def test_rounds_time_one_arm_at_a_time_in_rotated_order(tmp_path: Path) -> None:
    names = ["sass", "sass-again", "ptx"]
    result = interleave.run_rounds(fake_arms(tmp_path, names), rounds=4, timeout_s=60, log_dir=tmp_path / "logs")
    assert result["error"] is None and result["workers"] == {n: {"name": n} for n in names}
    assert result["order"] == [names, names[1:] + names[:1], names[2:] + names[:2], names]
    assert [sorted(times) for times in result["rounds"]] == [sorted(names)] * 4
    assert result["rounds"][0]["ptx"] == {"a fwd": pytest.approx(0.3)}
    events = [json.loads(line) for line in (tmp_path / "trace").read_text().splitlines()]
    # never two at once: each start follows the previous arm's end, in the order of the rounds
    assert [e[1] for e in events] == ["start", "end"] * 12
    assert [e[0] for e in events[::2]] == [n for order in result["order"] for n in order]
    assert all(events[i][2] <= events[i + 1][2] for i in range(len(events) - 1))


def test_a_worker_that_exits_is_named_with_what_it_said(tmp_path: Path) -> None:
    script = "import sys\nprint('ERROR no CUDA device (torch sees none)', file=sys.stderr)\nsys.exit(3)\n"
    result = interleave.run_rounds(fake_arms(tmp_path, ["sass", "ptx"], script), rounds=3, timeout_s=30,
                                   log_dir=tmp_path / "logs")
    assert result["rounds"] == [] and result["error"].startswith("the sass worker exited (exit 3)")
    assert "ERROR no CUDA device" in result["error"]


def test_a_worker_that_hangs_is_stopped_at_the_deadline(tmp_path: Path) -> None:
    script = "import time\ntime.sleep(60)\n"
    result = interleave.run_rounds(fake_arms(tmp_path, ["sass"], script), rounds=1, timeout_s=1,
                                   log_dir=tmp_path / "logs")
    assert result["error"].startswith("the sass worker did not answer in time")


def test_ptx_rounds_command_writes_the_rounds_and_fails_on_a_worker_error(tmp_path: Path) -> None:
    """Without a GPU each real kernel-worker says so and exits 3: the rounds stop, naming it."""
    out = tmp_path / "speed" / "rounds.json"
    out.parent.mkdir()
    code = gpu_acceptance.main(["--summary", str(tmp_path / "s.json"), "ptx-rounds", "--arm", f"sass={sys.executable}",
                                "--arm", f"ptx={sys.executable}", "--rounds", "3", "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 1 and result["arms"] == ["sass", "ptx"] and result["rounds"] == []
    assert "worker exited (exit 3)" in result["error"] and "no CUDA device" in result["error"]
    assert (out.parent / "worker-sass.log").is_file()


def test_ptx_rounds_refuses_an_arm_without_its_python(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        gpu_acceptance.main(["--summary", str(tmp_path / "s.json"), "ptx-rounds", "--arm", "sass", "--out", "x"])
    assert stopped.value.code == 2 and "'sass' is not NAME=PYTHON" in capsys.readouterr().err


# -- the SASS reference and the compute_90 control's wheel ------------------------------------------------------


def variant_build(folder: Path, profile: str, compile_cu: CompileCu) -> Path:
    """What `wheelwright build --profile PROFILE` leaves, with the toy kernel compiled for the profile's archs."""
    (job,) = [job for job in load_plan(ROOT / "matrix.yaml", profile).jobs if job.package == CONFIG.arch.package]
    flags = cuda_gencode_flags(job.archs, "test")
    extension = compile_cu(profile, [flags[i + 1] for i in range(0, len(flags), 2)])
    wheel = built_causal_conv1d(folder, extension.read_bytes(), phase="verify", compile_seconds=1.0)
    state = folder / "build-run"  # as the detached build leaves it once it has ended
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": time.time() - 5, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": 0, "ended": time.time()}))
    return wheel


def sass_reference(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "scripts.gpu_acceptance", "--summary", str(path.parent / "s.json"), "sass-reference",
         "--path", str(path)], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
    )


def test_the_sass_reference_must_hold_the_gpus_sass(tmp_path: Path, compile_cu: CompileCu) -> None:
    sm90 = variant_build(tmp_path / "main", "gpu-box", compile_cu)
    done = sass_reference(tmp_path / "main")  # a build output folder: its one wheel of the label
    assert done.returncode == 0 and done.stdout.strip() == str(sm90.resolve()), done.stderr
    assert sass_reference(sm90).stdout.strip() == str(sm90.resolve())  # or the wheel itself
    ptx90 = variant_build(tmp_path / "ptx90", CONFIG.arch.variant("ptx90").profile, compile_cu)
    done = sass_reference(ptx90)
    assert done.returncode == 1 and done.stderr.startswith(f"ERROR {ptx90}: no SASS for 9.0 (")
    assert "PTX 9.0)" in done.stderr and "SASS" not in done.stderr.split("(", 1)[1]  # compute_90: PTX alone
    done = sass_reference(tmp_path)
    assert done.returncode == 1 and "0 causal-conv1d wheels of pt211cu130" in done.stderr


# -- the box script's stage -------------------------------------------------------------------------------------



def test_ptx_speed_stage_installs_each_wheel_and_starts_a_worker_per_arm(tmp_path: Path, compile_cu: CompileCu) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    reference = variant_build(tmp_path / "full-arch", "gpu-box-fat", compile_cu)
    for name in ("ptx", "ptx90"):
        variant_build(work / "arch" / name, CONFIG.arch.variant(name).profile, compile_cu)
    env = {**os.environ, "ROOT": str(ROOT), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "-c", HARNESS, "harness", str(out), "--work", str(work), "--stages", "ptx_speed",
         "--sass-reference", str(tmp_path / "full-arch")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    log = done.stdout + done.stderr
    assert f"the SASS reference: {reference.resolve()}" in log, log
    for name in ("ptx", "ptx90"):  # each PTX wheel from its own index into its own venv
        report = json.loads((work / "arch" / name / "pip-report.json").read_text())
        (item,) = report["install"]
        assert item["download_info"]["url"].startswith("http://127.0.0.1:")
        assert not (work / f"serve-{name}.pid").exists()
    # the reference in a venv of its own: the wheel given, not the main venv's
    installed = list((work / "venv-sass-ref").glob("lib/python*/site-packages/causal_conv1d-*.dist-info"))
    assert len(installed) == 1, log
    rounds = json.loads((work / "arch" / "ptx-speed" / "rounds.json").read_text())
    assert rounds["arms"] == ["sass", "sass-again", "ptx", "ptx90"] and rounds["rounds"] == []
    assert "worker exited (exit 3)" in rounds["error"] and "no CUDA device" in rounds["error"]
    stage = json.loads((out / "summary.json").read_text())["stages"]["ptx_speed"]
    assert stage["status"] == "skipped" and stage["detail"].startswith("no CUDA device"), stage
