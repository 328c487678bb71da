"""scripts/data/gpu_acceptance.toml as frozen dataclasses, checked when loaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder.core import errors
from builder.core.files import read_toml

DATA = Path(__file__).resolve().parent.parent / "data" / "gpu_acceptance.toml"
DTYPES = ("float32", "float16", "bfloat16")


class ConfigError(errors.ConfigError):
    """The data file is missing a key or holds a value of the wrong kind; the message names the file and key."""


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    rtol: float
    atol: float

    def scaled(self, rtol: float = 1.0, atol: float = 1.0) -> Tolerance:
        return Tolerance(rtol=self.rtol * rtol, atol=self.atol * atol)

    def widened(self, other: Tolerance) -> Tolerance:
        return Tolerance(rtol=max(self.rtol, other.rtol), atol=max(self.atol, other.atol))


@dataclass(frozen=True, kw_only=True)
class Expected:
    passed: int
    skipped: int


@dataclass(frozen=True, kw_only=True)
class Upstream:
    package: str
    tests: str
    quick_select: str
    expected: dict[str, Expected]  # by upstream version


@dataclass(frozen=True, kw_only=True)
class ScanCases:
    batch: int
    dim: int
    dstate: int
    dtypes: tuple[str, ...]
    seqlens: tuple[int, ...]
    groups: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class InnerCases:
    batch: int
    dim: int
    dstate: int
    dt_rank: int
    dtypes: tuple[str, ...]
    seqlens: tuple[int, ...]
    variable_bc: tuple[bool, ...]
    complex_dtypes: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Bench:
    warmup: int
    repeats: int
    reference_repeats: int
    min_sample_ms: float
    causal_conv1d: tuple[dict, ...]
    selective_scan: tuple[dict, ...]


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One entry of the stage registry: the shell runs ``stage_<name>``."""

    name: str
    setup: bool  # runs again in every command that runs a later stage; a failure ends the command
    seconds: int  # needed before the deadline to be started
    packages: tuple[str, ...] = ()  # the main wheelhouse's packages it tests: without one of them it is skipped


@dataclass(frozen=True, kw_only=True)
class PerfModel:
    name: str
    d_model: int
    n_layer: int
    batch: int
    seqlen: int


@dataclass(frozen=True, kw_only=True)
class Perf:
    warmup: int
    repeats: int
    vocab_size: int
    decode_prompt: int
    decode_tokens: int
    models: tuple[PerfModel, ...]


@dataclass(frozen=True, kw_only=True)
class Leak:
    seconds: float  # each of the two runs
    max_steps: int
    warmup_steps: int
    bound_mib: float
    min_samples: int  # fewer samples after the warm-up prove nothing
    train_batch: int
    train_seqlen: int
    decode_batch: int
    decode_prompt: int
    decode_tokens: int


@dataclass(frozen=True, kw_only=True)
class Checklist:
    dtypes: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    batch_seqlen: int
    batch_tolerance: dict[str, Tolerance]
    d_model: int  # the blocks'
    mamba: dict  # Mamba's keyword arguments besides d_model
    mamba2: dict
    lm: dict  # the small MambaLMHeadModel: d_model, n_layer, vocab_size
    decode_batch: int
    decode_prompt: int
    decode_new_tokens: int
    decode_tolerance: dict[str, Tolerance]  # fp16 and bf16; fp32 compares tokens
    perf: Perf
    leak: Leak


@dataclass(frozen=True, kw_only=True)
class ArchVariant:
    """One more causal-conv1d wheel of the label, built from its own profile into its own folder (issue #13)."""

    name: str  # its folder under the work folder's arch/, and its venv's suffix
    profile: str
    stage: str
    doctor: str  # the verdict code doctor must give first: ok, ptx-jit or no-kernel-image
    suite: bool  # the whole upstream suite must pass; else one kernel call must fail with "no kernel image"
    sass: tuple[str, ...]
    ptx: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Arch:
    package: str
    nice: int
    build_parallel: int
    variants: tuple[ArchVariant, ...]

    def variant(self, name: str) -> ArchVariant:
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise ConfigError(f"no arch variant {name!r}; [arch.variants] has {', '.join(v.name for v in self.variants)}")


@dataclass(frozen=True, kw_only=True)
class PtxSpeed:
    module_loading: str  # CUDA_MODULE_LOADING for the first-call runs
    first_call: dict  # causal_conv1d_fn's sizes for it
    noise_floor: float  # the least allowance: PTX may be this much slower than SASS, or the A/A noise if more
    max_noise: float  # an A/A control noisier than this gives no verdict (the stage fails)
    timeout_s: float  # one first-call process; the interleaved rounds get rounds_timeout_s in all
    rounds_timeout_s: float
    rounds: int  # each round times every case in every arm's process, in turn
    warmup: int  # calls of each case before its plan is made, once per process
    repeats: int  # samples per case and round; their median is the round's time
    min_sample_ms: float  # fast calls are looped within one sample to span this
    target: str  # the arch variant the issue asks about (PTX for compute 8.0)
    isa_control: str  # the arch variant with PTX for the GPU's own ISA: tells the JIT from the older target


@dataclass(frozen=True, kw_only=True)
class Config:
    label: str
    packages: tuple[str, ...]
    stages: tuple[str, ...]
    gpu_arch: str  # the box GPU's compute capability, as doctor must read it
    registry: tuple[Stage, ...]
    upstream: Upstream
    conv_tolerance: dict[str, Tolerance]  # causal-conv1d's, by dtype name
    tolerance: dict[str, Tolerance]  # mamba-ssm's, by dtype name, plus "weight"
    gradient_error: dict[str, float]  # mamba-ssm's gradients: normwise relative error bound, by dtype name
    scan: ScanCases
    inner: InnerCases
    bench: Bench
    checklist: Checklist
    arch: Arch
    ptx_speed: PtxSpeed

    def stage(self, name: str) -> Stage:
        return next(stage for stage in self.registry if stage.name == name)


def load_config(path: Path = DATA) -> Config:
    data = read_toml(path, what="the acceptance checks", error=ConfigError)
    try:
        config = _config(data)
    except KeyError as error:
        raise ConfigError(f"{path}: missing key {error}") from None
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{path}: {error}") from None
    _check(config, path)
    return config


def _config(data: dict) -> Config:
    upstream, mamba, bench = data["upstream"], data["mamba"], data["bench"]
    ptx = data["ptx_speed"]
    scan, inner = mamba["selective_scan"], mamba["inner"]
    return Config(
        label=str(data["label"]),
        packages=tuple(data["packages"]),
        stages=tuple(data["stages"]),
        gpu_arch=str(data["gpu_arch"]),
        registry=_registry(data),
        upstream=Upstream(
            package=upstream["package"],
            tests=upstream["tests"],
            quick_select=upstream["quick_select"],
            expected={
                version: Expected(passed=int(v["passed"]), skipped=int(v["skipped"]))
                for version, v in upstream["expected"].items()
            },
        ),
        conv_tolerance=_tolerances(data["causal_conv1d"]["tolerance"]),
        tolerance=_tolerances(mamba["tolerance"]),
        gradient_error={name: float(bound) for name, bound in mamba["gradient_relative_error"].items()},
        scan=ScanCases(
            batch=int(scan["batch"]),
            dim=int(scan["dim"]),
            dstate=int(scan["dstate"]),
            dtypes=tuple(scan["dtypes"]),
            seqlens=tuple(map(int, scan["seqlens"])),
            groups=tuple(map(int, scan["groups"])),
        ),
        inner=InnerCases(
            batch=int(inner["batch"]),
            dim=int(inner["dim"]),
            dstate=int(inner["dstate"]),
            dt_rank=int(inner["dt_rank"]),
            dtypes=tuple(inner["dtypes"]),
            seqlens=tuple(map(int, inner["seqlens"])),
            variable_bc=tuple(map(bool, inner["variable_bc"])),
            complex_dtypes=tuple(inner["complex_dtypes"]),
        ),
        bench=Bench(
            warmup=int(bench["warmup"]),
            repeats=int(bench["repeats"]),
            reference_repeats=int(bench["reference_repeats"]),
            min_sample_ms=float(bench["min_sample_ms"]),
            causal_conv1d=tuple(bench["causal_conv1d"]),
            selective_scan=tuple(bench["selective_scan"]),
        ),
        checklist=_checklist(data["checklist"]),
        arch=_arch(data["arch"]),
        ptx_speed=PtxSpeed(
            module_loading=str(ptx["module_loading"]),
            first_call=dict(ptx["first_call"]),
            noise_floor=float(ptx["noise_floor"]),
            max_noise=float(ptx["max_noise"]),
            timeout_s=float(ptx["timeout_s"]),
            rounds_timeout_s=float(ptx["rounds_timeout_s"]),
            rounds=int(ptx["rounds"]),
            warmup=int(ptx["warmup"]),
            repeats=int(ptx["repeats"]),
            min_sample_ms=float(ptx["min_sample_ms"]),
            target=str(ptx["target"]),
            isa_control=str(ptx["isa_control"]),
        ),
    )


def _arch(table: dict) -> Arch:
    variants = tuple(
        ArchVariant(
            name=name,
            profile=str(v["profile"]),
            stage=str(v["stage"]),
            doctor=str(v["doctor"]),
            suite=bool(v["suite"]),
            sass=tuple(map(str, v["sass"])),
            ptx=tuple(map(str, v["ptx"])),
        )
        for name, v in table["variants"].items()
    )
    return Arch(
        package=str(table["package"]), nice=int(table["nice"]), build_parallel=int(table["build_parallel"]),
        variants=variants,
    )


def _registry(data: dict) -> tuple[Stage, ...]:
    setup, seconds = set(data["setup_stages"]), data.get("stage_seconds", {})
    tested = data.get("stage_packages", {})
    unknown = sorted((setup | set(seconds) | set(tested)) - set(data["stages"]))
    if unknown:
        raise ValueError(
            f"setup_stages, [stage_seconds] or [stage_packages] name stages not in `stages`: {', '.join(unknown)}"
        )
    strangers = sorted({p for packages in tested.values() for p in packages} - set(data["packages"]))
    if strangers:
        raise ValueError(f"[stage_packages] names packages not in `packages`: {', '.join(strangers)}")
    return tuple(
        Stage(name=name, setup=name in setup, seconds=int(seconds.get(name, 0)), packages=tuple(tested.get(name, ())))
        for name in data["stages"]
    )


def _checklist(table: dict) -> Checklist:
    batch, blocks, decode, perf, leak = (table[key] for key in ("batch", "blocks", "decode", "perf", "leak"))
    return Checklist(
        dtypes=tuple(table["dtypes"]),
        batch_sizes=tuple(map(int, batch["sizes"])),
        batch_seqlen=int(batch["seqlen"]),
        batch_tolerance=_tolerances(batch["tolerance"]),
        d_model=int(blocks["d_model"]),
        mamba=dict(blocks["mamba"]),
        mamba2=dict(blocks["mamba2"]),
        lm={key: int(table["lm"][key]) for key in ("d_model", "n_layer", "vocab_size")},
        decode_batch=int(decode["batch"]),
        decode_prompt=int(decode["prompt"]),
        decode_new_tokens=int(decode["new_tokens"]),
        decode_tolerance=_tolerances(decode["tolerance"]),
        perf=Perf(
            warmup=int(perf["warmup"]),
            repeats=int(perf["repeats"]),
            vocab_size=int(perf["vocab_size"]),
            decode_prompt=int(perf["decode_prompt"]),
            decode_tokens=int(perf["decode_tokens"]),
            models=tuple(
                PerfModel(name=str(m["name"]), **{k: int(m[k]) for k in ("d_model", "n_layer", "batch", "seqlen")})
                for m in perf["models"]
            ),
        ),
        leak=Leak(
            seconds=float(leak["seconds"]),
            bound_mib=float(leak["bound_mib"]),
            **{
                key: int(leak[key])
                for key in (
                    "max_steps", "warmup_steps", "min_samples", "train_batch", "train_seqlen",
                    "decode_batch", "decode_prompt", "decode_tokens",
                )
            },
        ),
    )


def _tolerances(table: dict) -> dict[str, Tolerance]:
    return {name: Tolerance(rtol=float(pair["rtol"]), atol=float(pair["atol"])) for name, pair in table.items()}


def _check(config: Config, path: Path) -> None:
    """Invariants a typo would break silently: every dtype has a tolerance, sizes are usable, stages are unique."""
    problems = []
    for dtype in {*config.scan.dtypes, *config.inner.dtypes, *config.inner.complex_dtypes}:
        if dtype not in DTYPES or dtype not in config.tolerance:
            problems.append(f"dtype {dtype!r} is not one of {DTYPES} with a [mamba.tolerance] entry")
    if set(config.conv_tolerance) != set(DTYPES):
        problems.append(f"[causal_conv1d.tolerance] must give exactly {DTYPES}")
    if set(config.gradient_error) != set(DTYPES):
        problems.append(f"[mamba.gradient_relative_error] must give exactly {DTYPES}")
    if "weight" not in config.tolerance:
        problems.append("[mamba.tolerance] has no 'weight' entry")
    if len(set(config.stages)) != len(config.stages):
        problems.append("stages names a stage twice")
    if any(config.scan.dim % groups for groups in config.scan.groups):
        problems.append("mamba.selective_scan: dim must divide into every group count")
    for kind, sizes in (("causal_conv1d", config.bench.causal_conv1d), ("selective_scan", config.bench.selective_scan)):
        for size in sizes:
            if size.get("dtype") not in DTYPES or any(
                not isinstance(v, int) or v < 1 for k, v in size.items() if k != "dtype"
            ):
                problems.append(f"bench.{kind}: {size} needs positive integer sizes and a dtype of {DTYPES}")
    problems += _registry_problems(config)
    problems += _arch_problems(config)
    problems += _checklist_problems(config.checklist)
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))


def _registry_problems(config: Config) -> list[str]:
    problems = [
        f"stage name {stage.name!r} is not a shell identifier (the shell runs stage_<name>)"
        for stage in config.registry
        if not stage.name.isidentifier() or not stage.name.isascii()
    ]
    return problems


DOCTOR_CODES = ("ok", "ptx-jit", "no-kernel-image")  # the verdicts an arch variant may expect (builder/doctor)
MODULE_LOADING = ("LAZY", "EAGER")


def _arch_problems(config: Config) -> list[str]:
    problems = []
    for variant in config.arch.variants:
        where = f"arch.variants.{variant.name}"
        if variant.stage not in config.stages:
            problems.append(f"{where}.stage {variant.stage!r} is not in `stages`")
        if variant.doctor not in DOCTOR_CODES:
            problems.append(f"{where}.doctor {variant.doctor!r} is not one of {DOCTOR_CODES}")
        if not variant.name.isidentifier():
            problems.append(f"{where}: the name must be an identifier (it names a folder and a venv)")
    if len({v.stage for v in config.arch.variants}) != len(config.arch.variants):
        problems.append("arch.variants: two variants share a stage")
    if not 0 <= config.arch.nice <= 19 or config.arch.build_parallel < 1:
        problems.append("arch: nice must be 0..19 and build_parallel positive")
    if config.ptx_speed.module_loading not in MODULE_LOADING:
        problems.append(f"ptx_speed.module_loading must be one of {MODULE_LOADING}")
    speed = config.ptx_speed
    if speed.first_call.get("dtype") not in DTYPES:
        problems.append(f"ptx_speed.first_call needs a dtype of {DTYPES}")
    names = {variant.name: variant for variant in config.arch.variants}
    for key in ("target", "isa_control"):
        variant = names.get(getattr(speed, key))
        if variant is None or variant.sass or not variant.ptx:
            problems.append(f"ptx_speed.{key} must name a PTX-only arch variant, not {getattr(speed, key)!r}")
    if speed.rounds < 3 or speed.repeats < 1 or speed.warmup < 1 or not 0 <= speed.noise_floor < speed.max_noise:
        problems.append("ptx_speed: rounds >= 3, repeats and warmup >= 1, 0 <= noise_floor < max_noise")
    return problems


def _checklist_problems(checklist: Checklist) -> list[str]:
    problems = []
    if not set(checklist.dtypes) <= set(DTYPES) or set(checklist.batch_tolerance) != set(checklist.dtypes):
        problems.append(f"[checklist.batch.tolerance] must give exactly checklist.dtypes, each one of {DTYPES}")
    if set(checklist.decode_tolerance) != set(checklist.dtypes) - {"float32"}:
        problems.append("[checklist.decode.tolerance] must give checklist.dtypes but float32 (it compares tokens)")
    if 1 not in checklist.batch_sizes or any(size < 1 for size in checklist.batch_sizes):
        problems.append("checklist.batch.sizes must be positive and hold 1 (the reference)")
    if not checklist.perf.models:
        problems.append("checklist.perf.models is empty (the leak run uses the first)")
    if checklist.leak.seconds <= 0 or checklist.leak.bound_mib < 0 or checklist.leak.min_samples < 2:
        problems.append("checklist.leak: seconds must be positive, bound_mib not negative, min_samples at least 2")
    return problems
