"""The slim wheel's stage (issue 28): the 4-arch causal-conv1d build of [arch.variants.slim] indexed with its slim
per-arch variants; the pinned uv, nothing forced, installs from the variant channel of the label's torch, and must
take the variant of this GPU's arch; then the tests/gpu tests of that wheel and causal-conv1d's whole suite."""

from __future__ import annotations

import lzma
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from builder.core.wheelhouse import Layout
from scripts.gpu.box import ROOT, Box, free_port
from scripts.gpu.builds import not_ready
from scripts.gpu.stages import TESTS, suite_options
from scripts.gpu.summary import FAILED, StageResult

# the machine has no uv: the pinned one travels in the carry, xz-compressed (scripts/prepare_gpu_carry.sh)
CARRIED_UV = ROOT / ".carry" / "uv.xz"


def find_uv(box: Box) -> Path | None:
    """The carried uv, unpacked into the work folder once; else one on PATH; None when neither is there."""
    unpacked = box.work / "uv"
    if CARRIED_UV.is_file() and not unpacked.is_file():
        partial = unpacked.with_suffix(".part")
        with lzma.open(CARRIED_UV) as source, partial.open("wb") as target:
            shutil.copyfileobj(source, target)
        partial.chmod(0o755)
        partial.replace(unpacked)
    found = unpacked if unpacked.is_file() else shutil.which("uv")
    return Path(found) if found else None


def uv_install(box: Box, uv: Path, python: Path, channel: str) -> None:
    """uv's variant selection as a user runs it, nothing forced: its NVIDIA provider asks the driver and the GPU.
    --no-deps: the venv sees the machine's torch through a .pth file, which uv does not count as installed."""
    env = {k: v for k, v in box.environ().items() if not k.startswith(("UV_", "NV_VARIANT_PROVIDER_"))}
    env.update(UV_NO_CONFIG="1", UV_CACHE_DIR=str(box.work / "uv-cache"))
    box.must([uv, "pip", "install", "--python", python, "--preview-features", "wheel-variants", "--no-deps",
              box.data.arch.package, "--index-url", channel], env=env)


def slim_stage(name: str) -> Callable[[Box], StageResult]:
    def stage(box: Box) -> StageResult:
        waiting = not_ready(box, name)
        if waiting is not None:
            return waiting
        uv = find_uv(box)
        if uv is None:
            return StageResult(status=FAILED,
                               detail=f"no uv: {CARRIED_UV} is missing (scripts/prepare_gpu_carry.sh puts it there)")
        folder, port = box.arch(name), free_port()
        url = f"http://127.0.0.1:{port}"
        channel = f"{url}/variant/{box.data.label[:box.data.label.index('cu')]}/simple/"
        box.must(box.ww("index", "--output", folder, "--base-url", url))
        with box.serving(folder / "site", port, folder / "serve.log"):
            python = box.make_venv(box.work / f"venv-{name}")
            uv_install(box, uv, python, channel)
        tests = ("test_slim.py", *TESTS["arch_suite"])
        result, _ = box.pytest(python, f"arch_{name}", tests, "--variant", name, "--dist-dir", Layout(root=folder).dist,
                               *suite_options(box, folder / "upstream-pytest.log"))
        return replace(result, data={**result.data, "index_url": channel, "variant": name})

    return stage
