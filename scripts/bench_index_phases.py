"""Where one added wheel's `wheelwright index` goes, phase by phase: scripts/bench_index's synthetic wheels, a cold
index, then --repeat times a new release's wheel added (bench_index's "+1") and the index run in a new process that
marks the end of each phase of the run (the quiet run's listing, judging dist/, settling the twins, the catalog,
mapping the manifest, rendering, planning, placing, what is left for the next run) with the CPU-seconds, the minor
page faults and the resident memory since the mark before. Medians over the runs; docs/performance.md's table of
a +1's phases comes from it. A phase is named after the function whose return ends it: "render_changed" holds all
of the run between the folders settled and the pages rendered (the channel's groups, the blocks unpacked).

    .venv/bin/python -m scripts.bench_index_phases --wheels 10000 --repeat 5 --workdir /tmp/bi10k
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder.core.wheelhouse import Layout

# (module, function): each phase ends where its function returns, in the order a +1 calls them
PHASES = [
    ("index_site.stage", "quiet_run"),
    ("index_site.site", "judge"),
    ("index_site.site", "settle_twins"),
    ("index_site.site", "catalog_of"),
    ("index_site.site", "recorded_manifest"),
    ("index_site.site", "settled_folders"),
    ("index_site.site", "render_changed"),
    ("index_site.site", "plan_site"),
    ("index_site.site", "apply_plan"),
    ("index_site.site", "kept_for_next"),
    ("index_site.site", "leave"),
]
FIGURES = ("cpu", "faults", "rss_mb")


class _Marks:
    """The figures of each phase of this process: from the mark before to the end of the phase."""

    def __init__(self) -> None:
        self.phases: list[dict[str, Any]] = []
        self._cpu, self._faults = 0.0, 0

    def mark(self, phase: str) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime
        with open("/proc/self/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        self.phases.append({"phase": phase, "cpu": round(cpu - self._cpu, 4), "faults": usage.ru_minflt - self._faults,
                            "rss_mb": round(rss / 1e6)})
        self._cpu, self._faults = cpu, usage.ru_minflt

    def ending(self, function: Callable[..., Any], phase: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def marked(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            self.mark(phase)
            return result

        return marked


def run_marked(output: Path, base_url: str) -> list[dict[str, Any]]:
    """One index of ``output`` in this process, as the CLI runs it (builder.cli.index: the build step's twin maker),
    with each phase marked."""
    import importlib

    marks = _Marks()
    marks.mark("start")  # the interpreter and this script's imports
    from builder.steps.twins import VariantTwins
    from index_site.stage import build_site

    for module, name in PHASES:
        owner = importlib.import_module(module)
        setattr(owner, name, marks.ending(getattr(owner, name), name))
    marks.mark("imports")
    build_site(output, Layout(root=output).site, base_url=base_url, twins=VariantTwins())
    marks.mark("the rest")  # the report, the state closed
    return marks.phases


def bench(workdir: Path, count: int, repeat: int, added_mb: float) -> dict[str, Any]:
    """--repeat +1 runs on ``count`` wheels, each in a new process; the median of each figure of each phase."""
    from scripts.bench_index import BASE_URL, ROOT, change, compile_bytecode, write_wheelhouse  # not in the child

    compile_bytecode(ROOT)

    base = workdir / f"base-{count}-prov"
    if not Layout(root=base).dist.is_dir():
        write_wheelhouse(base, count, with_provenance=True)
    command = [sys.executable, "-m", "builder.cli.main", "index", "--output", str(base), "--base-url", BASE_URL]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, cwd=ROOT, env=environment, check=True, capture_output=True)  # cold, or brought up to date
    runs = []
    for round_ in range(repeat):
        change([base], "+1", _next_release(base), with_provenance=True, added_mb=added_mb)
        child = [sys.executable, "-m", "scripts.bench_index_phases", "--child", str(base), "--base-url", BASE_URL]
        result = subprocess.run(child, cwd=ROOT, env=environment, check=True, capture_output=True, text=True)
        runs.append(json.loads(result.stdout.splitlines()[-1]))
    phases = [phase["phase"] for phase in runs[0]]
    medians = [
        {"phase": name, **{figure: statistics.median(run[i][figure] for run in runs) for figure in FIGURES}}
        for i, name in enumerate(phases)
    ]
    return {"wheels": count, "repeat": repeat, "phases": medians, "runs": runs}


def _next_release(base: Path) -> int:
    """A "+1" round (bench_index.change adds causal-conv1d 9.9.<round>) whose release is not in dist/ yet."""
    added = [name.split("-")[1].split("+")[0] for name in os.listdir(Layout(root=base).dist)]
    return 1 + max((int(version[4:]) for version in added if version.startswith("9.9.")), default=-1)


def print_phases(result: dict[str, Any]) -> None:
    print(f"{result['wheels']:,} wheels, one added: medians of {result['repeat']} runs, each in a new process")
    print(f"  {'phase (ends where it returns)':<30} {'CPU s':>7} {'faults':>8} {'RSS MB':>7}")
    for phase in result["phases"]:
        print(f"  {phase['phase']:<30} {phase['cpu']:>7.3f} {phase['faults']:>8,.0f} {phase['rss_mb']:>7,.0f}")
    total = sum(phase["cpu"] for phase in result["phases"])
    print(f"  {'total':<30} {total:>7.3f} {sum(p['faults'] for p in result['phases']):>8,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=int, default=10_000, help="synthetic wheels (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=5, help="+1 runs (default: %(default)s)")
    parser.add_argument("--added-mb", type=float, default=20.0, help="size of the added wheel (default: 20)")
    parser.add_argument("--workdir", type=Path, help="keep the generated wheels here, for the next run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # one marked run of this output folder
    parser.add_argument("--base-url", help=argparse.SUPPRESS)  # the child's: the one the cold run indexed with
    args = parser.parse_args()
    if args.child is not None:
        if args.base_url is None:
            parser.error("--child needs --base-url")
        print(json.dumps(run_marked(args.child, args.base_url)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-phases-", ignore_cleanup_errors=True) as temporary:
        result = bench(args.workdir or Path(temporary), args.wheels, max(1, args.repeat), args.added_mb)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_phases(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
