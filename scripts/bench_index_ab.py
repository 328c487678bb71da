"""Benchmark the index side by side: this checkout's code and another's (``--against``, e.g. a `git worktree` of
main), each in its own long-lived process on its own copy of the same synthetic wheels, run interleaved so both
see the same load: a cold index, then ``--repeat`` rounds of a re-index with nothing changed and one after the
same new wheel is added to both. Prints medians (wall and CPU seconds), their ratios and the load average.

    .venv/bin/python -m scripts.bench_index_ab --against ../main --repeat 7
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.bench_index import PYTHON_TAG, synthetic_specs
from tests.wheelfactory import WheelSpec, make_wheel

ROOT = Path(__file__).resolve().parents[1]
BASE_URL = "https://wheels.example.org"

# Run in each worker: index the output named on each line of stdin, answer with wall and CPU seconds.
_WORKER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import index_site.site
from index_site.site import build_site
print(json.dumps({"code": index_site.site.__file__}), flush=True)
for line in sys.stdin:
    output = Path(line.strip())
    wall, cpu = time.perf_counter(), time.process_time()
    report = build_site(output, output / "site", base_url=sys.argv[2])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    answer = {"wall": wall, "cpu": cpu, "hashed": report.stats.hashed, "written": len(report.written)}
    print(json.dumps(answer), flush=True)
"""


class Worker:
    """One checkout's index, in a process of its own that keeps its memos from run to run."""

    def __init__(self, name: str, code: Path, output: Path) -> None:
        self.name, self.output = name, output
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(code), BASE_URL],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=code,
        )
        self.code = self._answer()["code"]

    def index(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{self.output}\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: the worker stopped (exit {self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait()


def bench(against: Path, count: int, repeat: int, added_mb: float, workdir: Path, colds: int = 1) -> dict[str, Any]:
    base = workdir / "base"
    if not (base / "dist").is_dir():  # a --workdir of an earlier run keeps its wheels
        for spec in synthetic_specs(count, 1024):
            make_wheel(base / "dist", spec)
    pairs = [("this", ROOT), ("against", against)]
    shutil.rmtree(workdir / "added", ignore_errors=True)
    for name, _ in pairs:
        shutil.rmtree(workdir / name, ignore_errors=True)
        shutil.copytree(base, workdir / name)
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {"cold": [], "+1": [], "unchanged": []} for name, _ in pairs
    }
    for round_ in range(colds - 1):  # each in a fresh process on a fresh site and hash cache, interleaved
        for name, code in pairs if round_ % 2 == 0 else pairs[::-1]:
            fresh = Worker(name, code, workdir / name)
            os.sync()  # the other's 20,000 files written back now, not during this run
            runs[name]["cold"].append(fresh.index())
            fresh.close()
            shutil.rmtree(workdir / name / "site")
            (workdir / name / "ledger.sqlite").unlink()
    workers = [Worker(name, code, workdir / name) for name, code in pairs]
    for worker in workers:  # the last cold run: each worker's first, whose memos the rounds below start from
        os.sync()
        runs[worker.name]["cold"].append(worker.index())
    for round_ in range(repeat):
        order = workers if round_ % 2 == 0 else workers[::-1]  # neither always runs first
        for worker in order:
            runs[worker.name]["unchanged"].append(worker.index())
        added = make_wheel(
            workdir / "added" / str(round_),
            WheelSpec(
                project="causal-conv1d",
                version=f"1.9.{round_}",
                label="pt214cu130",
                python=PYTHON_TAG,
                payload_bytes=int(added_mb * 1e6),
            ),
        )
        for worker in workers:
            shutil.copy2(added, worker.output / "dist" / added.name)
        for worker in order:
            runs[worker.name]["+1"].append(worker.index())
    for worker in workers:
        worker.close()
    medians = {
        name: {
            kind: {measure: round(statistics.median(r[measure] for r in results), 3) for measure in ("wall", "cpu")}
            for kind, results in kinds.items()
        }
        for name, kinds in runs.items()
    }
    return {
        "code": {w.name: w.code for w in workers},
        "wheels": count,
        "repeat": repeat,
        "medians": medians,
        "runs": {
            name: {kind: [round(r["cpu"], 3) for r in results] for kind, results in kinds.items()}
            for name, kinds in runs.items()
        },
        "load_average": [round(x, 2) for x in (*load_before, *os.getloadavg())],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the root of the other checkout")
    parser.add_argument("--wheels", type=int, default=10_000, help="synthetic wheels (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=7, help="unchanged and +1 rounds (default: %(default)s)")
    parser.add_argument("--colds", type=int, default=1, help="cold runs, each in a fresh process (default: 1)")
    parser.add_argument("--added-wheel-mb", type=float, default=20.0, help="size of each added wheel (default: 20)")
    parser.add_argument("--workdir", type=Path, help="keep the generated wheels here, for the next run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-index-ab-", ignore_cleanup_errors=True) as temporary:
        workdir = args.workdir or Path(temporary)
        repeat, colds = max(1, args.repeat), max(1, args.colds)
        results = bench(args.against.resolve(), args.wheels, repeat, args.added_wheel_mb, workdir, colds)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    this, other = results["medians"]["this"], results["medians"]["against"]
    colds = len(results["runs"]["this"]["cold"])
    print(
        f"{results['wheels']} wheels, medians of {results['repeat']} (cold: {colds}); this: {results['code']['this']}"
    )
    print(f"{'':<10} {'this wall':>10} {'this CPU':>10} {'other wall':>11} {'other CPU':>10} {'CPU ratio':>10}")
    for kind in ("cold", "+1", "unchanged"):
        a, b = this[kind], other[kind]
        ratio = a["cpu"] / b["cpu"]
        print(f"{kind:<10} {a['wall']:>10.3f} {a['cpu']:>10.3f} {b['wall']:>11.3f} {b['cpu']:>10.3f} {ratio:>10.2f}")
    print(f"load average (1/5/15 min): before {results['load_average'][:3]}, after {results['load_average'][3:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
