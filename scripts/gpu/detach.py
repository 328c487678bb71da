"""A command that outlives the acceptance command that started it: the build, which can take longer than one device
command allows. It runs in a process session of its own (which the device machine leaves running between commands
while it stays warm) and records its exit status in a state folder, from which a later command collects it.

The state folder holds ``run.json`` (pid, start time, the command) once started, ``exit.json`` (status, end time)
once ended, and ``collected`` once a command has taken the result (so that a later one starts afresh). Run as a
script, this module is the process that waits for the command and writes ``exit.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NONE, RUNNING, FINISHED, VANISHED = "none", "running", "finished", "vanished"
COLLECTED = "collected"  # finished, and a later command has taken its result
EXIT_TIMED_OUT, EXIT_NOT_FOUND = 124, 127
STOP_GRACE_S = 10.0


class DetachError(Exception):
    """A detached command cannot be started or stopped; the message says why."""


@dataclass(frozen=True, kw_only=True)
class Detached:
    """Where a detached command stands. ``vanished``: it was started but ended without recording its status."""

    state: str
    pid: int | None = None
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    command: tuple[str, ...] = ()

    def seconds(self, now: float | None = None) -> float:
        """How long it ran (finished) or has been running (0 if it never started)."""
        if self.started is None:
            return 0.0
        return (self.ended if self.ended is not None else now or time.time()) - self.started


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        document: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document


def status(state: Path) -> Detached:
    """What ``state`` says of its command; a live pid counts only if that process is this command's waiter (pids
    are reused)."""
    run, ended = _read_json(state / "run.json"), _read_json(state / "exit.json")
    if run is None and ended is None:
        return Detached(state=NONE)
    run = run or {}
    pid, started, command = run.get("pid"), run.get("started"), tuple(run.get("command", ()))
    if ended is not None:
        finished = COLLECTED if (state / "collected").exists() else FINISHED
        return Detached(state=finished, pid=pid, started=started, command=command, ended=ended["ended"],
                        exit_code=int(ended["exit"]))
    running = RUNNING if _is_waiter(pid, state) else VANISHED
    return Detached(state=running, pid=pid, started=started, command=command)


def _is_waiter(pid: int | None, state: Path) -> bool:
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(state.resolve()).encode() in cmdline


def start(state: Path, command: Sequence[str], *, log: Path, limit_s: float,
          env: dict[str, str] | None = None) -> Detached:
    """Start ``command`` detached (in ``env``), its output to ``log``, stopped after ``limit_s``. The waiter is
    started through a short-lived intermediate process, so that it is nobody's child here and outlives the caller
    cleanly."""
    if status(state).state == RUNNING:
        raise DetachError(f"{state}: a detached command is still running (pid {status(state).pid})")
    state.mkdir(parents=True, exist_ok=True)
    for name in ("run.json", "exit.json", "collected"):
        (state / name).unlink(missing_ok=True)
    spawn = [sys.executable, __file__, "spawn", str(state.resolve()), str(limit_s), str(log), "--", *command]
    done = subprocess.run(spawn, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise DetachError(f"could not start {command[0]} detached: {done.stderr.strip() or done.returncode}")
    return status(state)


def wait(
    state: Path,
    *,
    seconds: float,
    poll_s: float = 1.0,
    tick: Callable[[Detached], None] | None = None,
    tick_every_s: float = 30.0,
) -> Detached:
    """Wait up to ``seconds`` for the command to end; ``tick`` hears about it every ``tick_every_s`` meanwhile."""
    deadline, next_tick = time.monotonic() + seconds, time.monotonic() + tick_every_s
    while True:
        progress = status(state)
        if progress.state != RUNNING or time.monotonic() >= deadline:
            return progress
        if tick is not None and time.monotonic() >= next_tick:
            tick(progress)
            next_tick += tick_every_s
        time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))


def collect(state: Path) -> Detached:
    """Mark a finished command's result as taken; its status reads ``collected`` from then on."""
    progress = status(state)
    if progress.state == FINISHED:
        (state / "collected").touch()
        return status(state)
    return progress


def stop(state: Path) -> Detached:
    """End a running command and its children (its process group), recording that it was stopped."""
    progress = status(state)
    if progress.state != RUNNING:
        return progress
    _signal_group(progress.pid, signal.SIGTERM)
    if wait(state, seconds=STOP_GRACE_S, poll_s=0.2).state == RUNNING:
        _signal_group(progress.pid, signal.SIGKILL)
    if not (state / "exit.json").exists():
        _write_json(state / "exit.json", {"exit": -signal.SIGTERM, "ended": time.time(), "stopped": True})
    return status(state)


def _signal_group(pid: int | None, signal_number: int) -> None:
    if pid is None:
        return
    try:
        os.killpg(pid, signal_number)  # the waiter leads its own session, so its pid is the group's id
    except ProcessLookupError:
        pass


# -- the processes on the other side ----------------------------------------------------------------------------


def _spawn(state: Path, limit_s: float, log: Path, command: list[str]) -> int:
    """The intermediate: start the waiter in a new session, record it, and leave."""
    with log.open("ab") as out:
        waiter = subprocess.Popen(
            [sys.executable, __file__, "run", str(state), str(limit_s), "--", *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _write_json(state / "run.json", {"pid": waiter.pid, "started": time.time(), "command": command})
    return 0


def _run(state: Path, limit_s: float, command: list[str]) -> int:
    """The waiter: run the command in this process group, then record how it ended."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    except OSError as error:
        print(f"ERROR cannot run {command[0]}: {error}", flush=True)
        code = EXIT_NOT_FOUND
    else:
        try:
            code = child.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            print(f"ERROR {command[0]} ran past its limit of {limit_s:.0f} s; stopped", flush=True)
            child.terminate()
            try:
                child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            code = EXIT_TIMED_OUT
    _write_json(state / "exit.json", {"exit": code, "ended": time.time()})
    return 0


def _main(argv: list[str]) -> int:
    mode, state, limit = argv[0], Path(argv[1]), float(argv[2])
    if mode == "spawn":
        return _spawn(state, limit, Path(argv[3]), argv[argv.index("--") + 1 :])
    return _run(state, limit, argv[argv.index("--") + 1 :])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
