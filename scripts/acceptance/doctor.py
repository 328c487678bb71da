"""What doctor says about the installed wheels on the GPU box: the standalone doctor.py the site publishes (piped
into the test venv's python, as a user runs it) and `wheelwright doctor --python` must both read the GPU as the
configured arch through nvidia-smi and give every package the verdict OK, with SASS for that arch and an extension
that imports."""

from __future__ import annotations

from .summary import FAILED, PASSED, Check


def planned_checks(packages: tuple[str, ...], arch: str) -> list[str]:
    return [_gpu_name(arch), *(_package_name(p) for p in packages), AGREEMENT]


def _gpu_name(arch: str) -> str:
    return f"doctor reads the GPU as sm_{arch.replace('.', '')}"


def _package_name(package: str) -> str:
    return f"doctor: {package} OK"


AGREEMENT = "doctor.py and `wheelwright doctor` agree"


def doctor_checks(
    report: dict, cli_report: dict | None, *, packages: tuple[str, ...], label: str, arch: str
) -> list[Check]:
    checks = [gpu_check(report.get("environment", {}), arch)]
    diagnoses = {d["package"]: d for d in report.get("diagnoses", [])}
    packages_read = {p["name"]: p for p in report.get("environment", {}).get("packages", [])}
    checks += [_package_check(diagnoses.get(p), packages_read.get(p), p, label=label, arch=arch) for p in packages]
    checks.append(_agreement_check(report, cli_report))
    return checks


def gpu_check(environment: dict, arch: str) -> Check:
    name = _gpu_name(arch)
    gpus = environment.get("gpus", [])
    seen = ", ".join(f"{g['name']} sm_{g['arch'].replace('.', '')}" for g in gpus) or "no GPU"
    driver = f"driver {environment.get('driver')} (CUDA {environment.get('driver_cuda')})"
    source = environment.get("gpu_source")
    ok = bool(gpus) and all(g["arch"] == arch for g in gpus) and source == "nvidia-smi"
    detail = f"{seen} via {source}, {driver}" if gpus else environment.get("gpu_error") or "no GPU read"
    return Check(name=name, status=PASSED if ok else FAILED, detail=detail, data={"gpus": gpus, "source": source})


def _package_check(diagnosis: dict | None, package: dict | None, name: str, *, label: str, arch: str) -> Check:
    check = _package_name(name)
    if diagnosis is None or package is None:
        return Check(name=check, status=FAILED, detail="doctor did not find it installed")
    problems = []
    codes = [v["code"] for v in diagnosis["verdicts"]]
    if codes != ["ok"]:
        problems += [f"{v['code']}: {v['message']}" for v in diagnosis["verdicts"]]
    if not diagnosis["version"].endswith(f"+{label}"):
        problems.append(f"version {diagnosis['version']} lacks +{label}")
    for extension in package.get("extensions", []):
        if arch not in extension["sass"]:
            problems.append(f"{extension['path']} has SASS for {extension['sass']}, not {arch}")
        if extension["imports"] is not True:
            problems.append(f"{extension['module']} does not import: {extension.get('import_error')}")
    if not package.get("extensions"):
        problems.append("no extension read")
    detail = "; ".join(problems) or diagnosis["verdicts"][0]["message"]
    return Check(name=check, status=FAILED if problems else PASSED, detail=detail)


def _agreement_check(report: dict, cli_report: dict | None) -> Check:
    name = AGREEMENT
    if cli_report is None:
        return Check(name=name, status=FAILED, detail="`wheelwright doctor --json` gave no report")

    def verdicts(document: dict) -> list:
        return [(d["package"], [(v["code"], v["message"]) for v in d["verdicts"]]) for d in document["diagnoses"]]

    same = verdicts(report) == verdicts(cli_report)
    detail = "the same verdicts, word for word" if same else f"{verdicts(report)} != {verdicts(cli_report)}"
    return Check(name=name, status=PASSED if same else FAILED, detail=detail)
