#!/usr/bin/env python3
"""Which device code is the same across torch versions, measured: for one package version, one toolkit and several
torch versions, each (translation unit, arch)'s device-preprocessed input, module id, PTX, cubin and per-kernel
SASS compared, and the CPU-seconds of each compile stage (front end, device preprocessing, cicc, ptxas, host).

Each torch's build is set up exactly as `wheelwright build` sets it up (torch, build env, recipe, the fixed
workspace, its environment), then its nvcc command lines are read from the build's own ninja file (a stand-in
`ninja` prints them with `ninja -t commands` and stops the build), and each TU is compiled step by step as the
core pool does (builder/steps/programs/nvcc_plan.py), one step at a time, CPU-seconds from wait4. cicc and ptxas run
through the stage cache (builder/steps/programs/stagecache.py): a step whose program, command and input bytes an earlier
torch already compiled is not compiled again, since that is the cache's rule; the table says so.

Usage: .venv/bin/python -m scripts.measure_device_reuse --package causal-conv1d \\
           --torch 2.11.0,2.12.1,2.13.0,2.14.1 --archs 9.0 --workdir DIR [--json OUT] [--no-host]
       .venv/bin/python -m scripts.measure_device_reuse --report OUT [--facts 1.7.0,cu130]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.steps import compilation, sass
from builder.steps.environment import BuildEnv, build_env, find_toolkit, runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.programs import nvcc_plan, objcache, stagecache
from builder.steps.recipes import apply_recipe
from builder.steps.upstream import overlay_upstream
from scripts.bench.build import bench_matrix

STAGES = ("front", "preprocess", "cicc", "ptxas", "host")
RECORD_ENV = "MEASURE_DEVICE_REUSE_RECORD"
LOG_ENV = "MEASURE_DEVICE_REUSE_LOG"
_LINE_INFO = re.compile(rb"^\s*(\.loc|\.file)\b.*$", re.MULTILINE)


@dataclasses.dataclass(kw_only=True)
class Chain:
    """One (TU, arch) of one torch: digests of what its device steps read and wrote, and what each step cost."""

    torch: str
    unit: str
    arch: str
    digests: dict[str, str] = dataclasses.field(default_factory=dict)  # ii, module_id, ptx, ptx_code, cubin
    kernels: dict[str, str] = dataclasses.field(default_factory=dict)  # kernel -> digest of its SASS
    cpu: dict[str, float] = dataclasses.field(default_factory=dict)  # stage -> CPU-seconds (compiled steps only)
    results: dict[str, str] = dataclasses.field(default_factory=dict)  # cicc/ptxas -> miss | hit


@dataclasses.dataclass(frozen=True, kw_only=True)
class Unit:
    """One TU of one torch: its front end's and host compile's CPU-seconds."""

    torch: str
    unit: str
    cpu: dict[str, float]


def timed(command: str, env: Mapping[str, str]) -> float:
    """Run one dryrun step, its output into $MEASURE_DEVICE_REUSE_LOG; its CPU-seconds (user + system of the
    step's process tree, from wait4)."""
    with open(env[LOG_ENV], "a") as log:
        process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], env=dict(env), stdout=log, stderr=log)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"measure_device_reuse: step failed ({process.returncode}): {command}")
    return usage.ru_utime + usage.ru_stime


def fake_ninja(folder: Path, real: str) -> Path:
    """A `ninja` that answers --version as the real one does and otherwise writes the build's expanded commands
    (`ninja -t commands`) to $MEASURE_DEVICE_REUSE_RECORD and fails: the build stops before compiling anything."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "ninja"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version|-t) exec {shlex.quote(real)} "$@";; esac\n'
        f'{shlex.quote(real)} -t commands > "${RECORD_ENV}"\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    return folder


def nvcc_commands(recorded: str) -> list[tuple[str, list[str]]]:
    """(nvcc, its arguments) of every objcache.py call in ``ninja -t commands`` output."""
    found = []
    for line in recorded.splitlines():
        words = shlex.split(line)
        wrapper = next((i for i, w in enumerate(words) if w.endswith("objcache.py")), None)
        if wrapper is not None:
            found.append((words[wrapper + 3], words[wrapper + 4:]))
    return found


def record_commands(job: Job, env: BuildEnv, space: compilation.Workspace, environ: dict[str, str],
                    workdir: Path) -> list[tuple[str, list[str]]]:
    """The build's nvcc calls, read from the ninja file torch writes, nothing compiled."""
    real = shutil.which("ninja", path=environ["PATH"])
    if real is None:
        raise SystemExit("measure_device_reuse: no ninja on the build's PATH")
    record = workdir / f"commands-{job.torch}.txt"
    record.unlink(missing_ok=True)
    stand_in = fake_ninja(workdir / "fake-ninja", real)
    environ = {**environ, "PATH": f"{stand_in}{os.pathsep}{environ['PATH']}", RECORD_ENV: str(record)}
    try:
        compilation.compile_wheel(job, env, space, environ, workdir / "unused-dist")
    except WheelwrightError:
        pass  # the stand-in stops it, by design
    if not record.is_file():
        raise SystemExit(f"measure_device_reuse: the build of {job.identifier} never ran ninja; see its output")
    return nvcc_commands(record.read_text())


def option(command: str, name: str) -> str:
    words = shlex.split(command)
    return words[words.index(name) + 1]


def cicc_input(command: str) -> str:
    return next(w for w in shlex.split(command) if w.endswith(".ii"))


def run_stage(devices: nvcc_plan.DeviceSteps, stage: str, command: str, arch: str, env: Mapping[str, str],
              chain: Chain) -> None:
    cpu: list[float] = []

    def call() -> int:
        cpu.append(timed(command, env))
        return 0

    _, result = devices.run(stage, command, arch, call)
    chain.results[stage] = result
    if cpu:
        chain.cpu[stage] = cpu[0]


def measure_chain(torch: str, devices: nvcc_plan.DeviceSteps, arch: str, commands: list[str],
                  env: Mapping[str, str], keep: Path, cuobjdump: Path | None, device: bool = True) -> Chain:
    """One arch's preprocessing, cicc and ptxas (``device`` False: the preprocessing alone, what cicc would read);
    the PTX and cubin kept in ``keep`` for the comparisons."""
    chain = Chain(torch=torch, unit=devices.unit, arch=nvcc_plan.arch_label(arch))
    cicc = next(c for c in commands if nvcc_plan.program_of(c) == "cicc")
    ptxas = next(c for c in commands if nvcc_plan.program_of(c) == "ptxas")
    chain.cpu["preprocess"] = sum(timed(c, env) for c in commands[: commands.index(cicc)])
    chain.digests["ii"] = stagecache.digest_file(cicc_input(cicc))
    chain.digests["module_id"] = stagecache.digest_file(option(cicc, "--module_id_file_name"))
    if not device:
        return chain
    run_stage(devices, "cicc", cicc, arch, env, chain)
    ptx = Path(option(cicc, "-o"))
    chain.digests["ptx"] = stagecache.digest_file(ptx)
    chain.digests["ptx_code"] = stagecache.digest_bytes(_LINE_INFO.sub(b"", ptx.read_bytes()))
    run_stage(devices, "ptxas", ptxas, arch, env, chain)
    cubin = Path(option(ptxas, "-o"))
    chain.digests["cubin"] = stagecache.digest_file(cubin)
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ptx, keep / f"{devices.unit}.{chain.arch}.ptx")
    shutil.copyfile(cubin, keep / f"{devices.unit}.{chain.arch}.cubin")
    if cuobjdump is not None:
        chain.kernels = {f"{a} {k}": stagecache.digest_bytes(text.encode())
                         for (a, k), text in sass.kernel_sass(cuobjdump, cubin).items()}
    return chain


def measure_unit(torch: str, nvcc: str, args: list[str], environ: Mapping[str, str], space: compilation.Workspace,
                 cache: stagecache.StageCache, keep: Path, cuobjdump: Path | None, host: bool, device: bool = True,
                 ) -> tuple[Unit, list[Chain]]:
    args = objcache.deterministic_args(args)
    flags, _ = nvcc_plan.split_flags(args, environ)
    source = objcache.source_of(args)
    scratch = nvcc_plan.scratch_for(space.core_pool, source)
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    plan = nvcc_plan.dryrun_plan(nvcc, flags, environ, scratch)
    if plan is None:
        raise SystemExit(f"measure_device_reuse: nvcc's plan for {source} is not one nvcc_plan takes apart")
    env = {k: v for k, v in {**environ, **plan.variables}.items() if not k.startswith("NVCC_")}
    env[LOG_ENV] = str(keep.parent.parent / "steps.log")
    devices = nvcc_plan.DeviceSteps(cache=cache, variables=plan.variables, scratch=scratch, unit=source.name)
    cpu = {"front": sum(timed(c, env) for c in plan.front)}
    chains = [measure_chain(torch, devices, arch, commands, env, keep, cuobjdump, device)
              for arch, commands in plan.chains.items()]
    if host:
        cpu["host"] = sum(timed(c.replace("rm ", "rm -f ", 1) if c.startswith("rm ") else c, env) for c in plan.back)
    shutil.rmtree(scratch, ignore_errors=True)
    return Unit(torch=torch, unit=source.name, cpu=cpu), chains


@contextmanager
def torch_build(args: argparse.Namespace, torch: str, parallelism: compilation.Parallelism | None = None,
                ) -> Iterator[tuple[Job, BuildEnv, compilation.Workspace, dict[str, str]]]:
    """One torch's build set up as `wheelwright build` sets it up, its workspace held: the job, its build env, the
    workspace and the environment a build gives nvcc (``parallelism``: else the one a build fits to the archs)."""
    workdir: Path = args.workdir
    (job,) = load_plan(bench_matrix(workdir, [args.python], args.archs, args.package, torch), "bench").jobs
    toolkit = find_toolkit(job.accelerator, job.archs)
    runtime = runtime_env(job, load_facts())
    env = build_env(job, runtime, toolkit)
    source = unpack_sdist(fetch_sdist(job), workdir / "src")
    overlay_upstream(job, source)
    recipe = apply_recipe(source, job)
    with compilation.workspace(job, source, runtime.site_packages) as space:
        parallelism = parallelism or compilation.Parallelism.fit(len(job.archs))
        yield job, env, space, compilation.build_environ(job, env, recipe.env, space, parallelism, None, {})


def measure_torch(args: argparse.Namespace, torch: str, cache_root: Path, cuobjdump: Path | None,
                  ) -> tuple[list[Unit], list[Chain]]:
    """Set one torch's build up as `wheelwright build` does, then measure each of its CUDA TUs."""
    workdir: Path = args.workdir
    units: list[Unit] = []
    chains: list[Chain] = []
    one_at_a_time = compilation.Parallelism(max_jobs=1, nvcc_threads=1, pool_slots=1)
    with torch_build(args, torch, one_at_a_time) as (job, env, space, environ):
        cache = stagecache.StageCache(cache_root, "use", environ)
        for nvcc, nvcc_args in record_commands(job, env, space, environ, workdir):
            if args.units and objcache.source_of(nvcc_args).name not in args.units:
                continue
            unit, found = measure_unit(torch, nvcc, nvcc_args, environ, space, cache,
                                       workdir / "kept" / torch, cuobjdump, args.host, args.device)
            print(f"  {torch} {unit.unit}: " + ", ".join(f"{k} {v:.1f}" for k, v in unit.cpu.items())
                  + "; " + "; ".join(f"{c.arch} " + ", ".join(f"{k} {v:.1f}" for k, v in c.cpu.items())
                                     + f" ({c.results.get('cicc', '-')}/{c.results.get('ptxas', '-')})" for c in found),
                  flush=True)
            units.append(unit)
            chains += found
    return units, chains


def classes(values: Mapping[str, str | None]) -> str:
    """Torch versions grouped by equal value: "all 4 equal", or "2.11=2.12 | 2.13 | 2.14"."""
    if all(value is None for value in values.values()):
        return "not compiled"
    groups: dict[str | None, list[str]] = {}
    for torch, value in values.items():
        groups.setdefault(value, []).append(".".join(torch.split(".")[:2]))
    if len(groups) == 1:
        return f"same in all {len(values)}"
    return " \\| ".join("=".join(members) for members in groups.values())


def kernels_line(chains: Sequence[Chain]) -> str:
    """Per-kernel SASS across torch versions: how many kernels, how many equal in every torch."""
    if not all("cubin" in c.digests for c in chains):
        return "not compiled"
    if not all(c.kernels for c in chains):
        return "not compared (no cuobjdump)"
    names = set().union(*(c.kernels for c in chains))
    same = sum(len({c.kernels.get(n) for c in chains}) == 1 for n in names)
    return f"{same} of {len(names)} kernels equal in all"


def table(units: Sequence[Unit], chains: Sequence[Chain]) -> list[str]:
    """The markdown table: one row per (TU, arch), the comparisons and the mean CPU-seconds of each stage."""
    head = ["| unit | arch | device input (.ii) | module id | PTX | PTX without line info | cubin | SASS per kernel "
            "| " + " | ".join(f"{s} CPU-s" for s in STAGES) + " |",
            "|" + "---|" * (8 + len(STAGES))]
    rows = []
    for unit, arch in sorted({(c.unit, c.arch) for c in chains}):
        mine = [c for c in chains if (c.unit, c.arch) == (unit, arch)]
        same = [classes({c.torch: c.digests.get(k) for c in mine}) for k in ("ii", "module_id", "ptx", "ptx_code",
                                                                             "cubin")]
        costs = [_mean([u.cpu.get(s) for u in units if u.unit == unit]) if s in ("front", "host")
                 else _mean([c.cpu.get(s) for c in mine]) for s in STAGES]
        rows.append(f"| {unit} | {arch} | " + " | ".join(same) + f" | {kernels_line(mine)} | "
                    + " | ".join("-" if v is None else f"{v:.1f}" for v in costs) + " |")
    return head + rows


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def reuse_line(chains: Sequence[Chain]) -> str:
    """What the stage cache did over all torch versions after the first: steps reused, CPU-seconds saved."""
    compiled = {s: sum(1 for c in chains if c.results.get(s) == "miss") for s in ("cicc", "ptxas")}
    hits = {s: sum(1 for c in chains if c.results.get(s) == "hit") for s in ("cicc", "ptxas")}
    return (f"stage cache over {len({c.torch for c in chains})} torch versions: cicc {hits['cicc']} reused / "
            f"{compiled['cicc']} compiled, ptxas {hits['ptxas']} reused / {compiled['ptxas']} compiled")


def reuse_classes(chains: Sequence[Chain], stage: str) -> list[list[str]]:
    """The torch minors whose ``stage`` step is the same: for cicc those whose cicc read the same bytes (device
    input and module id; the command is the same wherever those are, -std included), for ptxas those whose cubin
    is the same (a function of the PTX and the stats of the sources it names)."""
    fields = ("ii", "module_id") if stage == "cicc" else ("cubin",)
    groups: dict[tuple[str | None, ...], list[str]] = {}
    for chain in chains:
        groups.setdefault(tuple(chain.digests.get(f) for f in fields), []).append(_minor(chain.torch))
    return [sorted(members) for members in groups.values()]


def _minor(torch: str) -> str:
    return ".".join(torch.split(".")[:2])


def facts(units: Sequence[Unit], chains: Sequence[Chain], package: str, version: str, accelerator: str) -> str:
    """builder/data/device-reuse.toml's entries for this measurement: per unit, the classes of torch minors whose
    cicc and ptxas steps are the same (sm_90's), and each stage's share of the unit's cost for one arch."""
    lines = []
    for unit in sorted({c.unit for c in chains}):
        mine = [c for c in chains if c.unit == unit]
        costs = {stage: _mean([c.cpu.get(stage) for c in mine]) or 0.0 for stage in ("preprocess", "cicc", "ptxas")}
        once = sum(_mean([u.cpu.get(s) for u in units if u.unit == unit]) or 0.0 for s in ("front", "host"))
        total = sum(costs.values()) + once
        shares = ", ".join(f"{stage} = {costs[stage] / total:.3f}" for stage in ("cicc", "ptxas"))
        lines += ["", "[[unit]]", f'package = "{package}"', f'version = "{version}"', f'accelerator = "{accelerator}"',
                  f'unit = "{unit}"']
        for stage in ("cicc", "ptxas"):
            lines.append(f"{stage} = {json.dumps(reuse_classes(mine, stage))}")
        lines.append(f"share = {{ {shares} }}")
    return "\n".join(lines) + "\n"


def report(units: Sequence[Unit], chains: Sequence[Chain]) -> None:
    print("\n".join(table(units, chains)))
    print(reuse_line(chains))


def load(path: Path) -> tuple[list[Unit], list[Chain], str | None]:
    """An earlier --json: its units, its chains and the package it measured (None in a file from before it said)."""
    data = json.loads(path.read_text())
    return [Unit(**u) for u in data["units"]], [Chain(**c) for c in data["chains"]], data.get("package")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", default="causal-conv1d", choices=("causal-conv1d", "mamba-ssm"))
    parser.add_argument("--torch", default="2.11.0,2.12.1,2.13.0,2.14.1")
    parser.add_argument("--archs", default="9.0", help="comma-separated archs (default: 9.0)")
    parser.add_argument("--python", default="3.11")
    parser.add_argument("--units", default="", help="comma-separated TU names (default: every CUDA TU)")
    parser.add_argument("--workdir", type=Path, help="where to measure (required unless --report)")
    parser.add_argument("--json", type=Path, help="write every measurement here too")
    parser.add_argument("--report", type=Path, metavar="JSON", help="only print the table of an earlier --json")
    parser.add_argument("--facts", metavar="VERSION,ACCELERATOR",
                        help="also print builder/data/device-reuse.toml's entries (e.g. 1.7.0,cu130)")
    parser.add_argument("--no-host", dest="host", action="store_false", help="skip the host compile (the back end)")
    parser.add_argument("--inputs-only", dest="device", action="store_false",
                        help="only what cicc would read (front end and device preprocessing): no cicc, ptxas or host")
    args = parser.parse_args(argv)
    args.archs = args.archs.split(",")
    args.units = set(filter(None, args.units.split(",")))
    args.host = args.host and args.device
    if args.report:
        earlier_units, earlier_chains, measured = load(args.report)
        report(earlier_units, earlier_chains)
        if args.facts:  # the file's package, not --package's default: the entries name what was measured
            print(facts(earlier_units, earlier_chains, measured or args.package, *args.facts.split(",")))
        return 0
    if args.workdir is None:
        parser.error("--workdir is required")
    args.workdir.mkdir(parents=True, exist_ok=True)
    cache_root = args.workdir / "stages"
    shutil.rmtree(cache_root, ignore_errors=True)  # a cold stage cache: what this run reuses, it compiled itself
    cuobjdump = sass.find_cuobjdump()
    started = time.monotonic()
    units: list[Unit] = []
    chains: list[Chain] = []
    for torch in args.torch.split(","):
        found_units, found_chains = measure_torch(args, torch, cache_root, cuobjdump)
        units += found_units
        chains += found_chains
    report(units, chains)
    if args.facts:
        print(facts(units, chains, args.package, *args.facts.split(",")))
    print(f"measured in {time.monotonic() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")
    if args.json:
        args.json.write_text(json.dumps({"package": args.package, "units": [dataclasses.asdict(u) for u in units],
                                         "chains": [dataclasses.asdict(c) for c in chains]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
