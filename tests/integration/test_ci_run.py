""".ci/run's budget: it prints the seconds of each part `make test` timed and fails a run over the budget, or one
where pytest collected nothing. `make` is replaced by a script that reports given timings, so no suite runs here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ci_run(
    tmp_path: Path, timings: str, *, budget: int = 3600, exit_code: int = 0
) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "bin"
    fake.mkdir()
    make = fake / "make"
    make.write_text(f'#!/bin/sh\nprintf "{timings}" >> "$WHEELWRIGHT_TIMINGS"\nexit {exit_code}\n')
    make.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "WHEELWRIGHT_CI_BUDGET": str(budget)}
    return subprocess.run(["bash", str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


PARTS = "system packages 40.2 0\\nvenv 120.4 0\\nchecks 30.0 0\\nunit 12.6 0\\nintegration 600.0 0\\nslow 700.1 0\\n"


def test_prints_seconds_per_part_and_passes_within_the_budget(tmp_path: Path) -> None:
    done = _ci_run(tmp_path, PARTS)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "system packages      40s" in lines and "venv                120s" in lines
    assert "slow                700s" in lines and "checks               30s" in lines
    assert "total              1503s (budget 3600s)" in lines


def test_a_run_over_the_budget_fails_with_one_error_line(tmp_path: Path) -> None:
    done = _ci_run(tmp_path, PARTS, budget=1000)
    assert done.returncode == 1
    assert done.stderr == "ERROR the run took 1503s, over the CI budget of 1000s: make the slowest part faster\n"


def test_no_tests_collected_is_a_failure(tmp_path: Path) -> None:
    done = _ci_run(tmp_path, "unit 1.0 5\\n", exit_code=2)
    assert done.returncode == 1 and "collected no tests" in done.stderr


@pytest.mark.parametrize("where", ["real", "missing"])
def test_a_timed_part_says_the_free_disk_before_and_after_and_keeps_the_timings_format(
    tmp_path: Path, where: str
) -> None:
    """A part that fills the disk fails in whichever test runs next; the part's line tells that apart. df's figure is
    a number of GB for a real folder and "?" where there is none, and the timings file .ci/run sums is unchanged."""
    temp = tmp_path / ("tmp" if where == "real" else "nowhere")
    if where == "real":
        temp.mkdir()
    timings = tmp_path / "timings"
    env = {**os.environ, "TMPDIR": str(temp), "WHEELWRIGHT_TIMINGS": str(timings)}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "timed.sh"), "some part", "sh", "-c", "exit 3"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 3
    match = re.fullmatch(rf"time: some part [0-9.]+s \(exit 3\), free in {re.escape(str(temp))}: (\S+) -> (\S+) GB\n",
                         done.stdout)
    assert match, done.stdout
    figures = match.groups()
    assert all(re.fullmatch(r"[0-9]+\.[0-9]", f) for f in figures) if where == "real" else figures == ("?", "?")
    assert re.fullmatch(r"some part [0-9.]+ 3\n", timings.read_text())
