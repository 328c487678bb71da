"""Subcommands of the build stages: build, status. (Filled in by the build issue.)"""

from __future__ import annotations


def add_commands(commands, add_plan_arguments) -> None:
    pass
