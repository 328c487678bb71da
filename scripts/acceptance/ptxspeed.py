"""What the PTX-only wheel costs against the sm_90 SASS one: the first kernel call in a fresh process with the JIT
cache off (CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING as configured), and causal-conv1d's forward and backward once
JIT-compiled. Each measurement runs in the wheel's own venv and writes JSON; ``judge`` compares them."""

from __future__ import annotations

import os
import statistics
import time

from scripts.acceptance import bench
from scripts.acceptance.config import Bench, PtxSpeed
from scripts.acceptance.summary import FAILED, PASSED, Check


def first_call(settings: PtxSpeed) -> dict:
    """Seconds to import, then to run (and finish) the first and the second causal_conv1d_fn call, in this process.
    torch's own CUDA start-up comes before the clock, so the first call's excess over the second is the JIT."""
    import torch

    size = settings.first_call
    torch.cuda.init()
    dtype = getattr(torch, size["dtype"])
    x = torch.randn(size["batch"], size["dim"], size["seqlen"], device="cuda", dtype=dtype)
    weight = torch.randn(size["dim"], size["width"], device="cuda", dtype=dtype)
    torch.cuda.synchronize()
    started = time.perf_counter()
    from causal_conv1d import causal_conv1d_fn

    imported = time.perf_counter()
    causal_conv1d_fn(x, weight, activation="silu")
    torch.cuda.synchronize()
    first = time.perf_counter()
    causal_conv1d_fn(x, weight, activation="silu")
    torch.cuda.synchronize()
    second = time.perf_counter()
    return {
        "import_s": round(imported - started, 4),
        "first_call_s": round(first - imported, 4),
        "second_call_s": round(second - first, 5),
        "CUDA_CACHE_DISABLE": os.environ.get("CUDA_CACHE_DISABLE"),
        "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
        "size": size,
    }


WARM_CHECK = "first calls of the forward, backward and update kernels (the JIT cache filled before the suite)"


def warm_calls(settings: PtxSpeed) -> Check:
    """One call of each of causal-conv1d's translation units, timed, in the process that fills the JIT cache: the
    suite's workers then find the JIT-compiled modules there instead of compiling each its own at once."""
    import torch
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update

    size = settings.first_call
    dtype = getattr(torch, size["dtype"])
    x = torch.randn(size["batch"], size["dim"], size["seqlen"], device="cuda", dtype=dtype, requires_grad=True)
    weight = torch.randn(size["dim"], size["width"], device="cuda", dtype=dtype, requires_grad=True)
    state = torch.zeros(size["batch"], size["dim"], size["width"] - 1, device="cuda", dtype=dtype)
    seconds = {}
    for name, run in (
        ("fwd", lambda: causal_conv1d_fn(x, weight, activation="silu")),
        ("bwd", lambda: causal_conv1d_fn(x, weight, activation="silu").sum().backward()),
        ("update", lambda: causal_conv1d_update(x[:, :, 0].detach(), state, weight.detach(), activation="silu")),
    ):
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        seconds[name] = round(time.perf_counter() - started, 3)
    detail = ", ".join(f"{name} {value:.3f} s" for name, value in seconds.items())
    return Check(name=WARM_CHECK, status=PASSED, detail=detail, data={"seconds": seconds})


def kernel_times(settings: Bench) -> dict:
    """Median milliseconds of causal_conv1d_fn forward, and forward + backward, per benchmark size (name -> ms)."""
    import torch
    from causal_conv1d import causal_conv1d_fn

    times = {}
    for size in settings.causal_conv1d:
        dtype = getattr(torch, size["dtype"])
        x = torch.randn(size["batch"], size["dim"], size["seqlen"], device="cuda", dtype=dtype, requires_grad=True)
        weight = torch.randn(size["dim"], size["width"], device="cuda", dtype=dtype, requires_grad=True)
        grad = torch.randn_like(x)

        def forward(x=x, weight=weight):
            with torch.no_grad():
                return causal_conv1d_fn(x, weight, activation="silu")

        def backward(x=x, weight=weight, grad=grad):
            causal_conv1d_fn(x, weight, activation="silu").backward(grad)

        for kind, run in (("fwd", forward), ("fwd+bwd", backward)):
            timing = bench.time_cuda(
                run, warmup=settings.warmup, repeats=settings.repeats, min_sample_ms=settings.min_sample_ms
            )
            times[f"{bench.conv_name(size)} {kind}"] = round(timing.median_ms, 4)
    return times


FIRST_CALL_CHECK = "first kernel call, JIT cache off: PTX-only vs sm_90 SASS"


def first_call_check(sass: dict | None, ptx: dict | None) -> Check:
    """Informative, and failed only when a run gave nothing: the JIT's cost is the difference of the first calls."""
    if not sass or not ptx:
        return Check(name=FIRST_CALL_CHECK, status=FAILED, detail=f"no measurement (SASS {sass}, PTX {ptx})")
    def cost(run: dict) -> float:  # the module loads at import (EAGER JIT-compiles there), the kernel at its call
        return run["import_s"] + run["first_call_s"]

    jit = cost(ptx) - cost(sass)
    detail = (
        f"import + first call: PTX {cost(ptx):.3f} s vs SASS {cost(sass):.3f} s: the JIT costs {jit:.3f} s "
        f"(CUDA_CACHE_DISABLE={ptx.get('CUDA_CACHE_DISABLE')}, CUDA_MODULE_LOADING={ptx.get('CUDA_MODULE_LOADING')}); "
        f"second calls {ptx['second_call_s'] * 1e3:.2f} ms vs {sass['second_call_s'] * 1e3:.2f} ms"
    )
    return Check(name=FIRST_CALL_CHECK, status=PASSED, detail=detail, data={"sass": sass, "ptx": ptx, "jit_s": jit})


def speed_checks(sass_runs: list[dict], ptx: dict, *, noise_floor: float) -> list[Check]:
    """Per size and pass: PTX's median over the mean of the SASS runs timed before and after it. The SASS runs'
    relative spread is the noise; PTX passes when no slower than max(noise_floor, 3 x noise)."""
    checks = []
    for name, ptx_ms in ptx.items():
        samples = [run[name] for run in sass_runs if name in run]
        if not samples:
            checks.append(Check(name=f"PTX vs SASS: {name}", status=FAILED, detail="no SASS timing to compare"))
            continue
        reference = statistics.fmean(samples)
        noise = (max(samples) - min(samples)) / min(samples)
        allowed = max(noise_floor, 3 * noise)
        ratio = ptx_ms / reference
        ok = ratio <= 1 + allowed
        detail = (
            f"PTX {ptx_ms:.4f} ms vs SASS {reference:.4f} ms: ratio {ratio:.3f} "
            f"(SASS runs {', '.join(f'{s:.4f}' for s in samples)} ms, noise {noise:.1%}, allowed +{allowed:.1%})"
        )
        data = {"ptx_ms": ptx_ms, "sass_ms": samples, "ratio": round(ratio, 4), "noise": round(noise, 4)}
        checks.append(Check(name=f"PTX vs SASS: {name}", status=PASSED if ok else FAILED, detail=detail, data=data))
    return checks


def ratio_summary(checks: list[Check]) -> dict:
    """The ratios, for the summary's data and the closing note."""
    ratios = {c.name.removeprefix("PTX vs SASS: "): c.data["ratio"] for c in checks if "ratio" in c.data}
    return {"ratios": ratios, "worst_ratio": max(ratios.values()) if ratios else None}
