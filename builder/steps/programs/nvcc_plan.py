"""Schedule (translation unit, arch) pairs, not translation units: one nvcc compile taken apart into the steps
``nvcc --dryrun`` lists, each arch's device chain (preprocess, cicc, ptxas) run as its own unit of work on a core
pool shared by every nvcc process of a build, longest first by the measured costs the build hands down; cicc and
ptxas go through the stage cache the wrapper hands over (stagecache.py), under fixed temporary names.

nvcc's own ``--threads N`` compiles a TU's archs in rounds of N inside one process, blind to the other TUs, so
MAX_JOBS x N oversubscribes some cores while one TU's last archs run alone. Here each step asks the pool for one
core; the pool serves the waiter with the longest remaining critical path first. The steps are nvcc's own commands
with nvcc's own temporary files, so the object is the same as nvcc's (objcache.py's ``-frandom-seed`` and
temp-name normalisation make it byte-identical; tests/integration/test_nvcc_plan.py proves it).

Standard library only: objcache.py, run as a script as PYTORCH_NVCC, imports it.
"""

from __future__ import annotations

import fcntl
import fnmatch
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

try:
    from builder.steps.programs import stagecache
except ImportError:  # run as a script beside objcache.py, where wheelwright is not importable: the sibling module
    import stagecache  # type: ignore[no-redef,import-not-found]

POOL_ENV = "WHEELWRIGHT_NVCC_POOL"  # the pool's directory: one lock file per core
SLOTS_ENV = "WHEELWRIGHT_NVCC_SLOTS"  # how many cores the pool hands out
COSTS_ENV = "WHEELWRIGHT_NVCC_COSTS"  # JSON {unit: {arch: seconds, "host": seconds}} from the ledger
EVERY_ARCH = "*"  # in that JSON: one guess for every arch of the unit (the seed's, before any was measured)
TIMELINE_ENV = "WHEELWRIGHT_NVCC_TIMELINE"  # JSON lines: every step, wait and mark of the build (timeline.py reads)
TIMELINE = "timeline.jsonl"  # its name in the pool's directory
STOPPED = "stopped"  # in the pool's directory once a step of the build has failed
_POLL_SECONDS = 0.05  # a waiter in line for a core looks this often; steps last seconds to minutes
_STOP_POLL_SECONDS = 0.5  # a running step looks this often whether the build has failed elsewhere
_BACK_OF_LINE_SECONDS = 0.5  # one behind `slots` others waits longer: a hundred waiters must not spin a core
_VARIABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_CICC_ARCH = re.compile(r"-arch[= ](compute_\d+[af]?)")
_OUTPUT = re.compile(r'-o "?([^"\s]+)"?')
_FILTER_DEPENDENCIES = "-- Filter Dependencies --"
# nvcc names its temporary files after its process id; the steps here run under one fixed name instead, in a fixed
# folder per TU (scratch_for), so a step's command line, and the files it writes, are the same in every build of the
# TU: what lets stagecache.py key a step on its command. The same length as nvcc's: no offset in an output moves.
_TEMP_NAME = re.compile(r"tmpxft_[0-9a-f]{8}_[0-9a-f]{8}")
FIXED_TEMP_NAME = "tmpxft_00000000_00000000"
SCRATCH = "nvcc-tmp"  # beside the pool's folder: one scratch folder per TU


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A compile in three parts: the host front end (preprocessing, cudafe++), one device chain per virtual arch,
    and the back end (fatbinary, the host compile) that needs every chain's output."""

    variables: dict[str, str]
    front: list[str]
    chains: dict[str, list[str]]  # virtual arch (compute_90) -> its commands, in order
    back: list[str]
    depfiles: list[str] = field(default_factory=list)  # the preprocessings' depfile parts, merged at the end
    # CUDA 11's first cicc writes the TU's module id file (--gen_module_id_file) that every other cicc reads; CUDA
    # 12+ writes it in the front end. The other chains' cicc waits for this arch's.
    module_id_writer: str | None = None


class NotPlannable(Exception):
    """The dryrun lists something this module does not take apart: run nvcc whole instead."""


def split_flags(args: list[str], environ: Mapping[str, str]) -> tuple[list[str], str | None]:
    """nvcc's arguments with NVCC_PREPEND/APPEND_FLAGS made explicit, ``--threads`` dropped (the pool decides) and
    ``--time FILE`` taken out (this module writes that file's rows); returns (arguments, time file)."""
    words = [
        *shlex.split(environ.get("NVCC_PREPEND_FLAGS", "")),
        *args,
        *shlex.split(environ.get("NVCC_APPEND_FLAGS", "")),
    ]
    kept: list[str] = []
    time_file = None
    index = 0
    while index < len(words):
        word = words[index]
        name, equals, value = word.partition("=")
        if name in ("--threads", "-t", "--time", "-time"):
            if not equals:
                index += 1
                value = words[index] if index < len(words) else ""
            if name in ("--time", "-time"):
                time_file = value
        else:
            kept.append(word)
        index += 1
    return kept, time_file


def parse_dryrun(text: str) -> tuple[dict[str, str], list[str]]:
    """(variables, commands) from ``nvcc --dryrun``'s ``#$ `` lines on stderr, nvcc's per-process temporary-file
    name replaced by a fixed one in every command."""
    variables: dict[str, str] = {}
    commands: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#$ "):
            continue
        body = line[3:].strip()
        match = _VARIABLE.match(body)
        if match:
            variables[match[1]] = " ".join(shlex.split(match[2]))
        elif body:
            commands.append(_TEMP_NAME.sub(FIXED_TEMP_NAME, body))
    return variables, commands


def program_of(command: str) -> str:
    """The program a dryrun step runs: ``cicc``, ``ptxas``, ``gcc`` (its path and nvcc's ``$CICC_PATH/`` left out)."""
    first = shlex.split(command)[0] if command else ""
    return Path(first.replace("$CICC_PATH/", "")).name


def _output_of(command: str) -> str | None:
    match = _OUTPUT.search(command)
    return match[1] if match else None


def plan(variables: dict[str, str], commands: list[str], *, depfile: str | None, output: str) -> Plan:
    """Sort the dryrun's commands into front, per-arch chains and back; the depfile nvcc would filter out of its
    host preprocessing comes from that same preprocessing's ``-MD`` instead."""
    ciccs = {i: m[1] for i, c in enumerate(commands) if program_of(c) == "cicc" and (m := _CICC_ARCH.search(c))}
    if not ciccs or any(program_of(c) == "cicc" for i, c in enumerate(commands) if i not in ciccs):
        raise NotPlannable("no cicc step with an -arch")
    first_cicc = min(ciccs)
    chains: dict[str, list[str]] = {arch: [] for arch in ciccs.values()}
    cicc_inputs = {arch: commands[i] for i, arch in ciccs.items()}
    ptx_of = {_output_of(commands[i]): arch for i, arch in ciccs.items()}
    front: list[str] = []
    back: list[str] = []
    for index, command in enumerate(commands):
        program = program_of(command)
        out = _output_of(command)
        if index in ciccs:
            chains[ciccs[index]].append(command)
        elif program == "ptxas":
            arch = next((a for ptx, a in ptx_of.items() if ptx and ptx in command), None)
            if arch is None:
                raise NotPlannable(f"ptxas without its cicc: {command}")
            chains[arch].append(command)
        elif " -E " in command and out and (arch := _arch_reading(out, cicc_inputs)) is not None:
            chains[arch].insert(0, command)  # this arch's preprocessing: before its cicc, off the front end
        elif command.startswith(_FILTER_DEPENDENCIES):
            continue
        elif index < first_cicc:
            front.append(command)
        else:
            back.append(command)
    depfiles: list[str] = []
    if any(c.startswith(_FILTER_DEPENDENCIES) for c in commands):
        if depfile is None:
            raise NotPlannable("nvcc filters dependencies but no -MF file was given")
        front = [_with_depfile(c, depfile, output, depfiles) for c in front]
        chains = {arch: [_with_depfile(c, depfile, output, depfiles) for c in chain] for arch, chain in chains.items()}
        if not depfiles:
            raise NotPlannable("no preprocessing step to write the depfile")
    writer = next((arch for i, arch in ciccs.items() if "--gen_module_id_file" in commands[i]), None)
    return Plan(variables=variables, front=front, chains=chains, back=back, depfiles=depfiles, module_id_writer=writer)


def _arch_reading(path: str, cicc_commands: dict[str, str]) -> str | None:
    return next((arch for arch, command in cicc_commands.items() if path in command), None)


def _with_depfile(command: str, depfile: str, output: str, depfiles: list[str]) -> str:
    """nvcc's depfile is the union of what its host and device preprocessings read: each ``-E`` step writes its
    part (``-MD``), merge_depfiles joins them."""
    if " -E " not in command:
        return command
    part = f"{depfile}.part{len(depfiles)}"
    depfiles.append(part)
    return f"{command} -MD -MF {shlex.quote(part)} -MT {shlex.quote(output)}"


def merge_depfiles(parts: list[str], depfile: str, output: str) -> None:
    """One make-style depfile, target ``output``, each prerequisite once in first-seen order; the parts removed."""
    seen: dict[str, None] = {}
    for part in parts:
        text = Path(part).read_text().replace("\\\n", " ")
        _, _, prerequisites = text.partition(": ")
        for word in re.split(r"(?<!\\)\s+", prerequisites):
            if word:
                seen.setdefault(word, None)
        Path(part).unlink()
    lines = [f"{output}:", *seen]
    Path(depfile).write_text(" \\\n  ".join(lines) + "\n")


# ---- the core pool ------------------------------------------------------------------------------------------


class CorePool:
    """A build's cores as ``slots`` lock files: a step holds one (flock, so a killed process gives it back) while
    it runs. Waiters leave a ticket named by priority; the ``slots`` highest-priority live waiters look for a free
    core, and one with k waiters ahead of it takes one only while more than k are free: the longest remaining
    critical path starts first, strictly (letting all of them race for any free core let a short chain start
    before a long one that had waited since the start, and the long one then ran alone at the end).

    A failed step stops the pool (a ``stopped`` file): ninja starts every TU at once when the pool schedules them,
    so once one fails, ninja's own "stop after the first failure" no longer spares the rest. No step starts after
    that, and the steps already running are ended: the build has failed, their objects would be thrown away."""

    def __init__(self, root: Path, slots: int) -> None:
        self.root = root
        self.slots = max(1, slots)
        self._sequence = iter(range(1 << 62))
        self._lock = threading.Lock()

    def _ticket(self, priority: float) -> Path:
        with self._lock:
            sequence = next(self._sequence)
        waiting = self.root / "waiting"
        waiting.mkdir(parents=True, exist_ok=True)
        # the name sorts by priority (descending) then arrival; it carries the pid, for liveness
        ticket = waiting / f"{1e9 - priority:016.3f}-{time.monotonic_ns():020d}-{os.getpid()}-{sequence}"
        ticket.touch()
        return ticket

    def _rank(self, ticket: Path) -> int:
        rank = 0
        for other in sorted((self.root / "waiting").iterdir()):
            if other.name >= ticket.name:
                break
            if _alive(int(other.name.split("-")[2])):
                rank += 1
            else:
                other.unlink(missing_ok=True)
        return rank

    def _take(self, rank: int) -> int | None:
        """A free core for the waiter ``rank`` others are ahead of, if more than ``rank`` are free: each of those
        others gets one first. The free ones are locked while counted (a flock is the only way to ask), at most
        ``rank + 1`` of them, then all but the one kept are given back."""
        free: list[int] = []
        for index in range(self.slots):
            fd = os.open(self.root / f"slot-{index}", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free.append(fd)
            except BlockingIOError:
                os.close(fd)
            if len(free) > rank:
                break
        kept = free.pop(0) if len(free) > rank else None
        for fd in free:
            os.close(fd)
        return kept

    @property
    def stopped(self) -> bool:
        return (self.root / STOPPED).exists()

    def stop(self) -> None:
        stop_pool(self.root)

    @contextmanager
    def core(self, priority: float) -> Iterator[None]:
        """Hold one core of the pool; ``priority`` is the seconds of work this step still stands in front of. A
        stopped pool hands out no core: the waiter goes on at once, and its steps refuse to run."""
        ticket = self._ticket(priority)
        fd = None
        try:
            while not self.stopped:
                rank = self._rank(ticket)
                in_line = rank < self.slots
                fd = self._take(rank) if in_line else None
                if fd is not None:
                    break
                time.sleep(_POLL_SECONDS if in_line else _BACK_OF_LINE_SECONDS)
        finally:
            ticket.unlink(missing_ok=True)
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)


def stop_pool(root: Path) -> None:
    """Stop the pool at ``root`` (see CorePool): no step of the build starts after this, running ones end."""
    root.mkdir(parents=True, exist_ok=True)
    (root / STOPPED).touch()


# index_site/publish.py has the same probe: this module is standard library only (objcache.py runs it as a script
# in the build env, where wheelwright is not importable), so it cannot share builder.core's code
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---- the timeline ----------------------------------------------------------------------------------------


def append_line(path: str, record: Mapping[str, object]) -> None:
    """One JSON line appended with one ``write`` to an O_APPEND file: lines from the build's concurrent processes
    and threads never interleave (the kernel appends each write whole, at the file's end)."""
    line = json.dumps(record, separators=(",", ":")) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class Timeline:
    """One TU's rows on the build's timeline: {unit, arch, phase, start, end, ...}. Times are time.monotonic():
    CLOCK_MONOTONIC on Linux, one clock for every process on the machine that never steps (time.time() may, when
    NTP sets it), so the nvcc processes' rows and the compile stage's marks compare directly. No path: no rows."""

    def __init__(self, path: str | None, unit: str) -> None:
        self.path = path
        self.unit = unit

    def add(self, phase: str, arch: str, start: float, end: float, **fields: object) -> None:
        if self.path:
            record = {"unit": self.unit, "arch": arch_label(arch) if arch else "", "phase": phase,
                      "start": round(start, 4), "end": round(end, 4), **fields}
            append_line(self.path, record)


@contextmanager
def _core(pool: CorePool, priority: float, timeline: Timeline, part: str, arch: str) -> Iterator[None]:
    """A core of the pool, on the timeline: a "wait" row once served (asked at start, served at end), a "hold"
    row once given back (a waiter's lag behind the last give-back before it was served is the pool's polling)."""
    asked = time.monotonic()
    with pool.core(priority):
        served = time.monotonic()
        timeline.add("wait", arch, asked, served, part=part, priority=round(priority, 1))
        try:
            yield
        finally:
            timeline.add("hold", arch, served, time.monotonic(), part=part)


# ---- costs and running --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Costs:
    """Seconds per (arch) of one TU and its host part; what the pool orders waiters by."""

    by_arch: dict[str, float] = field(default_factory=dict)
    host: float = 0.0
    default: float = 1.0

    def arch(self, virtual: str) -> float:
        return self.by_arch.get(arch_label(virtual), self.default)

    @classmethod
    def load(cls, environ: Mapping[str, str], unit: str, source: Path) -> Costs:
        """The unit's costs: measured ones (the ledger's), else the seed's guess (EVERY_ARCH, under the unit's
        name or a pattern that matches it), else its source size as a stand-in: bigger TUs first."""
        path = environ.get(COSTS_ENV)
        table: dict[str, dict[str, float]] = {}
        if path and Path(path).is_file():
            table = json.loads(Path(path).read_text())
        measured = dict(table.get(unit) or next((v for k, v in table.items() if fnmatch.fnmatchcase(unit, k)), {}))
        if measured:
            host = float(measured.pop("host", 0.0))
            every = measured.pop(EVERY_ARCH, None)
            by_arch = {k: float(v) for k, v in measured.items()}
            default = float(every) if every is not None else max(by_arch.values(), default=1.0)
            return cls(by_arch=by_arch, host=host, default=default)
        size = source.stat().st_size / 1000 if source.is_file() else 1.0
        return cls(default=size, host=size / 4)


def arch_label(virtual: str) -> str:
    """compute_90a -> 9.0a, the ledger's spelling (nvcc_time.py)."""
    match = re.fullmatch(r"(?:compute|sm)_(\d+)([af]?)", virtual)
    if match is None:
        return virtual
    return f"{match[1][:-1]}.{match[1][-1]}{match[2]}"


class _Timings:
    """Rows for the ``--time`` file in nvcc's own CSV layout (nvcc_time.py reads them), appended once at the end;
    each step also goes onto the build's timeline as it ends, with its CPU-seconds and, for a device step run
    through the stage cache, whether it was reused. A ``--time`` row says what compiling a (TU, arch) cost: an
    arch whose chain reused a step writes none."""

    def __init__(self, source: str, timeline: Timeline | None = None) -> None:
        self.source = source
        self.timeline = timeline or Timeline(None, Path(source).name)
        self.rows: list[tuple[str, str]] = []  # (the chain's arch or "", the row)
        self.reused: set[str] = set()
        self._lock = threading.Lock()

    def add(self, phase: str, arch: str, seconds: float, chain: str = "") -> None:
        with self._lock:
            self.rows.append((chain, f"{self.source} , {phase} , , , {arch} , nvcc , {seconds * 1000:.4f} , ms\n"))

    def reuse(self, chain: str) -> None:
        with self._lock:
            self.reused.add(chain)

    def write(self, path: str | None) -> None:
        rows = [row for chain, row in self.rows if not chain or chain not in self.reused]
        if not path or not rows:
            return
        header = "" if Path(path).is_file() else "source file name , phase name , phase input files , " \
            "phase output file , arch , tool, metric , unit\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (header + "".join(rows)).encode())
        finally:
            os.close(fd)


@dataclass(frozen=True, kw_only=True)
class DeviceSteps:
    """The stage cache as one TU's device steps (cicc, ptxas) use it: the dryrun's variables (where the toolkit's
    programs are) and the TU's scratch folder (which of a step's arguments are files it reads)."""

    cache: stagecache.StageCache
    variables: Mapping[str, str]
    scratch: Path
    unit: str

    def run(self, stage: str, command: str, arch: str, call: Callable[[], int]) -> tuple[int, str]:
        step = stagecache.step_of(stage, command, self.variables, self.scratch, self.cache.programs)
        return self.cache.run(step, call, unit=self.unit, arch=arch_label(arch))


def _run_commands(
    commands: list[str], env: dict[str, str], timings: _Timings, arch: str, pool: CorePool, part: str = "chain",
    devices: DeviceSteps | None = None,
) -> int:
    """Run a part's commands in turn (``part``: front, chain or back, for the timeline); the first failure stops
    the pool. ``devices``: the stage cache, through which cicc and ptxas run."""
    for command in commands:
        if pool.stopped:
            sys.stderr.write(f"nvcc step not started: an earlier step of this build failed: {command}\n")
            return 1
        if program_of(command) == "rm":  # nvcc cleans up files some steps only write in some modes: never fatal
            command = command.replace("rm ", "rm -f ", 1)
        program = program_of(command)
        stage = stagecache.stage_of(program) if devices is not None else None
        cpu: list[float] = []
        start = time.monotonic()
        if devices is not None and stage is not None:
            call = functools.partial(_call, command, env, pool, cpu)
            returncode, result = devices.run(stage, command, arch, call)
        else:
            returncode, result = _call(command, env, pool, cpu), ""
        end = time.monotonic()
        phase = program + (" (preprocessing)" if " -E " in command else "")
        if result == "hit":
            timings.reuse(arch)
        else:
            timings.add(phase, _ptxas_arch(command, arch) if program == "ptxas" else arch, end - start, arch)
        extra = {"result": result} if result else {}
        timings.timeline.add(part, arch, start, end, step=phase, cpu=round(sum(cpu), 3), **extra)
        if returncode != 0:
            sys.stderr.write(f"nvcc step failed ({returncode}): {command}\n")
            pool.stop()
            return returncode
    return 0


def _call(command: str, env: dict[str, str], pool: CorePool, cpu: list[float] | None = None) -> int:
    """Run one step; a pool stopped meanwhile (another TU failed) ends it: its object would be thrown away. The
    step's CPU-seconds (user and system, from wait4) are appended to ``cpu``."""
    # exec: the shell becomes the step (dryrun commands are simple commands), so killing it ends the compiler; it
    # stays in the build's process group, so killing the build ends it too
    process = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], env=env)
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(_STOP_POLL_SECONDS):
            if pool.stopped:
                process.kill()
                sys.stderr.write(f"nvcc step stopped: another step of this build failed: {command}\n")
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        finished.set()
    watcher.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return 1 if pool.stopped and process.returncode != 0 else process.returncode


def _ptxas_arch(command: str, virtual: str) -> str:
    match = re.search(r"-arch=(sm_\d+[af]?)", command)
    return match[1] if match else virtual


def execute(plan_: Plan, pool: CorePool, costs: Costs, timings: _Timings, devices: DeviceSteps | None = None) -> int:
    """Front end, then every chain on its own core, then the back end; each step waits for a core."""
    env = {**os.environ, **plan_.variables}
    env.pop("NVCC_APPEND_FLAGS", None)
    env.pop("NVCC_PREPEND_FLAGS", None)
    timeline = timings.timeline
    longest = max((costs.arch(a) for a in plan_.chains), default=0.0)
    with _core(pool, costs.host + longest, timeline, "front", ""):
        if (code := _run_commands(plan_.front, env, timings, "", pool, "front")) != 0:
            return code
    results: dict[str, int] = {}
    module_id_written = threading.Event()

    def chain(arch: str) -> None:
        commands = plan_.chains[arch]
        cicc = next(i for i, c in enumerate(commands) if program_of(c) == "cicc")
        priority = costs.arch(arch) + costs.host / 2
        writer = plan_.module_id_writer
        run = functools.partial(_run_commands, env=env, timings=timings, arch=arch, pool=pool, devices=devices)
        try:
            if writer not in (None, arch):
                with _core(pool, priority, timeline, "chain", arch):  # the preprocessing needs no module id
                    results[arch] = run(commands[:cicc])
                module_id_written.wait()
                results[arch] = results[arch] or results.get(writer, 0)
                if results[arch] == 0:
                    with _core(pool, priority, timeline, "chain", arch):
                        results[arch] = run(commands[cicc:])
                return
            first = cicc + 1 if arch == writer else len(commands)
            with _core(pool, priority, timeline, "chain", arch):
                results[arch] = run(commands[:first])
                if arch == writer:
                    module_id_written.set()
                if results[arch] == 0:
                    results[arch] = run(commands[first:])
        finally:
            if arch == writer:
                module_id_written.set()  # also when it failed: the waiters read its result

    threads = [threading.Thread(target=chain, args=(arch,)) for arch in plan_.chains]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [results.get(arch, 1) for arch in plan_.chains if results.get(arch, 1) != 0]
    if failed:
        return failed[0]
    with _core(pool, costs.host / 2, timeline, "back", ""):
        return _run_commands(plan_.back, env, timings, "", pool, "back")


def scratch_for(pool: Path, source: Path) -> Path:
    """The TU's folder for nvcc's temporary files: fixed for a given workspace and source, whatever the torch or
    the Python (the workspace's path names neither), so every build runs the TU's steps with the same arguments."""
    tag = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    return pool / SCRATCH / f"{tag}-{source.name}"


def dryrun_plan(nvcc: str, flags: list[str], environ: Mapping[str, str], scratch: Path) -> Plan | None:
    """nvcc's steps for ``flags`` (split_flags' output), its temporary files in ``scratch``; None when nvcc's plan is
    not one this module takes apart."""
    output = flags[flags.index("-o") + 1]
    depfile = flags[flags.index("-MF") + 1] if "-MF" in flags else None
    env = {k: v for k, v in environ.items() if k not in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")}
    env["TMPDIR"] = str(scratch)  # nvcc's temporary files, named in the dryrun, live here
    dry = subprocess.run(
        [nvcc, "--dryrun", *flags], env=env, capture_output=True, text=True, encoding="utf-8", errors="replace",
        check=False,
    )
    if dry.returncode != 0:
        return None
    try:
        return plan(*parse_dryrun(dry.stderr), depfile=depfile, output=output)
    except NotPlannable:
        return None


def compile_split(
    nvcc: str, args: list[str], source: Path, environ: Mapping[str, str], *, started: float | None = None,
    cache: stagecache.StageCache | None = None,
) -> int | None:
    """Compile one TU through the pool; None when nvcc's plan is not one this module takes apart (the caller
    then runs nvcc whole). ``started``: when the nvcc call began (the wrapper's start), for the timeline's "plan"
    row, which ends once nvcc's dryrun is taken apart. ``cache``: where cicc and ptxas outputs are reused."""
    flags, time_file = split_flags(args, environ)
    output = flags[flags.index("-o") + 1]
    depfile = flags[flags.index("-MF") + 1] if "-MF" in flags else None
    pool = CorePool(Path(environ[POOL_ENV]), int(environ.get(SLOTS_ENV, "1")))
    scratch = scratch_for(pool.root, source)
    with _scratch_held(scratch):
        steps = dryrun_plan(nvcc, flags, environ, scratch)
        if steps is None:
            return None
        timeline = Timeline(environ.get(TIMELINE_ENV), source.name)
        timeline.add("plan", "", time.monotonic() if started is None else started, time.monotonic())
        timings = _Timings(str(source), timeline)
        devices = None if cache is None else DeviceSteps(cache=cache, variables=steps.variables, scratch=scratch,
                                                         unit=source.name)
        returncode = execute(steps, pool, Costs.load(environ, source.name, source), timings, devices)
        timings.write(time_file)
        if returncode == 0 and depfile is not None and steps.depfiles:
            merge_depfiles(steps.depfiles, depfile, output)
        return returncode


@contextmanager
def _scratch_held(scratch: Path) -> Iterator[None]:
    """The TU's scratch folder, emptied, for this compile alone: two compiles of one TU at once (the same source
    through one pool) take turns, since their steps would write the same fixed names."""
    scratch.parent.mkdir(parents=True, exist_ok=True)
    with open(scratch.parent / f"{scratch.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(scratch, ignore_errors=True)  # what a killed compile of this TU left
        scratch.mkdir()
        try:
            yield
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
