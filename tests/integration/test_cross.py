"""The cross path on real tools, at its smallest (issue 29): the toy kernel compiled by the x86 nvcc with the aarch64
cross g++ (through wheelwright's wrapper, against the bullseye arm64 sysroot it bootstraps into the cache), linked
into an extension, repaired by auditwheel's aarch64 policy and passed by the verify gate; an x86_64 .so planted in
the same wheel is refused by name; and the object cache never serves one platform's object to the other."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.core.elfread import ElfFile
from builder.core.runner import run
from builder.steps import cross
from builder.steps.platform import load_platforms
from builder.steps.programs import objcache
from builder.steps.repair import repair_wheel
from builder.steps.verify import verify_wheel
from scripts.bench.wheels import job_wheel, with_provenance
from tests.jobs import local_job

from .conftest import TOY_KERNEL, CompileCu

ARM = dataclasses.replace(local_job(), platform="aarch64")
ARM_SO = "causal_conv1d_cuda.cpython-311-aarch64-linux-gnu.so"
PLATFORM = load_platforms()["aarch64"]


def _needs_cross_tools() -> None:
    missing = [tool for tool in ("aarch64-linux-gnu-g++", "debootstrap") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: scripts/install-system-deps.sh build")


@pytest.fixture(scope="module")
def cross_so(cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy kernel as an aarch64 extension module, built as a cross job builds (sysroot and wrappers cached)."""
    _needs_cross_tools()
    out = tmp_path_factory.mktemp("cross")
    wrappers = cross.compilers(PLATFORM, cross.sysroot(PLATFORM))
    home = out / "cuda-home"  # the toolkit laid out for the target; its own headers stand in for the runtime wheel's
    cross.lay_cuda_home(cuda_home, "aarch64-linux", out / "no-site", home)
    obj, so = out / "scale.o", out / ARM_SO
    run([home / "bin" / "nvcc", "-ccbin", wrappers.cxx, "-Xcompiler", "-fPIC", "-gencode=arch=compute_90,code=sm_90",
         "-c", TOY_KERNEL, "-o", obj], step="nvcc for aarch64", log_path=out / "build.log")
    run([wrappers.cxx, "-shared", obj, "-o", so], step="link for aarch64", log_path=out / "build.log")
    return so


def _wheel(tmp_path: Path, files: dict[str, Path | bytes]) -> Path:
    built = job_wheel(tmp_path, ARM, files, platform="linux_aarch64")
    return with_provenance(repair_wheel(built, ARM, tmp_path / "repaired").wheel, ARM)


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_cross_built_extension_is_aarch64_to_the_bytes(cross_so: Path) -> None:
    with cross_so.open("rb") as stream:
        elf = ElfFile(stream, where=cross_so.name)
        assert elf.machine == "aarch64"
        assert elf.load_alignments() and all(a >= 0x10000 for a in elf.load_alignments())
        versions = elf.version_needs()
    glibc = {v for v in versions.get("libc.so.6", ()) if v.startswith("GLIBC_2.")}
    assert glibc and max(tuple(map(int, v[len("GLIBC_"):].split("."))) for v in glibc) <= (2, 28), versions


@pytest.mark.slow
@pytest.mark.nvcc
def test_the_cross_built_wheel_is_repaired_for_aarch64_and_passes_the_gate(cross_so: Path, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, {ARM_SO: cross_so, "causal_conv1d/__init__.py": b""})
    assert wheel.name.endswith("_aarch64.whl") and "manylinux_2_17_aarch64" in wheel.name, wheel.name
    report = verify_wheel(wheel, ARM, runtime=None)
    assert report.ok, report.describe()
    outcomes = {check.name: check.outcome for check in report.checks}
    assert outcomes["elf-machine"] == outcomes["extension-suffix"] == outcomes["load-alignment"] == "PASS"
    assert (report.sass, report.ptx) == (("9.0",), ())


@pytest.mark.slow
@pytest.mark.nvcc
def test_an_x86_64_so_planted_in_the_aarch64_wheel_is_refused_by_name(
    cross_so: Path, compile_cu: CompileCu, tmp_path: Path
) -> None:
    x86 = compile_cu("sm90", ["arch=compute_90,code=sm_90"])
    planted = "selective_scan_cuda.cpython-311-aarch64-linux-gnu.so"  # named for aarch64, built for x86_64
    built = job_wheel(tmp_path, ARM, {ARM_SO: cross_so, planted: x86}, platform="manylinux_2_28_aarch64")
    report = verify_wheel(with_provenance(built, ARM), ARM, runtime=None)
    assert not report.ok
    (machine,) = [check for check in report.checks if check.name == "elf-machine"]
    assert machine.outcome == "FAIL"
    assert machine.detail.startswith(f"{planted} is x86_64, the job builds aarch64")
    assert ARM_SO not in machine.detail


def test_the_object_cache_never_serves_an_x86_object_to_an_aarch64_build(tmp_path: Path) -> None:
    """The real wrapper (as PYTORCH_NVCC runs it) with a stand-in nvcc whose object names the platform it was asked
    for: the same command line for aarch64 after x86_64 compiles afresh, and each platform then hits its own."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\necho "object for $PLATFORM" > "$2"\n')
    nvcc.chmod(0o755)
    source = tmp_path / "kernel.cu"
    source.write_text("__global__ void k() {}\n")
    cache = tmp_path / "cache"

    def compile_for(platform: str) -> str:
        out = tmp_path / "kernel.o"
        env = {**os.environ, objcache.PLATFORM_ENV: platform, "PLATFORM": platform}
        env.pop("WHEELWRIGHT_NVCC_POOL", None)
        command = [sys.executable, objcache.__file__, str(cache), "use", str(nvcc), "-c", str(source), "-o", str(out)]
        subprocess.run(command, env=env, check=True, timeout=60)
        return out.read_text().strip()

    assert compile_for("x86_64") == "object for x86_64"
    assert compile_for("aarch64") == "object for aarch64"
    assert compile_for("x86_64") == "object for x86_64"
    events = [json.loads(line)["result"] for line in (cache / "events.jsonl").read_text().splitlines()]
    assert events == ["miss", "miss", "hit"]


@pytest.mark.slow
@pytest.mark.proof
def test_the_real_aarch64_torch_imports_under_qemu(tmp_path: Path) -> None:
    """torch 2.14.1 for aarch64 with its CUDA wheels (3 GB, unpacked once into the cache) imported by Debian's arm64
    CPython 3.11 through qemu-user: what every cross-built wheel's import check stands on. Minutes: a proof."""
    _needs_cross_tools()
    if shutil.which("qemu-aarch64-static") is None:
        pytest.skip("qemu-user-static not installed: scripts/install-system-deps.sh test")
    from builder.plan.facts import load_facts
    from builder.steps.emulate import emulated_command, emulated_environ

    cross_facts = PLATFORM.cross
    assert cross_facts is not None
    site = cross.target_site(ARM, load_facts(), cross_facts)
    root = cross.runtime_root(PLATFORM, ARM.python)
    probe = "import platform, torch; print(platform.machine(), torch.__version__, torch.version.cuda)"
    command = emulated_command("qemu-aarch64-static", root, ARM.python, ["-c", probe])
    result = run(command, step="import torch under qemu", env=emulated_environ([site], tmp_path), capture=True)
    assert result.output.strip().splitlines()[-1] == "aarch64 2.14.1+cu130 13.0"
