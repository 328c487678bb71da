"""`gpu_acceptance.sh --skip-build` on a wheelhouse that holds causal-conv1d only (what bench_build's full-arch
`ours` run leaves, issue 16): for real but for the GPU, its wheel (a toy kernel for sm_90 and sm_103, as the full-arch
build's fatbin has them) is indexed, served, pip-installed and read by both doctors; install and doctor check
causal-conv1d alone, and the stages that test mamba-ssm are skipped saying it is not there, not failed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry
from scripts.acceptance.config import load_config
from tests.integration.conftest import CompileCu
from tests.wheels import make_wheel

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config()
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"

# the real script; only the preflight (it needs the GPU box's CUDA) and the carry (the box's .carry) stood in
HARNESS = r"""
source "$ROOT/scripts/gpu_acceptance.sh"
stage_preflight() { py record --stage preflight --status passed --detail "a stand-in for the GPU machine"; }
stage_carry() { :; }
main "$@"
"""


def full_arch_output(folder: Path, compile_cu: CompileCu) -> Path:
    """bench_build's `ours` output folder: dist/ with one causal-conv1d wheel and its ledger row."""
    extension = compile_cu("full-arch", ["arch=compute_90,code=sm_90", "arch=compute_103,code=sm_103"])
    module = f"causal_conv1d_cuda.cpython-{TAG[2:]}-x86_64-linux-gnu.so"
    (folder / "dist").mkdir(parents=True)
    wheel = make_wheel(
        folder / "dist", name="causal_conv1d", version=f"1.7.0+{CONFIG.label}", python_tag=TAG,
        files={"causal_conv1d/__init__.py": b"", module: extension}, requires=("torch==2.11.*",),
    )
    with Ledger(folder / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(
            job_id=f"causal-conv1d-1.7.0+{CONFIG.label}-{TAG}-x86_64", package="causal-conv1d", version="1.7.0",
            label=CONFIG.label, torch="2.11.0", accelerator="cu130", python=f"{TAG[2]}.{TAG[3:]}",
            input_hash="0" * 64, status="built", phase="install", timings={"compile": 201.0}, wheel=wheel.name,
            wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel_size=wheel.stat().st_size,
            wheel_identity=str(FileIdentity.of(wheel.stat())),
        ))
    return wheel


def test_a_causal_conv1d_only_wheelhouse_is_checked_and_mambas_stages_say_why_they_are_skipped(
    tmp_path: Path, compile_cu: CompileCu
) -> None:
    reused, work, out = tmp_path / "bench-full" / "ours" / "out", tmp_path / "work", tmp_path / "out"
    wheel = full_arch_output(reused, compile_cu)
    stages = "build,install,doctor,upstream,checklist,mamba,bench"
    done = subprocess.run(
        ["bash", "-c", HARNESS, "harness", str(out), "--work", str(work), "--skip-build", str(reused),
         "--stages", stages],
        cwd=ROOT, env={**os.environ, "ROOT": str(ROOT), "PYTHON": sys.executable}, capture_output=True, text=True,
        check=False, timeout=300,
    )
    log = done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())["stages"]
    assert "holds causal-conv1d (not causal-conv1d, mamba-ssm)" in log, log
    assert summary["build"]["status"] == "reused" and wheel.name in summary["build"]["detail"], log
    install = {check["name"]: check for check in summary["install"]["checks"]}
    assert summary["install"]["status"] == "passed", log
    assert set(install) == {"causal-conv1d installed from the index", "causal-conv1d visible to the test interpreter"}
    assert install["causal-conv1d installed from the index"]["data"]["wheel"] == wheel.name
    # without a GPU the doctor's verdicts are skipped, after both doctors read the installed wheel
    assert [check["name"] for check in summary["doctor"]["checks"]] == [
        "doctor reads the GPU as sm_90", "doctor: causal-conv1d OK", "doctor.py and `wheelwright doctor` agree"
    ]
    (package,) = [p for p in json.loads((out / "doctor.json").read_text())["environment"]["packages"]
                  if p["name"] == "causal-conv1d"]
    assert package["extensions"][0]["sass"] == ["9.0", "10.3"], package
    assert summary["upstream"]["status"] == "skipped" and summary["upstream"]["detail"].startswith("no CUDA device")
    for stage in ("checklist", "mamba", "bench"):
        assert summary[stage] == {**summary[stage], "status": "skipped",
                                  "detail": f"skipped: mamba-ssm not in {reused} (it holds causal-conv1d)"}, stage
    assert done.returncode == 4, log  # incomplete: not every stage passed (no GPU here), none failed
    with pytest.raises(OSError):  # refused or reset: the index server ended with the script (its pid was the server's)
        urllib.request.urlopen(summary["install"]["data"]["index_url"], timeout=5)
