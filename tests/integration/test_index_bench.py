"""scripts/bench_index.py runs end to end on a small scale, and its numbers say what the index promises:
one added wheel is one hash and a handful of files, and pip with PEP 658 metadata never fetches the wheel."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from builder.core.runner import run

ROOT = Path(__file__).resolve().parents[2]


def test_bench_index_small(tmp_path: Path) -> None:
    """Each kind of run, each `wheelwright index` in a new process: the unchanged run after a complete one costs
    less than the cold one, and the largest project pages are named. The wheels come with the farm's ledger rows:
    the added wheel's digest is the one its build recorded, as on the farm."""
    arguments = ["--wheels", "300", "--repeat", "1", "--added-mb", "1", "--workdir", tmp_path, "--json"]
    command = [sys.executable, "-m", "scripts.bench_index", *arguments]
    output = run(command, step="bench_index", env=dict(os.environ), cwd=ROOT, capture=True).output
    (result,) = json.loads(output[output.index("[") :])
    medians = result["medians"]["this"]
    assert result["wheels"] == 300 and set(medians) == {"cold", "unchanged", "+1", "replaced", "removed"}
    assert 0 < medians["unchanged"]["cpu"] < medians["cold"]["cpu"]
    assert len(result["largest_pages"]["this"]) == 2
    assert "hashed 0, from ledger 1, cached 300;" in (tmp_path / "base-300-prov/index-+1.log").read_text()


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
    """scripts/bench_index_ab.py against this very checkout: each indexes its own copy, every run of either in a
    new process and timed."""
    arguments = ["--against", ROOT, "--wheels", "60", "--repeat", "2", "--colds", "2", "--added-mb", "0.1"]
    command = [sys.executable, "-m", "scripts.bench_index_ab", *arguments, "--workdir", tmp_path, "--json"]
    output = run(command, step="bench_index_ab", env=dict(os.environ), cwd=ROOT, capture=True).output
    results = json.loads(output[output.index("{") :])
    assert results["code"]["this"] == results["code"]["against"]
    for runs in results["runs"].values():
        assert {kind: len(cpu) for kind, cpu in runs.items()} == dict.fromkeys(runs, 2)
        assert set(runs) == {"cold", "unchanged", "+1", "replaced", "removed"}
    assert all(results["medians"][name]["+1"]["cpu"] > 0 for name in ("this", "against"))
    by_checkout = results["runs"]  # a kind's ratio: the median of its pairs' (run i of this / run i of the other)
    for kind, ratio in results["pair_ratios"].items():
        pairs = sorted(a / b for a, b in zip(by_checkout["this"][kind], by_checkout["against"][kind], strict=True))
        assert ratio == pytest.approx((pairs[0] + pairs[1]) / 2, abs=1e-3)
    assert set(results["pair_ratios"]) == set(by_checkout["this"])


def test_pair_ratios_pair_the_runs_in_order() -> None:
    """The ratio by pairs holds where the machine's speed moves between rounds and the medians' ratio does not."""
    from scripts.bench_index_ab import pair_ratios

    kinds = ("cold", "unchanged", "+1", "replaced", "removed")
    this = {kind: [1.0, 2.0, 4.0] for kind in kinds}  # a machine twice as slow each round
    other = {kind: [2.0, 4.0, 8.0] for kind in kinds}  # the other checkout costs twice as much in every pair
    assert pair_ratios({"this": this, "against": other}) == dict.fromkeys(kinds, 0.5)
    shuffled = {kind: [8.0, 2.0, 4.0] for kind in kinds}  # the same runs of the other, out of their pairs: 1/8, 1, 1
    assert pair_ratios({"this": this, "against": shuffled}) == dict.fromkeys(kinds, 1.0)


def test_bench_index_phases_small(tmp_path: Path) -> None:
    """scripts/bench_index_phases.py: each +1 in a new process, every phase of the run marked in the order the run
    reaches it, and a new release each time (its wheel is in dist/, and read: the judging's CPU is not nothing)."""
    from scripts.bench_index_phases import PHASES

    arguments = ["--wheels", "60", "--repeat", "2", "--added-mb", "0.1", "--workdir", tmp_path, "--json"]
    command = [sys.executable, "-m", "scripts.bench_index_phases", *arguments]
    output = run(command, step="bench_index_phases", env=dict(os.environ), cwd=ROOT, capture=True).output
    result = json.loads(output[output.index("{") :])
    names = ["start", "imports", *(name for _, name in PHASES), "the rest"]
    assert [run_["phase"] for run_ in result["runs"][0]] == [run_["phase"] for run_ in result["runs"][1]] == names
    assert [phase["phase"] for phase in result["phases"]] == names
    judged = {phase["phase"]: phase for phase in result["phases"]}["judge"]
    assert judged["cpu"] > 0 and judged["faults"] > 0 and judged["rss_mb"] > 0
    added = sorted(path.name for path in (tmp_path / "base-60-prov" / "dist").glob("causal_conv1d-9.9.*"))
    assert [name.split("+")[0] for name in added] == ["causal_conv1d-9.9.0", "causal_conv1d-9.9.1"]
