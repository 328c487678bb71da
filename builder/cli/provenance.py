"""The ``provenance`` subcommand: print how a wheel was made and check the record against the wheel's contents."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from builder.core.errors import WheelError, WheelwrightError, one_line


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    parser = commands.add_parser("provenance", help="print a wheel's provenance and check it against the wheel")
    parser.add_argument("wheel", type=Path, help="a wheel built by wheelwright (or its variant twin)")
    parser.add_argument("--json", action="store_true", help="print the stored record as JSON")
    parser.set_defaults(func=cmd_provenance)

    upstream = commands.add_parser("upstream", help="list packages whose upstream has a newer release than we pin")
    upstream.add_argument(
        "--matrix", type=Path, default=Path("matrix.yaml"), help="the matrix file (default: %(default)s)"
    )
    upstream.add_argument(
        "--index-url", help="the registry's simple index (default: WHEELWRIGHT_INDEX_URL or the registry)"
    )
    upstream.set_defaults(func=cmd_upstream)


def cmd_upstream(args: argparse.Namespace) -> int:
    from rich.table import Table

    from builder.cli.console import print_table
    from builder.plan.matrix import load_matrix
    from builder.steps.releases import check_upstream

    statuses = check_upstream(load_matrix(args.matrix).packages, index=args.index_url)
    table = Table()
    for column in ("package", "ours", "upstream", "status"):
        table.add_column(column, no_wrap=True)
    for s in statuses:
        table.add_row(
            s.package, s.ours, s.upstream or "-", "[red]behind[/red]" if s.behind else "[green]current[/green]"
        )
    print_table(table)
    behind = [s for s in statuses if s.behind]
    if behind:
        names = ", ".join(f"{s.package} {s.upstream}" for s in behind)
        raise WheelwrightError(
            f"upstream released {names}, newer than matrix.yaml pins",
            tip="pin the new version (sdist sha256) in matrix.yaml and build it; until then the "
            "landing page's commands stay pinned to the versions we built",
        )
    return 0


def cmd_provenance(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from builder.cli.console import console, out, print_table
    from builder.steps import provenance
    from builder.steps.elf import wheel_elf_facts
    from builder.steps.wheelzip import read_members

    if not args.wheel.is_file():
        raise WheelError(f"{args.wheel}: no such wheel")
    members = read_members(args.wheel)
    record = provenance.read(members, args.wheel.name)
    problems = provenance.disagreements(members, args.wheel.name, wheel_elf_facts(args.wheel))
    if args.json:
        sys.stdout.write(provenance.encode(record.record).decode())
    else:
        table = Table(title=args.wheel.name, title_justify="left", show_header=False)
        table.add_column("field", style="bold", no_wrap=True)
        table.add_column("value")
        for field, value in provenance.describe(record):
            table.add_row(field, escape(one_line(value)))  # a wheel from anywhere: its text, one line each
        print_table(table)
    if problems:
        for problem in problems:
            console.print(f"[bold red]MISMATCH[/bold red] {escape(one_line(problem))}", highlight=False, soft_wrap=True)
        raise WheelError(
            f"{args.wheel.name}: provenance disagrees with the wheel's contents ({len(problems)})",
            tip="the wheel was changed after it was built; rebuild it",
        )
    out.print(
        f"[green]OK[/green] the record agrees with the wheel: {len(record.files)} payload files, metadata and GPU archs"
    )
    return 0
