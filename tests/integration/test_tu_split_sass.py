"""The split of causal-conv1d 1.7.0's causal_conv1d_bwd.cu (recipe patch split-causal-conv1d-bwd) changes no
kernel: the per-kernel SASS of its six generated TUs, taken together, equals the unsplit TU's (cuobjdump, kernel
names sorted, the module id of internal symbols normalised). One arch (sm_90) and torch's own flags for it; the
seven compiles run through one two-core pool, as a build runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from builder.plan.facts import load_facts
from builder.steps.environment import runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.programs import nvcc_plan
from builder.steps.recipes.patches import BWD_PARTS, SPLIT_CORES_ENV, split_causal_conv1d_bwd
from builder.steps.sass import kernel_sass
from tests.jobs import local_job

CUDA_HOME = Path("/usr/local/cuda-13.0")
NVCC = CUDA_HOME / "bin" / "nvcc"
pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.slow,
    pytest.mark.proof,  # ten minutes of compiles no CI build needs: `make test-proof`; passed 2026-12-01 (1080 kernels)
    pytest.mark.skipif(not NVCC.is_file(), reason=f"no CUDA toolkit at {CUDA_HOME}"),
]
WRAPPER = Path(nvcc_plan.__file__).with_name("objcache.py")
# what torch's cpp_extension and causal-conv1d 1.7.0's setup.py pass nvcc for sm_90 (its build.ninja)
FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr", "--compiler-options", "-fPIC", "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-extended-lambda", "--use_fast_math", "-lineinfo", "-gencode", "arch=compute_90,code=sm_90",
    "-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=causal_conv1d_cuda", "-ccbin", "gcc", "-std=c++20",
]


def start_compile(source: Path, includes: list[str], pool: Path, out: Path) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", nvcc_plan.POOL_ENV: str(pool), nvcc_plan.SLOTS_ENV: "2"}
    command = [sys.executable, str(WRAPPER), str(out.parent / "cache"), "off", str(NVCC), *includes,
               "-c", str(source), "-o", str(out), *FLAGS]
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def test_split_bwd_has_the_unsplit_bwds_sass(tmp_path: Path, cuobjdump: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPLIT_CORES_ENV, "64")  # all six parts, whatever this machine's cores
    job = local_job()
    source = unpack_sdist(fetch_sdist(job), tmp_path / "src")
    torch_include = runtime_env(job, load_facts()).site_packages / "torch" / "include"
    includes = [f"-I{source / 'csrc'}", f"-I{torch_include}", f"-I{torch_include / 'torch/csrc/api/include'}",
                f"-I{CUDA_HOME / 'include'}"]
    # the patch as a full-arch job runs it (this job has one arch, for which the patch keeps the TU whole)
    full_arch = local_job(archs=("7.5", "8.0", "8.7", "9.0", "10.0", "11.0", "12.0", "12.1"))
    changes = split_causal_conv1d_bwd(source, full_arch)
    assert changes and "split into" in changes[0], changes
    units = [source / "csrc" / "causal_conv1d_bwd.cu",
             *(source / "csrc" / f"causal_conv1d_bwd_part{k}.cu" for k in range(1, BWD_PARTS + 1))]
    objects = [tmp_path / "obj" / f"{unit.stem}.o" for unit in units]
    objects[0].parent.mkdir()
    processes = [start_compile(u, includes, tmp_path / "pool", o) for u, o in zip(units, objects, strict=True)]
    for process in processes:
        _, stderr = process.communicate()
        assert process.returncode == 0, stderr[-3000:]
    unsplit = kernel_sass(cuobjdump, objects[0])
    split: dict[tuple[str, str], str] = {}
    for part in objects[1:]:
        kernels = kernel_sass(cuobjdump, part)
        assert kernels, f"{part.name} compiled no kernel: its share of the instantiations is missing"
        assert not set(kernels) & set(split), "a kernel compiled in two parts: the split would pay for it twice"
        split.update(kernels)
    assert sorted(split) == sorted(unsplit)
    differing = [name for key, name in sorted(unsplit) if split[(key, name)] != unsplit[(key, name)]]
    assert not differing, f"{len(differing)} of {len(unsplit)} kernels' SASS differ, e.g. {differing[:3]}"
