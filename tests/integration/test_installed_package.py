"""wheelwright as a user gets it from `pip install .`: the wheel built from this checkout, installed non-editable into
a fresh venv outside the checkout, runs plan, index and the build's preflight with only what the wheel holds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from builder.core import resources
from scripts.bench.wheels import make_wheel

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")


def _run(command: list[str | os.PathLike[str]], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH and a cwd outside the checkout: nothing but the venv can supply wheelwright
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "FORCE_COLOR")}
    return subprocess.run([os.fspath(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wheelwright's own wheel, built from a copy of the tracked files (what a fresh clone has)."""
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    built = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", dist, source], cwd=dist)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = dist.glob("wheelwright-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("venv") / "venv"
    created = _run([UV, "venv", "--quiet", "--python", sys.executable, folder], cwd=folder.parent)
    assert created.returncode == 0, created.stderr
    installed = _run([UV, "pip", "install", "--quiet", "--python", folder / "bin" / "python", wheel], cwd=folder.parent)
    assert installed.returncode == 0, installed.stderr
    return folder


def test_the_wheel_holds_every_resource(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {r.source for r in (*resources.NOT_MODULES, *resources.BUILD_DATA)}
    assert expected - names == set()


def test_installed_copy_is_the_one_that_runs(venv: Path, tmp_path: Path) -> None:
    where = _run(
        [venv / "bin" / "python", "-c", "import builder, index_site; print(builder.__file__, index_site.__file__)"],
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    for path in where.stdout.split():
        assert Path(path).is_relative_to(venv), path


def test_plan_index_and_preflight_run_from_the_installed_wheel(venv: Path, tmp_path: Path) -> None:
    wheelwright = venv / "bin" / "wheelwright"
    matrix = shutil.copy(ROOT / "matrix.yaml", tmp_path / "matrix.yaml")

    plan = _run([wheelwright, "plan", "--profile", "release", "--explain"], cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64" in plan.stdout

    output = tmp_path / "wheelhouse"
    make_wheel(output / "dist")
    index = _run([wheelwright, "index", "--output", output], cwd=tmp_path)
    assert index.returncode == 0, index.stderr
    landing = (output / "site" / "index.html").read_text()  # rendered from the packaged templates
    assert "causal-conv1d" in landing
    assert (output / "site" / "simple" / "causal-conv1d" / "index.html").is_file()

    preflight = _run([wheelwright, "build", "--matrix", matrix, "--profile", "local", "--preflight",
                      "--output", output], cwd=tmp_path)
    assert preflight.returncode == 0, preflight.stderr
    assert "causal-conv1d-1.7.0+pt214cu130" in preflight.stdout and "ready" in preflight.stdout
