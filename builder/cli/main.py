"""The `wheelwright` command: parses arguments and calls one stage per subcommand. Owns all console output.

Building the parsers imports only the standard library: `--version` and `--help` must answer at once, so each
command imports its stage, rich and the data files' parsers when it runs (docs/performance.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from builder import __version__
from builder.cli.arguments import Parser, UsageError, whole_number
from builder.core.errors import FileSystemError, WheelwrightError, one_line, shown_name
from builder.core.wheelhouse import Layout

if TYPE_CHECKING:
    from builder.plan.expand import Plan


def _add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--matrix", type=Path, default=Path("matrix.yaml"), help="the matrix file (default: %(default)s)"
    )
    parser.add_argument("--profile", help="profile to expand (default: the matrix's default_profile)")
    parser.add_argument(
        "--select", metavar="PATTERN", help="fnmatch pattern over job identifiers, e.g. '*pt214*cp311*'"
    )


def _plan(args: argparse.Namespace) -> Plan:
    from builder.plan.expand import load_plan

    return load_plan(args.matrix, args.profile).select(args.select)


def cmd_plan(args: argparse.Namespace) -> int:
    import json

    plan = _plan(args)
    if args.estimate:
        return _estimate(plan, args)
    if args.format == "shards":
        from builder.plan.estimate import ledger_model, seed_model
        from builder.plan.shards import shard

        model = ledger_model(args.ledger, seed_model())
        shards = shard(plan.jobs, model, args.shard_size)
        sys.stdout.write(json.dumps(shards, indent=None if args.compact else 2) + "\n")
        return 0
    if args.format == "json":
        # Plain text, never highlighted: this is read by fromJSON() and `jq`, also when colour is forced.
        sys.stdout.write(json.dumps(plan.as_github_matrix(), indent=None if args.compact else 2) + "\n")
        return 0
    _print_plan(plan, explain=args.explain)
    return 0


def _print_plan(plan: Plan, *, explain: bool) -> None:
    """The jobs as a table; with ``explain`` also the arch lists chosen or corrected, and the dropped combinations."""
    from rich.markup import escape
    from rich.table import Table

    from builder.cli.console import out, print_table
    from builder.plan.archs import split

    out.print(f"profile {plan.profile}: {len(plan.jobs)} jobs")
    table = Table()
    for column in ("job", "torch", "toolkit", "python", "abi", "sass", "ptx", "manylinux"):
        table.add_column(column, no_wrap=True)
    for job in plan.jobs:
        abi = "cxx11" if job.cxx11_abi else "pre-cxx11"
        toolkit = f"{job.accelerator.kind} {job.accelerator.version}"
        sass, ptx = split(job.archs)
        table.add_row(
            job.identifier, job.torch, toolkit, job.python, abi, " ".join(sass), " ".join(ptx) or "-", job.manylinux
        )
    print_table(table)
    if explain and plan.arch_notes:
        out.print(f"arch lists chosen or corrected: {len(plan.arch_notes)} (package_archs; builder/data/archs.toml)")
        notes = Table()
        notes.add_column("job", no_wrap=True)
        notes.add_column("archs", no_wrap=True)
        for note in plan.arch_notes:
            notes.add_row(note.identifier, escape(note.describe()))
        print_table(notes)
    if explain and not plan.dropped:
        out.print("dropped: none; every combination of the profile's axes is buildable and selected")
    elif explain:
        out.print(f"dropped: {len(plan.dropped)}")
        dropped = Table()
        dropped.add_column("combination", no_wrap=True)
        dropped.add_column("reason", no_wrap=True)
        for drop in plan.dropped:
            dropped.add_row(drop.identifier, drop.reason)
        print_table(dropped)
    elif plan.dropped:
        out.print(f"[dim]{len(plan.dropped)} combinations dropped; --explain lists them with the reason[/dim]")


if TYPE_CHECKING:  # argparse's action class is generic only to the type checker
    AddCommands = Callable[
        [argparse._SubParsersAction[argparse.ArgumentParser], Callable[[argparse.ArgumentParser], None]], None
    ]


def _estimate(plan: Plan, args: argparse.Namespace) -> int:
    from rich.table import Table

    from builder.cli.console import out, print_table
    from builder.plan.estimate import by_platform, ledger_model, reuse_facts, seed_model, summary
    from builder.plan.estimate import estimate as estimate_plan

    model, reuse = ledger_model(args.ledger, seed_model()), reuse_facts()
    ours, upstream = estimate_plan(plan.jobs, model, runners=args.runners, cores=args.cores, reuse=reuse)
    without_reuse, _ = estimate_plan(plan.jobs, model, runners=args.runners, cores=args.cores)
    out.print(f"profile {plan.profile}: {len(plan.jobs)} jobs in {len(ours.items)} (package version, torch, toolkit) "
              f"groups, on {args.runners} runners of {args.cores} cores")
    table = Table()
    for column in ("method", "CPU-hours", f"wall on {args.runners}x{args.cores}", "longest runner item"):
        table.add_column(column)
    for result in (ours, upstream):
        hours = (f"{result.cpu_hours:.1f}", f"{result.wall_hours:.2f} h", f"{result.longest_item_hours:.2f} h")
        table.add_row(result.method, *hours)
    print_table(table)
    for line in summary(ours, upstream, without_reuse, model):
        out.print(line)
    platforms = by_platform(plan.jobs, model, runners=args.runners, cores=args.cores, reuse=reuse)
    for platform, result in platforms.items():
        jobs = sum(1 for job in plan.jobs if job.platform == platform)
        out.print(f"{platform}: {jobs} jobs in {len(result.items)} groups, {result.cpu_hours:.1f} CPU-hours, "
                  f"{result.wall_hours:.2f} h on {args.runners} {platform} runners of {args.cores} cores")
    _day0_note(plan, args.ledger)
    return 0


def _day0_note(plan: Plan, ledger: Path) -> None:
    """Labels a day-0 wheel serves are counted as not compiled: their jobs are in the estimate (issue 30)."""
    from builder.cli.console import out
    from builder.core.ledger import holds_builds, read_entries
    from builder.steps.day0 import labels

    if not (ledger.exists() and holds_builds(ledger)):  # no build rows (a ledger of compile costs alone): no day-0
        return
    served = sorted(set(labels(read_entries(ledger))) & {job.label for job in plan.jobs})
    if served:
        out.print(f"day-0: {', '.join(served)} served by carried wheels, counted as not compiled (their jobs are "
                  "in the estimate above)")


# GitHub's limit for the rows of one matrix: builder.plan.shards.GITHUB_MATRIX_LIMIT, which the parser cannot import
# (it pulls in the planner; a unit test holds the two equal).
GITHUB_MATRIX_ROWS = 256


def build_parser() -> argparse.ArgumentParser:
    description = "Build, repair, verify and index PyTorch CUDA/ROCm extension wheels from one matrix file."
    parser: argparse.ArgumentParser = Parser(prog="wheelwright", description=description)
    parser.add_argument("--version", action="version", version=f"wheelwright {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    plan = commands.add_parser("plan", help="expand the matrix into build jobs")
    _add_plan_arguments(plan)
    plan.add_argument(
        "--format", choices=("table", "json", "shards"), default="table",
        help="json: a GitHub Actions strategy.matrix object; shards: one row per group, in matrices of <= 256 rows"
    )
    plan.add_argument("--shard-size", type=whole_number(1, GITHUB_MATRIX_ROWS), default=GITHUB_MATRIX_ROWS, metavar="N",
                      help="shards: rows per matrix (1-256; default: %(default)s)")
    plan.add_argument("--estimate", action="store_true", help="CPU-hours and wall time, ours beside upstream's method")
    plan.add_argument("--runners", type=whole_number(1, 10_000), default=20, metavar="N",
                      help="estimate: runners (1-10,000; default: %(default)s)")
    plan.add_argument("--cores", type=whole_number(1, 1024), default=4, metavar="C",
                      help="estimate: cores per runner (1-1,024; default: %(default)s)")
    plan.add_argument("--ledger", type=Path, default=Layout(root=Path("wheelhouse")).ledger,
                      help="estimate/shards: measured compile costs (default: %(default)s)")
    plan.add_argument("--compact", action="store_true", help="one-line JSON (for $GITHUB_OUTPUT)")
    plan.add_argument("--explain", action="store_true", help="also list dropped combinations and why")
    plan.set_defaults(func=cmd_plan)

    for register in _stage_commands():
        register(commands, _add_plan_arguments)
    return parser


def _stage_commands() -> tuple[AddCommands, ...]:
    """Stages add their own subcommands; each module's add_commands(commands, add_plan_arguments)."""
    from builder.cli import build, day0, doctor, facts, images, index, provenance

    return (
        build.add_commands,
        day0.add_commands,
        index.add_commands,
        doctor.add_commands,
        facts.add_commands,
        images.add_commands,
        provenance.add_commands,
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        _check_utf8(words, parser.prog)
        args = parser.parse_args(words)  # --version and --help exit here, before any import a command needs
    except UsageError as error:
        return _report(error)
    import logging

    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        try:
            code: int = args.func(args)
        except OSError as error:  # a full disk, a read-only or missing folder: the user's to fix, said in one line
            if args.debug:
                _print_traceback()
            raise FileSystemError.from_os(error) from error
        return code
    except WheelwrightError as error:
        if args.debug and not isinstance(error, FileSystemError):
            _print_traceback()
        return _report(error)
    except KeyboardInterrupt:
        from builder.cli.console import console

        console.print("[bold red]ERROR[/bold red] interrupted")
        return 130


def _check_utf8(words: Sequence[str], prog: str) -> None:
    """Refuse a word of the command line that is not UTF-8 (sys.argv holds such a byte as a lone surrogate): every
    path and URL given ends up in the ledger, the index state or a page, which hold text."""
    for before, word in zip(["", *words], words, strict=False):
        shown = shown_name(word)
        if shown != word:
            named = f"{before} " if before.startswith("-") else ""
            tip = f"`{prog} --help` lists the options and what each accepts"
            raise UsageError(f"{named}{shown}: not UTF-8 text", tip=tip)


def _print_traceback() -> None:
    from builder.cli.console import console

    console.print_exception()


def _report(error: WheelwrightError) -> int:
    """One ERROR line per line of the message, then the TIP; the exit code is the error's."""
    from rich.markup import escape

    from builder.cli.console import console

    # Messages quote selectors and TOML tables ("[archs.cuda]"): escape them, or rich reads them as markup.
    for line in str(error).splitlines():  # one_line: no escape sequence of a name in the message reaches the terminal
        console.print(f"[bold red]ERROR[/bold red] {escape(one_line(line))}", highlight=False, soft_wrap=True)
    if error.tip:
        console.print(f"[yellow]TIP[/yellow] {escape(error.tip)}", highlight=False, soft_wrap=True)
    return error.exit_code


def entry() -> int:
    """The process's entry (the `wheelwright` script, ``python -m builder.cli.main``): main, then every object the
    process made moved out of the garbage collector's sight (``gc.freeze``), so that the interpreter's collection
    at exit does not walk them all for the operating system to free a moment later: 0.03-0.04 CPU-s of `plan`'s
    0.26, docs/performance.md. By then every file is closed and every ledger committed; atexit handlers still run.
    Tests call main in their own process, which goes on."""
    import gc

    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(entry())
