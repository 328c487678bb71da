"""The core pool around the real nvcc: a two-arch TU taken apart into per-arch steps gives the very object nvcc
gives whole (bytes, per-kernel SASS, depfile), writes its --time rows per arch and its timeline (plan, front, each
arch's chain in order, back), and a one-core pool shared by two nvcc processes never runs two steps at once."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.steps import timeline
from builder.steps.nvcc_time import read_times
from builder.steps.programs import nvcc_plan
from builder.steps.programs.objcache import headers_of
from builder.steps.sass import kernel_sass

CUDA_HOME = Path("/usr/local/cuda-13.0")
NVCC = CUDA_HOME / "bin" / "nvcc"
pytestmark = [pytest.mark.nvcc, pytest.mark.skipif(not NVCC.is_file(), reason=f"no CUDA toolkit at {CUDA_HOME}")]
WRAPPER = Path(nvcc_plan.__file__).with_name("objcache.py")
GENCODES = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
            "-gencode", "arch=compute_90,code=compute_90"]
KERNELS = """#include <cstdio>
template <int N> __global__ void poly(float* x) {
  float v = x[threadIdx.x];
#pragma unroll
  for (int i = 0; i < N; ++i) v = v * v * 0.5f + i;
  x[threadIdx.x] = v;
}
namespace { __global__ void internal(float* x) { x[0] = 1.f; } }
template __global__ void poly<16>(float*);
template __global__ void poly<64>(float*);
template __global__ void poly<256>(float*);
void launch(float* x) { poly<16><<<1, 32>>>(x); internal<<<1, 1>>>(x); }
"""


def compile_tu(source: Path, out: Path, *, pool: Path | None, slots: int = 2) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "NVCC_APPEND_FLAGS": f"--threads 4 --time {out / 'time.csv'}"}
    if pool is not None:
        env.update({nvcc_plan.POOL_ENV: str(pool), nvcc_plan.SLOTS_ENV: str(slots),
                    nvcc_plan.TIMELINE_ENV: str(out / "timeline.jsonl")})
    command = [sys.executable, str(WRAPPER), str(out / "cache"), "off", str(NVCC), "-MD", "-MF", str(out / "k.o.d"),
               "-O3", "-Xcompiler", "-fPIC", "-c", str(source), "-o", str(out / "k.o"), *GENCODES]
    # a script, as torch runs it (PYTORCH_NVCC): without wheelwright importable, the sibling module is found
    return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> None:
    _, stderr = process.communicate()
    assert process.returncode == 0, stderr


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "k.cu"
    path.parent.mkdir()
    path.write_text(KERNELS)
    return path


def test_split_compile_is_the_whole_compile(tmp_path: Path, source: Path, cuobjdump: Path) -> None:
    start = time.monotonic()
    finished(compile_tu(source, tmp_path / "whole", pool=None))
    whole_wall = time.monotonic() - start
    start = time.monotonic()
    finished(compile_tu(source, tmp_path / "split", pool=tmp_path / "pool"))
    split_wall = time.monotonic() - start
    whole, split = tmp_path / "whole" / "k.o", tmp_path / "split" / "k.o"
    assert split.read_bytes() == whole.read_bytes()
    sass = kernel_sass(cuobjdump, split)
    assert sass == kernel_sass(cuobjdump, whole)
    assert {arch for arch, _ in sass} == {"sm_80", "sm_90"} and len(sass) == 2 * 4
    assert headers_of(tmp_path / "split" / "k.o.d") == headers_of(tmp_path / "whole" / "k.o.d")
    rows = read_times(tmp_path / "split" / "time.csv")
    assert {r["arch"] for r in rows} == {"8.0", "9.0", "host"} and all(r["seconds"] > 0 for r in rows)
    assert_timeline(tmp_path / "split" / "timeline.jsonl")
    print(f"whole nvcc --threads 4: {whole_wall:.1f} s, split on a 2-core pool: {split_wall:.1f} s")


def assert_timeline(path: Path) -> None:
    """The TU's rows: planned, then its front, each arch's chain in nvcc's order, its back; waits for each."""
    steps, unreadable = timeline.read(path)
    assert unreadable == 0 and {s.unit for s in steps} == {"k.cu"}
    by_start = sorted(steps, key=lambda s: s.start)
    phases = [s.phase for s in by_start if s.phase in ("plan", "front", "back")]
    assert phases == ["plan", "front", "front", "back", "back", "back"]
    (plan,), (tu,) = [s for s in steps if s.phase == "plan"], [s for s in steps if s.phase == "tu"]
    fronts, chains, backs = ([s for s in steps if s.phase == p] for p in ("front", "chain", "back"))
    assert [s.fields["step"] for s in fronts] == ["gcc (preprocessing)", "cudafe++"]
    for arch in ("8.0", "9.0"):
        chain = sorted((s for s in chains if s.arch == arch), key=lambda s: s.start)
        assert [s.fields["step"] for s in chain] == ["gcc (preprocessing)", "cicc", "ptxas"]
        assert all(a.end <= b.start for a, b in itertools.pairwise(chain))
    assert [s.fields["step"] for s in backs] == ["fatbinary", "rm", "gcc"]
    assert tu.start <= plan.start <= plan.end <= min(s.start for s in fronts)
    assert max(s.end for s in fronts) <= min(s.start for s in chains)
    assert max(s.end for s in chains) <= min(s.start for s in backs) and max(s.end for s in backs) <= tu.end
    waits = sorted((s.part, s.arch) for s in steps if s.phase == "wait")
    assert waits == [("back", ""), ("chain", "8.0"), ("chain", "9.0"), ("front", "")]


def test_one_core_pool_shared_by_two_processes_runs_one_step_at_a_time(tmp_path: Path, source: Path) -> None:
    start = time.monotonic()
    processes = [compile_tu(source, tmp_path / f"tu{i}", pool=tmp_path / "pool", slots=1) for i in range(2)]
    for process in processes:
        finished(process)
    wall = time.monotonic() - start
    steps = sum(r["seconds"] for i in range(2) for r in read_times(tmp_path / f"tu{i}" / "time.csv"))
    assert steps <= wall, f"{steps:.1f} s of steps ran within {wall:.1f} s: two at once"
