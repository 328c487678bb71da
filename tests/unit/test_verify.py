"""The verify gate's checks, each failing with a clear reason and passing, on hand-made facts and hand-made wheels
(ELF files here are synthetic: sections only, no compiler)."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType

import pytest

from builder.core.fatbin import FatbinContents
from builder.steps.elf import ElfFacts
from builder.steps.environment import RuntimeEnv, installed_torch
from builder.steps.repair import load_excludes, manylinux_policies
from builder.steps.torch_index import TorchWheel
from builder.steps.verify import (
    VerifyReport,
    WheelFacts,
    _import_outcome,
    check_import,
    evaluate,
    expected_archs,
    failed,
    passed,
    quarantine,
    recorded_facts,
    skipped,
    verify_wheel,
)
from scripts.bench.wheels import job_wheel, with_provenance
from tests.jobs import local_job, rocm_job
from tests.synth import PTX, SASS, elf_with_sections, fatbin_container, fatbin_entry

JOB = local_job()
POLICIES = manylinux_policies()
EXCLUDES = load_excludes()
EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
FILENAME = "causal_conv1d-1.7.0+pt214cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
SASS_90 = FatbinContents(sass=frozenset({"9.0"}))


def metadata(name: str = "causal-conv1d", version: str = "1.7.0+pt214cu130",
             requires: tuple[str, ...] = ("torch==2.14.*", "einops")) -> str:
    return "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                    *(f"Requires-Dist: {r}\n" for r in requires)])


def extension(needed: tuple[str, ...] = ("libc10.so", "libtorch_cuda.so", "libcudart.so.13", "libstdc++.so.6",
                                          "libc.so.6"),
              versions: dict[str, set[str]] | None = None, gpu: FatbinContents = SASS_90,
              path: str = EXTENSION) -> ElfFacts:
    versions = versions or {"libc.so.6": {"GLIBC_2.2.5", "GLIBC_2.17"}, "libstdc++.so.6": {"GLIBCXX_3.4.19"}}
    frozen = MappingProxyType({lib: frozenset(v) for lib, v in versions.items()})
    return ElfFacts(path=path, needed=needed, symbol_versions=frozen, gpu=gpu)


def facts(filename: str = FILENAME, text: str | None = None, *elves: ElfFacts) -> WheelFacts:
    return WheelFacts(filename=filename, metadata=metadata() if text is None else text, files=(),
                      elves=elves or (extension(),))


def checks(wheel_facts: WheelFacts, job=JOB) -> dict:
    return {c.name: c for c in evaluate(wheel_facts, job, excludes=EXCLUDES, policies=POLICIES)}


def test_a_good_wheel_passes_every_check() -> None:
    found = checks(facts())
    assert set(found) == {"name", "version", "requires-torch", "tags", "needed-libraries", "symbol-versions",
                          "gpu-archs", "cxx-abi", "elf-machine", "extension-suffix", "load-alignment"}
    assert all(c.ok and not c.skipped for c in found.values()), found
    assert found["needed-libraries"].detail == (
        "torch: libc10.so, libcudart.so.13, libtorch_cuda.so; system: libc.so.6, libstdc++.so.6")
    assert found["symbol-versions"].detail == "within manylinux_2_28_x86_64: highest GLIBC_2.17, GLIBCXX_3.4.19"
    assert found["gpu-archs"].detail == f"{EXTENSION}: SASS 9.0"


# --- metadata --------------------------------------------------------------------------------------------------------


def test_missing_metadata() -> None:
    (only,) = evaluate(facts(FILENAME, ""), JOB, excludes=EXCLUDES, policies=POLICIES)
    assert (only.name, only.ok) == ("metadata", False)
    assert "METADATA" in only.detail


def test_name_in_metadata_must_be_the_package() -> None:
    check = checks(facts(FILENAME, metadata(name="causal-conv2d")))["name"]
    assert not check.ok
    assert "METADATA Name 'causal-conv2d'" in check.detail and "'causal-conv1d'" in check.detail


def test_name_in_filename_must_be_the_package() -> None:
    check = checks(facts(FILENAME.replace("causal_conv1d", "mamba_ssm")))["name"]
    assert not check.ok and "filename 'mamba_ssm'" in check.detail


def test_name_spelling_is_normalized_in_metadata() -> None:
    assert checks(facts(FILENAME, metadata(name="Causal_Conv1d")))["name"].ok


def test_version_without_the_label_fails() -> None:
    check = checks(facts(FILENAME, metadata(version="1.7.0")))["version"]
    assert not check.ok
    assert check.detail == ("METADATA Version '1.7.0', filename '1.7.0+pt214cu130'; "
                            "expected '1.7.0+pt214cu130' (the label pt214cu130 included)")


def test_filename_version_must_match_metadata() -> None:
    check = checks(facts(FILENAME.replace("+pt214cu130", "+pt213cu130")))["version"]
    assert not check.ok and "filename '1.7.0+pt213cu130'" in check.detail


def test_unparseable_version_fails_instead_of_raising() -> None:
    assert not checks(facts(FILENAME, metadata(version="one point seven")))["version"].ok


@pytest.mark.parametrize(
    ("requires", "shown"),
    [
        ((), "none"),
        (("torch>=2.0",), "'torch>=2.0'"),
        (("torch==2.13.*",), "'torch==2.13.*'"),
        (("torch==2.14.*", "torch==2.14.1"), "'torch==2.14.*', 'torch==2.14.1'"),
        (('torch==2.14.*; extra == "cuda"',), "'torch==2.14.*; extra == \"cuda\"'"),
    ],
)
def test_torch_requirement_must_be_exactly_the_jobs(requires: tuple[str, ...], shown: str) -> None:
    check = checks(facts(FILENAME, metadata(requires=requires)))["requires-torch"]
    assert not check.ok
    assert check.detail == f"Requires-Dist for torch: {shown}; expected exactly 'torch==2.14.*'"


def test_unparseable_requirement_is_named() -> None:
    check = checks(facts(FILENAME, metadata(requires=("torch==2.14.*", "not a requirement!!"))))["requires-torch"]
    assert not check.ok and "'not a requirement!!' does not parse" in check.detail


def test_torch_requirement_passes() -> None:
    assert checks(facts())["requires-torch"].detail == "Requires-Dist: torch==2.14.*"


# --- tags, libraries, symbols ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "message"),
    [
        (FILENAME.replace("cp311-cp311", "cp312-cp312"), "the job builds cp311-cp311 for x86_64"),
        (FILENAME.replace("x86_64", "aarch64"), "the job builds cp311-cp311 for x86_64"),
        (FILENAME.replace("manylinux_2_28", "linux"), "names no manylinux policy: the wheel was not repaired"),
        ("causal_conv1d.whl", "Invalid wheel filename"),
    ],
)
def test_tags_must_match_the_job_and_be_manylinux(filename: str, message: str) -> None:
    check = checks(facts(filename))["tags"]
    assert not check.ok and message in check.detail


def test_a_free_threaded_job_wants_the_free_threaded_abi_tag() -> None:
    job = local_job(python="3.14t")
    assert (job.python_tag, job.interpreter_tag, job.abi_tag) == ("cp314t", "cp314", "cp314t")
    assert job.identifier == "causal-conv1d-1.7.0+pt214cu130-cp314t-x86_64"
    free_threaded = FILENAME.replace("cp311-cp311", "cp314-cp314t")
    assert checks(facts(free_threaded), job)["tags"].ok
    ordinary = checks(facts(FILENAME.replace("cp311-cp311", "cp314-cp314")), job)["tags"]
    assert not ordinary.ok and "the job builds cp314-cp314t for x86_64" in ordinary.detail
    assert not checks(facts(free_threaded))["tags"].ok  # and the cp311 job refuses it


def test_unrepaired_wheel_fails_the_library_and_symbol_checks_too() -> None:
    found = checks(facts(FILENAME.replace("manylinux_2_28", "linux")))
    assert not found["needed-libraries"].ok and not found["symbol-versions"].ok
    assert "no manylinux platform tag" in found["symbol-versions"].detail


def test_a_library_from_nowhere_fails_naming_file_library_and_policy() -> None:
    check = checks(facts(FILENAME, None, extension(needed=("libc10.so", "libgomp.so.1"))))["needed-libraries"]
    assert not check.ok
    assert check.detail == (f"{EXTENSION} needs libgomp.so.1: not provided by torch (builder/data/repair.toml), "
                            "not bundled in the wheel, not allowed by manylinux_2_28_x86_64")


def test_a_bundled_library_is_fine() -> None:
    grafted = ElfFacts(path="causal_conv1d.libs/libgomp-a34b3233.so.1", needed=("libc.so.6",))
    found = checks(facts(FILENAME, None, extension(needed=("libgomp-a34b3233.so.1",)), grafted))
    assert found["needed-libraries"].ok
    assert "bundled: libgomp-a34b3233.so.1" in found["needed-libraries"].detail


def test_cuda_libraries_are_not_provided_to_a_rocm_wheel() -> None:
    job = rocm_job()
    filename = FILENAME.replace("cu130", "rocm61")
    text = metadata(version="1.7.0+pt214rocm61")
    check = checks(facts(filename, text, extension(needed=("libamdhip64.so.6", "libcudart.so.13"))), job)
    assert not check["needed-libraries"].ok
    assert "needs libcudart.so.13" in check["needed-libraries"].detail
    assert "libamdhip64" not in check["needed-libraries"].detail


def test_loader_and_policy_allowed_libraries_pass() -> None:
    elf = extension(needed=("ld-linux-x86-64.so.2", "libm.so.6", "libgcc_s.so.1", "libz.so.1"))
    assert checks(facts(FILENAME, None, elf))["needed-libraries"].ok


def test_glibc_newer_than_the_tag_fails() -> None:
    elf = extension(versions={"libc.so.6": {"GLIBC_2.2.5", "GLIBC_2.34", "GLIBC_2.32"}})
    check = checks(facts(FILENAME, None, elf))["symbol-versions"]
    assert not check.ok
    assert check.detail == "newer than manylinux_2_28_x86_64 allows: GLIBC_2.32, GLIBC_2.34 (allowed up to GLIBC_2.28)"


def test_glibcxx_and_cxxabi_newer_than_the_tag_fail() -> None:
    elf = extension(versions={"libstdc++.so.6": {"GLIBCXX_3.4.30", "CXXABI_1.3.13", "CXXABI_1.3.9"}})
    check = checks(facts(FILENAME, None, elf))["symbol-versions"]
    assert not check.ok
    assert "CXXABI_1.3.13 (allowed up to CXXABI_1.3.11)" in check.detail
    assert "GLIBCXX_3.4.30 (allowed up to GLIBCXX_3.4.24)" in check.detail


def test_same_symbols_pass_under_a_newer_tag() -> None:
    elf = extension(versions={"libc.so.6": {"GLIBC_2.34"}, "libstdc++.so.6": {"GLIBCXX_3.4.30", "CXXABI_1.3.13"}})
    check = checks(facts(FILENAME.replace("2_28", "2_35"), None, elf))["symbol-versions"]
    assert check.ok
    assert check.detail == "within manylinux_2_35_x86_64: highest GLIBC_2.34, GLIBCXX_3.4.30, CXXABI_1.3.13"


def test_with_two_manylinux_tags_the_older_one_governs() -> None:
    elf = extension(versions={"libc.so.6": {"GLIBC_2.28"}})
    filename = FILENAME.replace("manylinux_2_28_x86_64", "manylinux2014_x86_64.manylinux_2_28_x86_64")
    check = checks(facts(filename, None, elf))["symbol-versions"]
    assert not check.ok and "manylinux_2_17_x86_64" in check.detail


def test_recorded_facts_compare_versions_as_numbers() -> None:
    elves = (
        extension(versions={"libc.so.6": {"GLIBC_2.2.5", "GLIBC_2.4", "GLIBC_PRIVATE"},
                            "libstdc++.so.6": {"GLIBCXX_3.4.9", "CXXABI_TM_1", "CXXABI_1.3.5"}}),
        extension(path="other.so", needed=("libm.so.6",), versions={"libc.so.6": {"GLIBC_2.34"}},
                  gpu=FatbinContents(sass=frozenset({"10.0", "8.0"}), ptx=frozenset({"10.0"}))),
    )
    recorded = recorded_facts(facts(FILENAME, None, *elves))
    assert dict(recorded["symbol_versions"]) == {"GLIBC": "2.34", "GLIBCXX": "3.4.9", "CXXABI": "1.3.5"}
    assert recorded["needed"] == ("libc.so.6", "libc10.so", "libcudart.so.13", "libm.so.6", "libstdc++.so.6",
                                  "libtorch_cuda.so")
    assert (recorded["sass"], recorded["ptx"]) == (("8.0", "9.0", "10.0"), ("10.0",))


# --- GPU archs -----------------------------------------------------------------------------------------------------


def test_expected_archs_read_ptx_suffixes() -> None:
    assert expected_archs(local_job(archs=("8.0", "9.0+PTX"))) == (frozenset({"8.0", "9.0"}), frozenset({"9.0"}))


def test_wrong_arch_names_expected_and_found() -> None:
    elf = extension(gpu=FatbinContents(sass=frozenset({"8.0"})))
    check = checks(facts(FILENAME, None, elf))["gpu-archs"]
    assert not check.ok
    assert check.detail == (f"{EXTENSION}: expected SASS 9.0; PTX none, found SASS 8.0 "
                            "(no kernel image for 9.0; unexpected SASS 8.0)")


def test_ptx_is_expected_only_with_plus_ptx() -> None:
    with_ptx = extension(gpu=FatbinContents(sass=frozenset({"9.0"}), ptx=frozenset({"9.0"})))
    assert checks(facts(FILENAME, None, with_ptx), local_job(archs=("9.0+PTX",)))["gpu-archs"].ok
    check = checks(facts(FILENAME, None, with_ptx))["gpu-archs"]
    assert not check.ok and "unexpected PTX 9.0" in check.detail
    check = checks(facts(FILENAME, None, extension()), local_job(archs=("9.0+PTX",)))["gpu-archs"]
    assert not check.ok and "missing PTX 9.0" in check.detail


def test_every_kernel_library_must_match() -> None:
    good = extension()
    bad = extension(path="selective_scan_cuda.so", gpu=FatbinContents(sass=frozenset({"9.0", "10.0"})))
    check = checks(facts(FILENAME, None, good, bad))["gpu-archs"]
    assert not check.ok
    assert check.detail.startswith("selective_scan_cuda.so: expected SASS 9.0")
    assert EXTENSION not in check.detail


def test_no_kernels_at_all_fails() -> None:
    check = checks(facts(FILENAME, None, extension(gpu=FatbinContents())))["gpu-archs"]
    assert not check.ok and "no shared object in the wheel carries CUDA kernels" in check.detail


def test_rocm_archs_are_skipped_with_a_reason_not_passed() -> None:
    text = metadata(version="1.7.0+pt214rocm61")
    check = checks(facts(FILENAME.replace("cu130", "rocm61"), text), rocm_job())["gpu-archs"]
    assert check.skipped and "gfx942 unchecked" in check.detail


# --- the import check's decision -----------------------------------------------------------------------------------


def test_import_without_runtime_is_skipped_with_a_reason(tmp_path: Path) -> None:
    check = check_import(tmp_path / "x.whl", JOB, None)
    assert check.skipped and check.outcome == "SKIP"
    assert "no runtime environment" in check.detail


def test_import_with_no_import_names_is_skipped(tmp_path: Path) -> None:
    job = local_job(recipe=local_job().recipe.__class__())
    runtime = RuntimeEnv(python=Path("/nonexistent/python"), site_packages=tmp_path, torch="2.14.1", system=False)
    assert check_import(tmp_path / "x.whl", job, runtime).skipped


def test_import_outcome_success() -> None:
    output = "torch 2.14.1+cu130\nimported causal_conv1d\nimported causal_conv1d_cuda\n"
    check = _import_outcome(0, output, JOB)
    assert check.ok and "torch (2.14.1+cu130), causal_conv1d, causal_conv1d_cuda" in check.detail


def test_import_outcome_reports_every_failure_with_its_text() -> None:
    output = ("torch 2.14.1\nimported causal_conv1d\n"
              "IMPORT FAILED causal_conv1d_cuda: ImportError: libc10.so: cannot open shared object file\n")
    check = _import_outcome(1, output, JOB)
    assert not check.ok
    assert check.detail == "causal_conv1d_cuda: ImportError: libc10.so: cannot open shared object file"


def test_import_outcome_when_torch_itself_fails() -> None:
    check = _import_outcome(1, "Traceback ...\nModuleNotFoundError: No module named 'torch'\n", JOB)
    assert not check.ok and "import torch failed in the runtime" in check.detail
    assert "No module named 'torch'" in check.detail


def test_import_outcome_with_the_wrong_torch() -> None:
    check = _import_outcome(0, "torch 2.13.0\nimported causal_conv1d\n", JOB)
    assert not check.ok and "holds torch 2.13.0, but the wheel was built for torch 2.14.1" in check.detail


# --- the report, the gate on real (synthetic) files, quarantine ------------------------------------------------------


def test_report_ok_reasons_and_skips() -> None:
    three = (passed("a", "fine"), failed("b", "broken"), skipped("c", "n/a"))
    report = VerifyReport(wheel="w.whl", job="j", checks=three)
    assert not report.ok
    assert report.reasons == ("b: broken",)
    assert report.skipped == ("c: n/a",)
    assert report.describe().splitlines()[1:4] == ["FAIL b: broken", "SKIP c: n/a", "PASS a: fine"]
    assert json.loads(json.dumps(report.as_dict()))["checks"][1] == {"name": "b", "outcome": "FAIL", "detail": "broken"}


def kernel_library(*entries: bytes) -> bytes:
    return elf_with_sections({".text": b"\xc3" * 8, ".nv_fatbin": fatbin_container(*entries)})


def test_gate_passes_a_wheel_with_the_right_kernels(tmp_path: Path) -> None:
    wheel = with_provenance(job_wheel(tmp_path, JOB, {EXTENSION: kernel_library(fatbin_entry(SASS, 90))},
                                      platform="manylinux_2_28_x86_64"), JOB)
    report = verify_wheel(wheel, JOB, runtime=None)
    assert report.ok, report.describe()
    (skip,) = report.skipped
    assert skip == "import: no runtime environment (interpreter + torch) was given, so the import is unchecked"
    assert report.sass == ("9.0",) and report.ptx == ()
    assert report.warnings == ()


def test_gate_fails_the_wrong_arch_and_quarantine_says_why(tmp_path: Path) -> None:
    library = kernel_library(fatbin_entry(SASS, 80), fatbin_entry(PTX, 80))
    wheel = with_provenance(job_wheel(tmp_path, JOB, {EXTENSION: library}, platform="manylinux_2_28_x86_64"), JOB)
    report = verify_wheel(wheel, JOB, runtime=None)
    assert not report.ok
    reason, disagreement = report.reasons
    assert disagreement.startswith("provenance: the fatbins hold SASS ['8.0'], PTX ['8.0']")
    assert reason.startswith(f"gpu-archs: {EXTENSION}: expected SASS 9.0; PTX none, found SASS 8.0; PTX 8.0")

    moved = quarantine(wheel, report, tmp_path / "quarantine")
    assert moved == tmp_path / "quarantine" / wheel.name and moved.is_file() and not wheel.exists()
    text = (tmp_path / "quarantine" / f"{wheel.name}.reason.txt").read_text()
    assert text.splitlines()[0] == f"{wheel.name} FAILED verification for job {JOB.identifier}"
    assert text.splitlines()[1].startswith("FAIL gpu-archs:") and "no kernel image for 9.0" in text


def test_gate_warns_when_the_tag_misses_the_target(tmp_path: Path) -> None:
    wheel = with_provenance(job_wheel(tmp_path, JOB, {EXTENSION: kernel_library(fatbin_entry(SASS, 90))},
                                      platform="manylinux_2_36_x86_64"), JOB)
    report = verify_wheel(wheel, JOB, runtime=None)
    assert report.ok
    assert report.warnings == ("tagged manylinux_2_36_x86_64, newer than the job's target manylinux_2_28_x86_64",)


def test_gate_reports_a_malformed_fatbin_instead_of_raising(tmp_path: Path) -> None:
    broken = elf_with_sections({".nv_fatbin": b"\x01\x02\x03\x04" + b"\0" * 12})
    wheel = job_wheel(tmp_path, JOB, {EXTENSION: broken}, platform="manylinux_2_28_x86_64")
    report = verify_wheel(wheel, JOB, runtime=None)
    assert [c.name for c in report.checks] == ["readable"]
    assert "no fatbin magic at offset 0" in report.reasons[0]


def test_gate_reports_a_file_that_is_no_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / FILENAME
    wheel.write_text("not a zip")
    report = verify_wheel(wheel, JOB, runtime=None)
    assert not report.ok and "not a zip archive" in report.reasons[0]


def test_an_installed_runtime_is_reused_without_any_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    folders = []
    for sha256 in ("ab" * 32, "cd" * 32):  # one torch version, two wheels (two variants, or two mirrors' bytes)
        wheel = TorchWheel(filename="torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", url="https://r.test/t.whl",
                           sha256=sha256, index="https://r.test/simple/", origin="registry")
        (tmp_path / "torch-wheels" / sha256).mkdir(parents=True)
        (tmp_path / "torch-wheels" / sha256 / wheel.filename).write_bytes(b"")
        ready = tmp_path / "runtime" / f"torch-2.14.1-cp311-{sha256[:16]}"
        ready.mkdir(parents=True)
        (ready / ".complete").write_text("{}\n")
        assert installed_torch(local_job(), Path("/nonexistent/python3.11"), wheel) == (ready, sha256)
        folders.append(ready)
    assert folders[0] != folders[1]


def test_the_import_check_runs_beside_the_reading_of_the_wheel_in_the_jobs_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify_wheel starts the import check (venv, pip, import) while it reads the wheel, and the check still
    writes to the job's log (its context goes with it); its result is the report's."""
    import threading

    from builder.core.context import current, job_context
    from builder.steps import verify

    started = threading.Event()
    seen: dict[str, object] = {}

    def slow_read(wheel: Path) -> WheelFacts:
        seen["overlapped"] = started.wait(timeout=10)  # serial code would start the import only after this
        return verify.WheelFacts(filename=FILENAME, metadata="", files=(), elves=())

    def import_check(wheel: Path, job: object, runtime: object) -> verify.Check:
        started.set()
        context = current()
        seen["job"] = context.job.identifier if context else None
        return failed("import", "the stand-in import failed")

    monkeypatch.setattr(verify, "inspect_wheel", slow_read)
    monkeypatch.setattr(verify, "check_import", import_check)
    monkeypatch.setattr(verify, "check_provenance", lambda wheel, facts: passed("provenance", "stand-in"))
    with job_context(JOB, tmp_path / "job.log"):
        report = verify_wheel(tmp_path / FILENAME, JOB, runtime=None)
    assert seen == {"overlapped": True, "job": JOB.identifier}
    (imported,) = [c for c in report.checks if c.name == "import"]
    assert imported.detail == "the stand-in import failed" and not report.ok
