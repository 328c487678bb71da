"""The ABI windows proven by imports (issue 30, docs/abi.md): causal-conv1d and mamba-ssm built for torch 2.12 and
2.14 (the ``abi-proof`` profile, sm_90), each imported after ``import torch`` in a venv of every registry torch
from 2.9 to 2.15 and 2.0.1; every prediction of the symbol index must agree with its import. Then the acceptance
of doctor: the 2.12 causal-conv1d wheel installed beside torch 2.14, outside its window, fails to import with an
undefined symbol, and ``doctor --explain`` given that captured line names the cause and the install line of the
2.14 wheel from the served index.

Marked ``proof``: on a fresh machine it builds four wheels (~5 and ~8 min each on 2 idle cores), downloads eight
torch wheels and their CUDA dependencies into eight venvs (~25 GB with uv's cache) and runs 32 imports (5-40 s
each). ``WHEELWRIGHT_ABI_WHEELS`` names a build output to reuse (``wheelwright build --profile abi-proof``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from builder.steps.environment import cache_root
from index_site.serve import serving
from index_site.stage import build_site
from scripts import abi_proof

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.nvcc]

ROOT = Path(__file__).resolve().parents[2]
TORCHES = ["2.0.1", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"]
VENVS = cache_root() / "abi-proof-venvs"


def _wheelwright(*args: str, timeout: int = 7200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build output holding the abi-proof profile's wheels: reused, or built here."""
    given = os.environ.get("WHEELWRIGHT_ABI_WHEELS")
    if given:
        return Path(given)
    folder = tmp_path_factory.mktemp("abi-proof")
    built = _wheelwright("build", "--profile", "abi-proof", "--select", "*-cp311-*", "--output", str(folder))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def index() -> None:
    refreshed = _wheelwright("facts", "symbols", *TORCHES, timeout=3600)
    assert refreshed.returncode == 0, refreshed.stderr[-3000:]


def _wheels(output: Path, pattern: str) -> list[Path]:
    return sorted((output / "dist").glob(pattern))


def test_every_prediction_agrees_with_its_import(output: Path, index: None) -> None:
    wheels = _wheels(output, "*-cp311-*.whl")
    assert len(wheels) == 4, wheels
    pairs = abi_proof.run(wheels, TORCHES, VENVS)
    disagreements = [p for p in pairs if not p.agrees]
    assert disagreements == []
    for package in ("causal_conv1d", "mamba_ssm"):
        mine = [p for p in pairs if p.wheel.startswith(package)]
        loads = [p for p in mine if p.predicted]
        breaks_on_symbols = [p for p in mine if not p.predicted]
        assert len(loads) >= 3 and len(breaks_on_symbols) >= 3, (package, [(p.wheel, p.torch, p.why) for p in mine])


def test_doctor_names_the_cause_of_a_captured_undefined_symbol(output: Path, index: None, tmp_path: Path) -> None:
    (built_for_212,) = _wheels(output, "causal_conv1d-*+pt212cu130-cp311-*.whl")
    torch = abi_proof.venv_for("2.14.1", VENVS)
    venv = tmp_path / "user"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    (torch_site,) = torch.parent.parent.glob("lib/python*/site-packages")
    (site_packages / "torch-2.14.1.pth").write_text(f"{torch_site}\n")  # the user's torch: 2.14.1
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "--quiet", str(built_for_212)], check=True)
    failed = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch, causal_conv1d_cuda"],
                            capture_output=True, text=True, timeout=600, check=False)
    line = failed.stderr.strip().splitlines()[-1]
    assert failed.returncode != 0 and "undefined symbol: _ZN3c10" in line, failed.stderr[-2000:]
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url)
        told = _wheelwright("doctor", "--explain", line, "--index-url", server.url, timeout=900)
        # doctor on the environment: the same check, from the files, before any import
        report = _wheelwright("doctor", "--python", str(venv / "bin" / "python"), "--index-url", server.url,
                              "--json", timeout=900)
    assert told.returncode == 0, told.stderr
    text = told.stdout
    assert "torch 2.12.1 (pt212cu130), as its wheelwright.json records" in text, text
    assert "not by" in text and "2.14" in text.split("not by", 1)[1], text
    assert "causal-conv1d==1.7.0+pt214cu130" in text, text  # the wheel for the torch this environment has
    (diagnosis,) = json.loads(report.stdout)["diagnoses"]
    first = diagnosis["verdicts"][0]
    assert first["code"] == "torch-minor" and "does not export (read from the files" in first["message"], first
    assert "causal-conv1d==1.7.0+pt214cu130" in diagnosis["fix"]["pip"]
