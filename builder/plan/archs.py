"""GPU architectures as a profile spells them, split into SASS and PTX, and the arch facts (builder/data/archs.toml):
SASS a toolkit range is known to miscompile for a package, dropped for the family SASS that covers it.

Spellings: ``9.0`` SASS for sm_90; ``9.0+PTX`` SASS and PTX (as torch's TORCH_CUDA_ARCH_LIST writes it);
``compute_90`` PTX alone (nvcc's name for a virtual arch), for GPUs newer than any SASS to JIT from.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from builder.core.data import load_data, validate
from builder.core.errors import FactsError
from builder.core.resources import ARCH_FACTS
from builder.plan.arch import Arch

SOURCE = ARCH_FACTS.source


def split(archs: Iterable[Arch]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(SASS, PTX) of an arch list, each as ``9.0`` names in the list's order; ROCm targets count as SASS."""
    archs = tuple(archs)
    return tuple(a.sass for a in archs if a.has_sass), tuple(a.sass for a in archs if a.ptx)


def torch_arch_list(archs: Iterable[Arch]) -> str:
    """TORCH_CUDA_ARCH_LIST for ``archs``; torch has no PTX-only spelling, so ``compute_90`` becomes ``9.0+PTX``
    (recipes that rewrite -gencode, as both packages' do, embed exactly the PTX asked for)."""
    return ";".join(f"{arch.sass}+PTX" if arch.ptx_only else str(arch) for arch in archs)


def _specifier(value: object) -> SpecifierSet:
    try:
        if isinstance(value, str):
            return SpecifierSet(value)
    except InvalidSpecifier:
        pass
    raise ValueError(f"{value!r} is not a version specifier")


def _sass_name(value: object) -> str:
    """A SASS-only CUDA arch like ``10.0`` (the facts name machine code, never PTX)."""
    try:
        arch = Arch.parse(value) if isinstance(value, str) else None
    except ValueError:
        arch = None
    if arch is None or arch.kind != "cuda" or arch.ptx:
        raise ValueError(f"{value!r} is not a CUDA arch like '10.0'")
    return arch.sass


def _link(value: str) -> str:
    if not value.startswith("https://"):
        raise ValueError("must be a link to the upstream report")
    return value


class KnownBad(BaseModel):
    """One [[known_bad]] entry: SASS a toolkit range miscompiles for some versions of a package."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, defer_build=True)

    package: str
    versions: Annotated[SpecifierSet, BeforeValidator(_specifier)]
    toolkit: Annotated[SpecifierSet, BeforeValidator(_specifier)]
    sass: Annotated[str, BeforeValidator(_sass_name)]
    kept: Annotated[str, BeforeValidator(_sass_name)]
    reason: str
    citation: Annotated[str, AfterValidator(_link)]

    def applies(self, package: str, version: str, toolkit: str) -> bool:
        return (
            package == self.package
            and self.versions.contains(version, prereleases=True)
            and self.toolkit.contains(toolkit, prereleases=True)
        )


class ArchFacts(BaseModel):
    """builder/data/archs.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    known_bad: tuple[KnownBad, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ArchNote:
    """What the arch facts changed in one job's list, for `plan --explain`."""

    identifier: str
    dropped: str
    kept: str
    reason: str
    citation: str

    def describe(self) -> str:
        dropped, kept = Arch.parse(self.dropped).number, Arch.parse(self.kept).number
        return f"no sm_{dropped} SASS (sm_{kept} covers it): {self.reason} [{self.citation}]"


@dataclass(frozen=True, kw_only=True)
class ArchChoice:
    """A profile's own arch list for one job's package (matrix.yaml ``package_archs``), for `plan --explain`."""

    identifier: str
    archs: tuple[Arch, ...]
    reason: str

    def describe(self) -> str:
        return f"{' '.join(map(str, self.archs))} (the profile's package_archs): {self.reason}"


def parse_known_bad(raw: Mapping[str, Any], source: str = SOURCE) -> tuple[KnownBad, ...]:
    return validate(raw, ArchFacts, source, error=FactsError).known_bad


@functools.cache
def known_bad() -> tuple[KnownBad, ...]:
    return load_data(ARCH_FACTS, ArchFacts, what="the arch facts", error=FactsError).known_bad


def _drop_sass(arch: Arch, sass: str) -> Arch | None:
    """``arch`` without the SASS of ``sass``: ``10.3`` goes, ``10.3+PTX`` keeps its PTX as ``compute_103``."""
    if arch.kind != "cuda" or not arch.has_sass or arch.sass != sass:
        return arch
    return dataclasses.replace(arch, ptx_only=True) if arch.ptx else None


def apply_known_bad(
    identifier: str,
    package: str,
    version: str,
    toolkit: str,
    archs: Sequence[Arch],
    facts: Sequence[KnownBad] | None = None,
) -> tuple[tuple[Arch, ...], tuple[ArchNote, ...]]:
    """The job's arch list with known-bad SASS dropped (and the covering SASS kept), and a note per change."""
    result = list(archs)
    notes = []
    for bad in known_bad() if facts is None else facts:
        if not bad.applies(package, version, toolkit) or bad.sass not in split(result)[0]:
            continue
        result = [kept for arch in result if (kept := _drop_sass(arch, bad.sass)) is not None]
        if bad.kept not in split(result)[0]:
            result.append(Arch.parse(bad.kept))
        notes.append(
            ArchNote(identifier=identifier, dropped=bad.sass, kept=bad.kept, reason=bad.reason, citation=bad.citation)
        )
    return tuple(result), tuple(notes)
