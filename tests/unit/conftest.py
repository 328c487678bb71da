"""Unit tests are fast and hermetic: an accidental subprocess call fails the test."""

from __future__ import annotations

import subprocess

import pytest


@pytest.fixture(autouse=True)
def _no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"unit tests must not start processes: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    # the build reads its checkout's commit (git) as it starts; a unit test's build names a fixed one
    monkeypatch.setenv("WHEELWRIGHT_COMMIT", "0000000-unit")
    # doctor and the build read the torch symbol index from the cache: a unit test reads only one it made itself
    monkeypatch.setenv("WHEELWRIGHT_SYMBOLS", "/nonexistent/wheelwright-unit-symbols")
