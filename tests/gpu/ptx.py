"""Judging ptx_speed's measurements (no GPU here: the numbers come from tests/gpu/timing.py's workers): each PTX
wheel's first call against SASS's (the JIT's cost), and the interleaved rounds. A case's ratio is the median over
rounds of the round's PTX/SASS time; its noise, the worst round of the SASS wheel in a second process against itself
(the A/A control). PTX for the GPU's own ISA (compute_90 on the H200), JIT-ed the same way, tells the JIT's cost
apart from the cost of targeting an older ISA (compute_80)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

REFERENCE, CONTROL = "sass", "sass-again"  # the SASS wheel's two processes: the reference, and its A/A control
WITHIN, TARGET_ISA, JIT, NO_CONTROL, TOO_NOISY = "within-noise", "target-isa", "jit", "no-control", "too-noisy"
VERDICTS = {
    WITHIN: "PTX, once JIT-ed, is as fast as SASS within the noise",
    TARGET_ISA: "{target} is slower than SASS, but {isa}, JIT-ed the same way, is not: the gap comes from generating "
    "code for the older ISA, not from the JIT",
    JIT: "{isa} is slower than SASS for the same GPU: the JIT path itself costs speed",
    NO_CONTROL: "{target} is slower than SASS and there is no {isa} wheel to say why",
    TOO_NOISY: "the SASS wheel differs from itself by more than the data file's max_noise: no verdict",
}
Rounds = list[dict[str, dict[str, float]]]  # each round: arm -> case -> ms


@dataclass(frozen=True)
class Judged:
    ok: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class Judgement:
    noise: Judged  # the A/A control within max_noise
    isa: Judged | None  # the ISA control within noise; None without its wheel
    target: Judged  # the target within noise, or its gap explained by the ISA control
    measured: Judged  # every worker answered every round
    data: dict[str, Any] = field(default_factory=dict)


def jit_cost(run: dict[str, Any]) -> float:
    """Import + first call: the module loads at import (EAGER JIT-compiles there), the kernel at its call (LAZY)."""
    return float(run["import_s"]) + float(run["first_call_s"])


def first_call(sass: dict[str, Any] | None, ptx: dict[str, Any] | None, *, name: str) -> tuple[Judged, float | None]:
    """Informative, and failed only when a run gave nothing: the JIT's cost is the difference of the first calls."""
    if not sass or not ptx:
        return Judged(False, f"no measurement (SASS {sass}, {name} {ptx})"), None
    jit = jit_cost(ptx) - jit_cost(sass)
    detail = (
        f"import + first call: {name} {jit_cost(ptx):.3f} s vs SASS {jit_cost(sass):.3f} s: the JIT costs {jit:.3f} s "
        f"(CUDA_CACHE_DISABLE={ptx.get('CUDA_CACHE_DISABLE')}, CUDA_MODULE_LOADING={ptx.get('CUDA_MODULE_LOADING')}); "
        f"second calls {ptx['second_call_s'] * 1e3:.2f} ms vs {sass['second_call_s'] * 1e3:.2f} ms"
    )
    return Judged(True, detail), round(jit, 4)


def round_ratios(rounds: Rounds, arm: str, case: str) -> list[float]:
    """The arm's time over the reference's, round by round (rounds missing either are left out)."""
    ratios = []
    for times in rounds:
        mine, reference = times.get(arm, {}).get(case), times.get(REFERENCE, {}).get(case)
        if mine is not None and reference:
            ratios.append(mine / reference)
    return ratios


def case_stats(rounds: Rounds, arms: Sequence[str], case: str, *, floor: float) -> dict[str, Any]:
    """One case: the reference's median time; the noise, the A/A control's worst round; the allowance max(floor,
    noise); each arm's ratio, the median over rounds of its per-round ratios."""
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


def _slower(cases: dict[str, Any], arm: str) -> dict[str, float]:
    """The cases where the arm's ratio is past 1 + allowed (case -> ratio)."""
    return {case: stats["ratios"][arm] for case, stats in cases.items()
            if arm in stats["ratios"] and stats["ratios"][arm] > 1 + stats["allowed"]}


def _join(ratios: Iterable[float]) -> str:
    return ", ".join(f"{ratio:.3f}" for ratio in ratios)


def _ratios_text(cases: dict[str, Any], arm: str) -> str:
    worst = max(cases, key=lambda case: cases[case]["ratios"][arm])
    return (f"ratios {_join(s['ratios'][arm] for s in cases.values())}; worst "
            f"{cases[worst]['ratios'][arm]:.3f} ({worst}), allowed {1 + cases[worst]['allowed']:.3f}")


def _verdict(noise_ok: bool, isa_slow: dict[str, float] | None, target_slow: dict[str, float]) -> str:
    if not noise_ok:
        return TOO_NOISY
    if isa_slow:
        return JIT
    if not target_slow:
        return WITHIN
    return TARGET_ISA if isa_slow is not None else NO_CONTROL


def judge(result: dict[str, Any], *, target: str, isa: str, floor: float, max_noise: float,
          labels: dict[str, str]) -> Judgement:
    """Fails when the measurement is too noisy, when the ISA control is slower (the JIT), or when the target is
    slower and no control explains it; the target's gap with the control within noise is reported, not failed."""
    rounds: Rounds = result.get("rounds") or []
    names = {target: labels.get(target, target), isa: labels.get(isa, isa)}
    error = result.get("error")
    measured = Judged(error is None, str(error or f"{len(rounds)} rounds"))
    if not rounds or CONTROL not in rounds[0] or target not in rounds[0]:
        lacking = [arm for arm in (REFERENCE, CONTROL, target) if not rounds or arm not in rounds[0]]
        missing = Judged(False, f"no measurement: {error or 'the rounds lack ' + ', '.join(lacking)}")
        return Judgement(noise=missing, isa=None, target=missing, measured=measured,
                         data={"verdict": None, "rounds": result})
    arms = [arm for arm in (isa, target) if arm in rounds[0]]
    cases = {case: case_stats(rounds, [CONTROL, *arms], case, floor=floor) for case in rounds[0][REFERENCE]}
    noisiest = max(cases, key=lambda case: cases[case]["noise"])
    noise = Judged(cases[noisiest]["noise"] <= max_noise,
                    f"{len(rounds)} rounds; worst round off by {cases[noisiest]['noise']:.1%} ({noisiest}; max_noise "
                    f"{max_noise:.0%}); median A/A ratios {_join(s['ratios'][CONTROL] for s in cases.values())}")
    isa_slow, target_slow = _slower(cases, isa) if isa in arms else None, _slower(cases, target)
    verdict = _verdict(noise.ok, isa_slow, target_slow)
    isa_verdict = None if isa_slow is None else Judged(
        not isa_slow, _ratios_text(cases, isa) + (f"; slower on {len(isa_slow)} cases: the JIT" if isa_slow else ""))
    detail = _ratios_text(cases, target)
    if target_slow:
        explained = f": reported, not failed ({names[isa]} is within noise)" if verdict == TARGET_ISA else ""
        detail += f"; slower on {len(target_slow)} of {len(cases)} cases{explained}"
    return Judgement(noise=noise, isa=isa_verdict, measured=measured,
                     target=Judged(not target_slow or verdict == TARGET_ISA, detail),
                     data=_data(cases, rounds=result, target=target, isa=isa, names=names, verdict=verdict,
                                noise=cases[noisiest]["noise"], with_isa=isa in arms))


def _data(cases: dict[str, Any], *, rounds: dict[str, Any], target: str, isa: str, names: dict[str, str],
          verdict: str, noise: float, with_isa: bool) -> dict[str, Any]:
    ratios = {case: stats["ratios"][target] for case, stats in cases.items()}
    isa_ratios = {case: s["ratios"][isa] for case, s in cases.items()} if with_isa else None
    return {
        "target": target, "isa": isa, "verdict": verdict,
        "verdict_text": VERDICTS[verdict].format(target=names[target], isa=names[isa]),
        "ratios": ratios, "worst_ratio": max(ratios.values()),
        "isa_ratios": isa_ratios, "worst_isa_ratio": max(isa_ratios.values()) if isa_ratios else None,
        "worst_noise": noise, "cases": cases, "arms": {REFERENCE: "SASS", CONTROL: "SASS (A/A control)", **names},
        "rounds": rounds,
    }
