"""find_pythons: a free-threaded Python (3.13t) is an interpreter of its own, found as python3.13t and in pyenv's
3.13.*t installs; an ordinary 3.13 never stands in for it, nor it for an ordinary one."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.steps import environment
from builder.steps.environment import NotBuildableHere, find_pythons

MINOR = "3.29"  # no interpreter that runs these tests


@pytest.fixture
def pyenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for install, name in (("3.29.1", "python3.29"), ("3.29.1t", "python3.29t"), ("3.29.2t", "python3.29t")):
        python = tmp_path / "versions" / install / "bin" / name
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\n")
        python.chmod(0o755)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    monkeypatch.setattr(environment.shutil, "which", lambda name: None)
    return tmp_path


def test_a_free_threaded_python_is_found_only_among_free_threaded_installs(pyenv: Path) -> None:
    found = find_pythons(f"{MINOR}t")
    assert [p.relative_to(pyenv).parts[1] for p in found] == ["3.29.2t", "3.29.1t"]
    assert [p.relative_to(pyenv).parts[1] for p in find_pythons(MINOR)] == ["3.29.1"]


def test_no_free_threaded_interpreter_is_not_buildable_here(pyenv: Path) -> None:
    with pytest.raises(NotBuildableHere, match=r"^no free-threaded Python 3.28t interpreter on this machine"):
        find_pythons("3.28t")
