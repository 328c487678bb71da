"""The CUDA 12 path, the smallest real compile that proves it (it runs in CI): the toolchain provider downloads
Debian trixie's CUDA 12.4 packages with a private apt configuration and unpacks them into the cache (never
installed system-wide; first run ~1 GB, then cached under ~/.cache/wheelwright/toolkits), pairs nvcc 12.4 with the
system gcc, and that toolkit compiles the toy kernel for sm_80 SASS + sm_90 PTX against the shared CUDA runtime.
torch's cu121 to cu129 jobs resolve to this toolkit when they ask for no arch past sm_90."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from builder.core.elfread import read_linkage
from builder.core.fatbin import fatbin_archs
from builder.core.runner import run
from builder.plan.accelerator import Accelerator
from builder.plan.arch import Arch
from builder.steps.environment import check_toolkit
from builder.steps.toolchain import Toolchain, candidates, load_sources, provide, toolkit_version

from .conftest import TOY_KERNEL
from .test_fatbin_nvcc import cuobjdump_archs

pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(
        shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None,
        reason="Debian's toolkit is fetched with apt-get and unpacked with dpkg-deb",
    ),
]

ARCHS = (Arch.parse("8.0"), Arch.parse("compute_90"))  # sm_80 SASS, and PTX for sm_90 and later to JIT from


@pytest.fixture(scope="module")
def cuda124() -> Toolchain:
    return provide(Accelerator.parse("cu128"), ARCHS)


def test_torch_cu128_resolves_to_debians_12_4_with_the_system_gcc(cuda124: Toolchain) -> None:
    assert [s.name for s in candidates(Accelerator.parse("cu128"), ARCHS)] == ["host-12.4", "debian-12.4"]
    assert cuda124.source == "debian-12.4" and cuda124.cuda == "12.4"
    assert re.fullmatch(r"g\+\+(-1[0-3])?", cuda124.cxx.name)  # nvcc 12.4 accepts gcc up to 13
    assert toolkit_version(cuda124.root) == "12.4"
    check_toolkit(cuda124)


def test_nvcc_12_4_emits_what_toolkits_toml_says(cuda124: Toolchain) -> None:
    output = run([cuda124.nvcc, "--list-gpu-arch"], step="nvcc 12.4 --list-gpu-arch", capture=True).output
    listed = {Arch.parse(line.strip()).sass for line in output.splitlines() if line.startswith("compute_")}
    (source,) = [s for s in load_sources() if s.name == "debian-12.4"]
    assert listed == {arch for arch in source.archs if not arch.endswith(("a", "f"))}


def test_nvcc_12_4_compiles_sm80_sass_and_sm90_ptx_needing_libcudart_12(cuda124: Toolchain, tmp_path: Path) -> None:
    library = tmp_path / "scale.so"
    run(
        [
            cuda124.nvcc,
            "-ccbin",
            cuda124.cxx,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "--cudart",
            "shared",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=compute_90",
            TOY_KERNEL,
            "-o",
            library,
        ],
        step="nvcc 12.4 toy kernel",
    )
    found = fatbin_archs(library)
    assert (found.sass, found.ptx) == ({"8.0"}, {"9.0"})
    assert cuobjdump_archs(cuda124.root / "bin" / "cuobjdump", library) == found
    assert "libcudart.so.12" in read_linkage(library).needed
    assert (cuda124.root / "lib64" / "libcudart.so.12").is_file()  # what it needs is in the toolkit beside it
