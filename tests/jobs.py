"""Jobs for tests, planned from the repository's real matrix.yaml (profile "local") and varied with replace(), and
the ledger rows their builds leave."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from builder.core.ledger import LedgerEntry
from builder.plan.accelerator import Accelerator
from builder.plan.expand import load_plan
from builder.plan.job import Job

MATRIX = Path(__file__).parent.parent / "matrix.yaml"


def local_job(package: str = "causal-conv1d", **changes: object) -> Job:
    """The local profile's job for ``package`` (torch 2.14.1, cu130, Python 3.11, archs 9.0), with ``changes``."""
    (job,) = [j for j in load_plan(MATRIX, "local", host="3.11").jobs if j.package == package]
    return dataclasses.replace(job, **changes) if changes else job


def rocm_job(**changes: object) -> Job:
    return local_job(accelerator=Accelerator.rocm("6.1"), archs=("gfx942",), **changes)


def ledger_entry(**fields: Any) -> LedgerEntry:
    """A ledger row: causal-conv1d 1.7.0 built for torch 2.14.1+cu130 on Python 3.11, with ``fields`` changed; its
    job_id follows package, version, label and python unless given."""
    row: dict[str, Any] = {"package": "causal-conv1d", "version": "1.7.0", "label": "pt214cu130", "torch": "2.14.1",
                           "accelerator": "cu130", "python": "3.11", "input_hash": "0" * 64, "status": "built",
                           **fields}
    tag = "cp" + row["python"].replace(".", "")
    row.setdefault("job_id", f"{row['package']}-{row['version']}+{row['label']}-{tag}-x86_64")
    return LedgerEntry(**row)
