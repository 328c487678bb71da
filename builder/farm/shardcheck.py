"""A shard's ledger rows as untrusted input: every field a CI artifact hands to ``merge`` is checked for type and
shape, its wheel is a file NAME that parses to the row's package, version+label and Python, its bytes are the ones
the row's sha256 names, and nothing it points at lies outside the shard."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from builder.core.errors import ShardError
from builder.core.hashing import sha256_of
from builder.core.ledger import LedgerEntry, Status
from builder.core.wheelhouse import Layout
from builder.plan.accelerator import base_python, parse_label

_TEXT = ("job_id", "package", "version", "label", "torch", "accelerator", "python", "input_hash")
_OPTIONAL_TEXT = (
    "phase", "log_path", "wheel", "wheel_sha256", "reason", "report", "toolchain", "compile_times",
    "wheel_identity", "torch_wheel",
)
# Job.identifier's characters: a name, a version with its local label, a Python tag, a platform. No separators.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
_PLATFORM = re.compile(r"[a-z0-9_]+")
_PACKAGE = re.compile(r"[A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9]", re.IGNORECASE)  # PEP 508 names
_PYTHON = re.compile(r"3\.[0-9]{1,2}t?")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIP = "this shard's ledger does not describe its own files; rebuild the shard or leave it out (nothing was written)"


def check_row(entry: LedgerEntry, shard: Path) -> None:
    """Refuse the row, naming the shard, its job_id (repr'd, it may be hostile) and the field, unless it is sound."""
    _check_types(entry, shard)
    for field, problem in _shape_problems(entry)[:1]:
        raise _refuse(entry, shard, field, problem)
    _check_files(entry, shard)


def _refuse(entry: LedgerEntry, shard: Path, field: str, problem: str) -> ShardError:
    return ShardError(f"{shard}: job {entry.job_id!r}: {field} {problem}", tip=_TIP)


def _check_types(entry: LedgerEntry, shard: Path) -> None:
    for name in _TEXT:
        if not isinstance(getattr(entry, name), str):
            raise _refuse(entry, shard, name, f"{getattr(entry, name)!r} is not text")
    for name in _OPTIONAL_TEXT:
        if not isinstance(getattr(entry, name), str | None):
            raise _refuse(entry, shard, name, f"{getattr(entry, name)!r} is not text")
    if entry.wheel_size is not None and (isinstance(entry.wheel_size, bool) or not isinstance(entry.wheel_size, int)):
        raise _refuse(entry, shard, "wheel_size", f"{entry.wheel_size!r} is not a whole number")
    if isinstance(entry.updated_at, bool) or not isinstance(entry.updated_at, int | float):
        raise _refuse(entry, shard, "updated_at", f"{entry.updated_at!r} is not a time")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in entry.timings.values()):
        raise _refuse(entry, shard, "timings", f"{entry.timings!r} are not seconds per phase")


def _shape_problems(entry: LedgerEntry) -> list[tuple[str, str]]:
    """(field, problem) for each field of the row that is not what a build writes, first one first."""
    problems = []
    if not _JOB_ID.fullmatch(entry.job_id):
        problems.append(("job_id", "is not a job identifier like 'causal-conv1d-1.7.0+pt214cu130-cp311-x86_64'"))
    if not _PACKAGE.fullmatch(entry.package):
        problems.append(("package", f"{entry.package!r} is not a package name"))
    if not _is_public_version(entry.version):
        problems.append(("version", f"{entry.version!r} is not a version without a local label"))
    try:
        parse_label(entry.label)
    except ValueError:
        problems.append(("label", f"{entry.label!r} is not a variant label like 'pt214cu130'"))
    if not _PYTHON.fullmatch(entry.python):
        problems.append(("python", f"{entry.python!r} is not a Python like '3.11' or '3.13t'"))
    if problems:
        return problems
    prefix = f"{entry.package}-{entry.version}+{entry.label}-{_python_tag(entry.python)}-"
    if not (entry.job_id.startswith(prefix) and _PLATFORM.fullmatch(entry.job_id.removeprefix(prefix))):
        problems.append(("job_id", f"is not the row's job ({prefix}<platform>)"))
    if entry.wheel is not None:
        problems += [("wheel", f"{entry.wheel!r} {problem}") for problem in _wheel_problems(entry, entry.wheel)]
    if entry.status == Status.BUILT and entry.wheel is None:
        problems.append(("wheel", "is missing from a built job's row"))
    if entry.status == Status.BUILT and not _SHA256.fullmatch(entry.wheel_sha256 or ""):
        problems.append(("wheel_sha256", f"{entry.wheel_sha256!r} is not a sha256 hex digest"))
    return problems


def _wheel_problems(entry: LedgerEntry, wheel: str) -> list[str]:
    if any(c in wheel for c in "/\\\0") or wheel.startswith("."):
        return ["is not a file name (a path, a NUL or a leading dot)"]
    try:
        name, version, _, tags = parse_wheel_filename(wheel)
    except (InvalidWheelFilename, InvalidVersion):
        return ["is not a wheel filename"]
    problems = []
    if name != canonicalize_name(entry.package):
        problems.append(f"names package {name!r}, the row {entry.package!r}")
    if version != Version(f"{entry.version}+{entry.label}"):
        problems.append(f"has version {str(version)!r}, the row {entry.version}+{entry.label}")
    interpreter = "cp" + base_python(entry.python).replace(".", "")
    if not any(tag.interpreter == interpreter and tag.abi == _python_tag(entry.python) for tag in tags):
        problems.append(f"is not for Python {entry.python} ({interpreter}-{_python_tag(entry.python)})")
    return problems


def _check_files(entry: LedgerEntry, shard: Path) -> None:
    """The built wheel is a regular file of the shard with the row's bytes; the log, if any, is the shard's too."""
    layout = Layout(root=shard)
    log = layout.logs / f"{entry.job_id}.log"
    if (log.is_symlink() or log.exists()) and not _inside(log, shard):
        raise _refuse(entry, shard, "log", f"{log} is a link or lies outside the shard")
    if entry.status != Status.BUILT or entry.wheel is None:
        return
    wheel = layout.dist / entry.wheel
    if not wheel.is_file() or not _inside(wheel, shard):
        raise _refuse(entry, shard, "wheel", f"{entry.wheel!r} is not a file in {layout.dist}")
    if sha256_of(wheel) != entry.wheel_sha256:
        raise _refuse(entry, shard, "wheel_sha256", f"{entry.wheel_sha256} is not the sha256 of {wheel}")


def _inside(path: Path, shard: Path) -> bool:
    """A regular file, no link, whose real path is under the shard's (a linked dist/ or logs/ counts as outside)."""
    return not path.is_symlink() and path.is_file() and path.resolve().is_relative_to(shard.resolve())


def _is_public_version(text: str) -> bool:
    try:
        return Version(text).local is None
    except InvalidVersion:
        return False


def _python_tag(python: str) -> str:
    return "cp" + python.replace(".", "")
