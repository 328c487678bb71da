"""The stage cache around the real nvcc, with upstream's -lineinfo: a build against another "torch" whose header
differs only in host code reuses cicc and ptxas and gets the very object a fresh compile gives; a header whose
mtime differs (ptxas writes it into the cubin's line table) reuses cicc only, and again gives a fresh compile's
bytes; a device change reuses nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.steps import sharedcache
from builder.steps.programs import nvcc_plan, stagecache

CUDA_HOME = Path("/usr/local/cuda-13.0")
NVCC = CUDA_HOME / "bin" / "nvcc"
pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not NVCC.is_file(), reason=f"no CUDA toolkit at {CUDA_HOME}")]
WRAPPER = Path(nvcc_plan.__file__).with_name("objcache.py")
KERNELS = """#include "torchish.h"
template <int N> __global__ void poly(float* x) {
  float v = x[threadIdx.x];
#pragma unroll
  for (int i = 0; i < N; ++i) v = scale(v) + i;
  x[threadIdx.x] = v;
}
template __global__ void poly<16>(float*);
void launch(float* x) { poly<16><<<1, 32>>>(x); }
"""
# torch's stand-in: a device function the kernel inlines (so -lineinfo names this header), and host code
TORCHISH = """__device__ inline float scale(float v) {{ return v * v * {factor}; }}
#ifndef __CUDA_ARCH__
inline int torch_minor() {{ return {minor}; }}
#endif
"""
EPOCH = 315532800


def compile_tu(workspace: Path, cache: Path, name: str, *, minor: int, factor: str = "0.5f",
               mtime: int = EPOCH) -> tuple[Path, dict[str, str]]:
    """One build's compile of the TU in the (fixed) workspace, through the wrapper and the pool; the object and
    what the stage cache did."""
    source = workspace / "src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "k.cu").write_text(KERNELS)
    os.utime(source / "k.cu", (EPOCH, EPOCH))
    (source / "torchish.h").write_text(TORCHISH.format(factor=factor, minor=minor))
    os.utime(source / "torchish.h", (mtime, mtime))
    out = workspace.parent / "out" / name
    out.mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", nvcc_plan.POOL_ENV: str(workspace / "core-pool"), nvcc_plan.SLOTS_ENV: "2",
           stagecache.EVENTS_ENV: str(out / "events.jsonl"), "WHEELWRIGHT_OBJCACHE_SCOPE": f"torch 2.{minor}"}
    command = [sys.executable, str(WRAPPER), str(cache), "use", str(NVCC), "-MD", "-MF", str(out / "k.o.d"),
               f"-I{source}", "-O3", "-lineinfo", "-c", str(source / "k.cu"), "-o", str(out / "k.o"),
               "-gencode", "arch=compute_90,code=sm_90"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    results = {str(e["stage"]): str(e["result"]) for e in sharedcache.events_of(out / "events.jsonl") if "stage" in e}
    return out / "k.o", results


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("host-only", {"cicc": "hit", "ptxas": "hit"}),
        ("header-mtime", {"cicc": "hit", "ptxas": "miss"}),
        ("device-code", {"cicc": "miss", "ptxas": "miss"}),
    ],
)
def test_the_next_torch_reuses_exactly_what_is_the_same(tmp_path: Path, change: str, expected: dict[str, str]) -> None:
    workspace, cache = tmp_path / "ws", tmp_path / "objects"
    _, first = compile_tu(workspace, cache, "first", minor=12)
    assert first == {"cicc": "miss", "ptxas": "miss"}
    factor = "0.25f" if change == "device-code" else "0.5f"
    mtime = EPOCH + 86400 if change == "header-mtime" else EPOCH
    reused, results = compile_tu(workspace, cache, "second", minor=13, factor=factor, mtime=mtime)
    assert results == expected
    fresh, _ = compile_tu(workspace, tmp_path / "cold", "fresh", minor=13, factor=factor, mtime=mtime)
    assert reused.read_bytes() == fresh.read_bytes()
