"""What doctor says of the installed wheels on the GPU machine, before any of their kernels runs: the site's
standalone doctor.py (piped into the test venv's python, as a user runs it: --doctor-report) and `wheelwright doctor
--python` (--doctor-cli-report) must read the GPU as the data file's arch through nvidia-smi, give each package the
verdict OK with SASS for that arch and an extension that imports, and agree word for word. An arch variant's wheel
gets the verdict its variant expects instead (ok, ptx-jit or no-kernel-image)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scripts.gpu.data import AcceptanceData
from tests.gpu.options import Given
from tests.gpu.report import Recorded

pytestmark = pytest.mark.gpu
NO_KERNEL_IMAGE = "no kernel image is available"
Document = dict[str, Any]


def _read(path: Path) -> Document | None:
    try:
        document: Document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document


@pytest.fixture(scope="module")
def report(given: Given) -> Document:
    document = _read(given.need("doctor_report"))
    if document is None:
        pytest.fail(f"doctor.py wrote no JSON report to {given.doctor_report}")
    return document


@pytest.fixture(scope="module")
def cli_report(given: Given) -> Document | None:
    return _read(given.need("doctor_cli_report"))


def _verdicts(document: Document, package: str) -> list[tuple[str, str]]:
    diagnosis = next((d for d in document.get("diagnoses", []) if d.get("package") == package), None)
    return [] if diagnosis is None else [(v["code"], v["message"]) for v in diagnosis["verdicts"]]


def test_doctor_reads_the_gpu(report: Document, acceptance: AcceptanceData, record: Recorded) -> None:
    environment, arch = report.get("environment", {}), acceptance.gpu_arch
    gpus = environment.get("gpus", [])
    seen = ", ".join(f"{g['name']} sm_{g['arch'].replace('.', '')}" for g in gpus) or "no GPU"
    driver = f"driver {environment.get('driver')} (CUDA {environment.get('driver_cuda')})"
    source = environment.get("gpu_source")
    record.detail = f"{seen} via {source}, {driver}" if gpus else environment.get("gpu_error") or "no GPU read"
    record.data = {"gpus": gpus, "source": source}
    assert gpus and all(g["arch"] == arch for g in gpus) and source == "nvidia-smi", (
        f"{record.detail}; wanted sm_{arch.replace('.', '')} via nvidia-smi")


def test_doctor_says_ok(package: str, report: Document, acceptance: AcceptanceData, record: Recorded) -> None:
    diagnosis = next((d for d in report.get("diagnoses", []) if d["package"] == package), None)
    read = next((p for p in report.get("environment", {}).get("packages", []) if p["name"] == package), None)
    assert diagnosis is not None and read is not None, "doctor did not find it installed"
    problems = [f"{code}: {message}" for code, message in _verdicts(report, package)] if [
        code for code, _ in _verdicts(report, package)] != ["ok"] else []
    if not diagnosis["version"].endswith(f"+{acceptance.label}"):
        problems.append(f"version {diagnosis['version']} lacks +{acceptance.label}")
    for extension in read.get("extensions", []):
        if acceptance.gpu_arch not in extension["sass"]:
            problems.append(f"{extension['path']} has SASS for {extension['sass']}, not {acceptance.gpu_arch}")
        if extension["imports"] is not True:
            problems.append(f"{extension['module']} does not import: {extension.get('import_error')}")
    if not read.get("extensions"):
        problems.append("no extension read")
    record.detail = diagnosis["verdicts"][0]["message"] if diagnosis["verdicts"] else ""
    assert not problems, "; ".join(problems)


def test_the_two_doctors_agree(report: Document, cli_report: Document | None, record: Recorded) -> None:
    assert cli_report is not None, "`wheelwright doctor --json` gave no report"

    def verdicts(document: Document) -> list[tuple[str, list[tuple[str, str]]]]:
        return [(d["package"], _verdicts(document, d["package"])) for d in document["diagnoses"]]

    assert verdicts(report) == verdicts(cli_report), f"{verdicts(report)} != {verdicts(cli_report)}"
    record.detail = "the same verdicts, word for word"


def test_doctor_gives_the_variants_verdict(
    report: Document, cli_report: Document | None, acceptance: AcceptanceData, given: Given, record: Recorded
) -> None:
    """Both doctors give the variant's expected verdict first, and agree word for word; ptx-jit comes with OK (it
    runs), no-kernel-image names the error a kernel call will raise."""
    variant, package = acceptance.variant(given.need("variant")), acceptance.arch.package
    problems = []
    for who, document in (("doctor.py", report), ("wheelwright doctor", cli_report)):
        codes = [code for code, _ in _verdicts(document, package)] if document is not None else None
        if not codes:
            problems.append(f"{who} gave no JSON report" if document is None else f"{who} did not find {package}")
        elif codes[:1] != [variant.doctor] or (variant.doctor == "ptx-jit" and "ok" not in codes):
            problems.append(f"{who} said {codes}")
    messages = [message for _, message in _verdicts(report, package)]
    if variant.doctor == "no-kernel-image" and messages and NO_KERNEL_IMAGE not in messages[0]:
        problems.append(f"its message does not name '{NO_KERNEL_IMAGE}': {messages[0]}")
    if variant.doctor == "ptx-jit" and messages and "JIT" not in messages[0]:
        problems.append(f"its message does not name the PTX JIT: {messages[0]}")
    if cli_report is not None and _verdicts(report, package) != _verdicts(cli_report, package):
        problems.append("doctor.py and `wheelwright doctor` disagree")
    record.detail, record.data = " / ".join(messages), {"verdicts": messages}
    assert not problems, "; ".join(problems)
