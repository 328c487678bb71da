"""The nvcc object cache's own logic: what goes into the key, depfile parsing, lookup against header bytes."""

from __future__ import annotations

from pathlib import Path

from builder.steps.programs.objcache import ObjectCache, command_key, headers_of, source_of

NVCC_ARGS = [
    "-MD", "-MF", "/b/temp.linux-x86_64-cpython-311/x.o.d",
    "-I/fixed/src/csrc", "-I/root/.pyenv/versions/3.11.7/include/python3.11",
    "-c", "-c", "/fixed/src/csrc/x.cu", "-o", "/b/temp.linux-x86_64-cpython-311/x.o",
    "-gencode", "arch=compute_90,code=sm_90",
]


def for_python(args: list[str], tag: str, version: str) -> list[str]:
    return [
        a.replace("cpython-311", f"cpython-{tag}")
        .replace("3.11.7", version)
        .replace("python3.11", f"python{version[:4]}")
        for a in args
    ]


def test_key_ignores_output_paths_and_python_include() -> None:
    key311, output, depfile = command_key(NVCC_ARGS)
    key312, _, _ = command_key(for_python(NVCC_ARGS, "312", "3.12.1"))
    assert key311 == key312
    assert output.endswith("cpython-311/x.o") and depfile.endswith("cpython-311/x.o.d")


def test_key_changes_with_any_other_flag() -> None:
    key, _, _ = command_key(NVCC_ARGS)
    other_arch = [a.replace("compute_90,code=sm_90", "compute_80,code=sm_80") for a in NVCC_ARGS]
    other_define = [*NVCC_ARGS, "-DX=1"]
    assert command_key(other_arch)[0] != key
    assert command_key(other_define)[0] != key


def test_source_is_what_follows_the_last_dash_c() -> None:
    assert source_of(NVCC_ARGS) == Path("/fixed/src/csrc/x.cu")


def test_headers_of_depfile_with_continuations(tmp_path: Path) -> None:
    depfile = tmp_path / "x.o.d"
    depfile.write_text("/b/x.o: /fixed/src/x.cu \\\n /fixed/a.h /fixed/dir\\ with\\ space/b.h \\\n /fixed/a.h\n")
    assert headers_of(depfile) == ["/fixed/a.h", "/fixed/dir with space/b.h", "/fixed/src/x.cu"]


def test_lookup_hits_only_while_every_header_keeps_its_bytes(tmp_path: Path) -> None:
    header = tmp_path / "a.h"
    header.write_text("int a;")
    obj, depfile = tmp_path / "x.o", tmp_path / "x.o.d"
    obj.write_bytes(b"\x7fELF object")
    depfile.write_text(f"x.o: {header}\n")
    cache = ObjectCache(tmp_path / "cache")
    cache.store("k", obj, depfile)

    assert cache.lookup("k") is not None
    assert cache.lookup("other") is None
    header.write_text("int b;")
    assert cache.lookup("k") is None


def test_restore_writes_the_stored_bytes(tmp_path: Path) -> None:
    obj, depfile = tmp_path / "x.o", tmp_path / "x.o.d"
    obj.write_bytes(b"object bytes")
    depfile.write_text("x.o:\n")
    cache = ObjectCache(tmp_path / "cache")
    entry = cache.store("k", obj, depfile)
    restored, restored_dep = tmp_path / "out" / "y.o", tmp_path / "out" / "y.o.d"
    cache.restore(entry, restored, restored_dep)
    assert restored.read_bytes() == b"object bytes"
    assert restored_dep.read_text() == "x.o:\n"


def test_key_ignores_the_per_python_include_directories_it_is_told_of() -> None:
    with_venv = [*NVCC_ARGS[:3], "-I/cache/envs/build-cp311/include", *NVCC_ARGS[3:]]
    other = [a.replace("build-cp311", "build-cp312") for a in for_python(with_venv, "312", "3.12.1")]
    told = frozenset({"/cache/envs/build-cp311/include", "/cache/envs/build-cp312/include"})
    assert command_key(with_venv, told)[0] == command_key(other, told)[0]
    assert command_key(with_venv)[0] != command_key(other)[0]
