"""The arch wheels (issue #13): three more causal-conv1d wheels of the label, a fat one (SASS 8.0, 9.0, 10.0 + PTX),
a PTX-only one and one without the H200's arch, each built into its own folder. This module judges what their builds
left (the wheel, the archs, the per-(unit, arch) compile times: how close the build came to its critical path), what
doctor said of each before any kernel ran, and the kernel call that must fail for the wheel without a kernel image."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from scripts.acceptance import detach
from scripts.acceptance.config import ArchVariant
from scripts.acceptance.summary import FAILED, PASSED, Check

HOST = "host"  # builder/steps/nvcc_time.py's name for the phases that run once per unit, whatever the archs
NO_KERNEL_IMAGE = "no kernel image is available"
STILL_RUNNING = "running"


def folder(root: Path, variant: ArchVariant) -> Path:
    """Where the variant's build writes (its dist/, ledger.sqlite, logs/, site/) and keeps its detached state."""
    return root / variant.name


def state(root: Path, variant: ArchVariant) -> Path:
    return folder(root, variant) / "build-run"


# -- the builds -------------------------------------------------------------------------------------------------


def build_check(root: Path, variant: ArchVariant, *, package: str, label: str, cores: int) -> Check:
    """One variant's build: running (the stage is then pending), or its wheel with the archs its job asked for, its
    wall time and, from the ledger's ``compile_times``, where that time went."""
    from builder.core.ledger import Ledger

    name = f"{variant.name} build ({variant.profile})"
    progress = detach.status(state(root, variant))
    if progress.state == detach.RUNNING:
        return Check(name=name, status=STILL_RUNNING, detail=f"still running after {progress.seconds():.0f} s")
    if progress.state == detach.NONE:
        return Check(name=name, status=FAILED, detail=f"no build was started in {folder(root, variant)}")
    detach.collect(state(root, variant))
    ledger_path = folder(root, variant) / "ledger.sqlite"
    entries = []
    if ledger_path.is_file():
        with Ledger(ledger_path) as ledger:
            entries = [e for e in ledger.entries() if e.label == label and e.package == package]
    exit_code = progress.exit_code if progress.exit_code is not None else -1
    if len(entries) != 1:
        detail = f"{len(entries)} {package} jobs in {ledger_path} (exit {exit_code})"
        return Check(name=name, status=FAILED, detail=detail)
    entry = entries[0]
    wheel = folder(root, variant) / "dist" / str(entry.wheel)
    if entry.status != "built" or not wheel.is_file() or exit_code != 0:
        why = f"{entry.status} in {entry.phase}: {entry.reason}" if entry.status != "built" else f"exit {exit_code}"
        return Check(name=name, status=FAILED, detail=why)
    profile = compile_profile(json.loads(entry.compile_times or "[]"), wall=entry.timings.get("compile"), cores=cores)
    data = {
        "wheel": entry.wheel,
        "size": entry.wheel_size,
        "sha256": entry.wheel_sha256,
        "sass": list(variant.sass),
        "ptx": list(variant.ptx),
        "build_seconds": round(progress.seconds() or 0.0, 1),
        "timings": entry.timings,
        "compile_profile": profile,
    }
    size = f"{(entry.wheel_size or 0) / 2**20:.1f} MiB"
    detail = f"{entry.wheel}, {size}, built in {progress.seconds():.0f} s; {describe(profile)}"
    return Check(name=name, status=PASSED, detail=detail, data=data)


def main_profile(wheelhouse: Path, *, package: str, label: str, cores: int) -> dict | None:
    """The main build's job of the same package (sm_90 alone), for comparison with the fat build's profile."""
    from builder.core.ledger import Ledger

    path = wheelhouse / "ledger.sqlite"
    if not path.is_file():
        return None
    with Ledger(path) as ledger:
        entry = next((e for e in ledger.entries() if e.label == label and e.package == package), None)
    if entry is None or entry.compile_times is None:
        return None
    return compile_profile(json.loads(entry.compile_times), wall=entry.timings.get("compile"), cores=cores)


def compile_profile(times: list[dict], *, wall: float | None, cores: int) -> dict:
    """The compile phase's wall time beside its work: ``times`` are nvcc's per-(unit, arch) seconds (host phases
    as arch "host"). A unit's archs run side by side (nvcc --threads), so a unit takes at least its host phases plus
    its slowest arch: the longest such unit is the critical path. The work over the cores is the cores bound."""
    if not times:
        return {"wall_s": wall, "pairs": 0}
    by_unit: dict[str, dict[str, float]] = defaultdict(dict)
    for row in times:
        by_unit[str(row["unit"])][str(row["arch"])] = float(row["seconds"])
    paths = {unit: _unit_path(archs) for unit, archs in by_unit.items()}
    ranked = sorted(paths.items(), key=lambda item: item[1], reverse=True)
    total = sum(float(row["seconds"]) for row in times)
    slowest = max((r for r in times if r["arch"] != HOST), key=lambda r: float(r["seconds"]), default=times[0])
    critical_unit, critical = ranked[0]
    bound = max(critical, total / cores)
    next_path = ranked[1][1] if len(ranked) > 1 else 0.0
    archs = {a: s for a, s in by_unit[critical_unit].items() if a != HOST}
    # split the critical unit into one unit per arch (or its kernels into halves): it can fall to its host phases
    # plus its slowest arch alone, and the build to whatever is next longest, or to the cores bound
    split_path = by_unit[critical_unit].get(HOST, 0.0) + (max(archs.values()) / 2 if archs else 0.0)
    after_split = max(next_path, split_path, total / cores)
    return {
        "wall_s": round(wall, 1) if wall is not None else None,
        "sum_s": round(total, 1),
        "max_pair": {"unit": slowest["unit"], "arch": slowest["arch"], "seconds": round(float(slowest["seconds"]), 1)},
        "critical_unit": critical_unit,
        "critical_path_s": round(critical, 1),
        "critical_unit_archs": {a: round(s, 1) for a, s in sorted(by_unit[critical_unit].items())},
        "cores": cores,
        "cores_bound_s": round(total / cores, 1),
        "lower_bound_s": round(bound, 1),
        "wall_over_bound": round(wall / bound, 2) if wall and bound else None,
        "next_unit_path_s": round(next_path, 1),
        "split_critical_halves_s": round(after_split, 1),
        "split_gain_s": round(max(0.0, bound - after_split), 1),  # 0: the cores, not one unit, bound the build
        "pairs": len(times),
    }


def _unit_path(archs: dict[str, float]) -> float:
    device = [seconds for arch, seconds in archs.items() if arch != HOST]
    return archs.get(HOST, 0.0) + (max(device) if device else 0.0)


def describe(profile: dict) -> str:
    if not profile.get("pairs"):
        return "no nvcc --time rows recorded"
    pair = profile["max_pair"]
    return (
        f"compile wall {profile['wall_s']} s vs sum {profile['sum_s']} s over {profile['pairs']} (unit, arch) pairs, "
        f"max {pair['seconds']} s ({pair['unit']} {pair['arch']}); critical path {profile['critical_path_s']} s "
        f"({profile['critical_unit']}), cores bound {profile['cores_bound_s']} s on {profile['cores']}; "
        + (
            f"splitting it in halves would save about {profile['split_gain_s']} s"
            if profile["split_gain_s"] > 0
            else "the cores bound the build, not one unit: splitting it would save nothing"
        )
    )


# -- doctor, before any kernel runs -----------------------------------------------------------------------------


def doctor_check(report: dict | None, cli_report: dict | None, variant: ArchVariant, *, package: str) -> Check:
    """Both doctors must give the variant's expected verdict first, and agree word for word; ptx-jit must come with
    OK (it runs), no-kernel-image must name the error a kernel call will raise."""
    name = f"doctor says {variant.doctor} for the {variant.name} wheel"
    problems = []
    for who, document in (("doctor.py", report), ("wheelwright doctor", cli_report)):
        if document is None:
            problems.append(f"{who} gave no JSON report")
            continue
        codes = _codes(document, package)
        if codes is None:
            problems.append(f"{who} did not find {package} installed")
        elif codes[:1] != [variant.doctor] or (variant.doctor == "ptx-jit" and "ok" not in codes):
            problems.append(f"{who} said {codes}")
    messages = _messages(report, package) if report else []
    if variant.doctor == "no-kernel-image" and messages and NO_KERNEL_IMAGE not in messages[0]:
        problems.append(f"its message does not name '{NO_KERNEL_IMAGE}': {messages[0]}")
    if variant.doctor == "ptx-jit" and messages and "JIT" not in messages[0]:
        problems.append(f"its message does not name the PTX JIT: {messages[0]}")
    if report and cli_report and _messages(report, package) != _messages(cli_report, package):
        problems.append("doctor.py and `wheelwright doctor` disagree")
    detail = "; ".join(problems) or " / ".join(messages)
    return Check(name=name, status=FAILED if problems else PASSED, detail=detail, data={"verdicts": messages})


def _diagnosis(document: dict, package: str) -> dict | None:
    return next((d for d in document.get("diagnoses", []) if d.get("package") == package), None)


def _codes(document: dict, package: str) -> list[str] | None:
    diagnosis = _diagnosis(document, package)
    return None if diagnosis is None else [v["code"] for v in diagnosis["verdicts"]]


def _messages(document: dict, package: str) -> list[str]:
    diagnosis = _diagnosis(document, package)
    return [] if diagnosis is None else [v["message"] for v in diagnosis["verdicts"]]


# -- the kernel call that must fail -----------------------------------------------------------------------------


NO_KERNEL_CHECK = "causal_conv1d_fn on the H200 fails with 'no kernel image is available'"


def judge_failed_call(error: BaseException | None) -> Check:
    """The wheel without the GPU's arch: its kernel call must raise CUDA's no-kernel-image error, nothing else."""
    if error is None:
        return Check(name=NO_KERNEL_CHECK, status=FAILED, detail="the kernel ran: the GPU found code it should lack")
    message = f"{type(error).__name__}: {error}".splitlines()[0][:300]
    ok = NO_KERNEL_IMAGE in str(error)
    return Check(name=NO_KERNEL_CHECK, status=PASSED if ok else FAILED, detail=message, data={"error": message})


def no_kernel_call() -> Check:
    import torch
    from causal_conv1d import causal_conv1d_fn

    x = torch.randn(1, 64, 32, device="cuda")
    weight = torch.randn(64, 4, device="cuda")
    try:
        causal_conv1d_fn(x, weight)
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 (the error is the result)
        return judge_failed_call(error)
    return judge_failed_call(None)


# -- the closing figures ----------------------------------------------------------------------------------------


def closing_lines(summary: dict) -> list[str]:
    """The three figures the issue's closing note quotes, from the summary: the JIT's cost, PTX's speed against
    SASS, and the fat build's wall time against its critical path (nothing for a stage that has not run)."""
    stages = summary.get("stages", {})
    lines = []
    speed = stages.get("ptx_speed", {}).get("data", {})
    if speed.get("jit_s") is not None:
        first = speed.get("first_call", {}).get("ptx", {})
        lines.append(
            f"PTX JIT: {speed['jit_s']:.2f} s more than SASS for the first call (CUDA_CACHE_DISABLE="
            f"{first.get('CUDA_CACHE_DISABLE')}, CUDA_MODULE_LOADING={first.get('CUDA_MODULE_LOADING')})"
        )
    if speed.get("worst_ratio") is not None:
        arms = speed.get("arms", {})
        rounds, target = speed.get("method", {}).get("rounds"), arms.get(speed.get("target"), "PTX")
        line = (f"PTX/SASS kernel time, once JIT-ed (median of {rounds} interleaved rounds): {target} worst "
                f"{speed['worst_ratio']:.3f} over {len(speed['ratios'])} cases")
        if speed.get("worst_isa_ratio") is not None:
            line += f", {arms.get(speed.get('isa'), 'the ISA control')} worst {speed['worst_isa_ratio']:.3f}"
        lines.append(f"{line}; A/A noise up to {speed.get('worst_noise', 0):.1%}")
        lines.append(f"verdict: {speed.get('verdict')}: {speed.get('verdict_text')}")
    fat = stages.get("arch_build", {}).get("data", {}).get("fat", {}).get("compile_profile")
    if fat and fat.get("pairs"):
        lines.append(f"fat build: {describe(fat)}")
    return lines
