"""The ABI a built wheel needs from torch: per extension, the dynamic symbols it imports that the torch it was built
against defines (by library), its C++ ABI and CUDA major, and its window over the torch symbol index. The ledger
(column ``abi``) and the provenance (key ``abi``) record it; the index and doctor read it."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path

from builder.core.elfread import is_elf
from builder.core.errors import WheelError
from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.core.symbols import TORCH_LIBRARIES, TorchAbi, load_index, read_linkage_of, torch_imports, window
from builder.core.wheelhouse import Layout
from builder.core.wheelname import WheelFilename
from builder.plan.job import Job
from builder.steps import provenance
from builder.steps.elf import unpacked

log = logging.getLogger(__name__)


def torch_exports(site_packages: Path) -> dict[str, frozenset[str]]:
    """{library: its exports} of the torch installed under ``site_packages`` (the job's runtime)."""
    lib = site_packages / "torch" / "lib"
    return {name: read_linkage_of(lib / name).exports for name in TORCH_LIBRARIES if (lib / name).is_file()}


def extension_imports(root: Path, exports: Mapping[str, frozenset[str]]) -> dict[str, dict[str, list[str]]]:
    """{extension path in the wheel: {torch library: the symbols it needs from it}} for every ELF file under
    ``root`` (an unpacked wheel) that needs any. Weak references are left out, and names the C and C++ runtime
    export (std::, operator new): neither stops the load when a torch lacks it. Where two libraries export a name,
    the first in TORCH_LIBRARIES' order is named."""
    found: dict[str, dict[str, list[str]]] = {}
    everything = frozenset().union(*exports.values()) if exports else frozenset()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)):
        required = torch_imports(read_linkage_of(path).required, everything)
        by_library: dict[str, list[str]] = {}
        for symbol in sorted(required):
            library = next((name for name in _in_link_order(exports) if symbol in exports[name]), None)
            if library is not None:
                by_library.setdefault(library, []).append(symbol)
        if by_library:
            found[path.relative_to(root).as_posix()] = by_library
    return found


def _in_link_order(exports: Mapping[str, frozenset[str]]) -> list[str]:
    return sorted(exports, key=lambda name: (TORCH_LIBRARIES.index(name) if name in TORCH_LIBRARIES else 99, name))


def all_imports(record: Mapping[str, object]) -> frozenset[str]:
    """Every symbol an ``abi`` record says the wheel imports from torch."""
    extensions = record.get("extensions")
    if not isinstance(extensions, dict):
        return frozenset()
    return frozenset(s for libraries in extensions.values() if isinstance(libraries, dict)
                     for symbols in libraries.values() if isinstance(symbols, list) for s in symbols)


def wheel_abi(wheel: Path, job: Job, site_packages: Path, entries: list[TorchAbi] | None = None) -> dict[str, object]:
    """The ``abi`` record of ``wheel`` built for ``job`` against the torch under ``site_packages``; its window is
    over ``entries`` (default: the symbol index in the cache)."""
    exports = torch_exports(site_packages)
    with unpacked(wheel) as root:
        extensions = extension_imports(root, exports)
    cuda_major = int(job.accelerator.version.split(".")[0]) if job.accelerator.kind == "cuda" else None
    record: dict[str, object] = {
        "torch": job.torch, "accelerator": job.accelerator.name, "platform": job.platform,
        "cxx11_abi": job.cxx11_abi, "cuda_major": cuda_major, "extensions": extensions,
    }
    if entries is None:
        entries, problems = load_index()
        for problem in problems:
            log.warning("symbol index: %s", problem)
    found = window(all_imports(record), entries, built_for=job.torch, platform=job.platform,
                   cuda_major=cuda_major, cxx11_abi=job.cxx11_abi)
    record["window"] = found.as_dict()
    log.info("%s: %s", wheel.name, found.describe())
    return record


def needed_abi(wheel: Path, job: Job, site_packages: Path) -> dict[str, object]:
    """:func:`wheel_abi`, or what kept it from being read: the record never fails a build (verify judges the ELF
    files; a wheel whose imports could not be read simply has no window)."""
    try:
        return wheel_abi(wheel, job, site_packages)
    except (WheelError, OSError, ValueError) as error:
        log.warning("%s: its ABI could not be read: %s", wheel.name, error)
        return {"error": str(error)}


def _index_exports(entries: list[TorchAbi], torch: str, accelerator: str, platform: str) -> TorchAbi | None:
    return next((e for e in entries if (e.torch, e.variant, e.platform) == (torch, accelerator, platform)), None)


def record_of_built(entry: LedgerEntry, wheel: Path, entries: list[TorchAbi]) -> dict[str, object]:
    """The ``abi`` record of a built wheel, its imports as recorded (or, for a row built before they were, read
    from the wheel against the index's entry of its torch) and its window over ``entries``."""
    recorded = json.loads(entry.abi) if entry.abi else {}
    platform = _platform(wheel)
    if not isinstance(recorded, dict) or "extensions" not in recorded:
        own = _index_exports(entries, entry.torch, entry.accelerator, platform)
        if own is None:
            raise WheelError(f"{entry.job_id}: the symbol index holds no torch {entry.torch} {entry.accelerator} "
                             f"{platform} to read its imports against (wheelwright facts symbols {entry.torch})")
        with unpacked(wheel) as root:
            extensions = extension_imports(root, own.libraries)
        recorded = {"torch": entry.torch, "accelerator": entry.accelerator, "platform": platform,
                    "cxx11_abi": own.cxx11_abi, "cuda_major": own.cuda_major, "extensions": extensions}
    major = recorded.get("cuda_major")
    found = window(all_imports(recorded), entries, built_for=str(recorded["torch"]), platform=platform,
                   cuda_major=major if isinstance(major, int) else None, cxx11_abi=bool(recorded.get("cxx11_abi")))
    shown = found.as_dict()
    day0 = recorded.get("day0")  # a day-0 wheel's window keeps saying what it is (builder/steps/day0.py)
    if isinstance(day0, dict) and isinstance(day0.get("text"), str):
        shown["text"] = f"{day0['text']}; {shown['text']}"
    return {**recorded, "window": shown}


def rewindow(output: Path, *, directory: Path | None = None) -> list[tuple[str, str]]:
    """Recompute the window of every built wheel in ``output``'s ledger over the symbol index as it is now (a torch
    indexed after the build moves the window without a rebuild); [(job, its window's text)]."""
    entries, problems = load_index(directory)
    for problem in problems:
        log.warning("symbol index: %s", problem)
    done, layout = [], Layout(root=output)
    with Ledger(layout.ledger) as ledger:
        for entry in ledger.entries():
            wheel = layout.dist / (entry.wheel or "")
            if entry.status != Status.BUILT or not entry.wheel or not wheel.is_file():
                continue
            try:
                record = record_of_built(entry, wheel, entries)
            except (WheelError, OSError, ValueError) as error:
                done.append((entry.job_id, f"not recomputed: {error}"))
                continue
            ledger.put(dataclasses.replace(entry, abi=json.dumps(record, sort_keys=True)))
            text = record["window"]["text"] if isinstance(record["window"], dict) else ""
            done.append((entry.job_id, str(text)))
    return done


def record_of_wheel(wheel: Path, entries: list[TorchAbi]) -> dict[str, object]:
    """The ``abi`` record of any wheel of ours: as its provenance holds it, or (a wheel built before imports were
    recorded) read from the wheel against the index's entry of the torch its provenance names."""
    record = provenance.read_wheel(wheel).record
    recorded = record.get("abi")
    if isinstance(recorded, dict) and "extensions" in recorded:
        return dict(recorded)
    torch, label = record.get("torch", {}), str(record.get("label", ""))
    accelerator = label.split("cu", 1)[-1] if "cu" in label else ""
    version, variant = str(torch.get("version")), f"cu{accelerator}" if accelerator else label
    platform = _platform(wheel)
    own = _index_exports(entries, version, variant, platform)
    if own is None:
        raise WheelError(f"{wheel.name}: the symbol index holds no torch {version} {variant} {platform} to read "
                         f"its imports against (wheelwright facts symbols {version})")
    with unpacked(wheel) as root:
        extensions = extension_imports(root, own.libraries)
    return {"torch": version, "accelerator": variant, "platform": platform, "cxx11_abi": own.cxx11_abi,
            "cuda_major": own.cuda_major, "extensions": extensions}


def _platform(wheel: Path) -> str:
    tag = WheelFilename.parse(wheel.name).platform_tag
    return next((m for m in ("x86_64", "aarch64") if tag.endswith(m)), tag)
