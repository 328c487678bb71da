"""A CUDA 13.x the host lacks, from the registry's compiler wheels (nvcc, crt, nvvm, runtime, CCCL; ~115 MB once,
then cached under ~/.cache/wheelwright/toolkits/wheels-13.2): torch 2.15's cu132 jobs get it, side by side with the
host's CUDA 13.0, and it compiles the toy kernel to exactly the SASS and PTX asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.core.fatbin import fatbin_archs
from builder.core.runner import run
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.steps.environment import check_toolkit
from builder.steps.toolchain import load_sources, provide, toolkit_version

from .conftest import TOY_KERNEL

pytestmark = pytest.mark.nvcc


def test_cuda_13_2_from_the_registry_wheels_compiles(tmp_path: Path) -> None:
    toolkit = provide(Accelerator.parse("cu132"))
    assert toolkit.source == "wheels-13" and toolkit.cuda == "13.2"
    assert toolkit_version(toolkit.root) == "13.2"
    check_toolkit(toolkit)
    library = tmp_path / "scale.so"
    run(
        [
            toolkit.nvcc,
            "-ccbin",
            toolkit.cxx,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_90,code=sm_90",
            "-gencode",
            "arch=compute_100,code=compute_100",
            TOY_KERNEL,
            "-o",
            library,
        ],
        step="nvcc 13.2 toy kernel",
    )
    found = fatbin_archs(library)
    assert (found.sass, found.ptx) == ({"9.0"}, {"10.0"})
    assert provide(Accelerator.parse("cu130")).root != toolkit.root  # the host's 13.0 stays the 13.0 source
    output = run([toolkit.nvcc, "--list-gpu-arch"], step="nvcc 13.2 --list-gpu-arch", capture=True).output
    listed = {Arch.parse(line.strip()).sass for line in output.splitlines() if line.startswith("compute_")}
    (source,) = [s for s in load_sources() if s.name == "wheels-13"]
    assert listed == {arch for arch in source.archs if not arch.endswith(("a", "f"))}
