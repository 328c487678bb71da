"""The acceptance run's summary JSON: one entry per stage (status, seconds, detail, checks, data) and the commands of
the run, rewritten whole and atomically after every stage, so that a run cut short still leaves what it had done and
the next command's --resume goes on from it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from builder.core.files import write_atomic

PASSED, FAILED, SKIPPED, REUSED, PENDING, RUNNING = "passed", "failed", "skipped", "reused", "pending", "running"
# reused: an earlier build taken over (--skip-build); pending: not started in this command, for lack of time or
# because the build is still running; running: the build, detached, still at work when the command ended
SETTLED = (PASSED, FAILED, REUSED)  # a result --resume keeps; the others are tried again
SCHEMA = 1
Summary = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class StageResult:
    """How a stage went: its checks (each ``{"name", "status", "detail", "data"?}``), and its own data."""

    status: str
    detail: str = ""
    checks: tuple[dict[str, Any], ...] = ()
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float | None = None  # its own wall time (the detached build's, across commands), else the stage's


def check(name: str, ok: bool, detail: str = "", **data: Any) -> dict[str, Any]:
    return {"name": name, "status": PASSED if ok else FAILED, "detail": detail, **({"data": data} if data else {})}


def of_checks(checks: Sequence[dict[str, Any]], *, data: dict[str, Any] | None = None) -> StageResult:
    """A stage fails if any check failed, is skipped (saying why) if every check was, and passes otherwise."""
    failed = sum(c["status"] == FAILED for c in checks)
    if failed:
        status = FAILED
    elif not checks or all(c["status"] == SKIPPED for c in checks):
        return StageResult(status=SKIPPED, detail=checks[0]["detail"] if checks else "no checks ran",
                           checks=tuple(checks), data=data or {})
    else:
        status = PASSED
    skipped = sum(c["status"] == SKIPPED for c in checks)
    detail = f"{len(checks) - failed - skipped} of {len(checks)} checks passed" + (f", {skipped} skipped" * bool(
        skipped))
    return StageResult(status=status, detail=detail, checks=tuple(checks), data=data or {})


def load(path: Path) -> Summary:
    if path.is_file():
        summary: Summary = json.loads(path.read_text())
        return summary
    return _fresh()


def _fresh() -> Summary:
    return {"schema": SCHEMA, "started_at": _now(), "stages": {}, "environment": {}}


def save(path: Path, summary: Summary) -> None:
    write_atomic(path, (json.dumps(summary, indent=2) + "\n").encode())


def begin_command(path: Path, *, command: str, planned: Sequence[str], resume: bool) -> None:
    """A command of the run starts: a fresh run starts the summary over; each command is listed with the stages it
    planned and ran, so that a proof spanning several commands says which did what."""
    summary = load(path) if resume else _fresh()
    summary.setdefault("commands", []).append(
        {"started_at": _now(), "command": command, "planned": list(planned), "ran": []})
    for key in ("outcome", "acceptance", "finished_at"):
        summary.pop(key, None)
    save(path, summary)


def record(path: Path, name: str, result: StageResult, *, seconds: float | None = None) -> None:
    """One stage's result; one not pending counts as run by this command."""
    summary = load(path)
    entry: dict[str, Any] = {"status": result.status, "detail": result.detail}
    took = result.seconds if result.seconds is not None else seconds
    if took is not None:
        entry["seconds"] = round(took, 2)
    if result.checks:
        entry["checks"] = list(result.checks)
    if result.data:
        entry["data"] = result.data
    summary["stages"][name] = entry
    if summary.get("commands") and result.status != PENDING and name not in summary["commands"][-1]["ran"]:
        summary["commands"][-1]["ran"].append(name)
    save(path, summary)


def update(path: Path, **fields: Any) -> None:
    """Merge top-level fields (``environment`` is merged key by key)."""
    summary = load(path)
    for key, value in fields.items():
        if key == "environment":
            summary.setdefault("environment", {}).update(value)
        else:
            summary[key] = value
    save(path, summary)


def _ran_here(summary: Summary, name: str) -> bool:
    if summary.get("commands"):
        return name in summary["commands"][-1].get("ran", ())
    return name in summary["stages"]


def skip_remaining(path: Path, stages: Sequence[str], reason: str, *, status: str = SKIPPED) -> None:
    """Every stage without a result in this command is skipped (or pending), for the reason; a result an earlier
    command left stands, unless it was itself only pending, running or skipped."""
    summary = load(path)
    for name in stages:
        earlier = summary["stages"].get(name, {}).get("status")
        if not _ran_here(summary, name) and earlier in (None, PENDING, RUNNING, SKIPPED):
            summary["stages"][name] = {"status": status, "detail": reason}
    save(path, summary)


def verdict(summary: Summary, stages: Sequence[str]) -> tuple[str, bool]:
    """(outcome, acceptance): passed, failed, incomplete (a stage pending, running, skipped or not reached: --resume
    may finish it) or no-gpu; acceptance also needs a full run that built its own wheels."""
    results = {name: summary["stages"].get(name, {}).get("status") for name in stages}
    if summary["stages"].get("preflight", {}).get("data", {}).get("cuda_available") is False:
        outcome = "no-gpu"
    elif FAILED in results.values():
        outcome = FAILED
    elif all(status in (PASSED, REUSED) for status in results.values()):
        outcome = PASSED
    else:
        outcome = "incomplete"
    full = summary.get("mode", "full") == "full" and results.get("build") == PASSED
    return outcome, outcome == PASSED and full


def finish(path: Path, stages: Sequence[str]) -> Summary:
    outcome, acceptance = verdict(load(path), stages)
    update(path, outcome=outcome, acceptance=acceptance, finished_at=_now())
    return load(path)


def render(summary: Summary, stages: Sequence[str]) -> list[str]:
    """The end-of-run table, one line per stage, then its failed checks."""
    lines = [f"{'stage':<10} {'status':<8} {'seconds':>8}  detail"]
    for name in stages:
        entry = summary["stages"].get(name, {"status": "-", "detail": "not reached"})
        seconds = f"{entry['seconds']:.1f}" if "seconds" in entry else ""
        lines.append(f"{name:<10} {entry['status']:<8} {seconds:>8}  {entry.get('detail', '')}")
        lines += [f"{'':<10}   FAILED {c['name']}: {c['detail']}" for c in entry.get("checks", [])
                  if c["status"] == FAILED]
    acceptance = "yes" if summary.get("acceptance") else "no"
    return [*lines, f"outcome: {summary.get('outcome', 'incomplete')}; acceptance: {acceptance}"]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
