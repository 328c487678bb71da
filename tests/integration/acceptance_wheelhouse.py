"""For the acceptance driver's tests on a machine without a GPU: what a finished causal-conv1d build leaves (dist/
with its one wheel, a toy extension inside, and its ledger row), and the driver run in this process, one command
at a time, with the stages only the GPU machine can run stood in by functions that say they ran."""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry
from scripts.bench.wheels import wheel_of_files
from scripts.gpu import acceptance, arch_stages, stages
from scripts.gpu.arguments import parse
from scripts.gpu.box import Box
from scripts.gpu.data import load_acceptance
from scripts.gpu.summary import PASSED, StageResult

DATA = load_acceptance()
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
Stage = Callable[[Box], StageResult]


def built_causal_conv1d(folder: Path, extension: bytes, *, phase: str, compile_seconds: float) -> Path:
    """The wheel in ``folder/dist`` and its row in ``folder/ledger.sqlite``; ``phase`` is the ledger's last phase."""
    module = f"causal_conv1d_cuda.cpython-{TAG[2:]}-x86_64-linux-gnu.so"
    (folder / "dist").mkdir(parents=True)
    wheel = wheel_of_files(folder / "dist", name="causal_conv1d", version=f"1.7.0+{DATA.label}", python_tag=TAG,
                       files={"causal_conv1d/__init__.py": b"", module: extension}, requires=("torch==2.11.*",))
    with Ledger(folder / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(
            job_id=f"causal-conv1d-1.7.0+{DATA.label}-{TAG}-x86_64", package="causal-conv1d", version="1.7.0",
            label=DATA.label, torch="2.11.0", accelerator="cu130", python=f"{TAG[2]}.{TAG[3:]}",
            input_hash="0" * 64, status="built", phase=phase, timings={"compile": compile_seconds},  # type: ignore[arg-type]
            wheel=wheel.name, wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
            wheel_size=wheel.stat().st_size, wheel_identity=str(FileIdentity.of(wheel.stat())),
        ))
    return wheel


def finished_build(folder: Path) -> None:
    """The state folder a detached build leaves once it has ended (exit 0)."""
    state = folder / "build-run"
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": time.time() - 5, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": 0, "ended": time.time()}))


def standing_in(name: str, detail: str = "a stand-in for the GPU machine") -> Stage:
    def stage(box: Box) -> StageResult:
        return StageResult(status=PASSED, detail=detail, data={"cuda_available": True} if name == "preflight" else {})

    return stage


def stand_in(monkeypatch: pytest.MonkeyPatch, stand_ins: dict[str, Stage],
             arch: dict[str, Stage] | None = None) -> None:
    """The driver's stages, these replaced (and the arch stages', where ``arch`` is given)."""
    monkeypatch.setattr(stages, "STAGES", {**stages.STAGES, **stand_ins})
    if arch is not None:
        real = arch_stages.stages
        monkeypatch.setattr(arch_stages, "stages", lambda box: {**real(box), **arch})


def drive(out: Path, work: Path, *args: str, started_ago: float = 0.0) -> int:
    """One command of the run, in this process, as if ``started_ago`` seconds of it had passed."""
    options = parse([str(out), "--work", str(work), *args], DATA)
    return acceptance.run(options, started=time.monotonic() - started_ago)
