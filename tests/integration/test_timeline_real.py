"""The build's timeline for real: lines appended by several processes at once stay whole, and a small torch CUDA
extension (a .cu of two archs through the core pool, a .cpp beside it) built by the compile stage leaves a timeline
whose reader finds the head, the pool's chains, ninja's .cpp outside the pool, the link and the zip."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.core.context import job_context
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.steps import compilation, timeline
from builder.steps.environment import NotBuildableHere, build_env, find_toolkit, runtime_env
from builder.steps.programs import nvcc_plan
from builder.steps.recipes.recipe import arch_env

ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
sys.path.insert(0, sys.argv[1])  # as the nvcc wrapper runs it: the module by path, wheelwright not importable
import nvcc_plan
for index in range(300):
    nvcc_plan.append_line(sys.argv[2], {"writer": int(sys.argv[3]), "index": index, "padding": "x" * 5000})
"""


def test_lines_appended_by_several_processes_at_once_stay_whole(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    folder = str(Path(nvcc_plan.__file__).parent)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, folder, str(path), str(n)]) for n in range(4)]
    assert [writer.wait() for writer in writers] == [0] * 4
    rows = [json.loads(line) for line in path.read_text().splitlines()]  # a torn line would not parse
    assert len(rows) == 4 * 300
    for writer in range(4):
        assert [r["index"] for r in rows if r["writer"] == writer] == list(range(300))


SETUP = """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="tiny-ext", version="0.1", ext_modules=[CUDAExtension("tiny_ext", ["tiny.cpp", "k.cu"])],
      cmdclass={"build_ext": BuildExtension})
"""
KERNEL = """template <int N> __global__ void poly(float* x) {
  float v = x[threadIdx.x];
#pragma unroll
  for (int i = 0; i < N; ++i) v = v * v * 0.5f + i;
  x[threadIdx.x] = v;
}
template __global__ void poly<64>(float*);
void launch(float* x) { poly<64><<<1, 32>>>(x); }
"""


def tiny_project(folder: Path) -> Path:
    folder.mkdir()
    (folder / "setup.py").write_text(SETUP)
    (folder / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                           'build-backend = "setuptools.build_meta"\n')
    (folder / "tiny.cpp").write_text("int tiny_host() { return 1; }\n")  # no torch headers: a g++ step of 1 s
    (folder / "k.cu").write_text(KERNEL)
    return folder


def two_arch_job() -> Job:
    jobs = load_plan(ROOT / "matrix.yaml", "local").jobs
    job = next(j for j in jobs if j.accelerator.name == "cu130" and j.package == "causal-conv1d")
    return dataclasses.replace(job, archs=("8.0", "9.0"))


@pytest.mark.nvcc
def test_a_small_real_build_leaves_a_timeline_the_reader_accounts_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda_home: Path
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_FIXED_ROOT", str(tmp_path / "fixed"))  # not the real builds' workspaces
    job = two_arch_job()
    try:
        toolkit = find_toolkit(job.accelerator, job.archs)
        runtime = runtime_env(job, load_facts())
    except NotBuildableHere as error:
        pytest.skip(f"no torch {job.torch} for Python {job.python} here: {error}")
    env = build_env(job, runtime, toolkit)
    source = tiny_project(tmp_path / "tiny")
    log, kept = tmp_path / "job.log", tmp_path / "logs" / "tiny.timeline.jsonl"
    log.write_text("")
    parallelism = compilation.Parallelism(max_jobs=4, nvcc_threads=1, pool_slots=2)
    started = time.monotonic()
    with job_context(job, log), compilation.workspace(job, source, runtime.site_packages) as space:
        environ = compilation.build_environ(job, env, arch_env(job), space, parallelism, None)
        try:
            compilation.compile_wheel(job, env, space, environ, tmp_path / "built")
        finally:
            compilation.keep_timeline(space, kept, started=started, parallelism=parallelism)
    steps, unreadable = timeline.read(kept)
    wall = timeline.summarise(steps, unreadable)
    print("\n".join(wall.lines("tiny")))
    assert unreadable == 0 and wall.slots == 2
    assert {(s.arch, s.fields["step"]) for s in steps if s.phase == "chain"} == {
        (arch, step) for arch in ("8.0", "9.0") for step in ("gcc (preprocessing)", "cicc", "ptxas")}
    assert wall.critical == "k.cu" and [s.unit for s in wall.outside] == ["tiny.cpp"]
    assert {s.unit for s in steps if s.phase == "ninja"} == {"k.cu", "tiny.cpp"}
    head, tail = dict(wall.head), dict(wall.tail)
    assert head["setup.py start"] > 0 and head["front"] > 0  # torch's import; the TU's preprocessing and cudafe++
    assert {"back ends", "link", "zip"} <= set(tail)
    assert sum(head.values()) == pytest.approx(wall.body[0], abs=1e-3)
    assert sum(tail.values()) == pytest.approx(wall.wall - wall.body[1], abs=1e-3)
    assert 0 < wall.busy <= wall.slots * wall.wall
