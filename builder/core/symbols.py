"""The symbol-level ABI between an extension and torch: which dynamic symbols an ELF file imports and exports, the
symbol index (per torch release, variant and platform: the names torch's libraries export, one gzip'd JSON file
each under ``<cache>/torch-symbols/v1/``), and a wheel's window: the indexed torch releases that export everything
it imports. Standard library only (Python 3.9): ``doctor.py`` carries this module.
"""

from __future__ import annotations

import ctypes
import functools
import gzip
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.demangle import demangle
from builder.core.elfread import ElfFile
from builder.core.settings import cache_root, setting_path

log = logging.getLogger(__name__)

INDEX_VERSION = 1  # the folder name and the "schema" of every file: a new layout gets a new folder
INDEX_DIR = f"torch-symbols/v{INDEX_VERSION}"
SYMBOLS_ENV = "WHEELWRIGHT_SYMBOLS"  # the index's folder, where it is not the cache's
NAMES_FILE = "names.json.gz"  # {mangled: demangled} of the symbols not every entry exports: doctor's fallback
# The libraries an extension links from torch (torch.utils.cpp_extension adds them), whose exports the index keeps.
TORCH_LIBRARIES = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so",
                   "libtorch_python.so", "libc10_hip.so", "libtorch_hip.so")
_SYM_SIZE = 24
_SHT_DYNSYM = 11
_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE = 1, 2, 10
_STV_HIDDEN, _STV_INTERNAL = 2, 1
_STT_SECTION, _STT_FILE = 3, 4
_SHN_UNDEF = 0
_TORCH_LOCAL = re.compile(r"\+(?P<local>[^-]+)")


@dataclass(frozen=True)
class Linkage:
    """What one ELF file's dynamic symbol table says: what it exports, and what it needs from others."""

    exports: frozenset[str]
    required: frozenset[str]  # undefined, strong: the loader refuses the file when one is missing
    optional: frozenset[str]  # undefined, weak: resolved when present, null when not


def dynamic_linkage(elf: ElfFile) -> Linkage:
    """The exports (global, weak or unique; default or protected visibility; defined) and the imports of ``elf``."""
    table = next((s for s in elf.sections if s.type == _SHT_DYNSYM), None)
    if table is None:
        return Linkage(frozenset(), frozenset(), frozenset())
    if table.link >= len(elf.sections):
        raise ValueError(f"{elf.where}: .dynsym links to string table {table.link}")
    return linkage_of_tables(elf.data(table), elf.data(elf.sections[table.link]))


def linkage_of_tables(symbols: bytes, names: bytes) -> Linkage:
    """The same, from the bytes of ``.dynsym`` and of the string table it links to (64-bit little-endian)."""
    exports, required, optional = set(), set(), set()
    for offset in range(_SYM_SIZE, len(symbols) - _SYM_SIZE + 1, _SYM_SIZE):  # entry 0 is the null symbol
        info, other = symbols[offset + 4], symbols[offset + 5]
        bind, kind, visibility = info >> 4, info & 0xF, other & 3
        if bind not in (_STB_GLOBAL, _STB_WEAK, _STB_GNU_UNIQUE) or kind in (_STT_SECTION, _STT_FILE):
            continue
        name_at = int.from_bytes(symbols[offset : offset + 4], "little")
        end = names.find(b"\0", name_at)
        name = names[name_at : end if end >= 0 else len(names)].decode("utf-8", "replace")
        if not name:
            continue
        if int.from_bytes(symbols[offset + 6 : offset + 8], "little") != _SHN_UNDEF:
            if visibility not in (_STV_HIDDEN, _STV_INTERNAL):
                exports.add(name)
        elif bind == _STB_WEAK:
            optional.add(name)
        else:
            required.add(name)
    return Linkage(frozenset(exports), frozenset(required), frozenset(optional))


def read_linkage_of(path: Path) -> Linkage:
    with path.open("rb") as stream:
        return dynamic_linkage(ElfFile(stream, where=str(path)))


# -- what the C and C++ runtime provide -------------------------------------------------------------------------------
# torch's libraries export thousands of std:: names: template instantiations, and std::filesystem or
# std::runtime_error where a devtoolset build linked part of libstdc++ statically (torch 2.0.1's libc10 exports
# std::runtime_error's constructors). An extension's reference to one binds to torch's copy first (libc10 precedes
# libstdc++ among its NEEDED) and to libstdc++'s when a torch has none: it never stops the load, so it is not one of
# the symbols a wheel needs from torch.
_RUNTIME_SONAMES = ("libstdc++.so.6", "libgcc_s.so.1", "libc.so.6", "libm.so.6")


@functools.lru_cache(maxsize=1)
def runtime_exports() -> frozenset[str]:
    """What the C and C++ runtime libraries this process maps export (loaded by soname first)."""
    found: set[str] = set()
    for path in _runtime_paths():
        try:
            found |= read_linkage_of(path).exports
        except (OSError, ValueError) as error:
            log.debug("cannot read %s: %s", path, error)
    return frozenset(found)


def _runtime_paths() -> list[Path]:
    for soname in _RUNTIME_SONAMES:
        try:
            ctypes.CDLL(soname)
        except OSError:
            continue
    try:
        with open("/proc/self/maps") as maps:
            mapped = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return []
    return sorted(Path(p) for p in mapped if any(Path(p).name.startswith(s) for s in _RUNTIME_SONAMES))


def torch_imports(required: frozenset[str], torch: frozenset[str]) -> frozenset[str]:
    """The strong references a library needs that ``torch`` (an export set) provides and the runtime does not."""
    return (required & torch) - runtime_exports()


# -- the index ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchAbi:
    """The exports of one torch build: release, variant (``cu130``) and platform (``x86_64``)."""

    torch: str  # "2.14.1"
    variant: str  # "cu130", "cu117", "rocm6.4", "cpu"
    platform: str  # "x86_64", "aarch64"
    cxx11_abi: bool
    libraries: dict[str, frozenset[str]]  # {"libc10.so": {...}}
    wheel: dict[str, object] = field(default_factory=dict)  # filename, sha256, size, url
    read: dict[str, object] = field(default_factory=dict)  # what building the entry read of the wheel

    @property
    def key(self) -> str:
        return f"{self.torch}-{self.variant}-{self.platform}"

    @property
    def cuda_major(self) -> int | None:
        match = re.fullmatch(r"cu(\d+)\d", self.variant)
        return int(match[1]) if match else None

    @property
    def minor(self) -> str:
        return ".".join(self.torch.split(".")[:2])

    def exports(self) -> frozenset[str]:
        return frozenset().union(*self.libraries.values()) if self.libraries else frozenset()

    def library_of(self, symbol: str) -> str | None:
        return next((name for name, names in sorted(self.libraries.items()) if symbol in names), None)

    def as_dict(self) -> dict[str, object]:
        return {"schema": INDEX_VERSION, "torch": self.torch, "variant": self.variant, "platform": self.platform,
                "cxx11_abi": self.cxx11_abi, "wheel": self.wheel, "read": self.read,
                "libraries": {name: sorted(names) for name, names in sorted(self.libraries.items())}}

    @classmethod
    def from_dict(cls, data: dict[str, object], where: str) -> TorchAbi:
        if not isinstance(data, dict) or data.get("schema") != INDEX_VERSION:
            raise ValueError(f"{where}: not a version {INDEX_VERSION} torch symbol index entry")
        libraries = data.get("libraries")
        if not isinstance(libraries, dict) or not all(isinstance(v, list) for v in libraries.values()):
            raise ValueError(f"{where}: 'libraries' is not a mapping of library to symbol names")
        try:
            return cls(torch=str(data["torch"]), variant=str(data["variant"]), platform=str(data["platform"]),
                       cxx11_abi=bool(data["cxx11_abi"]),
                       libraries={str(k): frozenset(str(s) for s in v) for k, v in libraries.items()},
                       wheel=dict(data.get("wheel") or {}), read=dict(data.get("read") or {}))  # type: ignore[call-overload]
        except KeyError as error:
            raise ValueError(f"{where}: no {error}") from None


def cache_dir() -> Path:
    """``$WHEELWRIGHT_SYMBOLS``, else ``$WHEELWRIGHT_CACHE/torch-symbols/v1``, else
    ``~/.cache/wheelwright/torch-symbols/v1``."""
    return setting_path(SYMBOLS_ENV) or cache_root() / INDEX_DIR


def entry_path(directory: Path, entry: TorchAbi) -> Path:
    return directory / f"torch-{entry.key}.json.gz"


def encode_entry(entry: TorchAbi) -> bytes:
    text = json.dumps(entry.as_dict(), sort_keys=True, separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def decode_entry(data: bytes, where: str) -> TorchAbi:
    try:
        return TorchAbi.from_dict(json.loads(gzip.decompress(data)), where)
    except (OSError, EOFError, ValueError) as error:  # gzip.BadGzipFile is an OSError; JSON errors ValueErrors
        raise ValueError(f"{where}: not a readable symbol index entry ({error})") from None


def load_index(directory: Path | None = None) -> tuple[list[TorchAbi], list[str]]:
    """Every entry under ``directory`` (default: the cache's), oldest torch first, and one line per unreadable
    file (skipped: a damaged entry costs its release, not the index)."""
    directory = directory or cache_dir()
    entries, problems = [], []
    for path in sorted(directory.glob("torch-*.json.gz")) if directory.is_dir() else []:
        try:
            entries.append(decode_entry(path.read_bytes(), str(path)))
        except (OSError, ValueError) as error:
            problems.append(str(error))
    return sorted(entries, key=lambda e: (version_key(e.torch), e.variant, e.platform)), problems


def version_key(version: str) -> tuple[int, ...]:
    """2.14.1 -> (2, 14, 1); a local label (+cu130) and anything past the digits are ignored."""
    digits = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(part) for part in digits[0].split(".")) if digits else ()


# -- windows ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Which indexed torch builds of the wheel's family (platform, CUDA major, C++ ABI) export everything it imports."""

    built_for: str  # "2.12.1"
    loads: tuple[str, ...]  # torch versions, oldest first
    breaks: tuple[tuple[str, tuple[str, ...]], ...]  # (torch version, the missing symbols, mangled, sorted)
    other: tuple[tuple[str, str], ...] = ()  # ("2.9.1 cu128", why it is not of the wheel's family)

    @property
    def checked(self) -> tuple[str, ...]:
        return tuple(sorted([*self.loads, *(v for v, _ in self.breaks)], key=version_key))

    def as_dict(self) -> dict[str, object]:
        return {"built_for": self.built_for, "loads": list(self.loads), "checked": list(self.checked),
                "breaks": {version: {"missing": len(missing), "examples": list(missing[:3])}
                           for version, missing in self.breaks},
                "other": dict(self.other), "text": self.describe()}

    def describe(self) -> str:
        """loads on torch 2.12-2.12 (checked 2.9-2.15); breaks on 2.13: missing `c10::...`"""
        if not self.checked:
            return "no indexed torch of its CUDA major and C++ ABI to check against"
        loads = ", ".join(_spans(self.loads, self.checked)) or "none of them"
        text = f"loads on torch {loads} (checked {_span(self.checked)})"
        nearest = self._nearest_breaks()
        if nearest:
            parts = []
            for version, missing in nearest:
                more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
                parts.append(f"{minor_of(version)}: missing `{demangle(missing[0])}`{more}")
            text += "; breaks on " + "; ".join(parts)
        return text

    def _nearest_breaks(self) -> list[tuple[str, tuple[str, ...]]]:
        """The breaking release just above the torch it was built for, and the one just below."""
        built = version_key(self.built_for)
        above = [b for b in self.breaks if version_key(b[0]) > built]
        below = [b for b in self.breaks if version_key(b[0]) < built]
        return [*above[:1], *below[-1:]]


def minor_of(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _span(versions: tuple[str, ...]) -> str:
    """2.9-2.15, and 2.12-2.12 for one: a window reads as a range even when it holds one release."""
    return f"{minor_of(versions[0])}-{minor_of(versions[-1])}"


def _spans(subset: tuple[str, ...], order: tuple[str, ...]) -> list[str]:
    """Runs of ``subset`` consecutive in ``order``, each as 2.11-2.12."""
    runs: list[list[str]] = []
    previous = -2
    for position, version in enumerate(order):
        if version not in subset:
            continue
        if position == previous + 1 and runs:
            runs[-1].append(version)
        else:
            runs.append([version])
        previous = position
    return [f"{minor_of(run[0])}-{minor_of(run[-1])}" for run in runs]


def family_reason(entry: TorchAbi, *, platform: str, cuda_major: int | None, cxx11_abi: bool) -> str | None:
    """Why ``entry`` is not a torch the wheel could load into whatever the symbols say; None when it is."""
    if entry.platform != platform:
        return f"built for {entry.platform}"
    if entry.cuda_major != cuda_major:
        return f"CUDA {entry.cuda_major or 'none'}, not CUDA {cuda_major}"
    if entry.cxx11_abi != cxx11_abi:
        return f"{'cxx11' if entry.cxx11_abi else 'pre-cxx11'} C++ ABI"
    return None


def window(imports: frozenset[str], entries: list[TorchAbi], *, built_for: str, platform: str,
           cuda_major: int | None, cxx11_abi: bool) -> Window:
    """The window of a wheel importing ``imports`` from torch, over the index ``entries``."""
    loads, breaks, other = [], [], []
    for entry in sorted(entries, key=lambda e: version_key(e.torch)):
        reason = family_reason(entry, platform=platform, cuda_major=cuda_major, cxx11_abi=cxx11_abi)
        if reason:
            other.append((f"{entry.torch} {entry.variant}", reason))
            continue
        missing = tuple(sorted(imports - entry.exports()))
        if missing:
            breaks.append((entry.torch, missing))
        else:
            loads.append(entry.torch)
    return Window(built_for=built_for, loads=tuple(loads), breaks=tuple(breaks), other=tuple(other))
