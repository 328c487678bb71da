"""The run's summary JSON: one entry per stage (status, seconds, detail, checks, data), rewritten whole and atomically
after every stage, so that a run cut short still leaves everything it had done."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.files import write_atomic

PASSED, FAILED, SKIPPED, REUSED = "passed", "failed", "skipped", "reused"
PENDING, RUNNING = "pending", "running"
# reused: a stage's earlier result taken over (--skip-build); pending: not started in this command, for lack of time
# or because the build is still running; running: the build, detached, still at work when the command ended
STATUSES = (PASSED, FAILED, SKIPPED, REUSED, PENDING, RUNNING)
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Check:
    """One check inside a stage; ``detail`` says what was compared, or why it was skipped."""

    name: str
    status: str
    detail: str = ""
    data: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "detail": self.detail,
            **({"data": self.data} if self.data else {}),
        }


def skipped_checks(names: Iterable[str], reason: str) -> list[Check]:
    return [Check(name=name, status=SKIPPED, detail=reason) for name in names]


def guarded(name: str, run: Callable[[], Check]) -> Check:
    """A check that raises (no kernel image for this GPU, an illegal address) fails with the error, not the run."""
    try:
        return run()
    except Exception as error:  # noqa: BLE001 (any error of the check is its result)
        return Check(name=name, status=FAILED, detail=f"{type(error).__name__}: {error}".splitlines()[0][:500])


def status_of(checks: Sequence[Check]) -> str:
    """A stage fails if any check failed, is skipped if every check was, and passes otherwise."""
    if any(check.status == FAILED for check in checks):
        return FAILED
    if not checks or all(check.status == SKIPPED for check in checks):
        return SKIPPED
    return PASSED


def load(path: Path) -> dict:
    if path.is_file():
        return json.loads(path.read_text())
    return {"schema": SCHEMA, "started_at": _now(), "stages": {}, "environment": {}}


def save(path: Path, summary: dict) -> None:
    write_atomic(path, (json.dumps(summary, indent=2, sort_keys=False) + "\n").encode())


def record_stage(
    path: Path,
    name: str,
    *,
    status: str,
    seconds: float | None = None,
    detail: str = "",
    checks: Sequence[Check] = (),
    data: dict | None = None,
    keep_result: bool = False,
    own_seconds: bool = False,
) -> dict:
    """Write one stage's result. With ``keep_result``, a result this command already recorded (the Python part's,
    with its checks) stands and only takes ``seconds``: the shell times the whole stage, and records it itself only
    when the Python part died before recording. A result recorded with ``own_seconds`` keeps its time too: the
    detached build's wall time spans commands, of which the shell saw only its own."""
    if status not in STATUSES:
        raise ValueError(f"stage status {status!r} is not one of {STATUSES}")
    summary = load(path)
    if keep_result and _ran_here(summary, name):
        entry = summary["stages"][name]
        if seconds is not None and not entry.get("own_seconds"):
            entry["seconds"] = round(seconds, 2)
        if status == FAILED and entry["status"] == PASSED:  # a later step of the stage failed after the checks
            entry["status"], entry["detail"] = FAILED, f"{detail or 'failed'} after: {entry['detail']}"
        save(path, summary)
        return summary
    entry: dict = {"status": status, "detail": detail}
    if seconds is not None:
        entry["seconds"] = round(seconds, 2)
    if checks:
        entry["checks"] = [check.as_dict() for check in checks]
    if data:
        entry["data"] = data
    if own_seconds:
        entry["own_seconds"] = True
    summary["stages"][name] = entry
    if summary.get("commands") and status != PENDING:
        ran = summary["commands"][-1].setdefault("ran", [])
        if name not in ran:
            ran.append(name)
    save(path, summary)
    return summary


def append_checks(path: Path, name: str, checks: Sequence[Check], *, data: dict | None = None) -> dict:
    """Add checks (and data) to a stage this command recorded, for a stage whose parts are separate commands (an
    arch stage: install, doctor, suite); its status and detail are then those of all its checks. A stage this command
    has not recorded yet is recorded afresh."""
    summary = load(path)
    entry = summary["stages"].get(name)
    earlier = entry.get("checks", []) if entry is not None and _ran_here(summary, name) else []
    merged = [*earlier, *(check.as_dict() for check in checks)]
    statuses = [Check(name=c["name"], status=c["status"]) for c in merged]
    status = status_of(statuses)
    failed = sum(c["status"] == FAILED for c in merged)
    detail = f"{len(merged) - failed} of {len(merged)} checks passed" if status != SKIPPED else merged[0]["detail"]
    kept = entry.get("data", {}) if earlier and entry is not None else {}
    record_stage(path, name, status=status, detail=detail, data={**kept, **(data or {})})
    summary = load(path)
    summary["stages"][name]["checks"] = merged
    save(path, summary)
    return summary


def _ran_here(summary: dict, name: str) -> bool:
    """Whether this command recorded a result for the stage (without a list of commands: whether any did)."""
    if summary.get("commands"):
        return name in summary["commands"][-1].get("ran", ())
    return name in summary["stages"]


def update(path: Path, **fields: object) -> dict:
    """Merge top-level fields (``environment`` is merged key by key)."""
    summary = load(path)
    for key, value in fields.items():
        if key == "environment" and isinstance(value, dict):
            summary.setdefault("environment", {}).update(value)
        else:
            summary[key] = value
    save(path, summary)
    return summary


def skip_remaining(path: Path, stages: Sequence[str], reason: str, *, status: str = SKIPPED) -> dict:
    """Mark every stage in ``stages`` that has no result in this command as skipped (or pending), with the reason.
    A result an earlier command left stands, unless it was itself only pending or running."""
    summary = load(path)
    for name in stages:
        earlier = summary["stages"].get(name, {}).get("status")
        if not _ran_here(summary, name) and earlier in (None, PENDING, RUNNING, SKIPPED):
            summary["stages"][name] = {"status": status, "detail": reason}
    save(path, summary)
    return summary


def begin_command(path: Path, *, command: str, planned: Sequence[str], resume: bool) -> dict:
    """A command of the run starts: on a fresh run the summary starts over; every command is listed, with the
    stages it planned, so that a proof spanning several commands says which did what."""
    summary = load(path) if resume else {"schema": SCHEMA, "started_at": _now(), "stages": {}, "environment": {}}
    summary.setdefault("commands", []).append(
        {"started_at": _now(), "command": command, "planned": list(planned), "ran": []}
    )
    for key in ("outcome", "acceptance", "finished_at"):
        summary.pop(key, None)
    save(path, summary)
    return summary


def verdict(summary: dict, stages: Sequence[str]) -> tuple[str, bool]:
    """(outcome, acceptance): the outcome is passed, failed, incomplete (a stage pending, running, skipped or not
    reached: --resume may finish it) or no-gpu; acceptance also needs a full run that built its own wheels."""
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


def finish(path: Path, stages: Sequence[str]) -> dict:
    summary = load(path)
    outcome, acceptance = verdict(summary, stages)
    return update(path, outcome=outcome, acceptance=acceptance, finished_at=_now())


def render(summary: dict, stages: Sequence[str]) -> list[str]:
    """The end-of-run table, one line per stage, then its failed checks."""
    lines = [f"{'stage':<10} {'status':<8} {'seconds':>8}  detail"]
    for name in stages:
        entry = summary["stages"].get(name, {"status": "-", "detail": "not reached"})
        seconds = f"{entry['seconds']:.1f}" if "seconds" in entry else ""
        lines.append(f"{name:<10} {entry['status']:<8} {seconds:>8}  {entry.get('detail', '')}")
        lines += [
            f"{'':<10}   FAILED {c['name']}: {c['detail']}" for c in entry.get("checks", []) if c["status"] == FAILED
        ]
    lines.append(
        f"outcome: {summary.get('outcome', 'incomplete')}; acceptance: {'yes' if summary.get('acceptance') else 'no'}"
    )
    return lines


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
