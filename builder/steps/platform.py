"""The CPU platforms of builder/data/platforms.toml as frozen models: what a platform means in bytes (e_machine,
extension suffix, page size) and, for one this machine cross-builds, where its compiler, sysroot and CPython come
from. Checked on load: every platform of the plan is described, and a cross target names all it needs."""

from __future__ import annotations

import functools
import platform as host
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, model_validator

from builder.core.data import load_data, validate
from builder.core.resources import PLATFORM_FACTS
from builder.plan.job import Job
from builder.plan.releases import PLATFORMS


def _glibc(value: str) -> str:
    if not re.fullmatch(r"\d+\.\d+", value):
        raise ValueError(f"{value!r} is not a version like '2.28'")
    return value


def _hex(value: object) -> int:
    try:
        return int(str(value), 16)
    except ValueError:
        raise ValueError(f"{value!r} is not a hexadecimal number like '0x410fd4f0'") from None


def _power_of_two(value: int) -> int:
    if value <= 0 or value & (value - 1):
        raise ValueError(f"{value} is not a power of two")
    return value


class Cross(BaseModel):
    """How this x86_64 machine builds for the platform (builder/data/platforms.toml, [platform.X.cross])."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    triplet: str  # aarch64-linux-gnu: the cross compiler is <triplet>-gcc / <triplet>-g++
    compiler_package: str
    debian_arch: str
    cuda_target: str  # nvcc's targets/<dir> for this host compiler
    qemu: str
    emulated_midr: Annotated[int, BeforeValidator(_hex)]  # MIDR_EL1 of the CPU the emulated CPython is shown
    glibc: Annotated[str, AfterValidator(_glibc)]  # the newest manylinux_2_X whose wheels (torch's) it accepts
    sysroot_suite: str
    sysroot_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]  # with {python}: python3.11, libpython3.11-dev
    runtime_suites: dict[str, str]  # CPython X.Y -> the Debian suite that ships it

    def runtime_suite(self, python: str) -> str | None:
        return self.runtime_suites.get(python)

    def packages_for(self, python: str) -> tuple[str, ...]:
        return tuple(p.format(python=python) for p in self.runtime_packages)

    def wheel_platforms(self, machine: str) -> tuple[str, ...]:
        """The platform tags a target CPython installs, best first: manylinux_2_28 down to 2_17, manylinux2014."""
        major, minor = (int(part) for part in self.glibc.split("."))
        tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
        return (*tags, f"manylinux2014_{machine}")


class Platform(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # x86_64, aarch64
    elf_machine: int
    multiarch: str
    page_size: Annotated[int, AfterValidator(_power_of_two)]
    cross: Cross | None = None

    def extension_suffix(self, python: str) -> str:
        """What the target's sysconfig names an extension module: ``.cpython-311-aarch64-linux-gnu.so``."""
        return f".cpython-{python.replace('.', '')}-{self.multiarch}.so"


class PlatformsFile(BaseModel):
    """builder/data/platforms.toml: [platform.NAME] for exactly the platforms a plan may name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: dict[str, Platform]

    @model_validator(mode="before")
    @classmethod
    def _named(cls, raw: object) -> object:
        table = raw.get("platform") if isinstance(raw, Mapping) else None
        if not isinstance(raw, Mapping) or not isinstance(table, Mapping) or set(table) != set(PLATFORMS):
            found = sorted(table) if isinstance(table, Mapping) else table
            raise ValueError(f"[platform.*] must describe exactly {', '.join(PLATFORMS)}, found {found}")
        return {**raw, "platform": {k: {**v, "name": k} if isinstance(v, Mapping) else v for k, v in table.items()}}


def parse_platforms(raw: Mapping[str, Any], source: str) -> dict[str, Platform]:
    return dict(validate(raw, PlatformsFile, source).platform)


@functools.cache
def load_platforms() -> Mapping[str, Platform]:
    return MappingProxyType(dict(load_data(PLATFORM_FACTS, PlatformsFile, what="the platform facts").platform))


def platform_of(job: Job) -> Platform:
    return load_platforms()[job.platform]


def host_platform() -> str:
    """This machine's platform, as jobs name it (arm64 is aarch64)."""
    machine = host.machine()
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(machine.lower(), machine)


def cross_target(job: Job) -> Platform | None:
    """The job's platform when this machine must cross-build it; None for a native build."""
    if job.platform == host_platform():
        return None
    return platform_of(job)
