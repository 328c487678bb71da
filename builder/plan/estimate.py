"""What a plan costs to build: CPU-hours and wall time on N runners of C cores, for wheelwright's method (compile
the CUDA translation units once per (package version, torch, toolkit), link per Python) beside upstream's (a full
rebuild per Python with `nvcc --threads 4`), from per-(translation unit, arch) compile costs.

Costs come from the ledger's per-job `compile_times` where builds recorded them (`nvcc --time`: seconds per
unit and arch), else from the seed figures in
builder/data/compile-costs.toml; a (unit, arch) never measured takes the mean of that unit's measured archs, and
the estimate says how many costs it extrapolated that way.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from builder.core.data import load_data
from builder.core.errors import ConfigError
from builder.core.ledger import read_compile_times
from builder.core.resources import COMPILE_COSTS
from builder.plan.facts import DEFAULT_PLATFORM
from builder.plan.job import Job

UPSTREAM_NVCC_THREADS = 4
HOST_PHASES = "host"  # the arch nvcc --time's once-per-unit phases are recorded under
SEED = "builder/data/compile-costs.toml"


@dataclass(frozen=True, kw_only=True)
class UnitCost:
    """One translation unit (or ``count`` alike) of a package: CPU-seconds per arch, measured ones by arch."""

    package: str
    unit: str
    count: int
    default: float  # for an arch not measured
    by_arch: Mapping[str, float] = field(default_factory=dict)
    host: float = 0.0  # once per unit whatever the archs (preprocessing, host compile)


@dataclass(frozen=True, kw_only=True)
class CostModel:
    units: Mapping[str, tuple[UnitCost, ...]]  # by package
    per_python: Mapping[str, float]
    source: str

    def cuda_costs(self, job: Job) -> tuple[list[tuple[int, list[float]]], int, int]:
        """[(count, [seconds per arch of the job])] and how many of those (unit, arch) costs were extrapolated."""
        units = self.units.get(job.package)
        if not units:
            raise ConfigError(f"no compile costs for {job.package}: neither in the ledger nor in {SEED}")
        costs, extrapolated, total = [], 0, 0
        for unit in units:
            row = []
            for arch in job.archs:
                measured = unit.by_arch.get(arch.sass if arch.has_sass else str(arch))
                row.append(measured if measured is not None else unit.default)
                extrapolated += measured is None
                total += 1
            costs.append((unit.count, [unit.host, *row] if unit.host else row))
        return costs, extrapolated, total


class SeedUnit(BaseModel):
    """One ``[[unit]]`` of compile-costs.toml: a translation unit (or ``count`` alike), CPU-seconds for one arch."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    package: str
    unit: str
    count: PositiveInt = 1
    seconds: PositiveFloat


class SeedFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    unit: tuple[SeedUnit, ...] = Field(min_length=1)
    per_python: dict[str, PositiveFloat]


def seed_model() -> CostModel:
    seed = load_data(COMPILE_COSTS, SeedFile, what="the seed compile costs")
    units: dict[str, list[UnitCost]] = defaultdict(list)
    for entry in seed.unit:
        units[entry.package].append(
            UnitCost(package=entry.package, unit=entry.unit, count=entry.count, default=entry.seconds)
        )
    return CostModel(
        units={k: tuple(v) for k, v in units.items()},
        per_python=seed.per_python,
        source=f"seed figures in {SEED} (every arch extrapolated from one per-arch figure)",
    )


def ledger_model(ledger: Path, seed: CostModel) -> CostModel:
    """Measured costs from the ledger's ``compile_times`` (per job: [{unit, arch, seconds}] from ``nvcc --time``;
    arch "host" is the part that runs once per unit), averaged per (package, unit, arch); the seed fills the rest.
    No file there: the seed alone. A file that is not a ledger, or a row that does not read as one: LedgerError."""
    if not ledger.exists():
        return seed
    samples: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for package, timings in read_compile_times(ledger).items():
        for timing in timings:
            samples[package][timing.unit][timing.arch].append(timing.seconds)
    if not samples:
        return seed
    units = dict(seed.units)
    for package, by_unit in samples.items():
        units[package] = tuple(_measured_unit(package, unit, by_arch) for unit, by_arch in sorted(by_unit.items()))
    return CostModel(
        units=units,
        per_python=seed.per_python,
        source=f"{ledger} (compile_times of {', '.join(sorted(samples))}); the seed for the rest",
    )


def _measured_unit(package: str, unit: str, by_arch: Mapping[str, list[float]]) -> UnitCost:
    means = {arch: sum(values) / len(values) for arch, values in by_arch.items()}
    host = means.pop(HOST_PHASES, 0.0)
    default = sum(means.values()) / len(means) if means else 0.0
    return UnitCost(package=package, unit=unit, count=1, default=default, by_arch=means, host=host)


@dataclass(frozen=True, kw_only=True)
class Item:
    """One runner's unit of work: its CPU-seconds and its wall time on the runner's cores."""

    name: str
    cpu: float
    wall: float


@dataclass(frozen=True, kw_only=True)
class Estimate:
    method: str
    items: tuple[Item, ...]
    runners: int
    cores: int
    extrapolated: int
    costs: int

    @property
    def cpu_hours(self) -> float:
        return sum(item.cpu for item in self.items) / 3600

    @property
    def wall_hours(self) -> float:
        return makespan([item.wall for item in self.items], self.runners) / 3600

    @property
    def longest_item_hours(self) -> float:
        return max(item.wall for item in self.items) / 3600


def makespan(walls: Sequence[float], runners: int) -> float:
    """Longest-first onto the least loaded runner (LPT): within 4/3 of the optimum."""
    loads = [0.0] * max(1, runners)
    for wall in sorted(walls, reverse=True):
        heapq.heapreplace(loads, loads[0] + wall)
    return max(loads)


def _cuda_wall(costs: list[tuple[int, list[float]]], cores: int, threads: int) -> tuple[float, float]:
    """(CPU-seconds, wall) of compiling every unit: ``cores`` workers, each unit's archs on ``threads`` threads."""
    cpu = sum(count * sum(row) for count, row in costs)
    critical = max(sum(row) / max(1, min(threads, len(row), cores)) for _, row in costs)
    return cpu, max(cpu / cores, critical)


def group_name(job: Job) -> str:
    """What compiles once: (package, version, label), and the platform where it is not x86_64 (an aarch64 group
    compiles its own objects, on its own runner)."""
    name = f"{job.package}-{job.local_version}"
    return name if job.platform == DEFAULT_PLATFORM else f"{name}-{job.platform}"


def group_selector(job: Job) -> str:
    """The fnmatch pattern that selects exactly the jobs of ``job``'s group: ``mamba-ssm-2.3.2.post1+pt214cu130-*-
    aarch64``."""
    return f"{job.package}-{job.local_version}-*-{job.platform}"


def groups(jobs: Sequence[Job]) -> dict[str, list[Job]]:
    """Jobs by :func:`group_name`: what compiles once."""
    grouped: dict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        grouped[group_name(job)].append(job)
    return grouped


def estimate(jobs: Sequence[Job], model: CostModel, *, runners: int, cores: int) -> tuple[Estimate, Estimate]:
    """(wheelwright's method, upstream's) for the same jobs, archs and runners."""
    ours, theirs = [], []
    extrapolated = total = 0
    for name, group in groups(jobs).items():
        costs, guessed, counted = model.cuda_costs(group[0])
        extrapolated, total = extrapolated + guessed, total + counted
        per_python = model.per_python.get(group[0].package, 0.0)
        cpu, wall = _cuda_wall(costs, cores, threads=min(len(group[0].archs), cores))
        ours.append(Item(name=name, cpu=cpu + len(group) * per_python, wall=wall + len(group) * per_python))
        cpu_up, wall_up = _cuda_wall(costs, cores, threads=UPSTREAM_NVCC_THREADS)
        theirs += [Item(name=job.identifier, cpu=cpu_up + per_python, wall=wall_up + per_python) for job in group]
    common = {"runners": runners, "cores": cores, "extrapolated": extrapolated, "costs": total}
    return (
        Estimate(
            method="wheelwright: compile once per (package version, torch, toolkit), link per Python",
            items=tuple(ours),
            **common,
        ),
        Estimate(
            method=f"upstream: full rebuild per Python, nvcc --threads {UPSTREAM_NVCC_THREADS}",
            items=tuple(theirs),
            **common,
        ),
    )


def by_platform(jobs: Sequence[Job], model: CostModel, *, runners: int, cores: int) -> dict[str, Estimate]:
    """wheelwright's estimate of each platform's jobs alone, x86_64 first: each platform's groups run on runners of
    its own (GitHub's arm64 runners are a pool of their own), so each is priced on ``runners`` of them."""
    platforms = sorted({job.platform for job in jobs}, key=lambda p: (p != DEFAULT_PLATFORM, p))
    return {
        platform: estimate([j for j in jobs if j.platform == platform], model, runners=runners, cores=cores)[0]
        for platform in platforms
    }


def timeout_minutes(item: Item, *, margin: float = 1.5, floor: int = 30, ceiling: int = 340) -> int:
    """A build step's timeout from its estimate: generous, and always below GitHub's 6 h job limit."""
    return max(floor, min(ceiling, math.ceil(item.wall * margin / 60) + 15))
