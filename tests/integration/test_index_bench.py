"""scripts/bench_index.py runs end to end on a small scale, and its numbers say what the index promises:
one added wheel is one hash and a handful of files, and pip with PEP 658 metadata never fetches the wheel."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from builder.core.runner import run

ROOT = Path(__file__).resolve().parents[2]


def test_bench_index_small(tmp_path: Path) -> None:
    arguments = [
        "--wheels",
        "300",
        "--big-wheels",
        "2",
        "--big-wheel-mb",
        "4",
        "--resolved-wheel-mb",
        "2",
        "--workdir",
        tmp_path,
        "--json",
    ]
    command = [sys.executable, "-m", "scripts.bench_index", *arguments]
    output = run(command, step="bench_index", env=dict(os.environ), cwd=ROOT, capture=True).output
    results = json.loads(output[output.index("{") :])
    assert results["wheels"] == 300
    assert (
        results["unchanged_files_written"],
        results["incremental_hashed"],
        results["incremental_files_written"],
    ) == (0, 1, 12)  # wheel, metadata, 5 index pages, landing, its setup page, older versions' page, wheels.json
    # and its release's file
    with_658, without = results["pip_bytes_with_pep658"], results["pip_bytes_without_pep658"]
    assert with_658["wheel"] == 0 and with_658["metadata"] > 0
    assert without["wheel"] == results["resolved_wheel_bytes"] and without["metadata"] == 0
    assert with_658["total"] * 10 < without["total"]
    assert results["big"]["cold_seconds"] > 0 and results["big"]["bytes"] > 8_000_000


def test_bench_landing_small(tmp_path: Path) -> None:
    """scripts/bench_landing.py on the release-shaped site: the landing page within its budget, one added wheel
    rewriting only its own pages."""
    arguments = ["--farm-wheels", "200", "--workdir", tmp_path, "--json"]
    command = [sys.executable, "-m", "scripts.bench_landing", *arguments]
    output = run(command, step="bench_landing", env=dict(os.environ), cwd=ROOT, capture=True).output
    results = json.loads(output[output.index("{") :])
    release = results["release"]
    assert release["landing_bytes"] <= 100_000 and release["setup_pages"] > 200
    assert release["unchanged"]["written"] == 0 and release["incremental"]["written"] == 12
    assert 0 < release["incremental"]["pages_seconds"] < release["incremental"]["seconds"]
    assert results["farm"]["wheels"] == 200


def test_bench_index_ab_small(tmp_path: Path) -> None:
    """scripts/bench_index_ab.py against this very checkout: both workers index their own copies and every run of
    either is timed, the cold ones each in a fresh process."""
    arguments = ["--against", ROOT, "--wheels", "60", "--repeat", "2", "--colds", "2", "--added-wheel-mb", "0.1"]
    command = [sys.executable, "-m", "scripts.bench_index_ab", *arguments, "--workdir", tmp_path, "--json"]
    output = run(command, step="bench_index_ab", env=dict(os.environ), cwd=ROOT, capture=True).output
    results = json.loads(output[output.index("{") :])
    assert results["code"]["this"] == results["code"]["against"]
    for runs in results["runs"].values():
        assert (len(runs["cold"]), len(runs["+1"]), len(runs["unchanged"])) == (2, 2, 2)
    assert all(results["medians"][name]["+1"]["cpu"] > 0 for name in ("this", "against"))
