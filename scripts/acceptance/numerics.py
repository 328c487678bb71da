"""mamba-ssm's kernels against its own reference implementations, forward and backward, in each dtype: the cases,
which tolerance each compared tensor gets, and the comparison itself (torch.allclose's rule, plus how close)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import InnerCases, ScanCases, Tolerance
from .summary import FAILED, PASSED, Check


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


# Which tolerance each tensor gets, as upstream's tests/ops/test_selective_scan.py assigns them: the input dtype's
# pair for activations, widened multiples of it for gradients that sum over the sequence, and the fp32 parameters'
# pair (widened to the input dtype's, since z gates the output) for parameters.
def scan_tolerances(dtype: str, tolerances: dict[str, Tolerance]) -> dict[str, Tolerance]:
    base = tolerances[dtype]
    weight = tolerances["weight"].widened(base)
    return {
        "out": base,
        "last_state": base,
        "du": base.scaled(2, 2),
        "ddelta": base.scaled(5, 10),
        "dA": weight.scaled(atol=5),
        "dB": base,
        "dC": base,
        "dD": weight,
        "dz": weight,
        "ddelta_bias": weight,
    }


# mamba_inner_fn: upstream lists these pairs for xz, A, B, C, D and delta_bias (its backward assertions are kept
# commented out); every other parameter gets the parameters' pair.
def inner_tolerances(dtype: str, tolerances: dict[str, Tolerance], *, variable_bc: bool) -> dict[str, Tolerance]:
    base = tolerances[dtype]
    weight = tolerances["weight"].widened(base)
    found = {"out": base, "dxz": base.scaled(2, 2), "dA": weight.scaled(atol=5)}
    found |= {
        f"d{name}": weight
        for name in (
            "D",
            "delta_bias",
            "conv1d_weight",
            "conv1d_bias",
            "x_proj_weight",
            "delta_proj_weight",
            "out_proj_weight",
        )
    }
    if not variable_bc:
        found |= {"dB": weight, "dC": weight}
    return found


@dataclass(frozen=True, kw_only=True)
class Comparison:
    tensor: str
    max_abs: float
    worst: float  # max |a - b| / (atol + rtol * |b|): torch.allclose passes where this is <= 1
    tolerance: Tolerance
    ok: bool

    def as_dict(self) -> dict:
        return {
            "tensor": self.tensor,
            "max_abs": _json_float(self.max_abs),
            "worst": _json_float(self.worst),
            "rtol": self.tolerance.rtol,
            "atol": self.tolerance.atol,
            "ok": self.ok,
        }


def compare(tensor: str, actual, expected, tolerance: Tolerance) -> Comparison:
    """torch.allclose in the kernel's dtype (upstream casts the reference's gradients to it), plus how close."""
    import torch

    expected = expected.detach().to(actual.dtype)
    actual = actual.detach()
    ok = bool(torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol))
    wide = torch.complex128 if actual.is_complex() else torch.float64
    difference = (actual.to(wide) - expected.to(wide)).abs()
    bound = tolerance.atol + tolerance.rtol * expected.to(wide).abs()
    return Comparison(
        tensor=tensor,
        max_abs=difference.max().item(),
        worst=(difference / bound).max().item(),
        tolerance=tolerance,
        ok=ok,
    )


def as_check(name: str, comparisons: list[Comparison]) -> Check:
    failures = [c for c in comparisons if not c.ok]
    closest = max(comparisons, key=lambda c: c.worst if math.isfinite(c.worst) else math.inf)
    if failures:
        detail = "; ".join(
            f"{c.tensor}: max |diff| {c.max_abs:.3g}, {c.worst:.3g}x the tolerance "
            f"(rtol {c.tolerance.rtol:g}, atol {c.tolerance.atol:g})"
            for c in failures
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


def _gradients(mine: dict, ref: dict, tolerances: dict[str, Tolerance]) -> list[Comparison]:
    return [compare(f"d{name}", mine[name].grad, ref[name].grad, tolerances[f"d{name}"]) for name in mine]


def run_scan_case(case: ScanCase, cases: ScanCases, tolerances: dict[str, Tolerance], *, device: str = "cuda") -> Check:
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
    wanted = scan_tolerances(case.dtype, tolerances)
    comparisons = [
        compare("out", out, out_ref, wanted["out"]),
        compare("last_state", state, state_ref, wanted["last_state"]),
    ]
    return as_check(case.name, comparisons + _gradients(mine, ref, wanted))


def run_inner_case(
    case: InnerCase, cases: InnerCases, tolerances: dict[str, Tolerance], *, device: str = "cuda"
) -> Check:
    import torch
    from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn, mamba_inner_ref

    itype, rand = getattr(torch, case.dtype), _Random(case.seqlen + 2 * case.variable_bc + case.complex_a, device)
    wtype = torch.complex64 if case.complex_a else torch.float32
    batch, dim, dstate, rank = cases.batch, cases.dim, cases.dstate, cases.dt_rank
    projected = 2 * dstate * (2 if case.complex_a else 1) if case.variable_bc else 0  # B and C columns of x_proj
    inputs = {
        "xz": rand.normal(batch, 2 * dim, case.seqlen, dtype=itype),
        "conv1d_weight": rand.normal(dim, 1, 3, dtype=torch.float32),
        "conv1d_bias": rand.normal(dim, dtype=torch.float32),
        "x_proj_weight": rand.normal(rank + projected, dim, dtype=itype),
        "delta_proj_weight": rand.normal(dim, rank, dtype=itype),
        "out_proj_weight": rand.normal(dim // 2, dim, dtype=itype),
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
    wanted = inner_tolerances(case.dtype, tolerances, variable_bc=case.variable_bc)
    return as_check(case.name, [compare("out", out, out_ref, wanted["out"]), *_gradients(mine, ref, wanted)])
