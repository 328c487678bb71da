"""Commit subjects stay at most 72 characters (git's and the kernel's habit: the why goes in the body), for every
commit after the one named (88d45ea, where the habit started: the 427 commits before it are history, not fixed).
`make check` runs it; outside a git checkout (an sdist, a tarball) there is nothing to check.

    python scripts/check_commit_subjects.py [--since REV] [--repo DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LIMIT = 72
SINCE = "88d45ea"


def long_subjects(repo: Path, since: str, limit: int = LIMIT) -> list[tuple[str, str]] | None:
    """(short hash, subject) of each commit after ``since`` whose subject is longer than ``limit``; None where
    ``repo`` is no git checkout or does not hold ``since`` (a shallow clone)."""
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%h%x00%s", f"{since}..HEAD"],
        capture_output=True, text=True, check=False,
    )
    if log.returncode != 0:
        return None
    pairs = [line.split("\0", 1) for line in log.stdout.splitlines() if "\0" in line]
    return [(commit, subject) for commit, subject in pairs if len(subject) > limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--since", default=SINCE, help=f"check the commits after this one (default: {SINCE})")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    found = long_subjects(args.repo, args.since)
    if found is None:
        print(f"commit subjects: no history after {args.since} here (not a git checkout, or a shallow one)")
        return 0
    for commit, subject in found:
        print(f"ERROR commit {commit}: subject is {len(subject)} characters (at most {LIMIT}): {subject}",
              file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
