"""`wheelwright day0`: publish, for each planned label no build has reached, the newest built wheel whose ABI window
holds its torch (docs/abi.md, "Day-0 wheels"); `wheelwright index` then serves it. Parses and prints only."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from builder.plan.job import Job


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    day0 = commands.add_parser(
        "day0", help="carry built wheels to planned torch minors their proven ABI window holds (day-0 wheels)"
    )
    add_plan_arguments(day0)
    day0.add_argument("--output", type=Path, default=Path("wheelhouse"),
                      help="the build output: its dist/ and ledger (default: %(default)s)")
    day0.add_argument("--index-dir", type=Path, help="the torch symbol index (default: the cache's)")
    day0.set_defaults(func=cmd_day0)


def cmd_day0(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from builder.cli.console import out
    from builder.core.errors import one_line
    from builder.core.wheelhouse import Layout
    from builder.farm.day0 import PUBLISHED, REFUSED, run_day0
    from builder.plan.expand import load_plan
    from builder.plan.facts import load_facts
    from builder.steps.environment import runtime_env
    from builder.steps.torch_index import torch_index_template
    from builder.steps.verify import VerifyReport, verify_wheel

    plan = load_plan(args.matrix, args.profile).select(args.select)
    facts, torch_index = load_facts(), torch_index_template(plan.torch_index)

    def verifier(wheel: Path, job: Job) -> VerifyReport:
        return verify_wheel(wheel, job, runtime=runtime_env(job, facts, torch_index))

    outcomes = run_day0(plan.jobs, Layout(root=args.output.resolve()), verifier, index_dir=args.index_dir)
    for outcome in outcomes:
        mark = {PUBLISHED: "[green]day-0[/green]", REFUSED: "[yellow]none[/yellow]"}.get(outcome.state, outcome.state)
        said = escape(one_line(outcome.text))  # may quote what a wheel's import printed
        out.print(f"{mark} {escape(outcome.job.identifier)}: {said}", highlight=False, soft_wrap=True)
    published = sum(o.state == PUBLISHED for o in outcomes)
    refused = sum(o.state == REFUSED for o in outcomes)
    out.print(f"day-0: {published} published, {refused} without a wheel whose window holds their torch "
              f"(the ledger says why; `wheelwright index` shows both)", highlight=False)
    return 0
