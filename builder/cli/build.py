"""Subcommands of the build stages: `wheelwright build` and `wheelwright status`. Console output lives here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from builder.cli.arguments import whole_number
from builder.core.errors import BuildFailed, NotBuildableHere

if TYPE_CHECKING:
    from builder.farm.build import Outcome
    from builder.plan.job import Job


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    build = commands.add_parser("build", help="build, repair and verify the wheels of a profile")
    add_plan_arguments(build)
    build.add_argument("--output", type=Path, default=Path("wheelhouse"), help="output folder (default: %(default)s)")
    build.add_argument("--retry-failed", action="store_true", help="rebuild jobs that failed with the same inputs")
    build.add_argument("--parallel", type=whole_number(1, 256), default=1, metavar="N",
                       help="jobs at once, 1-256; cores and memory are shared (default: %(default)s)")
    build.add_argument("--objcache", choices=("use", "verify", "off"), default="use",
                       help="reuse CUDA objects across Pythons (verify: compile anyway and prove them identical)")
    build.add_argument("--backend", choices=("local", "container"), default="local",
                       help="local: on this machine; container: each job inside its builder image (docker/)")
    build.add_argument("--base", default="bullseye",
                       help="container backend: the image base (builder/data/images.toml)")
    build.add_argument("--engine", choices=("docker", "podman"),
                       help="container backend: the engine (default: docker, else podman)")
    build.add_argument("--only", action="append", metavar="ID", default=[],
                       help="exactly these job identifiers (repeatable; how the container backend hands over a group)")
    build.add_argument("--preflight", nargs="?", const="here", choices=("here", "farm"),
                       help="check what each job needs, download nothing, build nothing; exit 4 when a job is not "
                       "ready. here (the default): the data files, the interpreter, the toolkit and its archs, "
                       "and the torch wheel on its index; farm: the data files and the torch wheel only (a "
                       "builder image brings its interpreters and toolkits)")
    build.set_defaults(func=cmd_build)

    merge = commands.add_parser("merge", help="merge build outputs (CI artifacts) into one wheelhouse and ledger")
    merge.add_argument("sources", nargs="+", type=Path, help="wheelhouses: each a build's --output folder")
    merge.add_argument("--output", type=Path, default=Path("wheelhouse"))
    merge.set_defaults(func=cmd_merge)

    status = commands.add_parser("status", help="print the build ledger")
    status.add_argument("--output", type=Path, default=Path("wheelhouse"))
    status.set_defaults(func=cmd_status)


def cmd_build(args: argparse.Namespace) -> int:
    from rich.live import Live

    from builder.cli.console import console
    from builder.cli.progress import LineReporter, LiveTable, interactive
    from builder.core.ledger import Status
    from builder.core.wheelhouse import Layout
    from builder.farm.build import (  # the build stage's imports are heavy; plan needs none
        Builder,
        BuildOptions,
        Progress,
    )
    from builder.farm.container import ContainerBackend, Invocation
    from builder.plan.expand import load_plan
    from builder.plan.facts import load_facts
    from builder.steps.torch_index import torch_index_template

    only = [identifier for value in args.only for identifier in value.split()]
    plan = load_plan(args.matrix, args.profile).select(args.select).only(only)
    torch_index = torch_index_template(plan.torch_index)
    if args.preflight:
        return _preflight(plan.jobs, torch_index, args.preflight)
    options = BuildOptions(retry_failed=args.retry_failed, parallel=args.parallel, objcache=args.objcache,
                           torch_index=torch_index)
    display: LiveTable | LineReporter
    if interactive(console.is_terminal):
        display = LiveTable(list(plan.jobs))
        shown: AbstractContextManager[object] = Live(display, console=console, refresh_per_second=2)
    else:  # a pipe, a file or CI: lines, since a live display shows nothing there until the end
        groups = os.environ.get("GITHUB_ACTIONS") == "true" and options.parallel == 1  # groups cannot interleave
        display = shown = LineReporter(_write_line, groups=groups)
    progress = Progress(on_phase=display.phase, on_line=display.line, on_done=display.done)
    layout = Layout(root=args.output.resolve())
    builder: Builder | ContainerBackend
    if args.backend == "container":
        from builder.farm.engine import find_engine

        invocation = Invocation(matrix=args.matrix.resolve(), profile=plan.profile)
        builder = ContainerBackend(find_engine(args.engine), layout, load_facts(), options, invocation,
                                   base=args.base, progress=progress)
    else:
        builder = Builder(layout, load_facts(), options, progress)
    with shown:
        outcomes = builder.run(plan.jobs)
    _summary(outcomes, args.output)
    failed = [o for o in outcomes if o.entry.status != Status.BUILT]
    if failed:
        raise BuildFailed(f"{len(failed)} of {len(outcomes)} jobs did not produce a verified wheel",
                          tip=f"logs are in {args.output / 'logs'}; `wheelwright build --retry-failed` retries them")
    return 0


def _write_line(text: str) -> None:
    """One progress line to stderr, unwrapped and at once (a log is read while it grows)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _preflight(jobs: tuple[Job, ...], torch_index: str, scope: str) -> int:
    from rich.markup import escape
    from rich.table import Table

    from builder.cli.console import out, print_table
    from builder.farm.build import count_reasons, preflight
    from builder.plan.facts import load_facts

    found = preflight(jobs, load_facts(), torch_index, scope=scope)
    table = Table(title=f"preflight ({scope}): {len(jobs)} jobs", title_justify="left")
    for column in ("job", "ready", "input hash"):
        table.add_column(column, overflow="fold")
    for readiness in found:
        ready = "yes" if readiness.problem is None else f"[red]no[/red]: {escape(readiness.problem)}"
        table.add_row(readiness.job.identifier, ready, readiness.input_hash[:16])
    print_table(table)
    counts = count_reasons(found)
    out.print(f"preflight: {len(found)} jobs: " + "; ".join(f"{n} {escape(reason)}" for reason, n in counts),
              highlight=False, soft_wrap=True)
    return 0 if all(r.problem is None for r in found) else NotBuildableHere.exit_code  # 4: something this machine lacks


def _summary(outcomes: list[Outcome], output: Path) -> None:
    from rich.table import Table

    from builder.cli.console import print_table
    from builder.core.ledger import Status

    table = Table(title="build summary", title_justify="left")
    for column in ("job", "result", "wheel", "size", "sha256", "time"):
        table.add_column(column, overflow="fold")
    markdown = ["| job | result | wheel | size | sha256 | time |", "|---|---|---|---|---|---|"]
    for outcome in outcomes:
        entry = outcome.entry
        result = "up to date" if outcome.skipped else entry.status
        detail = entry.wheel if entry.status == Status.BUILT else (entry.reason or "")
        size = f"{entry.wheel_size / 2**20:.1f} MiB" if entry.wheel_size else ""
        sha = (entry.wheel_sha256 or "")[:16]
        seconds = f"{entry.total_seconds:.0f}s" if entry.timings else ""
        style = "green" if entry.status == Status.BUILT else "red"
        table.add_row(entry.job_id, f"[{style}]{result}[/{style}]", detail, size, sha, seconds)
        markdown.append(f"| {entry.job_id} | {result} | {detail} | {size} | {sha} | {seconds} |")
    print_table(table)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a") as handle:
            handle.write("\n".join(["## wheelwright build", "", *markdown, ""]))


def cmd_merge(args: argparse.Namespace) -> int:
    from builder.cli.console import console
    from builder.core.wheelhouse import Layout
    from builder.farm.merge import merge_outputs

    merged = merge_outputs(args.sources, Layout(root=args.output))
    console.print(f"merged {merged.sources} wheelhouses into {args.output}: "
                  f"{merged.jobs} ledger rows, {merged.wheels} wheels")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rich.table import Table

    from builder.cli.console import console, print_table
    from builder.core.ledger import Ledger, Status
    from builder.core.wheelhouse import Layout

    path = Layout(root=args.output).ledger
    if not path.is_file():
        console.print(f"no ledger at {path} yet; run `wheelwright build` first")
        return 1
    with Ledger(path) as ledger:
        entries = ledger.entries()
    table = Table(title=f"{path}: {len(entries)} jobs", title_justify="left")
    for column in ("job", "status", "phase", "time", "wheel / reason"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        detail = entry.wheel if entry.status == Status.BUILT else (entry.reason or "")
        timing = " ".join(f"{phase} {seconds:.0f}s" for phase, seconds in entry.timings.items())
        table.add_row(entry.job_id, entry.status, entry.phase or "", timing, detail)
    print_table(table)
    return 0
