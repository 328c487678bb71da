"""Driving real `wheelwright build` runs from tests: the CLI as a subprocess, the ledger as SQLite rows."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
