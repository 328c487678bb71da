"""The leak run's judgement: device memory allocated after every step of a long loop must not rise more than a
small bound above where it stood once the loop had warmed up. Plain Python over the samples, so that it is tested
on synthetic series without a GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True, kw_only=True)
class Sample:
    step: int  # 0 is the first step's sample
    seconds: float  # since the loop started
    allocated: int  # torch.cuda.memory_allocated, bytes
    reserved: int = 0  # torch.cuda.memory_reserved, bytes (reported, not judged: the caching allocator keeps blocks)


@dataclass(frozen=True, kw_only=True)
class LeakVerdict:
    ok: bool
    steps: int
    seconds: float
    warmup_steps: int
    start: int  # allocated bytes at the first sample after the warm-up
    end: int
    peak: int  # the most allocated after the warm-up
    bound: int
    slope_mib_per_min: float  # least-squares trend after the warm-up, for the report
    reserved_end: int
    reason: str = ""  # why it failed, where it did

    @property
    def growth(self) -> int:
        return self.peak - self.start

    def detail(self) -> str:
        facts = (
            f"{self.steps} steps in {self.seconds:.0f} s; allocated {mib(self.start)} after {self.warmup_steps} "
            f"warm-up steps, {mib(self.end)} at the end, peak {mib(self.peak)} (+{mib(self.growth)}, bound "
            f"+{mib(self.bound)}); trend {self.slope_mib_per_min:+.3g} MiB/min"
        )
        return f"{self.reason}; {facts}" if self.reason else facts

    def as_dict(self) -> dict[str, object]:
        return {
            "steps": self.steps,
            "seconds": round(self.seconds, 2),
            "warmup_steps": self.warmup_steps,
            "start_mib": _mib_value(self.start),
            "end_mib": _mib_value(self.end),
            "peak_mib": _mib_value(self.peak),
            "growth_mib": _mib_value(self.growth),
            "bound_mib": _mib_value(self.bound),
            "slope_mib_per_min": round(self.slope_mib_per_min, 4),
            "reserved_end_mib": _mib_value(self.reserved_end),
            "ok": self.ok,
        }


def mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"


def _mib_value(value: int) -> float:
    return round(value / MIB, 2)


def judge(samples: Sequence[Sample], *, warmup_steps: int, bound_bytes: int, min_samples: int) -> LeakVerdict:
    """Fails when allocated memory after the warm-up ever exceeds its first post-warm-up value by more than the
    bound, or when too few samples came after the warm-up to say anything."""
    settled = [sample for sample in samples if sample.step >= warmup_steps]
    last = samples[-1] if samples else Sample(step=-1, seconds=0.0, allocated=0)
    if len(settled) < min_samples:
        return LeakVerdict(
            ok=False,
            steps=len(samples),
            seconds=last.seconds,
            warmup_steps=warmup_steps,
            start=settled[0].allocated if settled else 0,
            end=last.allocated,
            peak=max((s.allocated for s in settled), default=0),
            bound=bound_bytes,
            slope_mib_per_min=0.0,
            reserved_end=last.reserved,
            reason=f"only {len(settled)} samples after the warm-up, fewer than the {min_samples} needed to judge",
        )
    start, peak = settled[0].allocated, max(sample.allocated for sample in settled)
    ok = peak - start <= bound_bytes
    return LeakVerdict(
        ok=ok,
        steps=len(samples),
        seconds=last.seconds,
        warmup_steps=warmup_steps,
        start=start,
        end=last.allocated,
        peak=peak,
        bound=bound_bytes,
        slope_mib_per_min=slope(settled) * 60 / MIB,
        reserved_end=last.reserved,
        reason="" if ok else f"allocated memory grew {mib(peak - start)} after the warm-up, past the bound",
    )


def slope(samples: Sequence[Sample]) -> float:
    """Least-squares bytes per second of allocated memory over time (0 for fewer than two distinct times)."""
    times = [sample.seconds for sample in samples]
    mean_t = sum(times) / len(times)
    mean_a = sum(sample.allocated for sample in samples) / len(samples)
    spread = sum((t - mean_t) ** 2 for t in times)
    if spread == 0:
        return 0.0
    return sum((s.seconds - mean_t) * (s.allocated - mean_a) for s in samples) / spread
