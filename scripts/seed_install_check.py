"""After `make build-matrix PROFILE=seed`: every built seed wheel of torch 2.0 installs with pip from the served
index (`wheelwright serve`, real HTTP) into a fresh venv holding torch 2.0.1, dependencies from the registry,
and its CUDA extension imports there. One line per wheel; exit 1 if any fails.

The venv sees torch 2.0.1 through a .pth file naming the build's own torch install (the job's runtime, the same
registry wheel), as the verify gate does: pip counts it as installed, and a 2.5 GB torch is not unpacked per wheel.

    .venv/bin/python -m scripts.seed_install_check [OUTPUT]   (default: wheelhouse)
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.environment import runtime_env
from builder.steps.fetch import index_url

ROOT = Path(__file__).resolve().parent.parent

LABEL = "pt20cu117"
TORCH = "torch==2.0.1"
PIP = "pip==24.0"


def built(output: Path) -> list[tuple[str, str]]:
    """(job id, wheel filename) of the built torch 2.0 wheels in the ledger."""
    with sqlite3.connect(output / "ledger.sqlite") as db:
        rows = db.execute("SELECT job_id, wheel FROM jobs WHERE status = 'built' AND label = ?", (LABEL,)).fetchall()
    return sorted(rows)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(output: Path, port: int) -> subprocess.Popen:
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


def check(job_id: str, wheel: str, port: int) -> tuple[bool, str]:
    plan = {job.identifier: job for job in load_plan(ROOT / "matrix.yaml", "seed").jobs}
    job = plan[job_id]
    runtime = runtime_env(job, load_facts())
    with tempfile.TemporaryDirectory(prefix="seed-check-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([runtime.python, "-m", "venv", venv], check=True)
        (site,) = venv.glob("lib/python*/site-packages")
        (site / "torch-runtime.pth").write_text(f"{runtime.site_packages}\n")
        pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, TORCH], check=True)  # satisfied by the runtime: a check that it is torch 2.0.1
        # Python 3.10's bundled pip 23.0.1 refuses the PEP 658 metadata: "inconsistent Name: expected
        # 'causal-conv1d', but metadata has 'causal_conv1d'" (upstream's setup(name=...)); 24.0 accepts it
        subprocess.run([*pip, PIP], check=True)
        index = f"http://127.0.0.1:{port}/whl/{LABEL}/simple/"
        install = subprocess.run(
            [*pip, "--index-url", index, "--extra-index-url", index_url(), f"{job.package}=={job.local_version}"],
            check=False,
            capture_output=True,
            text=True,
        )
        if install.returncode != 0:
            return False, f"pip install failed: {install.stderr.strip().splitlines()[-1:]}"
        probe = "import json, torch, importlib; [importlib.import_module(m) for m in {!r}]; print(torch.__version__)"
        names = [n for n in job.recipe.import_names if n.endswith("_cuda")] or list(job.recipe.import_names)
        result = subprocess.run(
            [venv / "bin" / "python", "-c", probe.format(names)], check=False, capture_output=True, text=True, cwd=tmp
        )
        if result.returncode != 0:
            return False, f"import failed: {result.stderr.strip().splitlines()[-1:]}"
        return True, f"installed {wheel} from {index}; imported {', '.join(names)} with torch {result.stdout.strip()}"


def main(output: Path) -> int:
    wheels = built(output)
    if not wheels:
        print(f"no built {LABEL} wheels in {output}/ledger.sqlite")
        return 1
    port = free_port()
    server = serve(output, port)
    failures = 0
    try:
        for job_id, wheel in wheels:
            ok, detail = check(job_id, wheel, port)
            failures += not ok
            print(json.dumps({"job": job_id, "ok": ok, "detail": detail}))
    finally:
        server.terminate()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "wheelhouse"))
