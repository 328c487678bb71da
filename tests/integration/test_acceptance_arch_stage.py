"""An arch stage of the GPU acceptance run, for real but for the GPU: a causal-conv1d wheel whose extension nvcc
compiled with the fat profile's -gencode flags (the toy kernel), in its own build folder with a ledger, is indexed,
served on its own port, pip-installed into a clean venv, checked byte for byte by tests/gpu in that venv, and read by
both doctors (the fat fatbin's SASS and PTX); only the GPU's verdict and the suite are skipped here."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.steps import provenance, slim
from builder.steps.recipes.recipe import cuda_gencode_flags
from builder.steps.variant import make_twin
from scripts.bench.wheels import job_wheel, with_provenance
from scripts.gpu import slim_stage
from tests.integration.acceptance_wheelhouse import (
    DATA,
    built_causal_conv1d,
    drive,
    finished_build,
    stand_in,
    standing_in,
)
from tests.integration.conftest import CompileCu

ROOT = Path(__file__).resolve().parents[2]


def fat_build(folder: Path, compile_cu: CompileCu) -> Path:
    """What `wheelwright build --profile gpu-box-fat` leaves, for the test interpreter's Python, with a toy kernel."""
    (job,) = load_plan(ROOT / "matrix.yaml", DATA.variant("fat").profile).jobs
    flags = cuda_gencode_flags(job.archs, "test")
    extension = compile_cu("fat", [flags[i + 1] for i in range(0, len(flags), 2)])
    wheel = built_causal_conv1d(folder, extension.read_bytes(), phase="verify", compile_seconds=1.0)
    finished_build(folder)
    return wheel


def test_arch_fat_installs_its_own_wheel_from_its_own_index_and_doctor_reads_the_fat_fatbin(
    tmp_path: Path, compile_cu: CompileCu, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    wheel = fat_build(work / "arch" / "fat", compile_cu)
    stand_in(monkeypatch, {name: standing_in(name) for name in ("preflight", "carry", "index", "serve", "install")})
    drive(out, work, "--stages", "arch_fat")
    stage = json.loads((out / "summary.json").read_text())["stages"]["arch_fat"]
    checks = {check["name"]: check for check in stage["checks"]}
    installed = checks["test_installed_from_the_index[causal-conv1d]"]
    assert installed["status"] == "passed" and installed["data"]["wheel"] == wheel.name, checks
    assert checks["test_seen_by_this_interpreter[causal-conv1d]"]["status"] == "passed"
    assert checks["test_nothing_else_installed"]["status"] == "passed" and stage["data"]["variant"] == "fat"
    assert stage["data"]["index_url"].startswith("http://127.0.0.1:")  # its own, not the main index's
    # without a GPU the verdict and the suite are skipped, after both doctors read the wheel the box will judge
    assert checks["test_doctor_gives_the_variants_verdict"]["status"] == "skipped"
    assert checks["test_causal_conv1d_tests_from_its_sdist"]["status"] == "skipped"
    for report in ("doctor.json", "doctor-cli.json"):
        document = json.loads((work / "arch" / "fat" / report).read_text())
        (package,) = [p for p in document["environment"]["packages"] if p["name"] == "causal-conv1d"]
        (extension,) = package["extensions"]
        assert (extension["sass"], extension["ptx"]) == (["8.0", "9.0", "10.0"], ["10.0"]), report


def slim_build(folder: Path) -> tuple[Path, list[str]]:
    """What `wheelwright build --profile gpu-box-slim` leaves, for the test interpreter's Python, without a GPU
    library: the fat wheel in dist/, its twin and its slim variants (as the build cuts them) in variant/."""
    (job,) = load_plan(ROOT / "matrix.yaml", DATA.variant("slim").profile).jobs
    job = dataclasses.replace(job, python=f"{sys.version_info.major}.{sys.version_info.minor}")
    files = {"causal_conv1d/__init__.py": b'LABEL = "fat"\n'}
    (folder / "dist").mkdir(parents=True)
    fat = with_provenance(job_wheel(folder / "dist", job, files, platform="manylinux_2_28_x86_64"), job)
    make_twin(fat, folder / "variant")
    labels = []
    for arch in slim.cuttable(job):
        copy = Path(shutil.copy(fat, (folder / "cut" / arch).mkdir(parents=True) or folder / "cut" / arch))
        provenance.embed(copy, slim.cut_record(slim.Origin.of(fat), job, arch))
        labels.append(make_twin(copy, folder / "variant", label=slim.slim_label(job.label, arch)).label)
    finished_build(folder)
    return fat, labels


def test_arch_slim_indexes_the_slim_build_and_uv_takes_the_null_where_no_gpu_is_visible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage's plumbing, here: the build's own site, its variant channel of the label's torch, the pinned uv with
    nothing forced. With no GPU visible uv takes the null fallback (on the H200: the sm_90 slim wheel, which
    tests/gpu/test_slim.py then checks; here it skips)."""
    work, out = tmp_path / "work", tmp_path / "out"
    _, labels = slim_build(work / "arch" / "slim")
    assert labels == [f"{DATA.label}sm{sm}" for sm in ("80", "90", "100", "120")]
    monkeypatch.setattr(slim_stage, "find_uv", lambda box: Path(sys.executable).parent / "uv")
    stand_in(monkeypatch, {name: standing_in(name) for name in ("preflight", "carry", "index", "serve", "install")})
    drive(out, work, "--stages", "arch_slim")
    stage = json.loads((out / "summary.json").read_text())["stages"]["arch_slim"]
    assert stage["data"]["index_url"].endswith(f"/variant/{DATA.label[:DATA.label.index('cu')]}/simple/"), stage
    checks = {check["name"]: check for check in stage["checks"]}
    assert checks["test_uv_took_the_slim_wheel_of_this_gpu"]["status"] == "skipped", checks
    (record,) = (work / "venv-slim").glob("lib/python*/site-packages/causal_conv1d-*.dist-info/variant.json")
    assert list(json.loads(record.read_text())["variants"]) == [DATA.label]  # the null: the fat twin's bytes
    page = (work / "arch" / "slim" / "site" / "variant" / "pt211" / "simple" / "causal-conv1d" / "index.html")
    assert all(f"-{label}.whl#sha256=" in page.read_text() for label in labels)
