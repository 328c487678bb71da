"""The build's timeline: lines appended whole from many threads, the pool's steps and waits written by
nvcc_plan.execute, the compile stage's marks read off the build's output, ninja's log aligned to them, and the
reader's account of where a hand-made compile phase's wall went."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from builder.steps import timeline
from builder.steps.programs import nvcc_plan

DRYRUN = (Path(__file__).parent / "data" / "nvcc_plan" / "dryrun-2arch.txt").read_text()


def test_lines_appended_from_many_threads_stay_whole(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    padding = "x" * 3000  # several lines' worth per write: a torn write would show

    def write(thread: int) -> None:
        for index in range(200):
            nvcc_plan.append_line(str(path), {"thread": thread, "index": index, "padding": padding})

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 8 * 200
    for thread in range(8):
        assert [r["index"] for r in rows if r["thread"] == thread] == list(range(200))


def test_execute_puts_every_step_and_wait_on_the_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvcc_plan, "_call", lambda command, env, pool, cpu=None: 0)
    steps = nvcc_plan.plan(*nvcc_plan.parse_dryrun(DRYRUN), depfile="k.o.d", output="k.o")
    path = tmp_path / "timeline.jsonl"
    pool = nvcc_plan.CorePool(tmp_path / "pool", 2)
    timings = nvcc_plan._Timings("/src/k.cu", nvcc_plan.Timeline(str(path), "k.cu"))
    assert nvcc_plan.execute(steps, pool, nvcc_plan.Costs(), timings) == 0
    rows, unreadable = timeline.read(path)
    assert unreadable == 0 and {r.unit for r in rows} == {"k.cu"}
    ran = [(r.phase, r.arch, r.fields["step"]) for r in rows if r.phase in timeline.POOL_PHASES]
    assert ran[:2] == [("front", "", "gcc (preprocessing)"), ("front", "", "cudafe++")]
    for arch in ("8.0", "9.0"):
        assert [step for phase, a, step in ran if phase == "chain" and a == arch] == [
            "gcc (preprocessing)", "cicc", "ptxas"]
    assert [step for phase, _, step in ran[-3:]] == ["fatbinary", "rm", "gcc"]
    waits = sorted((r.part, r.arch) for r in rows if r.phase == "wait")
    assert waits == [("back", ""), ("chain", "8.0"), ("chain", "9.0"), ("front", "")]
    holds = {(r.part, r.arch): r for r in rows if r.phase == "hold"}
    assert sorted(holds) == waits
    for step in (r for r in rows if r.phase in timeline.POOL_PHASES):  # each step ran while its part held a core
        hold = holds[(step.phase, step.arch)]
        assert hold.start <= step.start <= step.end <= hold.end
    fronts, chains, backs = ([r for r in rows if r.phase == part] for part in ("front", "chain", "back"))
    assert max(r.end for r in fronts) <= min(r.start for r in chains)
    assert max(r.end for r in chains) <= min(r.start for r in backs)


def test_a_timeline_without_a_path_writes_nothing(tmp_path: Path) -> None:
    nvcc_plan.Timeline(None, "k.cu").add("front", "", 1.0, 2.0)
    timeline.Marks(None).mark("compile-start")
    assert list(tmp_path.iterdir()) == []


BUILD_OUTPUT = [
    "running bdist_wheel",
    "running build_ext",
    "[1/2] /w/cuda-home/bin/nvcc -I/w/src/csrc -c -c /w/src/csrc/bwd.cu -o /w/src/build/temp/csrc/bwd.o -O3",
    "ptxas info    : Used 40 registers",
    "[2/2] c++ -MMD -MF /w/src/build/temp/csrc/ext.o.d -c /w/src/csrc/ext.cpp -o /w/src/build/temp/csrc/ext.o",
    "g++-12 -shared -Wl,-O1 /w/src/build/temp/csrc/ext.o /w/src/build/temp/csrc/bwd.o -o build/lib/ext.so",
    "installing to build/bdist.linux-x86_64/wheel",
    "running install",
    "creating '/out/tmp/built/.tmp-x/ext-1.0-cp312-cp312-linux_x86_64.whl' and adding 'build/bdist.linux' to it",
    "adding 'ext.so'",
    "removing build/bdist.linux-x86_64/wheel",
]


def test_the_build_output_marks_ninjas_steps_and_setup_pys(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    marks = timeline.Marks(str(path))
    for line in BUILD_OUTPUT:
        marks.line(line)
    rows, _ = timeline.read(path)
    assert [(r.name, r.unit) for r in rows] == [
        ("setup.py", ""), ("build_ext", ""), ("ninja-step", "bwd.cu"), ("ninja-step", "ext.cpp"), ("link", ""),
        ("bdist", ""), ("zip", ""), ("zipped", "")]
    assert rows[2].fields["output"] == "/w/src/build/temp/csrc/bwd.o"
    assert all(a.start <= b.start for a, b in itertools.pairwise(rows))


def test_ninjas_steps_are_aligned_by_their_end_marks() -> None:
    ninja_log = ("# ninja log v5\n0\t250000\t0\t/w/bwd.o\tab\n100\t60100\t0\t/w/ext.o\tcd\n5\t9\t0\t/w/other.o\tef\n"
                 "7\tx\t0\t/w/bwd.o\n")
    marks = [timeline.Step.of(mark("ninja-step", 1060.5, unit="ext.cpp", output="/w/ext.o")),
             timeline.Step.of(mark("ninja-step", 1250.0, unit="bwd.cu", output="/w/bwd.o"))]
    rows = timeline.ninja_rows(ninja_log, marks)
    spans = [(r["unit"], r["start"], r["end"]) for r in rows]
    assert spans == [("bwd.cu", 1000.0, 1250.0), ("ext.cpp", 1000.5, 1060.5)]  # other.o ran no step of this build


def row(unit: str, phase: str, start: float, end: float, arch: str = "", **fields: object) -> dict[str, object]:
    return {"unit": unit, "arch": arch, "phase": phase, "start": start, "end": end, **fields}


def mark(name: str, at: float, unit: str = "", **fields: object) -> dict[str, object]:
    return {"unit": unit, "arch": "", "phase": "mark", "name": name, "start": at, "end": at, **fields}


def steps(rows: list[dict[str, object]]) -> list[timeline.Step]:
    return [timeline.Step.of(r) for r in rows]


# Two slots, two TUs: b.cu (two archs, the long one 9.0) and a.cu (one arch); a .cpp compiled by ninja outside
# the pool. Times after a compile phase starting at 100.
HAND_MADE = [
    mark("compile-start", 100.0, slots=2, cores=2),
    mark("backend-start", 101.0),
    mark("setup.py", 104.0),
    mark("build_ext", 104.5),
    row("b.cu", "tu", 105.0, 150.0),
    row("a.cu", "tu", 105.2, 128.0),
    row("b.cu", "plan", 105.0, 106.0),
    row("a.cu", "plan", 105.2, 106.0),
    row("b.cu", "wait", 106.0, 106.0, part="front"),
    row("b.cu", "front", 106.0, 110.0, step="cudafe++"),
    row("a.cu", "wait", 106.0, 106.0, part="front"),
    row("a.cu", "front", 106.0, 108.0, step="cudafe++"),
    row("a.cu", "wait", 108.0, 108.0, arch="8.0", part="chain"),
    row("a.cu", "chain", 108.0, 120.0, arch="8.0", step="cicc"),
    row("b.cu", "wait", 110.0, 110.0, arch="9.0", part="chain"),
    row("b.cu", "chain", 110.0, 140.0, arch="9.0", step="cicc"),
    row("b.cu", "wait", 110.0, 120.0, arch="8.0", part="chain"),
    row("b.cu", "chain", 120.0, 130.0, arch="8.0", step="cicc"),
    row("a.cu", "wait", 120.0, 130.0, part="back"),
    row("a.cu", "back", 130.0, 132.0, step="gcc"),
    row("b.cu", "wait", 140.0, 140.0, part="back"),
    row("b.cu", "back", 140.0, 148.0, step="gcc"),
    row("ext.cpp", "ninja", 105.1, 125.0),
    row("b.cu", "ninja", 105.0, 150.0),
    mark("link", 151.0),
    mark("bdist", 156.0),
    mark("zip", 157.0),
    mark("zipped", 159.0),
    mark("backend-end", 160.0),
    mark("compile-end", 161.0),
]


def test_the_reader_says_where_a_hand_made_walls_seconds_went() -> None:
    wall = timeline.summarise(steps(HAND_MADE))
    assert (wall.slots, wall.wall, wall.body) == (2, 61.0, (8.0, 40.0))
    assert wall.busy == 4 + 2 + 12 + 30 + 10 + 2 + 8
    assert wall.head == [("workspace", 1.0), ("setup.py start", 3.0), ("build_py", 0.5),
                         ("to ninja's first nvcc", 0.5), ("nvcc plan and wait", 1.0), ("front", 2.0)]
    assert wall.tail == [("back ends", 8.0), ("ninja's end (b.cu last)", 2.0), ("to the link", 1.0), ("link", 5.0),
                         ("bdist install", 1.0), ("zip", 2.0), ("backend's exit", 1.0), ("after the backend", 1.0)]
    assert wall.all_busy_at == 6.0
    # head 100-108: 16 slot-s, the fronts ran 4 of them; body 108-140: 64, steps 56 (a.cu's back inside); tail: 42, 8
    assert wall.idle == {"head": 12.0, "body": 8.0, "tail": 34.0}
    assert wall.critical == "b.cu"
    assert [r.phase for r in wall.critical_steps if r.phase != "wait"] == [
        "tu", "plan", "ninja", "front", "chain", "chain", "back"]
    assert [(r.unit, r.start, r.end) for r in wall.outside] == [("ext.cpp", pytest.approx(5.1), 25.0)]


def test_the_readers_printout_is_a_few_readable_lines() -> None:
    lines = timeline.summarise(steps(HAND_MADE), unreadable=1).lines("ours")
    assert lines[0] == ("(d) ours: where the wall went: compile 61.0 s = head 8.0 + body 32.0 + tail 21.0 s; "
                        "2 slots busy 68 of 122 slot-s (56%), idle head 12, body 8, tail 34 slot-s")
    assert lines[1].endswith("front 2.0 s; all 2 slots busy at +6.0 s")
    assert lines[2].startswith("(d) ours:   tail: back ends 8.0, ninja's end (b.cu last) 2.0, to the link 1.0")
    assert lines[3] == ("(d) ours:   critical TU b.cu: front +6.0..+10.0, last chain 9.0 +10.0..+40.0 "
                        "(waited 0.0 s), back +40.0..+48.0 s")
    assert lines[4] == "(d) ours:   outside the pool (ninja): ext.cpp +5.1..+25.0 s"
    assert lines[5] == "(d) ours:   1 timeline lines unreadable"
    assert len(lines) == 6


def test_the_pools_polling_is_how_long_a_waiter_is_served_after_a_core_is_given_back() -> None:
    rows = [mark("compile-start", 0.0, slots=1), row("a.cu", "wait", 0.0, 0.0, part="front"),
            row("a.cu", "hold", 0.0, 10.0, part="front"), row("b.cu", "wait", 2.0, 10.04, part="front"),
            row("b.cu", "hold", 10.04, 20.0, part="front"), row("a.cu", "wait", 5.0, 20.1, arch="9.0", part="chain"),
            row("a.cu", "hold", 20.1, 30.0, arch="9.0", part="chain"), mark("compile-end", 30.0)]
    lag, waits = timeline.summarise(steps(rows)).handover
    assert (round(lag, 3), waits) == (0.14, 2)  # served 40 and 100 ms after the give-back; the first never waited


def test_without_the_pool_the_tus_are_the_body() -> None:
    rows = [mark("compile-start", 0.0, slots=0, cores=2), row("a.cu", "tu", 2.0, 50.0), row("b.cu", "tu", 2.5, 80.0),
            mark("link", 81.0), mark("compile-end", 90.0)]
    wall = timeline.summarise(steps(rows))
    assert (wall.body, wall.critical, wall.busy) == ((2.0, 80.0), "", 0)
    assert wall.tail == [("to the link", 1.0), ("after the backend", 9.0)]
    assert "no core pool" in wall.lines("today")[0]


def test_read_counts_lines_that_are_not_rows(tmp_path: Path) -> None:
    path = tmp_path / "timeline.jsonl"
    path.write_text('{"unit": "a.cu", "phase": "front", "start": 1, "end": 2}\nnot json\n[1, 2]\n{"start": "1"}\n')
    rows, unreadable = timeline.read(path)
    assert (len(rows), unreadable) == (1, 3)
    assert timeline.read(tmp_path / "none.jsonl") == ([], 0)


def test_an_empty_timeline_reads_as_an_empty_wall() -> None:
    wall = timeline.summarise([])
    assert (wall.wall, wall.busy, wall.critical) == (0.0, 0, "")
    assert all(seconds == 0 for _, seconds in [*wall.head, *wall.tail])
    assert wall.lines("ours")[0].startswith("(d) ours: where the wall went: compile 0.0 s")
