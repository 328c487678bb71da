"""apply_recipe: turn an unpacked upstream sdist into one that builds exactly the job's wheel — the job's GPU archs
reach nvcc, the version carries the variant label, Requires-Dist pins the torch it was built against — and say
which environment to build it with."""

from __future__ import annotations

import email.parser
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from builder.core.errors import RecipeError
from builder.plan.arch import Arch
from builder.plan.archs import torch_arch_list
from builder.plan.job import Job, PatchRef
from builder.steps.recipes import pyproject, setup_py
from builder.steps.recipes.facts import PackageFacts, package_facts
from builder.steps.recipes.patches import PATCHES
from builder.steps.recipes.tu_split import SplitChange

log = logging.getLogger(__name__)



@dataclass(frozen=True, kw_only=True)
class RecipeResult:
    changes: tuple[str, ...]  # one line per edit, for the job log
    env: Mapping[str, str]  # to add to the build's environment
    # a split TU's parts (tu_split.py): part's file name -> (the whole TU's file name, the part's share of its cost)
    part_shares: Mapping[str, tuple[str, float]] = field(default_factory=lambda: MappingProxyType({}))


def cuda_gencode_flags(archs: tuple[Arch, ...], where: str) -> tuple[str, ...]:
    """``9.0`` -> ``-gencode arch=compute_90,code=sm_90``; ``12.0+PTX`` also embeds PTX (``code=compute_120``);
    ``compute_90`` embeds the PTX alone."""
    flags: list[str] = []
    for arch in archs:
        if arch.kind != "cuda" or arch.minor > 9:  # sm_XY: a one-digit minor
            raise RecipeError(f"{where}: '{arch}' is not a CUDA arch like '9.0', '9.0a', '12.0+PTX' or 'compute_90'")
        if arch.has_sass:
            flags += ["-gencode", f"arch=compute_{arch.number},code=sm_{arch.number}"]
        if arch.ptx:
            flags += ["-gencode", f"arch=compute_{arch.number},code=compute_{arch.number}"]
    return tuple(flags)


def rocm_offload_flags(archs: tuple[Arch, ...], where: str) -> tuple[str, ...]:
    bad = [str(arch) for arch in archs if arch.kind != "rocm"]
    if bad:
        raise RecipeError(f"{where}: {bad} are not ROCm archs like 'gfx942'")
    return tuple(f"--offload-arch={arch}" for arch in archs)


def arch_flags(job: Job, where: str) -> tuple[str, ...] | None:
    """The only arch flags nvcc/hipcc may receive; None when torch's arch-list variable decides (torch-arch-list)."""
    if job.recipe.arch_control != "gencode-rewrite":
        return None
    if job.accelerator.kind == "cuda":
        return cuda_gencode_flags(job.archs, where)
    return rocm_offload_flags(job.archs, where)


def build_env(job: Job, facts: PackageFacts) -> dict[str, str]:
    """The recipe's switches, the label for upstream's own version logic, the ABI and the arch lists."""
    env = dict(job.recipe.env)
    env[facts.local_version_env] = job.label
    if job.recipe.abi_env:
        env[job.recipe.abi_env] = "TRUE" if job.cxx11_abi else "FALSE"
    return env | arch_env(job, facts)


def arch_env(job: Job, facts: PackageFacts | None = None) -> dict[str, str]:
    """The arch-list variables, set here alone: TORCH_CUDA_ARCH_LIST for CUDA; PYTORCH_ROCM_ARCH for ROCm, and the
    package's own variable where ``facts`` name one."""
    if job.accelerator.kind == "cuda":
        return {"TORCH_CUDA_ARCH_LIST": torch_arch_list(job.archs)}
    archs = ";".join(map(str, job.archs))
    return {"PYTORCH_ROCM_ARCH": archs, **({facts.rocm_arch_env: archs} if facts else {})}


def expected_env_reads(job: Job, facts: PackageFacts) -> dict[str, str | None]:
    """Variables setup.py must read; with the value that must switch something on, where there is one."""
    expected: dict[str, str | None] = {name: value for name, value in job.recipe.env}
    if job.recipe.abi_env:
        expected[job.recipe.abi_env] = "TRUE" if job.cxx11_abi else None
    expected[facts.local_version_env] = None
    if job.accelerator.kind == "rocm":
        expected[facts.rocm_arch_env] = None
    return expected


def check_sdist_version(root: Path, job: Job, where: str) -> None:
    """The unpacked sdist must be the version the job names (a stale or mixed-up unpack would be mislabelled)."""
    try:
        metadata = email.parser.Parser().parsestr((root / "PKG-INFO").read_text(encoding="utf-8"), headersonly=True)
        found = Version(metadata["Version"] or "")
    except (OSError, InvalidVersion) as error:
        raise RecipeError(f"{where}: cannot read the sdist's version from {root / 'PKG-INFO'}: {error}") from None
    if found != Version(job.version):
        raise RecipeError(f"{where}: {root} holds version {found}, not {job.version}")


def patch_applies(ref: PatchRef, job: Job) -> bool:
    versions, torch = SpecifierSet(ref.versions), SpecifierSet(ref.torch)
    return versions.contains(job.version, prereleases=True) and torch.contains(job.torch, prereleases=True)


def select_patches(job: Job, where: str) -> list[PatchRef]:
    """The job's named patches whose version and torch ranges match it."""
    selected = []
    for ref in job.recipe.patches:
        if ref.name not in PATCHES:
            raise RecipeError(f"{where}: unknown patch {ref.name!r} (known: {', '.join(sorted(PATCHES))})")
        if patch_applies(ref, job):
            selected.append(ref)
        else:
            log.debug("%s: patch %s skipped (versions %r, torch %r)", where, ref.name, ref.versions, ref.torch)
    return selected


def run_patches(
    root: Path, job: Job, refs: list[PatchRef], where: str
) -> tuple[list[str], dict[str, tuple[str, float]]]:
    """The patches' changes, and the parts of the TUs they split with each part's share of its TU's cost. A patch
    that applies but changes nothing is an error: upstream moved on and the patch must follow."""
    changes: list[str] = []
    shares: dict[str, tuple[str, float]] = {}
    for ref in refs:
        made = PATCHES[ref.name](root, job)
        if not made:
            raise RecipeError(f"{where}: patch {ref.name} applies (torch {job.torch}) but found nothing to change")
        changes += [f"patch {ref.name}: {change}" for change in made]
        for change in made:
            if isinstance(change, SplitChange):
                shares.update({part: (change.whole, share) for part, share in change.shares.items()})
    return changes, shares


def _read(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise RecipeError(f"{where}: cannot read {path.name}: {error}") from None


@dataclass(frozen=True, kw_only=True)
class _Checked:
    """What checking the sdist against the recipe found out."""

    shape: setup_py.SetupShape
    requirements_in: str  # pyproject.SETUP_PY or pyproject.PYPROJECT
    arch_flags: tuple[str, ...] | None


def check_sources(setup_text: str, pyproject_text: str | None, job: Job, facts: PackageFacts, where: str) -> _Checked:
    """Everything the edits rely on, checked before any file changes."""
    shape = setup_py.read_shape(setup_text, where)
    setup_py.check_env_reads(shape, expected_env_reads(job, facts), where)
    pyproject.check_version_dynamic(pyproject_text, where)
    source = pyproject.requirements_source(pyproject_text, where)
    if source == pyproject.SETUP_PY:
        setup_py.check_install_requires_torch(shape, where)
    flags = arch_flags(job, where)
    if flags is not None:
        setup_py.check_arch_flags(shape, job.accelerator.kind, where)
    return _Checked(shape=shape, requirements_in=source, arch_flags=flags)


def prelude_values(job: Job, checked: _Checked) -> dict[str, object]:
    """WHEELWRIGHT_JOB in the patched setup.py (see prelude.py)."""
    return {
        "identifier": job.identifier,
        "version": job.local_version,
        "torch_requirement": job.torch_requirement,
        "torch_in_install_requires": checked.requirements_in == pyproject.SETUP_PY,
        "arch_kind": job.accelerator.kind,
        "arch_flags": list(checked.arch_flags) if checked.arch_flags is not None else None,
    }


def plan_edits(root: Path, job: Job, facts: PackageFacts, where: str) -> dict[Path, tuple[str, str]]:
    """The new text of each file the recipe rewrites, with a one-line description for the job log."""
    setup_text = _read(root / "setup.py", where)
    pyproject_path = root / "pyproject.toml"
    pyproject_text = _read(pyproject_path, where) if pyproject_path.exists() else None
    checked = check_sources(setup_text, pyproject_text, job, facts, where)
    flags = checked.arch_flags
    arch_note = " ".join(flags) if flags is not None else f"archs left to torch ({';'.join(map(str, job.archs))})"
    patched_setup = setup_py.inject_prelude(setup_text, checked.shape, prelude_values(job, checked), where)
    summary = f"version {job.local_version}, {job.torch_requirement}, {arch_note}"
    edits = {root / "setup.py": (patched_setup, f"setup.py: setup() routed through {setup_py.WRAPPER}(): {summary}")}
    if checked.requirements_in == pyproject.PYPROJECT and pyproject_text is not None:
        patched = pyproject.pin_torch(pyproject_text, job.torch_requirement, where)
        edits[pyproject_path] = (patched, f"pyproject.toml: dependencies torch -> {job.torch_requirement}")
    return edits


def apply_recipe(source_root: Path, job: Job) -> RecipeResult:
    """Edit the freshly unpacked sdist at ``source_root`` for ``job``; the env to build it with comes back."""
    where = f"{job.package} {job.version} ({job.identifier})"
    facts = package_facts(job.package)
    check_sdist_version(source_root, job, where)
    edits = plan_edits(source_root, job, facts, where)
    patches = select_patches(job, where)
    changes = []
    for path, (text, description) in edits.items():
        path.write_text(text, encoding="utf-8")
        changes.append(description)
    patched, part_shares = run_patches(source_root, job, patches, where)
    changes += patched
    env = build_env(job, facts)
    changes.append("env: " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    for change in changes:
        log.info("%s: %s", job.identifier, change)
    return RecipeResult(changes=tuple(changes), env=MappingProxyType(env), part_shares=MappingProxyType(part_shares))
