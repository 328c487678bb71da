"""``undefined symbol: _ZN3c10...`` decoded: the symbol demangled, which indexed torch releases export it and which do
not, the torch an extension was built for as closely as the symbol index tells, and an installed extension checked
against the installed torch's exports from the files alone, before anything is imported. Standard library only.

The index is the one ``wheelwright facts symbols`` keeps (``$WHEELWRIGHT_SYMBOLS``, else the cache's
``torch-symbols/v1``); without it doctor still demangles and still checks against the installed torch.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

from builder.core.demangle import can_demangle, demangle
from builder.core.symbols import (
    NAMES_FILE,
    TORCH_LIBRARIES,
    TorchAbi,
    cache_dir,
    load_index,
    minor_of,
    read_linkage_of,
    torch_imports,
)
from builder.doctor.labels import release

UNDEFINED = re.compile(r"(?:(?P<path>/[^\s:]+?\.so[.\d]*): )?undefined symbol: (?P<symbol>[A-Za-z0-9_.$@]+)")
_SHOWN = 160  # a demangled template can run to kilobytes; a sentence shows its start


def symbol_index() -> tuple[TorchAbi, ...]:
    """The entries of the symbol index (empty when there is none here)."""
    return _index_entries(str(index_dir()))


def index_dir() -> Path:
    return cache_dir()


@functools.lru_cache(maxsize=4)
def _index_entries(directory: str) -> tuple[TorchAbi, ...]:
    """Read once per process and folder: doctor asks for every extension and every line."""
    return tuple(load_index(Path(directory))[0])


def shown(symbol: str) -> str:
    """The demangled name, shortened for a sentence; the index's own demangled copy where libstdc++ is absent."""
    name = demangle(symbol) if can_demangle() else _stored_name(symbol)
    return name if len(name) <= _SHOWN else name[: _SHOWN - 3] + "..."


def _stored_name(symbol: str) -> str:
    names = _stored_names(str(index_dir()))
    return names.get(symbol, symbol)


@functools.lru_cache(maxsize=2)
def _stored_names(directory: str) -> dict[str, str]:
    """``names.json.gz``: the demangled names of the symbols not every indexed torch exports (the ones doctor is asked
    about), written by ``wheelwright facts symbols`` for machines without libstdc++."""
    try:
        data = json.loads(gzip.decompress((Path(directory) / NAMES_FILE).read_bytes()))
    except (OSError, EOFError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _label(entry: TorchAbi) -> str:
    return f"{entry.variant}{'' if entry.cxx11_abi else ', pre-cxx11'}"


def releases(entries: list[TorchAbi] | tuple[TorchAbi, ...]) -> str:
    """2.9-2.10 (cu128), 2.11-2.14 (cu130), 2.15 (cu132): consecutive releases of one variant as a span."""
    if not entries:
        return "none"
    runs: list[list[TorchAbi]] = []
    for entry in sorted(entries, key=lambda e: release(e.torch)):
        if runs and _label(runs[-1][-1]) == _label(entry):
            runs[-1].append(entry)
        else:
            runs.append([entry])
    spans = []
    for run in runs:
        first, last = minor_of(run[0].torch), minor_of(run[-1].torch)
        spans.append(f"{first if first == last else first + '-' + last} ({_label(run[0])})")
    return ", ".join(spans)


def exporters(symbol: str, entries: tuple[TorchAbi, ...]) -> tuple[list[TorchAbi], list[TorchAbi]]:
    """(the entries that export ``symbol``, those that do not)."""
    yes = [e for e in entries if any(symbol in names for names in e.libraries.values())]
    return yes, [e for e in entries if e not in yes]


def symbol_cause(symbol: str) -> str | None:
    """One sentence on ``symbol`` from the index, for ``--explain``; None when there is no index here."""
    entries = symbol_index()
    if not entries:
        return None
    yes, no = exporters(symbol, entries)
    name = shown(symbol)
    if not yes:
        return (f"`{name}` is exported by none of the indexed torch releases ({releases(entries)}): it comes from "
                "outside torch, or from a torch the index does not hold.")
    return f"`{name}` is exported by torch {releases(yes)}, and not by {releases(no)}."


def built_for(required: frozenset[str], entries: tuple[TorchAbi, ...], *, cxx11_abi: bool | None = None) -> str:
    """The releases that export every symbol ``required`` names that any indexed torch exports: where an extension
    importing them loads, and so what it was built for, as closely as the index tells."""
    known = frozenset().union(*(e.exports() for e in entries)) if entries else frozenset()
    needs = torch_imports(required, known)
    fits = [e for e in entries if needs <= e.exports() and (cxx11_abi is None or e.cxx11_abi == cxx11_abi)]
    if not needs:
        return "the index cannot tell (it imports no symbol an indexed torch exports)"
    return f"torch {releases(fits)}" if fits else "no indexed torch (it needs symbols from several)"


def installed_torch_exports(torch_lib: Path) -> frozenset[str]:
    """What the installed torch's libraries export, read from their files (nothing imported)."""
    found: set[str] = set()
    for name in TORCH_LIBRARIES:
        path = torch_lib / name
        if path.is_file():
            found |= read_linkage_of(path).exports
    return frozenset(found)


def missing_from(extension: Path, exports: frozenset[str]) -> tuple[str, ...]:
    """The symbols ``extension`` needs (strong references) from torch that the installed torch does not export:
    those it asks of a torch library by name (c10, at, torch, caffe2) or that some indexed torch exports, less what
    the C and C++ runtime provide."""
    required = read_linkage_of(extension).required
    indexed = frozenset().union(*(e.exports() for e in symbol_index())) if symbol_index() else frozenset()
    named = frozenset(s for s in required if s.startswith(_TORCH_PREFIXES))
    return tuple(sorted(torch_imports(required, indexed | named) - exports))


_TORCH_PREFIXES = ("_ZN3c10", "_ZNK3c10", "_ZN2at", "_ZNK2at", "_ZN5torch", "_ZNK5torch", "_ZTIN3c10", "_ZTVN3c10",
                   "_ZN6caffe2", "_ZTIN2at", "_ZTVN2at", "_ZTIN5torch", "_ZTVN5torch", "THP")


def extension_built_for(extension: Path) -> str | None:
    """The torch an extension file on disk was built for, as closely as the index tells; None without either."""
    entries = symbol_index()
    if not entries or not extension.is_file():
        return None
    required = read_linkage_of(extension).required
    cxx11 = True if any("__cxx11" in s for s in required) else None
    return built_for(required, entries, cxx11_abi=cxx11)


def missing_message(module: str, missing: tuple[str, ...], count: int, torch_version: str,
                    built: str | None) -> str:
    """The verdict's sentence for an extension the installed torch lacks symbols for."""
    more = f" and {count - 1} more" if count > 1 else ""
    where = f"; {built} export everything it needs" if built and built.startswith("torch ") else ""
    return (f"{module} needs `{shown(missing[0])}`{more}, which torch {torch_version} does not export (read from "
            f"the files, before importing anything): it was built for another torch{where}.")
