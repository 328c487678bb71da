"""Timing kernels on the GPU: CUDA events around samples after a warm-up, fast calls looped within one sample
(``time_cuda``, the benchmarks'); one process's first causal_conv1d_fn calls, which PTX pays the JIT in; and
``KernelTimer``, ptx_speed's long-lived per-wheel timer, whose samples queue behind a GPU sleep so that the events
bracket the kernels and not the host's launch loop. Run as a module in a wheel's venv, this is ptx_speed's worker:

    python -m tests.gpu.timing first-call SETTINGS_JSON       # the first calls' seconds, as JSON on stdout
    python -m tests.gpu.timing worker SETTINGS_JSON           # tests/gpu/interleave.py's protocol on stdin/stdout
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.gpu import interleave

Case = dict[str, Any]  # a benchmark size: batch, dim, seqlen, width, dtype


@dataclass(frozen=True, kw_only=True)
class Timing:
    median_ms: float
    min_ms: float
    samples: int
    calls_per_sample: int  # fast calls are looped inside one sample so that the events' resolution does not matter

    def as_dict(self) -> dict[str, object]:
        return {"median_ms": round(self.median_ms, 4), "min_ms": round(self.min_ms, 4), "samples": self.samples,
                "calls_per_sample": self.calls_per_sample}


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


def conv_inputs(size: Case, *, grad: bool = False) -> tuple[Any, Any]:
    import torch

    dtype = getattr(torch, size["dtype"])
    x = torch.randn(size["batch"], size["dim"], size["seqlen"], device="cuda", dtype=dtype, requires_grad=grad)
    weight = torch.randn(size["dim"], size["width"], device="cuda", dtype=dtype, requires_grad=grad)
    return x, weight


def first_call(size: Case) -> dict[str, object]:
    """Seconds to import, then to run (and finish) the first and the second causal_conv1d_fn call, in this process.
    torch's own CUDA start-up comes before the clock, so the first call's excess over the second is the JIT."""
    import torch

    torch.cuda.init()
    x, weight = conv_inputs(size)
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
    return {"import_s": round(imported - started, 4), "first_call_s": round(first - imported, 4),
            "second_call_s": round(second - first, 5), "CUDA_CACHE_DISABLE": os.environ.get("CUDA_CACHE_DISABLE"),
            "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"), "size": size}


def warm_calls(size: Case) -> dict[str, float]:
    """One call of each of causal-conv1d's translation units (forward, backward, update), timed: in the process
    that fills the JIT cache, so that the suite's workers find the JIT-compiled modules there."""
    import torch
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update

    x, weight = conv_inputs(size, grad=True)
    state = torch.zeros(size["batch"], size["dim"], size["width"] - 1, device="cuda", dtype=x.dtype)
    calls: dict[str, Callable[[], object]] = {
        "fwd": lambda: causal_conv1d_fn(x, weight, activation="silu"),
        "bwd": lambda: causal_conv1d_fn(x, weight, activation="silu").sum().backward(),
        "update": lambda: causal_conv1d_update(x[:, :, 0].detach(), state, weight.detach(), activation="silu"),
    }
    seconds = {}
    for name, run in calls.items():
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        seconds[name] = round(time.perf_counter() - started, 3)
    return seconds


KINDS = ("fwd", "fwd+bwd")


def conv_name(size: Case) -> str:
    return " ".join(f"{key}={size[key]}" for key in ("batch", "dim", "seqlen", "width")) + f" {size['dtype']}"


class KernelTimer:
    """causal-conv1d's kernels at the benchmark sizes, forward and forward + backward, in one process that stays up
    across rounds: the tensors are made and every kernel loaded (PTX: JIT-compiled) and warmed up once, then each
    ``round`` times every case again. A sample is ``calls`` calls between two CUDA events, queued behind a GPU sleep
    that lasts longer than the host takes to queue them."""

    def __init__(self, sizes: list[Case], settings: dict[str, Any]) -> None:
        import torch

        self.torch, self.settings = torch, settings
        self.cases = {f"{conv_name(size)} {kind}": self._make(size, kind) for size in sizes for kind in KINDS}
        self.cycles_per_ms = self._sleep_rate()
        self.plans = {name: self._plan(run) for name, run in self.cases.items()}

    def _make(self, size: Case, kind: str) -> Callable[[], object]:
        from causal_conv1d import causal_conv1d_fn

        x, weight = conv_inputs(size, grad=True)
        grad = self.torch.randn_like(x)
        if kind == "fwd":
            def forward() -> object:
                with self.torch.no_grad():
                    return causal_conv1d_fn(x, weight, activation="silu")
            return forward

        def backward() -> None:
            causal_conv1d_fn(x, weight, activation="silu").backward(grad)
            x.grad = weight.grad = None  # no accumulation kernel in the timed work
        return backward

    def _sleep_rate(self) -> float:
        """GPU clock cycles per millisecond of torch.cuda._sleep, measured (0: this torch has no _sleep)."""
        cuda = self.torch.cuda
        sleep = getattr(cuda, "_sleep", None)
        if sleep is None:
            return 0.0
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        sleep(1_000_000)  # the first call may load the sleep kernel
        start.record()
        sleep(10_000_000)
        end.record()
        end.synchronize()
        return 10_000_000 / max(float(start.elapsed_time(end)), 1e-3)

    def _plan(self, run: Callable[[], object]) -> dict[str, float]:
        """Warm up, then how many calls make a sample and how long the GPU must sleep while the host queues them."""
        synchronize = self.torch.cuda.synchronize
        for _ in range(self.settings["warmup"]):
            run()
        synchronize()
        started = time.perf_counter()
        run()
        synchronize()
        calls = calls_per_sample((time.perf_counter() - started) * 1e3, self.settings["min_sample_ms"])
        started = time.perf_counter()
        for _ in range(calls):
            run()
        queued_ms = (time.perf_counter() - started) * 1e3
        synchronize()
        sleep_ms = min(2 * queued_ms + 1.0, 500.0)
        return {"calls": calls, "queued_ms": round(queued_ms, 3), "sleep_cycles": int(sleep_ms * self.cycles_per_ms)}

    def round(self) -> dict[str, float]:
        """Each case once more: the median of ``repeats`` samples, in milliseconds per call."""
        return {name: round(self._median_ms(run, self.plans[name]), 5) for name, run in self.cases.items()}

    def _median_ms(self, run: Callable[[], object], plan: dict[str, float]) -> float:
        cuda = self.torch.cuda
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        run()  # the case's own warm-up: the previous case (or arm) left other data in the caches
        samples = []
        for _ in range(self.settings["repeats"]):
            if plan["sleep_cycles"]:
                cuda._sleep(int(plan["sleep_cycles"]))
            start.record()
            for _ in range(int(plan["calls"])):
                run()
            end.record()
            end.synchronize()
            samples.append(float(start.elapsed_time(end)) / plan["calls"])
        return statistics.median(samples)

    def facts(self) -> dict[str, object]:
        import causal_conv1d

        return {"torch": self.torch.__version__, "causal_conv1d": getattr(causal_conv1d, "__version__", None),
                "module": str(Path(causal_conv1d.__file__).parent), "device": self.torch.cuda.get_device_name(),
                "sleep_cycles_per_ms": round(self.cycles_per_ms), "plans": self.plans}


def main(argv: list[str]) -> int:
    """In a wheel's venv, for ptx_speed: ``first-call SETTINGS`` or ``worker SETTINGS`` (the JSON test_ptx_speed
    passes: the first call's size, the benchmark sizes, the timer's settings)."""
    from tests.gpu.device import unavailable_reason

    mode, settings = argv[0], json.loads(argv[1])
    reason = unavailable_reason()
    if reason:
        print(f"ERROR {reason}", file=sys.stderr)
        return 3
    if mode == "first-call":
        print(json.dumps(first_call(settings["first_call"])))
        return 0
    return interleave.serve(lambda: KernelTimer(settings["sizes"], settings), sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
