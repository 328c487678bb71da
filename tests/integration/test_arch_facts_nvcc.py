"""Arch facts end to end with the real nvcc 13.0: a plan asking causal-conv1d 1.7.0 for sm_90, sm_100 and sm_103
compiles no sm_103 SASS, and the verify gate reads the fatbin and confirms exactly that; `+PTX` and PTX-only jobs'
objects carry the PTX they asked for, and the gate refuses one that lacks it. The kernel is the suite's toy kernel;
the gencode flags are the recipe's own for the planned job."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.plan.arch import Arch
from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags
from builder.steps.verify import verify_wheel
from scripts.bench.wheels import job_wheel

from .conftest import CompileCu

pytestmark = pytest.mark.nvcc

MATRIX = """\
default_profile: b300
packages:
  - name: causal-conv1d
    versions:
      - {version: 1.7.0, sha256: 3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b}
    recipe: {import_names: [causal_conv1d_cuda]}
profiles:
  b300:
    torch: [2.14.1]
    accelerators: [cu130]
    python: ["3.11"]
    archs:
      cu130: ["9.0", "10.0", "10.3"]
  jit:
    torch: [2.14.1]
    accelerators: [cu130]
    python: ["3.11"]
    archs:
      cu130: ["9.0+PTX", "compute_100"]
"""


def planned(tmp_path: Path, profile: str):
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    (job,) = load_plan(path, profile).jobs
    return job


def compiled(job, compile_cu: CompileCu, name: str) -> Path:
    """The toy kernel compiled with the -gencode flags the recipe gives nvcc for ``job``."""
    flags = cuda_gencode_flags(job.archs, "test")
    return compile_cu(name, [flags[i + 1] for i in range(0, len(flags), 2)])


def gate(job, so: Path, tmp_path: Path):
    report = verify_wheel(job_wheel(tmp_path, job, {so.name: so}, platform="manylinux_2_28_x86_64"), job, runtime=None)
    return report, next(c for c in report.checks if c.name == "gpu-archs")


def test_no_sm103_sass_and_the_gate_confirms_the_fatbin(compile_cu: CompileCu, tmp_path: Path) -> None:
    job = planned(tmp_path, "b300")
    assert tuple(map(str, job.archs)) == ("9.0", "10.0")
    report, archs = gate(job, compiled(job, compile_cu, "b300"), tmp_path)
    assert archs.ok, archs.detail
    assert report.sass == ("9.0", "10.0") and report.ptx == ()


def test_ptx_jobs_carry_their_ptx(compile_cu: CompileCu, tmp_path: Path) -> None:
    job = planned(tmp_path, "jit")
    so = compiled(job, compile_cu, "jit")
    report, archs = gate(job, so, tmp_path)
    assert archs.ok, archs.detail
    assert report.sass == ("9.0",) and report.ptx == ("9.0", "10.0")
    # the same object judged for a job that wanted PTX 12.0 as well: refused, naming what is missing
    wants_more = dataclasses.replace(job, archs=(*job.archs, Arch.parse("compute_120")))
    _, refused = gate(wants_more, so, tmp_path)
    assert not refused.ok and "missing PTX 12.0" in refused.detail
