"""The cross compiler's wrapper (builder/steps/programs/cross_cc.py): the build's x86_64 torch and Python headers are
moved to the target's, the build interpreter's library folder dropped, the cross compiler's own glibc kept off its
paths, and a link gets the sysroot's libraries and 64 KiB segment alignment."""

from __future__ import annotations

import json

import pytest

from builder.steps.programs.cross_cc import MAP_ENV, command, is_link, rewrite

MAPPING = [["/tmp/ws/torch-site", "/cache/sites/arm/site-packages"], ["/py/include/python3.11", "/cache/py/inc"]]
CONFIG = {
    "compilers": {"gcc": "/usr/bin/aarch64-linux-gnu-gcc", "g++": "/usr/bin/aarch64-linux-gnu-g++"},
    "sysroot": "/cache/roots/bullseye",
    "includes": {"c": ["/gcc/include", "/cache/roots/bullseye/usr/include"],
                 "c++": ["/gcc/c++/12", "/gcc/include", "/cache/roots/bullseye/usr/include"]},
    "libraries": ["/cache/roots/bullseye/usr/lib/aarch64-linux-gnu", "/cache/roots/bullseye/lib/aarch64-linux-gnu"],
    "page_size": 65536,
}


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("-I/tmp/ws/torch-site/torch/include", "-I/cache/sites/arm/site-packages/torch/include"),
        ("-isystem/tmp/ws/torch-site/torch/include/api", "-isystem/cache/sites/arm/site-packages/torch/include/api"),
        ("-L/tmp/ws/torch-site/torch/lib", "-L/cache/sites/arm/site-packages/torch/lib"),
        ("/tmp/ws/torch-site/torch/include", "/cache/sites/arm/site-packages/torch/include"),  # after -isystem
        ("-I/py/include/python3.11", "-I/cache/py/inc"),
        ("-I/tmp/ws/torch-site-other/include", "-I/tmp/ws/torch-site-other/include"),  # a sibling, not under it
        ("-DTORCH_EXTENSION_NAME=x", "-DTORCH_EXTENSION_NAME=x"),
        ("-lc10", "-lc10"),
    ],
)
def test_build_paths_become_the_targets(argument: str, expected: str) -> None:
    assert rewrite([argument], MAPPING, []) == [expected]


def test_the_build_interpreters_library_folder_is_dropped() -> None:
    args = ["-shared", "-L/py/lib", "-Wl,-rpath,/py/lib", "x.o", "-o", "x.so"]
    assert rewrite(args, MAPPING, ["/py/lib"]) == ["-shared", "x.o", "-o", "x.so"]


def test_a_compile_searches_only_the_recorded_include_folders() -> None:
    environ = {MAP_ENV: json.dumps({"map": MAPPING, "drop": []})}
    real = command(CONFIG, "g++", ["-c", "a.cpp", "-I/tmp/ws/torch-site/torch/include", "-o", "a.o"], environ)
    assert real[:3] == ["/usr/bin/aarch64-linux-gnu-g++", "--sysroot=/cache/roots/bullseye", "-nostdinc"]
    assert real[3:6] == ["-isystem/gcc/c++/12", "-isystem/gcc/include", "-isystem/cache/roots/bullseye/usr/include"]
    assert "-I/cache/sites/arm/site-packages/torch/include" in real
    assert not any(arg.startswith(("-L", "-B", "-Wl")) for arg in real)


def test_nvccs_host_compile_through_gcc_is_cxx() -> None:
    real = command(CONFIG, "gcc", ["-E", "-x", "c++", "k.cu"], {})
    assert "-isystem/gcc/c++/12" in real
    assert "-isystem/gcc/c++/12" not in command(CONFIG, "gcc", ["-c", "a.c"], {})


def test_a_link_takes_the_sysroots_libraries_and_64k_pages() -> None:
    real = command(CONFIG, "g++", ["-shared", "a.o", "-o", "a.so"], {})
    libraries = CONFIG["libraries"]
    assert f"-B{libraries[0]}/" in real and f"-L{libraries[0]}" in real and f"-L{libraries[1]}" in real
    assert "-Wl,-z,max-page-size=65536" in real
    assert real.index(f"-L{libraries[0]}") < real.index("a.o")  # before anything the build asks for


@pytest.mark.parametrize(("args", "link"), [(["-shared", "a.o"], True), (["-c", "a.c"], False),
                                            (["-E", "a.c"], False), (["-dumpversion"], False)])
def test_what_counts_as_a_link(args: list[str], link: bool) -> None:
    assert is_link(args) is link
