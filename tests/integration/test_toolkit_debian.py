"""The CUDA 11.8 path, the smallest real compile that proves it (it runs in CI): the toolchain provider downloads
Debian's CUDA 11.8 packages with a private apt configuration and unpacks them into the cache (never installed
system-wide; first run ~860 MB, then cached under ~/.cache/wheelwright/toolkits), pairs nvcc 11.8 with gcc-11,
and that toolkit compiles the toy kernel for sm_80 SASS + sm_90 PTX, which the verify gate's fatbin reader and the
toolkit's own cuobjdump both see. torch 2.0's cu117 jobs resolve to this toolkit."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from builder.core.fatbin import fatbin_archs
from builder.core.runner import run
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.steps import timeline
from builder.steps.environment import check_toolkit
from builder.steps.nvcc_time import read_times
from builder.steps.programs import nvcc_plan, objcache
from builder.steps.toolchain import candidates, load_sources, provide, toolkit_version

from .conftest import TOY_KERNEL
from .test_fatbin_nvcc import cuobjdump_archs

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(
        shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
        reason="Debian's toolkit is fetched with apt-get and unpacked with dpkg-deb",
    ),
]


@pytest.fixture(scope="module")
def cuda118():
    return provide(Accelerator.parse("cu117"), (Arch.parse("8.0"), Arch.parse("compute_90")))


def test_torch_cu117_resolves_to_debians_11_8_with_gcc_11(cuda118) -> None:
    archs = (Arch.parse("8.0"), Arch.parse("9.0"))
    assert [s.name for s in candidates(Accelerator.parse("cu117"), archs)] == ["host-11.8", "debian-11.8"]
    assert cuda118.source == "debian-11.8" and cuda118.cuda == "11.8"
    assert cuda118.cxx.name == "g++-11"
    assert toolkit_version(cuda118.root) == "11.8"
    check_toolkit(cuda118)
    assert not Path("/usr/lib/nvidia-cuda-toolkit").exists() or os.environ.get("CI") is None  # nothing under /usr


def test_nvcc_11_8_emits_what_toolkits_toml_says(cuda118) -> None:
    output = run([cuda118.nvcc, "--list-gpu-arch"], step="nvcc 11.8 --list-gpu-arch", capture=True).output
    listed = {Arch.parse(line.strip()).sass for line in output.splitlines() if line.startswith("compute_")}
    (source,) = [s for s in load_sources() if s.name == "debian-11.8"]
    assert listed == source.archs


def test_nvcc_11_8_compiles_sm80_sass_and_sm90_ptx(cuda118, tmp_path: Path) -> None:
    library = tmp_path / "scale.so"
    run(
        [
            cuda118.nvcc,
            "-ccbin",
            cuda118.cxx,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=compute_90",
            "--time",
            tmp_path / "time.csv",
            TOY_KERNEL,
            "-o",
            library,
        ],
        step="nvcc 11.8 toy kernel",
    )
    found = fatbin_archs(library)
    assert (found.sass, found.ptx) == ({"8.0"}, {"9.0"})
    assert cuobjdump_archs(cuda118.root / "bin" / "cuobjdump", library) == found
    assert "ptxas" in (tmp_path / "time.csv").read_text()


def test_the_nvcc_wrapper_drives_nvcc_11_8(cuda118, tmp_path: Path) -> None:
    """Every build runs nvcc through builder/steps/programs/objcache.py (torch's PYTORCH_NVCC); its determinism flag,
    -frandom-seed, is one nvcc 11.8 does not know: the wrapper must leave it out there, and still cache."""
    cache = tmp_path / "cache"
    for name in ("first", "second"):
        obj = tmp_path / f"{name}.o"
        command = [cuda118.nvcc, "-ccbin", cuda118.cxx, "-gencode", "arch=compute_80,code=sm_80"]
        run(
            [sys.executable, objcache.__file__, cache, "use", *command, "-c", TOY_KERNEL, "-o", obj],
            step=f"nvcc 11.8 through the wrapper ({name})",
        )
        assert obj.stat().st_size > 0
    events = [json.loads(line)["result"] for line in (cache / "events.jsonl").read_text().splitlines()]
    assert events == ["miss", "hit"]


def test_the_core_pool_takes_apart_an_nvcc_11_8_compile_of_two_archs(cuda118, tmp_path: Path) -> None:
    """nvcc 11.8's first cicc writes the module id file the other archs' cicc read (CUDA 12+ writes it in the
    front end): the pool must run that cicc first, or the second arch fails with "cannot open module id file"."""
    obj = tmp_path / "k.o"
    command = [cuda118.nvcc, "-ccbin", cuda118.cxx, "-gencode", "arch=compute_80,code=sm_80",
               "-gencode", "arch=compute_90,code=sm_90", "--time", tmp_path / "time.csv"]
    env = {**os.environ, nvcc_plan.POOL_ENV: str(tmp_path / "pool"), nvcc_plan.SLOTS_ENV: "2",
           nvcc_plan.TIMELINE_ENV: str(tmp_path / "timeline.jsonl")}
    run([sys.executable, objcache.__file__, tmp_path / "cache", "off", *command, "-c", TOY_KERNEL, "-o", obj],
        step="nvcc 11.8 through the core pool", env=env)
    assert fatbin_archs(obj).sass == {"8.0", "9.0"}
    assert {row["arch"] for row in read_times(tmp_path / "time.csv")} == {"8.0", "9.0", "host"}  # split, not whole
    # on the timeline: the module id writer's cicc ends before the other arch's starts, that arch on a second core
    steps, _ = timeline.read(tmp_path / "timeline.jsonl")
    ciccs = {s.arch: s for s in steps if s.phase == "chain" and s.fields["step"] == "cicc"}
    holds = sorted(s.arch for s in steps if s.phase == "hold" and s.part == "chain")
    assert min(ciccs.values(), key=lambda s: s.start).end <= max(ciccs.values(), key=lambda s: s.start).start
    assert len(holds) == 3 and set(holds) == {"8.0", "9.0"}  # the waiting arch gives its core back meanwhile
