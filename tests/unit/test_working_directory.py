"""The calls into auditwheel, which changes the process's working directory while it reads or repairs a wheel,
borrow it from the runner (builder/core/runner.py): no other thread starts a process meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from builder.core import runner
from builder.steps import repair


def _held_elsewhere() -> bool:
    """Whether another thread holds the working directory now (a third cannot take it without waiting)."""
    taken: list[bool] = []

    def probe() -> None:
        taken.append(runner._WORKING_DIRECTORY.acquire(blocking=False))
        if taken[0]:
            runner._WORKING_DIRECTORY.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return not taken[0]


def _analyze(tmp_path: Path) -> None:
    repair.analyze(tmp_path / "x.whl", SimpleNamespace(platform="x86_64", accelerator=SimpleNamespace(kind="cuda")),
                   repair.load_excludes())  # type: ignore[arg-type]


def _apply(tmp_path: Path) -> None:
    plan: Any = SimpleNamespace(tags=("manylinux_2_28_x86_64",), policy="manylinux_2_28_x86_64")
    repair.apply_plan(plan, object(), tmp_path / "x.whl", tmp_path / "out")  # type: ignore[arg-type]


@pytest.mark.parametrize(("call", "library"), [(_analyze, "analyze_wheel_abi"), (_apply, "auditwheel_repair")])
def test_the_calls_into_auditwheel_borrow_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: Callable[[Path], None], library: str
) -> None:
    seen: list[bool] = []

    def library_call(*_args: object, **_kwargs: object) -> str:
        seen.append(_held_elsewhere())
        return str(tmp_path / "repaired.whl")

    monkeypatch.setattr(repair, library, library_call)
    call(tmp_path)
    assert seen == [True]
