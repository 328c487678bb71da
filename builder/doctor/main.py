"""One run of doctor, shared by ``wheelwright doctor`` and the standalone ``doctor.py`` (whose ``main`` is here):
the caller prints what ``run`` returns. The arguments are in builder/doctor/arguments.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import BinaryIO

from builder.core.errors import WheelwrightError
from builder.doctor.arguments import add_arguments
from builder.doctor.channel import ChannelVerdict, channel_lines, channel_verdicts, fetch_text
from builder.doctor.explain import explain
from builder.doctor.fix import IndexUnreachable, fetch_json, find_fix, index_root
from builder.doctor.labels import PACKAGES
from builder.doctor.probe import Environment, ProbeFailed, collect
from builder.doctor.report import as_json, findings_json, render_findings, render_text
from builder.doctor.undefined import render_answers, undefined_answers
from builder.doctor.verdicts import diagnose


def run(args: argparse.Namespace) -> tuple[str, int]:
    """(what to print, exit code): 0 when every installed package is OK, 1 when one is not."""
    if args.explain is not None:
        told = _explain_text(args.explain)
        findings = explain(told)
        answers = undefined_answers(told, args.python, args.index_url)
        if args.json:
            text = json.dumps({**findings_json(findings), "undefined_symbols": answers}, indent=2) + "\n"
        else:
            text = render_findings(findings) + "".join(line + "\n" for line in render_answers(answers))
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
    channel = _channel(env, args.index_url)
    ok = all(d.ok for d in diagnoses) and all(v.runs for v in channel)
    if args.json:
        document = {**as_json(env, diagnoses, fixes), "channel": [vars(v) for v in channel]}
        return json.dumps({**document, "ok": ok}, indent=2) + "\n", 0 if ok else 1
    missing = tuple(name for name in PACKAGES if name not in {p.name for p in env.packages})
    text = render_text(env, diagnoses, fixes, missing)
    return "".join(line + "\n" for line in channel_lines(channel)) + text, 0 if ok else 1


def _channel(env: Environment, index_url: str | None) -> list[ChannelVerdict]:
    """What the variant channel at ``index_url`` holds for this GPU; nothing where the site cannot be read (the
    fix already says so)."""
    try:
        return channel_verdicts(env, index_url and index_root(index_url), fetch_json, fetch_text)
    except IndexUnreachable:
        return []


# --explain reads at most the last EXPLAIN_BYTES of its input: a loader's message is near a log's end, and the
# scan stays linear, so this bounds both its memory and its time (docs/hostile-input.md).
EXPLAIN_BYTES = 16 << 20


def _explain_text(value: str) -> str:
    if value == "-":
        stream = getattr(sys.stdin, "buffer", None)
        return _tail(stream) if stream is not None else sys.stdin.read()[-EXPLAIN_BYTES:]
    path = Path(value)
    if len(value) < 4096 and "\n" not in value and path.is_file():
        with path.open("rb") as stream:
            stream.seek(max(0, path.stat().st_size - EXPLAIN_BYTES))
            return _tail(stream)
    return value[-EXPLAIN_BYTES:]


def _tail(stream: BinaryIO) -> str:
    """The last EXPLAIN_BYTES of ``stream``, read in chunks (stdin's size is not known ahead), as text."""
    kept = bytearray()
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        kept += chunk
        if len(kept) > 2 * EXPLAIN_BYTES:
            del kept[:-EXPLAIN_BYTES]
    return bytes(kept[-EXPLAIN_BYTES:]).decode("utf-8", errors="replace")


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
