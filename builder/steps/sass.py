"""Per-kernel SASS of an object or shared library (cuobjdump -sass), for proving two builds compiled the same
device code: {(arch, kernel): text}, with the per-TU module id in internal-linkage symbol names normalised. No stage
calls it: the tests and proofs that compare two builds do, so it stays importable here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import defaultdict
from importlib import metadata
from pathlib import Path

_ARCH = re.compile(r"^\s*code for (sm_\w+)\s*$")
_FUNCTION = re.compile(r"^\s*Function : (\S+)\s*$")
# nvcc names a TU's internal-linkage symbols _INTERNAL_<module id>_<n>_<file>_<hash>: the id depends on the TU
# (its name, its content), not the code; the mangled length before it follows the file name
_INTERNAL = re.compile(r"\d*_INTERNAL_[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}")


_SPACES = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Module ids masked, and runs of blanks made one: nvdisasm pads its columns to the listing's longest line."""
    return _SPACES.sub(" ", _INTERNAL.sub("_INTERNAL_<module>", text)).strip()


def kernel_sass(cuobjdump: Path, path: Path) -> dict[tuple[str, str], str]:
    """Every kernel's SASS per arch, keyed by (arch, normalised name); same-named kernels joined in sorted order.
    cuobjdump runs nvdisasm, found beside it (the nvidia-cuda-nvdisasm wheel installs both into one bin/)."""
    env = {**os.environ, "PATH": os.pathsep.join([str(cuobjdump.parent), os.environ.get("PATH", "")])}
    listing = subprocess.run(
        [str(cuobjdump), "-sass", str(path)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        check=True,
        env=env,
    ).stdout
    kernels: dict[tuple[str, str], list[list[str]]] = defaultdict(list)
    arch = ""
    body: list[str] | None = None
    for line in listing.splitlines():
        if match := _ARCH.match(line):
            arch, body = match[1], None
        elif match := _FUNCTION.match(line):
            body = []
            kernels[(arch, normalise(match[1]))].append(body)
        elif body is not None:
            body.append(normalise(line))
    return {key: "\n--\n".join(sorted("\n".join(b) for b in bodies)) for key, bodies in sorted(kernels.items())}


def find_cuobjdump(toolkit: Path | None = None) -> Path | None:
    """A cuobjdump with nvdisasm beside it, for per-kernel comparisons: the nvidia-cuda-cuobjdump wheel's (the test
    extra installs it with nvidia-cuda-nvdisasm), else the toolkit's own, else PATH's; None when there is none."""
    try:
        files = metadata.distribution("nvidia-cuda-cuobjdump").files or ()
        dist = metadata.distribution("nvidia-cuda-cuobjdump")
        found = [Path(str(dist.locate_file(f))) for f in files if f.name == "cuobjdump"]
    except metadata.PackageNotFoundError:
        found = []
    if toolkit is not None:
        found.append(toolkit / "bin" / "cuobjdump")
    if which := shutil.which("cuobjdump"):
        found.append(Path(which))
    return next((path for path in found if path.is_file() and (path.parent / "nvdisasm").is_file()), None)
