"""Cross-building a job for another CPU platform (aarch64) on this x86_64 machine: its CUDA toolkit (x86 nvcc, cicc,
ptxas: device code does not depend on the host CPU) with the platform's cross g++ as host compiler and linker,
against a Debian sysroot old enough for the job's manylinux policy; the target's torch and CUDA runtime are unpacked
(never imported) as the link's inputs, while an x86_64 torch of the same version runs setup.py. Each part is made
once under ``<cache>/cross/`` by wheelwright itself, as the toolkits are (builder/data/platforms.toml)."""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.core.context import log_note
from builder.core.errors import NotBuildableHere, ToolchainError
from builder.core.resources import CROSS_CC_SCRIPT
from builder.core.runner import run
from builder.core.settings import cache_root
from builder.plan.job import Job
from builder.plan.releases import TorchFacts
from builder.steps.platform import Cross, Platform
from builder.steps.toolchain import Toolchain
from builder.steps.torch_index import (
    TORCH_INDEX,
    TorchMismatch,
    download_torch,
    find_torch_wheel,
    torch_index_template,
)

log = logging.getLogger(__name__)

MAP_ENV = "WHEELWRIGHT_CROSS_MAP"  # read by cross_cc.py: the build's x86_64 paths and their target twins


def cross_root() -> Path:
    return cache_root() / "cross"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    cross_root().mkdir(parents=True, exist_ok=True)
    with open(cross_root() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


@contextmanager
def _made_once(home: Path, marker: str) -> Iterator[Path | None]:
    """Yields a staging folder to fill when ``home`` is not complete (None when it is); the staging folder is then
    renamed into place under a lock, so a killed run leaves nothing half made."""
    done = home / ".complete"
    if done.is_file() and done.read_text() == marker:
        yield None
        return
    with _locked(home.name):
        if done.is_file() and done.read_text() == marker:
            yield None
            return
        home.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{home.name}-", dir=home.parent) as tmp:
            staging = Path(tmp) / home.name
            staging.mkdir()
            yield staging
            (staging / ".complete").write_text(marker)
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)


# -- Debian roots: the sysroot the extension links against, the target CPython -------------------------------------


def debian_root(suite: str, cross: Cross, packages: Sequence[str]) -> Path:
    """A Debian ``suite`` root of the target's architecture with ``packages``, under ``<cache>/cross/roots/``:
    debootstrap's first stage (no target code runs: nothing needs emulating), then every package it fetched unpacked
    with dpkg-deb. Made once."""
    home = cross_root() / "roots" / f"{suite}-{cross.debian_arch}-{_digest(sorted(packages))}"
    marker = f"{suite} {cross.debian_arch} {' '.join(sorted(packages))}\n"
    with _made_once(home, marker) as staging:
        if staging is not None:
            _bootstrap(suite, cross, packages, staging / "root")
    return home / "root"


def _bootstrap(suite: str, cross: Cross, packages: Sequence[str], root: Path) -> None:
    for tool in ("debootstrap", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise NotBuildableHere(f"cross-building for {cross.debian_arch} needs {tool}, which is not on PATH",
                                   tip="scripts/install-system-deps.sh build installs it")
    if os.geteuid() != 0:
        raise NotBuildableHere(f"debootstrap of the {suite} {cross.debian_arch} root needs root",
                               tip="run the build as root once; the root is cached under ~/.cache/wheelwright/cross")
    run(["debootstrap", f"--arch={cross.debian_arch}", "--variant=minbase", "--foreign",
         f"--include={','.join(packages)}", suite, root], step=f"debootstrap {suite} {cross.debian_arch}")
    archives = sorted((root / "var" / "cache" / "apt" / "archives").glob("*.deb"))
    for deb in archives:  # the first stage unpacked only the essential set; the rest waits for a second stage
        run(["dpkg-deb", "-x", deb, root], step=f"unpack {deb.name}")
    for deb in archives:
        deb.unlink()
    log_note(f"{suite} {cross.debian_arch} root: {len(archives)} packages unpacked into {root}")


def sysroot(platform: Platform) -> Path:
    cross = _cross(platform)
    return debian_root(cross.sysroot_suite, cross, cross.sysroot_packages)


def runtime_root(platform: Platform, python: str) -> Path:
    """A root holding the target's CPython ``python`` (its headers, its sysconfig, the interpreter qemu runs)."""
    cross = _cross(platform)
    suite = cross.runtime_suite(python)
    if suite is None:
        known = ", ".join(cross.runtime_suites)
        raise NotBuildableHere(f"no {platform.name} CPython {python} to build against (platforms.toml "
                               f"runtime_suites: {known})")
    return debian_root(suite, cross, cross.packages_for(python))


def _cross(platform: Platform) -> Cross:
    if platform.cross is None:
        raise NotBuildableHere(f"{platform.name} cannot be cross-built here (builder/data/platforms.toml has no "
                               f"[platform.{platform.name}.cross])")
    return platform.cross


# -- the target's CPython: headers and the extension suffix --------------------------------------------------------


def target_sysconfig(root: Path, platform: Platform, python: str) -> dict[str, str]:
    """The target CPython's build variables, read (never imported) from its _sysconfigdata module."""
    path = root / "usr" / "lib" / f"python{python}" / f"_sysconfigdata__{platform.multiarch}.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as error:
        raise ToolchainError(f"{path}: cannot read the target's sysconfig ({error})") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "build_time_vars":
            values = ast.literal_eval(node.value)
            return {key: str(value) for key, value in values.items()}
    raise ToolchainError(f"{path}: no build_time_vars")


def python_include(root: Path, platform: Platform, python: str) -> Path:
    """The target's Python headers as one folder: Debian splits pyconfig.h out by architecture."""
    home = cross_root() / "python" / f"{python}-{platform.name}-{_digest(str(root))}"
    with _made_once(home, f"{root}\n") as staging:
        if staging is not None:
            include = staging / "include" / f"python{python}"
            shutil.copytree(root / "usr" / "include" / f"python{python}", include, symlinks=True)
            shutil.copy2(root / "usr" / "include" / platform.multiarch / f"python{python}" / "pyconfig.h",
                         include / "pyconfig.h")
    return home / "include" / f"python{python}"


# -- the target's torch and CUDA runtime, unpacked ----------------------------------------------------------------


def target_site(job: Job, facts: TorchFacts, cross: Cross) -> Path:
    """The job's torch for the target and its dependencies (the CUDA runtime, headers and libraries), each wheel
    unpacked into one site-packages, never installed: the link's inputs, and what the emulated import loads.

    torch is the wheel the job's index lists for the target (the exact patch release of the job, as for the
    x86_64 twin that runs setup.py: both are pinned by ``job.torch``); its dependencies are what pip resolves for
    the target platform and Python."""
    wheel = find_torch_wheel(job, facts, torch_index_template())
    path, sha256 = download_torch(wheel, job.identifier, cross_root().parent / "torch-wheels")
    home = cross_root() / "sites" / f"torch-{job.torch}-{job.python_tag}-{job.platform}-{sha256[:16]}"
    with _made_once(home, f"{wheel.url} {sha256}\n") as staging:
        if staging is not None:
            wheels = staging / "wheels"
            _download_dependencies(job, cross, path, wheel.index if wheel.origin == TORCH_INDEX else None, wheels)
            for each in sorted(wheels.glob("*.whl")):
                unpack_wheel(each, staging / "site-packages")
            check_target_torch(job, staging / "site-packages")
            shutil.rmtree(wheels)
    return home / "site-packages"


def _download_dependencies(job: Job, cross: Cross, torch: Path, index: str | None, into: Path) -> None:
    platforms = [arg for tag in cross.wheel_platforms(job.platform) for arg in ("--platform", tag)]
    python = job.python.removesuffix("t")
    command: list[str | os.PathLike[str]] = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
        "--only-binary=:all:", *platforms, "--python-version", python, "--implementation", "cp",
        "--abi", job.abi_tag, *(["--index-url", index] if index else []), "--dest", into, torch,
    ]
    run(command, step=f"download torch {job.torch}'s {job.platform} dependencies")


def unpack_wheel(wheel: Path, site: Path) -> None:
    """A wheel's files into ``site`` as an installer lays out purelib/platlib (its .data scripts are not needed)."""
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            name = member.filename
            parts = name.split("/")
            if ".." in parts or name.startswith("/"):
                raise ToolchainError(f"{wheel.name}: member {name!r} leaves the site")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = site.joinpath(*parts)
            if member.is_dir():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target, "wb") as sink:
                shutil.copyfileobj(source, sink)
            if member.external_attr >> 16 & 0o111:
                target.chmod(0o755)


def check_target_torch(job: Job, site: Path) -> None:
    """The unpacked torch must be the job's: the same version and CUDA as its x86_64 twin (torch/version.py)."""
    source = site / "torch" / "version.py"
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError) as error:
        raise TorchMismatch(f"{source}: no readable torch version ({error})") from None
    found = {}
    for node in tree.body:  # `cuda: Optional[str] = '13.0'` is annotated, `__version__ = ...` is not
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    version, cuda = str(found.get("__version__", "")).split("+")[0], str(found.get("cuda"))
    if version != job.torch or cuda != job.accelerator.version:
        raise TorchMismatch(f"the {job.platform} torch unpacked for {job.identifier} is {version} (CUDA {cuda}), "
                            f"the job needs {job.torch} (CUDA {job.accelerator.version})")


# -- the toolchain: a CUDA_HOME for the target, and the cross compiler's wrappers ---------------------------------


def cuda_home(toolkit: Toolchain, platform: Platform, site: Path) -> Path:
    """The toolkit laid out for the target: its own nvcc (a hard link or copy, so nvcc finds this folder as its
    own), its other tools linked, and ``targets/<cuda_target>/`` holding the target's CUDA headers and libraries from
    the unpacked runtime wheels, over the toolkit's architecture-independent headers (CCCL) where they lack one."""
    cross = _cross(platform)
    key = _digest(str(toolkit.root), str(site))
    home = cross_root() / "cuda" / f"{toolkit.source}-{toolkit.cuda}-{platform.name}-{key}"
    with _made_once(home, f"{toolkit.root} {site}\n") as staging:
        if staging is not None:
            lay_cuda_home(toolkit.root, cross.cuda_target, site, staging / "root")
    return home / "root"


def lay_cuda_home(toolkit: Path, target_dir: str, site: Path, root: Path) -> None:
    (root / "bin").mkdir(parents=True)
    real = toolkit.resolve()
    for tool in (real / "bin").iterdir():
        if tool.name == "nvcc":
            try:
                os.link(tool, root / "bin" / "nvcc")
            except OSError:
                shutil.copy2(tool, root / "bin" / "nvcc")
        elif tool.name == "nvcc.profile":
            shutil.copy2(tool, root / "bin" / "nvcc.profile")
        else:
            (root / "bin" / tool.name).symlink_to(tool)
    for entry in ("nvvm",):
        (root / entry).symlink_to(real / entry)
    target = root / "targets" / target_dir
    host_include = next((real / "targets").glob("*/include"))
    prefixes = sorted({p.parent for p in site.glob("nvidia/*/include")})
    merge_trees([host_include, *(p / "include" for p in prefixes)], target / "include")
    merge_trees([p / "lib" for p in prefixes if (p / "lib").is_dir()], target / "lib")
    runtimes = sorted((target / "lib").glob("libcudart.so.*"))
    if runtimes and not (target / "lib" / "libcudart.so").exists():
        (target / "lib" / "libcudart.so").symlink_to(runtimes[0].name)
    (root / "include").symlink_to(Path("targets", target_dir, "include"))
    (root / "lib64").symlink_to(Path("targets", target_dir, "lib"))


def merge_trees(sources: Sequence[Path], destination: Path) -> None:
    """Links to every file of ``sources`` under ``destination``; a later source's file replaces an earlier one's."""
    destination.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for path in sorted(source.rglob("*")):
            if path.is_dir():
                continue
            link = destination / path.relative_to(source)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(path.resolve())


@dataclass(frozen=True, kw_only=True)
class Compilers:
    """The cross compiler's wrapper scripts (named ``<triplet>-gcc`` and ``-g++``) and what they were made for."""

    cc: Path
    cxx: Path
    sysroot: Path


def compilers(platform: Platform, root: Path) -> Compilers:
    """Wrapper scripts around Debian's cross gcc/g++ for ``root`` (the sysroot): cross_cc.py with a config recording
    the sysroot, the include folders of each language without the cross compiler's own glibc, the library folders."""
    cross = _cross(platform)
    real = {tool: shutil.which(f"{cross.triplet}-{tool}") for tool in ("gcc", "g++")}
    missing = [f"{cross.triplet}-{tool}" for tool, path in real.items() if path is None]
    if missing:
        raise NotBuildableHere(f"cross-building for {platform.name} needs {' and '.join(missing)}, not on PATH",
                               tip=f"apt-get install {cross.compiler_package} (scripts/install-system-deps.sh build)")
    # the wrappers exec this interpreter: a cache made by a venv since deleted (an old checkout's) is not this one's
    home = cross_root() / "compilers" / f"{platform.name}-{_digest(str(root), real, sys.executable)}"
    with _made_once(home, f"{root} {real} {sys.executable}\n") as staging:
        if staging is not None:
            _write_compilers(cross, platform, {k: str(v) for k, v in real.items()}, root, staging, home)
    bin_dir = home / "bin"
    return Compilers(cc=bin_dir / f"{cross.triplet}-gcc", cxx=bin_dir / f"{cross.triplet}-g++", sysroot=root)


def _write_compilers(cross: Cross, platform: Platform, real: dict[str, str], root: Path, staging: Path,
                     home: Path) -> None:
    """The config and scripts, written into ``staging`` and naming ``home``, where they are renamed to."""
    libraries = [str(root / "usr" / "lib" / cross.triplet), str(root / "lib" / cross.triplet)]
    config = {
        "compilers": real,
        "sysroot": str(root),
        "includes": {lang: include_folders(real["g++"], root, cross.triplet, lang) for lang in ("c", "c++")},
        "libraries": libraries,
        "page_size": platform.page_size,
    }
    (staging / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    (staging / "bin").mkdir()
    (staging / "cross_cc.py").write_bytes(CROSS_CC_SCRIPT.read_bytes())
    script, settings = home / "cross_cc.py", home / "config.json"
    for tool in ("gcc", "g++"):
        wrapper = staging / "bin" / f"{cross.triplet}-{tool}"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "{settings}" {tool} "$@"\n')
        wrapper.chmod(0o755)


def include_folders(compiler: str, root: Path, triplet: str, language: str) -> list[str]:
    """The compiler's own include search list with ``--sysroot=root``, less its glibc's (``/usr/<triplet>/include``:
    the cross compiler's C library headers, newer than the sysroot's)."""
    output = run([compiler, f"--sysroot={root}", "-E", "-v", "-x", language, os.devnull],
                 step="cross compiler include folders", capture=True).output
    block = output.split("#include <...> search starts here:", 1)[-1].split("End of search list.", 1)[0]
    folders = [os.path.normpath(line.strip()) for line in block.splitlines() if line.strip()]
    own_libc = os.path.normpath(f"/usr/{triplet}/include")
    return [folder for folder in folders if folder != own_libc]


# -- putting it together ------------------------------------------------------------------------------------------


def cross_problem(platform: Platform) -> str | None:
    """Why this machine cannot cross-build for ``platform``, without making anything (the preflight's question):
    the cross compiler, debootstrap and dpkg-deb for the roots, qemu for the import check."""
    if platform.cross is None:
        return f"{platform.name} cannot be cross-built here (no [platform.{platform.name}.cross] in platforms.toml)"
    cross = platform.cross
    tools = (f"{cross.triplet}-g++", "debootstrap", "dpkg-deb", cross.qemu)
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        return (f"cross-building for {platform.name} needs {', '.join(missing)} (scripts/install-system-deps.sh "
                "test installs them)")
    return None


@dataclass(frozen=True, kw_only=True)
class CrossBuild:
    """What a cross-built job compiles and links with, besides its x86_64 build environment."""

    platform: Platform
    toolchain: Toolchain  # the toolkit's target CUDA_HOME, with the wrappers as cc/cxx
    site: Path  # the target's torch and CUDA runtime, unpacked
    python_include: Path
    ext_suffix: str  # from the target's sysconfig: .cpython-311-aarch64-linux-gnu.so
    runtime_root: Path  # the Debian root with the target's CPython (what qemu runs)

    def environ(self, build_site: Path, build_include: str, build_libdir: str) -> dict[str, str]:
        """Environment for the compile: the wrappers as CC/CXX and linker, the target's suffix and wheel platform,
        and the paths cross_cc.py moves from the build's torch and Python to the target's."""
        cc, cxx = str(self.toolchain.cc), str(self.toolchain.cxx)
        mapping = {"map": [[str(build_site), str(self.site)], [build_include, str(self.python_include)]],
                   "drop": [build_libdir]}
        return {
            "CC": cc, "CXX": cxx, "LDSHARED": f"{cc} -shared", "LDCXXSHARED": f"{cxx} -shared",
            "SETUPTOOLS_EXT_SUFFIX": self.ext_suffix,
            "_PYTHON_HOST_PLATFORM": f"linux-{self.platform.name}",  # bdist_wheel's tag: linux_aarch64
            MAP_ENV: json.dumps(mapping),
        }


def prepare(job: Job, toolkit: Toolchain, platform: Platform, facts: TorchFacts) -> CrossBuild:
    """Everything a cross-built job needs beyond its x86_64 environment, each made once and cached."""
    cross = _cross(platform)
    root = sysroot(platform)
    python_root = runtime_root(platform, job.python)
    variables = target_sysconfig(python_root, platform, job.python)
    suffix = variables.get("EXT_SUFFIX", "")
    if suffix != platform.extension_suffix(job.python):
        raise ToolchainError(f"the {platform.name} CPython {job.python} names extensions {suffix!r}, platforms.toml "
                             f"expects {platform.extension_suffix(job.python)!r}")
    site = target_site(job, facts, cross)
    wrappers = compilers(platform, root)
    home = cuda_home(toolkit, platform, site)
    toolchain = dataclasses.replace(toolkit, source=f"{toolkit.source}+{platform.name}", root=home,
                                    cc=wrappers.cc, cxx=wrappers.cxx)
    log_note(f"cross-building for {platform.name}: {toolchain.describe()}, sysroot {root}, target torch {site}")
    return CrossBuild(platform=platform, toolchain=toolchain, site=site,
                      python_include=python_include(python_root, platform, job.python), ext_suffix=suffix,
                      runtime_root=python_root)


def build_paths(python: Path) -> tuple[str, str]:
    """(include folder, library folder) of the interpreter running setup.py: its headers are replaced by the
    target's, its library folder (setuptools links with it) left out."""
    script = "import sysconfig; print(sysconfig.get_paths()['include']); print(sysconfig.get_config_var('LIBDIR'))"
    include, libdir = run([python, "-c", script], step="build interpreter paths", capture=True).output.split()[-2:]
    return include, libdir


def host_twin(job: Job) -> Job:
    """The x86_64 job of the same torch, Python and accelerator: whose torch runs setup.py for a cross build."""
    from builder.steps.platform import host_platform

    return dataclasses.replace(job, platform=host_platform())

