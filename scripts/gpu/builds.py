"""What the acceptance run's builds left, read from their ledgers: the main build's one check per job (a verified
wheel in dist/), each arch variant's wheel with the archs asked for and where its compile time went (the compile
profile: wall time beside the critical path and the cores bound), and the SASS reference ptx_speed times against."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.wheelhouse import Layout
from builder.steps.slim import capability
from scripts.gpu import detach
from scripts.gpu.box import Box
from scripts.gpu.data import AcceptanceData
from scripts.gpu.summary import FAILED, PENDING, REUSED, RUNNING, StageResult, check, of_checks

HOST = "host"  # builder/steps/nvcc_time.py's name for the phases that run once per unit, whatever the archs


def entries(wheelhouse: Path, label: str, package: str | None = None) -> list[LedgerEntry]:
    path = Layout(root=wheelhouse).ledger
    if not path.is_file():
        return []
    with Ledger(path) as ledger:
        return [e for e in ledger.entries() if e.label == label and package in (None, e.package)]


def _built(entry: LedgerEntry, wheelhouse: Path) -> bool:
    return entry.status == Status.BUILT and (Layout(root=wheelhouse).dist / str(entry.wheel)).is_file()


def held_packages(wheelhouse: Path, data: AcceptanceData) -> tuple[str, ...]:
    """The data file's packages the wheelhouse has a built wheel of (what a --skip-build run checks)."""
    built = {canonicalize_name(e.package) for e in entries(wheelhouse, data.label) if _built(e, wheelhouse)}
    return tuple(package for package in data.packages if canonicalize_name(package) in built)


def build_report(wheelhouse: Path, data: AcceptanceData, *, exit_code: int, reused: bool = False,
                 seconds: float | None = None) -> StageResult:
    """One check per job of the label: passed when it produced a verified wheel in dist/."""
    checks = []
    for entry in entries(wheelhouse, data.label):
        timings = ", ".join(f"{phase} {took:.0f}s" for phase, took in entry.timings.items())
        built = _built(entry, wheelhouse)
        detail = f"{entry.wheel} ({timings})" if built else f"{entry.status} in {entry.phase}: {entry.reason}"
        facts = {"job": entry.job_id, "status": str(entry.status), "timings": entry.timings,
                 "sha256": entry.wheel_sha256, "size": entry.wheel_size, **({"wheel": entry.wheel} if built else {})}
        checks.append(check(entry.job_id, built, detail, **facts))
    if not checks:
        checks = [check("wheelwright build", False,
                        f"no {data.label} jobs in {Layout(root=wheelhouse).ledger} (exit {exit_code})")]
    elif exit_code != 0 and all(c["status"] != FAILED for c in checks):
        checks.append(check("wheelwright build", False, f"exited {exit_code}"))
    wheels = [c["data"]["wheel"] for c in checks if "wheel" in c.get("data", {})]
    result = of_checks(checks, data={"wheels": wheels})
    how = f"reused from {wheelhouse}" if reused else "built"
    status = REUSED if reused and result.status != FAILED else result.status
    return StageResult(status=status, detail=f"{len(wheels)} wheels {how}: {', '.join(wheels) or 'none'}",
                       checks=result.checks, data=result.data, seconds=seconds)


def detached_report(wheelhouse: Path, state: Path, data: AcceptanceData) -> StageResult:
    """The detached build's result: running (for a later command to collect), or its ledger's, collected."""
    progress = detach.status(state)
    if progress.state == detach.RUNNING:
        return StageResult(status=RUNNING, seconds=progress.seconds(), detail=(
            f"still running after {progress.seconds():.0f} s (pid {progress.pid}, detached): --resume collects it"))
    ended = progress.exit_code if progress.state in (detach.FINISHED, detach.COLLECTED) else None
    detach.collect(state)
    return build_report(wheelhouse, data, exit_code=-1 if ended is None else ended, seconds=progress.seconds())


def arch_build_check(folder: Path, name: str, data: AcceptanceData, *, cores: int) -> dict[str, Any]:
    """One variant's build: still running (status "running"), or its wheel with the archs its job asked for, its
    wall time and, from the ledger's ``compile_times``, where that time went."""
    variant, label = data.variant(name), f"{name} build ({data.variant(name).profile})"
    progress = detach.status(folder / "build-run")
    if progress.state == detach.RUNNING:
        return {"name": label, "status": RUNNING, "detail": f"still running after {progress.seconds():.0f} s"}
    if progress.state == detach.NONE:
        return check(label, False, f"no build was started in {folder}")
    detach.collect(folder / "build-run")
    found = entries(folder, data.label, data.arch.package)
    exit_code = progress.exit_code if progress.exit_code is not None else -1
    if len(found) != 1:
        return check(label, False, f"{len(found)} {data.arch.package} jobs in {Layout(root=folder).ledger} "
                                   f"(exit {exit_code})")
    entry = found[0]
    if not _built(entry, folder) or exit_code != 0:
        failed = f"{entry.status} in {entry.phase}: {entry.reason}"
        return check(label, False, f"exit {exit_code}" if entry.status == Status.BUILT else failed)
    profile = compile_profile(json.loads(entry.compile_times or "[]"), wall=entry.timings.get("compile"), cores=cores)
    size = f"{(entry.wheel_size or 0) / 2**20:.1f} MiB"
    slims = slim_figures(folder, entry, data.gpu_arch, judged=variant.stage == "arch_slim")
    problems = slims.pop("problems", [])
    detail = f"{entry.wheel}, {size}, built in {progress.seconds():.0f} s; {describe(profile)}"
    return check(label, not problems, "; ".join([detail, *([slims["detail"]] if slims else []), *problems]),
                 wheel=entry.wheel, size=entry.wheel_size, sha256=entry.wheel_sha256, sass=list(variant.sass),
                 ptx=list(variant.ptx), build_seconds=round(progress.seconds(), 1), timings=entry.timings,
                 compile_profile=profile, **({"slim": slims} if slims else {}))


def slim_figures(folder: Path, entry: LedgerEntry, gpu_arch: str, *, judged: bool) -> dict[str, Any]:
    """Issue 28's two figures of a build that cut slim wheels ({} for one that did not): the bytes a user of
    ``gpu_arch`` downloads (its slim wheel) against the fat wheel's, at most 1/3; and the seconds the slim wheels
    took (relink and cut: the ledger's ``slim``) against the fat wheel's build (its other phases), at most 10%.
    ``judged`` (the arch_slim stage's build): a missed target is one of ``problems``, as is a refused slim wheel."""
    with Ledger(Layout(root=folder).ledger) as ledger:
        rows = ledger.slims(entry.job_id)
    if not rows:
        return {}
    built = sorted((r for r in rows if r.status == Status.BUILT and r.wheel_size), key=lambda r: capability(r.arch))
    sizes = {row.arch: int(row.wheel_size or 0) for row in built}
    fat, slim = entry.wheel_size or 0, sizes.get(gpu_arch)
    cost = entry.timings.get("slim", 0.0)
    build = sum(t for phase, t in entry.timings.items() if phase != "slim")
    ratio, share = (slim / fat if slim and fat else None), (cost / build if build > 0 else None)
    problems = [f"slim wheel sm_{row.arch}: {row.status}: {row.reason}" for row in rows if row.status != Status.BUILT]
    if not judged:
        problems = []
    elif ratio is None or ratio > 1 / 3:
        problems.append(f"sm_{gpu_arch} downloads {ratio or 'no slim wheel'} of the fat wheel's bytes, not <= 1/3")
    if judged and (share is None or share > 0.10):
        problems.append(f"the slim wheels took {cost:.1f} s of a {build:.1f} s build, not <= 10%")
    detail = (f"slim wheels {', '.join(f'sm_{a} {b / 2**20:.1f} MiB' for a, b in sizes.items())}: sm_{gpu_arch} "
              f"downloads {(slim or 0) / 2**20:.1f} of the fat {fat / 2**20:.1f} MiB ({ratio or 0:.3f}); cut in "
              f"{cost:.1f} s beside the fat build's {build:.1f} s ({share or 0:.1%})")
    return {"sizes": sizes, "fat_bytes": fat, "gpu_slim_bytes": slim, "download_ratio": ratio, "slim_seconds": cost,
            "build_seconds": round(build, 3), "cost_share": share,
            "detail": detail, "problems": problems}


def main_profile(wheelhouse: Path, data: AcceptanceData, *, cores: int) -> dict[str, Any] | None:
    """The main build's job of the arch package (the GPU's arch alone), beside the fat build's profile."""
    found = [e for e in entries(wheelhouse, data.label, data.arch.package) if e.compile_times is not None]
    if not found:
        return None
    return compile_profile(json.loads(str(found[0].compile_times)), wall=found[0].timings.get("compile"), cores=cores)


def compile_profile(times: list[dict[str, Any]], *, wall: float | None, cores: int) -> dict[str, Any]:
    """The compile phase's wall time beside its work: ``times`` are nvcc's per-(unit, arch) seconds (host phases
    as arch "host"). A unit's archs run side by side (nvcc --threads), so a unit takes at least its host phases plus
    its slowest arch: the longest such unit is the critical path. The work over the cores is the cores bound."""
    if not times:
        return {"wall_s": wall, "pairs": 0}
    by_unit: dict[str, dict[str, float]] = defaultdict(dict)
    for row in times:
        by_unit[str(row["unit"])][str(row["arch"])] = float(row["seconds"])
    ranked = sorted(((unit, _unit_path(archs)) for unit, archs in by_unit.items()), key=lambda item: -item[1])
    total = sum(float(row["seconds"]) for row in times)
    slowest = max((r for r in times if r["arch"] != HOST), key=lambda r: float(r["seconds"]), default=times[0])
    (critical_unit, critical), next_path = ranked[0], ranked[1][1] if len(ranked) > 1 else 0.0
    bound = max(critical, total / cores)
    archs = [s for a, s in by_unit[critical_unit].items() if a != HOST]
    # split the critical unit into one unit per arch (or its kernels into halves): it can fall to its host phases
    # plus its slowest arch alone, and the build to whatever is next longest, or to the cores bound
    after_split = max(next_path, by_unit[critical_unit].get(HOST, 0.0) + max(archs, default=0.0) / 2, total / cores)
    return {
        "wall_s": round(wall, 1) if wall is not None else None, "sum_s": round(total, 1),
        "max_pair": {"unit": slowest["unit"], "arch": slowest["arch"], "seconds": round(float(slowest["seconds"]), 1)},
        "critical_unit": critical_unit, "critical_path_s": round(critical, 1),
        "critical_unit_archs": {a: round(s, 1) for a, s in sorted(by_unit[critical_unit].items())},
        "cores": cores, "cores_bound_s": round(total / cores, 1), "lower_bound_s": round(bound, 1),
        "wall_over_bound": round(wall / bound, 2) if wall and bound else None,
        "next_unit_path_s": round(next_path, 1), "split_critical_halves_s": round(after_split, 1),
        "split_gain_s": round(max(0.0, bound - after_split), 1),  # 0: the cores, not one unit, bound the build
        "pairs": len(times),
    }


def _unit_path(archs: dict[str, float]) -> float:
    return archs.get(HOST, 0.0) + max((seconds for arch, seconds in archs.items() if arch != HOST), default=0.0)


def describe(profile: dict[str, Any]) -> str:
    if not profile.get("pairs"):
        return "no nvcc --time rows recorded"
    pair = profile["max_pair"]
    split = (f"splitting it in halves would save about {profile['split_gain_s']} s" if profile["split_gain_s"] > 0
             else "the cores bound the build, not one unit: splitting it would save nothing")
    return (f"compile wall {profile['wall_s']} s vs sum {profile['sum_s']} s over {profile['pairs']} (unit, arch) "
            f"pairs, max {pair['seconds']} s ({pair['unit']} {pair['arch']}); critical path "
            f"{profile['critical_path_s']} s ({profile['critical_unit']}), cores bound {profile['cores_bound_s']} s "
            f"on {profile['cores']}; {split}")


def sass_reference(path: Path, data: AcceptanceData) -> Path:
    """The one causal-conv1d wheel of the label under ``path`` (a wheel, or a build output's dist/), after checking
    that it holds SASS for the GPU's arch: the reference ptx_speed times PTX against. ValueError says what is wrong."""
    from builder.steps.elf import wheel_elf_facts

    prefix = canonicalize_name(data.arch.package).replace("-", "_") + "-"
    wheels = [path] if path.is_file() else sorted(Layout(root=path).dist.glob(f"{prefix}*+{data.label}-*.whl"))
    if len(wheels) != 1:
        raise ValueError(f"{path}: {len(wheels)} {data.arch.package} wheels of {data.label} (want one)")
    facts = wheel_elf_facts(wheels[0])
    if not any(data.gpu_arch in f.gpu.sass for f in facts):
        held = "; ".join(f"{f.name}: {f.gpu.describe()}" for f in facts if not f.gpu.empty) or "no GPU code"
        raise ValueError(f"{wheels[0]}: no SASS for {data.gpu_arch} ({held})")
    return wheels[0].resolve()


def not_ready(box: Box, name: str) -> StageResult | None:
    """None when the variant's wheel is there; pending while its build runs; failed when it has none."""
    if detach.status(box.arch(name) / "build-run").state == detach.RUNNING:
        return StageResult(status=PENDING, detail=f"pending: the {name} build is still running; --resume runs it")
    dist = Layout(root=box.arch(name)).dist
    if not any(dist.glob("*.whl")):
        return StageResult(status=FAILED, detail=f"no {name} wheel in {dist} (the arch_build stage builds it)")
    return None
