"""The day-0 acceptance (issue 30, docs/abi.md "Day-0 wheels"): causal-conv1d built for torch 2.12 and 2.14; the
``day0`` profile also plans 2.11, which the 2.12 wheel's proven window holds, and 2.13, which no window holds.
``wheelwright day0`` carries the 2.12 binary to 2.11 (verified against torch 2.11, import included) and publishes
nothing for 2.13; ``wheelwright index`` serves both outcomes; real pip installs the day-0 wheel from the served index
into a venv holding torch 2.11 and it imports; pip finds no 2.13 wheel, and the site says why.

Reusing a build output (``WHEELWRIGHT_ABI_WHEELS``, the ``abi-proof`` profile's, or ``day0``'s 2.12 and 2.14 jobs)
and a cached torch 2.11 and symbol index, it took 22-29 s here (load 11-12 on 2 shared cores): slow. On a fresh
machine it first builds the two wheels (~5 min each on 2 idle cores) and fetches three torch wheels: a proof, which
CI's slow set leaves out (`make test-proof`); the day-0 logic's unit tests (tests/unit/test_day0.py) run everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from builder.core.hashing import sha256_of
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.symbols import load_index
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import provenance
from builder.steps.environment import runtime_env
from index_site.serve import serving
from tests.index_checks import installer_environment, pip_install

pytestmark = [pytest.mark.proof, pytest.mark.slow, pytest.mark.nvcc]

ROOT = Path(__file__).resolve().parents[2]
TORCHES = ("2.11.0", "2.12.1", "2.13.0", "2.14.1")
BUILT = ("causal_conv1d-1.7.0+pt212cu130-cp311-*.whl", "causal_conv1d-1.7.0+pt214cu130-cp311-*.whl")


def _wheelwright(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "builder.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _built_output(tmp_path: Path) -> Path:
    """A build output holding only the 2.12 and 2.14 wheels (linked from a reused one, or built here), and their
    rows: the day-0 stage reads its ledger and writes into it, so a reused output is never written."""
    given = os.environ.get("WHEELWRIGHT_ABI_WHEELS")
    if not given:
        folder = tmp_path / "built"
        built = _wheelwright("build", "--profile", "day0", "--select", "*pt21[24]*", "--output", str(folder))
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        return folder
    output = tmp_path / "wheelhouse"
    (output / "dist").mkdir(parents=True)
    with Ledger(Path(given) / "ledger.sqlite") as source, Ledger(output / "ledger.sqlite") as ledger:
        for pattern in BUILT:
            (wheel,) = sorted((Path(given) / "dist").glob(pattern))
            os.link(wheel, output / "dist" / wheel.name)
            rows = [e for e in source.entries() if e.wheel == wheel.name and e.status == Status.BUILT]
            ledger.put(rows[0] if rows else _row_of(output / "dist" / wheel.name))
    return output


def _row_of(wheel: Path) -> LedgerEntry:
    """The row of a wheel another run built (its provenance says which job): the window is read from the wheel."""
    record = provenance.read_wheel(wheel).record
    return LedgerEntry(job_id=record["job"], package=record["package"], version=record["version"],
                       label=record["label"], torch=record["torch"]["version"], accelerator=record["label"][5:],
                       python=f"{record['python'][2]}.{record['python'][3:]}", input_hash="0" * 64,
                       status=Status.BUILT, wheel=wheel.name, wheel_sha256=sha256_of(wheel))


def test_a_day0_wheel_installs_from_the_served_index_and_one_outside_every_window_is_not_published(
        tmp_path: Path) -> None:
    entries, _ = load_index()
    if {e.torch for e in entries if e.variant == "cu130"} < set(TORCHES):
        refreshed = _wheelwright("facts", "symbols", *TORCHES)
        assert refreshed.returncode == 0, refreshed.stderr[-3000:]
    output = _built_output(tmp_path)

    carried = _wheelwright("day0", "--profile", "day0", "--output", str(output))
    assert carried.returncode == 0, carried.stdout[-3000:] + carried.stderr[-3000:]
    assert "pt211cu130-cp311-x86_64: day-0: binary built against torch 2.12.1 (pt212cu130)" in carried.stdout
    assert "no built wheel's ABI window holds torch 2.13.0" in carried.stdout
    (built_for_212,) = (output / "dist").glob(BUILT[0])
    day0 = built_for_212.name.replace("pt212cu130", "pt211cu130")
    assert sorted(p.name for p in (output / "dist").glob("*pt21[13]*")) == [day0]
    indexed = _wheelwright("index", "--output", str(output))
    assert indexed.returncode == 0, indexed.stderr[-3000:]
    assert sorted(p.name for p in (output / "variant").glob("*-pt211cu130.whl")) == [
        day0.replace("+pt211cu130", "").replace(".whl", "-pt211cu130.whl")]

    site = output / "site"
    release = json.loads((site / "wheels" / "causal-conv1d" / "1.7.0.json").read_text())
    (entry,) = [w for w in release["wheels"] if w["filename"] == day0]
    assert entry["abi_window"].startswith("day-0: binary built against torch 2.12.1 (pt212cu130), proven to load "
                                          "on torch 2.11.0 (pt211cu130) by symbols and import; loads on torch 2.11")
    why = "no built wheel&#39;s ABI window holds torch 2.13.0 (cu130): pt212cu130 (built against torch 2.12.1) misses"
    assert why in (site / "index.html").read_text() and why in (site / "select" / "pt213cu130-cp311.html").read_text()

    (job,) = [j for j in load_plan(ROOT / "matrix.yaml", "day0").jobs if j.torch == "2.11.0"]
    torch = runtime_env(job, load_facts())
    env = installer_environment(tmp_path / "uv-cache")
    venv = tmp_path / "user"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    (site_packages / "torch-2.11.pth").write_text(f"{torch.site_packages}\n")
    python = venv / "bin" / "python"
    with serving(site) as server:
        index = f"{server.url}/simple/"
        pip_install(python, env, "--index-url", index, "causal-conv1d==1.7.0+pt211cu130")
        missing = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                                  "--no-cache-dir", "--index-url", index, "causal-conv1d==1.7.0+pt213cu130"],
                                 env=env, capture_output=True, text=True, check=False)
    assert missing.returncode != 0 and "No matching distribution found for causal-conv1d==1.7.0+pt213cu130" in (
        missing.stderr)
    probe = ("import importlib.metadata as m, torch, causal_conv1d, causal_conv1d_cuda; "
             "print(torch.__version__); print(m.version('causal-conv1d')); "
             "print([r for r in m.requires('causal-conv1d') if r.startswith('torch')][0])")
    imported = subprocess.run([str(python), "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                              check=False)
    assert imported.returncode == 0, imported.stderr[-3000:]
    version, installed, requirement = imported.stdout.split("\n")[:3]
    assert installed == "1.7.0+pt211cu130" and version.startswith("2.11.0")
    assert Requirement(requirement).specifier.contains(version.split("+")[0])
