"""An arch stage of the GPU acceptance run, for real but for the GPU: a causal-conv1d wheel whose extension nvcc
compiled with the fat profile's -gencode flags (the toy kernel), in its own build folder with a ledger, is indexed,
served on its own port, pip-installed into a clean venv, checked byte for byte by tests/gpu in that venv, and read by
both doctors (the fat fatbin's SASS and PTX); only the GPU's verdict and the suite are skipped here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags
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
