"""The cross compiler's wrapper: Debian's ``<triplet>-gcc``/``-g++`` run against the target's sysroot, with the build's
x86_64 paths (its torch, its Python headers) replaced by the target's. Scripts named like the compiler
(``aarch64-linux-gnu-g++``) run it, so nvcc, setuptools and torch's extension builder see an aarch64 compiler.

The cross compiler's own glibc headers and libraries (Debian's, newer than the manylinux target) stay off its search
paths: ``-nostdinc`` and the include list recorded with the sysroot, and the sysroot's library folders first when
it links. Standard library only: it runs by path (see cross.py).

Usage: python cross_cc.py CONFIG.json TOOL ARGS...    (TOOL: gcc or g++)
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

MAP_ENV = "WHEELWRIGHT_CROSS_MAP"  # JSON {"map": [[build path, target path], ...], "drop": [build path, ...]}
_PATH_FLAGS = ("-I", "-L", "-isystem", "-Wl,-rpath,", "-Wl,-rpath-link,", "")
_NOT_LINKING = ("-c", "-E", "-S", "-M", "-MM", "-dumpversion", "-dumpmachine", "-dumpfullversion", "--version", "-v")


def _split(arg: str) -> tuple[str, str]:
    """(flag, path) of an argument that names a path: ``-I/x`` -> ("-I", "/x"); a bare path -> ("", path)."""
    for flag in _PATH_FLAGS:
        if flag and arg.startswith(flag) and arg[len(flag):].startswith("/"):
            return flag, arg[len(flag):]
    return "", arg


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")


def rewrite(args: Sequence[str], mapping: Sequence[Sequence[str]], drop: Sequence[str]) -> list[str]:
    """``args`` with each path under a mapped build folder moved to its target folder, and those under a dropped
    folder (the build interpreter's own library folder, which setuptools links with) left out."""
    result = []
    for arg in args:
        flag, path = _split(arg)
        if path.startswith("/") and any(_under(path, folder) for folder in drop):
            continue
        for old, new in mapping:
            if path.startswith("/") and _under(path, old):
                arg = flag + new.rstrip("/") + path[len(old.rstrip("/")):]
                break
        result.append(arg)
    return result


def is_link(args: Sequence[str]) -> bool:
    return not any(arg in _NOT_LINKING for arg in args)


def _language(tool: str, args: Sequence[str]) -> str:
    pairs = itertools.pairwise(args)
    if tool == "g++" or any(a == "-x" and b.startswith("c++") for a, b in pairs):
        return "c++"
    return "c"


def command(config: dict[str, Any], tool: str, args: Sequence[str], environ: dict[str, str]) -> list[str]:
    """The real compiler's command line for one call of the wrapper."""
    extra = json.loads(environ.get(MAP_ENV) or "{}")
    args = rewrite(args, extra.get("map", []), extra.get("drop", []))
    sysroot = config["sysroot"]
    front = [f"--sysroot={sysroot}", "-nostdinc"]
    front += [f"-isystem{folder}" for folder in config["includes"][_language(tool, args)]]
    if is_link(args):
        libraries = config["libraries"]
        front += [f"-B{libraries[0]}/", *(f"-L{folder}" for folder in libraries),
                  f"-Wl,-rpath-link,{':'.join(libraries)}", f"-Wl,-z,max-page-size={config['page_size']}"]
    return [config["compilers"][tool], *front, *args]


def main(argv: list[str]) -> int:
    config_path, tool, *args = argv
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    real = command(config, tool, args, dict(os.environ))
    os.execv(real[0], real)
    return 127  # not reached: execv replaces the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
