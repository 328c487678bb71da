"""The GPU acceptance run's parts that need no GPU: the gpu-box profile, what the carry holds, the summary and its
verdict, the tolerances per tensor, pytest's counts, pip's report, and the command line's answers without a GPU."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from builder.plan.expand import load_plan
from scripts import gpu_acceptance, gpu_carry
from scripts.acceptance import bench, numerics, upstream
from scripts.acceptance import summary as record
from scripts.acceptance.config import DTYPES, ConfigError, Expected, Tolerance, load_config
from scripts.acceptance.doctor import doctor_checks, planned_checks
from scripts.acceptance.installed import install_checks
from scripts.acceptance.summary import FAILED, PASSED, SKIPPED, Check

ROOT = Path(__file__).resolve().parents[2]

CONFIG = load_config()
BOX = gpu_carry.load_box()


# -- the profile ------------------------------------------------------------------------------------------------


def test_gpu_box_profile_plans_both_packages_for_the_boxs_torch() -> None:
    plan = load_plan(ROOT / "matrix.yaml", "gpu-box")
    assert len(plan.jobs) == 2
    assert {job.package for job in plan.jobs} == set(CONFIG.packages)
    for job in plan.jobs:
        assert (job.torch, job.accelerator.name, job.python_tag, job.archs) == ("2.11.0", "cu130", "cp312", ("9.0",))
        assert job.label == CONFIG.label == "pt211cu130"
        assert job.python == BOX.python
    assert BOX.profile == plan.profile == "gpu-box"


# -- the carry --------------------------------------------------------------------------------------------------


def _applicable(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate(BOX.marker_environment())


def test_carry_covers_every_wheelwright_dependency_the_box_lacks() -> None:
    requirements = gpu_carry.project_requirements()
    carried = gpu_carry.carry_closure(requirements, present=BOX.packages, environment=BOX.marker_environment())
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if not _applicable(requirement):
            assert name not in carried, f"{requirement} does not apply on Python {BOX.python} but is carried"
        elif name in BOX.packages:
            assert name not in carried, f"{name} is on the box and must not be shadowed"
        else:
            assert carried.get(name) == gpu_carry.pinned(requirement), f"{requirement} must travel at its pin"
    # closed under dependencies: whatever a carried package needs is carried too, or on the box
    for name in carried:
        for line in gpu_carry.installed_requires(name):
            needed = Requirement(line)
            if _applicable(needed):
                assert canonicalize_name(needed.name) in carried or canonicalize_name(needed.name) in BOX.packages, (
                    name,
                    line,
                )


def test_carry_includes_what_pydantic_needs_and_not_what_the_box_has() -> None:
    carried = gpu_carry.carry_closure(
        gpu_carry.project_requirements(), present=BOX.packages, environment=BOX.marker_environment()
    )
    assert {"pydantic", "pydantic-core", "auditwheel", "pyelftools", "boto3", "botocore"} <= set(carried)
    assert not {"rich", "jinja2", "pyyaml", "packaging", "tomli", "typing-extensions"} & set(carried)


def _closure(lines: list[str], *, present=(), installed=None, requires=None) -> dict[str, str]:
    installed = installed or {}
    requires = requires or {}
    return gpu_carry.carry_closure(
        [Requirement(line) for line in lines],
        present=frozenset(present),
        environment=BOX.marker_environment(),
        version_of=installed.get,
        requires_of=lambda name: requires.get(name, []),
    )


def test_closure_follows_requirements_skips_markers_extras_and_the_box() -> None:
    carried = _closure(
        ["alpha==1.0", "old-python-only==2.0; python_version < '3.11'", "onbox==3.0"],
        present={"onbox"},
        installed={"alpha": "1.0", "beta": "2.5", "gamma": "0.1", "onbox": "3.0"},
        requires={"alpha": ["beta>=2", "gamma; extra == 'docs'", "onbox"], "beta": ["alpha"]},
    )
    assert carried == {"alpha": "1.0", "beta": "2.5"}


def test_closure_refuses_what_it_cannot_version() -> None:
    with pytest.raises(gpu_carry.CarryError, match="beta>=2 is needed on the box but not pinned"):
        _closure(["alpha==1.0"], installed={"alpha": "1.0"}, requires={"alpha": ["beta>=2"]})
    with pytest.raises(gpu_carry.CarryError, match="pinned, but this interpreter has alpha 0.9"):
        _closure(["alpha==1.0"], installed={"alpha": "0.9"})
    with pytest.raises(gpu_carry.CarryError, match="does not satisfy beta<2"):
        _closure(["alpha==1.0"], installed={"alpha": "1.0", "beta": "2.5"}, requires={"alpha": ["beta<2"]})


def test_unmet_lists_missing_and_other_versions() -> None:
    missing, other = gpu_carry.unmet(
        [Requirement("alpha==1.0"), Requirement("zeta; python_version < '3'")],
        environment=BOX.marker_environment(),
        version_of={"alpha": "1.1", "beta": "2.0"}.get,
        requires_of=lambda name: {"alpha": ["beta>=3", "gamma"]}.get(name, []),
    )
    assert missing == ["gamma"]
    assert other == ["alpha==1.0 (found alpha 1.1)", "beta>=3 (found beta 2.0)"]


def test_build_requirements_are_the_builders_exact_pins(tmp_path: Path) -> None:
    pins = gpu_carry.build_requirements()
    text = (ROOT / "builder" / "data" / "build-requirements.txt").read_text()
    assert pins and all(f"{name}=={version}" in text.lower() for name, version in pins.items())
    loose = tmp_path / "reqs.txt"
    loose.write_text("# tools\nsetuptools>=70\n")
    with pytest.raises(gpu_carry.CarryError, match="reqs.txt:2: 'setuptools>=70' is not an exact == pin"):
        gpu_carry.build_requirements(loose)


def test_missing_wheels_names_absent_duplicate_and_unwanted(tmp_path: Path) -> None:
    for name in (
        "alpha-1.0-py3-none-any.whl",
        "beta-1.0-py3-none-any.whl",
        "beta-2.0-py3-none-any.whl",
        "junk-0.1-py3-none-any.whl",
    ):
        (tmp_path / name).write_bytes(b"")
    problems = gpu_carry.missing_wheels(tmp_path, {"alpha": "1.0", "beta": "2.0", "gamma": "3.0"})
    assert problems == [
        f"{tmp_path}: want beta==2.0, found 1.0, 2.0",
        f"{tmp_path}: want gamma==3.0, found nothing",
        f"{tmp_path}: junk 0.1 is not wanted",
    ]
    assert gpu_carry.missing_wheels(tmp_path / "absent", {"alpha": "1.0"}) == [
        f"{tmp_path / 'absent'}: want alpha==1.0, found nothing"
    ]


def test_box_facts_are_checked_when_loaded(tmp_path: Path) -> None:
    text = (ROOT / "scripts" / "data" / "gpu_box.toml").read_text()
    twice = tmp_path / "twice.toml"
    twice.write_text(text.replace('"absl-py",', '"absl-py", "Absl_Py",'))
    with pytest.raises(gpu_carry.CarryError, match="names a package twice"):
        gpu_carry.load_box(twice)
    wrong = tmp_path / "wrong.toml"
    wrong.write_text(text.replace('python_full = "3.12.3"', 'python_full = "3.11.9"'))
    with pytest.raises(gpu_carry.CarryError, match="is not a 3.12 release"):
        gpu_carry.load_box(wrong)


def test_check_reports_an_incomplete_carry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_carry.main(["check", "--carry", str(tmp_path), "--tree-bytes", "1000"]) == gpu_carry.EXIT_CARRY_ERROR
    err = capsys.readouterr().err
    assert "want pydantic==" in err and "want setuptools==" in err
    assert "causal_conv1d-1.7.0.tar.gz: missing" in err and "mamba_ssm-2.3.2.post1.tar.gz: missing" in err


def test_check_refuses_a_carry_over_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu_carry.main(["check", "--carry", str(tmp_path), "--tree-bytes", str(BOX.limit_mib * 2**20 + 1)])
    assert f"over the {BOX.limit_mib} MiB limit" in capsys.readouterr().err


# -- the checks' data -------------------------------------------------------------------------------------------


def test_config_is_complete() -> None:
    assert set(CONFIG.tolerance) == {*DTYPES, "weight"}
    assert CONFIG.stage("upstream").packages == ("causal-conv1d",) and CONFIG.stage("install").packages == ()
    assert CONFIG.upstream.expected["1.7.0"] == Expected(passed=9485, skipped=3888)
    assert CONFIG.stages[0] == "preflight" and CONFIG.stages[-1] == "ptx_speed"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("bfloat16 = { rtol = 3e-2, atol = 5e-2 }", ""), "'bfloat16' is not one of"),
        (("groups = [1, 2]", "groups = [1, 3]"), "dim must divide"),
        (('"ptx_speed"]', '"ptx_speed", "bench"]'), "stages names a stage twice"),
        (('doctor = "ptx-jit"', 'doctor = "jit"'), "arch.variants.ptx.doctor 'jit' is not one of"),
        (('stage = "arch_sm80"', 'stage = "arch_sm90"'), "arch.variants.sm80.stage 'arch_sm90' is not in"),
        (('module_loading = "LAZY"', 'module_loading = "lazy"'), "module_loading must be one of"),
        (('label = "pt211cu130"', ""), "missing key 'label'"),
        (("seqlen = 8192", "seqlen = 0"), "needs positive integer sizes"),
        (('upstream = ["causal-conv1d"]', 'upstream = ["causal_conv1d"]'), "names packages not in `packages`"),
        (('bench = ["causal-conv1d", "mamba-ssm"]', 'bnech = ["mamba-ssm"]'), "not in `stages`: bnech"),
    ],
)
def test_config_errors_name_the_problem(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = (ROOT / "scripts" / "data" / "gpu_acceptance.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "acceptance.toml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


# -- mamba-ssm's tolerances and cases ---------------------------------------------------------------------------


def test_outputs_get_upstreams_elementwise_pairs_and_gradients_a_normwise_bound() -> None:
    assert numerics.output_tolerance("float16", CONFIG.tolerance) == Tolerance(rtol=3e-3, atol=5e-3)
    assert numerics.output_tolerance("bfloat16", CONFIG.tolerance) == Tolerance(rtol=3e-2, atol=5e-2)
    assert CONFIG.gradient_error["float32"] < CONFIG.gradient_error["float16"] < CONFIG.gradient_error["bfloat16"]


def test_cases_cover_every_dtype_and_complex_only_where_upstream_tests_it() -> None:
    scans, inners = numerics.scan_cases(CONFIG.scan), numerics.inner_cases(CONFIG.inner)
    assert len(scans) == len(CONFIG.scan.dtypes) * len(CONFIG.scan.seqlens) * len(CONFIG.scan.groups)
    assert {case.dtype for case in scans} == {case.dtype for case in inners} == set(DTYPES)
    assert {case.dtype for case in inners if case.complex_a} == {"float32"}
    assert len({case.name for case in scans + inners}) == len(scans) + len(inners)


# -- the summary ------------------------------------------------------------------------------------------------


def _record_all(path: Path, status: str = PASSED) -> None:
    for stage in CONFIG.stages:
        record.record_stage(path, stage, status=status, seconds=1.0)


def test_summary_keeps_each_stage_and_the_pythons_result_over_the_shells(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    checks = [Check(name="a", status=PASSED), Check(name="b", status=FAILED, detail="off by 2")]
    record.record_stage(path, "mamba", status=FAILED, seconds=3.0, checks=checks)
    record.record_stage(path, "mamba", status=PASSED, seconds=7.5, detail="exit 0", keep_result=True)
    record.record_stage(path, "seed", status=FAILED, seconds=1.0, detail="exit 1", keep_result=True)
    stages = json.loads(path.read_text())["stages"]
    assert stages["mamba"]["status"] == FAILED and stages["mamba"]["seconds"] == 7.5
    assert stages["mamba"]["checks"][1] == {"name": "b", "status": FAILED, "detail": "off by 2"}
    assert stages["seed"] == {"status": FAILED, "detail": "exit 1", "seconds": 1.0}


def test_verdict(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    _record_all(path)
    assert record.verdict(record.load(path), CONFIG.stages) == (PASSED, True)
    record.update(path, mode="quick")
    assert record.verdict(record.load(path), CONFIG.stages) == (PASSED, False)
    record.update(path, mode="full")
    record.record_stage(path, "build", status=record.REUSED)
    assert record.verdict(record.load(path), CONFIG.stages) == (PASSED, False)
    record.record_stage(path, "bench", status=SKIPPED, detail="skipped: 10s left")
    assert record.verdict(record.load(path), CONFIG.stages) == ("incomplete", False)
    record.record_stage(path, "mamba", status=FAILED)
    assert record.verdict(record.load(path), CONFIG.stages) == (FAILED, False)


def test_no_gpu_verdict_and_skip_rest(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    record.record_stage(
        path, "preflight", status=SKIPPED, detail="no CUDA device (none here)", data={"cuda_available": False}
    )
    record.skip_remaining(path, CONFIG.stages, "no CUDA device (none here)")
    summary = record.load(path)
    assert {entry["status"] for entry in summary["stages"].values()} == {SKIPPED}
    assert record.verdict(summary, CONFIG.stages) == ("no-gpu", False)


def test_status_of_and_guarded() -> None:
    assert record.status_of([Check(name="a", status=PASSED), Check(name="b", status=SKIPPED)]) == PASSED
    assert record.status_of([Check(name="a", status=SKIPPED)]) == SKIPPED
    assert record.status_of([Check(name="a", status=PASSED), Check(name="b", status=FAILED)]) == FAILED

    def no_kernel() -> Check:
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device\nmore")

    check = record.guarded("selective scan", no_kernel)
    assert (check.status, check.detail) == (
        FAILED,
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    )


def test_render_shows_failed_checks_and_the_outcome(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    _record_all(path)
    record.record_stage(path, "upstream", status=FAILED, checks=[Check(name="suite", status=FAILED, detail="3 failed")])
    summary = record.finish(path, CONFIG.stages)
    text = "\n".join(record.render(summary, CONFIG.stages))
    assert "FAILED suite: 3 failed" in text and "outcome: failed; acceptance: no" in text


# -- causal-conv1d's suite --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "counts"),
    [
        (
            "16 workers [13373 items]\n....\n9485 passed, 3888 skipped, 2 warnings in 97.31s (0:01:37)\n",
            {"passed": 9485, "skipped": 3888, "warnings": 2},
        ),
        ("===== 1 failed, 5 passed, 1 error in 0.52s =====", {"failed": 1, "passed": 5, "errors": 1}),
        ("no tests ran in 0.01s", None),
        ("collected 5 items / 1 error\n1 error in 0.3s", {"errors": 1}),
        ("3 passed\n", None),
    ],
)
def test_parse_counts(output: str, counts: dict | None) -> None:
    assert upstream.parse_counts(output) == counts


def test_judge_compares_with_upstreams_counts() -> None:
    expected = Expected(passed=9485, skipped=3888)
    assert upstream.judge({"passed": 9485, "skipped": 3888, "warnings": 4}, expected, quick=False)[0] == PASSED
    status, detail = upstream.judge({"passed": 9484, "skipped": 3889}, expected, quick=False)
    assert status == FAILED and "DIFFERS from upstream: 9485 passed, 3888 skipped" in detail
    assert upstream.judge({"passed": 9484, "skipped": 3888, "failed": 1}, expected, quick=False)[0] == FAILED
    assert upstream.judge({"passed": 12}, expected, quick=True) == (
        PASSED,
        "12 passed (--quick subset; counts not compared)",
    )
    assert upstream.judge({"passed": 9485, "skipped": 3888}, None, quick=False)[0] == FAILED
    assert upstream.judge(None, expected, quick=False) == (FAILED, "pytest printed no summary line")


def _tarball(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_unpack_tests_leaves_the_package_source_behind(tmp_path: Path) -> None:
    sdist = _tarball(
        tmp_path / "causal_conv1d-1.7.0.tar.gz",
        {
            "causal_conv1d-1.7.0/causal_conv1d/__init__.py": b"",
            "causal_conv1d-1.7.0/tests/test_causal_conv1d.py": b"def test_x(): pass\n",
            "causal_conv1d-1.7.0/setup.py": b"",
        },
    )
    root = upstream.unpack_tests(sdist, "tests/test_causal_conv1d.py", tmp_path / "out")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "pytest.ini",
        "tests/test_causal_conv1d.py",
    ]
    with pytest.raises(FileNotFoundError, match="has no tests/test_other.py"):
        upstream.unpack_tests(sdist, "tests/test_other.py", tmp_path / "again")


def test_sdist_filename_is_the_fetch_caches() -> None:
    assert upstream.sdist_filename("causal-conv1d", "1.7.0") == "causal_conv1d-1.7.0.tar.gz"
    jobs = {job.package: job for job in load_plan(ROOT / "matrix.yaml", "gpu-box").jobs}
    assert (
        upstream.sdist_filename("causal-conv1d", jobs["causal-conv1d"].version) == jobs["causal-conv1d"].sdist.filename
    )


def test_suite_check_fails_when_the_tests_saw_the_source_not_the_wheel() -> None:
    run = upstream.SuiteRun(
        command=["pytest"], returncode=0, seconds=1.0, output_tail="9485 passed, 3888 skipped in 9.0s"
    )
    expected = Expected(passed=9485, skipped=3888)
    good = upstream.suite_check(
        run, expected, quick=False, imported="/w/venv/lib/python3.12/site-packages/causal_conv1d/__init__.py"
    )
    bad = upstream.suite_check(
        run, expected, quick=False, imported="/tmp/x/causal_conv1d-1.7.0/causal_conv1d/__init__.py"
    )
    assert good.status == PASSED and bad.status == FAILED and "not an installed wheel" in bad.detail
    stopped = upstream.suite_check(
        upstream.SuiteRun(command=[], returncode=None, seconds=300.0, output_tail=""),
        expected,
        quick=False,
        imported=good.data["imported_from"],
    )
    assert stopped.status == FAILED and "time limit" in stopped.detail


# -- what pip installed -----------------------------------------------------------------------------------------


def _pip_report(dist: Path, url: str, *, version: str = "1.7.0+pt211cu130", sha: str | None = None) -> dict:
    wheel = dist / "causal_conv1d-1.7.0+pt211cu130-cp312-cp312-linux_x86_64.whl"
    digest = sha or hashlib.sha256(wheel.read_bytes()).hexdigest()
    return {
        "install": [
            {
                "metadata": {"name": "causal-conv1d", "version": version},
                "download_info": {
                    "url": f"{url}/whl/pt211cu130/causal_conv1d-1.7.0%2Bpt211cu130-cp312-cp312-linux_x86_64.whl",
                    "archive_info": {"hashes": {"sha256": digest}},
                },
            }
        ]
    }


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({}, None),
        ({"version": "1.7.0"}, "lacks the label +pt211cu130"),
        ({"url": "https://elsewhere.example"}, "not from http://127.0.0.1:8123"),
        ({"sha": "0" * 64}, "differs from the file in"),
    ],
)
def test_install_checks(tmp_path: Path, change: dict, problem: str | None) -> None:
    (tmp_path / "causal_conv1d-1.7.0+pt211cu130-cp312-cp312-linux_x86_64.whl").write_bytes(b"wheel bytes")
    url = change.pop("url", "http://127.0.0.1:8123")
    report = _pip_report(tmp_path, url, **change)
    conv, mamba = install_checks(
        report, packages=CONFIG.packages, label=CONFIG.label, index_url="http://127.0.0.1:8123", dist=tmp_path
    )
    assert (mamba.status, mamba.detail) == (FAILED, "pip's report does not list it as installed")
    if problem is None:
        assert conv.status == PASSED and conv.data["wheel"].startswith("causal_conv1d-1.7.0+pt211cu130")
    else:
        assert conv.status == FAILED and problem in conv.detail


# -- what doctor says ------------------------------------------------------------------------------------------

DOCTOR_FIXTURE = ROOT / "tests" / "unit" / "data" / "doctor" / "gpu-h200-by-hand.json"


def _doctor_report() -> dict:
    return json.loads(DOCTOR_FIXTURE.read_text())


def test_doctor_checks_pass_on_the_h200_report() -> None:
    report = _doctor_report()
    checks = doctor_checks(report, _doctor_report(), packages=CONFIG.packages, label=CONFIG.label, arch=CONFIG.gpu_arch)
    assert [c.name for c in checks] == planned_checks(CONFIG.packages, CONFIG.gpu_arch)
    assert [c.status for c in checks] == [PASSED] * 4, [c.detail for c in checks]
    assert checks[0].detail.startswith("NVIDIA H200 sm_90 via nvidia-smi, driver 580.")


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
def test_doctor_checks_fail_with_the_reason(edit, failed: int, problem: str) -> None:
    report = _doctor_report()
    edit(report)
    checks = doctor_checks(report, report, packages=CONFIG.packages, label=CONFIG.label, arch=CONFIG.gpu_arch)
    assert checks[failed].status == FAILED and problem in checks[failed].detail
    assert [c.status for i, c in enumerate(checks) if i != failed] == [PASSED] * 3


def test_doctor_checks_compare_the_two_reports() -> None:
    other = _doctor_report()
    other["diagnoses"][0]["verdicts"][0]["message"] = "something else"
    checks = doctor_checks(_doctor_report(), other, packages=CONFIG.packages, label=CONFIG.label, arch="9.0")
    assert checks[-1].status == FAILED and "!=" in checks[-1].detail
    missing = doctor_checks(_doctor_report(), None, packages=CONFIG.packages, label=CONFIG.label, arch="9.0")
    assert missing[-1].detail == "`wheelwright doctor --json` gave no report"


# -- benchmarks -------------------------------------------------------------------------------------------------


def test_fast_calls_are_looped_within_a_sample() -> None:
    assert bench.calls_per_sample(0.05, 2.0) == 40
    assert bench.calls_per_sample(30.0, 2.0) == 1


def test_speedup_needs_agreeing_outputs() -> None:
    kernel = bench.Timing(median_ms=0.5, min_ms=0.4, samples=15, calls_per_sample=4)
    reference = bench.Timing(median_ms=6.0, min_ms=5.9, samples=15, calls_per_sample=1)
    size = {"batch": 4, "dim": 2048, "seqlen": 2048, "width": 4, "dtype": "bfloat16"}
    check = bench.speedup_check(bench.conv_name(size), kernel, reference, (True, 0.01), size)
    assert check.status == PASSED and check.data["speedup"] == 12.0 and "speedup 12.0x" in check.detail
    assert bench.speedup_check("x", kernel, reference, (False, 3.0), size).status == FAILED


# -- the command line -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["seed", "checklist", "mamba", "bench"])
def test_gpu_subcommands_skip_every_check_without_a_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setattr(gpu_acceptance, "unavailable_reason", lambda: "no CUDA device (none here)")
    summary = tmp_path / "summary.json"
    assert gpu_acceptance.main(["--summary", str(summary), command]) == gpu_acceptance.EXIT_NO_GPU
    stage = json.loads(summary.read_text())["stages"][command]
    assert stage["status"] == SKIPPED and stage["detail"] == "no CUDA device (none here)"
    assert stage["checks"] and all(
        c["status"] == SKIPPED and c["detail"] == "no CUDA device (none here)" for c in stage["checks"]
    )


def test_cli_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        gpu_acceptance.main(
            ["--summary", str(tmp_path / "s.json"), "upstream", "--sdist-dir", "x", "--log", "l", "--workers", "0"]
        )
    assert exit_.value.code == gpu_acceptance.EXIT_USAGE and "0 is not a positive number" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        gpu_acceptance.main(["seed"])
    assert exit_.value.code == gpu_acceptance.EXIT_USAGE and "--summary" in capsys.readouterr().err
    assert (
        gpu_acceptance.main(["--summary", str(tmp_path / "s.json"), "--config", str(tmp_path / "none.toml"), "finish"])
        == gpu_acceptance.EXIT_USAGE
    )


def test_finish_exit_codes(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    _record_all(summary)
    assert gpu_acceptance.main(["--summary", str(summary), "finish"]) == gpu_acceptance.EXIT_PASSED
    gpu_acceptance.main(
        ["--summary", str(summary), "record", "--stage", "checklist", "--status", "failed", "--detail", "shape"]
    )
    assert gpu_acceptance.main(["--summary", str(summary), "finish"]) == gpu_acceptance.EXIT_FAILED


def _ledger_entry(job_id: str, label: str, status: str, wheel: str | None = None):
    from builder.core.ledger import LedgerEntry

    return LedgerEntry(
        job_id=job_id,
        package=job_id.split("-1")[0],
        version="1",
        label=label,
        torch="2.11.0",
        accelerator="cu130",
        python="3.12",
        input_hash="h",
        status=status,
        phase="install" if wheel else "compile",
        timings={"compile": 300.0},
        wheel=wheel,
        reason=None if wheel else "nvcc failed",
    )


def test_build_report_reads_the_ledger_of_the_label(tmp_path: Path) -> None:
    from builder.core.ledger import Ledger

    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "a.whl").write_bytes(b"")
    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(_ledger_entry("causal-conv1d-1.7.0+pt211cu130", "pt211cu130", "built", "a.whl"))
        ledger.put(_ledger_entry("causal-conv1d-1.7.0+pt214cu130", "pt214cu130", "failed"))  # another profile's
    summary = tmp_path / "summary.json"
    args = ["--summary", str(summary), "build-report", "--wheelhouse", str(tmp_path), "--exit-code", "0"]
    assert gpu_acceptance.main(args) == gpu_acceptance.EXIT_PASSED
    stage = json.loads(summary.read_text())["stages"]["build"]
    assert (stage["status"], stage["data"]["wheels"]) == (PASSED, ["a.whl"])
    assert gpu_acceptance.main([*args, "--reused"]) == gpu_acceptance.EXIT_PASSED
    assert json.loads(summary.read_text())["stages"]["build"]["status"] == record.REUSED

    with Ledger(tmp_path / "ledger.sqlite") as ledger:
        ledger.put(_ledger_entry("mamba-ssm-2.3.2+pt211cu130", "pt211cu130", "failed"))
    assert gpu_acceptance.main([*args[:-1], "6"]) == gpu_acceptance.EXIT_FAILED
    stage = json.loads(summary.read_text())["stages"]["build"]
    assert stage["status"] == FAILED and "failed in compile: nvcc failed" in stage["checks"][1]["detail"]


def test_build_report_without_a_ledger_fails(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    assert (
        gpu_acceptance.main(
            ["--summary", str(summary), "build-report", "--wheelhouse", str(tmp_path), "--exit-code", "1"]
        )
        == 1
    )
    assert "no pt211cu130 jobs in" in json.loads(summary.read_text())["stages"]["build"]["checks"][0]["detail"]


# -- a reused wheelhouse with fewer packages (--skip-build of bench_build's full-arch output) ---------------------


def test_lacks_names_the_package_a_stage_needs_and_packages_must_be_the_data_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = str(tmp_path / "summary.json")
    for stage, said in (("mamba", "skipped: mamba-ssm not in /w/ours/out (it holds causal-conv1d)"),
                        ("upstream", ""), ("install", "")):
        assert gpu_acceptance.main(["--summary", summary, "--packages", "causal-conv1d", "lacks", "--stage", stage,
                                    "--wheelhouse", "/w/ours/out"]) == 0
        assert capsys.readouterr().out.strip() == said, stage
    assert gpu_acceptance.main(["--summary", summary, "lacks", "--stage", "mamba"]) == 0  # all packages: none lacks
    assert capsys.readouterr().out == ""
    assert gpu_acceptance.main(["--summary", summary, "--packages", "flash-attn", "lacks", "--stage", "mamba"]) == 2
    assert "ERROR --packages: flash-attn: not among causal-conv1d, mamba-ssm" in capsys.readouterr().err
