"""The job a thread is working on, its log and its progress callback, set once per job by the farm.

Every subprocess started through builder.core.runner while a job's context is active writes to that job's log and
feeds its lines to the job's progress, so no step needs a log path handed down to it (and none can drop one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class Identified(Protocol):
    """What the context needs of a job (builder.plan.job.Job has it); the core layer does not import the plan."""

    @property
    def identifier(self) -> str: ...


def _ignore(line: str) -> None:
    """No progress display."""


@dataclass(frozen=True, kw_only=True)
class JobContext:
    job: Identified
    log: Path  # the job's log file, appended to
    on_line: Callable[[str], None] = _ignore  # every output line of the job's subprocesses (progress display)

    def write(self, text: str) -> None:
        """Append ``text`` to the job's log (a step's own notes: recipe edits, the verify report)."""
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")


_current: ContextVar[JobContext | None] = ContextVar("wheelwright_job", default=None)


def current() -> JobContext | None:
    """The active job's context, or None outside a job (plan, index, a test calling a step directly)."""
    return _current.get()


def log_note(text: str) -> None:
    """Append ``text`` to the active job's log; outside a job there is no log, so nothing is written."""
    context = current()
    if context is not None:
        context.write(text)


@contextmanager
def job_context(job: Identified, log: Path, on_line: Callable[[str], None] = _ignore) -> Iterator[JobContext]:
    """Make ``job`` the active job of this thread (and of what it calls) until the block ends."""
    context = JobContext(job=job, log=log, on_line=on_line)
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
