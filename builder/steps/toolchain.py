"""The toolchain provider: resolve a job's CUDA version to a toolkit (builder/data/toolkits.toml), the host's or one
unpacked into the cache, each with the host compiler that toolkit accepts. Toolkits live side by side under
``<cache>/toolkits/``; nothing is installed system-wide, so providing one never disturbs another."""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from builder.core.errors import ConfigError, ToolchainError
from builder.core.runner import run
from builder.plan.facts import Accelerator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

log = logging.getLogger(__name__)

SOURCE = "builder/data/toolkits.toml"
KINDS = ("host", "debian", "wheels")
_FIELDS = {
    "host": {"roots"},
    "debian": {"suite", "components", "version", "packages"},
    "wheels": {"wheels"},
}
_COMMON = {"name", "kind", "cuda", "serves", "host_compiler"}
# The tools a CUDA_HOME needs for torch's extension builder; cuobjdump lets the verify gate read fatbins.
_NVCC_LINKS = ("libcudart_static.a", "libcudadevrt.a", "libculibos.a")
_TOOLS = ("nvcc", "ptxas", "fatbinary", "nvlink", "cudafe++", "bin2c", "cuobjdump", "nvdisasm", "nvprune", "cu++filt")
# nvcc reads nvcc.profile beside its binary; this one describes the standard CUDA_HOME layout we assemble.
_NVCC_PROFILE = """\
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
"""


class ToolkitUnavailable(ToolchainError):
    """No source of toolkits.toml can provide the job's CUDA version on this machine."""


@dataclass(frozen=True, kw_only=True)
class ToolkitSource:
    """One ``[[source]]`` of toolkits.toml."""

    name: str
    kind: str
    cuda: str  # the toolkit's CUDA X.Y; "13.x" for wheels, which follow the job's version
    serves: SpecifierSet  # torch CUDA versions this toolkit builds for
    host_compiler: str  # gcc-11, or gcc for the system default
    roots: tuple[str, ...] = ()
    suite: str = ""
    components: tuple[str, ...] = ()
    version: str = ""
    packages: tuple[str, ...] = ()
    wheels: tuple[str, ...] = ()

    def toolkit_version(self, accelerator: Accelerator) -> str:
        return accelerator.version if self.kind == "wheels" else self.cuda


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """A toolkit root (a CUDA_HOME) and the host compiler nvcc must use with it."""

    source: str  # the toolkits.toml source name: host-13.0, debian-11.8
    cuda: str  # the toolkit's own CUDA version, which may differ from torch's minor (11.8 for cu117)
    root: Path
    cc: Path
    cxx: Path

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    def describe(self) -> str:
        return f"CUDA {self.cuda} ({self.source}, {self.root}) with {self.cxx.name}"

    def as_dict(self) -> dict[str, str]:
        return {
            "source": self.source,
            "cuda": self.cuda,
            "root": str(self.root),
            "cc": str(self.cc),
            "cxx": str(self.cxx),
        }


def _source_from(raw: Mapping[str, Any], where: str) -> ToolkitSource:
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    allowed = _COMMON | _FIELDS[kind]
    if set(raw) != allowed:
        raise ConfigError(f"{where}: a {kind} source needs exactly the keys {sorted(allowed)}, got {sorted(raw)}")
    try:
        serves = SpecifierSet(raw["serves"])
    except InvalidSpecifier:
        raise ConfigError(f"{where}: serves = {raw['serves']!r} is not a version specifier like '>=11.6,<12'") from None
    fields: dict[str, Any] = {
        key: tuple(raw[key]) for key in ("roots", "components", "packages", "wheels") if key in raw
    }
    fields.update({key: raw[key] for key in ("suite", "version") if key in raw})
    return ToolkitSource(
        name=raw["name"],
        kind=kind,
        cuda=raw["cuda"],
        serves=serves,
        host_compiler=raw["host_compiler"],
        **fields,
    )


def parse_sources(raw: Mapping[str, Any], source: str = SOURCE) -> tuple[ToolkitSource, ...]:
    tables = raw.get("source")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(f"{source}: expected one or more [[source]] tables")
    sources = tuple(_source_from(table, f"{source}: source #{index + 1}") for index, table in enumerate(tables))
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: source names must be unique, got {names}")
    return sources


@functools.cache
def load_sources() -> tuple[ToolkitSource, ...]:
    return parse_sources(tomllib.loads(resources.files("builder.data").joinpath("toolkits.toml").read_text()))


def candidates(accelerator: Accelerator, sources: tuple[ToolkitSource, ...] | None = None) -> list[ToolkitSource]:
    """The sources whose range holds the job's CUDA version, exact toolkit matches first."""
    if accelerator.kind != "cuda":
        return []
    serving = [s for s in sources or load_sources() if s.serves.contains(accelerator.version, prereleases=True)]
    return sorted(serving, key=lambda s: s.toolkit_version(accelerator) != accelerator.version)


def toolkits_root() -> Path:
    from builder.steps.environment import cache_root

    return cache_root() / "toolkits"


# -- host compiler ------------------------------------------------------------------------------------------------


def host_compilers(source: ToolkitSource) -> tuple[Path, Path]:
    """(cc, cxx) of the source's host compiler: ``gcc-11`` means gcc-11 and g++-11 on PATH."""
    suffix = source.host_compiler.removeprefix("gcc")
    cc, cxx = shutil.which(f"gcc{suffix}"), shutil.which(f"g++{suffix}")
    if not suffix and os.environ.get("CC") and os.environ.get("CXX"):
        # the default compiler, and the caller chose one: a builder image's clang (gcc 10 lacks C++20 for torch)
        cc, cxx = shutil.which(os.environ["CC"]), shutil.which(os.environ["CXX"])
    if cc is None or cxx is None:
        missing = " and ".join(f"{n}{suffix}" for n, f in (("gcc", cc), ("g++", cxx)) if f is None)
        raise ToolkitUnavailable(
            f"CUDA {source.cuda} ({source.name}) needs the host compiler {missing}, which is not on PATH",
            tip=f"install it (Debian/Ubuntu: apt-get install {'gcc' + suffix} {'g++' + suffix}); "
            "scripts/install-system-deps.sh does",
        )
    return Path(cc), Path(cxx)


# -- host toolkits --------------------------------------------------------------------------------------------------


def _host_root(source: ToolkitSource) -> Path | None:
    from builder.steps.environment import toolkit_version

    for template in source.roots:
        expanded = os.path.expandvars(template)
        if "$" in expanded or not expanded:
            continue
        root = Path(expanded)
        if (root / "bin" / "nvcc").is_file() and toolkit_version(root) == source.cuda:
            return root
    return None


# -- Debian's toolkit ---------------------------------------------------------------------------------------------


def _apt_options(apt: Path) -> list[str]:
    """apt-get options that keep sources, lists and downloads under ``apt``: the system's apt is left alone."""
    return [
        "-o",
        f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/dev/null",
        "-o",
        f"Dir::State::Lists={apt / 'lists'}",
        "-o",
        f"Dir::Cache={apt / 'cache'}",
        "-o",
        "APT::Sandbox::User=root",  # the cache is root's; apt's _apt user cannot write into it
    ]


def _debian_sources_list(source: ToolkitSource) -> str:
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    components = " ".join(source.components)
    return f"deb [signed-by={keyring}] http://deb.debian.org/debian {source.suite} {components}\n"


def debian_root(source: ToolkitSource) -> Path:
    return toolkits_root() / source.name


def _download_debs(source: ToolkitSource, debs: Path) -> list[Path]:
    apt = toolkits_root() / f"apt-{source.suite}"
    for folder in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", debs):
        folder.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(_debian_sources_list(source))
    options = _apt_options(apt)
    step = f"download Debian's CUDA {source.cuda}"
    found = _downloaded(source, debs)
    if found is not None:
        return found
    if not any((apt / "lists").glob("*_InRelease")):
        run(["apt-get", *options, "update"], step=f"{step}: apt-get update")
    wanted = [
        f"{package}={source.version}" if not package.startswith(("libcub", "libthrust", "libcu++")) else package
        for package in source.packages
    ]
    run(["apt-get", *options, "download", *wanted], step=f"{step}: apt-get download", cwd=debs)
    found = _downloaded(source, debs)
    if found is None:
        raise ToolchainError(
            f"{step}: apt-get download left no .deb for some of {', '.join(source.packages)} in {debs}"
        )
    return found


def _downloaded(source: ToolkitSource, debs: Path) -> list[Path] | None:
    """One .deb per package, if all are there (a download is kept across unpack attempts)."""
    found = [sorted(debs.glob(f"{package}_*.deb")) for package in source.packages]
    return None if not all(found) else [matches[0] for matches in found]


def _assemble_cuda_home(tree: Path, root: Path) -> None:
    """Lay Debian's /usr layout out as a CUDA_HOME: bin/, nvvm/, include/ and lib64/ under ``root``."""
    usr = tree / "usr"
    toolkit_bin = usr / "lib" / "nvidia-cuda-toolkit" / "bin"
    (root / "bin").mkdir(parents=True)
    (root / "nvvm" / "bin").mkdir(parents=True)
    # Debian's /usr/bin/nvcc is built to find its profile in /etc; the one under lib/ reads it beside itself
    os.link(toolkit_bin / "nvcc", root / "bin" / "nvcc")
    for tool in _TOOLS[1:]:
        os.link(usr / "bin" / tool, root / "bin" / tool)
    shutil.copytree(toolkit_bin / "crt", root / "bin" / "crt")
    (root / "bin" / "nvcc.profile").write_text(_NVCC_PROFILE)
    os.link(toolkit_bin / "cicc", root / "nvvm" / "bin" / "cicc")
    # relative links (root/ and tree/ are siblings): the staging folder is renamed into place afterwards
    (root / "nvvm" / "libdevice").symlink_to(Path("..", "..", "tree", "usr", "lib", "nvidia-cuda-toolkit", "libdevice"))
    (root / "include").symlink_to(Path("..", "tree", "usr", "include"))
    (root / "lib64").symlink_to(Path("..", "tree", "usr", "lib", "x86_64-linux-gnu"))


def _unpack(debs: list[Path], tree: Path) -> None:
    tree.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", deb, tree], step=f"unpack {deb.name}")
    # static libraries (2.7 GB of cuBLAS, cuFFT, ...) are never linked by a torch extension; nvcc itself links
    # the CUDA runtime's own (cudart_static, cudadevrt) when it links
    for archive in tree.glob("usr/lib/x86_64-linux-gnu/*.a"):
        if archive.name not in _NVCC_LINKS:
            archive.unlink()
    shutil.rmtree(tree / "usr" / "share" / "doc", ignore_errors=True)


@contextmanager
def _locked(name: str) -> Iterator[None]:
    toolkits_root().mkdir(parents=True, exist_ok=True)
    with open(toolkits_root() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _is_complete(home: Path, marker: str) -> bool:
    return (home / ".complete").is_file() and (home / ".complete").read_text() == marker


def _marker(source: ToolkitSource) -> str:
    return f"{source.name} {source.version} {' '.join(source.packages)}\n"


def provide_debian(source: ToolkitSource) -> Path:
    """Debian's toolkit unpacked under ``<cache>/toolkits/<name>/`` once; staged and renamed, under a lock."""
    home = debian_root(source)
    if _is_complete(home, _marker(source)):
        return home / "root"
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ToolkitUnavailable(
                f"CUDA {source.cuda} ({source.name}) is unpacked from Debian packages, "
                f"but {tool} is not on this machine",
                tip="use the container path (README)",
            )
    with _locked(source.name):
        if not _is_complete(home, _marker(source)):
            debs = _download_debs(source, toolkits_root() / "debs" / source.name)
            with tempfile.TemporaryDirectory(prefix=f".{source.name}-", dir=toolkits_root()) as tmp:
                staging = Path(tmp) / source.name
                _unpack(debs, staging / "tree")
                _assemble_cuda_home(staging / "tree", staging / "root")
                (staging / ".complete").write_text(_marker(source))
                shutil.rmtree(home, ignore_errors=True)
                staging.rename(home)
    return home / "root"


# -- the registry's compiler wheels ----------------------------------------------------------------------------------


def provide_wheels(source: ToolkitSource, cuda: str) -> Path:
    """The registry's CUDA ``cuda`` compiler wheels, installed with pip into ``<cache>/toolkits/wheels-<cuda>/``
    and laid out as a CUDA_HOME (each wheel unpacks into site-packages/nvidia/cu13/...)."""
    home = toolkits_root() / f"wheels-{cuda}"
    requirements = [w.format(cuda=cuda) for w in source.wheels]
    marker = "\n".join(requirements) + "\n"
    if (home / ".complete").is_file() and (home / ".complete").read_text() == marker:
        return home / "root"
    with _locked(home.name), tempfile.TemporaryDirectory(prefix=f".{home.name}-", dir=toolkits_root()) as tmp:
        staging = Path(tmp) / home.name
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                staging / "site",
                *requirements,
            ],
            step=f"install CUDA {cuda} compiler wheels",
        )
        _assemble_wheel_home(staging / "site", staging / "root")
        (staging / ".complete").write_text(marker)
        shutil.rmtree(home, ignore_errors=True)
        staging.rename(home)
    return home / "root"


def _assemble_wheel_home(site: Path, root: Path) -> None:
    """The wheels share one prefix (nvidia/cu13/{bin,include,lib,nvvm}); link it as the CUDA_HOME."""
    prefixes = sorted({p.parent.parent for p in site.glob("nvidia/*/bin/nvcc")})
    if len(prefixes) != 1:
        raise ToolchainError(f"the CUDA compiler wheels in {site} hold {len(prefixes)} bin/nvcc, expected one")
    prefix = prefixes[0]
    if not (prefix / "lib64").exists() and (prefix / "lib").is_dir():
        (prefix / "lib64").symlink_to("lib")
    # the runtime wheel ships only the versioned libcudart.so.13; extensions link with -lcudart
    runtimes = sorted((prefix / "lib").glob("libcudart.so.*"))
    if runtimes and not (prefix / "lib" / "libcudart.so").exists():
        (prefix / "lib" / "libcudart.so").symlink_to(runtimes[0].name)
    root.symlink_to(os.path.relpath(prefix, root.parent))  # relative: the staging folder is renamed into place


# -- resolution --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ToolkitReadiness:
    source: str | None
    cuda: str | None
    problem: str | None


def readiness(accelerator: Accelerator, archs: Sequence[str],
              sources: tuple[ToolkitSource, ...] | None = None) -> ToolkitReadiness:
    """Whether a job's toolkit can be had here, from what is on this machine: nothing is fetched."""
    problems = []
    for source in candidates(accelerator, sources):
        cuda = source.toolkit_version(accelerator)
        state = _readiness(source, cuda)
        if "missing" not in state:
            return ToolkitReadiness(source=source.name, cuda=cuda, problem=None)
        problems.append(f"{source.name}: {state}")
    return ToolkitReadiness(source=None, cuda=None, problem=f"no toolkit for {accelerator} here: "
                            + ("; ".join(problems) or f"no source in {SOURCE} serves it"))


def preflight(accelerator: Accelerator, sources: tuple[ToolkitSource, ...] | None = None) -> list[str]:
    """One line per candidate source: ready here, or what is missing and how it would be had."""
    lines = []
    for source in candidates(accelerator, sources):
        cuda = source.toolkit_version(accelerator)
        lines.append(f"CUDA {cuda} via {source.name}: {_readiness(source, cuda)}")
    return lines or [f"no source in {SOURCE} serves {accelerator}"]


def _readiness(source: ToolkitSource, cuda: str) -> str:
    compiler = _compiler_state(source)
    if source.kind == "host":
        root = _host_root(source)
        where = f"ready at {root}" if root else f"missing: no nvcc {cuda} in {', '.join(source.roots)}"
        return f"{where}; {compiler}"
    if source.kind == "debian":
        if (debian_root(source) / ".complete").is_file():
            return f"ready at {debian_root(source) / 'root'}; {compiler}"
        return (
            f"not yet unpacked: apt-get download {', '.join(source.packages)} ({source.suite} "
            f"{'/'.join(source.components)}, {source.version}) and dpkg-deb -x into {debian_root(source)}; {compiler}"
        )
    home = toolkits_root() / f"wheels-{cuda}"
    if (home / ".complete").is_file():
        return f"ready at {home / 'root'}; {compiler}"
    return f"not yet installed: pip install {' '.join(w.format(cuda=cuda) for w in source.wheels)}; {compiler}"


def _compiler_state(source: ToolkitSource) -> str:
    try:
        _, cxx = host_compilers(source)
    except ToolkitUnavailable as error:
        return f"missing host compiler: {error}"
    return f"host compiler {cxx}"


def provide(accelerator: Accelerator, *, sources: tuple[ToolkitSource, ...] | None = None) -> Toolchain:
    """The toolchain for a job of ``accelerator``: the first candidate source that can be had here."""
    problems = []
    for source in candidates(accelerator, sources):
        try:
            return _provide_one(source, accelerator)
        except ToolkitUnavailable as error:
            problems.append(str(error))
    if accelerator.kind != "cuda":
        raise ToolkitUnavailable(f"no {accelerator} toolkit source in {SOURCE} (ROCm is not provisioned here)")
    raise ToolkitUnavailable(
        f"no toolkit for {accelerator}: "
        + ("; ".join(problems) or f"no source in {SOURCE} serves CUDA {accelerator.version}"),
        tip="`wheelwright toolkits` lists each source and what it lacks",
    )


def _provide_one(source: ToolkitSource, accelerator: Accelerator) -> Toolchain:
    cc, cxx = host_compilers(source)
    cuda = source.toolkit_version(accelerator)
    if source.kind == "host":
        root = _host_root(source)
        if root is None:
            raise ToolkitUnavailable(f"{source.name}: no nvcc {cuda} in {', '.join(source.roots)}")
    elif source.kind == "debian":
        root = provide_debian(source)
    else:
        root = provide_wheels(source, cuda)
    return Toolchain(source=source.name, cuda=cuda, root=root, cc=cc, cxx=cxx)
