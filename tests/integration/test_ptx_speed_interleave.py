"""ptx_speed's plumbing for real but for the GPU (issue #13): the interleaved rounds with real worker processes that
stand in for the GPU timers (one arm times at a time, in rotated order; a worker that dies or hangs is named), the
real kernel worker saying it has no GPU, the SASS reference chosen by reading a real nvcc-compiled wheel's fatbin
(compute_90, the control's spelling, embeds PTX 9.0 and no SASS), and the ptx_speed stage installing each PTX wheel
from its own index and the SASS reference into a venv of its own."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags
from scripts.gpu import builds
from tests.gpu import interleave
from tests.integration.acceptance_wheelhouse import (
    DATA,
    built_causal_conv1d,
    drive,
    finished_build,
    stand_in,
    standing_in,
)
from tests.integration.conftest import CompileCu

ROOT = Path(__file__).resolve().parents[2]

FAKE_WORKER = textwrap.dedent("""
    import json, sys, time
    from tests.gpu import interleave

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
    return [interleave.Arm(name=n, command=(sys.executable, str(worker), n, str(tmp_path / "trace")),
                           env={"PYTHONPATH": str(ROOT)}) for n in names]


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


def test_a_worker_that_exits_or_hangs_is_named_with_what_it_said(tmp_path: Path) -> None:
    script = "import sys\nprint('ERROR no CUDA device (torch sees none)', file=sys.stderr)\nsys.exit(3)\n"
    result = interleave.run_rounds(fake_arms(tmp_path, ["sass", "ptx"], script), rounds=3, timeout_s=30,
                                   log_dir=tmp_path / "logs")
    assert result["rounds"] == [] and result["error"].startswith("the sass worker exited (exit 3)")
    assert "ERROR no CUDA device" in result["error"]
    hung = interleave.run_rounds(fake_arms(tmp_path, ["sass"], "import time\ntime.sleep(60)\n"), rounds=1,
                                 timeout_s=1, log_dir=tmp_path / "logs")
    assert hung["error"].startswith("the sass worker did not answer in time")


def test_the_kernel_worker_without_a_gpu_says_so(tmp_path: Path) -> None:
    settings = json.dumps({"first_call": {}, "sizes": [], "warmup": 1, "repeats": 1, "min_sample_ms": 1.0})
    arms = [interleave.Arm(name=name, command=(sys.executable, "-m", "tests.gpu.timing", "worker", settings),
                           env={"PYTHONPATH": str(ROOT)}) for name in ("sass", "ptx")]
    result = interleave.run_rounds(arms, rounds=3, timeout_s=60, log_dir=tmp_path)
    assert result["rounds"] == [] and "worker exited (exit 3)" in result["error"]
    assert "no CUDA device" in result["error"] and (tmp_path / "worker-sass.log").is_file()


def variant_build(folder: Path, profile: str, compile_cu: CompileCu) -> Path:
    """What `wheelwright build --profile PROFILE` leaves, with the toy kernel compiled for the profile's archs."""
    (job,) = [job for job in load_plan(ROOT / "matrix.yaml", profile).jobs if job.package == DATA.arch.package]
    flags = cuda_gencode_flags(job.archs, "test")
    extension = compile_cu(profile, [flags[i + 1] for i in range(0, len(flags), 2)])
    wheel = built_causal_conv1d(folder, extension.read_bytes(), phase="verify", compile_seconds=1.0)
    finished_build(folder)
    return wheel


def test_the_sass_reference_must_hold_the_gpus_sass(tmp_path: Path, compile_cu: CompileCu) -> None:
    sm90 = variant_build(tmp_path / "main", "gpu-box", compile_cu)
    assert builds.sass_reference(tmp_path / "main", DATA) == sm90.resolve()  # a build output: its one wheel
    assert builds.sass_reference(sm90, DATA) == sm90.resolve()  # or the wheel itself
    ptx90 = variant_build(tmp_path / "ptx90", DATA.variant("ptx90").profile, compile_cu)
    with pytest.raises(ValueError, match=r"no SASS for 9.0 \(.*PTX 9.0\)") as refused:
        builds.sass_reference(ptx90, DATA)
    assert "SASS" not in str(refused.value).split("(", 1)[1]  # compute_90: PTX alone
    with pytest.raises(ValueError, match="0 causal-conv1d wheels of pt211cu130"):
        builds.sass_reference(tmp_path, DATA)


def test_the_ptx_speed_stage_installs_each_wheel_from_its_own_index(
    tmp_path: Path, compile_cu: CompileCu, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    reference = variant_build(tmp_path / "full-arch", "gpu-box-fat", compile_cu)
    for name in ("ptx", "ptx90"):
        variant_build(work / "arch" / name, DATA.variant(name).profile, compile_cu)
    stand_in(monkeypatch, {name: standing_in(name) for name in ("preflight", "carry", "index", "serve", "install")})
    drive(out, work, "--stages", "ptx_speed", "--sass-reference", str(tmp_path / "full-arch"))
    assert f"the SASS reference: {reference.resolve()}" in capsys.readouterr().out
    for name in ("ptx", "ptx90"):  # each PTX wheel from its own index into its own venv
        (item,) = json.loads((work / "arch" / name / "pip-report.json").read_text())["install"]
        assert item["download_info"]["url"].startswith("http://127.0.0.1:")
    # the reference in a venv of its own: the wheel given, not the main venv's
    assert len(list((work / "venv-sass-ref").glob("lib/python*/site-packages/causal_conv1d-*.dist-info"))) == 1
    stage = json.loads((out / "summary.json").read_text())["stages"]["ptx_speed"]
    assert stage["status"] == "skipped" and stage["detail"].startswith("no CUDA device"), stage
