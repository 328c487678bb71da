"""Reading a Python environment: its interpreter, glibc and libstdc++, torch, the GPUs and driver, and the installed
extension packages with what their compiled modules carry and need.

Everything about the target interpreter is asked in a child process of that interpreter, with a timeout:
importing torch or initialising CUDA can hang or crash, and doctor must still answer. The result is one
``Environment``, plain data that ``--json`` writes and the tests replay.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from builder.core.elfread import ElfFile, is_elf
from builder.core.errors import WheelError
from builder.core.fatbin import arch_key, elf_fatbin
from builder.doctor.labels import PACKAGES, highest
from builder.doctor.symbolcheck import extension_built_for, installed_torch_exports, missing_from

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 60.0  # importing torch from a cold disk takes a while; CUDA init that hangs takes forever
GPU_TIMEOUT = 30.0
SCHEMA = 1

_PYTHON_PROBE = r"""
import ctypes, json, os, platform, sys, sysconfig
try:
    ctypes.CDLL("libstdc++.so.6")
except OSError:
    pass
with open("/proc/self/maps") as maps:
    libstdcxx = next((l.split()[-1] for l in maps if "libstdc++.so" in l and "/" in l), None)
libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else None
print(json.dumps({
    "python": platform.python_version(),
    "python_tag": ("cp" if sys.implementation.name == "cpython" else "pp") + "%d%d" % sys.version_info[:2]
        + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""),
    "executable": sys.executable,
    "machine": platform.machine(),
    "glibc": libc.split()[-1] if libc and libc.startswith("glibc") else None,
    "libstdcxx_path": libstdcxx,
}))
"""

_TORCH_PROBE = r"""
import json
try:
    import torch
except BaseException as error:
    print(json.dumps({"error": "%s: %s" % (type(error).__name__, error)}))
    raise SystemExit(0)
with open("/proc/self/maps") as maps:
    libstdcxx = next((l.split()[-1] for l in maps if "libstdc++.so" in l and "/" in l), None)
print(json.dumps({
    "version": torch.__version__,
    "cuda": torch.version.cuda,
    "hip": getattr(torch.version, "hip", None),
    "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    "libstdcxx_path": libstdcxx,
}))
"""

_TORCH_GPU_PROBE = r"""
import json, torch
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
driver = getattr(torch._C, "_cuda_getDriverVersion", lambda: 0)() if torch.version.cuda and count else 0
print(json.dumps({
    "gpus": [{"name": torch.cuda.get_device_name(i), "arch": "%d.%d" % torch.cuda.get_device_capability(i)}
             for i in range(count)],
    "driver_cuda": "%d.%d" % (driver // 1000, driver % 1000 // 10) if driver else None,
}))
"""

_DISTRIBUTIONS_PROBE = r"""
import json, sys
from importlib import metadata
found = []
for name in sys.argv[1:]:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    files = [str(dist.locate_file(f)) for f in dist.files or () if ".so" in f.name]
    installer = (dist.read_text("INSTALLER") or "").strip() or None
    found.append({"name": name, "version": dist.version, "requires": dist.requires or [], "files": files,
                  "root": str(dist.locate_file("")),
                  "installer": installer, "direct_url": dist.read_text("direct_url.json")})
print(json.dumps(found))
"""

# Where torch is installed, without importing it (a top-level package's spec does not run its __init__).
_TORCH_LIB_PROBE = r"""
import importlib.util, json
spec = importlib.util.find_spec("torch")
print(json.dumps(list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None))
"""

# torch first, as users do: an extension's undefined c10 symbols resolve against the torch already loaded.
_IMPORT_PROBE = r"""
import importlib, sys
import torch
importlib.import_module(sys.argv[1])
"""


@dataclass(frozen=True)
class Torch:
    version: str | None = None  # "2.14.1+cu130"
    cuda: str | None = None  # "13.0"
    hip: str | None = None
    cxx11_abi: bool | None = None
    error: str | None = None  # why it does not import


@dataclass(frozen=True)
class Gpu:
    name: str
    arch: str  # compute capability, "9.0"


@dataclass(frozen=True)
class Extension:
    """One compiled module of a package, as doctor read it from disk and from an import in a child process."""

    path: str
    module: str  # causal_conv1d_cuda
    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    glibc: str | None = None  # the highest GLIBC_ version it needs, "2.34"
    glibcxx: str | None = None  # the highest GLIBCXX_, "3.4.30"
    cxxabi: str | None = None  # the highest CXXABI_, "1.3.13"
    cxx11_abi: bool | None = None  # which std::string ABI its symbols use; None when they do not tell
    imports: bool | None = None
    import_error: str | None = None
    read_error: str | None = None
    # torch symbols it needs that the installed torch's files do not export (mangled, the first few), how many
    missing_symbols: tuple[str, ...] = ()
    missing_count: int = 0
    symbols_checked: bool = False  # read against the installed torch's exports
    built_for: str | None = None  # the torch releases the symbol index says export all it needs


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    requires: tuple[str, ...] = ()
    installer: str | None = None
    from_source: bool = False  # pip built it locally (an sdist or a checkout), not from a wheel
    extensions: tuple[Extension, ...] = ()


@dataclass(frozen=True)
class Environment:
    python: str
    python_tag: str
    executable: str
    machine: str
    glibc: str | None = None
    libstdcxx: str | None = None  # the file this Python loads
    libstdcxx_glibcxx: str | None = None  # the highest GLIBCXX_ it provides
    libstdcxx_cxxabi: str | None = None
    torch: Torch = field(default_factory=Torch)
    driver: str | None = None  # "580.95.05"
    driver_cuda: str | None = None  # the newest CUDA the driver runs, "13.0"
    gpus: tuple[Gpu, ...] = ()
    gpu_source: str | None = None  # nvidia-smi | torch
    gpu_error: str | None = None
    packages: tuple[Package, ...] = ()
    notes: tuple[str, ...] = ()  # what doctor could not read, said once

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Environment:
        fields = dict(data)
        fields["torch"] = Torch(**fields.get("torch") or {})
        fields["gpus"] = tuple(Gpu(**g) for g in fields.get("gpus") or ())
        fields["packages"] = tuple(_package(p) for p in fields.get("packages") or ())
        fields["notes"] = tuple(fields.get("notes") or ())
        return cls(**fields)


def _package(data: dict[str, Any]) -> Package:
    fields = dict(data)
    fields["requires"] = tuple(fields.get("requires") or ())
    fields["extensions"] = tuple(_extension(e) for e in fields.get("extensions") or ())
    return Package(**fields)


def _extension(data: dict[str, Any]) -> Extension:
    return Extension(**{**data, "sass": tuple(data.get("sass") or ()), "ptx": tuple(data.get("ptx") or ()),
                        "missing_symbols": tuple(data.get("missing_symbols") or ())})


class ProbeFailed(Exception):
    """A child process did not answer: it crashed, hung past its timeout or printed something other than JSON."""


def run_probe(python: str, source: str, *args: str, timeout: float = PROBE_TIMEOUT) -> Any:
    """Run ``source`` in ``python`` and return the JSON it prints last."""
    completed = _run([python, "-c", source, *args], timeout=timeout)
    if completed.returncode != 0:
        raise ProbeFailed(_last_line(completed.stderr) or f"exit code {completed.returncode}")
    try:
        return json.loads(completed.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProbeFailed(f"unreadable answer: {completed.stdout[-200:]!r}") from None


def _run(command: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    log.debug("running %s", command[:2])
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}  # a deprecation warning is not an answer
    try:
        return subprocess.run(
            command, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=timeout, env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ProbeFailed(f"{Path(command[0]).name} did not answer within {timeout:.0f} s") from None
    except OSError as error:
        raise ProbeFailed(f"cannot run {command[0]}: {error.strerror}") from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def collect(python: str, *, packages: tuple[str, ...] = tuple(PACKAGES)) -> Environment:
    """The facts of the environment of ``python`` (an interpreter path)."""
    base = run_probe(python, _PYTHON_PROBE)
    torch, notes = _torch(python)
    libstdcxx = torch.pop("libstdcxx_path", None) or base["libstdcxx_path"]
    glibcxx, cxxabi = _libstdcxx_versions(libstdcxx)
    gpu = _gpus(python, Torch(**torch))
    found = run_probe(python, _DISTRIBUTIONS_PROBE, *packages)
    imports = not Torch(**torch).error
    exports = _torch_exports(python)
    return Environment(
        python=base["python"],
        python_tag=base["python_tag"],
        executable=base["executable"],
        machine=base["machine"],
        glibc=base["glibc"],
        libstdcxx=libstdcxx,
        libstdcxx_glibcxx=glibcxx,
        libstdcxx_cxxabi=cxxabi,
        torch=Torch(**torch),
        packages=tuple(_read_package(python, p, imports=imports, exports=exports) for p in found),
        notes=tuple(notes) + gpu.pop("notes"),
        **gpu,
    )


def _torch(python: str) -> tuple[dict[str, Any], list[str]]:
    try:
        return dict(run_probe(python, _TORCH_PROBE)), []
    except ProbeFailed as error:
        return {"error": f"importing torch failed: {error}"}, []


def _libstdcxx_versions(path: str | None) -> tuple[str | None, str | None]:
    if not path:
        return None, None
    try:
        with open(path, "rb") as stream:
            provided = ElfFile(stream, where=path).version_definitions()
    except (OSError, WheelError):
        return None, None
    return highest(provided, "GLIBCXX_"), highest(provided, "CXXABI_")


def _gpus(python: str, torch: Torch) -> dict[str, Any]:
    """Driver and GPUs from nvidia-smi; from torch in a child process when nvidia-smi is absent."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            return {**_nvidia_smi(smi), "gpu_source": "nvidia-smi", "notes": ()}
        except ProbeFailed as error:
            note = f"nvidia-smi failed: {error}"
            return {"gpu_error": note, "notes": (note,)}
    if torch.cuda and not torch.error:
        try:
            found = run_probe(python, _TORCH_GPU_PROBE, timeout=GPU_TIMEOUT)
        except ProbeFailed as error:
            return {"gpu_error": f"torch could not list GPUs: {error}", "notes": ()}
        gpus = tuple(Gpu(**g) for g in found["gpus"])
        seen = {} if gpus else {"gpu_error": "torch sees no CUDA GPU (and there is no nvidia-smi on PATH)"}
        return {"gpus": gpus, "driver_cuda": found["driver_cuda"], "gpu_source": "torch", "notes": (), **seen}
    return {"gpu_error": "no nvidia-smi on PATH and no CUDA torch to ask: no NVIDIA GPU seen", "notes": ()}


def _nvidia_smi(smi: str) -> dict[str, Any]:
    query = [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    completed = _run(query, timeout=GPU_TIMEOUT)
    if completed.returncode != 0:
        raise ProbeFailed(_last_line(completed.stdout + completed.stderr) or f"exit code {completed.returncode}")
    rows = [[cell.strip() for cell in line.split(",")] for line in completed.stdout.splitlines() if line.strip()]
    summary = _run([smi], timeout=GPU_TIMEOUT).stdout
    return {
        "gpus": tuple(Gpu(name=row[0], arch=row[1]) for row in rows if len(row) == 3),
        "driver": rows[0][2] if rows and len(rows[0]) == 3 else None,
        "driver_cuda": parse_smi_cuda(summary),
    }


def parse_smi_cuda(summary: str) -> str | None:
    """The "CUDA Version: 13.0" nvidia-smi prints in its banner: the newest CUDA this driver runs."""
    marker = "CUDA Version:"
    if marker not in summary:
        return None
    return summary.split(marker, 1)[1].split()[0].strip("|") or None


def _read_package(python: str, found: dict[str, Any], *, imports: bool, exports: frozenset[str] | None) -> Package:
    """``root`` is the directory the distribution's RECORD paths are relative to (its site-packages)."""
    root = found["root"]
    modules = [Path(f) for f in found["files"] if _is_module(Path(f), root)]
    extensions = tuple(_read_extension(python, path, root, imports=imports, exports=exports) for path in modules)
    return Package(
        name=found["name"],
        version=found["version"],
        requires=tuple(found["requires"]),
        installer=found["installer"],
        from_source=_built_here(found.get("direct_url")),
        extensions=extensions,
    )


def _built_here(direct_url: str | None) -> bool:
    """pip records an sdist or checkout install in direct_url.json; a wheel from an index leaves none."""
    if not direct_url:
        return False
    try:
        info = json.loads(direct_url)
    except ValueError:
        return False
    return not str(info.get("url", "")).endswith(".whl")


def _is_module(path: Path, site_packages: str) -> bool:
    """An importable extension module (``x.cpython-311-x86_64-linux-gnu.so``), not a library auditwheel bundled."""
    inside = path.is_relative_to(site_packages) and not any(p.endswith(".libs") for p in path.parts)
    return inside and path.suffix == ".so" and path.is_file() and is_elf(path)


def _read_extension(python: str, path: Path, site_packages: str, *, imports: bool,
                    exports: frozenset[str] | None) -> Extension:
    shown = path.relative_to(site_packages).as_posix()
    module = shown.split(".")[0].replace("/", ".")
    facts: dict[str, Any] = {"path": shown, "module": module}
    try:
        facts.update(_elf_facts(path, shown))
        facts.update(_symbol_facts(path, exports))
    except (OSError, WheelError, ValueError) as error:
        facts["read_error"] = str(error)
    if imports:
        facts.update(_import(python, module))
    return Extension(**facts)


def _elf_facts(path: Path, shown: str) -> dict[str, Any]:
    with path.open("rb") as stream:
        elf = ElfFile(stream, where=shown)
        needs = elf.version_needs()
        kernels = elf_fatbin(elf, where=shown)
        symbols = elf.dynamic_symbols()
    versions = frozenset().union(*needs.values()) if needs else frozenset()
    return {
        "sass": tuple(sorted(kernels.sass, key=arch_key)),
        "ptx": tuple(sorted(kernels.ptx, key=arch_key)),
        "glibc": highest(versions, "GLIBC_"),
        "glibcxx": highest(versions, "GLIBCXX_"),
        "cxxabi": highest(versions, "CXXABI_"),
        "cxx11_abi": string_abi(symbols),
    }


def string_abi(symbols: tuple[str, ...]) -> bool | None:
    """True when the C++ symbols use the C++11 ``std::string`` (``__cxx11``), False when they name the old one.

    The old ABI mangles ``std::string`` as ``Ss``; only c10/at/torch symbols are asked, where that abbreviation
    can only mean a string parameter.
    """
    torch_symbols = [s for s in symbols if s.startswith(("_ZN3c10", "_ZN2at", "_ZN5torch", "_ZNK3c10", "_ZNK2at"))]
    if any("__cxx11" in s for s in symbols):
        return True
    if any("Ss" in s.split("E", 1)[-1] for s in torch_symbols):
        return False
    return None


def _torch_exports(python: str) -> frozenset[str] | None:
    """What the installed torch's libraries export, from their files: torch is found, not imported."""
    try:
        found = run_probe(python, _TORCH_LIB_PROBE)
    except ProbeFailed:
        return None
    if not found:
        return None
    try:
        return installed_torch_exports(Path(found) / "lib")
    except (OSError, WheelError, ValueError) as error:
        log.debug("cannot read torch's libraries under %s: %s", found, error)
        return None


def _symbol_facts(path: Path, exports: frozenset[str] | None) -> dict[str, Any]:
    """The torch symbols the extension needs that the installed torch lacks (nothing when torch was not read)."""
    if exports is None:
        return {}
    missing = missing_from(path, exports)
    if not missing:
        return {"symbols_checked": True}
    return {"symbols_checked": True, "missing_symbols": missing[:5], "missing_count": len(missing),
            "built_for": extension_built_for(path)}


def _import(python: str, module: str) -> dict[str, Any]:
    try:
        completed = _run([python, "-c", _IMPORT_PROBE, module], timeout=PROBE_TIMEOUT)
    except ProbeFailed as error:
        return {"imports": False, "import_error": str(error)}
    if completed.returncode == 0:
        return {"imports": True}
    return {"imports": False, "import_error": _last_line(completed.stderr) or f"exit code {completed.returncode}"}
