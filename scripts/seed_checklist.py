"""The seed checklist, against the causal-conv1d and mamba-ssm installed in this interpreter, on CUDA: run it before
deploying Mamba on our wheels. Its checks are tests/gpu/test_checklist.py, run here by pytest; docs/gpu-acceptance.md
says what each part checks and what the H200 gave.

    python -m scripts.seed_checklist [--parts seed,batch,decode,perf,leak] [--leak-seconds 60] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from scripts.gpu.tables import checklist_lines

ROOT = Path(__file__).resolve().parents[1]
EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3
PACKAGES = ("causal-conv1d", "mamba-ssm", "torch", "triton", "transformers")


def versions() -> str:
    found = []
    for package in PACKAGES:
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            found.append(f"{package} not installed")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.seed_checklist", description=(__doc__ or "").split(
        "\n\n")[0], epilog="exit codes: 0 every check passed, 1 a check failed, 2 bad arguments, 3 no CUDA device")
    parser.add_argument("--parts", help="comma-separated, of seed,batch,decode,perf,leak (default: all)")
    parser.add_argument("--leak-seconds", help="each leak run's length in seconds (default: the data file's, 60)")
    parser.add_argument("--json", type=Path, help="write the checks, the table's figures and the facts here")
    args = parser.parse_args(argv)
    print(f"seed checklist: {versions()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="seed-checklist-") as scratch:
        report = args.json or Path(scratch) / "checklist.json"
        options = [*(["--parts", args.parts] if args.parts else []),
                   *(["--leak-seconds", args.leak_seconds] if args.leak_seconds else [])]
        code = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-c",
                               str(ROOT / "pyproject.toml"), str(ROOT / "tests" / "gpu" / "test_checklist.py"),
                               "--report", str(report), *options], check=False).returncode
        if not report.is_file():
            return EXIT_USAGE  # pytest said why (a bad --parts, say)
        document = json.loads(report.read_text())
    tests = document["tests"]
    if tests and all(t["status"] == "skipped" and t["detail"].startswith("no CUDA device") for t in tests):
        print(f"ERROR {tests[0]['detail']}: the checklist runs the kernels, so it needs a CUDA device", file=sys.stderr)
        return EXIT_NO_GPU
    print("\n".join(checklist_lines(document["data"])))
    failed = sum(t["status"] == "failed" for t in tests)
    print(f"seed checklist: {len(tests) - failed} of {len(tests)} checks passed")
    return EXIT_FAILED if failed or code not in (0, 5) else EXIT_PASSED


if __name__ == "__main__":
    sys.exit(main())
