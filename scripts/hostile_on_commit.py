"""Run this tree's hostile-input and fault tests against an older revision's code, and report per class of an
issue (scripts/data/hostile/issue<N>*.toml) how many cases fail there and pass here: the proof that each class's
tests fail on the code the issue was filed against.

Both sides are committed code, each checked out into a temporary git worktree: HEAD as it is, and the older
revision with HEAD's ``tests/`` over its own, so the tests and their helpers are today's and everything they
exercise (builder/, index_site/, the torch facts) is the older revision's. A conftest of today's that cannot even
be imported there is replaced by that revision's own (it is fixture plumbing, not a test), and the report says so.
A test module that cannot be imported on the older code counts as failing there, and the report shows those apart
from tests that ran and failed.

    .venv/bin/python -m scripts.hostile_on_commit b4aff38                 # the code issue #11 was filed against
    .venv/bin/python -m scripts.hostile_on_commit b4aff38 --markdown docs/hostile-before-after.md
    .venv/bin/python -m scripts.hostile_on_commit 88d45ea --issue 25      # issue #25's classes, every branch's
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from pydantic import BaseModel, ConfigDict, Field

from builder.core.data import load_data
from builder.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
CLASSES_DIR = ROOT / "scripts" / "data" / "hostile"
# The tests, and the helpers outside tests/ they import (the wheel factory the benchmarks share): HEAD's on both sides.
TEST_SUPPORT = ("tests", "scripts/bench")
CONFTESTS = ("tests/conftest.py", "tests/unit/conftest.py", "tests/integration/conftest.py")
CONTEXT = "(no class: ran for context)"


class HostileClass(BaseModel):
    """A class of hostile input, and the tests that stand for it (fnmatch patterns on "module::test[case]")."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    tests: tuple[str, ...] = Field(min_length=1)


class HostileFile(BaseModel):
    """scripts/data/hostile/issue<N>[-part].toml: the test files that hold an issue's cases, and its classes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    files: tuple[str, ...] = Field(min_length=1)
    classes: tuple[HostileClass, ...] = Field(alias="class", min_length=1)


@dataclass(frozen=True, kw_only=True)
class Classes:
    """An issue's classes, from every file of it: a test counts for the first class whose pattern it matches."""

    issue: int
    files: tuple[str, ...]
    classes: tuple[HostileClass, ...]

    def class_of(self, test: str) -> str:
        for hostile in self.classes:
            if any(fnmatch.fnmatchcase(test, pattern) for pattern in hostile.tests):
                return hostile.name
        return CONTEXT


def load_classes(issue: int, folder: Path = CLASSES_DIR) -> Classes:
    """Every ``issue<N>.toml`` and ``issue<N>-*.toml`` in ``folder`` (one per branch that worked on the issue)."""
    paths = sorted({*folder.glob(f"issue{issue}.toml"), *folder.glob(f"issue{issue}-*.toml")})
    if not paths:
        raise ConfigError(f"{folder}: no issue{issue}.toml or issue{issue}-*.toml: no classes for issue {issue}")
    loaded = [load_data(path, HostileFile, what="the hostile-input classes") for path in paths]
    files = tuple(dict.fromkeys(name for part in loaded for name in part.files))
    return Classes(issue=issue, files=files, classes=tuple(c for part in loaded for c in part.classes))


@dataclass(frozen=True)
class Outcome:
    state: str  # passed | failed | skipped | not importable
    why: str = ""  # for a failure: assertion | timeout | fault point absent | error

    @property
    def failed(self) -> bool:
        return self.state in ("failed", "not importable")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("revision", help="the older code to run the tests against (a commit, tag or branch)")
    parser.add_argument("--issue", type=int, default=11,
                        help="whose classes (scripts/data/hostile/issue<N>*.toml) to report (default: %(default)s)")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--tests", nargs="+", help="test files (default: those the issue's data files name)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run a subset")
    args = parser.parse_args(argv)
    try:
        classes = load_classes(args.issue)
    except ConfigError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return 2
    old = _git("rev-parse", f"{args.revision}^{{commit}}")
    head = _git("rev-parse", "HEAD")
    pytest_args = [*(args.tests or classes.files), *(["-k", args.keyword] if args.keyword else [])]
    with tempfile.TemporaryDirectory(prefix="hostile-on-commit-") as temporary:
        config = Path(temporary) / "config/pyproject.toml"  # HEAD's pytest settings on both sides
        config.parent.mkdir()
        config.write_text(_git("show", f"{head}:pyproject.toml") + "\n")
        with _worktree(Path(temporary) / "old", old) as tree:
            replaced = _overlay_tests(tree, head)
            before = _run_pytest(tree, config, pytest_args, Path(temporary) / "old.xml")
        with _worktree(Path(temporary) / "head", head) as tree:  # committed code: edits in progress are not HEAD
            after = _run_pytest(tree, config, pytest_args, Path(temporary) / "head.xml")
    command = "python -m scripts.hostile_on_commit " + shlex.join(sys.argv[1:] if argv is None else argv)
    report = render_report(before, after, classes, old=old, head=head, replaced=replaced, command=command)
    print(report)
    if args.markdown:
        args.markdown.write_text(report)
    return 0


def _git(*args: str) -> str:
    result = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"ERROR git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


@contextmanager
def _worktree(path: Path, revision: str) -> Iterator[Path]:
    _git("worktree", "add", "--detach", str(path), revision)
    try:
        yield path
    finally:
        _git("worktree", "remove", "--force", str(path))


def _overlay_tests(worktree: Path, head: str) -> list[str]:
    """HEAD's tests/ and the test helpers they import (TEST_SUPPORT) over the older ones; a conftest that cannot
    import on the older code goes back to its own. Returns the conftests replaced."""
    revision = _git("-C", str(worktree), "rev-parse", "HEAD")
    for folder in TEST_SUPPORT:
        shutil.rmtree(worktree / folder, ignore_errors=True)
    tests = subprocess.run(["git", "-C", str(ROOT), "archive", head, *TEST_SUPPORT], capture_output=True, check=True)
    with tarfile.open(fileobj=io.BytesIO(tests.stdout)) as archive:
        archive.extractall(worktree, filter="data")
    replaced = []
    for conftest in CONFTESTS:
        module = conftest.removesuffix(".py").replace("/", ".")
        if (worktree / conftest).exists() and not _imports(worktree, module):
            own = subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{revision}:{conftest}"], capture_output=True, check=False
            )
            if own.returncode == 0:
                (worktree / conftest).write_bytes(own.stdout)
                replaced.append(conftest)
    return replaced


def _imports(tree: Path, module: str) -> bool:
    check = [sys.executable, "-c", f"import {module}"]
    return subprocess.run(check, cwd=tree, env=_environment(tree), capture_output=True, check=False).returncode == 0


def _environment(tree: Path) -> dict[str, str]:
    """Imports resolve to ``tree`` first (ahead of the venv's editable install of this checkout), in this process
    and in every CLI subprocess the tests start."""
    return {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}


def _run_pytest(tree: Path, config: Path, arguments: Sequence[str], junit: Path) -> dict[str, Outcome]:
    command = [
        sys.executable, "-m", "pytest", "-c", str(config), "--rootdir", str(tree),
        "-p", "no:cacheprovider", "-q", "--continue-on-collection-errors", "--junitxml", str(junit), *arguments,
    ]  # fmt: skip
    print(f"running {len(arguments)} test files in {tree} ...", file=sys.stderr, flush=True)
    subprocess.run(command, cwd=tree, env=_environment(tree), check=False, stdout=subprocess.DEVNULL)
    if not junit.is_file():
        raise SystemExit(f"ERROR pytest wrote no report in {tree}: its output above says why")
    return read_junit(junit)


def read_junit(path: Path) -> dict[str, Outcome]:
    """{"module::test[case]": outcome}; a module that failed to import is recorded as {"module::*": not importable}."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = case.get("name", "")
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if not module and problem is not None:  # a collection error: the module itself did not import
            outcomes[f"{name.rsplit('.', 1)[-1]}::*"] = Outcome("not importable", "import error")
        elif problem is not None:
            outcomes[f"{module}::{name}"] = Outcome("failed", _why(problem))
        elif case.find("skipped") is not None:
            outcomes[f"{module}::{name}"] = Outcome("skipped")
        else:
            outcomes[f"{module}::{name}"] = Outcome("passed")
    return outcomes


def _why(problem: ElementTree.Element) -> str:
    text = f"{problem.get('message', '')}\n{problem.text or ''}"
    if "Timeout" in text or "TimeoutExpired" in text:
        return "timeout or hang"
    if "has no attribute" in text and "tests/faults.py" in text:
        return "fault point absent"
    if problem.tag == "error":
        return "error in setup"
    return "assertion"


def _at(outcomes: dict[str, Outcome], test: str) -> Outcome:
    module = test.split("::", 1)[0]
    return outcomes.get(test) or outcomes.get(f"{module}::*") or Outcome("not importable", "not collected")


def render_report(
    before: dict[str, Outcome],
    after: dict[str, Outcome],
    classes: Classes,
    *,
    old: str,
    head: str,
    replaced: Iterable[str],
    command: str,
) -> str:
    tests = sorted(t for t in after if not t.endswith("::*"))
    rows: dict[str, Counter[str]] = {hostile.name: Counter() for hostile in classes.classes}
    rows[CONTEXT] = Counter()
    both = []
    for test in tests:
        now, then = after[test], _at(before, test)
        row = rows[classes.class_of(test)]
        row["cases"] += 1
        row["pass on HEAD"] += now.state == "passed"
        if now.state == "passed" and then.failed:
            row["fail there, pass on HEAD"] += 1
            row[then.why if then.state == "failed" else "not importable"] += 1
        elif now.state == "passed" and then.state == "passed" and classes.class_of(test) != CONTEXT:
            both.append(test)
    columns = ["cases", "pass on HEAD", "fail there, pass on HEAD", "assertion", "timeout or hang",
               "fault point absent", "error in setup", "not importable"]  # fmt: skip
    lines = [
        f"# Hostile-input and fault tests: before and after issue #{classes.issue}",
        "",
        f"Tests of HEAD `{head[:12]}` run against the code of `{old[:12]}`, and on HEAD itself:",
        "",
        f"    .venv/bin/python -m {command.removeprefix('python -m ')}",
        "",
        "A case counts for its class when it passes on HEAD and fails on the older code. Of those: *assertion*, the",
        "test ran and the old behaviour failed it (a traceback, a wrong exit code, a bad page...); *timeout or hang*,",
        "the old code did not finish in the test's limit; *fault point absent*, the function a fault is injected",
        "into does not exist in the old code; *not importable*, the test module imports names the old code lacks",
        "(it could not even be collected), which counts as failing.",
        "",
        "| class | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, counts in rows.items():
        if counts["cases"]:
            lines.append(f"| {name} | " + " | ".join(str(counts[c]) for c in columns) + " |")
    total = sum((counts for name, counts in rows.items() if name != CONTEXT), Counter())
    lines.append("| **all classes** | " + " | ".join(f"**{total[c]}**" for c in columns) + " |")
    lines += ["", f"Cases of a class that pass on both: {len(both)}."]
    lines += [f"- `{test}`" for test in both]
    failing_now = [t for t in tests if after[t].state != "passed" and after[t].state != "skipped"]
    lines += ["", f"Cases failing on HEAD itself: {len(failing_now)}."]
    lines += [f"- `{test}` ({after[test].why})" for test in failing_now]
    replaced = list(replaced)
    if replaced:
        lines += ["", "Conftests of HEAD that could not import on the older code, replaced there by its own:"]
        lines += [f"- `{path}`" for path in replaced]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
