"""Compile once, link per Python: a cache of nvcc objects, used as torch's PYTORCH_NVCC.

The .cu translation units of these packages include c10/cub headers, never Python.h, so their objects do not
depend on the Python version. Torch's ninja rule runs ``$nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out ...``;
this wrapper keys each call on the command line (the per-Python include directory normalised away, the output
paths removed), the source's bytes and, like ccache's direct mode, the bytes of every header the first compile
read (from its depfile). A hit copies the object and depfile; a header whose bytes changed is a miss. Builds run
from fixed paths (see compilation.py), so a hit is byte-identical to a fresh compile; ``verify`` mode proves it by
compiling anyway and comparing.

Usage (what compilation.py puts into PYTORCH_NVCC, by path): python objcache.py CACHE_DIR MODE REAL_NVCC ARGS...
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

try:
    from builder.steps.programs import nvcc_plan, stagecache
except ImportError:  # run as a script (PYTORCH_NVCC) where wheelwright is not importable: the sibling modules
    import nvcc_plan  # type: ignore[no-redef,import-not-found]
    import stagecache  # type: ignore[no-redef,import-not-found]

MODES = ("use", "verify", "off")
# Its variables are read from os.environ, not through builder.core.settings: this program runs by path in the job's
# Python, standard library only (the import contract), and compilation.py sets each of them for it.
PER_PYTHON_ENV = "WHEELWRIGHT_OBJCACHE_PER_PYTHON"  # os.pathsep-separated include directories, set by compilation.py
# What a whole object is compiled for besides its command and bytes (compilation.py: the job's torch and toolkit).
# Host objects never cross torch versions, even where every header they read is byte-identical; device code does, by
# the stage cache (stagecache.py), keyed on exactly what each device step reads.
SCOPE_ENV = "WHEELWRIGHT_OBJCACHE_SCOPE"
# The job's CPU platform (x86_64, aarch64), set by compilation.py: part of every key, so an object compiled for one
# platform is never served to another's build, whatever its command line says
PLATFORM_ENV = "WHEELWRIGHT_OBJCACHE_PLATFORM"
_NVCC_TEMP_NAME = re.compile(rb"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
_PYTHON_INCLUDE = re.compile(r"^-I.*/include/python3\.\d+t?/?$")


def command_key(args: list[str], per_python: frozenset[str] = frozenset()) -> tuple[str, str, str | None]:
    """(key over the normalised command line, the output path, the depfile path).

    ``per_python`` names further include directories that differ only by Python (a venv's ``include``); like the
    interpreter's own include directory they are keyed by role, and the depfile's headers key their contents.
    """
    normalised, output, depfile = [], "", None
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg in ("-o", "-MF"):
            value = args[index + 1]
            output, depfile = (value, depfile) if arg == "-o" else (output, value)
            skip = True
            continue
        per_python_include = _PYTHON_INCLUDE.match(arg) or (arg.startswith("-I") and arg[2:].rstrip("/") in per_python)
        normalised.append("-I<python-include>" if per_python_include else arg)
    return _digest(json.dumps(normalised).encode()), output, depfile


def cache_key(command: str, platform: str, source: str | None, nvcc: str | None, *, scope: str = "") -> str:
    """One object's key: its normalised command line, its platform, the source's and nvcc's bytes, and its scope
    (SCOPE_ENV: the job's torch and toolkit)."""
    return _digest(f"{command}:{platform}:{source}:{nvcc}:{scope}".encode())


def source_of(args: list[str]) -> Path:
    """The translation unit: what follows the last ``-c`` (torch's flags can hold a stray ``-c`` of their own)."""
    sources = [arg for before, arg in itertools.pairwise(args) if before == "-c" and arg != "-c"]
    return Path(sources[-1])


def headers_of(depfile: Path) -> list[str]:
    """The prerequisites a make-style depfile lists (the object's own target left out)."""
    text = depfile.read_text().replace("\\\n", " ")
    _, _, prerequisites = text.partition(": ")
    return sorted({p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", prerequisites) if p})


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_digest(path: str) -> str | None:
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None


def comparable_bytes(path: Path) -> bytes:
    """An object's bytes with nvcc's process-id temp-file name masked: equal for equal compiles."""
    return _NVCC_TEMP_NAME.sub(b"tmpxft_<pid>", path.read_bytes())


_FIXED_TEMP_NAME = b"tmpxft_00000000_00000000"  # the same length as nvcc's: no offset in the object moves


def deterministic_args(args: list[str], *, seedable: bool = True) -> list[str]:
    """nvcc's arguments with a per-translation-unit ``-frandom-seed`` (the source path, stable because builds run
    from fixed paths): nvcc then names its generated symbols and variables the same in every process.
    ``seedable`` False (an nvcc without the option) leaves them as they are."""
    if not seedable or any(arg.startswith(("-frandom-seed", "--frandom-seed")) for arg in args):
        return args
    return [*args, f"-frandom-seed={source_of(args)}"]


def accepts_random_seed(usage: str) -> bool:
    """Whether an nvcc whose ``--help`` says ``usage`` knows ``-frandom-seed``: CUDA 11.8's does not ("nvcc fatal:
    Unknown option"), and its objects keep per-process names (the cache still serves them; ``verify`` mode reports
    them as mismatches)."""
    return re.search(r"^--frandom-seed\b", usage, re.MULTILINE) is not None


def _usage(nvcc: str) -> str:
    return subprocess.run(
        [nvcc, "--help"], capture_output=True, text=True, encoding="utf-8", errors="replace", check=False
    ).stdout


def normalise_object(path: Path) -> None:
    """Replace the one thing -frandom-seed leaves per-process, the temp-file name nvcc hands the host compiler
    (``tmpxft_<pid>_<n>``, kept as the object's STT_FILE symbol), with a fixed name of the same length."""
    data = path.read_bytes()
    fixed = _NVCC_TEMP_NAME.sub(_FIXED_TEMP_NAME, data)
    if fixed != data:
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_bytes(fixed)
        os.replace(temporary, path)


def compile_deterministic(
    nvcc: str, args: list[str], *, started: float | None = None, stages: stagecache.StageCache | None = None
) -> int:
    """Run nvcc for one translation unit so that the same inputs give the same object bytes: through the build's
    core pool, one unit of work per arch, where the build set one up (nvcc_plan.py; its cicc and ptxas steps through
    ``stages``), else nvcc whole. The whole call, from ``started`` (the wrapper's start), is a "tu" row on the
    build's timeline."""
    started = time.monotonic() if started is None else started
    args = deterministic_args(args, seedable=accepts_random_seed(_usage(nvcc)))
    returncode = None
    if os.environ.get(nvcc_plan.POOL_ENV):
        returncode = nvcc_plan.compile_split(nvcc, args, source_of(args), os.environ, started=started, cache=stages)
    if returncode is None:
        returncode = subprocess.call([nvcc, *args])
    if returncode == 0:
        output = args[args.index("-o") + 1]
        normalise_object(Path(output))
    result = "compiled" if returncode == 0 else "failed"
    _timeline(source_of(args)).add("tu", "", started, time.monotonic(), result=result)
    return returncode


def _timeline(source: Path) -> nvcc_plan.Timeline:
    return nvcc_plan.Timeline(os.environ.get(nvcc_plan.TIMELINE_ENV), source.name)


def _atomic_copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=destination.parent, delete=False, prefix=".tmp-") as handle:
        temporary = Path(handle.name)
    shutil.copyfile(source, temporary)
    os.replace(temporary, destination)


# A manifest entry: {"object": digest, "depfile": digest or None, "headers": {path: digest}} (JSON, hence Any)
Entry = dict[str, Any]


class ObjectCache:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _manifest(self, key: str) -> Path:
        return self.root / "manifests" / key[:2] / f"{key}.json"

    def blob(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def lookup(self, key: str) -> Entry | None:
        """The entry whose recorded headers all still have the recorded bytes."""
        path = self._manifest(key)
        if not path.is_file():
            return None
        entries: list[Entry] = json.loads(path.read_text())
        for entry in entries:
            if all(_file_digest(h) == d for h, d in entry["headers"].items()):
                return entry
        return None

    def store(self, key: str, output: Path, depfile: Path | None) -> Entry:
        headers = headers_of(depfile) if depfile else []
        entry: Entry = {
            "object": _file_digest(str(output)),
            "depfile": _file_digest(str(depfile)) if depfile else None,
            "headers": {h: _file_digest(h) for h in headers},
        }
        _atomic_copy(output, self.blob(entry["object"]))
        if depfile:
            _atomic_copy(depfile, self.blob(entry["depfile"]))
        path = self._manifest(key)
        entries = json.loads(path.read_text()) if path.is_file() else []
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".tmp-") as handle:
            json.dump([entry, *[e for e in entries if e != entry]], handle)
        os.replace(handle.name, path)
        return entry

    def restore(self, entry: Entry, output: Path, depfile: Path | None) -> None:
        _atomic_copy(self.blob(entry["object"]), output)
        if depfile and entry["depfile"]:
            _atomic_copy(self.blob(entry["depfile"]), depfile)


def _record(cache: ObjectCache, event: dict[str, Any]) -> None:
    # One JSON line per compile, appended atomically (O_APPEND, one write): the cache's log of every build, and the
    # build's own (compilation.py reads hits and misses there)
    nvcc_plan.append_line(str(cache.root / "events.jsonl"), event)
    if own := os.environ.get(stagecache.EVENTS_ENV):
        nvcc_plan.append_line(own, event)


def main(argv: list[str]) -> int:
    root, mode, nvcc, *args = argv
    if mode not in MODES:
        sys.stderr.write(f"builder.steps.programs.objcache: mode must be one of {MODES}, not {mode!r}\n")
        return 2
    if "-c" not in args or "-o" not in args:
        return subprocess.call([nvcc, *args])
    # the call's start: what the cache itself costs (keys, lookups, copies) goes into its events, the whole call
    # onto the build's timeline
    keyed = time.monotonic()
    if mode == "off":
        return compile_deterministic(nvcc, args, started=keyed)
    cache = ObjectCache(Path(root))
    cache.root.mkdir(parents=True, exist_ok=True)
    stages = stagecache.StageCache(cache.root, mode, os.environ)
    per_python = frozenset(filter(None, os.environ.get(PER_PYTHON_ENV, "").split(os.pathsep)))
    key, output, depfile = command_key(args, per_python)
    key = cache_key(key, os.environ.get(PLATFORM_ENV, "x86_64"), _file_digest(str(source_of(args))), _file_digest(nvcc),
                    scope=os.environ.get(SCOPE_ENV, ""))
    source = str(source_of(args))
    entry = cache.lookup(key)
    start = time.monotonic()
    if entry is not None and mode == "use":
        cache.restore(entry, Path(output), Path(depfile) if depfile else None)
        done = time.monotonic()
        _record(cache, {"source": source, "result": "hit", "seconds": done - start, "cache_seconds": done - keyed})
        _timeline(source_of(args)).add("tu", "", keyed, done, result="hit")
        return 0
    returncode = compile_deterministic(nvcc, args, started=keyed, stages=stages)
    if returncode != 0:
        return returncode
    compiled = time.monotonic()
    if entry is not None:  # verify mode: the cached object must equal the fresh one
        same = comparable_bytes(Path(output)) == comparable_bytes(cache.blob(entry["object"]))
        result = "verified" if same else "mismatch"
        _record(
            cache,
            {
                "source": source,
                "result": result,
                "seconds": time.monotonic() - start,
                "fresh": _file_digest(output),
                "cached": entry["object"],
            },
        )
        return 0 if same else 3
    cache.store(key, Path(output), Path(depfile) if depfile else None)
    done = time.monotonic()
    overhead = (start - keyed) + (done - compiled)
    _record(cache, {"source": source, "result": "miss", "seconds": done - start, "cache_seconds": overhead})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
