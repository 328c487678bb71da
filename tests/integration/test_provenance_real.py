"""Provenance and the variant twin of the real causal-conv1d wheel (the session's `real_build`): `wheelwright
provenance` prints the record and finds it agrees with the wheel, including the archs its fatbins hold; the twin
beside it carries the same record; a tampered copy is refused by the verify gate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.steps import provenance
from builder.steps.verify import verify_wheel
from builder.steps.wheelzip import Member, read_members, write_wheel

ROOT = Path(__file__).resolve().parents[2]
CAUSAL = "causal-conv1d-1.7.0+pt214cu130-cp311-x86_64"
pytestmark = [pytest.mark.nvcc, pytest.mark.slow, pytest.mark.timeout(3600)]


def test_provenance_of_the_real_wheel_prints_and_agrees(real_build: Path) -> None:
    (wheel,) = (real_build / "dist").iterdir()
    result = subprocess.run(
        [sys.executable, "-m", "builder.cli.main", "provenance", str(wheel)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK the record agrees with the wheel" in result.stdout
    record = provenance.read_wheel(wheel).record
    assert record["archs"] == {"sass": ["9.0"], "ptx": []}
    assert record["toolkit"]["nvcc"].startswith("Cuda compilation tools, release 13.0")
    assert record["sdist"]["filename"] == "causal_conv1d-1.7.0.tar.gz"
    (twin,) = (real_build / "variant").iterdir()
    assert provenance.read_wheel(twin).record["files"] == record["files"]


def test_a_tampered_real_wheel_is_refused_by_verify(real_build: Path, tmp_path: Path) -> None:
    (wheel,) = (real_build / "dist").iterdir()
    members = read_members(wheel)
    (extension,) = [name for name in members if name.endswith(".so") and "/" not in name]
    members[extension] = Member(data=members[extension].data + b"\0", executable=True)
    tampered = write_wheel(tmp_path / wheel.name, members)
    job = load_plan(ROOT / "matrix.yaml", "local", host="3.11").select(CAUSAL).jobs[0]
    report = verify_wheel(tampered, job, runtime=None)
    assert not report.ok
    assert any(r.startswith(f"provenance: {extension}: sha256") for r in report.reasons)
