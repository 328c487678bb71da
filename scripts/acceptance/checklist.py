"""The seed checklist: what someone about to deploy Mamba on these wheels checks first, against the installed
causal-conv1d and mamba-ssm on CUDA. 1 the seed's functional test; 2 numerical consistency: each sample's output
inside batches of several sizes against batch 1, and `generate` (with and without CUDA graphs) against one full
forward; 3 throughput, decode latency and peak memory of random-weight bf16 models of released shapes; 4 a leak run.

The acceptance run's `checklist` stage and scripts/seed_checklist.py both run it. torch and the packages are imported
inside the functions that use the GPU; the names, the table and the judging are plain Python (tested without one).
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence

from scripts.acceptance import memory, numerics, seed
from scripts.acceptance.config import Checklist, PerfModel, Tolerance
from scripts.acceptance.summary import FAILED, PASSED, Check, guarded

PARTS = ("seed", "batch", "decode", "perf", "leak")
BATCH_MODELS = ("Mamba", "Mamba2", "MambaLMHeadModel Mamba1", "MambaLMHeadModel Mamba2")
DECODE_MODELS = ("MambaLMHeadModel Mamba1", "MambaLMHeadModel Mamba2")
PERF_DTYPE = "bfloat16"
DEVICE = "cuda"  # where the checks run: the CUDA device; tests/integration's CPU harness points it at the CPU


# -- names ------------------------------------------------------------------------------------------------------


def batch_name(model: str, dtype: str, sizes: Sequence[int]) -> str:
    return f"batch consistency {model} {dtype}: batches of {', '.join(map(str, sizes))} vs batch 1"


def decode_name(model: str, dtype: str) -> str:
    rule = "greedy tokens" if dtype == "float32" else "logits"
    return f"generate vs full forward {model} {dtype}: {rule}, with and without CUDA graphs"


def perf_name(model: PerfModel) -> str:
    return f"performance {model.name} {PERF_DTYPE} (d_model {model.d_model}, {model.n_layer} layers)"


def leak_name(loop: str, model: PerfModel) -> str:
    return f"leak run: {loop} {model.name} {PERF_DTYPE}"


def planned(checklist: Checklist, parts: Sequence[str] = PARTS) -> list[str]:
    """Every check's name, in run order: what a run without a GPU records as skipped."""
    names: list[str] = []
    if "seed" in parts:
        names += list(seed.NAMES)
    if "batch" in parts:
        names += [batch_name(m, d, checklist.batch_sizes) for m in BATCH_MODELS for d in checklist.dtypes]
    if "decode" in parts:
        names += [decode_name(m, d) for m in DECODE_MODELS for d in checklist.dtypes]
    if "perf" in parts:
        names += [perf_name(model) for model in checklist.perf.models]
    if "leak" in parts:
        names += [leak_name(loop, checklist.perf.models[0]) for loop in ("training", "decoding")]
    return names


def parse_parts(text: str) -> tuple[str, ...]:
    """``"seed,perf"`` -> the parts in run order; ValueError names an unknown one."""
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(PARTS))
    if unknown or not names:
        raise ValueError(
            f"unknown checklist part {', '.join(unknown) or '(none given)'}; the parts are {', '.join(PARTS)}"
        )
    return tuple(part for part in PARTS if part in names)


# -- the run ----------------------------------------------------------------------------------------------------


def run(
    checklist: Checklist,
    conv_tolerance: Tolerance,
    *,
    parts: Sequence[str] = PARTS,
    leak_seconds: float | None = None,
    report: Callable[[Check], Check] = lambda check: check,
) -> list[Check]:
    """Every check of the chosen parts, each guarded (an error fails that check, not the run), each reported as
    it ends."""
    cases: list[tuple[str, Callable[[], Check]]] = []
    if "seed" in parts:
        cases += [
            (seed.CONV_CHECK, lambda: seed.causal_conv1d_seed(conv_tolerance)),
            (seed.MAMBA_CHECK, seed.mamba_seed),
        ]
    if "batch" in parts:
        cases += [
            (batch_name(m, d, checklist.batch_sizes), lambda m=m, d=d: batch_check(m, d, checklist))
            for m in BATCH_MODELS
            for d in checklist.dtypes
        ]
    if "decode" in parts:
        cases += [
            (decode_name(m, d), lambda m=m, d=d: decode_check(m, d, checklist))
            for m in DECODE_MODELS
            for d in checklist.dtypes
        ]
    if "perf" in parts:
        cases += [
            (perf_name(model), lambda model=model: perf_check(model, checklist)) for model in checklist.perf.models
        ]
    if "leak" in parts:
        seconds = checklist.leak.seconds if leak_seconds is None else leak_seconds
        first = checklist.perf.models[0]
        cases += [
            (leak_name("training", first), lambda: leak_training_check(first, checklist, seconds)),
            (leak_name("decoding", first), lambda: leak_decoding_check(first, checklist, seconds)),
        ]
    return [report(_timed_check(name, case)) for name, case in cases]


def _timed_check(name: str, case: Callable[[], Check]) -> Check:
    started = time.monotonic()
    check = guarded(name, case)
    _release()
    return Check(
        name=check.name,
        status=check.status,
        detail=check.detail,
        data={**check.data, "check_seconds": round(time.monotonic() - started, 2)},
    )


def _release() -> None:
    """What one check allocated goes before the next, so that each peak and each leak run is its own."""
    try:
        import torch
    except ImportError:
        return
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# -- models -----------------------------------------------------------------------------------------------------


def _dtype(name: str):
    import torch

    return getattr(torch, name)


def block(kind: str, checklist: Checklist, dtype: str):
    import torch
    from mamba_ssm import Mamba, Mamba2

    cls, options = (Mamba, checklist.mamba) if kind == "Mamba" else (Mamba2, checklist.mamba2)
    torch.manual_seed(0)
    return cls(d_model=checklist.d_model, **options, device=DEVICE, dtype=_dtype(dtype))


def language_model(layer: str, *, d_model: int, n_layer: int, vocab_size: int, dtype: str):
    """A MambaLMHeadModel with random weights (upstream's initialisation) and upstream's default configuration."""
    import torch
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    torch.manual_seed(0)
    config = MambaConfig(d_model=d_model, n_layer=n_layer, vocab_size=vocab_size, ssm_cfg={"layer": layer})
    return MambaLMHeadModel(config, device=DEVICE, dtype=_dtype(dtype))


def _small_lm(model: str, checklist: Checklist, dtype: str):
    return language_model(model.rsplit(" ", 1)[1], **checklist.lm, dtype=dtype)


def _tokens(batch: int, length: int, vocab_size: int, seed_value: int = 0):
    import torch

    generator = torch.Generator(device=DEVICE).manual_seed(seed_value)
    return torch.randint(0, vocab_size, (batch, length), device=DEVICE, generator=generator)


# -- 2a: batch sizes --------------------------------------------------------------------------------------------


def batch_check(model: str, dtype: str, checklist: Checklist) -> Check:
    import torch

    samples, length = max(checklist.batch_sizes), checklist.batch_seqlen
    if model.startswith("MambaLMHeadModel"):
        network = _small_lm(model, checklist, dtype)
        inputs = _tokens(samples, length, checklist.lm["vocab_size"])

        def forward(x):
            return network(x).logits
    else:
        network = block(model, checklist, dtype)
        generator = torch.Generator(device=DEVICE).manual_seed(0)
        inputs = torch.randn(
            samples, length, checklist.d_model, device=DEVICE, dtype=_dtype(dtype), generator=generator
        )
        forward = network
    comparisons = batch_comparisons(forward, inputs, checklist.batch_sizes, checklist.batch_tolerance[dtype])
    return numerics.as_check(batch_name(model, dtype, checklist.batch_sizes), comparisons)


def batch_comparisons(
    forward: Callable, inputs, sizes: Sequence[int], tolerance: Tolerance
) -> list[numerics.Comparison]:
    """Each sample's output computed inside batches of each size, against the same sample alone; size 1 runs again,
    so that run-to-run nondeterminism shows too. Every sample is covered at every size."""
    import torch

    with torch.inference_mode():
        alone = torch.cat([forward(sample) for sample in inputs.split(1)])
        comparisons = []
        for size in sizes:
            batched = torch.cat([forward(chunk) for chunk in inputs.split(size)])
            comparisons.append(numerics.compare(f"batch {size}", batched, alone, tolerance))
    return comparisons


# -- 2b: decode against a full forward --------------------------------------------------------------------------


def decode_check(model: str, dtype: str, checklist: Checklist) -> Check:
    network = _small_lm(model, checklist, dtype)
    batch, prompt, total = (
        checklist.decode_batch,
        checklist.decode_prompt,
        checklist.decode_prompt + checklist.decode_new_tokens,
    )
    if dtype == "float32":
        comparisons = greedy_comparisons(network, _tokens(batch, prompt, checklist.lm["vocab_size"]), total)
    else:
        tokens = _tokens(batch, total, checklist.lm["vocab_size"], seed_value=1)
        comparisons = teacher_comparisons(network, tokens, prompt, checklist.decode_tolerance[dtype])
    return numerics.as_check(decode_name(model, dtype), comparisons)


def greedy_comparisons(network, prompt, total: int) -> list[numerics.Comparison]:
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
        name = f"greedy tokens {_graphs(graphs)} vs forward"
        found.append(_token_comparison(name, generated, picked, margin=margin))
        sequences.append(sequence)
    found.append(_token_comparison("greedy tokens with vs without CUDA graphs", sequences[1], sequences[0]))
    return found


def teacher_comparisons(network, tokens, prompt: int, tolerance: Tolerance) -> list[numerics.Comparison]:
    """The decode step's logits, fed the given tokens (upstream's tests/test_generation.py), against a full
    forward's logits at the same positions."""
    import torch

    with torch.inference_mode():
        reference = network(tokens).logits[:, prompt - 1 : -1]
    found = []
    for graphs in (False, True):
        out = network.generate(
            input_ids=tokens[:, :prompt],
            max_length=tokens.shape[1],
            cg=graphs,
            teacher_outputs=tokens,
            output_scores=True,
            return_dict_in_generate=True,
        )
        found.append(
            numerics.compare(f"logits {_graphs(graphs)}", torch.stack(out.scores, dim=1), reference, tolerance)
        )
    return found


def _graphs(graphs: bool) -> str:
    return "with CUDA graphs" if graphs else "without CUDA graphs"


def _token_comparison(tensor: str, actual, expected, *, margin: float | None = None) -> numerics.Comparison:
    """Tokens must be equal; ``margin`` (the reference's logit lead where they differ) goes into the report."""
    mismatches = int((actual != expected).sum()) if actual.shape == expected.shape else actual.numel()
    lead = (
        f"; the forward's largest logit lead at a difference {margin:.3g}" if mismatches and margin is not None else ""
    )
    return numerics.Comparison(
        tensor=tensor,
        rule="equal",
        max_abs=float(mismatches),
        worst=float(mismatches),
        bound=f"equal ({mismatches} of {expected.numel()} differ{lead})",
        ok=mismatches == 0,
    )


# -- 3: throughput, latency, peak memory ------------------------------------------------------------------------


def _seconds(run: Callable[[], object], *, warmup: int, repeats: int) -> float:
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


def _peak_mib(run: Callable[[], object]) -> tuple[object, float]:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    result = run()
    torch.cuda.synchronize()
    return result, torch.cuda.max_memory_allocated() / memory.MIB


def _training_step(network, batch: int, seqlen: int, vocab_size: int):
    """One next-token step on fresh tokens: forward, cross-entropy in fp32, backward, AdamW. Returns the step, a
    function giving the last loss, and the optimizer (whose state the caller may drop)."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.AdamW(network.parameters(), lr=1e-5)
    losses: list[float] = []
    step_index = [0]

    def step() -> None:
        tokens = _tokens(batch, seqlen + 1, vocab_size, seed_value=step_index[0])
        step_index[0] += 1
        logits = network(tokens[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses[:] = [loss.detach()]  # only the last: a growing list would be a leak of our own

    def last_loss() -> float:
        return float(losses[-1]) if losses else math.nan

    return step, last_loss, optimizer


def perf_check(model: PerfModel, checklist: Checklist) -> Check:
    """Training step, prefill and decode of one random-weight model; each phase's peak memory is its own (what the
    one before allocated is released first)."""
    perf = checklist.perf
    network = language_model(
        "Mamba1", d_model=model.d_model, n_layer=model.n_layer, vocab_size=perf.vocab_size, dtype=PERF_DTYPE
    )
    data: dict = {
        "model": model.name,
        "d_model": model.d_model,
        "n_layer": model.n_layer,
        "batch": model.batch,
        "seqlen": model.seqlen,
        "params": sum(p.numel() for p in network.parameters()),
    }
    for phase in (_train_phase, _prefill_phase, _decode_phase):
        data |= phase(network, model, perf)
        _release()
    data = {key: round(value, 3) if isinstance(value, float) else value for key, value in data.items()}
    numbers = [value for value in data.values() if isinstance(value, float | int) and not isinstance(value, bool)]
    ok = data.pop("finite") and all(math.isfinite(value) and value >= 0 for value in numbers)
    detail = perf_detail(data) + ("" if ok else "; NOT all finite and non-negative (the loss, the logits or a timing)")
    return Check(name=perf_name(model), status=PASSED if ok else FAILED, detail=detail, data=data)


def _train_phase(network, model: PerfModel, perf) -> dict:
    step, last_loss, _optimizer = _training_step(network, model.batch, model.seqlen, perf.vocab_size)
    seconds, peak = _peak_mib(lambda: _seconds(step, warmup=perf.warmup, repeats=perf.repeats))
    return {
        "train_step_ms": seconds * 1e3,
        "train_tokens_per_s": model.batch * model.seqlen / seconds,
        "train_peak_mib": peak,
        "loss": last_loss(),
    }


def _prefill_phase(network, model: PerfModel, perf) -> dict:
    """The forward that fills the decode state (generate's first step), over the whole batch of prompts."""
    import torch
    from mamba_ssm.utils.generation import InferenceParams

    prompt = _tokens(model.batch, model.seqlen, perf.vocab_size)

    def prefill():
        with torch.inference_mode():
            state = InferenceParams(max_seqlen=model.seqlen + 1, max_batch_size=model.batch)
            return network(prompt, inference_params=state, num_last_tokens=1).logits

    seconds, peak = _peak_mib(lambda: _seconds(prefill, warmup=perf.warmup, repeats=perf.repeats))
    return {
        "prefill_ms": seconds * 1e3,
        "prefill_tokens_per_s": model.batch * model.seqlen / seconds,
        "prefill_peak_mib": peak,
        "finite": bool(torch.isfinite(prefill()).all()),
    }


def _decode_phase(network, model: PerfModel, perf) -> dict:
    latency, peak = _peak_mib(lambda: decode_latency(network, perf))
    return latency | {
        "decode_peak_mib": peak,
        "decode_batch": 1,
        "decode_prompt": perf.decode_prompt,
        "decode_tokens": perf.decode_tokens,
    }


def decode_latency(network, perf) -> dict:
    """Per-token decode latency at batch 1: generate's time for ``decode_tokens`` new tokens less its time for one
    (the prefill and the first token), over the tokens between; with CUDA graphs and without. The two are timed in
    pairs, back to back, and the median difference is taken, so that drift between them cancels."""
    prompt = _tokens(1, perf.decode_prompt, perf.vocab_size)
    full, one = perf.decode_prompt + perf.decode_tokens, perf.decode_prompt + 1
    found = {}
    for graphs, key in ((True, "decode_ms_per_token_cuda_graphs"), (False, "decode_ms_per_token_eager")):

        def generate(length: int, graphs: bool = graphs) -> object:
            return network.generate(input_ids=prompt, max_length=length, cg=graphs)

        generate(full)  # captures the graphs, at the longest length, and warms up
        generate(one)
        differences = [
            _seconds(lambda: generate(full), warmup=0, repeats=1) - _seconds(lambda: generate(one), warmup=0, repeats=1)
            for _ in range(perf.repeats)
        ]
        found[key] = statistics.median(differences) / (perf.decode_tokens - 1) * 1e3
    return found


def perf_detail(data: dict) -> str:
    return (
        f"{data['params'] / 1e6:.0f}M params; train {_rate(data['train_tokens_per_s'])} tok/s "
        f"(batch {data['batch']} x {data['seqlen']}, peak {_gib(data['train_peak_mib'])}); prefill "
        f"{_rate(data['prefill_tokens_per_s'])} tok/s (peak {_gib(data['prefill_peak_mib'])}); decode "
        f"{data['decode_ms_per_token_cuda_graphs']:.2f} ms/token with CUDA graphs, "
        f"{data['decode_ms_per_token_eager']:.2f} without (peak {_gib(data['decode_peak_mib'])})"
    )


def _rate(value: float) -> str:
    return f"{value / 1e3:,.1f}k" if value < 1e6 else f"{value / 1e6:,.2f}M"


def _gib(mib_value: float) -> str:
    return f"{mib_value / 1024:.2f} GiB"


# -- 4: the leak run --------------------------------------------------------------------------------------------


def sample_loop(step: Callable[[], object], *, seconds: float, max_steps: int) -> list[memory.Sample]:
    """Run ``step`` until ``seconds`` have passed (or ``max_steps``), sampling allocated memory after each."""
    import torch

    samples, started = [], time.monotonic()
    for index in range(max_steps):
        step()
        torch.cuda.synchronize()
        elapsed = time.monotonic() - started
        samples.append(
            memory.Sample(
                step=index,
                seconds=elapsed,
                allocated=torch.cuda.memory_allocated(),
                reserved=torch.cuda.memory_reserved(),
            )
        )
        if elapsed >= seconds:
            break
    return samples


def _leak_check(name: str, samples: list[memory.Sample], checklist: Checklist, **facts: object) -> Check:
    leak = checklist.leak
    verdict = memory.judge(
        samples,
        warmup_steps=leak.warmup_steps,
        bound_bytes=int(leak.bound_mib * memory.MIB),
        min_samples=leak.min_samples,
    )
    return Check(
        name=name, status=PASSED if verdict.ok else FAILED, detail=verdict.detail(), data=verdict.as_dict() | facts
    )


def leak_training_check(model: PerfModel, checklist: Checklist, seconds: float) -> Check:
    leak = checklist.leak
    network = language_model(
        "Mamba1", d_model=model.d_model, n_layer=model.n_layer, vocab_size=checklist.perf.vocab_size, dtype=PERF_DTYPE
    )
    step, _last_loss, _optimizer = _training_step(
        network, leak.train_batch, leak.train_seqlen, checklist.perf.vocab_size
    )
    samples = sample_loop(step, seconds=seconds, max_steps=leak.max_steps)
    return _leak_check(
        leak_name("training", model), samples, checklist, batch=leak.train_batch, seqlen=leak.train_seqlen
    )


def leak_decoding_check(model: PerfModel, checklist: Checklist, seconds: float) -> Check:
    leak = checklist.leak
    network = language_model(
        "Mamba1", d_model=model.d_model, n_layer=model.n_layer, vocab_size=checklist.perf.vocab_size, dtype=PERF_DTYPE
    )
    total = leak.decode_prompt + leak.decode_tokens
    counter = [0]

    def step() -> None:  # a new prompt every call, decoded with CUDA graphs as a server would
        counter[0] += 1
        prompt = _tokens(leak.decode_batch, leak.decode_prompt, checklist.perf.vocab_size, seed_value=counter[0])
        network.generate(input_ids=prompt, max_length=total, cg=True)

    samples = sample_loop(step, seconds=seconds, max_steps=leak.max_steps)
    return _leak_check(
        leak_name("decoding", model),
        samples,
        checklist,
        batch=leak.decode_batch,
        prompt=leak.decode_prompt,
        new_tokens=leak.decode_tokens,
    )


# -- the report -------------------------------------------------------------------------------------------------

PERF_COLUMNS = (
    ("model", lambda d: d["model"]),
    ("params", lambda d: f"{d['params'] / 1e6:.0f}M"),
    ("train tok/s", lambda d: f"{d['train_tokens_per_s']:,.0f}"),
    ("prefill tok/s", lambda d: f"{d['prefill_tokens_per_s']:,.0f}"),
    ("decode ms/token (graphs)", lambda d: f"{d['decode_ms_per_token_cuda_graphs']:.2f}"),
    ("decode ms/token (eager)", lambda d: f"{d['decode_ms_per_token_eager']:.2f}"),
    ("peak train", lambda d: _gib(d["train_peak_mib"])),
    ("peak prefill", lambda d: _gib(d["prefill_peak_mib"])),
    ("peak decode", lambda d: _gib(d["decode_peak_mib"])),
)


def perf_table(rows: Sequence[dict]) -> list[str]:
    """The performance figures as a Markdown table (pasted into docs/gpu-acceptance.md as it is)."""
    if not rows:
        return []
    cells = [[header for header, _ in PERF_COLUMNS]] + [[cell(row) for _, cell in PERF_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(PERF_COLUMNS))]
    lines = ["| " + " | ".join(text.ljust(width) for text, width in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return lines


def leak_lines(checks: Sequence[dict]) -> list[str]:
    """One line per leak run: memory at the start (after warm-up) and the end, its peak, and the verdict."""
    return [
        f"{check['name']}: {'ok' if check['status'] == PASSED else 'FAILED'}; {check['detail']}"
        for check in checks
        if check["name"].startswith("leak run:") and "data" in check and "start_mib" in check["data"]
    ]


def report_lines(checks: Sequence[dict]) -> list[str]:
    """The table and the leak lines from a stage's checks (as the summary JSON holds them)."""
    rows = [
        check["data"]
        for check in checks
        if check["name"].startswith("performance ")
        and check["status"] != FAILED
        and "train_tokens_per_s" in check.get("data", {})
    ]
    failed = [check for check in checks if check["status"] == FAILED]
    lines = perf_table(rows) + leak_lines(checks)
    return lines + ([f"{len(failed)} of {len(checks)} checklist checks FAILED"] if failed else [])


def summary_data(checks: Sequence[Check]) -> dict:
    """What the stage keeps beside its checks: the performance rows and the leak runs, by model."""
    as_dicts = [check.as_dict() for check in checks]
    return {
        "performance": [
            c["data"]
            for c in as_dicts
            if c["name"].startswith("performance ") and "train_tokens_per_s" in c.get("data", {})
        ],
        "leak": {
            c["name"]: c["data"]
            for c in as_dicts
            if c["name"].startswith("leak run:") and "start_mib" in c.get("data", {})
        },
    }
