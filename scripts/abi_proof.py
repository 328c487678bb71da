"""The ABI windows, proven by imports (issue 30, docs/abi.md): every (wheel, torch) pair predicted from the symbol
index (the wheel's recorded imports against the torch's exports), then tried: the wheel's extensions imported after
``import torch`` in a venv holding that torch (CPU; a CUDA torch imports without a GPU). The window adds the CUDA
major and C++ ABI to the symbols; an import tests what the loader sees, the symbols (where the wheel's
``libcudart.so.N`` can be found: on this machine CUDA 13.0's is in ld.so.conf, so a CUDA 12 torch gets that far).
Prints one JSON line per pair and the table docs/abi.md carries; exit 1 when a prediction and an import disagree.

    .venv/bin/python -m scripts.abi_proof WHEEL... --torch 2.11.0 2.12.1 ... [--venvs DIR] [--table FILE]

A venv per torch (``<venvs>/torch-<version>``) is made with uv when missing: torch from wheelwright's torch cache
when a build left it there (else the registry), its dependencies from the registry. The index must hold every torch
asked for (``wheelwright facts symbols VERSION...``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from builder.core.demangle import demangle
from builder.core.settings import cache_root
from builder.core.symbols import TorchAbi, family_reason, load_index, minor_of
from builder.steps.abi import all_imports, record_of_wheel

UNDEFINED = re.compile(r"undefined symbol: (\S+)")
PROBE = """\
import importlib, sys
sys.path.insert(0, sys.argv[1])
try:
    import torch
except Exception as error:
    print("TORCH-FAILED", type(error).__name__, error)
    raise SystemExit(2)
print("TORCH", torch.__version__)
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception as error:
        print("FAILED", name, "|", str(error).replace(chr(10), " "))
    else:
        print("LOADED", name)
"""


@dataclass(frozen=True)
class Pair:
    wheel: str
    torch: str  # the torch tried, 2.14.1
    variant: str  # its variant, cu130
    predicted: bool  # the loader's view: torch exports every symbol the wheel needs of it
    why: str  # "exports all 143", "missing 3: `c10::...`"
    in_window: bool  # and it is of the wheel's CUDA major and C++ ABI: a torch the index offers it for
    family: str  # why not, when it is not of the wheel's family ("" when it is)
    loaded: bool
    error: str  # the first import error, verbatim ("" when it loaded)
    seconds: float
    missing: tuple[str, ...] = ()  # every symbol predicted missing, mangled

    @property
    def agrees(self) -> bool:
        """The import did what was predicted, and a failed one names a symbol predicted missing."""
        named = UNDEFINED.search(self.error)
        return self.predicted == self.loaded and (self.loaded or (named is not None and named[1] in self.missing))


def venv_for(version: str, venvs: Path) -> Path:
    """``<venvs>/torch-<version>/bin/python``, made once (uv; the cached torch wheel when there is one)."""
    root = venvs / f"torch-{version}"
    python = root / "bin" / "python"
    if (root / ".done").is_file():
        return python
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    shutil.rmtree(root, ignore_errors=True)
    subprocess.run([uv, "venv", "-q", "-p", "python3.11", str(root)], check=True)
    cached = sorted(cache_root().glob(f"torch-wheels/*/torch-{version}-cp311-cp311-*x86_64.whl"))
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python),
                    str(cached[0]) if cached else f"torch=={version}"], check=True)
    (root / ".done").touch()
    return python


def predict(record: dict[str, object], entry: TorchAbi) -> tuple[tuple[str, ...], str, str]:
    """(the symbols the loader will not find, why, why the torch is not of the wheel's family or "")."""
    major, cxx11 = record.get("cuda_major"), bool(record.get("cxx11_abi"))
    family = family_reason(entry, platform=str(record.get("platform")),
                           cuda_major=major if isinstance(major, int) else None, cxx11_abi=cxx11)
    imports = all_imports(record)
    missing = sorted(imports - entry.exports())
    symbols = f"missing {len(missing)}: `{demangle(missing[0])}`" if missing else f"exports all {len(imports)}"
    return tuple(missing), symbols, family or ""


def extension_modules(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(n.split(".")[0] for n in archive.namelist() if "/" not in n and ".so" in n)


def try_import(wheel: Path, python: Path) -> tuple[bool, str, float]:
    modules = extension_modules(wheel)
    with tempfile.TemporaryDirectory(prefix="abi-proof-") as tmp:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(tmp)
        started = time.monotonic()
        done = subprocess.run([str(python), "-c", PROBE, tmp, *modules], capture_output=True, text=True,
                              timeout=600, check=False, cwd=tmp)
        seconds = time.monotonic() - started
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not any(line.startswith("TORCH ") for line in lines):
        raise SystemExit(f"import torch failed in {python}: {(done.stdout + done.stderr)[-800:]}")
    failures = [line.split("|", 1)[1].strip() for line in lines if line.startswith("FAILED ")]
    loaded = sum(line.startswith("LOADED ") for line in lines) == len(modules) and not failures
    return loaded, failures[0] if failures else "", seconds


def run(wheels: list[Path], versions: list[str], venvs: Path) -> list[Pair]:
    entries, problems = load_index()
    if problems:
        raise SystemExit("symbol index: " + "; ".join(problems))
    by_version = {e.torch: e for e in entries if e.platform == "x86_64"}
    absent = [v for v in versions if v not in by_version]
    if absent:
        raise SystemExit(f"the symbol index lacks torch {', '.join(absent)}: "
                         f"wheelwright facts symbols {' '.join(absent)}")
    pairs = []
    for version in versions:
        python = venv_for(version, venvs)
        for wheel in wheels:
            missing, why, family = predict(record_of_wheel(wheel, entries), by_version[version])
            loaded, error, seconds = try_import(wheel, python)
            pair = Pair(wheel=wheel.name, torch=version, variant=by_version[version].variant, predicted=not missing,
                        why=why, in_window=not missing and not family, family=family, loaded=loaded, error=error,
                        seconds=round(seconds, 1), missing=missing)
            print(json.dumps({**asdict(pair), "missing": list(missing[:5]), "agrees": pair.agrees}), flush=True)
            pairs.append(pair)
    return pairs


def table(pairs: list[Pair]) -> str:
    """Markdown: a row per wheel, a column per torch; each cell the prediction, then what the import did."""
    versions = list(dict.fromkeys(p.torch for p in pairs))
    lines = ["| wheel | " + " | ".join(f"{minor_of(v)} ({next(p.variant for p in pairs if p.torch == v)})"
                                       for v in versions) + " |",
             "|---|" + "---|" * len(versions)]
    for wheel in dict.fromkeys(p.wheel for p in pairs):
        cells = []
        for version in versions:
            pair = next(p for p in pairs if p.wheel == wheel and p.torch == version)
            mark = "loads" if pair.predicted else "breaks"
            seen = "imported" if pair.loaded else "ImportError"
            window = " (in window)" if pair.in_window else ""
            cells.append(f"{mark} / {seen}{window}{'' if pair.agrees else ' **DISAGREE**'}")
        lines.append(f"| `{wheel}` | " + " | ".join(cells) + " |")
    lines += ["", "Each failed import, the symbol the loader named, and whether the index predicted it missing:", "",
              "| wheel | torch | the loader: undefined symbol | predicted missing |", "|---|---|---|---|"]
    for pair in (p for p in pairs if not p.loaded):
        named = UNDEFINED.search(pair.error)
        said = f"`{demangle(named[1])}`" if named else pair.error[:80]
        verdict = f"yes, 1 of {len(pair.missing)}" if named and named[1] in pair.missing else "**no**"
        lines.append(f"| `{pair.wheel.split('-cp')[0]}` | {pair.torch} | {said} | {verdict} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.abi_proof", description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--torch", nargs="+", required=True, dest="versions")
    parser.add_argument("--venvs", type=Path, default=cache_root() / "abi-proof-venvs")
    parser.add_argument("--table", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    pairs = run(args.wheels, args.versions, args.venvs)
    if args.table:
        args.table.write_text(table(pairs))
    agree = sum(p.agrees for p in pairs)
    print(f"{agree} of {len(pairs)} predictions agree with the imports", file=sys.stderr)
    return 0 if agree == len(pairs) else 1


if __name__ == "__main__":
    sys.exit(main())
