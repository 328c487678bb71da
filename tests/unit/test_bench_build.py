"""scripts/bench_build.py's full-arch mode (d), its logic without a build: which archs the comparison keeps, when
the 2nd-Python run cannot happen here, and where the 2nd Python's seconds go (ledger phases, the ninja log, the
object cache's events) and where ours' compile wall went (its timeline)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import yaml

from builder.core.ledger import Ledger, LedgerEntry, Status
from builder.farm.build import CPU_LINE
from scripts.bench import build as bench_build
from tests.jobs import ledger_entry
from tests.unit.test_timeline import HAND_MADE

ALL_9 = ["7.5", "8.0", "8.7", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_comparison_names_the_known_bad_sass_it_keeps(tmp_path: Path) -> None:
    (kept,) = bench_build.kept_known_bad("causal-conv1d", "2.14.1", ALL_9, tmp_path)
    assert kept.startswith("sm_103 (https://github.com/Dao-AILab/causal-conv1d/issues/105")
    assert bench_build.kept_known_bad("mamba-ssm", "2.14.1", ALL_9, tmp_path) == []
    assert bench_build.kept_known_bad("causal-conv1d", "2.14.1", ["9.0"], tmp_path) == []


def test_archs_are_spelled_sorted_sass_then_ptx() -> None:
    assert bench_build.spelled_archs({"10.3", "9.0", "12.1", "7.5"}, {"12.1"}) == "SASS 7.5,9.0,10.3,12.1; PTX 12.1"


def test_second_is_unavailable_for_the_same_python_or_a_missing_one() -> None:
    assert "the 2nd Python is the 1st (3.12)" in (bench_build.second_unavailable("3.12", "3.12") or "")
    assert "no Python 3.99 interpreter" in (bench_build.second_unavailable("3.12", "3.99") or "")
    assert bench_build.second_unavailable("3.0", HERE) is None  # this interpreter is one


def test_ninja_log_gives_each_outputs_latest_step_longest_first(tmp_path: Path) -> None:
    log = tmp_path / ".ninja_log"
    log.write_text(
        "# ninja log v7\n"
        "0\t900\t1\t/w/build/temp/csrc/causal_conv1d_fwd.o\taa\n"
        "0\t41250\t1\t/w/build/temp/csrc/causal_conv1d.o\tbb\n"
        "10\t330\t1\t/w/build/temp/csrc/causal_conv1d_bwd_0.o\tcc\n"
        "0\t400\t2\t/w/build/temp/csrc/causal_conv1d_fwd.o\tdd\n"  # a later run's row for the same output
    )
    assert bench_build.ninja_steps(log) == [
        ("causal_conv1d.o", 41.25), ("causal_conv1d_fwd.o", 0.4), ("causal_conv1d_bwd_0.o", 0.32)
    ]


def entry(timings: dict[str, float]) -> LedgerEntry:
    return ledger_entry(python="3.12", status=Status.BUILT, timings=timings)


def test_second_report_says_what_compiled_and_where_the_seconds_went() -> None:
    timings = {"fetch": 0.1, "env": 1.2, "patch": 0.3, "compile": 52.0, "repair": 9.5, "verify": 14.0, "install": 2.0}
    events = [{"source": f"/w/src/csrc/k{i}.cu", "result": "hit", "seconds": 0.1} for i in range(11)]
    events.append({"source": "/w/src/csrc/causal_conv1d_update.cu", "result": "miss", "seconds": 30.0})
    ninja = [("causal_conv1d.o", 40.0), ("causal_conv1d_fwd.o", 0.5), ("k2.o", 0.25)]
    cuda, split, phases = bench_build.second_report(entry(timings), events, ninja)
    assert cuda == "(d) second: CUDA objects: 11 from ours' cache, 1 compiled afresh: causal_conv1d_update.cu"
    assert "compile 52.0 s: ninja steps 40.8 s in all (causal_conv1d.o 40.0 s, causal_conv1d_fwd.o 0.5 s" in split
    assert "the rest, 11.2 s, is setup.py (torch's import), the link and the wheel's zip" in split
    assert phases == "(d) second: other phases: fetch 0.1 s, env 1.2 s, patch 0.3 s, repair 9.5 s, verify 14.0 s, " \
                     "install 2.0 s"
    _, unsplit, _ = bench_build.second_report(entry(timings), events[:11], None)
    assert unsplit == "(d) second: compile 52.0 s (no ninja log left in the workspace to split it)"


def test_cache_overhead_sums_the_events(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").write_text(
        '{"source": "a.cu", "result": "miss", "seconds": 100.0, "cache_seconds": 0.25}\n'
        '{"source": "b.cu", "result": "miss", "seconds": 50.0, "cache_seconds": 0.5}\n'
    )
    assert bench_build.cache_overhead(tmp_path) == "(d) ours: object cache on (for second): its own work 0.8 s " \
                                                   "summed over 2 TUs"


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ("ours,fast", "unknown run fast"),
        ("second", "ours must come before it"),
        ("second,ours", "ours must come"),
        ("learned", "learned orders by the costs ours measured, so ours must come before it"),
        ("learned,ours", "ours must come"),
    ],
)
def test_runs_are_checked_before_anything_builds(tmp_path: Path, runs: str, message: str) -> None:
    args = argparse.Namespace(archs="", runs=runs, full_arch="causal-conv1d", torch="2.14.1")
    with pytest.raises(SystemExit, match=message):
        bench_build.full_arch(args, tmp_path)


@pytest.mark.parametrize(("without", "split_kept"), [(bench_build.SPLIT_PATCHES, False), (frozenset(), True)])
def test_today_builds_without_the_split_patch_and_ours_with_it(
    tmp_path: Path, without: frozenset[str], split_kept: bool
) -> None:
    path = bench_build.bench_matrix(tmp_path, ["3.11"], ["9.0"], without_patches=without)
    matrix = yaml.safe_load(path.read_text())
    patches = {p["name"] for entry in matrix["packages"] for p in entry["recipe"].get("patches", [])}
    assert ("split-causal-conv1d-bwd" in patches) is split_kept
    assert "drop-buildtools" in patches and "cxx20" in patches  # the other packages' patches stay


def test_learned_builds_afresh_beside_ours_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """learned's output starts with ours' ledger (the costs the pool orders by) and no wheel, so the job is built
    again, with the object cache off; an earlier learned run's folder is gone."""
    ours_ledger = tmp_path / "ours" / "out" / "ledger.sqlite"
    ours_ledger.parent.mkdir(parents=True)
    ours_ledger.write_bytes(b"ours' rows")
    (tmp_path / "learned" / "out" / "dist").mkdir(parents=True)
    (tmp_path / "learned" / "out" / "dist" / "stale.whl").write_bytes(b"an earlier run's wheel")
    seen: dict[str, object] = {}

    def measure(name: str, command: list[str], env: dict[str, str], limit: float, log: Path) -> str:
        out = tmp_path / name / "out"
        seen.update(name=name, command=command, ledger=(out / "ledger.sqlite").read_bytes(),
                    dist=(out / "dist").exists())
        return "measured"

    monkeypatch.setattr(bench_build, "measure", measure)
    bench_build.ours_build("learned", "causal-conv1d", "3.11", "2.14.1", ["9.0"], tmp_path, 60.0,
                           costs_from=ours_ledger)
    assert seen["ledger"] == b"ours' rows" and seen["dist"] is False
    command = seen["command"]
    assert isinstance(command, list)
    assert command[command.index("--objcache") + 1] == "off"
    assert command[command.index("--output") + 1] == str(tmp_path / "learned" / "out")


def test_where_the_wall_went_reads_the_jobs_timeline_and_the_ledgers_later_phases(tmp_path: Path) -> None:
    out = tmp_path / "ours" / "out"
    (out / "logs").mkdir(parents=True)
    timings = {"fetch": 0.1, "env": 6.5, "patch": 0.3, "compile": 61.0, "repair": 6.4, "verify": 8.9, "install": 4.4}
    with Ledger(out / "ledger.sqlite") as ledger:
        ledger.put(entry(timings))
    path = out / "logs" / f"{entry(timings).job_id}.timeline.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in HAND_MADE))
    lines = bench_build.where_the_wall_went("ours", tmp_path, "3.12")
    assert lines[0].startswith("(d) ours: where the wall went: compile 61.0 s = head 8.0 + body 32.0 + tail 21.0 s")
    assert lines[-1] == (f"(d) ours: after compile: repair 6.4 s, verify 8.9 s, install 4.4 s (before it: fetch 0.1 s, "
                         f"env 6.5 s, patch 0.3 s); timeline {path}")
    path.unlink()
    assert bench_build.where_the_wall_went("ours", tmp_path, "3.12")[0] == f"(d) ours: no timeline at {path}"


def test_each_pythons_build_env_is_made_before_the_timed_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first timed run of a Python must not pay its one torch install: the envs are made beforehand, once each,
    for the job the runs build (its Python, torch and toolkit)."""
    made: list[tuple[str, str, str]] = []
    monkeypatch.setattr(bench_build, "find_toolkit", lambda accelerator, archs: f"toolkit {accelerator}")
    monkeypatch.setattr(bench_build, "runtime_env", lambda job, facts, torch_index=None: f"torch {job.torch}")
    monkeypatch.setattr(bench_build, "build_env",
                        lambda job, runtime, toolkit: made.append((job.python, runtime, toolkit)))
    line = bench_build.made_envs("causal-conv1d", "2.14.1", ["3.11", "3.12"], tmp_path)
    assert made == [("3.11", "torch 2.14.1", "toolkit cu130"), ("3.12", "torch 2.14.1", "toolkit cu130")]
    assert line.startswith("(d) build envs made before the timed runs") and "3.11 " in line and "3.12 " in line


# rows as nvcc 13.0's --time writes them (this machine's nvcc, one .cu file, two archs), one torn by a concurrent
# append, and a header
NVCC_TIME_CSV = """\
source file name , phase name , phase input files , phase output file , arch , tool, metric , unit
t.cu , gcc (preprocessing 4) , t.cu  , /tmp/x-5_t.cpp4.ii ,  , nvcc , 238.8720 , ms
t.cu , gcc (preprocessing 1) , t.cu  , /tmp/x-8_t.compute_90.cpp1.ii , compute_90 , nvcc , 239.4990 , ms
t.cu , cudafe++ , /tmp/x-5_t.cpp4.ii  , /tmp/x-6_t.compute_80.cudafe1.cpp , compute_80 , nvcc , 616.4860 , ms
t.cu , cicc ,  /tmp/x-8_t.compute_90.cpp1.ii  , /tmp/x-7_t.compute_90.ptx , compute_90 , nvcc , 457.8220 , ms
t.cu , cicc ,  /tmp/x-10_t.compute_80.cpp1.ii  , /tmp/x-6_t.compute_80.ptx , compute_80 , nvcc , 539.9920 , ms
t.cu , ptxas , /tmp/x-7_t.compute_90.ptx  , /tmp/x-9_t.compute_90.cubin , sm_90 , nvcc , 131.8510 , ms
t.cu , ptxas , /tmp/x-7_t.compute_90.ptx  , /tmp/x-9_t.compute_90.cub
t.cu , fatbinary , /tmp/x-9_t.compute_90.cubin  , /tmp/x-3_t.fatbin ,  , nvcc , 4.8480 , ms
t.cu , gcc (compiling) ,   , t.o , compute_80 , nvcc , 273.6580 , ms
 , nvcc (driver) ,  , t.o ,  , nvcc , 0.4900 , ms
"""


def test_upstreams_nvcc_steps_are_summed_by_stage(tmp_path: Path) -> None:
    (tmp_path / bench_build.UPSTREAM_TIMES).write_text(NVCC_TIME_CSV)
    sums = bench_build.upstream_stages(tmp_path / bench_build.UPSTREAM_TIMES)
    assert sums == pytest.approx({"preprocess": 0.478371, "front": 0.616486, "cicc": 0.997814, "ptxas": 0.131851,
                                  "host": 0.273658, "other": 0.005338})
    line = bench_build.upstream_stage_line(tmp_path, bench_build.Measured("upstream", 10.0, 12.0, 16))
    assert line == ("(d) upstream: nvcc steps' elapsed s by stage (nvcc --time): front 1, preprocess 0, cicc 1, "
                    "ptxas 0, host 0, other 0; CPU-s - sum 9")
    assert bench_build.upstream_stages(tmp_path / "absent.csv") == {}


def test_the_cpu_by_phase_comes_from_the_jobs_log_and_the_ratio_leaves_the_slim_wheels_out(tmp_path: Path) -> None:
    out = tmp_path / "ours" / "out"
    (out / "logs").mkdir(parents=True)
    with Ledger(out / "ledger.sqlite") as ledger:
        ledger.put(entry({"compile": 61.0}))
    log = out / "logs" / f"{entry({}).job_id}.log"
    log.write_text(f"nvcc ...\n[12:00:01] {CPU_LINE}fetch 0.0, env 1.5, compile 2400.2, slim 90.4, "
                   "repair 8.0, verify 6.1, install 3.0\n")
    phases = bench_build.phase_cpu("ours", tmp_path, "3.12")
    assert phases == {"fetch": 0.0, "env": 1.5, "compile": 2400.2, "slim": 90.4, "repair": 8.0, "verify": 6.1,
                      "install": 3.0}
    ours = bench_build.Measured("ours", 198.0, 2564.0, 16)
    upstream = bench_build.Measured("upstream", 606.0, 2276.0, 16)
    assert bench_build.phase_line("ours", phases, ours) == (
        "(d) ours: CPU-s by phase: fetch 0, env 2, compile 2400, slim 90, repair 8, verify 6, install 3; "
        "outside the phases 55")
    results = {"ours": ours, "upstream": upstream}
    assert bench_build.ratio_line("ours", "upstream", results, {"ours": phases}) == (
        "(d) ours/upstream: wall 0.33, CPU 1.13; CPU without the slim wheels' 90 CPU-s (upstream makes none) 1.09")
    assert bench_build.ratio_line("ours", "upstream", results, {}) == "(d) ours/upstream: wall 0.33, CPU 1.13"
    log.write_text("a log from before the line\n")
    assert bench_build.phase_cpu("ours", tmp_path, "3.12") == {}
