"""bench_build's builds go through scripts/bench/every_arch.py: the same command line as `wheelwright`, with the arch
facts' known-bad SASS kept, so the full-arch comparison compiles upstream's 9 archs; `wheelwright` itself drops it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.bench import build as bench_build

ROOT = Path(__file__).resolve().parents[2]
ALL_9 = ["7.5", "8.0", "8.7", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]


def planned_archs(command: list[str], matrix: Path) -> str:
    done = subprocess.run([*command, "plan", "--matrix", str(matrix), "--profile", "bench", "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=120)
    (job,) = json.loads(done.stdout)["include"]
    return str(job["archs"])


def test_the_bench_plans_every_arch_and_wheelwright_drops_the_known_bad_one(tmp_path: Path) -> None:
    matrix = bench_build.bench_matrix(tmp_path, ["3.11"], ALL_9, "causal-conv1d", "2.14.1")
    assert planned_archs([sys.executable, *bench_build.EVERY_ARCH], matrix) == ";".join(ALL_9)
    dropped = planned_archs([sys.executable, "-m", "builder.cli.main"], matrix)
    assert dropped == ";".join(a for a in ALL_9 if a != "10.3")
