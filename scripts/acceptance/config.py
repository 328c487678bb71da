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
class Config:
    label: str
    packages: tuple[str, ...]
    stages: tuple[str, ...]
    upstream: Upstream
    conv_tolerance: dict[str, Tolerance]  # causal-conv1d's, by dtype name
    tolerance: dict[str, Tolerance]  # mamba-ssm's, by dtype name, plus "weight"
    gradient_error: dict[str, float]  # mamba-ssm's gradients: normwise relative error bound, by dtype name
    scan: ScanCases
    inner: InnerCases
    bench: Bench


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
    scan, inner = mamba["selective_scan"], mamba["inner"]
    return Config(
        label=str(data["label"]),
        packages=tuple(data["packages"]),
        stages=tuple(data["stages"]),
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
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
