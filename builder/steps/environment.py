"""Per-job environments: the interpreter, a runtime environment holding the job's torch (and nothing else we
add), a build environment with the build tools, and the CUDA toolkit, each checked before anything compiles."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder.core.errors import ToolchainError, WheelwrightError
from builder.core.resources import BUILD_REQUIREMENTS
from builder.core.runner import run
from builder.plan.facts import Accelerator, TorchFacts
from builder.plan.job import Job
from builder.steps.toolchain import Toolchain as Toolkit
from builder.steps.toolchain import ToolkitUnavailable, provide

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
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "torch_site": os.path.dirname(os.path.dirname(torch.__file__)),
    }))
"""


class NotBuildableHere(WheelwrightError):
    """The job's toolkit, interpreter or torch cannot be had on this machine; reported, never attempted."""

    exit_code = 4  # like ToolchainError: something the machine lacks, not something the user typed


@dataclass(frozen=True, kw_only=True)
class RuntimeEnv:
    """Where the job's torch lives: ``site_packages`` holds torch; ``python`` is the base interpreter."""

    python: Path
    site_packages: Path
    torch: str
    system: bool  # the interpreter's own torch (no download), e.g. on a machine with torch preinstalled


@dataclass(frozen=True, kw_only=True)
class BuildEnv:
    python: Path  # a venv with setuptools, wheel, ninja, packaging
    runtime: RuntimeEnv
    toolkit: Toolkit

    @property
    def site_packages(self) -> Path:
        return next(self.python.parent.parent.glob("lib/python3*/site-packages"))


def cache_root() -> Path:
    return Path(os.environ.get("WHEELWRIGHT_CACHE", Path.home() / ".cache" / "wheelwright"))


# -- interpreters -----------------------------------------------------------------------------------------------

def find_pythons(version: str) -> list[Path]:
    """Interpreters of ``version`` (3.11): this one, ``python3.11`` on PATH, pyenv installs; best first."""
    candidates = []
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        base = sys._base_executable  # type: ignore[attr-defined]  # the interpreter a venv was made from
        candidates += [Path(sys.executable), Path(base)]
    on_path = shutil.which(f"python{version}")
    candidates += [Path(on_path)] if on_path else []
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    usable = [c for c in candidates if c.is_file() and os.access(c, os.X_OK) and "shims" not in c.parts]
    if not usable:
        raise NotBuildableHere(f"no Python {version} interpreter on this machine (looked on PATH and in pyenv)")
    return list(dict.fromkeys(usable))


def _is_venv(python: Path) -> bool:
    return (python.parent.parent / "pyvenv.cfg").is_file()


def probe(python: Path) -> dict[str, Any]:
    output = run([python, "-c", _PROBE], step="probe interpreter", capture=True).output
    answer: dict[str, Any] = json.loads(output.splitlines()[-1])
    return answer


# -- torch ------------------------------------------------------------------------------------------------------

def runtime_env(job: Job, facts: TorchFacts) -> RuntimeEnv:
    """The job's torch: the interpreter's own when it matches, else a cached venv holding only torch."""
    pythons = find_pythons(job.python)
    for python in pythons:
        info = probe(python)
        if _matches(info, job):
            return RuntimeEnv(python=python, site_packages=Path(info["torch_site"]), torch=info["torch"], system=True)
    python = next((p for p in pythons if not _is_venv(p)), pythons[-1])
    release = facts.release(job.torch)
    if job.accelerator.kind != "cuda" or job.accelerator.version != release.pypi_cuda:
        raise NotBuildableHere(
            f"torch {job.torch} for {job.accelerator} is published only on PyTorch's own index, which this machine "
            f"cannot reach; the registry wheel of torch {release.minor} is cu{release.pypi_cuda.replace('.', '')}"
        )
    site_packages = installed_torch(job, python)
    return RuntimeEnv(python=python, site_packages=site_packages, torch=job.torch, system=False)


def installed_torch(job: Job, python: Path) -> Path:
    """The job's torch, installed once (``pip install --target``) under ``<cache>/runtime/`` and reused.

    Staged beside its final place and renamed into it, under a lock: concurrent builds and test sessions wait for
    one install, and a killed one leaves no half-installed torch behind.
    """
    runtime = cache_root() / "runtime"
    target = runtime / f"torch-{job.torch}-{job.python_tag}"
    if (target / ".complete").is_file():
        return target
    runtime.mkdir(parents=True, exist_ok=True)
    with (runtime / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=runtime) as tmp:
                staging = Path(tmp) / "site-packages"
                # not --quiet: what pip downloaded and installed belongs in the job's log
                run(
                    [
                        python,
                        "-m",
                        "pip",
                        "install",
                        "--disable-pip-version-check",
                        "--progress-bar",
                        "off",
                        "--target",
                        staging,
                        f"torch=={job.torch}",
                    ],
                    step=f"install torch {job.torch} for Python {job.python}",
                )
                (staging / ".complete").write_text(f"torch=={job.torch} for {job.python_tag}\n")
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    return target


def _matches(info: dict[str, Any], job: Job) -> bool:
    if not info.get("torch"):
        return False
    public = info["torch"].split("+")[0]
    return bool(public == job.torch and info["cuda"] == job.accelerator.version and info["cxx11_abi"] == job.cxx11_abi)


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
    run([*pip, *requirements], step=step)


def build_requirements() -> list[str]:
    """The build venv's pinned tools (builder/data/build-requirements.txt)."""
    return [line for line in BUILD_REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")]


def build_env(job: Job, runtime: RuntimeEnv, toolkit: Toolkit) -> BuildEnv:
    """A venv per Python with the build tools; torch is put on its path per job (see compile.py)."""
    requirements = build_requirements()
    venv = cache_root() / "envs" / f"build-{job.python_tag}"
    _ensure_venv(venv, runtime.python, requirements, step="install build tools")
    return BuildEnv(python=venv / "bin" / "python", runtime=runtime, toolkit=toolkit)


# -- toolkits ---------------------------------------------------------------------------------------------------

def find_toolkit(accelerator: Accelerator, archs: Sequence[str] = ()) -> Toolkit:
    """The toolkit and host compiler for a job of ``accelerator`` and ``archs``, from the toolchain provider
    (builder/data/toolkits.toml), checked."""
    try:
        toolkit = provide(accelerator, archs)
    except ToolkitUnavailable as error:
        raise NotBuildableHere(str(error), tip=error.tip) from None
    check_toolkit(toolkit)
    return toolkit


def toolkit_version(root: Path) -> str | None:
    version_json = root / "version.json"
    if version_json.is_file():
        full = json.loads(version_json.read_text()).get("cuda_nvcc", {}).get("version", "")
        return ".".join(full.split(".")[:2]) or None
    output = run([root / "bin" / "nvcc", "--version"], step="nvcc --version", capture=True, check=False).output
    match = re.search(r"release (\d+\.\d+)", output)
    return match[1] if match else None


def check_toolkit(toolkit: Toolkit) -> None:
    """Fail before compiling, not 40 minutes in: the headers the one .cpp file needs must be there."""
    for relative in ("bin/nvcc", "bin/ptxas", "bin/fatbinary", "include/cuda_runtime_api.h", "include/cuda.h"):
        if not (toolkit.root / relative).exists():
            raise ToolchainError(
                f"CUDA toolkit at {toolkit.root} lacks {relative}",
                tip="point WHEELWRIGHT_CUDA_HOME at a complete toolkit root (the directory holding bin/nvcc)",
            )
