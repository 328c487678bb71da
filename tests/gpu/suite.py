"""causal-conv1d's own test file, taken from its sdist and run with pytest against the installed wheel; the counts
pytest reports are compared with those of an unmodified upstream build on the same machine."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from scripts.gpu.data import Expected

_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)\b")
_DURATION = re.compile(r" in \d+(?:\.\d+)?s\b")
_PLURAL = {"error": "errors", "warning": "warnings"}


def sdist_filename(package: str, version: str) -> str:
    """As the fetch stage caches it: ``causal_conv1d-1.7.0.tar.gz`` for causal-conv1d 1.7.0."""
    return f"{canonicalize_name(package).replace('-', '_')}-{version}.tar.gz"


def parse_counts(output: str) -> dict[str, int] | None:
    """The counts of pytest's final summary line (``9485 passed, 3888 skipped, 2 warnings in 80.1s``), or None."""
    for line in reversed(output.splitlines()):
        counts = _COUNT.findall(line)
        if counts and _DURATION.search(line):
            return {_PLURAL.get(kind, kind): int(number) for number, kind in counts}
    return None


def judge(counts: dict[str, int] | None, expected: Expected | None, *, quick: bool) -> tuple[bool, str]:
    """(passed, detail): a full run must match upstream's passed and skipped counts with nothing failed."""
    if counts is None:
        return False, "pytest printed no summary line"
    got = ", ".join(f"{number} {kind}" for kind, number in counts.items())
    broken = counts.get("failed", 0) + counts.get("errors", 0)
    if broken:
        return False, f"{got}: {broken} failed or errored"
    if quick:
        return (True, f"{got} (--quick subset; counts not compared)") if counts.get("passed") else (
            False, f"{got}: nothing passed")
    if expected is None:
        return False, f"{got}; no upstream counts recorded for this version to compare with"
    wanted = f"upstream: {expected.passed} passed, {expected.skipped} skipped"
    same = counts.get("passed") == expected.passed and counts.get("skipped", 0) == expected.skipped
    return same, f"{got} ({'same as' if same else 'DIFFERS from'} {wanted})"


def unpack_tests(sdist: Path, tests: str, into: Path) -> Path:
    """Extract only the sdist's test folder (never its package source, which would shadow the installed wheel)
    into ``into/<sdist root>/``; returns that root. An empty pytest.ini there keeps any enclosing config out."""
    folder = PurePosixPath(tests).parent
    with tarfile.open(sdist) as archive:
        members = archive.getmembers()
        top = PurePosixPath(members[0].name).parts[0]
        wanted = [m for m in members if PurePosixPath(m.name).parent.parts[1 : len(folder.parts) + 1] == folder.parts]
        archive.extractall(into, members=wanted, filter="data")
    root = into / top
    if not (root / tests).is_file():
        raise FileNotFoundError(f"{sdist.name} has no {tests}")
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


@dataclass(frozen=True, kw_only=True)
class SuiteRun:
    command: list[str]
    returncode: int | None  # None: stopped at the time limit
    seconds: float
    output_tail: str


def clean_environment() -> dict[str, str]:
    """Ours minus PYTHONPATH: the tests must see the venv's packages only."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONDONTWRITEBYTECODE": "1"}


def imported_from(python: str, module: str, cwd: Path) -> str:
    """Where ``module`` is imported from when the tests run (from ``cwd``, in their environment)."""
    done = subprocess.run([python, "-c", f"import {module}; print({module}.__file__)"], cwd=cwd,
                          env=clean_environment(), capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else f"import failed: {done.stderr.strip().splitlines()[-1:]}"


def run_suite(python: str, root: Path, tests: str, *, workers: int, select: str | None, timeout: float,
              log: Path) -> SuiteRun:
    """pytest on the test file, output to ``log``; stopped with its workers (one process group) at ``timeout``."""
    command = [python, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", tests]
    command += ["-n", str(workers)] if workers > 1 else []  # pytest-xdist; one worker needs no plugin
    command += ["-k", select] if select else []
    start = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=root, env=clean_environment(), stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    return SuiteRun(command=command, returncode=returncode, seconds=time.monotonic() - start, output_tail=tail)
