"""The build's timeline, and where a compile phase's wall went (issue 16).

The core pool's steps append their rows to one JSON-lines file (nvcc_plan.py: each TU's plan, its waits for a
core, its front, per-arch chain and back steps); the compile stage adds its marks on the same clock (the phase's
start and end, the backend's, setup.py's progress lines, ninja's steps from its own log) and keeps the file beside
the job's log. ``summarise`` reads it back: the slots, busy against idle slot-seconds, the head before the first
chain, the tail after the last, and the TU whose back end ended last.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.steps.programs import nvcc_plan

Points = list[tuple[str, float | None]]  # moments, each named by the part of the wall that ends there

POOL_PHASES = ("front", "chain", "back")  # the steps that hold one of the pool's cores
_NINJA_STEP = re.compile(r"^\[\d+/\d+\] ")  # ninja -v into a pipe prints an edge's line when the edge ends
_NINJA_OUTPUT = re.compile(r"\s-o\s+(\S+)")
_NINJA_SOURCE = re.compile(r"\s-c\s+([^-\s]\S*)")  # torch's flags may hold a stray "-c" of their own
# setup.py's own progress lines, each the start of what follows it (distutils prints a command before running it)
_SETUP_MARKS = (
    ("setup.py", re.compile(r"^running bdist_wheel$")),
    ("build_ext", re.compile(r"^running build_ext$")),
    ("link", re.compile(r"^\S*(?:g\+\+|c\+\+|clang\+\+|gcc|cc)(?:-[\d.]+)?\s(?:.*\s)?-shared\s")),
    ("bdist", re.compile(r"^installing to build/bdist")),
    ("zip", re.compile(r"^creating '.*\.whl' and adding ")),
    ("zipped", re.compile(r"^removing build/bdist")),  # bdist_wheel's clean-up, once the wheel is written
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


def ninja_rows(ninja_log: str, marks: Iterable[Step]) -> list[dict[str, object]]:
    """A "ninja" row per step of a ``.ninja_log`` (v5+: start ms, end ms, mtime, output, hash) that has its
    ``ninja-step`` mark: the mark is the edge's end on our clock, the log gives its length. Aligned edge by edge,
    since one build directory's log may hold several ninja runs, each timed from its own start."""
    steps = {str(m.fields["output"]): m for m in marks if m.name == "ninja-step" and "output" in m.fields}
    rows: list[dict[str, object]] = []
    for line in reversed(ninja_log.splitlines()):  # the latest run's row of an output comes last
        fields = line.split("\t")
        if len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()) or fields[3] not in steps:
            continue  # the header, a torn last line, or a step this build did not print
        seconds = (int(fields[1]) - int(fields[0])) / 1000
        step = steps.pop(fields[3])
        rows.append({"unit": step.unit, "arch": "", "phase": "ninja", "start": round(step.end - seconds, 4),
                     "end": step.end, "output": fields[3]})
    return rows[::-1]


def keep(timeline: Path, destination: Path, *, started: float, slots: int, cores: int,
         ninja_logs: Iterable[Path]) -> None:
    """Close the compile phase's timeline (its start and end marks, ninja's steps) and copy it to
    ``destination`` (beside the job's log: the workspace's copy goes with the next build)."""
    marks = Marks(str(timeline))
    epoch = time.time() - (time.monotonic() - started)  # the phase's start on the wall clock, to match logs by
    marks.mark("compile-start", started, slots=slots, cores=cores, epoch=round(epoch, 3))
    steps, _ = read(timeline)
    for log in ninja_logs:
        for row in ninja_rows(log.read_text(errors="replace"), steps):
            nvcc_plan.append_line(str(timeline), row)
    marks.mark("compile-end")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(timeline, destination)


@dataclass(frozen=True, kw_only=True)
class Step:
    """One row of the timeline, parsed: a step, a wait or a mark (a moment: start == end)."""

    unit: str
    arch: str
    phase: str  # plan, wait, hold, front, chain, back, tu, ninja or mark
    start: float
    end: float
    fields: Mapping[str, object] = field(default_factory=dict)  # the rest: step, part, name, output, slots...

    @classmethod
    def of(cls, row: Mapping[str, object]) -> Step:
        start, end = row["start"], row["end"]
        if not isinstance(start, (int, float)) or not isinstance(end, (int, float)):
            raise TypeError(f"start and end must be numbers: {row}")
        known = ("unit", "arch", "phase", "start", "end")
        return cls(unit=str(row.get("unit", "")), arch=str(row.get("arch", "")), phase=str(row.get("phase", "")),
                   start=float(start), end=float(end), fields={k: v for k, v in row.items() if k not in known})

    @property
    def name(self) -> str:
        return str(self.fields.get("name", ""))

    @property
    def part(self) -> str:
        return str(self.fields.get("part", ""))

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def after(self, begin: float) -> Step:
        """The same step timed from ``begin``."""
        return dataclasses.replace(self, start=self.start - begin, end=self.end - begin)


def read(path: Path) -> tuple[list[Step], int]:
    """(steps, how many lines were no row): a killed step leaves no line, never half of one; none is no file."""
    if not path.is_file():
        return [], 0
    steps: list[Step] = []
    unreadable = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
            steps.append(Step.of(row))
        except (json.JSONDecodeError, ValueError, KeyError, TypeError, AttributeError):
            unreadable += 1
    return steps, unreadable


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
    handover: tuple[float, int] = (0.0, 0)  # seconds waiters were served after a core was given back, how many
    critical_steps: list[Step] = field(default_factory=list)  # its rows, in time order
    outside: list[Step] = field(default_factory=list)  # ninja's steps that ran no pool step (g++ for a .cpp)
    unreadable: int = 0

    def lines(self, name: str) -> list[str]:
        """The bench's printout, a few lines."""
        head, body, tail = self.body[0], self.body[1] - self.body[0], self.wall - self.body[1]
        busy_at = ""
        if self.slots:
            busy_at = f"; all {self.slots} slots busy at +{self.all_busy_at:.1f} s" if self.all_busy_at is not None \
                else f"; never all {self.slots} slots busy"
        lines = [(f"(d) {name}: where the wall went: compile {self.wall:.1f} s = head {head:.1f} + body {body:.1f} "
                 f"+ tail {tail:.1f} s; {self._use()}"),
                 f"(d) {name}:   head: {_parts(self.head)}{busy_at}",
                 f"(d) {name}:   tail: {_parts(self.tail)}"]
        if self.critical:
            lines.append(f"(d) {name}:   critical TU {self.critical}: {_critical(self.critical_steps)}")
        if self.outside:
            spans = ", ".join(f"{step.unit} +{step.start:.1f}..+{step.end:.1f}" for step in self.outside)
            lines.append(f"(d) {name}:   outside the pool (ninja): {spans} s")
        if self.unreadable:
            lines.append(f"(d) {name}:   {self.unreadable} timeline lines unreadable")
        return lines

    def _use(self) -> str:
        """How the slots were used: busy of all, idle in the head, body and tail, and the pool's polling."""
        capacity = self.slots * self.wall
        if not capacity:
            return "no core pool (nvcc whole: the body is its TUs)"
        idle = ", ".join(f"{part} {seconds:.0f}" for part, seconds in self.idle.items())
        lag, waits = self.handover
        polling = f"; polling: {waits} waits served a mean {lag / waits * 1000:.0f} ms after a core freed" \
            if waits else ""
        return (f"{self.slots} slots busy {self.busy:.0f} of {capacity:.0f} slot-s ({self.busy / capacity:.0%}), "
                f"idle {idle} slot-s{polling}")


def _parts(parts: list[tuple[str, float]]) -> str:
    return ", ".join(f"{label} {seconds:.1f}" for label, seconds in parts) + " s" if parts else "none"


def _span(steps: list[Step]) -> str:
    return f"+{min(s.start for s in steps):.1f}..+{max(s.end for s in steps):.1f}"


def _critical(steps: list[Step]) -> str:
    """front +a..+b, last chain ARCH +c..+d (waited w s), back +e..+f: the critical TU's path."""
    parts = []
    for part in POOL_PHASES:
        ran = [s for s in steps if s.phase == part]
        if not ran:
            continue
        if part == "chain":
            last = max(ran, key=lambda s: s.end).arch
            waited = sum(s.seconds for s in steps if s.phase == "wait" and s.part == "chain" and s.arch == last)
            parts.append(f"last chain {last} {_span([s for s in ran if s.arch == last])} (waited {waited:.1f} s)")
        else:
            parts.append(f"{part} {_span(ran)}")
    return ", ".join(parts) + " s"


def summarise(steps: Sequence[Step], unreadable: int = 0) -> Wall:
    """Where the compile phase's wall went, from its timeline (see the module's docstring)."""
    marks: dict[str, list[Step]] = {}
    for step in steps:
        if step.phase == "mark":
            marks.setdefault(step.name, []).append(step)
    moments = {name: [m.start for m in found] for name, found in marks.items()}
    pool = [s for s in steps if s.phase in POOL_PHASES]
    begin = moments["compile-start"][0] if "compile-start" in moments else min((s.start for s in steps), default=0.0)
    end = moments["compile-end"][-1] if "compile-end" in moments else max((s.end for s in steps), default=begin)
    slots = marks["compile-start"][0].fields.get("slots", 0) if "compile-start" in marks else 0
    slots = slots if isinstance(slots, int) else 0
    chains = [s for s in pool if s.phase == "chain"] or [s for s in steps if s.phase == "tu"]  # nvcc whole: TUs
    body = (min((s.start for s in chains), default=end), max((s.end for s in chains), default=end))
    backs = [s for s in pool if s.phase == "back"]
    critical = max(backs, key=lambda s: s.end).unit if backs else ""
    pooled = {s.unit for s in pool}
    ninja = [s for s in steps if s.phase == "ninja"]
    return Wall(
        slots=slots,
        wall=end - begin,
        busy=sum(s.seconds for s in pool),
        head=_segments(begin, _head_points(moments, steps, body[0])),
        tail=_segments(body[1], _tail_points(body[1], end, moments, backs, ninja)),
        body=(body[0] - begin, body[1] - begin),
        all_busy_at=_all_busy(pool, slots, begin),
        idle={"head": _idle(pool, slots, begin, body[0]), "body": _idle(pool, slots, *body),
              "tail": _idle(pool, slots, body[1], end)},
        critical=critical,
        handover=_handover(steps),
        critical_steps=[s.after(begin) for s in sorted(steps, key=lambda s: s.start) if s.unit == critical != ""],
        outside=[s.after(begin) for s in ninja if pool and s.unit not in pooled],
        unreadable=unreadable,
    )


def _first(steps: Sequence[Step], phase: str) -> float | None:
    return min((s.start for s in steps if s.phase == phase), default=None)


def _head_points(moments: dict[str, list[float]], steps: Sequence[Step], first_chain: float) -> Points:
    """The moments between the phase's start and the first chain's, each ending the part named beside it."""
    return [
        ("workspace", moments.get("backend-start", [None])[0]),
        ("setup.py start", moments.get("setup.py", [None])[0]),
        ("build_py", moments.get("build_ext", [None])[0]),
        ("to ninja's first nvcc", _first(steps, "tu")),
        ("nvcc plan and wait", _first(steps, "front")),
        ("front", first_chain),
    ]


def _tail_points(last_chain: float, end: float, moments: dict[str, list[float]], backs: list[Step],
                 ninja: list[Step]) -> Points:
    """The moments between the last chain's end and the phase's end, each ending the part named beside it."""
    last_ninja = max(ninja, key=lambda s: s.end, default=None)
    links = [m for m in moments.get("link", []) if m >= last_chain]  # the last extension's link
    return [
        ("back ends", max((s.end for s in backs), default=None)),
        (f"ninja's end ({last_ninja.unit} last)" if last_ninja else "ninja's end",
         last_ninja.end if last_ninja else None),
        ("to the link", links[-1] if links else None),
        ("link", moments.get("bdist", [None])[0]),
        ("bdist install", moments.get("zip", [None])[0]),
        ("zip", moments.get("zipped", [None])[-1]),
        ("backend's exit", moments.get("backend-end", [None])[-1]),
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


def _overlap(step: Step, start: float, end: float) -> float:
    return max(0.0, min(step.end, end) - max(step.start, start))


def _idle(pool: list[Step], slots: int, start: float, end: float) -> float:
    """Slot-seconds in [start, end] no pool step held."""
    if not slots or end <= start:
        return 0.0
    return max(0.0, slots * (end - start) - sum(_overlap(s, start, end) for s in pool))


def _handover(steps: Sequence[Step]) -> tuple[float, int]:
    """(seconds, waits): for each wait that waited, how long after the last give-back of a core (a "hold" row's
    end) before it it was served; the pool's polling, where work was waiting for a core."""
    releases = sorted(s.end for s in steps if s.phase == "hold")
    lag, count = 0.0, 0
    for wait in (s for s in steps if s.phase == "wait" and s.seconds > 0.001):
        index = bisect.bisect_right(releases, wait.end) - 1
        if index >= 0:
            lag += wait.end - max(releases[index], wait.start)
            count += 1
    return lag, count


def _all_busy(pool: list[Step], slots: int, begin: float) -> float | None:
    """When the pool's steps first held every slot at once, after ``begin``."""
    if not slots:
        return None
    # an end before a start at the same moment: a handover, not one more at once
    events = sorted([(s.start, 1) for s in pool] + [(s.end, -1) for s in pool])
    running = 0
    for moment, change in events:
        running += change
        if running >= slots:
            return moment - begin
    return None
