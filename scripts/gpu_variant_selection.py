"""The variant channel's selection on a real GPU: nothing forced, uv's NVIDIA provider asks the driver and the GPU.
Builds a three-variant channel of causal-conv1d 1.7.0 (pt214cu130 sm_90+PTX 12.0, pt214cu126 sm_80/sm_90,
pt213cu130 sm_90), serves it on loopback, and in fresh venvs holding torch 2.14.1 and 2.13.0 (minimal stand-ins)
runs the landing page's one-URL uv command. Needs only this checkout and the pinned uv binary.

    python scripts/gpu_variant_selection.py [--uv PATH]

Prints one JSON object (what uv installed in each case, its stderr tail) and exits 0 when each case got what a
machine with the given GPU and a CUDA >= 13.0 driver should get."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.steps.variant import VariantTwins
from index_site.serve import serving
from index_site.site import build_site
from tests import variant_channel

# (venv torch, channel path, label expected on an sm_90 GPU with a driver for CUDA >= 13.0; None: uv must refuse)
CASES = (
    ("2.14.1", "variant/simple/", "pt214cu130"),
    ("2.13.0", "variant/pt213/simple/", "pt213cu130"),
    ("2.13.0", "variant/simple/", None),  # uv 0.13.9 has no ABI dependency provider: refused, torch kept
)


def _uv(path: str | None) -> Path:
    found = path or shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(found).is_file():
        sys.exit(f"ERROR no uv binary at {found}; pass --uv (the pinned 0.13.9)")
    return Path(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uv", help="the uv binary (default: on PATH, or beside this Python)")
    parser.add_argument("--pretend", metavar="SM:DRIVER", help="force the NVIDIA provider (e.g. 9.0:13.0), for a "
                        "dry run of this script on a machine without a GPU; on the GPU machine leave it out")
    args = parser.parse_args()
    uv = _uv(args.uv)
    results, ok = [], True
    with tempfile.TemporaryDirectory(prefix="wheelwright-variant-gpu-") as tmp:
        root = Path(tmp)
        torch_wheels = variant_channel.write_channel(root / "out")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_", "NV_VARIANT_PROVIDER_"))}
        env.update(UV_NO_CONFIG="1", UV_CACHE_DIR=str(root / "uv-cache"))
        if args.pretend:
            sm, driver = args.pretend.split(":")
            env.update(NV_VARIANT_PROVIDER_FORCE_SM_ARCH=sm, NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION=driver)
        with serving(root / "out" / "site") as server:
            build_site(root / "out", root / "out" / "site", base_url=server.url, twins=VariantTwins())
            for n, (torch, channel, expected) in enumerate(CASES):
                python = variant_channel.venv_with_torch(uv, root / f"case{n}", torch_wheels, torch, env)
                outcome = variant_channel.uv_one_url(uv, python, env, f"{server.url}/{channel}")
                label, kept = variant_channel.installed(python)
                passed = label == expected and kept == torch
                ok &= passed
                results.append({"torch": torch, "channel": channel, "expected": expected, "installed": label,
                                "torch_after": kept, "uv_exit": outcome.returncode, "passed": passed,
                                "uv_stderr": outcome.stderr.strip().splitlines()[-3:]})
    print(json.dumps({"passed": ok, "cases": results}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
