"""`wheelwright facts check` (torch.toml against the registry) and `wheelwright toolkits` (where each toolkit of a
profile comes from, and what it lacks here). Console output lives here."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from builder.plan.accelerator import Accelerator
    from builder.plan.arch import Arch
    from builder.plan.releases import TorchFacts
    from builder.steps.torch_registry import Provenance

BEHIND_EXIT = 12  # distinct from every error code: a scheduled job can tell "facts are behind" from "check broke"


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    facts = commands.add_parser("facts", help="the torch release facts (builder/data/torch.toml)")
    actions = facts.add_subparsers(dest="facts_command", required=True, metavar="ACTION")
    check = actions.add_parser(
        "check", help=f"compare the facts with the registry's torch releases (exit {BEHIND_EXIT} when behind)"
    )
    check.set_defaults(func=cmd_facts_check)
    add_symbols_commands(actions)

    toolkits = commands.add_parser(
        "toolkits", help="where each CUDA toolkit of a profile comes from, and what it lacks here"
    )
    add_plan_arguments(toolkits)
    toolkits.set_defaults(func=cmd_toolkits)


def load_facts() -> TorchFacts:
    """The torch facts, read when a command runs: building the parsers reads no data file."""
    from builder.plan.facts import load_facts as read_facts

    return read_facts()


def cmd_facts_check(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from builder.cli.console import console, out
    from builder.core.errors import one_line
    from builder.steps.torch_registry import survey

    findings, provenance = survey(load_facts())
    if not findings:
        out.print("torch facts are current: every torch release on the registry is in builder/data/torch.toml")
    for finding in findings:
        said = escape(one_line(finding.problem))  # names and versions as the registry lists them
        console.print(f"[bold yellow]BEHIND[/bold yellow] {said}", highlight=False, soft_wrap=True)
    stanzas = [finding.stanza for finding in findings if finding.stanza]
    if stanzas:
        out.print("# paste into builder/data/torch.toml (before [archs.cuda]), review the marked fields:\n")
        for text in stanzas:
            out.print(escape(text), highlight=False)
    _print_provenance(provenance)
    return BEHIND_EXIT if findings else 0


def _print_provenance(provenance: Provenance) -> None:
    """The closing summary: a reader should not mistake a cited variant for a checked one."""
    from rich.markup import escape

    from builder.cli.console import out

    verified = ", ".join(provenance.verified) or "nothing"
    out.print(
        "verified against the registry (patches, Pythons, the plain wheel's CUDA from Requires-Dist): "
        f"{escape(verified)}",
        highlight=False,
        soft_wrap=True,
    )
    out.print("resting on citations (builder/data/torch.toml sources):", highlight=False)
    for variants, sources in provenance.cited:
        out.print(f"  {escape(variants)}: {escape('; '.join(sources))}", highlight=False, soft_wrap=True)


def cmd_toolkits(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from builder.cli.console import out
    from builder.plan.expand import load_plan
    from builder.steps.toolchain import preflight

    plan = load_plan(args.matrix, args.profile).select(args.select)
    archs: dict[Accelerator, set[Arch]] = {}
    for job in plan.jobs:
        archs.setdefault(job.accelerator, set()).update(job.archs)
    for accelerator in sorted(archs):  # each source is asked for every arch its accelerator's jobs name
        for line in preflight(accelerator, archs=sorted(archs[accelerator], key=lambda a: (a.sort_key, str(a)))):
            out.print(f"{accelerator}: {escape(line)}")
    return 0


# -- the torch symbol index (issue 30) ------------------------------------------------------------------------------


def add_symbols_commands(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    symbols = actions.add_parser(
        "symbols", help="build or refresh the torch symbol index: what torch's libraries export, per release"
    )
    symbols.add_argument("versions", nargs="*", metavar="VERSION",
                         help="torch versions (default: the newest patch of each minor since --since)")
    symbols.add_argument("--since", default="2.0", help="the oldest minor indexed by default (default: 2.0)")
    symbols.add_argument("--platform", default="x86_64", choices=["x86_64", "aarch64"])
    symbols.add_argument("--accelerator", metavar="NAME",
                         help="a variant of PyTorch's index (or $WHEELWRIGHT_TORCH_INDEX), e.g. cu126; "
                         "default: the registry's own wheels")
    symbols.add_argument("--index-dir", type=Path, help="where the index lives (default: the cache's)")
    symbols.add_argument("--json", action="store_true", help="print one JSON document")
    symbols.set_defaults(func=cmd_facts_symbols)

    windows = actions.add_parser(
        "windows", help="recompute each built wheel's ABI window in a ledger against the symbol index"
    )
    windows.add_argument("--output", type=Path, default=Path("wheelhouse"), help="the build output (its ledger)")
    windows.add_argument("--index-dir", type=Path, help="where the index lives (default: the cache's)")
    windows.set_defaults(func=cmd_facts_windows)


def cmd_facts_symbols(args: argparse.Namespace) -> int:
    import json

    from rich.markup import escape

    from builder.cli.console import out
    from builder.steps.torch_symbols import refresh, summary, torch_page

    page = torch_page(args.accelerator)
    rows = [summary(r) for r in refresh(args.versions or None, page=page, platform=args.platform,
                                        since=args.since, directory=args.index_dir)]
    if args.json:
        out.print_json(json.dumps(rows))
        return 0
    for row in rows:
        share = row["index_bytes"] / row["wheel_bytes"] if row["wheel_bytes"] else 0
        read = (f"read {row['read_bytes'] / 1e6:.1f} MB of the {row['wheel_bytes'] / 1e6:.1f} MB wheel in "
                f"{row['read_requests']} reads" if row["read_bytes"] else "nothing read (its entry is of this wheel)")
        out.print(
            f"torch {row['torch']} {row['variant']} {row['platform']}: {row['symbols']} symbols, "
            f"{'cxx11' if row['cxx11_abi'] else 'pre-cxx11'} ABI; {escape(row['outcome'])}; {read}; "
            f"entry {row['index_bytes'] / 1e3:.0f} kB ({share:.2%} of the wheel)",
            highlight=False, soft_wrap=True,
        )
    return 0


def cmd_facts_windows(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from builder.cli.console import out
    from builder.steps.abi import rewindow

    for job_id, text in rewindow(args.output, directory=args.index_dir):
        out.print(f"{escape(job_id)}: {escape(text)}", highlight=False, soft_wrap=True)
    return 0
