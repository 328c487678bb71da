"""The build stage: run each job through fetch -> env -> patch -> compile -> repair -> verify -> dist, record it
in the ledger, skip what is already built from the same inputs, and never leave a partial wheel in dist/."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry
from builder.plan.facts import TorchFacts
from builder.plan.job import Job
from builder.steps import compile as compile_stage
from builder.steps import provenance
from builder.steps import variant as variant_stage
from builder.steps.environment import NotBuildableHere, build_env, find_toolkit, runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from builder.steps.recipes import apply_recipe
from builder.steps.repair import repair_wheel
from builder.steps.verify import quarantine, verify_wheel

log = logging.getLogger(__name__)

PHASES = ("fetch", "env", "patch", "compile", "repair", "verify", "install")


@dataclass(frozen=True, kw_only=True)
class Layout:
    """The output folder: dist/ (verified wheels only), variant/ (their PEP 825 variant twins, verified again),
    quarantine/, logs/, ledger.sqlite, tmp/ (work in flight)."""

    root: Path

    @property
    def dist(self) -> Path:
        return self.root / "dist"

    @property
    def variant(self) -> Path:
        return self.root / "variant"

    @property
    def quarantine(self) -> Path:
        return self.root / "quarantine"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.sqlite"

    def log_for(self, job: Job) -> Path:
        return self.logs / f"{job.identifier}.log"


@dataclass(frozen=True, kw_only=True)
class BuildOptions:
    retry_failed: bool = False
    parallel: int = 1  # jobs at once (groups of one package version + label run their Pythons in turn)
    objcache: str = "use"  # use | verify | off (see builder/steps/objcache.py)


@dataclass(kw_only=True)
class Progress:
    """What the CLI shows while a job runs; the build calls these, never prints."""

    on_phase: Callable[[Job, str], None] = lambda job, phase: None
    on_line: Callable[[Job, str], None] = lambda job, line: None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    job: Job
    entry: LedgerEntry
    skipped: bool = False  # already built from the same inputs


class PhaseTimer:
    """Times each phase, and tells the ledger and the display when one starts."""

    def __init__(self, job: Job, progress: Progress, record: Callable[[str, dict[str, float]], None]) -> None:
        self.job, self.progress, self.record = job, progress, record
        self.timings: dict[str, float] = {}
        self.phase = "fetch"

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        self.phase = phase
        self.record(phase, dict(self.timings))
        self.progress.on_phase(self.job, phase)
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[phase] = round(self.timings.get(phase, 0.0) + time.monotonic() - start, 3)


def input_hash(job: Job) -> str:
    """What a wheel is built from: sdist, recipe and recipe code, torch, toolkit, flags. Same hash, same wheel."""
    recipe_code = hashlib.sha256()
    for name in sorted(p.name for p in resources.files("builder.steps.recipes").iterdir() if p.name.endswith(".py")):
        recipe_code.update(resources.files("builder.steps.recipes").joinpath(name).read_bytes())
    recipe_code.update(resources.files("builder.data").joinpath("build-requirements.txt").read_bytes())
    inputs = {
        "job": {k: v for k, v in asdict(job).items() if k != "sdist"},
        "sdist": job.sdist.sha256,
        "recipe_code": recipe_code.hexdigest(),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()



def _base_entry(job: Job, digest: str, layout: Layout, **fields: object) -> LedgerEntry:
    return LedgerEntry(
        job_id=job.identifier, package=job.package, version=job.version, label=job.label, torch=job.torch,
        accelerator=job.accelerator.name, python=job.python, input_hash=digest,
        log_path=str(layout.log_for(job)), **fields,
    )


class Builder:
    def __init__(self, layout: Layout, facts: TorchFacts, options: BuildOptions, progress: Progress | None = None) -> None:
        self.layout, self.facts, self.options = layout, facts, options
        self.progress = progress or Progress()
        self._repair_lock = threading.Lock()  # auditwheel changes the process's working directory while it repairs

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        for folder in (self.layout.dist, self.layout.variant, self.layout.quarantine, self.layout.logs, self.layout.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        with _exclusive(self.layout.root / ".lock"), Ledger(self.layout.ledger) as ledger:
            self._recover(ledger)
            groups: dict[tuple[str, str, str], list[Job]] = defaultdict(list)
            for job in jobs:
                groups[(job.package, job.version, job.label)].append(job)
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
            if entry.status != "running":
                continue
            wheel = self.layout.dist / entry.wheel if entry.wheel else None
            if wheel and wheel.is_file() and sha256_of(wheel) == entry.wheel_sha256:
                ledger.put(dataclasses.replace(entry, status="built", phase="install"))

    def _one(self, job: Job, share: int) -> Outcome:
        digest = input_hash(job)
        with Ledger(self.layout.ledger) as ledger:
            previous = ledger.get(job.identifier)
            if self._up_to_date(previous, digest):
                return Outcome(job=job, entry=previous, skipped=True)
            self.layout.log_for(job).write_text("")
            timer = PhaseTimer(job, self.progress, lambda phase, timings: ledger.put(
                _base_entry(job, digest, self.layout, status="running", phase=phase, timings=timings)))
            try:
                with tempfile.TemporaryDirectory(prefix=f"{job.package}-", dir=self.layout.tmp) as work:
                    entry = self._build(job, digest, timer, ledger, share, Path(work))
            except NotBuildableHere as error:
                entry = _base_entry(job, digest, self.layout, status="unbuildable", phase=timer.phase, timings=timer.timings, reason=str(error))
            except WheelwrightError as error:
                entry = _base_entry(job, digest, self.layout, status="failed", phase=timer.phase, timings=timer.timings, reason=str(error))
            except Exception as error:  # a bug or an unexpected failure of one job must not stop the others
                log.exception("%s: unexpected error", job.identifier)
                entry = _base_entry(job, digest, self.layout, status="failed", phase=timer.phase, timings=timer.timings, reason=f"{type(error).__name__}: {error}")
            ledger.put(entry)
            return Outcome(job=job, entry=entry)

    def _up_to_date(self, previous: LedgerEntry | None, digest: str) -> bool:
        if previous is None or previous.input_hash != digest:
            return False
        if previous.status == "built":
            return bool(previous.wheel) and (self.layout.dist / previous.wheel).is_file()
        return previous.status in ("failed", "quarantined", "unbuildable") and not self.options.retry_failed

    def _build(self, job: Job, digest: str, timer: PhaseTimer, ledger: Ledger, share: int, work: Path) -> LedgerEntry:
        log_path = self.layout.log_for(job)
        with timer("fetch"):
            sdist = fetch_sdist(job)
        with timer("env"):
            toolkit = find_toolkit(job.accelerator)
            runtime = runtime_env(job, self.facts)
            env = build_env(job, runtime, toolkit, log_path=log_path)
        with timer("patch"):
            source = unpack_sdist(sdist, work / "unpacked")
            recipe = apply_recipe(source, job)
            with log_path.open("a") as handle:
                handle.writelines(f"recipe: {change}\n" for change in recipe.changes)
        with timer("compile"), compile_stage.workspace(job, source, runtime.site_packages) as space:
            parallelism = compile_stage.Parallelism.fit(len(job.archs), share=share)
            objcache = None if self.options.objcache == "off" else (compile_stage.objcache_root(), self.options.objcache)
            environ = compile_stage.build_environ(job, env, recipe.env, space, parallelism, objcache)
            built = compile_stage.compile_wheel(job, env, space, environ, work / "built", log_path=log_path, on_line=lambda line: self.progress.on_line(job, line))
        with timer("repair"), self._repair_lock:
            repaired = repair_wheel(built, job, work / "repaired", log_path=log_path)
            # After repair (which rewrites the ELF files), so the record's digests are of what ships.
            provenance.embed(repaired.wheel, provenance.build_record(
                job, toolkit_root=toolkit.root, recipe_changes=recipe.changes, log_path=log_path))
        with timer("verify"):
            report = verify_wheel(repaired.wheel, job, runtime=runtime, log_path=log_path)
            with log_path.open("a") as handle:
                handle.write(report.describe() + "\n")
        summary = json.dumps(report.as_dict(), sort_keys=True, default=str)
        if not report.ok:
            destination = quarantine(repaired.wheel, report, self.layout.quarantine)
            return _base_entry(job, digest, self.layout, status="quarantined", phase="verify", timings=timer.timings,
                               wheel=destination.name, wheel_sha256=sha256_of(destination), wheel_size=destination.stat().st_size,
                               reason="; ".join(report.reasons), report=summary)
        with timer("install"):
            twin = variant_stage.make_twin(repaired.wheel, work / "variant")  # after the gate, checked again
            entry = self._install(job, digest, repaired.wheel, timer, ledger, summary)
            os.replace(twin.path, self.layout.variant / twin.path.name)
            return entry

    def _install(self, job: Job, digest: str, wheel: Path, timer: PhaseTimer, ledger: Ledger, report: str) -> LedgerEntry:
        """Record the wheel's hash first, then move it into dist/ atomically: a kill between the two is recovered."""
        checksum, size = sha256_of(wheel), wheel.stat().st_size
        destination = self.layout.dist / wheel.name
        if destination.exists() and sha256_of(destination) != checksum:
            log.warning("%s: replacing %s built from older inputs", job.identifier, destination.name)
        fields = dict(timings=timer.timings, wheel=wheel.name, wheel_sha256=checksum, wheel_size=size, report=report)
        ledger.put(_base_entry(job, digest, self.layout, status="running", phase="install", **fields))
        os.replace(wheel, destination)
        return _base_entry(job, digest, self.layout, status="built", phase="install", **fields)


@contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WheelwrightError(f"another wheelwright build is using {path.parent}", tip="wait for it, or use another --output") from None
        yield
