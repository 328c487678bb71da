"""Torch release facts (builder/data/torch.toml) as frozen dataclasses, with their invariants checked on load."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from builder.core.errors import FactsError, did_you_mean
from builder.core.files import read_toml
from builder.core.resources import TORCH_FACTS
from builder.plan.arch import Arch

MANYLINUX_POLICIES = ("manylinux2014", "manylinux_2_28", "manylinux_2_34")
# The CPU architectures a job may build for, as wheel platform tags and job identifiers end: x86_64 first (the
# default); aarch64 (GH200, GB200, DGX Spark) where torch.toml's ``aarch64`` lists the release's CUDA variant.
PLATFORMS = ("x86_64", "aarch64")
DEFAULT_PLATFORM = PLATFORMS[0]
_ACCEL_RE = re.compile(r"cu(?P<cu>[1-9]\d{1,2})|rocm(?P<rocm>[1-9]\d*(?:\.\d+){1,2})")


def torch_minor(torch: str) -> str:
    """The minor release a torch version belongs to (the unit of ABI and labels): "2.14" for 2.14.1+cu130."""
    return ".".join(torch.split("+")[0].split(".")[:2])


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


FREE_THREADED = "t"  # PEP 703's ABI suffix: Python "3.13t", tags cp313-cp313t


def is_free_threaded(python: str) -> bool:
    return python.endswith(FREE_THREADED)


def base_python(python: str) -> str:
    """The CPython minor a Python of the plan runs: "3.13" for the free-threaded "3.13t"."""
    return python.removesuffix(FREE_THREADED)


def python_key(python: str) -> tuple[int, ...]:
    """Sorts "3.13t" right after "3.13" and before "3.14"."""
    return (*version_key(base_python(python)), int(is_free_threaded(python)))


@dataclass(frozen=True, kw_only=True, order=True)
class Accelerator:
    """A torch build variant's accelerator: ``cu130`` (CUDA 13.0) or ``rocm6.1`` (ROCm 6.1)."""

    kind: Literal["cuda", "rocm"]
    version: str

    @classmethod
    def parse(cls, name: str) -> Accelerator:
        match = _ACCEL_RE.fullmatch(name)
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


_RELEASE_FIELDS: Mapping[str, type] = MappingProxyType(
    {
        "torch": str,
        "patches": list,
        "python": list,
        "cuda": list,
        "pypi_cuda": str,
        "rocm": list,
        "cxx11_abi": bool,
        "manylinux": str,
        "sources": list,
        "abi_override": dict,
        "manylinux_override": dict,
        "aarch64": list,
        "pypi_aarch64": str,
    }
)
_OPTIONAL_FIELDS = ("abi_override", "manylinux_override", "aarch64", "pypi_aarch64")
_ITEM_TYPES: Mapping[str, type] = MappingProxyType(
    {
        "patches": str,
        "python": str,
        "cuda": str,
        "rocm": str,
        "sources": str,
        "abi_override": bool,
        "manylinux_override": str,
        "aarch64": str,
    }
)
_TOML_NAMES: Mapping[type, str] = MappingProxyType(
    {
        str: "string",
        list: "list",
        bool: "boolean (true/false)",
        dict: "table",
    }
)
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


def _check_keys(raw: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    allowed = list(allowed)
    for key in raw:
        if key not in allowed:
            raise FactsError(f"{where}: unknown key {key!r}{did_you_mean(key, allowed)}")


def _check_types(raw: Mapping[str, Any], where: str) -> None:
    """Every field has its TOML type, list items and table values included: a typo'd type fails here, not later."""
    _check_keys(raw, _RELEASE_FIELDS, where)
    missing = [k for k in _RELEASE_FIELDS if k not in raw and k not in _OPTIONAL_FIELDS]
    if missing:
        raise FactsError(f"{where}: missing {', '.join(missing)}")
    for key, value in raw.items():
        expected, item_type = _RELEASE_FIELDS[key], _ITEM_TYPES.get(key)
        if not isinstance(value, expected):
            raise FactsError(f"{where}: {key} must be a {_TOML_NAMES[expected]}, got {value!r}")
        if item_type is None:
            continue
        items: list[object] = list(value.values()) if isinstance(value, dict) else list(value)  # type: ignore[call-overload]
        for item in items:
            if not isinstance(item, item_type):
                raise FactsError(f"{where}: {key} holds {item!r}, which is not a {_TOML_NAMES[item_type]}")


def _release_from(raw: Mapping[str, Any], where: str) -> TorchRelease:
    _check_types(raw, where)
    return TorchRelease(
        minor=raw["torch"],
        patches=tuple(raw["patches"]),
        python=tuple(raw["python"]),
        cuda=tuple(raw["cuda"]),
        pypi_cuda=raw["pypi_cuda"],
        rocm=tuple(raw["rocm"]),
        cxx11_abi=raw["cxx11_abi"],
        manylinux=raw["manylinux"],
        sources=tuple(raw["sources"]),
        abi_override=MappingProxyType(dict(raw.get("abi_override", {}))),
        manylinux_override=MappingProxyType(dict(raw.get("manylinux_override", {}))),
        aarch64=tuple(raw.get("aarch64", ())),
        pypi_aarch64=raw.get("pypi_aarch64"),
    )


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


def _check_release(release: TorchRelease, where: str) -> None:
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


def _arch_list(value: object, kind: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FactsError(f"{where}: expected a list of architectures, got {value!r}")
    example = "'9.0'" if kind == "cuda" else "'gfx942'"
    for arch in value:
        if not isinstance(arch, str) or not _default_arch(arch, kind):
            raise FactsError(f"{where}: {arch!r} is not an architecture like {example}")
    if kind == "cuda":
        _check_sorted(value, where)
    return tuple(value)


def _default_arch(text: str, kind: str) -> bool:
    try:
        arch = Arch.parse(text)
    except ValueError:
        return False
    return arch.kind == kind and (kind == "rocm" or arch.plain)


def _table(raw: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = raw.get(key, {})
    if not isinstance(value, dict):
        raise FactsError(f"{where}: {key} must be a table, got {value!r}")
    return value


def _with_archs(releases: Sequence[TorchRelease], raw: Mapping[str, Any], source: str) -> TorchFacts:
    """The facts, once [archs] gives a default list for every toolkit some release was built with."""
    where = f"{source}: [archs]"
    _check_keys(raw, ("cuda", "rocm"), where)
    cuda_table, rocm_table = _table(raw, "cuda", where), _table(raw, "rocm", where)
    _check_keys(rocm_table, ("default",), f"{source}: [archs.rocm]")
    cuda_archs = {v: _arch_list(a, "cuda", f"{source}: [archs.cuda] {v}") for v, a in cuda_table.items()}
    rocm_archs = _arch_list(rocm_table.get("default", []), "rocm", f"{source}: [archs.rocm] default")
    for release in releases:
        for cuda in release.cuda:
            if cuda not in cuda_archs:
                raise FactsError(f"{source}: torch {release.minor} has CUDA {cuda} but [archs.cuda] has no list for it")
    if any(r.rocm for r in releases) and not rocm_archs:
        raise FactsError(f"{source}: some torch releases have ROCm variants but [archs.rocm] default is empty")
    return TorchFacts(releases=tuple(releases), cuda_archs=MappingProxyType(cuda_archs), rocm_archs=rocm_archs)


def parse_facts(raw: Mapping[str, Any], source: str) -> TorchFacts:
    _check_keys(raw, ("release", "archs"), source)
    tables = raw.get("release", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables) or not tables:
        raise FactsError(f"{source}: expected one or more [[release]] tables")
    releases = []
    for index, table in enumerate(tables):
        where = f"{source}: release #{index + 1}"
        release = _release_from(table, where)
        _check_release(release, f"{where} (torch {release.minor})")
        releases.append(release)
    _check_sorted([r.minor for r in releases], f"{source}: the [[release]] tables' torch minors")
    return _with_archs(releases, _table(raw, "archs", source), source)


def load_facts(path: Path | None = None) -> TorchFacts:
    if path is None:
        return _default_facts()
    return parse_facts(read_toml(path, what="the torch facts", error=FactsError), str(path))


@functools.cache
def _default_facts() -> TorchFacts:
    return parse_facts(read_toml(TORCH_FACTS, what="the torch facts", error=FactsError), TORCH_FACTS.source)
