"""Real toolchains for integration tests: nvcc from the CUDA toolkit, cuobjdump from its PyPI wheel."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

import pytest

from builder.runner import run

DATA = Path(__file__).parent / "data"
TOY_KERNEL = DATA / "scale_kernel.cu"

CompileCu = Callable[..., Path]


@pytest.fixture(scope="session")
def cuda_home() -> Path:
    home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0"))
    if not (home / "bin" / "nvcc").is_file():
        pytest.skip(f"no nvcc under {home}: set CUDA_HOME to a CUDA toolkit")
    return home


@pytest.fixture(scope="session")
def compile_cu(cuda_home: Path, tmp_path_factory: pytest.TempPathFactory) -> CompileCu:
    """``compile_cu(name, gencodes, *extra)`` -> a shared object built from the toy kernel, cached per session."""
    out_dir = tmp_path_factory.mktemp("nvcc")
    built: dict[tuple[str, ...], Path] = {}

    def compile_(name: str, gencodes: Sequence[str], *extra: str) -> Path:
        key = (*gencodes, *extra)
        if key not in built:
            output = out_dir / f"{name}.so"
            flags = [f"-gencode={g}" for g in gencodes]
            env = {**os.environ, "CUDA_HOME": str(cuda_home)}
            command = [cuda_home / "bin" / "nvcc", "-shared", "-Xcompiler", "-fPIC", *flags, *extra, TOY_KERNEL]
            run([*command, "-o", output], step=f"nvcc {name}", env=env, log_path=out_dir / "nvcc.log")
            built[key] = output
        return built[key]

    return compile_


@pytest.fixture(scope="session")
def cuobjdump() -> Path:
    """The cuobjdump binary of the pinned ``nvidia-cuda-cuobjdump`` test dependency."""
    try:
        dist = metadata.distribution("nvidia-cuda-cuobjdump")
    except metadata.PackageNotFoundError:
        pytest.fail("nvidia-cuda-cuobjdump is a test dependency: run `make venv`")
    binaries = [Path(str(dist.locate_file(f))) for f in dist.files or () if f.name == "cuobjdump"]
    if not binaries:
        pytest.fail(f"nvidia-cuda-cuobjdump {dist.version} ships no cuobjdump binary")
    return binaries[0]
