"""The seed checklist's work on the installed causal-conv1d and mamba-ssm (tests/gpu/test_checklist.py asserts it):
the models, each sample inside batches against batch 1, `generate` against a full forward, throughput, decode
latency and peak memory, and the leak loops. ``DEVICE`` is CUDA; tests/integration's CPU harness points it at the CPU
(with upstream's pure-PyTorch paths standing in for the kernels)."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scripts.gpu.data import Checklist, Dtype, PerfModel, Tolerance
from tests.gpu import memory
from tests.gpu.numerics import Comparison, Tensor, compare, compare_tokens

R = TypeVar("R")
BATCH_MODELS = ("Mamba", "Mamba2", "MambaLMHeadModel Mamba1", "MambaLMHeadModel Mamba2")  # the small LMs' layer kinds
DECODE_MODELS = BATCH_MODELS[2:]
PERF_DTYPE = "bfloat16"
DEVICE = "cuda"


def release() -> None:
    """What one check allocated goes before the next, so that each peak and each leak run is its own."""
    gc.collect()
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def block(kind: str, checklist: Checklist, dtype: str) -> Any:
    import torch
    from mamba_ssm import Mamba, Mamba2

    cls, options = (Mamba, checklist.blocks.mamba) if kind == "Mamba" else (Mamba2, checklist.blocks.mamba2)
    torch.manual_seed(0)
    return cls(d_model=checklist.blocks.d_model, **options, device=DEVICE, dtype=_dtype(dtype))


def language_model(layer: str, *, d_model: int, n_layer: int, vocab_size: int, dtype: str) -> Any:
    """A MambaLMHeadModel with random weights (upstream's initialisation) and upstream's default configuration."""
    import torch
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    torch.manual_seed(0)
    config = MambaConfig(d_model=d_model, n_layer=n_layer, vocab_size=vocab_size, ssm_cfg={"layer": layer})
    return MambaLMHeadModel(config, device=DEVICE, dtype=_dtype(dtype))


def small_lm(model: str, checklist: Checklist, dtype: str) -> Any:
    """``model`` is "MambaLMHeadModel Mamba1" or "... Mamba2": the small LM of that layer kind."""
    lm = checklist.lm
    return language_model(model.rsplit(" ", 1)[1], d_model=lm.d_model, n_layer=lm.n_layer,
                          vocab_size=lm.vocab_size, dtype=dtype)


def tokens(batch: int, length: int, vocab_size: int, seed_value: int = 0) -> Tensor:
    import torch

    generator = torch.Generator(device=DEVICE).manual_seed(seed_value)
    return torch.randint(0, vocab_size, (batch, length), device=DEVICE, generator=generator)


# -- 2a: batch sizes --------------------------------------------------------------------------------------------


def batch(model: str, dtype: Dtype, checklist: Checklist) -> list[Comparison]:
    import torch

    samples, length = max(checklist.batch.sizes), checklist.batch.seqlen
    if model.startswith("MambaLMHeadModel"):
        network = small_lm(model, checklist, dtype)
        inputs = tokens(samples, length, checklist.lm.vocab_size)

        def forward(x: Tensor) -> Tensor:
            return network(x).logits
    else:
        forward = block(model, checklist, dtype)
        generator = torch.Generator(device=DEVICE).manual_seed(0)
        inputs = torch.randn(samples, length, checklist.blocks.d_model, device=DEVICE, dtype=_dtype(dtype),
                             generator=generator)
    return batch_comparisons(forward, inputs, checklist.batch.sizes, checklist.batch.tolerance[dtype])


def batch_comparisons(
    forward: Callable[[Tensor], Tensor], inputs: Tensor, sizes: Sequence[int], tolerance: Tolerance
) -> list[Comparison]:
    """Each sample's output computed inside batches of each size, against the same sample alone; size 1 runs again,
    so that run-to-run nondeterminism shows too. Every sample is covered at every size."""
    import torch

    with torch.inference_mode():
        alone = torch.cat([forward(sample) for sample in inputs.split(1)])
        return [compare(f"batch {size}", torch.cat([forward(chunk) for chunk in inputs.split(size)]), alone, tolerance)
                for size in sizes]


# -- 2b: decode against a full forward --------------------------------------------------------------------------


def decode(model: str, dtype: Dtype, checklist: Checklist) -> list[Comparison]:
    network, settings = small_lm(model, checklist, dtype), checklist.decode
    total, vocab = settings.prompt + settings.new_tokens, checklist.lm.vocab_size
    if dtype == "float32":
        return greedy_comparisons(network, tokens(settings.batch, settings.prompt, vocab), total)
    sequence = tokens(settings.batch, total, vocab, seed_value=1)
    return teacher_comparisons(network, sequence, settings.prompt, settings.tolerance[dtype])


def greedy_comparisons(network: Any, prompt: Tensor, total: int) -> list[Comparison]:
    """Greedy generation, with and without CUDA graphs: the tokens must be those a full forward over the same
    sequence picks at every generated position, and the two generations must be equal."""
    import torch

    length = prompt.shape[1]
    found, sequences = [], []
    for graphs in (False, True):
        sequence = network.generate(input_ids=prompt, max_length=total, cg=graphs)
        with torch.inference_mode():
            logits = network(sequence).logits[:, length - 1 : -1].float()
        generated, picked = sequence[:, length:], logits.argmax(dim=-1)
        # where they differ, how far the forward's own choice was ahead: a near-tie tells rounding from a wrong state
        margin = (logits.gather(-1, picked[..., None]) - logits.gather(-1, generated[..., None])).max().item()
        found.append(compare_tokens(f"greedy tokens {_graphs(graphs)} vs forward", generated, picked, margin=margin))
        sequences.append(sequence)
    return [*found, compare_tokens("greedy tokens with vs without CUDA graphs", sequences[1], sequences[0])]


def teacher_comparisons(network: Any, sequence: Tensor, prompt: int, tolerance: Tolerance) -> list[Comparison]:
    """The decode step's logits, fed the given tokens (upstream's tests/test_generation.py), against a full
    forward's logits at the same positions."""
    import torch

    with torch.inference_mode():
        reference = network(sequence).logits[:, prompt - 1 : -1]
    found = []
    for graphs in (False, True):
        out = network.generate(input_ids=sequence[:, :prompt], max_length=sequence.shape[1], cg=graphs,
                               teacher_outputs=sequence, output_scores=True, return_dict_in_generate=True)
        found.append(compare(f"logits {_graphs(graphs)}", torch.stack(out.scores, dim=1), reference, tolerance))
    return found


def _graphs(graphs: bool) -> str:
    return "with CUDA graphs" if graphs else "without CUDA graphs"


# -- 3: throughput, latency, peak memory ------------------------------------------------------------------------


def seconds(run: Callable[[], object], *, warmup: int, repeats: int) -> float:
    """The median wall time of ``run`` with the device synchronised around it."""
    import torch

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def peak_mib(run: Callable[[], R]) -> tuple[R, float]:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    result = run()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() / memory.MIB


def training_step(network: Any, batch: int, seqlen: int, vocab_size: int) -> tuple[Callable[[], None], list[float]]:
    """One next-token step on fresh tokens: forward, cross-entropy in fp32, backward, AdamW. Returns the step and
    the list holding its last loss."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-5)
    losses: list[float] = []
    steps = [0]

    def step() -> None:
        sequence = tokens(batch, seqlen + 1, vocab_size, seed_value=steps[0])
        steps[0] += 1
        logits = network(sequence[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), sequence[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[:] = [loss.detach()]  # only the last: a growing list would be a leak of our own

    return step, losses


def perf(model: PerfModel, checklist: Checklist) -> dict[str, Any]:
    """Training step, prefill and decode of one random-weight model; each phase's peak memory is its own (what the
    one before allocated is released first). ``finite`` says whether the loss and the logits were."""
    settings = checklist.perf
    network = language_model("Mamba1", d_model=model.d_model, n_layer=model.n_layer,
                             vocab_size=settings.vocab_size, dtype=PERF_DTYPE)
    data: dict[str, Any] = {"model": model.name, "d_model": model.d_model, "n_layer": model.n_layer,
                            "batch": model.batch, "seqlen": model.seqlen,
                            "params": sum(p.numel() for p in network.parameters())}
    for phase in (_train_phase, _prefill_phase, _decode_phase):
        data |= phase(network, model, checklist)
        release()
    return {key: round(value, 3) if isinstance(value, float) else value for key, value in data.items()}


def _train_phase(network: Any, model: PerfModel, checklist: Checklist) -> dict[str, Any]:
    step, losses = training_step(network, model.batch, model.seqlen, checklist.perf.vocab_size)
    took, peak = peak_mib(lambda: seconds(step, warmup=checklist.perf.warmup, repeats=checklist.perf.repeats))
    return {"train_step_ms": took * 1e3, "train_tokens_per_s": model.batch * model.seqlen / took,
            "train_peak_mib": peak, "loss": float(losses[-1]) if losses else math.nan}


def _prefill_phase(network: Any, model: PerfModel, checklist: Checklist) -> dict[str, Any]:
    """The forward that fills the decode state (generate's first step), over the whole batch of prompts."""
    import torch
    from mamba_ssm.utils.generation import InferenceParams

    prompt = tokens(model.batch, model.seqlen, checklist.perf.vocab_size)

    def prefill() -> Tensor:
        with torch.inference_mode():
            state = InferenceParams(max_seqlen=model.seqlen + 1, max_batch_size=model.batch)
            return network(prompt, inference_params=state, num_last_tokens=1).logits

    took, peak = peak_mib(lambda: seconds(prefill, warmup=checklist.perf.warmup, repeats=checklist.perf.repeats))
    return {"prefill_ms": took * 1e3, "prefill_tokens_per_s": model.batch * model.seqlen / took,
            "prefill_peak_mib": peak, "finite": bool(torch.isfinite(prefill()).all())}


def _decode_phase(network: Any, model: PerfModel, checklist: Checklist) -> dict[str, Any]:
    latency, peak = peak_mib(lambda: decode_latency(network, checklist))
    settings = checklist.perf
    return latency | {"decode_peak_mib": peak, "decode_batch": 1, "decode_prompt": settings.decode_prompt,
                      "decode_tokens": settings.decode_tokens}


def decode_latency(network: Any, checklist: Checklist) -> dict[str, float]:
    """Per-token decode latency at batch 1: generate's time for ``decode_tokens`` new tokens less its time for one
    (the prefill and the first token), over the tokens between; with CUDA graphs and without. The two are timed in
    pairs, back to back, and the median difference is taken, so that drift between them cancels."""
    settings = checklist.perf
    prompt = tokens(1, settings.decode_prompt, settings.vocab_size)
    full, one = settings.decode_prompt + settings.decode_tokens, settings.decode_prompt + 1
    found = {}
    for graphs, key in ((True, "decode_ms_per_token_cuda_graphs"), (False, "decode_ms_per_token_eager")):

        def generate(length: int, graphs: bool = graphs) -> object:
            return network.generate(input_ids=prompt, max_length=length, cg=graphs)

        generate(full)  # captures the graphs, at the longest length, and warms up
        generate(one)
        differences = [seconds(lambda: generate(full), warmup=0, repeats=1)
                       - seconds(lambda: generate(one), warmup=0, repeats=1) for _ in range(settings.repeats)]
        found[key] = statistics.median(differences) / (settings.decode_tokens - 1) * 1e3
    return found


def perf_detail(data: dict[str, Any]) -> str:
    return (
        f"{data['params'] / 1e6:.0f}M params; train {_rate(data['train_tokens_per_s'])} tok/s "
        f"(batch {data['batch']} x {data['seqlen']}, peak {gib(data['train_peak_mib'])}); prefill "
        f"{_rate(data['prefill_tokens_per_s'])} tok/s (peak {gib(data['prefill_peak_mib'])}); decode "
        f"{data['decode_ms_per_token_cuda_graphs']:.2f} ms/token with CUDA graphs, "
        f"{data['decode_ms_per_token_eager']:.2f} without (peak {gib(data['decode_peak_mib'])})"
    )


def _rate(value: float) -> str:
    return f"{value / 1e3:,.1f}k" if value < 1e6 else f"{value / 1e6:,.2f}M"


def gib(mib_value: float) -> str:
    return f"{mib_value / 1024:.2f} GiB"


# -- 4: the leak loops ------------------------------------------------------------------------------------------


def sample_loop(step: Callable[[], object], *, seconds: float, max_steps: int) -> list[memory.Sample]:
    """Run ``step`` until ``seconds`` have passed (or ``max_steps``), sampling allocated memory after each."""
    import torch

    samples, started = [], time.monotonic()
    for index in range(max_steps):
        step()
        torch.cuda.synchronize()
        elapsed = time.monotonic() - started
        samples.append(memory.Sample(step=index, seconds=elapsed, allocated=torch.cuda.memory_allocated(),
                                     reserved=torch.cuda.memory_reserved()))
        if elapsed >= seconds:
            break
    return samples


def leak_loop(loop: str, model: PerfModel, checklist: Checklist, seconds: float) -> list[memory.Sample]:
    """``loop`` "training": training steps on fresh tokens; "decoding": a new prompt every call, decoded with CUDA
    graphs as a server would."""
    leak, vocab = checklist.leak, checklist.perf.vocab_size
    network = language_model("Mamba1", d_model=model.d_model, n_layer=model.n_layer, vocab_size=vocab,
                             dtype=PERF_DTYPE)
    if loop == "training":
        step, _losses = training_step(network, leak.train_batch, leak.train_seqlen, vocab)
        return sample_loop(step, seconds=seconds, max_steps=leak.max_steps)
    calls = [0]

    def generate() -> None:
        calls[0] += 1
        prompt = tokens(leak.decode_batch, leak.decode_prompt, vocab, seed_value=calls[0])
        network.generate(input_ids=prompt, max_length=leak.decode_prompt + leak.decode_tokens, cg=True)

    return sample_loop(generate, seconds=seconds, max_steps=leak.max_steps)
