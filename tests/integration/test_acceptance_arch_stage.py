"""An arch stage of the GPU acceptance run, for real but for the GPU: a causal-conv1d wheel whose extension nvcc
compiled with the fat profile's -gencode flags (the toy kernel), in its own build folder with a ledger, is indexed,
served on its own port, pip-installed into a clean venv, checked byte for byte, and read by both doctors (the fat
fatbin's SASS and PTX); only the GPU's verdict is skipped here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from builder.plan.expand import load_plan
from builder.steps.recipes.recipe import cuda_gencode_flags
from tests.integration.acceptance_wheelhouse import CONFIG, HARNESS, built_causal_conv1d
from tests.integration.conftest import CompileCu

ROOT = Path(__file__).resolve().parents[2]



def fat_build(folder: Path, compile_cu: CompileCu) -> Path:
    """What `wheelwright build --profile gpu-box-fat` leaves, for the test interpreter's Python, with a toy kernel."""
    (job,) = load_plan(ROOT / "matrix.yaml", CONFIG.arch.variant("fat").profile).jobs
    flags = cuda_gencode_flags(job.archs, "test")
    extension = compile_cu("fat", [flags[i + 1] for i in range(0, len(flags), 2)])
    wheel = built_causal_conv1d(folder, extension, phase="verify", compile_seconds=1.0)
    state = folder / "build-run"  # as the detached build leaves it once it has ended
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": time.time() - 5, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": 0, "ended": time.time()}))
    return wheel


def test_arch_fat_installs_its_own_wheel_from_its_own_index_and_doctor_reads_the_fat_fatbin(
    tmp_path: Path, compile_cu: CompileCu
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    wheel = fat_build(work / "arch" / "fat", compile_cu)
    env = {**os.environ, "ROOT": str(ROOT), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "-c", HARNESS, "harness", str(out), "--work", str(work), "--stages", "arch_fat"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300,
    )
    log = done.stdout + done.stderr
    stage = json.loads((out / "summary.json").read_text())["stages"]["arch_fat"]
    checks = {check["name"]: check for check in stage["checks"]}
    assert checks["causal-conv1d installed from the index"]["status"] == "passed", log
    assert checks["causal-conv1d installed from the index"]["data"]["wheel"] == wheel.name
    assert checks["causal-conv1d visible to the test interpreter"]["status"] == "passed", log
    assert "nothing else installed" not in checks and stage["data"]["variant"] == "fat"
    # on its own port: not the main index's, which this command never served
    assert stage["data"]["index_url"].startswith("http://127.0.0.1:") and not (work / "serve-fat.pid").exists()
    # without a GPU the verdict is skipped, after both doctors read the wheel the box will judge
    assert checks["doctor says ok for the fat wheel"]["status"] == "skipped"
    for report in ("doctor.json", "doctor-cli.json"):
        document = json.loads((work / "arch" / "fat" / report).read_text())
        (package,) = [p for p in document["environment"]["packages"] if p["name"] == "causal-conv1d"]
        (extension,) = package["extensions"]
        assert (extension["sass"], extension["ptx"]) == (["8.0", "9.0", "10.0"], ["10.0"]), report
