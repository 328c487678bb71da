"""Which stages one command of the acceptance run runs: the registry (scripts/data/gpu_acceptance.toml), the
stages picked with `--stages`, and, with `--resume`, what the earlier commands' summary already settled."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from scripts.acceptance.config import Stage
from scripts.acceptance.summary import FAILED, PASSED, REUSED

SETTLED = (PASSED, FAILED, REUSED)  # a result --resume keeps; skipped, pending and running stages are tried again


class SelectionError(Exception):
    """`--stages` names a stage the registry does not have; the message says which, and what was meant."""


def parse_selection(text: str, registry: Sequence[Stage]) -> tuple[str, ...]:
    """``"build,upstream"`` -> the names, in the registry's order; an unknown name is an error with a suggestion."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = [stage.name for stage in registry]
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SelectionError(f"--stages: no stage {name!r}{hint}; the stages are {', '.join(known)}")
    if not names:
        raise SelectionError(f"--stages names no stage; the stages are {', '.join(known)}")
    return tuple(name for name in known if name in names)


def targets(
    registry: Sequence[Stage], *, selected: Sequence[str] | None, results: Mapping[str, str], resume: bool
) -> set[str]:
    """The stages this command is for: those picked; else, resuming, every stage after setup without a settled
    result in ``results`` (stage -> the status an earlier command left); else all of them."""
    if selected:
        return set(selected)
    if resume:
        return {stage.name for stage in registry if not stage.setup and results.get(stage.name) not in SETTLED}
    return {stage.name for stage in registry}


def plan(
    registry: Sequence[Stage], *, selected: Sequence[str] | None, results: Mapping[str, str], resume: bool
) -> list[Stage]:
    """The stages to run, in order: the targets, and every setup stage that comes before one of them."""
    wanted = targets(registry, selected=selected, results=results, resume=resume)
    last = max((index for index, stage in enumerate(registry) if stage.name in wanted), default=-1)
    return [stage for index, stage in enumerate(registry) if stage.name in wanted or (stage.setup and index <= last)]


def plan_lines(stages: Sequence[Stage]) -> list[str]:
    """What the shell reads, one stage a line: ``name setup seconds`` (setup is 1 or 0)."""
    return [f"{stage.name} {int(stage.setup)} {stage.seconds}" for stage in stages]
