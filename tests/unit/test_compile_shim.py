"""The object cache reaches torch 2.0/1.13, which ignore PYTORCH_NVCC: a CUDA_HOME of links whose bin/nvcc is the
wrapper (files only; nothing runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.steps.compilation import cuda_home_with_wrapper, honours_pytorch_nvcc


def torch_site(tmp_path: Path, text: str) -> Path:
    source = tmp_path / "site" / "torch" / "utils" / "cpp_extension.py"
    source.parent.mkdir(parents=True)
    source.write_text(text)
    return tmp_path / "site"


def test_which_torch_reads_pytorch_nvcc(tmp_path: Path) -> None:
    assert honours_pytorch_nvcc(torch_site(tmp_path / "a", 'if "PYTORCH_NVCC" in os.environ:\n'))
    assert not honours_pytorch_nvcc(torch_site(tmp_path / "b", "nvcc = _join_cuda_home('bin', 'nvcc')\n"))


def test_the_wrapper_home_links_everything_but_nvcc(tmp_path: Path) -> None:
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    for tool in ("nvcc", "ptxas"):
        (root / "bin" / tool).write_text("real\n")
    home = cuda_home_with_wrapper(
        root, ["/py", "/objcache.py", "/cache", "use", str(root / "bin" / "nvcc")], tmp_path / "home"
    )
    assert (home / "include").resolve() == root / "include"
    assert (home / "bin" / "ptxas").resolve() == root / "bin" / "ptxas"
    script = (home / "bin" / "nvcc").read_text()
    assert script.startswith("#!/bin/sh\nexec /py /objcache.py /cache use ") and script.endswith('"$@"\n')
    assert (home / "bin" / "nvcc").stat().st_mode & 0o111


@pytest.mark.parametrize(
    ("names", "on_path", "expected"),
    [
        # torch reads clang's bounds only for a name starting with "clang": a full path would fail gcc's
        (("clang-16", "clang++-16"), True, ("clang-16", "clang++-16")),
        (("gcc-11", "g++-11"), True, ("gcc-11", "g++-11")),
        # not on PATH (or PATH finds another file of that name): the path itself, never a different compiler
        (("clang-16", "clang++-16"), False, None),
    ],
)
def test_the_host_compiler_goes_by_the_name_path_finds(tmp_path, names, on_path, expected) -> None:
    from builder.steps.compilation import compiler_environ

    home, other = tmp_path / "bin", tmp_path / "other"
    home.mkdir(), other.mkdir()
    for name in names:
        for folder in (home, other):
            (folder / name).write_text("#!/bin/sh\n")
            (folder / name).chmod(0o755)
    cc, cxx = (home / n for n in names)
    env = compiler_environ(cc, cxx, str(home if on_path else other))
    assert (env["CC"], env["CXX"]) == (expected or (str(cc), str(cxx)))
