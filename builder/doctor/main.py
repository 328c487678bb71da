"""doctor's arguments and one run of it, shared by ``wheelwright doctor`` and the standalone ``doctor.py``: the
caller prints what ``run`` returns."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from builder.core.errors import WheelwrightError
from builder.doctor.explain import explain
from builder.doctor.fix import find_fix
from builder.doctor.labels import PACKAGES
from builder.doctor.probe import ProbeFailed, collect
from builder.doctor.report import as_json, findings_json, render_findings, render_text
from builder.doctor.verdicts import diagnose

# The index the answer points at; the published doctor.py carries its site's URL here.
DEFAULT_INDEX_URL = ""
INDEX_ENV = "WHEELWRIGHT_INDEX_URL"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--index-url",
        default=os.environ.get(INDEX_ENV) or DEFAULT_INDEX_URL or None,
        help=f"the wheelwright site to find the fix in (default: ${INDEX_ENV})",
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the interpreter whose environment to read (default: this one)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--explain", metavar="TEXT|FILE", help="say what an error message (or a log file, '-' for stdin) means instead"
    )


def run(args: argparse.Namespace) -> tuple[str, int]:
    """(what to print, exit code): 0 when every installed package is OK, 1 when one is not."""
    if args.explain is not None:
        findings = explain(_explain_text(args.explain))
        text = json.dumps(findings_json(findings), indent=2) + "\n" if args.json else render_findings(findings)
        return text, 0 if findings else 1
    try:
        env = collect(args.python)
    except ProbeFailed as error:
        raise WheelwrightError(
            f"--python {args.python}: {error}",
            tip="pass the interpreter of the failing environment, e.g. --python /path/to/venv/bin/python",
        ) from None
    diagnoses = diagnose(env)
    fixes = {d.package.name: find_fix(env, d, args.index_url) for d in diagnoses}
    ok = all(d.ok for d in diagnoses)
    if args.json:
        return json.dumps(as_json(env, diagnoses, fixes), indent=2) + "\n", 0 if ok else 1
    missing = tuple(name for name in PACKAGES if name not in {p.name for p in env.packages})
    return render_text(env, diagnoses, fixes, missing), 0 if ok else 1


def _explain_text(value: str) -> str:
    if value == "-":
        return sys.stdin.read()
    path = Path(value)
    if len(value) < 4096 and "\n" not in value and path.is_file():
        return path.read_text(errors="replace")
    return value


def main(argv: list[str] | None = None) -> int:
    """The standalone doctor.py: parse, run, print; one ERROR line on a user error."""
    parser = argparse.ArgumentParser(
        prog="doctor.py",
        description="Say why causal-conv1d / mamba-ssm do not work "
        "in this Python, and print the install line that fixes it.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        text, code = run(args)
    except WheelwrightError as error:
        print(f"ERROR {error}", file=sys.stderr)
        if error.tip:
            print(f"TIP {error.tip}", file=sys.stderr)
        return error.exit_code
    sys.stdout.write(text)
    return code
