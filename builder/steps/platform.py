"""The CPU platforms of builder/data/platforms.toml as frozen dataclasses: what a platform means in bytes (e_machine,
extension suffix, page size) and, for one this machine cross-builds, where its compiler, sysroot and CPython come
from. Checked on load: every platform of the plan is described, and a cross target names all it needs."""

from __future__ import annotations

import functools
import platform as host
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from builder.core.errors import ConfigError
from builder.core.files import read_toml
from builder.core.resources import PLATFORM_FACTS
from builder.plan.facts import PLATFORMS
from builder.plan.job import Job

_CROSS_KEYS = ("triplet", "compiler_package", "debian_arch", "cuda_target", "qemu", "emulated_midr", "glibc",
               "sysroot_suite", "sysroot_packages", "runtime_packages", "runtime_suites")


@dataclass(frozen=True, kw_only=True)
class Cross:
    """How this x86_64 machine builds for the platform (builder/data/platforms.toml, [platform.X.cross])."""

    triplet: str  # aarch64-linux-gnu: the cross compiler is <triplet>-gcc / <triplet>-g++
    compiler_package: str
    debian_arch: str
    cuda_target: str  # nvcc's targets/<dir> for this host compiler
    qemu: str
    emulated_midr: int  # MIDR_EL1 of the CPU the emulated CPython is shown (/proc/cpuinfo, sysfs)
    glibc: str  # the newest manylinux_2_X whose wheels (torch's) the target accepts
    sysroot_suite: str
    sysroot_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]  # with {python}: python3.11, libpython3.11-dev
    runtime_suites: Mapping[str, str]  # CPython X.Y -> the Debian suite that ships it

    def runtime_suite(self, python: str) -> str | None:
        return self.runtime_suites.get(python)

    def packages_for(self, python: str) -> tuple[str, ...]:
        return tuple(p.format(python=python) for p in self.runtime_packages)

    def wheel_platforms(self, machine: str) -> tuple[str, ...]:
        """The platform tags a target CPython installs, best first: manylinux_2_28 down to 2_17, manylinux2014."""
        major, minor = (int(part) for part in self.glibc.split("."))
        tags = [f"manylinux_{major}_{m}_{machine}" for m in range(minor, 16, -1)]
        return (*tags, f"manylinux2014_{machine}")


@dataclass(frozen=True, kw_only=True)
class Platform:
    name: str  # x86_64, aarch64
    elf_machine: int
    multiarch: str
    page_size: int
    cross: Cross | None = field(default=None)

    def extension_suffix(self, python: str) -> str:
        """What the target's sysconfig names an extension module: ``.cpython-311-aarch64-linux-gnu.so``."""
        return f".cpython-{python.replace('.', '')}-{self.multiarch}.so"


def _cross(raw: Mapping[str, Any], where: str) -> Cross:
    missing = [key for key in _CROSS_KEYS if key not in raw]
    unknown = [key for key in raw if key not in _CROSS_KEYS]
    if missing or unknown:
        raise ConfigError(f"{where}: missing {missing or 'nothing'}, unknown {unknown or 'nothing'}")
    if not re.fullmatch(r"\d+\.\d+", str(raw["glibc"])):
        raise ConfigError(f"{where}: glibc {raw['glibc']!r} is not a version like '2.28'")
    return Cross(
        triplet=str(raw["triplet"]), compiler_package=str(raw["compiler_package"]),
        debian_arch=str(raw["debian_arch"]), cuda_target=str(raw["cuda_target"]), qemu=str(raw["qemu"]),
        emulated_midr=int(str(raw["emulated_midr"]), 16),
        glibc=str(raw["glibc"]), sysroot_suite=str(raw["sysroot_suite"]),
        sysroot_packages=tuple(map(str, raw["sysroot_packages"])),
        runtime_packages=tuple(map(str, raw["runtime_packages"])),
        runtime_suites=MappingProxyType({str(k): str(v) for k, v in dict(raw["runtime_suites"]).items()}),
    )


def parse_platforms(raw: Mapping[str, Any], source: str) -> dict[str, Platform]:
    table = raw.get("platform")
    if not isinstance(table, dict) or set(table) != set(PLATFORMS):
        found = sorted(table) if isinstance(table, dict) else table
        raise ConfigError(f"{source}: [platform.*] must describe exactly {', '.join(PLATFORMS)}, found {found}")
    platforms = {}
    for name, entry in table.items():
        where = f"{source}: [platform.{name}]"
        try:
            cross = _cross(entry["cross"], f"{where}.cross") if "cross" in entry else None
            platforms[name] = Platform(name=name, elf_machine=int(entry["elf_machine"]),
                                       multiarch=str(entry["multiarch"]), page_size=int(entry["page_size"]),
                                       cross=cross)
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"{where}: {error}") from None
        if platforms[name].page_size & (platforms[name].page_size - 1):
            raise ConfigError(f"{where}: page_size {platforms[name].page_size} is not a power of two")
    return platforms


@functools.cache
def load_platforms() -> Mapping[str, Platform]:
    raw = read_toml(PLATFORM_FACTS, what="the platform facts", error=ConfigError)
    return MappingProxyType(parse_platforms(raw, PLATFORM_FACTS.source))


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
