"""Splitting a TU by its explicit instantiations: every instantiation lands in exactly one part, each part keeps
the whole body, setup.py lists the parts in the TU's place, and a file the split cannot handle is an error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from builder.core.errors import RecipeError
from builder.steps.recipes.patches import BWD_COSTS, BWD_PARTS, bwd_cost
from builder.steps.recipes.tu_split import SplitChange, instantiations, partition, split_text, split_tu

BODY = """#include "k.h"
template <typename T> __global__ void k(T* x) { x[0] = T(1); }
extern template void run<double>(int);
template <typename T> void run(int n) { k<T><<<1, 1>>>(nullptr); }
"""
TAIL = "".join(f"template void run<T{i}>(int n);\n" for i in range(7))


def test_every_instantiation_goes_to_exactly_one_part_with_the_whole_body() -> None:
    parts = split_text(BODY + "\n" + TAIL, 3, "k.cu")
    assert len(parts) == 3
    assert all(part.startswith(BODY) for part in parts)
    found = sorted(m[0] for part in parts for m in instantiations(part))
    assert found == sorted(TAIL.splitlines())
    assert [len(instantiations(part)) for part in parts] == [3, 2, 2]
    assert all("extern template void run<double>(int);" in part for part in parts)  # a declaration, kept


DTYPES = ("float", "at::Half", "at::BFloat16")
# causal-conv1d 1.7.0's causal_conv1d_bwd.cu ends with these 18 lines, in this order
BWD_TAIL = "".join(
    f"template void {family}<{input_t}, {weight_t}>(ConvParamsBwd &params, cudaStream_t stream);\n"
    for family in ("causal_conv1d_bwd_cuda", "causal_conv1d_channellast_bwd_cuda")
    for weight_t in DTYPES
    for input_t in DTYPES
)


def test_equal_costs_give_round_robin_and_unequal_ones_the_heaviest_first_onto_the_lightest() -> None:
    assert partition([1.0] * 7, 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert partition([1, 1, 1, 5], 2) == [[3], [0, 1, 2]]  # 5 and 3, where round-robin gives 2 and 6
    # 5 -> a, 4 -> b, 3 -> b (7), 2 -> a (7), the two 1s -> a (8) then b (8)
    assert partition([5, 1, 1, 4, 2, 3], 2) == [[0, 1, 4], [2, 3, 5]]
    assert partition([5, 1, 1, 4, 2, 3], 2) == partition([5, 1, 1, 4, 2, 3], 2)


def test_the_bwd_parts_hold_every_instantiation_once_and_cost_within_15_percent_of_the_mean() -> None:
    parts = split_text(BODY + BWD_TAIL, BWD_PARTS, "causal_conv1d_bwd.cu", bwd_cost)
    lines = [[m[0] for m in instantiations(part)] for part in parts]
    assert sorted(line for part in lines for line in part) == sorted(BWD_TAIL.splitlines())
    loads = [sum(bwd_cost(line) for line in part) for part in lines]
    mean = sum(loads) / len(loads)
    assert max(loads) <= 1.15 * mean and min(loads) >= 0.85 * mean, loads
    # the six heaviest (channel-last, 2-byte input) cannot share a part: six parts put one in each
    assert all(sum(bwd_cost(line) == max(BWD_COSTS.values()) for line in part) == 1 for part in lines)
    round_robin = [sum(bwd_cost(m[0]) for m in instantiations(part)) for part in split_text(BODY + BWD_TAIL, 6, "x")]
    assert max(loads) < 0.8 * max(round_robin), (loads, round_robin)
    assert split_text(BODY + BWD_TAIL, BWD_PARTS, "x", bwd_cost) == parts  # the same parts every time


def test_bwd_cost_reads_the_family_and_the_input_width_and_prices_the_unknown_as_the_heaviest() -> None:
    line = "template void causal_conv1d_channellast_bwd_cuda<at::BFloat16, float>(ConvParamsBwd &p, cudaStream_t s);"
    assert bwd_cost(line) == BWD_COSTS[("causal_conv1d_channellast_bwd_cuda", 2)]
    assert bwd_cost("template void causal_conv1d_bwd_cuda<float, at::Half>(ConvParamsBwd &p, cudaStream_t s);") == (
        BWD_COSTS[("causal_conv1d_bwd_cuda", 4)])
    assert bwd_cost("template void causal_conv1d_new_bwd_cuda<float, float>(int);") == max(BWD_COSTS.values())
    assert bwd_cost("template void f(int);") == max(BWD_COSTS.values())


def test_code_after_the_instantiations_or_too_few_of_them_is_an_error() -> None:
    with pytest.raises(RecipeError, match="code between the explicit instantiations"):
        split_text(BODY + TAIL + "void later() {}\n", 2, "k.cu")
    with pytest.raises(RecipeError, match="7 explicit instantiations, fewer than the 8 parts"):
        split_text(BODY + TAIL, 8, "k.cu")


def test_setup_py_lists_the_parts_in_place_of_the_tu(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(BODY + TAIL)
    (tmp_path / "setup.py").write_text('sources=[\n    "csrc/a.cpp",\n    "csrc/k.cu",\n    "csrc/z.cu",\n]\n')
    changes = split_tu(tmp_path, "csrc/k.cu", 2)
    assert changes and "split into 2 TUs" in changes[0]
    setup = (tmp_path / "setup.py").read_text()
    assert '"csrc/k_part1.cu", "csrc/k_part2.cu",\n    "csrc/z.cu"' in setup and '"csrc/k.cu"' not in setup
    assert (tmp_path / "csrc" / "k_part2.cu").read_text().startswith(BODY)
    assert split_tu(tmp_path, "csrc/k.cu", 2) == []  # setup.py no longer lists it: the patch reports no change


def test_the_bwd_patch_splits_only_for_a_job_of_many_archs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.steps.recipes.patches import BWD_SPLIT_MIN_ARCHS, SPLIT_CORES_ENV, split_causal_conv1d_bwd
    from tests.jobs import local_job

    monkeypatch.setenv(SPLIT_CORES_ENV, "64")  # enough cores that a 5-arch job needs all six parts

    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "causal_conv1d_bwd.cu").write_text(BODY + TAIL)
    (tmp_path / "setup.py").write_text('sources=["csrc/causal_conv1d_bwd.cu"]\n')
    narrow = split_causal_conv1d_bwd(tmp_path, local_job(archs=("9.0",)))
    assert narrow == [f"csrc/causal_conv1d_bwd.cu kept whole: 1 arch(s), fewer than {BWD_SPLIT_MIN_ARCHS}"]
    assert not (tmp_path / "csrc" / "causal_conv1d_bwd_part1.cu").exists()
    full = split_causal_conv1d_bwd(tmp_path, local_job(archs=("7.5", "8.0", "9.0", "10.0", "12.0")))
    assert "split into 6 TUs" in full[0] and "estimated cost per part" in full[0]
    assert isinstance(full[0], SplitChange) and full[0].whole == "causal_conv1d_bwd.cu"
    assert sorted(full[0].shares) == [f"causal_conv1d_bwd_part{k}.cu" for k in range(1, 7)]
    assert (tmp_path / "csrc" / "causal_conv1d_bwd_part6.cu").is_file()


def test_the_split_says_each_parts_share_of_the_whole_tus_cost(tmp_path: Path) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "k.cu").write_text(BODY + TAIL)
    (tmp_path / "setup.py").write_text('sources=["csrc/k.cu"]\n')
    # T0 costs 9, the others 1 each: T0 alone in one part (9 of 15), the six others in the second (6 of 15)
    [change] = split_tu(tmp_path, "csrc/k.cu", 2, lambda line: 9.0 if "<T0>" in line else 1.0)
    assert isinstance(change, SplitChange) and change.whole == "k.cu"
    assert change.shares == {"k_part1.cu": 0.6, "k_part2.cu": 0.4}
    assert "<T0>" in (tmp_path / "csrc" / "k_part1.cu").read_text()


def test_the_parts_carry_the_whole_tus_times(tmp_path: Path) -> None:
    # nvcc writes each source's mtime into the cubins' line tables: parts stamped with the moment of the split
    # made two builds of the same job two different wheels (their backward cubins differed in those bytes alone)
    (tmp_path / "csrc").mkdir()
    whole = tmp_path / "csrc" / "k.cu"
    whole.write_text(BODY + TAIL)
    os.utime(whole, ns=(315532800_000000000, 315532800_000000000))  # as an sdist's members unpack
    (tmp_path / "setup.py").write_text('sources=["csrc/k.cu"]\n')
    split_tu(tmp_path, "csrc/k.cu", 2)
    for part in ("k_part1.cu", "k_part2.cu"):
        assert (tmp_path / "csrc" / part).stat().st_mtime_ns == 315532800_000000000


@pytest.mark.parametrize(
    ("cores", "archs", "parts"),
    [
        (2, 9, 1),  # the dev machine: the chains pack on 2 cores whole
        (4, 4, 1),
        (4, 9, 2),  # a farm runner, full arch: whole, 3 of the 9 backward chains would run after the others
        (8, 9, 4),
        # the GPU machine: 3 parts left 11 of 27 backward chains for a second round on 16 cores, with little else
        # to run beside them (1.39 of the cores-bound, 2026-12-06); 5 pack
        (16, 9, 5),
        (16, 4, 4),  # few archs on many cores: one backward chain per core
        (32, 9, 6),
        (64, 9, 6),  # no more than six: the TU's heaviest instantiations cannot share a part anyway
    ],
)
def test_the_bwd_split_goes_only_as_far_as_the_cores_need(cores: int, archs: int, parts: int) -> None:
    from builder.steps.recipes.patches import bwd_parts

    costs = [bwd_cost(match[0]) for match in instantiations(BODY + BWD_TAIL)]
    assert bwd_parts(costs, archs, cores) == parts


def test_on_few_cores_the_bwd_patch_keeps_the_tu_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.steps.recipes.patches import SPLIT_CORES_ENV, split_causal_conv1d_bwd
    from tests.jobs import local_job

    monkeypatch.setenv(SPLIT_CORES_ENV, "2")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "causal_conv1d_bwd.cu").write_text(BODY + BWD_TAIL)
    (tmp_path / "setup.py").write_text('sources=["csrc/causal_conv1d_bwd.cu"]\n')
    archs = ("7.5", "8.0", "8.7", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")  # a full-arch job
    changes = split_causal_conv1d_bwd(tmp_path, local_job(archs=archs))
    (change,) = changes
    assert change.endswith("kept whole: on 2 cores its 9 archs' chains fit in the build's cores-bound")
    assert not (tmp_path / "csrc" / "causal_conv1d_bwd_part1.cu").exists()
