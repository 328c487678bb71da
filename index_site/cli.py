"""Subcommands of the index stages: index, serve, publish. (Filled in by the index issue.)"""

from __future__ import annotations


def add_commands(commands, add_plan_arguments) -> None:
    pass
