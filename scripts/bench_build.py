#!/usr/bin/env python3
"""Build benchmarks, measured side by side in one run on this machine (README, "Performance"):

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
    (CPU-seconds / cores) and the ratios. --runs picks some; --archs narrows today's and ours (not upstream's).

Usage: .venv/bin/python scripts/bench_build.py [--full] [--python 3.11 --second-python 3.12] [--workdir DIR]
       .venv/bin/python scripts/bench_build.py --full-arch causal-conv1d [--runs upstream,today,ours] [--limit S]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import compile as compile_stage
from builder.steps.environment import build_env, find_toolkit, runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.recipes import apply_recipe

ROOT = Path(__file__).resolve().parent.parent

PACKAGE = "causal-conv1d"


def bench_matrix(
    workdir: Path, pythons: list[str], archs: list[str], package: str = PACKAGE, torch: str = "2.14.1"
) -> Path:
    """matrix.yaml plus a `bench` profile: the local job, for the given Pythons and archs."""
    matrix = yaml.safe_load((ROOT / "matrix.yaml").read_text())
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
    toolkit = find_toolkit(job.accelerator)
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, toolkit)
    source = unpack_sdist(fetch_sdist(job), workdir / "plain-src")
    recipe = apply_recipe(source, job)
    with compile_stage.workspace(job, source, runtime.site_packages) as space:
        parallelism = compile_stage.Parallelism.fit(len(job.archs))
        environ = compile_stage.build_environ(job, env, recipe.env, space, parallelism, None)
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
    toolkit = find_toolkit(job.accelerator)
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, toolkit)
    source = unpack_sdist(fetch_sdist(job), workdir / "upstream-src")
    cores = len(os.sched_getaffinity(0))
    parallelism = compile_stage.Parallelism(max_jobs=cores, nvcc_threads=4)
    with compile_stage.workspace(job, source, runtime.site_packages) as space:
        environ = compile_stage.build_environ(job, env, {}, space, parallelism, None)
        for key in [k for k in environ if k.startswith(("PYTORCH_NVCC", "NVCC_", "WHEELWRIGHT_NVCC"))]:
            del environ[key]
        environ.update(CUDA_HOME=str(toolkit.root), CUDA_PATH=str(toolkit.root), MAX_JOBS=str(cores),
                       CAUSAL_CONV1D_FORCE_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE")
        command = [str(env.python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                   str(workdir / "upstream-dist"), str(space.source)]
        return measure("upstream", command, environ, limit, workdir / "upstream.log")


def ours_build(
    name: str, package: str, python: str, torch: str, archs: list[str], workdir: Path, limit: float
) -> Measured:
    """`wheelwright build` of the job with ``archs``, a cold object cache; "today" compiles with nvcc whole."""
    (workdir / name).mkdir(parents=True, exist_ok=True)
    matrix = bench_matrix(workdir / name, [python], archs, package, torch)
    env = {**os.environ, "WHEELWRIGHT_OBJCACHE_DIR": str(workdir / name / "objcache"),
           "WHEELWRIGHT_NVCC_SPLIT": "0" if name == "today" else "1"}
    command = [sys.executable, "-m", "builder.cli.main", "build", "--matrix", str(matrix), "--profile", "bench",
               "--select", "*", "--output", str(workdir / name / "out"), "--objcache", "off"]
    return measure(name, command, env, limit, workdir / f"{name}.log")


def critical_path(name: str, workdir: Path, measured: Measured) -> str:
    """The longest (TU, arch) device compile the build's ledger recorded (nvcc --time rows), against the build's
    cores-bound: a TU split pays only where that pair is longer."""
    ledger = workdir / name / "out" / "ledger.sqlite"
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


def full_arch(args: argparse.Namespace, workdir: Path) -> None:
    archs = args.archs.split(",") if args.archs else list(load_facts().cuda_archs["13.0"])
    runs = args.runs.split(",")
    print(f"bench_build (d): {args.full_arch}, torch {args.torch}+cu130, {len(os.sched_getaffinity(0))} cores, "
          f"archs {','.join(archs)} (upstream: its own flags), workdir {workdir}", flush=True)
    results: dict[str, Measured] = {}
    for name in runs:
        if name == "upstream":
            results[name] = upstream_build(args.full_arch, args.python, args.torch, workdir, args.limit)
        else:
            results[name] = ours_build(name, args.full_arch, args.python, args.torch, archs, workdir, args.limit)
        print(results[name].line(), flush=True)
        if name != "upstream":
            print(critical_path(name, workdir, results[name]), flush=True)
    if "ours" in results:
        for other in ("upstream", "today"):
            if other in results:
                print(f"(d) ours/{other}: wall {results['ours'].wall / results[other].wall:.2f}, "
                      f"CPU {results['ours'].cpu / results[other].cpu:.2f}", flush=True)


def compile_events(objcache: Path) -> list[dict]:
    path = objcache / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.11")
    parser.add_argument("--second-python", default="3.12")
    parser.add_argument("--full", action="store_true", help="also (c): the full CUDA 13 arch list (~40 min on 2 cores)")
    parser.add_argument("--skip-ab", action="store_true", help="only (c): skip the one-job and second-Python runs")
    parser.add_argument(
        "--prove-reuse",
        action="store_true",
        help="after (b): build the 2nd Python again with --objcache verify, which compiles every reused "
        "object afresh and compares",
    )
    parser.add_argument("--full-arch", metavar="PACKAGE", choices=("causal-conv1d", "mamba-ssm"),
                        help="only (d): upstream's released build vs ours, full arch list")
    parser.add_argument("--runs", default="upstream,today,ours", help="(d): which builds, in this order")
    parser.add_argument("--archs", default="", help="(d): comma-separated archs for today/ours (default: all 9)")
    parser.add_argument("--torch", default="2.14.1", help="(d): the torch to build against (the GPU box: 2.11.0)")
    parser.add_argument("--limit", type=float, default=3600.0, help="(d): seconds each build may take")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-build-"))
    workdir.mkdir(parents=True, exist_ok=True)
    if args.full_arch:
        full_arch(args, workdir)
        return 0
    first, second = args.python, args.second_python
    matrix = bench_matrix(workdir, [first, second], ["9.0"])
    id_first, id_second = f"*-{'cp' + first.replace('.', '')}-*", f"*-{'cp' + second.replace('.', '')}-*"
    objcache = workdir / "objcache"
    print(f"bench_build: {PACKAGE}, torch 2.14.1+cu130, sm_90, {os.cpu_count()} cores, workdir {workdir}", flush=True)

    if not args.skip_ab:
        plain = plain_pip_wheel(matrix, id_first, workdir)
        print(f"(a) plain pip wheel --no-build-isolation ({first}): {plain:7.1f} s", flush=True)
        ours = wheelwright_build(matrix, id_first, workdir / "out", objcache)
        print(
            f"(a) wheelwright build, cold ({first}):                {ours:7.1f} s   "
            f"ratio {ours / plain:.3f} (target <= 1.05)",
            flush=True,
        )
        again = wheelwright_build(matrix, id_second, workdir / "out", objcache)
        hits = sum(e["result"] == "hit" for e in compile_events(objcache))
        print(
            f"(b) wheelwright build, 2nd Python ({second}):         {again:7.1f} s   "
            f"ratio {again / ours:.3f} (target <= 0.3), {hits} CUDA objects reused",
            flush=True,
        )
    if args.prove_reuse:
        before = len(compile_events(objcache))
        wheelwright_build(matrix, id_second, workdir / "out-verify", objcache, mode="verify")
        results = [e["result"] for e in compile_events(objcache)[before:]]
        print(f"(b) proof: {results.count('verified')} of {len(results)} reused CUDA objects equal to a fresh compile "
              f"({results.count('mismatch')} mismatches; nvcc's process-id temp name masked)", flush=True)
    if args.full:
        full_archs = list(load_facts().cuda_archs["13.0"])
        (workdir / "full").mkdir(exist_ok=True)
        full_matrix = bench_matrix(workdir / "full", [first], full_archs)
        full_cache = workdir / "objcache-full"
        wall = wheelwright_build(full_matrix, id_first, workdir / "out-full", full_cache)
        units = [e for e in compile_events(full_cache) if e["result"] == "miss"]
        total, longest = sum(e["seconds"] for e in units), max(e["seconds"] for e in units)
        cores = len(os.sched_getaffinity(0))
        ideal = max(longest, total / cores)
        print(
            f"(c) full arch list ({len(full_archs)} archs): wall {wall:.0f} s; "
            f"sum of {len(units)} CUDA TUs {total:.0f} s; longest TU {longest:.0f} s; "
            f"ideal on {cores} cores max(longest, sum/cores) = {ideal:.0f} s; wall/ideal {wall / ideal:.2f}",
            flush=True,
        )
        for unit in sorted(units, key=lambda e: -e["seconds"]):
            print(f"      {Path(unit['source']).name:32s} {unit['seconds']:7.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
