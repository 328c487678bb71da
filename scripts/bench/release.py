"""A wheelhouse of the release plan's shape: one small wheel for every job of `plan --profile release` (platform
tag and verify report as the farm writes them), a few injected failures in the ledger, and a few jobs left out as
if the plan had not selected them. For the landing page's tests, its benchmark and docs/landing.png."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.wheelhouse import Layout
from builder.plan.archs import split
from builder.plan.expand import load_plan
from builder.plan.job import Job
from scripts.bench.wheels import WheelSpec, make_wheel

ROOT = Path(__file__).resolve().parents[2]
BASE_URL = "https://wheels.example.org"


@dataclass(frozen=True, kw_only=True)
class Injected:
    job_id: str
    status: Status
    phase: str
    reason: str


FAILURES = (
    Injected(
        job_id="causal-conv1d-1.7.0+pt214cu130-cp313-x86_64",
        status=Status.FAILED,
        phase="compile",
        reason="nvcc fatal   : Unsupported gpu architecture 'compute_121'",
    ),
    Injected(
        job_id="mamba-ssm-2.3.2.post1+pt26rocm624-cp312-x86_64",
        status=Status.QUARANTINED,
        phase="verify",
        reason="gpu-archs: no kernel image for gfx942",
    ),
    Injected(
        job_id="causal-conv1d-1.7.0+pt212rocm72-cp311-x86_64",
        status=Status.UNBUILDABLE,
        phase="env",
        reason="no ROCm 7.2 toolkit on this builder",
    ),
)
NOT_PLANNED = (  # jobs of the plan left out, as a narrower --select would: two cells, on both platforms
    "mamba-ssm-2.3.2.post1+pt213cu132-cp310-x86_64",
    "mamba-ssm-2.3.2.post1+pt213cu132-cp310-aarch64",
    "mamba-ssm-2.3.2.post1+pt213cu132-cp311-x86_64",
    "mamba-ssm-2.3.2.post1+pt213cu132-cp311-aarch64",
)


def release_jobs() -> tuple[Job, ...]:
    return load_plan(ROOT / "matrix.yaml", "release").jobs


def write_release_wheelhouse(output: Path) -> tuple[Job, ...]:
    """Wheels in ``output``/dist and the ledger beside them; returns the jobs that were built."""
    failures = {f.job_id: f for f in FAILURES}
    built = []
    with Ledger(Layout(root=output).ledger) as ledger:
        for job in release_jobs():
            if job.identifier in NOT_PLANNED:
                continue
            if job.identifier in failures:
                injected = failures[job.identifier]
                ledger.put(_entry(job, injected.status, phase=injected.phase, reason=injected.reason))
                continue
            wheel = make_wheel(Layout(root=output).dist, spec_for(job))
            ledger.put(
                _entry(
                    job,
                    Status.BUILT,
                    phase="verify",
                    wheel=wheel.name,
                    wheel_sha256=sha256_of(wheel),
                    wheel_size=wheel.stat().st_size,
                    report=json.dumps(_report(job)),
                )
            )
            built.append(job)
    return tuple(built)


def spec_for(job: Job) -> WheelSpec:
    return WheelSpec(
        project=job.package,
        version=job.version,
        label=job.label,
        python=job.python_tag,
        platform=f"{job.manylinux}_{job.platform}",
        summary=f"{job.package} built by the test farm",
    )


def _report(job: Job) -> dict[str, object]:
    """What the verify gate records: CUDA kernel images and PTX per the job's archs (ROCm objects are not read)."""
    sass, ptx = split(job.archs) if job.accelerator.kind == "cuda" else ((), ())
    return {"wheel": "", "job": job.identifier, "ok": True, "checks": [], "sass": list(sass), "ptx": list(ptx)}


def _entry(job: Job, status: Status, **fields: Any) -> LedgerEntry:
    return LedgerEntry(
        job_id=job.identifier,
        package=job.package,
        version=job.version,
        label=job.label,
        torch=job.torch,
        accelerator=job.accelerator.name,
        python=job.python,
        input_hash="0" * 64,
        status=status,
        **fields,
    )
