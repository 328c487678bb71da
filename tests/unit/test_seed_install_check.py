"""The seed install check's choices: which built wheels it checks, and what a mamba-ssm wheel is installed with."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from builder.plan.expand import load_plan
from builder.plan.job import Job
from scripts.seed_install_check import ROOT, Built, built, companions


def _seed() -> dict[str, Job]:
    return {job.identifier: job for job in load_plan(ROOT / "matrix.yaml", "seed").jobs}


def test_mamba_comes_with_the_newest_causal_conv1d_of_its_label_and_python() -> None:
    jobs = _seed()
    wheels = [Built(job, f"{name}.whl") for name, job in jobs.items()]
    by_id = {w.job.identifier: w for w in wheels}
    mamba = by_id["mamba-ssm-1.0.1+pt113cu117-cp310-x86_64"]
    assert companions(mamba, wheels) == ["causal-conv1d==1.2.0.post2+pt113cu117"]
    # only what was built counts: without 1.2.0.post2 the newest built is 1.1.1
    fewer = [w for w in wheels if "1.2.0.post2" not in w.job.identifier]
    assert companions(mamba, fewer) == ["causal-conv1d==1.1.1+pt113cu117"]
    assert companions(by_id["causal-conv1d-1.1.1+pt20cu117-cp311-x86_64"], wheels) == []
    assert companions(mamba, [mamba]) == []


def test_only_built_seed_jobs_in_plan_order(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "ledger.sqlite") as db:
        db.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, status TEXT, wheel TEXT)")
        db.executemany(
            "INSERT INTO jobs VALUES (?, ?, ?)",
            [
                ("mamba-ssm-1.0.1+pt20cu117-cp310-x86_64", "built", "m.whl"),
                ("causal-conv1d-1.0.0+pt113cu117-cp310-x86_64", "built", "c.whl"),
                ("causal-conv1d-1.1.1+pt20cu117-cp310-x86_64", "failed", None),
                ("causal-conv1d-1.7.0+pt214cu130-cp311-x86_64", "built", "other-profile.whl"),
            ],
        )
    found = built(tmp_path, _seed())
    assert [(w.job.identifier, w.wheel) for w in found] == [
        ("causal-conv1d-1.0.0+pt113cu117-cp310-x86_64", "c.whl"),
        ("mamba-ssm-1.0.1+pt20cu117-cp310-x86_64", "m.whl"),
    ]
