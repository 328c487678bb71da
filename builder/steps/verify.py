"""The verify gate: a repaired wheel is published only when its metadata, linked libraries, symbol versions, GPU
archs and its import next to the job's torch all check out; otherwise it is quarantined with the reasons."""

from __future__ import annotations

import contextvars
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from types import MappingProxyType
from typing import Any

from auditwheel.policy import Policy, WheelPolicies
from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from builder.core.errors import WheelError
from builder.core.fatbin import arch_key
from builder.core.runner import run
from builder.core.wheelname import InvalidWheelFilename, WheelFilename
from builder.plan.accelerator import torch_minor
from builder.plan.archs import split
from builder.plan.job import Job
from builder.steps import provenance
from builder.steps.elf import ElfFacts, tree_elf_facts, unpacked
from builder.steps.environment import RuntimeEnv
from builder.steps.platform import platform_of
from builder.steps.repair import Excludes, load_excludes, manylinux_policies, target_policy

log = logging.getLogger(__name__)

SYMBOL_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")  # the families recorded in every report


@dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str
    skipped: bool = False  # not checked (and so neither passed nor failed); the detail says why

    @property
    def outcome(self) -> str:
        return "SKIP" if self.skipped else "PASS" if self.ok else "FAIL"


def passed(name: str, detail: str) -> Check:
    return Check(name=name, ok=True, detail=detail)


def failed(name: str, detail: str) -> Check:
    return Check(name=name, ok=False, detail=detail)


def skipped(name: str, reason: str) -> Check:
    return Check(name=name, ok=True, detail=reason, skipped=True)


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    wheel: str
    job: str
    checks: tuple[Check, ...]
    symbol_versions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # {"GLIBC": "2.34"}
    needed: tuple[str, ...] = ()
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f"{check.name}: {check.detail}" for check in self.checks if not check.ok)

    @property
    def skipped(self) -> tuple[str, ...]:
        return tuple(f"{check.name}: {check.detail}" for check in self.checks if check.skipped)

    def describe(self) -> str:
        """The report as text, failures first: what a quarantined wheel's reason file holds."""
        verdict = "passed verification" if self.ok else "FAILED verification"
        lines = [f"{self.wheel} {verdict} for job {self.job}"]
        order = {"FAIL": 0, "SKIP": 1, "PASS": 2}
        lines += [f"{c.outcome} {c.name}: {c.detail}" for c in sorted(self.checks, key=lambda c: order[c.outcome])]
        lines += [f"WARNING {warning}" for warning in self.warnings]
        symbols = ", ".join(f"{family} {version}" for family, version in self.symbol_versions.items()) or "none"
        lines.append(f"symbol versions needed: {symbols}")
        lines.append(f"NEEDED: {', '.join(self.needed) or 'none'}")
        lines.append(f"SASS: {', '.join(self.sass) or 'none'}; PTX: {', '.join(self.ptx) or 'none'}")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, object]:
        return {
            "wheel": self.wheel,
            "job": self.job,
            "ok": self.ok,
            "checks": [{"name": c.name, "outcome": c.outcome, "detail": c.detail} for c in self.checks],
            "symbol_versions": dict(self.symbol_versions),
            "needed": list(self.needed),
            "sass": list(self.sass),
            "ptx": list(self.ptx),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, kw_only=True)
class WheelFacts:
    """What verify reads from a wheel before judging it."""

    filename: str
    metadata: str  # the METADATA file's text, "" when missing
    files: tuple[str, ...]
    elves: tuple[ElfFacts, ...]


# --- reading ---------------------------------------------------------------------------------------------------------


def inspect_wheel(wheel: Path) -> WheelFacts:
    with unpacked(wheel) as root:
        files = tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()))
        metadata = [root / f for f in files if f.count("/") == 1 and f.endswith(".dist-info/METADATA")]
        text = metadata[0].read_text(encoding="utf-8", errors="replace") if len(metadata) == 1 else ""
        return WheelFacts(filename=wheel.name, metadata=text, files=files, elves=tree_elf_facts(root))


def version_key(version: str) -> tuple[int, ...] | None:
    """(2, 34) for "2.34"; None for versions that are not numbers (GLIBC_PRIVATE, CXXABI_TM_1)."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def required_versions(elves: Iterable[ElfFacts]) -> dict[str, set[str]]:
    """Symbol versions needed by every ELF in the wheel, by family: {"GLIBC": {"2.2.5", "2.34"}}."""
    families: dict[str, set[str]] = {}
    for elf in elves:
        for versions in elf.symbol_versions.values():
            for symbol in versions:
                family, _, version = symbol.partition("_")
                families.setdefault(family, set()).add(version)
    return families


def highest(versions: Iterable[str]) -> str | None:
    numeric = [v for v in versions if version_key(v) is not None]
    return max(numeric, key=lambda v: version_key(v) or (), default=None)


# --- judging ---------------------------------------------------------------------------------------------------------


def claimed_policy(filename: str, policies: WheelPolicies) -> Policy | None:
    """The manylinux policy the filename promises; with several tags, the oldest, as pip on that system reads it."""
    try:
        platforms = WheelFilename.parse(filename).platforms
    except InvalidWheelFilename:
        return None
    claimed = []
    for platform in platforms:
        try:
            claimed.append(policies.get_policy_by_name(platform))
        except LookupError:
            continue
    claimed = [p for p in claimed if p != policies.linux]
    return max(claimed, default=None)


def check_name(facts: WheelFacts, metadata: Mapping[str, Any], job: Job) -> Check:
    in_metadata = str(metadata.get("name", ""))
    in_filename = _filename_part(facts.filename, "dist")
    if canonicalize_name(in_metadata) != canonicalize_name(job.package) or in_filename != job.dist_name:
        found = f"METADATA Name {in_metadata!r}, filename {in_filename!r}"
        return failed("name", f"{found}; the job builds {job.package!r} (filename {job.dist_name!r})")
    return passed("name", f"{in_metadata} ({in_filename} in the filename)")


def check_version(facts: WheelFacts, metadata: Mapping[str, Any], job: Job) -> Check:
    in_metadata = str(metadata.get("version", ""))
    in_filename = _filename_part(facts.filename, "version_text")
    try:
        same = Version(in_metadata) == Version(in_filename) == Version(job.local_version)
    except InvalidVersion:
        same = False
    detail = f"METADATA Version {in_metadata!r}, filename {in_filename!r}"
    if not same:
        return failed("version", f"{detail}; expected {job.local_version!r} (the label {job.label} included)")
    return passed("version", detail)


def _filename_part(filename: str, part: str) -> str:
    """The name or version as the filename writes it; "" when the filename does not parse (check_tags says why)."""
    try:
        return str(getattr(WheelFilename.parse(filename), part))
    except InvalidWheelFilename:
        return ""


def check_requires_torch(metadata: Mapping[str, Any], job: Job) -> Check:
    expected = Requirement(job.torch_requirement)
    found = []
    for line in metadata.get("requires_dist", []):
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            return failed("requires-torch", f"Requires-Dist {line!r} does not parse: {error}")
        if canonicalize_name(requirement.name) == "torch":
            found.append(requirement)
    shown = ", ".join(repr(str(r)) for r in found) or "none"
    if len(found) != 1 or found[0].specifier != expected.specifier or found[0].marker or found[0].extras:
        return failed("requires-torch", f"Requires-Dist for torch: {shown}; expected exactly {str(expected)!r}")
    return passed("requires-torch", f"Requires-Dist: {found[0]}")


def check_tags(facts: WheelFacts, job: Job, policy: Policy | None) -> Check:
    try:
        tags = WheelFilename.parse(facts.filename).tags
    except InvalidWheelFilename as error:
        return failed("tags", str(error))
    shown = ".".join(sorted(str(tag) for tag in tags))
    python_ok = all(t.interpreter == job.interpreter_tag and t.abi == job.abi_tag for t in tags)
    platform_ok = all(t.platform.endswith("_" + job.platform) for t in tags)
    if not (python_ok and platform_ok):
        return failed("tags", f"{shown}; the job builds {job.interpreter_tag}-{job.abi_tag} for {job.platform}")
    if policy is None:
        return failed("tags", f"{shown} names no manylinux policy: the wheel was not repaired")
    return passed("tags", shown)


def _provider(soname: str, job: Job, excludes: Excludes, bundled: set[str], policy: Policy) -> str | None:
    """Why ``soname`` may be needed: torch provides it, the wheel bundles it, or the policy allows it."""
    if soname.startswith("ld-linux") or soname in policy.whitelist:
        return "system"
    if excludes.match(soname, job.accelerator.kind):
        return "torch"
    if soname in bundled:
        return "bundled"
    return None


def check_needed(facts: WheelFacts, job: Job, excludes: Excludes, policy: Policy | None) -> Check:
    if policy is None:
        return failed("needed-libraries", "no manylinux platform tag to judge the libraries against")
    bundled = {elf.name for elf in facts.elves}
    by_provider: dict[str, set[str]] = {"torch": set(), "bundled": set(), "system": set()}
    problems = []
    for elf in facts.elves:
        for soname in elf.needed:
            provider = _provider(soname, job, excludes, bundled, policy)
            if provider is None:
                problems.append(f"{elf.path} needs {soname}: not provided by torch ({excludes.source}), "
                                f"not bundled in the wheel, not allowed by {policy.name}")
            else:
                by_provider[provider].add(soname)
    if problems:
        return failed("needed-libraries", "; ".join(problems))
    summary = "; ".join(f"{who}: {', '.join(sorted(libs))}" for who, libs in by_provider.items() if libs)
    return passed("needed-libraries", summary or "no ELF file needs any library")


def check_symbol_versions(facts: WheelFacts, policy: Policy | None) -> Check:
    if policy is None:
        return failed("symbol-versions", "no manylinux platform tag to judge the symbol versions against")
    required = required_versions(facts.elves)
    problems = []
    for family, allowed in sorted(policy.symbol_versions.items()):
        too_new = sorted(required.get(family, set()) - allowed, key=lambda v: version_key(v) or ())
        if too_new:
            limit = highest(allowed) or "none"
            problems.append(f"{', '.join(family + '_' + v for v in too_new)} (allowed up to {family}_{limit})")
    if problems:
        return failed("symbol-versions", f"newer than {policy.name} allows: {'; '.join(problems)}")
    found = ", ".join(f"{f}_{highest(required[f])}" for f in SYMBOL_FAMILIES if highest(required.get(f, ())))
    return passed("symbol-versions", f"within {policy.name}: highest {found or 'none'}")


def expected_archs(job: Job) -> tuple[frozenset[str], frozenset[str]]:
    """(SASS, PTX) the job asks for: "8.0" is SASS only, "9.0+PTX" SASS and PTX for 9.0, "compute_90" PTX only."""
    sass, ptx = split(job.archs)
    return frozenset(sass), frozenset(ptx)


def _listed(archs: Iterable[str]) -> str:
    return ", ".join(sorted(archs, key=arch_key)) or "none"


def check_gpu_archs(facts: WheelFacts, job: Job) -> Check:
    if job.accelerator.kind != "cuda":
        unchecked = ", ".join(map(str, job.archs))
        return skipped("gpu-archs", f"{job.accelerator} code objects are not read yet; {unchecked} unchecked")
    sass, ptx = expected_archs(job)
    want = f"SASS {_listed(sass)}; PTX {_listed(ptx)}"
    kernels = [elf for elf in facts.elves if not elf.gpu.empty]
    if not kernels:
        return failed("gpu-archs", f"no shared object in the wheel carries CUDA kernels; expected {want}")
    problems = []
    for elf in kernels:
        if elf.gpu.sass != sass or elf.gpu.ptx != ptx:
            gaps = _arch_gaps(elf, sass, ptx)
            problems.append(f"{elf.path}: expected {want}, found {elf.gpu.describe()} ({gaps})")
    if problems:
        return failed("gpu-archs", "; ".join(problems))
    return passed("gpu-archs", "; ".join(f"{elf.path}: {elf.gpu.describe()}" for elf in kernels))


def _arch_gaps(elf: ElfFacts, sass: frozenset[str], ptx: frozenset[str]) -> str:
    gaps = []
    if sass - elf.gpu.sass:
        gaps.append(f"no kernel image for {_listed(sass - elf.gpu.sass)}")
    for label, extra in (("SASS", elf.gpu.sass - sass), ("PTX", elf.gpu.ptx - ptx)):
        if extra:
            gaps.append(f"unexpected {label} {_listed(extra)}")
    if ptx - elf.gpu.ptx:
        gaps.append(f"missing PTX {_listed(ptx - elf.gpu.ptx)}")
    return "; ".join(gaps)


# --- the platform, proven from the bytes (issue 29; mamba#891 shipped an x86_64 .so inside an aarch64 wheel) ---------


def check_elf_machine(facts: WheelFacts, job: Job) -> Check:
    """Every ELF file in the wheel is for the job's CPU (e_machine), whatever the filename or tag says."""
    platform = platform_of(job)
    wrong = [f"{elf.path} is {elf.machine}" for elf in facts.elves if elf.machine and elf.machine != platform.name]
    if wrong:
        return failed("elf-machine", f"{'; '.join(wrong)}, the job builds {job.platform}: the wheel would not load")
    if not facts.elves:
        return failed("elf-machine", "the wheel holds no ELF file")
    return passed("elf-machine", f"{len(facts.elves)} ELF files, each {job.platform}")


def check_extension_suffix(facts: WheelFacts, job: Job) -> Check:
    """Every extension module carries the suffix the target's CPython imports (its sysconfig's EXT_SUFFIX): an x86
    setup.py names it ``-x86_64-linux-gnu``, which aarch64 Python does not look for."""
    want = platform_of(job).extension_suffix(job.python)
    modules = [elf.path for elf in facts.elves if ".cpython-" in elf.name]
    wrong = [path for path in modules if not path.endswith(want)]
    if wrong:
        return failed("extension-suffix", f"{', '.join(wrong)}: CPython {job.python} on {job.platform} imports "
                                          f"*{want}")
    if not modules:
        return skipped("extension-suffix", "no file named like an extension module (*.cpython-*.so)")
    return passed("extension-suffix", f"{', '.join(modules)}")


def check_load_alignment(facts: WheelFacts, job: Job) -> Check:
    """Every PT_LOAD segment is aligned to the platform's largest page: on a 64 KiB-page kernel (Grace hosts often
    run one) a segment aligned to 4 KiB cannot be mapped and the module does not load."""
    page = platform_of(job).page_size
    short = [f"{elf.path} ({', '.join(hex(a) for a in elf.load_alignments if a < page)})"
             for elf in facts.elves if any(a < page or a % page for a in elf.load_alignments)]
    if short:
        return failed("load-alignment", f"PT_LOAD segments aligned below {page:#x}: {'; '.join(short)}")
    return passed("load-alignment", f"every PT_LOAD segment aligned to {page:#x} or more")


def platform_checks(facts: WheelFacts, job: Job) -> tuple[Check, ...]:
    return check_elf_machine(facts, job), check_extension_suffix(facts, job), check_load_alignment(facts, job)


def _abi_name(cxx11: bool) -> str:
    return "cxx11 (_GLIBCXX_USE_CXX11_ABI=1)" if cxx11 else "pre-cxx11 (_GLIBCXX_USE_CXX11_ABI=0)"


def check_cxx_abi(facts: WheelFacts, job: Job) -> Check:
    """The symbols an extension shares with torch must be mangled for torch's C++ ABI; the other ABI's names are
    symbols torch does not define ("undefined symbol: _ZN3c10..." at import)."""
    want = "cxx11" if job.cxx11_abi else "pre-cxx11"
    problems, seen = [], []
    for elf in facts.elves:
        found = elf.abi.abi
        if found is None:
            continue
        seen.append(f"{elf.path}: {found} ({elf.abi.cxx11 + elf.abi.pre_cxx11} symbols shared with torch)")
        if found != want:
            wrong = elf.abi.pre_cxx11_examples if job.cxx11_abi else elf.abi.cxx11_examples
            problems.append(f"{elf.path} uses the {found} ABI (e.g. {wrong[0] if wrong else '?'})")
    if problems:
        return failed(
            "cxx-abi",
            f"C++ ABI mismatch: torch {job.torch} was built with the {_abi_name(job.cxx11_abi)} ABI, "
            f"but {'; '.join(problems)}",
        )
    if not seen:
        return passed("cxx-abi", "no symbol shared with torch takes a std::string or std::list; either ABI loads")
    return passed("cxx-abi", f"{want}, as torch {job.torch}: {'; '.join(seen)}")


def target_warnings(policy: Policy | None, job: Job, policies: WheelPolicies) -> tuple[str, ...]:
    """Not a failure: the tag is honest; the wheel just installs on fewer systems than the job aimed for."""
    target = target_policy(job, policies)
    if policy is None or not policy < target:
        return ()
    return (f"tagged {policy.name}, newer than the job's target {target.name}",)


def evaluate(facts: WheelFacts, job: Job, *, excludes: Excludes, policies: WheelPolicies) -> tuple[Check, ...]:
    """Every check that needs only the wheel's own contents (everything but the import)."""
    if not facts.metadata:
        return (failed("metadata", "the wheel has no single <name>-<version>.dist-info/METADATA"),)
    metadata, _ = parse_email(facts.metadata)
    policy = claimed_policy(facts.filename, policies)
    return (
        check_name(facts, metadata, job),
        check_version(facts, metadata, job),
        check_requires_torch(metadata, job),
        check_tags(facts, job, policy),
        *platform_checks(facts, job),
        check_needed(facts, job, excludes, policy),
        check_symbol_versions(facts, policy),
        check_gpu_archs(facts, job),
        check_cxx_abi(facts, job),
    )


def recorded_facts(facts: WheelFacts) -> dict[str, Any]:
    required = required_versions(facts.elves)
    symbols = {f: v for f in SYMBOL_FAMILIES if (v := highest(required.get(f, ())))}
    return {
        "symbol_versions": MappingProxyType(symbols),
        "needed": tuple(sorted({soname for elf in facts.elves for soname in elf.needed})),
        "sass": tuple(sorted({a for elf in facts.elves for a in elf.gpu.sass}, key=arch_key)),
        "ptx": tuple(sorted({a for elf in facts.elves for a in elf.gpu.ptx}, key=arch_key)),
    }


# --- the import check ------------------------------------------------------------------------------------------------

# Runs in the throwaway venv: torch first (as users do), then each module; one line per module, so every failure
# is reported, not just the first.
_PROBE = """\
import importlib, sys
import torch
print("torch", torch.__version__)
failures = 0
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:
        failures += 1
        print(f"IMPORT FAILED {name}: {type(error).__name__}: {error}")
    else:
        print(f"imported {name}")
sys.exit(1 if failures else 0)
"""


def _tail(output: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])


def _venv_with_torch(runtime: RuntimeEnv, venv: Path) -> Path:
    """A fresh venv of the runtime's interpreter that also sees the runtime's torch through a .pth file."""
    run([runtime.python, "-m", "venv", "--without-pip", venv], step="verify: create venv")
    (site_packages,) = venv.glob("lib/python*/site-packages")
    (site_packages / "wheelwright-runtime.pth").write_text(f"{runtime.site_packages}\n")
    return venv / "bin" / "python"


def check_import(wheel: Path, job: Job, runtime: RuntimeEnv | None) -> Check:
    if runtime is None:
        return skipped("import", "no runtime environment (interpreter + torch) was given, so the import is unchecked")
    if not job.recipe.import_names:
        return skipped("import", f"the recipe of {job.package} names no import_names")
    with TemporaryDirectory(prefix="wheelwright-verify-") as tmp:
        python = _venv_with_torch(runtime, Path(tmp) / "venv")
        install: list[str | os.PathLike[str]] = [
            sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
            "--no-cache-dir", "--disable-pip-version-check", "--quiet", wheel,
        ]
        installed = run(install, step="verify: install wheel", check=False, capture=True)
        if installed.returncode != 0:
            return failed("import", f"pip could not install the wheel into a clean venv: {_tail(installed.output)}")
        probe: list[str | os.PathLike[str]] = [python, "-I", "-c", _PROBE, *job.recipe.import_names]
        result = run(probe, step="verify: import", cwd=Path(tmp), check=False, capture=True)
    return _import_outcome(result.returncode, result.output, job)


def _import_outcome(returncode: int, output: str, job: Job) -> Check:
    lines = output.splitlines()
    torch = next((line.split()[1] for line in lines if line.startswith("torch ")), None)
    failures = [line.removeprefix("IMPORT FAILED ") for line in lines if line.startswith("IMPORT FAILED ")]
    if torch is None:
        return failed("import", f"import torch failed in the runtime: {_tail(output)}")
    if torch_minor(torch) != job.torch_minor:
        return failed("import", f"the runtime holds torch {torch}, but the wheel was built for torch {job.torch}")
    if returncode != 0 or failures:
        return failed("import", "; ".join(failures) or _tail(output))
    return passed("import", f"import torch ({torch}), {', '.join(job.recipe.import_names)} in a clean venv")


def check_provenance(wheel: Path, facts: WheelFacts) -> Check:
    """The wheel's wheelwright.json must describe what the wheel holds (see builder/steps/provenance.py)."""
    ok, detail = provenance.gate(wheel, facts.elves)
    return passed("provenance", detail) if ok else failed("provenance", detail)


# --- the gate --------------------------------------------------------------------------------------------------------


Importer = Callable[[Path, Job], Check]  # the import check of another platform's wheel (builder/steps/emulate.py)


def verify_wheel(
    wheel: Path, job: Job, *, runtime: RuntimeEnv | None, excludes: Excludes | None = None,
    importer: Importer | None = None,
) -> VerifyReport:
    """Judge ``wheel`` (repaired) for ``job``; never raises for a bad wheel, the report says what is wrong.

    The import check (a fresh venv, pip, the import: mostly waiting on subprocesses) runs beside the reading of
    the wheel and the static checks, which for a full-arch wheel take as long; the report is the same. ``importer``
    replaces it for a wheel this machine cannot import natively (an aarch64 one, under emulation)."""
    excludes = excludes or load_excludes()
    policies = manylinux_policies(job.platform)
    import_check: Importer = importer or (lambda built, checked: check_import(built, checked, runtime))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify-import") as importer_pool:
        imported = importer_pool.submit(contextvars.copy_context().run, import_check, wheel, job)
        try:
            facts = inspect_wheel(wheel)
        except WheelError as error:
            imported.cancel()
            return VerifyReport(wheel=wheel.name, job=job.identifier, checks=(failed("readable", str(error)),))
        checks = evaluate(facts, job, excludes=excludes, policies=policies)
        checks += (check_provenance(wheel, facts),)
        checks += (imported.result(),)
    policy = claimed_policy(facts.filename, policies)
    report = VerifyReport(wheel=wheel.name, job=job.identifier, checks=checks,
                          warnings=target_warnings(policy, job, policies), **recorded_facts(facts))
    for check in report.checks:
        log.log(logging.WARNING if not check.ok else logging.INFO, "verify %s: %s %s: %s",
                report.wheel, check.outcome, check.name, check.detail)
    return report


def quarantine(wheel: Path, report: VerifyReport, quarantine_dir: Path) -> Path:
    """Move ``wheel`` into ``quarantine_dir`` beside ``<wheel>.reason.txt``; returns its new path."""
    quarantine_dir.mkdir(parents=True, exist_ok=True)
    destination = quarantine_dir / wheel.name
    (quarantine_dir / f"{wheel.name}.reason.txt").write_text(report.describe(), encoding="utf-8")
    shutil.move(os.fspath(wheel), destination)
    log.warning("quarantined %s: %s", wheel.name, "; ".join(report.reasons) or "no failed check")
    return destination
