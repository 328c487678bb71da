"""The arch wheels' stages without a GPU (issue #13): their profiles plan the archs asked for, doctor's real verdicts
on the H200 capture with each wheel's archs are what the stages expect, the kernel call that must fail, the compile
profile from nvcc's times, the PTX/SASS comparison, the build report from a ledger, and stages of several parts."""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path

import pytest

from builder.core.ledger import Ledger, LedgerEntry
from builder.doctor.probe import Environment
from builder.doctor.report import as_json
from builder.doctor.verdicts import diagnose
from builder.plan.archs import split
from builder.plan.expand import load_plan
from scripts import gpu_acceptance
from scripts.acceptance import archs, ptxspeed
from scripts.acceptance import summary as record
from scripts.acceptance.config import load_config
from scripts.acceptance.summary import FAILED, PASSED, Check

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config()
H200 = json.loads((ROOT / "tests" / "unit" / "data" / "doctor" / "gpu-h200.json").read_text())


# -- the profiles -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", CONFIG.arch.variants, ids=lambda v: v.name)
def test_each_variant_profile_plans_one_causal_conv1d_job_with_its_archs(variant) -> None:
    plan = load_plan(ROOT / "matrix.yaml", variant.profile)
    (job,) = plan.jobs
    main = {j.package: j for j in load_plan(ROOT / "matrix.yaml", "gpu-box").jobs}[CONFIG.arch.package]
    assert job.package == CONFIG.arch.package and job.label == CONFIG.label
    # the same job as the main build's: why each variant needs a folder of its own
    assert (job.identifier, job.version, job.python) == (main.identifier, main.version, main.python)
    sass, ptx = split(job.archs)
    assert (tuple(sorted(sass)), tuple(sorted(ptx))) == (tuple(sorted(variant.sass)), tuple(sorted(variant.ptx)))


def test_the_variants_cover_fat_ptx_only_and_a_missing_arch() -> None:
    by_doctor = {v.doctor: v for v in CONFIG.arch.variants}
    assert set(by_doctor) == {"ok", "ptx-jit", "no-kernel-image"}
    assert CONFIG.gpu_arch in by_doctor["ok"].sass and len(by_doctor["ok"].sass) >= 3 and by_doctor["ok"].ptx
    assert not by_doctor["ptx-jit"].sass and not by_doctor["no-kernel-image"].suite
    assert CONFIG.gpu_arch not in by_doctor["no-kernel-image"].sass + by_doctor["no-kernel-image"].ptx


# -- doctor, with its real verdicts on the H200's capture -------------------------------------------------------


def doctor_report(sass: tuple[str, ...], ptx: tuple[str, ...]) -> dict:
    """What doctor says on the H200 of a causal-conv1d wheel with these archs: the real capture, the archs changed,
    judged again by builder.doctor."""
    environment = copy.deepcopy(H200["environment"])
    environment["packages"] = [p for p in environment["packages"] if p["name"] == CONFIG.arch.package]
    for extension in environment["packages"][0]["extensions"]:
        extension["sass"], extension["ptx"] = list(sass), list(ptx)
    env = Environment.from_dict(environment)
    return as_json(env, diagnose(env), {})


@pytest.mark.parametrize("variant", CONFIG.arch.variants, ids=lambda v: v.name)
def test_doctor_gives_each_wheel_the_verdict_its_stage_expects(variant) -> None:
    report = doctor_report(variant.sass, variant.ptx)
    check = archs.doctor_check(report, report, variant, package=CONFIG.arch.package)
    assert check.status == PASSED, check.detail
    others = [v for v in CONFIG.arch.variants if v.doctor != variant.doctor]
    for other in others:  # a wheel with other archs gets another verdict, and the check says so
        wrong = doctor_report(other.sass, other.ptx)
        failed = archs.doctor_check(wrong, wrong, variant, package=CONFIG.arch.package)
        assert failed.status == FAILED and f"said ['{other.doctor}'" in failed.detail


def test_doctor_check_names_the_jit_and_the_error_and_wants_both_doctors() -> None:
    ptx, sm80 = CONFIG.arch.variant("ptx"), CONFIG.arch.variant("sm80")
    assert "JIT" in archs.doctor_check(doctor_report((), ("8.0",)), doctor_report((), ("8.0",)), ptx,
                                       package=CONFIG.arch.package).detail
    missing = doctor_report(("8.0",), ())
    assert archs.NO_KERNEL_IMAGE in archs.doctor_check(missing, missing, sm80, package=CONFIG.arch.package).detail
    alone = archs.doctor_check(missing, None, sm80, package=CONFIG.arch.package)
    assert alone.status == FAILED and "wheelwright doctor gave no JSON report" in alone.detail
    other = json.loads(json.dumps(missing).replace("none of which runs", "none of which run"))
    disagree = archs.doctor_check(missing, other, sm80, package=CONFIG.arch.package)
    assert disagree.status == FAILED and "disagree" in disagree.detail


# -- the kernel call that must fail -----------------------------------------------------------------------------


def test_the_failed_call_must_be_cudas_no_kernel_image() -> None:
    error = RuntimeError("CUDA error: no kernel image is available for execution on the device\nCUDA kernel errors")
    assert archs.judge_failed_call(error).status == PASSED
    assert archs.judge_failed_call(RuntimeError("CUDA error: an illegal memory access")).status == FAILED
    ran = archs.judge_failed_call(None)
    assert ran.status == FAILED and "the kernel ran" in ran.detail


# -- the compile profile ----------------------------------------------------------------------------------------

FAT_TIMES = [  # the shape nvcc --time gives: per unit, the host phases once and each arch's cicc + ptxas
    {"unit": "causal_conv1d_bwd.cu", "arch": "host", "seconds": 20.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "8.0", "seconds": 300.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "9.0", "seconds": 330.0},
    {"unit": "causal_conv1d_bwd.cu", "arch": "10.0", "seconds": 360.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "host", "seconds": 5.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "8.0", "seconds": 20.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "9.0", "seconds": 22.0},
    {"unit": "causal_conv1d_fwd.cu", "arch": "10.0", "seconds": 25.0},
]


def test_compile_profile_puts_the_wall_beside_the_critical_path_and_the_cores() -> None:
    profile = archs.compile_profile(FAT_TIMES, wall=400.0, cores=16)
    assert profile["sum_s"] == 1082.0 and profile["max_pair"] == {
        "unit": "causal_conv1d_bwd.cu", "arch": "10.0", "seconds": 360.0,
    }
    assert (profile["critical_unit"], profile["critical_path_s"]) == ("causal_conv1d_bwd.cu", 380.0)
    assert profile["cores_bound_s"] == round(1082 / 16, 1) and profile["lower_bound_s"] == 380.0
    assert profile["wall_over_bound"] == round(400 / 380, 2)
    # halving the bwd unit's kernels: 20 + 180 s, then the fwd unit (30 s) and the cores bound (67.6 s) are far below
    assert profile["split_critical_halves_s"] == 200.0 and profile["split_gain_s"] == 180.0
    assert "critical path 380.0 s (causal_conv1d_bwd.cu)" in archs.describe(profile)


def test_a_cores_bound_build_gains_nothing_from_a_split() -> None:
    """The split full-arch build on the H200 (2026-12-01 night): 80 pairs summing to 3696 s on 16 cores, the
    critical unit 93.5 s: the cores bound it, and a further split must not promise a negative gain."""
    times = [{"unit": f"part{u}.cu", "arch": a, "seconds": 46.0} for u in range(8) for a in ("8.0", "9.0", "10.0")]
    times += [{"unit": f"part{u}.cu", "arch": "host", "seconds": 10.0} for u in range(8)]
    profile = archs.compile_profile(times, wall=130.0, cores=4)
    assert profile["lower_bound_s"] == profile["cores_bound_s"] == round(sum(r["seconds"] for r in times) / 4, 1)
    assert profile["split_gain_s"] == 0.0
    assert "the cores bound the build, not one unit: splitting it would save nothing" in archs.describe(profile)


def test_compile_profile_without_times_says_so() -> None:
    assert archs.compile_profile([], wall=12.0, cores=16) == {"wall_s": 12.0, "pairs": 0}
    assert archs.describe({"pairs": 0}) == "no nvcc --time rows recorded"


# -- the build report, from the variants' folders ---------------------------------------------------------------


def fake_variant_build(root: Path, name: str, *, exit_code: int = 0, times: list | None = None) -> None:
    out = root / name
    (out / "dist").mkdir(parents=True)
    wheel = f"causal_conv1d-1.7.0+{CONFIG.label}-cp312-cp312-manylinux_2_38_x86_64.whl"
    (out / "dist" / wheel).write_bytes(b"wheel")
    with Ledger(out / "ledger.sqlite") as ledger:
        ledger.put(LedgerEntry(
            job_id=f"causal-conv1d-1.7.0+{CONFIG.label}-cp312-x86_64", package="causal-conv1d", version="1.7.0",
            label=CONFIG.label, torch="2.11.0", accelerator="cu130", python="3.12", input_hash="h", status="built",
            phase="verify", timings={"compile": 400.0}, wheel=wheel, wheel_size=60 * 2**20,
            compile_times=json.dumps(times or []),
        ))
    state = out / "build-run"
    state.mkdir()
    now = time.time()
    (state / "run.json").write_text(json.dumps({"pid": 1, "started": now - 410, "command": ["build"]}))
    (state / "exit.json").write_text(json.dumps({"exit": exit_code, "ended": now}))


def test_arch_build_report_records_each_wheel_and_the_fat_builds_profile(tmp_path: Path) -> None:
    for name in ("fat", "ptx", "ptx90", "sm80"):
        fake_variant_build(tmp_path / "arch", name, times=FAT_TIMES if name == "fat" else None)
    summary = tmp_path / "summary.json"
    fake_variant_build(tmp_path, "main", times=FAT_TIMES[:2])  # the sm_90 build's ledger, for comparison
    code = gpu_acceptance.main(["--summary", str(summary), "arch-build-report", "--root", str(tmp_path / "arch"),
                                "--cores", "16", "--main", str(tmp_path / "main")])
    entry = json.loads(summary.read_text())["stages"]["arch_build"]
    assert code == 0 and entry["status"] == PASSED and len(entry["checks"]) == 4
    assert entry["data"]["fat"]["compile_profile"]["critical_path_s"] == 380.0
    assert entry["data"]["main"]["compile_profile"]["critical_path_s"] == 320.0
    assert entry["data"]["fat"]["build_seconds"] >= 409
    # collected: a later command sees the builds as taken
    assert (tmp_path / "arch" / "fat" / "build-run" / "collected").exists()


def test_arch_build_report_is_pending_while_one_runs_and_fails_a_failed_build(tmp_path: Path) -> None:
    fake_variant_build(tmp_path / "arch", "fat")
    fake_variant_build(tmp_path / "arch", "ptx", exit_code=1)
    summary = tmp_path / "summary.json"
    code = gpu_acceptance.main(["--summary", str(summary), "arch-build-report", "--root", str(tmp_path / "arch")])
    entry = json.loads(summary.read_text())["stages"]["arch_build"]
    assert code == 1 and entry["status"] == FAILED
    failed = {c["name"].split()[0]: c["detail"] for c in entry["checks"] if c["status"] == FAILED}
    assert failed == {"ptx": "exit 1", **{name: f"no build was started in {tmp_path / 'arch' / name}"
                                          for name in ("ptx90", "sm80")}}


def test_arch_build_report_checks_only_the_variants_asked_for(tmp_path: Path) -> None:
    """--variants ptx,ptx90 (the PTX builds ptx_speed needs, started alone): the others are not looked for."""
    fake_variant_build(tmp_path / "arch", "ptx")
    fake_variant_build(tmp_path / "arch", "ptx90")
    summary = tmp_path / "summary.json"
    code = gpu_acceptance.main(["--summary", str(summary), "arch-build-report", "--root", str(tmp_path / "arch"),
                                "--variants", "ptx,ptx90"])
    entry = json.loads(summary.read_text())["stages"]["arch_build"]
    assert code == 0 and [c["name"] for c in entry["checks"]] == ["ptx build (gpu-box-ptx)",
                                                                  "ptx90 build (gpu-box-ptx90)"]
    assert gpu_acceptance.main(["--summary", str(summary), "arch-build-report", "--root", str(tmp_path / "arch"),
                                "--variants", "ptx,sm75"]) == 2


# -- a stage of several parts -----------------------------------------------------------------------------------


def test_appended_checks_make_one_stage_and_a_later_shell_failure_fails_it(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    record.begin_command(path, command="test", planned=["arch_fat"], resume=False)
    record.append_checks(path, "arch_fat", [Check(name="install", status=PASSED)], data={"variant": "fat"})
    record.append_checks(path, "arch_fat", [Check(name="doctor", status=PASSED)])
    entry = record.load(path)["stages"]["arch_fat"]
    assert [c["name"] for c in entry["checks"]] == ["install", "doctor"] and entry["status"] == PASSED
    assert entry["data"] == {"variant": "fat"} and entry["detail"] == "2 of 2 checks passed"
    record.append_checks(path, "arch_fat", [Check(name="suite", status=FAILED, detail="1 failed")])
    assert record.load(path)["stages"]["arch_fat"]["status"] == FAILED
    # a command later (--resume), the stage starts afresh
    record.begin_command(path, command="test --resume", planned=["arch_fat"], resume=True)
    record.append_checks(path, "arch_fat", [Check(name="install", status=PASSED)])
    assert [c["name"] for c in record.load(path)["stages"]["arch_fat"]["checks"]] == ["install"]
    # the shell's stage ended badly after the checks passed: the stage failed
    record.record_stage(path, "arch_fat", status=FAILED, seconds=3.0, detail="exit 1", keep_result=True)
    entry = record.load(path)["stages"]["arch_fat"]
    assert (entry["status"], entry["seconds"]) == (FAILED, 3.0) and entry["detail"].startswith("exit 1 after:")


# -- the JIT and PTX's speed ------------------------------------------------------------------------------------


def first(import_s: float, first_s: float) -> dict:
    return {"import_s": import_s, "first_call_s": first_s, "second_call_s": 0.0001, "CUDA_CACHE_DISABLE": "1",
            "CUDA_MODULE_LOADING": "LAZY"}


def test_first_call_check_reports_the_jits_cost() -> None:
    check = ptxspeed.first_call_check(first(0.5, 0.01), first(0.5, 2.51))
    assert check.status == PASSED and check.data["jit_s"] == pytest.approx(2.5)
    assert "CUDA_CACHE_DISABLE=1, CUDA_MODULE_LOADING=LAZY" in check.detail
    assert ptxspeed.first_call_check(first(0.5, 0.01), None).status == FAILED


def test_arch_commands_refuse_an_unknown_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = gpu_acceptance.main(["--summary", str(tmp_path / "s.json"), "no-kernel", "--variant", "sm75"])
    assert code == 2 and "no arch variant 'sm75'; [arch.variants] has fat, ptx, ptx90, sm80" in capsys.readouterr().err


def test_arch_install_wants_the_variants_wheel_alone_from_its_own_index(tmp_path: Path) -> None:
    wheel = tmp_path / f"causal_conv1d-1.7.0+{CONFIG.label}-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"fat wheel")
    url = "http://127.0.0.1:8124"
    item = {
        "metadata": {"name": "causal_conv1d", "version": f"1.7.0+{CONFIG.label}"},
        "download_info": {
            "url": f"{url}/whl/{CONFIG.label}/{wheel.name.replace('+', '%2B')}",
            "archive_info": {"hashes": {"sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}},
        },
    }
    extra = {"metadata": {"name": "einops", "version": "0.8.1"}, "download_info": {"url": f"{url}/e.whl"}}
    report = tmp_path / "pip-report.json"
    report.write_text(json.dumps({"install": [item, extra]}))
    summary = tmp_path / "summary.json"
    code = gpu_acceptance.main(["--summary", str(summary), "arch-installed", "--variant", "fat", "--report",
                                str(report), "--index-url", url, "--dist", str(tmp_path)])
    entry = json.loads(summary.read_text())["stages"]["arch_fat"]
    checks = {c["name"]: c for c in entry["checks"]}
    assert code == 1 and entry["data"] == {"index_url": url, "variant": "fat"}
    assert checks["causal-conv1d installed from the index"]["status"] == PASSED  # its name as the wheel spells it
    assert checks["nothing else installed"]["detail"] == "pip installed ['causal-conv1d', 'einops']"


def test_compile_profile_from_a_real_nvcc_time_file_of_the_fat_gencodes() -> None:
    """tests/unit/data/nvcc/fat-time.csv: nvcc 13.0 `--time` of a one-kernel unit with the fat wheel's gencodes
    (sm_80, sm_90, sm_100 and compute_100 PTX, --threads 3), captured on the CPU machine."""
    from builder.steps.nvcc_time import read_times

    times = read_times(ROOT / "tests" / "unit" / "data" / "nvcc" / "fat-time.csv")
    assert {row["arch"] for row in times} == {"host", "8.0", "9.0", "10.0"}  # the PTX counts with its arch
    by_arch = {row["arch"]: row["seconds"] for row in times}
    profile = archs.compile_profile(times, wall=None, cores=16)
    assert profile["critical_path_s"] == round(by_arch["host"] + max(by_arch[a] for a in ("8.0", "9.0", "10.0")), 1)
    assert profile["sum_s"] == round(sum(by_arch.values()), 1) and profile["wall_over_bound"] is None
