"""Repair on real ELF files with the real auditwheel and patchelf: torch's libraries stay out, others are grafted
and still load, and the tag is the best policy the binary meets here (a warning when that misses the target)."""

from __future__ import annotations

import ctypes
import os
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename

from builder.core.context import job_context
from builder.core.errors import WheelError
from builder.core.fatbin import fatbin_archs
from builder.core.runner import run
from builder.steps.elf import unpacked, wheel_elf_facts
from builder.steps.repair import parse_excludes, repair_wheel
from scripts.bench.wheels import job_wheel
from tests.jobs import local_job

EXTENSION = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"


def cc_shared(tmp_path: Path, name: str, source: str, *flags: str, soname: str | None = None) -> Path:
    path = tmp_path / f"{name}.c"
    path.write_text(source)
    output = tmp_path / (soname or f"{name}.so")
    extra = [f"-Wl,-soname,{soname}"] if soname else []
    run(["cc", "-shared", "-fPIC", path, *extra, "-o", output, *flags], step=f"cc {name}")
    return output


@pytest.fixture
def fake_c10(tmp_path: Path) -> Path:
    """A stand-in libc10.so to link against; it is not on any library path, as torch's is not at build time."""
    lib_dir = tmp_path / "torch-lib"
    lib_dir.mkdir()
    cc_shared(lib_dir, "libc10", "int c10_answer(void) { return 42; }\n")
    return lib_dir


@pytest.mark.nvcc
def test_cuda_extension_keeps_torch_and_cudart_out(tmp_path: Path, fake_c10: Path, cuda_home: Path) -> None:
    source = tmp_path / "ext.cu"
    source.write_text(
        "extern \"C\" int c10_answer(void);\n"
        "__global__ void twice(int *x) { x[threadIdx.x] *= 2; }\n"
        "extern \"C\" int launch(int *x) { twice<<<1, 32>>>(x); return c10_answer(); }\n"
    )
    library = tmp_path / EXTENSION
    command = [cuda_home / "bin" / "nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90,code=sm_90",
               "-cudart", "shared", source, "-L", fake_c10, "-lc10", "-o", library]
    run(command, step="nvcc ext", env={**os.environ, "CUDA_HOME": str(cuda_home)})
    job = local_job()
    wheel = job_wheel(tmp_path, job, {EXTENSION: library, "causal_conv1d/__init__.py": b""})

    result = repair_wheel(wheel, job, tmp_path / "repaired")

    assert result.wheel.parent == tmp_path / "repaired"
    _, version, _, tags = parse_wheel_filename(result.wheel.name)
    assert str(version) == job.local_version
    assert {t.platform for t in tags} == set(result.plan.tags)
    assert result.policy.startswith("manylinux_")
    assert set(result.plan.excluded) == {"libc10.so", "libcudart.so.13"}
    assert dict(result.plan.bundled) == {}
    assert not any(".libs/" in n for n in zipfile.ZipFile(result.wheel).namelist())
    with unpacked(result.wheel) as root:
        assert fatbin_archs(root / EXTENSION).sass == {"9.0"}


def test_other_libraries_are_grafted_and_still_load(tmp_path: Path) -> None:
    # not named "helper": patchelf blanks the old rpath string, and the linker may share its tail with a symbol name
    helper_dir = tmp_path / "deps"
    helper_dir.mkdir()
    cc_shared(helper_dir, "helper", "int helper(void) { return 7; }\n", soname="libhelper.so.1")
    (helper_dir / "libhelper.so").symlink_to("libhelper.so.1")
    extension = cc_shared(tmp_path, "ext", "int helper(void);\nint answer(void) { return 6 * helper(); }\n",
                          "-L", str(helper_dir), "-lhelper", f"-Wl,-rpath,{helper_dir}")
    job = local_job()
    wheel = job_wheel(tmp_path, job, {EXTENSION: extension})

    with job_context(job, tmp_path / "repair.log"):  # the job's log: where the patchelf runs must show
        result = repair_wheel(wheel, job, tmp_path / "out")

    assert dict(result.plan.bundled) == {"libhelper.so.1": str(helper_dir / "libhelper.so.1")}
    facts = {elf.path: elf for elf in wheel_elf_facts(result.wheel)}
    (grafted,) = [path for path in facts if path.startswith("causal_conv1d.libs/libhelper-")]
    assert facts[EXTENSION].needed == (grafted.split("/")[-1],)
    assert "patchelf" in (tmp_path / "repair.log").read_text()
    (helper_dir / "libhelper.so.1").unlink()  # the grafted copy must be what loads now
    with unpacked(result.wheel) as root:
        assert ctypes.CDLL(str(root / EXTENSION)).answer() == 42


def test_tag_is_honest_about_a_newer_glibc_than_the_target(tmp_path: Path) -> None:
    # arc4random arrived in glibc 2.36: a binary using it cannot be manylinux_2_28, whatever the target says
    extension = cc_shared(tmp_path, "ext", "#include <stdlib.h>\nunsigned int draw(void) { return arc4random(); }\n")
    job = local_job()
    assert job.manylinux == "manylinux_2_28"
    result = repair_wheel(job_wheel(tmp_path, job, {EXTENSION: extension}), job, tmp_path / "out")
    assert result.policy == "manylinux_2_36_x86_64"
    assert result.plan.target == "manylinux_2_28_x86_64"
    assert result.wheel.name.endswith("-manylinux_2_36_x86_64.whl")
    (warning,) = result.plan.warnings
    assert "newer than the target manylinux_2_28_x86_64" in warning


def test_old_symbols_only_earn_an_older_tag_without_warning(tmp_path: Path) -> None:
    extension = cc_shared(tmp_path, "ext", "#include <string.h>\nsize_t n(const char *s) { return strlen(s); }\n")
    job = local_job()
    result = repair_wheel(job_wheel(tmp_path, job, {EXTENSION: extension}), job, tmp_path / "out")
    assert result.policy == "manylinux_2_5_x86_64"
    assert result.plan.tags == ("manylinux_2_5_x86_64", "manylinux1_x86_64")
    assert result.plan.reaches_target


def test_torch_library_not_excluded_cannot_be_repaired(tmp_path: Path, fake_c10: Path) -> None:
    extension = cc_shared(tmp_path, "ext", "int c10_answer(void);\nint f(void) { return c10_answer(); }\n",
                          "-L", str(fake_c10), "-lc10")
    job = local_job()
    no_torch = parse_excludes(
        {"exclude": {"torch": ["libshm.so*"], "cuda": ["libcudart.so*"], "rocm": ["libamdhip64.so*"]}}, "t.toml")
    with pytest.raises(WheelError, match=r"needs libc10.so: not on this machine, not provided by torch \(t.toml\)"):
        repair_wheel(job_wheel(tmp_path, job, {EXTENSION: extension}), job, tmp_path / "out", excludes=no_torch)


def test_a_wheel_without_compiled_code_is_refused(tmp_path: Path) -> None:
    job = local_job()
    wheel = job_wheel(tmp_path, job, {"causal_conv1d/__init__.py": b""})
    with pytest.raises(WheelError, match="no compiled x86_64 extension in the wheel"):
        repair_wheel(wheel, job, tmp_path / "out")
