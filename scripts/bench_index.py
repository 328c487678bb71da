"""Benchmark `wheelwright index` as users run it: the CLI in a new process for every timed run, on synthetic wheels
named like the release plan's (every variant torch built x its Pythons x many versions of both packages). With
provenance (the farm's wheels: wheelwright.json inside, the variant twin beside it in variant/, and the build's row
in the ledger, as the build leaves them) or without (--no-provenance: wheels from before provenance was recorded,
and no ledger). Runs: cold (no site, no index
state), unchanged, one wheel added (a new release's, --added-mb, with its twin), one replaced (rebuilt under its
name) and one removed, each --repeat times: medians of CPU-seconds (the index process's user + system time) and
wall, with the load average, and the sizes of the two largest project pages. Several --wheels print how each
figure grows. scripts/bench_index_ab runs the same side by side against another checkout.

    .venv/bin/python -m scripts.bench_index                                  # 10,000 wheels with provenance
    .venv/bin/python -m scripts.bench_index --no-provenance --repeat 7
    .venv/bin/python -m scripts.bench_index --wheels 10000 --wheels 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.hashing import FileIdentity, sha256_of
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.wheelhouse import DIST, LEDGER, VARIANT, Layout
from builder.plan.accelerator import format_label, parse_label
from builder.plan.facts import load_facts
from builder.steps import provenance, variant
from builder.steps.wheelzip import Member, write_wheel

ROOT = Path(__file__).resolve().parents[1]
BASE_URL = "https://wheels.example.org"
PYTHON_TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
KINDS = ("cold", "unchanged", "+1", "replaced", "removed")
FARM_LEDGER = "farm-ledger.sqlite"  # the ledger the synthetic builds left, kept for every cold run
# Versions enough for 100,000 distinct wheels (each release has ~300: every variant x its Pythons), the two
# projects' releases interleaved so that any count holds both.
PROJECTS = {
    "causal-conv1d": [f"1.{minor}.{patch}" for minor in range(40) for patch in range(5)],
    "mamba-ssm": [f"2.{minor}.{patch}" for minor in range(40) for patch in range(5)],
}


@dataclass(frozen=True)
class Spec:
    project: str
    version: str
    label: str
    python: str
    payload: bytes = b"x = 1\n"

    @property
    def dist(self) -> str:
        return self.project.replace("-", "_")

    @property
    def filename(self) -> str:
        return f"{self.dist}-{self.version}+{self.label}-{self.python}-{self.python}-manylinux_2_28_x86_64.whl"


def synthetic_specs(count: int) -> Iterator[Spec]:
    """``count`` distinct wheels, newest torch first within each release (a small count still holds pt214cu130)."""
    variants = [
        (format_label(release.latest, accelerator), "cp" + python.replace(".", ""))
        for release in reversed(load_facts().releases)
        for accelerator in release.accelerators
        for python in release.python
        if "t" not in python
    ]
    per_project = [[(project, version) for version in versions] for project, versions in PROJECTS.items()]
    releases = [release for pair in itertools.zip_longest(*per_project) for release in pair if release is not None]
    combos = itertools.product(releases, variants)
    for (project, version), (label, python) in itertools.islice(combos, count):
        yield Spec(project, version, label, python)


def write_wheel_and_twin(out: Path, spec: Spec, *, with_provenance: bool, ledger: Ledger | None = None) -> Path:
    """The wheel of ``spec`` in out/dist, as the build leaves it: with its wheelwright.json, its variant twin in
    out/variant (made as builder/steps/variant.py makes it) and its row in out's ledger (``ledger``, if open), or
    none of them."""
    dist_info = f"{spec.dist}-{spec.version}+{spec.label}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: {spec.project}\nVersion: {spec.version}+{spec.label}\n"
        f"Requires-Python: >=3.9\nSummary: a synthetic wheel\nRequires-Dist: torch\n"
    )
    members = {
        f"{spec.dist}/__init__.py": Member(data=spec.payload),
        f"{dist_info}/METADATA": Member(data=metadata.encode()),
        f"{dist_info}/WHEEL": Member(data=f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {spec.python}\n".encode()),
    }
    if with_provenance:
        archs = {"sass": ["9.0"], "ptx": []}
        record = {"schema": provenance.SCHEMA, "package": spec.project, "version": spec.version, "label": spec.label,
                  "torch": {"requirement": None}, "archs": archs,
                  "files": provenance.payload_digests(members, dist_info)}
        members[f"{dist_info}/{provenance.FILENAME}"] = Member(data=provenance.encode(record))
    wheel = write_wheel(Layout(root=out).dist / spec.filename, members)
    if with_provenance:
        properties = variant.properties_for(spec.label, archs)
        twin = variant.twin_members(members, wheel.name, spec.label, properties)
        write_wheel(Layout(root=out).variant / variant.variant_filename(wheel.name, spec.label), twin)
        with nullcontext(ledger) if ledger is not None else Ledger(Layout(root=out).ledger) as into:
            into.put(farm_entry(spec, wheel, archs))
    return wheel


def farm_entry(spec: Spec, wheel: Path, archs: dict[str, list[str]]) -> LedgerEntry:
    """The row the farm leaves for a wheel it built (builder/farm/build.py): its digest and its identity in dist/
    (so the index takes the digest from it), the verify gate's report (2 kB of JSON: its checks and the GPU code)
    and the ABI record (9 kB: 70 symbols from each of two torch libraries, and the window). Every run of the index
    reads the failures, the archs and the windows of a ledger like this; a bench without it measured none of it."""
    torch, accelerator = parse_label(spec.label)
    job = f"{spec.project}-{spec.version}+{spec.label}-{spec.python}-x86_64"
    checks = [{"name": name, "outcome": "PASS", "detail": f"{name} as the platform tag allows: {'ok ' * 30}"}
              for name in ("manylinux", "glibc", "needed", "rpath", "sass", "ptx", "import", "abi", "size", "record")]
    report = {"wheel": wheel.name, "job": job, "ok": True, "checks": checks, "needed": list(_NEEDED),
              "symbol_versions": {"GLIBC": "2.28", "GLIBCXX": "3.4.29"}, **archs, "warnings": []}
    extension = f"{spec.dist}_cuda.{spec.python}-x86_64-linux-gnu.so"
    abi = {"torch": torch, "accelerator": accelerator.name, "platform": "x86_64", "cxx11_abi": True,
           "cuda_major": 13, "extensions": {extension: {"libc10.so": _SYMBOLS[:70], "libtorch_cpu.so": _SYMBOLS[70:]}},
           "window": {"text": f"loads on torch {torch}-{torch} (checked 2.9-2.15)"}}
    return LedgerEntry(
        job_id=job, package=spec.project, version=spec.version, label=spec.label, torch=torch,
        accelerator=accelerator.name, python=f"{spec.python[2]}.{spec.python[3:]}", input_hash="0" * 64,
        status=Status.BUILT, phase="install", timings={"compile": 300.0, "repair": 4.0, "verify": 6.0},
        wheel=wheel.name, wheel_sha256=sha256_of(wheel), wheel_size=wheel.stat().st_size,
        wheel_identity=str(FileIdentity.of(wheel.stat())), report=json.dumps(report), abi=json.dumps(abi),
    )


_NEEDED = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libcudart.so.13", "libc.so.6")
_SYMBOLS = [f"_ZN3c104impl{n:03d}TensorImplSizesAndStridesEN3c108ArrayRefIlEE{n:03d}" for n in range(140)]




def write_wheelhouse(out: Path, count: int, *, with_provenance: bool) -> None:
    """``count`` wheels. One of them makes the label the runs add to lead its torch, as the registry's variant does
    on a real site: synthetic variants tie, and a wheel that broke a tie would move every setup page's choices."""
    Layout(root=out).dist.mkdir(parents=True, exist_ok=True)
    Layout(root=out).variant.mkdir(parents=True, exist_ok=True)
    leader = Spec("causal-conv1d", "0.0.1", "pt214cu130", PYTHON_TAG)
    if not with_provenance:
        for spec in (*synthetic_specs(count - 1), leader):
            write_wheel_and_twin(out, spec, with_provenance=False)
        return
    with Ledger(Layout(root=out).ledger) as ledger:
        for spec in (*synthetic_specs(count - 1), leader):
            write_wheel_and_twin(out, spec, with_provenance=True, ledger=ledger)
    shutil.copyfile(Layout(root=out).ledger, out / FARM_LEDGER)  # as the builds left it: every cold run's (forget)


@dataclass
class Checkout:
    """A checkout whose `wheelwright index` is timed: its own code, this interpreter and venv."""

    name: str
    root: Path
    runs: dict[str, list[dict[str, float]]] = field(default_factory=lambda: {kind: [] for kind in KINDS})

    def __post_init__(self) -> None:
        compile_bytecode(self.root)

    def index(self, out: Path, kind: str) -> dict[str, float]:
        """One run of the CLI in a new process; its wall and CPU seconds (user + system, from wait4)."""
        log = out / f"index-{kind}.log"
        environment = {**os.environ, "PYTHONPATH": str(self.root), "COLUMNS": "200", "NO_COLOR": "1"}
        command = [sys.executable, "-m", "builder.cli.main", "index", "--output", str(out), "--base-url", BASE_URL]
        os.sync()  # the other runs' writes go to disk now, not during this one
        with open(log, "w") as output:
            start = time.perf_counter()
            process = subprocess.Popen(command, cwd=self.root, env=environment, stdout=output, stderr=output)
            _, status, usage = os.wait4(process.pid, 0)
            wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{self.name}: index exited {process.returncode}:\n{log.read_text()[-3000:]}")
        result = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime}
        self.runs[kind].append(result)
        return result

    def medians(self) -> dict[str, dict[str, float]]:
        return {
            kind: {m: round(statistics.median(r[m] for r in runs), 3) for m in ("cpu", "wall")}
            for kind, runs in self.runs.items()
            if runs
        }


def compile_bytecode(root: Path) -> None:
    """Bring the bytecode of a checkout's code up to date, as an installed wheel has it: where
    PYTHONDONTWRITEBYTECODE is set, each timed process would otherwise compile every module edited since its last
    .pyc (0.044 CPU-s under cProfile of a +1 at 10,000 wheels, after an edit to the index's modules)."""
    for package in ("builder", "index_site", "scripts"):
        compileall.compile_dir(root / package, quiet=1)


def forget(out: Path) -> None:
    """Back to a cold index: no site and no index state (this code's, and the hash cache older code kept in the
    ledger and variant/); the farm's ledger as the builds left it, where the wheels have one."""
    shutil.rmtree(Layout(root=out).site, ignore_errors=True)
    for name in ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm", LEDGER, f"{LEDGER}-wal", f"{LEDGER}-shm",
                 f"{VARIANT}/.variant-index.json"):
        (out / name).unlink(missing_ok=True)
    if (out / FARM_LEDGER).is_file():
        shutil.copyfile(out / FARM_LEDGER, Layout(root=out).ledger)


def change(outs: list[Path], kind: str, round_: int, *, with_provenance: bool, added_mb: float) -> None:
    """Make the same change to every copy: a new release's wheel added, a wheel rebuilt under its name (other
    bytes), or a wheel removed; the twin goes with each, as the build would, and an added or rebuilt wheel's
    ledger row with it (a removed wheel's stays: its file was deleted, not its build)."""
    if kind == "+1":
        payload = os.urandom(int(added_mb * 1e6))
        spec = Spec("causal-conv1d", f"9.9.{round_}", "pt214cu130", PYTHON_TAG, payload)
    else:
        names = sorted(path.name for path in Layout(root=outs[0]).dist.glob("causal_conv1d-1.0.0+*"))
        name = names[round_] if kind == "replaced" else names[-1 - round_]  # the first release's
        dist, version, python = name.removesuffix(".whl").split("-")[:3]
        public, label = version.split("+")
        spec = Spec(dist.replace("_", "-"), public, label, python, f"x = {round_ + 2}\n".encode())
    for out in outs:
        if kind == "removed":
            (Layout(root=out).dist / spec.filename).unlink()
            (Layout(root=out).variant / variant.variant_filename(spec.filename, spec.label)).unlink(missing_ok=True)
        else:
            write_wheel_and_twin(out, spec, with_provenance=with_provenance)


def _copy_inputs(base: Path, out: Path) -> None:
    """What a cold run starts from, copied from the generated folder: dist/, variant/ and the farm's ledger (the
    first cold run makes the rest; the base's site and state, 3.5 GB at 100,000 wheels, would only be forgotten)."""
    out.mkdir(parents=True)
    for name in (DIST, VARIANT):
        if (base / name).is_dir():
            shutil.copytree(base / name, out / name)
    if (base / FARM_LEDGER).is_file():
        shutil.copyfile(base / FARM_LEDGER, out / FARM_LEDGER)


def largest_pages(site: Path) -> list[tuple[str, int]]:
    """The two largest project pages (PEP 503 and 691, all variants): what one added wheel rewrites whole."""
    pages = [*site.glob("simple/*/index.html"), *site.glob("json/*/index.json")]
    sizes = sorted(((p.relative_to(site).as_posix(), p.stat().st_size) for p in pages), key=lambda x: -x[1])
    return sizes[:2]


def bench(
    checkouts: list[Checkout], count: int, workdir: Path, *, repeat: int, colds: int, with_provenance: bool,
    added_mb: float,
) -> dict[str, Any]:
    """Every kind of run on ``count`` wheels for each checkout, interleaved so each sees the same load."""
    base = workdir / f"base-{count}-{'prov' if with_provenance else 'plain'}"
    if not Layout(root=base).dist.is_dir():  # a --workdir of an earlier run keeps its wheels
        write_wheelhouse(base, count, with_provenance=with_provenance)
    outs = [base] if len(checkouts) == 1 else []  # one checkout works in the generated folder itself
    for checkout in checkouts if len(checkouts) > 1 else ():
        out = workdir / f"{checkout.name}-{count}"
        shutil.rmtree(out, ignore_errors=True)
        _copy_inputs(base, out)
        outs.append(out)
    load_before = os.getloadavg()
    pairs = list(zip(checkouts, outs, strict=True))
    for round_ in range(colds):
        for checkout, out in pairs if round_ % 2 == 0 else pairs[::-1]:
            forget(out)
            checkout.index(out, "cold")
    for round_ in range(repeat):
        order = pairs if round_ % 2 == 0 else pairs[::-1]  # neither always runs first
        for kind in KINDS[1:]:
            if kind != "unchanged":
                change(outs, kind, round_, with_provenance=with_provenance, added_mb=added_mb)
            for checkout, out in order:
                checkout.index(out, kind)
    return {
        "wheels": count,
        "provenance": with_provenance,
        "repeat": repeat,
        "colds": colds,
        "medians": {checkout.name: checkout.medians() for checkout in checkouts},
        "runs": {c.name: {k: [round(r["cpu"], 3) for r in runs] for k, runs in c.runs.items()} for c in checkouts},
        "largest_pages": {c.name: largest_pages(Layout(root=out).site) for c, out in pairs},
        "load_average": [round(x, 2) for x in (*load_before, *os.getloadavg())],
    }


def print_results(results: list[dict[str, Any]], name: str) -> None:
    first = results[0]
    for result in results:
        medians = result["medians"][name]
        label = "with provenance" if result["provenance"] else "without provenance"
        print(f"{result['wheels']:,} wheels, {label}: medians of {result['repeat']} (cold: {result['colds']}), "
              f"load {result['load_average'][:3]} -> {result['load_average'][3:]}")
        print(f"  {'run':<10} {'CPU s':>8} {'wall s':>8} {'CPU x':>7}")
        for kind, figures in medians.items():
            growth = figures["cpu"] / first["medians"][name][kind]["cpu"] if result is not first else 1.0
            print(f"  {kind:<10} {figures['cpu']:>8.3f} {figures['wall']:>8.3f} {growth:>7.2f}")
        pages = ", ".join(f"{page} {size:,} B" for page, size in result["largest_pages"][name])
        print(f"  largest project pages: {pages}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=int, action="append", help="synthetic wheels (repeatable; default 10000)")
    parser.add_argument("--no-provenance", action="store_true", help="wheels without wheelwright.json or twins")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each kind but cold (default: %(default)s)")
    parser.add_argument("--colds", type=int, default=1, help="cold runs (default: %(default)s)")
    parser.add_argument("--added-mb", type=float, default=20.0, help="size of the added wheel (default: 20)")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="the code to time (default: this checkout)")
    parser.add_argument("--workdir", type=Path, help="keep the generated wheels here, for the next run")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-index-", ignore_cleanup_errors=True) as temporary:
        workdir = args.workdir or Path(temporary)
        results = []
        for count in args.wheels or [10_000]:
            checkout = Checkout("this", args.checkout.resolve())
            results.append(bench([checkout], count, workdir, repeat=max(1, args.repeat), colds=max(1, args.colds),
                                 with_provenance=not args.no_provenance, added_mb=args.added_mb))
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_results(results, "this")
    return 0


if __name__ == "__main__":
    sys.exit(main())
