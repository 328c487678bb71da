"""The build stage: run each job through fetch -> env -> patch -> compile -> repair -> verify -> dist, record it
in the ledger, skip what is already built from the same inputs, and never leave a partial wheel in dist/."""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import logging
import os
import resource
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from builder.core.context import job_context, log_note
from builder.core.errors import NotBuildableHere, WheelwrightError
from builder.core.hashing import FileIdentity, sha256_of
from builder.core.ledger import NOT_BUILT, Ledger, LedgerEntry, Status
from builder.core.resources import BUILD_DATA
from builder.core.settings import setting
from builder.core.wheelhouse import Layout
from builder.plan.job import Job
from builder.plan.releases import TorchFacts
from builder.steps import compilation, cross, provenance, slim
from builder.steps import day0 as day0_stage
from builder.steps import variant as variant_stage
from builder.steps.abi import needed_abi
from builder.steps.emulate import check_import_emulated
from builder.steps.environment import (
    BuildEnv,
    RuntimeEnv,
    build_env,
    build_requirements,
    find_pythons,
    find_toolkit,
    runtime_env,
)
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.nvcc_time import seed_costs, unit_costs
from builder.steps.platform import cross_target
from builder.steps.recipes import RecipeResult, apply_recipe
from builder.steps.recipes.facts import package_facts
from builder.steps.repair import load_excludes, repair_wheel
from builder.steps.toolchain import Toolchain, ToolkitReadiness
from builder.steps.toolchain import readiness as toolkit_readiness
from builder.steps.torch_index import (
    TORCH_INDEX_ENV,
    IndexPages,
    TorchIndexUnreachable,
    TorchNotListed,
    find_torch_wheel,
    torch_index_template,
)
from builder.steps.upstream import overlay_upstream
from builder.steps.verify import Importer, VerifyReport, quarantine, verify_wheel

log = logging.getLogger(__name__)

PHASES = ("fetch", "env", "patch", "compile", "repair", "verify", "install")


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    retry_failed: bool = False
    parallel: int = 1  # jobs at once (groups of one package version + label run their Pythons in turn)
    objcache: str = "use"  # use | verify | off (see builder/steps/programs/objcache.py)
    torch_index: str | None = None  # the template in force; None: WHEELWRIGHT_TORCH_INDEX, else PyTorch's index


@dataclass(kw_only=True)
class Progress:
    """What the CLI shows while a job runs; the build calls these, never prints."""

    on_phase: Callable[[Job, str], None] = lambda job, phase: None
    on_line: Callable[[Job, str], None] = lambda job, line: None
    on_done: Callable[[Job, str], None] = lambda job, result: None  # built, failed, ..., or "up to date"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    job: Job
    entry: LedgerEntry
    skipped: bool = False  # already built from the same inputs


class PhaseTimer:
    """Times each phase, and tells the ledger and the display when one starts. A job that runs alone in this
    process (``alone``: one job at a time) also has each phase's CPU-seconds counted, this process's and its
    reaped children's: with jobs side by side the process's CPU is theirs together, and is not split."""

    def __init__(
        self, job: Job, progress: Progress, record: Callable[[str, dict[str, float]], None], *, alone: bool = False
    ) -> None:
        self.job, self.progress, self.record, self.alone = job, progress, record, alone
        self.timings: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._inner: list[float] = []  # the CPU-seconds of the blocks counted inside each open one
        self.started: dict[str, float] = {}  # each phase's (last) start, time.monotonic()
        self.phase = "fetch"

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.phase = phase
        self.record(phase, dict(self.timings))
        self.progress.on_phase(self.job, phase)
        start = self.started[phase] = time.monotonic()
        try:
            with self.counting(phase):
                yield
        finally:
            self.timings[phase] = round(self.timings.get(phase, 0.0) + time.monotonic() - start, 3)

    @contextmanager
    def counting(self, name: str) -> Iterator[None]:
        """Add the CPU-seconds of the block to ``name``'s, when the job runs alone; a block counted inside it
        (the slim wheels' relink inside the compile phase) counts for its own name only."""
        if not self.alone:
            yield
            return
        self.cpu.setdefault(name, 0.0)  # the line lists them in the order they started
        start = process_cpu()
        self._inner.append(0.0)
        try:
            yield
        finally:
            spent, inner = process_cpu() - start, self._inner.pop()
            self.cpu[name] = round(self.cpu[name] + spent - inner, 3)
            if self._inner:
                self._inner[-1] += spent

    def cpu_line(self) -> str | None:
        """``CPU-s by phase: fetch 0.0, ...`` for the job's log (bench_build reads it), or None when not counted."""
        if not self.alone:
            return None
        return CPU_LINE + ", ".join(f"{name} {seconds:.1f}" for name, seconds in self.cpu.items())


CPU_LINE = "CPU-s by phase (this process and its children): "


def cpu_by_phase(log: str) -> dict[str, float]:
    """The CPU-seconds of each phase from the last line PhaseTimer.cpu_line wrote into a job's ``log``; {} where
    there is none (code from before it, jobs side by side) or it does not read as one."""
    lines = [line for line in log.splitlines() if CPU_LINE in line]
    if not lines:
        return {}
    phases = {}
    for part in lines[-1].split(CPU_LINE, 1)[1].split(", "):
        phase, _, seconds = part.partition(" ")
        try:
            phases[phase] = float(seconds)
        except ValueError:
            return {}
    return phases


def process_cpu() -> float:
    """User and system CPU-seconds of this process and of the children it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def input_hash(job: Job) -> str:
    """What a wheel is built from: sdist (and the upstream commit overlaid on it), recipe and recipe code, torch,
    toolkit, flags, and every data file the build reads (resources.BUILD_DATA). Same hash, same wheel."""
    inputs = {
        # the archs as the plan spells them, so a hash taken before they were parsed still holds
        "job": {k: v for k, v in asdict(job).items() if k != "sdist"} | {"archs": [str(a) for a in job.archs]},
        "sdist": job.sdist.sha256,
        "upstream": asdict(job.sdist.upstream) if job.sdist.upstream else None,
        "recipe_code": _recipe_code_digest(),
        "data": {resource.source: hashlib.sha256(resource.read_bytes()).hexdigest() for resource in BUILD_DATA},
    }
    image = setting("WHEELWRIGHT_BUILDER_IMAGE")  # set inside a builder image: its glibc and compiler count
    if image:
        inputs["image"] = image
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def _recipe_code_digest() -> str:
    """The recipe modules' bytes: a changed patch or setup.py rewrite changes what every wheel is built from."""
    digest = hashlib.sha256()
    package = resources.files("builder.steps.recipes")
    for name in sorted(p.name for p in package.iterdir() if p.name.endswith(".py")):
        digest.update(package.joinpath(name).read_bytes())
    return digest.hexdigest()


READY = "ready"
NEEDS_TORCH_INDEX = f"need PyTorch's index (unreachable here: set {TORCH_INDEX_ENV})"
NO_ROCM = "ROCm: no ROCm toolkit here (an image's /opt/rocm, or rocm wheels from AMD's index)"


@dataclass(frozen=True, kw_only=True)
class Readiness:
    """What the preflight found for one job: its input hash, and why it cannot be built here (None: it can);
    ``reason`` is the problem's class, the key the closing count groups jobs by."""

    job: Job
    input_hash: str
    problem: str | None
    reason: str = READY


def preflight(jobs: Sequence[Job], facts: TorchFacts, torch_index: str | None = None, *,
              scope: str = "here") -> list[Readiness]:
    """Everything a build checks before its first download, for each job, with no side effect (nothing is
    downloaded, unpacked or installed): the data files it reads load and pass their checks, the recipe knows the
    package, then in this order its interpreter, its toolkit (readiness data; the archs it can emit) and its torch
    (the index the job would use lists the wheel for its Python: one read of the index page). The first that fails
    is the job's reason. ``scope="farm"`` checks only what a builder image does not bring (its interpreters and
    toolkits): the data and each job's torch."""
    load_excludes()
    build_requirements()
    torch_index = torch_index or torch_index_template()
    pages = IndexPages()
    toolkits: dict[tuple[object, ...], ToolkitReadiness] = {}
    found = []
    for job in jobs:
        package_facts(job.package)
        facts.release(job.torch)
        problem, reason = _first_problem(job, facts, torch_index, scope, pages, toolkits)
        found.append(Readiness(job=job, input_hash=input_hash(job), problem=problem, reason=reason))
    return found


def _first_problem(job: Job, facts: TorchFacts, torch_index: str, scope: str, pages: IndexPages,
                   toolkits: dict[tuple[object, ...], ToolkitReadiness]) -> tuple[str | None, str]:
    if scope == "here":
        try:
            find_pythons(job.python)
        except NotBuildableHere as error:
            return str(error), f"need Python {job.python} (not on this machine)"
        key = (job.accelerator, job.archs)
        if key not in toolkits:
            toolkits[key] = toolkit_readiness(job.accelerator, job.archs)
        toolkit = toolkits[key]
        if toolkit.problem is not None:
            return toolkit.problem, NO_ROCM if job.accelerator.kind == "rocm" else toolkit.problem
        target = cross_target(job)
        problem = cross.cross_problem(target) if target else None
        if problem is not None:
            return problem, problem
    try:
        find_torch_wheel(job, facts, torch_index, pages)
    except TorchIndexUnreachable as error:
        return str(error), NEEDS_TORCH_INDEX
    except TorchNotListed as error:
        return str(error), "torch wheel not on its index"
    return None, READY


def count_reasons(found: Sequence[Readiness]) -> list[tuple[str, int]]:
    """(reason, jobs) with ready first, then the largest groups: they add up to the jobs checked."""
    counts: dict[str, int] = defaultdict(int)
    for readiness in found:
        counts[readiness.reason] += 1
    return sorted(counts.items(), key=lambda item: (item[0] != READY, -item[1], item[0]))


def _base_entry(job: Job, digest: str, layout: Layout, **fields: Any) -> LedgerEntry:
    return LedgerEntry(
        job_id=job.identifier, package=job.package, version=job.version, label=job.label, torch=job.torch,
        accelerator=job.accelerator.name, python=job.python, input_hash=digest,
        log_path=str(layout.log_for(job)), **fields,
    )


def _patched(job: Job, sdist: Path, into: Path) -> tuple[Path, RecipeResult]:
    """The sdist unpacked into ``into``, upstream's missing files overlaid, the recipe applied; each change logged."""
    source = unpack_sdist(sdist, into)
    added = overlay_upstream(job, source)
    recipe = apply_recipe(source, job)
    for change in (*added, *recipe.changes):
        log_note(f"recipe: {change}")
    return source, recipe


class Builder:
    def __init__(
        self, layout: Layout, facts: TorchFacts, options: BuildOptions, progress: Progress | None = None
    ) -> None:
        self.layout, self.facts, self.options = layout, facts, options
        self.progress = progress or Progress()

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        provenance.wheelwright_commit()  # the commit of the code this process loaded, before the checkout can move
        layout = self.layout
        for folder in (layout.dist, layout.variant, layout.quarantine, layout.logs, layout.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.layout.root / ".lock"), Ledger(self.layout.ledger) as ledger:
            self._recover(ledger)
            groups: dict[tuple[str, str, str, str], list[Job]] = defaultdict(list)
            for job in jobs:
                groups[(job.package, job.version, job.label, job.platform)].append(job)
            share = max(1, min(self.options.parallel, len(groups)))
            with ThreadPoolExecutor(max_workers=share) as pool:
                results = pool.map(lambda group: [self._one(job, share) for job in group], groups.values())
                outcomes = [outcome for group in results for outcome in group]
        order = {job.identifier: index for index, job in enumerate(jobs)}
        return sorted(outcomes, key=lambda o: order[o.job.identifier])

    def _recover(self, ledger: Ledger) -> None:
        """After a kill: drop work in flight; a wheel that reached dist/ before its ledger row did is kept.
        Other rows left ``running`` are simply built again (see _up_to_date)."""
        shutil.rmtree(self.layout.tmp, ignore_errors=True)
        self.layout.tmp.mkdir()
        for entry in ledger.entries():
            if entry.status != Status.RUNNING:
                continue
            wheel = self.layout.dist / entry.wheel if entry.wheel else None
            if wheel and wheel.is_file() and sha256_of(wheel) == entry.wheel_sha256:
                ledger.put(dataclasses.replace(entry, status=Status.BUILT, phase="install"))

    def _one(self, job: Job, share: int) -> Outcome:
        digest = input_hash(job)
        with Ledger(self.layout.ledger) as ledger:
            previous = ledger.get(job.identifier)
            if previous is not None and self._up_to_date(previous, digest):
                self.progress.on_done(job, "up to date")
                return Outcome(job=job, entry=previous, skipped=True)
            # read before this job's first "running" row replaces its previous one, whose costs count too
            measured = unit_costs(  # this version's measured (TU, arch) costs: the core pool starts the longest first
                e.compile_times for e in ledger.entries()
                if e.package == job.package and e.version == job.version and e.compile_times
            )
            self.layout.log_for(job).write_text("")
            timer = PhaseTimer(job, self.progress, lambda phase, timings: ledger.put(
                _base_entry(job, digest, self.layout, status=Status.RUNNING, phase=phase, timings=timings)),
                alone=share == 1)
            on_line = functools.partial(self.progress.on_line, job)
            try:
                with job_context(job, self.layout.log_for(job), on_line), \
                        tempfile.TemporaryDirectory(prefix=f"{job.package}-", dir=self.layout.tmp) as work:
                    entry = self._build(job, digest, timer, ledger, share, Path(work), measured)
            except Exception as error:  # a bug or an unexpected failure of one job must not stop the others
                expected = isinstance(error, WheelwrightError)
                if not expected:
                    log.exception("%s: unexpected error", job.identifier)
                entry = _base_entry(
                    job,
                    digest,
                    self.layout,
                    status=Status.UNBUILDABLE if isinstance(error, NotBuildableHere) else Status.FAILED,
                    phase=timer.phase,
                    timings=timer.timings,
                    reason=str(error) if expected else f"{type(error).__name__}: {error}",
                )
            ledger.put(entry)
            self.progress.on_done(job, entry.status)
            return Outcome(job=job, entry=entry)

    def _up_to_date(self, previous: LedgerEntry | None, digest: str) -> bool:
        if previous is None or previous.input_hash != digest:
            return False
        if previous.status == Status.BUILT:
            return previous.wheel is not None and (self.layout.dist / previous.wheel).is_file()
        return previous.status in NOT_BUILT and not self.options.retry_failed

    def _build(
        self,
        job: Job,
        digest: str,
        timer: PhaseTimer,
        ledger: Ledger,
        share: int,
        work: Path,
        measured: Mapping[str, Mapping[str, float]],
    ) -> LedgerEntry:
        """Fetch to install; ``measured``: this version's (TU, arch) costs from the ledger, for the core pool."""
        with timer("fetch"):
            sdist = fetch_sdist(job)
        with timer("env"):
            runtime, toolkit, env, crossed = self._environment(job)
        with timer("patch"):
            source, recipe = _patched(job, sdist, work / "unpacked")
        with timer("compile"), compilation.compile_job(
            job, env, source, runtime.site_packages, recipe_env=recipe.env, into=work / "built",
            timeline_to=self.layout.timeline_for(job), started=timer.started["compile"], share=share,
            objcache=self.options.objcache, costs=_pool_costs(job, recipe.part_shares, measured), toolkit=toolkit,
            crossed=crossed,
        ) as built:
            compiled = {  # how it was compiled, for the ledger (the wheel carries its own record: provenance below)
                "toolchain": json.dumps(toolkit.as_dict(), sort_keys=True),
                "compile_times": json.dumps(built.times),
                "torch_wheel": json.dumps(runtime.origin(), sort_keys=True),
                **built.record,  # what it reused, each stage's cost
            }
            with timer.counting("slim"):
                relinked = self._relink(job, built.source, built.wheel, work / "slim")  # the objects are only here
        with timer("repair"):  # auditwheel's calls hold the runner's lock on the working directory
            repaired = repair_wheel(built.wheel, job, work / "repaired")
            # After repair (which rewrites the ELF files), so the record's digests are of what ships.
            abi = needed_abi(repaired.wheel, job, runtime.site_packages)
            compiled["abi"] = json.dumps(abi, sort_keys=True)
            record = provenance.build_record(job, toolchain=toolkit.as_dict(), recipe_changes=recipe.changes,
                                             torch_wheel=runtime.origin(), abi=abi)
            provenance.embed(repaired.wheel, record)
        with timer("verify"):
            importer = functools.partial(check_import_emulated, build=crossed) if crossed else None
            report = verify_wheel(repaired.wheel, job, runtime=None if crossed else runtime, importer=importer)
            log_note(report.describe())
        summary = json.dumps(report.as_dict(), sort_keys=True, default=str)
        if not report.ok:
            return self._quarantined(job, digest, timer, repaired.wheel, report, summary, compiled)
        with timer("install"):
            wheel = self._beside_day0(repaired.wheel, ledger)
            twin = variant_stage.make_twin(wheel, work / "variant")  # after the gate, checked again
            entry = self._install(job, digest, wheel, timer, ledger, summary, compiled)
            os.replace(twin.path, self.layout.variant / twin.path.name)
        with timer.counting("slim"):
            entry = self._slim(job, entry, built.wheel, relinked, work, ledger, None if crossed else runtime, importer)
        if (line := timer.cpu_line()) is not None:
            log_note(line)
        return entry

    def _relink(self, job: Job, source: Path, built: Path, out: Path) -> tuple[list[slim.Relinked], float]:
        """The job's GPU libraries linked again per SASS arch (builder/steps/slim.py), and the seconds it took;
        none, and why in the log, where that cannot be done: the fat wheel never depends on it."""
        started = time.monotonic()
        try:
            relinked = slim.relink(job, source, built, self.layout.log_for(job).read_text(errors="replace"), out)
        except WheelwrightError as error:
            log_note(f"slim wheels: none ({error})")
            relinked = []
        return relinked, time.monotonic() - started

    def _slim(self, job: Job, entry: LedgerEntry, built: Path, relink: tuple[list[slim.Relinked], float],
              work: Path, ledger: Ledger, runtime: RuntimeEnv | None, importer: Importer | None) -> LedgerEntry:
        """Cut the slim wheels from the installed fat one, verified as it was (``runtime``, ``importer``); a row each
        in the ledger. Their seconds, the relink's (in the compile phase, where the objects are) and the cut's, are
        the job's ``slim``, out of its compile."""
        (relinked, relink_seconds), started = relink, time.monotonic()
        verify = functools.partial(verify_wheel, runtime=runtime, importer=importer)
        if not relinked:
            ledger.replace_slims(job.identifier, [])  # an earlier build's, if any, are not of this wheel
            return entry
        try:
            cuts = slim.cut_wheels(job, built, self.layout.dist / str(entry.wheel), relinked, work, self.layout.variant,
                                   repair=self._repair_for_slim, verify=verify)
        except WheelwrightError as error:
            log_note(f"slim wheels: none ({error})")
            cuts = []
        for cut in cuts:
            log_note(f"slim wheel {cut.label}: {cut.variant.name if cut.variant else cut.reason}")
        ledger.replace_slims(job.identifier, [slim.ledger_row(job.identifier, cut, str(entry.wheel)) for cut in cuts])
        seconds = time.monotonic() - started + relink_seconds
        compile_seconds = max(0.0, entry.timings.get("compile", 0.0) - relink_seconds)
        return dataclasses.replace(entry, timings={**entry.timings, "compile": round(compile_seconds, 3),
                                                   "slim": round(seconds, 3)})

    def _repair_for_slim(self, wheel: Path, job: Job, out: Path) -> Path:
        return repair_wheel(wheel, job, out).wheel

    def _beside_day0(self, wheel: Path, ledger: Ledger) -> Path:
        """A real build of a label a day-0 wheel serves takes build tag 1: the day-0 file stays (a lock may hold its
        hash) and installers prefer the tagged wheel (docs/abi.md, "Day-0 wheels")."""
        holders = [e for e in ledger.entries() if day0_stage.is_day0(e) and e.wheel == wheel.name]
        if not holders or not (self.layout.dist / wheel.name).is_file():
            return wheel
        tagged = day0_stage.with_build_tag(wheel, "1")
        log_note(f"{wheel.name} is served by a day-0 wheel; this build is {tagged.name}")
        return tagged

    def _quarantined(
        self,
        job: Job,
        digest: str,
        timer: PhaseTimer,
        wheel: Path,
        report: VerifyReport,
        summary: str,
        compiled: dict[str, str],
    ) -> LedgerEntry:
        """A wheel the verify gate refused: moved to quarantine/, and the ledger says why."""
        destination = quarantine(wheel, report, self.layout.quarantine)
        return _base_entry(
            job,
            digest,
            self.layout,
            status=Status.QUARANTINED,
            phase="verify",
            timings=timer.timings,
            wheel=destination.name,
            wheel_sha256=sha256_of(destination),
            wheel_size=destination.stat().st_size,
            reason="; ".join(report.reasons),
            report=summary,
            **compiled,
        )

    def _environment(self, job: Job) -> tuple[RuntimeEnv, Toolchain, BuildEnv, cross.CrossBuild | None]:
        """The job's torch, toolkit and build venv; for another CPU than this machine's (a cross build) also the
        target's parts, and then setup.py runs under the x86_64 torch of the same version (builder/steps/cross.py)."""
        toolkit = find_toolkit(job.accelerator, job.archs)
        target = cross_target(job)
        runtime = runtime_env(cross.host_twin(job) if target else job, self.facts, self.options.torch_index)
        crossed = cross.prepare(job, toolkit, target, self.facts) if target else None
        toolkit = crossed.toolchain if crossed else toolkit
        return runtime, toolkit, build_env(job, runtime, toolkit), crossed

    def _install(
        self,
        job: Job,
        digest: str,
        wheel: Path,
        timer: PhaseTimer,
        ledger: Ledger,
        report: str,
        compiled: dict[str, str],
    ) -> LedgerEntry:
        """Record the wheel's hash first, then move it into dist/ atomically: a kill between the two is recovered."""
        checksum, size = sha256_of(wheel), wheel.stat().st_size
        destination = self.layout.dist / wheel.name
        if destination.exists() and sha256_of(destination) != checksum:
            log.warning("%s: replacing %s built from older inputs", job.identifier, destination.name)
        fields = dict(
            timings=timer.timings,
            wheel=wheel.name,
            wheel_sha256=checksum,
            wheel_size=size,
            report=report,
            **compiled,
        )
        ledger.put(_base_entry(job, digest, self.layout, status=Status.RUNNING, phase="install", **fields))
        os.replace(wheel, destination)
        # Taken after the move (a rename changes ctime): the index reuses the hash only while this still holds.
        identity = str(FileIdentity.of(destination.stat()))
        return _base_entry(
            job, digest, self.layout, status=Status.BUILT, phase="install", wheel_identity=identity, **fields
        )


def _pool_costs(job: Job, part_shares: Any, measured: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The core pool's (unit, arch) costs: the ledger's measured ones, the seed's guesses for the rest (a first
    build: every unit)."""
    guessed = {k: v for k, v in seed_costs(job.package, part_shares).items() if k not in measured}
    log_note(f"core pool costs: {len(measured)} units measured (ledger), {len(guessed)} guessed (seed)")
    return {**guessed, **measured}


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WheelwrightError(
                f"another wheelwright build is using {path.parent}", tip="wait for it, or use another --output"
            ) from None
        yield
