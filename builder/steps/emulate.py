"""The import check of a cross-built wheel: the target's own CPython (a Debian root of its architecture) run through
qemu-user, directly (``qemu-aarch64-static -L <root>``: no binfmt_misc registration needed), importing torch for the
target (the real wheel and its CUDA dependencies, unpacked) and then each module of the wheel. It proves the
``.so`` loads against the real ARM torch: undefined symbols, the C++ ABI, libstdc++, the extension suffix."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from tempfile import TemporaryDirectory

from builder.core.context import log_note
from builder.core.errors import NotBuildableHere
from builder.core.runner import run
from builder.plan.accelerator import is_free_threaded
from builder.plan.job import Job
from builder.steps.cross import CrossBuild, unpack_wheel
from builder.steps.environment import find_pythons
from builder.steps.platform import Cross
from builder.steps.verify import _PROBE, Check, _import_outcome, failed, skipped


def cpuinfo(midr: int) -> str:
    """An ARM /proc/cpuinfo of one CPU, as Linux writes it, for MIDR_EL1 ``midr``."""
    fields = (("processor", "0"), ("BogoMIPS", "2000.00"), ("Features", "fp asimd evtstrm cpuid"),
              ("CPU implementer", f"{midr >> 24 & 0xFF:#x}"), ("CPU architecture", "8"),
              ("CPU variant", f"{midr >> 20 & 0xF:#x}"), ("CPU part", f"{midr >> 4 & 0xFFF:#05x}"),
              ("CPU revision", f"{midr & 0xF}"))
    return "".join(f"{name}\t: {value}\n" for name, value in fields) + "\n"


def emulation_files(cross: Cross) -> dict[str, str]:
    """What the emulated CPython reads of the CPU, laid into the root: qemu -L serves a root's file in place of the
    host's (its /proc/cpuinfo and /sys describe the x86_64 host, which torch's cpuinfo cannot parse)."""
    cpu = "sys/devices/system/cpu"
    return {
        "proc/cpuinfo": cpuinfo(cross.emulated_midr),
        **{f"{cpu}/{name}": "0\n" for name in ("possible", "present", "online")},
        f"{cpu}/cpu0/regs/identification/midr_el1": f"0x{cross.emulated_midr:016x}\n",
    }


def prepare_root(root: Path, cross: Cross) -> None:
    """Write :func:`emulation_files` into ``root`` where they differ (idempotent: the root is a shared cache)."""
    for relative, text in emulation_files(cross).items():
        path = root / relative
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def precompile(job: Job, folders: Sequence[Path]) -> None:
    """Byte-compile the target's Python files with this machine's CPython of the same minor (bytecode does not depend
    on the CPU): compiling torch's modules inside the emulator would cost minutes at every import check. Once per
    file; without such an interpreter here, the emulated one compiles them itself."""
    if is_free_threaded(job.python):
        return
    try:
        python = find_pythons(job.python)[0]
    except NotBuildableHere:
        return
    command: list[str | os.PathLike[str]] = [python, "-m", "compileall", "-q", "-j", "0", *folders]
    run(command, step="byte-compile the target's Python files", check=False, capture=True)


def emulated_command(qemu: str, root: Path, python: str, arguments: Sequence[str]) -> list[str]:
    """qemu running the root's ``python`` with its own loader and libraries (``-L``: absolute paths the target
    opens are looked up under the root first)."""
    return [qemu, "-L", str(root), str(root / "usr" / "bin" / f"python{python}"), *arguments]


def emulated_environ(paths: Sequence[Path], home: Path) -> dict[str, str]:
    """Nothing of this machine's Python leaks in: the wheel and the target's site on PYTHONPATH, no user site."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM")}
    return {**keep, "PYTHONPATH": os.pathsep.join(map(str, paths)), "PYTHONNOUSERSITE": "1", "HOME": str(home),
            "PYTHONDONTWRITEBYTECODE": "1"}


def check_import_emulated(wheel: Path, job: Job, build: CrossBuild) -> Check:
    """import torch, then each of the recipe's modules, from the wheel's files, under the target's CPython."""
    if not job.recipe.import_names:
        return skipped("import", f"the recipe of {job.package} names no import_names")
    cross = build.platform.cross
    qemu = shutil.which(cross.qemu) if cross else None
    if cross is None or qemu is None:
        wanted = cross.qemu if cross else "qemu-user"
        return failed("import", f"{wanted} is not on PATH: the {job.platform} wheel cannot be imported here "
                                "(scripts/install-system-deps.sh test installs qemu-user-static)")
    prepare_root(build.runtime_root, cross)
    precompile(job, [build.site, build.runtime_root / "usr" / "lib" / f"python{job.python}"])
    with TemporaryDirectory(prefix="wheelwright-emulate-") as tmp:
        site = Path(tmp) / "site"
        unpack_wheel(wheel, site)
        command = emulated_command(qemu, build.runtime_root, job.python, ["-c", _PROBE, *job.recipe.import_names])
        started = time.monotonic()
        result = run(command, step=f"verify: import under {cross.qemu}", cwd=Path(tmp), check=False, capture=True,
                     env=emulated_environ([site, build.site], Path(tmp)))
        seconds = time.monotonic() - started
    log_note(f"emulated import of {wheel.name}: {seconds:.0f} s under {cross.qemu}")
    check = _import_outcome(result.returncode, result.output, job)
    detail = check.detail.replace("in a clean venv", f"from the wheel's files under {cross.qemu}")
    detail = f"{detail} ({job.platform} CPython {job.python}, {seconds:.0f} s)"
    return Check(name=check.name, ok=check.ok, detail=detail, skipped=check.skipped)
