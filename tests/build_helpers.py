"""Driving real `wheelwright build` runs from tests: the CLI as a subprocess, the ledger as SQLite rows, the wheel
installed and imported."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.steps.environment import runtime_env

ROOT = Path(__file__).resolve().parents[1]



def wheelwright(work: Path, *args: str, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "WHEELWRIGHT_OBJCACHE_DIR": str(work / "objcache"), "PYTHONUNBUFFERED": "1"}
    """`wheelwright ARGS --matrix WORK/matrix.yaml`, with an object cache private to WORK (so compiles are real)."""
    command = [sys.executable, "-m", "builder.cli.main", *args, "--matrix", str(work / "matrix.yaml")]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def ledger_row(output: Path, job_id: str) -> dict:
    with sqlite3.connect(output / "ledger.sqlite") as db:
        db.row_factory = sqlite3.Row
        row = db.execute("SELECT * FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return dict(row) if row else {}



def wait_for_nvcc(output: Path, job_id: str, timeout: float = 900) -> None:
    """Until the job's log shows nvcc running (the compile phase, past fetch, env and patch)."""
    log = output / "logs" / f"{job_id}.log"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (
            log.is_file()
            and "nvcc" in log.read_text(errors="replace")
            and ledger_row(output, job_id).get("phase") == "compile"
        ):
            time.sleep(20)  # well inside the first translation unit
            return
        time.sleep(2)
    pytest.fail(f"{job_id} never reached nvcc within {timeout} s")


def import_in_a_fresh_venv(wheel: Path, job: Job, work: Path) -> tuple[Path, Path]:
    """Install the causal-conv1d ``wheel`` with pip into a new venv beside the job's torch runtime and import it
    from ``work``: (the extension module's file, the venv's site-packages)."""
    runtime = runtime_env(job, load_facts())
    venv = work / "venv"
    subprocess.run([runtime.python, "-m", "venv", venv], check=True)
    site = next((venv / "lib").glob("python3.*/site-packages"))
    (site / "torch-runtime.pth").write_text(f"{runtime.site_packages}\n")
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", wheel], check=True)
    probe = "import torch, causal_conv1d_cuda, causal_conv1d; print(causal_conv1d_cuda.__file__)"
    result = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False, cwd=work)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip().splitlines()[-1]), site
