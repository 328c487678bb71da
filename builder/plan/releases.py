"""What torch released, as builder/data/torch.toml says (facts.py reads it): each release's Pythons, CUDA and ROCm
variants, ABI and manylinux policy, with the checks a release must pass. Plain frozen dataclasses: the index and
the pages for people use them without the file's pydantic models (facts_file.py, a tenth of a second to import)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from builder.core.errors import FactsError
from builder.plan.accelerator import Accelerator, base_python, is_free_threaded, python_key, torch_minor, version_key

MANYLINUX_POLICIES = ("manylinux2014", "manylinux_2_28", "manylinux_2_34")
# The CPU architectures a job may build for, as wheel platform tags and job identifiers end: x86_64 first (the
# default); aarch64 (GH200, GB200, DGX Spark) where torch.toml's ``aarch64`` lists the release's CUDA variant.
PLATFORMS = ("x86_64", "aarch64")
DEFAULT_PLATFORM = PLATFORMS[0]


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
    sources: tuple[str, ...]  # where its facts were read; a release without one is refused at load
    abi_override: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))
    manylinux_override: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    aarch64: tuple[str, ...] = ()  # the CUDA variants torch shipped manylinux aarch64 wheels of (with GPU support)
    pypi_aarch64: str | None = None  # the CUDA the registry's own aarch64 wheel is built with; None: a CPU build

    @property
    def latest(self) -> str:
        return self.patches[-1]

    @property
    def accelerators(self) -> tuple[Accelerator, ...]:
        return tuple(Accelerator.cuda(v) for v in self.cuda) + tuple(Accelerator.rocm(v) for v in self.rocm)

    @property
    def registry_variant(self) -> Accelerator:
        """The variant the registry's plain wheel is: the one `wheelwright facts check` can verify."""
        return Accelerator.cuda(self.pypi_cuda)

    @property
    def cited_variants(self) -> tuple[Accelerator, ...]:
        """The variants only PyTorch's own index ships, which rest on the release's sources."""
        return tuple(a for a in self.accelerators if a != self.registry_variant)

    def has(self, accelerator: Accelerator) -> bool:
        return accelerator in self.accelerators

    def registry_variant_for(self, platform: str) -> Accelerator | None:
        """The variant the registry's plain wheel for ``platform`` is (None: a CPU build there)."""
        if platform == DEFAULT_PLATFORM:
            return self.registry_variant
        return Accelerator.cuda(self.pypi_aarch64) if platform == "aarch64" and self.pypi_aarch64 else None

    def has_platform(self, accelerator: Accelerator, platform: str) -> bool:
        """Whether torch shipped ``accelerator``'s variant for ``platform``; every variant exists for x86_64."""
        if platform == DEFAULT_PLATFORM:
            return self.has(accelerator)
        return platform == "aarch64" and accelerator.kind == "cuda" and accelerator.version in self.aarch64

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
        minor = torch_minor(torch)
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

    def to_json(self) -> str:
        """The facts as JSON text, which from_json reads back equal (the index keeps them in its state)."""
        releases = [{name: _plain(getattr(release, name)) for name in _RELEASE_FIELDS} for release in self.releases]
        document = {"releases": releases, "cuda_archs": _plain(self.cuda_archs), "rocm_archs": list(self.rocm_archs)}
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TorchFacts:
        """Facts written by to_json; ValueError (or KeyError, TypeError) for text that is not."""
        document = json.loads(text)
        releases = tuple(TorchRelease(**{name: _typed(name, raw[name]) for name in _RELEASE_FIELDS})
                         for raw in document["releases"])
        archs = MappingProxyType({str(cuda): tuple(map(str, archs)) for cuda, archs in document["cuda_archs"].items()})
        return cls(releases=releases, cuda_archs=archs, rocm_archs=tuple(map(str, document["rocm_archs"])))


_RELEASE_FIELDS = tuple(field.name for field in dataclasses.fields(TorchRelease))


def _plain(value: object) -> object:
    """A field's value as JSON holds it: tuples as lists, mappings as objects."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return list(value) if isinstance(value, tuple) else value


def _typed(name: str, value: object) -> Any:
    """A field's value from JSON, in the type TorchRelease holds it."""
    if name in ("abi_override", "manylinux_override"):
        if not isinstance(value, dict):
            raise TypeError(f"{name}: not an object")
        return MappingProxyType(dict(value))
    return tuple(value) if isinstance(value, list) else value


# Labels drop the dots (cu130, rocm624) and parse_label splits them back, so CUDA minors and ROCm components must
# be single digits: a CUDA 12.10 would need a new label format, and so does ROCm 7.14 (torch 2.14 ships it, but
# rocm714 reads back as 7.1.4), which is why torch.toml names it in 2.14's comment and not in its rocm list.
_SPELLING: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "torch": (r"\d+\.\d+", "a minor release like '2.14'"),
        "patches": (r"\d+\.\d+\.\d+", "a patch release like '2.14.1'"),
        "python": (r"3\.\d+t?", "a CPython version like '3.11' (free-threaded: '3.13t')"),
        "cuda": (r"[1-9]\d?\.\d", "a CUDA version with a one-digit minor like '13.0'"),
        "rocm": (r"[1-9]\.\d(\.\d)?", "a ROCm version with one-digit parts like '6.2.4'"),
        "aarch64": (r"[1-9]\d?\.\d", "a CUDA version with a one-digit minor like '13.0'"),
    }
)
# The default lists are plain compute capabilities; suffixes (9.0a, +PTX) are a profile's explicit choice.


def _check_spelling(release: TorchRelease, where: str) -> None:
    spelled = {
        "torch": (release.minor,),
        "patches": release.patches,
        "python": release.python,
        "cuda": release.cuda,
        "rocm": release.rocm,
        "aarch64": release.aarch64,
    }
    for name, values in spelled.items():
        pattern, example = _SPELLING[name]
        for value in values:
            if not re.fullmatch(pattern, value):
                raise FactsError(f"{where}: {name} {value!r} is not {example}")
        _check_sorted(values, f"{where}: {name}", key=python_key if name == "python" else version_key)


def _check_sorted(values: Sequence[str], what: str, key: Callable[[str], tuple[int, ...]] = version_key) -> None:
    if list(values) != sorted(set(values), key=key):
        raise FactsError(f"{what} must be sorted ascending and free of duplicates, got {list(values)}")


def _check_pythons(release: TorchRelease, where: str) -> None:
    if not release.python:
        raise FactsError(f"{where}: python lists no CPython version")
    # torch builds a free-threaded wheel beside the ordinary one of the same minor, never alone
    free_threaded = [p for p in release.python if is_free_threaded(p)]
    orphans = [p for p in free_threaded if base_python(p) not in release.python]
    if orphans:
        raise FactsError(f"{where}: python lists free-threaded {', '.join(orphans)} without its base Python")
    too_old = [p for p in free_threaded if version_key(base_python(p)) < (3, 13)]
    if too_old:
        raise FactsError(f"{where}: python lists {', '.join(too_old)}; CPython is free-threaded from 3.13 (PEP 703)")


def _check_sources(release: TorchRelease, where: str) -> None:
    """Only the registry's default variant can be checked by machine; everything else is as good as its source."""
    if not release.sources or any(not s.strip() for s in release.sources):
        raise FactsError(f"{where}: sources must name where its facts were read (RELEASE.md, an issue, a wheel)")


def check_release(release: TorchRelease, where: str) -> None:
    _check_spelling(release, where)
    if not release.patches or any(not p.startswith(release.minor + ".") for p in release.patches):
        raise FactsError(f"{where}: patches must be non-empty and each start with {release.minor}.")
    _check_pythons(release, where)
    _check_sources(release, where)
    if release.pypi_cuda not in release.cuda:
        raise FactsError(f"{where}: pypi_cuda {release.pypi_cuda} is not one of its CUDA variants {list(release.cuda)}")
    unbuilt = [v for v in release.aarch64 if v not in release.cuda]
    if unbuilt:
        built = list(release.cuda)
        raise FactsError(f"{where}: aarch64 lists CUDA {', '.join(unbuilt)}, not one of its variants {built}")
    if release.pypi_aarch64 is not None and release.pypi_aarch64 not in release.aarch64:
        raise FactsError(f"{where}: pypi_aarch64 {release.pypi_aarch64} is not one of its aarch64 variants "
                         f"{list(release.aarch64)}")
    variants = {a.name for a in release.accelerators}
    for name in ("abi_override", "manylinux_override"):
        stray = set(getattr(release, name)) - variants
        if stray:
            raise FactsError(f"{where}: {name} names variants torch {release.minor} never built: {sorted(stray)}")
    for policy in (release.manylinux, *release.manylinux_override.values()):
        if policy not in MANYLINUX_POLICIES:
            raise FactsError(f"{where}: unknown manylinux policy {policy!r}; known: {', '.join(MANYLINUX_POLICIES)}")
    for accel in release.accelerators:
        # glibc 2.17 (manylinux2014) toolchains build the old ABI only; a cxx11 variant needs 2_28.
        if release.cxx11_abi_for(accel) and release.manylinux_for(accel) == "manylinux2014":
            raise FactsError(f"{where}: {accel} claims the cxx11 ABI under manylinux2014")
