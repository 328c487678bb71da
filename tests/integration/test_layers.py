"""The import graph the layers allow (pyproject.toml [tool.importlinter]) is enforced: `lint-imports` passes on the
code as it is, and fails, naming the import, on a copy with one forbidden import (or one cycle) planted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.core.files import read_toml

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    """The packages the contracts name (pyproject.toml's root_packages) and the contracts, in a folder of their own."""
    copy = tmp_path / "checkout"
    for package in read_toml(ROOT / "pyproject.toml", what="the project file")["tool"]["importlinter"]["root_packages"]:
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def _lint(copy: Path) -> subprocess.CompletedProcess[str]:
    # the copy first on the path: grimp must read its files, not the editable install's
    env = {**os.environ, "PYTHONPATH": str(copy)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_code_keeps_its_layers(tmp_path: Path) -> None:
    done = _lint(_copy(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = read_toml(ROOT / "pyproject.toml", what="the project file")["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "planted", "message"),
    [
        ("builder/plan/job.py", "import builder.steps.fetch", "builder.plan is not allowed to import builder.steps"),
        (
            "builder/core/ledger.py",
            "from builder.plan import facts",
            "builder.core is not allowed to import builder.plan",
        ),
        ("builder/farm/build.py", "import builder.cli.console", "builder.farm is not allowed to import builder.cli"),
        (
            "index_site/wheels.py",
            "from builder.steps import verify",
            "index_site is not allowed to import builder.steps",
        ),
        ("index_site/site.py", "import builder.farm.build", "index_site is not allowed to import builder.farm"),
        ("builder/farm/merge.py", "import index_site.site", "builder.farm is not allowed to import index_site"),
        ("builder/doctor/fix.py", "import index_site.layout", "builder.doctor is not allowed to import index_site"),
        # a cycle inside one folder: toolchain imported environment before the settings module took cache_root
        ("builder/steps/toolchain.py", "import builder.steps.environment", "No cycles are allowed in builder.steps"),
        ("builder/core/files.py", "from builder.core import data", "No cycles are allowed in builder.core"),
    ],
)
def test_a_planted_forbidden_import_breaks_the_check(tmp_path: Path, module: str, planted: str, message: str) -> None:
    copy = _copy(tmp_path)
    path = copy / module
    path.write_text(path.read_text() + f"\n{planted}  # planted by the test\n")
    done = _lint(copy)
    assert done.returncode == 1, done.stdout
    assert message in done.stdout and "BROKEN" in done.stdout
