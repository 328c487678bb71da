"""`gpu_acceptance.sh --skip-build` on a wheelhouse that holds causal-conv1d only (what bench_build's full-arch
`ours` run leaves, issue 16): for real but for the GPU, its wheel (a toy kernel for sm_90 and sm_103, as the full-arch
build's fatbin has them) is indexed, served, pip-installed and read by both doctors; install and doctor check
causal-conv1d alone, and the stages that test mamba-ssm are skipped saying it is not there, not failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.integration.acceptance_wheelhouse import built_causal_conv1d
from tests.integration.conftest import CompileCu

ROOT = Path(__file__).resolve().parents[2]

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
    return built_causal_conv1d(folder, extension, phase="install", compile_seconds=201.0)


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
