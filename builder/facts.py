"""Torch release facts (builder/data/torch.toml) as frozen dataclasses, with their invariants checked on load."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from packaging.version import Version

from .errors import ConfigError, FactsError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MANYLINUX_POLICIES = ("manylinux2014", "manylinux_2_28", "manylinux_2_34")
_ACCEL_RE = re.compile(r"^(?:cu(?P<cu>\d{2,3})|rocm(?P<rocm>\d+(?:\.\d+){1,2}))$")


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@dataclass(frozen=True, kw_only=True, order=True)
class Accelerator:
    """A torch build variant's accelerator: ``cu130`` (CUDA 13.0) or ``rocm6.1`` (ROCm 6.1)."""

    kind: Literal["cuda", "rocm"]
    version: str

    @classmethod
    def parse(cls, name: str) -> Accelerator:
        match = _ACCEL_RE.match(name)
        if match is None:
            msg = f"{name!r} is not an accelerator; write CUDA as 'cu130' (13.0) and ROCm as 'rocm6.1'"
            raise ValueError(msg)
        if match["cu"]:
            digits = match["cu"]
            return cls(kind="cuda", version=f"{int(digits[:-1])}.{digits[-1]}")
        return cls(kind="rocm", version=match["rocm"])

    @classmethod
    def cuda(cls, version: str) -> Accelerator:
        return cls(kind="cuda", version=version)

    @classmethod
    def rocm(cls, version: str) -> Accelerator:
        return cls(kind="rocm", version=version)

    @property
    def name(self) -> str:
        """How torch's own indexes spell it: cu130, rocm6.1."""
        if self.kind == "cuda":
            return "cu" + self.version.replace(".", "")
        return "rocm" + self.version

    @property
    def tag(self) -> str:
        """How the variant label spells it: cu130, rocm61 (digits only, so the label stays one PEP 440 segment)."""
        return self.name.replace(".", "")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, kw_only=True)
class TorchRelease:
    minor: str
    patches: tuple[str, ...]
    python: tuple[str, ...]
    cuda: tuple[str, ...]
    pypi_cuda: str
    rocm: tuple[str, ...]
    cxx11_abi: bool
    manylinux: str
    abi_override: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    manylinux_override: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def latest(self) -> str:
        return self.patches[-1]

    @property
    def accelerators(self) -> tuple[Accelerator, ...]:
        return tuple(Accelerator.cuda(v) for v in self.cuda) + tuple(Accelerator.rocm(v) for v in self.rocm)

    def has(self, accelerator: Accelerator) -> bool:
        return accelerator in self.accelerators

    def cxx11_abi_for(self, accelerator: Accelerator) -> bool:
        return self.abi_override.get(accelerator.name, self.cxx11_abi)

    def manylinux_for(self, accelerator: Accelerator) -> str:
        return self.manylinux_override.get(accelerator.name, self.manylinux)

    def describe_accelerators(self, kind: str) -> str:
        versions = self.cuda if kind == "cuda" else self.rocm
        return ", ".join(versions) if versions else "none"


@dataclass(frozen=True, kw_only=True)
class TorchFacts:
    releases: tuple[TorchRelease, ...]
    cuda_archs: Mapping[str, tuple[str, ...]]
    rocm_archs: tuple[str, ...]

    def release(self, torch: str) -> TorchRelease:
        """The release of ``torch``, given as a minor ("2.14") or a patch ("2.14.1")."""
        minor = ".".join(torch.split(".")[:2])
        for release in self.releases:
            if release.minor == minor and (torch == minor or torch in release.patches):
                return release
        known = ", ".join(r.minor for r in self.releases)
        raise KeyError(f"torch {torch} is not in the facts table (known minors: {known})")

    def default_archs(self, accelerator: Accelerator) -> tuple[str, ...]:
        if accelerator.kind == "rocm":
            return self.rocm_archs
        return self.cuda_archs[accelerator.version]

    @property
    def torch_versions(self) -> tuple[str, ...]:
        return tuple(p for r in self.releases for p in r.patches)


def _check_release(raw: Mapping, where: str) -> TorchRelease:
    required = ("torch", "patches", "python", "cuda", "pypi_cuda", "rocm", "cxx11_abi", "manylinux")
    missing = [k for k in required if k not in raw]
    if missing:
        raise FactsError(f"{where}: missing {', '.join(missing)}")
    release = TorchRelease(
        minor=raw["torch"],
        patches=tuple(raw["patches"]),
        python=tuple(raw["python"]),
        cuda=tuple(raw["cuda"]),
        pypi_cuda=raw["pypi_cuda"],
        rocm=tuple(raw["rocm"]),
        cxx11_abi=raw["cxx11_abi"],
        manylinux=raw["manylinux"],
        abi_override=MappingProxyType(dict(raw.get("abi_override", {}))),
        manylinux_override=MappingProxyType(dict(raw.get("manylinux_override", {}))),
    )
    where = f"{where} (torch {release.minor})"
    for name in ("python", "cuda", "rocm", "patches"):
        values = getattr(release, name)
        if list(values) != sorted(set(values), key=version_key):
            raise FactsError(f"{where}: {name} must be sorted and free of duplicates, got {list(values)}")
    if not release.patches or any(not p.startswith(release.minor + ".") for p in release.patches):
        raise FactsError(f"{where}: every patch release must start with {release.minor}.")
    if release.pypi_cuda not in release.cuda:
        raise FactsError(f"{where}: pypi_cuda {release.pypi_cuda} is not one of its CUDA variants")
    variants = {a.name for a in release.accelerators}
    for name in ("abi_override", "manylinux_override"):
        stray = set(getattr(release, name)) - variants
        if stray:
            raise FactsError(f"{where}: {name} names variants torch never built: {sorted(stray)}")
    policies = {release.manylinux, *release.manylinux_override.values()}
    if not policies <= set(MANYLINUX_POLICIES):
        raise FactsError(f"{where}: unknown manylinux policy in {sorted(policies)}")
    for accel in release.accelerators:
        abi = release.cxx11_abi_for(accel)
        if not isinstance(abi, bool):
            raise FactsError(f"{where}: {accel} has no boolean cxx11_abi")
        # glibc 2.17 (manylinux2014) toolchains build the old ABI only; a cxx11 variant needs 2_28.
        if abi and release.manylinux_for(accel) == "manylinux2014":
            raise FactsError(f"{where}: {accel} claims the cxx11 ABI under manylinux2014")
    return release


def parse_facts(raw: Mapping, source: str) -> TorchFacts:
    releases = tuple(_check_release(r, f"{source}: release #{i + 1}") for i, r in enumerate(raw.get("release", [])))
    if not releases:
        raise FactsError(f"{source}: no [[release]] tables")
    minors = [r.minor for r in releases]
    if minors != sorted(set(minors), key=version_key):
        raise FactsError(f"{source}: releases must be unique and in ascending order, got {minors}")
    archs = raw.get("archs", {})
    cuda_archs = {v: tuple(a) for v, a in archs.get("cuda", {}).items()}
    for release in releases:
        for cuda in release.cuda:
            if cuda not in cuda_archs:
                raise FactsError(f"{source}: torch {release.minor} has CUDA {cuda} but [archs.cuda] has no list for it")
    for cuda, arch_list in cuda_archs.items():
        if list(arch_list) != sorted(set(arch_list), key=version_key):
            raise FactsError(f"{source}: [archs.cuda] {cuda} must be sorted and free of duplicates")
    rocm_archs = tuple(archs.get("rocm", {}).get("default", ()))
    return TorchFacts(releases=releases, cuda_archs=MappingProxyType(cuda_archs), rocm_archs=rocm_archs)


def load_facts(path: Path | None = None) -> TorchFacts:
    if path is None:
        return _default_facts()
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ConfigError(f"{path}: {error}") from None
    return parse_facts(raw, str(path))


@functools.cache
def _default_facts() -> TorchFacts:
    text = resources.files("builder.data").joinpath("torch.toml").read_text()
    return parse_facts(tomllib.loads(text), "builder/data/torch.toml")
