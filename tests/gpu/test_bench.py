"""Each kernel against the plain-PyTorch computation it replaces, forward, at the data file's sizes ([bench]): CUDA
events after a warm-up, the median of repeated samples, and the speedup. The two outputs must agree first, under the
package's own tolerance: a speedup over different work would mean nothing."""

from __future__ import annotations

from typing import Any

import pytest

from scripts.gpu.data import AcceptanceData, ConvSize, ScanSize, Tolerance, load_acceptance
from tests.gpu.numerics import Tensor
from tests.gpu.report import Recorded
from tests.gpu.timing import Timing, time_cuda

pytestmark = pytest.mark.gpu
BENCH = load_acceptance().bench


def _name(size: ConvSize | ScanSize) -> str:
    return " ".join(f"{key}={value}" for key, value in size.model_dump().items() if key != "dtype") + f" {size.dtype}"


def _agree(actual: Tensor, expected: Tensor, tolerance: Tolerance) -> tuple[bool, float]:
    import torch

    close = bool(torch.allclose(actual, expected.to(actual.dtype), rtol=tolerance.rtol, atol=tolerance.atol))
    return close, float((actual.float() - expected.float()).abs().max().item())


def _speedup(kernel: Timing, reference: Timing, agreement: tuple[bool, float], size: Any, record: Recorded) -> None:
    agrees, max_abs = agreement
    speedup = reference.median_ms / kernel.median_ms
    record.detail = f"kernel {kernel.median_ms:.3f} ms, reference {reference.median_ms:.3f} ms, speedup {speedup:.1f}x"
    record.data.update(size=size.model_dump(), kernel=kernel.as_dict(), reference=reference.as_dict(),
                       speedup=round(speedup, 2), agrees=agrees, max_abs_diff=max_abs)
    assert agrees, f"{record.detail}; outputs DISAGREE (max |diff| {max_abs:.3g})"


@pytest.mark.parametrize("size", BENCH.causal_conv1d, ids=_name)
def test_causal_conv1d_fn_vs_conv1d_and_silu(size: ConvSize, acceptance: AcceptanceData, record: Recorded) -> None:
    import torch
    import torch.nn.functional as F
    from causal_conv1d import causal_conv1d_fn

    dtype, settings = getattr(torch, size.dtype), acceptance.bench
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(size.batch, size.dim, size.seqlen, device="cuda", dtype=dtype, generator=generator)
    weight = torch.randn(size.dim, size.width, device="cuda", generator=generator)
    bias = torch.randn(size.dim, device="cuda", generator=generator)
    conv_weight, conv_bias = weight.unsqueeze(1).to(dtype), bias.to(dtype)

    def kernel() -> Tensor:
        return causal_conv1d_fn(x, weight, bias, activation="silu")

    def reference() -> Tensor:  # depthwise conv padded on both sides, cut back to the causal part, then SiLU
        out = F.conv1d(x, conv_weight, conv_bias, padding=size.width - 1, groups=size.dim)
        return F.silu(out[..., : size.seqlen])

    with torch.no_grad():
        agreement = _agree(kernel(), reference(), acceptance.causal_conv1d.tolerance[size.dtype])
        mine, theirs = (time_cuda(run, warmup=settings.warmup, repeats=settings.repeats,
                                  min_sample_ms=settings.min_sample_ms) for run in (kernel, reference))
    _speedup(mine, theirs, agreement, size, record)


@pytest.mark.parametrize("size", BENCH.selective_scan, ids=_name)
def test_selective_scan_fn_vs_selective_scan_ref(size: ScanSize, acceptance: AcceptanceData, record: Recorded) -> None:
    import torch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    dtype, settings = getattr(torch, size.dtype), acceptance.bench
    generator = torch.Generator(device="cuda").manual_seed(0)

    def normal(*shape: int, kind: Any = dtype) -> Tensor:
        return torch.randn(*shape, device="cuda", dtype=kind, generator=generator)

    batch, dim, length, dstate = size.batch, size.dim, size.seqlen, size.dstate
    inputs = {"u": normal(batch, dim, length), "delta": normal(batch, dim, length),
              "A": -torch.rand(dim, dstate, device="cuda", generator=generator) - 0.5,
              "B": normal(batch, dstate, length), "C": normal(batch, dstate, length),
              "D": normal(dim, kind=torch.float32), "z": normal(batch, dim, length),
              "delta_bias": normal(dim, kind=torch.float32)}
    with torch.no_grad():
        agreement = _agree(selective_scan_fn(**inputs, delta_softplus=True),
                           selective_scan_ref(**inputs, delta_softplus=True), acceptance.mamba.tolerance[size.dtype])
        mine = time_cuda(lambda: selective_scan_fn(**inputs, delta_softplus=True), warmup=settings.warmup,
                         repeats=settings.repeats, min_sample_ms=settings.min_sample_ms)
        theirs = time_cuda(lambda: selective_scan_ref(**inputs, delta_softplus=True), warmup=1,
                           repeats=settings.reference_repeats, min_sample_ms=settings.min_sample_ms)
    _speedup(mine, theirs, agreement, size, record)
