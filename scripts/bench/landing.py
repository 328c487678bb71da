"""Benchmark the pages for people on a site of the release plan's shape (scripts/bench/release.py: a small wheel for
every job of `plan --profile release`, three failures, two jobs left out): the landing page's weight (HTML, CSS and
JavaScript together, all inline) against its 100 KB budget, the index time cold, unchanged and after one wheel is
added, and what share of each run the pages for people (landing, setup pages, coverage pages, wheels.json) take,
measured side by side in the same run. Then the same share at a farm's scale (bench_index's synthetic wheels,
rendered in memory). Times are CPU seconds of this process, so that other work on a shared machine counts less.

    .venv/bin/python scripts/bench_landing.py
    .venv/bin/python scripts/bench_landing.py --farm-wheels 10000 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from builder.core.wheelhouse import Layout
from index_site import pages as pages_module
from index_site import render as render_module
from index_site.catalog import Catalog
from index_site.render import render_site
from index_site.report import ScanStats
from index_site.stage import build_site
from scripts.bench.release import BASE_URL, write_release_wheelhouse
from scripts.bench.wheels import WheelSpec, indexed_wheel, make_wheel
from scripts.bench_index import synthetic_specs

BUDGET = 100_000


class _Clock:
    """Seconds spent inside render_pages, summed over the calls one index run makes."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._real = pages_module.render_pages

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return self._real(*args, **kwargs)
        finally:
            self.seconds += time.process_time() - start


def timed_index(output: Path) -> dict[str, object]:
    clock = _Clock()
    with mock.patch.object(render_module, "render_pages", clock):
        start = time.process_time()
        report = build_site(output, Layout(root=output).site, base_url=BASE_URL)
        seconds = time.process_time() - start
    return {"seconds": round(seconds, 3), "pages_seconds": round(clock.seconds, 3), "written": len(report.written)}


def bench_release(workdir: Path) -> dict[str, object]:
    output = workdir / "release"
    built = write_release_wheelhouse(output)
    cold = timed_index(output)
    landing_bytes = (output / "site" / "index.html").stat().st_size
    unchanged = timed_index(output)
    make_wheel(Layout(root=output).dist, WheelSpec(version="1.7.1", label="pt214cu130", python="cp312"))
    incremental = timed_index(output)
    site = output / "site"
    setup_pages = sorted((site / "select").glob("*.html"))
    return {
        "wheels": len(built) + 1,
        "landing_bytes": landing_bytes,
        "setup_pages": len(setup_pages),
        "largest_setup_page_bytes": max(p.stat().st_size for p in setup_pages),
        "manifest_bytes": sum(p.stat().st_size for p in (site / "wheels.json", *(site / "wheels").rglob("*.json"))),
        "cold": cold,
        "unchanged": unchanged,
        "incremental": incremental,
    }


def bench_farm(count: int) -> dict[str, object]:
    """render_site over ``count`` synthetic wheels, in memory, twice: cold (first in this process) and again."""
    wheels = tuple(indexed_wheel(s.filename, str(i % 10)) for i, s in enumerate(synthetic_specs(count)))
    catalog = Catalog(wheels=wheels, rejected=(), failures=(), stats=ScanStats())
    runs = []
    for _ in range(2):
        clock = _Clock()
        with mock.patch.object(render_module, "render_pages", clock):
            start = time.process_time()
            site = render_site(catalog, base_url=BASE_URL)
            seconds = time.process_time() - start
        runs.append({"seconds": round(seconds, 3), "pages_seconds": round(clock.seconds, 3)})
    return {
        "wheels": count,
        "files": len(site),
        "landing_bytes": len(site["index.html"]),
        "cold": runs[0],
        "again": runs[1],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--farm-wheels", type=int, default=10_000, help="synthetic wheels (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, help="keep the generated files here (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-landing-") as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        results: dict[str, Any] = {
            "release": bench_release(workdir),
            "farm": bench_farm(args.farm_wheels) if args.farm_wheels else None,
        }
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_results(results)
    return 0 if results["release"]["landing_bytes"] <= BUDGET else 1


def _share(run: dict[str, Any]) -> str:
    return f"{run['seconds']:.3f} s, of which pages for people {run['pages_seconds']:.3f} s"


def _print_results(r: dict[str, Any]) -> None:
    release = r["release"]
    weight = release["landing_bytes"]
    lines = [
        ("release plan site", f"{release['wheels']} wheels, {release['setup_pages']} setup pages"),
        ("landing page (HTML+CSS+JS)", f"{weight:,} bytes = {weight / BUDGET:.0%} of the {BUDGET:,} byte budget"),
        ("largest setup page", f"{release['largest_setup_page_bytes']:,} bytes"),
        ("wheels.json and its release files", f"{release['manifest_bytes']:,} bytes"),
        ("cold index", _share(release["cold"]) + f" ({release['cold']['written']} files written)"),
        ("re-index, nothing changed", _share(release["unchanged"])),
        ("re-index, 1 wheel added", _share(release["incremental"]) + f" ({release['incremental']['written']} written)"),
    ]
    farm = r["farm"]
    if farm:
        lines.append((f"render {farm['wheels']} wheels, cold", _share(farm["cold"])))
        lines.append(("  again in the same process", _share(farm["again"])))
        lines.append(("  landing page there", f"{farm['landing_bytes']:,} bytes"))
    for name, value in lines:
        print(f"{name + ':':<34} {value}")


if __name__ == "__main__":
    sys.exit(main())
