"""Reproducible wheels through the real nvcc: a toy extension with internal-linkage device code (an anonymous-
namespace kernel, static __device__ functions and a static __device__ variable, where nvcc's generated names show)
built twice, each build in its own process, with the object cache off, gives the same wheel bytes; plain nvcc does
not, because the object keeps nvcc's per-process temp-file name."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from builder.steps.programs.objcache import comparable_bytes

ROOT = Path(__file__).resolve().parents[2]
TOY = r"""
#include <cuda_runtime.h>
namespace {
__device__ __noinline__ float twice(float x) { return 2.0f * x; }
__global__ void anon_kernel(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = twice(in[i]);
}
}
static __device__ int calls;
static __device__ __noinline__ float plus_one(float x) { atomicAdd(&calls, 1); return x + 1.0f; }
__global__ void toy_kernel(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = plus_one(in[i]);
}
extern "C" void launch_toy(float* out, const float* in, int n) {
  toy_kernel<<<(n + 255) / 256, 256>>>(out, in, n);
  anon_kernel<<<(n + 255) / 256, 256>>>(out, in, n);
}
"""
# One build, as its own process: the nvcc call goes through the wrapper compilation.py installs as PYTORCH_NVCC (mode
# "off": no cache), the link through g++, the wheel through the provenance step (which rewrites the archive).
BUILD = r"""
import subprocess, sys
from pathlib import Path
from builder.steps.programs import objcache
from tests.jobs import local_job
from scripts.bench.wheels import job_wheel, with_provenance
nvcc, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True)
obj = src.parent / "toy.o"
args = ["-gencode", "arch=compute_90,code=sm_90", "-Xcompiler", "-fPIC", "-c", str(src), "-o", str(obj)]
sys.argv = ["objcache", str(out / "unused-cache"), "off", nvcc, *args]
assert objcache.main(sys.argv[1:]) == 0
library = src.parent / "toy_cuda.so"
lib64 = "-L" + str(Path(nvcc).parents[1] / "lib64")
subprocess.run(["g++", "-shared", "-o", str(library), str(obj), lib64, "-lcudart"], check=True)
job = local_job()
files = {"causal_conv1d/__init__.py": b"", "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so": library}
wheel = job_wheel(out, job, files, platform="manylinux_2_28_x86_64")
with_provenance(wheel, job)
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(nvcc: Path, source: Path, out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-c", BUILD, str(nvcc), str(source), str(out)],
        cwd=ROOT,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SOURCE_DATE_EPOCH": "315532800"},
    )
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.mark.nvcc
def test_the_same_toy_job_built_twice_gives_the_same_wheel(tmp_path: Path, cuda_home: Path) -> None:
    source = tmp_path / "src" / "toy.cu"  # fixed path for both builds, as compilation.py's fixed build root gives
    source.parent.mkdir()
    source.write_text(TOY)
    nvcc = cuda_home / "bin" / "nvcc"
    first = _build(nvcc, source, tmp_path / "first")
    second = _build(nvcc, source, tmp_path / "second")
    assert first.name == second.name
    assert _sha256(first) == _sha256(second)


@pytest.mark.nvcc
def test_plain_nvcc_objects_differ_only_in_the_temp_file_name(tmp_path: Path, cuda_home: Path) -> None:
    source = tmp_path / "toy.cu"
    source.write_text(TOY)
    objects = []
    for n in (1, 2):
        objects.append(tmp_path / f"plain{n}.o")
        subprocess.run(
            [
                cuda_home / "bin" / "nvcc",
                "-gencode",
                "arch=compute_90,code=sm_90",
                "-Xcompiler",
                "-fPIC",
                "-c",
                source,
                "-o",
                objects[-1],
            ],
            check=True,
        )
    first, second = (o.read_bytes() for o in objects)
    assert first != second and len(first) == len(second)
    assert comparable_bytes(objects[0]) == comparable_bytes(objects[1])  # masked: nothing else differs
    assert b"_INTERNAL_" in first  # the internal-linkage names are there, and equal (named from the file, not pid)
