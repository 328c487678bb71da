"""Expansion: matrix.yaml x torch facts -> the jobs of a profile, plus every combination dropped and why."""

from __future__ import annotations

import fnmatch
import itertools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from .errors import PlanError
from .facts import Accelerator, TorchFacts, TorchRelease, load_facts, version_key
from .job import Job, PatchRef, Recipe, Sdist
from .matrix import HOST_PYTHON, Matrix, PackageSpec, Profile, SdistPin, _did_you_mean, load_matrix

_WILDCARDS = re.compile(r"[*?\[]")


@dataclass(frozen=True, kw_only=True)
class Dropped:
    identifier: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    profile: str
    jobs: tuple[Job, ...]
    dropped: tuple[Dropped, ...]

    def select(self, pattern: str | None) -> Plan:
        if not pattern:
            return self
        jobs = tuple(j for j in self.jobs if fnmatch.fnmatchcase(j.identifier, pattern))
        if not jobs:
            raise PlanError(f"--select {pattern!r} matches none of the {len(self.jobs)} jobs of profile {self.profile!r}")
        return Plan(profile=self.profile, jobs=jobs, dropped=self.dropped)

    def as_github_matrix(self) -> dict[str, list[dict[str, object]]]:
        return {"include": [job.as_matrix_entry() for job in self.jobs]}


def host_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _recipe(package: PackageSpec) -> Recipe:
    spec = package.recipe
    return Recipe(
        env=tuple(sorted(spec.env.items())),
        abi_env=spec.abi_env,
        arch_control=spec.arch_control,
        patches=tuple(PatchRef(name=p.name, versions=p.versions, torch=p.torch) for p in spec.patches),
        import_names=tuple(spec.import_names),
    )


def _sdist(package: PackageSpec, pin: SdistPin) -> Sdist:
    filename = f"{package.name.replace('-', '_')}-{pin.version}.tar.gz"
    return Sdist(filename=filename, sha256=pin.sha256, url=pin.url)


@dataclass(frozen=True)
class _Axes:
    """A profile's axes, resolved against the facts; raising on values no torch could satisfy."""

    packages: tuple[PackageSpec, ...]
    versions: str
    torch: tuple[tuple[str, TorchRelease], ...]
    accelerators: tuple[Accelerator, ...]
    python: tuple[str, ...]
    archs: dict[str, tuple[str, ...]]
    include: tuple[str, ...]
    exclude: tuple[str, ...]


def _resolve_axes(matrix: Matrix, name: str, profile: Profile, facts: TorchFacts, host: str) -> _Axes:
    where = f"profile {name!r}"

    def required(axis: str) -> list[str]:
        value = matrix.axis(profile, axis)
        if value is None:
            raise PlanError(f"{where}: no {axis!r} given, neither in the profile nor at the matrix's top level")
        return value

    torch = []
    for text in required("torch"):
        try:
            release = facts.release(text)
        except KeyError:
            hint = _did_you_mean(text, [*facts.torch_versions, *(r.minor for r in facts.releases)])
            raise PlanError(f"{where}: torch {text} does not exist in the facts table{hint}") from None
        torch.append((text if text.count(".") == 2 else release.latest, release))
    releases = [release for _, release in torch]

    accelerators = []
    for text in required("accelerators"):
        try:
            accelerator = Accelerator.parse(text)
        except ValueError as error:
            raise PlanError(f"{where}: {error}") from None
        if not any(r.has(accelerator) for r in releases):
            built = "; ".join(f"{r.minor}: {r.describe_accelerators(accelerator.kind)}" for r in releases)
            raise PlanError(f"{where}: no torch in this profile was built for {accelerator} ({accelerator.kind} versions built: {built})")
        accelerators.append(accelerator)

    pythons = []
    for text in required("python"):
        python = host if text == HOST_PYTHON else text
        if not any(python in r.python for r in releases):
            supported = "; ".join(f"{r.minor}: {r.python[0]}-{r.python[-1]}" for r in releases)
            raise PlanError(f"{where}: no torch in this profile supports Python {python} ({supported})")
        pythons.append(python)

    archs = {}
    for accel_name, arch_list in (matrix.axis(profile, "archs") or {}).items():
        try:
            accelerator = Accelerator.parse(accel_name)
        except ValueError as error:
            raise PlanError(f"{where}: archs: {error}") from None
        _check_archs(where, accelerator, arch_list)
        archs[accelerator.name] = tuple(arch_list)

    package_names = profile.packages or [p.name for p in matrix.packages]
    return _Axes(
        packages=tuple(matrix.package(n) for n in package_names),
        versions=matrix.axis(profile, "versions") or "latest",
        torch=tuple(torch),
        accelerators=tuple(accelerators),
        python=tuple(pythons),
        archs=archs,
        include=tuple(matrix.axis(profile, "include") or ["*"]),
        exclude=tuple(matrix.axis(profile, "exclude") or []),
    )


def _check_archs(where: str, accelerator: Accelerator, archs: list[str]) -> None:
    pattern = r"\d+\.\d+[af]?(\+PTX)?" if accelerator.kind == "cuda" else r"gfx[0-9a-f]+"
    for arch in archs:
        if not re.fullmatch(pattern, arch):
            example = "'9.0'" if accelerator.kind == "cuda" else "'gfx942'"
            raise PlanError(f"{where}: archs.{accelerator}: {arch!r} is not a {accelerator.kind} arch like {example}")
    if not archs:
        raise PlanError(f"{where}: archs.{accelerator}: the list is empty")


def _combinations(axes: _Axes) -> Iterator[tuple[PackageSpec, SdistPin, str, TorchRelease, Accelerator, str]]:
    for package in axes.packages:
        pins = package.versions if axes.versions == "all" else [package.latest]
        for pin in sorted(pins, key=lambda p: Version(p.version)):
            for (torch, release), accelerator, python in itertools.product(axes.torch, axes.accelerators, axes.python):
                yield package, pin, torch, release, accelerator, python


def _why_impossible(release: TorchRelease, accelerator: Accelerator, python: str) -> str | None:
    if not release.has(accelerator):
        built = release.describe_accelerators(accelerator.kind)
        return f"torch {release.minor} was never built for {accelerator.kind.upper() if accelerator.kind == 'cuda' else 'ROCm'} {accelerator.version}; built: {built}"
    if python not in release.python:
        return f"torch {release.minor} has no wheels for Python {python}; it supports {', '.join(release.python)}"
    return None


def expand(matrix: Matrix, facts: TorchFacts, profile_name: str | None = None, *, host: str | None = None) -> Plan:
    name = profile_name or matrix.default_profile
    axes = _resolve_axes(matrix, name, matrix.profile(name), facts, host or host_python())
    jobs: list[Job] = []
    dropped: list[Dropped] = []
    for package, pin, torch, release, accelerator, python in _combinations(axes):
        job = Job(
            package=package.name,
            version=pin.version,
            sdist=_sdist(package, pin),
            recipe=_recipe(package),
            torch=torch,
            accelerator=accelerator,
            python=python,
            cxx11_abi=release.cxx11_abi_for(accelerator),
            archs=axes.archs.get(accelerator.name) or facts.default_archs(accelerator),
            manylinux=release.manylinux_for(accelerator),
        )
        reason = _why_impossible(release, accelerator, python)
        if reason is None and _selected(job.identifier, axes):
            jobs.append(job)
        elif reason is None:
            dropped.append(Dropped(identifier=job.identifier, reason="not selected by include/exclude"))
        else:
            dropped.append(Dropped(identifier=job.identifier, reason=reason))
    _check_selectors(name, axes, jobs, dropped)
    if not jobs:
        raise PlanError(f"profile {name!r} expands to no jobs", tip="run `wheelwright plan --explain` to see why each was dropped")
    return Plan(profile=name, jobs=tuple(jobs), dropped=tuple(dropped))


def _selected(identifier: str, axes: _Axes) -> bool:
    included = any(fnmatch.fnmatchcase(identifier, p) for p in axes.include)
    return included and not any(fnmatch.fnmatchcase(identifier, p) for p in axes.exclude)


def _check_selectors(name: str, axes: _Axes, jobs: list[Job], dropped: list[Dropped]) -> None:
    """A selector that matches nothing is a typo; a literal include naming an impossible job is an error."""
    everything = [j.identifier for j in jobs] + [d.identifier for d in dropped]
    for pattern in (*axes.include, *axes.exclude):
        if not any(fnmatch.fnmatchcase(i, pattern) for i in everything):
            hint = _did_you_mean(pattern, everything)
            raise PlanError(f"profile {name!r}: selector {pattern!r} matches no job{hint}")
    for pattern in axes.include:
        if _WILDCARDS.search(pattern):
            continue
        for drop in dropped:
            if drop.identifier == pattern and drop.reason != "not selected by include/exclude":
                raise PlanError(f"profile {name!r}: include asks for {pattern}, which cannot be built: {drop.reason}")


def load_plan(matrix_path: Path, profile: str | None = None, *, facts: TorchFacts | None = None, host: str | None = None) -> Plan:
    return expand(load_matrix(matrix_path), facts or load_facts(), profile, host=host)
