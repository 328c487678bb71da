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
import stat
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import build

from builder.core import context
from builder.core.errors import FileSystemError, WheelwrightError
from builder.core.runner import StepFailed, kill_marked, run
from builder.core.settings import cache_root, given_settings, setting, setting_number, setting_path
from builder.plan.job import Job
from builder.steps import cross, sass, sharedcache, timeline
from builder.steps.bucket import BucketError
from builder.steps.environment import BuildEnv
from builder.steps.nvcc_time import read_times, stage_times
from builder.steps.programs import nvcc_plan, stagecache
from builder.steps.programs import objcache as nvcc_cache
from builder.steps.toolchain import Toolchain

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
    def events(self) -> Path:
        """This build's object-cache events (objcache.py, stagecache.py): what it reused, and from which build."""
        return self.root / "objcache-events.jsonl"

    @property
    def timeline(self) -> Path:
        """The build's timeline (builder/steps/timeline.py): the pool's steps and the compile stage's marks."""
        return self.core_pool / nvcc_plan.TIMELINE

    def ninja_logs(self) -> list[Path]:
        """ninja's own logs (start and end of each step) in the source's build directories."""
        return sorted(self.source.glob("build/**/.ninja_log"))

    @classmethod
    def for_job(cls, job: Job) -> Workspace:
        """One per (package, version, accelerator), not per torch: the device steps of builds against different
        torch versions then run with the same paths, so the stage cache can reuse what is provably the same
        (stagecache.py). Builds of one workspace take turns (its lock); the second then reuses the first's work.
        Per platform beside x86_64: an aarch64 build's objects, core pool and timeline never share a folder with
        the x86_64 build of the same version and accelerator."""
        name = f"{job.package}-{job.version}+{job.accelerator.name}"
        return cls(root=fixed_root() / (name if job.platform == "x86_64" else f"{name}-{job.platform}"))


@contextmanager
def workspace(job: Job, source: Path, torch_site: Path) -> Iterator[Workspace]:
    """Lay the patched source and a link to the job's torch at the fixed paths, holding a lock meanwhile."""
    space = Workspace.for_job(job)
    _own_folder(space.root.parent)
    space.root.mkdir(exist_ok=True)
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
        fixed_header_times(torch_site / "torch" / "include")
        space.nvcc_times.unlink(missing_ok=True)
        space.events.unlink(missing_ok=True)
        shutil.rmtree(space.core_pool, ignore_errors=True)
        space.core_pool.mkdir()  # the timeline's folder, pool or not
        yield space


def _own_folder(root: Path) -> None:
    """The fixed root (/tmp/wheelwright-build unless WHEELWRIGHT_FIXED_ROOT says otherwise) made, or found, a real
    folder of this user's, which no one else may then write into: in a /tmp shared with other users, one who made it
    first could swap the sources a build compiles, or plant a symlink where a build writes. One of ours that others
    may write into (an older build's, under umask 002) loses that write permission."""
    try:
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
    except FileExistsError:  # a file, or a symlink to one: refused below
        pass
    status = os.lstat(root)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
        raise FileSystemError(
            f"{root}: the builds' fixed folder (WHEELWRIGHT_FIXED_ROOT) is not a folder of this user's",
            tip="remove it, or set WHEELWRIGHT_FIXED_ROOT to a folder of your own",
        )
    if status.st_mode & 0o022:
        os.chmod(root, stat.S_IMODE(status.st_mode) & ~0o022)


@dataclass(frozen=True, kw_only=True)
class Compiled:
    """What the compile phase hands on: the wheel the backend wrote, nvcc's seconds per unit and arch, and the
    compiled tree (its objects: a step that links them again reads them there while the phase's block runs)."""

    wheel: Path
    times: list[dict[str, object]]
    source: Path
    record: dict[str, str]  # the ledger's reuse and stage_times (compile_record)


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
    toolkit: Toolchain,
    crossed: cross.CrossBuild | None = None,
) -> Iterator[Compiled]:
    """The compile phase: the patched ``source`` at the fixed paths, the build's environment (the object cache in
    mode ``objcache``: use, verify or off; the core pool ordered by ``costs``; a cross build's wrappers), the PEP 517
    backend writing the wheel into ``into``; the timeline (phase begun at ``started``) kept at ``timeline_to``, a
    failed compile's too; the farm's shared device-step cache of ``toolkit`` around it (shared_objects). The
    workspace stays held until the block ends."""
    with workspace(job, source, torch_site) as space:
        parallelism = Parallelism.fit(len(job.archs), share=share)
        cache = None if objcache == "off" else (objcache_root(), objcache)
        cross_environ = crossed.environ(space.torch_site, *cross.build_paths(env.python)) if crossed else None
        environ = build_environ(job, env, recipe_env, space, parallelism, cache, costs, cross=cross_environ)
        try:
            with shared_objects(job, toolkit, space, cache):  # the farm's device steps
                wheel = compile_wheel(job, env, space, environ, into)
        finally:  # a failed compile's timeline says where it stood
            keep_timeline(space, timeline_to, started=started, parallelism=parallelism)
        record = compile_record(space, cache, toolkit)
        yield Compiled(wheel=wheel, times=read_times(space.nvcc_times), source=space.source, record=record)


SOURCE_EPOCH = 315532800  # 1980-01-01, the build's SOURCE_DATE_EPOCH unless the environment sets one


def fixed_header_times(include: Path) -> int:
    """Give torch's headers one mtime, the source epoch; returns how many it changed. With -lineinfo (upstream's
    flags) ptxas writes the size and mtime of every header the device code came from into the cubin's line table,
    and pip leaves each header its install time: every install of one torch gave other cubin bytes, on every machine,
    and no cubin could be reused across torch versions or runners (stagecache.py keys ptxas on those stats)."""
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", SOURCE_EPOCH))
    changed = 0
    for folder, _, files in os.walk(include):
        for name in files:
            path = os.path.join(folder, name)
            try:
                if int(os.stat(path).st_mtime) != epoch:
                    os.utime(path, (epoch, epoch))
                    changed += 1
            except OSError as error:  # a read-only system torch: its times stay, its cubins are its own
                log.warning("%s: cannot set its mtime (%s); its cubins will not be shared", path, error.strerror)
                return changed
    return changed


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
        SOURCE_DATE_EPOCH=environ.get("SOURCE_DATE_EPOCH", str(SOURCE_EPOCH)),
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
    environ[nvcc_cache.SCOPE_ENV] = f"torch {job.torch} {job.accelerator.name}"  # host objects: per torch, always
    # who stored a reused device step, the ledger says: the job, and its torch (one label spans a torch's patches)
    environ[stagecache.JOB_ENV] = f"{job.identifier} (torch {job.torch})"
    environ[stagecache.EVENTS_ENV] = str(space.events)
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


def device_archs(job: Job) -> tuple[str, ...]:
    """The archs the job's device steps are recorded under (nvcc_plan.arch_label): ``10.0+PTX`` and ``compute_80``
    compile the chains of 10.0 and 8.0."""
    labels = {nvcc_plan.arch_label(arch.sass if arch.has_sass else str(arch)) for arch in job.archs}
    return tuple(sorted(labels))


@contextmanager
def shared_objects(job: Job, toolkit: Toolchain, space: Workspace, objcache: tuple[Path, str] | None) -> Iterator[None]:
    """The farm's shared device-step cache around one compile (sharedcache.py): the job's entries pulled before,
    those it used or made pushed after it succeeded (on main only). A bucket's failure is logged, never fatal."""
    given = given_settings(stagecache.JOB_ENV, stagecache.EVENTS_ENV)  # the program's code, handed its settings
    local = stagecache.StageCache(objcache[0], objcache[1], given) if objcache and objcache[1] != "off" else None
    shared = sharedcache.from_settings(local) if local is not None else None
    if shared is None or local is None:
        yield
        return
    cuda = toolkit.cuda
    scope = sharedcache.Scope(toolkit=sharedcache.toolkit_id(cuda, toolkit.root, local.programs),
                              package=job.package, version=job.version, archs=device_archs(job))
    _shared_step("pull", lambda: shared.pull(scope))
    yield
    _shared_step("push", lambda: shared.push(scope, sharedcache.events_of(space.events)))


def _shared_step(name: str, action: Callable[[], sharedcache.Report]) -> None:
    try:
        report = action()
    except (BucketError, OSError) as error:  # a cache never fails a build
        context.log_note(f"shared object cache: {name} failed, going on without it: {type(error).__name__}: {error}")
        return
    context.log_note(report.describe())


def reuse_record(space: Workspace, cache: Path | None = None, cuobjdump: Path | None = None) -> dict[str, object]:
    """What the build's compile reused, for the ledger: whole objects (per Python, same torch) and device steps
    (cicc, ptxas; any torch of the toolkit), by result, the jobs that compiled what it reused, and under
    ``--objcache verify`` the per-kernel SASS comparison of every re-made cubin with the one it would have used
    (``cache``: the object cache's folder, where both are kept)."""
    events = sharedcache.events_of(space.events)
    counts: dict[str, dict[str, int]] = {}
    reused = []
    for event in events:
        kind = str(event.get("stage", "object"))
        result = str(event.get("result"))
        counts.setdefault(kind, {}).setdefault(result, 0)
        counts[kind][result] += 1
        if "stage" in event and result in ("hit", "verified", "mismatch"):
            reused.append({k: event.get(k) for k in ("unit", "arch", "stage", "from", "result")})
    record: dict[str, object] = {"counts": counts, "reused": reused}
    if cache is not None and cuobjdump is not None and any(e.get("result") in ("verified", "mismatch")
                                                           for e in events if "stage" in e):
        record["kernels"] = verify_kernels(events, stagecache.StageCache(cache, "verify", {}), cuobjdump)
    return record


def verify_kernels(events: Sequence[Mapping[str, Any]], cache: stagecache.StageCache, cuobjdump: Path,
                   ) -> dict[str, int]:
    """Per-kernel SASS of each cubin ``--objcache verify`` compiled afresh against the cached one it would have
    used: kernels compared, equal, differing (cuobjdump -sass with sass.py's normalisation)."""
    compared = equal = 0
    for event in events:
        if event.get("stage") != "ptxas" or event.get("result") not in ("verified", "mismatch"):
            continue
        cached, fresh = cache.blob(event["outputs"]["-o"]), cache.blob(event["fresh"]["-o"])
        if not (cached.is_file() and fresh.is_file()):
            continue
        mine, theirs = sass.kernel_sass(cuobjdump, fresh), sass.kernel_sass(cuobjdump, cached)
        for kernel in set(mine) | set(theirs):
            compared += 1
            equal += mine.get(kernel) == theirs.get(kernel)
    return {"compared": compared, "equal": equal, "differing": compared - equal}


def compile_record(space: Workspace, objcache: tuple[Path, str] | None, toolkit: Toolchain) -> dict[str, str]:
    """The ledger's ``reuse`` and ``stage_times`` of the compile just done in ``space`` (JSON text)."""
    verifying = objcache is not None and objcache[1] == "verify"
    cuobjdump = sass.find_cuobjdump(toolkit.root) if verifying else None
    reuse = reuse_record(space, objcache[0] if objcache else None, cuobjdump)
    counts = reuse["counts"]
    if isinstance(counts, dict) and counts:
        context.log_note("object cache: " + "; ".join(
            f"{kind} " + ", ".join(f"{n} {result}" for result, n in sorted(by.items())) for kind, by in counts.items()))
    if kernels := reuse.get("kernels"):
        context.log_note(f"object cache verify: per-kernel SASS of re-made cubins: {kernels}")
    return {"reuse": json.dumps(reuse, sort_keys=True), "stage_times": json.dumps(stage_times(space.timeline))}
