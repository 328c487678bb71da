"""Named source patches. Each takes the unpacked sdist's root and the job, edits files, and returns a list of
the changes it made (for the job log)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from builder.plan.job import PATCH_NAMES
from builder.steps.recipes.tu_split import split_tu

PatchFunction = Callable[[Path, object], list[str]]

PATCHES: dict[str, PatchFunction] = {}


def patch(name: str) -> Callable[[PatchFunction], PatchFunction]:
    if name not in PATCH_NAMES:  # the plan accepts only names it knows: add it to PATCH_NAMES too
        raise ValueError(f"patch {name!r} is not in builder.plan.job.PATCH_NAMES")

    def register(function: PatchFunction) -> PatchFunction:
        PATCHES[name] = function
        return function

    return register


@patch("cxx20")
def cxx20(root: Path, job: object) -> list[str]:
    """torch >= 2.12 headers need C++20; older setup.py files ask nvcc and the host compiler for C++17."""
    setup = root / "setup.py"
    text = setup.read_text()
    changed = text.replace("-std=c++17", "-std=c++20")
    if changed == text:
        return []
    setup.write_text(changed)
    return ["setup.py: -std=c++17 -> -std=c++20"]


@patch("drop-buildtools")
def drop_buildtools(root: Path, job: object) -> list[str]:
    """causal-conv1d 1.1.x lists "buildtools" in install_requires: an unrelated 2013 package whose sdist no longer
    builds on Python 3, so pip cannot install the wheel with its dependencies. Nothing imports it; drop it."""
    setup = root / "setup.py"
    text = setup.read_text()
    changed = re.sub(r'^\s*"buildtools",\n', "", text, flags=re.MULTILINE)
    if changed == text:
        return []
    setup.write_text(changed)
    return ['setup.py: install_requires without "buildtools"']


# Six parts: causal_conv1d_bwd.cu's 18 instantiations (2 kernel families x 9 dtype pairs), 3 each; its sm_90 alone
# (330-400 s on 16 cores) was the full-arch build's critical path, a sixth of it falls below the cores-bound.
BWD_PARTS = 6
# Each part repeats the TU's host work (preprocessing, cudafe++, the host compile: about 40 s of CPU for torch's
# headers); with few archs the TU is no critical path and the other TUs fill the cores, so the split only costs.
BWD_SPLIT_MIN_ARCHS = 4


@patch("split-causal-conv1d-bwd")
def split_causal_conv1d_bwd(root: Path, job: object) -> list[str]:
    """csrc/causal_conv1d_bwd.cu as BWD_PARTS TUs, generated from its explicit instantiations (tu_split.py), for
    a job of BWD_SPLIT_MIN_ARCHS archs or more."""
    archs = len(getattr(job, "archs", ()))
    if archs < BWD_SPLIT_MIN_ARCHS:
        return [f"csrc/causal_conv1d_bwd.cu kept whole: {archs} arch(s), fewer than {BWD_SPLIT_MIN_ARCHS}"]
    return split_tu(root, "csrc/causal_conv1d_bwd.cu", BWD_PARTS)
