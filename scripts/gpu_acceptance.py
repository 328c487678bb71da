#!/usr/bin/env python3
"""The Python part of the GPU acceptance run (scripts/gpu_acceptance.sh drives it; docs/gpu-acceptance.md).

Each subcommand runs one stage and records it in the summary JSON given by --summary; the checks that need a GPU
record themselves as "skipped: no CUDA device" where there is none, and exit 3. `plan` says which stages a command
runs (the registry, --stages, --resume); `detach-*` start, wait for and stop the detached build. `finish` prints the
table and exits 0 when every stage passed, 1 when one failed, 3 when there was no CUDA device, 4 when stages are
still pending (a later command's --resume goes on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from scripts.acceptance import archs, bench, checklist, detach, interleave, numerics, ptxspeed, seed, stages, upstream
from scripts.acceptance import summary as record
from scripts.acceptance.config import Config, ConfigError, load_config
from scripts.acceptance.device import torch_facts, unavailable_reason
from scripts.acceptance.doctor import doctor_checks, planned_checks
from scripts.acceptance.installed import environment_checks, install_checks
from scripts.acceptance.summary import FAILED, PASSED, SKIPPED, Check

ROOT = Path(__file__).resolve().parent.parent

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU, EXIT_PENDING = 0, 1, 2, 3, 4


def _say(line: str) -> None:
    print(line, flush=True)


def _report(check: Check) -> Check:
    _say(f"  {check.status.upper():<7} {check.name}: {check.detail}")
    return check


def _stage(
    args: argparse.Namespace, name: str, checks: list[Check], started: float, *, data: dict | None = None
) -> int:
    """Record a stage of checks; the exit code says whether it passed, failed, or lacked a GPU. With --stage and
    --append (an arch stage's parts), the checks join those the stage already has in this command."""
    name = getattr(args, "stage", None) or name
    if getattr(args, "append", False):
        entry = record.append_checks(args.summary, name, checks, data=data)["stages"][name]
        _say(f"{name}: {entry['status']} so far ({entry['detail']})")
        return {PASSED: EXIT_PASSED, FAILED: EXIT_FAILED}.get(record.status_of(checks), EXIT_NO_GPU)
    status = record.status_of(checks)
    failed = sum(check.status == FAILED for check in checks)
    detail = f"{len(checks) - failed} of {len(checks)} checks passed" if status != SKIPPED else checks[0].detail
    record.record_stage(
        args.summary, name, status=status, seconds=time.monotonic() - started, detail=detail, checks=checks, data=data
    )
    _say(f"{name}: {status} ({detail})")
    return {PASSED: EXIT_PASSED, FAILED: EXIT_FAILED}.get(status, EXIT_NO_GPU)


def _gpu_stage(
    args: argparse.Namespace,
    name: str,
    planned: Sequence[str],
    run: Callable[[], list[Check]],
    data: Callable[[list[Check]], dict] | None = None,
) -> int:
    """A stage that needs a CUDA device: without one, every planned check is skipped with the reason."""
    started = time.monotonic()
    _say(f"== {name}")
    reason = unavailable_reason()
    checks = record.skipped_checks(planned, reason) if reason else run()
    return _stage(args, name, checks, started, data=data(checks) if data and not reason else None)


# -- subcommands ------------------------------------------------------------------------------------------------


def cmd_record(args: argparse.Namespace) -> int:
    record.record_stage(
        args.summary,
        args.stage,
        status=args.status,
        seconds=args.seconds,
        detail=args.detail,
        keep_result=args.keep_result,
    )
    return EXIT_PASSED


def cmd_skip_rest(args: argparse.Namespace) -> int:
    reason = args.reason
    if args.reason_of:
        reason = (
            record.load(args.summary)["stages"].get(args.reason_of, {}).get("detail")
            or f"skipped after {args.reason_of}"
        )
    record.skip_remaining(args.summary, args.only or args.config.stages, reason, status=args.status)
    return EXIT_PASSED


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the stages this command runs, ``name setup seconds`` a line, and note the command in the summary
    (a fresh run starts it over; --resume keeps the earlier commands' results)."""
    registry = args.config.registry
    try:
        selected = stages.parse_selection(args.stages, registry) if args.stages else None
    except stages.SelectionError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.resume and not args.summary.is_file():
        print(f"ERROR --resume: no earlier run's summary at {args.summary} (was the machine given back?); "
              "run without --resume to start afresh", file=sys.stderr)
        return EXIT_USAGE
    earlier = record.load(args.summary)["stages"] if args.resume else {}
    results = {name: entry.get("status") for name, entry in earlier.items()}
    planned = stages.plan(registry, selected=selected, results=results, resume=args.resume)
    if args.argv is not None:
        record.begin_command(args.summary, command=args.argv, planned=[s.name for s in planned], resume=args.resume)
    for line in stages.plan_lines(planned):
        print(line)
    return EXIT_PASSED


def cmd_preflight(args: argparse.Namespace) -> int:
    """What this machine is; the run goes on only with a CUDA device and the toolkit the profile needs."""
    from builder.plan.job import parse_label

    started = time.monotonic()
    _say("== preflight")
    record.update(args.summary, label=args.config.label, mode="quick" if args.quick else "full")
    facts = torch_facts() | _toolchain_facts()
    record.update(args.summary, environment=facts)
    torch_minor, accelerator = parse_label(args.config.label)
    reason = unavailable_reason()
    checks = [
        _fact_check("CUDA device", reason is None, f"{facts.get('device')} (sm {facts.get('capability')})"),
        _fact_check(
            f"torch {torch_minor} + CUDA {accelerator.version}",
            str(facts.get("torch", "")).startswith(torch_minor + ".")
            and facts.get("torch_cuda") == accelerator.version,
            f"torch {facts.get('torch')} built with CUDA {facts.get('torch_cuda')}",
        ),
        _fact_check(
            f"nvcc {accelerator.version}",
            facts.get("nvcc_release") == accelerator.version,
            f"{facts.get('cuda_home')}: release {facts.get('nvcc_release')}",
        ),
    ]
    if reason:  # nothing else matters on a machine without a GPU; the facts stay in the stage's data
        checks = record.skipped_checks([c.name for c in checks], reason)
    for check in checks:
        _report(check)
    status = record.status_of(checks)
    detail = reason or f"{facts.get('device')}, torch {facts.get('torch')}, nvcc {facts.get('nvcc_release')}"
    record.record_stage(
        args.summary,
        "preflight",
        status=status,
        seconds=time.monotonic() - started,
        detail=detail,
        checks=checks,
        data={"cuda_available": reason is None, **facts},
    )
    _say(f"preflight: {status} ({detail})")
    return EXIT_NO_GPU if reason else EXIT_FAILED if status == FAILED else EXIT_PASSED


def _fact_check(name: str, ok: bool, detail: str) -> Check:
    return Check(name=name, status=PASSED if ok else FAILED, detail=detail)


def _toolchain_facts() -> dict:
    cuda_home = os.environ.get("CUDA_HOME", "")
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    release = None
    if cuda_home and nvcc.is_file():
        output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        release = next(
            (line.split("release ")[1].split(",")[0] for line in output.splitlines() if "release " in line), None
        )
    return {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "cuda_home": cuda_home or None,
        "nvcc_release": release,
        "cpus": len(os.sched_getaffinity(0)),
        "mem_available_gib": _mem_available_gib(),
        "ensurepip": _importable("ensurepip"),
    }


def _mem_available_gib() -> float | None:
    try:
        line = next(row for row in Path("/proc/meminfo").read_text().splitlines() if row.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None
    return round(int(line.split()[1]) / 2**20, 1)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def cmd_build_report(args: argparse.Namespace) -> int:
    """The build stage from the ledger: one check per job, passed when it produced a verified wheel in dist/. With
    --state, the detached build's exit status and time come from its state folder; still running, the stage is
    recorded as running (exit 4) for a later command to collect."""
    from builder.core.ledger import Ledger

    if args.state is not None:
        progress = detach.status(args.state)
        if progress.state == detach.RUNNING:
            detail = (
                f"still running after {progress.seconds():.0f} s (pid {progress.pid}, detached): --resume collects it"
            )
            record.record_stage(args.summary, "build", status=record.RUNNING, seconds=progress.seconds(), detail=detail)
            _say(f"build: running ({detail})")
            return EXIT_PENDING
        args.exit_code = progress.exit_code if progress.state in (detach.FINISHED, detach.COLLECTED) else -1
        args.seconds = progress.seconds()
        detach.collect(args.state)
    path = args.wheelhouse / "ledger.sqlite"
    checks: list[Check] = []
    if path.is_file():
        with Ledger(path) as ledger:
            entries = [entry for entry in ledger.entries() if entry.label == args.config.label]
            checks = [_report(_job_check(entry, args.wheelhouse)) for entry in entries]
    if not checks:
        checks = [
            Check(
                name="wheelwright build",
                status=FAILED,
                detail=f"no {args.config.label} jobs in {path} (exit {args.exit_code})",
            )
        ]
    elif args.exit_code != 0 and record.status_of(checks) == PASSED:
        checks.append(Check(name="wheelwright build", status=FAILED, detail=f"exited {args.exit_code}"))
    status = record.status_of(checks)
    built = [c.data["wheel"] for c in checks if c.status == PASSED and "wheel" in c.data]
    how = f"reused from {args.wheelhouse}" if args.reused else "built"
    detail = f"{len(built)} wheels {how}: {', '.join(built) or 'none'}"
    record.record_stage(
        args.summary,
        "build",
        status=record.REUSED if args.reused and status == PASSED else status,
        seconds=args.seconds,
        checks=checks,
        detail=detail,
        data={"wheels": built},
        own_seconds=args.state is not None,
    )
    return EXIT_PASSED if status == PASSED else EXIT_FAILED


def _job_check(entry, wheelhouse: Path) -> Check:
    built = entry.status == "built" and (wheelhouse / "dist" / str(entry.wheel)).is_file()
    timings = ", ".join(f"{phase} {seconds:.0f}s" for phase, seconds in entry.timings.items())
    detail = f"{entry.wheel} ({timings})" if built else f"{entry.status} in {entry.phase}: {entry.reason}"
    data = {
        "job": entry.job_id,
        "status": entry.status,
        "timings": entry.timings,
        "sha256": entry.wheel_sha256,
        "size": entry.wheel_size,
        **({"wheel": entry.wheel} if built else {}),
    }
    return Check(name=entry.job_id, status=PASSED if built else FAILED, detail=detail, data=data)


def cmd_wheelhouse_packages(args: argparse.Namespace) -> int:
    """Print the packages (of the data file's) the wheelhouse has a built wheel of for the label, comma-separated:
    what a --skip-build run installs and checks. None: one ERROR line, exit 1."""
    from builder.core.ledger import Ledger

    with Ledger(args.wheelhouse / "ledger.sqlite") as ledger:
        built = {
            canonicalize_name(entry.package)
            for entry in ledger.entries()
            if entry.label == args.config.label and entry.status == "built"
            and (args.wheelhouse / "dist" / str(entry.wheel)).is_file()
        }
    held = [package for package in args.config.packages if canonicalize_name(package) in built]
    if not held:
        print(f"ERROR {args.wheelhouse}: no {args.config.label} wheel of {', '.join(args.config.packages)} built there",
              file=sys.stderr)
        return EXIT_FAILED
    print(",".join(held))
    return EXIT_PASSED


def cmd_lacks(args: argparse.Namespace) -> int:
    """Print why a stage cannot run on the packages this command checks (--packages), or nothing when it can."""
    config: Config = args.config
    missing = [p for p in config.stage(args.stage).packages if p not in config.packages]
    if missing:
        print(f"skipped: {', '.join(missing)} not in {args.wheelhouse or 'the wheelhouse'} "
              f"(it holds {', '.join(config.packages)})")
    return EXIT_PASSED


def cmd_detach_start(args: argparse.Namespace) -> int:
    command = args.command_line[1:] if args.command_line[:1] == ["--"] else args.command_line
    if not command:
        print("ERROR detach-start needs a command after --", file=sys.stderr)
        return EXIT_USAGE
    try:
        progress = detach.start(args.state, command, log=args.log, limit_s=args.limit)
    except detach.DetachError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_FAILED
    _say(f"started detached (pid {progress.pid}, stopped after {args.limit:.0f} s): {' '.join(command)}")
    return EXIT_PASSED


def cmd_detach_wait(args: argparse.Namespace) -> int:
    """Exit 0 once the detached command has ended (whatever its status), 4 while it is still running."""
    def tick(progress: detach.Progress) -> None:
        _say(f"  ... still running, {progress.seconds():.0f} s{_last_line(args.log)}")

    progress = detach.wait(args.state, seconds=args.seconds, tick=tick, tick_every_s=args.tick)
    if progress.state == detach.RUNNING:
        _say(f"still running after {progress.seconds():.0f} s; not waiting longer in this command")
        return EXIT_PENDING
    if progress.state == detach.NONE:
        print(f"ERROR {args.state}: nothing was started there", file=sys.stderr)
        return EXIT_FAILED
    how = f"exit {progress.exit_code}" if progress.state == detach.FINISHED else "ended without recording its status"
    _say(f"ended after {progress.seconds() or 0:.0f} s: {how}")
    return EXIT_PASSED


def _last_line(log: Path | None) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines() if log else []
    except OSError:
        return ""
    return f": {lines[-1].strip()[:160]}" if lines else ""


def cmd_detach_status(args: argparse.Namespace) -> int:
    print(detach.status(args.state).state)
    return EXIT_PASSED


def cmd_detach_stop(args: argparse.Namespace) -> int:
    before = detach.status(args.state)
    after = detach.stop(args.state)
    if before.state == detach.RUNNING:
        _say(f"stopped the detached command (pid {before.pid}): exit {after.exit_code}")
    return EXIT_PASSED


def cmd_installed(args: argparse.Namespace) -> int:
    started = time.monotonic()
    _say("== install")
    report = json.loads(args.report.read_text())
    config: Config = args.config
    checks = install_checks(
        report, packages=config.packages, label=config.label, index_url=args.index_url, dist=args.dist
    )
    checks += environment_checks(config.packages, report)
    for check in checks:
        _report(check)
    wheels = [c.data["wheel"] for c in checks if "wheel" in c.data]
    record.update(args.summary, wheels=wheels)
    return _stage(args, "install", checks, started, data={"wheels": wheels, "index_url": args.index_url})


def cmd_doctor(args: argparse.Namespace) -> int:
    config: Config = args.config

    def run() -> list[Check]:
        report = _read_json(args.report)
        if report is None:
            return [Check(name=n, status=FAILED, detail=f"doctor.py wrote no JSON report to {args.report}")
                    for n in planned_checks(config.packages, config.gpu_arch)]
        checks = doctor_checks(report, _read_json(args.cli_report), packages=config.packages, label=config.label,
                               arch=config.gpu_arch)
        return [_report(check) for check in checks]

    return _gpu_stage(args, "doctor", planned_checks(config.packages, config.gpu_arch), run)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cmd_seed(args: argparse.Namespace) -> int:
    def run() -> list[Check]:
        tolerance = args.config.conv_tolerance["float32"]
        return [
            _report(record.guarded(seed.CONV_CHECK, lambda: seed.causal_conv1d_seed(tolerance))),
            _report(record.guarded(seed.MAMBA_CHECK, seed.mamba_seed)),
        ]

    return _gpu_stage(args, "seed", seed.NAMES, run)


def cmd_checklist(args: argparse.Namespace) -> int:
    config: Config = args.config
    parts = args.parts

    def run() -> list[Check]:
        checks = checklist.run(
            config.checklist, config.conv_tolerance["float32"], parts=parts, leak_seconds=args.leak_seconds,
            report=_report,
        )
        for line in checklist.report_lines([check.as_dict() for check in checks]):
            _say(line)
        return checks

    return _gpu_stage(args, "checklist", checklist.planned(config.checklist, parts), run, data=checklist.summary_data)


def cmd_upstream(args: argparse.Namespace) -> int:
    name = "causal-conv1d tests/test_causal_conv1d.py"
    return _gpu_stage(args, "upstream", [name], lambda: [_report(record.guarded(name, lambda: _upstream_check(args)))])


def _upstream_check(args: argparse.Namespace) -> Check:
    """The installed causal-conv1d's version picks the sdist (and upstream's counts) the tests come from."""
    from importlib import metadata

    config: Config = args.config
    version = metadata.version(config.upstream.package).split("+")[0]
    sdist = args.sdist_dir / upstream.sdist_filename(config.upstream.package, version)
    scratch = Path(tempfile.mkdtemp(prefix="ww-upstream-tests-"))  # outside the checkout: no pytest config of ours
    try:
        root = upstream.unpack_tests(sdist, config.upstream.tests, scratch)
        imported = upstream.imported_from(sys.executable, "causal_conv1d", root)
        suite = upstream.run_suite(
            sys.executable,
            root,
            config.upstream.tests,
            workers=args.workers,
            select=config.upstream.quick_select if args.quick else None,
            timeout=args.timeout,
            log=args.log,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _say(suite.output_tail)
    return upstream.suite_check(suite, config.upstream.expected.get(version), quick=args.quick, imported=imported)


def cmd_mamba(args: argparse.Namespace) -> int:
    config: Config = args.config
    scans, inners = numerics.scan_cases(config.scan), numerics.inner_cases(config.inner)

    def run() -> list[Check]:
        checks = [
            _report(
                record.guarded(
                    c.name, lambda c=c: numerics.run_scan_case(c, config.scan, config.tolerance, config.gradient_error)
                )
            )
            for c in scans
        ]
        return checks + [
            _report(
                record.guarded(
                    c.name,
                    lambda c=c: numerics.run_inner_case(c, config.inner, config.tolerance, config.gradient_error),
                )
            )
            for c in inners
        ]

    return _gpu_stage(args, "mamba", [c.name for c in scans + inners], run)


def cmd_bench(args: argparse.Namespace) -> int:
    settings = args.config.bench
    convs, scans = settings.causal_conv1d, settings.selective_scan

    def run() -> list[Check]:
        conv_tol, scan_tol = args.config.conv_tolerance, args.config.tolerance
        checks = [
            _report(
                record.guarded(
                    bench.conv_name(s), lambda s=s: bench.bench_causal_conv1d(s, settings, conv_tol[s["dtype"]])
                )
            )
            for s in convs
        ]
        return checks + [
            _report(
                record.guarded(
                    bench.scan_name(s), lambda s=s: bench.bench_selective_scan(s, settings, scan_tol[s["dtype"]])
                )
            )
            for s in scans
        ]

    return _gpu_stage(args, "bench", [bench.conv_name(s) for s in convs] + [bench.scan_name(s) for s in scans], run)


# -- the arch wheels (issue #13) ----------------------------------------------------------------------------------


def cmd_arch_build_report(args: argparse.Namespace) -> int:
    """The arch_build stage: each variant's detached build, collected; exit 4 while one is still running."""
    config: Config = args.config
    started = time.monotonic()
    _say("== arch_build")
    variants = [config.arch.variant(name) for name in args.variants] if args.variants else config.arch.variants
    checks = [
        _report(archs.build_check(args.root, v, package=config.arch.package, label=config.label, cores=args.cores))
        for v in variants
    ]
    running = [c for c in checks if c.status == archs.STILL_RUNNING]
    if running:
        detail = "; ".join(f"{c.name}: {c.detail}" for c in running) + "; --resume collects them"
        record.record_stage(args.summary, "arch_build", status=record.RUNNING, detail=detail)
        _say(f"arch_build: running ({detail})")
        return EXIT_PENDING
    data = {c.name.split()[0]: c.data for c in checks if c.data}
    if args.main is not None:  # the sm_90 build beside them, for comparison
        main = archs.main_profile(args.main, package=config.arch.package, label=config.label, cores=args.cores)
        data["main"] = {"compile_profile": main}
        if main:
            _say(f"  the reference build's {config.arch.package} ({args.main}): {archs.describe(main)}")
    return _stage(args, "arch_build", checks, started, data=data)


def cmd_arch_installed(args: argparse.Namespace) -> int:
    """An arch stage's first part: pip put exactly the variant's wheel from its own index into its own venv."""
    config: Config = args.config
    started = time.monotonic()
    variant = config.arch.variant(args.variant)
    _say(f"== {variant.stage}: install")
    report = json.loads(args.report.read_text())
    packages = (config.arch.package,)
    checks = install_checks(report, packages=packages, label=config.label, index_url=args.index_url, dist=args.dist)
    checks += environment_checks(packages, report)
    installed = [canonicalize_name(p["metadata"]["name"]) for p in report.get("install", [])]
    if installed != [canonicalize_name(config.arch.package)]:
        checks.append(Check(name="nothing else installed", status=FAILED, detail=f"pip installed {installed}"))
    for check in checks:
        _report(check)
    args.stage, args.append = variant.stage, False
    return _stage(args, variant.stage, checks, started, data={"index_url": args.index_url, "variant": variant.name})


def cmd_arch_doctor(args: argparse.Namespace) -> int:
    """What doctor says of the variant's wheel before any of its kernels runs."""
    config: Config = args.config
    variant = config.arch.variant(args.variant)
    args.stage, args.append = variant.stage, True
    name = f"doctor says {variant.doctor} for the {variant.name} wheel"

    def run() -> list[Check]:
        gpu = gpu_check_of(_read_json(args.report), config.gpu_arch)
        check = archs.doctor_check(
            _read_json(args.report), _read_json(args.cli_report), variant, package=config.arch.package
        )
        return [_report(gpu), _report(check)]

    return _gpu_stage(args, variant.stage, [name], run)


def gpu_check_of(report: dict | None, arch: str) -> Check:
    from scripts.acceptance.doctor import gpu_check

    return gpu_check((report or {}).get("environment", {}), arch)


def cmd_no_kernel(args: argparse.Namespace) -> int:
    variant = args.config.arch.variant(args.variant)
    args.stage, args.append = variant.stage, True
    return _gpu_stage(args, variant.stage, [archs.NO_KERNEL_CHECK], lambda: [_report(archs.no_kernel_call())])


def cmd_jit_warm(args: argparse.Namespace) -> int:
    """In a venv: the first call of each kernel unit, timed, into the variant's stage (fills the JIT cache)."""
    variant = args.config.arch.variant(args.variant)
    args.stage, args.append = variant.stage, True
    settings = args.config.ptx_speed
    return _gpu_stage(args, variant.stage, [ptxspeed.WARM_CHECK],
                      lambda: [_report(record.guarded(ptxspeed.WARM_CHECK, lambda: ptxspeed.warm_calls(settings)))])


def _measure_to(out: Path, measure: Callable[[], object]) -> int:
    """A measurement's JSON to ``out`` (no summary entry); without a GPU, one ERROR line and exit 3."""
    reason = unavailable_reason()
    if reason:
        print(f"ERROR {reason}", file=sys.stderr)
        return EXIT_NO_GPU
    out.write_text(json.dumps(measure()))
    return EXIT_PASSED


def cmd_first_call(args: argparse.Namespace) -> int:
    """In a venv: the first causal_conv1d_fn call's time, as JSON to --out."""
    return _measure_to(args.out, lambda: ptxspeed.first_call(args.config.ptx_speed))


def cmd_kernel_worker(args: argparse.Namespace) -> int:
    """In a venv: the A/B worker (scripts/acceptance/interleave.py): warm up, then time a round per request."""
    reason = unavailable_reason()
    if reason:
        print(f"ERROR {reason}", file=sys.stderr)
        return EXIT_NO_GPU
    config: Config = args.config
    return interleave.serve(lambda: ptxspeed.KernelTimer(config.bench, config.ptx_speed), sys.stdin, sys.stdout)


def _arm(text: str) -> tuple[str, Path]:
    name, sep, python = text.partition("=")
    if not sep or not name or not python:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=PYTHON")
    return name, Path(python)


def cmd_ptx_rounds(args: argparse.Namespace) -> int:
    """The interleaved rounds: one kernel-worker per --arm (a venv's python), rounds of every case in each, to
    --out (the judging is ptx-speed's). Exit 1 when a worker failed (what was measured is still written)."""
    settings = args.config.ptx_speed
    env = {"PYTHONPATH": str(ROOT)}
    arms = [
        interleave.Arm(name=name, command=(str(python), "-m", "scripts.gpu_acceptance", "--summary",
                                           str(args.summary), "kernel-worker"), env=env)
        for name, python in args.arm
    ]
    rounds = args.rounds or settings.rounds
    _say(f"== ptx_speed: {rounds} interleaved rounds over {', '.join(name for name, _ in args.arm)}")
    result = interleave.run_rounds(arms, rounds=rounds, timeout_s=settings.rounds_timeout_s, log_dir=args.out.parent)
    args.out.write_text(json.dumps(result))
    if result["error"]:
        print(f"ERROR {result['error']}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_PASSED


def cmd_ptx_speed(args: argparse.Namespace) -> int:
    """The ptx_speed stage from the measurements' JSON: each PTX wheel's JIT cost, the A/A noise, and the PTX
    wheels against the SASS one once JIT-ed, with the verdict that attributes a gap."""
    config: Config = args.config
    started = time.monotonic()
    _say("== ptx_speed")
    if unavailable_reason():
        return _stage(args, "ptx_speed", record.skipped_checks([ptxspeed.NOISE_CHECK], unavailable_reason()), started)
    speed = config.ptx_speed
    labels = {v.name: "PTX " + ", ".join(f"compute_{a.replace('.', '')}" for a in v.ptx)
              for v in config.arch.variants if v.ptx and not v.sass}
    firsts = dict(args.first)
    sass_first = _read_json(firsts.pop(ptxspeed.REFERENCE, Path("/nonexistent")))
    first_checks = [ptxspeed.first_call_check(sass_first, _read_json(path), name=labels.get(name, name))
                    for name, path in firsts.items()]
    rounds = _read_json(args.rounds) or {"error": f"no rounds in {args.rounds}"}
    speed_checks, data = ptxspeed.judge(rounds, target=speed.target, isa=speed.isa_control, floor=speed.noise_floor,
                                        max_noise=speed.max_noise, labels=labels)
    checks = [_report(c) for c in (*first_checks, *speed_checks)]
    for line in ptxspeed.table_lines(data):
        _say(f"  {line}")
    jit = {name: c.data.get("jit_s") for name, c in zip(firsts, first_checks, strict=True)}
    data = {
        "jit_s": jit.get(speed.target),
        "jit_s_by_arm": jit,
        "first_call": {"sass": sass_first, **{name: _read_json(path) for name, path in firsts.items()}},
        "sass_reference": args.sass_reference,
        "method": {
            "rounds": speed.rounds, "repeats": speed.repeats, "warmup": speed.warmup,
            "min_sample_ms": speed.min_sample_ms, "noise_floor": speed.noise_floor, "max_noise": speed.max_noise,
            "ratio": "median over rounds of the round's PTX/SASS time",
            "noise": "worst round of the SASS wheel in a second process against itself, |ratio - 1|",
        },
        "command": "python -m scripts.gpu_acceptance " + shlex.join(args.invocation),
        **data,
    }
    return _stage(args, "ptx_speed", checks, started, data=data)


def cmd_sass_reference(args: argparse.Namespace) -> int:
    """Print the one causal-conv1d wheel of the label under --path (a wheel, or a build output's dist/) after
    checking that it holds SASS for the GPU's arch: the reference ptx_speed times PTX against."""
    from builder.core.errors import WheelwrightError
    from builder.steps.elf import wheel_elf_facts

    config: Config = args.config
    path: Path = args.path
    prefix = canonicalize_name(config.arch.package).replace("-", "_") + "-"
    wheels = [path] if path.is_file() else sorted((path / "dist").glob(f"{prefix}*+{config.label}-*.whl"))
    if len(wheels) != 1:
        print(f"ERROR {path}: {len(wheels)} {config.arch.package} wheels of {config.label} (want one)", file=sys.stderr)
        return EXIT_FAILED
    try:
        facts = wheel_elf_facts(wheels[0])
    except WheelwrightError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_FAILED
    if not any(config.gpu_arch in f.gpu.sass for f in facts):
        held = "; ".join(f"{f.name}: {f.gpu.describe()}" for f in facts if not f.gpu.empty) or "no GPU code"
        print(f"ERROR {wheels[0]}: no SASS for {config.gpu_arch} ({held})", file=sys.stderr)
        return EXIT_FAILED
    print(wheels[0].resolve())
    return EXIT_PASSED


def cmd_finish(args: argparse.Namespace) -> int:
    summary = record.finish(args.summary, args.config.stages)
    for line in record.render(summary, args.config.stages):
        _say(line)
    for line in checklist.report_lines(summary["stages"].get("checklist", {}).get("checks", [])):
        _say(line)
    for line in archs.closing_lines(summary):
        _say(line)
    if summary["outcome"] == "incomplete":
        _say("stages are pending: run the same command again with --resume (while the machine is still warm)")
    exits = {"passed": EXIT_PASSED, "no-gpu": EXIT_NO_GPU, "incomplete": EXIT_PENDING}
    return exits.get(summary["outcome"], EXIT_FAILED)


# -- command line -----------------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _parts(text: str) -> tuple[str, ...]:
    try:
        return checklist.parse_parts(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _seconds_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _only_packages(config: Config, packages: tuple[str, ...]) -> Config:
    strangers = [p for p in packages if p not in config.packages]
    if strangers or not packages:
        raise ConfigError(f"--packages: {', '.join(strangers) or 'none given'}: not among {', '.join(config.packages)}")
    return dataclasses.replace(config, packages=tuple(p for p in config.packages if p in packages))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.gpu_acceptance",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 passed, 1 a check failed, 2 bad arguments, 3 no CUDA device, 4 pending (--resume)",
    )
    parser.add_argument("--summary", type=Path, required=True, help="the summary JSON to add to (created if missing)")
    parser.add_argument(
        "--config", type=Path, default=None, help="the checks' data file (default: scripts/data/gpu_acceptance.toml)"
    )
    parser.add_argument(
        "--packages", type=_names, default=None,
        help="comma-separated: the data file's packages the wheelhouse holds (default: all of them); install and "
        "doctor check these, and a stage testing another is skipped (see `lacks`)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sub = commands.add_parser("wheelhouse-packages", help="print the packages a wheelhouse has built wheels of")
    sub.add_argument("--wheelhouse", type=Path, required=True)
    sub.set_defaults(func=cmd_wheelhouse_packages)

    sub = commands.add_parser("lacks", help="print why a stage is skipped for --packages (nothing: it can run)")
    sub.add_argument("--stage", required=True)
    sub.add_argument("--wheelhouse", help="named in the reason")
    sub.set_defaults(func=cmd_lacks)

    sub = commands.add_parser("record", help="record a stage's result (for the shell's own stages)")
    sub.add_argument("--stage", required=True)
    sub.add_argument("--status", required=True, choices=record.STATUSES)
    sub.add_argument("--seconds", type=float)
    sub.add_argument("--detail", default="")
    sub.add_argument(
        "--keep-result", action="store_true", help="if the stage already has a result, keep it and only set its seconds"
    )
    sub.set_defaults(func=cmd_record)

    sub = commands.add_parser("skip-rest", help="mark every stage without a result as skipped")
    reasons = sub.add_mutually_exclusive_group(required=True)
    reasons.add_argument("--reason", help="why they were skipped")
    reasons.add_argument("--reason-of", metavar="STAGE", help="skipped for the reason recorded as STAGE's detail")
    sub.add_argument("--status", choices=(record.SKIPPED, record.PENDING), default=record.SKIPPED,
                     help="pending: left for a later command's --resume (default: %(default)s)")
    sub.add_argument("--only", nargs="+", metavar="STAGE", help="only these stages (default: every stage)")
    sub.set_defaults(func=cmd_skip_rest)

    sub = commands.add_parser("plan", help="print the stages this command runs: name, setup (1/0), seconds needed")
    sub.add_argument("--stages", help="comma-separated stage names (the setup stages before them come along)")
    sub.add_argument("--resume", action="store_true", help="keep the summary; run what earlier commands left")
    sub.add_argument("--argv", help="the command line, noted in the summary (and a command of the run begins)")
    sub.set_defaults(func=cmd_plan)

    sub = commands.add_parser("detach-start", help="start a command in its own session (it outlives this one)")
    sub.add_argument("--state", type=Path, required=True, help="the folder its pid and exit status go to")
    sub.add_argument("--log", type=Path, required=True, help="its output")
    sub.add_argument("--limit", type=float, default=3600.0, help="seconds before it is stopped (default: %(default)s)")
    sub.add_argument("command_line", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    sub.set_defaults(func=cmd_detach_start)

    sub = commands.add_parser("detach-wait", help="wait for a detached command; exit 4 if still running")
    sub.add_argument("--state", type=Path, required=True)
    sub.add_argument("--seconds", type=float, required=True, help="how long to wait at most")
    sub.add_argument("--log", type=Path, help="its output: each progress line quotes the last line")
    sub.add_argument("--tick", type=float, default=30.0, help="seconds between progress lines (default: %(default)s)")
    sub.set_defaults(func=cmd_detach_wait)

    sub = commands.add_parser("detach-status", help="print none, running, finished, collected or vanished")
    sub.add_argument("--state", type=Path, required=True)
    sub.set_defaults(func=cmd_detach_status)

    sub = commands.add_parser("detach-stop", help="stop a detached command if it is running")
    sub.add_argument("--state", type=Path, required=True)
    sub.set_defaults(func=cmd_detach_stop)

    sub = commands.add_parser("preflight", help="record this machine's GPU, torch and toolkit; exit 3 without a GPU")
    sub.add_argument("--quick", action="store_true", help="mark the run as a --quick one")
    sub.set_defaults(func=cmd_preflight)

    sub = commands.add_parser("build-report", help="record the build stage from the build's ledger")
    sub.add_argument("--wheelhouse", type=Path, required=True)
    how = sub.add_mutually_exclusive_group(required=True)
    how.add_argument("--exit-code", type=int, help="wheelwright build's exit status")
    how.add_argument("--state", type=Path, help="the detached build's state folder (its exit status and time)")
    sub.add_argument("--seconds", type=float)
    sub.add_argument("--reused", action="store_true", help="an earlier run's build, taken over (--skip-build)")
    sub.set_defaults(func=cmd_build_report)

    sub = commands.add_parser("installed", help="check pip's installation report against the index and dist/")
    sub.add_argument("--report", type=Path, required=True, help="pip install --report's JSON")
    sub.add_argument("--index-url", required=True, help="the served site's root URL")
    sub.add_argument("--dist", type=Path, required=True, help="the build's dist/ folder")
    sub.set_defaults(func=cmd_installed)

    sub = commands.add_parser("doctor", help="check what doctor says about the installed wheels (GPU)")
    sub.add_argument("--report", type=Path, required=True, help="doctor.py --json's output")
    sub.add_argument("--cli-report", type=Path, required=True, help="wheelwright doctor --json's output")
    sub.set_defaults(func=cmd_doctor)

    commands.add_parser("seed", help="the two seed checks alone (GPU; the checklist holds them)").set_defaults(
        func=cmd_seed
    )

    sub = commands.add_parser("checklist", help="the seed checklist: seed, batches, decode, performance, leaks (GPU)")
    sub.add_argument("--parts", type=_parts, default=checklist.PARTS,
                     help=f"comma-separated parts of {','.join(checklist.PARTS)} (default: all)")
    sub.add_argument("--leak-seconds", type=_seconds_value, default=None,
                     help="each leak run's length (default: the data file's, 60)")
    sub.set_defaults(func=cmd_checklist)

    sub = commands.add_parser("arch-build-report", help="record the arch_build stage from the variants' builds")
    sub.add_argument("--root", type=Path, required=True, help="the folder holding one build folder per variant")
    sub.add_argument("--main", type=Path, help="the main build's output folder, whose profile is kept beside")
    sub.add_argument("--variants", type=_names, help="comma-separated: only these variants (default: every one)")
    sub.add_argument("--cores", type=_positive, default=len(os.sched_getaffinity(0)),
                     help="the cores the builds shared, for the cores bound (default: this machine's)")
    sub.set_defaults(func=cmd_arch_build_report)

    sub = commands.add_parser("arch-installed", help="an arch stage's install, from pip's report")
    sub.add_argument("--variant", required=True, help="fat, ptx or sm80 ([arch.variants] in the data file)")
    sub.add_argument("--report", type=Path, required=True)
    sub.add_argument("--index-url", required=True)
    sub.add_argument("--dist", type=Path, required=True)
    sub.set_defaults(func=cmd_arch_installed)

    sub = commands.add_parser("arch-doctor", help="an arch stage's doctor verdict (GPU)")
    sub.add_argument("--variant", required=True, help="fat, ptx or sm80 ([arch.variants] in the data file)")
    sub.add_argument("--report", type=Path, required=True, help="doctor.py --json's output")
    sub.add_argument("--cli-report", type=Path, required=True, help="wheelwright doctor --json's output")
    sub.set_defaults(func=cmd_arch_doctor)

    sub = commands.add_parser("no-kernel", help="a kernel call that must fail with 'no kernel image' (GPU)")
    sub.add_argument("--variant", required=True, help="fat, ptx or sm80 ([arch.variants] in the data file)")
    sub.set_defaults(func=cmd_no_kernel)

    sub = commands.add_parser("jit-warm", help="time each kernel unit's first call, filling the JIT cache (GPU)")
    sub.add_argument("--variant", required=True, help="the arch variant whose stage it joins")
    sub.set_defaults(func=cmd_jit_warm)

    sub = commands.add_parser("first-call", help="the first causal_conv1d_fn call's seconds, as JSON (GPU; in a venv)")
    sub.add_argument("--out", type=Path, required=True)
    sub.set_defaults(func=cmd_first_call)

    sub = commands.add_parser("kernel-worker", help="time the kernels a round per stdin line (GPU; in a venv)")
    sub.set_defaults(func=cmd_kernel_worker)

    sub = commands.add_parser("ptx-rounds", help="interleaved A/B rounds over kernel workers, as JSON (GPU)")
    sub.add_argument("--arm", type=_arm, action="append", required=True, metavar="NAME=PYTHON",
                     help="an arm and its venv's python (sass, sass-again and the PTX variants' names)")
    sub.add_argument("--rounds", type=_positive, help="rounds (default: the data file's)")
    sub.add_argument("--out", type=Path, required=True, help="the rounds' JSON; the workers' logs go beside it")
    sub.set_defaults(func=cmd_ptx_rounds)

    sub = commands.add_parser("ptx-speed", help="record the ptx_speed stage from first-call and ptx-rounds JSON")
    sub.add_argument("--first", type=_arm, action="append", required=True, metavar="NAME=JSON",
                     help="an arm's first-call JSON (sass, and each PTX variant)")
    sub.add_argument("--rounds", type=Path, required=True, help="ptx-rounds' JSON")
    sub.add_argument("--sass-reference", default=None, help="the SASS wheel timed against, for the record")
    sub.set_defaults(func=cmd_ptx_speed)

    sub = commands.add_parser("sass-reference", help="print the wheel under PATH that ptx_speed uses as SASS")
    sub.add_argument("--path", type=Path, required=True, help="a wheel, or a wheelwright build output folder")
    sub.set_defaults(func=cmd_sass_reference)

    sub = commands.add_parser("upstream", help="causal-conv1d's own test file from its sdist (GPU)")
    sub.add_argument("--stage", help="record under this stage (an arch stage) instead of upstream")
    sub.add_argument("--append", action="store_true", help="add to the stage's checks of this command")
    sub.add_argument("--sdist-dir", type=Path, required=True, help="the fetch cache's sdists folder")
    sub.add_argument("--workers", type=_positive, default=16, help="pytest-xdist workers (default: %(default)s)")
    sub.add_argument("--quick", action="store_true", help="a subset; counts are not compared with upstream's")
    sub.add_argument(
        "--timeout", type=float, default=300.0, help="seconds before the suite is stopped (default: %(default)s)"
    )
    sub.add_argument("--log", type=Path, required=True, help="pytest's full output")
    sub.set_defaults(func=cmd_upstream)

    commands.add_parser("mamba", help="mamba-ssm kernels vs its references, every dtype (GPU)").set_defaults(
        func=cmd_mamba
    )
    commands.add_parser("bench", help="kernel benchmarks (GPU)").set_defaults(func=cmd_bench)
    commands.add_parser("finish", help="print the table; exit 0 passed, 1 failed or incomplete, 3 no GPU").set_defaults(
        func=cmd_finish
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.invocation = list(sys.argv[1:] if argv is None else argv)
    try:
        args.config = load_config(args.config) if args.config else load_config()
        if args.packages is not None:
            args.config = _only_packages(args.config, args.packages)
    except ConfigError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except ConfigError as error:  # an argument the data file does not know (an arch variant)
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
