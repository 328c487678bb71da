"""Sequences of changes to dist/, variant/ and the ledger, drawn from fixed seeds: after each step the site a
re-index leaves is, file for file, the one a cold index of a copy of the same folders writes. Some steps kill a run
part-way first (an exception where kill -9 would stop it); the next run must finish it. The kinds of change are
those a hunt for differences from a cold index went through (docs/runs.md, 2026-12-07): every difference it found
is a test of its own in tests/unit/test_index_channel_cold.py, and this keeps the mix of them."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.ledger import Ledger, LedgerEntry
from builder.plan.accelerator import Accelerator
from builder.plan.job import Job
from builder.steps import provenance, slim
from builder.steps.twins import VariantTwins
from builder.steps.variant import make_twin
from builder.steps.wheelzip import Member, read_members, write_wheel
from index_site.stage import build_site
from index_site.twins import twin_name
from scripts.bench.wheels import WheelSpec, job_wheel, make_wheel, with_provenance
from tests.index_checks import site_files
from tests.jobs import local_job

BASE = "https://wheels.example.org"
BUILDS = (("2.14.1", "cu130", ("9.0", "12.0+PTX")), ("2.14.1", "cu126", ("8.0", "9.0")), ("2.13.0", "cu130", ("9.0",)))
VERSIONS = ("1.6.0", "1.7.0", "1.7", "1.8.0")  # 1.7 and 1.7.0: one version, two spellings
PROJECTS = ("causal-conv1d", "mamba-ssm")
KILL_POINTS = (  # where a run is stopped: judging done, twins being checked, files being placed, the last writes
    "index_site.site.settle_twins",
    "builder.steps.twins.VariantTwins.problems",
    "index_site.site.apply_plan",
    "index_site.records.write_manifest",
    "index_site.site.kept_for_next",
)


class Killed(Exception):
    """A run stopped part-way."""


@dataclasses.dataclass
class Steps:
    out: Path
    rng: random.Random
    made: int = 0

    def job(self, build: tuple[str, str, tuple[str, ...]] | None = None, version: str | None = None) -> Job:
        torch, accelerator, archs = build or self.rng.choice(BUILDS)
        return dataclasses.replace(
            local_job(), package=self.rng.choice(PROJECTS), version=version or self.rng.choice(VERSIONS), torch=torch,
            accelerator=Accelerator.parse(accelerator), archs=archs, python=self.rng.choice(("3.11", "3.12")),
        )

    def payload(self) -> bytes:
        self.made += 1
        return f"x = {self.made}\n".encode()

    def wheels(self) -> list[Path]:
        return sorted((self.out / "dist").glob("*.whl"))

    def twins(self) -> list[Path]:
        return sorted((self.out / "variant").glob("*.whl"))

    def built(self) -> None:
        """A farm build: a wheel with provenance (the index makes its twin); at times a build-tagged one beside a
        wheel of the same name (a real build beside a day-0 wheel)."""
        job = self.job()
        work = self.out / "work"
        work.mkdir(exist_ok=True)
        wheel = with_provenance(job_wheel(work, job, {f"{job.dist_name}/__init__.py": self.payload()},
                                          platform="manylinux_2_28_x86_64"), job)
        tagged = (self.out / "dist" / wheel.name).exists() and self.rng.random() < 0.5
        shutil.move(wheel, self.out / "dist" / (wheel.name.replace("-cp", "-1-cp", 1) if tagged else wheel.name))

    def plain(self) -> None:
        """A wheel without provenance (no twin)."""
        spec = WheelSpec(project=self.rng.choice(PROJECTS), version=self.rng.choice(VERSIONS),
                         label=self.rng.choice(("pt214cu130", "pt213cu130")), python="cp311", salt=str(self.payload()))
        make_wheel(self.out / "dist", spec)

    def removed(self) -> None:
        if wheels := self.wheels():
            self.rng.choice(wheels).unlink()

    def twin_removed(self) -> None:
        if twins := self.twins():
            self.rng.choice(twins).unlink()

    def twin_tampered(self) -> None:
        if twins := self.twins():
            twin = self.rng.choice(twins)
            members = read_members(twin)
            name = next(name for name in members if name.endswith("__init__.py"))
            members[name] = Member(data=self.payload())
            write_wheel(twin, members)

    def slims(self) -> None:
        """A slim wheel cut from a fat wheel of pt214cu130 whose twin is in variant/ (slim.py's record)."""
        variant = self.out / "variant"
        fats = [w for w in self.wheels() if "+pt214cu130-cp" in w.name and (variant / twin_name(w.name)).exists()]
        if not fats:
            return
        fat = self.rng.choice(fats)
        dist, version, python = fat.name.split("-")[:3]
        job = dataclasses.replace(self.job(BUILDS[0], version.split("+")[0]), package=dist.replace("_", "-"),
                                  python=f"{python[2]}.{python[3:]}")
        arch = self.rng.choice(("9.0", "12.0"))
        work = self.out / "cut" / arch
        work.mkdir(parents=True, exist_ok=True)
        wheel = Path(shutil.copy(fat, work / fat.name))
        provenance.embed(wheel, slim.cut_record(slim.Origin.of(fat), job, arch))
        make_twin(wheel, self.out / "variant", label=slim.slim_label("pt214cu130", arch))

    def failure(self) -> None:
        with Ledger(self.out / "ledger.sqlite") as ledger:
            ledger.put(LedgerEntry(
                job_id=f"failed-{self.rng.randint(0, 2)}", package=self.rng.choice(PROJECTS), version="1.7.0",
                label="pt212cu126", torch="2.12", accelerator="cu126", python="3.11", input_hash="h",
                status=self.rng.choice(("failed", "unbuildable")), phase="compile", reason=f"r{self.payload()!r}",
            ))

    def failure_gone(self) -> None:
        with Ledger(self.out / "ledger.sqlite") as ledger:
            ledger.remove(f"failed-{self.rng.randint(0, 2)}")

    def archs(self) -> None:
        if wheels := self.wheels():
            wheel = self.rng.choice(wheels)
            with Ledger(self.out / "ledger.sqlite") as ledger:
                ledger.put(LedgerEntry(
                    job_id=f"archs-{wheel.name}", package="x", version="1", label="pt214cu130", torch="2.14",
                    accelerator="cu130", python="3.11", input_hash="h", status="built", wheel=wheel.name,
                    report=json.dumps({"sass": self.rng.choice([["9.0"], ["8.0", "9.0"]]), "ptx": []}),
                ))


CHANGES: tuple[Callable[[Steps], None], ...] = (
    Steps.built, Steps.built, Steps.built, Steps.plain, Steps.removed, Steps.twin_removed, Steps.twin_tampered,
    Steps.slims, Steps.slims, Steps.failure, Steps.failure_gone, Steps.archs,
)


def _index(root: Path) -> None:
    build_site(root, root / "site", base_url=BASE, twins=VariantTwins())


def _killed_run(out: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*args: object, **kwargs: object) -> None:
        raise Killed(point)

    with monkeypatch.context() as patched:
        patched.setattr(point, stop)
        try:
            _index(out)
        except Killed:
            pass  # a run with nothing there to stop at ends on its own




def _cold_site(out: Path) -> Path:
    cold = out.parent / "cold"
    shutil.rmtree(cold, ignore_errors=True)
    for name in ("dist", "variant"):
        if (out / name).exists():
            shutil.copytree(out / name, cold / name)
    if (out / "ledger.sqlite").exists():
        shutil.copyfile(out / "ledger.sqlite", cold / "ledger.sqlite")
    _index(cold)
    return cold / "site"


@pytest.mark.parametrize("seed", range(1, 7))
def test_after_every_step_of_a_sequence_the_site_equals_a_cold_index(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = Steps(tmp_path / "out", random.Random(seed))
    (steps.out / "dist").mkdir(parents=True)
    for _ in range(3):
        steps.built()
    for _ in range(2):
        _index(steps.out)
    done: list[str] = []
    for _ in range(12):
        for change in steps.rng.sample(CHANGES, steps.rng.choice((1, 2))):
            change(steps)
            done.append(change.__name__)
        if steps.rng.random() < 0.4:
            point = steps.rng.choice(KILL_POINTS)
            _killed_run(steps.out, point, monkeypatch)
            done.append(f"killed at {point}")
        _index(steps.out)
        incremental, cold = site_files(steps.out / "site"), site_files(_cold_site(steps.out))
        differ = sorted(incremental.keys() ^ cold.keys()) + [p for p in cold if incremental.get(p, cold[p]) != cold[p]]
        assert differ == [], f"after {done}"
