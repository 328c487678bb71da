"""The release plan's preflight, as a maintainer runs it before spending a day of runners: the real CLI, the real
registry's torch pages, PyTorch's index out of reach (as from here). Every job gets one reason, the closing counts
add up to the plan and to the table's rows, nothing that needs PyTorch's index says ready, and nothing is
downloaded, unpacked or installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from builder.core.errors import NotBuildableHere
from builder.farm.build import NEEDS_TORCH_INDEX, READY, preflight
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.environment import find_pythons
from builder.steps.torch_index import is_registry_variant

ROOT = Path(__file__).resolve().parents[2]
UNREACHABLE = "http://127.0.0.1:9/whl/{accelerator}/"  # nothing listens on port 9: refused at once
ROW = re.compile(r"^│ (?P<job>\S+) +│ (?P<ready>yes|no: .*?) +│ (?P<hash>[0-9a-f]{16}) │$")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    cache = tmp_path_factory.mktemp("cache") / "wheelwright"
    env = {**os.environ, "WHEELWRIGHT_CACHE": str(cache), "WHEELWRIGHT_TORCH_INDEX": UNREACHABLE,
           "COLUMNS": "2000"}
    command = [sys.executable, "-m", "builder.cli.main", "build", "--profile", "release", "--preflight"]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False), cache


def test_the_counts_add_up_to_the_plan_and_to_a_recount_of_the_table(
    run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    result, _ = run
    assert result.returncode == 4, result.stderr  # some jobs are not ready here
    rows = [m for line in result.stdout.splitlines() if (m := ROW.match(line))]
    plan = load_plan(ROOT / "matrix.yaml", "release")
    assert sorted(m["job"] for m in rows) == sorted(j.identifier for j in plan.jobs)
    closing = next(line for line in result.stdout.splitlines() if line.startswith("preflight: "))
    counts = {reason: int(n) for n, reason in re.findall(r"(\d+) ([^;]+)(?:; |$)", closing.split(" jobs: ", 1)[1])}
    assert sum(counts.values()) == len(plan.jobs) == int(closing.split()[1])
    assert counts[READY] == sum(1 for m in rows if m["ready"] == "yes")


def test_no_job_that_needs_pytorchs_index_says_ready(run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, _ = run
    facts = load_facts()
    plan = load_plan(ROOT / "matrix.yaml", "release")
    ready = {m["job"] for line in result.stdout.splitlines() if (m := ROW.match(line)) and m["ready"] == "yes"}
    assert ready, "the registry's own variants on this machine's Pythons are ready"
    for job in plan.jobs:
        if not is_registry_variant(job, facts):
            assert job.identifier not in ready


def test_every_cuda_12_job_that_debian_12_4_and_the_registry_serve_here_is_ready(
    run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """The registry's own CUDA 12 variant, archs within what nvcc 12.4 emits (sm_90 at most), a Python of this
    machine: ready; the cu128/cu129 jobs that plan sm_100 and sm_120 are plainly not, saying why."""
    result, _ = run
    facts = load_facts()
    ours = {p for p in ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14") if _has_python(p)}
    rows = {m["job"]: m["ready"] for line in result.stdout.splitlines() if (m := ROW.match(line))}
    within = 0
    for job in load_plan(ROOT / "matrix.yaml", "release").jobs:
        if job.accelerator.kind != "cuda" or not job.accelerator.version.startswith("12."):
            continue
        if not is_registry_variant(job, facts) or job.python not in ours:
            continue
        if all((a.major, a.minor) <= (9, 0) for a in job.archs):
            within += 1
            assert rows[job.identifier] == "yes", job.identifier
        else:
            assert "CUDA 12.4 emits up to sm_90" in rows[job.identifier], job.identifier
    assert within > 0


def _has_python(version: str) -> bool:
    try:
        find_pythons(version)
    except NotBuildableHere:
        return False
    return True


def test_the_reasons_are_the_api_s_and_pytorchs_index_is_one_of_them(
    run: tuple[subprocess.CompletedProcess[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    result, _ = run
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(run[1]))
    found = preflight(load_plan(ROOT / "matrix.yaml", "release").jobs, load_facts(), UNREACHABLE)
    closing = next(line for line in result.stdout.splitlines() if line.startswith("preflight: "))
    for reason, n in Counter(r.reason for r in found).items():
        assert f"{n} {reason}" in closing
    assert NEEDS_TORCH_INDEX in closing


def test_the_preflight_downloads_unpacks_and_installs_nothing(
    run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, cache = run
    assert not cache.exists() or list(cache.rglob("*")) == []
