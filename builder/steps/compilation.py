"""Compile: build the patched sdist into a wheel with `build` (no isolation) from fixed paths, with the
job's toolkit, torch, ABI, arch list and a parallelism fitted to free cores and memory. compile_job() is the phase's
one entry point (the orchestrator's); the pieces stay public for the benchmarks and tests that time one of them."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shlex
import shutil
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import build

from builder.core import context
from builder.core.errors import WheelwrightError
from builder.core.runner import StepFailed, kill_marked, run
from builder.core.settings import cache_root, setting, setting_number, setting_path
from builder.plan.job import Job
from builder.steps import cross, timeline
from builder.steps.environment import BuildEnv
from builder.steps.nvcc_time import read_times
from builder.steps.programs import nvcc_plan
from builder.steps.programs import objcache as nvcc_cache

log = logging.getLogger(__name__)

# Set in every process of a compile: ninja starts each command in a process group of its own, so a build killed by
# its group (kill -9, a cancelled CI job) leaves its compilers running, writing objects, depfiles and the core pool's
# files under the workspace's fixed paths; the next build of the workspace finds them by this and ends them first.
WORKSPACE_ENV = "WHEELWRIGHT_WORKSPACE"

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\] .*\s-c\s+(\S+\.(?:cu|cpp|cc|c|hip))\b")


def compile_memory_bytes() -> int:
    """Upper bound of one nvcc translation unit's resident memory, measured: causal-conv1d sm_90 peaked at 3.4 GB,
    mamba-ssm at 1.6 GB. A setting because more archs per TU (nvcc --threads) raise it."""
    return int(setting_number("WHEELWRIGHT_COMPILE_MEMORY_GB", above=0) * 2**30)


def fixed_root() -> Path:
    return setting_path("WHEELWRIGHT_FIXED_ROOT") or Path("/tmp/wheelwright-build")


def split_by_default() -> bool:
    """WHEELWRIGHT_NVCC_SPLIT=0 compiles each TU with nvcc whole (its own --threads), as before the core pool."""
    return setting("WHEELWRIGHT_NVCC_SPLIT") != "0"


@dataclass(frozen=True, kw_only=True)
class Parallelism:
    max_jobs: int  # ninja workers (translation units at once)
    nvcc_threads: int  # archs compiled at once inside one translation unit (nvcc whole, without the pool)
    pool_slots: int = 0  # cores of the build's nvcc core pool (nvcc_plan.py); 0: no pool, nvcc whole

    @classmethod
    def fit(cls, archs: int, *, share: int = 1, split: bool | None = None) -> Parallelism:
        """Split this machine's free cores and memory between ``share`` concurrent builds.

        With the pool, every (TU, arch) device step holds one core, so the pool's size is the core and memory
        bound, and ninja may start more TUs than that: a waiting TU costs nothing, and the pool needs every TU's
        work in view to start the longest first."""
        cores = max(
            1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) // share
        )
        memory = available_memory() // share
        bounded = max(1, min(cores, memory // compile_memory_bytes()))
        if split if split is not None else split_by_default():
            return cls(max_jobs=min(64, 4 * bounded), nvcc_threads=1, pool_slots=bounded)
        return cls(max_jobs=bounded, nvcc_threads=max(1, min(archs, cores)))


def available_memory() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 4 * 2**30


@dataclass(frozen=True, kw_only=True)
class Workspace:
    """Fixed paths shared by every Python of one (package, version, label): same paths, same object bytes."""

    root: Path

    @property
    def source(self) -> Path:
        return self.root / "src"

    @property
    def torch_site(self) -> Path:
        return self.root / "torch-site"

    @property
    def cuda_home(self) -> Path:
        return self.root / "cuda-home"

    @property
    def nvcc_times(self) -> Path:
        return self.root / "nvcc-time.csv"

    @property
    def core_pool(self) -> Path:
        return self.root / "core-pool"

    @property
    def nvcc_costs(self) -> Path:
        return self.root / "nvcc-costs.json"

    @property
    def timeline(self) -> Path:
        """The build's timeline (builder/steps/timeline.py): the pool's steps and the compile stage's marks."""
        return self.core_pool / nvcc_plan.TIMELINE

    def ninja_logs(self) -> list[Path]:
        """ninja's own logs (start and end of each step) in the source's build directories."""
        return sorted(self.source.glob("build/**/.ninja_log"))

    @classmethod
    def for_job(cls, job: Job) -> Workspace:
        """Per (package, version, label), and per platform beside x86_64: an aarch64 build's objects, core pool and
        timeline never share a folder with the x86_64 build of the same label."""
        name = f"{job.package}-{job.local_version}"
        return cls(root=fixed_root() / (name if job.platform == "x86_64" else f"{name}-{job.platform}"))


@contextmanager
def workspace(job: Job, source: Path, torch_site: Path) -> Iterator[Workspace]:
    """Lay the patched source and a link to the job's torch at the fixed paths, holding a lock meanwhile."""
    space = Workspace.for_job(job)
    space.root.mkdir(parents=True, exist_ok=True)
    # beside the root, named after all of it: with_suffix would cut "1.7.0+pt214cu130" to "1.7" and share the lock
    with open(space.root.parent / f"{space.root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # with the lock held, any process still marked with this workspace was left by a build that was killed
        if reaped := kill_marked(WORKSPACE_ENV, str(space.root)):
            log.warning("%s: killed %d processes an earlier, killed build left running there", space.root, reaped)
        shutil.rmtree(space.source, ignore_errors=True)
        shutil.copytree(source, space.source, symlinks=True)
        if space.torch_site.is_symlink() or space.torch_site.exists():
            space.torch_site.unlink()
        space.torch_site.symlink_to(torch_site, target_is_directory=True)
        space.nvcc_times.unlink(missing_ok=True)
        shutil.rmtree(space.core_pool, ignore_errors=True)
        space.core_pool.mkdir()  # the timeline's folder, pool or not
        yield space


@dataclass(frozen=True, kw_only=True)
class Compiled:
    """What the compile phase hands on: the wheel the backend wrote, nvcc's seconds per unit and arch, and the
    compiled tree (its objects: a step that links them again reads them there while the phase's block runs)."""

    wheel: Path
    times: list[dict[str, object]]
    source: Path


@contextmanager
def compile_job(
    job: Job,
    env: BuildEnv,
    source: Path,
    torch_site: Path,
    *,
    recipe_env: Mapping[str, str],
    into: Path,
    timeline_to: Path,
    started: float,
    share: int = 1,
    objcache: str = "off",
    costs: Mapping[str, Mapping[str, float]] | None = None,
    crossed: cross.CrossBuild | None = None,
) -> Iterator[Compiled]:
    """The compile phase: the patched ``source`` at the fixed paths, the build's environment (the object cache in
    mode ``objcache``: use, verify or off; the core pool ordered by ``costs``; a cross build's wrappers), the PEP 517
    backend writing the wheel into ``into``; the timeline (phase begun at ``started``) kept at ``timeline_to``, a
    failed compile's too. The workspace stays held until the block ends."""
    with workspace(job, source, torch_site) as space:
        parallelism = Parallelism.fit(len(job.archs), share=share)
        cache = None if objcache == "off" else (objcache_root(), objcache)
        cross_environ = crossed.environ(space.torch_site, *cross.build_paths(env.python)) if crossed else None
        environ = build_environ(job, env, recipe_env, space, parallelism, cache, costs, cross=cross_environ)
        try:
            wheel = compile_wheel(job, env, space, environ, into)
        finally:  # a failed compile's timeline says where it stood
            keep_timeline(space, timeline_to, started=started, parallelism=parallelism)
        yield Compiled(wheel=wheel, times=read_times(space.nvcc_times), source=space.source)


def build_environ(
    job: Job,
    env: BuildEnv,
    recipe_env: Mapping[str, str],
    space: Workspace,
    parallelism: Parallelism,
    objcache: tuple[Path, str] | None,
    costs: Mapping[str, Mapping[str, float]] | None = None,
    cross: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The build's environment; ``costs`` ({unit: {arch: seconds, "host": seconds}}, measured: the ledger's
    compile times) order the core pool's waiters; ``cross`` is a cross build's (builder/steps/cross.py)."""
    toolkit = env.toolkit
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CUDA", "TORCH_", "NVCC_"))
    }
    environ.update(recipe_env)
    environ.update(
        CUDA_HOME=str(toolkit.root),
        CUDA_PATH=str(toolkit.root),
        PATH=os.pathsep.join([str(env.python.parent), str(toolkit.root / "bin"), environ.get("PATH", "")]),
        # the build venv's own tools first (a system torch's site-packages may hold other setuptools), then torch at
        # the fixed path, so torch's header paths inside objects are the same for every Python
        PYTHONPATH=os.pathsep.join([str(env.site_packages), str(space.torch_site)]),
        MAX_JOBS=str(parallelism.max_jobs),
        # last --threads wins over setup.py's hardcoded 4; --time appends a CSV row per phase, arch and unit
        NVCC_APPEND_FLAGS=f"--threads {parallelism.nvcc_threads} --time {space.nvcc_times}",  # the pool drops it
        PIP_NO_BUILD_ISOLATION="1",
        PYTHONUNBUFFERED="1",  # the backend writes to our pipe: lines reach the log and the progress as they happen
        SOURCE_DATE_EPOCH=environ.get("SOURCE_DATE_EPOCH", "315532800"),
    )
    environ[WORKSPACE_ENV] = str(space.root)  # how the next build finds what a killed one left running
    environ.update(compiler_environ(toolkit.cc, toolkit.cxx, environ["PATH"]))
    environ.update(cross or {})
    environ[nvcc_cache.PLATFORM_ENV] = job.platform  # the object cache keys every object by its platform
    # The wrapper runs even without the cache ("off"): it makes every nvcc call deterministic (see objcache.py).
    root, mode = objcache if objcache is not None else (objcache_root(), "off")
    # run as a script (it needs only the standard library): PYTHONPATH above does not lead to wheelwright
    wrapper = [sys.executable, nvcc_cache.__file__, str(root), mode, str(toolkit.nvcc)]
    environ["PYTORCH_NVCC"] = shlex.join(wrapper)
    if not honours_pytorch_nvcc(space.torch_site):
        home = cuda_home_with_wrapper(toolkit.root, wrapper, space.cuda_home)
        environ.update(CUDA_HOME=str(home), CUDA_PATH=str(home))
    if parallelism.pool_slots:
        environ[nvcc_plan.POOL_ENV] = str(space.core_pool)
        environ[nvcc_plan.SLOTS_ENV] = str(parallelism.pool_slots)
        space.nvcc_costs.write_text(json.dumps(dict(costs or {}), sort_keys=True))
        environ[nvcc_plan.COSTS_ENV] = str(space.nvcc_costs)
    environ[nvcc_plan.TIMELINE_ENV] = str(space.timeline)
    # setuptools adds the build venv's include directory: per Python, like the interpreter's own
    environ[nvcc_cache.PER_PYTHON_ENV] = str(env.python.parent.parent / "include")
    return environ


def compiler_environ(cc: Path, cxx: Path, path: str) -> dict[str, str]:
    """CC and CXX for the host compiler the toolkit accepts (torch passes $CC to nvcc as -ccbin).

    By name where PATH finds that same file: torch picks its compiler-version bounds by the name (`clang++-16`
    starts with "clang"; `/usr/bin/clang++-16` reads as gcc and fails gcc's bounds for CUDA 13.0)."""
    named = {}
    for key, compiler in (("CC", cc), ("CXX", cxx)):
        found = shutil.which(compiler.name, path=path)
        same = found is not None and Path(found).resolve() == compiler.resolve()
        named[key] = compiler.name if same else str(compiler)
    return named


def honours_pytorch_nvcc(torch_site: Path) -> bool:
    """torch reads PYTORCH_NVCC from 2.1 on; torch 2.0 and 1.13 always run $CUDA_HOME/bin/nvcc."""
    source = torch_site / "torch" / "utils" / "cpp_extension.py"
    return not source.is_file() or "PYTORCH_NVCC" in source.read_text(encoding="utf-8", errors="replace")


def cuda_home_with_wrapper(root: Path, wrapper: list[str], home: Path) -> Path:
    """A CUDA_HOME of links to ``root`` whose bin/nvcc runs ``wrapper`` (the object cache), for a torch that
    ignores PYTORCH_NVCC. It lives at the workspace's fixed path, so the include paths nvcc sees stay the same."""
    shutil.rmtree(home, ignore_errors=True)
    (home / "bin").mkdir(parents=True)
    for entry in root.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry.resolve())
    for tool in (root / "bin").iterdir():
        if tool.name != "nvcc":
            (home / "bin" / tool.name).symlink_to(tool.resolve())
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f'#!/bin/sh\nexec {shlex.join(wrapper)} "$@"\n')
    nvcc.chmod(0o755)
    return home


def compile_wheel(
    job: Job,
    env: BuildEnv,
    space: Workspace,
    environ: Mapping[str, str],
    outdir: Path,
) -> Path:
    """Run the PEP 517 backend in the job's build environment; returns the wheel it wrote. Its output goes to the
    active job's log and progress (builder.core.context)."""

    pool = environ.get(nvcc_plan.POOL_ENV)
    marks = timeline.Marks(environ.get(nvcc_plan.TIMELINE_ENV))

    def on_line(line: str) -> None:
        marks.line(line)
        # ninja's "FAILED: <object>" (a host .cpp, or nvcc whole): the TUs it already started wait on the pool
        if pool and line.startswith("FAILED: "):
            nvcc_plan.stop_pool(Path(pool))

    def runner(cmd: Sequence[str], cwd: str | None = None, extra_environ: Mapping[str, str] | None = None) -> None:
        run(cmd, step=f"{job.identifier}: compile", cwd=Path(cwd) if cwd else None,
            env={**environ, **(extra_environ or {})}, on_line=on_line)

    outdir.mkdir(parents=True, exist_ok=True)
    project = build.ProjectBuilder(space.source, python_executable=str(env.python), runner=runner)
    marks.mark("backend-start")
    with warnings.catch_warnings(record=True) as caught:  # the backend's warnings belong in the job's log
        warnings.simplefilter("always")
        try:
            wheel = project.build("wheel", outdir)
        except build.BuildBackendException as error:  # build wraps our runner's StepFailed; unwrap it
            if isinstance(error.exception, WheelwrightError):
                raise error.exception from None
            active = context.current()
            log_path = active.log if active else None
            raise StepFailed(f"{job.identifier}: compile", ["build_wheel"], 1, log_path, str(error)) from None
        finally:
            marks.mark("backend-end")
    for warning in caught:
        context.log_note(f"warning: {warning.category.__name__}: {warning.message}")
    return Path(wheel)


def keep_timeline(space: Workspace, destination: Path, *, started: float, parallelism: Parallelism) -> None:
    """Close the compile phase's timeline (its start, ``started`` on time.monotonic(), its end now, ninja's steps)
    and keep it at ``destination``: the workspace's copy goes with the next build of this version and label."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    timeline.keep(space.timeline, destination, started=started, slots=parallelism.pool_slots, cores=cores,
                  ninja_logs=space.ninja_logs())


def translation_unit(line: str) -> str | None:
    """The source a ninja progress line is compiling, for the progress display."""
    match = _NINJA_STEP.match(line)
    return f"[{match[1]}/{match[2]}] {Path(match[3]).name}" if match else None


def objcache_root() -> Path:
    return setting_path("WHEELWRIGHT_OBJCACHE_DIR") or cache_root() / "objects"
