"""Progress for a log (pipe, file, CI): a line per phase with what the last one took, a heartbeat naming the
translation unit while nothing else is printed, GitHub log groups per job; a terminal keeps the live table."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from builder.cli.progress import LineReporter, LiveTable, interactive
from builder.core.context import current
from builder.core.wheelhouse import Layout
from builder.farm import build as build_stage
from builder.farm.build import Builder, BuildOptions, Progress
from builder.plan.facts import load_facts
from tests.unit.test_build import FakeStages, local_jobs

NINJA = "[3/12] /usr/local/cuda/bin/nvcc -c /src/csrc/causal_conv1d_fwd.cu -o build/causal_conv1d_fwd.o"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_phase_lines_say_how_long_the_last_phase_took() -> None:
    clock, lines = Clock(), []
    reporter = LineReporter(lines.append, clock=clock)
    job = local_jobs()[0]
    reporter.phase(job, "fetch")
    clock.now += 3
    reporter.phase(job, "env")
    clock.now += 40
    reporter.phase(job, "compile")
    clock.now += 300
    reporter.done(job, "built")
    assert lines == [
        f"[    0s] {job.identifier}: fetch",
        f"[    3s] {job.identifier}: env (fetch took 3s)",
        f"[   43s] {job.identifier}: compile (env took 40s)",
        f"[  343s] {job.identifier}: built after 343s",
    ]


def test_the_heartbeat_names_the_unit_being_compiled_only_after_a_quiet_spell() -> None:
    clock, lines = Clock(), []
    reporter = LineReporter(lines.append, heartbeat=25, clock=clock)
    job = local_jobs()[0]
    reporter.phase(job, "compile")
    reporter.line(job, NINJA)
    clock.now += 10
    reporter.beat()
    assert len(lines) == 1  # something was printed 10 s ago: no heartbeat yet
    clock.now += 15
    reporter.beat()
    assert lines[-1] == f"[   25s] {job.identifier}: still compile (25s), ninja done with [3/12] causal_conv1d_fwd.cu"


def test_github_groups_wrap_each_job() -> None:
    lines: list[str] = []
    reporter = LineReporter(lines.append, groups=True, clock=Clock())
    first, second = local_jobs()
    for job in (first, second):
        reporter.phase(job, "fetch")
        reporter.done(job, "failed")
    assert [line for line in lines if line.startswith("::")] == [
        f"::group::{first.identifier}", "::endgroup::", f"::group::{second.identifier}", "::endgroup::"]


def test_only_a_terminal_outside_ci_is_interactive() -> None:
    assert interactive(True, {})
    assert not interactive(False, {})
    assert not interactive(True, {"CI": "true"})


def test_a_slow_compile_through_the_build_gets_a_line_every_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build stage with a compile that takes 3 s and prints one ninja line: with a 0.5 s heartbeat, no gap
    between printed lines is much longer than the heartbeat (its polling step, plus slack for a loaded machine)."""
    stamped: list[tuple[float, str]] = []
    reporter = LineReporter(lambda text: stamped.append((time.monotonic(), text)), heartbeat=0.5)
    fast_compile = FakeStages(monkeypatch, tmp_path).compile_wheel

    def slow_compile(job, env, space, environ, outdir):
        active = current()  # the job's context: what the runner feeds each output line to
        assert active is not None
        active.on_line(NINJA)
        time.sleep(3)
        return fast_compile(job, env, space, environ, outdir)

    monkeypatch.setattr(build_stage.compilation, "compile_wheel", slow_compile)
    progress = Progress(on_phase=reporter.phase, on_line=reporter.line, on_done=reporter.done)
    started = time.monotonic()
    with reporter:
        Builder(Layout(root=tmp_path / "out"), load_facts(), BuildOptions(), progress).run(local_jobs()[:1])
    times = [started] + [t for t, _ in stamped]
    assert max(b - a for a, b in itertools.pairwise(times)) < 0.5 + 0.1 + 0.9  # heartbeat + polling + slack
    beats = [text for _, text in stamped if "still compile" in text]
    assert len(beats) >= 4 and all(b.endswith("ninja done with [3/12] causal_conv1d_fwd.cu") for b in beats)


def test_the_live_table_shows_the_unit() -> None:
    job = local_jobs()[0]
    table = LiveTable([job], clock=Clock())
    table.phase(job, "compile")
    table.line(job, NINJA)
    assert table.state[job.identifier].unit == "[3/12] causal_conv1d_fwd.cu"
