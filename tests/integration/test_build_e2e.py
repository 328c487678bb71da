"""The build stage for real: causal-conv1d (latest) compiled with the real nvcc for one arch against torch 2.14.1,
killed mid-compile and resumed, then repaired, verified, pip-installed into a fresh venv and imported; and a job
that cannot compile fails with its reason while the other job still produces its wheel. The build itself is the
session fixture `real_build` (tests/integration/conftest.py), which the index tests use too.

Minutes, not seconds: one real compile (sm_90) plus a failing one. The CUDA objects go to a cache private to this
test session, so the compile is real every time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.fatbin import fatbin_archs
from builder.plan.expand import load_plan
from tests.build_helpers import import_in_a_fresh_venv, ledger_row, wheelwright

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]
CAUSAL = "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"
MAMBA = "mamba-ssm-2.3.2.post1+pt214cu130-cp311-x86_64"


def test_kill_leaves_nothing_partial_and_the_rerun_completes(real_build: Path) -> None:
    wheels = list((real_build / "dist").iterdir())
    assert len(wheels) == 1 and wheels[0].name.startswith("causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_")
    row = ledger_row(real_build, CAUSAL)
    assert row["status"] == "built" and row["wheel"] == wheels[0].name and row["wheel_size"] == wheels[0].stat().st_size
    assert not list((real_build / "tmp").iterdir()), "work in flight is cleaned up"


def test_through_a_pipe_the_compile_prints_a_line_at_least_every_30_seconds(
    real_build: Path, e2e_workdir: Path
) -> None:
    """The resumed build of `real_build` ran with its output on a pipe: phase lines and heartbeats, no silence."""
    stamped = [line.split(" ", 1) for line in (e2e_workdir / "resumed-build.stamped").read_text().splitlines()]
    times = [float(t) for t, _ in stamped]
    lines = [text for _, text in stamped]
    assert any(f"{CAUSAL}: compile" in line for line in lines) and any(
        f"{CAUSAL}: built after" in line for line in lines
    )
    start = next(i for i, line in enumerate(lines) if f"{CAUSAL}: compile" in line)
    end = next(i for i, line in enumerate(lines) if f"{CAUSAL}: repair" in line)
    gaps = [b - a for a, b in zip(times[start:end + 1], times[start + 1:end + 1])]
    assert gaps and max(gaps) <= 30, f"longest silence during the compile: {max(gaps):.0f}s"
    assert any("still compile" in line and "ninja done with [" in line for line in lines[start:end])


def test_the_wheel_installs_into_a_fresh_venv_with_torch_and_imports(real_build: Path, tmp_path: Path) -> None:
    wheel = next((real_build / "dist").iterdir())
    job = load_plan(ROOT / "matrix.yaml", "local", host="3.11").select(CAUSAL).jobs[0]
    extension, site = import_in_a_fresh_venv(wheel, job, tmp_path)
    assert extension.is_relative_to(site)
    contents = fatbin_archs(extension)
    assert contents.sass == frozenset({"9.0"}) and not contents.ptx


def test_a_job_that_cannot_compile_fails_with_its_reason_and_the_other_finishes(
    real_build: Path, e2e_workdir: Path
) -> None:
    output = e2e_workdir / "broken-out"
    run = wheelwright(e2e_workdir, "build", "--profile", "broken", "--output", str(output))
    log, _ = run.communicate()
    assert run.returncode == 6, log
    failed = ledger_row(output, MAMBA)
    assert failed["status"] == "failed" and failed["phase"] == "compile"
    assert "compile failed" in failed["reason"] and MAMBA in failed["reason"]
    assert "c++20" in (output / "logs" / f"{MAMBA}.log").read_text(errors="replace").lower()
    assert ledger_row(output, CAUSAL)["status"] == "built"
    assert [w.name for w in (output / "dist").iterdir()] == [ledger_row(output, CAUSAL)["wheel"]]
    assert "1 of 2 jobs did not produce a verified wheel" in log
