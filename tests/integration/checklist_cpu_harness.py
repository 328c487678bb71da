"""Runs the seed checklist's Mamba-1 checks (tests/gpu/checklist.py) on the CPU, for tests on machines without a GPU.

Usage: python checklist_cpu_harness.py MAMBA_SDIST_ROOT CAUSAL_SDIST_ROOT OUT_JSON

mamba-ssm's own modules (Mamba, MambaLMHeadModel, generate) are loaded from the unpacked sdist; the compiled
kernels, which a CPU run cannot have, give way to the packages' pure-PyTorch paths: selective_scan_ref and
mamba_inner_ref for the scans, causal_conv1d_ref for the conv, upstream's torch fallbacks for the decode step, and
layer_norm_ref / rms_norm_ref for the Triton norms. CUDA graphs become plain decoding, and the CUDA memory counters
read the sizes of the tensors alive. What this proves is the checklist's plumbing around upstream's API (the
models, generate's arguments, the comparisons, the timings, the table, the leak loop) at small sizes; Mamba2's
kernels exist only in Triton and are left to the GPU run, as are the numbers themselves.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import json
import sys
import types
from pathlib import Path

from scripts.gpu.data import Checklist, SmallLM, load_acceptance  # the checkout's root is on PYTHONPATH
from scripts.gpu.tables import perf_table
from tests.integration.acceptance_cpu_harness import load_references


def _stub(name: str, **attributes: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def stub_hub_packages() -> None:
    """transformers and huggingface_hub, as far as mamba-ssm's imports reach (the machine's image has both)."""

    @dataclasses.dataclass
    class GenerateDecoderOnlyOutput:
        sequences: object = None
        scores: object = None

    _stub("transformers")
    _stub("transformers.generation", GenerateDecoderOnlyOutput=GenerateDecoderOnlyOutput, TextStreamer=object)
    _stub("transformers.utils", WEIGHTS_NAME="pytorch_model.bin", CONFIG_NAME="config.json")
    _stub("transformers.utils.hub", cached_file=None)
    _stub("huggingface_hub", PyTorchModelHubMixin=type("PyTorchModelHubMixin", (), {}))


def load_mamba(mamba_root: Path, causal_root: Path) -> None:
    """mamba_ssm's models over the references (the kernels' entry points rebound before the modules bind them)."""
    import torch

    load_references(mamba_root, causal_root)
    sys.modules.pop("mamba_ssm.ops.triton.layer_norm")  # the references' stub; the models need the real module
    layer_norm = importlib.import_module("mamba_ssm.ops.triton.layer_norm")

    def layer_norm_fn(x, weight, bias, residual=None, eps=1e-6, prenorm=False, residual_in_fp32=False,
                      is_rms_norm=False, **_):
        norm = layer_norm.rms_norm_ref if is_rms_norm else layer_norm.layer_norm_ref
        if residual is not None and residual_in_fp32:
            residual = residual.float()
        out = norm(x, weight, bias, residual=residual, eps=eps, prenorm=prenorm, upcast=True)
        if prenorm:  # the fused kernel returns the residual in fp32 where asked, and the normed output in x's dtype
            out, residual_out = out
            residual_out = residual_out.float() if residual_in_fp32 else residual_out.to(x.dtype)
            return out.to(x.dtype), residual_out
        return out.to(x.dtype)

    layer_norm.layer_norm_fn = layer_norm_fn
    layer_norm.rms_norm_fn = lambda x, weight, bias, **kw: layer_norm_fn(x, weight, bias, is_rms_norm=True, **kw)
    simple = importlib.import_module("mamba_ssm.modules.mamba_simple")
    simple.selective_state_update = None  # a Triton kernel: the decode step's torch fallback runs instead
    simple.causal_conv1d_update = None
    importlib.import_module("mamba_ssm.modules.block").layer_norm_fn = layer_norm_fn
    mixer = importlib.import_module("mamba_ssm.models.mixer_seq_simple")
    mixer.layer_norm_fn = layer_norm_fn
    generation = importlib.import_module("mamba_ssm.utils.generation")
    decode = generation.decode
    generation.decode = lambda *args, cg=False, **kwargs: decode(*args, cg=False, **kwargs)  # no graphs on a CPU
    package = sys.modules["mamba_ssm"]
    package.Mamba = simple.Mamba
    package.Mamba2 = None
    sys.modules["mamba_ssm.models.config_mamba"] = importlib.import_module("mamba_ssm.models.config_mamba")
    _cpu_memory_counters(torch)


def _cpu_memory_counters(torch) -> None:
    """torch.cuda's synchronisation and memory counters, answered on the CPU: the bytes of the tensors alive."""

    def allocated(*_args) -> int:  # no gc.collect(): what a cycle holds counts until it is collected, as on a GPU
        return sum(o.untyped_storage().nbytes() for o in gc.get_objects() if isinstance(o, torch.Tensor))

    peak = [0]

    def max_allocated(*_args) -> int:
        peak[0] = max(peak[0], allocated())
        return peak[0]

    torch.cuda.synchronize = lambda *_: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.reset_peak_memory_stats = lambda *_: peak.__setitem__(0, 0)
    torch.cuda.memory_allocated = allocated
    torch.cuda.memory_reserved = allocated
    torch.cuda.max_memory_allocated = max_allocated


def small(checklist: Checklist) -> Checklist:
    """The checklist's sizes shrunk to a CPU's: the same parts, models of a few layers, a leak run of seconds."""
    perf_models = tuple(m.model_copy(update={"d_model": 64, "n_layer": 2, "batch": 2, "seqlen": 32})
                        for m in checklist.perf.models)
    return checklist.model_copy(update={
        "batch": checklist.batch.model_copy(update={"sizes": (1, 2, 4), "seqlen": 16}),
        "blocks": checklist.blocks.model_copy(update={"d_model": 64}),
        "lm": SmallLM(d_model=64, n_layer=2, vocab_size=128),
        "decode": checklist.decode.model_copy(update={"prompt": 8, "new_tokens": 6}),
        "perf": checklist.perf.model_copy(update={"warmup": 1, "repeats": 2, "vocab_size": 128, "decode_prompt": 8,
                                                  "decode_tokens": 4, "models": perf_models}),
        "leak": checklist.leak.model_copy(update={"train_batch": 2, "train_seqlen": 16, "decode_prompt": 8,
                                                  "decode_tokens": 4, "warmup_steps": 2, "min_samples": 3,
                                                  "max_steps": 6}),  # ended by the step count
    })


def main(mamba_root: str, causal_root: str, out: str) -> int:
    stub_hub_packages()
    load_mamba(Path(mamba_root), Path(causal_root))
    from tests.gpu import checklist, memory
    from tests.gpu.numerics import verdict

    checklist.DEVICE = "cpu"
    data = small(load_acceptance().checklist)
    first, leak = data.perf.models[0], data.leak
    checks: dict[str, dict[str, object]] = {}
    for dtype in ("float32", "bfloat16"):
        for kind, model, run in (("batch", "Mamba", checklist.batch), ("decode", "MambaLMHeadModel Mamba1",
                                                                      checklist.decode)):
            comparisons = run(model, dtype, data)  # type: ignore[arg-type]
            checks[f"{kind} {model} {dtype}"] = {"ok": not verdict(comparisons)[0],
                                                 "comparisons": [c.as_dict() for c in comparisons]}
    comparisons = checklist.batch("MambaLMHeadModel Mamba1", "float32", data)
    checks["batch MambaLMHeadModel Mamba1 float32"] = {"ok": not verdict(comparisons)[0]}
    perf = checklist.perf(first, data)
    checks["performance"] = {"ok": perf.pop("finite"), "data": perf}
    for loop in ("training", "decoding"):
        judged = memory.judge(checklist.leak_loop(loop, first, data, 600.0), warmup_steps=leak.warmup_steps,
                              bound_bytes=int(leak.bound_mib * memory.MIB), min_samples=leak.min_samples)
        checks[f"leak {loop}"] = {"ok": judged.ok, "data": judged.as_dict()}
    Path(out).write_text(json.dumps({"checks": checks, "table": perf_table([perf])}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
