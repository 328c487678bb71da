"""Runs the GPU acceptance's mamba-ssm cases (tests/gpu/numerics.py) on the CPU, for tests on machines without a GPU.

Usage: python acceptance_cpu_harness.py MAMBA_SDIST_ROOT CAUSAL_SDIST_ROOT OUT_JSON

The packages' pure-PyTorch reference implementations are loaded from their unpacked sdists (never the compiled
extensions, which a CPU run cannot have) and stand in for the kernels, so every case compares the reference with
itself: what this proves is the plumbing around the numbers (arguments, gradients, tolerances per tensor, the
comparison on real, half and complex tensors), not the kernels' numerics, which only the GPU run can.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path


def _package(name: str, path: Path) -> types.ModuleType:
    """A package whose __init__ is not run (upstream's imports the compiled extension and every model)."""
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
    return module


def _load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_references(mamba_root: Path, causal_root: Path) -> types.ModuleType:
    """mamba_ssm.ops.selective_scan_interface with its kernel entry points bound to the references."""
    sys.modules["selective_scan_cuda"] = types.ModuleType("selective_scan_cuda")
    conv_package = _package("causal_conv1d", causal_root / "causal_conv1d")
    cpp = types.ModuleType("causal_conv1d.cpp_functions")
    cpp.causal_conv1d_fwd_function = cpp.causal_conv1d_bwd_function = cpp.causal_conv1d_update_function = None
    sys.modules[cpp.__name__] = cpp
    conv = _load("causal_conv1d.causal_conv1d_interface", causal_root / "causal_conv1d" / "causal_conv1d_interface.py")
    conv_package.causal_conv1d_fn = conv.causal_conv1d_ref
    for name, sub in (
        ("mamba_ssm", ""),
        ("mamba_ssm.ops", "ops"),
        ("mamba_ssm.ops.triton", "ops/triton"),
        ("mamba_ssm.utils", "utils"),
    ):
        _package(name, mamba_root / "mamba_ssm" / sub)
    _load("mamba_ssm.utils.torch", mamba_root / "mamba_ssm" / "utils" / "torch.py")
    layer_norm = types.ModuleType("mamba_ssm.ops.triton.layer_norm")
    layer_norm._layer_norm_fwd = (
        None  # a Triton kernel; mamba_inner_fn's optional RMS norms need it, these cases do not
    )
    sys.modules[layer_norm.__name__] = layer_norm
    interface = _load(
        "mamba_ssm.ops.selective_scan_interface", mamba_root / "mamba_ssm" / "ops" / "selective_scan_interface.py"
    )
    interface.selective_scan_fn = interface.selective_scan_ref
    interface.mamba_inner_fn = interface.mamba_inner_ref
    return interface


def main(mamba_root: str, causal_root: str, out: str) -> int:
    load_references(Path(mamba_root), Path(causal_root))
    from scripts.gpu.data import InnerCases, ScanCases, load_acceptance  # the checkout's root is on PYTHONPATH
    from tests.gpu import numerics

    mamba = load_acceptance().mamba
    scan = ScanCases(batch=2, dim=4, dstate=8, dtypes=mamba.selective_scan.dtypes, seqlens=(33,), groups=(1, 2))
    inner = InnerCases(batch=2, dim=16, dstate=4, dt_rank=4, dtypes=mamba.inner.dtypes, seqlens=(17,),
                       variable_bc=(True, False), complex_dtypes=mamba.inner.complex_dtypes)
    found = {f"selective_scan_fn {case.name}": numerics.run_scan_case(
        case, scan, mamba.tolerance, mamba.gradient_relative_error, device="cpu") for case in numerics.scan_cases(scan)}
    found |= {f"mamba_inner_fn {case.name}": numerics.run_inner_case(
        case, inner, mamba.tolerance, mamba.gradient_relative_error, device="cpu")
        for case in numerics.inner_cases(inner)}
    Path(out).write_text(json.dumps({name: [c.as_dict() for c in comparisons] for name, comparisons in found.items()},
                                    indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
