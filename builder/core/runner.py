"""The one way wheelwright starts processes: log the command, stream output into the active job's log (see
builder.core.context), and raise a typed error naming the step and the missing executable or exit status. A command
that waits on a peer (a package index, a daemon) runs under a total deadline and is killed, with its whole process
group, when it passes it. Output is decoded as UTF-8 with replacement: no byte a tool prints is an error."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.core import context
from builder.core.errors import ToolchainError, WheelwrightError
from builder.core.settings import deadline_scale

log = logging.getLogger(__name__)

# auditwheel changes the process's working directory while it reads or repairs a wheel (its temporary-directory
# contexts), then deletes that directory. A process another thread started meanwhile would begin in it: pip then
# failed at `os.getcwd()` while verifying slim wheels cut side by side (docs/gpu-acceptance.md, 2026-12-06). So a
# library call that may change the directory holds this lock, and every start takes it: a child begins where the
# process means to be. Reentrant: the starts the library makes itself (patchelf) are its own, in its directory.
_WORKING_DIRECTORY = threading.RLock()


@contextmanager
def working_directory_borrowed() -> Iterator[None]:
    """Hold while calling a library that changes the process's working directory (auditwheel): no other thread
    starts a process until it is back."""
    with _WORKING_DIRECTORY:
        yield


class StepFailed(WheelwrightError):
    """A command a job ran exited non-zero."""

    exit_code = 6

    def __init__(
        self, step: str, command: Sequence[str], returncode: int, log_path: Path | None, tail: str = ""
    ) -> None:
        where = f"; log: {log_path}" if log_path else ""
        super().__init__(f"{step} failed (exit {returncode}): {shlex.join(command)}{where}")
        self.step, self.returncode, self.tail = step, returncode, tail


@dataclass(frozen=True, kw_only=True)
class Deadline:
    """How long a command that waits on ``peer`` may run, in seconds (times $WHEELWRIGHT_DEADLINE_SCALE)."""

    peer: str  # what it waits on, for the error: "the container daemon", "the package index"
    total: float

    def seconds(self) -> float:
        return self.total * deadline_scale()


class DeadlinePassed(StepFailed):
    """A command waiting on a peer passed its total deadline and was killed."""

    def __init__(self, step: str, command: Sequence[str], deadline: Deadline, log_path: Path | None, tail: str) -> None:
        where = f"; log: {log_path}" if log_path else ""
        WheelwrightError.__init__(
            self,
            f"{step}: {shlex.join(command)} waited on {deadline.peer} for {deadline.seconds():g} s "
            f"(total deadline) and was stopped{where}",
        )
        self.step, self.returncode, self.tail = step, -signal.SIGKILL, tail


# Commands that wait on a peer; docs/hostile-input.md ("Deadlines and caps") says why these numbers.
ENGINE_INFO = Deadline(peer="the container engine's daemon", total=30)
ENGINE_QUERY = Deadline(peer="the container engine's daemon", total=120)
PIP_TORCH = Deadline(peer="the torch index and the package index", total=3600)
PIP_TOOLS = Deadline(peer="the package index", total=1800)
APT_UPDATE = Deadline(peer="Debian's mirror", total=600)
APT_DOWNLOAD = Deadline(peer="Debian's mirror", total=3600)


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
    deadline: Deadline | None = None,
) -> Completed:
    """Run ``command``; append its output to the log; call ``on_line`` for each line (progress display).

    The log is ``log_path`` if given, else the active job's log; the active job's progress sees every line too.
    ``capture`` also keeps the output in memory (for commands whose answer is their output). With a ``deadline``,
    the command and every process of its group are killed when it passes, and DeadlinePassed is raised (also
    with ``check=False``: no answer is not an exit status).
    """
    job = context.current()
    if log_path is None and job is not None:
        log_path = job.log
    listeners = [f for f in (on_line, job.on_line if job else None) if f is not None]
    argv = [os.fspath(part) for part in command]
    log.debug("%s: %s", step, shlex.join(argv))
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None and not Path(argv[0]).exists():
        raise ToolchainError(
            f"{step}: executable {argv[0]!r} not found", tip="check the toolchain (see docs/toolkits.md)"
        )
    start = time.monotonic()
    kept: list[str] = []
    tail: list[str] = []
    log_file = log_path.open("a", encoding="utf-8") if log_path else None
    try:
        if log_file:
            log_file.write(f"$ {shlex.join(argv)}\n")
            log_file.flush()
        # the Popen context closes the pipe, which would otherwise leak (ResourceWarning)
        with _start(argv, env, cwd, deadline) as process, _watchdog(process, deadline) as fired:
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
    if deadline is not None and fired.is_set():
        raise DeadlinePassed(step, argv, deadline, log_path, "".join(tail))
    if check and returncode != 0:
        raise StepFailed(step, argv, returncode, log_path, "".join(tail))
    return Completed(returncode=returncode, output="".join(kept), seconds=seconds)


def _start(
    argv: list[str], env: Mapping[str, str] | None, cwd: Path | None, deadline: Deadline | None
) -> subprocess.Popen[str]:
    with _WORKING_DIRECTORY:  # never while another thread's library call has the directory (see above)
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=deadline is not None,  # its own group, so the deadline kills what it started too
        )


@contextmanager
def _watchdog(process: subprocess.Popen[str], deadline: Deadline | None) -> Iterator[threading.Event]:
    """Kill ``process``'s group when ``deadline`` passes (the event is then set); also when the caller is
    interrupted, since a group of its own no longer gets the terminal's Ctrl-C."""
    fired, done = threading.Event(), threading.Event()
    if deadline is None:
        yield fired
        return
    seconds = deadline.seconds()

    def watch() -> None:
        if not done.wait(seconds):
            fired.set()
            _kill_group(process)

    thread = threading.Thread(target=watch, name=f"deadline-{process.pid}", daemon=True)
    thread.start()
    try:
        yield fired
    except BaseException:
        _kill_group(process)
        raise
    finally:
        done.set()
        thread.join()


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
