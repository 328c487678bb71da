"""Kernel benchmarks: each kernel against the plain-PyTorch computation it replaces, timed with CUDA events after a
warm-up, reported as the median of repeated samples and the speedup."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from scripts.acceptance.config import Bench, Tolerance
from scripts.acceptance.summary import FAILED, PASSED, Check


@dataclass(frozen=True, kw_only=True)
class Timing:
    median_ms: float
    min_ms: float
    samples: int
    calls_per_sample: int  # fast calls are looped inside one sample so that the events' resolution does not matter

    def as_dict(self) -> dict:
        return {
            "median_ms": round(self.median_ms, 4),
            "min_ms": round(self.min_ms, 4),
            "samples": self.samples,
            "calls_per_sample": self.calls_per_sample,
        }


def calls_per_sample(single_ms: float, min_sample_ms: float) -> int:
    return max(1, math.ceil(min_sample_ms / max(single_ms, 1e-4)))


def time_cuda(run: Callable[[], object], *, warmup: int, repeats: int, min_sample_ms: float) -> Timing:
    """Median milliseconds per call of ``run`` on the current stream."""
    import torch

    for _ in range(warmup):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    inner = calls_per_sample(start.elapsed_time(end), min_sample_ms)
    samples = []
    for _ in range(repeats):
        start.record()
        for _ in range(inner):
            run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return Timing(median_ms=statistics.median(samples), min_ms=min(samples), samples=repeats, calls_per_sample=inner)


def speedup_check(name: str, kernel: Timing, reference: Timing, agreement: tuple[bool, float], size: dict) -> Check:
    """Passes when both ran and agree (a speedup over different work would mean nothing)."""
    agrees, max_abs = agreement
    speedup = reference.median_ms / kernel.median_ms
    detail = f"kernel {kernel.median_ms:.3f} ms, reference {reference.median_ms:.3f} ms, speedup {speedup:.1f}x" + (
        "" if agrees else f"; outputs DISAGREE (max |diff| {max_abs:.3g})"
    )
    data = {
        "size": size,
        "kernel": kernel.as_dict(),
        "reference": reference.as_dict(),
        "speedup": round(speedup, 2),
        "agrees": agrees,
        "max_abs_diff": max_abs,
    }
    return Check(name=name, status=PASSED if agrees else FAILED, detail=detail, data=data)


def _agreement(actual, expected, tolerance: Tolerance) -> tuple[bool, float]:
    import torch

    close = bool(torch.allclose(actual, expected.to(actual.dtype), rtol=tolerance.rtol, atol=tolerance.atol))
    return close, (actual.float() - expected.float()).abs().max().item()


def conv_name(size: dict) -> str:
    return "causal_conv1d_fn vs F.conv1d+SiLU " + _shape(size, ("batch", "dim", "seqlen", "width"))


def scan_name(size: dict) -> str:
    return "selective_scan_fn vs selective_scan_ref " + _shape(size, ("batch", "dim", "seqlen", "dstate"))


def _shape(size: dict, keys: tuple[str, ...]) -> str:
    return " ".join(f"{key}={size[key]}" for key in keys) + f" {size['dtype']}"


def bench_causal_conv1d(size: dict, settings: Bench, tolerance: Tolerance) -> Check:
    import torch
    import torch.nn.functional as F
    from causal_conv1d import causal_conv1d_fn

    dtype, width, length = getattr(torch, size["dtype"]), size["width"], size["seqlen"]
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(size["batch"], size["dim"], length, device="cuda", dtype=dtype, generator=generator)
    weight = torch.randn(size["dim"], width, device="cuda", generator=generator)
    bias = torch.randn(size["dim"], device="cuda", generator=generator)
    conv_weight, conv_bias = weight.unsqueeze(1).to(dtype), bias.to(dtype)

    def kernel():
        return causal_conv1d_fn(x, weight, bias, activation="silu")

    def reference():  # depthwise conv padded on both sides, cut back to the causal part, then SiLU
        return F.silu(F.conv1d(x, conv_weight, conv_bias, padding=width - 1, groups=size["dim"])[..., :length])

    with torch.no_grad():
        agreement = _agreement(kernel(), reference(), tolerance)
        mine = time_cuda(kernel, warmup=settings.warmup, repeats=settings.repeats, min_sample_ms=settings.min_sample_ms)
        theirs = time_cuda(
            reference, warmup=settings.warmup, repeats=settings.repeats, min_sample_ms=settings.min_sample_ms
        )
    return speedup_check(conv_name(size), mine, theirs, agreement, size)


def bench_selective_scan(size: dict, settings: Bench, tolerance: Tolerance) -> Check:
    import torch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    dtype = getattr(torch, size["dtype"])
    batch, dim, length, dstate = size["batch"], size["dim"], size["seqlen"], size["dstate"]
    generator = torch.Generator(device="cuda").manual_seed(0)

    def normal(*shape, dtype=dtype):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=generator)

    inputs = {
        "u": normal(batch, dim, length),
        "delta": normal(batch, dim, length),
        "A": -torch.rand(dim, dstate, device="cuda", generator=generator) - 0.5,
        "B": normal(batch, dstate, length),
        "C": normal(batch, dstate, length),
        "D": normal(dim, dtype=torch.float32),
        "z": normal(batch, dim, length),
        "delta_bias": normal(dim, dtype=torch.float32),
    }
    with torch.no_grad():
        agreement = _agreement(
            selective_scan_fn(**inputs, delta_softplus=True),
            selective_scan_ref(**inputs, delta_softplus=True),
            tolerance,
        )
        mine = time_cuda(
            lambda: selective_scan_fn(**inputs, delta_softplus=True),
            warmup=settings.warmup,
            repeats=settings.repeats,
            min_sample_ms=settings.min_sample_ms,
        )
        theirs = time_cuda(
            lambda: selective_scan_ref(**inputs, delta_softplus=True),
            warmup=1,
            repeats=settings.reference_repeats,
            min_sample_ms=settings.min_sample_ms,
        )
    return speedup_check(scan_name(size), mine, theirs, agreement, size)
