"""The build's timeline, and where a compile phase's wall went (issue 16).

The core pool's steps append their rows to one JSON-lines file (nvcc_plan.py: each TU's plan, its waits for a
core, its front, per-arch chain and back steps); the compile stage adds its marks on the same clock (the phase's
start and end, the backend's, setup.py's progress lines, ninja's steps from its own log) and keeps the file beside
the job's log. ``summarise`` reads it back: the slots, busy against idle slot-seconds, the head before the first
chain, the tail after the last, and the TU whose back end ended last.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from builder.steps import nvcc_plan

Row = dict[str, object]  # one line of the timeline: {unit, arch, phase, start, end, ...}
Points = list[tuple[str, float | None]]  # moments, each named by the part of the wall that ends there

POOL_PHASES = ("front", "chain", "back")  # the steps that hold one of the pool's cores
_NINJA_STEP = re.compile(r"^\[\d+/\d+\] ")  # ninja -v into a pipe prints an edge's line when the edge ends
_NINJA_OUTPUT = re.compile(r"\s-o\s+(\S+)")
_NINJA_SOURCE = re.compile(r"\s-c\s+(\S+)")
# setup.py's own progress lines, each the start of what follows it (distutils prints a command before running it)
_SETUP_MARKS = (
    ("setup.py", re.compile(r"^running bdist_wheel$")),
    ("build_ext", re.compile(r"^running build_ext$")),
    ("link", re.compile(r"^\S*(?:g\+\+|c\+\+|clang\+\+|gcc|cc)(?:-\d+)?\s.*\s-shared\s")),
    ("bdist", re.compile(r"^installing to build/bdist")),
    ("zip", re.compile(r"^creating '.*\.whl' and adding ")),
)


# ---- the compile stage's marks ------------------------------------------------------------------------------


class Marks:
    """The compile stage's marks on the build's timeline (same file, same clock as the pool's rows)."""

    def __init__(self, path: str | None) -> None:
        self.path = path

    def mark(self, name: str, at: float | None = None, *, unit: str = "", **fields: object) -> None:
        if self.path:
            moment = round(time.monotonic() if at is None else at, 4)
            nvcc_plan.append_line(self.path, {"unit": unit, "arch": "", "phase": "mark", "name": name,
                                              "start": moment, "end": moment, **fields})

    def line(self, text: str) -> None:
        """Mark the build output lines whose moment matters: ninja's steps (an edge's end) and setup.py's."""
        if _NINJA_STEP.match(text):
            output, source = _NINJA_OUTPUT.search(text), _NINJA_SOURCE.search(text)
            if output:
                unit = Path(source[1]).name if source else Path(output[1]).name
                self.mark("ninja-step", unit=unit, output=output[1])
            return
        for name, pattern in _SETUP_MARKS:
            if pattern.search(text):
                self.mark(name)
                return


def ninja_rows(ninja_log: str, marks: Iterable[Row]) -> list[Row]:
    """A "ninja" row per step of a ``.ninja_log`` (v5+: start ms, end ms, mtime, output, hash) that has its
    ``ninja-step`` mark: the mark is the edge's end on our clock, the log gives its length. Aligned edge by edge,
    since one build directory's log may hold several ninja runs, each timed from its own start."""
    ended = {m["output"]: float(m["end"]) for m in marks if m.get("name") == "ninja-step"}
    units = {m["output"]: m["unit"] for m in marks if m.get("name") == "ninja-step"}
    rows: list[Row] = []
    for line in ninja_log.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4 or fields[3] not in ended:
            continue
        seconds = (int(fields[1]) - int(fields[0])) / 1000
        end = ended.pop(fields[3])  # the latest run's row comes last; one row per output
        rows.append({"unit": units[fields[3]], "arch": "", "phase": "ninja", "start": round(end - seconds, 4),
                     "end": end, "output": fields[3]})
    return rows


def keep(timeline: Path, destination: Path, *, started: float, slots: int, cores: int,
         ninja_logs: Iterable[Path]) -> None:
    """Close the compile phase's timeline (its start and end marks, ninja's steps) and copy it to
    ``destination`` (beside the job's log: the workspace's copy goes with the next build)."""
    marks = Marks(str(timeline))
    epoch = time.time() - (time.monotonic() - started)  # the phase's start on the wall clock, to match logs by
    marks.mark("compile-start", started, slots=slots, cores=cores, epoch=round(epoch, 3))
    if timeline.is_file():
        rows, _ = read(timeline)
        for log in ninja_logs:
            for row in ninja_rows(log.read_text(errors="replace"), rows):
                nvcc_plan.append_line(str(timeline), row)
    marks.mark("compile-end")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(timeline, destination)


def read(path: Path) -> tuple[list[Row], int]:
    """(rows, how many lines were not JSON rows): a killed step can leave no line, never half of one."""
    rows: list[Row] = []
    unreadable = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            unreadable += 1
            continue
        if isinstance(row, dict) and "start" in row and "end" in row:
            rows.append(row)
        else:
            unreadable += 1
    return rows, unreadable


# ---- where the wall went ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Wall:
    """Where a compile phase's wall went; times are seconds after the phase's start."""

    slots: int
    wall: float
    busy: float  # slot-seconds the pool's steps ran
    head: list[tuple[str, float]]  # the phase's start -> the first chain's start, in parts
    tail: list[tuple[str, float]]  # the last chain's end -> the phase's end, in parts
    body: tuple[float, float]  # the first chain's start, the last chain's end
    all_busy_at: float | None  # when every slot first held a step (None: never)
    idle: dict[str, float]  # slot-seconds no step ran, in the head, body and tail
    critical: str  # the TU whose back end ended last
    critical_steps: list[Row] = field(default_factory=list)  # its rows, in time order (times relative)
    outside: list[Row] = field(default_factory=list)  # ninja's steps that ran no pool step (g++ for a .cpp)
    unreadable: int = 0

    def lines(self, name: str) -> list[str]:
        """The bench's printout, a few lines."""
        head, tail = self.body[0], self.wall - self.body[1]
        body = self.body[1] - self.body[0]
        capacity = self.slots * self.wall
        if capacity:
            idle = ", ".join(f"{part} {seconds:.0f}" for part, seconds in self.idle.items())
            use = (f"{self.slots} slots busy {self.busy:.0f} of {capacity:.0f} slot-s ({self.busy / capacity:.0%}), "
                   f"idle {idle} slot-s")
            busy_at = f"all {self.slots} slots busy at +{self.all_busy_at:.1f} s" if self.all_busy_at is not None \
                else f"never all {self.slots} slots busy"
        else:
            use, busy_at = "no core pool (nvcc whole: the body is its TUs)", ""
        lines = [f"(d) {name}: where the wall went: compile {self.wall:.1f} s = head {head:.1f} + body {body:.1f} + "
                 f"tail {tail:.1f} s; {use}"]
        lines.append(f"(d) {name}:   head: {_parts(self.head)}{'; ' + busy_at if busy_at else ''}")
        lines.append(f"(d) {name}:   tail: {_parts(self.tail)}")
        if self.critical:
            lines.append(f"(d) {name}:   critical TU {self.critical}: {_critical(self.critical_steps)}")
        if self.outside:
            spans = ", ".join(f"{r['unit']} +{r['start']:.1f}..+{r['end']:.1f}" for r in self.outside)
            lines.append(f"(d) {name}:   outside the pool (ninja): {spans} s")
        if self.unreadable:
            lines.append(f"(d) {name}:   {self.unreadable} timeline lines unreadable")
        return lines


def _parts(parts: list[tuple[str, float]]) -> str:
    return ", ".join(f"{label} {seconds:.1f}" for label, seconds in parts) + " s" if parts else "none"


def _critical(steps: list[Row]) -> str:
    """front +a..+b, last chain ARCH +c..+d (waited w s), back +e..+f: the critical TU's path."""
    def span(rows: list[Row]) -> str:
        return f"+{min(float(r['start']) for r in rows):.1f}..+{max(float(r['end']) for r in rows):.1f}"

    parts = []
    for part in ("front", "chain", "back"):
        rows = [r for r in steps if r["phase"] == part]
        if not rows:
            continue
        if part == "chain":
            last = max(rows, key=lambda r: float(r["end"]))["arch"]
            waited = sum(float(r["end"]) - float(r["start"]) for r in steps
                         if r["phase"] == "wait" and r.get("part") == "chain" and r["arch"] == last)
            ran = [r for r in rows if r["arch"] == last]
            parts.append(f"last chain {last} {span(ran)} (waited {waited:.1f} s)")
        else:
            parts.append(f"{part} {span(rows)}")
    return ", ".join(parts) + " s"


def summarise(rows: list[Row], unreadable: int = 0) -> Wall:
    """Where the compile phase's wall went, from its timeline's rows (see the module's docstring)."""
    marks: dict[str, list[float]] = {}
    for row in rows:
        if row["phase"] == "mark":
            marks.setdefault(str(row["name"]), []).append(float(row["start"]))
    pool = [r for r in rows if r["phase"] in POOL_PHASES]
    units = [r for r in rows if r["phase"] == "tu"]
    begin = marks["compile-start"][0] if "compile-start" in marks else min(float(r["start"]) for r in rows)
    end = marks["compile-end"][-1] if "compile-end" in marks else max(float(r["end"]) for r in rows)
    start_row = next((r for r in rows if r.get("name") == "compile-start"), {})
    slots = int(start_row.get("slots") or 0)  # type: ignore[call-overload]
    chains = [r for r in pool if r["phase"] == "chain"] or units  # nvcc whole: each TU is its own "chain"
    body = (min((float(r["start"]) for r in chains), default=end), max((float(r["end"]) for r in chains), default=end))
    backs = [r for r in pool if r["phase"] == "back"]
    critical = max(backs, key=lambda r: float(r["end"]))["unit"] if backs else ""
    pooled = {r["unit"] for r in pool}
    ninja = [r for r in rows if r["phase"] == "ninja"]
    return Wall(
        slots=slots,
        wall=end - begin,
        busy=sum(float(r["end"]) - float(r["start"]) for r in pool),
        head=_segments(begin, _head_points(marks, rows, body[0])),
        tail=_segments(body[1], _tail_points(body[1], end, marks, backs, ninja)),
        body=(body[0] - begin, body[1] - begin),
        all_busy_at=_all_busy(pool, slots, begin),
        idle={"head": _idle(pool, slots, begin, body[0]), "body": _idle(pool, slots, *body),
              "tail": _idle(pool, slots, body[1], end)},
        critical=str(critical),
        critical_steps=[_relative(r, begin) for r in sorted(rows, key=lambda r: float(r["start"]))
                        if r["unit"] == critical and critical],
        outside=[_relative(r, begin) for r in ninja if r["unit"] not in pooled and pool],
        unreadable=unreadable,
    )


def _relative(row: Row, begin: float) -> Row:
    return {**row, "start": float(row["start"]) - begin, "end": float(row["end"]) - begin}


def _first(rows: list[Row], phase: str) -> float | None:
    return min((float(r["start"]) for r in rows if r["phase"] == phase), default=None)


def _head_points(marks: dict[str, list[float]], rows: list[Row], first_chain: float) -> Points:
    """The moments between the phase's start and the first chain's, each ending the part named beside it."""
    return [
        ("workspace", marks.get("backend-start", [None])[0]),
        ("setup.py start", marks.get("setup.py", [None])[0]),
        ("build_py", marks.get("build_ext", [None])[0]),
        ("to ninja's first nvcc", _first(rows, "tu")),
        ("nvcc plan and wait", _first(rows, "front")),
        ("front", first_chain),
    ]


def _tail_points(last_chain: float, end: float, marks: dict[str, list[float]], backs: list[Row],
                 ninja: list[Row]) -> Points:
    """The moments between the last chain's end and the phase's end, each ending the part named beside it."""
    last_ninja = max(ninja, key=lambda r: float(r["end"]), default=None)
    after = [m for m in marks.get("link", []) if m >= last_chain]  # the last extension's link
    return [
        ("back ends", max((float(r["end"]) for r in backs), default=None)),
        (f"ninja's end ({last_ninja['unit']} last)" if last_ninja else "ninja's end",
         float(last_ninja["end"]) if last_ninja else None),
        ("to the link", after[-1] if after else None),
        ("link", marks.get("bdist", [None])[0]),
        ("bdist install", marks.get("zip", [None])[0]),
        ("zip", marks.get("backend-end", [None])[-1]),
        ("after the backend", end),
    ]


def _segments(previous: float, points: Points) -> list[tuple[str, float]]:
    """The time from ``previous`` to each moment, then from that moment to the next, named by the later one; a
    moment missing or out of order is skipped (its part joins the next one's)."""
    segments = []
    for label, moment in points:
        if moment is None or moment < previous:
            continue
        segments.append((label, moment - previous))
        previous = moment
    return segments


def _overlap(row: Row, start: float, end: float) -> float:
    return max(0.0, min(float(row["end"]), end) - max(float(row["start"]), start))


def _idle(pool: list[Row], slots: int, start: float, end: float) -> float:
    """Slot-seconds in [start, end] no pool step held."""
    if not slots or end <= start:
        return 0.0
    return max(0.0, slots * (end - start) - sum(_overlap(r, start, end) for r in pool))


def _all_busy(pool: list[Row], slots: int, begin: float) -> float | None:
    """When the pool's steps first held every slot at once, after ``begin``."""
    if not slots:
        return None
    events = sorted([(float(r["start"]), 1) for r in pool] + [(float(r["end"]), -1) for r in pool],
                    key=lambda e: (e[0], e[1]))  # an end before a start at the same moment: a handover
    running = 0
    for moment, change in events:
        running += change
        if running >= slots:
            return moment - begin
    return None
