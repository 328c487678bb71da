"""The seed checklist's and the stage registry's logic that needs no GPU: the leak judgement on synthetic series,
the checks' names and parts, the performance table, which stages a command runs (--stages, --resume), the summary
across commands, the detached build's state as read from its folder, and the command lines' answers without a GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scripts import gpu_acceptance, seed_checklist
from scripts.acceptance import checklist, detach, memory, stages
from scripts.acceptance import summary as record
from scripts.acceptance.config import ConfigError, load_config
from scripts.acceptance.summary import FAILED, PASSED, PENDING, RUNNING, SKIPPED, Check

ROOT = Path(__file__).resolve().parents[2]

CONFIG = load_config()
MIB = memory.MIB


# -- the leak judgement -----------------------------------------------------------------------------------------


def _series(allocated: list[int], *, step_s: float = 0.5) -> list[memory.Sample]:
    return [
        memory.Sample(step=i, seconds=(i + 1) * step_s, allocated=a, reserved=2 * a) for i, a in enumerate(allocated)
    ]


def _judge(allocated: list[int], **changes: int) -> memory.LeakVerdict:
    options = {"warmup_steps": 5, "bound_bytes": 16 * MIB, "min_samples": 10} | changes
    return memory.judge(_series(allocated), **options)


def test_a_flat_series_after_warm_up_passes_even_after_a_warm_up_climb() -> None:
    climbing = [100 * MIB, 300 * MIB, 900 * MIB, 1000 * MIB, 1000 * MIB]  # graphs captured, caches filled
    verdict = _judge(climbing + [1000 * MIB] * 50)
    assert verdict.ok and (verdict.start, verdict.end, verdict.growth) == (1000 * MIB, 1000 * MIB, 0)
    assert verdict.slope_mib_per_min == 0 and verdict.steps == 55
    assert "allocated 1000.0 MiB after 5 warm-up steps, 1000.0 MiB at the end" in verdict.detail()


def test_a_steady_leak_fails_and_says_by_how_much() -> None:
    verdict = _judge([1000 * MIB + step * MIB // 2 for step in range(120)])  # half a MiB a step, 2 steps a second
    assert not verdict.ok
    assert verdict.growth == 114 * MIB // 2 and verdict.detail().startswith("allocated memory grew 57.0 MiB")
    assert verdict.slope_mib_per_min == pytest.approx(60.0)  # 0.5 MiB per 0.5 s
    assert verdict.as_dict()["growth_mib"] == 57.0 and verdict.as_dict()["ok"] is False


def test_growth_is_judged_against_the_bound_inclusively_and_noise_below_it_passes() -> None:
    base = 2000 * MIB
    assert _judge([base] * 5 + [base, base + 16 * MIB] * 10).ok
    assert not _judge([base] * 5 + [base, base + 16 * MIB + 1] * 10).ok
    sawtooth = [base + (step % 7) * MIB for step in range(60)]  # allocator churn, within 6 MiB
    assert _judge(sawtooth).ok


def test_memory_going_down_is_no_leak_but_a_late_rise_is() -> None:
    assert _judge([900 * MIB] * 5 + [900 * MIB - step * MIB for step in range(30)]).ok
    late = [500 * MIB] * 40 + [500 * MIB + 64 * MIB] * 2
    assert not _judge(late).ok and _judge(late).end == 564 * MIB


def test_too_few_samples_after_warm_up_fail_rather_than_pass() -> None:
    verdict = _judge([100 * MIB] * 12)
    assert not verdict.ok and "only 7 samples after the warm-up, fewer than the 10 needed" in verdict.detail()
    assert not memory.judge([], warmup_steps=0, bound_bytes=0, min_samples=2).ok


# -- the checklist's names, parts and report --------------------------------------------------------------------


def test_every_part_plans_its_checks_in_run_order() -> None:
    names = checklist.planned(CONFIG.checklist)
    assert len(names) == len(set(names)) == 2 + 4 * 3 + 2 * 3 + 2 + 2
    assert names[0].startswith("causal_conv1d_fn on (2, 256, 64), width 3")
    assert names[1] == "Mamba(d_model=512, d_state=16, d_conv=4, expand=2) forward on (1, 1024, 512)"
    assert "batch consistency Mamba2 bfloat16: batches of 1, 2, 8, 32 vs batch 1" in names
    assert (
        "generate vs full forward MambaLMHeadModel Mamba1 float32: greedy tokens, with and without CUDA graphs" in names
    )
    assert "generate vs full forward MambaLMHeadModel Mamba2 float16: logits, with and without CUDA graphs" in names
    assert names[-4:] == [
        "performance 130M-shaped bfloat16 (d_model 768, 24 layers)",
        "performance 1.4B-shaped bfloat16 (d_model 2048, 48 layers)",
        "leak run: training 130M-shaped bfloat16",
        "leak run: decoding 130M-shaped bfloat16",
    ]
    assert checklist.planned(CONFIG.checklist, ("leak",)) == names[-2:]


def test_parts_parse_into_run_order_and_unknown_ones_are_named() -> None:
    assert checklist.parse_parts("leak, seed") == ("seed", "leak")
    with pytest.raises(ValueError, match="unknown checklist part speed; the parts are seed, batch"):
        checklist.parse_parts("seed,speed")
    with pytest.raises(ValueError, match=r"\(none given\)"):
        checklist.parse_parts(" , ")


def test_the_issue_s_shapes_and_tolerances_are_the_data_file_s() -> None:
    config = CONFIG.checklist
    assert config.batch_sizes == (1, 2, 8, 32) and config.dtypes == ("float32", "float16", "bfloat16")
    assert [(m.d_model, m.n_layer) for m in config.perf.models] == [(768, 24), (2048, 48)]
    assert config.leak.seconds == 60 and config.leak.bound_mib == 16
    assert set(config.decode_tolerance) == {"float16", "bfloat16"}  # fp32 compares tokens
    tight, loose = config.batch_tolerance["float32"], config.batch_tolerance["bfloat16"]
    assert tight.rtol < loose.rtol and tight.atol < loose.atol


def _perf_row(name: str, **changes: float) -> dict:
    row = {
        "model": name,
        "params": 129_135_360,
        "batch": 8,
        "seqlen": 2048,
        "train_tokens_per_s": 412_345.6,
        "prefill_tokens_per_s": 1_234_567.8,
        "decode_ms_per_token_cuda_graphs": 1.234,
        "decode_ms_per_token_eager": 9.876,
        "train_peak_mib": 20480.0,
        "prefill_peak_mib": 3072.0,
        "decode_peak_mib": 512.0,
    }
    return row | changes


def test_perf_table_is_markdown_with_one_row_per_model() -> None:
    lines = checklist.perf_table([_perf_row("130M-shaped"), _perf_row("1.4B-shaped", params=1_372_000_000.0)])
    assert len(lines) == 4 and all(line.startswith("|") and line.endswith("|") for line in lines)
    assert set(lines[1]) == {"|", "-"} and len({len(line) for line in lines}) == 1  # aligned columns
    cells = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert cells == ["130M-shaped", "129M", "412,346", "1,234,568", "1.23", "9.88", "20.00 GiB", "3.00 GiB", "0.50 GiB"]
    assert lines[3].split("|")[2].strip() == "1372M"
    assert checklist.perf_table([]) == []


def test_report_lines_quote_the_table_the_leak_runs_and_the_failures() -> None:
    leak = memory.judge(_series([MIB] * 20), warmup_steps=5, bound_bytes=16 * MIB, min_samples=10)
    checks = [
        Check(
            name="performance 130M-shaped bfloat16 (d_model 768, 24 layers)",
            status=PASSED,
            data=_perf_row("130M-shaped"),
        ),
        Check(name="leak run: training 130M-shaped bfloat16", status=PASSED, detail=leak.detail(), data=leak.as_dict()),
        Check(name="batch consistency Mamba float16: batches of 1 vs batch 1", status=FAILED, detail="off"),
    ]
    lines = checklist.report_lines([c.as_dict() for c in checks])
    assert lines[2].startswith("| 130M-shaped")
    assert lines[3] == f"leak run: training 130M-shaped bfloat16: ok; {leak.detail()}"
    assert lines[-1] == "1 of 3 checklist checks FAILED"
    data = checklist.summary_data(checks)
    assert data["performance"][0]["model"] == "130M-shaped"
    assert data["leak"]["leak run: training 130M-shaped bfloat16"]["start_mib"] == 1.0


# -- the stage registry -----------------------------------------------------------------------------------------

REGISTRY = CONFIG.registry


def _names(planned: list) -> list[str]:
    return [stage.name for stage in planned]


def test_registry_marks_setup_stages_and_the_seconds_a_stage_needs() -> None:
    assert [s.name for s in REGISTRY if s.setup] == ["preflight", "carry", "index", "serve", "install"]
    assert CONFIG.stage("checklist").seconds >= 180 and CONFIG.stage("index").seconds == 0
    assert "checklist" in CONFIG.stages and "seed" not in CONFIG.stages


def test_a_fresh_run_plans_every_stage() -> None:
    assert _names(stages.plan(REGISTRY, selected=None, results={}, resume=False)) == list(CONFIG.stages)


def test_picked_stages_bring_the_setup_stages_before_them() -> None:
    picked = stages.parse_selection("upstream,build", REGISTRY)
    assert picked == ("build", "upstream")
    assert _names(stages.plan(REGISTRY, selected=picked, results={}, resume=False)) == [
        "preflight",
        "carry",
        "build",
        "index",
        "serve",
        "install",
        "upstream",
    ]
    only_build = stages.plan(REGISTRY, selected=("build",), results={}, resume=False)
    assert _names(only_build) == ["preflight", "carry", "build"]
    assert _names(stages.plan(REGISTRY, selected=("carry",), results={}, resume=False)) == ["preflight", "carry"]


def test_resume_runs_what_is_not_settled_with_the_setup_stages_again() -> None:
    results = {
        "preflight": PASSED,
        "carry": PASSED,
        "build": RUNNING,
        "index": SKIPPED,
        "doctor": PASSED,
        "upstream": PASSED,
        "mamba": FAILED,
        "bench": PENDING,
        "checklist": PENDING,
    }
    assert _names(stages.plan(REGISTRY, selected=None, results=results, resume=True)) == [
        "preflight",
        "carry",
        "build",
        "index",
        "serve",
        "install",
        "checklist",
        "bench",
        *("arch_build", "arch_fat", "arch_ptx", "arch_sm80", "ptx_speed"),  # no result yet: run
    ]
    settled = {name: PASSED for name in CONFIG.stages} | {"build": record.REUSED}
    assert stages.plan(REGISTRY, selected=None, results=settled, resume=True) == []
    # picking overrides what is settled: a failed stage is run again only when asked for
    again = stages.plan(REGISTRY, selected=("mamba",), results=settled, resume=True)
    assert _names(again)[-1] == "mamba" and "build" not in _names(again)


def test_unknown_stage_names_are_refused_with_a_suggestion() -> None:
    with pytest.raises(stages.SelectionError, match="no stage 'chekclist' \\(did you mean 'checklist'\\?\\)"):
        stages.parse_selection("build,chekclist", REGISTRY)
    with pytest.raises(stages.SelectionError, match="names no stage"):
        stages.parse_selection(",", REGISTRY)
    assert stages.plan_lines([CONFIG.stage("carry"), CONFIG.stage("checklist")]) == [
        "carry 1 0",
        f"checklist 0 {CONFIG.stage('checklist').seconds}",
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('setup_stages = ["preflight",', 'setup_stages = ["preflight", "doctr",'),
            "name stages not in `stages`: doctr",
        ),
        (('stages = ["preflight",', 'stages = ["pre-flight", "preflight",'), "'pre-flight' is not a shell identifier"),
        (
            ("float16 = { rtol = 1e-3, atol = 1e-2 }", "float32 = { rtol = 1e-3, atol = 1e-2 }"),
            "checklist.decode.tolerance",
        ),
        (("sizes = [1, 2, 8, 32]", "sizes = [2, 8, 32]"), "hold 1 (the reference)"),
    ],
)
def test_registry_and_checklist_errors_name_the_problem(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = (ROOT / "scripts" / "data" / "gpu_acceptance.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "config.toml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(path)


# -- the summary across commands --------------------------------------------------------------------------------


def test_a_resumed_command_keeps_the_results_and_lists_every_command(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    record.begin_command(path, command="gpu_acceptance.sh out", planned=["build", "upstream"], resume=False)
    record.record_stage(path, "build", status=RUNNING, detail="still running")
    record.record_stage(path, "upstream", status=PENDING, detail="pending: 20s left")
    record.begin_command(path, command="gpu_acceptance.sh out --resume", planned=["build"], resume=True)
    # the shell's record after the stage must not keep an earlier command's result as if it were this one's
    record.record_stage(path, "build", status=FAILED, seconds=3.0, detail="exit 1", keep_result=True)
    summary = record.load(path)
    assert summary["stages"]["build"] == {"status": FAILED, "detail": "exit 1", "seconds": 3.0}
    assert summary["stages"]["upstream"]["status"] == PENDING
    assert [c["command"] for c in summary["commands"]] == ["gpu_acceptance.sh out", "gpu_acceptance.sh out --resume"]
    assert [c["ran"] for c in summary["commands"]] == [["build"], ["build"]]  # pending is not "ran"
    record.begin_command(path, command="gpu_acceptance.sh out", planned=[], resume=False)
    assert record.load(path)["stages"] == {}


def test_skip_rest_leaves_earlier_settled_results_and_can_leave_stages_pending(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    record.begin_command(path, command="first", planned=[], resume=False)
    record.record_stage(path, "upstream", status=PASSED)
    record.record_stage(path, "mamba", status=PENDING)
    record.begin_command(path, command="second", planned=[], resume=True)
    record.record_stage(path, "build", status=RUNNING)
    record.skip_remaining(path, CONFIG.stages, "pending: the build is still running", status=PENDING)
    got = {name: entry["status"] for name, entry in record.load(path)["stages"].items()}
    assert got["upstream"] == PASSED and got["build"] == RUNNING and got["mamba"] == PENDING
    assert got["checklist"] == PENDING and record.verdict(record.load(path), CONFIG.stages)[0] == "incomplete"


def test_finish_exits_4_while_stages_are_pending(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.json"
    for stage in CONFIG.stages:
        record.record_stage(summary, stage, status=PASSED, seconds=1.0)
    record.record_stage(summary, "checklist", status=PENDING, detail="pending: 100s left")
    assert gpu_acceptance.main(["--summary", str(summary), "finish"]) == gpu_acceptance.EXIT_PENDING
    assert "run the same command again with --resume" in capsys.readouterr().out


# -- the detached build's state ---------------------------------------------------------------------------------


def test_detached_state_reads_from_its_folder(tmp_path: Path) -> None:
    state = tmp_path / "build-run"
    assert detach.status(state).state == detach.NONE
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"pid": os.getpid(), "started": 100.0, "command": ["build"]}))
    assert detach.status(state).state == detach.VANISHED  # a live pid, but not this state's waiter: pids are reused
    (state / "exit.json").write_text(json.dumps({"exit": 2, "ended": 130.5}))
    progress = detach.status(state)
    assert (progress.state, progress.exit_code, progress.seconds(), progress.command) == (
        detach.FINISHED,
        2,
        30.5,
        ("build",),
    )
    assert detach.collect(state).state == detach.COLLECTED and detach.collect(state).state == detach.COLLECTED


def test_build_report_collects_a_finished_detached_build_and_waits_on_a_running_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, summary = tmp_path / "build-run", tmp_path / "summary.json"
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": 10.0, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": 1, "ended": 400.0}))
    args = ["--summary", str(summary), "build-report", "--wheelhouse", str(tmp_path), "--state", str(state)]
    assert gpu_acceptance.main(args) == gpu_acceptance.EXIT_FAILED
    stage = record.load(summary)["stages"]["build"]
    assert stage["seconds"] == 390.0 and "(exit 1)" in stage["checks"][0]["detail"]
    assert detach.status(state).state == detach.COLLECTED

    running = detach.Progress(state=detach.RUNNING, pid=4242, started=1.0)
    monkeypatch.setattr(detach, "status", lambda _state: running)
    monkeypatch.setattr(detach.time, "time", lambda: 301.0)
    assert gpu_acceptance.main(args) == gpu_acceptance.EXIT_PENDING
    stage = record.load(summary)["stages"]["build"]
    assert stage["status"] == RUNNING and "still running after 300 s (pid 4242, detached)" in stage["detail"]


# -- the command lines ------------------------------------------------------------------------------------------


def test_plan_prints_the_stages_and_notes_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = tmp_path / "summary.json"
    base = ["--summary", str(summary), "plan"]
    assert gpu_acceptance.main([*base, "--stages", "mamba", "--argv", "gpu_acceptance.sh out --stages mamba"]) == 0
    assert capsys.readouterr().out.split("\n")[-3:] == ["install 1 0", f"mamba 0 {CONFIG.stage('mamba').seconds}", ""]
    assert record.load(summary)["commands"][0]["planned"][-1] == "mamba"
    assert gpu_acceptance.main([*base, "--stages", "mambo"]) == gpu_acceptance.EXIT_USAGE
    assert "did you mean 'mamba'?" in capsys.readouterr().err
    assert (
        gpu_acceptance.main(["--summary", str(tmp_path / "none.json"), "plan", "--resume"]) == gpu_acceptance.EXIT_USAGE
    )
    assert "--resume: no earlier run's summary" in capsys.readouterr().err


def test_checklist_stage_without_a_gpu_skips_every_planned_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_acceptance, "unavailable_reason", lambda: "no CUDA device (none here)")
    summary = tmp_path / "summary.json"
    args = ["--summary", str(summary), "checklist", "--parts", "seed,leak", "--leak-seconds", "5"]
    assert gpu_acceptance.main(args) == gpu_acceptance.EXIT_NO_GPU
    stage = record.load(summary)["stages"]["checklist"]
    assert [c["name"] for c in stage["checks"]] == checklist.planned(CONFIG.checklist, ("seed", "leak"))
    assert {c["status"] for c in stage["checks"]} == {SKIPPED} and "data" not in stage


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--parts", "speed"], "unknown checklist part speed"), (["--leak-seconds", "0"], "0 is not a positive")],
)
def test_checklist_arguments_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpu_acceptance.main(["--summary", str(tmp_path / "s.json"), "checklist", *args])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        seed_checklist.main(args)
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_seed_checklist_without_a_gpu_says_so_and_exits_3(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(seed_checklist, "unavailable_reason", lambda: "no CUDA device (none here)")
    assert seed_checklist.main([]) == seed_checklist.EXIT_NO_GPU
    out = capsys.readouterr()
    assert out.out.startswith("seed checklist: causal-conv1d ")
    assert "ERROR no CUDA device (none here): the checklist runs the kernels" in out.err


def test_perf_detail_reads_like_the_table() -> None:
    assert checklist.perf_detail(_perf_row("130M-shaped")) == (
        "129M params; train 412.3k tok/s (batch 8 x 2048, peak 20.00 GiB); prefill 1.23M tok/s (peak 3.00 GiB); "
        "decode 1.23 ms/token with CUDA graphs, 9.88 without (peak 0.50 GiB)"
    )
