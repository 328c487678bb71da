"""Benchmark `wheelwright index` side by side: this checkout's and another's (``--against``, e.g. a `git worktree` of
main), each as a CLI in a new process for every run (scripts/bench_index.py's runs: cold, unchanged, one added,
one replaced, one removed) on its own copy of the same synthetic wheels, interleaved so that both see the same
load. Prints the medians of CPU and wall seconds side by side with their ratio, the median of the runs' ratios pair
by pair (each pair ran one after the other, so it holds where this machine's speed moves by a third within an hour,
as the medians' ratio does not), and the load average.

    git worktree add ../main-1339cc4 1339cc4
    .venv/bin/python -m scripts.bench_index_ab --against ../main-1339cc4 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from scripts.bench_index import KINDS, ROOT, Checkout, bench


def pair_ratios(runs: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """For each kind of run, the median of this checkout's CPU-seconds over the other's, run by run: bench() runs
    the two one after the other, each round in turn, so the i-th runs of each are a pair."""
    this, other = runs["this"], runs["against"]
    return {
        kind: round(statistics.median(a / b for a, b in zip(this[kind], other[kind], strict=True)), 3)
        for kind in KINDS
    }


def print_side_by_side(result: dict[str, Any]) -> None:
    this, other = result["medians"]["this"], result["medians"]["against"]
    label = "with provenance" if result["provenance"] else "without provenance"
    print(f"{result['wheels']:,} wheels, {label}: medians of {result['repeat']} (cold: {result['colds']}), "
          f"load {result['load_average'][:3]} -> {result['load_average'][3:]}")
    print(f"  {'run':<10} {'this CPU':>9} {'this wall':>10} {'other CPU':>10} {'other wall':>11} {'CPU ratio':>10} "
          f"{'by pairs':>9}")
    for kind in KINDS:
        a, b = this[kind], other[kind]
        print(f"  {kind:<10} {a['cpu']:>9.3f} {a['wall']:>10.3f} {b['cpu']:>10.3f} {b['wall']:>11.3f} "
              f"{a['cpu'] / b['cpu']:>10.2f} {result['pair_ratios'][kind]:>9.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, required=True, help="the root of the other checkout")
    parser.add_argument("--wheels", type=int, default=10_000, help="synthetic wheels (default: %(default)s)")
    parser.add_argument("--no-provenance", action="store_true", help="wheels without wheelwright.json or twins")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each kind but cold (default: %(default)s)")
    parser.add_argument("--colds", type=int, default=1, help="cold runs of each (default: %(default)s)")
    parser.add_argument("--added-mb", type=float, default=20.0, help="size of the added wheel (default: 20)")
    parser.add_argument("--workdir", type=Path, help="keep the generated wheels here, for the next run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    checkouts = [Checkout("this", ROOT), Checkout("against", args.against.resolve())]
    with tempfile.TemporaryDirectory(prefix="bench-index-ab-", ignore_cleanup_errors=True) as temporary:
        workdir = args.workdir or Path(temporary)
        result = bench(checkouts, args.wheels, workdir, repeat=max(1, args.repeat), colds=max(1, args.colds),
                       with_provenance=not args.no_provenance, added_mb=args.added_mb)
    result["code"] = {checkout.name: str(checkout.root) for checkout in checkouts}
    result["pair_ratios"] = pair_ratios(result["runs"])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_side_by_side(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
