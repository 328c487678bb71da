"""ptx_speed's A/B method without a GPU (issue #13): the judging of interleaved rounds on made-up timings (an A/A
case, a target-ISA gap the compute_90 control explains, a JIT gap and an unexplained gap that must fail, a noisy
control that gives no verdict), and the stage's command recording every number
(tests/integration/test_ptx_speed_interleave.py runs the interleaving with real processes)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts import gpu_acceptance
from scripts.acceptance import archs, ptxspeed
from scripts.acceptance.config import load_config
from scripts.acceptance.summary import FAILED, PASSED

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config()
CASES = ("a fwd", "a fwd+bwd", "b fwd")
DRIFT = (1.00, 1.12, 0.91, 1.05, 0.88, 1.10, 0.95)  # the GPU's clock from round to round: shared by all arms
WOBBLE = (0.004, -0.003, 0.002, -0.004, 0.001, 0.003, -0.002)  # each process's own, a few tenths of a percent


def make_rounds(*, ptx: float, ptx90: float | None, again: float = 1.0, wobble: tuple[float, ...] = WOBBLE) -> dict:
    """Seven rounds as interleave.run_rounds returns them: every arm's time is its speed factor x the round's drift
    x its own small wobble (shifted per arm, so no two arms wobble alike)."""
    factors = {"sass": 1.0, "sass-again": again, "ptx": ptx, **({"ptx90": ptx90} if ptx90 is not None else {})}
    rounds = []
    for turn, drift in enumerate(DRIFT):
        times = {}
        for index, (arm, factor) in enumerate(factors.items()):
            jitter = 1 + wobble[(turn + 2 * index) % len(wobble)]
            times[arm] = {case: 0.1 * (i + 1) * factor * drift * jitter for i, case in enumerate(CASES)}
        rounds.append(times)
    return {"arms": list(factors), "rounds": rounds, "order": [], "workers": {}, "error": None}


LABELS = {"ptx": "PTX compute_80", "ptx90": "PTX compute_90"}


def judge(result: dict, *, floor: float = 0.02, max_noise: float = 0.10) -> tuple[list, dict]:
    return ptxspeed.judge(result, target="ptx", isa="ptx90", floor=floor, max_noise=max_noise, labels=LABELS)


def by_name(checks: list) -> dict:
    return {check.name.split(" (")[0].split(":")[0]: check for check in checks}


def test_a_to_a_every_wheel_alike_is_within_noise_despite_the_rounds_drift() -> None:
    """The rounds' clocks differ by 24 %, yet ratios taken within a round are 1 to the wobble."""
    checks, data = judge(make_rounds(ptx=1.0, ptx90=1.0))
    assert [c.status for c in checks] == [PASSED, PASSED, PASSED] and data["verdict"] == ptxspeed.WITHIN
    for stats in data["cases"].values():
        assert stats["noise"] < 0.01 and stats["allowed"] == 0.02  # the floor: the A/A noise is below it
        assert all(abs(ratio - 1) < 0.01 for ratio in stats["ratios"].values())
    assert data["worst_ratio"] < 1.01 and data["worst_isa_ratio"] < 1.01


def test_a_compute_80_gap_with_compute_90_within_noise_is_reported_and_attributed_not_failed() -> None:
    checks, data = judge(make_rounds(ptx=1.16, ptx90=1.0))
    named = by_name(checks)
    assert named["PTX compute_90"].status == PASSED
    target = named["PTX compute_80"]
    assert target.status == PASSED and "slower on 3 of 3 cases: reported, not failed" in target.detail
    assert data["verdict"] == ptxspeed.TARGET_ISA and "not from the JIT" in data["verdict_text"]
    assert data["worst_ratio"] == pytest.approx(1.16, abs=0.01)
    assert data["ratios"] == {case: stats["ratios"]["ptx"] for case, stats in data["cases"].items()}
    assert len(data["cases"]["a fwd"]["round_ratios"]["ptx"]) == 7  # every round's ratio is kept


def test_compute_90_ptx_slower_than_sass_fails_as_the_jits_cost() -> None:
    checks, data = judge(make_rounds(ptx=1.16, ptx90=1.10))
    named = by_name(checks)
    assert named["PTX compute_90"].status == FAILED and "the JIT" in named["PTX compute_90"].detail
    assert named["PTX compute_80"].status == FAILED and data["verdict"] == ptxspeed.JIT


def test_without_the_control_a_gap_fails_and_no_gap_passes() -> None:
    checks, data = judge(make_rounds(ptx=1.16, ptx90=None))
    assert [c.status for c in checks] == [PASSED, FAILED] and data["verdict"] == ptxspeed.NO_CONTROL
    assert data["isa_ratios"] is None
    checks, data = judge(make_rounds(ptx=1.005, ptx90=None))
    assert [c.status for c in checks] == [PASSED, PASSED] and data["verdict"] == ptxspeed.WITHIN


def test_the_allowance_is_the_a_to_a_controls_worst_round() -> None:
    """An A/A control off by 4 % in its worst round: a 3 % gap is noise, a 6 % one is not (one case only)."""
    wobble = (0.0, 0.04, 0.0, 0.0, 0.0, 0.0, 0.0)
    _, data = judge(make_rounds(ptx=1.03, ptx90=1.0, wobble=wobble))
    assert data["verdict"] == ptxspeed.WITHIN
    assert all(s["allowed"] == pytest.approx(0.04, abs=0.002) for s in data["cases"].values())
    slow = make_rounds(ptx=1.0, ptx90=1.0, wobble=wobble)
    for times in slow["rounds"]:
        times["ptx90"]["b fwd"] *= 1.06
    checks, data = judge(slow)
    assert data["verdict"] == ptxspeed.JIT and "slower on 1 cases" in by_name(checks)["PTX compute_90"].detail


def test_a_noisy_a_to_a_control_gives_no_verdict_and_fails() -> None:
    wobble = (0.15, -0.12, 0.1, -0.14, 0.13, -0.1, 0.12)
    checks, data = judge(make_rounds(ptx=1.0, ptx90=1.0, wobble=wobble))
    assert checks[0].name == ptxspeed.NOISE_CHECK and checks[0].status == FAILED
    assert data["verdict"] == ptxspeed.TOO_NOISY and data["worst_noise"] > 0.10


def test_no_rounds_or_a_failed_worker_fail_the_stage() -> None:
    (check,), data = judge({"rounds": [], "error": "the ptx worker exited (exit 3)"})
    assert check.status == FAILED and "the ptx worker exited" in check.detail and data["verdict"] is None
    partial = make_rounds(ptx=1.0, ptx90=1.0) | {"error": "the ptx90 worker did not answer in time"}
    checks, _ = judge(partial)
    assert checks[-1].name == "every round measured" and checks[-1].status == FAILED


def test_the_table_has_a_row_per_case_and_the_verdict() -> None:
    _, data = judge(make_rounds(ptx=1.16, ptx90=1.0))
    lines = ptxspeed.table_lines(data)
    assert len(lines) == 1 + len(CASES) + 1 and "PTX compute_80" in lines[0] and "SASS (A/A control)" in lines[0]
    ratio = data["cases"]["a fwd"]["ratios"]["ptx"]
    assert ratio == pytest.approx(1.16, abs=0.005) and lines[1].startswith("a fwd") and f"{ratio:.3f}" in lines[1]
    assert lines[-1].startswith("verdict: target-isa")


def test_ptx_speed_command_records_every_number_with_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stage's judging from the measurements' files, as the box gives them (the GPU check stood in)."""
    monkeypatch.setattr(gpu_acceptance, "unavailable_reason", lambda: None)
    firsts = {"sass": (0.01, 5.8), "ptx": (0.01, 8.9), "ptx90": (0.01, 8.1)}
    args = []
    for name, (import_s, first_s) in firsts.items():
        path = tmp_path / f"{name}-first.json"
        path.write_text(json.dumps({"import_s": import_s, "first_call_s": first_s, "second_call_s": 0.0003,
                                    "CUDA_CACHE_DISABLE": "1", "CUDA_MODULE_LOADING": "LAZY"}))
        args += ["--first", f"{name}={path}"]
    (tmp_path / "rounds.json").write_text(json.dumps(make_rounds(ptx=1.16, ptx90=1.0)))
    summary = tmp_path / "summary.json"
    code = gpu_acceptance.main(["--summary", str(summary), "ptx-speed", *args, "--rounds",
                                str(tmp_path / "rounds.json"), "--sass-reference", "/w/causal_conv1d-full.whl"])
    entry = json.loads(summary.read_text())["stages"]["ptx_speed"]
    assert code == 0 and entry["status"] == PASSED, entry
    data = entry["data"]
    assert data["jit_s"] == pytest.approx(3.1) and data["jit_s_by_arm"]["ptx90"] == pytest.approx(2.3)
    assert data["verdict"] == "target-isa" and data["sass_reference"] == "/w/causal_conv1d-full.whl"
    assert data["method"]["rounds"] == CONFIG.ptx_speed.rounds
    assert data["command"].startswith(f"python -m scripts.gpu_acceptance --summary {summary} ptx-speed --first sass=")
    assert len(data["rounds"]["rounds"]) == 7 and set(data["cases"]) == set(CASES)
    out = capsys.readouterr().out
    assert "verdict: target-isa" in out and "first kernel call, JIT cache off: PTX compute_90 vs SASS" in out


def test_closing_lines_quote_the_jit_the_ratios_the_verdict_and_the_critical_path() -> None:
    from tests.unit.test_gpu_acceptance_archs import FAT_TIMES, first

    assert archs.closing_lines({"stages": {}}) == []
    _, data = judge(make_rounds(ptx=1.16, ptx90=1.0))
    summary = {"stages": {
        "ptx_speed": {"data": {"jit_s": 2.5, "first_call": {"ptx": first(0.5, 3.0)}, "method": {"rounds": 7},
                               **data, "arms": {**data["arms"]}}},
        "arch_build": {"data": {"fat": {"compile_profile": archs.compile_profile(FAT_TIMES, wall=400.0, cores=16)}}},
    }}
    jit, ratio, verdict, fat = archs.closing_lines(summary)
    assert jit == "PTX JIT: 2.50 s more than SASS for the first call (CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING=LAZY)"
    assert re.fullmatch(r"PTX/SASS kernel time, once JIT-ed \(median of 7 interleaved rounds\): PTX compute_80 "
                        r"worst 1\.1[56]\d over 3 cases, PTX compute_90 worst (0\.99|1\.00)\d; A/A noise up to 0\.\d%",
                        ratio), ratio
    assert verdict.startswith("verdict: target-isa: PTX compute_80 is slower than SASS, but PTX compute_90")
    assert fat.startswith("fat build: compile wall 400.0 s vs sum 1082.0 s")
