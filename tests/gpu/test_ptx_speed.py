"""What a PTX-only wheel costs against one holding the GPU's SASS (docs/gpu-acceptance.md, "How ptx_speed measures"):
the first kernel call in a fresh process with the JIT cache off, for each wheel (--arm NAME=PYTHON: sass, ptx and,
when its wheel was built, ptx90), and causal-conv1d's kernels once JIT-ed, timed A/B in interleaved rounds with the
SASS wheel in a second process as the A/A control. Every number goes into the stage's data."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scripts.gpu.data import AcceptanceData, load_acceptance
from tests.gpu import interleave
from tests.gpu.options import Given
from tests.gpu.ptx import CONTROL, REFERENCE, Judgement, first_call, judge
from tests.gpu.report import Recorded

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
PTX_ARMS = [name for name, v in load_acceptance().arch.variants.items() if v.ptx and not v.sass]


def _labels(acceptance: AcceptanceData) -> dict[str, str]:
    return {name: "PTX " + ", ".join(f"compute_{a.replace('.', '')}" for a in acceptance.variant(name).ptx)
            for name in PTX_ARMS}


def _first_call(python: Path, settings: str, acceptance: AcceptanceData, out: Path) -> dict[str, Any] | None:
    """One fresh process's first causal_conv1d_fn calls, the JIT cache off; None when it gave nothing."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_CACHE_DISABLE": "1",
           "CUDA_MODULE_LOADING": acceptance.ptx_speed.module_loading}
    try:
        done = subprocess.run([str(python), "-m", "tests.gpu.timing", "first-call", settings], env=env, text=True,
                              capture_output=True, timeout=acceptance.ptx_speed.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    out.write_text(done.stdout + done.stderr)
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if done.returncode == 0 and lines else None


@pytest.fixture(scope="module")
def measured(acceptance: AcceptanceData, given: Given) -> dict[str, Any]:
    """Each arm's first call, then the interleaved rounds (one worker process per arm, in its wheel's venv)."""
    out, arms, speed = given.need("ptx_out"), given.arms, acceptance.ptx_speed
    out.mkdir(parents=True, exist_ok=True)
    settings = json.dumps({"first_call": speed.first_call.model_dump(), "warmup": speed.warmup,
                           "repeats": speed.repeats, "min_sample_ms": speed.min_sample_ms,
                           "sizes": [size.model_dump() for size in acceptance.bench.causal_conv1d]})
    firsts = {name: _first_call(python, settings, acceptance, out / f"{name}-first.log")
              for name, python in arms.items()}
    order = [REFERENCE, CONTROL, *(name for name in PTX_ARMS if name in arms)]
    workers = [interleave.Arm(name=name, env={"PYTHONPATH": str(ROOT)}, command=(
        str(arms[REFERENCE if name == CONTROL else name]), "-m", "tests.gpu.timing", "worker", settings))
        for name in order]
    rounds = interleave.run_rounds(workers, rounds=speed.rounds, timeout_s=speed.rounds_timeout_s, log_dir=out)
    (out / "rounds.json").write_text(json.dumps(rounds))
    return {"first_call": firsts, "rounds": rounds}


@pytest.fixture(scope="module")
def judged(measured: dict[str, Any], acceptance: AcceptanceData, given: Given,
           stage_data: dict[str, Any]) -> Judgement:
    speed = acceptance.ptx_speed
    judgement = judge(measured["rounds"], target=speed.target, isa=speed.isa_control, floor=speed.noise_floor,
                      max_noise=speed.max_noise, labels=_labels(acceptance))
    stage_data.update(judgement.data, first_call=measured["first_call"], sass_reference=given.sass_reference,
                      method={"rounds": speed.rounds, "repeats": speed.repeats, "warmup": speed.warmup,
                              "min_sample_ms": speed.min_sample_ms, "noise_floor": speed.noise_floor,
                              "max_noise": speed.max_noise,
                              "ratio": "median over rounds of the round's PTX/SASS time",
                              "noise": "worst round of the SASS wheel in a second process against itself, |ratio - 1|"})
    return judgement


@pytest.mark.parametrize("arm", PTX_ARMS)
def test_first_kernel_call_with_the_jit_cache_off(
    arm: str, measured: dict[str, Any], acceptance: AcceptanceData, given: Given, record: Recorded,
    stage_data: dict[str, Any],
) -> None:
    """Informative: the JIT's cost is the first call's excess over SASS's; fails only when a run gave nothing."""
    if arm not in given.arms:
        pytest.skip(f"no {arm} wheel: judged without it")
    firsts = measured["first_call"]
    verdict, jit_s = first_call(firsts.get(REFERENCE), firsts.get(arm), name=_labels(acceptance)[arm])
    stage_data.setdefault("jit_s_by_arm", {})[arm] = jit_s
    if arm == acceptance.ptx_speed.target:
        stage_data["jit_s"] = jit_s
    record.detail, record.data = verdict.detail, {"jit_s": jit_s}
    assert verdict.ok, verdict.detail


def test_a_to_a_control_within_max_noise(judged: Judgement, record: Recorded) -> None:
    record.detail = judged.noise.detail
    assert judged.noise.ok, judged.noise.detail


def test_isa_control_once_jit_ed_within_noise(judged: Judgement, record: Recorded) -> None:
    if judged.isa is None:
        pytest.skip("no ISA control wheel: the target is judged alone")
    record.detail = judged.isa.detail
    assert judged.isa.ok, judged.isa.detail


def test_target_once_jit_ed_within_noise_or_explained(judged: Judgement, record: Recorded) -> None:
    record.detail = f"{judged.target.detail}; verdict {judged.data.get('verdict')}: {judged.data.get('verdict_text')}"
    assert judged.target.ok, record.detail


def test_every_round_measured(judged: Judgement, record: Recorded) -> None:
    record.detail = judged.measured.detail
    assert judged.measured.ok, judged.measured.detail
