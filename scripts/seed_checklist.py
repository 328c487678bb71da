#!/usr/bin/env python3
"""The seed checklist, against the causal-conv1d and mamba-ssm installed in this interpreter, on CUDA: run it before
deploying Mamba on our wheels (docs/gpu-acceptance.md says what each part checks and what the H200 gave).

    python -m scripts.seed_checklist [--parts seed,batch,decode,perf,leak] [--leak-seconds 60] [--json FILE]

1 seed: the guide's functional test and causal_conv1d_fn; 2 batch, decode: numerical consistency; 3 perf:
throughput, decode latency and peak memory of 130M- and 1.4B-shaped bf16 models; 4 leak: training and decoding
loops with allocated memory sampled. The acceptance run's `checklist` stage runs the same code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from scripts.acceptance import checklist
from scripts.acceptance.config import ConfigError, load_config
from scripts.acceptance.device import torch_facts, unavailable_reason
from scripts.acceptance.summary import FAILED, Check

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3
PACKAGES = ("causal-conv1d", "mamba-ssm", "torch", "triton", "transformers")


def _parts(text: str) -> tuple[str, ...]:
    try:
        return checklist.parse_parts(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.seed_checklist",
        description=__doc__.split("\n\n")[0],
        epilog="exit codes: 0 every check passed, 1 a check failed, 2 bad arguments, 3 no CUDA device",
    )
    parser.add_argument(
        "--parts",
        type=_parts,
        default=checklist.PARTS,
        help=f"comma-separated, of {','.join(checklist.PARTS)} (default: all)",
    )
    parser.add_argument(
        "--leak-seconds",
        type=_positive,
        default=None,
        help="each leak run's length in seconds (default: the data file's, 60)",
    )
    parser.add_argument("--json", type=Path, help="write the checks, the table's figures and the versions here")
    return parser


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _print(check: Check) -> Check:
    print(f"  {check.status.upper():<7} {check.name}: {check.detail}", flush=True)
    return check


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config()
    except ConfigError as error:
        print(f"ERROR {error}", file=sys.stderr)
        return EXIT_USAGE
    found = versions()
    print("seed checklist: " + ", ".join(f"{name} {version or 'not installed'}" for name, version in found.items()))
    reason = unavailable_reason()
    if reason:
        print(f"ERROR {reason}: the checklist runs the kernels, so it needs a CUDA device", file=sys.stderr)
        return EXIT_NO_GPU
    facts = torch_facts()
    print(f"device: {facts.get('device')} (sm {facts.get('capability')})", flush=True)
    checks = checklist.run(
        config.checklist,
        config.conv_tolerance["float32"],
        parts=args.parts,
        leak_seconds=args.leak_seconds,
        report=_print,
    )
    for line in checklist.report_lines([check.as_dict() for check in checks]):
        print(line)
    if args.json:
        report = {
            "versions": found,
            "environment": facts,
            "checks": [c.as_dict() for c in checks],
            **checklist.summary_data(checks),
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    failed = sum(check.status == FAILED for check in checks)
    print(f"seed checklist: {len(checks) - failed} of {len(checks)} checks passed")
    return EXIT_FAILED if failed else EXIT_PASSED


if __name__ == "__main__":
    sys.exit(main())
