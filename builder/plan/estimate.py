"""What a plan costs to build: CPU-hours and wall time on N runners of C cores, for wheelwright's method (compile
the CUDA translation units once per (package version, torch, toolkit), link per Python) beside upstream's (a full
rebuild per Python with `nvcc --threads 4`), from per-(translation unit, arch) compile costs.

Costs come from the ledger where builds recorded them, per toolkit (the job's accelerator: nvcc 11.8 costs several
times what 13.0 does, so one toolkit's figures never price another's jobs): each compiled stage's CPU-seconds
(`stage_times`: front end, device preprocessing, cicc, ptxas, host), else `compile_times` (`nvcc --time`, seconds
per unit and arch); else from the seed figures in builder/data/compile-costs.toml. A (unit, arch) its toolkit never
measured takes the mean of that unit's measured archs; the estimate says how many costs were measured and how many
extrapolated. Device code reused across torch versions (builder/data/device-reuse.toml, measured by
scripts/measure_device_reuse.py) is priced once per class of torch versions whose device steps are the same.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from builder.core.data import load_data, validate
from builder.core.errors import ConfigError
from builder.core.files import parse_toml
from builder.core.ledger import StageTime, read_costs
from builder.core.resources import COMPILE_COSTS, DEVICE_REUSE
from builder.plan.job import Job
from builder.plan.releases import DEFAULT_PLATFORM

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
    # per arch, the measured CPU-seconds of each device stage (preprocess, cicc, ptxas): what reuse takes off
    stages: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class CostModel:
    units: Mapping[str, tuple[UnitCost, ...]]  # by package: the seed's, for every toolkit
    per_python: Mapping[str, float]
    source: str
    measured: Mapping[tuple[str, str], tuple[UnitCost, ...]] = field(default_factory=dict)  # (package, accelerator)

    def units_for(self, job: Job) -> tuple[tuple[UnitCost, ...], bool]:
        """The job's units and whether its toolkit measured them (else the seed's)."""
        measured = self.measured.get((job.package, job.accelerator.name))
        if measured:
            return measured, True
        units = self.units.get(job.package)
        if not units:
            raise ConfigError(f"no compile costs for {job.package}: neither in the ledger nor in {SEED}")
        return units, False

    def cuda_costs(self, job: Job) -> tuple[list[tuple[int, list[float]]], int, int]:
        """[(count, [seconds per arch of the job])] and how many of those (unit, arch) costs were extrapolated."""
        costs = []
        extrapolated = total = 0
        for unit, row, guessed in self.unit_rows(job):
            costs.append((unit.count, [unit.host, *row] if unit.host else row))
            extrapolated, total = extrapolated + guessed, total + len(row)
        return costs, extrapolated, total

    def unit_rows(self, job: Job) -> list[tuple[UnitCost, list[float], int]]:
        """Per unit: its seconds per arch of the job, and how many of them were extrapolated."""
        units, measured = self.units_for(job)
        rows = []
        for unit in units:
            found = [unit.by_arch.get(arch.sass if arch.has_sass else str(arch)) if measured else None
                     for arch in job.archs]
            rows.append((unit, [unit.default if f is None else f for f in found], sum(f is None for f in found)))
        return rows


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
    """Measured costs from the ledger, per (package, accelerator): each job's ``stage_times`` (CPU-seconds per unit,
    arch and stage) where recorded, else its ``compile_times`` (per job: [{unit, arch, seconds}] from ``nvcc
    --time``; arch "host" is the part that runs once per unit), averaged per (unit, arch); the seed prices the
    toolkits and packages the ledger has not measured. No file there: the seed alone. A file that is not a ledger,
    or a row that does not read as one: LedgerError."""
    if not ledger.exists():
        return seed
    samples: Samples = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    stage_samples: Samples = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    kinds: dict[tuple[str, str], set[str]] = defaultdict(set)
    for recorded in read_costs(ledger):
        family = (recorded.package, recorded.accelerator)
        if _add_stage_times(stage_samples[family], recorded.stage_times):
            kinds[family].add("stage_times")
            continue
        for timing in recorded.compile_times:
            samples[family][timing.unit][timing.arch].append(timing.seconds)
            kinds[family].add("compile_times")
    measured = {family: tuple(_measured_unit(family[0], unit, by_arch, stage_samples[family].get(unit, {}))
                              for unit, by_arch in sorted(_merge(samples[family], stage_samples[family]).items()))
                for family in sorted(kinds)}
    if not measured:
        return seed
    names = "; ".join(f"{' and '.join(sorted(kinds[family]))} of {family[0]} {family[1] or '(no accelerator)'}"
                      for family in sorted(kinds))
    return CostModel(units=seed.units, per_python=seed.per_python, measured=measured,
                     source=f"{ledger} (per toolkit: {names}); the seed for the rest")


# (package, accelerator) -> unit -> arch -> samples
Samples = defaultdict[tuple[str, str], defaultdict[str, defaultdict[str, list[float]]]]
_CHAIN = ("preprocess", "cicc", "ptxas")  # the stages run once per (unit, arch); front and host once per unit


def _add_stage_times(samples: defaultdict[str, defaultdict[str, list[float]]], rows: list[StageTime]) -> bool:
    """Add one job's complete (unit, arch) chains (every device stage compiled, none reused) and its units' front
    end and host part, as "stage@arch" samples; False when the job recorded none."""
    by_key: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for row in rows:
        by_key[(row.unit, row.arch)][row.stage] = row.cpu
    added = False
    for (unit, arch), stages in by_key.items():
        if arch and all(stage in stages for stage in _CHAIN):
            for stage in _CHAIN:
                samples[unit][f"{stage}@{arch}"].append(stages[stage])
            added = True
        elif not arch:
            samples[unit][HOST_PHASES].append(stages.get("front", 0.0) + stages.get("host", 0.0))
    return added


def _merge(samples: Mapping[str, Mapping[str, list[float]]], stages: Mapping[str, Mapping[str, list[float]]],
           ) -> dict[str, dict[str, list[float]]]:
    """Per unit and arch (and "host"), the samples of its total: the stages' sums where recorded, else
    compile_times' seconds."""
    merged: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for unit, by_arch in samples.items():
        merged[unit].update({arch: list(values) for arch, values in by_arch.items()})
    for unit, by_stage in stages.items():
        archs = {key.split("@")[1] for key in by_stage if "@" in key}
        for arch in archs:
            per_stage = [by_stage[f"{stage}@{arch}"] for stage in _CHAIN]
            merged[unit][arch] = [sum(values) for values in zip(*per_stage, strict=True)]
        if HOST_PHASES in by_stage:
            merged[unit][HOST_PHASES] = list(by_stage[HOST_PHASES])
    return merged


def _measured_unit(package: str, unit: str, by_arch: Mapping[str, list[float]],
                   stages: Mapping[str, list[float]] | None = None) -> UnitCost:
    means = {arch: sum(values) / len(values) for arch, values in by_arch.items()}
    host = means.pop(HOST_PHASES, 0.0)
    default = sum(means.values()) / len(means) if means else 0.0
    per_stage: dict[str, dict[str, float]] = defaultdict(dict)
    for key, values in (stages or {}).items():
        if "@" in key:
            stage, arch = key.split("@")
            per_stage[arch][stage] = sum(values) / len(values)
    return UnitCost(package=package, unit=unit, count=1, default=default, by_arch=means, host=host,
                    stages=dict(per_stage))


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
    reused_cpu: float = 0.0  # CPU-seconds of device stages priced once per class of same torch versions

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


@dataclass(frozen=True, kw_only=True)
class ReuseFacts:
    """Which torch versions' device steps are the same, per (package, version, accelerator, unit), as
    scripts/measure_device_reuse.py measured them (builder/data/device-reuse.toml): for cicc, the torch minors whose
    cicc reads the same bytes; for ptxas, those whose PTX is the same; and each stage's share of a (unit, arch)
    cost where the ledger has no stage times."""

    classes: Mapping[tuple[str, str, str, str, str], tuple[frozenset[str], ...]]  # (+ stage) -> classes
    shares: Mapping[tuple[str, str, str, str, str], float]

    def class_of(self, job: Job, unit: str, stage: str) -> frozenset[str] | None:
        found = self.classes.get((job.package, job.version, job.accelerator.name, unit, stage), ())
        return next((members for members in found if job.torch_minor in members), None)

    def share(self, job: Job, unit: str, stage: str) -> float:
        return self.shares.get((job.package, job.version, job.accelerator.name, unit, stage), 0.0)


REUSED_STAGES = ("cicc", "ptxas")


class ReuseShares(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    cicc: float = 0.0
    ptxas: float = 0.0


class ReuseUnit(BaseModel):
    """One ``[[unit]]`` of device-reuse.toml: per stage, the classes of torch minors whose device steps are the same,
    and the share of the unit's per-arch cost that stage is."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    package: str
    version: str
    accelerator: str
    unit: str
    cicc: tuple[tuple[str, ...], ...] = ()
    ptxas: tuple[tuple[str, ...], ...] = ()
    share: ReuseShares = ReuseShares()


class ReuseFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    unit: tuple[ReuseUnit, ...] = ()


def reuse_facts(text: str | None = None) -> ReuseFacts:
    """builder/data/device-reuse.toml, checked: a torch minor in one class per stage, shares within [0, 1]."""
    raw = parse_toml(DEVICE_REUSE.read_text() if text is None else text, DEVICE_REUSE.source)
    file = validate(raw, ReuseFile, DEVICE_REUSE.source)
    classes: dict[tuple[str, str, str, str, str], tuple[frozenset[str], ...]] = {}
    shares: dict[tuple[str, str, str, str, str], float] = {}
    for entry in file.unit:
        where = (entry.package, entry.version, entry.accelerator, entry.unit)
        for stage in REUSED_STAGES:
            members = tuple(frozenset(group) for group in getattr(entry, stage))
            if sum(len(m) for m in members) != len(frozenset().union(*members)):
                raise ConfigError(f"{DEVICE_REUSE.source}: {' '.join(where)}: a torch version in two {stage} classes")
            share = float(getattr(entry.share, stage))
            if not 0.0 <= share <= 1.0:
                raise ConfigError(f"{DEVICE_REUSE.source}: {' '.join(where)}: {stage} share {share} not in [0, 1]")
            classes[(*where, stage)], shares[(*where, stage)] = members, share
    return ReuseFacts(classes=classes, shares=shares)


def _reused(job: Job, unit: UnitCost, row: list[float], reuse: ReuseFacts, seen: set[tuple[str, ...]],
            ) -> list[float]:
    """The unit's per-arch costs for this job, less the device stages an earlier group of the same package version,
    accelerator and platform already compiled for a torch whose steps are the same (``seen``: the classes paid
    for). Never across platforms: the table was measured on x86_64, and an aarch64 build's device input holds its
    own host compiler's macros."""
    archs = [arch.sass if arch.has_sass else str(arch) for arch in job.archs]
    reduced = list(row)
    for stage in REUSED_STAGES:
        members = reuse.class_of(job, unit.unit, stage)
        if members is None:
            continue
        key = (job.package, job.version, job.accelerator.name, job.platform, unit.unit, stage, *sorted(members))
        if key not in seen:
            seen.add(key)
            continue
        for index, arch in enumerate(archs):
            measured = unit.stages.get(arch, {}).get(stage)
            reduced[index] -= measured if measured is not None else row[index] * reuse.share(job, unit.unit, stage)
    return reduced


def estimate(jobs: Sequence[Job], model: CostModel, *, runners: int, cores: int,
             reuse: ReuseFacts | None = None) -> tuple[Estimate, Estimate]:
    """(wheelwright's method, upstream's) for the same jobs, archs and runners; ``reuse``: price each device stage
    once per class of torch versions whose steps are the same (wheelwright only: upstream compiles everything)."""
    ours, theirs = [], []
    extrapolated = total = 0
    reused = 0.0
    seen: set[tuple[str, ...]] = set()
    for name, group in groups(jobs).items():
        job = group[0]
        costs, mine = [], []
        for unit, row, guessed in model.unit_rows(job):
            extrapolated, total = extrapolated + guessed, total + len(row)
            kept = _reused(job, unit, row, reuse, seen) if reuse is not None else row
            reused += unit.count * (sum(row) - sum(kept))
            costs.append((unit.count, [unit.host, *row] if unit.host else row))
            mine.append((unit.count, [unit.host, *kept] if unit.host else kept))
        per_python = model.per_python.get(job.package, 0.0)
        cpu, wall = _cuda_wall(mine, cores, threads=min(len(job.archs), cores))
        ours.append(Item(name=name, cpu=cpu + len(group) * per_python, wall=wall + len(group) * per_python))
        cpu_up, wall_up = _cuda_wall(costs, cores, threads=UPSTREAM_NVCC_THREADS)
        theirs += [Item(name=j.identifier, cpu=cpu_up + per_python, wall=wall_up + per_python) for j in group]
    common = {"runners": runners, "cores": cores, "extrapolated": extrapolated, "costs": total}
    return (
        Estimate(method="wheelwright: compile once per (package version, torch, toolkit), link per Python"
                 + (", device code once per toolkit where the same" if reuse is not None else ""),
                 items=tuple(ours), reused_cpu=reused, **common),
        Estimate(method=f"upstream: full rebuild per Python, nvcc --threads {UPSTREAM_NVCC_THREADS}",
                 items=tuple(theirs), **common),
    )


BASELINE_RATIO = 0.230  # wheelwright / upstream CPU-hours on the release profile when issue 31 was filed
GOAL_RATIO = 0.10


def summary(ours: Estimate, upstream: Estimate, without_reuse: Estimate, model: CostModel) -> list[str]:
    """The lines `plan --estimate` prints under its table."""
    ratio = ours.cpu_hours / upstream.cpu_hours
    before = without_reuse.cpu_hours / upstream.cpu_hours
    return [
        (f"wheelwright / upstream CPU-hours: {ratio:.3f} (goal <= {GOAL_RATIO:.2f}; {before:.3f} without cross-torch "
         f"reuse; {BASELINE_RATIO:.3f} when issue 31 was filed)"),
        (f"cross-torch reuse: {ours.reused_cpu / 3600:.1f} CPU-hours of cicc and ptxas priced once per class of torch "
         f"versions whose device steps are the same ({DEVICE_REUSE.source})"),
        (f"costs: {model.source}; {ours.costs - ours.extrapolated} of {ours.costs} (unit, arch) costs measured for "
         f"their own toolkit, {ours.extrapolated} extrapolated"),
    ]


def by_platform(jobs: Sequence[Job], model: CostModel, *, runners: int, cores: int,
                reuse: ReuseFacts | None = None) -> dict[str, Estimate]:
    """wheelwright's estimate of each platform's jobs alone, x86_64 first: each platform's groups run on runners of
    its own (GitHub's arm64 runners are a pool of their own), so each is priced on ``runners`` of them."""
    platforms = sorted({job.platform for job in jobs}, key=lambda p: (p != DEFAULT_PLATFORM, p))
    return {
        platform: estimate([j for j in jobs if j.platform == platform], model, runners=runners, cores=cores,
                           reuse=reuse)[0]
        for platform in platforms
    }


def timeout_minutes(item: Item, *, margin: float = 1.5, floor: int = 30, ceiling: int = 340) -> int:
    """A build step's timeout from its estimate: generous, and always below GitHub's 6 h job limit."""
    return max(floor, min(ceiling, math.ceil(item.wall * margin / 60) + 15))
