"""mamba-ssm's main branch builds its CUDA extension only when MAMBA_KEEP_CUDA_BUILD=TRUE (upstream #977, after
2.3.2.post1). The recipe sets it by version range; with it, setup.py declares the CUDA extension, and without it the
recipe stops the build instead of shipping a wheel with no kernels.

Checked on our own stand-in (tests/data/standin/mamba-keep-cuda-build/setup.py, written for these tests: only the
documented shape, no upstream code) and, where upstream main's commit archive is in the local source cache, on its
real setup.py read from there (never copied into the project; skipped with the reason otherwise)."""

from __future__ import annotations

import tarfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from builder.plan.expand import _recipe
from builder.plan.job import Job, UpstreamFiles
from builder.plan.matrix import load_matrix
from builder.steps.fetch import cache_dir_for_sdists
from builder.steps.recipes import apply_recipe
from builder.steps.upstream import archive_name

from .test_recipes import ROOT, job_for, run_setup_py

STANDIN = Path(__file__).resolve().parents[1] / "data" / "standin" / "mamba-keep-cuda-build" / "setup.py"
NEXT = "2.3.3"  # the first release that will carry main's setup.py
# upstream main when the recipe's range was written ("Fix silent forward-pass corruption on Blackwell GPUs", #997)
MAIN = UpstreamFiles(
    repo="state-spaces/mamba", commit="e9594ce1c732d97440f0332fdc43170a2294dbfa", paths=("setup.py",), tree_digest=""
)


def standin_setup(tmp_path: Path) -> bytes:
    return STANDIN.read_bytes()


def upstream_main_setup(tmp_path: Path) -> bytes:
    """setup.py of upstream main's commit archive in the source cache (how scripts/cache_upstream.py puts it
    there); the test is skipped when it is not there, as on CI, which reaches only the package registries."""
    archive = cache_dir_for_sdists() / archive_name(MAIN)
    if not archive.is_file():
        pytest.skip(
            f"upstream main's archive {archive.name} is not in the source cache {archive.parent} (CI cannot reach the "
            f"forge; `python -m scripts.cache_upstream CLONE {MAIN.repo} {MAIN.commit} setup.py` puts it there)"
        )
    with tarfile.open(archive) as tar:
        top_level = [m for m in tar.getmembers() if PurePosixPath(m.name.removeprefix("./")).parts[1:] == ("setup.py",)]
        member = top_level[0] if top_level else None  # <name>-<commit>/setup.py
        handle = tar.extractfile(member) if member is not None else None
        if handle is None:
            pytest.fail(f"{archive}: no top-level setup.py")
        return handle.read()


SOURCES = [pytest.param(standin_setup, id="standin"), pytest.param(upstream_main_setup, id="upstream-main-cached")]


def sdist_tree(tmp_path: Path, setup_py: bytes, version: str) -> Path:
    """``setup_py`` with the package version file and PKG-INFO an sdist of ``version`` has."""
    root = tmp_path / f"mamba_ssm-{version}"
    (root / "mamba_ssm").mkdir(parents=True)
    (root / "setup.py").write_bytes(setup_py)
    (root / "README.md").write_text("mamba\n")
    (root / "mamba_ssm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: mamba_ssm\nVersion: {version}\n")
    return root


def job_at(version: str) -> Job:
    package = load_matrix(ROOT / "matrix.yaml").package("mamba-ssm")
    return replace(job_for("mamba-ssm-2.3.2.post1"), version=version, recipe=_recipe(package, version))


def test_the_switch_is_set_from_the_next_release_on() -> None:
    assert ("MAMBA_KEEP_CUDA_BUILD", "TRUE") in job_at(NEXT).recipe.env
    assert "MAMBA_KEEP_CUDA_BUILD" not in dict(job_at("2.3.2.post1").recipe.env)


@pytest.mark.parametrize("source", SOURCES)
def test_with_the_switch_the_cuda_extension_is_declared(
    source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = job_at(NEXT)
    root = sdist_tree(tmp_path, source(tmp_path), NEXT)
    recipe = apply_recipe(root, job)  # also checks that setup.py reads every variable the recipe sets
    assert recipe.env["MAMBA_KEEP_CUDA_BUILD"] == "TRUE"
    run = run_setup_py(root, job, dict(recipe.env), monkeypatch)
    assert [ext.name for ext in run.kwargs["ext_modules"]] == ["selective_scan_cuda"]
    assert run.kwargs["version"] == job.local_version


@pytest.mark.parametrize("source", SOURCES)
def test_without_the_switch_the_recipe_refuses_a_kernel_less_wheel(
    source, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = replace(job_at(NEXT), recipe=job_at("2.3.2.post1").recipe)
    root = sdist_tree(tmp_path, source(tmp_path), NEXT)
    recipe = apply_recipe(root, job)
    assert "MAMBA_KEEP_CUDA_BUILD" not in recipe.env
    with pytest.raises(RuntimeError, match="declares no extension modules"):
        run_setup_py(root, job, dict(recipe.env), monkeypatch)
