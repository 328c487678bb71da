"""The variant channel's selection on a real GPU machine, nothing forced: uv's NVIDIA provider asks the driver and
the GPU. A three-variant channel of causal-conv1d 1.7.0 (pt214cu130 sm_90+PTX 12.0, pt214cu126 sm_80/sm_90,
pt213cu130 sm_90) served on loopback; fresh venvs holding torch 2.14.1 and 2.13.0 (minimal stand-ins) run the landing
page's one-URL uv command, which must install what a machine with an sm_90 GPU and a CUDA >= 13.0 driver should get.

    python -m pytest tests/gpu/test_variant_selection.py --uv PATH [--pretend 9.0:13.0]
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from builder.steps.twins import VariantTwins
from index_site.serve import serving
from index_site.stage import build_site
from tests import variant_channel
from tests.gpu.options import Given
from tests.gpu.report import Recorded

# (venv torch, channel path, label expected on an sm_90 GPU with a driver for CUDA >= 13.0; None: uv must refuse)
CASES = (
    ("2.14.1", "variant/simple/", "pt214cu130"),
    ("2.13.0", "variant/pt213/simple/", "pt213cu130"),
    ("2.13.0", "variant/simple/", None),  # uv 0.13.9 has no ABI dependency provider: refused, torch kept
)


@dataclass(frozen=True)
class Channel:
    url: str
    torch_wheels: Path
    uv: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def channel(given: Given, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Channel]:
    if given.pretend is None and shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA driver on this machine: on the GPU machine, or with --pretend SM:DRIVER")
    uv = given.uv or Path(shutil.which("uv") or Path(sys.executable).parent / "uv")
    if not uv.is_file():
        pytest.fail(f"no uv binary at {uv}; pass --uv (the pinned 0.13.9)")
    root = tmp_path_factory.mktemp("variant-gpu")
    torch_wheels = variant_channel.write_channel(root / "out")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "NV_VARIANT_PROVIDER_"))}
    env.update(UV_NO_CONFIG="1", UV_CACHE_DIR=str(root / "uv-cache"))
    if given.pretend:
        sm, driver = given.pretend.split(":")
        env.update(NV_VARIANT_PROVIDER_FORCE_SM_ARCH=sm, NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION=driver)
    with serving(root / "out" / "site") as server:
        build_site(root / "out", root / "out" / "site", base_url=server.url, twins=VariantTwins())
        yield Channel(url=server.url, torch_wheels=torch_wheels, uv=uv, env=env)


@pytest.mark.parametrize(("torch", "path", "expected"), CASES, ids=[f"torch{t}-{p}" for t, p, _ in CASES])
def test_uv_installs_what_the_gpu_and_driver_can_run(
    torch: str, path: str, expected: str | None, channel: Channel, record: Recorded, tmp_path: Path
) -> None:
    python = variant_channel.venv_with_torch(channel.uv, tmp_path, channel.torch_wheels, torch, channel.env)
    outcome = variant_channel.uv_one_url(channel.uv, python, channel.env, f"{channel.url}/{path}")
    label, kept = variant_channel.installed(python)
    record.detail = f"installed {label}, torch {kept} (uv exit {outcome.returncode})"
    record.data = {"uv_stderr": outcome.stderr.strip().splitlines()[-3:]}
    assert (label, kept) == (expected, torch), f"{record.detail}; wanted {expected} with torch {torch} kept"
