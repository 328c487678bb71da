"""The names doctor reasons with: variant labels (ours ``pt214cu130``, upstream's ``cu12torch2.4cxx11abiFALSE``),
wheel filenames and their tags, dotted versions, and the NVIDIA driver each CUDA major needs.

A standard-library twin of ``builder.plan.accelerator.parse_label`` and ``packaging.tags``; tests hold the two to
the same answers on every label of the release plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The packages the index serves and the compiled module each must carry (matrix.yaml's import_names; a test checks).
PACKAGES = {"causal-conv1d": ("causal_conv1d_cuda",), "mamba-ssm": ("selective_scan_cuda",)}

_OUR_LABEL = re.compile(r"pt(?P<major>[1-9])(?P<minor>0|[1-9]\d*)(?:cu(?P<cu>[1-9]\d{1,2})|rocm(?P<rocm>[1-9]\d{1,2}))")
# Upstream's own release wheels: causal_conv1d-1.5.0.post8+cu12torch2.4cxx11abiFALSE-...
_UPSTREAM_LABEL = re.compile(r"cu(?P<cu>\d+)torch(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE)")
_WHEEL = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl"
)
_MANYLINUX = re.compile(r"manylinux_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>.+)")
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}

# The oldest Linux driver each CUDA major runs on (minor-version compatibility; CUDA's release notes, table 3).
DRIVER_FOR_CUDA = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class Variant:
    """What a wheel's local version says it was built for; ``None`` where the label does not say."""

    label: str
    torch: str  # "2.14"
    accelerator: str  # "cu130", "cu12" (upstream names only the major), "rocm6.2"
    cuda: str | None  # "13.0", "12"; None for ROCm
    cxx11_abi: bool | None = None


def parse_variant(local: str) -> Variant | None:
    """The variant of a local version (the part after "+"), or None for an unlabelled build."""
    match = _OUR_LABEL.fullmatch(local)
    if match and match["cu"]:
        cuda = f"{int(match['cu'][:-1])}.{match['cu'][-1]}"
        return Variant(
            label=local, torch=f"{match['major']}.{match['minor']}", accelerator=f"cu{match['cu']}", cuda=cuda
        )
    if match:
        accelerator = "rocm" + ".".join(match["rocm"])
        return Variant(label=local, torch=f"{match['major']}.{match['minor']}", accelerator=accelerator, cuda=None)
    match = _UPSTREAM_LABEL.fullmatch(local)
    if match:
        abi = match["abi"] == "TRUE"
        return Variant(
            label=local, torch=match["torch"], accelerator=f"cu{match['cu']}", cuda=match["cu"], cxx11_abi=abi
        )
    return None


def our_label(torch_version: str, cuda: str | None, hip: str | None) -> str | None:
    """The label of our variant for an installed torch: 2.14.1+cu130 with CUDA 13.0 -> ``pt214cu130``."""
    major, minor = release(torch_version)[:2]
    if cuda:
        return f"pt{major}{minor}cu{cuda.replace('.', '')}"
    if hip:
        return f"pt{major}{minor}rocm{''.join(hip.split('.')[:2])}"
    return None


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version: "2.14.1+cu130" -> (2, 14, 1); "2.6.0a0" -> (2, 6, 0)."""
    numbers = re.match(r"\d+(?:\.\d+)*", version.split("+")[0])
    return tuple(int(n) for n in numbers.group(0).split(".")) if numbers else ()


def torch_minor(version: str) -> str:
    return ".".join(str(n) for n in release(version)[:2])


def split_local(version: str) -> tuple[str, str]:
    public, _, local = version.partition("+")
    return public, local


def highest(versions: set[str] | frozenset[str], prefix: str) -> str | None:
    """The highest of e.g. GLIBC_2.17, GLIBC_2.34 (by number, not text), as "2.34"; None if none has the prefix."""
    numbers = [v[len(prefix) :] for v in versions if v.startswith(prefix) and release(v[len(prefix) :])]
    return max(numbers, key=release) if numbers else None


@dataclass(frozen=True)
class WheelName:
    filename: str
    project: str  # normalised: causal-conv1d
    version: str
    pythons: tuple[str, ...]
    abis: tuple[str, ...]
    platforms: tuple[str, ...]


def parse_wheel(filename: str) -> WheelName | None:
    match = _WHEEL.fullmatch(filename)
    if match is None:
        return None
    return WheelName(
        filename=filename,
        project=re.sub(r"[-_.]+", "-", match["name"]).lower(),
        version=match["version"],
        pythons=tuple(match["py"].split(".")),
        abis=tuple(match["abi"].split(".")),
        platforms=tuple(match["plat"].split(".")),
    )


def platform_fits(platform: str, *, machine: str, glibc: str | None) -> bool:
    """Whether a wheel platform tag installs on this Linux (its arch, a manylinux no newer than this glibc)."""
    legacy = next((v for k, v in _LEGACY_MANYLINUX.items() if platform == f"{k}_{machine}"), None)
    match = _MANYLINUX.fullmatch(platform)
    needs = legacy or ((int(match["major"]), int(match["minor"])) if match and match["arch"] == machine else None)
    if needs is None:
        return platform == f"linux_{machine}"
    return glibc is not None and release(glibc)[:2] >= needs


def wheel_fits(wheel: WheelName, *, python_tag: str, machine: str, glibc: str | None) -> bool:
    """``python_tag`` is the interpreter's: ``cp313t`` when it is free-threaded (PEP 703)."""
    if not _python_fits(wheel, python_tag):
        return False
    return any(platform_fits(p, machine=machine, glibc=glibc) for p in wheel.platforms)


def _python_fits(wheel: WheelName, python_tag: str) -> bool:
    """A free-threaded 3.13 loads only cp313-cp313t wheels, and an ordinary 3.13 never one of them."""
    if python_tag.endswith("t"):
        return python_tag[:-1] in wheel.pythons and python_tag in wheel.abis
    if all(abi.endswith("t") for abi in wheel.abis):
        return False
    return python_tag in wheel.pythons or ("abi3" in wheel.abis and _abi3_covers(wheel.pythons, python_tag))


def _abi3_covers(pythons: tuple[str, ...], python_tag: str) -> bool:
    ours = python_tag[2:]
    return any(p.startswith("cp") and len(p) > 3 and (int(p[3:]) <= int(ours[1:])) for p in pythons if ours)


def sass_runs(sass: str, gpu: str) -> bool:
    """Whether a cubin for ``sass`` ("8.0", "9.0a", "10.0f") runs on a GPU of compute capability ``gpu`` ("8.6").

    A plain cubin runs on the same major at an equal or higher minor; "a" cubins only on that exact arch;
    "f" cubins on the family (same major, equal or higher minor).
    """
    base, variant = sass.rstrip("af"), sass[len(sass.rstrip("af")) :]
    have, need = release(gpu), release(base)
    if variant == "a":
        return have == need
    return have[:1] == need[:1] and have >= need


def ptx_covers(ptx: str, gpu: str) -> bool:
    """Whether the driver can JIT PTX for compute ``ptx`` into code for ``gpu``: any newer arch, not "a"/"f" PTX."""
    return ptx == ptx.rstrip("af") and release(gpu) >= release(ptx)


def driver_needed(cuda: str) -> str | None:
    return DRIVER_FOR_CUDA.get(release(cuda)[0]) if release(cuda) else None
