"""Named source patches. Each takes the unpacked sdist's root and the job, edits files, and returns a list of
the changes it made (for the job log)."""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from builder.core.settings import setting
from builder.plan.job import PATCH_NAMES
from builder.steps.recipes.tu_split import instantiations, partition, split_tu

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


# Six parts: causal_conv1d_bwd.cu's 18 instantiations (2 kernel families x 9 dtype pairs); its sm_90 alone
# (330-450 s on the GPU box) was the full-arch build's critical path, a sixth of it falls below the cores-bound.
BWD_PARTS = 6
# Each part repeats the TU's host work (preprocessing, cudafe++, the host compile: about 40 s of CPU for torch's
# headers); with few archs the TU is no critical path and the other TUs fill the cores, so the split only costs.
BWD_SPLIT_MIN_ARCHS = 4
# What one instantiation costs to compile for one arch, by (function, bytes of input_t): the device chain (cpp1,
# cicc, ptxas; nvcc --time) of a file holding the TU's body and that one instantiation, less the body alone's
# (7.4 s), for sm_90 with nvcc 13.0 and torch 2.14's flags on the 2-core dev machine, 2026-12-01 (wall under load:
# only the ratios matter). The channel-last family holds 4x the kernels (96 vs 24: seq_idx x final-states
# variants) and its 2-byte dtypes twice the elements per vector load: 128 s vs 8 s for the plain 2-byte backward.
# A part's front end per arch (the 7.4 s) is small beside these, so six balanced parts cost little more CPU than
# four. Round-robin (instantiation i in part i mod 6) gave parts of 113..271 s here, 33..104 s per arch on the H200
# (its ledger, 2026-12-01 evening); these give 157..208 s (the six 128 s ones cannot share a part).
BWD_COSTS = {
    ("causal_conv1d_bwd_cuda", 4): 13.0,
    ("causal_conv1d_bwd_cuda", 2): 8.0,
    ("causal_conv1d_channellast_bwd_cuda", 4): 80.0,
    ("causal_conv1d_channellast_bwd_cuda", 2): 128.0,
}
_BWD_INSTANTIATION = re.compile(r"template\s+void\s+(\w+)\s*<\s*([\w:]+)\s*,")
_INPUT_BYTES = {"float": 4, "at::Half": 2, "at::BFloat16": 2}


def bwd_cost(line: str) -> float:
    """BWD_COSTS' estimate for one ``template void f<input_t, weight_t>(...);`` line; an instantiation the table
    does not know (a newer upstream) costs the table's heaviest, so it gets a part of its own sooner than a wrong
    share."""
    found = _BWD_INSTANTIATION.match(line)
    key = (found[1], _INPUT_BYTES.get(found[2], 0)) if found else None
    return BWD_COSTS.get(key, max(BWD_COSTS.values())) if key else max(BWD_COSTS.values())


# What else the build costs, in BWD_COSTS' units: each part's body per arch (see BWD_COSTS) and its host work once
# (about 40 s of CPU, above), and the forward and update TUs per arch: their device chains' CPU-seconds beside the
# backward parts' in the full-arch build on the lent H100 machine (2026-12-06, docs/gpu-runs/
# 2026-12-06-h100-cpu-proof-ours.timeline.jsonl: 17-21 and 4-6 s per arch against 395-471 for the three parts
# together), scaled to the backward's 1102 here. (The seed's 24.4 and 8.4 s of 261.1 overstated them twice: the
# model then let the forward and update chains fill 5 of 16 cores while 11 backward chains ran a second round, and
# the build took 1.39 of its cores-bound.)
BWD_BODY = 7.4
BWD_HOST = 40.0
OTHER_PER_ARCH = (49.5, 13.0)
SPLIT_CORES_ENV = "WHEELWRIGHT_SPLIT_CORES"  # the cores the split is sized for (default: this machine's)
# A plan whose compile on the pool is within this of its cores-bound needs no more parts. The build's wall has
# about 0.2 of its cores-bound more outside the chains (the fronts, the back ends and link, repair, verify, the slim
# wheels; 2026-12-06 on 16 cores), so the whole build stays within 1.3.
SPLIT_SLACK = 1.05


def bwd_parts(costs: Sequence[float], archs: int, cores: int) -> int:
    """The fewest parts (1 to BWD_PARTS) with which the build's (TU, arch) chains, served longest first on
    ``cores`` (the core pool's order), end within SPLIT_SLACK of the cores-bound: each part repeats the TU's host work
    and its body per arch, CPU a build pays for nothing once the chains pack. On 2 cores the TU stays whole; a
    full-arch job makes 2 parts on a 4-core runner, 4 on 8 cores, 5 on the 16-core GPU machine, 6 from 32."""
    for parts in range(1, BWD_PARTS + 1):
        heavy = [sum(costs[i] for i in group) + BWD_BODY for group in partition(costs, parts)]
        chains = [*heavy * archs, *[cost for cost in OTHER_PER_ARCH for _ in range(archs)],
                  *[BWD_HOST] * (parts + len(OTHER_PER_ARCH))]
        if _longest_first_makespan(chains, cores) <= SPLIT_SLACK * sum(chains) / cores:
            return parts
    return BWD_PARTS


def _longest_first_makespan(chains: Sequence[float], cores: int) -> float:
    loads = [0.0] * max(1, cores)
    for chain in sorted(chains, reverse=True):
        heapq.heapreplace(loads, loads[0] + chain)
    return max(loads)


def split_cores() -> int:
    text = setting(SPLIT_CORES_ENV) or ""
    return int(text) if text.isdigit() and int(text) > 0 else len(os.sched_getaffinity(0))


@patch("split-causal-conv1d-bwd")
def split_causal_conv1d_bwd(root: Path, job: object) -> list[str]:
    """csrc/causal_conv1d_bwd.cu as up to BWD_PARTS TUs of about equal cost (BWD_COSTS), generated from its explicit
    instantiations (tu_split.py), for a job of BWD_SPLIT_MIN_ARCHS archs or more, in as many parts as this
    machine's cores need (bwd_parts)."""
    archs = len(getattr(job, "archs", ()))
    if archs < BWD_SPLIT_MIN_ARCHS:
        return [f"csrc/causal_conv1d_bwd.cu kept whole: {archs} arch(s), fewer than {BWD_SPLIT_MIN_ARCHS}"]
    source = root / "csrc" / "causal_conv1d_bwd.cu"
    costs = [bwd_cost(m[0]) for m in instantiations(source.read_text())] if source.is_file() else []
    cores = split_cores()
    parts = bwd_parts(costs, archs, cores) if costs else BWD_PARTS
    if parts == 1:
        reason = f"on {cores} cores its {archs} archs' chains fit in the build's cores-bound"  # bwd_parts
        return [f"csrc/causal_conv1d_bwd.cu kept whole: {reason}"]
    return split_tu(root, "csrc/causal_conv1d_bwd.cu", parts, bwd_cost)
