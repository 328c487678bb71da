"""What `wheelwright build` shows while it works. A terminal gets rich's live table; a pipe, a file or a CI log gets
plain lines instead: one per phase change with the time it took, a heartbeat naming how far the compile got whenever
nothing else was printed for a while, and under GitHub Actions one collapsible log group per job."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table

from builder.plan.job import Job
from builder.steps.compilation import translation_unit

if TYPE_CHECKING:
    from typing import Self

HEARTBEAT_SECONDS = 25.0  # under the 30 s a person watching a log waits before wondering whether it hangs


def interactive(is_terminal: bool, environ: dict[str, str] | None = None) -> bool:
    """A live display only on a terminal that is not a CI job's (CI=true: its log is a file, whatever it says)."""
    environ = dict(os.environ) if environ is None else environ
    return is_terminal and environ.get("CI", "").lower() not in ("true", "1")


@dataclass
class _JobState:
    phase: str = "queued"
    started: float | None = None  # when the job's first phase began
    phase_started: float | None = None
    unit: str = ""  # the translation unit nvcc is on


class LiveTable:
    """A live table for a terminal: job, phase, elapsed, and the translation unit nvcc is on."""

    def __init__(self, jobs: list[Job], clock: Callable[[], float] = time.monotonic) -> None:
        self.state = {job.identifier: _JobState() for job in jobs}
        self.lock = threading.Lock()
        self.clock = clock

    def phase(self, job: Job, phase: str) -> None:
        with self.lock:
            row = self.state[job.identifier]
            row.phase, row.started = phase, row.started or self.clock()

    def line(self, job: Job, line: str) -> None:
        unit = translation_unit(line)
        if unit:
            with self.lock:
                self.state[job.identifier].unit = unit

    def done(self, job: Job, result: str) -> None:
        with self.lock:
            self.state[job.identifier].phase = result

    def __rich__(self) -> Table:
        table = Table(box=None, pad_edge=False)
        for column in ("job", "phase", "elapsed", "compiling"):
            table.add_column(column, no_wrap=True)
        with self.lock:
            for identifier, row in self.state.items():
                elapsed = f"{self.clock() - row.started:6.0f}s" if row.started else ""
                table.add_row(identifier, row.phase, elapsed, row.unit)
        return table


class LineReporter:
    """Plain progress lines for a log; ``write`` gets one line at a time (no newline)."""

    def __init__(
        self,
        write: Callable[[str], None],
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        groups: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write, self.heartbeat, self.groups, self.clock = write, heartbeat, groups, clock
        self.start_time = clock()
        self.last_write = self.start_time
        self.state: dict[str, _JobState] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the build's callbacks ----------------------------------------------------------------------------------

    def phase(self, job: Job, phase: str) -> None:
        with self.lock:
            now = self.clock()
            row = self.state.setdefault(job.identifier, _JobState())
            if row.started is None:
                row.started = now
                if self.groups:
                    self._emit(f"::group::{job.identifier}")
            previous = f" ({row.phase} took {now - row.phase_started:.0f}s)" if row.phase_started is not None else ""
            row.phase, row.phase_started, row.unit = phase, now, ""
            self._emit(f"{self._stamp(now)} {job.identifier}: {phase}{previous}")

    def line(self, job: Job, line: str) -> None:
        unit = translation_unit(line)
        if unit:
            with self.lock:
                self.state.setdefault(job.identifier, _JobState()).unit = unit

    def done(self, job: Job, result: str) -> None:
        with self.lock:
            now = self.clock()
            row = self.state.pop(job.identifier, _JobState())
            took = f" after {now - row.started:.0f}s" if row.started is not None else ""
            self._emit(f"{self._stamp(now)} {job.identifier}: {result}{took}")
            if self.groups and row.started is not None:
                self._emit("::endgroup::")

    # -- the heartbeat ------------------------------------------------------------------------------------------

    def beat(self) -> None:
        """One line per running job, if nothing was printed for a heartbeat's length."""
        with self.lock:
            now = self.clock()
            if now - self.last_write < self.heartbeat:
                return
            for identifier, row in self.state.items():
                if row.phase_started is None:
                    continue
                # through a pipe ninja prints an edge's status line when the edge finishes, not when it starts
                doing = f", ninja done with {row.unit}" if row.phase == "compile" and row.unit else ""
                self._emit(
                    f"{self._stamp(now)} {identifier}: still {row.phase} ({now - row.phase_started:.0f}s){doing}"
                )
            self.last_write = now  # also when nothing runs: the next beat comes a heartbeat later

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._beat_until_stopped, name="wheelwright-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(min(1.0, self.heartbeat / 5)):
            self.beat()

    def _emit(self, text: str) -> None:
        self._write(text)
        self.last_write = self.clock()

    def _stamp(self, now: float) -> str:
        return f"[{now - self.start_time:5.0f}s]"
