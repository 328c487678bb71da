"""A/B timing across wheels installed in different venvs: one long-lived worker process per arm (a wheel's venv),
driven in rounds from here. Each round asks every worker in turn to time all its cases once, the order rotated
round by round, while the others wait idle: every arm sees the same clocks, temperature and load, a few seconds
apart, instead of one arm's whole benchmark before the other's.

The protocol is lines on the worker's stdin and stdout: the worker prints ``@@ready {facts}`` once its cases are
warm, answers ``round`` with ``@@times {case: ms}`` and exits on ``quit``. Other lines a library prints are kept
for the error message. This side needs no torch (the workers have it)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

READY, TIMES = "@@ready ", "@@times "


class WorkerError(RuntimeError):
    """A worker exited, printed something unreadable or did not answer in time."""


@dataclass(frozen=True, kw_only=True)
class Arm:
    name: str
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


class Timer(Protocol):
    def round(self) -> dict[str, float]: ...

    def facts(self) -> dict[str, object]: ...


def serve(make_timer: Callable[[], Timer], lines: IO[str], out: IO[str]) -> int:
    """The worker's side: build the timer (loads and warms the kernels), say ready, answer rounds until quit."""
    timer = make_timer()
    out.write(READY + json.dumps(timer.facts()) + "\n")
    out.flush()
    for line in lines:
        command = line.strip()
        if command == "quit":
            break
        if command == "round":
            out.write(TIMES + json.dumps(timer.round()) + "\n")
            out.flush()
    return 0


def rotated(names: Sequence[str], turn: int) -> list[str]:
    """The arms' order in round ``turn``: each arm goes first in turn, so that none always follows the same one."""
    shift = turn % len(names)
    return [*names[shift:], *names[:shift]]


class _Worker:
    """One arm's process: requests to its stdin, protocol lines read from its stdout under a deadline."""

    def __init__(self, arm: Arm, log: Path) -> None:
        self.arm, self.log = arm, log
        self.stray: list[str] = []
        self._buffer = b""
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(
                list(arm.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                env={**os.environ, **arm.env},
            )

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(f"{command}\n".encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self._failure("exited before it was asked") from None

    def expect(self, prefix: str, deadline: float) -> dict[str, Any]:
        """The next line starting with ``prefix``, decoded; other lines are kept for the error message."""
        while True:
            line = self._line(deadline)
            if line.startswith(prefix):
                try:
                    answer: dict[str, Any] = json.loads(line[len(prefix):])
                    return answer
                except json.JSONDecodeError:
                    raise self._failure(f"printed an unreadable answer: {line[:200]!r}") from None
            self.stray = [*self.stray[-19:], line]

    def _line(self, deadline: float) -> str:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise self._failure("did not answer in time")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise self._failure("exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode(errors="replace")

    def _failure(self, what: str) -> WorkerError:
        try:  # its stdout closed: it is exiting, and its status is a moment away
            code = self.process.wait(timeout=5) if what == "exited" else self.process.poll()
        except subprocess.TimeoutExpired:
            code = None
        tail = self.log.read_text(errors="replace").strip().splitlines()[-5:] if self.log.is_file() else []
        said = " | ".join([*self.stray[-3:], *tail]) or "nothing"
        return WorkerError(f"the {self.arm.name} worker {what} (exit {code}); it said: {said}")

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("quit")
            except WorkerError:
                pass
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:  # the pipe to a worker that already exited
                pass


def run_rounds(arms: Sequence[Arm], *, rounds: int, timeout_s: float, log_dir: Path) -> dict[str, Any]:
    """Start every arm's worker at once (they load and warm up side by side, before any timing), then ``rounds``
    rounds, one worker timing at a time. Returns the arms' facts, each round's order and times; on a worker's
    failure, what was measured and the error."""
    log_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    names = [arm.name for arm in arms]
    result: dict[str, Any] = {"arms": names, "order": [], "rounds": [], "workers": {}, "error": None}
    workers: list[_Worker] = []
    try:
        for arm in arms:
            workers.append(_Worker(arm, log_dir / f"worker-{arm.name}.log"))
        by_name = {worker.arm.name: worker for worker in workers}
        for worker in workers:
            result["workers"][worker.arm.name] = worker.expect(READY, deadline)
        for turn in range(rounds):
            order, times = rotated(names, turn), {}
            for name in order:
                by_name[name].send("round")
                times[name] = by_name[name].expect(TIMES, deadline)
            result["order"].append(order)
            result["rounds"].append(times)
    except WorkerError as error:
        result["error"] = str(error)
    finally:
        for worker in workers:
            worker.stop()
    return result
