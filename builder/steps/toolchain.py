"""The toolchain provider: resolve a job's CUDA version and archs to a toolkit (builder/data/toolkits.toml), the
host's or one unpacked into the cache, each with the host compiler that toolkit accepts; and say, without providing
anything, whether one can be had here (readiness). Toolkits live side by side under ``<cache>/toolkits/``; nothing
is installed system-wide, so providing one never disturbs another."""

from __future__ import annotations

import fcntl
import functools
import glob
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import BaseModel, BeforeValidator, ConfigDict, InstanceOf, model_validator

from builder.core.data import load_data, validate
from builder.core.errors import ToolchainError
from builder.core.resources import TOOLKITS
from builder.core.runner import APT_DOWNLOAD, APT_UPDATE, PIP_TOOLS, run
from builder.core.settings import cache_root, expand_settings
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch

log = logging.getLogger(__name__)

SOURCE = TOOLKITS.source
KINDS = ("host", "debian", "wheels")
PLATFORMS = ("cuda", "rocm")
_FIELDS = {
    "host": {"roots"},
    "debian": {"suite", "components", "version", "packages"},
    "wheels": {"wheels", "index"},
}
_COMMON = {"name", "kind", "serves"}
# nvcc needs to know which archs it can emit and which gcc it accepts; ROCm's toolkit brings its own clang
_PLATFORM_FIELDS = {"cuda": {"archs", "host_compiler"}, "rocm": set()}
_LISTS = ("roots", "components", "packages", "wheels")
_STRINGS = ("suite", "version", "index", "host_compiler")
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
    platform: str  # cuda or rocm: the toml key that names the release
    release: str  # the toolkit's X.Y; "13.x" (or "x") follows the job's version, as the wheels and a host may
    serves: SpecifierSet  # torch CUDA (ROCm) versions this toolkit builds for
    archs: frozenset[str] = frozenset()  # what its nvcc emits, as Arch.sass spells it: 9.0, 9.0a, 10.0f
    host_compiler: str = ""  # gcc-11, or gcc for the system default; none for ROCm
    roots: tuple[str, ...] = ()
    suite: str = ""
    components: tuple[str, ...] = ()
    version: str = ""
    packages: tuple[str, ...] = ()
    wheels: tuple[str, ...] = ()
    index: str = ""

    @property
    def cuda(self) -> str:
        """The release, as the CUDA sources' messages name it."""
        return self.release

    @property
    def label(self) -> str:
        return "CUDA" if self.platform == "cuda" else "ROCm"

    def toolkit_version(self, accelerator: Accelerator) -> str:
        return accelerator.version if self.release.endswith("x") else self.release

    @property
    def package_names(self) -> tuple[str, ...]:
        return tuple(spec.split("=")[0] for spec in self.packages)


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """A toolkit root (a CUDA_HOME) and the host compiler nvcc must use with it."""

    source: str  # the toolkits.toml source name: host-13, debian-12.4
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


def _source_from(raw: object) -> ToolkitSource:
    """One [[source]] table, checked: its kind and platform decide exactly which keys it has."""
    if not isinstance(raw, Mapping):
        raise ValueError("a [[source]] is a table")  # noqa: TRY004 (pydantic reports a ValueError)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    platforms = [p for p in PLATFORMS if p in raw]
    if len(platforms) != 1:
        raise ValueError(f"name the toolkit's release with one of cuda = or rocm =, got {platforms}")
    platform = platforms[0]
    allowed = _COMMON | _FIELDS[kind] | _PLATFORM_FIELDS[platform] | {platform}
    if set(raw) != allowed:
        raise ValueError(f"a {platform} {kind} source needs exactly the keys {sorted(allowed)}, got {sorted(raw)}")
    try:
        serves = SpecifierSet(raw["serves"])
    except InvalidSpecifier:
        raise ValueError(f"serves = {raw['serves']!r} is not a version specifier like '>=11.6,<12'") from None
    fields: dict[str, Any] = {key: tuple(raw[key]) for key in _LISTS if key in raw}
    fields.update({key: raw[key] for key in _STRINGS if key in raw})
    if "archs" in raw:
        fields["archs"] = _archs(raw["archs"])
    source = ToolkitSource(name=raw["name"], kind=kind, platform=platform, release=raw[platform], serves=serves,
                           **fields)
    if kind == "debian" and f"nvidia-cuda-toolkit={source.version}" not in source.packages:
        raise ValueError(f"packages must pin nvidia-cuda-toolkit={source.version} (its version =)")
    return source


def _archs(raw: list[str]) -> frozenset[str]:
    try:
        archs = [Arch.parse(text) for text in raw]
    except ValueError as error:
        raise ValueError(f"archs: {error}") from None
    spelled = [a for a in archs if a.kind != "cuda" or a.ptx]
    if spelled:
        raise ValueError(f"archs lists what nvcc emits as '9.0', '9.0a' or '10.0f', got {spelled[0]}")
    return frozenset(a.sass for a in archs)


class ToolkitsFile(BaseModel):
    """builder/data/toolkits.toml: one or more [[source]] tables, each name once."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source: tuple[Annotated[InstanceOf[ToolkitSource], BeforeValidator(_source_from)], ...]

    @model_validator(mode="after")
    def _unique_and_some(self) -> ToolkitsFile:
        names = [s.name for s in self.source]
        if not names:
            raise ValueError("expected one or more [[source]] tables")
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be unique, got {names}")
        return self


def parse_sources(raw: Mapping[str, Any], source: str = SOURCE) -> tuple[ToolkitSource, ...]:
    return validate(raw, ToolkitsFile, source).source


@functools.cache
def load_sources() -> tuple[ToolkitSource, ...]:
    return load_data(TOOLKITS, ToolkitsFile, what="the toolkit sources").source


def serving(accelerator: Accelerator, sources: tuple[ToolkitSource, ...] | None = None) -> list[ToolkitSource]:
    """The sources whose range holds the job's version, exact toolkit matches first, then file order."""
    serving = [
        s
        for s in sources or load_sources()
        if s.platform == accelerator.kind and s.serves.contains(accelerator.version, prereleases=True)
    ]
    return sorted(serving, key=lambda s: s.toolkit_version(accelerator) != accelerator.version)


def candidates(
    accelerator: Accelerator, archs: Sequence[Arch] = (), sources: tuple[ToolkitSource, ...] | None = None
) -> list[ToolkitSource]:
    """The serving sources that can also emit every one of the job's ``archs``."""
    return [s for s in serving(accelerator, sources) if arch_problem(s, accelerator, archs) is None]


def arch_problem(source: ToolkitSource, accelerator: Accelerator, archs: Sequence[Arch]) -> str | None:
    """Why ``source``'s toolkit cannot emit the job's ``archs`` ("CUDA 12.4 emits up to sm_90, the job needs
    sm_100"), or None when it can. ROCm's targets are not checked."""
    if source.platform != "cuda":
        return None
    wanted = {arch.sass: arch for arch in archs}  # 9.0 and 9.0+PTX need the same target
    missing = sorted((a for sass, a in wanted.items() if sass not in source.archs), key=lambda a: a.sort_key)
    if not missing:
        return None
    emitted = sorted((Arch.parse(text) for text in source.archs), key=lambda a: a.sort_key)
    lowest, highest = emitted[0], emitted[-1]
    if all(a.sort_key > highest.sort_key for a in missing):
        span = f"up to {_sm(max((a for a in emitted if not a.variant), key=lambda a: a.sort_key))}"
    elif all(a.sort_key < lowest.sort_key for a in missing):
        span = f"from {_sm(lowest)} on"
    else:
        span = f"{_sm(lowest)} to {_sm(highest)} but not all between"
    needs = " and ".join(_sm(a) for a in missing)
    return f"{source.label} {source.toolkit_version(accelerator)} emits {span}, the job needs {needs}"


def _sm(arch: Arch) -> str:
    return f"sm_{arch.number}"


def toolkits_root() -> Path:
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


def host_roots(source: ToolkitSource) -> list[Path]:
    """The folders ``source.roots`` names here, in order: variables expanded (an unset one drops its root), globs
    matched (newest-looking name first)."""
    found: dict[Path, Path] = {}  # resolved -> as named: /usr/local/cuda is often a link to a cuda-X.Y beside it
    for template in source.roots:
        expanded = expand_settings(template)
        if "$" in expanded or not expanded:
            continue
        matches = sorted(glob.glob(expanded), reverse=True) if glob.has_magic(expanded) else [expanded]
        for match in map(Path, matches):
            found.setdefault(match.resolve(), match)
    return list(found.values())


def host_version(source: ToolkitSource, root: Path) -> str | None:
    """The release of the toolkit at ``root``, as it says itself; the one place a host toolkit is asked (for CUDA
    without version.json, by running its nvcc --version)."""
    if source.platform == "rocm":
        info = root / ".info" / "version"
        return info.read_text().strip().split("-")[0] if info.is_file() else None
    return toolkit_version(root) if (root / "bin" / "nvcc").is_file() else None


def toolkit_version(root: Path) -> str | None:
    """The CUDA release (X.Y) of the toolkit at ``root``: its version.json, else what its nvcc --version says."""
    version_json = root / "version.json"
    if version_json.is_file():
        full = json.loads(version_json.read_text()).get("cuda_nvcc", {}).get("version", "")
        return ".".join(full.split(".")[:2]) or None
    output = run([root / "bin" / "nvcc", "--version"], step="nvcc --version", capture=True, check=False).output
    match = re.search(r"release (\d+\.\d+)", output)
    return match[1] if match else None


def _same_release(found: str, wanted: str) -> bool:
    """ROCm 6.2.4 is a ROCm 6.2; CUDA versions are X.Y on both sides."""
    return found == wanted or found.startswith(f"{wanted}.")


def host_lookup(source: ToolkitSource, release: str) -> Path | str:
    """The first of the source's roots that holds ``release``, or the sentence saying what the roots hold."""
    found = []
    for root in host_roots(source):
        version = host_version(source, root)
        if version is not None and _same_release(version, release):
            return root
        found += [f"{source.label} {version} at {root}"] if version else []
    what = f"nvcc {release}" if source.platform == "cuda" else f"ROCm {release} (.info/version)"
    held = f" (found {', '.join(found)})" if found else ""
    return f"{source.name}: no {what} in {', '.join(source.roots)}{held}"


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
        "-o",
        "Acquire::http::Timeout=30",  # connect and idle deadline per mirror (docs/hostile-input.md)
        "-o",
        "Acquire::Retries=3",
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
        run(["apt-get", *options, "update"], step=f"{step}: apt-get update", deadline=APT_UPDATE)
    run(["apt-get", *options, "download", *source.packages], step=f"{step}: apt-get download", cwd=debs,
        deadline=APT_DOWNLOAD)
    found = _downloaded(source, debs)
    if found is None:
        raise ToolchainError(
            f"{step}: apt-get download left no .deb for some of {', '.join(source.package_names)} in {debs}"
        )
    return found


def _downloaded(source: ToolkitSource, debs: Path) -> list[Path] | None:
    """One .deb per package, if all are there (a download is kept across unpack attempts)."""
    found = [sorted(debs.glob(f"{glob.escape(package)}_*.deb")) for package in source.package_names]
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


def _debian_problem(source: ToolkitSource) -> str | None:
    """None when the source's tree is unpacked or can be: apt-get and dpkg-deb are here."""
    if _is_complete(debian_root(source), _marker(source)):
        return None
    missing = [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]
    if not missing:
        return None
    return (
        f"CUDA {source.cuda} ({source.name}) is unpacked from Debian packages, "
        f"but {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not on this machine"
    )


@contextmanager
def _locked(name: str) -> Iterator[None]:
    toolkits_root().mkdir(parents=True, exist_ok=True)
    with open(toolkits_root() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _is_complete(home: Path, marker: str) -> bool:
    return (home / ".complete").is_file() and (home / ".complete").read_text() == marker


def _marker(source: ToolkitSource) -> str:
    # names, not pins: a tree unpacked before the pins were spelled out in toolkits.toml stays valid
    return f"{source.name} {source.version} {' '.join(source.package_names)}\n"


def provide_debian(source: ToolkitSource) -> Path:
    """Debian's toolkit unpacked under ``<cache>/toolkits/<name>/`` once; staged and renamed, under a lock."""
    home = debian_root(source)
    if _is_complete(home, _marker(source)):
        return home / "root"
    problem = _debian_problem(source)
    if problem is not None:
        raise ToolkitUnavailable(problem, tip="use the container path (docs/images.md)")
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


def wheel_requirements(source: ToolkitSource, release: str) -> list[str]:
    """The source's wheels for ``release`` (``{cuda}``, ``{rocm}``), with ``--index-url`` first if it names one."""
    index = expand_settings(source.index)
    return ([f"--index-url={index}"] if index else []) + [w.format(**{source.platform: release}) for w in source.wheels]


def _wheels_home(release: str) -> Path:
    return toolkits_root() / f"wheels-{release}"


def _wheels_problem(source: ToolkitSource, release: str) -> str | None:
    """None when the wheels are installed or pip can install them; ROCm's only with its index configured."""
    if source.platform == "rocm":
        if "$" in expand_settings(source.index) or not expand_settings(source.index):
            return (
                f"{source.name}: ROCm {release}'s rocm[devel] wheels come from AMD's index, which {source.index} "
                "names and this machine has not configured (none reachable from here)"
            )
        return None
    if (_wheels_home(release) / ".complete").is_file():
        return None
    if not _has_pip():
        return f"{source.name}: CUDA {release}'s compiler wheels are installed with pip, which {sys.executable} lacks"
    return None


def _has_pip() -> bool:
    # its metadata, not importlib's finder: setuptools' distutils hook acts (and warns) on a lookup of pip
    try:
        metadata.distribution("pip")
    except metadata.PackageNotFoundError:
        return False
    return True


def provide_wheels(source: ToolkitSource, cuda: str) -> Path:
    """The registry's CUDA ``cuda`` compiler wheels, installed with pip into ``<cache>/toolkits/wheels-<cuda>/``
    and laid out as a CUDA_HOME (each wheel unpacks into site-packages/nvidia/cu13/...)."""
    home = _wheels_home(cuda)
    requirements = wheel_requirements(source, cuda)
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
            deadline=PIP_TOOLS,
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

# wheelwright's recipes and build steps drive nvcc; a ROCm toolkit found or installable is not yet one it can use
_NO_HIP_BUILD = "wheelwright's build compiles with nvcc only, so it cannot build a ROCm job with it yet"


@dataclass(frozen=True, kw_only=True)
class ToolkitReadiness:
    """Whether a job's toolkit can be had here, decided without downloading, unpacking or installing anything."""

    source: str | None  # the toolkits.toml source that would provide the job's toolkit (None: none can)
    cuda: str | None  # that toolkit's version, e.g. "12.4" (a ROCm one for a ROCm job)
    problem: str | None  # None: ready (or obtainable at build time); else ONE sentence saying why not here


def readiness(
    accelerator: Accelerator, archs: Sequence[Arch], sources: tuple[ToolkitSource, ...] | None = None
) -> ToolkitReadiness:
    """Which source would provide the job's toolkit, and why none can if so. Side-effect free: it reads paths and
    PATH, and asks a host toolkit its version (host_version), but starts no download, unpack or install."""
    problems = []
    for source in serving(accelerator, sources):
        release = source.toolkit_version(accelerator)
        problem = arch_problem(source, accelerator, archs) or source_problem(source, release)
        if problem is None:
            return ToolkitReadiness(source=source.name, cuda=release, problem=_platform_problem(source))
        problems.append(problem)
    return ToolkitReadiness(source=None, cuda=None, problem=_none_here(accelerator, problems))


def source_problem(source: ToolkitSource, release: str) -> str | None:
    """Why ``source`` cannot provide ``release`` here (the root, the tools, the host compiler), or None."""
    if source.kind == "host":
        found = host_lookup(source, release)
        where = found if isinstance(found, str) else None
    elif source.kind == "debian":
        where = _debian_problem(source)
    else:
        where = _wheels_problem(source, release)
    return where or _compiler_problem(source)


def _compiler_problem(source: ToolkitSource) -> str | None:
    if source.platform != "cuda":
        return None
    try:
        host_compilers(source)
    except ToolkitUnavailable as error:
        return str(error)
    return None


def _platform_problem(source: ToolkitSource) -> str | None:
    if source.platform == "rocm":
        return f"{source.name} has ROCm here, but {_NO_HIP_BUILD}"
    return None


def _none_here(accelerator: Accelerator, problems: list[str]) -> str:
    if not problems:
        platform = "CUDA" if accelerator.kind == "cuda" else "ROCm"
        return f"no source in {SOURCE} serves {platform} {accelerator.version}"
    # a host and a Debian source of one release say the same about its archs: once is enough
    return f"no toolkit for {accelerator} here: " + "; ".join(dict.fromkeys(problems))


def preflight(
    accelerator: Accelerator, sources: tuple[ToolkitSource, ...] | None = None, archs: Sequence[Arch] = ()
) -> list[str]:
    """One line per serving source: ready here, or what is missing and how it would be had."""
    lines = []
    for source in serving(accelerator, sources):
        release = source.toolkit_version(accelerator)
        state = arch_problem(source, accelerator, archs) or _state(source, release)
        lines.append(f"{source.label} {release} via {source.name}: {state}")
    return lines or [f"no source in {SOURCE} serves {accelerator}"]


def _state(source: ToolkitSource, release: str) -> str:
    compiler = _compiler_state(source)
    if source.kind == "host":
        found = host_lookup(source, release)
        where = f"ready at {found}" if isinstance(found, Path) else f"missing: {found}"
    elif source.kind == "debian":
        where = _debian_state(source)
    else:
        where = _wheels_state(source, release)
    if source.platform == "rocm":
        return f"{where}; {_NO_HIP_BUILD}"
    return f"{where}; {compiler}"


def _debian_state(source: ToolkitSource) -> str:
    if _is_complete(debian_root(source), _marker(source)):
        return f"ready at {debian_root(source) / 'root'}"
    problem = _debian_problem(source)
    if problem is not None:
        return f"missing: {problem}"
    return (
        f"not yet unpacked: apt-get download {', '.join(source.package_names)} ({source.suite} "
        f"{'/'.join(source.components)}, {source.version}) and dpkg-deb -x into {debian_root(source)}"
    )


def _wheels_state(source: ToolkitSource, release: str) -> str:
    if source.platform == "cuda" and (_wheels_home(release) / ".complete").is_file():
        return f"ready at {_wheels_home(release) / 'root'}"
    problem = _wheels_problem(source, release)
    if problem is not None:
        return f"missing: {problem}"
    return f"not yet installed: pip install {shlex.join(wheel_requirements(source, release))}"  # [devel], *: quoted


def _compiler_state(source: ToolkitSource) -> str:
    if source.platform != "cuda":
        return ""
    try:
        _, cxx = host_compilers(source)
    except ToolkitUnavailable as error:
        return f"missing host compiler: {error}"
    return f"host compiler {cxx}"


def provide(
    accelerator: Accelerator, archs: Sequence[Arch] = (), *, sources: tuple[ToolkitSource, ...] | None = None
) -> Toolchain:
    """The toolchain for a job of ``accelerator`` and ``archs``: the first serving source that can emit the archs
    and can be had here."""
    problems = []
    for source in serving(accelerator, sources):
        problem = arch_problem(source, accelerator, archs)
        if problem is None and source.platform == "rocm":  # no ROCm build to provide for: say why not, exactly
            problem = source_problem(source, source.toolkit_version(accelerator)) or _platform_problem(source)
        if problem is not None:
            problems.append(problem)
            continue
        try:
            return _provide_one(source, accelerator)
        except ToolkitUnavailable as error:
            problems.append(str(error))
    raise ToolkitUnavailable(
        _none_here(accelerator, problems), tip="`wheelwright toolkits` lists each source and what it lacks"
    )


def _provide_one(source: ToolkitSource, accelerator: Accelerator) -> Toolchain:
    cc, cxx = host_compilers(source)
    cuda = source.toolkit_version(accelerator)
    if source.kind == "host":
        found = host_lookup(source, cuda)
        if isinstance(found, str):
            raise ToolkitUnavailable(found)
        root = found
    elif source.kind == "debian":
        root = provide_debian(source)
    else:
        root = provide_wheels(source, cuda)
    return Toolchain(source=source.name, cuda=cuda, root=root, cc=cc, cxx=cxx)
