"""scripts/data/gpu_acceptance.toml as frozen pydantic models, loaded through builder.core.data.load_data: the stage
registry the driver runs (scripts/gpu/acceptance.py), and the cases, sizes and bounds tests/gpu is parametrised by."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated, Literal, Self, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PositiveInt, model_validator

from builder.core.data import load_data

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu_acceptance.toml"
DTYPES = ("float32", "float16", "bfloat16")
Dtype = Literal["float32", "float16", "bfloat16"]


def _identifier(name: str) -> str:
    if not (name.isidentifier() and name.isascii()):
        raise ValueError(f"{name!r} is not an identifier (it names a stage, a folder and a venv)")
    return name


Identifier = Annotated[str, AfterValidator(_identifier)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


V = TypeVar("V")


def _every_dtype(table: dict[str, V]) -> dict[str, V]:
    if not set(DTYPES) <= set(table):
        raise ValueError(f"must give each of {', '.join(DTYPES)}")
    return table


class Tolerance(Frozen):
    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)


class Expected(Frozen):
    passed: int
    skipped: int


class Upstream(Frozen):
    """causal-conv1d's own test file, run from its sdist against the installed wheel."""

    package: str
    tests: str
    quick_select: str  # --quick runs these (pytest -k); the counts are then not compared
    expected: dict[str, Expected]  # by upstream version: an unmodified upstream build's counts on the box


class CausalConv1d(Frozen):
    tolerance: Annotated[dict[str, Tolerance], AfterValidator(_every_dtype)]


class ScanCases(Frozen):
    batch: PositiveInt
    dim: PositiveInt
    dstate: PositiveInt
    dtypes: tuple[Dtype, ...]
    seqlens: tuple[PositiveInt, ...]
    groups: tuple[PositiveInt, ...]

    @model_validator(mode="after")
    def _groups_divide_dim(self) -> Self:
        if any(self.dim % groups for groups in self.groups):
            raise ValueError("dim must divide into every group count")
        return self


class InnerCases(Frozen):
    batch: PositiveInt
    dim: PositiveInt
    dstate: PositiveInt
    dt_rank: PositiveInt
    dtypes: tuple[Dtype, ...]
    seqlens: tuple[PositiveInt, ...]
    variable_bc: tuple[bool, ...]  # B and C from the input projection, or fixed parameters
    complex_dtypes: tuple[Dtype, ...]  # complex A as well, for these


class Mamba(Frozen):
    tolerance: Annotated[dict[str, Tolerance], AfterValidator(_every_dtype)]  # by dtype, and "weight"
    gradient_relative_error: Annotated[dict[str, float], AfterValidator(_every_dtype)]
    selective_scan: ScanCases
    inner: InnerCases


class ConvSize(Frozen):
    batch: PositiveInt
    dim: PositiveInt
    seqlen: PositiveInt
    width: PositiveInt
    dtype: Dtype


class ScanSize(Frozen):
    batch: PositiveInt
    dim: PositiveInt
    seqlen: PositiveInt
    dstate: PositiveInt
    dtype: Dtype


class Bench(Frozen):
    warmup: PositiveInt
    repeats: PositiveInt  # the median of these is reported
    reference_repeats: PositiveInt
    min_sample_ms: float = Field(gt=0)  # fast kernels are looped within one timed sample to span this
    causal_conv1d: tuple[ConvSize, ...]
    selective_scan: tuple[ScanSize, ...]


class Batch(Frozen):
    sizes: tuple[PositiveInt, ...]
    seqlen: PositiveInt
    tolerance: dict[Dtype, Tolerance]

    @model_validator(mode="after")
    def _holds_the_reference(self) -> Self:
        if 1 not in self.sizes:
            raise ValueError("sizes must hold 1 (the reference)")
        return self


class Blocks(Frozen):
    d_model: PositiveInt
    mamba: dict[str, int]  # Mamba's keyword arguments besides d_model
    mamba2: dict[str, int]


class SmallLM(Frozen):
    d_model: PositiveInt
    n_layer: PositiveInt
    vocab_size: PositiveInt


class Decode(Frozen):
    batch: PositiveInt
    prompt: PositiveInt
    new_tokens: PositiveInt
    tolerance: dict[Dtype, Tolerance]  # fp16 and bf16; fp32 compares tokens

    @model_validator(mode="after")
    def _no_float32(self) -> Self:
        if "float32" in self.tolerance:
            raise ValueError("float32 compares greedy tokens: it takes no tolerance")
        return self


class PerfModel(Frozen):
    name: str
    d_model: PositiveInt
    n_layer: PositiveInt
    batch: PositiveInt
    seqlen: PositiveInt


class Perf(Frozen):
    warmup: PositiveInt
    repeats: PositiveInt
    vocab_size: PositiveInt
    decode_prompt: PositiveInt
    decode_tokens: int = Field(ge=2)
    models: tuple[PerfModel, ...] = Field(min_length=1)  # the leak runs use the first


class Leak(Frozen):
    seconds: float = Field(gt=0)  # each of the two runs
    max_steps: PositiveInt
    warmup_steps: int = Field(ge=0)
    bound_mib: float = Field(ge=0)
    min_samples: int = Field(ge=2)  # fewer samples after the warm-up prove nothing
    train_batch: PositiveInt
    train_seqlen: PositiveInt
    decode_batch: PositiveInt
    decode_prompt: PositiveInt
    decode_tokens: PositiveInt


class Checklist(Frozen):
    dtypes: tuple[Dtype, ...]
    batch: Batch
    blocks: Blocks
    lm: SmallLM
    decode: Decode
    perf: Perf
    leak: Leak

    @model_validator(mode="after")
    def _a_tolerance_per_dtype(self) -> Self:
        if set(self.batch.tolerance) != set(self.dtypes) or set(self.decode.tolerance) != set(self.dtypes) - {
            "float32"
        }:
            raise ValueError("[checklist.batch.tolerance] must give exactly `dtypes`, [checklist.decode.tolerance] "
                             "those but float32")
        return self


class ArchVariant(Frozen):
    """One more causal-conv1d wheel of the label, built from its own profile into its own folder (issue #13)."""

    profile: str
    stage: Identifier
    doctor: Literal["ok", "ptx-jit", "no-kernel-image"]  # the verdict doctor must give before any kernel runs
    suite: bool  # the whole upstream suite must pass; else one kernel call must fail with "no kernel image"
    sass: tuple[str, ...]
    ptx: tuple[str, ...]


class Arch(Frozen):
    package: str
    nice: int = Field(ge=0, le=19)
    build_parallel: PositiveInt
    variants: dict[Identifier, ArchVariant]


class PtxSpeed(Frozen):
    module_loading: Literal["LAZY", "EAGER"]  # CUDA_MODULE_LOADING for the first-call runs
    first_call: ConvSize  # causal_conv1d_fn's sizes for it
    target: str  # the arch variant the issue asks about (PTX for compute 8.0)
    isa_control: str  # PTX for the GPU's own ISA: tells the JIT from the older target
    rounds: int = Field(ge=3)
    warmup: PositiveInt
    repeats: PositiveInt  # samples per case and round; their median is the round's time
    min_sample_ms: float = Field(gt=0)
    noise_floor: float = Field(ge=0)  # the least allowance: PTX may be this much slower than SASS
    max_noise: float  # an A/A control noisier than this gives no verdict
    timeout_s: float = Field(gt=0)  # one first-call process
    rounds_timeout_s: float = Field(gt=0)  # the workers' start, warm-up and every round


class AcceptanceData(Frozen):
    """scripts/data/gpu_acceptance.toml (its comments say what each value is for)."""

    label: str
    packages: tuple[str, ...]
    gpu_arch: str
    stages: tuple[Identifier, ...]
    setup_stages: tuple[str, ...]
    main_setup_stages: tuple[str, ...]  # setup stages of the main wheelhouse
    own_wheelhouse_stages: tuple[str, ...]  # stages that need none of them
    stage_seconds: dict[str, int]
    stage_packages: dict[str, tuple[str, ...]]
    arch: Arch
    ptx_speed: PtxSpeed
    upstream: Upstream
    causal_conv1d: CausalConv1d
    mamba: Mamba
    bench: Bench
    checklist: Checklist

    @model_validator(mode="after")
    def _names_agree(self) -> Self:
        problems = _registry_problems(self) + _arch_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def variant(self, name: str) -> ArchVariant:
        if name not in self.arch.variants:
            raise KeyError(f"no arch variant {name!r}; [arch.variants] has {', '.join(self.arch.variants)}")
        return self.arch.variants[name]


def _registry_problems(data: AcceptanceData) -> list[str]:
    problems = []
    if len(set(data.stages)) != len(data.stages):
        problems.append("`stages` names a stage twice")
    unknown = sorted({*data.setup_stages, *data.own_wheelhouse_stages, *data.stage_seconds, *data.stage_packages}
                     - set(data.stages))
    if unknown:
        problems.append(f"setup_stages, own_wheelhouse_stages, [stage_seconds] or [stage_packages] name stages not "
                        f"in `stages`: {', '.join(unknown)}")
    if not set(data.main_setup_stages) <= set(data.setup_stages):
        problems.append("main_setup_stages names a stage not in setup_stages")
    strangers = sorted({p for packages in data.stage_packages.values() for p in packages} - set(data.packages))
    if strangers:
        problems.append(f"[stage_packages] names packages not in `packages`: {', '.join(strangers)}")
    return problems


def _arch_problems(data: AcceptanceData) -> list[str]:
    variants = data.arch.variants
    problems = [f"arch.variants.{name}.stage {v.stage!r} is not in `stages`" for name, v in variants.items()
                if v.stage not in data.stages]
    if len({v.stage for v in variants.values()}) != len(variants):
        problems.append("arch.variants: two variants share a stage")
    for key, name in (("target", data.ptx_speed.target), ("isa_control", data.ptx_speed.isa_control)):
        variant = variants.get(name)
        if variant is None or variant.sass or not variant.ptx:
            problems.append(f"ptx_speed.{key} must name a PTX-only arch variant, not {name!r}")
    if not 0 <= data.ptx_speed.noise_floor < data.ptx_speed.max_noise:
        problems.append("ptx_speed: 0 <= noise_floor < max_noise")
    return problems


@cache
def load_acceptance(path: Path = DATA) -> AcceptanceData:
    return load_data(path, AcceptanceData, what="the GPU acceptance checks")
