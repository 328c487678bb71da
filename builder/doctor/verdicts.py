"""From an ``Environment`` to a verdict per package: OK, or each thing that is wrong with its cause in one sentence.

Checks run root cause first (no extension at all, then what stops the loader, then what stops torch, then the GPU),
so the first verdict is the one to act on. Pure functions of recorded facts: the tests replay real environments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from builder.doctor.explain import (
    CXX_ABI,
    DRIVER_TOO_OLD,
    EXTENSION_MISSING,
    GLIBC_TOO_OLD,
    IMPORT_FAILED,
    LIBSTDCXX_TOO_OLD,
    NO_KERNEL,
    OK,
    PTX_JIT,
    TORCH_MINOR,
    TORCH_MISSING,
    explain_import_error,
)
from builder.doctor.labels import (
    PACKAGES,
    driver_needed,
    parse_variant,
    ptx_covers,
    release,
    sass_runs,
    split_local,
    torch_minor,
)
from builder.doctor.probe import Environment, Extension, Package
from builder.doctor.symbolcheck import missing_message

# What stops the loader before what stops torch before what stops the GPU: the first is the one to act on.
_ROOT_FIRST = (
    EXTENSION_MISSING,
    TORCH_MISSING,
    GLIBC_TOO_OLD,
    LIBSTDCXX_TOO_OLD,
    TORCH_MINOR,
    CXX_ABI,
    DRIVER_TOO_OLD,
    NO_KERNEL,
    IMPORT_FAILED,
)
# A different wheel of ours fixes these; a driver or a system upgrade fixes the others.
WHEEL_FIXES = frozenset(
    {EXTENSION_MISSING, TORCH_MINOR, CXX_ABI, NO_KERNEL, IMPORT_FAILED, LIBSTDCXX_TOO_OLD, GLIBC_TOO_OLD}
)


@dataclass(frozen=True)
class Verdict:
    code: str
    message: str

    @property
    def ok(self) -> bool:
        return self.code in (OK, PTX_JIT)


@dataclass(frozen=True)
class Diagnosis:
    package: Package
    verdicts: tuple[Verdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.ok for v in self.verdicts)

    @property
    def needs_wheel(self) -> bool:
        return any(v.code in WHEEL_FIXES for v in self.verdicts)


def diagnose(env: Environment) -> tuple[Diagnosis, ...]:
    return tuple(Diagnosis(package=p, verdicts=package_verdicts(env, p)) for p in env.packages)


def package_verdicts(env: Environment, package: Package) -> tuple[Verdict, ...]:
    missing = _extension_missing(package)
    if missing:
        return (missing,)
    found = [v for ext in package.extensions for v in _extension_verdicts(env, package, ext)]
    found += _torch_verdicts(env, package)
    problems = tuple(sorted(_unique(v for v in found if not v.ok), key=lambda v: _ROOT_FIRST.index(v.code)))
    if not problems:  # a failed import the facts do not explain: say what the error says
        problems = _unique(_import_verdict(package, ext) for ext in package.extensions if ext.imports is False)
    return problems or (*_unique(found), _ok(env, package))


def _unique(verdicts: Iterable[Verdict]) -> tuple[Verdict, ...]:
    return tuple(dict.fromkeys(verdicts))


def _who(package: Package) -> str:
    return f"{package.name} {package.version}"


def _extension_missing(package: Package) -> Verdict | None:
    expected = PACKAGES.get(package.name, ())
    have = {ext.module.rsplit(".", 1)[-1] for ext in package.extensions}
    absent = [m for m in expected if m not in have]
    if not absent:
        return None
    how = "was built from source" if package.from_source else "was installed"
    return Verdict(
        EXTENSION_MISSING,
        f"{_who(package)} has no compiled extension ({', '.join(absent)}): it {how} without building its CUDA "
        "code (an sdist install where nvcc or torch was missing, or a SKIP_CUDA_BUILD switch), so every kernel "
        "call fails.",
    )


def _torch_verdicts(env: Environment, package: Package) -> list[Verdict]:
    torch = env.torch
    if torch.error or not torch.version:
        why = torch.error or "torch is not installed"
        return [Verdict(TORCH_MISSING, f"torch does not import in this Python ({why}), and {package.name} needs it.")]
    variant = parse_variant(split_local(package.version)[1])
    built_for = variant.torch if variant else _required_torch(package)
    verdicts = []
    if built_for and built_for != torch_minor(torch.version):
        # inside its symbol window it loads (docs/abi.md); the wheel built for this torch is still the tested one
        why = (
            "it loads here (this torch exports every symbol its extension needs, and it imports), but the wheel "
            "built for this torch is the one tested with it."
            if _fits_by_symbols(package)
            else "a compiled extension only loads into the torch minor it was built against."
        )
        verdicts.append(
            Verdict(
                TORCH_MINOR,
                f"{_who(package)} was built for torch {built_for}, but this environment has torch {torch.version}; "
                + why,
            )
        )
    if (
        variant
        and variant.cxx11_abi is not None
        and torch.cxx11_abi is not None
        and variant.cxx11_abi != torch.cxx11_abi
    ):
        verdicts.append(_abi_verdict(package, variant.cxx11_abi, torch.cxx11_abi, torch.version))
    if variant and variant.cuda:
        verdicts += _driver_verdicts(env, package, variant.cuda)
    return verdicts


def _fits_by_symbols(package: Package) -> bool:
    """Every extension was checked against the installed torch's exports, lacks none, and imports: a wheel whose
    symbol window holds this torch (docs/abi.md), whatever its label says."""
    return bool(package.extensions) and all(
        ext.symbols_checked and not ext.missing_count and ext.imports for ext in package.extensions
    )


def _required_torch(package: Package) -> str | None:
    """The torch minor a ``Requires-Dist: torch==2.14.*`` pins (our wheels carry one), else None."""
    for requirement in package.requires:
        text = requirement.replace(" ", "")
        if text.startswith("torch==") and text.endswith(".*"):
            return torch_minor(text[len("torch==") : -2])
    return None


def _abi_verdict(package: Package, extension_abi: bool, torch_abi: bool, torch_version: str) -> Verdict:
    def name(cxx11: bool) -> str:
        return (
            "C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1)" if cxx11 else "pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0)"
        )

    return Verdict(
        CXX_ABI,
        f"{package.name}'s extension uses the {name(extension_abi)} but torch {torch_version} was built with the "
        f"{name(torch_abi)}, so the torch symbols it needs do not exist (undefined symbol: _ZN3c10...).",
    )


def _driver_verdicts(env: Environment, package: Package, cuda: str) -> list[Verdict]:
    """CUDA minor-version compatibility: any driver of the toolkit's major runs it, an older major does not."""
    if env.driver_cuda and release(env.driver_cuda)[:1] < release(cuda)[:1]:
        needed = driver_needed(cuda)
        have = f"driver {env.driver} (CUDA {env.driver_cuda})" if env.driver else f"a driver for CUDA {env.driver_cuda}"
        return [
            Verdict(
                DRIVER_TOO_OLD,
                f"{package.name} was built with CUDA {cuda}, which needs NVIDIA driver "
                f"{needed or 'a newer one'} or newer; this machine has {have} (CUDA driver version is insufficient "
                "for CUDA runtime version).",
            )
        ]
    return []


def _extension_verdicts(env: Environment, package: Package, ext: Extension) -> list[Verdict]:
    verdicts: list[Verdict | None] = [*_loader_verdicts(env, package, ext)]
    if ext.missing_count:
        message = missing_message(ext.module, ext.missing_symbols, ext.missing_count,
                                  env.torch.version or "(installed)", ext.built_for)
        verdicts.append(Verdict(TORCH_MINOR, message))
    torch_abi = env.torch.cxx11_abi
    if ext.cxx11_abi is not None and torch_abi is not None and ext.cxx11_abi != torch_abi and env.torch.version:
        verdicts.append(_abi_verdict(package, ext.cxx11_abi, torch_abi, env.torch.version))
    verdicts += [_arch_verdict(package, ext, gpu.name, gpu.arch) for gpu in env.gpus]
    return [v for v in verdicts if v is not None]


def _loader_verdicts(env: Environment, package: Package, ext: Extension) -> list[Verdict]:
    verdicts = []
    if ext.glibc and env.glibc and release(ext.glibc) > release(env.glibc):
        verdicts.append(
            Verdict(
                GLIBC_TOO_OLD,
                f"{package.name}'s extension {ext.path} needs GLIBC_{ext.glibc}, but this system's "
                f"glibc is {env.glibc} "
                f"(version `GLIBC_{ext.glibc}' not found).",
            )
        )
    for prefix, need, have in (
        ("GLIBCXX_", ext.glibcxx, env.libstdcxx_glibcxx),
        ("CXXABI_", ext.cxxabi, env.libstdcxx_cxxabi),
    ):
        if need and have and release(need) > release(have):
            verdicts.append(
                Verdict(
                    LIBSTDCXX_TOO_OLD,
                    f"{package.name}'s extension needs {prefix}{need}, but the libstdc++ this Python loads "
                    f"({env.libstdcxx}) provides at most {prefix}{have}.",
                )
            )
    return verdicts


def _arch_verdict(package: Package, ext: Extension, gpu: str, arch: str) -> Verdict | None:
    if any(sass_runs(s, arch) for s in ext.sass):
        return None
    sm = "sm_" + arch.replace(".", "")
    has = f"SASS for {_archs(ext.sass, 'sm_')} and PTX for {_archs(ext.ptx, 'compute_')}"
    jit = [p for p in ext.ptx if ptx_covers(p, arch)]
    if jit:
        return Verdict(
            PTX_JIT,
            f"{package.name}'s extension has no SASS for the {gpu} ({sm}), but the driver JIT-compiles its PTX for "
            f"compute_{jit[-1].replace('.', '')} on first use: it works, the first call of each kernel is slow.",
        )
    return Verdict(
        NO_KERNEL,
        f"{package.name}'s extension has {has}, none of which runs on the {gpu} ({sm}): "
        "'no kernel image is available for execution on the device'.",
    )


def _archs(archs: tuple[str, ...], prefix: str) -> str:
    return ", ".join(prefix + a.replace(".", "") for a in archs) or "none"


def _import_verdict(package: Package, ext: Extension) -> Verdict:
    error = ext.import_error or "no message"
    explained = explain_import_error(error)
    if explained:
        code, cause = explained
        return Verdict(code, f"{ext.module} does not import: {cause} ({error})")
    return Verdict(IMPORT_FAILED, f"{ext.module} does not import, for a reason doctor does not recognise: {error}")


def _ok(env: Environment, package: Package) -> Verdict:
    archs = sorted({a for ext in package.extensions for a in ext.sass})
    gpus = sorted({(g.arch, g.name) for g in env.gpus})
    if gpus:
        where = "runs on " + ", ".join(f"sm_{arch.replace('.', '')} ({name})" for arch, name in gpus)
    else:
        where = f"has SASS for {_archs(tuple(archs), 'sm_')} (no GPU seen here to check against)"
    imports = "; its extension imports" if all(ext.imports for ext in package.extensions) else ""
    return Verdict(OK, f"{_who(package)} fits torch {env.torch.version} and {where}{imports}.")
