"""The build venv is made once under a lock: builds sharing the cache (a build's jobs, or the GPU acceptance run's
four builds at once) wait for the one making it instead of removing and refilling it under each other's pip."""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import pytest

from builder.steps import environment


def test_a_second_maker_waits_for_the_lock_and_finds_the_venv_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    monkeypatch.setattr(environment, "_create_venv", lambda venv, *a, **k: made.append(venv))
    venv = tmp_path / "envs" / "build-cp312"
    venv.parent.mkdir(parents=True)
    with (venv.parent / "build-cp312.lock").open("w") as held:  # another build is making it
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(target=environment._ensure_venv, args=(venv, Path("python"), ["ninja==1"]),
                                  kwargs={"step": "test"})
        waiter.start()
        time.sleep(0.3)
        assert waiter.is_alive() and made == []  # it waits
        venv.mkdir()
        (venv / ".wheelwright-complete").write_text("ninja==1")  # the other build finished it
    waiter.join(timeout=5)
    assert not waiter.is_alive() and made == []  # and it did not make it again


def test_the_venv_is_made_when_missing_or_for_other_requirements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    monkeypatch.setattr(environment, "_create_venv", lambda venv, *a, **k: (made.append(venv), venv.mkdir()))
    venv = tmp_path / "envs" / "build-cp312"
    environment._ensure_venv(venv, Path("python"), ["ninja==1"], step="test")
    environment._ensure_venv(venv, Path("python"), ["ninja==1"], step="test")
    assert made == [venv] and (venv / ".wheelwright-complete").read_text() == "ninja==1"
    (venv / ".wheelwright-complete").unlink()
    venv.rmdir()
    environment._ensure_venv(venv, Path("python"), ["ninja==2"], step="test")
    assert made == [venv, venv] and (venv / ".wheelwright-complete").read_text() == "ninja==2"
