"""The GPU tests' judging without a GPU: tests/gpu's tests are plain functions, called here with recorded inputs
(the H200's doctor capture judged again by builder.doctor, pip reports, pytest's output, made-up rounds) in place
of the box's; and their helpers' pure logic: the leak judgement, the cases, the variants' profiles."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from builder.doctor.probe import Environment
from builder.doctor.report import as_json
from builder.doctor.verdicts import diagnose
from builder.plan.archs import split
from builder.plan.expand import load_plan
from scripts.gpu.data import DTYPES, Expected, load_acceptance
from tests.gpu import checklist, memory, numerics, ptx, suite, test_arch, test_doctor, test_install, test_upstream
from tests.gpu.options import Given
from tests.gpu.report import Recorded

ROOT = Path(__file__).resolve().parents[2]
DATA = load_acceptance()
H200 = json.loads((ROOT / "tests/unit/data/doctor/gpu-h200.json").read_text())
BY_HAND = ROOT / "tests/unit/data/doctor/gpu-h200-by-hand.json"
MIB = memory.MIB


# -- doctor on the H200 -----------------------------------------------------------------------------------------


def _doctor(report: dict[str, Any], cli: dict[str, Any] | None = None) -> list[str | None]:
    """Each doctor test's failure message on these reports, or None where it passes."""
    calls = [lambda: test_doctor.test_doctor_reads_the_gpu(report, DATA, Recorded()),
             *(lambda p=p: test_doctor.test_doctor_says_ok(p, report, DATA, Recorded()) for p in DATA.packages),
             lambda: test_doctor.test_the_two_doctors_agree(report, cli, Recorded())]
    found: list[str | None] = []
    for call in calls:
        try:
            call()
            found.append(None)
        except AssertionError as failure:
            found.append(str(failure).splitlines()[0])
    return found


def test_doctor_passes_on_the_h200_capture() -> None:
    report = json.loads(BY_HAND.read_text())
    assert _doctor(report, report) == [None] * 4
    record = Recorded()
    test_doctor.test_doctor_reads_the_gpu(report, DATA, record)
    assert record.detail.startswith("NVIDIA H200 sm_90 via nvidia-smi, driver 580.")


@pytest.mark.parametrize(
    ("edit", "failed", "problem"),
    [
        (lambda r: r["environment"].update(gpu_source="torch"), 0, "via torch"),
        (lambda r: r["environment"]["gpus"][0].update(arch="8.0"), 0, "sm_80"),
        (lambda r: r["environment"]["packages"][0]["extensions"][0].update(sass=["8.0"]), 1, "not 9.0"),
        (lambda r: r["diagnoses"][1]["verdicts"].insert(0, {"code": "torch-minor", "message": "built for 2.10"}), 2,
         "torch-minor: built for 2.10"),
        (lambda r: r["environment"]["packages"][1]["extensions"][0].update(imports=False, import_error="boom"), 2,
         "does not import: boom"),
        (lambda r: r["diagnoses"].pop(1), 2, "did not find it installed"),
    ],
    ids=["gpu-from-torch", "gpu-arch", "no-sass", "verdict", "import", "missing"],
)
def test_doctor_fails_with_the_reason(edit: Any, failed: int, problem: str) -> None:
    report = json.loads(BY_HAND.read_text())
    edit(report)
    found = _doctor(report, report)
    assert problem in str(found[failed]) and [f for i, f in enumerate(found) if i != failed] == [None] * 3


def test_the_two_doctors_must_agree_word_for_word() -> None:
    other = json.loads(BY_HAND.read_text())
    other["diagnoses"][0]["verdicts"][0]["message"] = "something else"
    assert "!=" in str(_doctor(json.loads(BY_HAND.read_text()), other)[-1])
    assert _doctor(other, None)[-1] == "`wheelwright doctor --json` gave no report"


def doctor_report(sass: tuple[str, ...], ptx_archs: tuple[str, ...]) -> dict[str, Any]:
    """What doctor says on the H200 of a causal-conv1d wheel with these archs: the real capture, the archs changed,
    judged again by builder.doctor."""
    environment = copy.deepcopy(H200["environment"])
    environment["packages"] = [p for p in environment["packages"] if p["name"] == DATA.arch.package]
    for extension in environment["packages"][0]["extensions"]:
        extension["sass"], extension["ptx"] = list(sass), list(ptx_archs)
    env = Environment.from_dict(environment)
    return as_json(env, diagnose(env), {})


def _variant_verdict(name: str, report: dict[str, Any], cli: dict[str, Any] | None) -> str | None:
    try:
        test_doctor.test_doctor_gives_the_variants_verdict(report, cli, DATA, Given(variant=name), Recorded())
    except AssertionError as failure:
        return str(failure).splitlines()[0]
    return None


@pytest.mark.parametrize("name", DATA.arch.variants)
def test_each_variants_wheel_gets_the_verdict_its_stage_expects_and_no_other(name: str) -> None:
    variant = DATA.variant(name)
    report = doctor_report(variant.sass, variant.ptx)
    assert _variant_verdict(name, report, report) is None
    for other in (v for v in DATA.arch.variants.values() if v.doctor != variant.doctor):
        wrong = doctor_report(other.sass, other.ptx)
        assert f"said ['{other.doctor}'" in str(_variant_verdict(name, wrong, wrong))


def test_the_variants_verdict_names_the_jit_and_the_error_and_wants_both_doctors_alike() -> None:
    record = Recorded()
    jit = doctor_report((), ("8.0",))
    test_doctor.test_doctor_gives_the_variants_verdict(jit, jit, DATA, Given(variant="ptx"), record)
    assert "JIT" in record.detail
    missing = doctor_report(("8.0",), ())
    assert _variant_verdict("sm80", missing, None) == "wheelwright doctor gave no JSON report"
    other = json.loads(json.dumps(missing).replace("none of which runs", "none of which run"))
    assert "disagree" in str(_variant_verdict("sm80", missing, other))


def test_the_failed_call_must_be_cudas_no_kernel_image() -> None:
    error = RuntimeError("CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors")
    assert test_arch.failed_call_problem(error) is None
    assert test_arch.failed_call_problem(RuntimeError("CUDA error: an illegal memory access")) is not None
    assert "the kernel ran" in str(test_arch.failed_call_problem(None))


def test_the_variants_profiles_plan_one_causal_conv1d_job_each_with_its_archs() -> None:
    main = {j.package: j for j in load_plan(ROOT / "matrix.yaml", "gpu-box").jobs}[DATA.arch.package]
    for variant in DATA.arch.variants.values():
        (job,) = load_plan(ROOT / "matrix.yaml", variant.profile).jobs
        assert (job.identifier, job.version, job.label) == (main.identifier, main.version, DATA.label)
        sass, ptx_archs = split(job.archs)
        assert (sorted(sass), sorted(ptx_archs)) == (sorted(variant.sass), sorted(variant.ptx))
    by_doctor = {v.doctor: v for v in DATA.arch.variants.values()}
    assert set(by_doctor) == {"ok", "ptx-jit", "no-kernel-image"} and not by_doctor["no-kernel-image"].suite
    assert DATA.gpu_arch not in by_doctor["no-kernel-image"].sass + by_doctor["no-kernel-image"].ptx


# -- what pip installed -----------------------------------------------------------------------------------------

WHEEL = "causal_conv1d-1.7.0+pt211cu130-cp312-cp312-linux_x86_64.whl"
URL = "http://127.0.0.1:8123"


def _installed(dist: Path, *, version: str = "1.7.0+pt211cu130", url: str = URL, sha: str | None = None,
               extra: bool = False) -> dict[str, Any]:
    digest = sha or hashlib.sha256((dist / WHEEL).read_bytes()).hexdigest()
    item = {"metadata": {"name": "causal_conv1d", "version": version}, "download_info": {
        "url": f"{url}/whl/pt211cu130/{WHEEL.replace('+', '%2B')}", "archive_info": {"hashes": {"sha256": digest}}}}
    einops = {"metadata": {"name": "einops", "version": "0.8.1"}, "download_info": {"url": f"{url}/e.whl"}}
    return {"causal-conv1d": item, **({"einops": einops} if extra else {})}


@pytest.mark.parametrize(
    ("change", "problem"),
    [({}, None), ({"version": "1.7.0"}, "lacks the label +pt211cu130"),
     ({"url": "https://elsewhere.example"}, f"not from {URL}"), ({"sha": "0" * 64}, "differs from the file in")],
)
def test_install_is_our_labelled_wheel_from_the_index_byte_for_byte(
    tmp_path: Path, change: dict[str, str], problem: str | None
) -> None:
    (tmp_path / WHEEL).write_bytes(b"wheel bytes")
    given, stage_data = Given(index_url=URL, dist_dir=tmp_path), dict[str, Any]()
    call = lambda package: test_install.test_installed_from_the_index(  # noqa: E731
        package, _installed(tmp_path, **change), DATA, given, Recorded(), stage_data)
    with pytest.raises(AssertionError, match="pip's report does not list it as installed"):
        call("mamba-ssm")
    if problem is None:
        call("causal-conv1d")
        assert stage_data == {"wheels": [WHEEL], "index_url": URL}
    else:
        with pytest.raises(AssertionError, match=re.escape(problem)):
            call("causal-conv1d")


def test_an_arch_venv_holds_its_wheel_alone() -> None:
    test_install.test_nothing_else_installed({"causal-conv1d": {}}, DATA)
    with pytest.raises(AssertionError, match=r"pip installed \['causal-conv1d', 'einops'\]"):
        test_install.test_nothing_else_installed({"causal-conv1d": {}, "einops": {}}, DATA)


# -- causal-conv1d's suite --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        ("16 workers [13373 items]\n....\n9485 passed, 3888 skipped, 2 warnings in 97.31s (0:01:37)\n",
         {"passed": 9485, "skipped": 3888, "warnings": 2}),
        ("===== 1 failed, 5 passed, 1 error in 0.52s =====", {"failed": 1, "passed": 5, "errors": 1}),
        ("no tests ran in 0.01s", None),
        ("collected 5 items / 1 error\n1 error in 0.3s", {"errors": 1}),
        ("3 passed\n", None),
    ],
)
def test_pytests_counts_are_read_from_its_last_line(output: str, counts: dict[str, int] | None) -> None:
    assert suite.parse_counts(output) == counts


def test_the_suite_must_give_upstreams_counts() -> None:
    expected = Expected(passed=9485, skipped=3888)
    assert suite.judge({"passed": 9485, "skipped": 3888, "warnings": 4}, expected, quick=False)[0]
    ok, detail = suite.judge({"passed": 9484, "skipped": 3889}, expected, quick=False)
    assert not ok and "DIFFERS from upstream: 9485 passed, 3888 skipped" in detail
    assert not suite.judge({"passed": 9484, "skipped": 3888, "failed": 1}, expected, quick=False)[0]
    assert suite.judge({"passed": 12}, expected, quick=True) == (
        True, "12 passed (--quick subset; counts not compared)")
    assert not suite.judge({"passed": 9485, "skipped": 3888}, None, quick=False)[0]
    assert suite.judge(None, expected, quick=False) == (False, "pytest printed no summary line")


def test_the_suites_tests_come_without_the_package_source(tmp_path: Path) -> None:
    sdist = tmp_path / "causal_conv1d-1.7.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for name in ("causal_conv1d/__init__.py", "tests/test_causal_conv1d.py", "setup.py"):
            info = tarfile.TarInfo(f"causal_conv1d-1.7.0/{name}")
            archive.addfile(info, io.BytesIO(b""))
    root = suite.unpack_tests(sdist, "tests/test_causal_conv1d.py", tmp_path / "out")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "pytest.ini", "tests/test_causal_conv1d.py"]
    with pytest.raises(FileNotFoundError, match="has no tests/test_other.py"):
        suite.unpack_tests(sdist, "tests/test_other.py", tmp_path / "again")
    job = {j.package: j for j in load_plan(ROOT / "matrix.yaml", "gpu-box").jobs}["causal-conv1d"]
    assert suite.sdist_filename("causal-conv1d", job.version) == job.sdist.filename == sdist.name


def test_the_suite_fails_when_its_tests_saw_the_source_or_it_was_stopped() -> None:
    run = suite.SuiteRun(command=["pytest"], returncode=0, seconds=1.0, output_tail="9485 passed, 3888 skipped in 9s")
    record = Recorded()
    test_upstream.check_suite(run, DATA, "1.7.0", quick=False, imported="/v/lib/site-packages/causal_conv1d/x.py",
                              record=record)
    assert record.data["counts"] == {"passed": 9485, "skipped": 3888}
    with pytest.raises(AssertionError, match="not an installed wheel"):
        test_upstream.check_suite(run, DATA, "1.7.0", quick=False, imported="/tmp/causal_conv1d-1.7.0/x.py",
                                  record=Recorded())
    stopped = suite.SuiteRun(command=[], returncode=None, seconds=300.0, output_tail="")
    with pytest.raises(AssertionError, match="time limit"):
        test_upstream.check_suite(stopped, DATA, "1.7.0", quick=False, imported="/site-packages/x", record=Recorded())


# -- the cases and the checklist's tests ------------------------------------------------------------------------


def test_mamba_cases_cover_every_dtype_and_complex_only_where_upstream_tests_it() -> None:
    scans, inners = numerics.scan_cases(DATA.mamba.selective_scan), numerics.inner_cases(DATA.mamba.inner)
    assert (len(scans), len(inners)) == (18, 16)
    assert {case.dtype for case in scans} == {case.dtype for case in inners} == set(DTYPES)
    assert {case.dtype for case in inners if case.complex_a} == {"float32"}
    assert len({case.name for case in scans}) == len(scans) and len({case.name for case in inners}) == len(inners)


def test_a_verdict_is_recorded_with_every_comparison() -> None:
    near = numerics.Comparison(tensor="out", rule="elementwise", max_abs=1e-3, worst=0.5, bound="atol", ok=True)
    far = numerics.Comparison(tensor="dA", rule="normwise", max_abs=2.0, worst=4.0, bound="rel 0.1", ok=False)
    record = Recorded()
    assert numerics.recorded_verdict([near], record) == [] and record.detail.startswith("1 tensors within tolerance")
    failures = numerics.recorded_verdict([near, far], record)
    assert failures == ["dA (normwise): max |diff| 2, 4x the bound (rel 0.1)"]
    assert [c["tensor"] for c in record.data["comparisons"]] == ["out", "dA"]


def test_the_checklist_has_the_issues_shapes_and_tolerances() -> None:
    data = DATA.checklist
    assert len(checklist.BATCH_MODELS) * len(data.dtypes) == 12 and len(checklist.DECODE_MODELS) == 2
    assert data.batch.sizes == (1, 2, 8, 32) and data.dtypes == DTYPES
    assert [(m.d_model, m.n_layer) for m in data.perf.models] == [(768, 24), (2048, 48)]
    assert data.leak.seconds == 60 and data.leak.bound_mib == 16
    assert set(data.decode.tolerance) == {"float16", "bfloat16"}  # fp32 compares tokens


# -- the leak judgement -----------------------------------------------------------------------------------------


def _judge(allocated: list[int], **changes: int) -> memory.LeakVerdict:
    samples = [memory.Sample(step=i, seconds=(i + 1) * 0.5, allocated=a, reserved=2 * a)
               for i, a in enumerate(allocated)]
    return memory.judge(samples, **({"warmup_steps": 5, "bound_bytes": 16 * MIB, "min_samples": 10} | changes))


def test_a_flat_series_after_warm_up_passes_even_after_a_warm_up_climb() -> None:
    verdict = _judge([100 * MIB, 300 * MIB, 900 * MIB, 1000 * MIB, 1000 * MIB] + [1000 * MIB] * 50)
    assert verdict.ok and (verdict.start, verdict.end, verdict.growth, verdict.steps) == (1000 * MIB,) * 2 + (0, 55)
    assert "allocated 1000.0 MiB after 5 warm-up steps, 1000.0 MiB at the end" in verdict.detail()


def test_a_steady_leak_fails_and_says_by_how_much() -> None:
    verdict = _judge([1000 * MIB + step * MIB // 2 for step in range(120)])  # half a MiB a step, 2 steps a second
    assert not verdict.ok and verdict.detail().startswith("allocated memory grew 57.0 MiB")
    assert verdict.slope_mib_per_min == pytest.approx(60.0) and verdict.as_dict()["growth_mib"] == 57.0


def test_growth_is_judged_against_the_bound_inclusively_and_a_late_rise_fails() -> None:
    base = 2000 * MIB
    assert _judge([base] * 5 + [base, base + 16 * MIB] * 10).ok
    assert not _judge([base] * 5 + [base, base + 16 * MIB + 1] * 10).ok
    assert _judge([base + (step % 7) * MIB for step in range(60)]).ok  # allocator churn within 6 MiB
    assert _judge([900 * MIB] * 5 + [900 * MIB - step * MIB for step in range(30)]).ok  # going down is no leak
    assert not _judge([500 * MIB] * 40 + [564 * MIB] * 2).ok


def test_too_few_samples_after_warm_up_fail_rather_than_pass() -> None:
    verdict = _judge([100 * MIB] * 12)
    assert not verdict.ok and "only 7 samples after the warm-up, fewer than the 10 needed" in verdict.detail()
    assert not memory.judge([], warmup_steps=0, bound_bytes=0, min_samples=2).ok


# -- ptx_speed's judging ----------------------------------------------------------------------------------------

CASES = ("a fwd", "a fwd+bwd", "b fwd")
DRIFT = (1.00, 1.12, 0.91, 1.05, 0.88, 1.10, 0.95)  # the GPU's clock from round to round: shared by all arms
WOBBLE = (0.004, -0.003, 0.002, -0.004, 0.001, 0.003, -0.002)  # each process's own, a few tenths of a percent
LABELS = {"ptx": "PTX compute_80", "ptx90": "PTX compute_90"}


def make_rounds(*, ptx90: float | None, target: float, again: float = 1.0,
                wobble: tuple[float, ...] = WOBBLE) -> dict[str, Any]:
    """Seven rounds as interleave.run_rounds returns them: every arm's time is its speed factor x the round's drift
    x its own small wobble (shifted per arm, so no two arms wobble alike)."""
    factors = {"sass": 1.0, "sass-again": again, "ptx": target, **({"ptx90": ptx90} if ptx90 is not None else {})}
    rounds = [{arm: {case: 0.1 * (i + 1) * factor * drift * (1 + wobble[(turn + 2 * index) % len(wobble)])
                     for i, case in enumerate(CASES)} for index, (arm, factor) in enumerate(factors.items())}
              for turn, drift in enumerate(DRIFT)]
    return {"arms": list(factors), "rounds": rounds, "order": [], "workers": {}, "error": None}


def judge(result: dict[str, Any], *, max_noise: float = 0.10) -> ptx.Judgement:
    return ptx.judge(result, target="ptx", isa="ptx90", floor=0.02, max_noise=max_noise, labels=LABELS)


def test_a_to_a_every_wheel_alike_is_within_noise_despite_the_rounds_drift() -> None:
    judged = judge(make_rounds(target=1.0, ptx90=1.0))
    assert judged.noise.ok and judged.isa is not None and judged.isa.ok and judged.target.ok
    assert judged.data["verdict"] == ptx.WITHIN and judged.data["worst_ratio"] < 1.01
    assert all(stats["noise"] < 0.01 and stats["allowed"] == 0.02 for stats in judged.data["cases"].values())


def test_a_compute_80_gap_with_compute_90_within_noise_is_reported_and_attributed_not_failed() -> None:
    judged = judge(make_rounds(target=1.16, ptx90=1.0))
    assert judged.isa is not None and judged.isa.ok and judged.target.ok
    assert "slower on 3 of 3 cases: reported, not failed" in judged.target.detail
    assert judged.data["verdict"] == ptx.TARGET_ISA and "not from the JIT" in judged.data["verdict_text"]
    assert judged.data["worst_ratio"] == pytest.approx(1.16, abs=0.01)
    assert len(judged.data["cases"]["a fwd"]["round_ratios"]["ptx"]) == 7  # every round's ratio is kept


def test_a_slower_compute_90_fails_as_the_jits_cost_and_a_gap_without_a_control_fails() -> None:
    judged = judge(make_rounds(target=1.16, ptx90=1.10))
    assert judged.isa is not None and not judged.isa.ok and "the JIT" in judged.isa.detail
    assert not judged.target.ok and judged.data["verdict"] == ptx.JIT
    alone = judge(make_rounds(target=1.16, ptx90=None))
    assert alone.isa is None and not alone.target.ok and alone.data["verdict"] == ptx.NO_CONTROL
    assert judge(make_rounds(target=1.005, ptx90=None)).data["verdict"] == ptx.WITHIN


def test_the_allowance_is_the_a_to_a_controls_worst_round_and_too_much_noise_gives_no_verdict() -> None:
    wobble = (0.0, 0.04, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert judge(make_rounds(target=1.03, ptx90=1.0, wobble=wobble)).data["verdict"] == ptx.WITHIN
    slow = make_rounds(target=1.0, ptx90=1.0, wobble=wobble)
    for times in slow["rounds"]:
        times["ptx90"]["b fwd"] *= 1.06
    assert judge(slow).data["verdict"] == ptx.JIT
    noisy = judge(make_rounds(target=1.0, ptx90=1.0, wobble=(0.15, -0.12, 0.1, -0.14, 0.13, -0.1, 0.12)))
    assert not noisy.noise.ok and noisy.data["verdict"] == ptx.TOO_NOISY and noisy.data["worst_noise"] > 0.10


def test_no_rounds_or_a_failed_worker_fail() -> None:
    nothing = judge({"rounds": [], "error": "the ptx worker exited (exit 3)"})
    assert not nothing.noise.ok and "the ptx worker exited" in nothing.target.detail and nothing.data["verdict"] is None
    partial = judge(make_rounds(target=1.0, ptx90=1.0) | {"error": "the ptx90 worker did not answer in time"})
    assert partial.noise.ok and not partial.measured.ok


def test_the_first_call_gives_the_jits_cost() -> None:
    def first(import_s: float, first_s: float) -> dict[str, Any]:
        return {"import_s": import_s, "first_call_s": first_s, "second_call_s": 0.0001, "CUDA_CACHE_DISABLE": "1",
                "CUDA_MODULE_LOADING": "LAZY"}

    verdict, jit = ptx.first_call(first(0.5, 0.01), first(0.5, 2.51), name="PTX compute_80")
    assert verdict.ok and jit == pytest.approx(2.5)
    assert "CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING=LAZY" in verdict.detail
    missing, no_jit = ptx.first_call(first(0.5, 0.01), None, name="PTX")
    assert not missing.ok and missing.detail.startswith("no measurement") and no_jit is None
    assert math.isclose(ptx.jit_cost(first(1.0, 2.0)), 3.0)
