"""doctor's command-line arguments, apart from the probes they drive: ``wheelwright --help`` builds this parser
without importing them. Shared by ``wheelwright doctor`` and the standalone ``doctor.py``."""

from __future__ import annotations

import argparse
import sys

from builder.core.settings import setting

# The index the answer points at; the published doctor.py carries its site's URL here.
DEFAULT_INDEX_URL = ""
INDEX_ENV = "WHEELWRIGHT_INDEX_URL"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--index-url",
        default=setting(INDEX_ENV) or DEFAULT_INDEX_URL or None,
        help=f"the wheelwright site to find the fix in (default: ${INDEX_ENV})",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter whose environment to read (default: this one)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--explain", metavar="TEXT|FILE", help="say what an error message (or a log file, '-' for stdin) means instead"
    )
