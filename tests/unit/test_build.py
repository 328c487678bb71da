"""The build stage's orchestration with its stages replaced by fakes: skipping, failures that don't stop other
jobs, quarantine, atomic install into dist/, recovery after a kill, and what goes into the input hash."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from builder.core import resources
from builder.core.errors import WheelwrightError
from builder.core.ledger import Ledger, LedgerEntry, SlimRow, Status
from builder.core.wheelhouse import Layout
from builder.farm import build as build_stage
from builder.farm.build import Builder, BuildOptions, input_hash
from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps import slim, timeline
from builder.steps.environment import NotBuildableHere
from builder.steps.verify import Check, VerifyReport

ROOT = Path(__file__).resolve().parents[2]


def local_jobs():
    return load_plan(ROOT / "matrix.yaml", "local", host="3.11").jobs


class FakeStages:
    """Stand-ins for fetch/env/patch/compile/repair/verify; `fail` maps a package to the exception its compile
    raises."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        self.compiled: list[str] = []
        self.fail: dict[str, Exception] = {}
        self.verdict: dict[str, bool] = {}
        self.tmp = tmp_path
        stub = SimpleNamespace(site_packages=tmp_path, root=tmp_path, as_dict=lambda: {"source": "stub-toolkit"},
                               origin=lambda: {"origin": "stub"})
        monkeypatch.setattr(build_stage, "fetch_sdist", lambda job: tmp_path / "sdist.tar.gz")
        monkeypatch.setattr(build_stage, "find_toolkit", lambda accelerator, archs: stub)
        monkeypatch.setattr(build_stage, "runtime_env", lambda job, facts, torch_index=None: stub)
        monkeypatch.setattr(build_stage, "build_env", lambda job, runtime, toolkit: stub)
        monkeypatch.setattr(build_stage, "unpack_sdist", lambda sdist, dest: dest)
        recipe = SimpleNamespace(changes=("patched",), env={}, part_shares={})
        monkeypatch.setattr(build_stage, "apply_recipe", lambda source, job: recipe)
        monkeypatch.setattr(build_stage.compilation, "workspace", self.workspace)
        monkeypatch.setattr(build_stage.compilation, "build_environ", lambda *args, **kwargs: {})
        monkeypatch.setattr(build_stage.compilation, "compile_wheel", self.compile_wheel)
        monkeypatch.setattr(build_stage, "repair_wheel", lambda wheel, job, out: SimpleNamespace(wheel=wheel))
        monkeypatch.setattr(build_stage, "verify_wheel", self.verify)
        monkeypatch.setattr(build_stage.provenance, "build_record", lambda job, **kwargs: {"job": job.identifier})
        monkeypatch.setattr(build_stage.provenance, "embed", lambda wheel, record: None)
        monkeypatch.setattr(build_stage.variant_stage, "make_twin", self.make_twin)

    @staticmethod
    def make_twin(wheel: Path, out_dir: Path) -> SimpleNamespace:
        out_dir.mkdir(parents=True, exist_ok=True)
        twin = out_dir / ("twin-of-" + wheel.name)
        twin.write_bytes(wheel.read_bytes())
        return SimpleNamespace(path=twin)

    @staticmethod
    @contextmanager
    def workspace(job, source, torch_site):
        source.mkdir(parents=True, exist_ok=True)
        yield SimpleNamespace(source=source, nvcc_times=source / "no-nvcc-time.csv",
                              timeline=source / "timeline.jsonl", ninja_logs=list, events=source / "events.jsonl")

    def compile_wheel(self, job, env, space, environ, outdir) -> Path:
        if job.package in self.fail:
            raise self.fail[job.package]
        self.compiled.append(job.identifier)
        outdir.mkdir(parents=True, exist_ok=True)
        wheel = outdir / f"{job.dist_name}-{job.local_version}-{job.python_tag}-{job.python_tag}-linux_x86_64.whl"
        wheel.write_bytes(f"wheel of {job.identifier}".encode())
        return wheel

    def verify(self, wheel, job, *, runtime, importer=None) -> VerifyReport:
        ok = self.verdict.get(job.package, True)
        check = Check(name="gpu-archs", ok=ok, detail="SASS 9.0" if ok else "expected SASS 9.0, found SASS 8.0")
        return VerifyReport(wheel=wheel.name, job=job.identifier, checks=(check,))


@pytest.fixture
def stages(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeStages:
    return FakeStages(monkeypatch, tmp_path)


def run_build(tmp_path: Path, **options: object) -> list:
    return Builder(Layout(root=tmp_path / "out"), load_facts(), BuildOptions(**options)).run(local_jobs())


def test_builds_every_job_into_dist_and_records_it(stages: FakeStages, tmp_path: Path) -> None:
    outcomes = run_build(tmp_path)
    assert [o.entry.status for o in outcomes] == ["built", "built"]
    dist = sorted(p.name for p in (tmp_path / "out" / "dist").iterdir())
    assert dist == sorted(o.entry.wheel for o in outcomes)
    with Ledger(tmp_path / "out" / "ledger.sqlite") as ledger:
        entry = ledger.get(outcomes[0].job.identifier)
    assert entry.wheel_sha256 == build_stage.sha256_of(tmp_path / "out" / "dist" / entry.wheel)
    assert set(entry.timings) == {"fetch", "env", "patch", "compile", "repair", "verify", "install"}
    twins = sorted(p.name for p in (tmp_path / "out" / "variant").iterdir())
    assert twins == sorted("twin-of-" + name for name in dist)
    # the compile phase's timeline stays beside the job's log, its start and end on the phase timer's clock
    rows, _ = timeline.read(tmp_path / "out" / "logs" / f"{entry.job_id}.timeline.jsonl")
    marks = {row.name: row.start for row in rows}
    assert 0 <= marks["compile-end"] - marks["compile-start"] <= entry.timings["compile"] + 0.001  # ms rounding


def test_unchanged_inputs_are_skipped_and_a_missing_wheel_is_rebuilt(stages: FakeStages, tmp_path: Path) -> None:
    run_build(tmp_path)
    stages.compiled.clear()
    assert all(o.skipped for o in run_build(tmp_path)) and stages.compiled == []
    first = next((tmp_path / "out" / "dist").iterdir())
    first.unlink()
    run_build(tmp_path)
    assert len(stages.compiled) == 1 and first.is_file()


def test_a_failing_job_does_not_stop_the_others_and_is_retried_only_on_request(
    stages: FakeStages, tmp_path: Path
) -> None:
    stages.fail["mamba-ssm"] = WheelwrightError("mamba-ssm: compile failed (exit 1)")
    causal, mamba = run_build(tmp_path)
    assert causal.entry.status == "built"
    assert (tmp_path / "out" / "logs" / f"{mamba.job.identifier}.timeline.jsonl").is_file()  # failed: kept too
    assert (mamba.entry.status, mamba.entry.phase, mamba.entry.reason) == (
        "failed",
        "compile",
        "mamba-ssm: compile failed (exit 1)",
    )
    del stages.fail["mamba-ssm"]
    assert run_build(tmp_path)[1].skipped
    assert run_build(tmp_path, retry_failed=True)[1].entry.status == "built"


def test_an_unexpected_exception_is_a_failed_job_not_a_crash(stages: FakeStages, tmp_path: Path) -> None:
    stages.fail["causal-conv1d"] = KeyError("boom")
    causal, mamba = run_build(tmp_path)
    assert causal.entry.status == "failed" and "KeyError" in causal.entry.reason
    assert mamba.entry.status == "built"


def test_unbuildable_here_is_reported_not_failed(stages: FakeStages, tmp_path: Path) -> None:
    stages.fail["causal-conv1d"] = NotBuildableHere("no ROCm 6.1 toolkit on this machine")
    assert run_build(tmp_path)[0].entry.status == "unbuildable"


def test_a_wheel_failing_verification_is_quarantined_never_in_dist(stages: FakeStages, tmp_path: Path) -> None:
    stages.verdict["causal-conv1d"] = False
    causal, _ = run_build(tmp_path)
    assert causal.entry.status == "quarantined" and "found SASS 8.0" in causal.entry.reason
    assert (tmp_path / "out" / "quarantine" / causal.entry.wheel).is_file()
    assert causal.entry.wheel not in {p.name for p in (tmp_path / "out" / "dist").iterdir()}


def test_recovery_after_a_kill(stages: FakeStages, tmp_path: Path) -> None:
    """A kill mid-compile leaves a running row (redone); one between dist/ and the ledger is completed."""
    run_build(tmp_path)
    layout = Layout(root=tmp_path / "out")
    causal, mamba = local_jobs()
    with Ledger(layout.ledger) as ledger:
        moved = ledger.get(causal.identifier)
        ledger.put(dataclasses.replace(moved, status="running", phase="install"))
        ledger.put(
            dataclasses.replace(
                ledger.get(mamba.identifier), status="running", phase="compile", wheel=None, wheel_sha256=None
            )
        )
    (layout.tmp / "leftover").mkdir()
    stages.compiled.clear()
    outcomes = run_build(tmp_path)
    assert [o.entry.status for o in outcomes] == ["built", "built"]
    assert stages.compiled == [mamba.identifier]  # the moved wheel was kept, not rebuilt
    assert not (layout.tmp / "leftover").exists()


def test_input_hash_changes_with_what_the_wheel_is_built_from() -> None:
    job = local_jobs()[0]
    assert input_hash(job) == input_hash(dataclasses.replace(job))
    assert input_hash(job) != input_hash(dataclasses.replace(job, archs=("8.0",)))
    assert input_hash(job) != input_hash(dataclasses.replace(job, torch="2.14.0"))
    other_sdist = dataclasses.replace(job.sdist, sha256="0" * 64)
    assert input_hash(job) != input_hash(dataclasses.replace(job, sdist=other_sdist))


@pytest.mark.parametrize("resource", resources.BUILD_DATA, ids=lambda r: r.source)
def test_editing_a_data_file_the_build_reads_rebuilds_the_job(
    resource: resources.Resource, stages: FakeStages, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_build(tmp_path)
    stages.compiled.clear()
    assert all(o.skipped for o in run_build(tmp_path))
    edited = tmp_path / "edited" / resource.name
    edited.parent.mkdir(parents=True)
    edited.write_bytes(resource.read_bytes() + b"\n# one more line\n")
    original = resources.Resource.traversable
    monkeypatch.setattr(resources.Resource, "traversable", lambda self: edited if self == resource else original(self))
    outcomes = run_build(tmp_path)
    assert [o.skipped for o in outcomes] == [False, False]
    assert stages.compiled == [job.identifier for job in local_jobs()]


def test_the_resume_hash_reads_repair_toml() -> None:
    """The issue's own case, spelled out: repair.toml's exclude list decides what a wheel bundles."""
    assert resources.REPAIR_EXCLUDES in resources.BUILD_DATA


def test_a_second_build_on_the_same_output_is_refused(stages: FakeStages, tmp_path: Path) -> None:
    lock = (tmp_path / "out").mkdir() or tmp_path / "out" / ".lock"
    with build_stage._exclusive(lock), pytest.raises(WheelwrightError, match="another wheelwright build"):
        run_build(tmp_path)


def test_ledger_rows_round_trip(tmp_path: Path) -> None:
    entry = LedgerEntry(job_id="j", package="p", version="1", label="pt214cu130", torch="2.14.1", accelerator="cu130",
                        python="3.11", input_hash="h", status="built", timings={"compile": 1.5}, report='{"ok": true}')
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(entry)
        stored = ledger.get("j")
    assert dataclasses.replace(stored, updated_at=0.0) == entry
    with pytest.raises(ValueError, match="unknown ledger status"):
        Ledger(tmp_path / "ledger.sqlite").put(dataclasses.replace(entry, status="done"))


def test_slim_rows_round_trip_in_their_own_table_and_the_job_rows_stay_jobs(tmp_path: Path) -> None:
    entry = LedgerEntry(job_id="j", package="p", version="1", label="pt214cu130", torch="2.14.1", accelerator="cu130",
                        python="3.11", input_hash="h", status="built")
    row = SlimRow(job_id="j", arch="9.0", label="pt214cu130sm90", status=Status.BUILT, wheel="p-1-pt214cu130sm90.whl",
                  wheel_size=3, cut_from="p-1.whl", timings={"relink": 1.25})
    failed = SlimRow(job_id="j", arch="8.0", label="pt214cu130sm80", status=Status.FAILED, reason="import failed")
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(entry)
        ledger.put_slim(row)
        ledger.put_slim(failed)
        ledger.put_slim(dataclasses.replace(row, wheel_size=4))  # built again: replaced, not added
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        assert ledger.slims("j") == [failed, dataclasses.replace(row, wheel_size=4)]
        assert ledger.slims("other") == []
        assert [e.job_id for e in ledger.entries()] == ["j"]


def test_slim_wheels_cut_after_the_fat_one_get_their_rows_and_their_seconds(
    stages: FakeStages, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cut itself (real nvcc, objcopy, auditwheel) is tests/integration/test_slim_relink.py's; here, what the
    build does with it: a row per arch (a refused one too), ``slim`` in the job's timings, the fat wheel kept."""
    relinked = [slim.Relinked(arch=arch, libraries={}) for arch in ("9.0", "12.0")]
    monkeypatch.setattr(build_stage.slim, "relink", lambda *args: relinked)
    cuts = [slim.Cut(arch="9.0", label="pt214cu130sm90", variant=tmp_path / "x-pt214cu130sm90.whl", size=3,
                     sha256="ab", timings={"relink": 0.5}),
            slim.Cut(arch="12.0", label="pt214cu130sm120", reason="import failed")]
    monkeypatch.setattr(build_stage.slim, "cut_wheels", lambda *args, **kwargs: cuts)
    outcomes = run_build(tmp_path)
    assert [o.entry.status for o in outcomes] == ["built", "built"]
    with Ledger(tmp_path / "out" / "ledger.sqlite") as ledger:
        rows = ledger.slims(outcomes[0].job.identifier)
        entry = ledger.get(outcomes[0].job.identifier)
    assert [(r.arch, r.status, r.wheel, r.cut_from, r.reason) for r in rows] == [
        ("12.0", "failed", None, entry.wheel, "import failed"),
        ("9.0", "built", "x-pt214cu130sm90.whl", entry.wheel, None)]
    assert entry.timings["slim"] >= 0 and (tmp_path / "out" / "dist" / str(entry.wheel)).is_file()
    # built again, a cut that cannot be made at all leaves the fat wheel as it is, and no row of the last build's
    monkeypatch.setattr(build_stage.slim, "cut_wheels", lambda *args, **kwargs: (_ for _ in ()).throw(
        slim.SlimSkipped("no objcopy")))
    (tmp_path / "out" / "dist" / str(entry.wheel)).unlink()
    again = run_build(tmp_path)
    assert again[0].entry.status == "built" and again[0].entry.wheel == entry.wheel
    with Ledger(tmp_path / "out" / "ledger.sqlite") as ledger:
        assert ledger.slims(outcomes[0].job.identifier) == []


def test_work_in_flight_is_removed_after_each_job(stages: FakeStages, tmp_path: Path) -> None:
    stages.fail["mamba-ssm"] = WheelwrightError("mamba-ssm: compile failed (exit 1)")
    run_build(tmp_path)
    assert list((tmp_path / "out" / "tmp").iterdir()) == []


def test_a_rebuilt_job_orders_its_compile_by_the_costs_its_last_build_measured(
    stages: FakeStages, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handed: dict[str, dict] = {}
    monkeypatch.setattr(build_stage.compilation, "build_environ",
                        lambda job, *args, **kwargs: handed.__setitem__(job.package, args[-1]) or {})
    [first, _] = run_build(tmp_path)
    measured = '[{"unit": "causal_conv1d_fwd.cu", "arch": "9.0", "seconds": 16.0}]'
    with Ledger(tmp_path / "out" / "ledger.sqlite") as ledger:
        ledger.put(dataclasses.replace(ledger.get(first.job.identifier), compile_times=measured))
    (tmp_path / "out" / "dist" / first.entry.wheel).unlink()  # built again: its wheel is gone
    assert handed.pop(first.job.package)["causal_conv1d_fwd.cu"] == {"*": 24.4}  # the first build: the seed's guess
    outcomes = run_build(tmp_path)
    assert [o.skipped for o in outcomes] == [False, True]
    # the build's own "running" rows replace its ledger row: the costs are read before the first of them
    assert handed[first.job.package]["causal_conv1d_fwd.cu"] == {"9.0": 16.0}


def _burn(seconds: float) -> None:
    start = build_stage.process_cpu()
    while build_stage.process_cpu() - start < seconds:
        sum(range(1000))


def test_a_job_alone_has_its_cpu_counted_per_phase_a_nested_block_for_itself_only() -> None:
    timer = build_stage.PhaseTimer(local_jobs()[0], build_stage.Progress(), lambda *_: None, alone=True)
    with timer("compile"):
        _burn(0.02)
        with timer.counting("slim"):
            _burn(0.05)
    with timer("repair"):
        pass
    assert timer.cpu["slim"] >= 0.05
    assert 0.02 <= timer.cpu["compile"] < 0.05  # the relink's seconds are the slim wheels', not the compile's
    line = timer.cpu_line()
    assert line is not None and line.startswith(build_stage.CPU_LINE)
    assert [part.split()[0] for part in line.removeprefix(build_stage.CPU_LINE).split(", ")] == [
        "compile", "slim", "repair"]
    beside = build_stage.PhaseTimer(local_jobs()[0], build_stage.Progress(), lambda *_: None, alone=False)
    with beside("compile"), beside.counting("slim"):
        _burn(0.01)
    assert (beside.cpu, beside.cpu_line()) == ({}, None)  # jobs side by side: the process's CPU is not one job's


def test_the_job_log_says_where_its_cpu_went(stages: FakeStages, tmp_path: Path) -> None:
    outcomes = run_build(tmp_path)
    log = (tmp_path / "out" / "logs" / f"{outcomes[0].job.identifier}.log").read_text()
    (line,) = [line for line in log.splitlines() if build_stage.CPU_LINE in line]
    phases = dict(part.split() for part in line.split(build_stage.CPU_LINE)[1].split(", "))
    assert set(phases) == {"fetch", "env", "patch", "compile", "repair", "verify", "install", "slim"}
    assert all(float(seconds) >= 0 for seconds in phases.values())
