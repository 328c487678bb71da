"""The object cache around the real nvcc: a second Python's compile of the same translation unit is a hit with
the same bytes, verify mode proves a fresh compile equals the cached object, and a changed header is a miss."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CUDA_HOME = Path("/usr/local/cuda-13.0")
pytestmark = [
    pytest.mark.nvcc,
    pytest.mark.skipif(not (CUDA_HOME / "bin" / "nvcc").is_file(), reason=f"no CUDA toolkit at {CUDA_HOME}"),
]


def compile_with_cache(cache: Path, mode: str, src: Path, build: Path, python_tag: str) -> subprocess.CompletedProcess:
    out = build / f"temp.cpython-{python_tag}"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "-MD", "-MF", str(out / "k.o.d"), f"-I{src}", f"-I/opt/python/{python_tag}/include/python3.{python_tag[1:]}",
        "-c", str(src / "k.cu"), "-o", str(out / "k.o"), "-gencode", "arch=compute_90,code=sm_90",
    ]
    nvcc = str(CUDA_HOME / "bin" / "nvcc")
    command = [sys.executable, "-m", "builder.steps.programs.objcache", str(cache), mode, nvcc, *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def events(cache: Path) -> list[str]:
    return [json.loads(line)["result"] for line in (cache / "events.jsonl").read_text().splitlines()]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.h").write_text("#define SCALE 2.0f\n")
    (src / "k.cu").write_text('#include "k.h"\n__global__ void scale(float* x) { x[threadIdx.x] *= SCALE; }\n')
    return src


def test_second_python_hits_and_gets_identical_bytes(tmp_path: Path, source: Path) -> None:
    cache = tmp_path / "cache"
    first = compile_with_cache(cache, "use", source, tmp_path / "b311", "311")
    second = compile_with_cache(cache, "use", source, tmp_path / "b312", "312")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert events(cache) == ["miss", "hit"]
    assert (tmp_path / "b311/temp.cpython-311/k.o").read_bytes() == (
        tmp_path / "b312/temp.cpython-312/k.o"
    ).read_bytes()
    assert (tmp_path / "b312/temp.cpython-312/k.o.d").is_file()
    # what the cache itself cost, beside the compile: keys, lookup, store (a miss), the copy back (a hit)
    miss, hit = [json.loads(line) for line in (cache / "events.jsonl").read_text().splitlines()]
    assert 0 < miss["cache_seconds"] < miss["seconds"] and 0 < hit["cache_seconds"] < 1


def test_verify_mode_compiles_fresh_and_matches_the_cache(tmp_path: Path, source: Path) -> None:
    cache = tmp_path / "cache"
    assert compile_with_cache(cache, "use", source, tmp_path / "b311", "311").returncode == 0
    assert compile_with_cache(cache, "verify", source, tmp_path / "b312", "312").returncode == 0
    assert events(cache) == ["miss", "verified"]


def test_changed_header_is_a_miss(tmp_path: Path, source: Path) -> None:
    cache = tmp_path / "cache"
    assert compile_with_cache(cache, "use", source, tmp_path / "b311", "311").returncode == 0
    (source / "k.h").write_text("#define SCALE 3.0f\n")
    assert compile_with_cache(cache, "use", source, tmp_path / "b312", "312").returncode == 0
    assert events(cache) == ["miss", "miss"]
    assert (tmp_path / "b311/temp.cpython-311/k.o").read_bytes() != (
        tmp_path / "b312/temp.cpython-312/k.o"
    ).read_bytes()
