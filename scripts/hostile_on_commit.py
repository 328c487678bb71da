"""Run this tree's hostile-input and fault tests against an older revision's code, and report per class of issue
#11 how many cases fail there and pass here: the proof that each class's tests fail on the code the issue was
filed against.

Both sides are committed code, each checked out into a temporary git worktree: HEAD as it is, and the older
revision with HEAD's ``tests/`` over its own, so the tests and their helpers are today's and everything they
exercise (builder/, index_site/, the torch facts) is the older revision's. A conftest of today's that cannot even
be imported there is replaced by that revision's own (it is fixture plumbing, not a test), and the report says so.
A test module that cannot be imported on the older code counts as failing there, and the report shows those apart
from tests that ran and failed.

    .venv/bin/python -m scripts.hostile_on_commit b4aff38                 # the code issue #11 was filed against
    .venv/bin/python -m scripts.hostile_on_commit b4aff38 --markdown docs/hostile-before-after.md
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

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = (
    "tests/integration/test_hostile.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_serve_load.py",
    "tests/unit/test_index_site.py",
    "tests/unit/test_index_publish.py",
)
CONFTESTS = ("tests/conftest.py", "tests/unit/conftest.py", "tests/integration/conftest.py")

# The classes of issue #11, each with the tests that stand for it (fnmatch patterns on "module::test[case]");
# the first class a test matches is its class. Tests of these files that match none ran for context only.
CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Unbounded work from tiny input",
        ("test_hostile::*[[]yaml-*", "test_hostile::*[[]metadata-zip-bomb]"),
    ),
    (
        "Files that are not what their name says (dist/, the site, serve, publish)",
        (
            "test_hostile::*[[]symlink-outside-dist]",
            "test_hostile::*[[]symlink-dangling]",
            "test_hostile::*[[]fifo-named-whl]",
            "test_hostile::*[[]symlink-to-dev-zero]",
            "test_hostile::*[[]folder-named-whl]",
            "test_hostile::*[[]not-a-zip]",
            "test_hostile::*[[]two-dist-infos]",
            "test_hostile::*[[]metadata-names-another-project]",
            "test_hostile::test_serve_answers_hostile_paths*",
            "test_faults::test_publish_uploads_nothing_but_the_site*",
            "test_index_publish::test_publish_uploads_only_what_the_index_recorded",
        ),
    ),
    (
        "Pages whose sha256 is not the file's",
        (
            "test_faults::test_a_wheel_rewritten_in_place*",
            "test_faults::test_a_wheel_swapped_for_other_bytes*",
            "test_index_site::test_a_ledger_hash_is_not_trusted_on_size_alone",
            "test_index_site::test_a_rebuilt_wheel_with_the_same_name_is_hashed_again",
            "test_index_publish::test_publish_refuses_a_site_file_whose_bytes_moved",
        ),
    ),
    ("Labels that are not variants", ("test_hostile::*[[]label-*",)),
    (
        "Tracebacks where an ERROR line belongs",
        (
            "test_hostile::test_bad_input_is_one_error_line[[]matrix-*",
            "test_hostile::test_bad_input_is_one_error_line[[]url-*",
            "test_hostile::test_bad_input_is_one_error_line[[]ledger-*",
            "test_hostile::test_bad_input_is_one_error_line[[]output-*",
            "test_hostile::test_bad_input_is_one_error_line[[]site-*",
            "test_hostile::test_bad_input_is_one_error_line[[]serve-*",
            "test_hostile::test_bad_input_is_one_error_line[[]publish-*",
            "test_hostile::test_serve_survives_malformed_requests*",
            "test_faults::test_a_ledger_*",
            "test_faults::test_a_full_disk*",
            "test_faults::test_a_read_only_disk*",
            "test_faults::test_an_output_that_cannot_be_written*",
        ),
    ),
    ("Selectors that select everything", ("test_hostile::*[[]select-*", "test_hostile::*[[]include-empty]")),
    (
        "Recovery: a killed index or publish converges; locks",
        (
            "test_faults::test_a_killed_*",
            "test_index_publish::test_break_lock_*",
            "test_index_publish::test_a_lock_whose_process_is_gone*",
            "test_index_publish::test_a_reused_pid*",
        ),
    ),
    ("Load: serve under concurrent clients", ("test_serve_load::*",)),
)
CONTEXT = "(no class: ran for context)"


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
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--tests", nargs="+", default=list(TEST_FILES), help="test files (default: the suites)")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression, to run a subset")
    args = parser.parse_args(argv)
    old = _git("rev-parse", f"{args.revision}^{{commit}}")
    head = _git("rev-parse", "HEAD")
    pytest_args = [*args.tests, *(["-k", args.keyword] if args.keyword else [])]
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
    report = render_report(before, after, old=old, head=head, replaced=replaced, command=command)
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
    """HEAD's tests/ over the older one; a conftest that cannot import on the older code goes back to its own.
    Returns the conftests replaced."""
    revision = _git("-C", str(worktree), "rev-parse", "HEAD")
    shutil.rmtree(worktree / "tests")
    tests = subprocess.run(["git", "-C", str(ROOT), "archive", head, "tests"], capture_output=True, check=True)
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


def class_of(test: str) -> str:
    for name, patterns in CLASSES:
        if any(fnmatch.fnmatchcase(test, pattern) for pattern in patterns):
            return name
    return CONTEXT


def _at(outcomes: dict[str, Outcome], test: str) -> Outcome:
    module = test.split("::", 1)[0]
    return outcomes.get(test) or outcomes.get(f"{module}::*") or Outcome("not importable", "not collected")


def render_report(
    before: dict[str, Outcome],
    after: dict[str, Outcome],
    *,
    old: str,
    head: str,
    replaced: Iterable[str],
    command: str,
) -> str:
    tests = sorted(t for t in after if not t.endswith("::*"))
    rows: dict[str, Counter[str]] = {name: Counter() for name, _ in CLASSES}
    rows[CONTEXT] = Counter()
    both = []
    for test in tests:
        now, then = after[test], _at(before, test)
        row = rows[class_of(test)]
        row["cases"] += 1
        row["pass on HEAD"] += now.state == "passed"
        if now.state == "passed" and then.failed:
            row["fail there, pass on HEAD"] += 1
            row[then.why if then.state == "failed" else "not importable"] += 1
        elif now.state == "passed" and then.state == "passed" and class_of(test) != CONTEXT:
            both.append(test)
    columns = ["cases", "pass on HEAD", "fail there, pass on HEAD", "assertion", "timeout or hang",
               "fault point absent", "error in setup", "not importable"]  # fmt: skip
    lines = [
        "# Hostile-input and fault tests: before and after issue #11",
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
