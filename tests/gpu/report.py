"""The GPU tests' JSON report, a small pytest plugin: each test's status, seconds, and what it recorded (a passing
test's detail and data) or why it failed or was skipped (the first line of the message), then the stage's data and
the machine's facts. scripts/gpu/acceptance.py reads it into the run's summary, one stage per pytest run."""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Recorded:
    detail: str = ""
    data: dict[str, object] = field(default_factory=dict)


@dataclass
class Result:
    name: str
    status: str = "passed"
    detail: str = ""
    seconds: float = 0.0
    recorded: Recorded = field(default_factory=Recorded)

    def as_dict(self) -> dict[str, object]:
        detail = self.detail or (self.recorded.detail if self.status == "passed" else "")
        return {"name": self.name, "status": self.status, "detail": detail, "seconds": round(self.seconds, 2),
                **({"data": self.recorded.data} if self.recorded.data else {})}


def _message(report: pytest.TestReport, call: pytest.CallInfo[None]) -> str:
    """The first line of why a test failed or was skipped."""
    if isinstance(report.longrepr, tuple):  # a skip: (path, line, "Skipped: why")
        return report.longrepr[2].removeprefix("Skipped: ")
    error = call.excinfo.value if call.excinfo is not None else None
    if error is None:
        text = report.longreprtext
    elif isinstance(error, AssertionError | pytest.fail.Exception):  # the test's own words
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    return (text.strip().splitlines() or ["failed"])[0][:500]


class Report:
    NAME = "gpu-report"

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.results: dict[str, Result] = {}
        self.data: dict[str, Any] = {}
        self.environment: dict[str, Any] = {}

    @classmethod
    def of(cls, config: pytest.Config) -> Report:
        report = config.pluginmanager.get_plugin(cls.NAME)
        assert isinstance(report, cls)
        return report

    def recorded(self, nodeid: str) -> Recorded:
        return self.results.setdefault(nodeid, Result(name=nodeid.rsplit("::", 1)[-1])).recorded

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        result = self.results.setdefault(item.nodeid, Result(name=item.name))
        result.seconds += report.duration
        if report.failed or (report.skipped and result.status == "passed"):
            result.status = "failed" if report.failed else "skipped"
            result.detail = result.detail or _message(report, call)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.path is None:
            return
        document = {"tests": [result.as_dict() for result in self.results.values()], "data": self.data,
                    "environment": self.environment, "exitstatus": int(exitstatus)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(document, indent=1, default=str) + "\n")
