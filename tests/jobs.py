"""Jobs for tests, planned from the repository's real matrix.yaml (profile "local") and varied with replace()."""

from __future__ import annotations

import dataclasses
from pathlib import Path

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
