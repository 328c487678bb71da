"""mamba-ssm's kernels against its own reference implementations, forward and backward, in each dtype: the cases,
which tolerance each compared tensor gets, and the comparison itself (torch.allclose's rule, plus how close)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from scripts.acceptance.config import InnerCases, ScanCases, Tolerance
from scripts.acceptance.summary import FAILED, PASSED, Check


@dataclass(frozen=True, kw_only=True)
class ScanCase:
    dtype: str
    seqlen: int
    groups: int

    @property
    def name(self) -> str:
        return f"selective_scan_fn {self.dtype} seqlen={self.seqlen} groups={self.groups}"


@dataclass(frozen=True, kw_only=True)
class InnerCase:
    dtype: str
    seqlen: int
    variable_bc: bool
    complex_a: bool

    @property
    def name(self) -> str:
        bc = "B,C from input" if self.variable_bc else "B,C fixed"
        return f"mamba_inner_fn {self.dtype} seqlen={self.seqlen} {bc}{' complex A' if self.complex_a else ''}"


def scan_cases(cases: ScanCases) -> list[ScanCase]:
    return [ScanCase(dtype=d, seqlen=s, groups=g) for d in cases.dtypes for s in cases.seqlens for g in cases.groups]


def inner_cases(cases: InnerCases) -> list[InnerCase]:
    found = []
    for dtype in cases.dtypes:
        for complex_a in (False, True) if dtype in cases.complex_dtypes else (False,):
            found += [
                InnerCase(dtype=dtype, seqlen=s, variable_bc=v, complex_a=complex_a)
                for s in cases.seqlens
                for v in cases.variable_bc
            ]
    return found


# What upstream's tests/ops/test_selective_scan.py asserts: the forward outputs, elementwise, with the input
# dtype's pair. Its gradient assertions are commented out upstream; gradients are gated normwise (see the data file).
def output_tolerance(dtype: str, tolerances: dict[str, Tolerance]) -> Tolerance:
    return tolerances[dtype]


@dataclass(frozen=True, kw_only=True)
class Comparison:
    tensor: str
    rule: str  # "elementwise" (torch.allclose) or "normwise" (relative error of the whole tensor)
    max_abs: float
    worst: float  # how close to the bound: the check passes where this is <= 1
    bound: str  # the bound, for the report
    ok: bool

    def as_dict(self) -> dict:
        return {"tensor": self.tensor, "rule": self.rule, "max_abs": _json_float(self.max_abs),
                "worst": _json_float(self.worst), "bound": self.bound, "ok": self.ok}


def _wide(actual, expected):
    import torch

    wide = torch.complex128 if actual.is_complex() else torch.float64
    return actual.detach().to(wide), expected.detach().to(actual.dtype).to(wide)


def compare(tensor: str, actual, expected, tolerance: Tolerance) -> Comparison:
    """torch.allclose in the kernel's dtype (upstream casts the reference to it), plus how close."""
    import torch

    ok = bool(
        torch.allclose(actual.detach(), expected.detach().to(actual.dtype), rtol=tolerance.rtol, atol=tolerance.atol)
    )
    mine, ref = _wide(actual, expected)
    difference = (mine - ref).abs()
    worst = (difference / (tolerance.atol + tolerance.rtol * ref.abs())).max().item()
    return Comparison(tensor=tensor, rule="elementwise", max_abs=difference.max().item(), worst=worst,
                      bound=f"rtol {tolerance.rtol:g}, atol {tolerance.atol:g}", ok=ok)


def compare_norm(tensor: str, actual, expected, bound: float) -> Comparison:
    """||actual - expected|| / ||expected|| in float64 over the finite positions. Non-finite values must sit where
    the reference has the same ones (fp16 overflowing alike on both sides, as torch.testing's equal_nan); anywhere
    else, one NaN or inf fails the comparison."""
    import torch

    mine, ref = _wide(actual, expected)
    finite = torch.isfinite(ref)
    same_kind = torch.where(torch.isnan(ref), torch.isnan(mine), mine == ref)
    if not bool(torch.equal(torch.isfinite(mine), finite)) or not bool(same_kind[~finite].all()):
        counts = f"kernel {int((~torch.isfinite(mine)).sum())}, reference {int((~finite).sum())} non-finite values"
        return Comparison(tensor=tensor, rule="normwise", max_abs=math.inf, worst=math.inf,
                          bound=f"relative error {bound:g} ({counts}, not at the same positions)", ok=False)
    difference = (mine - ref)[finite]
    scale = ref[finite].norm().item()
    error = difference.norm().item() / scale if scale > 0 else difference.norm().item()
    overflow = int((~finite).sum())
    note = f"; {overflow} values non-finite alike in kernel and reference" if overflow else ""
    return Comparison(
        tensor=tensor,
        rule="normwise",
        max_abs=difference.abs().max().item() if difference.numel() else 0.0,
        worst=error / bound,
        bound=f"relative error {bound:g} (found {error:.3g}{note})",
        ok=error <= bound,
    )


def as_check(name: str, comparisons: list[Comparison]) -> Check:
    failures = [c for c in comparisons if not c.ok]
    closest = max(comparisons, key=lambda c: c.worst if math.isfinite(c.worst) else math.inf)
    if failures:
        detail = "; ".join(
            f"{c.tensor} ({c.rule}): max |diff| {c.max_abs:.3g}, {c.worst:.3g}x the bound ({c.bound})" for c in failures
        )
    else:
        detail = f"{len(comparisons)} tensors within tolerance; closest {closest.tensor} at {closest.worst:.3g}x"
    return Check(
        name=name,
        status=FAILED if failures else PASSED,
        detail=detail,
        data={"comparisons": [c.as_dict() for c in comparisons]},
    )


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)


# -- the cases on the device ------------------------------------------------------------------------------------


class _Random:
    """Seeded inputs on the device, the same for every run of a case."""

    def __init__(self, seed: int, device: str) -> None:
        import torch

        self.torch, self.device = torch, device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape: int, dtype):
        return self.torch.randn(*shape, generator=self.generator, device=self.device, dtype=dtype)

    def uniform(self, *shape: int, dtype):
        return self.torch.rand(*shape, generator=self.generator, device=self.device, dtype=dtype)


def _synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _twins(inputs: dict) -> tuple[dict, dict]:
    """Two independent leaf copies of every input, one for the kernel and one for the reference."""
    return (
        {k: v.clone().requires_grad_() for k, v in inputs.items()},
        {k: v.clone().requires_grad_() for k, v in inputs.items()},
    )


def _gradients(mine: dict, ref: dict, bound: float) -> list[Comparison]:
    return [compare_norm(f"d{name}", mine[name].grad, ref[name].grad, bound) for name in mine]


def run_scan_case(case: ScanCase, cases: ScanCases, tolerances: dict[str, Tolerance], gradient_error: dict[str, float],
                  *, device: str = "cuda") -> Check:
    import torch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    itype, rand = getattr(torch, case.dtype), _Random(case.seqlen + case.groups, device)
    batch, dim, dstate, length = cases.batch, cases.dim, cases.dstate, case.seqlen
    bc_shape = (batch, dstate, length) if case.groups == 1 else (batch, case.groups, dstate, length)
    inputs = {
        "u": rand.normal(batch, dim, length, dtype=itype),
        "delta": 0.5 * rand.uniform(batch, dim, length, dtype=itype),
        "A": -0.5 * rand.uniform(dim, dstate, dtype=torch.float32),
        "B": rand.normal(*bc_shape, dtype=itype),
        "C": rand.normal(*bc_shape, dtype=itype),
        "D": rand.normal(dim, dtype=torch.float32),
        "z": rand.normal(batch, dim, length, dtype=itype),
        "delta_bias": 0.5 * rand.uniform(dim, dtype=torch.float32),
    }
    mine, ref = _twins(inputs)
    out, state = selective_scan_fn(**mine, delta_softplus=True, return_last_state=True)
    out_ref, state_ref = selective_scan_ref(**ref, delta_softplus=True, return_last_state=True)
    grad = rand.normal(*out.shape, dtype=out.dtype)
    out.backward(grad)
    out_ref.backward(grad)
    _synchronize(device)
    tolerance = output_tolerance(case.dtype, tolerances)
    comparisons = [compare("out", out, out_ref, tolerance), compare("last_state", state, state_ref, tolerance)]
    return as_check(case.name, comparisons + _gradients(mine, ref, gradient_error[case.dtype]))


def run_inner_case(
    case: InnerCase, cases: InnerCases, tolerances: dict[str, Tolerance], gradient_error: dict[str, float],
    *, device: str = "cuda",
) -> Check:
    import torch
    from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn, mamba_inner_ref

    itype, rand = getattr(torch, case.dtype), _Random(case.seqlen + 2 * case.variable_bc + case.complex_a, device)
    wtype = torch.complex64 if case.complex_a else torch.float32
    batch, dim, dstate, rank = cases.batch, cases.dim, cases.dstate, cases.dt_rank
    projected = 2 * dstate * (2 if case.complex_a else 1) if case.variable_bc else 0  # B and C columns of x_proj
    half = case.dtype != "float32"

    def weight(*shape: int, fan_in: int, dtype=itype):
        # upstream's unit-variance weights in float32; nn.Linear's 1/sqrt(fan-in) scale where they would overflow
        return rand.normal(*shape, dtype=torch.float32).mul(fan_in ** -0.5 if half else 1.0).to(dtype)

    inputs = {
        "xz": rand.normal(batch, 2 * dim, case.seqlen, dtype=itype),
        "conv1d_weight": weight(dim, 1, 3, fan_in=3, dtype=torch.float32),
        "conv1d_bias": rand.normal(dim, dtype=torch.float32),
        "x_proj_weight": weight(rank + projected, dim, fan_in=dim),
        "delta_proj_weight": weight(dim, rank, fan_in=rank),
        "out_proj_weight": weight(dim // 2, dim, fan_in=dim),
        "A": -0.5 * rand.uniform(dim, dstate, dtype=wtype),
        "D": rand.normal(dim, dtype=torch.float32),
        "delta_bias": 0.5 * rand.uniform(dim, dtype=torch.float32),
    }
    if not case.variable_bc:
        inputs |= {"B": rand.normal(dim, dstate, dtype=wtype), "C": rand.normal(dim, dstate, dtype=wtype)}
    mine, ref = _twins(inputs)
    out = mamba_inner_fn(**mine, out_proj_bias=None, delta_softplus=True)
    out_ref = mamba_inner_ref(**ref, out_proj_bias=None, delta_softplus=True)
    grad = rand.normal(*out.shape, dtype=out.dtype)
    out.backward(grad)
    out_ref.backward(grad)
    _synchronize(device)
    bound = gradient_error[case.dtype]
    # upstream asserts mamba_inner_fn's output elementwise in float32 only
    output = (
        compare("out", out, out_ref, output_tolerance(case.dtype, tolerances))
        if not half
        else compare_norm("out", out, out_ref, bound)
    )
    return as_check(case.name, [output, *_gradients(mine, ref, bound)])
