"""What the acceptance run prints from its summary's data: the seed checklist's performance table (Markdown, pasted
into docs as it is) and leak runs, ptx_speed's per-case table, and the closing figures the issues quote (the JIT's
cost, PTX's speed against SASS, the fat build's wall time against its critical path)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scripts.gpu.builds import describe
from scripts.gpu.summary import Summary


def _gib(mib_value: float) -> str:
    return f"{mib_value / 1024:.2f} GiB"


PERF_COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("model", lambda d: str(d["model"])),
    ("params", lambda d: f"{d['params'] / 1e6:.0f}M"),
    ("train tok/s", lambda d: f"{d['train_tokens_per_s']:,.0f}"),
    ("prefill tok/s", lambda d: f"{d['prefill_tokens_per_s']:,.0f}"),
    ("decode ms/token (graphs)", lambda d: f"{d['decode_ms_per_token_cuda_graphs']:.2f}"),
    ("decode ms/token (eager)", lambda d: f"{d['decode_ms_per_token_eager']:.2f}"),
    ("peak train", lambda d: _gib(d["train_peak_mib"])),
    ("peak prefill", lambda d: _gib(d["prefill_peak_mib"])),
    ("peak decode", lambda d: _gib(d["decode_peak_mib"])),
)


def perf_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The performance figures as a Markdown table, one row per model."""
    if not rows:
        return []
    cells = [[header for header, _ in PERF_COLUMNS]] + [[cell(row) for _, cell in PERF_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(PERF_COLUMNS))]
    lines = ["| " + " | ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)) + " |"
             for line in cells]
    return [lines[0], "|" + "|".join("-" * (width + 2) for width in widths) + "|", *lines[1:]]


def checklist_lines(data: dict[str, Any]) -> list[str]:
    """The checklist stage's table and one line per leak run (memory after the warm-up, at the end, the verdict)."""
    leaks = [f"leak run ({loop}): {'ok' if run.get('ok') else 'FAILED'}; allocated {run['start_mib']} MiB after the "
             f"warm-up, {run['end_mib']} MiB at the end, peak +{run['growth_mib']} MiB (bound +{run['bound_mib']})"
             for loop, run in data.get("leak", {}).items()]
    return perf_table(data.get("performance", [])) + leaks


def ptx_table(data: dict[str, Any]) -> list[str]:
    """ptx_speed's per-case table: SASS's time, the noise and allowance, and each arm's median ratio."""
    cases, arms = data.get("cases") or {}, [a for a in data.get("arms", {}) if a != "sass"]
    if not cases:
        return []
    lines = [f"{'case':<58} {'SASS ms':>8} {'noise':>6} {'allow':>6} " + " ".join(
        f"{data['arms'][a]:>18}" for a in arms)]
    for case, s in cases.items():
        ratios = " ".join(f"{s['ratios'][a]:>18.3f}" if a in s["ratios"] else f"{'-':>18}" for a in arms)
        lines.append(f"{case[-58:]:<58} {s['sass_ms']:>8.4f} {s['noise']:>6.1%} {s['allowed']:>6.1%} {ratios}")
    return [*lines, f"verdict: {data['verdict']}: {data['verdict_text']}"]


def closing_lines(summary: Summary) -> list[str]:
    """The JIT's cost, PTX's speed against SASS and the fat build's profile, from the stages that ran."""
    stages = summary.get("stages", {})
    speed = stages.get("ptx_speed", {}).get("data", {})
    lines = []
    if speed.get("jit_s") is not None:
        first = (speed.get("first_call") or {}).get(speed.get("target"), {}) or {}
        lines.append(f"PTX JIT: {speed['jit_s']:.2f} s more than SASS for the first call (CUDA_CACHE_DISABLE="
                     f"{first.get('CUDA_CACHE_DISABLE')}, CUDA_MODULE_LOADING={first.get('CUDA_MODULE_LOADING')})")
    if speed.get("worst_ratio") is not None:
        arms, rounds = speed.get("arms", {}), speed.get("method", {}).get("rounds")
        line = (f"PTX/SASS kernel time, once JIT-ed (median of {rounds} interleaved rounds): "
                f"{arms.get(speed.get('target'), 'PTX')} worst {speed['worst_ratio']:.3f} over "
                f"{len(speed['ratios'])} cases")
        if speed.get("worst_isa_ratio") is not None:
            line += f", {arms.get(speed.get('isa'), 'the ISA control')} worst {speed['worst_isa_ratio']:.3f}"
        lines += [f"{line}; A/A noise up to {speed.get('worst_noise', 0):.1%}",
                  f"verdict: {speed.get('verdict')}: {speed.get('verdict_text')}"]
    fat = stages.get("arch_build", {}).get("data", {}).get("fat", {}).get("compile_profile")
    if fat and fat.get("pairs"):
        lines.append(f"fat build: {describe(fat)}")
    return lines
