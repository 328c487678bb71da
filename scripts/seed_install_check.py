"""After `make build-matrix PROFILE=seed`: every built seed wheel installs with pip from the served index
(`wheelwright serve`, real HTTP) into a fresh venv holding its torch (2.0.1, or 1.13.1 for the cp310 jobs), its
other dependencies from the registry, and its CUDA extension imports there. One JSON line per wheel; exit 1 if any
fails.

The venv sees torch through a .pth file naming the build's own torch install (the job's runtime: the same registry
wheel and its dependencies, installed with pip): pip counts it as installed, and 2.5 GB of torch is neither
downloaded again nor unpacked per wheel. pip never uninstalls outside the venv, and the check fails if pip put
another torch into the venv or the extension imported with a torch other than the job's.

A mamba-ssm wheel is installed together with the newest causal-conv1d wheel built for its label and Python:
mamba-ssm 1.x requires ``causal_conv1d`` without a version, and the registry's newer sdist would win otherwise.

pip is the venv's own (Python 3.10 brings 23.0.1, 3.11 brings 23.2.1): what a user of a fresh venv has.
``--pip 24.0`` upgrades it first.

    .venv/bin/python -m scripts.seed_install_check [OUTPUT] [--pip VERSION] [--profile NAME]
        (OUTPUT default: wheelhouse; --profile default: seed; `rehearsal` checks the farm's rehearsal the same way)
"""

from __future__ import annotations

import argparse
import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from builder.core.wheelhouse import Layout
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.plan.job import Job
from builder.steps.environment import runtime_env
from builder.steps.fetch import index_url

ROOT = Path(__file__).resolve().parent.parent
PROFILE = "seed"
PROBE = (
    "import importlib, json, torch; [importlib.import_module(m) for m in {names!r}]; "
    "print(json.dumps({{'torch': torch.__version__, 'from': torch.__file__}}))"
)


@dataclass(frozen=True)
class Built:
    job: Job
    wheel: str


def built(output: Path, jobs: dict[str, Job]) -> list[Built]:
    """The ledger's built wheels of the seed plan, in plan order (causal-conv1d before mamba-ssm)."""
    with sqlite3.connect(Layout(root=output).ledger) as db:
        rows = dict(db.execute("SELECT job_id, wheel FROM jobs WHERE status = 'built'").fetchall())
    return [Built(job, rows[identifier]) for identifier, job in jobs.items() if identifier in rows]


def companions(wheel: Built, wheels: list[Built]) -> list[str]:
    """Requirements installed with ``wheel``: for mamba-ssm, the newest causal-conv1d built for its label and Python."""
    if wheel.job.package != "mamba-ssm":
        return []
    conv = [
        w.job
        for w in wheels
        if w.job.package == "causal-conv1d" and (w.job.label, w.job.python) == (wheel.job.label, wheel.job.python)
    ]
    if not conv:
        return []
    newest = max(conv, key=lambda job: Version(job.version))
    return [f"causal-conv1d=={newest.local_version}"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def serve(output: Path, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "builder.cli.main", "serve", "--output", str(output), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):  # a loaded machine takes a while to import the CLI
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("wheelwright serve did not start")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _why_not(output: str) -> str:
    """pip's reason: its last line, and the line saying why it discarded our wheel if it did (pip 22.3 - 23.1
    discard one whose METADATA spells the name otherwise, then say only "No matching distribution")."""
    discarded = [line.split(": ", 1)[-1] for line in output.splitlines() if "has inconsistent" in line]
    return "; ".join([*discarded[:1], _last_line(output)])


def check(wheel: Built, wheels: list[Built], port: int, pip_version: str | None) -> tuple[bool, str]:
    job = wheel.job
    runtime = runtime_env(job, load_facts())
    with tempfile.TemporaryDirectory(prefix="seed-check-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([runtime.python, "-m", "venv", venv], check=True)
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "torch-runtime.pth").write_text(f"{runtime.site_packages}\n")
        python = venv / "bin" / "python"
        pip: list[str | Path] = [python, "-m", "pip", "install", "--disable-pip-version-check"]
        if pip_version:
            subprocess.run([*pip, "--quiet", f"pip=={pip_version}"], check=True)
        pip_says = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True, check=True)
        pip_name = " ".join(pip_says.stdout.split()[:2])
        index = f"http://127.0.0.1:{port}/whl/{job.label}/simple/"
        wanted = [f"{job.package}=={job.local_version}", *companions(wheel, wheels)]
        install = subprocess.run(
            [*pip, "--index-url", index, "--extra-index-url", index_url(), "--only-binary", ":all:", *wanted],
            check=False,
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            said = install.stdout + install.stderr
            return False, f"{pip_name}: pip install {' '.join(wanted)} failed: {_why_not(said)}"
        if any(site.glob("torch-*.dist-info")):
            return False, f"pip installed another torch into the venv: {_last_line(install.stdout)}"
        names = [n for n in job.recipe.import_names if n.endswith("_cuda")] or list(job.recipe.import_names)
        result = subprocess.run(
            [python, "-c", PROBE.format(names=names)], check=False, capture_output=True, text=True, cwd=tmp
        )
        if result.returncode != 0:
            return False, f"import {', '.join(names)} failed: {_last_line(result.stderr)}"
        seen = json.loads(_last_line(result.stdout))
        if Version(seen["torch"]).public != job.torch:
            return False, f"imported with torch {seen['torch']} from {seen['from']}, not the job's {job.torch}"
        return True, (
            f"{pip_name} installed {' '.join(wanted)} from {index}; imported {', '.join(names)} "
            f"with torch {seen['torch']}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.seed_install_check", description=__doc__.split("\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=ROOT / "wheelhouse")
    parser.add_argument("--pip", metavar="VERSION", help="upgrade each venv's pip to this version first")
    parser.add_argument("--profile", default=PROFILE, help="the profile whose built wheels to check (default: seed)")
    args = parser.parse_args(argv)
    jobs = {job.identifier: job for job in load_plan(ROOT / "matrix.yaml", args.profile).jobs}
    wheels = built(args.output, jobs)
    if not wheels:
        print(f"no built {args.profile} wheels in {args.output}/ledger.sqlite")
        return 1
    port = free_port()
    server = serve(args.output, port)
    failures = 0
    try:
        for wheel in wheels:
            start = time.monotonic()
            ok, detail = check(wheel, wheels, port, args.pip)
            failures += not ok
            seconds = round(time.monotonic() - start)
            print(json.dumps({"job": wheel.job.identifier, "ok": ok, "seconds": seconds, "detail": detail}), flush=True)
    finally:
        server.terminate()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
