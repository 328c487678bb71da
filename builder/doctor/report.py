"""How doctor answers: per package the verdict and the fix first, the evidence after; or one JSON document."""

from __future__ import annotations

from typing import Any

from builder.doctor.explain import Finding
from builder.doctor.fix import Fix
from builder.doctor.labels import parse_variant, split_local
from builder.doctor.probe import SCHEMA, Environment, Extension, Package
from builder.doctor.verdicts import Diagnosis

HEADLINES = {
    "ok": "OK",
    "ptx-jit": "OK (PTX JIT)",
    "extension-missing": "extension missing",
    "torch-missing": "torch missing",
    "glibc-too-old": "glibc too old",
    "libstdcxx-too-old": "libstdc++ too old",
    "torch-minor": "built for another torch minor",
    "cxx-abi": "C++ ABI mismatch",
    "driver-too-old": "driver too old for the toolkit",
    "no-kernel-image": "no kernel image for this GPU",
    "import-failed": "extension does not import",
}


def headline(diagnosis: Diagnosis) -> str:
    return HEADLINES.get(diagnosis.verdicts[0].code, diagnosis.verdicts[0].code)


def render_text(
    env: Environment, diagnoses: tuple[Diagnosis, ...], fixes: dict[str, Fix | None], missing: tuple[str, ...]
) -> str:
    lines = []
    for diagnosis in diagnoses:
        package = diagnosis.package
        lines.append(f"{package.name} {package.version}: {headline(diagnosis)}")
        lines += [f"  {verdict.message}" for verdict in diagnosis.verdicts]
        lines += _fix_lines(fixes.get(package.name))
    lines += [f"{name}: not installed" for name in missing]
    if not diagnoses:
        lines.append(f"(read {env.executable}; to read another environment, pass --python PATH of the one that fails)")
    return "\n".join([*lines, "", *evidence(env)]) + "\n"


def _fix_lines(fix: Fix | None) -> list[str]:
    if fix is None:
        return []
    if fix.pip is None:
        return [f"  fix: none to print: {fix.note}"]
    lines = [f"  fix: {fix.note.rstrip('.')}:", f"    {fix.pip}", "  or with uv:", f"    {fix.uv}"]
    return lines + ([f"  this setup's page: {fix.page}"] if fix.page else [])


def evidence(env: Environment) -> list[str]:
    torch = env.torch
    if torch.version:
        accel = f"CUDA {torch.cuda}" if torch.cuda else f"HIP {torch.hip}" if torch.hip else "CPU"
        abi = {True: "C++11 ABI", False: "pre-C++11 ABI", None: "ABI unknown"}[torch.cxx11_abi]
        torch_line = f"torch {torch.version} ({accel}, {abi})"
    else:
        torch_line = f"torch: {torch.error or 'not installed'}"
    gpus = ", ".join(f"GPU {i} {g.name} sm_{g.arch.replace('.', '')}" for i, g in enumerate(env.gpus))
    driver = f"driver {env.driver or '?'} (runs CUDA {env.driver_cuda or '?'})" if env.driver or env.driver_cuda else ""
    seen = gpus + (f" (from {env.gpu_source})" if env.gpu_source else "") if gpus else env.gpu_error or "no GPU seen"
    gpu_line = "; ".join(p for p in (driver, seen) if p)
    lines = [
        "what doctor read:",
        f"  python {env.python} ({env.python_tag}, {env.machine}) {env.executable}",
        (
            f"  glibc {env.glibc or '?'}; libstdc++ {env.libstdcxx or '?'}: GLIBCXX_{env.libstdcxx_glibcxx or '?'}, "
            f"CXXABI_{env.libstdcxx_cxxabi or '?'}"
        ),
        f"  {torch_line}",
        f"  {gpu_line}",
    ]
    for package in env.packages:
        lines.append(f"  {package.name} {package.version}: {_built_for(package)}")
        lines += [f"    {_extension_line(e)}" for e in package.extensions] or ["    no compiled extension"]
    return lines + [f"  note: {note}" for note in env.notes]


def _built_for(package: Package) -> str:
    variant = parse_variant(split_local(package.version)[1])
    if variant is None:
        pins = [r for r in package.requires if r.replace(" ", "").startswith("torch")]
        return f"no variant label; requires {', '.join(pins)}" if pins else "no variant label, no torch pin"
    toolkit = f"CUDA {variant.cuda}" if variant.cuda else variant.accelerator
    return f"built for torch {variant.torch}, {toolkit}"


def _extension_line(ext: Extension) -> str:
    if ext.read_error:
        return f"{ext.path}: unreadable ({ext.read_error})"
    sass = ", ".join("sm_" + a.replace(".", "") for a in ext.sass) or "none"
    ptx = ", ".join("compute_" + a.replace(".", "") for a in ext.ptx) or "none"
    needs = ", ".join(
        f"{p}{v}" for p, v in (("GLIBC_", ext.glibc), ("GLIBCXX_", ext.glibcxx), ("CXXABI_", ext.cxxabi)) if v
    )
    imports = {True: "imports", False: "does not import", None: "import not tried"}[ext.imports]
    return f"{ext.path}: SASS {sass}; PTX {ptx}; needs {needs or 'nothing versioned'}; {imports}"


def as_json(env: Environment, diagnoses: tuple[Diagnosis, ...], fixes: dict[str, Fix | None]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "ok": all(d.ok for d in diagnoses),
        "environment": env.as_dict(),
        "diagnoses": [
            {
                "package": d.package.name,
                "version": d.package.version,
                "ok": d.ok,
                "headline": headline(d),
                "verdicts": [{"code": v.code, "message": v.message} for v in d.verdicts],
                "fix": _fix_json(fixes.get(d.package.name)),
            }
            for d in diagnoses
        ],
    }


def _fix_json(fix: Fix | None) -> dict[str, Any] | None:
    return (
        None if fix is None else {"note": fix.note, "pip": fix.pip, "uv": fix.uv, "wheel": fix.wheel, "page": fix.page}
    )


def render_findings(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return (
            "doctor recognises none of these lines; run `doctor` in the environment that fails to read it directly.\n"
        )
    lines = []
    for finding in findings:
        lines += [f"{HEADLINES[finding.code]}: {finding.cause}", f"  from: {finding.quote}", f"  fix: {finding.remedy}"]
    return "\n".join(lines) + "\n"


def findings_json(findings: tuple[Finding, ...]) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "findings": [
            {"code": f.code, "headline": HEADLINES[f.code], "cause": f.cause, "quote": f.quote, "remedy": f.remedy}
            for f in findings
        ],
    }
