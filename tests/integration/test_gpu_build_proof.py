"""scripts/gpu_build_proof.sh's CPU-side behaviour: bad arguments are one ERROR line and exit 2, --collect reports a
detached run's output (running: exit 4; finished: exit 0; none: exit 1), and --suite hands ours' output folder to
the acceptance run's --skip-build (here, without a GPU, its stages are skipped for that reason: exit 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.core.ledger import Ledger, LedgerEntry
from scripts.bench.wheels import wheel_of_files
from scripts.gpu import detach
from scripts.gpu.data import load_acceptance

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_build_proof.sh"


def run(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The script, with a carry of its own (none: this machine's Python is not the GPU machine's)."""
    return subprocess.run(["bash", str(SCRIPT), *map(str, args), "--carry", "/nonexistent"], capture_output=True,
                          text=True, check=False, timeout=timeout, env={**os.environ, "PYTHON": sys.executable})


@pytest.mark.parametrize(
    ("args", "message"),
    [((), "OUTDIR is required"), (("--nope",), "unknown option: --nope"),
     (("--collect", "soon"), "--collect wants seconds"), (("--package", "flash-attn"), "--package wants"),
     (("--suite", "--detach"), "--suite needs ours' wheel: not with --detach"),
     (("--runs", "none"), "--runs none builds nothing: give --suite")],
)
def test_bad_arguments_are_one_error_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    done = run(*((tmp_path, *args) if args else ()))
    assert done.returncode == 2 and done.stderr.startswith("ERROR ") and message in done.stderr, done.stderr


def test_suite_without_an_ours_output_says_so(tmp_path: Path) -> None:
    done = run(tmp_path / "out", "--runs", "none", "--suite", "--work", tmp_path / "work")
    assert done.returncode == 1 and "ERROR no ours output in" in done.stderr and "run --runs ours first" in done.stderr


def test_suite_runs_the_acceptance_stages_on_ours_output(tmp_path: Path) -> None:
    """What bench_build's ours leaves (one causal-conv1d wheel and its ledger row) goes to the acceptance run as a
    reused wheelhouse; on this machine its preflight finds no CUDA device and every stage says so."""
    label, work = load_acceptance().label, tmp_path / "work"
    ours = work / "bench-full-causal-conv1d" / "ours" / "out"
    (ours / "dist").mkdir(parents=True)
    wheel = wheel_of_files(ours / "dist", name="causal_conv1d", version=f"1.7.0+{label}", python_tag="cp312",
                       files={"causal_conv1d/__init__.py": b""}, requires=("torch==2.11.*",))
    with Ledger(ours / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(job_id=f"causal-conv1d-1.7.0+{label}-cp312-x86_64", package="causal-conv1d",
                               version="1.7.0", label=label, torch="2.11.0", accelerator="cu130", python="3.12",
                               input_hash="0" * 64, status="built", wheel=wheel.name))  # type: ignore[arg-type]
    done = run(tmp_path / "out", "--runs", "none", "--suite", "--work", work, timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr  # no CUDA device
    assert "holds causal-conv1d (not causal-conv1d, mamba-ssm)" in done.stdout
    summary = json.loads((tmp_path / "out" / "suite" / "summary.json").read_text())
    assert summary["commands"][0]["planned"] == ["preflight", "carry", "index", "serve", "install", "doctor",
                                                 "upstream"]
    assert {entry["status"] for entry in summary["stages"].values()} == {"skipped"}


def test_collect_reports_a_detached_run(tmp_path: Path) -> None:
    work, out, state = tmp_path / "work", tmp_path / "out", tmp_path / "work" / "build-proof"
    done = run(out, "--collect", "1", "--work", work)
    assert done.returncode == 1 and "ERROR no detached run in" in done.stderr  # nothing was started
    detach.start(state, ["sh", "-c", "echo '(d) ours      wall     201 s'; sleep 30"], log=state / "bench-full.txt",
                 limit_s=60)
    try:
        running = run(out, "--collect", "2", "--work", work)
        assert running.returncode == 4 and "still running: --collect again" in running.stdout
    finally:
        detach.stop(state)
    done = run(out, "--collect", "1", "--work", work)
    assert done.returncode == 0 and "(d) ours      wall     201 s" in done.stdout
    assert (out / "bench-full.txt").read_text() == (state / "bench-full.txt").read_text()
