"""The ``doctor`` subcommand: read an environment, print the verdicts and the fix (or explain a pasted error)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from builder.doctor.arguments import add_arguments


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    add_plan_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="say why causal-conv1d / mamba-ssm do not work in a Python environment, and print the fix",
        description="Read a Python environment (torch, GPU, driver, glibc, libstdc++, the installed extension "
        "packages) and say per package what is wrong in one sentence, with the install line that fixes it.",
    )
    add_arguments(doctor)
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from builder.doctor.main import run

    text, code = run(args)
    # Plain text, never rich markup: the commands it prints are meant to be copied exactly.
    sys.stdout.write(text)
    return code
