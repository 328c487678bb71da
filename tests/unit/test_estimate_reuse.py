"""`plan --estimate`'s cost model (builder/plan/estimate.py): measured costs price only their own toolkit's jobs,
stage times beat nvcc --time totals, and device stages are priced once per class of torch versions whose steps
the measurement found the same (builder/data/device-reuse.toml)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from builder.core.errors import ConfigError, LedgerError
from builder.plan.accelerator import Accelerator
from builder.plan.estimate import estimate, ledger_model, reuse_facts, seed_model, summary
from builder.plan.expand import load_plan
from builder.plan.job import Job

ROOT = Path(__file__).resolve().parents[2]


def job(torch: str = "2.14.1", accelerator: str = "cu130", platform: str = "x86_64") -> Job:
    (local,) = load_plan(ROOT / "matrix.yaml", "local", host="3.11").select("causal-conv1d-*-x86_64").jobs
    return dataclasses.replace(local, torch=torch, accelerator=Accelerator.parse(accelerator), platform=platform)


def ledger(tmp_path: Path, rows: list[tuple[str, str | None, str | None]]) -> Path:
    """A ledger of causal-conv1d jobs: (accelerator, compile_times, stage_times) each."""
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE jobs (job_id, package, accelerator, compile_times, stage_times)")
        for index, (accelerator, times, stages) in enumerate(rows):
            db.execute("INSERT INTO jobs VALUES (?, 'causal-conv1d', ?, ?, ?)", (f"j{index}", accelerator, times,
                                                                                  stages))
    return path


TIMES = json.dumps([{"unit": "a.cu", "arch": "9.0", "seconds": 100}, {"unit": "a.cu", "arch": "host", "seconds": 5}])
STAGES = json.dumps([
    {"unit": "a.cu", "arch": "", "stage": "front", "cpu": 3.0, "wall": 3.0},
    {"unit": "a.cu", "arch": "", "stage": "host", "cpu": 4.0, "wall": 4.0},
    {"unit": "a.cu", "arch": "9.0", "stage": "preprocess", "cpu": 1.0, "wall": 1.0},
    {"unit": "a.cu", "arch": "9.0", "stage": "cicc", "cpu": 60.0, "wall": 60.0},
    {"unit": "a.cu", "arch": "9.0", "stage": "ptxas", "cpu": 20.0, "wall": 20.0},
])


def test_one_toolkits_costs_never_price_anothers_jobs(tmp_path: Path) -> None:
    model = ledger_model(ledger(tmp_path, [("cu118", TIMES, None)]), seed_model())
    costs, extrapolated, total = model.cuda_costs(job(accelerator="cu130"))
    assert extrapolated == total  # the seed's, not cu118's
    assert costs != [(1, [5.0, 100.0])]
    assert model.cuda_costs(job(accelerator="cu118"))[0] == [(1, [5.0, 100.0])]


def test_stage_times_price_a_unit_by_its_cpu_seconds(tmp_path: Path) -> None:
    model = ledger_model(ledger(tmp_path, [("cu130", TIMES, STAGES)]), seed_model())
    costs, extrapolated, _ = model.cuda_costs(job())
    assert costs == [(1, [7.0, 81.0])] and extrapolated == 0
    (unit,) = model.measured[("causal-conv1d", "cu130")]
    assert unit.stages == {"9.0": {"preprocess": 1.0, "cicc": 60.0, "ptxas": 20.0}}


def test_a_chain_that_reused_a_step_is_no_measure_of_its_cost(tmp_path: Path) -> None:
    partial = json.dumps([row for row in json.loads(STAGES) if row["stage"] != "cicc"])  # cicc was a hit
    model = ledger_model(ledger(tmp_path, [("cu130", TIMES, partial)]), seed_model())
    assert model.cuda_costs(job())[0] == [(1, [7.0, 100.0])]  # nvcc --time's total; the host part still ran


FACTS = """
[[unit]]
package = "causal-conv1d"
version = "1.7.0"
accelerator = "cu130"
unit = "a.cu"
cicc = [["2.12", "2.13"], ["2.14"]]
ptxas = [["2.12", "2.13", "2.14"]]
share = { cicc = 0.5, ptxas = 0.25 }
"""


def test_device_stages_are_priced_once_per_class_of_same_torch_versions(tmp_path: Path) -> None:
    model = ledger_model(ledger(tmp_path, [("cu130", TIMES, STAGES)]), seed_model())
    jobs = [job(torch) for torch in ("2.12.1", "2.13.0", "2.14.1", "2.11.0")]
    ours, upstream = estimate(jobs, model, runners=1, cores=4, reuse=reuse_facts(FACTS))
    plain, _ = estimate(jobs, model, runners=1, cores=4)
    # 2.13 reuses 2.12's cicc (60) and ptxas (20); 2.14 compiles cicc, reuses ptxas (20); 2.11 is in no class
    assert ours.reused_cpu == pytest.approx(100.0)
    assert plain.cpu_hours * 3600 - ours.cpu_hours * 3600 == pytest.approx(100.0)
    assert upstream.cpu_hours == pytest.approx(plain.cpu_hours)  # one Python per group: the same compiles
    lines = summary(ours, upstream, plain, model)
    assert "without cross-torch reuse" in lines[0] and "4 of 4 (unit, arch) costs measured" in lines[2]


def test_without_stage_times_the_shares_price_the_reuse(tmp_path: Path) -> None:
    model = ledger_model(ledger(tmp_path, [("cu130", TIMES, None)]), seed_model())
    jobs = [job("2.12.1"), job("2.13.0")]
    ours, _ = estimate(jobs, model, runners=1, cores=4, reuse=reuse_facts(FACTS))
    assert ours.reused_cpu == pytest.approx(100.0 * (0.5 + 0.25))


def test_device_stages_are_never_priced_as_reused_across_platforms(tmp_path: Path) -> None:
    model = ledger_model(ledger(tmp_path, [("cu130", TIMES, STAGES)]), seed_model())
    jobs = [job("2.12.1"), job("2.12.1", platform="aarch64"), job("2.13.0", platform="aarch64")]
    ours, _ = estimate(jobs, model, runners=1, cores=4, reuse=reuse_facts(FACTS))
    assert ours.reused_cpu == pytest.approx(80.0)  # aarch64's 2.13 from aarch64's 2.12 alone


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        (FACTS.replace('[["2.12", "2.13"], ["2.14"]]', '[["2.12", "2.13"], ["2.13"]]'), "in two cicc classes"),
        (FACTS.replace("cicc = 0.5", "cicc = 1.5"), "cicc share 1.5 not in"),
        (FACTS.replace("ptxas = 0.25", "ptxas = -0.1"), "ptxas share -0.1 not in"),
    ],
)
def test_reuse_facts_that_contradict_themselves_are_one_config_error(facts: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        reuse_facts(facts)


def test_the_shipped_reuse_facts_load() -> None:
    reuse_facts()


def stage(**changes: object) -> str:
    """One stage_times row with ``changes``, those first (the error shows the row's first 60 characters)."""
    row = {"unit": "a.cu", "arch": "9.0", "stage": "cicc", "cpu": 1.0, "wall": 1.0}
    return json.dumps([{**changes, **{k: v for k, v in row.items() if k not in changes}}])


HOSTILE_STAGE_TIMES = [
    ("not-json", "cu130", "{not json", r"job 'j0': stage_times is not JSON"),
    ("an-object", "cu130", '{"a.cu": 1}', r"stage_times is \{'a\.cu': 1\} \(dict\), not a list"),
    ("a-blob", "cu130", b"\x00\x01", r"job 'j0' has stage_times b'\\x00\\x01' \(bytes\), not text"),
    ("entry-a-number", "cu130", "[5]", r"stage_times entry 0 is 5 \(int\)"),
    ("cpu-missing", "cu130", json.dumps([{"unit": "a.cu", "arch": "9.0", "stage": "cicc"}]), r"stage_times entry 0"),
    ("cpu-nan", "cu130", stage(cpu=float("nan")), r"stage_times entry 0 is .*nan"),
    ("cpu-negative", "cu130", stage(cpu=-1), r"stage_times entry 0 is .*-1"),
    ("cpu-true", "cu130", stage(cpu=True), r"stage_times entry 0 is .*True"),
    ("stage-a-number", "cu130", stage(stage=3), r"stage_times entry 0 is .*'stage': 3"),
    ("accelerator-a-number", 130, STAGES, r"job 'j0' has accelerator 130 \(int\), not text"),
]


@pytest.mark.parametrize(("accelerator", "stages", "pattern"), [c[1:] for c in HOSTILE_STAGE_TIMES],
                         ids=[c[0] for c in HOSTILE_STAGE_TIMES])
def test_hostile_stage_times_are_one_ledger_error_naming_the_job(tmp_path: Path, accelerator: object, stages: object,
                                                                  pattern: str) -> None:
    path = tmp_path / "ledger.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE jobs (job_id, package, accelerator, compile_times, stage_times)")
        db.execute("INSERT INTO jobs VALUES ('j0', 'causal-conv1d', ?, NULL, ?)", (accelerator, stages))
    with pytest.raises(LedgerError, match=pattern):
        ledger_model(path, seed_model())
