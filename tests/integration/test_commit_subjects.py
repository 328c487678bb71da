"""`make check` refuses a commit subject over 72 characters after the commit the habit started at; the older
history and a checkout without it (an sdist) pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_commit_subjects.py"


def git(repo: Path, *args: str) -> str:
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *env_args, "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def commit(repo: Path, subject: str) -> str:
    git(repo, "commit", "--allow-empty", "-q", "-m", subject, "-m", "the why, in the body")
    return git(repo, "rev-parse", "--short", "HEAD")


def check(repo: Path, since: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, "--repo", str(repo), "--since", since],
                          capture_output=True, text=True, check=False)


def test_a_long_subject_after_the_start_fails_naming_the_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "x" * 100)  # before the start: history, left as it is
    start = commit(tmp_path, "the start")
    commit(tmp_path, "y" * 72)
    assert check(tmp_path, start).returncode == 0
    long = commit(tmp_path, "z" * 73)
    result = check(tmp_path, start)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"ERROR commit {long}: subject is 73 characters (at most 72): {'z' * 73}"]


def test_no_checkout_is_nothing_to_check(tmp_path: Path) -> None:
    result = check(tmp_path, "88d45ea")
    assert result.returncode == 0 and "no history" in result.stdout
