"""Expansion: matrix.yaml x torch facts -> the jobs of a profile, plus every combination dropped and why."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import re
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from builder.core.errors import PlanError, did_you_mean
from builder.core.settings import setting
from builder.plan.accelerator import FREE_THREADED, Accelerator
from builder.plan.arch import Arch
from builder.plan.archs import ArchChoice, ArchNote, apply_known_bad
from builder.plan.facts import load_facts
from builder.plan.job import Job, PatchRef, Recipe, Sdist, UpstreamFiles
from builder.plan.matrix import DEFAULT_TORCH_INDEX, HOST_PYTHON, Matrix, PackageSpec, SdistPin, load_matrix
from builder.plan.releases import DEFAULT_PLATFORM, TorchFacts, TorchRelease

_WILDCARDS = re.compile(r"[*?\[]")
NOT_SELECTED = "not selected by include/exclude"


@dataclass(frozen=True, kw_only=True)
class Dropped:
    identifier: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Plan:
    profile: str
    jobs: tuple[Job, ...]
    dropped: tuple[Dropped, ...]
    # per job: a profile's package_archs chosen, and what the arch facts changed (builder/data/archs.toml)
    arch_notes: tuple[ArchChoice | ArchNote, ...] = ()
    torch_index: str = DEFAULT_TORCH_INDEX  # matrix.yaml's template; WHEELWRIGHT_TORCH_INDEX overrides it at build

    def select(self, pattern: str | None) -> Plan:
        if pattern is None:
            return self
        if not pattern.strip():
            # An unset CI variable expands to '': selecting everything then would start the whole matrix.
            raise PlanError(
                f"--select {pattern!r} is empty", tip="give an fnmatch pattern, e.g. '*pt214*cp311*', or leave it out"
            )
        jobs = tuple(j for j in self.jobs if fnmatch.fnmatchcase(j.identifier, pattern))
        if not jobs:
            hint = did_you_mean(pattern, [j.identifier for j in self.jobs])
            raise PlanError(
                f"--select {pattern!r} matches none of the {len(self.jobs)} jobs of profile {self.profile!r}{hint}",
                tip=f"`wheelwright plan --profile {self.profile}` lists the job identifiers",
            )
        kept = {j.identifier for j in jobs}
        notes = tuple(n for n in self.arch_notes if n.identifier in kept)
        return dataclasses.replace(self, jobs=jobs, arch_notes=notes)

    def only(self, identifiers: Sequence[str]) -> Plan:
        """Exactly the jobs named (the container backend's hand-off); an unknown identifier is an error."""
        if not identifiers:
            return self
        known = {j.identifier for j in self.jobs}
        for identifier in identifiers:
            if identifier not in known:
                hint = did_you_mean(identifier, known)
                raise PlanError(f"--only {identifier!r} is not a job of profile {self.profile!r}{hint}")
        wanted = set(identifiers)
        jobs = tuple(j for j in self.jobs if j.identifier in wanted)
        return dataclasses.replace(self, jobs=jobs, arch_notes=())

    def as_github_matrix(self) -> dict[str, list[dict[str, object]]]:
        return {"include": [job.as_matrix_entry() for job in self.jobs]}


def host_python() -> str:
    """The ``host`` Python; a builder container is told the host's (WHEELWRIGHT_HOST_PYTHON) so its plan matches.
    A free-threaded interpreter is "3.13t", the Python its wheels are for."""
    suffix = FREE_THREADED if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return setting("WHEELWRIGHT_HOST_PYTHON") or f"{sys.version_info.major}.{sys.version_info.minor}{suffix}"


def _recipe(package: PackageSpec, version: str) -> Recipe:
    """The package's recipe as it applies to ``version``: env_by_version entries add to env where they match."""
    spec = package.recipe
    env = dict(spec.env)
    for entry in spec.env_by_version:
        if SpecifierSet(entry.versions).contains(version, prereleases=True):
            env.update(entry.env)
    return Recipe(
        env=tuple(sorted(env.items())),
        abi_env=spec.abi_env,
        arch_control=spec.arch_control,
        patches=tuple(PatchRef(name=p.name, versions=p.versions, torch=p.torch) for p in spec.patches),
        import_names=tuple(spec.import_names),
    )


def _sdist(package: PackageSpec, pin: SdistPin) -> Sdist:
    filename = f"{package.name.replace('-', '_')}-{pin.version}.tar.gz"
    upstream = None
    if pin.upstream is not None:
        upstream = UpstreamFiles(
            repo=pin.upstream.repo,
            commit=pin.upstream.commit,
            paths=tuple(pin.upstream.paths),
            tree_digest=pin.upstream.tree_digest,
        )
    return Sdist(filename=filename, sha256=pin.sha256, url=pin.url, upstream=upstream)


def _toolkit(accelerator: Accelerator) -> str:
    return f"{'CUDA' if accelerator.kind == 'cuda' else 'ROCm'} {accelerator.version}"


def never_built(release: TorchRelease, accelerator: Accelerator) -> str:
    built = release.describe_accelerators(accelerator.kind)
    return f"torch {release.minor} was never built for {_toolkit(accelerator)}; built: {built}"


def no_wheels(release: TorchRelease, python: str) -> str:
    return f"torch {release.minor} has no wheels for Python {python}; it supports {', '.join(release.python)}"


def no_platform(release: TorchRelease, accelerator: Accelerator, platform: str) -> str:
    built = ", ".join(release.aarch64) if platform == "aarch64" and release.aarch64 else "none"
    return f"torch {release.minor} has no {platform} wheels for {accelerator}; {platform} CUDA variants: {built}"


def _why_impossible(release: TorchRelease, accelerator: Accelerator, python: str, platform: str) -> str | None:
    if not release.has(accelerator):
        return never_built(release, accelerator)
    if python not in release.python:
        return no_wheels(release, python)
    if not release.has_platform(accelerator, platform):
        return no_platform(release, accelerator, platform)
    return None


@dataclass(frozen=True, kw_only=True)
class _Axes:
    """A profile's axes, resolved against the facts."""

    packages: tuple[PackageSpec, ...]
    versions: str
    torch: tuple[tuple[str, TorchRelease], ...]
    accelerators: tuple[Accelerator, ...]
    python: tuple[str, ...]
    platforms: tuple[str, ...]
    archs: dict[str, tuple[str, ...]]
    package_archs: dict[str, tuple[dict[str, tuple[str, ...]], str]]  # package -> (accelerator -> archs, reason)
    include: tuple[str, ...]
    exclude: tuple[str, ...]


class _Resolver:
    """Reads one profile's axes against the facts. An axis value no torch of the profile can satisfy is an error
    that names its line in matrix.yaml; a single impossible combination is only dropped (see --explain)."""

    def __init__(self, matrix: Matrix, name: str, facts: TorchFacts, host: str) -> None:
        self.matrix, self.name, self.facts, self.host = matrix, name, facts, host
        self.profile = matrix.profile(name)

    def values(self, axis: str) -> Iterator[tuple[str, str]]:
        """(where, value) for each value of an axis; ``where`` is "matrix.yaml:57: profiles.release.torch.3"."""
        values = self.matrix.axis(self.profile, axis)
        loc = self.matrix.axis_loc(self.name, axis)
        if values is None:
            where = self.matrix.locate(("profiles", self.name))
            raise PlanError(f"{where}: no {axis!r} given, neither in the profile nor at the top level")
        for index, value in enumerate(values):
            yield self.matrix.locate((*loc, index)), value

    def torch(self) -> tuple[tuple[str, TorchRelease], ...]:
        resolved = []
        for where, text in self.values("torch"):
            try:
                release = self.facts.release(text)
            except KeyError:
                hint = did_you_mean(text, [*self.facts.torch_versions, *(r.minor for r in self.facts.releases)])
                known = ", ".join(r.minor for r in self.facts.releases)
                tip = "the torch facts are builder/data/torch.toml; docs/matrix.md, 'Adding a torch release', says how"
                raise PlanError(
                    f"{where}: torch {text} is not in the torch facts{hint}; known minors: {known}", tip=tip
                ) from None
            resolved.append((text if text.count(".") == 2 else release.latest, release))
        return tuple(resolved)

    def accelerators(self, releases: Sequence[TorchRelease]) -> tuple[Accelerator, ...]:
        resolved = []
        for where, text in self.values("accelerators"):
            accelerator = Accelerator.parse(text)
            if not any(r.has(accelerator) for r in releases):
                reasons = "; ".join(never_built(r, accelerator) for r in releases)
                raise PlanError(f"{where}: no torch of profile {self.name!r} has {accelerator}: {reasons}")
            resolved.append(accelerator)
        return tuple(resolved)

    def pythons(self, releases: Sequence[TorchRelease]) -> tuple[str, ...]:
        resolved: dict[str, str] = {}
        for where, text in self.values("python"):
            python = self.host if text == HOST_PYTHON else text
            spelled = f"{python} ({HOST_PYTHON!r}, the Python running wheelwright)" if text == HOST_PYTHON else python
            if not any(python in r.python for r in releases):
                reasons = "; ".join(no_wheels(r, spelled) for r in releases)
                raise PlanError(f"{where}: no torch of profile {self.name!r} has Python {spelled}: {reasons}")
            if python in resolved:
                raise PlanError(f"{where}: Python {spelled} is already listed at {resolved[python]}")
            resolved[python] = where
        return tuple(resolved)

    def platforms(self, releases: Sequence[TorchRelease], accelerators: Sequence[Accelerator]) -> tuple[str, ...]:
        """The profile's platforms (x86_64 alone when none is given); one that no (torch, accelerator) of the
        profile was built for is an error at its line."""
        if self.matrix.axis(self.profile, "platforms") is None:
            return (DEFAULT_PLATFORM,)
        resolved = []
        for where, platform in self.values("platforms"):
            if not any(r.has_platform(a, platform) for r in releases for a in accelerators):
                reasons = "; ".join(no_platform(r, a, platform) for r in releases for a in accelerators if r.has(a))
                raise PlanError(f"{where}: no torch of profile {self.name!r} has {platform} wheels: {reasons}")
            resolved.append(platform)
        return tuple(resolved)

    def archs(self, accelerators: Sequence[Accelerator]) -> dict[str, tuple[str, ...]]:
        archs = self.matrix.axis(self.profile, "archs") or {}
        if self.profile.archs is not None:  # the top level may serve many profiles; a profile's own list may not stray
            for accel_name in archs:
                if Accelerator.parse(accel_name) not in accelerators:
                    where = self.matrix.locate(("profiles", self.name, "archs", accel_name))
                    built = ", ".join(a.name for a in accelerators)
                    raise PlanError(f"{where}: the profile does not build {accel_name} (its accelerators: {built})")
        return {Accelerator.parse(name).name: tuple(values) for name, values in archs.items()}

    def package_archs(self, accelerators: Sequence[Accelerator]) -> dict[str, tuple[dict[str, tuple[str, ...]], str]]:
        resolved = {}
        for k, entry in enumerate(self.profile.package_archs):
            for accel_name in entry.archs:
                if Accelerator.parse(accel_name) not in accelerators:
                    where = self.matrix.locate(("profiles", self.name, "package_archs", k, "archs", accel_name))
                    built = ", ".join(a.name for a in accelerators)
                    raise PlanError(f"{where}: the profile does not build {accel_name} (its accelerators: {built})")
            lists = {Accelerator.parse(name).name: tuple(values) for name, values in entry.archs.items()}
            resolved[entry.package] = (lists, entry.reason)
        return resolved

    def resolve(self) -> _Axes:
        torch = self.torch()
        releases = [release for _, release in torch]
        accelerators = self.accelerators(releases)
        return _Axes(
            packages=tuple(
                self.matrix.package(n) for n in self.profile.packages or [p.name for p in self.matrix.packages]
            ),
            versions=self.matrix.axis(self.profile, "versions") or "latest",
            torch=torch,
            accelerators=accelerators,
            python=self.pythons(releases),
            platforms=self.platforms(releases, accelerators),
            archs=self.archs(accelerators),
            package_archs=self.package_archs(accelerators),
            include=tuple(self.matrix.axis(self.profile, "include") or ["*"]),
            exclude=tuple(self.matrix.axis(self.profile, "exclude") or []),
        )


_Combination = tuple[PackageSpec, SdistPin, str, TorchRelease, Accelerator, str, str]


def _combinations(axes: _Axes) -> Iterator[_Combination]:
    for package in axes.packages:
        pins = package.versions if axes.versions == "all" else [package.latest]
        for pin in sorted(pins, key=lambda p: Version(p.version)):
            for (torch, release), accelerator, python, platform in itertools.product(
                axes.torch, axes.accelerators, axes.python, axes.platforms
            ):
                yield package, pin, torch, release, accelerator, python, platform


def _job(combination: _Combination, axes: _Axes, facts: TorchFacts) -> tuple[Job, tuple[ArchChoice | ArchNote, ...]]:
    """The combination's job, its archs corrected by the arch facts (and what chose or changed them)."""
    job = _planned_job(combination, axes, facts)
    chosen = axes.package_archs.get(job.package, ({}, ""))
    choice: tuple[ArchChoice, ...] = ()
    if job.accelerator.name in chosen[0]:
        choice = (ArchChoice(identifier=job.identifier, archs=job.archs, reason=chosen[1]),)
    if job.accelerator.kind != "cuda":
        return job, choice
    archs, notes = apply_known_bad(job.identifier, job.package, job.version, job.accelerator.version, job.archs)
    return (dataclasses.replace(job, archs=archs) if notes else job), (*choice, *notes)


def _planned_job(combination: _Combination, axes: _Axes, facts: TorchFacts) -> Job:
    package, pin, torch, release, accelerator, python, platform = combination
    return Job(
        package=package.name,
        version=pin.version,
        sdist=_sdist(package, pin),
        recipe=_recipe(package, pin.version),
        torch=torch,
        accelerator=accelerator,
        python=python,
        cxx11_abi=release.cxx11_abi_for(accelerator),
        archs=tuple(map(Arch.parse, _archs(package.name, accelerator, axes) or facts.default_archs(accelerator))),
        manylinux=release.manylinux_for(accelerator),
        platform=platform,
    )


def _archs(package: str, accelerator: Accelerator, axes: _Axes) -> tuple[str, ...] | None:
    """The package's own list in the profile, else the profile's list for the accelerator."""
    own = axes.package_archs.get(package, ({}, ""))[0]
    return own.get(accelerator.name) or axes.archs.get(accelerator.name)


def expand(matrix: Matrix, facts: TorchFacts, profile_name: str | None = None, *, host: str | None = None) -> Plan:
    """The jobs of a profile (default: the matrix's default_profile); ``host`` stands in for the ``host`` Python."""
    name = profile_name or matrix.default_profile
    axes = _Resolver(matrix, name, facts, host or host_python()).resolve()
    jobs: list[Job] = []
    dropped: list[Dropped] = []
    notes: list[ArchChoice | ArchNote] = []
    for combination in _combinations(axes):
        job, job_notes = _job(combination, axes, facts)
        _, _, _, release, accelerator, python, platform = combination
        reason = _why_impossible(release, accelerator, python, platform) or (
            None if _selected(job.identifier, axes) else NOT_SELECTED
        )
        if reason is None:
            jobs.append(job)
            notes += job_notes
        else:
            dropped.append(Dropped(identifier=job.identifier, reason=reason))
    _check_selectors(matrix, name, jobs, dropped)
    if not jobs:
        tip = f"`wheelwright plan --profile {name} --explain` says why each combination was dropped"
        raise PlanError(f"profile {name!r} expands to no jobs", tip=tip)
    return Plan(profile=name, jobs=tuple(jobs), dropped=tuple(dropped), arch_notes=tuple(notes),
                torch_index=matrix.torch_index)


def _selected(identifier: str, axes: _Axes) -> bool:
    included = any(fnmatch.fnmatchcase(identifier, p) for p in axes.include)
    return included and not any(fnmatch.fnmatchcase(identifier, p) for p in axes.exclude)


def _check_selectors(matrix: Matrix, name: str, jobs: Sequence[Job], dropped: Sequence[Dropped]) -> None:
    """A selector that matches nothing is a typo; an include that matches only impossible combinations (a literal
    identifier of one, say) asks for something that cannot be built."""
    buildable = [j.identifier for j in jobs] + [d.identifier for d in dropped if d.reason == NOT_SELECTED]
    impossible = {d.identifier: d.reason for d in dropped if d.reason != NOT_SELECTED}
    profile = matrix.profile(name)
    for axis in ("include", "exclude"):
        if matrix.axis(profile, axis) is None:
            continue
        loc = matrix.axis_loc(name, axis)
        for index, pattern in enumerate(matrix.axis(profile, axis)):
            where = matrix.locate((*loc, index))
            if any(fnmatch.fnmatchcase(i, pattern) for i in buildable):
                continue
            example = next((i for i in impossible if fnmatch.fnmatchcase(i, pattern)), None)
            if example is None:
                hint = did_you_mean(pattern, buildable)
                raise PlanError(f"{where}: selector {pattern!r} matches no job of profile {name!r}{hint}")
            if axis == "include":
                what = (
                    f"asks for {pattern}, which"
                    if not _WILDCARDS.search(pattern)
                    else f"{pattern!r} matches only combinations that"
                )
                raise PlanError(f"{where}: include {what} cannot be built: {impossible[example]}")


def load_plan(
    matrix_path: Path, profile: str | None = None, *, facts: TorchFacts | None = None, host: str | None = None
) -> Plan:
    return expand(load_matrix(matrix_path), facts or load_facts(), profile, host=host)
