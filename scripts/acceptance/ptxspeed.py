"""What a PTX-only wheel costs against one holding the GPU's SASS: the first kernel call in a fresh process with the
JIT cache off (CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING as configured), and causal-conv1d's kernels once JIT-ed.

The kernels are timed A/B: one long-lived process per wheel (``KernelTimer``), driven in rounds by
scripts/acceptance/interleave.py, each round timing every case in every process in turn. ``judge`` takes the
median over rounds of each round's ratio to the SASS wheel, and calls "noise" the worst round of the SASS wheel
in a second process against itself (the A/A control). PTX for the GPU's own ISA (compute_90 on the H200), JIT-ed
the same way, tells the JIT's cost apart from the cost of targeting an older ISA (compute_80)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

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


def benchmark_cases(settings: Bench) -> list[tuple[str, dict, str]]:
    """(case name, size, pass) for each benchmark size, forward alone and forward + backward."""
    return [(f"{bench.conv_name(size)} {kind}", size, kind) for size in settings.causal_conv1d for kind in KINDS]


KINDS = ("fwd", "fwd+bwd")


class KernelTimer:
    """causal-conv1d's kernels at the benchmark sizes, in one process that stays up across rounds: the tensors are
    made and every kernel loaded (PTX: JIT-compiled) and warmed up once, then each ``round`` times every case again.

    A sample is ``calls`` calls between two CUDA events, queued behind a GPU sleep that lasts longer than the host
    takes to queue them: the events then bracket the kernels back to back, not the host's launch overhead (which at
    these sizes exceeds a forward kernel's time and follows the CPU's clock and load, not the code the GPU runs)."""

    def __init__(self, bench_settings: Bench, settings: PtxSpeed) -> None:
        import torch

        self.torch, self.settings = torch, settings
        self.cases = {name: self._make(size, kind) for name, size, kind in benchmark_cases(bench_settings)}
        self.cycles_per_ms = self._sleep_rate()
        self.plans = {name: self._plan(run) for name, run in self.cases.items()}

    def _make(self, size: dict, kind: str) -> Callable[[], object]:
        from causal_conv1d import causal_conv1d_fn

        torch = self.torch
        dtype = getattr(torch, size["dtype"])
        x = torch.randn(size["batch"], size["dim"], size["seqlen"], device="cuda", dtype=dtype, requires_grad=True)
        weight = torch.randn(size["dim"], size["width"], device="cuda", dtype=dtype, requires_grad=True)
        grad = torch.randn_like(x)
        if kind == "fwd":
            def forward() -> object:
                with torch.no_grad():
                    return causal_conv1d_fn(x, weight, activation="silu")
            return forward

        def backward() -> None:
            causal_conv1d_fn(x, weight, activation="silu").backward(grad)
            x.grad = weight.grad = None  # no accumulation kernel in the timed work
        return backward

    def _sleep_rate(self) -> float:
        """GPU clock cycles per millisecond of torch.cuda._sleep, measured (0: this torch has no _sleep)."""
        torch = self.torch
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return 0.0
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep(1_000_000)  # the first call may load the sleep kernel
        start.record()
        sleep(10_000_000)
        end.record()
        end.synchronize()
        return 10_000_000 / max(start.elapsed_time(end), 1e-3)

    def _plan(self, run: Callable[[], object]) -> dict:
        """Warm up, then how many calls make a sample and how long the GPU must sleep while the host queues them."""
        torch = self.torch
        for _ in range(self.settings.warmup):
            run()
        torch.cuda.synchronize()
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        calls = bench.calls_per_sample((time.perf_counter() - started) * 1e3, self.settings.min_sample_ms)
        started = time.perf_counter()
        for _ in range(calls):
            run()
        queued_ms = (time.perf_counter() - started) * 1e3
        torch.cuda.synchronize()
        sleep_ms = min(2 * queued_ms + 1.0, 500.0)
        return {"calls": calls, "queued_ms": round(queued_ms, 3), "sleep_cycles": int(sleep_ms * self.cycles_per_ms)}

    def round(self) -> dict[str, float]:
        """Each case once more: the median of ``repeats`` samples, in milliseconds per call."""
        return {name: round(self._median_ms(run, self.plans[name]), 5) for name, run in self.cases.items()}

    def _median_ms(self, run: Callable[[], object], plan: dict) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        run()  # the case's own warm-up: the previous case (or arm) left other data in the caches
        samples = []
        for _ in range(self.settings.repeats):
            if plan["sleep_cycles"]:
                torch.cuda._sleep(plan["sleep_cycles"])
            start.record()
            for _ in range(plan["calls"]):
                run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / plan["calls"])
        return statistics.median(samples)

    def facts(self) -> dict:
        import causal_conv1d

        return {
            "torch": self.torch.__version__,
            "causal_conv1d": getattr(causal_conv1d, "__version__", None),
            "module": str(Path(causal_conv1d.__file__).parent),
            "device": self.torch.cuda.get_device_name(),
            "sleep_cycles_per_ms": round(self.cycles_per_ms),
            "plans": self.plans,
        }


FIRST_CALL_CHECK = "first kernel call, JIT cache off: {name} vs SASS"


def jit_cost(run: dict) -> float:
    """Import + first call: the module loads at import (EAGER JIT-compiles there), the kernel at its call (LAZY)."""
    return run["import_s"] + run["first_call_s"]


def first_call_check(sass: dict | None, ptx: dict | None, *, name: str = "PTX") -> Check:
    """Informative, and failed only when a run gave nothing: the JIT's cost is the difference of the first calls."""
    check_name = FIRST_CALL_CHECK.format(name=name)
    if not sass or not ptx:
        return Check(name=check_name, status=FAILED, detail=f"no measurement (SASS {sass}, {name} {ptx})")
    jit = jit_cost(ptx) - jit_cost(sass)
    detail = (
        f"import + first call: {name} {jit_cost(ptx):.3f} s vs SASS {jit_cost(sass):.3f} s: the JIT costs {jit:.3f} s "
        f"(CUDA_CACHE_DISABLE={ptx.get('CUDA_CACHE_DISABLE')}, CUDA_MODULE_LOADING={ptx.get('CUDA_MODULE_LOADING')}); "
        f"second calls {ptx['second_call_s'] * 1e3:.2f} ms vs {sass['second_call_s'] * 1e3:.2f} ms"
    )
    return Check(name=check_name, status=PASSED, detail=detail, data={"sass": sass, "ptx": ptx, "jit_s": round(jit, 4)})


# -- judging the rounds (no GPU here: the numbers come from scripts/acceptance/interleave.py's workers) ----------

REFERENCE, CONTROL = "sass", "sass-again"  # the SASS wheel's two processes: the reference, and its A/A control
NOISE_CHECK = "A/A control: the SASS wheel in a second process against itself"

WITHIN, TARGET_ISA, JIT, NO_CONTROL, TOO_NOISY = "within-noise", "target-isa", "jit", "no-control", "too-noisy"
VERDICTS = {
    WITHIN: "PTX, once JIT-ed, is as fast as SASS within the noise",
    TARGET_ISA: "{target} is slower than SASS, but {isa}, JIT-ed the same way, is not: the gap comes from generating "
    "code for the older ISA, not from the JIT",
    JIT: "{isa} is slower than SASS for the same GPU: the JIT path itself costs speed",
    NO_CONTROL: "{target} is slower than SASS and there is no {isa} wheel to say why",
    TOO_NOISY: "the SASS wheel differs from itself by more than the data file's max_noise: no verdict",
}


def round_ratios(rounds: list[dict], arm: str, case: str) -> list[float]:
    """The arm's time over the reference's, round by round (rounds missing either are left out)."""
    ratios = []
    for times in rounds:
        mine, reference = times.get(arm, {}).get(case), times.get(REFERENCE, {}).get(case)
        if mine is not None and reference:
            ratios.append(mine / reference)
    return ratios


def case_stats(rounds: list[dict], arms: Sequence[str], case: str, *, floor: float) -> dict:
    """One case: the reference's median time; the noise, the worst round of the A/A control (the SASS wheel against
    itself); the allowance max(floor, noise); each arm's ratio, the median over rounds of its per-round ratios."""
    control = round_ratios(rounds, CONTROL, case)
    noise = max((abs(r - 1) for r in control), default=None)
    per_round = {arm: round_ratios(rounds, arm, case) for arm in arms}
    return {
        "sass_ms": round(statistics.median(t[REFERENCE][case] for t in rounds), 5),
        "noise": None if noise is None else round(noise, 4),
        "allowed": None if noise is None else round(max(floor, noise), 4),
        "ratios": {arm: round(statistics.median(r), 4) for arm, r in per_round.items() if r},
        "round_ratios": {arm: [round(x, 4) for x in r] for arm, r in per_round.items()},
    }


def _slower(cases: dict, arm: str) -> dict[str, float]:
    """The cases where the arm's ratio is past 1 + allowed (case -> ratio)."""
    return {
        case: stats["ratios"][arm]
        for case, stats in cases.items()
        if arm in stats["ratios"] and stats["ratios"][arm] > 1 + stats["allowed"]
    }


def _join(ratios: Iterable[float]) -> str:
    return ", ".join(f"{ratio:.3f}" for ratio in ratios)


def _ratios_text(cases: dict, arm: str) -> str:
    worst = max(cases, key=lambda case: cases[case]["ratios"][arm])
    return (f"ratios {_join(s['ratios'][arm] for s in cases.values())}; worst "
            f"{cases[worst]['ratios'][arm]:.3f} ({worst}), allowed {1 + cases[worst]['allowed']:.3f}")


def judge(result: dict, *, target: str, isa: str, floor: float, max_noise: float, labels: dict[str, str]) -> tuple[
        list[Check], dict]:
    """The A/A control's noise, then the control PTX (the GPU's own ISA) and the target PTX against SASS. Fails when
    the measurement is too noisy, when the control is slower (the JIT), or when the target is slower and no
    control explains it; the target's gap with the control within noise is reported, not failed."""
    rounds = result.get("rounds") or []
    names = {target: labels.get(target, target), isa: labels.get(isa, isa)}
    arms = [arm for arm in (isa, target) if rounds and arm in rounds[0]]
    if not rounds or CONTROL not in rounds[0] or target not in arms:
        lacking = [arm for arm in (REFERENCE, CONTROL, target) if not rounds or arm not in rounds[0]]
        error = result.get("error") or f"the rounds lack {', '.join(lacking)}"
        return [Check(name=f"{names[target]} vs SASS", status=FAILED, detail=f"no measurement: {error}")], {
            "verdict": None, "rounds": result}
    cases = {case: case_stats(rounds, [CONTROL, *arms], case, floor=floor) for case in rounds[0][REFERENCE]}
    noisiest = max(cases, key=lambda case: cases[case]["noise"])
    noise_ok = cases[noisiest]["noise"] <= max_noise
    checks = [Check(
        name=NOISE_CHECK, status=PASSED if noise_ok else FAILED,
        detail=f"{len(rounds)} rounds; worst round off by {cases[noisiest]['noise']:.1%} ({noisiest}; max_noise "
        f"{max_noise:.0%}); median A/A ratios {_join(s['ratios'][CONTROL] for s in cases.values())}",
    )]
    isa_slow = _slower(cases, isa) if isa in arms else None
    target_slow = _slower(cases, target)
    if isa_slow is not None:
        checks.append(Check(
            name=f"{names[isa]} (JIT-ed) vs SASS, once JIT-ed", status=FAILED if isa_slow else PASSED,
            detail=f"{_ratios_text(cases, isa)}" + (f"; slower on {len(isa_slow)} cases: the JIT" if isa_slow else ""),
        ))
    if not noise_ok:
        verdict = TOO_NOISY
    elif isa_slow:
        verdict = JIT
    elif not target_slow:
        verdict = WITHIN
    else:
        verdict = TARGET_ISA if isa_slow is not None else NO_CONTROL
    explained = verdict == TARGET_ISA
    detail = _ratios_text(cases, target)
    if target_slow:
        detail += f"; slower on {len(target_slow)} of {len(cases)} cases"
        detail += f": reported, not failed ({names[isa]} is within noise)" if explained else ""
    checks.append(Check(
        name=f"{names[target]} (JIT-ed) vs SASS, once JIT-ed", status=FAILED if target_slow and not explained else
        PASSED, detail=detail,
    ))
    if result.get("error"):  # what was measured is judged, but a worker that failed fails the stage
        checks.append(Check(name="every round measured", status=FAILED, detail=str(result["error"])))
    text = VERDICTS[verdict].format(target=names[target], isa=names[isa])
    target_ratios = {case: stats["ratios"][target] for case, stats in cases.items()}
    data = {
        "target": target,
        "isa": isa,
        "verdict": verdict,
        "verdict_text": text,
        "ratios": target_ratios,
        "worst_ratio": max(target_ratios.values()),
        "isa_ratios": {case: s["ratios"][isa] for case, s in cases.items()} if isa in arms else None,
        "worst_isa_ratio": max(s["ratios"][isa] for s in cases.values()) if isa in arms else None,
        "worst_noise": cases[noisiest]["noise"],
        "cases": cases,
        "arms": {REFERENCE: "SASS", CONTROL: "SASS (A/A control)", **names},
        "rounds": result,
    }
    return checks, data


def table_lines(data: dict) -> list[str]:
    """The per-case table: SASS's time, the noise and allowance, and each arm's median ratio."""
    cases, arms = data.get("cases") or {}, [a for a in data.get("arms", {}) if a != REFERENCE]
    if not cases:
        return []
    head = f"{'case':<58} {'SASS ms':>8} {'noise':>6} {'allow':>6} " + " ".join(
        f"{data['arms'][a]:>18}" for a in arms)
    lines = [head]
    for case, s in cases.items():
        ratios = " ".join(f"{s['ratios'][a]:>18.3f}" if a in s["ratios"] else f"{'-':>18}" for a in arms)
        lines.append(f"{case[-58:]:<58} {s['sass_ms']:>8.4f} {s['noise']:>6.1%} {s['allowed']:>6.1%} {ratios}")
    lines.append(f"verdict: {data['verdict']}: {data['verdict_text']}")
    return lines
