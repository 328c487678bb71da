"""`wheelwright` with every arch the profile names, for scripts/bench/build.py's full-arch comparison (d)
only.

Upstream's released build compiles all 9 CUDA 13 archs; ours drops the SASS builder/data/archs.toml knows a toolkit
miscompiles (sm_103 for causal-conv1d <= 1.7.0 under nvcc 13.x). Timed against upstream, that would be 8 archs
against 9, so the bench's builds run through this, with the arch facts' known-bad list empty: the same 9 archs.
What it builds lands in the bench's scratch folder and is never published (a wheel with SASS known to be wrong).

Usage: python -m scripts.bench.every_arch SUBCOMMAND ARGS...   (as `wheelwright SUBCOMMAND ARGS...`)
"""

from __future__ import annotations

import sys

from builder.cli import main as cli
from builder.plan import archs


def _no_known_bad() -> tuple[archs.KnownBad, ...]:
    return ()


def main(argv: list[str] | None = None) -> int:
    # expand.py reads the facts through this module attribute, in this process (the build plans and verifies here)
    archs.known_bad = _no_known_bad  # type: ignore[assignment]
    return cli.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
