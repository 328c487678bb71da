"""mamba-ssm's main branch builds its CUDA extension only when MAMBA_KEEP_CUDA_BUILD=TRUE (#977, after
2.3.2.post1). The recipe sets it by version range; on main's real setup.py (tests/data/upstream/mamba-main) the
switch reaches setup() as a CUDA extension, and without it the recipe stops the build instead of shipping a
wheel with no kernels."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from builder.plan.expand import _recipe
from builder.plan.matrix import load_matrix
from builder.steps.recipes import apply_recipe

from .test_recipes import ROOT, job_for, run_setup_py

MAIN = Path(__file__).resolve().parents[1] / "data" / "upstream" / "mamba-main"
NEXT = "2.3.3"  # the first release that will carry main's setup.py


def main_tree(tmp_path: Path, version: str) -> Path:
    """main's setup.py and pyproject.toml, and the package version file and PKG-INFO an sdist of ``version`` has."""
    root = tmp_path / f"mamba_ssm-{version}"
    (root / "mamba_ssm").mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(MAIN / name, root / name)
    (root / "README.md").write_text("mamba\n")
    (root / "mamba_ssm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: mamba_ssm\nVersion: {version}\n")
    return root


def job_at(version: str):
    package = load_matrix(ROOT / "matrix.yaml").package("mamba-ssm")
    return replace(job_for("mamba-ssm-2.3.2.post1"), version=version, recipe=_recipe(package, version))


def test_the_switch_is_set_from_the_next_release_on() -> None:
    assert ("MAMBA_KEEP_CUDA_BUILD", "TRUE") in job_at(NEXT).recipe.env
    assert "MAMBA_KEEP_CUDA_BUILD" not in dict(job_at("2.3.2.post1").recipe.env)


def test_the_switch_reaches_mains_setup_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = job_at(NEXT)
    root = main_tree(tmp_path, NEXT)
    recipe = apply_recipe(root, job)  # also checks that setup.py reads every variable the recipe sets
    assert recipe.env["MAMBA_KEEP_CUDA_BUILD"] == "TRUE"
    run = run_setup_py(root, job, dict(recipe.env), monkeypatch)
    assert [ext.name for ext in run.kwargs["ext_modules"]] == ["selective_scan_cuda"]
    assert run.kwargs["version"] == job.local_version


def test_without_the_switch_the_recipe_refuses_a_kernel_less_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = replace(job_at(NEXT), recipe=job_at("2.3.2.post1").recipe)
    root = main_tree(tmp_path, NEXT)
    recipe = apply_recipe(root, job)
    with pytest.raises(RuntimeError, match="declares no extension modules"):
        run_setup_py(root, job, dict(recipe.env), monkeypatch)
