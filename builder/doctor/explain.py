"""What the error messages people paste mean: each recognised line maps to a verdict code and its cause in one
sentence. ``doctor --explain`` runs this over a log; the import check runs it over an extension's import error.

The verdict codes live here because both this catalogue and ``verdicts`` speak them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder.doctor.symbolcheck import symbol_cause

OK = "ok"
PTX_JIT = "ptx-jit"
EXTENSION_MISSING = "extension-missing"
TORCH_MISSING = "torch-missing"
GLIBC_TOO_OLD = "glibc-too-old"
LIBSTDCXX_TOO_OLD = "libstdcxx-too-old"
TORCH_MINOR = "torch-minor"
CXX_ABI = "cxx-abi"
DRIVER_TOO_OLD = "driver-too-old"
NO_KERNEL = "no-kernel-image"
IMPORT_FAILED = "import-failed"


@dataclass(frozen=True)
class Finding:
    code: str
    quote: str  # the line of the log that says it
    cause: str  # one sentence
    remedy: str


_TORCH_SYMBOL = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch")
_REINSTALL = "run doctor in that environment: it prints the install line of the wheel built for your torch"


def _incompatible(match: re.Match[str]) -> tuple[str, str]:
    return TORCH_MINOR, (
        f"the {match['package']} extension was compiled against a different torch minor than the one installed, "
        "and a compiled extension only loads into the torch it was built for."
    )


def _no_kernel(match: re.Match[str]) -> tuple[str, str]:
    return NO_KERNEL, (
        "the extension carries no SASS for this GPU's compute capability and no PTX the driver could compile for it."
    )


def _libstdcxx(match: re.Match[str]) -> tuple[str, str]:
    library = _library_before(match.string, match.start())
    where = f" ({library})" if library else ""
    return LIBSTDCXX_TOO_OLD, (
        f"the extension needs {match['version']}, newer than what the libstdc++ this process loaded{where} provides: "
        "the system (or conda) libstdc++ is older than the compiler the wheel was built with."
    )


# The library a loader names before ": version `GLIBCXX_...' not found". Found from the match backwards, never by
# a pattern that scans ahead for it: "(/\S*libstdc...)?: version" tried every "/" of a line against the rest of it,
# quadratic in a long line (a 200 KB line took 40 s).
_LIBRARY = re.compile(r"/\S*libstdc\+\+\.so[.\d]*")
_LIBRARY_REACH = 4096  # a path longer than this is no loader's message


def _library_before(line: str, start: int) -> str | None:
    """The ``/...libstdc++.so.6`` path that ends just before ``start`` (followed by ": "), if there is one."""
    head = line[max(0, start - _LIBRARY_REACH):start]
    if not head.endswith(": "):
        return None
    words = head[:-2].split()
    token = words[-1] if words and not head[:-2][-1:].isspace() else ""
    slash = token.find("/")
    return token[slash:] if slash >= 0 and _LIBRARY.fullmatch(token, slash) else None


def _glibc(match: re.Match[str]) -> tuple[str, str]:
    return GLIBC_TOO_OLD, (
        f"the extension needs GLIBC_{match['version']}, newer than this system's glibc: the wheel's manylinux tag is "
        "newer than this Linux."
    )


def _undefined(match: re.Match[str]) -> tuple[str, str]:
    code, cause = _undefined_kind(match["symbol"])
    told = symbol_cause(match["symbol"])  # the symbol index's account, where there is one (issue 30)
    return code, f"{cause} {told}" if told else cause


def _undefined_kind(symbol: str) -> tuple[str, str]:
    if "cxx11" in symbol:
        return CXX_ABI, (
            f"the extension wants the C++11 std::string ABI version of {symbol[:40]}..., and this torch was built with "
            "the pre-C++11 ABI (or the other way round): its _GLIBCXX_USE_CXX11_ABI does not match torch's."
        )
    if symbol.startswith(_TORCH_SYMBOL):
        return TORCH_MINOR, (
            f"torch does not define {symbol[:40]}...: the extension was built against another torch minor "
            "(or with the other C++ ABI), whose symbols differ."
        )
    return IMPORT_FAILED, f"a library the extension links against does not define {symbol[:60]}."


def _driver(match: re.Match[str]) -> tuple[str, str]:
    return DRIVER_TOO_OLD, (
        "the NVIDIA driver is older than the CUDA runtime torch and the extension were built with; any driver of "
        "the toolkit's major version (CUDA 12: 525+, CUDA 13: 580+) runs it."
    )


def _missing_module(match: re.Match[str]) -> tuple[str, str]:
    return EXTENSION_MISSING, (
        f"{match['module']} is the package's compiled CUDA extension and it is not installed: the package was built "
        "from its sdist without compiling CUDA code."
    )


_REMEDIES = {
    TORCH_MINOR: _REINSTALL,
    CXX_ABI: _REINSTALL,
    NO_KERNEL: "install the wheel whose arch list includes your GPU (doctor names it), or build one with that arch",
    LIBSTDCXX_TOO_OLD: "upgrade libstdc++ (conda: `conda install -c conda-forge libstdcxx-ng`), or put the newer "
    "one first: LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
    GLIBC_TOO_OLD: "use a wheel with an older manylinux tag, or a newer Linux (or container image)",
    DRIVER_TOO_OLD: "upgrade the NVIDIA driver, or install torch and the wheel for an older CUDA your driver runs",
    EXTENSION_MISSING: _REINSTALL,
    IMPORT_FAILED: _REINSTALL,
}

# (pattern, meaning), first match per line wins. Messages quoted from users' reports (see issue 12).
_PATTERNS = (
    (
        re.compile(r"The (?P<package>\w+) CUDA extension is incompatible with the current PyTorch version"),
        _incompatible,
    ),
    (re.compile(r"no kernel image is available for execution on the device"), _no_kernel),
    (re.compile(r"version [`'\"](?P<version>(?:GLIBCXX|CXXABI)_[\d.]+)['`\"]? not found"), _libstdcxx),
    (re.compile(r"GLIBC_(?P<version>\d+\.\d+(?:\.\d+)?)['`\"]? not found"), _glibc),
    (re.compile(r"undefined symbol: (?P<symbol>\S+)"), _undefined),
    (re.compile(r"CUDA driver version is insufficient for CUDA runtime version"), _driver),
    (re.compile(r"No module named '(?P<module>causal_conv1d_cuda|selective_scan_cuda)'"), _missing_module),
)


def explain(text: str) -> tuple[Finding, ...]:
    """Every recognised line of ``text``, one finding per cause (its first line), in the order they appear."""
    found: dict[tuple[str, str], Finding] = {}
    for line in text.splitlines():
        for pattern, meaning in _PATTERNS:
            match = pattern.search(line)
            if match:
                code, cause = meaning(match)
                found.setdefault((code, cause), Finding(code, line.strip()[:300], cause, _REMEDIES[code]))
                break
    return tuple(found.values())


def explain_import_error(error: str) -> tuple[str, str] | None:
    """(code, cause) of the first recognised line of an import error, or None."""
    findings = explain(error)
    return (findings[0].code, findings[0].cause) if findings else None
