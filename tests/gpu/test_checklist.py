"""The seed checklist: what someone about to deploy Mamba on these wheels checks first, against the installed
causal-conv1d and mamba-ssm on CUDA ([checklist] in scripts/data/gpu_acceptance.toml; docs/gpu-acceptance.md).
1 seed: the guide's functional test; 2 batch, decode: numerical consistency across batch sizes and between the decode
path and a full forward; 3 perf: throughput, decode latency and peak memory of random-weight bf16 models of the
released shapes; 4 leak: training and decoding loops, allocated memory sampled after every step.

    python -m pytest tests/gpu/test_checklist.py [--parts seed,batch] [--leak-seconds 10]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from scripts.gpu.data import AcceptanceData, Dtype, PerfModel, load_acceptance
from tests.gpu import checklist, memory
from tests.gpu.numerics import recorded_verdict
from tests.gpu.options import Given
from tests.gpu.report import Recorded

pytestmark = pytest.mark.gpu
DATA = load_acceptance().checklist
BATCH_MODELS, DECODE_MODELS = checklist.BATCH_MODELS, checklist.DECODE_MODELS
part = pytest.mark.part


@pytest.fixture(autouse=True)
def _release() -> Iterator[None]:
    """What one check allocated goes before the next: each peak and each leak run is its own."""
    yield
    checklist.release()


@part("seed")
def test_causal_conv1d_fn_on_2_256_64_width_3(acceptance: AcceptanceData, record: Recorded) -> None:
    import torch
    from causal_conv1d import causal_conv1d_fn
    from causal_conv1d.causal_conv1d_interface import causal_conv1d_ref

    tolerance = acceptance.causal_conv1d.tolerance["float32"]
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(2, 256, 64, device="cuda", generator=generator)
    weight = torch.randn(256, 3, device="cuda", generator=generator)
    bias = torch.randn(256, device="cuda", generator=generator)
    out = causal_conv1d_fn(x, weight, bias, activation="silu")
    expected = causal_conv1d_ref(x, weight, bias, activation="silu")
    torch.cuda.synchronize()
    max_abs = float((out - expected).abs().max().item())
    record.detail = (f"shape {tuple(out.shape)}; max |kernel - causal_conv1d_ref| {max_abs:.3g} "
                     f"(rtol {tolerance.rtol}, atol {tolerance.atol})")
    record.data.update(shape=list(out.shape), max_abs_diff=max_abs)
    assert tuple(out.shape) == (2, 256, 64), record.detail
    assert torch.allclose(out, expected, rtol=tolerance.rtol, atol=tolerance.atol), record.detail


@part("seed")
def test_mamba_512_16_4_2_forward_on_1_1024_512(record: Recorded) -> None:
    import torch
    from mamba_ssm import Mamba

    torch.manual_seed(0)
    model = Mamba(d_model=512, d_state=16, d_conv=4, expand=2).to("cuda")
    x = torch.randn(1, 1024, 512, device="cuda")
    with torch.no_grad():
        y = model(x)
    torch.cuda.synchronize()
    finite = bool(torch.isfinite(y).all())
    record.detail = (f"shape {tuple(y.shape)}, {'all finite' if finite else 'NOT all finite'}, "
                     f"mean |y| {y.abs().mean().item():.3g}")
    record.data.update(shape=list(y.shape), finite=finite)
    assert tuple(y.shape) == (1, 1024, 512) and finite, record.detail


@part("batch")
@pytest.mark.parametrize("dtype", DATA.dtypes)
@pytest.mark.parametrize("model", BATCH_MODELS)
def test_batch_consistency(model: str, dtype: Dtype, acceptance: AcceptanceData, record: Recorded) -> None:
    """Each sample's output inside batches of every size against its batch-of-1 output (size 1 again included)."""
    failures = recorded_verdict(checklist.batch(model, dtype, acceptance.checklist), record)
    assert not failures, "; ".join(failures)


@part("decode")
@pytest.mark.parametrize("dtype", DATA.dtypes)
@pytest.mark.parametrize("model", DECODE_MODELS)
def test_generate_vs_full_forward(model: str, dtype: Dtype, acceptance: AcceptanceData, record: Recorded) -> None:
    """fp32: greedy tokens equal to the forward's, with and without CUDA graphs; fp16/bf16: the decode steps'
    logits, teacher-forced, within the data file's pair of the forward's."""
    failures = recorded_verdict(checklist.decode(model, dtype, acceptance.checklist), record)
    assert not failures, "; ".join(failures)


@part("perf")
@pytest.mark.parametrize("model", DATA.perf.models, ids=lambda model: model.name)
def test_performance(
    model: PerfModel, acceptance: AcceptanceData, record: Recorded, stage_data: dict[str, Any]
) -> None:
    """Training step, prefill and decode latency, peak memory of each: every figure finite, the loss too."""
    data = checklist.perf(model, acceptance.checklist)
    finite = data.pop("finite")
    numbers = [v for v in data.values() if isinstance(v, float | int) and not isinstance(v, bool)]
    record.detail, record.data = checklist.perf_detail(data), data
    assert finite and all(math.isfinite(v) and v >= 0 for v in numbers), (
        f"{record.detail}; NOT all finite and non-negative (the loss, the logits or a timing)")
    stage_data.setdefault("performance", []).append(data)


@part("leak")
@pytest.mark.parametrize("loop", ("training", "decoding"))
def test_leak_run(
    loop: str, acceptance: AcceptanceData, given: Given, record: Recorded, stage_data: dict[str, Any]
) -> None:
    """Allocated memory after the warm-up steps never more than the bound above its first post-warm-up sample."""
    leak, model = acceptance.checklist.leak, acceptance.checklist.perf.models[0]
    seconds = given.leak_seconds or leak.seconds
    samples = checklist.leak_loop(loop, model, acceptance.checklist, seconds)
    judged = memory.judge(samples, warmup_steps=leak.warmup_steps, bound_bytes=int(leak.bound_mib * memory.MIB),
                          min_samples=leak.min_samples)
    facts = ({"batch": leak.train_batch, "seqlen": leak.train_seqlen} if loop == "training" else
             {"batch": leak.decode_batch, "prompt": leak.decode_prompt, "new_tokens": leak.decode_tokens})
    record.detail, record.data = judged.detail(), judged.as_dict() | {"model": model.name, **facts}
    stage_data.setdefault("leak", {})[loop] = record.data
    assert judged.ok, record.detail
