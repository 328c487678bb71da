"""The GPU acceptance scripts run for real on a machine without a GPU: their argument handling, the whole box
script ending early with every stage skipped for the reason, the Python part's GPU checks skipped with exit 3 (also
next to a real torch that sees no device), pytest run on a test file taken from an sdist, and mamba-ssm's cases
end to end on the CPU against the packages' real reference implementations."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from builder.plan.expand import load_plan
from builder.plan.facts import load_facts
from builder.steps.environment import RuntimeEnv, runtime_env
from builder.steps.fetch import fetch_sdist, unpack_sdist
from scripts.acceptance import upstream
from scripts.acceptance.config import Expected, load_config
from tests.jobs import local_job

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"

CONFIG = load_config()
NO_GPU_EXIT = 3


def run(command: list[str], *, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout,
        check=False,
    )


# -- the shell scripts' arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["gpu_acceptance.sh", "prepare_gpu_carry.sh"])
def test_scripts_parse_and_print_their_usage(script: str) -> None:
    assert run(["bash", "-n", str(SCRIPTS / script)]).returncode == 0
    done = run(["bash", str(SCRIPTS / script), "--help"])
    assert done.returncode == 0 and done.stdout.startswith(f"usage: scripts/{script}")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "OUTDIR is required"),
        (["out", "--bogus"], "unknown option: --bogus"),
        (["out", "other"], "one OUTDIR only (got 'out' and 'other')"),
        (["out", "--workers", "0"], "--workers wants a positive number, not '0'"),
        (["out", "--workers", "many"], "--workers wants a positive number, not 'many'"),
        (["out", "--port", "70000"], "--port wants 0..65535, not '70000'"),
        (["out", "--deadline", "30"], "--deadline wants seconds >= 60, not '30'"),
        (["out", "--work"], "--work needs a value"),
        (["out", "--skip-build", "/nonexistent"], "--skip-build /nonexistent: no dist/ and ledger.sqlite there"),
        (["out", "--sass-reference", "/nonexistent.whl"], "--sass-reference /nonexistent.whl: no such wheel or folder"),
        (["out", "--variants", "ptx,sm75"],
         "--variants: no arch variant 'sm75' (the data file has fat,ptx,ptx90,sm80)"),
    ],
)
def test_acceptance_script_refuses_bad_arguments(args: list[str], message: str) -> None:
    done = run(["bash", str(SCRIPTS / "gpu_acceptance.sh"), *args])
    assert done.returncode == 2
    assert f"ERROR {message}" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--carry"], "--carry needs a folder"),
        (["--python", "/nonexistent/python"], "/nonexistent/python is not an interpreter"),
        (["extra"], "unknown argument: extra"),
    ],
)
def test_carry_script_refuses_bad_arguments(args: list[str], message: str) -> None:
    done = run(["bash", str(SCRIPTS / "prepare_gpu_carry.sh"), *args])
    assert done.returncode == 2 and f"ERROR {message}" in done.stderr


def test_carry_script_fills_the_carry_with_the_dev_venvs_symlinked_interpreter(tmp_path: Path) -> None:
    """`--python .venv/bin/python` is a symlink to the base interpreter; followed, the venv's packages are gone."""
    python = Path(sys.prefix) / "bin" / "python"
    assert python.is_symlink() and Path(sys.prefix) != Path(sys.base_prefix)
    carry = tmp_path / "carry"
    done = run(["bash", str(SCRIPTS / "prepare_gpu_carry.sh"), "--python", str(python), "--carry", str(carry)],
               timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"carry: {carry} holds" in done.stdout
    assert any((carry / "build-wheels").glob("setuptools-*.whl")) and any((carry / "cache" / "sdists").iterdir())


# -- without a GPU ----------------------------------------------------------------------------------------------


def _assert_all_skipped_for_no_device(summary: dict, stages: list[str]) -> str:
    reasons = {summary["stages"][stage]["detail"] for stage in stages}
    assert {summary["stages"][stage]["status"] for stage in stages} == {"skipped"}
    assert len(reasons) == 1 and next(iter(reasons)).startswith("no CUDA device (")
    return next(iter(reasons))


def test_box_script_without_a_gpu_skips_every_stage_with_the_reason(tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    done = run(
        ["bash", str(SCRIPTS / "gpu_acceptance.sh"), str(out), "--work", str(work)], env={"PYTHON": sys.executable}
    )
    assert done.returncode == NO_GPU_EXIT, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    _assert_all_skipped_for_no_device(summary, list(CONFIG.stages))
    assert (summary["outcome"], summary["acceptance"]) == ("no-gpu", False)
    log = (out / "acceptance.log").read_text()
    assert "outcome: no-gpu; acceptance: no" in log and log == done.stdout
    assert sorted(p.name for p in out.iterdir()) == ["acceptance.log", "summary.json"]


@pytest.mark.parametrize("command", ["seed", "checklist", "mamba", "bench", "upstream", "doctor"])
def test_python_part_skips_gpu_checks_with_a_distinct_exit(tmp_path: Path, command: str) -> None:
    summary_path = tmp_path / "summary.json"
    extra = {
        "upstream": ["--sdist-dir", str(tmp_path), "--log", str(tmp_path / "pytest.log")],
        "doctor": ["--report", str(tmp_path / "doctor.json"), "--cli-report", str(tmp_path / "doctor-cli.json")],
    }.get(command, [])
    done = run([sys.executable, "-m", "scripts.gpu_acceptance", "--summary", str(summary_path), command, *extra])
    assert done.returncode == NO_GPU_EXIT, done.stderr
    stage = json.loads(summary_path.read_text())["stages"][command]
    assert stage["status"] == "skipped" and stage["detail"].startswith("no CUDA device")
    assert stage["checks"] and all(c["status"] == "skipped" and c["detail"] == stage["detail"] for c in stage["checks"])
    assert f"{command}: skipped (no CUDA device" in done.stdout


@pytest.mark.parametrize(
    ("command", "stage"),
    [(["arch-doctor", "--variant", "sm80"], "arch_sm80"), (["no-kernel", "--variant", "sm80"], "arch_sm80"),
     (["upstream", "--stage", "arch_fat", "--append"], "arch_fat"), (["jit-warm", "--variant", "ptx"], "arch_ptx")],
)
def test_arch_parts_skip_without_a_gpu_into_their_own_stage(tmp_path: Path, command: list[str], stage: str) -> None:
    summary_path = tmp_path / "summary.json"
    extra = {
        "arch-doctor": ["--report", str(tmp_path / "d.json"), "--cli-report", str(tmp_path / "c.json")],
        "upstream": ["--sdist-dir", str(tmp_path), "--log", str(tmp_path / "pytest.log")],
    }.get(command[0], [])
    done = run([sys.executable, "-m", "scripts.gpu_acceptance", "--summary", str(summary_path), *command, *extra])
    assert done.returncode == NO_GPU_EXIT, done.stderr
    stages = json.loads(summary_path.read_text())["stages"]
    assert list(stages) == [stage] and stages[stage]["status"] == "skipped"


def test_arch_builds_start_niced_each_into_its_own_folder_and_build_root(tmp_path: Path) -> None:
    """The real start_arch_build, with `py` (the detached start) only printing what it would start."""
    script = f"""
source "{SCRIPTS / 'gpu_acceptance.sh'}"
py() {{ printf '%s\n' "$@"; }}
say() {{ :; }}
ARCH={tmp_path}/arch ARCH_NICE=10 ARCH_PARALLEL=1 build_limit=1800 WW_SITE=/site ROOT=/repo PY=python3
start_arch_build fat gpu-box-fat
"""
    done = run(["bash", "-c", script])
    assert done.returncode == 0, done.stderr
    argv = done.stdout.splitlines()
    command = argv[argv.index("--") + 1 :]
    assert command[:3] == ["nice", "-n", "10"] and "WHEELWRIGHT_FIXED_ROOT=/tmp/wheelwright-build-fat" in command
    build = command[command.index("builder.cli.main") + 1 :]
    assert build == ["build", "--profile", "gpu-box-fat", "--output", f"{tmp_path}/arch/fat", "--parallel", "1",
                     "--objcache", "off"]
    assert argv[argv.index("--state") + 1] == f"{tmp_path}/arch/fat/build-run"


def test_arch_build_detached_starts_only_the_variants_asked_for_and_does_not_wait(tmp_path: Path) -> None:
    """`--stages arch_build --variants ptx,ptx90 --detach`: the two PTX builds start, and the report (pending while
    they run) is asked about those two only; nothing waits for them."""
    script = f"""
source "{SCRIPTS / 'gpu_acceptance.sh'}"
py() {{ case "$1" in detach-status) echo none ;; *) echo "py $*" ;; esac; }}
say() {{ :; }}
ARCH={tmp_path}/arch ARCH_NICE=10 ARCH_PARALLEL=1 build_limit=1800 WW_SITE=/site ROOT=/repo PY=python3 WH=/wh
ARCH_VARIANTS=fat:gpu-box-fat,ptx:gpu-box-ptx,ptx90:gpu-box-ptx90,sm80:gpu-box-sm80 variants=ptx,ptx90 detach_only=1
select_variants
stage_arch_build
"""
    done = run(["bash", "-c", script])
    assert done.returncode == 0, done.stderr
    calls = [line.split()[1] for line in done.stdout.splitlines()]
    assert calls == ["detach-start", "detach-start", "arch-build-report"], done.stdout
    starts = [line for line in done.stdout.splitlines() if "detach-start" in line]
    assert "--profile gpu-box-ptx --output" in starts[0] and "--profile gpu-box-ptx90 --output" in starts[1]
    assert done.stdout.splitlines()[-1].endswith("--variants ptx,ptx90")


@pytest.fixture(scope="session")
def torch_runtime() -> RuntimeEnv:
    """torch 2.14.1 (a CUDA build) for cp311 in the builder's cached runtime venv, as the verify tests use it: a real
    torch that finds no device here. Its first creation takes minutes, hence the slow mark on its users."""
    return runtime_env(local_job(), load_facts())


@pytest.mark.slow
def test_with_a_real_torch_the_reason_is_that_torch_sees_no_device(tmp_path: Path, torch_runtime: RuntimeEnv) -> None:
    out = tmp_path / "out"
    env = {"PYTHON": sys.executable, "PYTHONPATH": str(torch_runtime.site_packages)}
    done = run(["bash", str(SCRIPTS / "gpu_acceptance.sh"), str(out), "--work", str(tmp_path / "work")], env=env)
    assert done.returncode == NO_GPU_EXIT, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    reason = _assert_all_skipped_for_no_device(summary, list(CONFIG.stages))
    assert "torch 2.14.1" in reason and "torch.cuda.is_available() is False" in reason
    assert summary["environment"]["torch"].startswith("2.14.1")


# -- the upstream suite's runner --------------------------------------------------------------------------------


def _sdist_with_tests(path: Path, tests: str) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in {"pkg-1.0/pkg/__init__.py": "", "pkg-1.0/tests/test_pkg.py": tests}.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            archive.addfile(info, io.BytesIO(text.encode()))
    return path


def test_suite_runs_pytest_from_the_sdists_tests_and_counts(tmp_path: Path) -> None:
    tests = "import pytest\n\ndef test_a(): pass\n\ndef test_b(): pass\n\ndef test_c(): pytest.skip('no GPU')\n"
    root = upstream.unpack_tests(
        _sdist_with_tests(tmp_path / "pkg-1.0.tar.gz", tests), "tests/test_pkg.py", tmp_path / "u"
    )
    log = tmp_path / "pytest.log"
    suite = upstream.run_suite(sys.executable, root, "tests/test_pkg.py", workers=1, select=None, timeout=120, log=log)
    assert suite.returncode == 0 and upstream.parse_counts(log.read_text()) == {"passed": 2, "skipped": 1}
    check = upstream.suite_check(
        suite, Expected(passed=2, skipped=1), quick=False, imported="/v/site-packages/pkg/__init__.py"
    )
    assert check.status == "passed", check.detail
    selected = upstream.run_suite(
        sys.executable, root, "tests/test_pkg.py", workers=1, select="test_a", timeout=120, log=log
    )
    assert upstream.parse_counts(selected.output_tail) == {"passed": 1, "deselected": 2}


def test_suite_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    tests = "import time\n\ndef test_slow(): time.sleep(600)\n"
    root = upstream.unpack_tests(
        _sdist_with_tests(tmp_path / "pkg-1.0.tar.gz", tests), "tests/test_pkg.py", tmp_path / "u"
    )
    suite = upstream.run_suite(
        sys.executable, root, "tests/test_pkg.py", workers=1, select=None, timeout=3, log=tmp_path / "log"
    )
    assert suite.returncode is None and suite.seconds < 30


# -- mamba-ssm's cases on the CPU, against the real reference implementations -----------------------------------


@pytest.fixture(scope="module")
def reference_sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The gpu-box profile's sdists, through the fetch stage's hash-checked cache, unpacked."""
    into = tmp_path_factory.mktemp("sdists")
    return {
        job.package: unpack_sdist(fetch_sdist(job), into) for job in load_plan(ROOT / "matrix.yaml", "gpu-box").jobs
    }


@pytest.mark.slow
def test_mamba_cases_run_end_to_end_with_the_references(
    tmp_path: Path, torch_runtime: RuntimeEnv, reference_sources: dict[str, Path]
) -> None:
    out = tmp_path / "checks.json"
    harness = Path(__file__).parent / "acceptance_cpu_harness.py"
    command = [
        sys.executable,
        str(harness),
        str(reference_sources["mamba-ssm"]),
        str(reference_sources["causal-conv1d"]),
        str(out),
    ]
    done = run(command, env={"PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"}, timeout=600)
    assert done.returncode == 0, done.stderr
    checks = json.loads(out.read_text())
    assert {c["status"] for c in checks} == {"passed"}, [c for c in checks if c["status"] != "passed"]
    # every input's gradient was compared, in every dtype, with complex A where upstream tests it
    scan = next(c for c in checks if c["name"].startswith("selective_scan_fn bfloat16"))
    assert [x["tensor"] for x in scan["data"]["comparisons"]] == [
        "out",
        "last_state",
        "du",
        "ddelta",
        "dA",
        "dB",
        "dC",
        "dD",
        "dz",
        "ddelta_bias",
    ]
    fixed = next(c for c in checks if c["name"] == "mamba_inner_fn float16 seqlen=17 B,C fixed")
    assert {"dxz", "dB", "dC", "dx_proj_weight", "dout_proj_weight"} <= {
        x["tensor"] for x in fixed["data"]["comparisons"]
    }
    assert any("complex A" in c["name"] for c in checks)


@pytest.mark.slow
def test_comparison_fails_past_the_tolerance_in_the_kernels_dtype(torch_runtime: RuntimeEnv) -> None:
    code = """
import json, torch
from scripts.acceptance.config import Tolerance
from scripts.acceptance.numerics import compare, as_check
tol = Tolerance(rtol=3e-3, atol=5e-3)
ref = torch.linspace(-4, 4, 101)
half = compare("du", ref.half(), ref, tol)                       # rounding to fp16 only: within
off = compare("du", (ref + 0.05).half(), ref, tol)               # 0.05 off everywhere: out
cplx = compare("dA", torch.complex(ref, ref) * (1 + 1e-2), torch.complex(ref, ref), tol)
nan = compare("out", torch.full((3,), float("nan")), torch.zeros(3), tol)
print(json.dumps([half.ok, off.ok, off.worst > 1, cplx.ok, nan.ok, as_check("case", [half, off]).status]))
"""
    done = run([sys.executable, "-c", code], env={"PYTHONPATH": f"{torch_runtime.site_packages}{os.pathsep}{ROOT}"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, False, True, False, False, "failed"]
