"""Per-(translation unit, arch) compile times from ``nvcc --time FILE``: nvcc appends one CSV row per phase
(cicc and ptxas per arch, the host compile once). The farm-cost estimate and the compile scheduler read the sums
from the ledger; an object-cache hit runs no nvcc and adds no row."""

from __future__ import annotations

import csv
import fnmatch
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

from builder.core.ledger import compile_times
from builder.plan.estimate import seed_model
from builder.steps.programs.nvcc_plan import EVERY_ARCH

_ARCH = re.compile(r"(?:compute|sm)_(?P<number>\d+)(?P<variant>[af]?)")
HOST = "host"  # phases that run once per translation unit, whatever the archs (preprocessing, cudafe, g++)


def _arch(field: str) -> str:
    match = _ARCH.fullmatch(field.strip())
    if match is None:
        return HOST
    number = match["number"]
    return f"{number[:-1]}.{number[-1]}{match['variant']}"


def read_times(path: Path) -> list[dict[str, object]]:
    """[{"unit": "causal_conv1d_fwd.cu", "arch": "9.0", "seconds": 41.2}, ...], sorted; [] when nvcc wrote none."""
    if not path.is_file():
        return []
    totals: dict[tuple[str, str], float] = defaultdict(float)
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        rows = csv.reader(handle)
        for row in rows:
            if len(row) < 8 or row[0].strip() in ("", "source file name") or row[7].strip() != "ms":
                continue
            try:
                milliseconds = float(row[6])
            except ValueError:
                continue
            totals[(Path(row[0].strip()).name, _arch(row[4]))] += milliseconds
    return [{"unit": unit, "arch": arch, "seconds": round(ms / 1000, 3)} for (unit, arch), ms in sorted(totals.items())]


def unit_costs(records: Iterable[str]) -> dict[str, dict[str, float]]:
    """{unit: {arch: mean seconds, "host": ...}} over several builds' ledger ``compile_times`` (JSON as read_times
    returns it): what the core pool orders its waiters by (nvcc_plan.py)."""
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for text in records:
        for timing in compile_times(text, "a ledger row of this version"):
            samples[timing.unit][timing.arch].append(timing.seconds)
    return {
        unit: {arch: round(sum(values) / len(values), 3) for arch, values in by_arch.items()}
        for unit, by_arch in sorted(samples.items())
    }


def seed_costs(package: str, part_shares: Mapping[str, tuple[str, float]]) -> dict[str, dict[str, float]]:
    """The core pool's first guess at a package's costs, before the ledger has measured this version: the seed's
    per-arch figure of each unit (builder/data/compile-costs.toml, under its name or pattern, for every arch), and
    for each part of a split TU (``part_shares``: part -> (whole, share), from the recipe) its share of the
    whole's. Only the order matters: the pool starts the costliest first, so a first build's longest chains do
    not wait behind its shorter ones."""
    units = seed_model().units.get(package, ())
    costs = {unit.unit: {EVERY_ARCH: unit.default} for unit in units}
    for part, (whole, share) in sorted(part_shares.items()):
        seed = next((unit for unit in units if fnmatch.fnmatchcase(whole, unit.unit)), None)
        if seed is not None:
            costs[part] = {EVERY_ARCH: round(seed.default * share, 3)}
    return costs


# a step of the core pool's timeline (nvcc_plan.py) -> the compile stage it is: the front end (host preprocessing,
# cudafe++), then per arch the device preprocessing, cicc and ptxas, then the host part (fatbinary, the host compile)
_CHAIN_STAGES = {"gcc (preprocessing)": "preprocess", "cicc": "cicc", "ptxas": "ptxas"}
FRONT, HOST_STAGE = "front", "host"
STAGES = (FRONT, "preprocess", "cicc", "ptxas", HOST_STAGE)


def stage_of(part: str, step: str) -> str | None:
    """The stage a timeline row of ``part`` (front, chain, back) running ``step`` belongs to."""
    if part == "front":
        return FRONT
    if part == "back":
        return HOST_STAGE
    if part == "chain":
        return _CHAIN_STAGES.get(step, "preprocess" if "(preprocessing)" in step else None)
    return None


def stage_times(timeline: Path) -> list[dict[str, object]]:
    """[{"unit", "arch", "stage", "cpu", "wall"}] summed per (unit, arch, stage) over the steps the build compiled
    (a step the stage cache reused is left out: these are what compiling costs); arch "" for the once-per-unit
    front end and host part. CPU-seconds from each step's wait4, wall from its start and end."""
    if not timeline.is_file():
        return []
    totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for line in timeline.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or "step" not in row or row.get("result") == "hit":
            continue
        stage = stage_of(str(row.get("phase")), str(row["step"]))
        if stage is None:
            continue
        arch = "" if stage in (FRONT, HOST_STAGE) else str(row.get("arch", ""))
        total = totals[(str(row.get("unit")), arch, stage)]
        total[0] += float(row.get("cpu", 0.0))
        total[1] += float(row.get("end", 0.0)) - float(row.get("start", 0.0))
    return [{"unit": unit, "arch": arch, "stage": stage, "cpu": round(cpu, 3), "wall": round(wall, 3)}
            for (unit, arch, stage), (cpu, wall) in sorted(totals.items())]
