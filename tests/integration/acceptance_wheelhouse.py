"""What a finished causal-conv1d build leaves for the acceptance script, with a toy extension: dist/ holding its one
wheel, for the test interpreter's Python and the box's label, and the ledger row saying it was built."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from builder.core.hashing import FileIdentity
from builder.core.ledger import Ledger, LedgerEntry
from scripts.acceptance.config import load_config
from tests.wheels import make_wheel

CONFIG = load_config()
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def built_causal_conv1d(folder: Path, extension: bytes, *, phase: str, compile_seconds: float) -> Path:
    """The wheel in ``folder/dist`` and its row in ``folder/ledger.sqlite``; ``phase`` is the ledger's last phase."""
    module = f"causal_conv1d_cuda.cpython-{TAG[2:]}-x86_64-linux-gnu.so"
    (folder / "dist").mkdir(parents=True)
    wheel = make_wheel(
        folder / "dist", name="causal_conv1d", version=f"1.7.0+{CONFIG.label}", python_tag=TAG,
        files={"causal_conv1d/__init__.py": b"", module: extension}, requires=("torch==2.11.*",),
    )
    with Ledger(folder / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(
            job_id=f"causal-conv1d-1.7.0+{CONFIG.label}-{TAG}-x86_64", package="causal-conv1d", version="1.7.0",
            label=CONFIG.label, torch="2.11.0", accelerator="cu130", python=f"{TAG[2]}.{TAG[3:]}",
            input_hash="0" * 64, status="built", phase=phase, timings={"compile": compile_seconds}, wheel=wheel.name,
            wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel_size=wheel.stat().st_size,
            wheel_identity=str(FileIdentity.of(wheel.stat())),
        ))
    return wheel


# gpu_acceptance.sh itself with its setup stages for the main wheels stood in: an arch stage runs as it does on the
# box, but for the GPU (run with ROOT and PYTHON in the environment)
HARNESS = r"""
source "$ROOT/scripts/gpu_acceptance.sh"
stage_preflight() { py record --stage preflight --status passed --detail "a stand-in for the GPU machine"; }
for s in carry index serve install; do eval "stage_$s() { :; }"; done
main "$@"
"""
