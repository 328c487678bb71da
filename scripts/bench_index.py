"""Benchmark the index stage: index N synthetic wheels (realistic names across the torch x accelerator x Python
variants of builder/data/torch.toml) cold, then --repeat times again unchanged and after one more wheel is added
(medians, wall and CPU, with the load average: the machine may be shared); then measure the bytes real pip
downloads for `install --dry-run` with PEP 658 metadata and without it.

    .venv/bin/python scripts/bench_index.py              # 10,000 wheels
    .venv/bin/python scripts/bench_index.py --wheels 300 --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from builder.core.hashing import sha256_of as sha256_file
from builder.core.runner import run
from builder.plan.facts import load_facts
from builder.plan.job import format_label
from index_site.serve import Served, serving
from index_site.site import build_site
from tests.index_checks import installer_environment, pip_install
from tests.wheelfactory import WheelSpec, make_wheel

PROJECTS = {
    "causal-conv1d": [f"1.{minor}.{patch}" for minor in range(8) for patch in range(3)],
    "mamba-ssm": [f"2.{minor}.{patch}" for minor in range(4) for patch in range(6)],
}
PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def synthetic_specs(count: int, payload: int) -> Iterator[WheelSpec]:
    """``count`` distinct wheels: every variant torch built, for each of its Pythons, across many versions. Newest
    torch first, so that a small count still holds the label a new wheel is added to (pt214cu130)."""
    variants = [
        (format_label(release.latest, accelerator), "cp" + python.replace(".", ""))
        for release in reversed(load_facts().releases)
        for accelerator in release.accelerators
        for python in release.python
    ]
    releases = [(project, version) for project, versions in PROJECTS.items() for version in versions]
    combos = itertools.product(releases, variants)
    for (project, version), (label, python) in itertools.islice(combos, count):
        yield WheelSpec(
            project=project,
            version=version,
            label=label,
            python=python,
            platform="manylinux_2_28_x86_64",
            payload_bytes=payload,
        )


def timed(action, *args, **kwargs):
    start = time.perf_counter()
    result = action(*args, **kwargs)
    return result, time.perf_counter() - start


def timed_cpu(action, *args, **kwargs):
    """``action``'s result, wall seconds and CPU seconds of this process (less sensitive to a shared machine)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = action(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def pip_dry_run_bytes(site: Path, page: str, requirement: str, workdir: Path) -> dict[str, int]:
    """Bytes served to pip resolving ``requirement`` from the find-links page ``page`` (site path)."""
    served: list[Served] = []
    lock = threading.Lock()

    def record(request: Served) -> None:
        with lock:
            served.append(request)

    env = installer_environment(workdir / "uv-cache")
    venv = workdir / f"venv-{len(list(workdir.glob('venv-*')))}"
    run([sys.executable, "-m", "venv", "--without-pip", venv], step="create venv", env=env)
    with serving(site, on_request=record) as server:
        pip_install(venv / "bin" / "python", env, "--dry-run", "--no-index", "-f", f"{server.url}/{page}", requirement)
    kinds = {"page": 0, "metadata": 0, "wheel": 0}
    for request in served:
        kind = (
            "wheel" if request.path.endswith(".whl") else "metadata" if request.path.endswith(".metadata") else "page"
        )
        kinds[kind] += request.length
    return {**kinds, "total": sum(kinds.values())}


def without_pep658(site: Path, page: str) -> str:
    """A copy of the find-links page ``page`` without PEP 658/714 attributes, beside it; returns its site path."""
    stripped = re.sub(r' data-(?:core|dist-info)-metadata="[^"]*"', "", (site / page).read_text())
    copy = page.replace(".html", "-no658.html")
    (site / copy).write_text(stripped)
    return copy


def bench_big_wheels(count: int, megabytes: float, workdir: Path) -> dict[str, object]:
    """Cold-index ``count`` wheels of realistic size: the time should be mostly sha256 over their bytes."""
    output = workdir / "big"
    labels = ("pt214cu130", "pt213cu130", "pt212cu126", "pt211cu128")
    specs = [
        WheelSpec(
            version=f"1.{i}.0", label=labels[i % len(labels)], python=PYTHON_TAG, payload_bytes=int(megabytes * 1e6)
        )
        for i in range(count)
    ]
    paths = [make_wheel(output / "dist", spec) for spec in specs]
    _, hash_seconds = timed(lambda: [sha256_file(path) for path in paths])
    _, cold_seconds = timed(build_site, output, output / "site", base_url="https://wheels.example.org")
    size = sum(path.stat().st_size for path in paths)
    return {
        "wheels": count,
        "bytes": size,
        "sha256_all_seconds": round(hash_seconds, 3),
        "cold_seconds": round(cold_seconds, 3),
    }


def bench(count: int, payload: int, resolved_mb: float, workdir: Path, repeat: int = 5) -> dict[str, object]:
    output = workdir / "wheelhouse"
    label = "pt214cu130"
    # The label the runs add to leads its torch (as the registry's variant does on a real site): torch 2.14's four
    # variants tie in synthetic data, and a wheel that breaks a tie moves every setup page's navigation to it.
    leader = WheelSpec(project="causal-conv1d", version="0.0.1", label=label, python=PYTHON_TAG,
                       platform="manylinux_2_28_x86_64", payload_bytes=payload)
    specs, generate_seconds = timed(
        lambda: [make_wheel(output / "dist", spec) for spec in (*synthetic_specs(count - 1, payload), leader)]
    )
    total_bytes = sum(path.stat().st_size for path in specs)
    _, hash_seconds = timed(lambda: [sha256_file(path) for path in specs])
    site = output / "site"
    load_before = os.getloadavg()
    cold, cold_seconds, cold_cpu = timed_cpu(build_site, output, site, base_url="https://wheels.example.org")
    same_runs, added_runs, reports = [], [], []
    for run_index in range(repeat):  # each: a re-index with nothing changed, then one with a new release's wheel
        same, *same_times = timed_cpu(build_site, output, site, base_url="https://wheels.example.org")
        added = WheelSpec(
            project="causal-conv1d",
            version=f"1.9.{run_index}",
            label=label,
            python=PYTHON_TAG,
            platform="manylinux_2_28_x86_64",
            payload_bytes=int(resolved_mb * 1e6),
        )
        make_wheel(output / "dist", added)
        incremental, *added_times = timed_cpu(build_site, output, site, base_url="https://wheels.example.org")
        same_runs.append(same_times)
        added_runs.append(added_times)
        reports.append((same, incremental))
    load_after = os.getloadavg()
    same, incremental = reports[0]
    page = f"whl/{label}.html"
    with_658 = pip_dry_run_bytes(site, page, "causal-conv1d", workdir)
    without_658 = pip_dry_run_bytes(site, without_pep658(site, page), "causal-conv1d", workdir)
    unchanged_seconds = statistics.median(wall for wall, _ in same_runs)
    incremental_seconds = statistics.median(wall for wall, _ in added_runs)
    return {
        "wheels": cold.wheels,
        "variants": len(cold.variants),
        "dist_bytes": total_bytes,
        "generate_seconds": round(generate_seconds, 2),
        "sha256_all_seconds": round(hash_seconds, 3),
        "cold_seconds": round(cold_seconds, 3),
        "cold_cpu_seconds": round(cold_cpu, 3),
        "cold_files_written": len(cold.written),
        "repeat": repeat,
        "unchanged_seconds": round(unchanged_seconds, 3),  # medians of the repeated runs
        "unchanged_cpu_seconds": round(statistics.median(cpu for _, cpu in same_runs), 3),
        "unchanged_runs": [round(wall, 3) for wall, _ in same_runs],
        "unchanged_files_written": max(len(report.written) for report, _ in reports),
        "incremental_seconds": round(incremental_seconds, 3),
        "incremental_cpu_seconds": round(statistics.median(cpu for _, cpu in added_runs), 3),
        "incremental_runs": [round(wall, 3) for wall, _ in added_runs],
        "incremental_hashed": incremental.stats.hashed,
        "incremental_files_written": len(incremental.written),
        "incremental_vs_cold": round(incremental_seconds / cold_seconds, 4),
        "unchanged_vs_cold": round(unchanged_seconds / cold_seconds, 4),
        "incremental_vs_unchanged": round(incremental_seconds / unchanged_seconds, 3),
        "load_average": [round(x, 2) for x in (*load_before, *load_after)],  # 1/5/15 min, before and after
        "resolved_wheel_bytes": (output / "dist" / added.wheel_filename).stat().st_size,
        "pip_bytes_with_pep658": with_658,
        "pip_bytes_without_pep658": without_658,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=int, default=10_000, help="synthetic wheels to index (default: %(default)s)")
    parser.add_argument(
        "--payload-bytes", type=int, default=1024, help="filler per synthetic wheel (default: %(default)s)"
    )
    parser.add_argument(
        "--resolved-wheel-mb", type=float, default=20.0, help="size of the wheel pip resolves (default: %(default)s)"
    )
    parser.add_argument(
        "--big-wheels",
        type=int,
        default=8,
        help="realistic-size wheels for the hashing-bound cold run (default: %(default)s)",
    )
    parser.add_argument("--big-wheel-mb", type=float, default=64.0, help="size of each of those (default: %(default)s)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="unchanged and one-added runs, reported as medians (default: %(default)s)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the generated files here (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    # a shared machine's cleaners may race the removal of 10,000 files: the results matter more than the folder
    with tempfile.TemporaryDirectory(prefix="bench-index-", ignore_cleanup_errors=True) as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        results = bench(args.wheels, args.payload_bytes, args.resolved_wheel_mb, workdir, max(1, args.repeat))
        results["big"] = bench_big_wheels(args.big_wheels, args.big_wheel_mb, workdir) if args.big_wheels else None
        if args.json:
            print(json.dumps(results, indent=2), flush=True)
        else:
            _print_results(results)
    return 0


def _print_results(r: dict) -> None:
    with_658, without = r["pip_bytes_with_pep658"], r["pip_bytes_without_pep658"]
    lines = [
        ("wheels indexed", f"{r['wheels']} in {r['variants']} variants ({r['dist_bytes'] / 1e6:.1f} MB)"),
        ("cold index", f"{r['cold_seconds']:.2f} s ({r['cold_files_written']} files written)"),
        ("  sha256 of every wheel", f"{r['sha256_all_seconds']:.2f} s"),
        (
            f"re-index, nothing changed (median of {r['repeat']})",
            (
                f"{r['unchanged_seconds']:.3f} s, CPU {r['unchanged_cpu_seconds']:.3f} s "
                f"({r['unchanged_files_written']} files written; runs {r['unchanged_runs']})"
            ),
        ),
        (
            f"incremental, 1 wheel added (median of {r['repeat']})",
            (
                f"{r['incremental_seconds']:.3f} s, CPU {r['incremental_cpu_seconds']:.3f} s "
                f"(hashed {r['incremental_hashed']}, {r['incremental_files_written']} files written; "
                f"runs {r['incremental_runs']})"
            ),
        ),
        (
            "  ratios",
            (
                f"+1/cold {r['incremental_vs_cold']:.3f}, unchanged/cold {r['unchanged_vs_cold']:.3f}, "
                f"+1/unchanged {r['incremental_vs_unchanged']:.2f}"
            ),
        ),
        ("load average (1/5/15 min)", f"before {r['load_average'][:3]}, after {r['load_average'][3:]}"),
    ]
    if r["big"]:
        big = r["big"]
        each = big["bytes"] / big["wheels"] / 1e6
        lines.append((f"cold index, {big['wheels']} x {each:.0f} MB wheels", f"{big['cold_seconds']:.2f} s"))
        lines.append(("  sha256 of those wheels", f"{big['sha256_all_seconds']:.2f} s"))
    for name, served in (("pip --dry-run, PEP 658", with_658), ("pip --dry-run, no PEP 658", without)):
        parts = f"page {served['page']:,} + metadata {served['metadata']:,} + wheel {served['wheel']:,}"
        lines.append((name, f"{served['total']:,} bytes ({parts})"))
    for name, value in lines:
        print(f"{name + ':':<34} {value}")


if __name__ == "__main__":
    sys.exit(main())
