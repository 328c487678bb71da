"""A process the runner starts while another thread has lent the working directory to a library (auditwheel
changes into a temporary directory while it reads or repairs a wheel, then deletes it) begins where the process
means to be: on the GPU machine pip failed at `os.getcwd()` while slim wheels were verified beside another's
repair (2026-12-06). The borrower's own starts (auditwheel's patchelf) run in the borrowed directory."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from builder.core import runner


def _started_in(home: Path, borrowed: Path, *, from_other_thread: bool) -> str:
    """Where `pwd` starts while a thread has the directory borrowed (changed to ``borrowed``, deleted after)."""
    entered, done, answer = threading.Event(), threading.Event(), []

    def start() -> None:
        answer.append(runner.run(["pwd"], step="pwd", capture=True).output.strip())
        done.set()

    def borrow() -> None:
        with runner.working_directory_borrowed():
            os.chdir(borrowed)
            entered.set()
            if from_other_thread:
                done.wait(timeout=1.0)  # unguarded, the start would finish here, inside the borrowed directory
            else:
                start()
            os.chdir(home)
            shutil.rmtree(borrowed)

    borrower = threading.Thread(target=borrow)
    borrower.start()
    if from_other_thread:
        assert entered.wait(timeout=60), "the borrower never changed the directory"
        start()
    borrower.join()
    return answer[0]


@pytest.mark.parametrize(("from_other_thread", "expected"), [(True, "home"), (False, "borrowed")])
def test_a_start_waits_for_a_borrowed_directory_unless_the_borrower_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, from_other_thread: bool, expected: str
) -> None:
    home, borrowed = tmp_path / "home", tmp_path / "borrowed"
    home.mkdir()
    borrowed.mkdir()
    monkeypatch.chdir(home)
    assert _started_in(home, borrowed, from_other_thread=from_other_thread) == str(tmp_path / expected)
    assert Path.cwd() == home and not borrowed.exists()
