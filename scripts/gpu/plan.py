"""Which stages one command of the acceptance run runs: the registry (`stages` in scripts/data/gpu_acceptance.toml,
with the setup stages, the seconds each needs and the packages each tests), the stages picked with --stages, and,
with --resume, what the earlier commands' summary already settled."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scripts.gpu.data import AcceptanceData
from scripts.gpu.summary import SETTLED


@dataclass(frozen=True, kw_only=True)
class Stage:
    name: str
    setup: bool  # runs again in every command that runs a later stage (the server, the venv, the facts)
    main_setup: bool  # a setup stage of the main wheelhouse: comes along only before a stage that uses it
    own_wheelhouse: bool  # uses none of the main wheelhouse's setup stages (the build, the arch stages)
    seconds: int  # needed before the deadline for it to be started at all
    packages: tuple[str, ...]  # of the main wheelhouse, that it tests


def registry(data: AcceptanceData) -> tuple[Stage, ...]:
    return tuple(Stage(name=name, setup=name in data.setup_stages, main_setup=name in data.main_setup_stages,
                       own_wheelhouse=name in data.own_wheelhouse_stages, seconds=data.stage_seconds.get(name, 0),
                       packages=data.stage_packages.get(name, ())) for name in data.stages)


class SelectionError(Exception):
    """--stages names a stage the registry does not have; the message says which, and what was meant."""


def parse_selection(text: str, stages: Sequence[Stage]) -> tuple[str, ...]:
    """``"build,upstream"`` -> the names, in the registry's order; an unknown name is an error with a suggestion."""
    names, known = [name.strip() for name in text.split(",") if name.strip()], [stage.name for stage in stages]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SelectionError(f"--stages: no stage {name!r}{hint}; the stages are {', '.join(known)}")
    if not names:
        raise SelectionError(f"--stages names no stage; the stages are {', '.join(known)}")
    return tuple(name for name in known if name in names)


def plan(stages: Sequence[Stage], *, selected: Sequence[str] | None, results: Mapping[str, str],
         resume: bool) -> list[Stage]:
    """The stages to run, in order: those picked; else, resuming, every stage after setup without a settled result
    in ``results`` (stage -> the status an earlier command left); else all of them. The setup stages before the
    last of them come along; those of the main wheelhouse only before the last that uses it."""
    if selected:
        wanted = set(selected)
    elif resume:
        wanted = {stage.name for stage in stages if not stage.setup and results.get(stage.name) not in SETTLED}
    else:
        wanted = {stage.name for stage in stages}
    last = max((index for index, stage in enumerate(stages) if stage.name in wanted), default=-1)
    main = max((index for index, stage in enumerate(stages) if stage.name in wanted and not stage.own_wheelhouse),
               default=-1)
    return [stage for index, stage in enumerate(stages)
            if stage.name in wanted or (stage.setup and index <= (main if stage.main_setup else last))]
