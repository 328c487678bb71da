"""builder/data/torch.toml as written: the pydantic models that check the file whole, read into releases.py's
TorchFacts. Imported only when the file is read (facts.py)."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, StrictBool, StrictStr, model_validator

from builder.core.errors import FactsError
from builder.plan.accelerator import version_key
from builder.plan.arch import Arch
from builder.plan.releases import TorchFacts, TorchRelease, check_release


def _arch_list(kind: str) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    """A default arch list of ``kind``: plain CUDA compute capabilities in order, or ROCm targets."""
    example = "'9.0'" if kind == "cuda" else "'gfx942'"

    def checked(archs: tuple[str, ...]) -> tuple[str, ...]:
        for arch in archs:
            if not _default_arch(arch, kind):
                raise ValueError(f"{arch!r} is not an architecture like {example}")
        if kind == "cuda" and list(archs) != sorted(set(archs), key=version_key):
            raise ValueError(f"must be sorted ascending and free of duplicates, got {list(archs)}")
        return archs

    return checked


def _default_arch(text: str, kind: str) -> bool:
    try:
        arch = Arch.parse(text)
    except ValueError:
        return False
    return arch.kind == kind and (kind == "rocm" or arch.plain)


class ReleaseTable(BaseModel):
    """One [[release]] of torch.toml as written; checked as a whole, then read as a TorchRelease."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    torch: StrictStr
    patches: tuple[StrictStr, ...]
    python: tuple[StrictStr, ...]
    cuda: tuple[StrictStr, ...]
    pypi_cuda: StrictStr
    rocm: tuple[StrictStr, ...]
    cxx11_abi: StrictBool
    manylinux: StrictStr
    sources: tuple[StrictStr, ...]
    abi_override: dict[StrictStr, StrictBool] = {}
    manylinux_override: dict[StrictStr, StrictStr] = {}
    aarch64: tuple[StrictStr, ...] = ()
    pypi_aarch64: StrictStr | None = None

    def release(self) -> TorchRelease:
        fields = self.model_dump(exclude={"torch", "abi_override", "manylinux_override"})
        return TorchRelease(minor=self.torch, abi_override=MappingProxyType(dict(self.abi_override)),
                            manylinux_override=MappingProxyType(dict(self.manylinux_override)), **fields)

    @model_validator(mode="after")
    def _checked(self) -> ReleaseTable:
        try:
            check_release(self.release(), f"torch {self.torch}")
        except FactsError as error:
            raise ValueError(str(error)) from None
        return self


class RocmArchs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    default: Annotated[tuple[StrictStr, ...], AfterValidator(_arch_list("rocm"))] = ()


class ArchsTable(BaseModel):
    """[archs]: the default list of each CUDA toolkit some release was built with, and ROCm's."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    cuda: dict[StrictStr, Annotated[tuple[StrictStr, ...], AfterValidator(_arch_list("cuda"))]] = {}
    rocm: RocmArchs = RocmArchs()


class FactsFile(BaseModel):
    """builder/data/torch.toml: the [[release]] tables in order, and [archs] for every toolkit they name."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    release: tuple[ReleaseTable, ...] = ()
    archs: ArchsTable = ArchsTable()

    @model_validator(mode="after")
    def _complete(self) -> FactsFile:
        if not self.release:
            raise ValueError("expected one or more [[release]] tables")
        minors = [r.torch for r in self.release]
        if minors != sorted(set(minors), key=version_key):
            raise ValueError(f"the [[release]] tables' torch minors must be sorted ascending and free of duplicates, "
                             f"got {minors}")
        for release in self.release:
            for cuda in release.cuda:
                if cuda not in self.archs.cuda:
                    raise ValueError(f"torch {release.torch} has CUDA {cuda} but [archs.cuda] has no list for it")
        if any(r.rocm for r in self.release) and not self.archs.rocm.default:
            raise ValueError("some torch releases have ROCm variants but [archs.rocm] default is empty")
        return self

    def facts(self) -> TorchFacts:
        return TorchFacts(releases=tuple(r.release() for r in self.release),
                          cuda_archs=MappingProxyType(dict(self.archs.cuda)), rocm_archs=self.archs.rocm.default)
