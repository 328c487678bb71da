"""doctor against a real environment: a venv with torch 2.14.1 and the session's real causal-conv1d wheel relabelled
as built for torch 2.13, installed from our served index. doctor reports the mismatch; the command it prints,
run, installs the right wheel from the same index; doctor then says OK. The standalone doctor.py, fetched from the
site and piped into the venv's python, gives the same verdicts at both steps."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.core.runner import run
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.environment import runtime_env
from index_site.serve import serving
from index_site.stage import build_site
from tests.index_checks import installer_environment

pytestmark = [pytest.mark.slow, pytest.mark.nvcc]

ROOT = Path(__file__).resolve().parents[2]
CAPTURE = os.environ.get("WHEELWRIGHT_DOCTOR_CAPTURE")  # a directory: keep each doctor --json output there


@dataclass(frozen=True, kw_only=True)
class DoctorSetup:
    url: str
    python: Path
    env: dict[str, str]
    right: str  # the wheel built for the venv's torch
    wrong: str  # its copy relabelled for torch 2.13


def relabel(wheel: Path, dist: Path, old: str, new: str, torch_pin: str) -> Path:
    """A copy of ``wheel`` whose label (filename, METADATA, provenance, dist-info directory, RECORD) says ``new``."""
    target = dist / wheel.name.replace(old, new)
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        records = []
        for item in source.infolist():
            data = source.read(item)
            name = item.filename.replace(old, new)
            if name.endswith(".dist-info/METADATA"):
                text = data.decode().replace(old, new)
                data = "\n".join(
                    f"Requires-Dist: {torch_pin}" if line.startswith("Requires-Dist: torch") else line
                    for line in text.split("\n")
                ).encode()
            if name.endswith(".dist-info/wheelwright.json"):  # the record names the label and torch (2.14 here)
                data = data.decode().replace(old, new).replace("2.14.", "2.13.").encode()
            if name.endswith(".dist-info/RECORD"):
                continue
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{name},sha256={digest},{len(data)}")
            out.writestr(name, data)
        record = next(n.replace(old, new) for n in source.namelist() if n.endswith(".dist-info/RECORD"))
        out.writestr(record, "\n".join([*records, f"{record},,"]) + "\n")
    return target


@pytest.fixture(scope="module")
def doctor_setup(
    tmp_path_factory: pytest.TempPathFactory, real_build: Path, e2e_workdir: Path
) -> Iterator[DoctorSetup]:
    (real,) = sorted((real_build / "dist").glob("causal_conv1d-*+pt214cu130-*.whl"))
    output = tmp_path_factory.mktemp("doctor-index")
    (output / "dist").mkdir()
    shutil.copy2(real, output / "dist" / real.name)
    wrong = relabel(real, output / "dist", "pt214cu130", "pt213cu130", "torch==2.13.*")
    work = tmp_path_factory.mktemp("doctor-venv")
    env = installer_environment(work / "uv-cache")
    job = load_plan(e2e_workdir / "matrix.yaml", "e2e").jobs[0]
    runtime = runtime_env(job, load_facts())
    run([runtime.python, "-m", "venv", work / "venv"], step="create venv", env=env)
    (site_packages,) = (work / "venv").glob("lib/python*/site-packages")
    (site_packages / "torch-runtime.pth").write_text(f"{runtime.site_packages}\n")  # torch 2.14.1, as verify does
    with serving(output / "site") as server:
        build_site(output, output / "site", base_url=server.url)
        python = work / "venv" / "bin" / "python"
        run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--no-index",
                "causal-conv1d==1.7.0+pt213cu130",
                "-f",
                f"{server.url}/whl/pt213cu130.html",
            ],
            step="install the wrong wheel",
            env=env,
        )
        yield DoctorSetup(url=server.url, python=python, env=env, right=real.name, wrong=wrong.name)


def doctor(setup: DoctorSetup, *args: str) -> tuple[int, str]:
    command = [
        sys.executable,
        "-m",
        "builder.cli.main",
        "doctor",
        "--python",
        str(setup.python),
        "--index-url",
        setup.url,
        *args,
    ]
    completed = subprocess.run(
        command, cwd=ROOT, env=setup.env, capture_output=True, text=True, timeout=600, check=False
    )
    assert not completed.stderr.strip(), completed.stderr
    return completed.returncode, completed.stdout


def standalone(setup: DoctorSetup, *args: str) -> tuple[int, str]:
    """``curl -s <site>/doctor.py | python -``, the venv's python, no wheelwright anywhere on its path."""
    with urllib.request.urlopen(f"{setup.url}/doctor.py", timeout=30) as response:
        source = response.read()
    command = [str(setup.python), "-", *args]
    completed = subprocess.run(
        command, input=source, env=setup.env, capture_output=True, timeout=600, cwd="/", check=False
    )
    assert not completed.stderr.strip(), completed.stderr.decode()
    return completed.returncode, completed.stdout.decode()


def installed_version(setup: DoctorSetup) -> str:
    probe = "from importlib import metadata; print(metadata.version('causal-conv1d'))"
    return run([setup.python, "-c", probe], step="installed version", env=setup.env, capture=True).output.strip()


def verdicts(report: dict) -> list[tuple[str, str, list[tuple[str, str]]]]:
    return [
        (d["package"], d["version"], [(v["code"], v["message"]) for v in d["verdicts"]]) for d in report["diagnoses"]
    ]


def capture(name: str, report: dict) -> None:
    if CAPTURE:
        Path(CAPTURE).mkdir(parents=True, exist_ok=True)
        (Path(CAPTURE) / name).write_text(json.dumps(report, indent=2) + "\n")


def test_doctor_finds_the_mismatch_prints_the_fix_that_works_and_then_says_ok(doctor_setup: DoctorSetup) -> None:
    code, text = doctor(doctor_setup)
    assert code == 1
    assert text.startswith("causal-conv1d 1.7.0+pt213cu130: built for another torch minor\n"), text
    assert "was built for torch 2.13, but this environment has torch 2.14.1+cu130" in text

    code, out = doctor(doctor_setup, "--json")
    before = json.loads(out)
    capture("cpu-torch-minor.json", before)
    assert code == 1 and before["ok"] is False
    (diagnosis,) = before["diagnoses"]
    assert [v["code"] for v in diagnosis["verdicts"]] == ["torch-minor"]
    fix = diagnosis["fix"]
    links = f"{doctor_setup.url}/whl/pt214cu130.html"
    assert fix["wheel"] == doctor_setup.right
    assert fix["pip"] == (
        f"{doctor_setup.python} -m pip install --force-reinstall --no-deps causal-conv1d==1.7.0+pt214cu130 -f {links}"
    )
    assert fix["pip"] in text and fix["uv"] in text
    (extension,) = before["environment"]["packages"][0]["extensions"]
    assert (extension["sass"], extension["imports"], extension["cxx11_abi"]) == (["9.0"], True, True)

    code, out = standalone(doctor_setup, "--json")
    assert code == 1 and verdicts(json.loads(out)) == verdicts(before)
    assert json.loads(out)["diagnoses"][0]["fix"] == fix

    # the printed command as it is; PIP_NO_INDEX keeps this test's pip off the network (the wheel is on our page)
    run(shlex.split(fix["pip"]), step="the printed fix", env={**doctor_setup.env, "PIP_NO_INDEX": "1"})
    assert installed_version(doctor_setup) == "1.7.0+pt214cu130"

    code, out = doctor(doctor_setup, "--json")
    after = json.loads(out)
    capture("cpu-ok.json", after)
    assert code == 0 and after["ok"] is True
    (diagnosis,) = after["diagnoses"]
    assert diagnosis["version"] == "1.7.0+pt214cu130" and diagnosis["fix"] is None
    assert [v["code"] for v in diagnosis["verdicts"]] == ["ok"]
    assert diagnosis["verdicts"][0]["message"] == (
        "causal-conv1d 1.7.0+pt214cu130 fits torch 2.14.1+cu130 and has SASS for sm_90 (no GPU seen here to check "
        "against); its extension imports."
    )
    code, out = standalone(doctor_setup, "--json")
    assert code == 0 and verdicts(json.loads(out)) == verdicts(after)
    code, text = standalone(doctor_setup)
    assert code == 0 and text.startswith("causal-conv1d 1.7.0+pt214cu130: OK\n"), text
