"""Build benchmarks, measured side by side in one run on this machine (docs/performance.md):

(a) `wheelwright build` of one job vs plain `pip wheel --no-build-isolation` on the same patched source with the
    same environment (toolkit, torch, arch list, MAX_JOBS, nvcc threads); target <= 1.05x.
(b) the 2nd Python of the same job (same package version, torch, toolkit, archs) relative to the 1st, with the
    CUDA objects reused; target <= 0.3x.
(c) --full: causal-conv1d for the whole CUDA 13 arch list: wall time vs the sum of per-translation-unit compile
    times and the longest one (the critical path), on the cores available.
(d) --full-arch PACKAGE: upstream's released build (its own setup.py flags: 9 CUDA 13 archs incl. sm_103,
    `--threads 4`, MAX_JOBS = cores, `pip wheel --no-build-isolation`), then `wheelwright build` of the same arch
    list with nvcc whole ("today", WHEELWRIGHT_NVCC_SPLIT=0) and through the core pool ("ours"), one after the
    other, each bounded by --limit; prints wall, CPU-seconds (user+sys of the whole process tree), the cores-bound
    (CPU-seconds / cores), the archs each wheel holds, and the ratios. --runs picks some; --archs narrows today's
    and ours (not upstream's). Ours compile every arch named, sm_103 too, for this comparison only (through
    scripts/bench/every_arch.py: the arch facts drop it from published wheels; these stay in the workdir). "second"
    builds the same job for --second-python into ours' output with ours' object cache (ours then runs with the cache on,
    and prints what the cache itself cost): its wall, its ratio to ours (target <= 0.1) and where its seconds go.
    After each of today, ours and learned: where the compile phase's wall went, read from the job's timeline
    (builder/steps/timeline.py; logs/JOB.timeline.jsonl in its output), and the phases after it from the ledger.
(e) --cross-torch A,B: the same package version for torch A, then for torch B, one object cache (cold before A):
    B reuses the device steps the stage cache proves the same (builder/steps/programs/stagecache.py); each build's
    wall and CPU-seconds side by side, what B reused and from which job (the ledger's reuse column), then B again with
    --objcache verify into another output: every reused step compiled afresh and compared, the cubins per kernel.

Usage: .venv/bin/python -m scripts.bench_build [--full] [--python 3.11 --second-python 3.12] [--workdir DIR]
       .venv/bin/python -m scripts.bench_build --cross-torch 2.12.1,2.13.0 [--package causal-conv1d] [--archs 9.0]
       .venv/bin/python -m scripts.bench_build --full-arch causal-conv1d [--runs upstream,today,ours,second]
                                               [--limit S] [--python 3.11 --second-python 3.12]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from builder.core.errors import NotBuildableHere
from builder.core.fatbin import FatbinContents
from builder.core.ledger import Ledger, LedgerEntry
from builder.core.wheelhouse import Layout
from builder.farm.build import cpu_by_phase
from builder.plan.arch import Arch
from builder.plan.archs import apply_known_bad
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import compilation, timeline
from builder.steps.elf import wheel_elf_facts
from builder.steps.environment import build_env, find_pythons, find_toolkit, runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.recipes import apply_recipe
from builder.steps.recipes.recipe import arch_env

ROOT = Path(__file__).resolve().parents[2]

PACKAGE = "causal-conv1d"


# The recipe patches that belong to the core pool's work (#16): "today" builds without them, as before it
SPLIT_PATCHES = frozenset({"split-causal-conv1d-bwd"})


def bench_matrix(
    workdir: Path, pythons: list[str], archs: list[str], package: str = PACKAGE, torch: str = "2.14.1",
    *, without_patches: frozenset[str] = frozenset(),
) -> Path:
    """matrix.yaml plus a `bench` profile: the local job, for the given Pythons and archs; the recipe patches named in
    ``without_patches`` are left out of every package's recipe."""
    matrix = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    for entry in matrix["packages"]:
        recipe = entry.get("recipe", {})
        if "patches" in recipe:
            recipe["patches"] = [patch for patch in recipe["patches"] if patch["name"] not in without_patches]
    matrix["profiles"]["bench"] = {
        "torch": [torch],
        "accelerators": ["cu130"],
        "python": pythons,
        "archs": {"cu130": archs},
        "packages": [package],
    }
    path = workdir / "matrix-bench.yaml"
    path.write_text(yaml.safe_dump(matrix, sort_keys=False))
    return path


def wheelwright_build(matrix: Path, select: str, output: Path, objcache: Path, *, mode: str = "use") -> float:
    env = {**os.environ, "WHEELWRIGHT_OBJCACHE_DIR": str(objcache)}
    command = [sys.executable, "-m", "builder.cli.main", "build", "--matrix", str(matrix), "--profile", "bench",
               "--select", select, "--output", str(output), "--objcache", mode]
    start = time.monotonic()
    subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def plain_pip_wheel(matrix: Path, select: str, workdir: Path) -> float:
    """The same job by hand: same patched source, same environment, `pip wheel --no-build-isolation`."""
    job = load_plan(matrix, "bench").select(select).jobs[0]
    toolkit = find_toolkit(job.accelerator, job.archs)
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, toolkit)
    source = unpack_sdist(fetch_sdist(job), workdir / "plain-src")
    recipe = apply_recipe(source, job)
    with compilation.workspace(job, source, runtime.site_packages) as space:
        parallelism = compilation.Parallelism.fit(len(job.archs))
        environ = compilation.build_environ(job, env, recipe.env, space, parallelism, None)
        start = time.monotonic()
        subprocess.run(
            [
                str(env.python),
                "-m",
                "pip",
                "wheel",
                "--no-build-isolation",
                "--no-deps",
                "-w",
                str(workdir / "plain-dist"),
                str(space.source),
            ],
            check=True,
            env=environ,
            stdout=subprocess.DEVNULL,
        )
        return time.monotonic() - start


@dataclasses.dataclass(frozen=True)
class Measured:
    """One bounded build: its wall time and the CPU time of its whole process tree."""

    name: str
    wall: float
    cpu: float
    cores: int

    @property
    def cores_bound(self) -> float:
        return self.cpu / self.cores

    def line(self) -> str:
        return (f"(d) {self.name:9s} wall {self.wall:7.0f} s  CPU {self.cpu:7.0f} s  "
                f"cores-bound {self.cores_bound:6.0f} s  wall/cores-bound {self.wall / self.cores_bound:.2f}")


def measure(name: str, command: list[str], env: dict[str, str], limit: float, log: Path) -> Measured:
    """Run ``command`` in its own process group, killed after ``limit`` seconds; CPU time from wait4's rusage,
    which sums every descendant the tree reaped (nvcc, cicc, ptxas, gcc)."""
    cores = len(os.sched_getaffinity(0))
    start = time.monotonic()
    with log.open("w") as output:
        process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        timer = threading.Timer(limit, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(process.pid, 0)
        finally:
            timer.cancel()
    wall = time.monotonic() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"bench_build: {name} failed ({process.returncode}) after {wall:.0f} s; see {log}")
    return Measured(name, wall, usage.ru_utime + usage.ru_stime, cores)


def upstream_build(package: str, python: str, torch: str, workdir: Path, limit: float) -> Measured:
    """The released sdist as its own setup.py builds it: no recipe, plain nvcc, MAX_JOBS = cores."""
    matrix = bench_matrix(workdir, [python], ["9.0"], package, torch)
    job = load_plan(matrix, "bench").jobs[0]
    toolkit = find_toolkit(job.accelerator, job.archs)
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, toolkit)
    shutil.rmtree(workdir / "upstream-dist", ignore_errors=True)  # the one wheel this run builds, nothing older
    source = unpack_sdist(fetch_sdist(job), workdir / "upstream-src")
    cores = len(os.sched_getaffinity(0))
    parallelism = compilation.Parallelism(max_jobs=cores, nvcc_threads=4)
    with compilation.workspace(job, source, runtime.site_packages) as space:
        environ = compilation.build_environ(job, env, arch_env(job), space, parallelism, None)
        for key in [k for k in environ if k.startswith(("PYTORCH_NVCC", "NVCC_", "WHEELWRIGHT_NVCC"))]:
            del environ[key]
        environ.update(CUDA_HOME=str(toolkit.root), CUDA_PATH=str(toolkit.root), MAX_JOBS=str(cores),
                       CAUSAL_CONV1D_FORCE_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE")
        (workdir / UPSTREAM_TIMES).unlink(missing_ok=True)
        environ["NVCC_APPEND_FLAGS"] = f"--time {workdir / UPSTREAM_TIMES}"  # each nvcc step's seconds, as a CSV
        # the build venv has no pip of its own (environment.py): this pip runs as that interpreter (--python)
        command = [sys.executable, "-m", "pip", "--python", str(env.python), "wheel", "--no-build-isolation",
                   "--no-deps", "--disable-pip-version-check", "-w", str(workdir / "upstream-dist"), str(space.source)]
        return measure("upstream", command, environ, limit, workdir / "upstream.log")


EVERY_ARCH = ("-m", "scripts.bench.every_arch")  # `wheelwright`, the arch facts' known-bad SASS kept


def ours_build(
    name: str, package: str, python: str, torch: str, archs: list[str], workdir: Path, limit: float,
    *, objcache: str = "off", into: str | None = None, costs_from: Path | None = None,
) -> Measured:
    """`wheelwright build` of the job with exactly ``archs`` (scripts/bench/every_arch.py: none dropped by the arch
    facts), into ``workdir/(into or name)/out``; "today" compiles with nvcc whole. ``objcache`` "use" (a cold cache in
    ``workdir/ours/objcache``) lets a later `second` run reuse ours' CUDA objects. ``costs_from``: an earlier
    build's ledger, whose measured (TU, arch) costs the core pool then orders by (its wheel is not in this output,
    so the job is built again, from scratch with the object cache off)."""
    if into is None:  # a fresh folder: an earlier run's ledger would make this build "up to date", and no build
        shutil.rmtree(workdir / name, ignore_errors=True)
    (workdir / name).mkdir(parents=True, exist_ok=True)
    if costs_from is not None:
        (workdir / name / "out").mkdir()
        shutil.copyfile(costs_from, Layout(root=workdir / name / "out").ledger)
    today = name == "today"  # the build before #16: nvcc whole, and the TUs as upstream wrote them
    matrix = bench_matrix(workdir / name, [python], archs, package, torch,
                          without_patches=SPLIT_PATCHES if today else frozenset())
    env = {**os.environ, "WHEELWRIGHT_OBJCACHE_DIR": str(workdir / (into or name) / "objcache"),
           "WHEELWRIGHT_NVCC_SPLIT": "0" if today else "1"}
    command = [sys.executable, *EVERY_ARCH, "build", "--matrix", str(matrix), "--profile", "bench",
               "--select", "*", "--output", str(workdir / (into or name) / "out"), "--objcache", objcache]
    return measure(name, command, env, limit, workdir / f"{name}.log")


def ledger_entry(output: Path, python: str) -> LedgerEntry:
    """The ledger row of the build of ``python`` in the output folder ``output``."""
    with Ledger(Layout(root=output).ledger) as ledger:
        (entry,) = [e for e in ledger.entries() if e.python == python]
    return entry


def spelled_archs(sass: Iterable[str], ptx: Iterable[str]) -> str:
    """``SASS 7.5,8.0,...; PTX 12.1`` as fatbin.describe sorts them: the archs a wheel's kernels are for."""
    return FatbinContents(sass=frozenset(sass), ptx=frozenset(ptx)).describe().replace(", ", ",")


def wheel_archs(wheel: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(SASS, PTX) of a wheel's shared objects, read from their fatbins (what the verify gate reads)."""
    elves = wheel_elf_facts(wheel)
    return (frozenset(a for elf in elves for a in elf.gpu.sass), frozenset(a for elf in elves for a in elf.gpu.ptx))


def compiled_archs(name: str, workdir: Path, python: str) -> tuple[frozenset[str], frozenset[str]]:
    """What a run's wheel holds: for ours, the ledger's verify report (read from the wheel by the gate); for
    upstream, which has no ledger, its wheel read by the same fatbin reader."""
    if name == "upstream":
        (wheel,) = (workdir / "upstream-dist").glob("*.whl")
        return wheel_archs(wheel)
    report = json.loads(ledger_entry(workdir / name / "out", python).report or "{}")
    return frozenset(report.get("sass", ())), frozenset(report.get("ptx", ()))


def kept_known_bad(package: str, torch: str, archs: list[str], workdir: Path) -> list[str]:
    """What builder/data/archs.toml would drop from ``archs`` for this job (scripts/bench/every_arch.py keeps it)."""
    (job,) = load_plan(bench_matrix(workdir, ["3.11"], archs, package, torch), "bench").jobs
    _, notes = apply_known_bad(job.identifier, job.package, job.version, job.accelerator.version,
                               tuple(map(Arch.parse, archs)))
    return [f"sm_{note.dropped.replace('.', '')} ({note.citation})" for note in notes]


def made_envs(package: str, torch: str, pythons: Iterable[str], workdir: Path) -> str:
    """Each Python's torch and build env made before any run is timed, as a farm's are: otherwise the first run
    of a Python pays the one torch install (70-80 s here) that every later build skips, and upstream's run,
    which makes its env untimed, is not measured the same way. Returns the line that says what it cost."""
    spent = []
    for python in pythons:
        (job,) = load_plan(bench_matrix(workdir, [python], ["9.0"], package, torch), "bench").jobs
        start = time.monotonic()
        build_env(job, runtime_env(job, load_facts()), find_toolkit(job.accelerator, job.archs))
        spent.append(f"{python} {time.monotonic() - start:.1f} s")
    return f"(d) build envs made before the timed runs (untimed, as upstream's): {', '.join(spent)}"


def second_unavailable(first: str, second: str) -> str | None:
    """Why the 2nd-Python run cannot happen here, or None."""
    if second == first:
        return f"the 2nd Python is the 1st ({first}); pass --second-python with another one"
    try:
        find_pythons(second)
    except NotBuildableHere as error:
        return str(error)
    return None


def ninja_steps(log: Path) -> list[tuple[str, float]]:
    """(object name, seconds) of each step in a ninja log (v5+: start and end in ms, then mtime and output), the
    latest run's row for each output, longest first."""
    steps: dict[str, float] = {}
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        steps[Path(fields[3]).name] = (int(fields[1]) - int(fields[0])) / 1000
    return sorted(steps.items(), key=lambda step: -step[1])


def second_report(entry: LedgerEntry, events: list[dict[str, Any]], ninja: list[tuple[str, float]] | None) -> list[str]:
    """Where the 2nd Python's seconds go: the ledger's phases, the compile phase's ninja steps (the TUs compiled
    afresh: the Python-dependent .cpp; the CUDA ones from ours' objects) and the rest of it (setup.py, link, zip)."""
    timings = entry.timings
    hits = sum(e["result"] == "hit" for e in events)
    misses = [Path(e["source"]).name for e in events if e["result"] == "miss"]
    afresh = f": {', '.join(misses)}" if misses else ""
    lines = [f"(d) second: CUDA objects: {hits} from ours' cache, {len(misses)} compiled afresh{afresh}"]
    compile_s = timings.get("compile", 0.0)
    if ninja is None:
        lines.append(f"(d) second: compile {compile_s:.1f} s (no ninja log left in the workspace to split it)")
    else:
        span = sum(seconds for _, seconds in ninja)  # a bound: steps may overlap
        slow = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in ninja[:3])
        lines.append(f"(d) second: compile {compile_s:.1f} s: ninja steps {span:.1f} s in all ({slow}); the rest, "
                     f"{max(0.0, compile_s - span):.1f} s, is setup.py (torch's import), the link and the wheel's zip")
    others = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in timings.items() if phase != "compile")
    lines.append(f"(d) second: other phases: {others}")
    return lines


def second_build(args: argparse.Namespace, archs: list[str], workdir: Path, ours: Measured | None) -> Measured | None:
    """The same job for the 2nd Python, into ours' output folder with ours' object cache: only what depends on
    the Python compiles (#15's (b) at the full arch list); prints its wall, its ratio to ours and the phases."""
    reason = second_unavailable(args.python, args.second_python)
    if reason is not None:
        print(f"(d) second: not run: {reason}", flush=True)
        return None
    before = len(compile_events(workdir / "ours" / "objcache"))
    measured = ours_build("second", args.full_arch, args.second_python, args.torch, archs, workdir, args.limit,
                          objcache="use", into="ours")
    print(measured.line(), flush=True)
    if ours is not None:
        print(f"(d) second/ours: wall {measured.wall / ours.wall:.3f} (target <= 0.1)", flush=True)
    entry = ledger_entry(workdir / "ours" / "out", args.second_python)
    (job,) = load_plan(workdir / "second" / "matrix-bench.yaml", "bench").jobs
    tag = "cpython-" + args.second_python.replace(".", "")
    logs = sorted((compilation.Workspace.for_job(job).source / "build").glob(f"temp.*-{tag}*/.ninja_log"))
    events = compile_events(workdir / "ours" / "objcache")[before:]
    for line in second_report(entry, events, ninja_steps(logs[0]) if logs else None):
        print(line, flush=True)
    return measured


def critical_path(name: str, workdir: Path, measured: Measured) -> str:
    """The longest (TU, arch) device compile the build's ledger recorded (nvcc --time rows), against the build's
    cores-bound: a TU split pays only where that pair is longer."""
    ledger = Layout(root=workdir / name / "out").ledger
    with sqlite3.connect(f"file:{ledger}?mode=ro", uri=True) as connection:
        rows = connection.execute("SELECT compile_times FROM jobs WHERE compile_times IS NOT NULL").fetchall()
    pairs = [t for (text,) in rows for t in json.loads(text or "[]") if t["arch"] != "host"]
    if not pairs:
        return f"(d) {name}: no compile times recorded"
    longest = max(pairs, key=lambda t: t["seconds"])
    units = {t["unit"] for t in pairs}
    return (f"(d) {name}: {len(units)} TUs x archs = {len(pairs)} device compiles; the longest, {longest['unit']} "
            f"sm_{longest['arch'].replace('.', '')}, {longest['seconds']:.0f} s vs cores-bound "
            f"{measured.cores_bound:.0f} s")



def where_the_wall_went(name: str, workdir: Path, python: str) -> list[str]:
    """The run's compile timeline (kept beside its job's log) read back: slots, busy and idle slot-seconds, the
    head before the first chain and the tail after the last, the critical TU; then the ledger's other phases."""
    output = workdir / name / "out"
    entry = ledger_entry(output, python)
    path = Layout(root=output).logs / f"{entry.job_id}.timeline.jsonl"
    if path.is_file():
        lines = timeline.summarise(*timeline.read(path)).lines(name)
    else:
        lines = [f"(d) {name}: no timeline at {path}"]
    phases = entry.timings
    after = ", ".join(f"{phase} {phases[phase]:.1f} s" for phase in ("repair", "verify", "install") if phase in phases)
    before = ", ".join(f"{phase} {phases[phase]:.1f} s" for phase in ("fetch", "env", "patch") if phase in phases)
    lines.append(f"(d) {name}: after compile: {after} (before it: {before}); timeline {path}")
    return lines


UPSTREAM_TIMES = "upstream-nvcc-time.csv"
# nvcc --time's phase names -> the stages ours' ledger records (builder/steps/nvcc_plan.py)
NVCC_PHASES = (("gcc (preprocessing", "preprocess"), ("cudafe++", "front"), ("cicc", "cicc"), ("ptxas", "ptxas"),
               ("gcc (compiling)", "host"))


def upstream_stages(csv_path: Path) -> dict[str, float]:
    """Seconds per stage of upstream's nvcc steps, summed, from the CSV nvcc's --time appends one row per step
    to: each step's elapsed time. Each step is one single-threaded tool, so that is about its CPU-seconds while no
    more tools run than there are cores (the GPU machine: 3 nvcc at most, --threads 4 each, on 16 cores); on fewer
    cores it includes the wait for one. Steps that map to no stage (fatbinary, the driver) go to "other"; a torn
    row (two nvcc processes appending at once) is skipped."""
    sums: dict[str, float] = {}
    try:
        lines = csv_path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return sums
    for line in lines:
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 8 or cells[7] != "ms":
            continue
        try:
            seconds = float(cells[6]) / 1000
        except ValueError:
            continue
        stage = next((name for prefix, name in NVCC_PHASES if cells[1].startswith(prefix)), "other")
        sums[stage] = sums.get(stage, 0.0) + seconds
    return sums


def upstream_stage_line(workdir: Path, measured: Measured) -> str:
    """Upstream's counterpart of stage_cpu: its nvcc steps' seconds by stage, and the rest of its CPU-seconds."""
    sums = upstream_stages(workdir / UPSTREAM_TIMES)
    rest = measured.cpu - sum(sums.values())
    return f"(d) upstream: nvcc steps' elapsed s by stage (nvcc --time): {_by_stage(sums)}; CPU-s - sum {rest:.0f}"


def stage_cpu(name: str, workdir: Path, python: str, measured: Measured) -> str:
    """Where the build's CPU-seconds went, from the ledger's stage_times (each nvcc step's wait4): per stage, summed
    over units and archs, and what the rest of the build (Python, the pool, ninja, the link, repair, verify) took."""
    rows = json.loads(ledger_entry(workdir / name / "out", python).stage_times or "[]")
    sums: dict[str, float] = {}
    for row in rows:
        sums[row["stage"]] = sums.get(row["stage"], 0.0) + float(row["cpu"])
    rest = measured.cpu - sum(sums.values())
    return f"(d) {name}: CPU-s by stage: {_by_stage(sums)}; the rest of the build {rest:.0f}"


def phase_cpu(name: str, workdir: Path, python: str) -> dict[str, float]:
    """The CPU-seconds of each phase of the build's job, from the line its log ends with (builder/farm/build.py's
    PhaseTimer, a job alone in its process); {} when the log has none (code from before it, or jobs side by side)."""
    output = workdir / name / "out"
    return cpu_by_phase((output / "logs" / f"{ledger_entry(output, python).job_id}.log").read_text(errors="replace"))


def phase_line(name: str, phases: dict[str, float], measured: Measured) -> str:
    """``(d) ours: CPU-s by phase: ...``: the phases, and what ran before or after them (the CLI's start, the plan,
    the ledger), to the build's whole process tree."""
    listed = ", ".join(f"{phase} {seconds:.0f}" for phase, seconds in phases.items())
    return f"(d) {name}: CPU-s by phase: {listed}; outside the phases {measured.cpu - sum(phases.values()):.0f}"


def _by_stage(sums: dict[str, float]) -> str:
    """Seconds by stage, in the order a TU goes through them (stage_cpu, upstream_stage_line)."""
    stages = ("front", "preprocess", "cicc", "ptxas", "host", "other")
    return ", ".join(f"{stage} {sums[stage]:.0f}" for stage in stages if stage in sums) or "none recorded"


def cache_overhead(objcache: Path) -> str:
    """What ours' object cache itself cost (keys, lookups, stores), summed over its TUs, from its events."""
    events = compile_events(objcache)
    total = sum(e.get("cache_seconds", 0.0) for e in events)
    return f"(d) ours: object cache on (for second): its own work {total:.1f} s summed over {len(events)} TUs"


def full_arch(args: argparse.Namespace, workdir: Path) -> None:
    archs = args.archs.split(",") if args.archs else list(load_facts().cuda_archs["13.0"])
    runs = args.runs.split(",")
    unknown = sorted(set(runs) - {"upstream", "today", "ours", "learned", "second"})
    if unknown:
        raise SystemExit(f"bench_build: --runs: unknown run {', '.join(unknown)} "
                         "(upstream, today, ours, learned, second)")
    for later, reason in (("second", "reuses ours' CUDA objects"), ("learned", "orders by the costs ours measured")):
        if later in runs and "ours" not in runs[: runs.index(later)]:
            raise SystemExit(f"bench_build: --runs: {later} {reason}, so ours must come before it")
    print(f"bench_build (d): {args.full_arch}, torch {args.torch}+cu130, {len(os.sched_getaffinity(0))} cores, "
          f"archs {','.join(archs)} (upstream: its own flags), workdir {workdir}", flush=True)
    kept = kept_known_bad(args.full_arch, args.torch, archs, workdir)
    if kept:
        print(f"(d) kept for this comparison only (builder/data/archs.toml drops it from published wheels): "
              f"{'; '.join(kept)}; these wheels stay in {workdir}", flush=True)
    second = "second" in runs and second_unavailable(args.python, args.second_python) is None
    pythons = [args.python, *([args.second_python] if second else [])]
    print(made_envs(args.full_arch, args.torch, pythons, workdir), flush=True)
    results: dict[str, Measured] = {}
    compiled: dict[str, str] = {}
    phases: dict[str, dict[str, float]] = {}
    for name in runs:
        if name == "second":
            measured = second_build(args, archs, workdir, results.get("ours"))
            if measured is not None:
                results[name] = measured
            continue
        if name == "upstream":
            results[name] = upstream_build(args.full_arch, args.python, args.torch, workdir, args.limit)
        else:
            objcache = "use" if name == "ours" and "second" in runs else "off"
            costs_from = Layout(root=workdir / "ours" / "out").ledger if name == "learned" else None
            results[name] = ours_build(name, args.full_arch, args.python, args.torch, archs, workdir, args.limit,
                                       objcache=objcache, costs_from=costs_from)
        compiled[name] = spelled_archs(*compiled_archs(name, workdir, args.python))
        print(f"{results[name].line()}  compiled: {compiled[name]}", flush=True)
        if name == "upstream":
            print(upstream_stage_line(workdir, results[name]), flush=True)
        else:
            print(critical_path(name, workdir, results[name]), flush=True)
            print(stage_cpu(name, workdir, args.python, results[name]), flush=True)
            phases[name] = phase_cpu(name, workdir, args.python)
            if phases[name]:
                print(phase_line(name, phases[name], results[name]), flush=True)
            print("\n".join(where_the_wall_went(name, workdir, args.python)), flush=True)
        if name == "ours" and "second" in runs:
            print(cache_overhead(workdir / "ours" / "objcache"), flush=True)
    if len(set(compiled.values())) > 1:
        print("(d) WARNING the runs compiled different archs: "
              + "; ".join(f"{name}: {archs}" for name, archs in compiled.items()), flush=True)
    for mine, other in (("ours", "upstream"), ("ours", "today"), ("learned", "upstream"), ("learned", "ours")):
        if mine in results and other in results:
            print(ratio_line(mine, other, results, phases), flush=True)


def ratio_line(mine: str, other: str, results: Mapping[str, Measured], phases: Mapping[str, dict[str, float]]) -> str:
    """Wall and CPU of ``mine`` to ``other``'s; beside upstream, also without ``mine``'s slim wheels: a product
    upstream's build does not make (cut after the fat wheel is installed)."""
    line = (f"(d) {mine}/{other}: wall {results[mine].wall / results[other].wall:.2f}, "
            f"CPU {results[mine].cpu / results[other].cpu:.2f}")
    cut = phases.get(mine, {}).get("slim")
    if other == "upstream" and cut is not None:
        line += (f"; CPU without the slim wheels' {cut:.0f} CPU-s (upstream makes none) "
                 f"{(results[mine].cpu - cut) / results[other].cpu:.2f}")
    return line


def cross_torch_build(name: str, package: str, torch: str, archs: list[str], workdir: Path, output: Path,
                      objcache: Path, mode: str, limit: float) -> Measured:
    """`wheelwright build` of the package for one torch (the host Python), into ``output``, with the object cache
    at ``objcache`` in ``mode``; measured as (d) measures (wall, CPU of the whole process tree)."""
    folder = workdir / name
    folder.mkdir(parents=True, exist_ok=True)
    matrix = bench_matrix(folder, ["host"], archs, package, torch)
    env = {**os.environ, "WHEELWRIGHT_OBJCACHE_DIR": str(objcache)}
    command = [sys.executable, "-m", "builder.cli.main", "build", "--matrix", str(matrix), "--profile", "bench",
               "--select", "*", "--output", str(output), "--objcache", mode]
    return measure(name, command, env, limit, workdir / f"{name}.log")


def torch_entry(output: Path, torch: str) -> LedgerEntry:
    with Ledger(output / "ledger.sqlite") as ledger:
        (entry,) = [e for e in ledger.entries() if e.torch == torch]
    return entry


def reuse_lines(name: str, entry: LedgerEntry) -> list[str]:
    """The ledger's reuse column of one build, spelled out: each stage's results, the jobs it reused from."""
    reuse = json.loads(entry.reuse or "{}")
    counts = "; ".join(f"{kind}: " + ", ".join(f"{n} {r}" for r, n in sorted(by.items()))
                       for kind, by in sorted(reuse.get("counts", {}).items()))
    sources = sorted({str(r.get("from")) for r in reuse.get("reused", ())})
    lines = [f"(e) {name}: {entry.status}; object cache {counts or 'no events'}"]
    if sources:
        lines.append(f"(e) {name}: device steps reused from {', '.join(sources)}")
    if "kernels" in reuse:
        lines.append(f"(e) {name}: per-kernel SASS of every re-made cubin against the reused one: {reuse['kernels']}")
    return lines


def cross_torch(args: argparse.Namespace, workdir: Path) -> None:
    first, second = args.cross_torch.split(",")
    archs = args.archs.split(",") if args.archs else ["9.0"]
    objcache, output = workdir / "objcache", workdir / "out"
    for stale in (objcache, output, workdir / "out-verify"):
        shutil.rmtree(stale, ignore_errors=True)  # one run: a cold cache before the first build
    print(f"bench_build (e): {args.package}, torch {first} then {second}, archs {','.join(archs)}, "
          f"{len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f}, workdir {workdir}", flush=True)
    runs = [("first", first, output, "use"), ("second", second, output, "use"),
            ("verify", second, workdir / "out-verify", "verify")]
    results = {}
    for name, torch, into, mode in runs:
        results[name] = cross_torch_build(name, args.package, torch, archs, workdir, into, objcache, mode, args.limit)
        print(f"{results[name].line().replace('(d)', '(e)')}  torch {torch}, objcache {mode}, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
        print("\n".join(reuse_lines(name, torch_entry(into, torch))), flush=True)
    print(f"(e) second/first: wall {results['second'].wall / results['first'].wall:.2f}, "
          f"CPU {results['second'].cpu / results['first'].cpu:.2f}", flush=True)


def compile_events(objcache: Path) -> list[dict[str, Any]]:
    path = objcache / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.11")
    parser.add_argument("--second-python", default="3.12")
    parser.add_argument("--full", action="store_true", help="also (c): the full CUDA 13 arch list (~40 min on 2 cores)")
    parser.add_argument("--skip-ab", action="store_true", help="only (c): skip the one-job and second-Python runs")
    parser.add_argument("--prove-reuse", action="store_true",
                        help="after (b): build the 2nd Python again with --objcache verify, which compiles every "
                             "reused object afresh and compares")
    parser.add_argument("--full-arch", metavar="PACKAGE", choices=("causal-conv1d", "mamba-ssm"),
                        help="only (d): upstream's released build vs ours, full arch list")
    parser.add_argument("--runs", default="upstream,today,ours",
                        help="(d): which builds, in this order, of upstream, today, ours, learned and second "
                             "(both after ours)")
    parser.add_argument("--archs", default="", help="(d): comma-separated archs for today/ours (default: all 9)")
    parser.add_argument("--torch", default="2.14.1", help="(d): the torch to build against (the GPU box: 2.11.0)")
    parser.add_argument("--limit", type=float, default=3600.0, help="(d): seconds each build may take")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--cross-torch", metavar="A,B", help="only (e): torch A, then torch B reusing A's device steps")
    parser.add_argument("--package", default=PACKAGE, choices=("causal-conv1d", "mamba-ssm"), help="(e): the package")
    return parser


def one_job(args: argparse.Namespace, workdir: Path, matrix: Path, objcache: Path) -> None:
    """(a) and (b), and with --prove-reuse the 2nd Python's reused objects against a fresh compile."""
    first, second = args.python, args.second_python
    id_first, id_second = f"*-{'cp' + first.replace('.', '')}-*", f"*-{'cp' + second.replace('.', '')}-*"
    if not args.skip_ab:
        plain = plain_pip_wheel(matrix, id_first, workdir)
        print(f"(a) plain pip wheel --no-build-isolation ({first}): {plain:7.1f} s", flush=True)
        ours = wheelwright_build(matrix, id_first, workdir / "out", objcache)
        print(f"(a) wheelwright build, cold ({first}):                {ours:7.1f} s   "
              f"ratio {ours / plain:.3f} (target <= 1.05)", flush=True)
        again = wheelwright_build(matrix, id_second, workdir / "out", objcache)
        hits = sum(e["result"] == "hit" for e in compile_events(objcache))
        print(f"(b) wheelwright build, 2nd Python ({second}):         {again:7.1f} s   "
              f"ratio {again / ours:.3f} (target <= 0.3), {hits} CUDA objects reused", flush=True)
    if args.prove_reuse:
        before = len(compile_events(objcache))
        wheelwright_build(matrix, id_second, workdir / "out-verify", objcache, mode="verify")
        results = [e["result"] for e in compile_events(objcache)[before:]]
        print(f"(b) proof: {results.count('verified')} of {len(results)} reused CUDA objects equal to a fresh compile "
              f"({results.count('mismatch')} mismatches; nvcc's process-id temp name masked)", flush=True)


def full_list(args: argparse.Namespace, workdir: Path) -> None:
    """(c): the whole CUDA 13 arch list, wall time against the sum of the units and the longest."""
    full_archs = list(load_facts().cuda_archs["13.0"])
    (workdir / "full").mkdir(exist_ok=True)
    full_matrix = bench_matrix(workdir / "full", [args.python], full_archs)
    full_cache = workdir / "objcache-full"
    wall = wheelwright_build(full_matrix, f"*-{'cp' + args.python.replace('.', '')}-*", workdir / "out-full",
                             full_cache)
    units = [e for e in compile_events(full_cache) if e["result"] == "miss"]
    total, longest = sum(e["seconds"] for e in units), max(e["seconds"] for e in units)
    cores = len(os.sched_getaffinity(0))
    ideal = max(longest, total / cores)
    print(f"(c) full arch list ({len(full_archs)} archs): wall {wall:.0f} s; sum of {len(units)} CUDA TUs "
          f"{total:.0f} s; longest TU {longest:.0f} s; ideal on {cores} cores max(longest, sum/cores) = {ideal:.0f} s; "
          f"wall/ideal {wall / ideal:.2f}", flush=True)
    for unit in sorted(units, key=lambda e: -e["seconds"]):
        print(f"      {Path(unit['source']).name:32s} {unit['seconds']:7.1f} s")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-build-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.cross_torch:
        cross_torch(args, workdir)
        return 0
    if args.full_arch:
        full_arch(args, workdir)
        return 0
    matrix = bench_matrix(workdir, [args.python, args.second_python], ["9.0"])
    print(f"bench_build: {PACKAGE}, torch 2.14.1+cu130, sm_90, {os.cpu_count()} cores, workdir {workdir}", flush=True)
    one_job(args, workdir, matrix, workdir / "objcache")
    if args.full:
        full_list(args, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
