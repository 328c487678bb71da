"""What nvcc really receives: a patched sdist's `setup.py build_ext` under the real torch 2.14.1 and the real CUDA 13.0
nvcc, with nvcc in --dryrun mode (it prints the cicc/ptxas/fatbinary steps instead of running them) and a host
compiler that skips compiling. Seconds per package once the torch environment exists (first run: ~1 min, ~5 GB,
kept in the shared cache)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from builder.core.runner import run
from builder.plan.facts import load_facts
from builder.steps.environment import build_env, find_toolkit, runtime_env
from builder.steps.recipes import apply_recipe

from .test_recipes import CUDA_HOME, VERSIONS, fresh_tree, job_for

TORCH = "2.14.1"
pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.slow,
    pytest.mark.skipif(not (CUDA_HOME / "bin" / "nvcc").exists(), reason=f"needs the CUDA toolkit at {CUDA_HOME}"),
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason=f"torch {TORCH} for CUDA 13.0 is installed for cp311"),
]
# A host compiler for a dry run: torch asks it for its version, the compile and link steps are skipped.
SKIP_CC = """#!/bin/sh
for arg in "$@"; do case "$arg" in -c|-shared) exit 0;; esac; done
exec gcc "$@"
"""


@pytest.fixture(scope="module")
def torch_python() -> tuple[Path, Path]:
    """The build environment and the real torch the builder itself uses (installed once, shared, under a lock)."""
    job = job_for("causal-conv1d-1.7.0")
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, find_toolkit(job.accelerator, job.archs))
    return env.python, runtime.site_packages


def dry_run(python: tuple[Path, Path], root: Path, env: dict[str, str], tmp_path: Path) -> list[set[tuple[str, str]]]:
    """``setup.py build_ext`` with nvcc --dryrun; the (kind, sm) images each .cu file's fatbinary would embed."""
    skip_cc = tmp_path / "skip-cc"
    skip_cc.write_text(SKIP_CC)
    skip_cc.chmod(0o755)
    python, torch_site = python
    env = {
        **os.environ,
        **env,
        "PYTHONPATH": str(torch_site),
        "CUDA_HOME": str(CUDA_HOME),
        "NVCC_PREPEND_FLAGS": "--dryrun",
        "MAX_JOBS": "2",
        "CC": str(skip_cc),
        "CXX": str(skip_cc),
        "LDSHARED": f"{skip_cc} -shared",
    }
    output = run([python, "setup.py", "build_ext"], step="dry-run build_ext", env=env, cwd=root, capture=True).output
    return [
        set(re.findall(r"--image3=kind=(\w+),sm=(\w+)", line)) for line in output.splitlines() if "fatbinary" in line
    ]


def cuda_sources(root: Path) -> list[Path]:
    return sorted((root / "csrc").rglob("*.cu"))


def test_unpatched_upstream_embeds_its_own_arch_list(torch_python: tuple[Path, Path], tmp_path: Path) -> None:
    """The control: TORCH_CUDA_ARCH_LIST alone does not stop upstream's hardcoded list."""
    root = fresh_tree(job_for("causal-conv1d-1.7.0"), tmp_path)
    images = dry_run(torch_python, root, {"TORCH_CUDA_ARCH_LIST": "9.0", "CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}, tmp_path)
    assert images and all({("elf", "75"), ("elf", "90"), ("elf", "121")} <= found for found in images)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_cuda_file_embeds_exactly_the_jobs_archs(
    version: str, torch_python: tuple[Path, Path], tmp_path: Path
) -> None:
    job = job_for(version, archs=("9.0a", "12.0+PTX"))
    root = fresh_tree(job, tmp_path)
    result = apply_recipe(root, job)
    images = dry_run(torch_python, root, dict(result.env), tmp_path)
    assert len(images) == len(cuda_sources(root))
    assert all(found == {("elf", "90a"), ("elf", "120"), ("ptx", "120")} for found in images)
