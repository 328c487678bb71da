"""Split one CUDA translation unit by its explicit template instantiations into several, generated from the
source itself: each part is the file with all but its share of the ``template void f<...>(...);`` lines, so every
kernel is compiled in exactly one part, from the same code. A TU whose one arch is a build's critical path
(causal-conv1d's backward, 330-400 s for sm_90 alone) becomes parts the core pool runs side by side."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Self

from builder.core.errors import RecipeError

# an explicit instantiation definition: `template` not followed by a parameter list; `extern template` is a
# declaration and stays in every part
_INSTANTIATION = re.compile(r"^template\s+(?!<)[^;{}]*\)\s*;[ \t]*$", re.MULTILINE)


def instantiations(text: str) -> list[re.Match[str]]:
    return list(_INSTANTIATION.finditer(text))


def partition(costs: Sequence[float], parts: int) -> list[list[int]]:
    """The indices of ``costs`` in ``parts`` groups of about equal sum: heaviest first onto the lightest group so far
    (LPT), ties by position, so equal costs give index i to group i mod parts. Each group keeps source order."""
    groups: list[list[int]] = [[] for _ in range(parts)]
    loads = [0.0] * parts
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        lightest = min(range(parts), key=lambda k: (loads[k], k))
        groups[lightest].append(index)
        loads[lightest] += costs[index]
    return [sorted(group) for group in groups]


Cost = Callable[[str], float]


class SplitChange(str):
    """split_tu's change line for the job log, which also says what share of the whole TU's estimated cost each
    part holds: the core pool's first guess at the parts' costs, before the ledger has measured them."""

    whole: str  # the TU split, by file name: causal_conv1d_bwd.cu
    shares: Mapping[str, float]  # each part's file name -> its share of the whole's cost, summing to 1

    def __new__(cls, text: str, *, whole: str, shares: Mapping[str, float]) -> Self:
        change = super().__new__(cls, text)
        change.whole = whole
        change.shares = MappingProxyType(dict(shares))
        return change


def _unit_cost(line: str) -> float:
    return 1.0


def split_text(text: str, parts: int, where: str, cost: Cost = _unit_cost) -> list[str]:
    """The texts of ``parts`` TUs, the instantiations spread by ``cost`` (an estimate of one instantiation's
    device-compile seconds, from its line) so the parts cost about the same. All instantiations must follow the
    code they need."""
    return _split(text, parts, where, cost)[0]


def _split(text: str, parts: int, where: str, cost: Cost) -> tuple[list[str], list[float]]:
    """split_text's parts and each one's estimated cost."""
    found = instantiations(text)
    if len(found) < parts:
        raise RecipeError(f"{where}: {len(found)} explicit instantiations, fewer than the {parts} parts asked for")
    body_end = found[0].start()
    if any(
        line.strip() and not _INSTANTIATION.fullmatch(line.strip()) and not line.strip().startswith("//")
        for line in text[body_end:].splitlines()
    ):
        raise RecipeError(f"{where}: code between the explicit instantiations; the split needs them at the end")
    body = text[:body_end]
    costs = [cost(match[0]) for match in found]
    groups = partition(costs, parts)
    texts = [f"{body}// wheelwright: part {k + 1} of {parts} of the explicit instantiations\n"
             + "\n".join(found[i][0] for i in group) + "\n"
             for k, group in enumerate(groups)]
    return texts, [sum(costs[i] for i in group) for group in groups]


def split_tu(root: Path, relative: str, parts: int, cost: Cost = _unit_cost) -> list[str]:
    """Write ``<stem>_partK.cu`` beside ``relative`` (instantiations spread by ``cost``, see split_text) and put
    them in setup.py's sources in its place; returns the change (a SplitChange: the parts' shares of the cost go
    with it), [] when setup.py does not list it (the patch then fails: upstream moved on)."""
    setup = root / "setup.py"
    text = setup.read_text()
    quoted = re.search(rf"""(["']){re.escape(relative)}\1,?""", text)
    source = root / relative
    if quoted is None or not source.is_file():
        return []
    where = f"{relative}"
    names = []
    texts, loads = _split(source.read_text(), parts, where, cost)
    estimates = ", ".join(f"{load:g}" for load in loads)
    times = source.stat()  # the whole TU's
    for index, part in enumerate(texts, start=1):
        name = f"{Path(relative).with_suffix('').as_posix()}_part{index}.cu"
        (root / name).write_text(part)
        # the whole TU's times, not the moment of the split: nvcc writes a source's mtime into the cubins' line
        # tables, so parts stamped "now" made every build of the same job a different wheel
        os.utime(root / name, ns=(times.st_atime_ns, times.st_mtime_ns))
        names.append(name)
    quote = quoted[1]
    replacement = ", ".join(f"{quote}{name}{quote}" for name in names) + ("," if quoted[0].endswith(",") else "")
    setup.write_text(text[: quoted.start()] + replacement + text[quoted.end():])
    change = (f"{relative}: split into {parts} TUs by its explicit instantiations ({', '.join(names)}; "
              f"estimated cost per part {estimates})")
    total = sum(loads)
    shares = {Path(name).name: load / total for name, load in zip(names, loads, strict=True)}
    return [SplitChange(change, whole=Path(relative).name, shares=shares)]
