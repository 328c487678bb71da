"""The slim wheel uv took from the variant channel with nothing forced (issue 28): the installed causal-conv1d is the
variant of this GPU's arch, its extension holds that arch's SASS and only the job's PTX that can run on it (none for
sm_90 of 8.0, 9.0, 10.0, 12.0+PTX), and it is at most a third of the fat wheel's bytes. causal-conv1d's whole suite
then runs on it (test_upstream.py, the same stage)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import pytest

from builder.core.fatbin import fatbin_archs
from builder.steps.slim import slim_ptx
from scripts.gpu.data import AcceptanceData
from tests.gpu.options import Given
from tests.gpu.report import Recorded

pytestmark = pytest.mark.gpu


def test_uv_took_the_slim_wheel_of_this_gpu(acceptance: AcceptanceData, given: Given, record: Recorded) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    major, minor = torch.cuda.get_device_capability()
    variant = acceptance.variant(given.need("variant"))
    want = f"{acceptance.label}sm{major}{minor}"
    dist = metadata.distribution(acceptance.arch.package)
    document = json.loads(dist.read_text("variant.json") or "{}")
    label = next(iter(document.get("variants", {})), None)
    found = [fatbin_archs(Path(str(dist.locate_file(f)))) for f in dist.files or () if str(f).endswith(".so")]
    gpu = [f for f in found if not f.empty]
    dist_dir: Path = given.need("dist_dir")
    fat = next(dist_dir.glob("*.whl"))
    slim = next((dist_dir.parent / "variant").glob(f"*-{want}.whl"), None)
    sizes = f"{slim.stat().st_size / 2**20:.1f} MiB of the fat wheel's {fat.stat().st_size / 2**20:.1f} MiB" if slim \
        else f"no {want} file beside the fat wheel"
    record.detail = f"installed {label}: {'; '.join(f.describe() for f in gpu)}; {sizes}"
    record.data = {"label": label, "slim_bytes": slim.stat().st_size if slim else None,
                   "fat_bytes": fat.stat().st_size}
    assert label == want, record.detail
    ptx = frozenset(slim_ptx(f"{major}.{minor}", variant.ptx))
    assert gpu and all((f.sass, f.ptx) == (frozenset({f"{major}.{minor}"}), ptx) for f in gpu), record.detail
    assert slim is not None and slim.stat().st_size * 3 <= fat.stat().st_size, record.detail  # issue 28: <= 1/3
