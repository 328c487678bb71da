"""The one way wheelwright starts processes: log the command, stream output into the active job's log (see
builder.core.context), and raise a typed error naming the step and the missing executable or exit status."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.core import context
from builder.core.errors import ToolchainError, WheelwrightError

log = logging.getLogger(__name__)


class StepFailed(WheelwrightError):
    """A command a job ran exited non-zero."""

    exit_code = 6

    def __init__(
        self, step: str, command: Sequence[str], returncode: int, log_path: Path | None, tail: str = ""
    ) -> None:
        where = f"; log: {log_path}" if log_path else ""
        super().__init__(f"{step} failed (exit {returncode}): {shlex.join(command)}{where}")
        self.step, self.returncode, self.tail = step, returncode, tail


@dataclass(frozen=True)
class Completed:
    returncode: int
    output: str
    seconds: float


def which(executable: str, path: str | None = None) -> str:
    found = shutil.which(executable, path=path)
    if found is None:
        raise ToolchainError(f"{executable} not found on PATH", tip=f"install {executable} or put it on PATH")
    return found


def run(
    command: Sequence[str | os.PathLike[str]],
    *,
    step: str,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    check: bool = True,
    capture: bool = False,
) -> Completed:
    """Run ``command``; append its output to the log; call ``on_line`` for each line (progress display).

    The log is ``log_path`` if given, else the active job's log; the active job's progress sees every line too.
    ``capture`` also keeps the output in memory (for commands whose answer is their output).
    """
    job = context.current()
    if log_path is None and job is not None:
        log_path = job.log
    listeners = [f for f in (on_line, job.on_line if job else None) if f is not None]
    argv = [os.fspath(part) for part in command]
    log.debug("%s: %s", step, shlex.join(argv))
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None and not Path(argv[0]).exists():
        raise ToolchainError(f"{step}: executable {argv[0]!r} not found", tip="check the toolchain (see README)")
    start = time.monotonic()
    kept: list[str] = []
    tail: list[str] = []
    log_file = log_path.open("a", encoding="utf-8") if log_path else None
    try:
        if log_file:
            log_file.write(f"$ {shlex.join(argv)}\n")
            log_file.flush()
        with subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        ) as process:  # the context closes the pipe, which would otherwise leak (ResourceWarning)
            assert process.stdout is not None
            for line in process.stdout:
                if log_file:
                    log_file.write(line)
                if capture:
                    kept.append(line)
                tail = (tail + [line])[-40:]
                for listener in listeners:
                    listener(line.rstrip("\n"))
            returncode = process.wait()
    finally:
        if log_file:
            log_file.close()
    seconds = time.monotonic() - start
    if check and returncode != 0:
        raise StepFailed(step, argv, returncode, log_path, "".join(tail))
    return Completed(returncode=returncode, output="".join(kept), seconds=seconds)


_PROC = Path("/proc")
_REAP_POLL_SECONDS = 0.05


def kill_marked(variable: str, value: str, *, timeout: float = 10.0) -> int:
    """SIGKILL every process of this user whose environment holds ``variable=value`` (this process excepted), again
    until none is left or ``timeout`` passes; returns how many were killed. Where there is no /proc, nothing.

    The environment is how the processes of one piece of work are found after the work itself was killed: it passes
    to every descendant, whatever process group or session a descendant moved to (ninja starts each command in a
    group of its own, so killing the build's group leaves its compilers running)."""
    if not _PROC.is_dir():
        return 0
    marker = f"{variable}={value}".encode()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while (found := _marked(marker)) and time.monotonic() < deadline:
        for pid in found - killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            killed.add(pid)
        time.sleep(_REAP_POLL_SECONDS)  # the killed go (a zombie's environment reads empty) or a child shows up
    if found:
        log.warning("%d processes with %s=%s still ran after %.0f s", len(found), variable, value, timeout)
    return len(killed)


def _marked(marker: bytes) -> set[int]:
    found = set()
    ours = _mount_namespace("self")
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (_PROC / entry.name / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if marker in environ.split(b"\0") and _mount_namespace(entry.name) == ours:
            found.add(int(entry.name))
    return found


def _mount_namespace(pid: str) -> str | None:
    """A process in another mount namespace (a container's build of the same job) has a /tmp of its own: the same
    workspace path there is not this one, and its compilers are not ours to end."""
    try:
        return os.readlink(_PROC / pid / "ns" / "mnt")
    except OSError:
        return None
