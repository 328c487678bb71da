"""The machine the acceptance run is on (its preflight stage): a CUDA device, the torch and CUDA the label names, and
the toolkit's nvcc of that CUDA. Its facts go into the report whatever they are: without a device every test here
is skipped, saying why, and the run stops there."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from builder.plan.accelerator import parse_label
from scripts.gpu.data import AcceptanceData
from tests.gpu.device import torch_facts, unavailable_reason
from tests.gpu.report import Recorded, Report


def _nvcc_release(cuda_home: str) -> str | None:
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    if not cuda_home or not nvcc.is_file():
        return None
    output = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    return next((line.split("release ")[1].split(",")[0] for line in output.splitlines() if "release " in line), None)


def _mem_available_gib() -> float | None:
    try:
        line = next(row for row in Path("/proc/meminfo").read_text().splitlines() if row.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None
    return round(int(line.split()[1]) / 2**20, 1)


def _cpu_facts() -> dict[str, Any]:
    """The CPU's model and how many hardware threads share a core, as /proc/cpuinfo says (a VM may say less): on
    shared cores a compile running beside fifteen others takes more CPU-seconds than alone (issue 31's comparison)."""
    try:
        rows = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
    except OSError:
        return {}
    fields = {key.strip(): value.strip() for key, value in rows.items()}
    siblings, cores = fields.get("siblings", ""), fields.get("cpu cores", "")
    per_core = int(siblings) // int(cores) if siblings.isdigit() and cores.isdigit() and int(cores) else None
    return {"cpu_model": fields.get("model name"), "threads_per_core": per_core}


@pytest.fixture(scope="module")
def facts(request: pytest.FixtureRequest, stage_data: dict[str, Any]) -> dict[str, Any]:
    """torch's, the GPU's and the toolkit's facts (CUDA_HOME: the driver finds the toolkit), into the report."""
    cuda_home = os.environ.get("CUDA_HOME", "")
    found = torch_facts() | {
        "python": sys.version.split()[0], "python_executable": sys.executable, "cuda_home": cuda_home or None,
        "nvcc_release": _nvcc_release(cuda_home), "cpus": len(os.sched_getaffinity(0)),
        "mem_available_gib": _mem_available_gib(), "ensurepip": importlib.util.find_spec("ensurepip") is not None,
    } | _cpu_facts()
    Report.of(request.config).environment.update(found)
    stage_data.update(found, cuda_available=unavailable_reason() is None)
    return found


@pytest.fixture
def device(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts, on a machine with a CUDA device; nothing else matters on one without."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    return facts


def test_a_cuda_device(device: dict[str, Any], record: Recorded) -> None:
    record.detail = f"{device.get('device')} (sm {device.get('capability')})"


def test_the_torch_and_cuda_of_the_label(device: dict[str, Any], acceptance: AcceptanceData, record: Recorded) -> None:
    torch_minor, accelerator = parse_label(acceptance.label)
    record.detail = f"torch {device.get('torch')} built with CUDA {device.get('torch_cuda')}"
    assert str(device.get("torch", "")).startswith(torch_minor + "."), f"{record.detail}, not torch {torch_minor}"
    assert device.get("torch_cuda") == accelerator.version, f"{record.detail}, not CUDA {accelerator.version}"


def test_nvcc_of_the_labels_cuda(device: dict[str, Any], acceptance: AcceptanceData, record: Recorded) -> None:
    _, accelerator = parse_label(acceptance.label)
    record.detail = f"{device.get('cuda_home')}: release {device.get('nvcc_release')}"
    assert device.get("nvcc_release") == accelerator.version, f"{record.detail}, not {accelerator.version}"
