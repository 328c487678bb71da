"""Device code reused across builds, torch versions included: the outputs of one nvcc device step (cicc's PTX and
the stub files it writes, ptxas's cubin) cached under what the step reads and nothing else: the program's bytes,
its command line, the bytes of every input file it names (the device-preprocessed source, the module id file), and
for ptxas the size and mtime of each source the PTX's line info names (ptxas writes them into the cubin).

Why this is sound: nvcc_plan.py runs each step with fixed temporary names in a fixed folder, so a step's command
line is the same in every build of the same (package version, toolkit) whatever the torch; a step whose program,
command and input bytes are equal writes equal bytes (cicc and ptxas are deterministic: ``verify`` mode proves it
for every reuse by running the step anyway). Host objects never come from here: objcache.py keys them per torch.

Standard library only: objcache.py, run as a script in the job's build env, imports it through nvcc_plan.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("use", "verify", "off")
JOB_ENV = "WHEELWRIGHT_JOB"  # the job compiling (compilation.py sets it): who stored a step's outputs
EVENTS_ENV = "WHEELWRIGHT_STAGE_EVENTS"  # this build's own events file, beside the cache's shared one
# The options naming a file the step writes; every other argument naming an existing file of the scratch folder
# is an input the step reads.
OUTPUT_OPTIONS = {
    "cicc": ("-o", "--gen_c_file_name", "--stub_file_name", "--gen_device_file_name"),
    "ptxas": ("-o",),
}
# CUDA 11's first cicc writes the TU's module id file (every other arch's cicc reads it): there it is an output
GENERATES_MODULE_ID = "--gen_module_id_file"
MODULE_ID_WRITTEN = ("--module_id_file_name",)
# Folders of the toolkit a program reads besides its own binary: cicc links libdevice from NVVMIR_LIBRARY_DIR.
TOOLKIT_FOLDERS = {"cicc": ("NVVMIR_LIBRARY_DIR",)}


def stage_of(program: str) -> str | None:
    """The cached stage a dryrun step's program is (cicc, ptxas), or None."""
    return program if program in OUTPUT_OPTIONS else None


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Step:
    """One cacheable device step: its key, the files it reads (path -> digest) and those it writes, by option."""

    stage: str
    key: str
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]  # option -> path


def step_of(stage: str, command: str, variables: Mapping[str, str], scratch: Path, programs: ProgramDigests) -> Step:
    """The step ``command`` (a dryrun line) is, keyed: the program's identity (its bytes, and the toolkit folders it
    reads), the command itself, the bytes of each file of ``scratch`` it names that it does not write, and for
    ptxas the size and mtime of every source its PTX names (below)."""
    words = shlex.split(command)
    options = OUTPUT_OPTIONS[stage] + (MODULE_ID_WRITTEN if GENERATES_MODULE_ID in words else ())
    outputs = {word: words[i + 1] for i, word in enumerate(words[:-1]) if word in options}
    written = set(outputs.values())
    inputs = {w: digest_file(w) for w in words if w not in written and _inside(w, scratch) and os.path.isfile(w)}
    identity = programs.identity(stage, words[0], variables)
    named = {path: stamp for ptx in inputs for path, stamp in named_sources(ptx).items()} if stage == "ptxas" else {}
    key = digest_bytes(json.dumps([stage, identity, command, sorted(inputs.items()), sorted(named.items())]).encode())
    return Step(stage=stage, key=key, inputs={**inputs, **{p: json.dumps(s) for p, s in named.items()}},
                outputs=outputs)


_PTX_FILE = re.compile(rb'^\s*\.file\s+\d+\s+"([^"]*)"', re.MULTILINE)


def named_sources(ptx: str) -> dict[str, list[int] | None]:
    """The sources a PTX's ``.file`` directives name (with -lineinfo: the TU and every header its device code came
    from), each with its size and mtime in seconds, None if absent: ptxas stats each one and writes both into the
    cubin's line table, so a cubin depends on them as on the PTX (a touched header gives other cubin bytes)."""
    try:
        with open(ptx, "rb") as handle:
            text = handle.read()
    except OSError:
        return {}
    found: dict[str, list[int] | None] = {}
    for match in _PTX_FILE.finditer(text):
        path = match[1].decode(errors="replace")
        try:
            status = os.stat(path)
            found[path] = [status.st_size, int(status.st_mtime)]
        except OSError:
            found[path] = None
    return found


def _inside(word: str, folder: Path) -> bool:
    return word.startswith(f"{folder}{os.sep}")


class ProgramDigests:
    """The bytes of the toolkit's programs, hashed once per file version and remembered in the cache's folder
    (cicc is 76 MB: every nvcc call of a build would hash it again)."""

    def __init__(self, memo: Path | None) -> None:
        self.memo = memo
        self._known: dict[str, str] = {}

    def identity(self, stage: str, program: str, variables: Mapping[str, str]) -> list[str]:
        resolved = program.replace("$CICC_PATH", variables.get("CICC_PATH", ""))
        if os.sep not in resolved:
            resolved = shutil.which(resolved, path=variables.get("PATH")) or resolved
        files = [resolved]
        for name in TOOLKIT_FOLDERS.get(stage, ()):
            folder = Path(variables.get(name, ""))
            files += sorted(str(p) for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        return [self.file(path) for path in files]

    def file(self, path: str) -> str:
        status = os.stat(path)
        stamp = f"{os.path.realpath(path)}:{status.st_size}:{status.st_mtime_ns}"
        if stamp not in self._known:
            remembered = self._read()
            if stamp not in remembered:
                remembered[stamp] = digest_file(path)
                self._write(remembered)
            self._known[stamp] = remembered[stamp]
        return self._known[stamp]

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.memo.read_text()) if self.memo else {}
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _write(self, remembered: dict[str, str]) -> None:
        if self.memo is None:
            return
        self.memo.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=self.memo.parent, delete=False, prefix=".tmp-") as handle:
            json.dump(remembered, handle)
        os.replace(handle.name, self.memo)


def _atomic_copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=destination.parent, delete=False, prefix=".tmp-") as handle:
        temporary = Path(handle.name)
    shutil.copyfile(source, temporary)
    os.replace(temporary, destination)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".tmp-") as handle:
        handle.write(text)
    os.replace(handle.name, path)


# A stored step: {"stage", "outputs": {option: digest}, "from": job, "unit", "arch", "seconds"} (JSON, hence Any)
Entry = dict[str, Any]


class StageCache:
    """Steps' outputs under ``root``: ``stages/<key>.json`` says which blobs (``objects/``, content-addressed,
    shared with objcache.py's objects) a step wrote. Every write is a rename, so a reader sees a whole entry or
    none, and two builds storing one key leave one valid entry (equal keys have equal outputs)."""

    def __init__(self, root: Path, mode: str, environ: Mapping[str, str]) -> None:
        if mode not in MODES:
            raise ValueError(f"stage cache mode must be one of {MODES}, not {mode!r}")
        self.root = root
        self.mode = mode
        self.job = environ.get(JOB_ENV, "")
        self.events = [str(root / "events.jsonl"), *filter(None, [environ.get(EVENTS_ENV)])]
        self.programs = ProgramDigests(root / "programs.json")

    def entry_path(self, key: str) -> Path:
        return self.root / "stages" / key[:2] / f"{key}.json"

    def blob(self, digest: str) -> Path:
        return self.root / "objects" / digest[:2] / digest

    def lookup(self, key: str) -> Entry | None:
        """The stored entry whose every blob is present, or None."""
        try:
            entry: Entry = json.loads(self.entry_path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or not isinstance(entry.get("outputs"), dict):
            return None
        return entry if all(self.blob(d).is_file() for d in entry["outputs"].values()) else None

    def store(self, step: Step, **facts: object) -> Entry:
        outputs = {option: digest_file(path) for option, path in step.outputs.items()}
        for option, digest in outputs.items():
            if not self.blob(digest).is_file():
                _atomic_copy(Path(step.outputs[option]), self.blob(digest))
        entry: Entry = {"stage": step.stage, "outputs": outputs, "from": self.job, **facts}
        _atomic_write(self.entry_path(step.key), json.dumps(entry, sort_keys=True))
        return entry

    def restore(self, step: Step, entry: Entry) -> None:
        for option, path in step.outputs.items():
            _atomic_copy(self.blob(entry["outputs"][option]), Path(path))

    def record(self, event: dict[str, object]) -> None:
        line = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        for path in self.events:  # one write each, O_APPEND: lines of concurrent steps never interleave
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)

    def run(self, step: Step, run: Callable[[], int], **facts: object) -> tuple[int, str]:
        """Run ``step`` through the cache: (return code, "hit" | "miss" | "verified" | "mismatch" | "failed").
        ``facts`` (unit, arch) go into the stored entry and the event."""
        start = time.monotonic()
        entry = self.lookup(step.key)
        if entry is not None and self.mode == "use":
            self.restore(step, entry)
            self._event(step, "hit", start, entry, facts)
            return 0, "hit"
        returncode = run()
        seconds = time.monotonic() - start
        if returncode != 0:
            return returncode, "failed"
        if entry is None:
            stored = self.store(step, seconds=round(seconds, 3), **facts)
            self._event(step, "miss", start, stored, facts)
            return 0, "miss"
        fresh = {option: digest_file(path) for option, path in step.outputs.items()}
        same = fresh == entry["outputs"]
        for option, digest in fresh.items():  # kept, so a per-kernel comparison can read both (compilation.py)
            if not self.blob(digest).is_file():
                _atomic_copy(Path(step.outputs[option]), self.blob(digest))
        self._event(step, "verified" if same else "mismatch", start, entry, facts, fresh=fresh)
        return (0, "verified") if same else (3, "mismatch")

    def _event(self, step: Step, result: str, start: float, entry: Entry, facts: Mapping[str, object],
               **more: object) -> None:
        self.record({"stage": step.stage, "result": result, "key": step.key, "from": entry.get("from", ""),
                     "job": self.job, "seconds": round(time.monotonic() - start, 3),
                     "compile_seconds": entry.get("seconds"), "outputs": entry["outputs"], **facts, **more})
