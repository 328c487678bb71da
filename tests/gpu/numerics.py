"""Comparing a kernel's tensors with a reference's (torch.allclose's rule, a normwise bound, equal tokens), each
comparison saying how close it came; and mamba-ssm's cases, its kernels against its own reference implementations,
forward and every input's gradient. torch is imported inside the functions: the rest is importable without it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scripts.gpu.data import InnerCases, ScanCases, Tolerance

if TYPE_CHECKING:
    from tests.gpu.report import Recorded

Tensor = Any  # torch.Tensor: torch is the box's, not a dependency of this checkout


@dataclass(frozen=True, kw_only=True)
class Comparison:
    tensor: str
    rule: str  # "elementwise" (torch.allclose), "normwise" (relative error of the whole tensor) or "equal"
    max_abs: float
    worst: float  # how close to the bound: the comparison passes where this is <= 1
    bound: str  # the bound, for the report
    ok: bool

    def as_dict(self) -> dict[str, object]:
        return {"tensor": self.tensor, "rule": self.rule, "max_abs": _json_float(self.max_abs),
                "worst": _json_float(self.worst), "bound": self.bound, "ok": self.ok}


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else repr(value)


def _wide(actual: Tensor, expected: Tensor) -> tuple[Tensor, Tensor]:
    import torch

    wide = torch.complex128 if actual.is_complex() else torch.float64
    return actual.detach().to(wide), expected.detach().to(actual.dtype).to(wide)


def compare(tensor: str, actual: Tensor, expected: Tensor, tolerance: Tolerance) -> Comparison:
    """torch.allclose in the kernel's dtype (upstream casts the reference to it), plus how close."""
    import torch

    ok = bool(
        torch.allclose(actual.detach(), expected.detach().to(actual.dtype), rtol=tolerance.rtol, atol=tolerance.atol)
    )
    mine, ref = _wide(actual, expected)
    difference = (mine - ref).abs()
    worst = float((difference / (tolerance.atol + tolerance.rtol * ref.abs())).max().item())
    return Comparison(tensor=tensor, rule="elementwise", max_abs=float(difference.max().item()), worst=worst,
                      bound=f"rtol {tolerance.rtol:g}, atol {tolerance.atol:g}", ok=ok)


def compare_norm(tensor: str, actual: Tensor, expected: Tensor, bound: float) -> Comparison:
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
    scale = float(ref[finite].norm().item())
    error = float(difference.norm().item()) / scale if scale > 0 else float(difference.norm().item())
    overflow = int((~finite).sum())
    note = f"; {overflow} values non-finite alike in kernel and reference" if overflow else ""
    return Comparison(
        tensor=tensor, rule="normwise", max_abs=float(difference.abs().max().item()) if difference.numel() else 0.0,
        worst=error / bound, bound=f"relative error {bound:g} (found {error:.3g}{note})", ok=error <= bound,
    )


def compare_tokens(tensor: str, actual: Tensor, expected: Tensor, *, margin: float | None = None) -> Comparison:
    """Tokens must be equal; ``margin`` (the reference's logit lead where they differ) goes into the report."""
    mismatches = int((actual != expected).sum()) if actual.shape == expected.shape else int(actual.numel())
    lead = ""
    if mismatches and margin is not None:
        lead = f"; the forward's largest logit lead at a difference {margin:.3g}"
    return Comparison(tensor=tensor, rule="equal", max_abs=float(mismatches), worst=float(mismatches),
                      bound=f"equal ({mismatches} of {expected.numel()} differ{lead})", ok=mismatches == 0)


def verdict(comparisons: list[Comparison]) -> tuple[list[str], str]:
    """(failures, the detail of a pass): what a test asserts empty, and what it records when it is."""
    failures = [f"{c.tensor} ({c.rule}): max |diff| {c.max_abs:.3g}, {c.worst:.3g}x the bound ({c.bound})"
                for c in comparisons if not c.ok]
    closest = max(comparisons, key=lambda c: c.worst if math.isfinite(c.worst) else math.inf)
    return failures, f"{len(comparisons)} tensors within tolerance; closest {closest.tensor} at {closest.worst:.3g}x"


def recorded_verdict(comparisons: list[Comparison], record: Recorded) -> list[str]:
    """The failures a test asserts empty; ``record`` keeps the pass's detail and every comparison."""
    failures, record.detail = verdict(comparisons)
    record.data["comparisons"] = [c.as_dict() for c in comparisons]
    return failures


# -- mamba-ssm's cases ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ScanCase:
    dtype: str
    seqlen: int
    groups: int

    @property
    def name(self) -> str:
        return f"{self.dtype} seqlen={self.seqlen} groups={self.groups}"


@dataclass(frozen=True, kw_only=True)
class InnerCase:
    dtype: str
    seqlen: int
    variable_bc: bool
    complex_a: bool

    @property
    def name(self) -> str:
        bc = "B,C from input" if self.variable_bc else "B,C fixed"
        return f"{self.dtype} seqlen={self.seqlen} {bc}{' complex A' if self.complex_a else ''}"


def scan_cases(cases: ScanCases) -> list[ScanCase]:
    return [ScanCase(dtype=d, seqlen=s, groups=g) for d in cases.dtypes for s in cases.seqlens for g in cases.groups]


def inner_cases(cases: InnerCases) -> list[InnerCase]:
    return [
        InnerCase(dtype=dtype, seqlen=s, variable_bc=v, complex_a=complex_a)
        for dtype in cases.dtypes
        for complex_a in ((False, True) if dtype in cases.complex_dtypes else (False,))
        for s in cases.seqlens
        for v in cases.variable_bc
    ]


class Random:
    """Seeded inputs on the device, the same for every run of a case."""

    def __init__(self, seed: int, device: str) -> None:
        import torch

        self.torch, self.device = torch, device
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape: int, dtype: Any) -> Tensor:
        return self.torch.randn(*shape, generator=self.generator, device=self.device, dtype=dtype)

    def uniform(self, *shape: int, dtype: Any) -> Tensor:
        return self.torch.rand(*shape, generator=self.generator, device=self.device, dtype=dtype)


def _backward_both(out: Tensor, out_ref: Tensor, rand: Random, device: str) -> None:
    import torch

    grad = rand.normal(*out.shape, dtype=out.dtype)
    out.backward(grad)
    out_ref.backward(grad)
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _twins(inputs: dict[str, Tensor]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Two independent leaf copies of every input, one for the kernel and one for the reference."""
    return ({k: v.clone().requires_grad_() for k, v in inputs.items()},
            {k: v.clone().requires_grad_() for k, v in inputs.items()})


def _gradients(mine: dict[str, Tensor], ref: dict[str, Tensor], bound: float) -> list[Comparison]:
    return [compare_norm(f"d{name}", mine[name].grad, ref[name].grad, bound) for name in mine]


def run_scan_case(case: ScanCase, cases: ScanCases, tolerances: dict[str, Tolerance],
                  gradient_error: dict[str, float], *, device: str = "cuda") -> list[Comparison]:
    """selective_scan_fn against selective_scan_ref: the output and last state elementwise, every gradient normwise."""
    import torch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    itype, rand = getattr(torch, case.dtype), Random(case.seqlen + case.groups, device)
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
    _backward_both(out, out_ref, rand, device)
    tolerance = tolerances[case.dtype]  # what upstream asserts: the outputs, elementwise, with the dtype's pair
    comparisons = [compare("out", out, out_ref, tolerance), compare("last_state", state, state_ref, tolerance)]
    return comparisons + _gradients(mine, ref, gradient_error[case.dtype])


def _inner_inputs(case: InnerCase, cases: InnerCases, rand: Random) -> dict[str, Tensor]:
    import torch

    itype, wtype = getattr(torch, case.dtype), torch.complex64 if case.complex_a else torch.float32
    dim, dstate, rank = cases.dim, cases.dstate, cases.dt_rank
    projected = 2 * dstate * (2 if case.complex_a else 1) if case.variable_bc else 0  # B and C columns of x_proj
    half = case.dtype != "float32"

    def weight(*shape: int, fan_in: int, dtype: Any = itype) -> Tensor:
        # upstream's unit-variance weights in float32; nn.Linear's 1/sqrt(fan-in) scale where they would overflow
        return rand.normal(*shape, dtype=torch.float32).mul(fan_in**-0.5 if half else 1.0).to(dtype)

    inputs = {
        "xz": rand.normal(cases.batch, 2 * dim, case.seqlen, dtype=itype),
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
    return inputs


def run_inner_case(case: InnerCase, cases: InnerCases, tolerances: dict[str, Tolerance],
                   gradient_error: dict[str, float], *, device: str = "cuda") -> list[Comparison]:
    """mamba_inner_fn against mamba_inner_ref: upstream asserts the output elementwise in float32 only; half
    precision gates it normwise, and every gradient is gated normwise."""
    from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn, mamba_inner_ref

    rand = Random(case.seqlen + 2 * case.variable_bc + case.complex_a, device)
    mine, ref = _twins(_inner_inputs(case, cases, rand))
    out = mamba_inner_fn(**mine, out_proj_bias=None, delta_softplus=True)
    out_ref = mamba_inner_ref(**ref, out_proj_bias=None, delta_softplus=True)
    _backward_both(out, out_ref, rand, device)
    bound = gradient_error[case.dtype]
    if case.dtype == "float32":
        output = compare("out", out, out_ref, tolerances[case.dtype])
    else:
        output = compare_norm("out", out, out_ref, bound)
    return [output, *_gradients(mine, ref, bound)]
