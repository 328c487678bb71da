"""The verify gate on real binaries: an nvcc-built kernel library in a repaired wheel reports its archs and passes,
the wrong arch is quarantined with expected vs found; and the import check in a fresh venv next to a real torch."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from builder.core.runner import run
from builder.plan.job import Job
from builder.steps.elf import wheel_elf_facts
from builder.steps.environment import RuntimeEnv
from builder.steps.repair import repair_wheel
from builder.steps.verify import check_import, quarantine, verify_wheel
from scripts.bench.wheels import job_wheel, wheel_of_files, with_provenance
from tests.jobs import local_job

from .conftest import CompileCu

EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"


def repaired(tmp_path: Path, job: Job, files: dict) -> Path:
    built = job_wheel(tmp_path, job, files)
    return with_provenance(repair_wheel(built, job, tmp_path / "repaired").wheel, job)


@pytest.mark.nvcc
def test_cuda_kernels_of_the_right_arch_pass(tmp_path: Path, compile_cu: CompileCu) -> None:
    job = local_job()
    library = compile_cu("sm90", ["arch=compute_90,code=sm_90"])
    wheel = repaired(tmp_path, job, {EXTENSION: library, "causal_conv1d/__init__.py": b""})

    report = verify_wheel(wheel, job, runtime=None)

    assert report.ok, report.describe()
    assert (report.sass, report.ptx) == (("9.0",), ())
    assert {"GLIBC", "CXXABI"} <= set(report.symbol_versions)
    assert "libstdc++.so.6" in report.needed
    assert report.skipped and report.skipped[0].startswith("import:")


@pytest.mark.nvcc
def test_wrong_arch_is_quarantined_naming_expected_and_found(tmp_path: Path, compile_cu: CompileCu) -> None:
    job = local_job()
    library = compile_cu("sm80_ptx80", ["arch=compute_80,code=sm_80", "arch=compute_80,code=compute_80"])
    wheel = repaired(tmp_path, job, {EXTENSION: library})

    report = verify_wheel(wheel, job, runtime=None)
    assert not report.ok
    assert (report.sass, report.ptx) == (("8.0",), ("8.0",))
    moved = quarantine(wheel, report, tmp_path / "quarantine")

    assert moved.is_file() and not wheel.exists()
    reason = (moved.parent / f"{moved.name}.reason.txt").read_text()
    assert f"FAIL gpu-archs: {EXTENSION}: expected SASS 9.0; PTX none, found SASS 8.0; PTX 8.0" in reason
    assert "no kernel image for 9.0" in reason


# --- the import check in a clean venv, next to the real torch 2.14.1 ----------------------------------------------


def pure_wheel(tmp_path: Path, job: Job, native_module: str) -> Path:
    files = {
        "causal_conv1d/__init__.py": b"import torch\nZEROS = torch.zeros(2)\n",
        "causal_conv1d_cuda.py": native_module.encode(),
    }
    return wheel_of_files(tmp_path, name=job.dist_name, version=job.local_version, files=files,
                      python_tag="py3", platform="any", pure=True)


@pytest.mark.slow
def test_import_passes_next_to_the_jobs_torch(tmp_path: Path, torch_runtime: RuntimeEnv) -> None:
    job = local_job()
    wheel = pure_wheel(tmp_path, job, "import torch\nfrom torch import nn\nLayer = nn.Linear\n")
    check = check_import(wheel, job, torch_runtime)
    assert check.ok, check.detail
    assert check.detail.startswith("import torch (2.14.1")
    assert "causal_conv1d, causal_conv1d_cuda" in check.detail


@pytest.mark.slow
def test_broken_import_fails_with_the_import_error_text(tmp_path: Path, torch_runtime: RuntimeEnv) -> None:
    job = local_job()
    wheel = pure_wheel(tmp_path, job, "from torch import no_such_thing_in_torch\n")
    report = verify_wheel(wheel, job, runtime=torch_runtime)
    (import_check,) = [c for c in report.checks if c.name == "import"]
    assert not import_check.ok
    expected = "causal_conv1d_cuda: ImportError: cannot import name 'no_such_thing_in_torch' from 'torch'"
    assert import_check.detail.startswith(expected)
    assert any(r.startswith("import: causal_conv1d_cuda: ImportError") for r in report.reasons)


def c_extension(tmp_path: Path, *link: str) -> Path:
    """A real CPython extension module named causal_conv1d_cuda, linked as the job's build links it."""
    source = tmp_path / "ext.c"
    source.write_text(
        "#include <Python.h>\n"
        "static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, \"causal_conv1d_cuda\", NULL, -1, NULL};\n"
        "PyMODINIT_FUNC PyInit_causal_conv1d_cuda(void) { return PyModule_Create(&module); }\n"
    )
    output = tmp_path / EXTENSION
    include = sysconfig.get_paths()["include"]
    run(["cc", "-shared", "-fPIC", f"-I{include}", source, "-o", output, "-Wl,--no-as-needed", *link], step="cc ext")
    return output


@pytest.mark.slow
def test_native_extension_needing_libc10_imports_after_torch(tmp_path: Path, torch_runtime: RuntimeEnv) -> None:
    # torch's libc10.so is not on any library path: the extension finds it because `import torch` loaded it first,
    # which is exactly why repair may leave it out
    torch_lib = torch_runtime.site_packages / "torch" / "lib"
    extension = c_extension(tmp_path, f"-L{torch_lib}", "-lc10")
    job = local_job()
    wheel = repaired(tmp_path, job, {EXTENSION: extension, "causal_conv1d/__init__.py": b"import torch\n"})
    assert "libc10.so" in {soname for elf in wheel_elf_facts(wheel) for soname in elf.needed}

    check = check_import(wheel, job, torch_runtime)
    assert check.ok, check.detail


@pytest.mark.slow
def test_native_extension_needing_a_missing_library_fails_with_the_loader_error(
    tmp_path: Path, torch_runtime: RuntimeEnv
) -> None:
    helper_dir = tmp_path / "deps"
    helper_dir.mkdir()
    run(["cc", "-shared", "-fPIC", "-x", "c", "/dev/null", "-o", helper_dir / "libc10_phantom.so"], step="cc phantom")
    extension = c_extension(tmp_path, f"-L{helper_dir}", "-lc10_phantom")
    job = local_job()
    # libc10_phantom.so matches the libc10* exclude, so repair trusts torch to provide it; torch does not
    wheel = repaired(tmp_path, job, {EXTENSION: extension, "causal_conv1d/__init__.py": b""})
    check = check_import(wheel, job, torch_runtime)
    assert not check.ok
    assert "causal_conv1d_cuda: ImportError: libc10_phantom.so: cannot open shared object file" in check.detail

