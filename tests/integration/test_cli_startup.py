"""`wheelwright --version` and `--help` answer at once: building the parsers imports only the standard library and
builder's own light modules, never the libraries the commands run on (docs/performance.md has the CPU targets).
What a fresh process imports is asserted, not how long it takes: a timing would fail on a busy machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What the console script does (pyproject.toml [project.scripts]), reporting the modules it imported on stderr.
PROBE = """
import json, sys
before = set(sys.modules)
from builder.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted(set(sys.modules) - before)))
"""
HEAVY = frozenset({"pydantic", "pydantic_core", "rich", "jinja2", "markupsafe", "boto3", "botocore", "yaml"})


def run_probe(*args: str) -> tuple[str, set[str]]:
    """A fresh `wheelwright ARGS`: what it printed, and the top-level packages it imported."""
    printed, modules = probe_modules(*args)
    return printed, {name.partition(".")[0] for name in modules}


def probe_modules(*args: str) -> tuple[str, set[str]]:
    """A fresh `wheelwright ARGS`: what it printed, and every module it imported."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout, set(json.loads(result.stderr.splitlines()[-1]))


@pytest.mark.parametrize("args", [("--version",), ("--help",), ("plan", "--help"), ("doctor", "--help")],
                         ids=" ".join)
def test_parsing_imports_no_library_a_command_runs_on(args: tuple[str, ...]) -> None:
    printed, imported = run_probe(*args)
    assert printed.startswith("wheelwright 0.1.0\n" if args == ("--version",) else "usage: wheelwright")
    assert not imported & HEAVY, sorted(imported & HEAVY)
    assert imported - set(sys.stdlib_module_names) == {"builder"}


def test_the_probe_sees_a_command_s_imports() -> None:
    """The same probe on a command that needs them: a probe that saw nothing would pass the test above."""
    printed, imported = run_probe("plan", "--profile", "local")
    assert printed.startswith("profile local: ")
    assert {"pydantic", "rich", "yaml"} <= imported


def test_a_re_index_imports_only_what_its_work_needs(tmp_path: Path) -> None:
    """`wheelwright index` in a new process, as users run it: with nothing changed it renders nothing (no jinja2)
    and judges no name against the torch facts' models (no pydantic), nor imports any module only the judging and
    planning of a changed site need (index_site/stage.py); with one wheel added it renders, but takes the facts from
    the index state the first run kept (docs/performance.md)."""
    from builder.core.ledger import Ledger
    from scripts.bench.wheels import WheelSpec, make_wheel

    for python in ("cp311", "cp312"):
        make_wheel(tmp_path / "dist", WheelSpec(python=python))
    with Ledger(tmp_path / "ledger.sqlite"):  # as a build leaves it: the index reads a ledger, it does not make one
        pass
    index = ("index", "--output", str(tmp_path), "--base-url", "https://wheels.example.org")
    _, cold = run_probe(*index)
    _, unchanged_modules = probe_modules(*index)
    unchanged = {name.partition(".")[0] for name in unchanged_modules}
    make_wheel(tmp_path / "dist", WheelSpec(python="cp313"))
    printed, added = run_probe(*index)
    work = {"pydantic", "jinja2", "rich", "yaml", "boto3"}  # markupsafe, 1 ms, escapes the variant channel's names
    assert {"pydantic", "jinja2"} <= cold  # the probe sees both where they are needed
    assert not unchanged & work, sorted(unchanged & work)
    # nor the judging, the records, the planner or the libraries under them (index_site/stage.py)
    judging = {"index_site.site", "index_site.catalog", "index_site.twins", "index_site.blocks", "index_site.records",
               "index_site.wheels", "index_site.variants", "builder.core.ledger", "packaging", "msgspec"}
    assert {"index_site.stage", "index_site.quiet"} <= unchanged_modules
    assert not unchanged_modules & judging, sorted(unchanged_modules & judging)
    assert printed.startswith("Indexed 3 wheels") and added & work == {"jinja2"}


@pytest.mark.parametrize("module", ["index_site.serve", "index_site.publish"])
def test_serve_and_publish_read_the_manifest_without_the_index_machinery(module: str) -> None:
    """serve and publish hold each file to the manifest's record (index_site.records); neither needs the catalogue,
    the twins or the site's planner, whose imports cost a tenth of a second before they were apart."""
    probe = f"import sys, {module}; print(' '.join(sorted(m for m in sys.modules if m.startswith('index_site'))))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    imported = set(result.stdout.split())
    assert {module, "index_site.records"} <= imported
    assert not imported & {"index_site.site", "index_site.catalog", "index_site.twins", "index_site.render"}


def test_the_process_entry_runs_main_and_leaves_its_objects_to_the_os(tmp_path: Path) -> None:
    """The console script and ``python -m builder.cli.main`` run ``entry``: main's exit code, and every object the
    process made frozen (``gc.freeze``), so the interpreter's last collection at exit skips them; what the command
    wrote is complete by then (the plan's JSON parses)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"wheelwright": "builder.cli.main:entry"}
    probe = (
        "import gc, sys\nfrom builder.cli.main import entry\nsys.argv[1:] = ['plan', '--profile', 'local', "
        "'--format', 'json']\ncode = entry()\nsys.stderr.write(f'{code} {gc.get_freeze_count()}')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    code, frozen = map(int, result.stderr.split())
    assert code == 0 and frozen > 10_000  # the modules, pydantic's schemas, the plan
    assert json.loads(result.stdout)["include"]
    failing = subprocess.run([sys.executable, "-m", "builder.cli.main", "plan", "--matrix", str(tmp_path / "none")],
                             check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert failing.returncode == 2 and "cannot read the matrix" in failing.stdout + failing.stderr
