"""The GPU acceptance scripts for real on a machine without a GPU: the wrappers' usage and arguments, the carry
filled, the whole run ending at its preflight with every stage skipped for the reason, each tests/gpu module skipped
with the reason under pytest (also next to a real torch that sees no device), causal-conv1d's suite runner on a
test file taken from an sdist, and mamba-ssm's cases end to end on the CPU against the packages' references."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from builder.steps.environment import RuntimeEnv
from scripts.gpu.data import Expected, load_acceptance
from tests.gpu import suite
from tests.gpu.report import Recorded
from tests.gpu.test_upstream import check_suite

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
DATA = load_acceptance()
GPU_MODULES = ("test_machine.py", "test_doctor.py", "test_checklist.py", "test_upstream.py", "test_mamba.py",
               "test_bench.py", "test_arch.py", "test_ptx_speed.py")


def run(command: list[str | Path], *, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(map(str, command)), cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True,
                          text=True, timeout=timeout, check=False)


# -- the wrappers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("script", "usage"), [("gpu_acceptance.sh", "usage: scripts/gpu_acceptance.sh OUTDIR"),
                                               ("gpu_build_proof.sh", "    scripts/gpu_build_proof.sh OUTDIR"),
                                               ("prepare_gpu_carry.sh", "usage: scripts/prepare_gpu_carry.sh")])
def test_scripts_parse_and_print_their_usage(script: str, usage: str) -> None:
    assert run(["bash", "-n", SCRIPTS / script]).returncode == 0
    done = run(["bash", SCRIPTS / script, "--help"], env={"PYTHON": sys.executable})
    assert done.returncode == 0 and done.stdout.startswith(usage), done.stdout + done.stderr


def test_without_wheelwrights_dependencies_the_run_says_to_fill_the_carry(tmp_path: Path) -> None:
    """The machine's python3 lacks pydantic and friends until the carry is installed: one ERROR line, no traceback."""
    bare = tmp_path / "bare"
    assert run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", bare]).returncode == 0
    done = run(["bash", SCRIPTS / "gpu_acceptance.sh", tmp_path / "out", "--carry", tmp_path / "carry"],
               env={"PYTHON": str(bare / "bin" / "python")})
    assert done.returncode == 1 and done.stderr.startswith("ERROR wheelwright's dependencies do not import with")
    assert "bash scripts/prepare_gpu_carry.sh" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_argument_is_one_error_line_and_exit_2() -> None:
    done = run(["bash", SCRIPTS / "gpu_acceptance.sh", "out", "--workers", "0", "--carry", "/nonexistent"],
               env={"PYTHON": sys.executable})
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "ERROR --workers wants a positive number, not '0'", "(scripts/gpu_acceptance.sh --help shows the usage)"]


@pytest.mark.parametrize(("args", "message"), [(["--carry"], "--carry needs a folder"),
                                               (["--python", "/nonexistent/python"], "/nonexistent/python is not"),
                                               (["extra"], "unknown argument: extra")])
def test_carry_script_refuses_bad_arguments(args: list[str], message: str) -> None:
    done = run(["bash", SCRIPTS / "prepare_gpu_carry.sh", *args])
    assert done.returncode == 2 and f"ERROR {message}" in done.stderr


def test_carry_script_fills_the_carry_with_the_dev_venvs_symlinked_interpreter(tmp_path: Path) -> None:
    """`--python .venv/bin/python` is a symlink to the base interpreter; followed, the venv's packages are gone."""
    python = Path(sys.prefix) / "bin" / "python"
    assert python.is_symlink() and Path(sys.prefix) != Path(sys.base_prefix)
    carry = tmp_path / "carry"
    done = run(["bash", SCRIPTS / "prepare_gpu_carry.sh", "--python", python, "--carry", carry], timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"carry: {carry} holds" in done.stdout
    assert any((carry / "build-wheels").glob("setuptools-*.whl")) and any((carry / "cache" / "sdists").iterdir())


# -- without a GPU ----------------------------------------------------------------------------------------------


def _skipped_for_no_device(summary: dict[str, object]) -> str:
    stages = summary["stages"]
    assert isinstance(stages, dict) and set(stages) == set(DATA.stages)
    reasons = {entry["detail"] for entry in stages.values()}
    assert {entry["status"] for entry in stages.values()} == {"skipped"} and len(reasons) == 1
    reason = reasons.pop()
    assert reason.startswith("no CUDA device (")
    return str(reason)


def test_the_run_without_a_gpu_skips_every_stage_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run(["bash", SCRIPTS / "gpu_acceptance.sh", out, "--work", tmp_path / "work", "--carry", tmp_path / "carry"],
               env={"PYTHON": sys.executable})
    assert done.returncode == 3, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    _skipped_for_no_device(summary)
    assert (summary["outcome"], summary["acceptance"]) == ("no-gpu", False)
    log = (out / "acceptance.log").read_text()
    assert "outcome: no-gpu; acceptance: no" in log and log == done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["acceptance.log", "details.tar.gz", "summary.json"]
    with tarfile.open(out / "details.tar.gz") as details:  # the preflight's report: the machine's facts
        assert details.getnames() == ["reports", "reports/preflight.json"]


@pytest.mark.parametrize("module", GPU_MODULES)
def test_each_gpu_test_is_skipped_with_the_reason_without_a_device(tmp_path: Path, module: str) -> None:
    report = tmp_path / "report.json"
    done = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"tests/gpu/{module}", "--report",
                report])
    assert done.returncode == 0, done.stdout + done.stderr
    tests = json.loads(report.read_text())["tests"]
    assert tests and {t["status"] for t in tests} == {"skipped"}, tests
    assert all(t["detail"].startswith("no CUDA device (torch cannot be imported") for t in tests)


def test_the_install_tests_need_what_the_stage_gives(tmp_path: Path) -> None:
    done = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/gpu/test_install.py",
                "--report", tmp_path / "report.json"])
    tests = json.loads((tmp_path / "report.json").read_text())["tests"]
    given = "--pip-report not given (scripts/gpu/acceptance.py gives it)"
    assert done.returncode == 0 and {t["detail"] for t in tests} == {given}


@pytest.mark.slow
def test_with_a_real_torch_the_reason_is_that_torch_sees_no_device(tmp_path: Path, torch_runtime: RuntimeEnv) -> None:
    out = tmp_path / "out"
    done = run(["bash", SCRIPTS / "gpu_acceptance.sh", out, "--work", tmp_path / "work", "--carry", tmp_path / "carry"],
               env={"PYTHON": sys.executable, "PYTHONPATH": str(torch_runtime.site_packages)})
    assert done.returncode == 3, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    reason = _skipped_for_no_device(summary)
    assert "torch 2.14.1" in reason and "torch.cuda.is_available() is False" in reason
    assert summary["environment"]["torch"].startswith("2.14.1")


# -- causal-conv1d's suite runner -------------------------------------------------------------------------------


def _sdist_with_tests(path: Path, tests: str) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {"pkg-1.0/pkg/__init__.py": "", "pkg-1.0/tests/test_pkg.py": tests}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return path


def test_the_suite_runs_pytest_from_the_sdists_tests_and_counts(tmp_path: Path) -> None:
    tests = "import pytest\n\ndef test_a(): pass\n\ndef test_b(): pass\n\ndef test_c(): pytest.skip('no GPU')\n"
    root = suite.unpack_tests(_sdist_with_tests(tmp_path / "pkg-1.0.tar.gz", tests), "tests/test_pkg.py",
                              tmp_path / "u")
    log = tmp_path / "pytest.log"
    ran = suite.run_suite(sys.executable, root, "tests/test_pkg.py", workers=1, select=None, timeout=120, log=log)
    assert ran.returncode == 0 and suite.parse_counts(log.read_text()) == {"passed": 2, "skipped": 1}
    data = DATA.model_copy(update={"upstream": DATA.upstream.model_copy(update={"expected": {
        "1.0": Expected(passed=2, skipped=1)}})})
    check_suite(ran, data, "1.0", quick=False, imported="/v/site-packages/pkg/__init__.py", record=Recorded())
    selected = suite.run_suite(sys.executable, root, "tests/test_pkg.py", workers=1, select="test_a", timeout=120,
                               log=log)
    assert suite.parse_counts(selected.output_tail) == {"passed": 1, "deselected": 2}


def test_the_suite_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    root = suite.unpack_tests(_sdist_with_tests(tmp_path / "pkg-1.0.tar.gz", "import time\n\ndef test_slow(): "
                                                "time.sleep(600)\n"), "tests/test_pkg.py", tmp_path / "u")
    ran = suite.run_suite(sys.executable, root, "tests/test_pkg.py", workers=1, select=None, timeout=3,
                          log=tmp_path / "log")
    assert ran.returncode is None and ran.seconds < 30


# -- mamba-ssm's cases on the CPU, against the real reference implementations -----------------------------------


@pytest.mark.slow
def test_mamba_cases_run_end_to_end_with_the_references(
    tmp_path: Path, torch_runtime: RuntimeEnv, reference_sources: dict[str, Path]
) -> None:
    out = tmp_path / "checks.json"
    done = run([sys.executable, Path(__file__).parent / "acceptance_cpu_harness.py", reference_sources["mamba-ssm"],
                reference_sources["causal-conv1d"], out],
               env={"PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"}, timeout=600)
    assert done.returncode == 0, done.stderr
    cases = json.loads(out.read_text())
    assert all(c["ok"] for comparisons in cases.values() for c in comparisons), cases
    # every input's gradient was compared, in every dtype, with complex A where upstream tests it
    scan = next(comparisons for name, comparisons in cases.items() if name.startswith("selective_scan_fn bfloat16"))
    assert [c["tensor"] for c in scan] == ["out", "last_state", "du", "ddelta", "dA", "dB", "dC", "dD", "dz",
                                           "ddelta_bias"]
    fixed = cases["mamba_inner_fn float16 seqlen=17 B,C fixed"]
    assert {"dxz", "dB", "dC", "dx_proj_weight", "dout_proj_weight"} <= {c["tensor"] for c in fixed}
    assert any("complex A" in name for name in cases)


@pytest.mark.slow
def test_comparison_fails_past_the_tolerance_in_the_kernels_dtype(torch_runtime: RuntimeEnv) -> None:
    code = """
import json, torch
from scripts.gpu.data import Tolerance
from tests.gpu.numerics import compare, verdict
tol = Tolerance(rtol=3e-3, atol=5e-3)
ref = torch.linspace(-4, 4, 101)
half = compare("du", ref.half(), ref, tol)                       # rounding to fp16 only: within
off = compare("du", (ref + 0.05).half(), ref, tol)               # 0.05 off everywhere: out
cplx = compare("dA", torch.complex(ref, ref) * (1 + 1e-2), torch.complex(ref, ref), tol)
nan = compare("out", torch.full((3,), float("nan")), torch.zeros(3), tol)
print(json.dumps([half.ok, off.ok, off.worst > 1, cplx.ok, nan.ok, len(verdict([half, off])[0])]))
"""
    done = run([sys.executable, "-c", code], env={"PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, False, True, False, False, 1]
