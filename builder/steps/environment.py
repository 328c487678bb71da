"""Per-job environments: the interpreter, a runtime environment holding the job's torch (and nothing else we
add), a build environment with the build tools, and the CUDA toolkit, each checked before anything compiles."""

from __future__ import annotations

import ast
import dataclasses
import fcntl
import json
import logging
import os
import re
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.archive import FOREIGN, open_archive
from builder.core.context import log_note
from builder.core.errors import NotBuildableHere, ToolchainError, WheelError
from builder.core.resources import BUILD_REQUIREMENTS
from builder.core.runner import PIP_TOOLS, PIP_TORCH, run
from builder.core.settings import cache_root
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.plan.job import Job
from builder.plan.releases import TorchFacts
from builder.steps.toolchain import Toolchain as Toolkit
from builder.steps.toolchain import ToolkitUnavailable, provide
from builder.steps.torch_index import (
    TORCH_INDEX,
    TORCH_INDEX_ENV,
    TorchMismatch,
    TorchWheel,
    download_torch,
    find_torch_wheel,
    torch_index_template,
)

log = logging.getLogger(__name__)

# What an interpreter's own torch is, if it has one (one JSON line).
_PROBE = """
import json, os
try:
    import torch
except ImportError:
    print(json.dumps({"torch": None}))
else:
    print(json.dumps({
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "torch_site": os.path.dirname(os.path.dirname(torch.__file__)),
    }))
"""


@dataclass(frozen=True, kw_only=True)
class RuntimeEnv:
    """Where the job's torch lives: ``site_packages`` holds torch; ``python`` is the base interpreter."""

    python: Path
    site_packages: Path
    torch: str
    system: bool  # the interpreter's own torch (no download), e.g. on a machine with torch preinstalled
    wheel: TorchWheel | None = None  # where a cached torch came from (None: the interpreter's own)

    def origin(self) -> dict[str, str | None]:
        """Where this torch came from, as the ledger and the provenance record it."""
        if self.wheel is None:
            return {"origin": "interpreter", "python": str(self.python), "torch": self.torch}
        return self.wheel.as_dict()


@dataclass(frozen=True, kw_only=True)
class BuildEnv:
    python: Path  # a venv with setuptools, wheel, ninja, packaging
    runtime: RuntimeEnv
    toolkit: Toolkit

    @property
    def site_packages(self) -> Path:
        return next(self.python.parent.parent.glob("lib/python3*/site-packages"))


# -- interpreters -----------------------------------------------------------------------------------------------

def find_pythons(version: str) -> list[Path]:
    """Interpreters of ``version`` (3.11, or the free-threaded 3.13t): this one, ``python3.11`` on PATH, pyenv
    installs (``3.11.*``; ``3.13.*t`` for 3.13t, which an ordinary 3.13 never stands in for); best first."""
    candidates = []
    free_threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    if f"{sys.version_info.major}.{sys.version_info.minor}{free_threaded}" == version:
        base = sys._base_executable  # type: ignore[attr-defined]  # the interpreter a venv was made from
        candidates += [Path(sys.executable), Path(base)]
    on_path = shutil.which(f"python{version}")
    candidates += [Path(on_path)] if on_path else []
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    minor = version.removesuffix("t")
    suffix = version[len(minor) :]
    installs = [
        d for d in pyenv_root.glob(f"versions/{minor}.*") if re.fullmatch(rf"{re.escape(minor)}\.\d+{suffix}", d.name)
    ]
    candidates += sorted((d / "bin" / f"python{version}" for d in installs), reverse=True)
    usable = [c for c in candidates if c.is_file() and os.access(c, os.X_OK) and "shims" not in c.parts]
    if not usable:
        where = f"python{version} on PATH, pyenv {minor}.*{suffix}"
        kind = "free-threaded " if suffix else ""
        raise NotBuildableHere(f"no {kind}Python {version} interpreter on this machine (looked for {where})")
    return list(dict.fromkeys(usable))


def _is_venv(python: Path) -> bool:
    return (python.parent.parent / "pyvenv.cfg").is_file()


def probe(python: Path) -> dict[str, Any]:
    output = run([python, "-c", _PROBE], step="probe interpreter", capture=True).output
    answer: dict[str, Any] = json.loads(output.splitlines()[-1])
    return answer


# -- torch ------------------------------------------------------------------------------------------------------

def runtime_env(job: Job, facts: TorchFacts, torch_index: str | None = None) -> RuntimeEnv:
    """The job's torch: the interpreter's own when it matches, else a cached folder holding only the torch wheel
    that ``torch_index`` (a template, see builder/steps/torch_index.py) lists for the job, and its dependencies."""
    pythons = find_pythons(job.python)
    for python in pythons:
        info = probe(python)
        if _matches(info, job):
            return RuntimeEnv(python=python, site_packages=Path(info["torch_site"]), torch=info["torch"], system=True)
    python = next((p for p in pythons if not _is_venv(p)), pythons[-1])
    wheel = find_torch_wheel(job, facts, torch_index or torch_index_template())
    site_packages, sha256 = installed_torch(job, python, wheel)
    return RuntimeEnv(python=python, site_packages=site_packages, torch=job.torch, system=False,
                      wheel=dataclasses.replace(wheel, sha256=sha256))


def installed_torch(job: Job, python: Path, wheel: TorchWheel) -> tuple[Path, str]:
    """The job's torch, installed once (``pip install --target``) under ``<cache>/runtime/`` and reused; the folder
    is keyed by the wheel's sha256, so two variants (or two mirrors' differing bytes) of one torch never share it.

    Staged beside its final place, checked (its version, CUDA and ABI must be the job's) and renamed into it, under a
    lock: concurrent builds and test sessions wait for one install, and a killed one leaves no half-installed torch.
    """
    path, sha256 = download_torch(wheel, job.identifier, cache_root() / "torch-wheels")
    runtime = cache_root() / "runtime"
    target = runtime / f"torch-{job.torch}-{job.python_tag}-{sha256[:16]}"
    if (target / ".complete").is_file():
        return target, sha256
    runtime.mkdir(parents=True, exist_ok=True)
    with (runtime / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=runtime) as tmp:
                staging = Path(tmp) / "site-packages"
                check_torch_wheel(job, path, wheel)
                _pip_install_torch(job, python, path, wheel, staging)
                check_torch(job, python, staging, wheel)
                (staging / ".complete").write_text(json.dumps(wheel.as_dict() | {"sha256": sha256}) + "\n")
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    return target, sha256


def _pip_install_torch(job: Job, python: Path, path: Path, wheel: TorchWheel, staging: Path) -> None:
    """pip installs the downloaded wheel with its dependencies as a user of its index would get them: from the
    torch index (which hosts them, as PyTorch's does), or from pip's own configuration for the registry's wheel."""
    index = ["--index-url", wheel.index] if wheel.origin == TORCH_INDEX else []
    # not --quiet: what pip downloaded and installed belongs in the job's log
    command: list[str | os.PathLike[str]] = [
        python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *index,
        "--target", staging, path,
    ]
    run(command, step=f"install torch {job.torch} for Python {job.python}", deadline=PIP_TORCH)


def check_torch(job: Job, python: Path, site: Path, wheel: TorchWheel) -> None:
    """The installed torch must be the job's: its version, its CUDA (or HIP) and its C++ ABI."""
    output = run([python, "-c", _PROBE], step="check the installed torch", capture=True,
                 env={**os.environ, "PYTHONPATH": str(site)}).output
    info: dict[str, Any] = json.loads(output.splitlines()[-1])
    _compare(job, info, wheel)
    log_note(f"checked {_describe(info)} from {wheel.url}")


def check_torch_wheel(job: Job, path: Path, wheel: TorchWheel) -> None:
    """Before anything is installed: the wheel's own ``torch/version.py`` must name the job's version and CUDA (or
    HIP), so a mirror serving another variant costs one download, not the install of its dependencies."""
    try:
        with open_archive(path, FOREIGN, where=path.name) as archive:
            source = archive.read("torch/version.py")
        tree = ast.parse(source)
    except (WheelError, SyntaxError, ValueError) as error:
        raise TorchMismatch(f"{wheel.url} served no readable torch wheel: {error}") from None
    info: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            info[{"__version__": "torch"}.get(target.id, target.id)] = value.value
    _compare(job, info, wheel)


def _compare(job: Job, info: dict[str, Any], wheel: TorchWheel) -> None:
    if not _matches(info, job):
        wanted = {"torch": job.torch, job.accelerator.kind: job.accelerator.version, "cxx11_abi": job.cxx11_abi}
        raise TorchMismatch(
            f"{wheel.url} served {_describe(info)}, but {job.identifier} needs {_describe(wanted)}",
            tip=f"point {TORCH_INDEX_ENV} at an index of the job's variant ({job.accelerator})",
        )


def _describe(info: dict[str, Any]) -> str:
    labels = {"cuda": "CUDA", "hip": "HIP", "rocm": "ROCm"}
    accelerators = ", ".join(f"{label} {info[key]}" for key, label in labels.items() if info.get(key))
    abi = info.get("cxx11_abi")
    abi_text = "" if abi is None else (", cxx11 ABI" if abi else ", pre-cxx11 ABI")
    return f"torch {info.get('torch')} ({accelerators or 'no GPU'}{abi_text})"


def _matches(info: dict[str, Any], job: Job) -> bool:
    """``info`` (a probe's, or a wheel's version.py, which says nothing of the ABI) describes the job's torch."""
    if not info.get("torch"):
        return False
    public = str(info["torch"]).split("+")[0]
    accelerator = info.get("cuda") if job.accelerator.kind == "cuda" else _hip_minor(info.get("hip"))
    abi = info.get("cxx11_abi", job.cxx11_abi)
    return bool(public == job.torch and accelerator == job.accelerator.version and abi == job.cxx11_abi)


def _hip_minor(hip: str | None) -> str | None:
    """torch.version.hip reads '6.2.41133-dd7f95766'; ROCm variants are named by their first two or three parts."""
    return ".".join(hip.split("-")[0].split(".")[:2]) if hip else None


def _ensure_venv(venv: Path, python: Path, requirements: list[str], *, step: str) -> None:
    """Create ``venv`` with ``requirements`` once; a marker written last makes an interrupted install redo. Under a
    lock: builds sharing the cache (the jobs of one build, or several builds at once) would otherwise remove and
    refill the same venv under each other's pip."""
    marker = venv / ".wheelwright-complete"
    wanted = "\n".join(requirements)
    if marker.is_file() and marker.read_text() == wanted:
        return
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f"{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (marker.is_file() and marker.read_text() == wanted):  # another holder may have made it meanwhile
            _create_venv(venv, python, requirements, step=step)
            marker.write_text(wanted)


def _create_venv(venv: Path, python: Path, requirements: list[str], *, step: str) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    # --without-pip + our own pip pointed at it: works where the interpreter has no ensurepip (Debian's python3)
    run([python, "-m", "venv", "--without-pip", venv], step=f"{step}: create venv")
    pip: list[str | os.PathLike[str]] = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv / "bin" / "python",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    run([*pip, *requirements], step=step, deadline=PIP_TOOLS)


def build_requirements() -> list[str]:
    """The build venv's pinned tools (builder/data/build-requirements.txt)."""
    return [line for line in BUILD_REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")]


def build_env(job: Job, runtime: RuntimeEnv, toolkit: Toolkit) -> BuildEnv:
    """A venv per Python with the build tools; torch is put on its path per job (see compilation.py)."""
    requirements = build_requirements()
    venv = cache_root() / "envs" / f"build-{job.python_tag}"
    _ensure_venv(venv, runtime.python, requirements, step="install build tools")
    return BuildEnv(python=venv / "bin" / "python", runtime=runtime, toolkit=toolkit)


# -- toolkits ---------------------------------------------------------------------------------------------------

def find_toolkit(accelerator: Accelerator, archs: Sequence[Arch] = ()) -> Toolkit:
    """The toolkit and host compiler for a job of ``accelerator`` and ``archs``, from the toolchain provider
    (builder/data/toolkits.toml), checked."""
    try:
        toolkit = provide(accelerator, archs)
    except ToolkitUnavailable as error:
        raise NotBuildableHere(str(error), tip=error.tip) from None
    check_toolkit(toolkit)
    return toolkit


def check_toolkit(toolkit: Toolkit) -> None:
    """Fail before compiling, not 40 minutes in: the headers the one .cpp file needs must be there."""
    for relative in ("bin/nvcc", "bin/ptxas", "bin/fatbinary", "include/cuda_runtime_api.h", "include/cuda.h"):
        if not (toolkit.root / relative).exists():
            raise ToolchainError(
                f"CUDA toolkit at {toolkit.root} lacks {relative}",
                tip="point WHEELWRIGHT_CUDA_HOME at a complete toolkit root (the directory holding bin/nvcc)",
            )
