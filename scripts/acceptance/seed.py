"""The seed checks: the first thing a user would run after installing the wheels."""

from __future__ import annotations

from scripts.acceptance.config import Tolerance
from scripts.acceptance.summary import FAILED, PASSED, Check

CONV_CHECK = "causal_conv1d_fn on (2, 256, 64), width 3"
MAMBA_CHECK = "Mamba(d_model=512, d_state=16, d_conv=4, expand=2) forward on (1, 1024, 512)"
NAMES = (CONV_CHECK, MAMBA_CHECK)


def causal_conv1d_seed(tolerance: Tolerance) -> Check:
    import torch
    from causal_conv1d import causal_conv1d_fn
    from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 256, 64, device="cuda", generator=generator)
    weight = torch.randn(256, 3, device="cuda", generator=generator)
    bias = torch.randn(256, device="cuda", generator=generator)
    out = causal_conv1d_fn(x, weight, bias, activation="silu")
    expected = causal_conv1d_ref(x, weight, bias, activation="silu")
    torch.cuda.synchronize()
    shape_ok = tuple(out.shape) == (2, 256, 64)
    close = bool(torch.allclose(out, expected, rtol=tolerance.rtol, atol=tolerance.atol))
    max_abs = (out - expected).abs().max().item()
    detail = (
        f"shape {tuple(out.shape)}; max |kernel - causal_conv1d_ref| {max_abs:.3g} "
        f"(rtol {tolerance.rtol}, atol {tolerance.atol})"
    )
    return Check(
        name=CONV_CHECK,
        status=PASSED if shape_ok and close else FAILED,
        detail=detail,
        data={"shape": list(out.shape), "max_abs_diff": max_abs},
    )


def mamba_seed() -> Check:
    import torch
    from mamba_ssm import Mamba

    torch.manual_seed(0)
    model = Mamba(d_model=512, d_state=16, d_conv=4, expand=2).to("cuda")
    x = torch.randn(1, 1024, 512, device="cuda")
    with torch.no_grad():
        y = model(x)
    torch.cuda.synchronize()
    shape_ok = tuple(y.shape) == (1, 1024, 512)
    finite = bool(torch.isfinite(y).all())
    detail = (
        f"shape {tuple(y.shape)}, {'all finite' if finite else 'NOT all finite'}, mean |y| {y.abs().mean().item():.3g}"
    )
    return Check(
        name=MAMBA_CHECK,
        status=PASSED if shape_ok and finite else FAILED,
        detail=detail,
        data={"shape": list(y.shape), "finite": finite},
    )
